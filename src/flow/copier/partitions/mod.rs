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

mod failures;
mod probing;

use self::probing::seek;

use super::delivery::{Live, Shared};
use super::probe::{Check, Probe, Request};
use crate::config::FlowPlan;
use crate::flow::acks::{AckTable, PartitionAck, SourcePartition, TopicId};
use crate::flow::messages::Assignment;
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
    /// Records dropped by [`Part::stale`] since the partition last started.
    stale: u64,
    pub age: Histogram,
    /// Failures since the partition last copied successfully.
    failures: u32,
    problem: Option<PartitionProblem>,
}

impl Part {
    /// A record at `offset` is below the offset the consumer returns next: a fetch from before the
    /// partition's last seek that librdkafka still handed over (seen under load when the fetcher started
    /// between the group's assignment and its pause). Its offset was copied already or comes again
    /// after the seek: sending it would copy it twice, inside one exactly-once transaction too. Counted;
    /// true only for the first of a start, which the copier logs.
    pub fn stale(&mut self, offset: i64) -> Option<bool> {
        (offset < self.next_fetch).then(|| {
            self.stale += 1;
            self.stale == 1
        })
    }

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

/// A source topic was deleted: its series and its positions go (logged when there was any, so that a
/// deletion told again by a later assignment is quiet).
fn forget_deleted(flow: &str, topic: &str, acks: &AckTable) {
    let had_positions = acks.forget_topic(topic);
    let had_series = METRICS.remove_topic(flow, topic);
    if had_positions || had_series {
        tracing::info!(flow = %flow, topic, "source topic deleted: its positions and metrics are dropped");
    }
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
        for topic in &wanted.deleted {
            if self.topics.contains_key(topic) {
                // Dropped with its last partition (see `drop_topic`).
                self.forget.insert(topic.clone());
            } else {
                // Out of the book already: the copier group revoked the partitions (the consumer saw the
                // topic go) before the topic sync told of the deletion, and nothing would drop it later.
                forget_deleted(&flow, topic, acks);
            }
        }
        for tp in current {
            if !wanted.partitions.contains(&tp) {
                self.stop_copying(&tp, After::Remove);
            }
        }
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
                stale: 0,
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
            forget_deleted(&self.flow, topic, &shared.acks);
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
}

/// Seek `tpl`'s partitions; each with its position and its own result.
type Sought = Vec<(String, i32, Offset, Result<(), rdkafka::error::KafkaError>)>;

#[cfg(test)]
mod tests {
    use super::probing::unseen_gap;
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

    fn part_at(next_fetch: i64) -> Part {
        let acks = AckTable::default();
        Part {
            state: State::Copying,
            ack: acks.slot("t", 0),
            live: None,
            next_fetch,
            started_at: next_fetch,
            one_by_one_until: None,
            held_from: None,
            stale: 0,
            age: prometheus::Histogram::with_opts(prometheus::HistogramOpts::new("age", "age")).expect("histogram"),
            failures: 0,
            problem: None,
        }
    }

    #[test]
    fn a_record_below_the_next_fetch_offset_is_stale_and_the_first_of_a_start_is_named() {
        // Started at 100: a fetch from before the seek hands over 100..102, then the seek's own 100..
        let mut part = part_at(100);
        for offset in 100..103 {
            assert_eq!(part.stale(offset), None, "{offset} is new");
            part.fetched(offset);
        }
        assert_eq!(part.stale(100), Some(true), "the first stale record is logged");
        assert_eq!(part.stale(101), Some(false));
        assert_eq!(part.stale(102), Some(false));
        assert_eq!(part.stale(103), None, "copying goes on from the next offset");
        // A gap forward (a compacted or transactional source) is not stale.
        part.fetched(103);
        assert_eq!(part.stale(110), None);
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
