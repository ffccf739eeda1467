//! Group offset sync: translated offsets committed to target groups that have no active members, never
//! moving a group backwards.
//!
//! **The fence.** A group's offsets are committed inside a transaction of the checkpoint producer
//! (`send_offsets_to_transaction`, as Kafka Connect commits a source task's offsets), whose
//! transactional id is the flow's: a node that took the flow's lease initialises the same id before it
//! reads a target group's offsets (its producer comes with its first group, [`Computer::writer`]), which
//! fences this producer, so an ex-leader that was paused or cut off cannot commit a group's offsets
//! after the new leader read them. The broker checks the producer's epoch on the transaction's first
//! request, before the group sees anything; a fenced commit stops the computer with [`FENCED`], and
//! the supervisor keeps this node's leader duties off. (An empty transaction, which is what the
//! check before the commit used to be, never reaches the broker: librdkafka completes it locally.)
//!
//! **Idle groups only.** ferry commits only to target groups that are Empty or unknown there, as MM2
//! does. The broker refuses a plain commit from outside a group that has members (what MM2 relies on),
//! but takes a transactional one (measured on Kafka 4.3 with a classic group, `tests/integration/leader_fence.rs`),
//! so the check is ferry's own, made again right before each group's transaction: a consumer that joins
//! within those few milliseconds starts from the translated offsets, as if it had joined just after.

use std::collections::HashMap;

use rdkafka::producer::Producer;

use super::{Computer, FENCED, fenced_or, lock};
use crate::kafka;
use crate::metrics::METRICS;
use crate::raw_admin::{self, CommittedOffset, GroupDescription, GroupState};

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
        // The producer first (a no-op once made): its fence comes before the target groups' offsets are
        // read, so no ex-leader commits between that read and this node's commit.
        self.writer()?;
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
            if !is_idle(&d) {
                METRICS.group_offset_syncs.with_label_values(&[&flow, "skipped_active"]).inc();
                continue;
            }
            match self.sync_group(&d.group_id) {
                Ok(Synced::Nothing) => {}
                Ok(Synced::Active) => METRICS.group_offset_syncs.with_label_values(&[&flow, "skipped_active"]).inc(),
                Ok(Synced::Committed(n)) => {
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

    /// Commits the group's checkpoints that are ahead of its target offsets.
    fn sync_group(&self, group: &str) -> Result<Synced, String> {
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
            return Ok(Synced::Nothing);
        }
        // The broker would take the commit even from a group that got members meanwhile: look again
        // right before, which leaves a window of one transaction's round trips.
        let now = self
            .rt
            .block_on(raw_admin::describe_consumer_groups(
                &self.target_admin,
                &[group.to_string()],
                kafka::ADMIN_TIMEOUT,
            ))
            .map_err(|e| e.to_string())?;
        if !now.first().is_some_and(is_idle) {
            return Ok(Synced::Active);
        }
        self.commit_in_transaction(group, &wanted)?;
        Ok(Synced::Committed(wanted.len()))
    }

    /// `offsets` of `group`, committed in a transaction of the checkpoint producer (see the module docs).
    fn commit_in_transaction(&self, group: &str, offsets: &[CommittedOffset]) -> Result<(), String> {
        let target = &self.plan.target.alias;
        let timeout = kafka::ADMIN_TIMEOUT;
        let failed = |e: &rdkafka::error::KafkaError| format!("commit offsets of `{group}` on `{target}`: {e}");
        let producer = self.writer()?;
        producer.begin_transaction().map_err(|e| fenced_or(e, failed))?;
        if let Err(e) = raw_admin::send_offsets_to_transaction(producer, group, offsets, timeout) {
            if !e.fatal {
                let _ = producer.abort_transaction(timeout);
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
        if let Err(e) = producer.commit_transaction(timeout) {
            let _ = producer.abort_transaction(timeout);
            return Err(fenced_or(e, failed));
        }
        Ok(())
    }
}

/// What [`Computer::sync_group`] did.
enum Synced {
    /// The group's target offsets are at or past its checkpoints.
    Nothing,
    /// The group has members on the target now.
    Active,
    /// Committed this many partitions' offsets.
    Committed(usize),
}

/// Empty or unknown on the target, as MM2 requires before it writes a group's offsets.
fn is_idle(d: &GroupDescription) -> bool {
    matches!(d.state, GroupState::Empty | GroupState::Dead) && d.members == 0 && d.error.is_none()
}
