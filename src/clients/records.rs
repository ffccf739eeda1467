//! One record producer per target connection and tuning, shared by every at-least-once flow that
//! copies into that cluster with that tuning (compression, linger, batch size: settings of the whole
//! librdkafka client, so flows that differ in them cannot share one).
//!
//! Each copier lifetime sends through a [`RecordLane`]. Every record carries its lane and its upstream
//! offset, so its delivery report reaches the [`RecordSink`] of the flow that sent it and nobody else.
//! A lane counts its own records and bytes not yet reported and is refused beyond its share
//! ([`LANE_MAX_RECORDS`], [`LANE_MAX_BYTES`], today's limits of a flow's own producer): a flow whose
//! target partitions take nothing fills its own share and waits, while the other flows still find
//! room in the shared queue, which is bounded only by the sum of the shares. A lane waits for *its*
//! records ([`RecordLane::wait_idle`]); nothing here purges or flushes the producer, which would touch
//! every flow's records.
//!
//! The producer's record limit (`message.max.bytes`) is the largest a produce request may be, 100 MB:
//! whether a large record is taken is the remote topic's `max.message.bytes`, checked by the broker.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::client::Client;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::statistics::Statistics;

use super::stats::{self, StatsContext};
use crate::config::ClusterSpec;
use crate::kafka::{self, KafkaOpError};

/// Records one lane may have queued or in flight at its largest share (librdkafka's default queue of a
/// producer of its own); a smaller share gets proportionally fewer.
pub const LANE_MAX_RECORDS: usize = 100_000;
/// Bytes (keys and values) one lane may have queued or in flight at most: measured as enough for the copy
/// rate of one flow ([`super::budget`]). A lane gets its flow's share of the node's budget, at most this.
pub const LANE_MAX_BYTES: usize = super::budget::FLOW_MAX_BYTES;
/// The producer's `message.max.bytes`: it also bounds a produce request, which brokers refuse above
/// `socket.request.max.bytes` (100 MiB by default).
pub const MAX_REQUEST_BYTES: i64 = 100_000_000;

/// The records a lane of `max_bytes` may hold: [`LANE_MAX_RECORDS`] in proportion.
fn lane_max_records(max_bytes: usize) -> usize {
    (LANE_MAX_RECORDS as u128 * max_bytes as u128 / LANE_MAX_BYTES as u128) as usize
}

/// The producer settings that are the whole client's, not a record's: flows that agree on them share.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RecordTuning {
    pub compression: String,
    /// `linger.ms` as librdkafka reads it (fractions allowed).
    pub linger_ms: String,
    pub batch_size: i64,
}

