//! The offset-sync emitter: publishes the (upstream, downstream) pairs the copier's rule selected to
//! partition 0 of `mm2-offset-syncs.<target>.internal` (on the source cluster by default), in MM2's format
//! plus ferry's [`SyncMark`](crate::sync_rule::SyncMark) header.
//!
//! The queue between copier and emitter is owned by the flow supervisor, so a sync survives a restart of
//! either. A sync leaves the queue only when the broker acknowledged *that* sync: after a partial failure
//! only the unacknowledged ones are sent again, never the whole batch (which would land as a, b, a, b, c).
//! Syncs are sent in queue order on one idempotent producer to one partition, and the copier queues a
//! partition's syncs in the order its rule made them, so they land in order per partition. When the
//! queue is long the copier pauses (backpressure) instead of the queue growing without bound.
//!
//! With `emit_offset_syncs_enabled = false` (KIP-1031) no emitter runs and the queue discards what the
//! copier hands it ([`SyncQueue::discarding`]): it never fills, so the copier is never held back and a
//! handover never waits for syncs to be published.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use prometheus::IntGauge;
use rdkafka::message::{Header, OwnedHeaders};

use super::messages::{ActorKind, Parent};
use super::worker::{Control, Signal, Worker};
use crate::clients::{FlowConnections, Outgoing};
use crate::config::{ClusterSpec, FlowPlan};
use crate::failpoints;
use crate::kafka::{self, TopicSpec};
use crate::metrics::METRICS;
use crate::sync_rule::{MarkedSync, SYNC_MARK_HEADER, SyncReason};

/// Syncs handed to the producer in one round, at most. A round is sent only when the one before it is
/// acknowledged: librdkafka's idempotent producer sends a partition's next request only once fewer than
/// five of its *messages* are in flight, and while it waits its broker thread wakes up without pause
/// for the batch that is due (measured: a tenth of a core while a wide flow emits syncs). One round is
/// one request: 2,000 syncs of the longest topic names fit librdkafka's 1 MB batch.
const ROUND: usize = 2_000;
/// Above this many queued syncs the copier pauses.
const BACKLOG: usize = 100_000;

struct Queued {
    id: u64,
    sync: MarkedSync,
    /// Acknowledged by the broker, but behind an older sync that is not (yet): removed with it.
    acked: bool,
}

#[derive(Default)]
struct Inner {
    /// Consecutive ids, oldest first (entries leave only from the front).
    entries: VecDeque<Queued>,
    next_id: u64,
    /// A stop is queued for the emitter ([`SyncQueue::wake`]).
    woken: bool,
}

impl Inner {
    /// Unacknowledged entries after id `after` (all with `None`), oldest first.
    fn pending(&self, after: Option<u64>) -> impl Iterator<Item = &Queued> {
        let skip = match (after, self.entries.front()) {
            (Some(a), Some(front)) => usize::try_from((a + 1).saturating_sub(front.id)).unwrap_or(usize::MAX),
            _ => 0,
        };
        self.entries.range(skip.min(self.entries.len())..).filter(|e| !e.acked)
    }
}

/// Syncs waiting to be published, in the order the rule produced them.
pub struct SyncQueue {
    flow: String,
    inner: Mutex<Inner>,
    ready: Condvar,
    depth: IntGauge,
    /// No emitter publishes this flow's syncs: they are dropped as they come.
    discard: bool,
}

impl SyncQueue {
    pub fn new(flow: &str) -> Self {
        Self {
            flow: flow.to_string(),
            inner: Mutex::new(Inner::default()),
            ready: Condvar::new(),
            depth: METRICS.offset_syncs_queued.with_label_values(&[flow]),
            discard: false,
        }
    }

