//! Deletions that follow (`sync_topic_deletions`): a remote topic that ferry created is deleted once its
//! source topic has been gone for the grace period, never one it did not create.
//!
//! **What ferry created** is remembered in the deployment's control topic on the target
//! ([`crate::control::CONTROL_TOPIC`], compacted), one record per remote topic keyed
//! `created|<deployment>|<flow>|<remote>`, written by whichever node created the topic (any node may).
//! A topic created before this record existed, by MM2, by hand or by another deployment has none and is
//! never deleted. The same record carries when the source topic was first seen gone, so the grace period
//! survives restarts and leader changes (a new leader continues it rather than starting it again), and
//! when ferry deleted the remote topic.
//!
//! **Gone** means absent from a complete listing of the source cluster at a refresh, while the flow's
//! topic selection still names it: a topic the operator excluded is not gone, and a source that cannot
//! be listed counts nothing. A source topic seen again clears the mark at the next refresh. Only the
//! flow's leader decides, at its topic refreshes; the control topic is read only when some remote topic
//! is a candidate (or was at the last refresh, or the leader just started).
//!
//! Before a source is marked gone and again right before its remote topic is deleted, the one source
//! topic is asked for by name: only "unknown topic" counts as gone (a topic the principal may no longer
//! describe is missing from a listing, not gone). The remote topic's end offsets are noted with the mark;
//! if they grew by the end of the grace period, something else writes it (ferry cannot: its source is
//! gone), so it is kept for good and the record says why. A node that saw the source present after the
//! recorded mark (its clearing write failed) starts the grace period again rather than trust the mark.
//!
//! `"dry_run"` shows and logs the pending deletions (`/flows` `topic_deletions`) and never deletes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rdkafka::admin::AdminOptions;
use rdkafka::consumer::Consumer;
use rdkafka::message::Message;
use serde::{Deserialize, Serialize};

use crate::clients::Admin;
use crate::clients::Connection;
use crate::config::{FlowId, FlowPlan, TopicDeletions};
use crate::control::CONTROL_TOPIC;
use crate::kafka::{self, ADMIN_TIMEOUT};
use crate::metrics::METRICS;
pub use crate::status::PendingDeletion;

/// `created|<deployment>|<flow>|<remote>`.
pub fn created_key(deployment: &str, flow: &FlowId, remote: &str) -> String {
    format!("created|{deployment}|{flow}|{remote}")
}

/// The remote topic a key names, if it is one of `deployment`'s `flow`'s.
fn remote_of<'k>(key: &'k str, deployment: &str, flow: &FlowId) -> Option<&'k str> {
    key.strip_prefix(&format!("created|{deployment}|{flow}|"))
}

/// A remote topic ferry created, as its control record says (JSON, times in ms since the epoch).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Created {
    pub source_topic: String,
    pub created_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_gone_since: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted_at: Option<i64>,
    /// The remote topic's end offsets (summed) when the source was marked gone: if they grew since,
    /// something else writes the topic (ferry cannot: its source is gone) and it is not deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_end_at_mark: Option<i64>,
    /// Written after its source went: someone else's now, never deleted (why, for operators).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<String>,
}

/// What to do with one remote topic's record at a refresh.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Its source went (first seen now): record since when.
    MarkGone(Created),
    /// Its source is back (or no longer selected): forget the mark.
    ClearGone(Created),
    /// Waiting out the grace period.
    Wait { gone_since: i64 },
    /// Past the grace period.
    Delete { gone_since: i64 },
}

/// The step for the remote topic of `record`, pure: `source_exists` and `selected` ask about its source
/// topic, `remote_exists` about the remote topic.
pub fn step(
    record: &Created,
    remote_exists: bool,
    source_exists: bool,
    selected: bool,
    now_ms: i64,
    grace: Duration,
) -> Option<Step> {
    if record.deleted_at.is_some() || record.kept.is_some() || !remote_exists {
        return None;
    }
    let gone = !source_exists && selected;
    match (gone, record.source_gone_since) {
        (false, None) => None,
        (false, Some(_)) => Some(Step::ClearGone(Created { source_gone_since: None, ..record.clone() })),
        (true, None) => Some(Step::MarkGone(Created { source_gone_since: Some(now_ms), ..record.clone() })),
        (true, Some(since)) => {
            let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
            if now_ms.saturating_sub(since) >= grace_ms {
                Some(Step::Delete { gone_since: since })
            } else {
                Some(Step::Wait { gone_since: since })
            }
        }
    }
}

pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

fn rfc3339_ms(ms: i64) -> String {
    crate::status::rfc3339(UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64))
}

/// Records that ferry created each `(remote, source topic)` (all in flight at once: a flow that creates
/// thousands of topics must not wait a round trip per topic). A warning if the control topic refuses
/// them: those topics are then never deleted by a following deletion, which is the safe side.
pub async fn record_created(conn: &Arc<Connection>, deployment: &str, plan: &FlowPlan, created: &[(String, String)]) {
    if created.is_empty() {
        return;
    }
    let records: Vec<(String, Created)> = created
        .iter()
        .map(|(remote, source)| {
            let record = Created { source_topic: source.clone(), created_at: now_ms(), ..Created::default() };
            (created_key(deployment, &plan.id, remote), record)
        })
        .collect();
    let failed: Vec<String> = write_all(conn, records).await.into_iter().filter_map(Result::err).collect();
    if let Some(e) = failed.first() {
        if plan.settings.topic_deletions != TopicDeletions::Off {
            tracing::warn!(flow = %plan.id, topics = failed.len(), error = %e, "cannot record that ferry created these remote topics: sync_topic_deletions will never delete them");
        } else {
            tracing::debug!(flow = %plan.id, topics = failed.len(), error = %e, "cannot record that ferry created these remote topics");
        }
    }
}

async fn write(conn: &Arc<Connection>, key: &str, record: &Created) -> Result<(), String> {
    write_all(conn, vec![(key.to_string(), record.clone())]).await.pop().unwrap_or(Ok(()))
}

/// Writes every record to the control topic; one outcome per record, in order.
async fn write_all(conn: &Arc<Connection>, records: Vec<(String, Created)>) -> Vec<Result<(), String>> {
    let alias = conn.cluster().alias.clone();
    let encoded = records.into_iter().map(|(k, r)| (k, serde_json::to_vec(&r).unwrap_or_default())).collect();
    crate::control::write_records(conn, &alias, encoded).await.into_iter().map(|r| r.map(|_| ())).collect()
}

/// The flow's created-topic records, newest per remote topic (on a thread: a read may take
/// [`ADMIN_TIMEOUT`] against a cluster that does not answer).
async fn read_created(plan: &FlowPlan, deployment: &str) -> Result<BTreeMap<String, Created>, String> {
    let (cluster, flow, deployment) = (plan.target.clone(), plan.id.clone(), deployment.to_string());
    on_thread(move || -> Result<BTreeMap<String, Created>, String> {
        let consumer = kafka::assign_only_consumer(&cluster, &flow, "deletions-reader").map_err(|e| e.to_string())?;
        if consumer
            .fetch_metadata(Some(CONTROL_TOPIC), ADMIN_TIMEOUT)
            .is_ok_and(|m| m.topics().first().is_none_or(|t| t.error().is_some() || t.partitions().is_empty()))
        {
            return Ok(BTreeMap::new()); // no control topic yet: nothing recorded
        }
        let mut out = BTreeMap::new();
        kafka::read_to_end(&consumer, &cluster.alias, CONTROL_TOPIC, [0], |m| {
            let Some(remote) =
                m.key().and_then(|k| std::str::from_utf8(k).ok()).and_then(|k| remote_of(k, &deployment, &flow))
            else {
                return;
            };
            match m.payload().map(serde_json::from_slice::<Created>) {
                Some(Ok(record)) => {
                    out.insert(remote.to_string(), record);
                }
                _ => {
                    kafka::skip_internal_record(
                        None,
                        &cluster.alias,
                        m,
                        "a created-topic record",
                        &"not the JSON of a created topic",
                    );
                    out.remove(remote);
                }
            }
        })
        .map_err(|e| e.to_string())?;
        Ok(out)
    })
    .await
    .unwrap_or_else(|| Err("cannot start a thread to read the control topic".into()))
}

