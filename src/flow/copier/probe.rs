//! The copier's source probe: answers, off the copy thread, where each source partition can be copied
//! from, and notices source topics that were deleted and created again. Its thread also takes the
//! foreign-record look at the remote partitions on the target ([`super::foreign`]), so that a flow
//! needs no thread of its own for it.
//!
//! Its questions cost broker round trips (topic ids, log start and end offsets), so they never run on
//! the copy thread: the copy loop sends a [`Request`] and goes on copying the other partitions; the
//! answers come back as [`Report`]s it picks up between batches. A failed query is an
//! [`Verdict::Unknown`], asked again later, never an error of the copier.
//!
//! What is checked, and when:
//! - before a partition is assigned: is the stored position still inside the partition's log, and is
//!   the topic the one the position was stored for (its Kafka topic id)?
//! - after librdkafka reported an offset out of range (the consumer runs with `auto.offset.reset =
//!   error`, so a position that fell off the log is never silently reset): the same, at the fetch
//!   positions of the copied partitions;
//! - every [`ID_CHECK_INTERVAL`], and at once when the consumer reports an unknown topic: have the
//!   copied topics kept their ids? A topic re-created under the same name is copied again from its
//!   start, even when it already holds more records than the old one did.
//!
//! A partition without a stored position starts at the log start, or, with `start_from = "latest"` or a
//! time, at the end the copier's own isolation level sees (the last stable offset when reading
//! `read_committed`) or at the first record at or after the time ([`Verdict::Fresh`]).
//!
//! Besides, the source lag is measured every [`LAG_INTERVAL`]: the high watermark minus the next offset
//! to copy. A partition behind with nothing in flight is reported ([`Verdict::Behind`]): its gap may be
//! records no consumer is ever handed (a transaction's commit or abort marker, and the aborted records
//! themselves when reading `read_committed`), which the copy loop then counts as copied once its consumer
//! passed them (`Book::settle_gaps`), so that a transactional source's lag reaches 0 once every record is
//! copied. Each round of queries is counted in
//! `ferry_probe_queries_total{flow, kind, result}` (kind: `assign`, `range`, `ids`, `lag`), so that an
//! operator (and a test) sees what the probe costs the source and whether its questions fail.
//!
//! "The end of the log" is the **high watermark**, not the last stable offset: the probe's clients read
//! `read_uncommitted` (the copier itself reads `read_committed`). A position between the two is inside
//! the log: MM2 reads uncommitted records, so the position it stored sits past the last stable offset
//! while a source transaction is open (Flink's exactly-once sinks hold one open for a checkpoint
//! interval). Copying continues from there once the transaction ends: the copier's `read_committed`
//! fetch at such a position is valid and returns nothing until then; records of a transaction that
//! commits are copied from the position on (MM2 already copied those below it); an abort loses nothing.
//!
//! The foreign-record look asks the *target*, every [`super::foreign::CHECK_INTERVAL`], in calls of at
//! most 500 partitions with a short timeout, one call per turn of the loop: a check of partitions being
//! assigned waits for one such call at most, never for a whole look or a target that is away. The other
//! way round, the look waits for the source's rounds: while the source does not answer, a lag round takes
//! up to three [`QUERY_TIMEOUT`]s and the look comes late (about once a minute instead of every 5 s). It
//! counts the same records then: a partition keeps its baseline until a look gets its answer.
//!
//! Why gaps in the offsets never need a query: a fetch at an offset below the log start fails with
//! OFFSET_OUT_OF_RANGE, so records deleted before they were copied always surface as that error. A gap
//! inside a fetched range is compaction, a transaction marker or an aborted transaction: not a loss.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;

use super::foreign::{self, ForeignLook};
use crate::clients::{Admin, FlowConnections, Isolation, MetaConsumer};
use crate::config::{FlowPlan, StartFrom};
use crate::flow::acks::{SourcePartition, TopicId};
use crate::flow::list_offsets::{self, Answer};
use crate::raw_admin;

