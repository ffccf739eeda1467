//! The copier's partition book: the state of every source partition the copier is asked to copy.
//!
//! ```text
//!            want                  Start                       failure / reset / removed
//!   (new) ─────────► Probing ────────────────► Copying ─────────────────────────────► Draining
//!                      ▲  │ Reset/Lost (fail)                                           │ nothing
//!                      │  └──────────────────► Stopped ◄──────────────────────────────┤ in flight
//!                      │                                                              │
//!                      └────────────── Backoff ◄──────────────────────────────────────┘
//! ```
//!
//! - **Probing**: the probe is asked where the partition may start (its stored position checked against
//!   the log and the topic id). Nothing is fetched yet.
//! - **Anchoring** (between Probing and Copying, for a partition without stored progress under
//!   `start_from = "latest"` or a time): its start is being persisted as its progress; copying begins
//!   once it is.
//! - **Copying**: assigned to the consumer; records flow.
//! - **Draining**: unassigned, waiting until every record sent for it is settled; only then may its
//!   position be moved (a late acknowledgement must not move it past a failed or rewound record).
//! - **Backoff**: failed; probed and assigned again after an exponential backoff (1 s to 60 s).
//! - **Stopped**: `on_source_gap = "fail"` and records were lost or the topic was re-created: stays
//!   until the flow restarts (an operator's decision).
//!
//! Partitions in a transitional state are listed in `attention`, so a loop pass costs nothing for the
//! partitions that just copy.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use prometheus::{Histogram, IntCounter};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use super::Assignment;
use super::delivery::{Live, Shared};
use super::probe::{Check, Probe, Request, Verdict, Watched, WatchedPartition};
use crate::config::{FlowPlan, SourceGapPolicy};
use crate::failpoints;
use crate::flow::acks::{AckTable, PartitionAck, SourcePartition, TopicId};
use crate::flow::list_offsets;
use crate::metrics::METRICS;
use crate::status::PartitionProblem;

/// First retry of a failed partition after this long, doubling up to [`RETRY_MAX`].
const RETRY_INITIAL: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);
/// A partition whose check failed, or whose topic is missing, is checked again after this long.
const RECHECK: Duration = Duration::from_secs(5);
/// Range checks after offset-out-of-range errors are at least this far apart.
const RANGE_CHECK_GAP: Duration = Duration::from_secs(1);
/// How long a seek of the consumer may take.
const SEEK_TIMEOUT: Duration = Duration::from_secs(10);

enum State {
    /// Waiting for the probe: `asked` once the question went out; asked (again) at `at`.
    Probing {
        asked: bool,
        at: Instant,
    },
    /// A partition never copied got its start from `start_from` (`latest`, a time): it copies once that
    /// start is persisted as its progress (see [`Book::verdict`]).
    Anchoring {
        at: i64,
    },
    Copying,
    /// Unassigned; `then` happens once nothing is in flight.
    Draining(After),
    Backoff {
        until: Instant,
    },
    Stopped,
}

enum After {
    /// A delivery failed: probe again after a backoff, then copy from the frozen position.
    Retry,
    /// Copy from `at` (`None`: from the acknowledged position) under `topic_id`; `rewind`: the source
    /// partition was rewound, so the position moves back and the offset-sync rule starts a new run.
    Resume { at: Option<i64>, topic_id: Option<TopicId>, rewind: bool },
    /// Probe again after [`RECHECK`] (the topic went missing).
    Recheck,
    /// Not wanted any more.
    Remove,
    /// Given back to this node while it was draining for removal: copied again, as a new ownership
    /// (probed from the position the copier group's handover left, under the new epoch).
    Reown,
    /// `on_source_gap = "fail"`.
    Stop,
}

/// A partition the copier was asked to copy.
pub struct Part {
    state: State,
    pub ack: Arc<PartitionAck>,
    /// Registered with the delivery thread from the first start until removal.
    live: Option<Arc<Live>>,
    /// The offset the consumer returns next (for range checks after an out-of-range error).
    next_fetch: i64,
    /// Where the current assignment started.
    started_at: i64,
    /// After the target refused a batch: records below this offset are sent one at a time, each
    /// acknowledged before the next is fetched, so that the one record the target refuses is known
    /// exactly and every record before it is copied.
    one_by_one_until: Option<i64>,
    /// Records from this offset on were polled while the flow was held (an operator's pause, a sync
    /// backlog) and not sent: the partition is sought back here when the hold ends.
    held_from: Option<i64>,
    pub age: Histogram,
    /// Failures since the partition last copied successfully.
    failures: u32,
    problem: Option<PartitionProblem>,
}

