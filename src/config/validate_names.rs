//! Flow-set checks of naming templates (`remote_topic`): every remote name a template writes must read
//! back into the (source, topic) it came from, for the flow itself and for every flow that reads it.
//!
//! Reading back is what loop prevention, checkpoints, fail-back and `translate` stand on, so a template
//! that could be misread is refused before anything runs, naming the collision:
//! - a cluster alias that holds the template's text between `{source}` and `{topic}`, or a name that
//!   MM2's rules take for an internal or heartbeats topic (checked against every configured alias,
//!   since topics reach a cluster from any upstream);
//! - two flows into one cluster that could write the same remote name (exact: the names of a flow from
//!   one source are a fixed prefix and suffix around the topic, so two flows collide exactly when their
//!   prefixes are prefixes of one another and their suffixes suffixes of one another);
//! - a flow that copies on from the cluster a template flow writes to and would read its names as
//!   something else (as local topics: copied back, a loop).
//!
//! Pairs of flows that both use MM2's policies are left alone: they behave as MM2 does. A reader whose
//! names carry no source (the identity policy, a template without `{source}`) takes every topic for its
//! own source's whatever the name, so it is not asked to read names back; on a cycle it is refused
//! anyway, unless it is an identity flow with the provenance header.
//! Cycles through templates without `{source}` are refused with the identity policy's cycles
//! (`validate::unprotected_identity_cycles`).

use std::collections::BTreeMap;

use super::{ClusterSpec, ConfigError, FlowId, FlowPlan, PolicyKind};
use crate::policy::ReplicationPolicy;

/// Sample topic names: plain, and with each character an alias or a template may use as a separator.
const SAMPLES: &[&str] = &["orders", "orders.v1", "orders_v1", "orders-v1"];

pub(super) fn check(
    flows: &BTreeMap<FlowId, FlowPlan>,
    clusters: &BTreeMap<String, ClusterSpec>,
    errors: &mut Vec<ConfigError>,
) {
    for plan in flows.values().filter(|p| templated(p)) {
        readable_from_every_alias(plan, clusters, errors);
    }
    let enabled: Vec<&FlowPlan> = flows.values().filter(|p| p.settings.enabled).collect();
    for (i, a) in enabled.iter().enumerate() {
        for b in &enabled[i + 1..] {
            if a.id.target == b.id.target && (templated(a) || templated(b)) {
                one_writer_per_name(a, b, errors);
            }
        }
    }
    for writer in enabled.iter().filter(|p| p.policy.names_source()) {
        for reader in enabled.iter().filter(|r| r.id.source == writer.id.target && r.policy.names_source()) {
            if templated(writer) || templated(reader) {
                reads_names_back(writer, reader, errors);
            }
        }
    }
}

fn templated(plan: &FlowPlan) -> bool {
    plan.settings.replication_policy == PolicyKind::Template
}

/// An error on `plan`'s naming key: `remote_topic`, or `replication_policy` for a flow without one.
fn error(plan: &FlowPlan, reason: String) -> ConfigError {
    let key = if templated(plan) { "remote_topic" } else { "replication_policy" };
    ConfigError { file: plan.file.clone(), line: None, key: key.to_string(), reason }
}