/// Where a flow's delivery reports go (the copier implements it; this module knows no flow code).
pub trait RecordSink: Send + Sync {
    /// The target acknowledged or refused the record copied from `upstream`. Runs on the producer's
    /// thread, for every flow's records: it must be quick and never block.
    fn delivered(&self, result: &DeliveryResult<'_>, upstream: i64);
    /// [`RecordSink::delivered`] panicked for the record copied from `upstream` to `topic` `partition`:
    /// what became of the record is unknown to the flow, which must not count it as copied.
    fn report_panicked(&self, topic: &str, partition: i32, upstream: i64, panic: &str);
    /// The producer reported a client-level error (a broker away): the flow's health may show it. The
    /// error is logged once by the producer, not by each flow.
    fn client_error(&self, error: &KafkaError, reason: &str);
}

/// One lane's share: its sink and what it has queued or in flight.
struct Share {
    /// Who sends (the flow): a later lane of the same owner can wait for this one's records.
    owner: String,
    sink: Arc<dyn RecordSink>,
    records: AtomicUsize,
    bytes: AtomicUsize,
    /// This lane's limits, fixed when it starts ([`super::budget`]).
    max_records: usize,
    max_bytes: usize,
}

impl Share {
    fn settled(&self, bytes: usize) {
        self.bytes.fetch_sub(bytes, Ordering::AcqRel);
        self.records.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The opaque each record carries. One small allocation per record: a few tens of nanoseconds next to
/// the microseconds a record costs, and it keeps upstream offsets of any size.
pub struct Pending {
    share: Arc<Share>,
    upstream: i64,
    bytes: usize,
}

/// The upstream offset of a record that is not a copy (an exactly-once flow's progress record in the
/// same transaction): its report goes to no sink, the transaction's commit is what confirms it.
pub const UNTRACKED: i64 = i64::MIN;

/// A record for [`RecordLane::send`]: built by [`RecordLane::record`], then given key, payload,
/// headers, partition and timestamp by the sender.
pub type Record<'a> = BaseRecord<'a, [u8], [u8], Box<Pending>>;

/// Routes reports to the lanes that sent them; notes a fatal error so that lanes move to a new producer.
pub struct Router {
    stats: StatsContext,
    fatal: AtomicBool,
    /// Every lane's share, for client-level errors (weak: a lane that is gone is skipped).
    shares: Mutex<Vec<Weak<Share>>>,
}

impl ClientContext for Router {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, line: &str) {
        self.stats.log(level, fac, line);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if matches!(error.rdkafka_error_code(), Some(RDKafkaErrorCode::Fatal)) {
            self.fatal.store(true, Ordering::Release);
        }
        for share in self.shares.lock().unwrap_or_else(|p| p.into_inner()).iter().filter_map(Weak::upgrade) {
            share.sink.client_error(&error, reason);
        }
        self.stats.error(error, reason);
    }

    fn stats(&self, statistics: Statistics) {
        self.stats.stats(statistics);
    }
}

impl ProducerContext for Router {
    type DeliveryOpaque = Box<Pending>;

    fn delivery(&self, result: &DeliveryResult<'_>, pending: Box<Pending>) {
        if let Err((KafkaError::MessageProduction(RDKafkaErrorCode::Fatal), _)) = result {
            self.fatal.store(true, Ordering::Release);
        }
        if pending.upstream != UNTRACKED {
            // A panic must not unwind out of the producer's thread: it would stop the reports of every
            // flow on the producer for good. The flow is told instead, and the record is settled below
            // as any other, so that nothing waits for it.
            let sink = &pending.share.sink;
            let report =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink.delivered(result, pending.upstream)));
            if let Err(panic) = report {
                let msg = match result {
                    Ok(m) => m,
                    Err((_, m)) => m,
                };
                let why = crate::panics::panic_message(&panic);
                sink.report_panicked(
                    rdkafka::Message::topic(msg),
                    rdkafka::Message::partition(msg),
                    pending.upstream,
                    &why,
                );
            }
        }
        pending.share.settled(pending.bytes);
    }
}

/// The shared producer of copied records (acks=all, idempotent: each partition's records stay in order
/// and are written once however often librdkafka retries).
pub struct RecordProducer {
    producer: ThreadedProducer<Router>,
}

impl RecordProducer {
    fn new(cluster: &ClusterSpec, tuning: &RecordTuning) -> Result<Self, KafkaOpError> {
        Self::with(cluster, tuning, None)
    }

