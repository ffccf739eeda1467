//! `ferry promote --flows DIR --flow F [--topics REGEX]`: at a failover, hand a flow's remote topics to
//! the applications. For each matching topic it records a promotion in the deployment's control topic
//! on the flow's target ([`crate::control::promote`]; every node of the deployment stops copying the
//! topic as soon as it reads it, and after any restart), then lifts ferry's DENY Write bindings from the
//! remote topic ([`crate::protect::lift`]; the flow's leader lifts any a node made again meanwhile).
//!
//! It talks to the target cluster only, with the flow's own client properties: the source may be gone,
//! which is when a failover happens. The topics are found among the target's: those the flow's policy
//! names as remote topics of topics the flow copies (never `heartbeats`, which ferry keeps copying).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::time::Duration;

use rdkafka::producer::{FutureProducer, FutureRecord};
use regex::Regex;

use crate::config::FlowPlan;
use crate::control::{CONTROL_TOPIC, PromoteRecord, promote::promote_key};
use crate::kafka;
use crate::raw_admin::AclBinding;

/// One promoted topic.
#[derive(Debug)]
pub struct Promoted {
    pub topic: String,
    pub remote: String,
    /// ferry's DENY Write bindings lifted from the remote topic.
    pub lifted: Vec<AclBinding>,
}

/// What `ferry promote` did.
#[derive(Debug)]
pub struct Report {
    pub flow: String,
    pub deployment: String,
    pub target: String,
    pub topics: Vec<Promoted>,
    /// Why no binding was lifted, when that is not a failure (protection off, no authorizer).
    pub note: Option<String>,
}

/// The flow's remote topics among `target_topics` whose source topic matches `pattern` (whole name),
/// as (source topic, remote topic), sorted.
pub fn matching(
    plan: &FlowPlan,
    target_topics: impl Iterator<Item = String>,
    pattern: &Regex,
) -> Vec<(String, String)> {
    let source = &plan.id.source;
    let mut found: Vec<(String, String)> = target_topics
        .filter_map(|remote| {
            let topic = plan.policy.upstream_topic(&remote)?;
            let ours = plan.policy.format_remote_topic(source, &topic) == remote
                && plan.copies_topic(&topic)
                && !plan.policy.is_heartbeats_topic(&topic);
            (ours && pattern.is_match(&topic)).then_some((topic, remote))
        })
        .collect();
    found.sort();
    found
}

/// Promotes the flow's remote topics whose source topic matches `topics` (a regex of whole names;
/// every topic when `None`).
pub fn run(plan: &FlowPlan, deployment: &str, topics: Option<&str>, by: &str) -> Result<Report, String> {
    let flow = plan.id.to_string();
    let target = plan.target.alias.clone();
    let pattern = Regex::new(&format!("^(?:{})$", topics.unwrap_or(".*")))
        .map_err(|e| format!("--topics {:?}: {e}", topics.unwrap_or_default()))?;
    let meta = kafka::assign_only_consumer(&plan.target, &plan.id, "promote").map_err(|e| e.to_string())?;
    let on_target = kafka::topic_partitions(&meta, &target).map_err(|e| e.to_string())?;
    let found = matching(plan, on_target.into_keys(), &pattern);
    if found.is_empty() {
        return Err(format!(
            "flow {flow}: no remote topic on `{target}` of a topic the flow copies matches --topics {:?}",
            topics.unwrap_or(".*")
        ));
    }
    let mut note = None;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("start the runtime: {e}"))?;
    let remotes: BTreeSet<String> = found.iter().map(|(_, r)| r.clone()).collect();
    // ferry's bindings are listed before the promotion is recorded: the flow's leader lifts them as soon
    // as it reads the record, and the report must still name them.
    // Without protection ferry made no binding: a DENY on these topics is the operator's, left alone.
    let protecting = plan.settings.protect_remote_topics;
    let listed = if !protecting {
        note = Some("protect_remote_topics is off: no binding lifted (a DENY on these topics is not ferry's)".into());
        Err(String::new())
    } else {
        crate::protect::own_principal(&plan.target)
    }
    .and_then(|own| {
        let admin = kafka::client_config(&plan.target, &plan.id, "promote")
            .and_then(|c| {
                c.create::<rdkafka::admin::AdminClient<_>>()
                    .map_err(|e| kafka::KafkaOpError::kafka(&target, "create admin client", e))
            })
            .map_err(|e| e.to_string())?;
        let ours = runtime.block_on(crate::protect::ours(&target, &admin, &own, &remotes))?;
        Ok((admin, ours))
    });
    let listed = match (listed, protecting) {
        (Ok(l), _) => Some(l),
        (Err(e), true) => return Err(format!("flow {flow}: lift the protection: {e}")),
        (Err(_), false) => None,
    };
    runtime.block_on(record(plan, deployment, &found, by))?;
    let lifted = match listed {
        Some((admin, ours)) => runtime
            .block_on(crate::protect::delete(&target, &admin, ours))
            .map_err(|e| format!("flow {flow}: recorded, but lift the protection: {e}"))?,
        None => Vec::new(),
    };
    let topics = found
        .into_iter()
        .map(|(topic, remote)| {
            let mine = lifted.iter().filter(|b| b.name == remote).cloned().collect();
            Promoted { topic, remote, lifted: mine }
        })
        .collect();
    Ok(Report { flow, deployment: deployment.to_string(), target, topics, note })
}