/// How often the ids of the copied topics are checked.
pub const ID_CHECK_INTERVAL: Duration = Duration::from_secs(10);
/// How often the source lag (`ferry_source_lag_records`) is measured.
pub const LAG_INTERVAL: Duration = Duration::from_secs(5);
/// Ids are not checked more often than this, whatever asks for it.
const ID_CHECK_MIN_GAP: Duration = Duration::from_secs(2);
/// How long one probe query may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(15);

/// A partition to check: where the copier would continue, and the topic id that position belongs to.
#[derive(Clone, Debug)]
pub struct Check {
    pub tp: SourcePartition,
    pub position: Option<i64>,
    pub topic_id: Option<TopicId>,
}

/// A topic the copier is asked to copy.
pub struct Watched {
    /// The id the topic is copied under, if known.
    pub id: Option<TopicId>,
    pub partitions: Vec<WatchedPartition>,
}

pub struct WatchedPartition {
    pub partition: i32,
    pub ack: Arc<crate::flow::acks::PartitionAck>,
    /// Where the partition's current assignment started (its lag before the first acknowledgement).
    pub start: i64,
    pub copying: bool,
}

pub enum Request {
    /// Where can these partitions be copied from? (They are being assigned.)
    Check(Vec<Check>),
    /// The consumer reported an offset out of range: are these copied partitions' fetch positions still
    /// inside their logs? Answered like [`Request::Check`], counted apart.
    RangeCheck(Vec<Check>),
    /// Every topic in the copier's book (replaces the previous set): ids are checked for the copying
    /// partitions, lag is measured for all.
    Watch(HashMap<String, Watched>),
    /// Check the watched topics' ids now.
    CheckIds,
}

/// The answer for one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Copy from `at`: the position, or the log start for a partition never copied.
    Start { at: i64, topic_id: Option<TopicId> },
    /// A partition never copied starts at `at`, derived from `start_from` (`latest` or a time): the
    /// copier stores it as the partition's progress before it copies from there.
    Fresh { at: i64, topic_id: Option<TopicId> },
    /// The partition is not the one the position belongs to (the topic was re-created, or the log
    /// was truncated below the position): copy it from its start `to`.
    Reset { to: i64, topic_id: Option<TopicId>, why: String },
    /// Records `from..to` were deleted before they were copied (retention, delete-records).
    Lost { from: i64, to: i64, topic_id: Option<TopicId> },
    /// The topic does not exist on the source (deleted).
    Missing,
    /// The check failed; ask again later.
    Unknown(String),
    /// Not an answer to a check: the lag measurement found the copying partition behind the end of its
    /// log with nothing of it in flight (see the module doc).
    Behind,
}

/// A verdict, for one partition.
pub type Report = (SourcePartition, Verdict);

/// What a round of probe queries was for (the `kind` label of `ferry_probe_queries_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryKind {
    /// Where partitions being assigned start.
    Assign,
    /// Fetch positions after an offset-out-of-range error.
    Range,
    /// The copied topics' ids (periodic, or after an unknown-topic error).
    Ids,
    /// The source lag (periodic).
    Lag,
}

impl QueryKind {
    pub fn name(self) -> &'static str {
        match self {
            QueryKind::Assign => "assign",
            QueryKind::Range => "range",
            QueryKind::Ids => "ids",
            QueryKind::Lag => "lag",
        }
    }
}

/// What to do with a partition, from its position and stored topic id and what the source says now:
/// its log start `low` and its high watermark `high` (not the last stable offset: see the module doc).
pub fn decide(
    position: Option<i64>,
    stored_id: Option<&str>,
    current_id: Option<&str>,
    low: i64,
    high: i64,
) -> Verdict {
    let topic_id = current_id.map(Arc::from);
    if let (Some(stored), Some(current)) = (stored_id, current_id)
        && stored != current
    {
        return Verdict::Reset {
            to: low,
            topic_id,
            why: format!("the topic was re-created (id {current}, was {stored})"),
        };
    }
    match position {
        None => Verdict::Start { at: low, topic_id },
        Some(p) if p > high => Verdict::Reset {
            to: low,
            topic_id,
            why: format!(
                "position {p} is past the end of the log (high watermark {high}): the topic was re-created or truncated"
            ),
        },
        Some(p) if p < low => Verdict::Lost { from: p, to: low, topic_id },
        Some(p) => Verdict::Start { at: p, topic_id },
    }
}

