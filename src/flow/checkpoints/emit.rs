//! The emission round: every selected group's source offsets, translated, published as checkpoints in
//! one transaction of the checkpoint producer (which a new leader's producer fences). Without emission
//! (`emit_checkpoints_enabled = false`) the same round only feeds group offset sync.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use super::{Computer, NODE_HEADER, fenced_or, lock};
use crate::failpoints;
use crate::flow::messages::ItemErrorsChanged;
use crate::kafka::{self, ErrorCapture};
use crate::metrics::METRICS;
use crate::mm2::records::Checkpoint;
use crate::raw_admin;

/// What one round over the selected groups found.
struct Round {
    /// Checkpoints more recent than the last known ones.
    candidates: Vec<Checkpoint>,
    /// When each candidate's upstream offset was first seen.
    since: Vec<Instant>,
    /// Groups whose offsets were read.
    read_ok: Vec<String>,
}

impl Computer<'_> {
    /// One emission round over every selected group, by `deadline`. A group whose offsets cannot be
    /// read is that group's error (logged, counted, shown in `/flows`, retried next round); only a
    /// failure to publish is the computer's.
    pub(super) fn emit(&self, deadline: Instant) -> Result<(), String> {
        failpoints::check(failpoints::CHECKPOINTS_EMIT)?;
        // With a group, the producer (its fence and the read of what was published up to it) comes
        // before the round: the round's candidates are compared with everything published so far.
        if self.has_groups_to_write() {
            self.writer()?;
        }
        let flow = self.plan.id.to_string();
        let Round { candidates: emitted, since, read_ok } = self.round(deadline);
        let succeeded = |groups: &[String]| {
            let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
            for g in groups {
                METRICS.checkpoint_last_success.with_label_values(&[&flow, g]).set(now);
            }
        };
        if emitted.is_empty() {
            succeeded(&read_ok);
            return Ok(());
        }
        let now_ms = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(100));
        self.in_transaction(left, |producer| {
            for cp in &emitted {
                let (key, value) = cp.encode().map_err(|e| format!("encode checkpoint: {e}"))?;
                let headers = rdkafka::message::OwnedHeaders::new_with_capacity(1).insert(rdkafka::message::Header {
                    key: NODE_HEADER,
                    value: Some(self.identity.node_id.as_bytes()),
                });
                let record = BaseRecord::to(&self.checkpoints_topic)
                    .partition(0)
                    .key(&key)
                    .payload(&value)
                    .timestamp(now_ms)
                    .headers(headers);
                producer.send(record).map_err(|(e, _)| format!("queue checkpoint: {e}"))?;
            }
            Ok(())
        })?;
        let n = emitted.len();
        let latency = METRICS.checkpoint_latency.with_label_values(&[&flow]);
        for at in since {
            latency.observe(at.elapsed().as_secs_f64());
        }
        succeeded(&read_ok);
        let mut st = lock(&self.state);
        for cp in emitted {
            st.checkpoints.update(cp);
        }
        METRICS.checkpoints_emitted.with_label_values(&[&flow]).inc_by(n as u64);
        tracing::debug!(flow = %flow, checkpoints = n, "published checkpoints");
        Ok(())
    }

    /// A round that publishes nothing (`emit_checkpoints_enabled = false`): its translations become what
    /// group offset sync commits, under the same recency rule as published checkpoints.
    pub(super) fn translate_only(&self, deadline: Instant) {
        let Round { candidates, .. } = self.round(deadline);
        let mut st = lock(&self.state);
        for cp in candidates {
            st.checkpoints.update(cp);
        }
    }

    /// Reads every selected group's offsets and translates them, by `deadline`.
    fn round(&self, deadline: Instant) -> Round {
        let plan = self.plan;
        let flow = plan.id.to_string();
        let groups = lock(&self.state).groups.clone();
        let mut emitted = Vec::new();
        let mut errors_changed = false;
        // Groups whose offsets were read this round, and when each emitted checkpoint's offset was first seen.
        let mut read_ok = Vec::new();
        let mut since = Vec::new();
        let mut seen = HashMap::new();
        for group in &groups {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::warn!(flow = %flow, "checkpoint round cut short by its deadline; the other groups come next round");
                break;
            }
            let fetched = failpoints::check_for(failpoints::CHECKPOINTS_GROUP_OFFSETS, group).and_then(|()| {
                self.rt
                    .block_on(raw_admin::list_consumer_group_offsets(
                        &self.source_admin,
                        group,
                        left.min(kafka::ADMIN_TIMEOUT),
                    ))
                    .map_err(|e| format!("cluster `{}`: {e}", plan.source.alias))
            });
            let offsets = match fetched {
                Ok(o) => {
                    errors_changed |= lock(&self.state).errors.cleared(group);
                    o
                }
                Err(e) => {
                    tracing::warn!(flow = %flow, group = %group, error = %e, "cannot read the group's offsets; its checkpoints wait for the next round");
                    METRICS.group_errors.with_label_values(&[&flow, group]).inc();
                    lock(&self.state).errors.failed(group, e);
                    errors_changed = true;
                    continue;
                }
            };
            read_ok.push(group.clone());
            let st = lock(&self.state);
            for o in offsets {
                let key = (group.clone(), o.topic.clone(), o.partition);
                let first_seen = match st.seen.get(&key) {
                    Some((offset, at)) if *offset == o.offset => *at,
                    _ => Instant::now(),
                };
                seen.insert(key, (o.offset, first_seen));
                let Some((topic, downstream)) = self.translate(&st, &o.topic, o.partition, o.offset) else { continue };
                let cp = Checkpoint {
                    group: group.clone(),
                    topic,
                    partition: o.partition,
                    upstream_offset: o.offset,
                    downstream_offset: downstream,
                    metadata: o.metadata,
                };
                if st.checkpoints.is_more_recent(&cp) {
                    emitted.push(cp);
                    since.push(first_seen);
                }
            }
        }
        if errors_changed {
            self.supervisor.item_errors.do_send(ItemErrorsChanged::Groups(lock(&self.state).errors.snapshot()));
        }
        lock(&self.state).seen = seen;
        Round { candidates: emitted, since, read_ok }
    }

    /// Runs `f` in a transaction of the checkpoint producer and commits it within `timeout`. A fenced
    /// producer (another node took the flow's lease) fails here: nothing `f` sent becomes visible.
    pub(super) fn in_transaction(
        &self,
        timeout: Duration,
        f: impl FnOnce(&BaseProducer<ErrorCapture>) -> Result<(), String>,
    ) -> Result<(), String> {
        let topic = &self.checkpoints_topic;
        let producer = self.writer()?;
        producer.begin_transaction().map_err(|e| {
            fenced_or(e, |e| {
                self.refused(kafka::authorization_error(e), || format!("begin a transaction on {topic}: {e}"))
            })
        })?;
        if let Err(e) = f(producer) {
            let _ = producer.abort_transaction(timeout);
            return Err(e);
        }
        if let Err(e) = producer.commit_transaction(timeout) {
            let _ = producer.abort_transaction(timeout);
            // The record's own refusal (a topic ACL) says more than the failed commit.
            let refused = producer.context().take().and_then(|c| c.refused);
            return Err(fenced_or(e, |e| {
                self.refused(refused.or(kafka::authorization_error(e)), || {
                    format!("publish checkpoints to {topic}: {e}")
                })
            }));
        }
        match producer.context().take() {
            Some(e) => Err(self.refused(e.refused, || format!("publish checkpoints to {topic}: {e}"))),
            None => Ok(()),
        }
    }

    /// What to say when publishing failed: which right is missing if the target refused this
    /// principal (`code`), else `otherwise`.
    pub(super) fn refused(&self, code: Option<&'static str>, otherwise: impl FnOnce() -> String) -> String {
        let target = &self.plan.target.alias;
        match code {
            Some(code @ "TRANSACTIONAL_ID_AUTHORIZATION_FAILED") => {
                kafka::not_authorized(&format!("transactional id {}", self.transactional_id), target, "Write", code)
            }
            Some(code @ "CLUSTER_AUTHORIZATION_FAILED") => {
                kafka::not_authorized("the cluster", target, "IdempotentWrite", code)
            }
            Some(code) => {
                kafka::not_authorized(&format!("checkpoints topic {}", self.checkpoints_topic), target, "Write", code)
            }
            None => otherwise(),
        }
    }
}
