//! What the producer's delivery thread does with each report: advance the partition's acknowledged
//! position, apply the offset-sync rule, count the record. Per record this is one read lock, one map
//! lookup by the remote topic's name (no allocation), a few atomics and one uncontended partition lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Instant;

use prometheus::{Histogram, IntCounter};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::DeliveryResult;

use crate::clients::RecordSink;
use crate::flow::acks::{AckTable, DeliveryFailure, PartitionAck};
use crate::flow::offset_syncs::SyncQueue;
use crate::kafka::ClusterWatch;
use crate::sync_rule::{MarkedSync, PartitionRule, SyncReason};

/// One partition being copied in this copier lifetime.
pub struct Live {
    pub ack: Arc<PartitionAck>,
    /// A partition of the source's `heartbeats` topic: its acknowledged records feed the flow's
    /// heartbeat age.
    pub heartbeats: bool,
    pub records: IntCounter,
    /// This partition's own records series (`metrics_per_partition`).
    pub partition_records: Option<IntCounter>,
    pub bytes: IntCounter,
    pub latency: Histogram,
    rule: Mutex<RuleState>,
    /// The copier group took the partition away while records of it were still queued or in flight
    /// (the handover flush gave up, or the assignment was lost): their reports move nothing and
    /// publish no sync, because the next owner copies from its own position and its syncs must not be
    /// contradicted by this node's late ones.
    revoked: AtomicBool,
    /// Records of this partition the target acknowledged, and deliveries that failed, in this
    /// lifetime: what the foreign-record watch subtracts ([`super::foreign`]).
    written: AtomicU64,
    unsure: AtomicU64,
    /// The downstream offset of the first record of this partition the target acknowledged in this
    /// lifetime (-1: none yet): where the foreign-record count starts.
    first_downstream: AtomicI64,
    /// The foreign-record watch's last quiet look at the remote partition.
    foreign: Mutex<Option<super::foreign_count::Baseline>>,
}

/// The rule's state and whether the partition is in the quiet list, under one lock: a sync is queued
/// while the lock is held, so a partition's syncs enter the queue in the order the rule made them.
struct RuleState {
    rule: PartitionRule,
    in_quiet_list: bool,
}

impl Live {
    pub fn new(
        ack: Arc<PartitionAck>,
        heartbeats: bool,
        records: IntCounter,
        bytes: IntCounter,
        latency: Histogram,
        partition_records: Option<IntCounter>,
    ) -> Self {
        Self {
            heartbeats,
            records,
            partition_records,
            bytes,
            latency,
            rule: Mutex::new(RuleState { rule: PartitionRule::with_epoch(ack.epoch()), in_quiet_list: false }),
            ack,
            revoked: AtomicBool::new(false),
            written: AtomicU64::new(0),
            unsure: AtomicU64::new(0),
            first_downstream: AtomicI64::new(-1),
            foreign: Mutex::new(None),
        }
    }

    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    pub fn unsure(&self) -> u64 {
        self.unsure.load(Ordering::Acquire)
    }

    /// The downstream offset of this lifetime's first acknowledged record, if any.
    pub fn first_downstream(&self) -> Option<i64> {
        Some(self.first_downstream.load(Ordering::Acquire)).filter(|o| *o >= 0)
    }

    /// Replaces the foreign-record watch's baseline with `now`; the one it replaces, if any.
    pub fn foreign_baseline(&self, now: super::foreign_count::Baseline) -> Option<super::foreign_count::Baseline> {
        self.foreign.lock().unwrap_or_else(|p| p.into_inner()).replace(now)
    }

    /// Stop counting this partition's deliveries (see [`Live::revoked`]).
    pub fn revoke(&self) {
        self.revoked.store(true, Ordering::Release);
    }

    pub fn is_revoked(&self) -> bool {
        self.revoked.load(Ordering::Acquire)
    }

    fn rule(&self) -> MutexGuard<'_, RuleState> {
        self.rule.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The source partition was rewound: start a new run of syncs.
    pub fn rewind_rule(&self) {
        self.rule().rule.rewind();
    }
}

/// A remote topic's partitions, indexed by partition number.
#[derive(Default)]
pub struct RemoteTopic {
    pub parts: Vec<Option<Arc<Live>>>,
}

/// A source partition as [`Shared::by_source`] keys it.
type LiveKey = (Arc<str>, i32);

