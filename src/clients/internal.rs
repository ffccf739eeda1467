//! One producer per connection for ferry's internal topics (offset syncs, progress, heartbeats), shared
//! by every flow that writes to that cluster.
//!
//! Each user sends through a [`Lane`]: the lane counts its own records in flight, and every record
//! carries its lane and its own completion, so a delivery report reaches the sender that queued the
//! record and nobody else. A lane waits for *its* records ([`Lane::wait_idle`]); flushing the producer
//! would wait for every flow's. Internal records are few (a sync per lag or quiet interval, a progress
//! record per moved partition and round, a heartbeat a second), so one small allocation per record
//! is nothing next to the round trip.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::error::KafkaError;
use rdkafka::message::{Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::statistics::Statistics;

use super::stats::{self, StatsContext};
use crate::config::ClusterSpec;
use crate::kafka::{self, Captured, KafkaOpError};

/// Where a delivered record landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Landed {
    pub partition: i32,
    pub offset: i64,
}

/// What a sender learns of one record.
pub type Outcome = Result<Landed, Captured>;

type Done = Box<dyn FnOnce(Outcome) + Send + Sync>;

/// The opaque each record carries: its lane and its completion.
pub struct Pending {
    lane: Arc<LaneState>,
    done: Option<Done>,
}

/// Routes reports to the lanes; notes a fatal producer error so the connection replaces the producer.
pub struct Router {
    stats: StatsContext,
    fatal: AtomicBool,
}

impl ClientContext for Router {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, line: &str) {
        self.stats.log(level, fac, line);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if matches!(error.rdkafka_error_code(), Some(rdkafka::types::RDKafkaErrorCode::Fatal)) {
            self.fatal.store(true, Ordering::Release);
        }
        self.stats.error(error, reason);
    }

    fn stats(&self, statistics: Statistics) {
        self.stats.stats(statistics);
    }
}

impl ProducerContext for Router {
    type DeliveryOpaque = Box<Pending>;

    fn delivery(&self, result: &DeliveryResult<'_>, mut pending: Box<Pending>) {
        let outcome = match result {
            Ok(m) => Ok(Landed { partition: m.partition(), offset: m.offset() }),
            Err((e, _)) => {
                if matches!(e, KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::Fatal)) {
                    self.fatal.store(true, Ordering::Release);
                }
                Err(Captured { text: e.to_string(), refused: kafka::authorization_error(e) })
            }
        };
        if let Some(done) = pending.done.take() {
            done(outcome);
        }
        pending.lane.settled();
    }
}

/// The shared producer (acks=all, idempotent, a short linger: internal records are small and few).
pub struct InternalProducer {
    producer: ThreadedProducer<Router>,
}

impl InternalProducer {
    pub fn new(cluster: &ClusterSpec) -> Result<Self, KafkaOpError> {
        let mut cfg = kafka::client_config(cluster, &"ferry", "internal-producer")?;
        // Room for every lane's cap several times over: one sender at its cap leaves the others room.
        cfg.set("acks", "all")
            .set("enable.idempotence", "true")
            .set("linger.ms", "5")
            .set("queue.buffering.max.messages", "1000000");
        stats::enable(&mut cfg);
        let router =
            Router { stats: StatsContext::new(&cluster.alias, "internal-producer"), fatal: AtomicBool::new(false) };
        let producer = cfg
            .create_with_context(router)
            .map_err(|e| KafkaOpError::kafka(&cluster.alias, "create internal-topics producer", e))?;
        Ok(Self { producer })
    }

    pub fn is_fatal(&self) -> bool {
        self.producer.context().fatal.load(Ordering::Acquire)
    }
}

#[derive(Default)]
struct LaneState {
    in_flight: Mutex<usize>,
    changed: Condvar,
}

impl LaneState {
    fn settled(&self) {
        let mut n = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        *n = n.saturating_sub(1);
        self.changed.notify_all();
    }
}

/// One record to send.
pub struct Outgoing<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub key: &'a [u8],
    pub payload: &'a [u8],
    pub headers: Option<OwnedHeaders>,
    pub timestamp: Option<i64>,
}

/// Records one lane may have queued or in flight: a sender that writes faster than the cluster takes
/// (a wide flow's progress while the progress topic has no leader) is refused beyond it, and the
/// other flows' syncs, heartbeats and pauses still find room in the shared queue.
pub const LANE_MAX_IN_FLIGHT: usize = 50_000;

/// One sender's share of the connection's internal producer.
pub struct Lane {
    conn: Arc<super::Connection>,
    producer: Mutex<Arc<InternalProducer>>,
    state: Arc<LaneState>,
}

impl Lane {
    pub(super) fn new(conn: Arc<super::Connection>, producer: Arc<InternalProducer>) -> Self {
        Self { conn, producer: Mutex::new(producer), state: Arc::default() }
    }

