//! What goes wrong with a partition while it copies: a record the target refused (the partition held
//! and retried, or rolled back in an exactly-once flow), deliveries revoked, and the problems `/flows`
//! shows.

use std::sync::Arc;

use super::*;
use crate::flow::acks::{PartitionAck, SourcePartition};
use crate::metrics::METRICS;
use crate::status::PartitionProblem;

impl Book {
    /// A delivery of this partition failed: stop fetching it, drain, retry after a backoff. Returns the
    /// remote topic when the producer did not know the partition (its metadata needs a refresh).
    pub fn delivery_failed(&mut self, flow: &str, slot: &Arc<PartitionAck>) -> Option<String> {
        let tp = (slot.topic.to_string(), slot.partition);
        let failure = slot.failure()?;
        let stale = self.topics.get(&tp.0).filter(|_| failure.unknown_partition).map(|e| e.remote.clone());
        let part = self.part(&tp)?;
        part.failures += 1;
        let failures = part.failures;
        METRICS.partition_failures.with_label_values(&[flow, &tp.0]).inc();
        // The target refuses whole batches: unless records already went one at a time, the failure
        // names the batch's first record, not necessarily the culprit.
        let exact = part.one_by_one_until.is_some_and(|until| failure.offset < until);
        if failure.permanent {
            let until = part.one_by_one_until.unwrap_or(0).max(part.next_fetch);
            part.one_by_one_until = Some(until);
        }
        let kind = match (failure.permanent, exact) {
            (true, true) => "the target refused the record",
            (true, false) => "the target refused a batch (retrying record by record)",
            (false, _) => "delivery failed",
        };
        tracing::warn!(
            flow, topic = %tp.0, partition = tp.1, offset = failure.offset, size = failure.size, error = %failure.error,
            retry_in_s = backoff(failures).as_secs(), "{kind}; the partition is retried, the others keep copying"
        );
        let (reason, size) = if exact || !failure.permanent {
            (
                format!("{kind} at offset {} ({} bytes): {}", failure.offset, failure.size, failure.error),
                Some(failure.size),
            )
        } else {
            (format!("{kind} from offset {}: {}", failure.offset, failure.error), None)
        };
        self.set_problem(&tp, Some(failure.offset), size, reason, false);
        self.stop_copying(&tp, After::Retry);
        stale
    }

    /// Exactly-once: the open transaction was aborted while `tp` had records in it: it copies again from
    /// its committed position (or where it started, if nothing is committed), with a new run of offset
    /// syncs. A partition being held for a failure is left to its retry.
    pub fn roll_back(&mut self, tp: &SourcePartition) {
        let Some(part) = self.part(tp) else { return };
        if let Some(live) = &part.live {
            live.rewind_rule();
        }
        if matches!(part.state, State::Draining(After::Retry) | State::Backoff { .. }) {
            return;
        }
        let at = part.ack.persisted().unwrap_or(part.started_at);
        self.stop_copying(tp, After::Resume { at: Some(at), topic_id: None, rewind: true });
    }

    /// The copier group took these partitions while records of them may still be queued or in flight
    /// (the handover flush gave up, or the assignment was lost): their deliveries stop counting at once.
    pub fn revoke_deliveries(&mut self, tps: &[SourcePartition]) {
        for tp in tps {
            if let Some(live) = self.part(tp).and_then(|p| p.live.as_ref()) {
                live.revoke();
            }
        }
    }

    /// Every partition's deliveries stop counting (the copier lifetime ends with records unreported).
    pub fn revoke_every_delivery(&mut self) {
        for topic in self.topics.values() {
            for live in topic.parts.values().filter_map(|p| p.live.as_ref()) {
                live.revoke();
            }
        }
    }

    /// A record at `offset` was polled while the flow is held: it is not sent now, and the partition
    /// is sought back to the first such record when the hold ends.
    pub fn hold_back(&mut self, topic: &str, partition: i32, offset: i64) {
        if let Some((_, part)) = self.copying(topic, partition) {
            part.held_from = Some(part.held_from.map_or(offset, |o| o.min(offset)));
        }
    }

    /// The hold ended: seek every partition that had records held back to the first of them (applied
    /// with the next [`Book::apply`]).
    pub fn release_held(&mut self) {
        for (topic, entry) in &mut self.topics {
            for (partition, part) in &mut entry.parts {
                if let Some(at) = part.held_from.take()
                    && matches!(part.state, State::Copying)
                {
                    part.next_fetch = at;
                    self.to_assign.push(((topic.clone(), *partition), at));
                }
            }
        }
    }

    /// The partition sends one record at a time: stop fetching until the record just sent is settled,
    /// then continue from the acknowledged position.
    pub fn pause_after_send(&mut self, topic: &str, partition: i32) {
        let tp = (topic.to_string(), partition);
        self.stop_copying(&tp, After::Resume { at: None, topic_id: None, rewind: false });
    }

    pub(super) fn set_problem(
        &mut self,
        tp: &SourcePartition,
        offset: Option<i64>,
        size: Option<usize>,
        reason: String,
        stopped: bool,
    ) {
        let Some(part) = self.part(tp) else { return };
        part.problem = Some(PartitionProblem {
            topic: tp.0.clone(),
            partition: tp.1,
            offset,
            size,
            reason,
            state: if stopped { "stopped" } else { "retrying" }.to_string(),
            failures: part.failures,
            since: now_secs(),
        });
        self.flagged.insert(tp.clone());
        self.problems_changed = true;
    }

    /// Every partition's problem, if the list changed since the last call.
    pub fn take_problems_if_changed(&mut self) -> Option<Vec<PartitionProblem>> {
        if !std::mem::take(&mut self.problems_changed) {
            return None;
        }
        // Only flagged partitions can have a problem.
        let mut problems: Vec<PartitionProblem> =
            self.flagged.iter().filter_map(|(t, p)| self.topics.get(t)?.parts.get(p)?.problem.clone()).collect();
        problems.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Some(problems)
    }
}