/// The leader's deletion pass of one refresh.
pub struct DeletionPass<'a> {
    pub plan: &'a FlowPlan,
    /// Asks the source about one topic and the target for a topic's summed end offsets.
    pub source_meta: &'a crate::clients::MetaConsumer,
    pub target_meta: &'a crate::clients::MetaConsumer,
    /// When this node last saw each remote topic's source present (ms), across passes.
    pub last_present: &'a std::sync::Mutex<BTreeMap<String, i64>>,
    pub deployment: &'a str,
    pub conn: &'a Arc<Connection>,
    pub admin: &'a Admin,
    /// Topic name to partition count, as the refresh listed them.
    pub source_topics: &'a HashMap<String, i32>,
    /// Source topics promoted at a failover: their remote topics are the applications' now.
    pub promoted: &'a BTreeSet<String>,
    pub target_topics: &'a HashMap<String, i32>,
    /// Read the records even without a candidate (the leader just started, or something was pending).
    pub reconcile: bool,
}

impl DeletionPass<'_> {
    /// Remote topics whose source topic is gone while the flow still selects it, by the policy's names.
    fn candidates(&self) -> bool {
        let plan = self.plan;
        self.target_topics.keys().any(|t| {
            plan.policy.topic_source(t).as_deref() == Some(plan.id.source.as_str())
                && plan
                    .policy
                    .upstream_topic(t)
                    .is_some_and(|u| !self.source_topics.contains_key(&u) && plan.copies_topic(&u))
        })
    }

    fn remember_present(&self, remote: &str, now: i64) {
        self.last_present.lock().unwrap_or_else(|p| p.into_inner()).insert(remote.to_string(), now);
    }

    /// Whether the source cluster says `topic` does not exist (asked by name; any other answer, an
    /// authorization error or no answer, is not "gone").
    async fn confirmed_gone(&self, topic: &str) -> bool {
        let (meta, topic) = (self.source_meta.clone(), topic.to_string());
        on_thread(move || match meta.fetch_metadata(Some(&topic), ADMIN_TIMEOUT) {
            Ok(md) => md.topics().first().is_some_and(|t| {
                t.error() == Some(rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
            }),
            Err(_) => false,
        })
        .await
        .unwrap_or(false)
    }

    /// The remote topic's high watermarks, summed (`None` if they cannot be read).
    async fn remote_end(&self, remote: &str) -> Option<i64> {
        let partitions = *self.target_topics.get(remote)?;
        let (meta, topic) = (self.target_meta.clone(), remote.to_string());
        on_thread(move || {
            (0..partitions).map(|p| kafka::watermarks(&*meta, &topic, p).ok().map(|(_, high)| high)).sum()
        })
        .await
        .flatten()
    }

    /// Runs the pass; returns what is pending after it. An error is logged (the refresh goes on).
    pub async fn run(&self) -> Vec<PendingDeletion> {
        let plan = self.plan;
        if plan.settings.topic_deletions == TopicDeletions::Off || !(self.reconcile || self.candidates()) {
            return Vec::new();
        }
        let records = match read_created(plan, self.deployment).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(flow = %plan.id, topic = CONTROL_TOPIC, error = %e, "cannot read which remote topics ferry created; no topic deletion this refresh");
                return Vec::new();
            }
        };
        let (now, grace) = (now_ms(), plan.settings.topic_deletion_grace);
        let dry_run = plan.settings.topic_deletions == TopicDeletions::DryRun;
        let mut pending = Vec::new();
        for (remote, record) in records {
            let source = &record.source_topic;
            if self.promoted.contains(source) {
                continue; // the applications' topic now: never deleted
            }
            let selected = plan.copies_topic(source);
            let source_listed = self.source_topics.contains_key(source);
            if source_listed {
                self.remember_present(&remote, now);
            }
            let Some(mut step) =
                step(&record, self.target_topics.contains_key(&remote), source_listed, selected, now, grace)
            else {
                continue;
            };
            // A mark older than this node's last sight of the source is stale (a clearing write failed).
            let seen = self.last_present.lock().unwrap_or_else(|p| p.into_inner()).get(&remote).copied();
            if let (Step::Wait { gone_since } | Step::Delete { gone_since }, Some(seen)) = (&step, seen)
                && *gone_since <= seen
            {
                step = Step::MarkGone(Created { source_gone_since: Some(now), ..record.clone() });
            }
            // Gone from the listing: asked by name before anything is decided on it.
            if matches!(step, Step::MarkGone(_) | Step::Delete { .. }) && !self.confirmed_gone(source).await {
                tracing::info!(flow = %plan.id, topic = %remote, source_topic = %source, "the source topic is missing from the listing but not unknown to the source cluster (no right to describe it?): not counted as gone");
                self.remember_present(&remote, now);
                continue;
            }
            let key = created_key(self.deployment, &plan.id, &remote);
            let pend = |since: i64| PendingDeletion {
                topic: remote.clone(),
                source_topic: source.clone(),
                source_gone_since: rfc3339_ms(since),
                deletes_at: rfc3339_ms(since.saturating_add(grace.as_millis() as i64)),
                dry_run,
            };
            match step {
                Step::MarkGone(mut updated) => {
                    updated.remote_end_at_mark = self.remote_end(&remote).await;
                    let p = pend(now);
                    tracing::warn!(flow = %plan.id, topic = %remote, source_topic = %source, deletes_at = %p.deletes_at, dry_run, "the source topic of a remote topic ferry created is gone: the remote topic is deleted after the grace period unless it comes back");
                    if let Err(e) = write(self.conn, &key, &updated).await {
                        tracing::warn!(flow = %plan.id, topic = %remote, error = %e, "cannot record when the source topic went; trying again at the next refresh");
                        continue;
                    }
                    pending.push(p);
                }
                Step::ClearGone(updated) => {
                    tracing::info!(flow = %plan.id, topic = %remote, source_topic = %source, "the source topic is back (or no longer selected): the remote topic is kept");
                    if let Err(e) = write(self.conn, &key, &updated).await {
                        tracing::warn!(flow = %plan.id, topic = %remote, error = %e, "cannot clear the mark of a source topic that is back");
                    }
                }
                Step::Wait { gone_since } => pending.push(pend(gone_since)),
                Step::Delete { gone_since } => {
                    let end = self.remote_end(&remote).await;
                    if let (Some(then), Some(now_end)) = (record.remote_end_at_mark, end)
                        && now_end > then
                    {
                        let why = format!(
                            "{} records written after its source topic went (end offsets {then} -> {now_end})",
                            now_end - then
                        );
                        tracing::warn!(flow = %plan.id, topic = %remote, source_topic = %source, reason = %why, "the remote topic is written by something other than ferry: it is kept, and never deleted by ferry");
                        let kept = Created { kept: Some(why), source_gone_since: None, ..record.clone() };
                        if let Err(e) = write(self.conn, &key, &kept).await {
                            tracing::warn!(flow = %plan.id, topic = %remote, error = %e, "cannot record that the remote topic is kept");
                        }
                        continue;
                    }
                    if dry_run {
                        let p = pend(gone_since);
                        tracing::info!(flow = %plan.id, topic = %remote, source_topic = %source, source_gone_since = %p.source_gone_since, "dry run: would delete the remote topic now (sync_topic_deletions = \"dry_run\")");
                        pending.push(p);
                        continue;
                    }
                    let since = rfc3339_ms(gone_since);
                    tracing::warn!(flow = %plan.id, topic = %remote, source_topic = %source, source_gone_since = %since, "deleting the remote topic: its source topic has been gone for the grace period");
                    match delete_topic(self.admin, &plan.target.alias, &remote).await {
                        Ok(()) => {
                            tracing::warn!(flow = %plan.id, topic = %remote, cluster = %plan.target.alias, "deleted the remote topic");
                            METRICS.remote_topics_deleted.with_label_values(&[&plan.id.to_string()]).inc();
                            let done = Created { deleted_at: Some(now_ms()), ..record.clone() };
                            if let Err(e) = write(self.conn, &key, &done).await {
                                tracing::warn!(flow = %plan.id, topic = %remote, error = %e, "cannot record the deletion");
                            }
                        }
                        Err(e) => {
                            tracing::warn!(flow = %plan.id, topic = %remote, error = %e, "cannot delete the remote topic; trying again at the next refresh");
                            pending.push(pend(gone_since));
                        }
                    }
                }
            }
        }
        METRICS.remote_topics_pending_deletion.with_label_values(&[&plan.id.to_string()]).set(pending.len() as i64);
        pending
    }
}