/// The probe's handle, owned by the copy loop. Dropping it stops the thread.
pub struct Probe {
    tx: Option<Sender<Request>>,
    rx: Receiver<Report>,
    thread: Option<JoinHandle<()>>,
}

impl Probe {
    /// Starts the probe's thread; with `foreign`, it also takes the foreign-record look.
    pub fn start(plan: &Arc<FlowPlan>, conns: &FlowConnections, foreign: Option<ForeignLook>) -> Result<Probe, String> {
        // `read_uncommitted`, so that the end offsets it lists are high watermarks (librdkafka's
        // ListOffsets asks with the client's isolation level).
        let consumer = conns.source.meta(Isolation::Uncommitted).map_err(|e| e.to_string())?;
        // The copier's own isolation level (the cluster's client properties decide, as for the copier's
        // consumer): where `start_from = "latest"` begins is the end the copier itself would see.
        let copier_view = conns.source.meta(Isolation::AsConfigured).map_err(|e| e.to_string())?;
        let admin = conns.source.admin().map_err(|e| e.to_string())?;
        let rt = crate::kafka::runtime().map_err(|e| format!("start the probe's runtime: {e}"))?;
        let (tx, requests) = mpsc::channel();
        let (reports, rx) = mpsc::channel();
        let flow = plan.id.to_string();
        let cluster = plan.source.alias.clone();
        let per_partition = plan.settings.metrics_per_partition;
        let start_from = plan.settings.start_from;
        let thread = std::thread::Builder::new()
            .name(format!("copier-probe {flow}"))
            .spawn(move || {
                let mut p = ProbeLoop {
                    flow,
                    cluster,
                    consumer,
                    copier_view,
                    start_from,
                    admin,
                    rt,
                    reports,
                    watched: HashMap::new(),
                    per_partition,
                    exported: HashSet::new(),
                    foreign,
                };
                p.run(requests)
            })
            .map_err(|e| format!("cannot start the copier's probe thread: {e}"))?;
        Ok(Probe { tx: Some(tx), rx, thread: Some(thread) })
    }

