//! Where a partition may copy from: the probe's verdicts (start, reset, records lost, topic re-created),
//! the range checks of copying partitions, and the gap between what was copied and the source's end.

use std::sync::Arc;
use std::time::Instant;

use rdkafka::TopicPartitionList;
use rdkafka::consumer::{BaseConsumer, Consumer};

use super::super::delivery::{Live, Shared};
use super::super::probe::{Check, Probe, Request, Verdict, Watched, WatchedPartition};
use super::*;
use crate::config::{FlowPlan, SourceGapPolicy};
use crate::failpoints;
use crate::flow::acks::{AckTable, SourcePartition};
use crate::flow::list_offsets;
use crate::metrics::METRICS;

impl Book {
    /// The probe answered for one partition.
    pub fn verdict(&mut self, plan: &FlowPlan, shared: &Shared, tp: SourcePartition, verdict: Verdict) {
        let flow = self.flow.clone();
        let policy = plan.settings.on_source_gap;
        let Some(part) = self.part(&tp) else { return };
        let probing = matches!(part.state, State::Probing { .. });
        if !probing && !matches!(part.state, State::Copying) {
            return; // a stale answer: the partition moved on meanwhile
        }
        let (topic, partition) = (tp.0.as_str(), tp.1);
        let position = part.ack.next();
        match verdict {
            Verdict::Start { at, topic_id } => {
                if probing {
                    if topic_id.is_some() {
                        part.ack.set_topic_id(topic_id);
                    }
                    self.start(shared, &tp, at);
                }
            }
            // Derived from `start_from`, the start must not move again should ferry restart before it
            // copied (or persisted) anything: `latest` re-derived later is a later end, and the records
            // written in between would be skipped. So the start becomes the partition's stored progress
            // first, and copying begins only once the progress topic acknowledged it. A crash before that
            // leaves no progress: the restart derives its start afresh, and nothing was copied from the
            // first one. Offset syncs need nothing special: the first acknowledged record (at the start)
            // publishes the first sync of the lifetime, mapping the start offset.
            Verdict::Fresh { at, topic_id } => {
                if probing {
                    if topic_id.is_some() {
                        part.ack.set_topic_id(topic_id);
                    }
                    part.ack.rewind(&shared.acks, at);
                    part.state = State::Anchoring { at };
                    tracing::info!(flow = %flow, topic, partition, offset = at, start_from = ?plan.settings.start_from, "no stored progress: starting where start_from says, once the start is persisted");
                    self.attention.insert(tp);
                }
            }
            Verdict::Reset { to, topic_id, why } => {
                METRICS.source_resets.with_label_values(&[&flow, topic]).inc();
                let then = match policy {
                    SourceGapPolicy::Skip => {
                        tracing::warn!(flow = %flow, topic, partition, from = ?position, to, "source partition reset: {why}; copying it again from offset {to}");
                        After::Resume { at: Some(to), topic_id, rewind: true }
                    }
                    SourceGapPolicy::Fail => {
                        let reason = format!("{why} (on_source_gap = \"fail\": the partition is stopped)");
                        tracing::error!(flow = %flow, topic, partition, "source partition reset: {reason}");
                        self.set_problem(&tp, None, None, reason, true);
                        After::Stop
                    }
                };
                self.stop_copying(&tp, then);
            }
            Verdict::Lost { from, to, topic_id } => {
                METRICS.source_gap_records.with_label_values(&[&flow, topic]).inc_by((to - from).max(0) as u64);
                let what = format!("offsets {from}..{to} ({} records) were deleted before they were copied", to - from);
                let then = match policy {
                    SourceGapPolicy::Skip => {
                        tracing::error!(flow = %flow, topic, partition, "records lost on the source {topic}-{partition}: {what}; skipping (on_source_gap = \"skip\")");
                        After::Resume { at: Some(to), topic_id, rewind: false }
                    }
                    SourceGapPolicy::Fail => {
                        let reason = format!(
                            "records lost on the source {topic}-{partition}: {what} (on_source_gap = \"fail\")"
                        );
                        tracing::error!(flow = %flow, topic, partition, "{reason}; the partition is stopped");
                        self.set_problem(&tp, Some(from), None, reason, true);
                        After::Stop
                    }
                };
                self.stop_copying(&tp, then);
            }
            Verdict::Missing => {
                tracing::info!(flow = %flow, topic, partition, "source topic not found (deleted?); checking again later");
                self.stop_copying(&tp, After::Recheck);
            }
            Verdict::Unknown(e) => {
                if probing {
                    tracing::warn!(flow = %flow, topic, partition, error = %e, "cannot check where to copy the partition from; trying again");
                    part.state = State::Backoff { until: Instant::now() + RECHECK };
                    self.attention.insert(tp);
                }
            }
            Verdict::Behind => {
                if !probing {
                    self.gaps.insert(tp);
                }
            }
        }
    }