/// State shared between the copy loop and the delivery thread, for one copier lifetime.
pub struct Shared {
    pub acks: Arc<AckTable>,
    pub syncs: Arc<SyncQueue>,
    /// Marks this lifetime's offset syncs (see `sync_rule`).
    pub lifetime: u64,
    pub lag_max: i64,
    /// Remote topic name → its partitions; written by the copy loop when partitions come and go.
    pub remotes: RwLock<HashMap<String, RemoteTopic>>,
    /// The same partitions by source topic and partition (for the progress writer's bridges).
    by_source: RwLock<HashMap<LiveKey, Arc<Live>>>,
    /// Partitions with an unpublished acknowledged position, for the quiet rule.
    quiet: Mutex<Vec<Arc<Live>>>,
    /// Connection problems with the target, for degraded reporting.
    pub watch: Arc<ClusterWatch>,
    /// The flow's id and its heartbeat (target -> source: written into the source by this flow's
    /// heartbeat emitter, copied back by this copier: the whole pipeline's round trip).
    pub flow: String,
    pub heartbeat_from: String,
    pub heartbeat_to: String,
    /// Exactly-once: a transaction is open, and the syncs of its records wait in `held` for its
    /// commit (a sync must never point at a record that may still be aborted).
    txn_open: AtomicBool,
    held: Mutex<Vec<(MarkedSync, SyncReason)>>,
    /// Exactly-once: a transaction of this lifetime was aborted. Its acknowledged points may be aborted
    /// records, so no sync of this lifetime is published any more (its successor publishes its own).
    discarding: AtomicBool,
    /// A delivery report of this lifetime panicked (see [`RecordSink::report_panicked`]): the lifetime
    /// ends, and its successor starts from positions that never counted that record.
    panicked: Mutex<Option<String>>,
}

impl Shared {
    pub fn new(acks: Arc<AckTable>, syncs: Arc<SyncQueue>, lifetime: u64, plan: &crate::config::FlowPlan) -> Self {
        Self {
            flow: plan.id.to_string(),
            heartbeat_from: plan.id.target.clone(),
            heartbeat_to: plan.id.source.clone(),
            lag_max: plan.settings.offset_lag_max,
            acks,
            syncs,
            lifetime,
            remotes: RwLock::new(HashMap::new()),
            by_source: RwLock::new(HashMap::new()),
            quiet: Mutex::new(Vec::new()),
            watch: Arc::new(ClusterWatch::default()),
            txn_open: AtomicBool::new(false),
            held: Mutex::new(Vec::new()),
            discarding: AtomicBool::new(false),
            panicked: Mutex::new(None),
        }
    }

    /// Why this lifetime must end: a delivery report of its records panicked.
    pub fn panicked(&self) -> Option<String> {
        self.panicked.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Queue an offset sync, or hold it while a transaction is open.
    fn push_sync(&self, sync: MarkedSync, reason: SyncReason) {
        if self.discarding.load(Ordering::Acquire) {
            return;
        }
        if self.txn_open.load(Ordering::Acquire) {
            let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
            // Checked again under the lock: a commit that closed the transaction meanwhile drained it.
            if self.txn_open.load(Ordering::Acquire) {
                held.push((sync, reason));
                return;
            }
        }
        self.syncs.push(sync, reason);
    }

    /// A transaction begins: the syncs of its records are held from now on.
    pub fn transaction_opened(&self) {
        self.txn_open.store(true, Ordering::Release);
    }

    /// The transaction committed: its syncs go to the emitter, in the order they were made.
    pub fn transaction_committed(&self) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        self.txn_open.store(false, Ordering::Release);
        for (sync, reason) in held.drain(..) {
            self.syncs.push(sync, reason);
        }
    }

    /// After an abort, every report of the aborted records arrived and every partition that had records
    /// in the transaction starts a new run of syncs: syncs are published again.
    pub fn syncs_resume(&self) {
        self.discarding.store(false, Ordering::Release);
    }