/// One promotion record per topic in the control topic, each acknowledged by the target.
async fn record(plan: &FlowPlan, deployment: &str, found: &[(String, String)], by: &str) -> Result<(), String> {
    let target = &plan.target.alias;
    let producer: FutureProducer = kafka::client_config(&plan.target, &plan.id, "promote")
        .map_err(|e| e.to_string())?
        .set("acks", "all")
        .create()
        .map_err(|e| format!("create a producer for `{target}`: {e}"))?;
    let value = serde_json::to_vec(&PromoteRecord::now(by)).unwrap_or_default();
    for (topic, _) in found {
        let key = promote_key(deployment, &plan.id, topic);
        let record = FutureRecord::to(CONTROL_TOPIC).partition(0).key(&key).payload(&value);
        producer
            .send(record, Duration::from_secs(15))
            .await
            .map_err(|(e, _)| format!("record the promotion of {topic} in {CONTROL_TOPIC} on `{target}`: {e}"))?;
    }
    Ok(())
}

/// The report for people.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "flow {} (deployment `{}`): promoted {} topic(s), recorded in {CONTROL_TOPIC} on `{}`; each node of the deployment stops copying them when it reads the record (about a second; records in flight then still land): wait until the remote topics are quiet before their producers start:",
        r.flow,
        r.deployment,
        r.topics.len(),
        r.target
    );
    for t in &r.topics {
        let lifted: Vec<&str> = t.lifted.iter().map(|b| b.principal.as_str()).collect();
        let lifted = if lifted.is_empty() { "none".to_string() } else { lifted.join(", ") };
        let _ = writeln!(out, "  {} -> {} (DENY Write lifted for: {lifted})", t.topic, t.remote);
    }
    if let Some(note) = &r.note {
        let _ = writeln!(out, "  {note}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flows_remote_topics_of_copied_topics_match_never_heartbeats_or_others() {
        // east->west copying `orders` and `pay.*`.
        use crate::filter::{PatternList, TopicFilter};
        let include = PatternList::new(&["orders", "pay.*"]).expect("include");
        let exclude = PatternList::new(&["__.*"]).expect("exclude");
        let plan = FlowPlan {
            topic_filter: std::sync::Arc::new(TopicFilter::new(include, exclude)),
            ..crate::check::rights::tests::plan("")
        };
        let on_target = ["east.orders", "east.payments", "east.heartbeats", "orders", "north.orders", "east.secret"];
        let all = matching(&plan, on_target.iter().map(|t| t.to_string()), &Regex::new("^(?:.*)$").expect("re"));
        let pairs: Vec<(&str, &str)> = all.iter().map(|(t, r)| (t.as_str(), r.as_str())).collect();
        assert_eq!(pairs, [("orders", "east.orders"), ("payments", "east.payments")]);
        let some = matching(&plan, on_target.iter().map(|t| t.to_string()), &Regex::new("^(?:pay.*)$").expect("re"));
        assert_eq!(some, [("payments".to_string(), "east.payments".to_string())]);
    }
}