    /// The producer to send with: the connection's replacement once the current one failed fatally
    /// (records still in flight on the old one report to this lane as before).
    fn producer(&self) -> Result<Arc<InternalProducer>, KafkaError> {
        let mut p = self.producer.lock().unwrap_or_else(|p| p.into_inner());
        if p.is_fatal() {
            *p = self
                .conn
                .internal_producer()
                .map_err(|_| KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::Fatal))?;
        }
        Ok(p.clone())
    }

    /// Queue `record`; `done` runs on the producer's thread with the outcome. Refused at once (queue
    /// full, this lane at [`LANE_MAX_IN_FLIGHT`], unknown partition, fatal producer): `done` does not
    /// run.
    pub fn send(
        &self,
        record: Outgoing<'_>,
        done: impl FnOnce(Outcome) + Send + Sync + 'static,
    ) -> Result<(), KafkaError> {
        let producer = self.producer()?;
        if self.in_flight() >= LANE_MAX_IN_FLIGHT {
            return Err(KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull));
        }
        let pending = Box::new(Pending { lane: self.state.clone(), done: Some(Box::new(done)) });
        let mut r = BaseRecord::with_opaque_to(record.topic, pending)
            .partition(record.partition)
            .key(record.key)
            .payload(record.payload);
        if let Some(h) = record.headers {
            r = r.headers(h);
        }
        if let Some(ts) = record.timestamp {
            r = r.timestamp(ts);
        }
        *self.state.in_flight.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        match producer.producer.send(r) {
            Ok(()) => Ok(()),
            Err((e, _)) => {
                if matches!(e, KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::Fatal)) {
                    producer.producer.context().fatal.store(true, Ordering::Release);
                }
                self.state.settled();
                Err(e)
            }
        }
    }

    /// This lane's records not yet reported.
    pub fn in_flight(&self) -> usize {
        *self.state.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wait until every record of this lane is reported, at most `timeout`. True if none is left.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        let mut n = self.state.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        while *n > 0 {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            n = self.state.changed.wait_timeout(n, left).unwrap_or_else(|p| p.into_inner()).0;
        }
        true
    }

    /// Wait until one of this lane's records is reported (or none is in flight), at most `timeout`.
    pub fn wait_report(&self, timeout: Duration) {
        let n = self.state.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        if *n == 0 {
            return;
        }
        let before = *n;
        let _ = self.state.changed.wait_timeout_while(n, timeout, |n| *n == before);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{DefaultProducerContext, ThreadedProducer};

    /// The ids of this process's threads named `name` (as /proc shows it: 15 characters at most).
    fn threads_named(name: &str) -> BTreeSet<String> {
        std::fs::read_dir("/proc/self/task")
            .expect("/proc/self/task")
            .flatten()
            .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == name))
            .map(|t| t.file_name().to_string_lossy().into_owned())
            .collect()
    }

    /// Time thread `tid` has run on a CPU (the scheduler's own count, in nanoseconds).
    fn ran(tid: &str) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).expect("schedstat");
        Duration::from_nanos(stat.split_whitespace().next().and_then(|n| n.parse().ok()).expect("run time"))
    }

    /// Every shared producer of ferry is a `ThreadedProducer`, whose thread polls with a 100 ms
    /// timeout. rdkafka turned the time left before a deadline into whole milliseconds rounding down,
    /// so the last fraction of each wait was polled with a timeout of 0 in a tight loop: up to 1 ms of
    /// a core per 100 ms, per producer, on an idle node (87 % of an idle one-flow node's CPU in `perf`).
    /// vendor/rdkafka rounds up (see vendor/README.md).
    #[test]
    fn an_idle_producers_polling_thread_sleeps_between_polls() {
        let before = threads_named("producer pollin");
        let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
            .set("bootstrap.servers", "127.0.0.1:1")
            .set("reconnect.backoff.max.ms", "10000")
            .create()
            .expect("producer");
        std::thread::sleep(Duration::from_millis(300));
        let ours: Vec<String> = threads_named("producer pollin").difference(&before).cloned().collect();
        assert_eq!(ours.len(), 1, "one polling thread of this producer: {ours:?}");
        let start = ran(&ours[0]);
        std::thread::sleep(Duration::from_secs(2));
        let used = ran(&ours[0]) - start;
        drop(producer);
        // Twenty polls of 100 ms: a few microseconds each when the thread sleeps through its waits, up
        // to 1 ms each when it spins at their ends.
        assert!(used < Duration::from_millis(4), "the idle polling thread ran {used:?} in 2 s");
    }

    /// rdkafka's `add_partition_offset` looked the partition up from the start of the list to set its
    /// offset: building a list of n partitions cost n*n/2 string comparisons (2 % of a 10,000-partition
    /// copy's CPU), and a partition listed twice had the offset set on its first element. vendor/rdkafka
    /// sets it on the element just added (see vendor/README.md).
    #[test]
    fn add_partition_offset_sets_the_element_it_adds() {
        use rdkafka::{Offset, TopicPartitionList};
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("t", 0, Offset::Offset(1)).expect("add");
        tpl.add_partition_offset("t", 0, Offset::Offset(2)).expect("add");
        let offsets: Vec<Offset> = tpl.elements().iter().map(|e| e.offset()).collect();
        assert_eq!(offsets, vec![Offset::Offset(1), Offset::Offset(2)]);
    }
}