    /// `transactional`: the transactional id of an exactly-once flow's own producer, never shared.
    fn with(cluster: &ClusterSpec, tuning: &RecordTuning, transactional: Option<&str>) -> Result<Self, KafkaOpError> {
        let mut cfg = kafka::client_config(cluster, &"ferry", "record-producer")?;
        // The client id names the producer in the brokers' quotas and request logs: the cluster's own
        // `client.id`, if it sets one, scopes a quota to the flows of that cluster definition.
        let prefix = cluster.client.get("client.id").map_or("ferry", String::as_str);
        cfg.set("client.id", format!("{prefix}|record-producer"))
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("compression.type", &tuning.compression)
            .set("linger.ms", &tuning.linger_ms)
            .set("batch.size", tuning.batch_size.to_string())
            .set("message.max.bytes", MAX_REQUEST_BYTES.to_string())
            // The lanes' shares bound the queue (see the module docs); librdkafka's own limits must
            // not refuse a lane within its share because other lanes hold theirs.
            .set("queue.buffering.max.messages", "2147483647")
            .set("queue.buffering.max.kbytes", "2147483647")
            // A record that cannot be delivered within five minutes fails its partition, which is
            // retried from its last acknowledged position, instead of hiding an outage forever.
            .set("message.timeout.ms", "300000");
        if let Some(id) = transactional {
            // A transaction that is neither committed nor aborted within this long (a frozen node) is
            // aborted by the coordinator, which also fences the producer. librdkafka requires
            // `message.timeout.ms` not to exceed it.
            cfg.set("transactional.id", id)
                .set("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS.to_string())
                .set("message.timeout.ms", TRANSACTION_TIMEOUT_MS.to_string());
        }
        stats::enable(&mut cfg);
        let router = Router {
            stats: StatsContext::new(&cluster.alias, "record-producer"),
            fatal: AtomicBool::new(false),
            shares: Mutex::new(Vec::new()),
        };
        let producer = cfg
            .create_with_context(router)
            .map_err(|e| KafkaOpError::kafka(&cluster.alias, "create record producer", e))?;
        Ok(Self { producer })
    }

    fn is_fatal(&self) -> bool {
        self.producer.context().fatal.load(Ordering::Acquire)
    }

    /// Records of `owner`'s lanes (live or ended) not yet reported.
    fn in_flight_of(&self, owner: &str) -> usize {
        let shares = self.producer.context().shares.lock().unwrap_or_else(|p| p.into_inner());
        shares
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|s| s.owner == owner)
            .map(|s| s.records.load(Ordering::Acquire))
            .sum()
    }

    fn register(&self, share: &Arc<Share>) {
        let mut shares = self.producer.context().shares.lock().unwrap_or_else(|p| p.into_inner());
        shares.retain(|s| s.strong_count() > 0);
        shares.push(Arc::downgrade(share));
    }
}

/// The coordinator aborts (and fences) an exactly-once producer's transaction open this long.
pub const TRANSACTION_TIMEOUT_MS: u64 = 60_000;

/// A connection's record producers, one per tuning in use; each goes with its last lane.
#[derive(Default)]
pub(super) struct RecordProducers(Mutex<HashMap<RecordTuning, Weak<RecordProducer>>>);

impl RecordProducers {
    /// The live producer of `tuning`, a new one if there is none or it failed fatally.
    pub(super) fn get(
        &self,
        cluster: &ClusterSpec,
        tuning: &RecordTuning,
    ) -> Result<Arc<RecordProducer>, KafkaOpError> {
        let mut live = self.0.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|_, w| w.strong_count() > 0);
        if let Some(p) = live.get(tuning).and_then(Weak::upgrade) {
            if !p.is_fatal() {
                return Ok(p);
            }
            tracing::warn!(cluster = %cluster.alias, "the record producer failed fatally; replacing it");
        }
        let p = Arc::new(RecordProducer::new(cluster, tuning)?);
        live.insert(tuning.clone(), Arc::downgrade(&p));
        Ok(p)
    }

    /// Records that lanes of `owner` sent on any of these producers and that are not reported yet.
    pub(super) fn in_flight_of(&self, owner: &str) -> usize {
        let live: Vec<Arc<RecordProducer>> =
            self.0.lock().unwrap_or_else(|p| p.into_inner()).values().filter_map(Weak::upgrade).collect();
        live.iter().map(|p| p.in_flight_of(owner)).sum()
    }
}

/// One copier lifetime's share of its target's record producer.
pub struct RecordLane {
    conn: Arc<super::Connection>,
    tuning: RecordTuning,
    producer: Arc<RecordProducer>,
    share: Arc<Share>,
    /// An exactly-once flow's own producer: a fatal error ends the copier (its transactions are
    /// gone), it is never swapped for a shared one.
    transactional: bool,
}

impl RecordLane {
    pub(super) fn new(
        conn: Arc<super::Connection>,
        owner: &str,
        tuning: RecordTuning,
        sink: Arc<dyn RecordSink>,
    ) -> Result<Self, KafkaOpError> {
        let producer = conn.record_producer(&tuning)?;
        Ok(Self::on(conn, owner, tuning, sink, producer, false))
    }