/// The flow's template reads its own names back for topics of any configured cluster, and none of them
/// looks like an internal or heartbeats topic.
fn readable_from_every_alias(plan: &FlowPlan, clusters: &BTreeMap<String, ClusterSpec>, errors: &mut Vec<ConfigError>) {
    let template = plan.settings.remote_topic.as_deref().unwrap_or_default();
    let policy = &plan.policy;
    // Without `{source}` the flow's own alias is the only one its names can stand for.
    let aliases: Vec<&String> = if policy.names_source() { clusters.keys().collect() } else { vec![&plan.id.source] };
    for alias in aliases {
        let name = policy.format_remote_topic(alias, "orders");
        let kind = if policy.is_heartbeats_topic(&name) {
            Some("a heartbeats topic")
        } else if policy.is_internal_topic(&name) {
            Some("an internal topic, which is never copied")
        } else {
            None
        };
        if let Some(kind) = kind {
            let reason = format!(
                "flow {}: remote_topic `{template}` names `orders` of `{alias}` `{name}`, which MM2's rules take for {kind}",
                plan.id
            );
            errors.push(error(plan, reason));
            return;
        }
        let source = policy.topic_source(&name);
        let topic = policy.upstream_topic(&name);
        if policy.names_source() && (source.as_deref() != Some(alias) || topic.as_deref() != Some("orders")) {
            let (source, topic) = (source.unwrap_or_default(), topic.unwrap_or_default());
            let other = if clusters.contains_key(&source) {
                format!(", which is also cluster `{source}`'s name for its `{topic}`")
            } else {
                String::new()
            };
            let reason = format!(
                "flow {}: remote_topic `{template}` cannot be read back: cluster alias `{alias}` contains `{}`, the text \
                 between {{source}} and {{topic}}, so `{name}` (`orders` from `{alias}`) reads as `{topic}` from \
                 `{source}`{other}; put text in the template that no alias contains",
                plan.id,
                match policy {
                    ReplicationPolicy::Template { template, .. } => template.between(),
                    _ => "",
                }
            );
            errors.push(error(plan, reason));
            return;
        }
    }
}

/// Two flows into one cluster never write the same remote name.
fn one_writer_per_name(a: &FlowPlan, b: &FlowPlan, errors: &mut Vec<ConfigError>) {
    let ((a_prefix, a_suffix), (b_prefix, b_suffix)) = (affixes(a), affixes(b));
    let prefixes_meet = a_prefix.starts_with(&b_prefix) || b_prefix.starts_with(&a_prefix);
    let suffixes_meet = a_suffix.ends_with(&b_suffix) || b_suffix.ends_with(&a_suffix);
    if !(prefixes_meet && suffixes_meet) {
        return;
    }
    let longer = |x: String, y: String| if x.len() >= y.len() { x } else { y };
    let name =
        format!("{}orders{}", longer(a_prefix.clone(), b_prefix.clone()), longer(a_suffix.clone(), b_suffix.clone()));
    let topic_of = |prefix: &str, suffix: &str| name[prefix.len()..name.len() - suffix.len()].to_string();
    let later = if a.file >= b.file { a } else { b };
    let reason = format!(
        "flows {} ({}, {}) and {} ({}, {}) would both write `{name}` on `{}` (from `{}` and `{}` of their sources): \
         one remote topic for two source topics; give the flows remote names that differ, e.g. with {{source}}",
        a.id,
        naming(a),
        a.file.display(),
        b.id,
        naming(b),
        b.file.display(),
        a.id.target,
        topic_of(&a_prefix, &a_suffix),
        topic_of(&b_prefix, &b_suffix),
    );
    errors.push(error(later, reason));
}

/// The literal text a flow puts before and after a topic's name.
fn affixes(plan: &FlowPlan) -> (String, String) {
    // No topic name holds a NUL, so it marks the topic's place in the remote name.
    let marked = plan.policy.format_remote_topic(&plan.id.source, "\0");
    let (prefix, suffix) = marked.split_once('\0').unwrap_or_default();
    (prefix.to_string(), suffix.to_string())
}

fn naming(plan: &FlowPlan) -> String {
    match (&plan.settings.remote_topic, plan.settings.replication_policy) {
        (Some(template), _) => format!("remote_topic `{template}`"),
        (None, PolicyKind::Identity) => "the identity policy".to_string(),
        (None, _) => format!("the default policy, separator {:?}", plan.settings.replication_policy_separator),
    }
}