    /// The queue of a flow that emits no offset syncs: always empty.
    pub fn discarding(flow: &str) -> Self {
        Self { discard: true, ..Self::new(flow) }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn push(&self, sync: MarkedSync, reason: SyncReason) {
        if self.discard {
            return;
        }
        METRICS.offset_syncs_emitted.with_label_values(&[&self.flow, reason.name()]).inc();
        let mut q = self.lock();
        let id = q.next_id;
        q.next_id += 1;
        q.entries.push_back(Queued { id, sync, acked: false });
        self.depth.set(q.entries.len() as i64);
        self.ready.notify_one();
    }

    /// Wakes an emitter waiting for syncs (it is asked to stop: it should look at its signals now).
    pub fn wake(&self) {
        self.lock().woken = true;
        self.ready.notify_all();
    }

    pub fn is_backlogged(&self) -> bool {
        self.lock().entries.len() >= BACKLOG
    }

    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits until every sync queued so far was published (or `timeout`). Returns whether they were.
    pub fn wait_published(&self, timeout: Duration) -> bool {
        let Some(last) = self.lock().entries.back().map(|e| e.id) else { return true };
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.lock().entries.front().is_none_or(|e| e.id > last) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// Up to `n` unacknowledged syncs queued after id `after` (from the front with `None`), oldest
    /// first, waiting up to `wait` for one to arrive. Ids in the queue are consecutive, so the first
    /// candidate is found by arithmetic: the cost is the syncs returned, not the syncs in flight.
    fn unsent(&self, after: Option<u64>, n: usize, wait: Duration) -> Vec<(u64, MarkedSync)> {
        let q = self.lock();
        let (mut q, _) = self
            .ready
            .wait_timeout_while(q, wait, |q| !q.woken && q.pending(after).next().is_none())
            .unwrap_or_else(|p| p.into_inner());
        q.woken = false;
        q.pending(after).take(n).map(|e| (e.id, e.sync.clone())).collect()
    }

    /// The broker acknowledged sync `id`: it leaves the queue as soon as everything before it has.
    fn ack(&self, id: u64) {
        let mut q = self.lock();
        let front = q.entries.front().map_or(id, |e| e.id);
        if let Some(e) = q.entries.get_mut((id - front.min(id)) as usize).filter(|e| e.id == id) {
            e.acked = true;
        }
        while q.entries.front().is_some_and(|e| e.acked) {
            q.entries.pop_front();
        }
        self.depth.set(q.entries.len() as i64);
    }
}

/// Header of every offset sync ferry writes, naming the flow (`source->target`) it belongs to. The two
/// flows of a cluster pair with different `offset_syncs_topic_location`s would write the same topic
/// (`mm2-offset-syncs.<A>.internal` on cluster A, named so by either flow; refused by `ferry validate`
/// within one flows directory, possible with a reverse flow run elsewhere): readers keep their own
/// flow's syncs apart by it. MM2's syncs carry no header.
pub const FLOW_HEADER: &str = "ferry.flow";

/// The cluster that holds the offset-syncs topic and the topic's name (mm2-reference.md §2.1).
pub fn syncs_location(plan: &FlowPlan) -> (&ClusterSpec, String) {
    plan.offset_syncs_topic()
}

/// The emitter as a supervised actor.
pub fn worker(
    plan: Arc<FlowPlan>,
    conns: Arc<FlowConnections>,
    queue: Arc<SyncQueue>,
    supervisor: Parent,
) -> Worker<()> {
    let name = format!("offset-syncs {}", plan.id);
    let waker = queue.clone();
    Worker::new(ActorKind::OffsetSyncs, name, supervisor, Vec::new(), move |control| {
        run(&plan, &conns, &queue, control)
    })
    .waking(move || waker.wake())
}

/// How long the emitter waits for a report while the cluster does not answer, or for room in a full
/// queue.
const IDLE_WAIT: Duration = Duration::from_millis(250);
/// How long an idle emitter sleeps for new syncs: a new sync and a stop ([`SyncQueue::wake`]) wake it
/// at once, so this only bounds a stop that came some other way (the actor dropped). An idle emitter
/// (one per flow) wakes this often.
const SYNC_WAIT: Duration = Duration::from_secs(2);

/// Delivery reports of the emitter's records, collected for its loop (they arrive on the shared
/// producer's thread).
#[derive(Default)]
struct Deliveries(Mutex<Vec<(u64, Result<(), kafka::Captured>)>>);

impl Deliveries {
    fn take(&self) -> Vec<(u64, Result<(), kafka::Captured>)> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

fn run(plan: &FlowPlan, conns: &FlowConnections, queue: &SyncQueue, control: Control<()>) -> Result<(), String> {
    let (cluster, topic) = syncs_location(plan);
    let conn = conns.on(cluster);
    let spec = TopicSpec::compacted(topic.clone(), 1, plan.settings.offset_syncs_rf());
    conn.ensure_topic(&plan.id, &spec).map_err(|e| e.to_string())?;
    // The connection's shared producer (acks=all, idempotent: one lane's records stay in order).
    let lane = conn.internal().map_err(|e| e.to_string())?;
    let reports = Arc::new(Deliveries::default());
    let flow = plan.id.to_string();
    control.running();

    let mut stopping: Option<Instant> = None;
    let mut last_sent: Option<u64> = None;
    let mut in_flight = 0usize;
    loop {
        match control.try_next() {
            Some(Signal::Stop { deadline }) => stopping = Some(deadline),
            Some(Signal::Msg(())) | None => {}
        }
        // A send that failed for another reason than a full queue: the round ends there, and the
        // emitter restarts once what went out is settled.
        let mut send_error: Option<String> = None;
        if in_flight == 0 {
            // Stopping: what is queued goes out, nothing more is waited for.
            let wait = if stopping.is_some() { Duration::ZERO } else { SYNC_WAIT };
            let batch = queue.unsent(last_sent, ROUND, wait);
            if !batch.is_empty() {
                failpoints::check(failpoints::OFFSET_SYNCS_SEND)?;
            }
            for (id, s) in batch {
                let key = match s.sync.encode_key() {
                    Ok(key) => key,
                    Err(e) => {
                        send_error = Some(format!("encode offset sync: {e}"));
                        break;
                    }
                };
                let value = s.sync.encode_value();
                let mark = s.mark.encode();
                let headers = OwnedHeaders::new_with_capacity(2)
                    .insert(Header { key: SYNC_MARK_HEADER, value: Some(&mark[..]) })
                    .insert(Header { key: FLOW_HEADER, value: Some(flow.as_bytes()) });
                let record = Outgoing {
                    topic: &topic,
                    partition: 0,
                    key: &key,
                    payload: &value,
                    headers: Some(headers),
                    timestamp: None,
                };
                let reports = reports.clone();
                match lane.send(record, move |outcome| {
                    reports.0.lock().unwrap_or_else(|p| p.into_inner()).push((id, outcome.map(|_| ())));
                }) {
                    Ok(()) => {
                        last_sent = Some(id);
                        in_flight += 1;
                    }
                    // The shared queue or this lane is full: the round ends here, the rest follows
                    // once this part is acknowledged (or shortly, if nothing of it went out).
                    Err(e) if e.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::QueueFull) => {
                        if in_flight == 0 {
                            std::thread::sleep(IDLE_WAIT);
                        }
                        break;
                    }
                    Err(e) => {
                        send_error = Some(format!("queue offset sync to {topic}: {e}"));
                        break;
                    }
                }
            }
        }
        if in_flight > 0 {
            // Woken by each report of the round in flight; the timeout matters only while the cluster
            // does not answer.
            lane.wait_report(IDLE_WAIT);
        }
        let mut failed = None;
        for (id, outcome) in reports.take() {
            in_flight -= 1;
            match outcome {
                Ok(()) => queue.ack(id),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        if failed.is_some() || send_error.is_some() {
            // Settle what is still in flight (their acknowledgements count), then restart: the next
            // emitter sends only what was not acknowledged, in order.
            lane.wait_idle(Duration::from_secs(5));
            for (id, outcome) in reports.take() {
                if outcome.is_ok() {
                    queue.ack(id);
                }
            }
            return Err(match (failed, send_error) {
                (Some(e), _) => match e.refused {
                    Some(code) => {
                        kafka::not_authorized(&format!("offset-syncs topic {topic}"), &cluster.alias, "Write", code)
                    }
                    None => format!("publish offset syncs to {topic}: {e}"),
                },
                (None, Some(e)) => e,
                (None, None) => unreachable!("checked above"),
            });
        }
        if let Some(deadline) = stopping {
            if queue.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("{} offset syncs still queued at the shutdown deadline", queue.len()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mm2::records::OffsetSync;
    use crate::sync_rule::SyncMark;

    fn sync(seq: u64) -> MarkedSync {
        MarkedSync {
            sync: OffsetSync { topic: "t".into(), partition: 0, upstream_offset: seq as i64, downstream_offset: 0 },
            mark: SyncMark { lifetime: 1, seq, epoch: 0, dense: false },
        }
    }

    #[test]
    fn only_unacknowledged_syncs_are_sent_again_and_the_queue_drains_in_order() {
        let q = SyncQueue::new("q->test");
        for i in 0..5 {
            q.push(sync(i), SyncReason::LagExceeded);
        }
        let first = q.unsent(None, 3, Duration::ZERO);
        assert_eq!(first.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [0, 1, 2]);
        // 0 and 2 acknowledged, 1 failed: 2 waits behind 1 and is not sent again.
        q.ack(0);
        q.ack(2);
        assert_eq!(q.len(), 4);
        let again = q.unsent(None, 10, Duration::ZERO);
        assert_eq!(again.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [1, 3, 4]);
        q.ack(1);
        assert_eq!(q.len(), 2, "1 and the already acknowledged 2 leave together");
        assert_eq!(q.unsent(Some(3), 10, Duration::ZERO).len(), 1);
    }

    #[test]
    fn a_discarding_queue_never_fills_nor_holds_a_handover() {
        let q = SyncQueue::discarding("q->test3");
        for i in 0..(BACKLOG as u64 + 10) {
            q.push(sync(i), SyncReason::LagExceeded);
        }
        assert!(q.is_empty());
        assert!(!q.is_backlogged());
        assert!(q.wait_published(Duration::ZERO));
    }

    #[test]
    fn unsent_syncs_are_found_from_any_last_sent_id() {
        let q = SyncQueue::new("q->test2");
        for i in 0..10 {
            q.push(sync(i), SyncReason::LagExceeded);
        }
        q.ack(0);
        q.ack(1);
        q.ack(5);
        let ids = |v: Vec<(u64, MarkedSync)>| v.into_iter().map(|(id, _)| id).collect::<Vec<_>>();
        assert_eq!(ids(q.unsent(Some(0), 3, Duration::ZERO)), [2, 3, 4], "`after` already left the queue");
        assert_eq!(ids(q.unsent(Some(4), 3, Duration::ZERO)), [6, 7, 8], "acknowledged 5 is skipped");
        assert!(q.unsent(Some(9), 3, Duration::ZERO).is_empty(), "nothing after the newest");
        assert!(q.unsent(Some(50), 3, Duration::ZERO).is_empty());
        assert_eq!(ids(q.unsent(None, 2, Duration::ZERO)), [2, 3]);
    }
}