/// Runs a blocking call on a thread of its own (a call to a cluster that does not answer takes
/// [`ADMIN_TIMEOUT`]; the runtime's blocking pool must not hold the node's exit).
async fn on_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new().name("topic-deletions".into()).spawn(move || drop(tx.send(f()))).ok()?;
    rx.await.ok()
}

async fn delete_topic(admin: &Admin, cluster: &str, topic: &str) -> Result<(), String> {
    let opts = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT)).request_timeout(Some(ADMIN_TIMEOUT));
    let results =
        admin.delete_topics(&[topic], &opts).await.map_err(|e| format!("delete {topic} on `{cluster}`: {e}"))?;
    match results.into_iter().next() {
        Some(Ok(_)) | None => Ok(()),
        Some(Err((_, rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition))) => Ok(()),
        Some(Err((_, code))) => Err(format!("delete {topic} on `{cluster}`: {code}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(3600);

    fn created() -> Created {
        Created { source_topic: "orders".into(), created_at: 1, ..Created::default() }
    }

    #[test]
    fn a_gone_source_is_marked_then_waited_for_then_deleted() {
        let r = created();
        let Some(Step::MarkGone(marked)) = step(&r, true, false, true, 1_000, GRACE) else { panic!("marked") };
        assert_eq!(marked.source_gone_since, Some(1_000));
        assert_eq!(step(&marked, true, false, true, 1_000 + 3_599_999, GRACE), Some(Step::Wait { gone_since: 1_000 }));
        assert_eq!(
            step(&marked, true, false, true, 1_000 + 3_600_000, GRACE),
            Some(Step::Delete { gone_since: 1_000 })
        );
    }

    #[test]
    fn nothing_happens_to_what_is_present_unselected_missing_or_deleted() {
        let r = created();
        assert_eq!(step(&r, true, true, true, 5, GRACE), None, "the source exists");
        assert_eq!(step(&r, true, false, false, 5, GRACE), None, "excluded by the operator: not gone");
        assert_eq!(step(&r, false, false, true, 5, GRACE), None, "the remote topic is gone already");
        let deleted = Created { deleted_at: Some(3), source_gone_since: Some(1), ..r };
        assert_eq!(
            step(&deleted, true, false, true, i64::MAX, GRACE),
            None,
            "deleted once: a re-created one has a new record"
        );
    }

    #[test]
    fn a_source_that_comes_back_clears_the_mark() {
        let marked = Created { source_gone_since: Some(7), ..created() };
        assert_eq!(step(&marked, true, true, true, 9, GRACE), Some(Step::ClearGone(created())));
        assert_eq!(step(&marked, true, false, false, 9, GRACE), Some(Step::ClearGone(created())), "no longer selected");
    }

    #[test]
    fn keys_name_deployment_flow_and_topic() {
        let flow: FlowId = "east->west".parse().expect("flow");
        let key = created_key("prod", &flow, "east.orders");
        assert_eq!(key, "created|prod|east->west|east.orders");
        assert_eq!(remote_of(&key, "prod", &flow), Some("east.orders"));
        assert_eq!(remote_of(&key, "staging", &flow), None);
        assert_eq!(remote_of("pause|prod|east->west", "prod", &flow), None);
        let json = serde_json::to_string(&Created { source_gone_since: Some(5), ..created() }).expect("json");
        assert_eq!(json, r#"{"source_topic":"orders","created_at":1,"source_gone_since":5}"#);
    }
}