/// `reader` copies on from the cluster `writer` writes to: it must read `writer`'s names as coming
/// from `writer`'s source, or it takes them for its cluster's own topics (and copies them back).
fn reads_names_back(writer: &FlowPlan, reader: &FlowPlan, errors: &mut Vec<ConfigError>) {
    for sample in SAMPLES {
        let name = writer.policy.format_remote_topic(&writer.id.source, sample);
        let source = reader.policy.topic_source(&name);
        let topic = reader.policy.upstream_topic(&name);
        if source.as_deref() == Some(writer.id.source.as_str()) && topic.as_deref() == Some(sample) {
            continue;
        }
        let read_as = match (source, topic) {
            (Some(source), Some(topic)) => format!("`{topic}` from `{source}`"),
            _ => format!("a local topic of `{}` and would copy it as one", writer.id.target),
        };
        let reason = format!(
            "flow {} ({}) reads `{name}`, the name flow {} ({}, {}) gives `{sample}` of `{}`, as {read_as}: \
             loop prevention and checkpoints depend on reading it back; give both flows the same naming",
            reader.id,
            naming(reader),
            writer.id,
            naming(writer),
            writer.file.display(),
            writer.id.source,
        );
        errors.push(error(reader, reason));
        return;
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::super::raw::RawFile;
    use super::super::{ConfigErrors, FlowSet};

    fn parse(files: &[(&str, &str)]) -> Result<FlowSet, ConfigErrors> {
        let parsed = files
            .iter()
            .map(|(name, text)| (PathBuf::from(name), toml::from_str::<RawFile>(text).expect("test TOML parses")))
            .collect();
        super::super::validate::validate(parsed, &|_| None, crate::kafka::check_client_properties)
    }

    fn clusters(aliases: &[&str]) -> String {
        aliases.iter().map(|a| format!("[clusters.{a}]\nbootstrap_servers = \"{a}:9092\"\n")).collect()
    }

    fn flow(source: &str, target: &str, naming: &str) -> String {
        format!("[[flows]]\nsource = \"{source}\"\ntarget = \"{target}\"\n{naming}\n")
    }

    fn template(text: &str) -> String {
        format!("remote_topic = \"{text}\"")
    }

    /// The one error of a refused set, as `ferry validate` shows it.
    fn refused(files: &[(&str, &str)]) -> String {
        let errs = parse(files).expect_err("refused").0;
        assert_eq!(errs.len(), 1, "{errs:?}");
        errs[0].to_string()
    }

    #[test]
    fn active_active_with_a_suffix_template_is_accepted() {
        let c = clusters(&["east", "west"]);
        let (ew, we) =
            (flow("east", "west", &template("{topic}.{source}")), flow("west", "east", &template("{topic}.{source}")));
        let set = parse(&[("c.toml", &c), ("ew.toml", &ew), ("we.toml", &we)]).expect("valid");
        let plan = set.flows.values().next().expect("flow");
        assert_eq!(plan.policy.format_remote_topic("east", "orders"), "orders.east");
        assert!(set.describe().contains("remote_topic=\"{topic}.{source}\""), "{}", set.describe());
    }

    #[test]
    fn a_template_beside_a_policy_or_a_separator_is_refused() {
        let c = clusters(&["east", "west"]);
        let f = flow("east", "west", "remote_topic = \"{topic}.{source}\"\nreplication_policy = \"identity\"");
        let shown = refused(&[("c.toml", &c), ("f.toml", &f)]);
        assert!(
            shown.starts_with("f.toml: flows[0].remote_topic: a template replaces the replication policy"),
            "{shown}"
        );
        let f = flow("east", "west", "remote_topic = \"{topic}.{source}\"\nreplication_policy_separator = \"_\"");
        assert!(refused(&[("c.toml", &c), ("f.toml", &f)]).contains("remove replication_policy_separator = \"_\""));
        let f = flow("east", "west", &template("{source}{topic}"));
        let shown = refused(&[("c.toml", &c), ("f.toml", &f)]);
        assert!(
            shown.contains("flows[0].remote_topic: `{source}{topic}`: {source} and {topic} need literal text"),
            "{shown}"
        );
    }

    #[test]
    fn an_alias_holding_the_text_between_the_placeholders_is_refused_naming_both_aliases() {
        let c = clusters(&["us", "us_east", "west"]);
        let f = flow("us_east", "west", &template("{source}_{topic}"));
        let shown = refused(&[("c.toml", &c), ("f.toml", &f)]);
        assert!(shown.starts_with("f.toml: remote_topic: flow us_east->west"), "{shown}");
        assert!(
            shown.contains("cluster alias `us_east` contains `_`")
                && shown.contains("`us_east_orders` (`orders` from `us_east`) reads as `east_orders` from `us`")
                && shown.contains("also cluster `us`'s name for its `east_orders`"),
            "{shown}"
        );
        // `-` is in no alias: the same clusters with `{source}-{topic}` are fine.
        let f = flow("us_east", "west", &template("{source}-{topic}"));
        parse(&[("c.toml", &c), ("f.toml", &f)]).expect("valid");
    }

    #[test]
    fn names_that_look_internal_or_like_heartbeats_are_refused() {
        let c = clusters(&["east", "west"]);
        for (text, kind) in [
            ("__{topic}.{source}", "an internal topic"),
            ("{source}.{topic}.checkpoints.internal", "an internal topic"),
            ("{topic}.heartbeats", "a heartbeats topic"),
        ] {
            let f = flow("east", "west", &template(text));
            let shown = refused(&[("c.toml", &c), ("f.toml", &f)]);
            assert!(shown.contains(kind), "{text}: {shown}");
        }
    }

    #[test]
    fn two_flows_writing_one_name_are_refused_naming_both() {
        let c = clusters(&["a", "b", "t"]);
        let (at, bt) = (flow("a", "t", &template("{topic}.{source}")), flow("b", "t", &template("{source}.{topic}")));
        let shown = refused(&[("c.toml", &c), ("at.toml", &at), ("bt.toml", &bt)]);
        assert!(
            shown.contains("flows a->t (remote_topic `{topic}.{source}`, at.toml) and b->t (remote_topic `{source}.{topic}`, bt.toml) would both write `b.orders.a` on `t`"),
            "{shown}"
        );
        // Without {source}, two sources' `orders` meet in one name.
        let (at, bt) = (flow("a", "t", &template("dr-{topic}")), flow("b", "t", &template("dr-{topic}")));
        assert!(
            refused(&[("c.toml", &c), ("at.toml", &at), ("bt.toml", &bt)]).contains("would both write `dr-orders`")
        );
        // The same suffix template from two sources never meets.
        let (at, bt) = (flow("a", "t", &template("{topic}.{source}")), flow("b", "t", &template("{topic}.{source}")));
        parse(&[("c.toml", &c), ("at.toml", &at), ("bt.toml", &bt)]).expect("distinct names");
    }

    #[test]
    fn a_flow_that_would_read_a_template_name_as_local_is_refused() {
        let c = clusters(&["east", "west"]);
        let ew = flow("east", "west", &template("{topic}.{source}"));
        let we = flow("west", "east", "");
        let errs = parse(&[("c.toml", &c), ("ew.toml", &ew), ("we.toml", &we)]).expect_err("misread").0;
        let shown: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert!(
            shown.iter().any(|e| e.starts_with("we.toml: replication_policy: flow west->east (the default policy, separator \".\") reads `orders.east`, the name flow east->west (remote_topic `{topic}.{source}`, ew.toml) gives `orders` of `east`, as `east` from `orders`")),
            "{shown:?}"
        );
        assert!(errs.iter().all(|e| e.file != Path::new("c.toml")), "{shown:?}");
    }

    #[test]
    fn a_template_without_source_is_refused_on_a_cycle_and_accepted_on_a_chain() {
        let c = clusters(&["east", "west"]);
        let ew = flow("east", "west", &template("dr-{topic}"));
        parse(&[("c.toml", &c), ("ew.toml", &ew)]).expect("a chain");
        let we = flow("west", "east", &template("dr-{topic}"));
        let errs = parse(&[("c.toml", &c), ("ew.toml", &ew), ("we.toml", &we)]).expect_err("cycle").0;
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(
            errs[0].to_string().contains("remote_topic: flow east->west is on the replication cycle east->west->east, and its remote_topic \"dr-{topic}\" has no {source}"),
            "{errs:?}"
        );
    }
}