impl Part {
    /// A record at `offset` was fetched. Returns true if the partition must pause after sending it
    /// (one record at a time, see [`Part::one_by_one_until`]).
    pub fn fetched(&mut self, offset: i64) -> bool {
        self.next_fetch = offset + 1;
        self.one_by_one_until.is_some_and(|until| offset < until)
    }
}

/// A source topic's partitions and its metric children.
struct TopicEntry {
    remote: String,
    parts: HashMap<i32, Part>,
    records: IntCounter,
    bytes: IntCounter,
    latency: Histogram,
    age: Histogram,
}

pub struct Book {
    flow: String,
    /// `metrics_per_partition`: each partition also counts its records in its own series.
    per_partition_metrics: bool,
    topics: HashMap<String, TopicEntry>,
    attention: BTreeSet<SourcePartition>,
    /// Partitions with a problem or copying one record at a time: all that [`Book::tick`] looks at, so
    /// that its cost is theirs, not the flow's width.
    flagged: BTreeSet<SourcePartition>,
    to_assign: Vec<(SourcePartition, i64)>,
    to_unassign: Vec<SourcePartition>,
    /// Topics deleted on the source: forgotten (positions, metric series) once their partitions are gone.
    forget: BTreeSet<String>,
    /// Copying partitions the probe found behind their log's end with nothing in flight: checked for
    /// offsets the consumer passed without handing them over ([`Book::settle_gaps`]).
    gaps: BTreeSet<SourcePartition>,
    copying: usize,
    problems_changed: bool,
    watch_changed: bool,
    last_range_check: Option<Instant>,
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn backoff(failures: u32) -> Duration {
    RETRY_INITIAL.saturating_mul(1u32 << failures.saturating_sub(1).min(16)).min(RETRY_MAX)
}

impl Book {
    pub fn new(plan: &FlowPlan) -> Self {
        Self {
            flow: plan.id.to_string(),
            per_partition_metrics: plan.settings.metrics_per_partition,
            topics: HashMap::new(),
            attention: BTreeSet::new(),
            flagged: BTreeSet::new(),
            to_assign: Vec::new(),
            to_unassign: Vec::new(),
            forget: BTreeSet::new(),
            gaps: BTreeSet::new(),
            copying: 0,
            // The first report replaces whatever an earlier copier lifetime reported.
            problems_changed: true,
            watch_changed: false,
            last_range_check: None,
        }
    }

    pub fn any_copying(&self) -> bool {
        self.copying > 0
    }

    /// The partition if it is copying, with its remote topic's name (per record: two map lookups).
    pub fn copying(&mut self, topic: &str, partition: i32) -> Option<(&str, &mut Part)> {
        let entry = self.topics.get_mut(topic)?;
        let part = entry.parts.get_mut(&partition).filter(|p| matches!(p.state, State::Copying))?;
        Some((entry.remote.as_str(), part))
    }

    fn part(&mut self, tp: &SourcePartition) -> Option<&mut Part> {
        self.topics.get_mut(&tp.0)?.parts.get_mut(&tp.1)
    }

    /// Take the new set of partitions to copy. Returns the remote topics that gained partitions (the
    /// producer's metadata may not know them yet).
    pub fn want(&mut self, plan: &FlowPlan, acks: &AckTable, wanted: Assignment) -> BTreeSet<String> {
        let mut grown = BTreeSet::new();
        let flow = self.flow.clone();
        let current: Vec<SourcePartition> =
            self.topics.iter().flat_map(|(t, e)| e.parts.keys().map(move |p| (t.clone(), *p))).collect();
        for tp in current {
            if !wanted.partitions.contains(&tp) {
                self.stop_copying(&tp, After::Remove);
            }
        }
        self.forget.extend(wanted.deleted.iter().cloned());
        // Only a topic the book already copied can grow; a new one is not in the producer's metadata
        // yet and is looked up on its first record anyway (a refresh per new topic cost the copy thread
        // a blocking metadata request for each of a wide flow's topics at start).
        let had: BTreeSet<String> =
            self.topics.iter().filter(|(_, e)| !e.parts.is_empty()).map(|(t, _)| t.clone()).collect();
        let now = Instant::now();
        for (topic, partition) in wanted.partitions {
            let entry = self.topics.entry(topic.clone()).or_insert_with(|| {
                let labels = [flow.as_str(), topic.as_str()];
                TopicEntry {
                    remote: plan.policy.format_remote_topic(&plan.id.source, &topic),
                    parts: HashMap::new(),
                    records: METRICS.records_copied.with_label_values(&labels),
                    bytes: METRICS.bytes_copied.with_label_values(&labels),
                    latency: METRICS.replication_latency.with_label_values(&labels),
                    age: METRICS.record_age.with_label_values(&labels),
                }
            });
            if let Some(part) = entry.parts.get_mut(&partition) {
                // Revoked and given back before its drain ended: copy it again once drained, instead of
                // dropping it from the book while the consumer has it assigned.
                if matches!(part.state, State::Draining(After::Remove)) {
                    part.state = State::Draining(After::Reown);
                    self.attention.insert((topic, partition));
                }
                continue;
            }
            if had.contains(&topic) {
                grown.insert(entry.remote.clone());
            }
            let part = Part {
                state: State::Probing { asked: false, at: now },
                ack: acks.slot(&topic, partition),
                live: None,
                next_fetch: 0,
                started_at: 0,
                one_by_one_until: None,
                held_from: None,
                age: entry.age.clone(),
                failures: 0,
                problem: None,
            };
            entry.parts.insert(partition, part);
            self.forget.remove(&topic);
            self.attention.insert((topic, partition));
        }
        self.watch_changed = true;
        grown
    }