    /// The partitions the probe found behind the end of their logs with nothing in flight: where the
    /// consumer's position passed offsets it never handed over, and every record it did hand over is
    /// copied, those offsets hold nothing to copy. They are transaction markers (a commit's or an
    /// abort's, which no consumer is handed) and, reading `read_committed`, the records of aborted
    /// transactions; they count as copied, so a transactional source's lag reaches 0 once every record
    /// is copied. Real lag stays: a `read_committed` consumer stops before a transaction still open, and
    /// records fetched but not yet acknowledged (or held back) leave the position where it is.
    pub fn settle_gaps(
        &mut self,
        consumer: &BaseConsumer<impl rdkafka::consumer::ConsumerContext>,
        acks: &Arc<AckTable>,
    ) {
        // A partition about to be sought has a position from before the seek: asked after the seek.
        if self.gaps.is_empty() || !self.to_assign.is_empty() {
            return;
        }
        let asked: Vec<SourcePartition> = std::mem::take(&mut self.gaps).into_iter().collect();
        let flow = self.flow.clone();
        for (topic, partition, position) in crate::raw_admin::consumer_positions(consumer, &asked) {
            let Some(part) = self.topics.get_mut(&topic).and_then(|e| e.parts.get_mut(&partition)) else { continue };
            if !matches!(part.state, State::Copying) {
                continue;
            }
            let copied = part.ack.next().unwrap_or(part.started_at);
            let unseen = unseen_gap(copied, part.next_fetch, part.ack.in_flight(), part.held_from.is_some(), position);
            if let Some(to) = unseen {
                tracing::debug!(flow = %flow, topic, partition, from = copied, to, "offsets the consumer passed without handing them over (transaction markers) count as copied");
                part.ack.skipped(acks, to - 1);
                part.next_fetch = to;
            }
        }
    }

    /// Assign a probed partition at `at`.
    pub(super) fn start(&mut self, shared: &Shared, tp: &SourcePartition, at: i64) {
        let Some(entry) = self.topics.get_mut(&tp.0) else { return };
        let Some(part) = entry.parts.get_mut(&tp.1) else { return };
        if part.live.is_none() {
            let partition_records = self
                .per_partition_metrics
                .then(|| METRICS.partition_records_copied.with_label_values(&[&self.flow, &tp.0, &tp.1.to_string()]));
            let live = Arc::new(Live::new(
                part.ack.clone(),
                tp.0 == crate::policy::HEARTBEATS_TOPIC,
                entry.records.clone(),
                entry.bytes.clone(),
                entry.latency.clone(),
                partition_records,
            ));
            shared.insert(&entry.remote, tp.1, live.clone());
            part.live = Some(live);
            // The previous owner's last position, which it may not have published (it crashed): as a
            // sync of its own sequence, translation stays exact up to it.
            if let Some(bridge) = part.ack.bridge().filter(|b| b.upstream + 1 == at) {
                shared.publish_handover(bridge.named(&tp.0, tp.1));
            }
        }
        part.state = State::Copying;
        part.next_fetch = at;
        part.started_at = at;
        part.stale = 0;
        part.held_from = None;
        self.copying += 1;
        self.to_assign.push((tp.clone(), at));
        self.attention.remove(tp);
        self.watch_changed = true;
    }