    /// The transaction was aborted: its syncs point at records nobody will read; dropped, and so is
    /// every sync until [`Shared::syncs_resume`].
    pub fn transaction_aborted(&self) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        self.discarding.store(true, Ordering::Release);
        self.txn_open.store(false, Ordering::Release);
        held.clear();
    }

    pub fn insert(&self, remote: &str, partition: i32, live: Arc<Live>) {
        let mut remotes = self.remotes.write().unwrap_or_else(|p| p.into_inner());
        let topic = remotes.entry(remote.to_string()).or_default();
        let i = partition as usize;
        if topic.parts.len() <= i {
            topic.parts.resize(i + 1, None);
        }
        let source = (live.ack.topic.clone(), live.ack.partition);
        topic.parts[i] = Some(live.clone());
        self.by_source.write().unwrap_or_else(|p| p.into_inner()).insert(source, live);
    }

    /// Removes a partition (nothing of it is in flight any more).
    pub fn remove(&self, remote: &str, partition: i32) {
        let mut remotes = self.remotes.write().unwrap_or_else(|p| p.into_inner());
        if let Some(topic) = remotes.get_mut(remote) {
            if let Some(live) = topic.parts.get_mut(partition as usize).and_then(Option::take) {
                let source = (live.ack.topic.clone(), live.ack.partition);
                self.by_source.write().unwrap_or_else(|p| p.into_inner()).remove(&source);
            }
            if topic.parts.iter().all(Option::is_none) {
                remotes.remove(remote);
            }
        }
    }

    /// A previous owner's last position, at the start of this ownership (see `sync_rule::Bridge`).
    pub fn publish_handover(&self, sync: MarkedSync) {
        self.push_sync(sync, SyncReason::Handover);
    }

    /// Publishes the newest position of every partition in the quiet list that has been quiet long
    /// enough (all of them with `force`). Cost: the partitions that moved since they were last quiet.
    pub fn publish_quiet(&self, now: Instant, force: bool) {
        if !force && crate::failpoints::held(crate::failpoints::COPIER_QUIET) {
            return;
        }
        let candidates = std::mem::take(&mut *self.quiet.lock().unwrap_or_else(|p| p.into_inner()));
        let mut keep = Vec::new();
        for live in candidates {
            if live.is_revoked() {
                continue;
            }
            let mut st = live.rule();
            if let Some(point) = st.rule.quiet(self.lifetime, now, force) {
                self.push_sync(point.named(&live.ack.topic, live.ack.partition), SyncReason::Quiet);
            }
            st.in_quiet_list = st.rule.has_unpublished();
            if st.in_quiet_list {
                drop(st);
                keep.push(live);
            }
        }
        if !keep.is_empty() {
            self.quiet.lock().unwrap_or_else(|p| p.into_inner()).extend(keep);
        }
    }

    fn acked(
        &self,
        live: &Arc<Live>,
        upstream: i64,
        downstream: i64,
        value_bytes: usize,
        timestamp_ms: Option<i64>,
        heartbeat: Option<(&[u8], Option<&[u8]>)>,
    ) {
        // Before `written`: a look that sees this record counted sees where the count starts.
        let _ = live.first_downstream.compare_exchange(-1, downstream, Ordering::AcqRel, Ordering::Acquire);
        live.written.fetch_add(1, Ordering::AcqRel);
        live.ack.acked(&self.acks, upstream);
        {
            let mut st = live.rule();
            match st.rule.on_ack(self.lifetime, self.lag_max, upstream, downstream, Instant::now()) {
                Some((point, reason)) => self.push_sync(point.named(&live.ack.topic, live.ack.partition), reason),
                None if !st.in_quiet_list => {
                    st.in_quiet_list = true;
                    self.quiet.lock().unwrap_or_else(|p| p.into_inner()).push(live.clone());
                }
                None => {}
            }
        }
        live.records.inc();
        if let Some(c) = &live.partition_records {
            c.inc();
        }
        live.bytes.inc_by(value_bytes as u64);
        if live.heartbeats
            && let Some((key, value)) = heartbeat
            && let Ok(hb) = crate::mm2::records::Heartbeat::decode(key, value)
            && hb.source_alias == self.heartbeat_from
            && hb.target_alias == self.heartbeat_to
        {
            crate::metrics::METRICS.heartbeat_seen(&self.flow, hb.timestamp_ms);
        }
        if let Some(ts) = timestamp_ms {
            live.latency.observe(latency_seconds(ts));
        }
    }
}

/// Milliseconds since the epoch, now.
pub fn wall_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Seconds from a record's timestamp to `now_ms` (0 for timestamps in the future: clocks differ).
pub fn seconds_since(timestamp_ms: i64, now_ms: i64) -> f64 {
    ((now_ms - timestamp_ms).max(0) as f64) / 1000.0
}

/// Seconds from a record's timestamp to now.
pub fn latency_seconds(timestamp_ms: i64) -> f64 {
    seconds_since(timestamp_ms, wall_ms())
}