    /// Move a partition out of copying (or out of the book): unassign it and drain first when needed.
    fn stop_copying(&mut self, tp: &SourcePartition, then: After) {
        let Some(part) = self.part(tp) else { return };
        match part.state {
            State::Copying => {
                part.state = State::Draining(then);
                self.copying -= 1;
                self.to_unassign.push(tp.clone());
            }
            // A removal is not undone by a failure or a restart of the partition meanwhile (the group
            // gave it to another node), and a re-owned partition is probed afresh anyway.
            State::Draining(After::Remove | After::Reown) if !matches!(then, After::Remove) => {}
            State::Draining(_) => part.state = State::Draining(then),
            State::Probing { .. } | State::Anchoring { .. } | State::Backoff { .. } | State::Stopped => {
                // Nothing in flight: the outcome applies at the next advance.
                part.state = State::Draining(then);
            }
        }
        self.attention.insert(tp.clone());
        self.watch_changed = true;
    }

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
    fn start(&mut self, shared: &Shared, tp: &SourcePartition, at: i64) {
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
        part.held_from = None;
        self.copying += 1;
        self.to_assign.push((tp.clone(), at));
        self.attention.remove(tp);
        self.watch_changed = true;
    }

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

    fn set_problem(
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

    /// Move every partition that needs attention along: ask the probe, finish drains, end backoffs.
    pub fn advance(&mut self, shared: &Shared, probe: &Probe, now: Instant) {
        if self.attention.is_empty() {
            return;
        }
        let mut checks = Vec::new();
        let mut done = Vec::new();
        let mut drained = Vec::new();
        let mut anchored = Vec::new();
        for tp in &self.attention {
            let Some(part) = self.topics.get_mut(&tp.0).and_then(|e| e.parts.get_mut(&tp.1)) else {
                done.push(tp.clone());
                continue;
            };
            match &part.state {
                State::Probing { asked: false, at } if *at <= now => {
                    checks.push(Check { tp: tp.clone(), position: part.ack.next(), topic_id: part.ack.topic_id() });
                    part.state = State::Probing { asked: true, at: *at };
                    done.push(tp.clone());
                }
                State::Backoff { until } if *until <= now => {
                    part.state = State::Probing { asked: false, at: now };
                }
                State::Draining(_) if part.ack.in_flight() <= 0 => drained.push(tp.clone()),
                State::Anchoring { at } if part.ack.persisted() == Some(*at) => anchored.push((tp.clone(), *at)),
                _ => {}
            }
        }
        for (tp, at) in anchored {
            self.start(shared, &tp, at);
        }
        for tp in done {
            self.attention.remove(&tp);
        }
        for tp in drained {
            self.drained(shared, &tp, now);
        }
        if !checks.is_empty() {
            probe.send(Request::Check(checks));
        }
    }

    /// Nothing of the partition is in flight any more: apply what its drain was for.
    fn drained(&mut self, shared: &Shared, tp: &SourcePartition, now: Instant) {
        let Some(entry) = self.topics.get_mut(&tp.0) else { return };
        let Some(part) = entry.parts.get_mut(&tp.1) else { return };
        let State::Draining(then) = std::mem::replace(&mut part.state, State::Stopped) else { return };
        match then {
            After::Retry => {
                part.ack.clear_failure();
                part.state = State::Backoff { until: now + backoff(part.failures) };
            }
            After::Recheck => {
                part.ack.clear_failure();
                part.state = State::Backoff { until: now + RECHECK };
            }
            After::Resume { at, topic_id, rewind } => {
                part.ack.clear_failure();
                if let Some(id) = topic_id {
                    part.ack.set_topic_id(Some(id));
                }
                let at = match at {
                    Some(at) if rewind || part.ack.next().is_none_or(|n| n <= at) => {
                        if rewind && let Some(live) = &part.live {
                            live.rewind_rule();
                        }
                        part.ack.rewind(&shared.acks, at);
                        at
                    }
                    // Never skip records that were sent but not acknowledged.
                    Some(at) => part.ack.next().map_or(at, |n| n.min(at)),
                    None => part.ack.next().unwrap_or(part.started_at),
                };
                self.start(shared, tp, at);
                return;
            }
            After::Stop => {
                part.ack.clear_failure();
                part.state = State::Stopped;
            }
            After::Reown => {
                // A new ownership gets a new registration (its offset-sync rule carries the new epoch);
                // nothing of the old one is in flight any more.
                if part.live.take().is_some() {
                    shared.remove(&entry.remote, tp.1);
                }
                part.ack.clear_failure();
                part.state = State::Probing { asked: false, at: now };
                self.attention.insert(tp.clone());
                self.watch_changed = true;
                tracing::info!(flow = %self.flow, topic = %tp.0, partition = tp.1, "partition given back while it drained; copying it again");
                return;
            }
            After::Remove => {
                if part.live.is_some() {
                    shared.remove(&entry.remote, tp.1);
                }
                // A failure while it drained (or a late report of a revoked delivery) froze the slot:
                // should the group give the partition back, it is copied again from that position.
                part.ack.clear_failure();
                let had_problem = part.problem.is_some();
                entry.parts.remove(&tp.1);
                self.problems_changed |= had_problem;
                if entry.parts.is_empty() {
                    self.drop_topic(&tp.0, shared);
                }
            }
        }
        let waiting = self.part(tp).is_some_and(|p| matches!(p.state, State::Backoff { .. }));
        if waiting {
            self.attention.insert(tp.clone());
        } else {
            self.attention.remove(tp);
        }
    }

    /// The topic has no partition left in the book: drop its lag gauges (they would stay frozen), and
    /// if it was deleted on the source every series and its positions. A topic merely revoked (a
    /// rebalance, often handing the same partitions straight back) keeps its counters and histograms:
    /// dropping them would lose counts, a partition failure just counted among them.
    fn drop_topic(&mut self, topic: &str, shared: &Shared) {
        self.topics.remove(topic);
        if !self.forget.contains(topic) {
            METRICS.remove_topic_gauges(&self.flow, topic);
        }
        if self.forget.remove(topic) {
            METRICS.remove_topic(&self.flow, topic);
            shared.acks.forget_topic(topic);
            tracing::info!(flow = %self.flow, topic, "source topic deleted: its positions and metrics are dropped");
        }
    }

    /// Apply this pass's changes to the consumer. Partitions are assigned to it by the copier group (and
    /// kept paused until the book starts them): starting one is a seek and a resume, stopping one a pause.
    /// With `held` (an operator pause, a sync backlog) started partitions are positioned but stay paused.
    pub fn apply(
        &mut self,
        consumer: &BaseConsumer<impl rdkafka::consumer::ConsumerContext>,
        held: bool,
    ) -> Result<(), String> {
        if !self.to_unassign.is_empty() {
            let mut tpl = TopicPartitionList::new();
            for (t, p) in self.to_unassign.drain(..) {
                tpl.add_partition(&t, p);
            }
            consumer.pause(&tpl).map_err(|e| format!("pause source partitions: {e}"))?;
        }
        if !self.to_assign.is_empty() {
            let mut tpl = TopicPartitionList::new();
            let n = self.to_assign.len();
            for ((t, p), at) in self.to_assign.drain(..) {
                tpl.add_partition_offset(&t, p, Offset::Offset(at)).map_err(|e| format!("start {t}-{p}: {e}"))?;
            }
            let sought = seek(consumer, tpl)?;
            let mut started = TopicPartitionList::new();
            let assigned = consumer.assignment().map_err(|e| format!("source assignment: {e}"))?;
            for (t, p, at, result) in sought {
                let (t, p) = (t.as_str(), p);
                match result {
                    Ok(()) => {
                        started.add_partition(t, p);
                    }
                    // librdkafka seeks only a partition that is fetching. One whose fetch stopped (an
                    // out-of-range position under auto.offset.reset=error) or has not started yet (just
                    // assigned by the group) is assigned again at the position; one the group took away
                    // meanwhile (a deleted topic, a rebalance) is left alone: its revocation is stashed
                    // and removes it from the book next.
                    Err(rdkafka::error::KafkaError::OffsetFetch(rdkafka::types::RDKafkaErrorCode::State)) => {
                        if assigned.find_partition(t, p).is_none() {
                            tracing::debug!(flow = %self.flow, topic = t, partition = p, "not started: no longer assigned");
                            continue;
                        }
                        let mut one = TopicPartitionList::new();
                        one.add_partition(t, p);
                        consumer.incremental_unassign(&one).map_err(|e| format!("restart {t}-{p}: {e}"))?;
                        one.set_all_offsets(at).map_err(|e| format!("restart {t}-{p}: {e}"))?;
                        consumer.incremental_assign(&one).map_err(|e| format!("restart {t}-{p}: {e}"))?;
                        // The pause of the first assignment sticks to the partition through an unassign:
                        // resume it with the others, or it would never fetch again.
                        if !held {
                            started.add_partition(t, p);
                        }
                        tracing::info!(flow = %self.flow, topic = t, partition = p, offset = ?at, "partition not seekable; assigned again at its position");
                    }
                    Err(err) => return Err(format!("seek {t}-{p}: {err}")),
                }
            }
            if !held && started.count() > 0 {
                consumer.resume(&started).map_err(|e| format!("resume source partitions: {e}"))?;
            }
            tracing::info!(flow = %self.flow, started = n, copying = self.copying, "copier partitions started");
        }
        Ok(())
    }

    /// The partitions copying now.
    pub fn copying_partitions(&self) -> TopicPartitionList {
        let mut tpl = TopicPartitionList::new();
        for (t, e) in &self.topics {
            for (p, part) in &e.parts {
                if matches!(part.state, State::Copying) {
                    tpl.add_partition(t, *p);
                }
            }
        }
        tpl
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

/// Where a copying partition's position may move without copying anything: to the consumer's
/// `position` when it is past `fetched` (the offset after the last record the consumer handed over) and
/// everything handed over is copied (`copied == fetched`, nothing in flight, nothing held back to be
/// fetched again). The offsets in between were never handed over: transaction markers, and aborted
/// records when reading `read_committed`.
fn unseen_gap(copied: i64, fetched: i64, in_flight: i64, held: bool, position: Option<i64>) -> Option<i64> {
    let position = position?;
    (copied == fetched && in_flight == 0 && !held && position > fetched).then_some(position)
}

/// Seek `tpl`'s partitions; each with its position and its own result.
type Sought = Vec<(String, i32, Offset, Result<(), rdkafka::error::KafkaError>)>;

/// Seek `tpl`'s partitions, in calls of at most [`list_offsets::CHUNK`]: librdkafka matches each
/// partition's seek result to the list with a linear search, quadratic over thousands of partitions.
fn seek(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_passed_without_a_record_count_as_copied_only_when_everything_handed_over_is() {
        // Copied up to 10 (next 10), fetched up to 10; the consumer passed a commit marker at 10.
        assert_eq!(unseen_gap(10, 10, 0, false, Some(11)), Some(11));
        // ... or an aborted transaction's 5 records and its marker (read_committed).
        assert_eq!(unseen_gap(10, 10, 0, false, Some(16)), Some(16));
        // Nothing passed: an open transaction the read_committed consumer waits before is lag.
        assert_eq!(unseen_gap(10, 10, 0, false, Some(10)), None);
        // No position since the last seek (or the assignment).
        assert_eq!(unseen_gap(10, 10, 0, false, None), None);
        // Records fetched and not acknowledged yet (or refused: the position froze before them).
        assert_eq!(unseen_gap(8, 10, 2, false, Some(11)), None);
        assert_eq!(unseen_gap(8, 10, 0, false, Some(11)), None);
        // Acknowledged, but the partition still counts a record in flight.
        assert_eq!(unseen_gap(10, 10, 1, false, Some(11)), None);
        // Records polled while the flow was held: not sent, to be fetched again.
        assert_eq!(unseen_gap(10, 10, 0, true, Some(14)), None);
    }

    #[test]
    fn retries_back_off_exponentially_up_to_a_minute() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(4), Duration::from_secs(8));
        assert_eq!(backoff(7), Duration::from_secs(60));
        assert_eq!(backoff(40), Duration::from_secs(60));
    }
}
