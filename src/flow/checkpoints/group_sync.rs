//! Group offset sync: translated offsets committed to target groups that have no active members, never
//! moving a group backwards.
//!
//! **The fence.** A group's offsets are committed inside a transaction of the checkpoint producer
//! (`send_offsets_to_transaction`, as Kafka Connect commits a source task's offsets), whose
//! transactional id is the flow's: a node that took the flow's lease initialised the same id, which
//! fenced this producer, so an ex-leader that was paused or cut off cannot commit a group's offsets
//! after the new leader started. The broker checks the producer's epoch on the transaction's first
//! request, before the group sees anything; a fenced commit stops the computer with [`FENCED`], and
//! the supervisor keeps this node's leader duties off. (An empty transaction, which is what the
//! check before the commit used to be, never reaches the broker: librdkafka completes it locally.)
//!
//! **Idle groups only.** ferry describes the target groups and commits only to those that are Empty
//! or unknown there, as MM2 does. A transactional commit from outside the group is not refused by the
//! broker for a group with members the way a plain one is, so that check is ferry's own: a consumer
//! that joins between the check and the commit starts from the translated offsets.

use std::collections::HashMap;

use rdkafka::producer::Producer;

use super::{Computer, FENCED, fenced_or, lock};
use crate::kafka;
use crate::metrics::METRICS;
use crate::raw_admin::{self, CommittedOffset, GroupState};

impl Computer<'_> {
    /// Commit translated offsets to target groups that have no active members. Failures are counted
    /// and logged and do not stop checkpointing; only a fenced producer is the computer's error.
    pub(super) fn sync_group_offsets(&self) -> Result<(), String> {
        let plan = self.plan;
        let flow = plan.id.to_string();
        // Only groups the source still has: a group gone there is not re-created on the target.
        let groups: Vec<String> = {
            let st = lock(&self.state);
            st.groups.iter().filter(|g| st.checkpoints.group(g).next().is_some()).cloned().collect()
        };
        if groups.is_empty() {
            return Ok(());
        }
        let described = match self.rt.block_on(raw_admin::describe_consumer_groups(
            &self.target_admin,
            &groups,
            kafka::ADMIN_TIMEOUT,
        )) {
            Ok(d) => d,
            Err(e) => {
                METRICS.group_offset_syncs.with_label_values(&[&flow, "failed"]).inc();
                tracing::warn!(flow = %flow, error = %e, "cannot describe target groups; group offset sync skipped");
                return Ok(());
            }
        };
        for d in described {
            let idle = matches!(d.state, GroupState::Empty | GroupState::Dead) && d.members == 0 && d.error.is_none();
            if !idle {
                METRICS.group_offset_syncs.with_label_values(&[&flow, "skipped_active"]).inc();
                continue;
            }
            match self.sync_group(&d.group_id) {
                Ok(0) => {}
                Ok(n) => {
                    METRICS.group_offset_syncs.with_label_values(&[&flow, "ok"]).inc();
                    tracing::info!(flow = %flow, group = %d.group_id, partitions = n, "committed translated offsets to the target group");
                }
                Err(e) if e.contains(FENCED) => {
                    METRICS.group_offset_syncs.with_label_values(&[&flow, "failed"]).inc();
                    tracing::warn!(flow = %flow, group = %d.group_id, error = %e, "group offset sync refused: another node leads the flow now");
                    return Err(e);
                }
                Err(e) => {
                    METRICS.group_offset_syncs.with_label_values(&[&flow, "failed"]).inc();
                    tracing::warn!(flow = %flow, group = %d.group_id, error = %e, "group offset sync failed");
                }
            }
        }
        Ok(())
    }

    /// Commits the group's checkpoints that are ahead of its target offsets; returns how many.
    fn sync_group(&self, group: &str) -> Result<usize, String> {
        let current: HashMap<(String, i32), i64> = self
            .rt
            .block_on(raw_admin::list_consumer_group_offsets(&self.target_admin, group, kafka::ADMIN_TIMEOUT))
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|o| ((o.topic, o.partition), o.offset))
            .collect();
        let wanted: Vec<CommittedOffset> = lock(&self.state)
            .checkpoints
            .group(group)
            .filter(|cp| current.get(&(cp.topic.clone(), cp.partition)).is_none_or(|t| *t < cp.downstream_offset))
            .map(|cp| CommittedOffset {
                topic: cp.topic.clone(),
                partition: cp.partition,
                offset: cp.downstream_offset,
                metadata: cp.metadata.clone(),
            })
            .collect();
        if wanted.is_empty() {
            return Ok(0);
        }
        self.commit_in_transaction(group, &wanted)?;
        Ok(wanted.len())
    }

    /// `offsets` of `group`, committed in a transaction of the checkpoint producer (see the module docs).
    fn commit_in_transaction(&self, group: &str, offsets: &[CommittedOffset]) -> Result<(), String> {
        let target = &self.plan.target.alias;
        let timeout = kafka::ADMIN_TIMEOUT;
        let failed = |e: &rdkafka::error::KafkaError| format!("commit offsets of `{group}` on `{target}`: {e}");
        self.producer.begin_transaction().map_err(|e| fenced_or(e, failed))?;
        if let Err(e) = raw_admin::send_offsets_to_transaction(&self.producer, group, offsets, timeout) {
            if !e.fatal {
                let _ = self.producer.abort_transaction(timeout);
            }
            let name = e.error.name.as_str();
            let text = match name {
                "GROUP_AUTHORIZATION_FAILED" => kafka::not_authorized(&format!("group {group}"), target, "Read", name),
                "TOPIC_AUTHORIZATION_FAILED" => {
                    kafka::not_authorized(&format!("the topics of group {group}"), target, "Read", name)
                }
                _ => format!("commit offsets of `{group}` on `{target}`: {e}"),
            };
            return Err(if e.is_fenced() { format!("{FENCED}: {text}") } else { text });
        }
        if let Err(e) = self.producer.commit_transaction(timeout) {
            let _ = self.producer.abort_transaction(timeout);
            return Err(fenced_or(e, failed));
        }
        Ok(())
    }
}