/// Errors for which sending the same record again soon cannot succeed: the target refuses the record
/// itself, or refuses ferry.
pub fn is_permanent(code: Option<RDKafkaErrorCode>) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        code,
        Some(
            C::MessageSizeTooLarge
                | C::InvalidMessageSize
                | C::InvalidMessage
                | C::InvalidRecord
                | C::TopicAuthorizationFailed
                | C::ClusterAuthorizationFailed
                | C::PolicyViolation
                | C::InvalidTopic
                | C::InvalidRequiredAcks
                | C::UnsupportedForMessageFormat
                | C::InvalidTimestamp
        )
    )
}

impl crate::flow::progress::Bridges for Shared {
    /// This lifetime's last acknowledged position of the partition, or the previous owner's it adopted.
    fn bridge(&self, slot: &PartitionAck) -> Option<crate::sync_rule::Bridge> {
        let live = self
            .by_source
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(slot.topic.clone(), slot.partition))
            .cloned();
        live.and_then(|l| l.rule().rule.bridge(self.lifetime)).or_else(|| slot.bridge())
    }
}

/// This copier lifetime's end of the shared record producer: each delivery report of its records
/// comes here, to its partition.
pub struct DeliveryContext(pub Arc<Shared>);

impl RecordSink for DeliveryContext {
    fn report_panicked(&self, topic: &str, partition: i32, upstream: i64, panic: &str) {
        let shared = &self.0;
        let error =
            format!("the delivery report of {topic}-{partition} (upstream offset {upstream}) panicked: {panic}");
        tracing::error!(flow = %shared.flow, error, "the copier's delivery report failed; the copier restarts");
        let remotes = shared.remotes.read().unwrap_or_else(|p| p.into_inner());
        if let Some(live) = remotes.get(topic).and_then(|t| t.parts.get(partition as usize)).and_then(|l| l.as_ref()) {
            // Whether the record reached the target is unknown: the position freezes before it, so no
            // later acknowledgement can move past it. Whether the report counted it out of flight is
            // unknown too: the next lifetime settles the counts from the producer's own (see
            // `AckTable::settle_in_flight`).
            let failure = DeliveryFailure {
                offset: upstream,
                size: 0,
                error: error.clone(),
                permanent: false,
                unknown_partition: false,
                purged: false,
            };
            live.ack.fail(&shared.acks, failure, false);
        }
        shared.panicked.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(error);
    }

    fn client_error(&self, error: &KafkaError, reason: &str) {
        self.0.watch.record(error, reason);
    }

    fn delivered(&self, result: &DeliveryResult<'_>, upstream: i64) {
        if let Err(e) = crate::failpoints::check(crate::failpoints::COPIER_REPORT) {
            tracing::warn!(error = %e, "ignored: copier-report is meant to panic");
        }
        let shared = &self.0;
        let remotes = shared.remotes.read().unwrap_or_else(|p| p.into_inner());
        let msg = match result {
            Ok(m) => m,
            Err((_, m)) => m,
        };
        let Some(live) =
            remotes.get(msg.topic()).and_then(|t| t.parts.get(msg.partition() as usize)).and_then(|l| l.as_ref())
        else {
            // Only partitions with nothing in flight are removed, so this cannot happen; if it did,
            // the record simply does not count and is copied again.
            tracing::warn!(
                topic = msg.topic(),
                partition = msg.partition(),
                upstream,
                "delivery report for a partition that is not being copied"
            );
            return;
        };
        if live.is_revoked() {
            live.ack.settled_unowned(result.as_ref().ok().map(|_| upstream));
            return;
        }
        match result {
            Ok(m) => {
                let heartbeat = live.heartbeats.then(|| (m.key().unwrap_or_default(), m.payload()));
                shared.acked(live, upstream, m.offset(), m.payload_len(), m.timestamp().to_millis(), heartbeat)
            }
            Err((e, m)) => {
                let code = e.rdkafka_error_code();
                let failure = DeliveryFailure {
                    offset: upstream,
                    size: m.payload_len() + m.key().map_or(0, <[u8]>::len),
                    error: e.to_string(),
                    permanent: is_permanent(code),
                    unknown_partition: code == Some(RDKafkaErrorCode::UnknownPartition),
                    purged: matches!(code, Some(RDKafkaErrorCode::PurgeQueue | RDKafkaErrorCode::PurgeInflight)),
                };
                live.unsure.fetch_add(1, Ordering::AcqRel);
                live.ack.fail(&shared.acks, failure, true);
            }
        }
    }
}