    pub fn send(&self, request: Request) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(request);
        }
    }

    /// Reports that arrived since the last call.
    pub fn reports(&self) -> Vec<Report> {
        let mut out = Vec::new();
        loop {
            match self.rx.try_recv() {
                Ok(r) => out.push(r),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return out,
            }
        }
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct ProbeLoop {
    flow: String,
    cluster: String,
    consumer: MetaConsumer,
    /// Reads at the copier's isolation level: where a `latest` start is.
    copier_view: MetaConsumer,
    start_from: StartFrom,
    admin: Admin,
    /// The node's admin runtime ([`crate::kafka::runtime`]).
    rt: &'static tokio::runtime::Runtime,
    reports: Sender<Report>,
    watched: HashMap<String, Watched>,
    /// `metrics_per_partition`, and the partitions that have series now (dropped once not watched).
    per_partition: bool,
    exported: HashSet<SourcePartition>,
    /// The foreign-record look at the target (at-least-once flows not under the identity policy).
    foreign: Option<ForeignLook>,
}

impl ProbeLoop {
    fn run(&mut self, requests: Receiver<Request>) {
        let mut next_ids = Instant::now() + ID_CHECK_INTERVAL;
        let mut last_ids = Instant::now();
        let mut next_lag = Instant::now() + LAG_INTERVAL;
        // Never, without a look to take.
        let mut next_foreign = self.foreign.as_ref().map(|_| Instant::now() + foreign::CHECK_INTERVAL);
        loop {
            let due = next_foreign.map_or(next_ids.min(next_lag), |f| f.min(next_ids).min(next_lag));
            let wait = due.saturating_duration_since(Instant::now());
            match requests.recv_timeout(wait) {
                Ok(Request::Check(list)) => {
                    for r in self.check(list, QueryKind::Assign) {
                        if self.reports.send(r).is_err() {
                            return;
                        }
                    }
                }
                Ok(Request::RangeCheck(list)) => {
                    for r in self.check(list, QueryKind::Range) {
                        if self.reports.send(r).is_err() {
                            return;
                        }
                    }
                }
                Ok(Request::Watch(w)) => self.watched = w,
                Ok(Request::CheckIds) => {
                    if last_ids.elapsed() >= ID_CHECK_MIN_GAP {
                        next_ids = Instant::now();
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            if Instant::now() >= next_lag {
                next_lag = Instant::now() + LAG_INTERVAL;
                self.measure_lag();
            }
            if Instant::now() >= next_ids {
                last_ids = Instant::now();
                next_ids = last_ids + ID_CHECK_INTERVAL;
                for r in self.check_ids() {
                    if self.reports.send(r).is_err() {
                        return;
                    }
                }
            }
            if let (Some(look), Some(at)) = (self.foreign.as_mut(), next_foreign.as_mut())
                && Instant::now() >= *at
            {
                // One call per turn: a look with calls left has its next turn once the requests that
                // arrived meanwhile are served; the next look comes an interval after the last call.
                let more = look.turn();
                *at = if more { Instant::now() } else { Instant::now() + foreign::CHECK_INTERVAL };
            }
        }
    }

    /// Source lag per topic: the partitions' high watermarks minus the next offset to copy (records of an
    /// open transaction count: they are not copied yet). Copying partitions behind with nothing in flight
    /// are reported [`Verdict::Behind`]: the copy loop looks whether its consumer passed the gap without
    /// being handed a record (transaction markers), which then counts as copied.
    fn measure_lag(&mut self) {
        let tps: Vec<SourcePartition> =
            self.watched.iter().flat_map(|(t, w)| w.partitions.iter().map(move |p| (t.clone(), p.partition))).collect();
        if tps.is_empty() {
            return;
        }
        let highs = match self.counted(QueryKind::Lag, self.ends(&tps)) {
            Ok(h) => h,
            Err(e) => {
                tracing::debug!(flow = %self.flow, error = %e, "cannot measure the source lag this time");
                return;
            }
        };
        let metrics = &crate::metrics::METRICS;
        let mut exported = HashSet::new();
        let mut idle_behind = Vec::new();
        for (topic, w) in &self.watched {
            let mut lag = 0;
            for p in &w.partitions {
                let Some(high) = highs.get(&(topic.clone(), p.partition)) else { continue };
                let behind = (high - p.ack.next().unwrap_or(p.start)).max(0);
                if behind > 0 && p.copying && p.ack.in_flight() == 0 {
                    idle_behind.push((topic.clone(), p.partition));
                }
                lag += behind;
                if self.per_partition {
                    metrics.partition_lag.with_label_values(&[&self.flow, topic, &p.partition.to_string()]).set(behind);
                    exported.insert((topic.clone(), p.partition));
                }
            }
            metrics.source_lag.with_label_values(&[&self.flow, topic]).set(lag);
        }
        for (topic, partition) in self.exported.difference(&exported) {
            metrics.remove_partition(&self.flow, topic, *partition);
        }
        self.exported = exported;
        for tp in idle_behind {
            if self.reports.send((tp, Verdict::Behind)).is_err() {
                return; // the copy loop is gone
            }
        }
    }

    /// Counts a round of queries of `kind` by its outcome, and passes the outcome on.
    fn counted<T>(&self, kind: QueryKind, outcome: Result<T, String>) -> Result<T, String> {
        let result = if outcome.is_ok() { "ok" } else { "failed" };
        crate::metrics::METRICS.probe_queries.with_label_values(&[&self.flow, kind.name(), result]).inc();
        outcome
    }

    fn describe(&self, topics: Vec<String>) -> Result<HashMap<String, raw_admin::TopicDescription>, String> {
        let described = self
            .rt
            .block_on(raw_admin::describe_topics(&self.admin, &topics, QUERY_TIMEOUT))
            .map_err(|e| format!("cluster `{}`: {e}", self.cluster))?;
        Ok(described.into_iter().map(|d| (d.name.clone(), d)).collect())
    }

    /// Offsets of `tps` at `at` (ListOffsets with the special timestamps -2 and -1, which rdkafka spells
    /// as the logical offsets Beginning and End), asked in chunks ([`list_offsets`]: one call over
    /// thousands of partitions costs librdkafka a quadratic search). Partitions the broker answers with
    /// an error are left out; a call that fails is asked again once after a metadata refresh, then fails
    /// the round.
    fn list_offsets(
        &self,
        tps: &[SourcePartition],
        at: rdkafka::Offset,
    ) -> Result<HashMap<SourcePartition, i64>, String> {
        let answered = self.answers(&self.consumer, tps, at)?;
        Ok(answered
            .into_iter()
            .filter_map(|(tp, a)| if let Answer::Offset(o) = a { Some((tp, o)) } else { None })
            .collect())
    }

    /// Every partition's answer from `consumer`; a call that fails is asked again once after a metadata
    /// refresh, then fails the round.
    fn answers(
        &self,
        consumer: &MetaConsumer,
        tps: &[SourcePartition],
        at: rdkafka::Offset,
    ) -> Result<HashMap<SourcePartition, Answer>, String> {
        let mut answered = list_offsets::list_offsets(consumer, tps, at, QUERY_TIMEOUT);
        let unanswered: Vec<SourcePartition> =
            answered.iter().filter(|(_, a)| matches!(a, Answer::Unanswered(_))).map(|(tp, _)| tp.clone()).collect();
        if !unanswered.is_empty() {
            // The client's metadata may predate the partitions asked about (a topic that just grew):
            // refresh it once and ask again.
            let _ = consumer.fetch_metadata(None, QUERY_TIMEOUT);
            answered.extend(list_offsets::list_offsets(consumer, &unanswered, at, QUERY_TIMEOUT));
        }
        if let Some(Answer::Unanswered(e)) = answered.values().find(|a| matches!(a, Answer::Unanswered(_))) {
            return Err(format!("cluster `{}`: list offsets: {e}", self.cluster));
        }
        Ok(answered)
    }

    /// Where partitions never copied start under `start_from` (`latest` or a time): the end at the
    /// copier's isolation level, or the first offset at or after the time (the end when no record is).
    /// Partitions the broker refused an answer for are left out.
    fn fresh_starts(&self, tps: &[SourcePartition]) -> Result<HashMap<SourcePartition, i64>, String> {
        let mut out = HashMap::with_capacity(tps.len());
        let mut at_end: Vec<SourcePartition> = Vec::new();
        match self.start_from {
            StartFrom::Earliest => return Ok(out),
            StartFrom::Latest => at_end = tps.to_vec(),
            StartFrom::Timestamp(ms) => {
                for (tp, answer) in self.answers(&self.copier_view, tps, rdkafka::Offset::Offset(ms))? {
                    match answer {
                        Answer::Offset(o) => {
                            out.insert(tp, o);
                        }
                        // No record at or after the time: librdkafka answers the logical offset -1.
                        Answer::Refused(rdkafka::error::KafkaError::OffsetFetch(
                            rdkafka::types::RDKafkaErrorCode::NoOffset,
                        )) => at_end.push(tp),
                        _ => {}
                    }
                }
            }
        }
        if !at_end.is_empty() {
            for (tp, answer) in self.answers(&self.copier_view, &at_end, rdkafka::Offset::End)? {
                if let Answer::Offset(o) = answer {
                    out.insert(tp, o);
                }
            }
        }
        Ok(out)
    }

    /// End offsets (high watermarks, the consumer reads uncommitted) of `tps`.
    fn ends(&self, tps: &[SourcePartition]) -> Result<HashMap<SourcePartition, i64>, String> {
        self.list_offsets(tps, rdkafka::Offset::End)
    }

    /// Log start and end (high watermark) of each partition.
    fn bounds(&self, tps: &[SourcePartition]) -> Result<HashMap<SourcePartition, (i64, i64)>, String> {
        let low = self.list_offsets(tps, rdkafka::Offset::Beginning)?;
        let high = self.ends(tps)?;
        Ok(low.into_iter().filter_map(|(tp, l)| high.get(&tp).map(|h| (tp, (l, *h)))).collect())
    }

    /// The topics' descriptions and the partitions' log bounds: one round of queries.
    #[allow(clippy::type_complexity)]
    fn describe_and_bound(
        &self,
        list: &[Check],
    ) -> Result<(HashMap<String, raw_admin::TopicDescription>, HashMap<SourcePartition, (i64, i64)>), String> {
        // `copier-probe=N*return`: the next N rounds fail as if the source did not answer.
        crate::failpoints::check(crate::failpoints::COPIER_PROBE)?;
        let mut topics: Vec<String> = list.iter().map(|c| c.tp.0.clone()).collect();
        topics.sort();
        topics.dedup();
        let described = self.describe(topics)?;
        let present: Vec<(String, i32)> = list
            .iter()
            .filter(|c| described.get(&c.tp.0).is_some_and(|d| d.error.is_none() && c.tp.1 < d.partitions))
            .map(|c| c.tp.clone())
            .collect();
        let bounds = self.bounds(&present)?;
        Ok((described, bounds))
    }

    fn check(&self, list: Vec<Check>, kind: QueryKind) -> Vec<Report> {
        let (described, bounds) = match self.counted(kind, self.describe_and_bound(&list)) {
            Ok(answer) => answer,
            Err(e) => return list.into_iter().map(|c| (c.tp, Verdict::Unknown(e.clone()))).collect(),
        };
        let unpositioned: HashSet<SourcePartition> =
            list.iter().filter(|c| c.position.is_none()).map(|c| c.tp.clone()).collect();
        let reports = self.verdicts(list, &described, &bounds);
        if kind != QueryKind::Assign || self.start_from == StartFrom::Earliest || unpositioned.is_empty() {
            return reports;
        }
        self.start_fresh(reports, &unpositioned, &bounds)
    }

    /// Partitions without a position (never copied, no stored progress) that would start at their log
    /// start start where `start_from` says instead.
    fn start_fresh(
        &self,
        reports: Vec<Report>,
        unpositioned: &HashSet<SourcePartition>,
        bounds: &HashMap<SourcePartition, (i64, i64)>,
    ) -> Vec<Report> {
        let fresh: HashSet<SourcePartition> = reports
            .iter()
            .filter(|(tp, v)| matches!(v, Verdict::Start { .. }) && unpositioned.contains(tp))
            .map(|(tp, _)| tp.clone())
            .collect();
        if fresh.is_empty() {
            return reports;
        }
        let asked: Vec<SourcePartition> = fresh.iter().cloned().collect();
        let starts = self.counted(QueryKind::Assign, self.fresh_starts(&asked));
        reports
            .into_iter()
            .map(|(tp, v)| match v {
                Verdict::Start { topic_id, .. } if fresh.contains(&tp) => {
                    let verdict = match &starts {
                        Ok(starts) => match (starts.get(&tp), bounds.get(&tp)) {
                            // Never before the log start (a time older than retention's horizon answers it
                            // anyway) nor past the high watermark. The two bounds come from two calls: a
                            // leader change between them can invert them, and `clamp` would panic.
                            (Some(_), Some((low, high))) if low > high => Verdict::Unknown(format!(
                                "log start {low} above the high watermark {high} (asked apart): asked again"
                            )),
                            (Some(at), Some((low, high))) => Verdict::Fresh { at: (*at).clamp(*low, *high), topic_id },
                            _ => Verdict::Unknown(format!("no {} offset for the partition", self.start_from_name())),
                        },
                        Err(e) => Verdict::Unknown(e.clone()),
                    };
                    (tp, verdict)
                }
                other => (tp, other),
            })
            .collect()
    }

    fn start_from_name(&self) -> &'static str {
        match self.start_from {
            StartFrom::Earliest => "earliest",
            StartFrom::Latest => "latest",
            StartFrom::Timestamp(_) => "start_from time",
        }
    }

    fn verdicts(
        &self,
        list: Vec<Check>,
        described: &HashMap<String, raw_admin::TopicDescription>,
        bounds: &HashMap<SourcePartition, (i64, i64)>,
    ) -> Vec<Report> {
        list.into_iter()
            .map(|c| {
                let verdict = match described.get(&c.tp.0) {
                    None => Verdict::Unknown("the topic was not in the answer".into()),
                    Some(d) => match &d.error {
                        Some(e) if e.code == 3 => Verdict::Missing, // UNKNOWN_TOPIC_OR_PARTITION
                        Some(e) => Verdict::Unknown(e.to_string()),
                        None if c.tp.1 >= d.partitions => Verdict::Missing,
                        None => match bounds.get(&c.tp) {
                            Some((low, high)) => {
                                decide(c.position, c.topic_id.as_deref(), d.id.as_deref(), *low, *high)
                            }
                            None => Verdict::Unknown("no log offsets for the partition".into()),
                        },
                    },
                };
                (c.tp, verdict)
            })
            .collect()
    }

    /// Compares the watched topics' ids with the source's; every copied partition of a topic that was
    /// re-created gets a verdict.
    fn check_ids(&self) -> Vec<Report> {
        let topics: Vec<String> = self
            .watched
            .iter()
            .filter(|(_, w)| w.partitions.iter().any(|p| p.copying))
            .map(|(t, _)| t.clone())
            .collect();
        if topics.is_empty() {
            return Vec::new();
        }
        let described = match self.counted(QueryKind::Ids, self.describe(topics)) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(flow = %self.flow, error = %e, "cannot check the source topics' ids; will try again");
                return Vec::new();
            }
        };
        let mut checks = Vec::new();
        let mut missing = Vec::new();
        for (topic, w) in &self.watched {
            let Some(d) = described.get(topic) else { continue };
            let copying = w.partitions.iter().filter(|p| p.copying).map(|p| p.partition);
            match (&d.error, &w.id, &d.id) {
                (Some(e), _, _) if e.code == 3 => missing.extend(copying.map(|p| (topic.clone(), p))),
                (None, Some(known), Some(now)) if known.as_ref() != now.as_str() => {
                    checks.extend(copying.map(|p| Check {
                        tp: (topic.clone(), p),
                        position: None,
                        topic_id: Some(known.clone()),
                    }));
                }
                _ => {}
            }
        }
        let mut out: Vec<Report> = missing.into_iter().map(|tp| (tp, Verdict::Missing)).collect();
        if !checks.is_empty() {
            out.extend(self.check(checks, QueryKind::Ids));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_inside_the_log_of_the_same_topic_continues() {
        assert_eq!(
            decide(Some(10), Some("A"), Some("A"), 0, 100),
            Verdict::Start { at: 10, topic_id: Some("A".into()) }
        );
        assert_eq!(decide(Some(100), None, Some("A"), 0, 100), Verdict::Start { at: 100, topic_id: Some("A".into()) });
        assert_eq!(decide(None, None, None, 5, 100), Verdict::Start { at: 5, topic_id: None });
    }

    #[test]
    fn a_re_created_topic_is_copied_from_its_start_even_when_it_is_longer() {
        // Old topic ended at 1000; the new one already holds 5000 records.
        match decide(Some(1_000), Some("old"), Some("new"), 0, 5_000) {
            Verdict::Reset { to: 0, topic_id: Some(id), why } => {
                assert_eq!(&*id, "new");
                assert!(why.contains("re-created"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_position_stored_inside_an_open_transaction_continues_there() {
        // Committed records up to 100, an open transaction 100..150 (last stable offset 100, high
        // watermark 150), MM2 copied it all and stored 150.
        assert_eq!(
            decide(Some(150), Some("A"), Some("A"), 0, 150),
            Verdict::Start { at: 150, topic_id: Some("A".into()) }
        );
        assert_eq!(decide(Some(120), None, None, 0, 150), Verdict::Start { at: 120, topic_id: None });
        assert!(matches!(decide(Some(151), None, None, 0, 150), Verdict::Reset { to: 0, .. }));
    }

    #[test]
    fn without_ids_a_position_past_the_end_resets_and_one_before_the_start_loses_records() {
        assert!(matches!(decide(Some(1_000), None, None, 0, 300), Verdict::Reset { to: 0, .. }));
        assert_eq!(
            decide(Some(1_000), None, None, 1_500, 2_000),
            Verdict::Lost { from: 1_000, to: 1_500, topic_id: None }
        );
    }
}