    /// An exactly-once flow's lane: a producer of its own with `transactional_id`, which nothing else
    /// shares (a transaction is the whole producer's). Transactions are not initialised yet.
    pub(super) fn transactional(
        conn: Arc<super::Connection>,
        owner: &str,
        tuning: RecordTuning,
        sink: Arc<dyn RecordSink>,
        transactional_id: &str,
    ) -> Result<Self, KafkaOpError> {
        let producer = Arc::new(RecordProducer::with(&conn.cluster, &tuning, Some(transactional_id))?);
        Ok(Self::on(conn, owner, tuning, sink, producer, true))
    }

    /// A lane of `producer` with its share of the node's budget, registered for its reports.
    fn on(
        conn: Arc<super::Connection>,
        owner: &str,
        tuning: RecordTuning,
        sink: Arc<dyn RecordSink>,
        producer: Arc<RecordProducer>,
        transactional: bool,
    ) -> Self {
        let max_bytes = super::budget::flow_share().min(LANE_MAX_BYTES);
        let share = Arc::new(Share {
            owner: owner.to_string(),
            sink,
            records: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            max_records: lane_max_records(max_bytes),
            max_bytes,
        });
        producer.register(&share);
        Self { conn, tuning, producer, share, transactional }
    }

    /// The producer, for an exactly-once lane's transactions (`init`, `begin`, `commit`, `abort`).
    pub fn producer(&self) -> &ThreadedProducer<Router> {
        &self.producer.producer
    }

    /// A record to `topic`, copied from `upstream`.
    pub fn record<'a>(&self, topic: &'a str, upstream: i64) -> Record<'a> {
        BaseRecord::with_opaque_to(topic, Box::new(Pending { share: self.share.clone(), upstream, bytes: 0 }))
    }

    /// Queue `record`. Refused with `QueueFull` while this lane holds its share (the record comes back
    /// to be sent again), and with librdkafka's error otherwise; a refused record gets no report.
    #[allow(clippy::result_large_err)] // rdkafka's own `send` hands the record back the same way
    pub fn send<'a>(&mut self, mut record: Record<'a>) -> Result<(), (KafkaError, Record<'a>)> {
        if self.producer.is_fatal() {
            // An exactly-once lane's transaction went with its producer: it is never swapped.
            if self.transactional {
                return Err((KafkaError::MessageProduction(RDKafkaErrorCode::Fatal), record));
            }
            // Records in flight on the old producer report to this lane as before.
            match self.conn.record_producer(&self.tuning) {
                Ok(p) => {
                    p.register(&self.share);
                    self.producer = p;
                }
                Err(_) => return Err((KafkaError::MessageProduction(RDKafkaErrorCode::Fatal), record)),
            }
        }
        let bytes = record.payload.map_or(0, <[u8]>::len) + record.key.map_or(0, <[u8]>::len);
        let held = self.share.bytes.load(Ordering::Acquire);
        if self.share.records.load(Ordering::Acquire) >= self.share.max_records
            || (held > 0 && held + bytes > self.share.max_bytes)
        {
            return Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), record));
        }
        record.delivery_opaque.bytes = bytes;
        self.share.records.fetch_add(1, Ordering::AcqRel);
        self.share.bytes.fetch_add(bytes, Ordering::AcqRel);
        match self.producer.producer.send(record) {
            Ok(()) => Ok(()),
            Err((e, back)) => {
                if matches!(e, KafkaError::MessageProduction(RDKafkaErrorCode::Fatal)) {
                    self.producer.producer.context().fatal.store(true, Ordering::Release);
                }
                self.share.settled(bytes);
                Err((e, back))
            }
        }
    }

    /// This lane's records not yet reported.
    pub fn in_flight(&self) -> usize {
        self.share.records.load(Ordering::Acquire)
    }

    /// Wait until every record of this lane is reported, at most `timeout`. True if none is left.
    /// Polled: only handovers, pauses and stops wait, and a report costs no wake-up this way.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        while self.in_flight() > 0 {
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        true
    }

    /// The producer's client (metadata of the target's topics).
    pub fn client(&self) -> &Client<Router> {
        self.producer.producer.client()
    }
}