    /// After an offset-out-of-range error: ask the probe about every copied partition's fetch position.
    pub fn range_check(&mut self, probe: &Probe) {
        if self.last_range_check.is_some_and(|t| t.elapsed() < RANGE_CHECK_GAP) {
            return;
        }
        self.last_range_check = Some(Instant::now());
        let checks: Vec<Check> = self
            .topics
            .iter()
            .flat_map(|(t, e)| {
                e.parts.iter().filter(|(_, p)| matches!(p.state, State::Copying)).map(move |(p, part)| Check {
                    tp: (t.clone(), *p),
                    position: Some(part.next_fetch),
                    topic_id: part.ack.topic_id(),
                })
            })
            .collect();
        probe.send(Request::RangeCheck(checks));
    }

    /// Periodic housekeeping: clear the problems of partitions that copy again, tell the probe which
    /// topics to watch.
    pub fn tick(&mut self, probe: &Probe) {
        let topics = &mut self.topics;
        let problems_changed = &mut self.problems_changed;
        self.flagged.retain(|(topic, partition)| {
            let Some(part) = topics.get_mut(topic).and_then(|e| e.parts.get_mut(partition)) else { return false };
            if part.one_by_one_until.is_some_and(|until| part.ack.next().is_some_and(|n| n >= until)) {
                part.one_by_one_until = None;
            }
            if let Some(problem) = &part.problem {
                let recovered = matches!(part.state, State::Copying)
                    && problem.offset.is_none_or(|o| part.ack.next().is_some_and(|n| n > o));
                if recovered {
                    part.problem = None;
                    part.failures = 0;
                    *problems_changed = true;
                }
            }
            part.problem.is_some() || part.one_by_one_until.is_some()
        });
        if self.watch_changed {
            self.watch_changed = false;
            let watched = self
                .topics
                .iter()
                .map(|(t, e)| {
                    let partitions = e
                        .parts
                        .iter()
                        .map(|(p, part)| WatchedPartition {
                            partition: *p,
                            ack: part.ack.clone(),
                            start: part.started_at,
                            copying: matches!(part.state, State::Copying),
                        })
                        .collect();
                    let id = e.parts.values().find_map(|p| p.ack.topic_id());
                    (t.clone(), Watched { id, partitions })
                })
                .collect();
            probe.send(Request::Watch(watched));
        }
    }
}

/// Where a copying partition's position may move without copying anything: to the consumer's
/// `position` when it is past `fetched` (the offset after the last record the consumer handed over) and
/// everything handed over is copied (`copied == fetched`, nothing in flight, nothing held back to be
/// fetched again). The offsets in between were never handed over: transaction markers, and aborted
/// records when reading `read_committed`.
pub(super) fn unseen_gap(copied: i64, fetched: i64, in_flight: i64, held: bool, position: Option<i64>) -> Option<i64> {
    let position = position?;
    (copied == fetched && in_flight == 0 && !held && position > fetched).then_some(position)
}

/// Seek `tpl`'s partitions, in calls of at most [`list_offsets::CHUNK`]: librdkafka matches each
/// partition's seek result to the list with a linear search, quadratic over thousands of partitions.
pub(super) fn seek(
    consumer: &BaseConsumer<impl rdkafka::consumer::ConsumerContext>,
    tpl: TopicPartitionList,
) -> Result<Sought, String> {
    let each = |tpl: &TopicPartitionList, refused: bool| -> Sought {
        let state = rdkafka::error::KafkaError::OffsetFetch(rdkafka::types::RDKafkaErrorCode::State);
        tpl.elements()
            .iter()
            .map(|e| {
                let result = if refused { Err(state.clone()) } else { e.error() };
                (e.topic().to_string(), e.partition(), e.offset(), result)
            })
            .collect()
    };
    if failpoints::check(failpoints::COPIER_SEEK).is_err() {
        return Ok(each(&tpl, true));
    }
    let mut out = Vec::with_capacity(tpl.count());
    for chunk in tpl.elements().chunks(list_offsets::CHUNK) {
        let mut part = TopicPartitionList::with_capacity(chunk.len());
        for e in chunk {
            part.add_partition_offset(e.topic(), e.partition(), e.offset())
                .map_err(|err| format!("seek {}-{}: {err}", e.topic(), e.partition()))?;
        }
        let sought =
            consumer.seek_partitions(part, SEEK_TIMEOUT).map_err(|e| format!("seek source partitions: {e}"))?;
        out.extend(each(&sought, false));
    }
    Ok(out)
}
