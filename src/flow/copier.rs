//! The record copier: consumes the flow's source partitions and produces every record to its remote
//! topic on the target, same partition, key, value, headers and timestamp.
//!
//! Records never pass through an actor mailbox: the copy loop runs on its own thread with rdkafka's
//! consumer and a threaded producer, and the [`RecordCopier`] actor only carries control (assignments,
//! stop) to it. Delivery reports advance the supervisor-owned [`AckTable`]; once a second the loop
//! persists the acknowledged positions in MM2's offsets topic. At-least-once: a source position counts
//! only after the target acknowledged the record.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock, mpsc};
use std::time::{Duration, Instant};

use actix::Addr;
use prometheus::IntCounter;
use rdkafka::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

use super::acks::{AckTable, SourcePartition};
use super::offset_syncs::SyncQueue;
use super::progress::{self, ProgressWriter};
use super::supervisor::{ActorKind, ActorStatusChanged, FlowSupervisor};
use super::worker::{Control, Signal, Worker, panic_message};
use crate::config::{FlowPlan, SourceGapPolicy};
use crate::failpoints;
use crate::kafka::{self, ClusterWatch, KafkaOpError, WatchedConsumer};
use crate::metrics::METRICS;
use crate::status::ActorState;
use crate::sync_rule::SyncRule;

/// Persist acknowledged positions this often: bounds what a `kill -9` copies twice to about a quarter
/// second of traffic. A round is one small record per moved partition and one flush (a few ms).
const PERSIST_INTERVAL: Duration = Duration::from_millis(250);
/// How long one `poll` waits for records before the loop looks at its control channel again.
const POLL_WAIT: Duration = Duration::from_millis(100);

/// The copier's control message: the complete set of source partitions to mirror (each one's remote
/// partition exists on the target).
pub type Assignment = BTreeSet<SourcePartition>;

/// The copier as a supervised actor.
pub fn worker(
    plan: Arc<FlowPlan>,
    acks: Arc<AckTable>,
    syncs: Arc<SyncQueue>,
    supervisor: Addr<FlowSupervisor>,
    initial: Assignment,
) -> Worker<Assignment> {
    let name = format!("copier {}", plan.id);
    let initial = if initial.is_empty() { Vec::new() } else { vec![initial] };
    let sup = supervisor.clone();
    Worker::new(ActorKind::Copier, name, supervisor, initial, move |control| {
        CopyLoop { plan, acks, syncs, control, supervisor: sup }.run()
    })
}

/// Per remote topic: where its records came from, and the metric children to bump.
struct RemoteTopic {
    source: String,
    records: IntCounter,
    bytes: IntCounter,
}

/// Receives delivery reports on the producer's polling thread.
struct DeliveryContext {
    acks: Arc<AckTable>,
    /// Offset-sync rule of this copier lifetime; also ticked by the loop for quiet partitions.
    rule: Arc<Mutex<SyncRule>>,
    syncs: Arc<SyncQueue>,
    /// Connection problems with the target, for degraded reporting.
    watch: Arc<ClusterWatch>,
    /// Remote topic → its source topic; read per report, written when topics are assigned.
    remotes: RwLock<HashMap<String, RemoteTopic>>,
}

impl ClientContext for DeliveryContext {
    fn error(&self, error: KafkaError, reason: &str) {
        self.watch.record(&error, reason);
        tracing::warn!(error = %error, reason, "target client error");
    }
}

impl ProducerContext for DeliveryContext {
    /// The upstream offset of the record.
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, upstream: usize) {
        let upstream = upstream as i64;
        let remotes = self.remotes.read().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(msg) => {
                if let Some(rt) = remotes.get(msg.topic()) {
                    self.acks.acked(&rt.source, msg.partition(), upstream);
                    let mut rule = self.rule.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some((sync, reason)) =
                        rule.on_ack(&rt.source, msg.partition(), upstream, msg.offset(), Instant::now())
                    {
                        self.syncs.push(sync, reason);
                    }
                    drop(rule);
                    rt.records.inc();
                    rt.bytes.inc_by(msg.payload_len() as u64);
                }
            }
            Err((e, msg)) => {
                let source = remotes.get(msg.topic()).map_or(msg.topic(), |rt| rt.source.as_str());
                self.acks.failed(source, msg.partition(), upstream, e.to_string());
            }
        }
    }
}

/// Everything the copy loop needs; built by the actor, moved into the thread.
struct CopyLoop {
    plan: Arc<FlowPlan>,
    acks: Arc<AckTable>,
    syncs: Arc<SyncQueue>,
    control: Control<Assignment>,
    supervisor: Addr<FlowSupervisor>,
}

/// How long after librdkafka's last connection error a cluster still counts as away.
const DEGRADED_WINDOW: Duration = Duration::from_secs(15);

/// Where each assigned source partition should continue: the offset after the last record seen, or
/// the position it was assigned at. A record beyond it means records vanished (see [`CopyLoop::gap`]).
#[derive(Default)]
struct Expected(HashMap<String, HashMap<i32, i64>>);

/// A compacted topic has gaps everywhere; checking the log start for each would cost a broker round
/// trip per gap. One check per partition per this interval bounds that (a retention loss inside the
/// same interval on a compact+delete topic can then go unreported).
const GAP_CHECK_INTERVAL: Duration = Duration::from_secs(1);

impl Expected {
    fn set(&mut self, topic: &str, partition: i32, next: i64) {
        match self.0.get_mut(topic) {
            Some(parts) => {
                parts.insert(partition, next);
            }
            None => {
                self.0.entry(topic.to_string()).or_default().insert(partition, next);
            }
        }
    }

    /// Record that `offset` arrived; returns the offset that was expected instead, if different.
    fn arrived(&mut self, topic: &str, partition: i32, offset: i64) -> Option<i64> {
        let parts = self.0.get_mut(topic)?;
        let previous = parts.insert(partition, offset + 1);
        previous.filter(|e| *e != offset)
    }
}

impl CopyLoop {
    fn run(self) -> Result<(), String> {
        let plan = &self.plan;
        let flow = plan.id.to_string();
        let err = |e: KafkaOpError| e.to_string();

        // Recover persisted progress once per flow lifetime; restarts reuse the in-memory table.
        // Connect's offsets topic has 25 partitions unless someone created it otherwise: key records onto
        // the partitions that really exist.
        let offsets_partitions =
            kafka::ensure_topic(&plan.target, &plan.id, &progress::topic_spec(plan)).map_err(err)?;
        let persisted = if !self.acks.is_recovered() {
            let positions = progress::load(plan, offsets_partitions).map_err(err)?;
            tracing::info!(flow = %flow, partitions = positions.len(), "recovered copy progress");
            self.acks.seed(positions.clone());
            self.acks.set_recovered();
            positions
        } else {
            HashMap::new()
        };
        self.acks.clear_failures();
        let mut writer = ProgressWriter::new(plan, offsets_partitions, persisted).map_err(err)?;

        let source_watch = Arc::new(ClusterWatch::default());
        let target_watch = Arc::new(ClusterWatch::default());
        let consumer = source_consumer(plan, source_watch.clone()).map_err(err)?;
        let rule = Arc::new(Mutex::new(SyncRule::new(lifetime_id(), plan.settings.offset_lag_max)));
        let context = DeliveryContext {
            acks: self.acks.clone(),
            rule: rule.clone(),
            syncs: self.syncs.clone(),
            watch: target_watch.clone(),
            remotes: RwLock::new(HashMap::new()),
        };
        let producer = target_producer(plan, context).map_err(err)?;
        let mut assigned: BTreeSet<SourcePartition> = BTreeSet::new();
        let mut renames: HashMap<String, String> = HashMap::new();
        let mut expected = Expected::default();
        let mut gap_checks: HashMap<(String, i32), Instant> = HashMap::new();
        let mut last_persist = Instant::now();
        let gauge = METRICS.partitions_assigned.with_label_values(&[&flow]);
        self.control.running(); // before the health reporter, whose reports must come after this one
        let _health = HealthReporter::start(plan, &self.supervisor, &source_watch, &target_watch)?;

        // A panic in the loop still goes through the ordered shutdown below: in-flight records are flushed
        // rather than purged, and the final position of every partition is published. Otherwise a partition
        // that receives nothing after the restart would never get its last position synced.
        let copied = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            'copy: loop {
                // With nothing assigned, wait for an assignment instead of spinning on poll.
                let signal =
                    if assigned.is_empty() { self.control.next_within(POLL_WAIT) } else { self.control.try_next() };
                match signal {
                    Some(Signal::Msg(wanted)) => {
                        if let Err(e) =
                            self.reassign(&consumer, &producer, &mut assigned, &mut renames, &mut expected, wanted)
                        {
                            break Err(e);
                        }
                        gauge.set(assigned.len() as i64);
                    }
                    Some(Signal::Stop { deadline }) => break Ok(deadline),
                    None => {}
                }
                if let Some(failure) = self.acks.first_failure() {
                    break Err(format!("delivery to the target failed: {failure}"));
                }
                if self.syncs.is_backlogged() {
                    // The offset-sync emitter is behind (its cluster may be away): stop copying rather than
                    // drop syncs; the queue drains when it comes back.
                    std::thread::sleep(POLL_WAIT);
                } else if !assigned.is_empty() {
                    if let Err(e) = failpoints::check(failpoints::COPIER_POLL) {
                        break Err(e);
                    }
                    // Drain what the consumer has buffered, then come back to the control channel.
                    let mut budget = 10_000;
                    let mut wait = POLL_WAIT;
                    while budget > 0 {
                        match consumer.poll(wait) {
                            None => break,
                            Some(Ok(msg)) => {
                                let Some(remote) = renames.get(msg.topic()) else { continue };
                                if let Some(want) = expected.arrived(msg.topic(), msg.partition(), msg.offset()) {
                                    let (t, p, o) = (msg.topic(), msg.partition(), msg.offset());
                                    if let Err(e) = self.gap(&consumer, &mut gap_checks, t, p, want, o) {
                                        break 'copy Err(e);
                                    }
                                }
                                if let Err(e) = self.send(&producer, remote, &msg) {
                                    break 'copy Err(e);
                                }
                            }
                            Some(Err(e)) => {
                                tracing::warn!(flow = %flow, error = %e, "source consumer error");
                                break;
                            }
                        }
                        budget -= 1;
                        wait = Duration::ZERO;
                    }
                }
                let quiet = rule.lock().unwrap_or_else(|p| p.into_inner()).quiet_syncs(Instant::now(), false);
                self.syncs.push_quiet(quiet);
                if last_persist.elapsed() >= PERSIST_INTERVAL {
                    if let Err(e) = self.persist(&mut writer) {
                        break Err(e);
                    }
                    last_persist = Instant::now();
                }
            }
        }));
        let outcome: Result<Instant, String> =
            copied.unwrap_or_else(|panic| Err(format!("panicked: {}", panic_message(&panic))));

        // Ordered shutdown (also after an error, so that what was acknowledged is not copied again).
        let deadline = match &outcome {
            Ok(deadline) => *deadline,
            Err(_) => Instant::now() + Duration::from_secs(5),
        };
        let _ = consumer.unassign();
        let remaining = deadline.saturating_duration_since(Instant::now());
        if let Err(e) = producer.flush(remaining) {
            tracing::warn!(flow = %flow, error = %e, in_flight = producer.in_flight_count(), "not every record was acknowledged before the deadline");
        }
        drop(producer); // joins the delivery thread: every report is in the ack table now
        // Publish the final position of every partition, so translation is exact after the stop.
        let last = rule.lock().unwrap_or_else(|p| p.into_inner()).quiet_syncs(Instant::now(), true);
        self.syncs.push_quiet(last);
        let persisted = self.persist(&mut writer);
        outcome?;
        persisted
    }

    /// Apply a new partition set: assign new partitions at their acknowledged position (or the earliest
    /// offset when none is known, like MM2), unassign those that went away.
    fn reassign(
        &self,
        consumer: &BaseConsumer<WatchedConsumer>,
        producer: &ThreadedProducer<DeliveryContext>,
        assigned: &mut BTreeSet<SourcePartition>,
        renames: &mut HashMap<String, String>,
        expected: &mut Expected,
        wanted: BTreeSet<SourcePartition>,
    ) -> Result<(), String> {
        let flow = &self.plan.id;
        let mut add = TopicPartitionList::new();
        for (topic, partition) in wanted.difference(assigned) {
            let offset = match self.acks.next(topic, *partition) {
                Some(next) => {
                    expected.set(topic, *partition, next);
                    Offset::Offset(next)
                }
                None => Offset::Beginning,
            };
            add.add_partition_offset(topic, *partition, offset)
                .map_err(|e| format!("assign {topic}-{partition}: {e}"))?;
            if !renames.contains_key(topic) {
                let remote = self.plan.policy.format_remote_topic(&flow.source, topic);
                let flow_s = flow.to_string();
                let mut remotes = producer.context().remotes.write().unwrap_or_else(|p| p.into_inner());
                remotes.insert(
                    remote.clone(),
                    RemoteTopic {
                        source: topic.clone(),
                        records: METRICS.records_copied.with_label_values(&[&flow_s, topic]),
                        bytes: METRICS.bytes_copied.with_label_values(&[&flow_s, topic]),
                    },
                );
                renames.insert(topic.clone(), remote);
            }
        }
        let mut remove = TopicPartitionList::new();
        for (topic, partition) in assigned.difference(&wanted) {
            remove.add_partition(topic, *partition);
        }
        if remove.count() > 0 {
            consumer.incremental_unassign(&remove).map_err(|e| format!("unassign source partitions: {e}"))?;
        }
        if add.count() > 0 {
            consumer.incremental_assign(&add).map_err(|e| format!("assign source partitions: {e}"))?;
            tracing::info!(flow = %flow, added = add.count(), removed = remove.count(), "copier assignment changed");
        }
        *assigned = wanted;
        Ok(())
    }

    /// Produce one source record to its remote topic, same partition. Waits while the producer queue
    /// is full (backpressure on the consumer), but keeps listening for a stop.
    fn send(
        &self,
        producer: &ThreadedProducer<DeliveryContext>,
        remote: &str,
        msg: &BorrowedMessage<'_>,
    ) -> Result<(), String> {
        failpoints::check(failpoints::COPIER_DELIVER)?;
        let mut record =
            BaseRecord::<[u8], [u8], usize>::with_opaque_to(remote, msg.offset() as usize).partition(msg.partition());
        if let Some(key) = msg.key() {
            record = record.key(key);
        }
        if let Some(payload) = msg.payload() {
            record = record.payload(payload);
        }
        if let Some(ts) = msg.timestamp().to_millis().filter(|t| *t >= 0) {
            record = record.timestamp(ts);
        }
        if let Some(headers) = msg.headers() {
            let mut owned = OwnedHeaders::new_with_capacity(headers.count());
            for h in headers.iter() {
                owned = owned.insert(Header { key: h.key, value: h.value });
            }
            record = record.headers(owned);
        }
        loop {
            match producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(5));
                    if let Some(failure) = self.acks.first_failure() {
                        return Err(format!("delivery to the target failed: {failure}"));
                    }
                }
                Err((e, _)) => return Err(format!("produce to {remote}-{}: {e}", msg.partition())),
            }
        }
    }

    /// A record arrived at `got` where `want` was expected. Compaction leaves gaps that are fine; records
    /// below the partition's log start were deleted before they were copied (retention, delete-records),
    /// and an offset that went back means the partition was re-created or truncated. Both are data loss:
    /// logged with the range, counted, and with `on_source_gap = "fail"` they stop the copier.
    fn gap(
        &self,
        consumer: &BaseConsumer<WatchedConsumer>,
        checked: &mut HashMap<(String, i32), Instant>,
        topic: &str,
        partition: i32,
        want: i64,
        got: i64,
    ) -> Result<(), String> {
        let flow = &self.plan.id;
        if got > want {
            let key = (topic.to_string(), partition);
            if checked.get(&key).is_some_and(|t| t.elapsed() < GAP_CHECK_INTERVAL) {
                return Ok(());
            }
            checked.insert(key, Instant::now());
        }
        let lost = if got < want {
            Some(format!(
                "the partition restarted at offset {got} below the expected {want} (re-created or truncated); records after {want} in the old log were not copied"
            ))
        } else {
            let (low, _) = consumer
                .fetch_watermarks(topic, partition, kafka::ADMIN_TIMEOUT)
                .map_err(|e| format!("cluster `{}`: watermarks of {topic}-{partition}: {e}", self.plan.source.alias))?;
            (low > want).then(|| {
                let end = low.min(got);
                METRICS.source_gap_records.with_label_values(&[&flow.to_string(), topic]).inc_by((end - want) as u64);
                format!("offsets {want}..{end} ({} records) were deleted before they were copied", end - want)
            })
        };
        let Some(what) = lost else { return Ok(()) };
        if got < want {
            METRICS.source_gap_records.with_label_values(&[&flow.to_string(), topic]).inc();
        }
        match self.plan.settings.on_source_gap {
            SourceGapPolicy::Skip => {
                tracing::error!(flow = %flow, topic, partition, "records lost on the source: {what}; skipping (on_source_gap = \"skip\")");
                Ok(())
            }
            SourceGapPolicy::Fail => {
                Err(format!("records lost on the source {topic}-{partition}: {what} (on_source_gap = \"fail\")"))
            }
        }
    }

    fn persist(&self, writer: &mut ProgressWriter) -> Result<(), String> {
        let written = writer.persist(&self.acks.snapshot())?;
        if written > 0 {
            METRICS.progress_commits.with_label_values(&[&self.plan.id.to_string()]).inc_by(written as u64);
        }
        Ok(())
    }
}

/// Reports the copier degraded while librdkafka says a cluster is away, and running again after, from its
/// own thread: the copy loop can block for a long time exactly when a cluster is away (a progress flush
/// waits up to 30 s, a full producer queue waits for the target), and must not look healthy meanwhile.
/// Stops when dropped.
struct HealthReporter {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HealthReporter {
    fn start(
        plan: &FlowPlan,
        supervisor: &Addr<FlowSupervisor>,
        source: &Arc<ClusterWatch>,
        target: &Arc<ClusterWatch>,
    ) -> Result<Self, String> {
        let (stop, stopped) = mpsc::channel::<()>();
        let (source_alias, target_alias) = (plan.source.alias.clone(), plan.target.alias.clone());
        let (flow, supervisor, source, target) =
            (plan.id.to_string(), supervisor.clone(), source.clone(), target.clone());
        let thread = std::thread::Builder::new()
            .name(format!("copier-health {flow}"))
            .spawn(move || {
                let mut degraded: Option<String> = None;
                loop {
                    let problem = source
                        .recent(DEGRADED_WINDOW)
                        .map(|r| format!("source `{source_alias}` unreachable: {r}"))
                        .or_else(|| {
                            target.recent(DEGRADED_WINDOW).map(|r| format!("target `{target_alias}` unreachable: {r}"))
                        });
                    if problem.is_some() != degraded.is_some() {
                        let state = if problem.is_some() { ActorState::Degraded } else { ActorState::Running };
                        tracing::info!(flow = %flow, actor = "copier", ?state, reason = problem.as_deref().unwrap_or("clusters reachable"), "copier health changed");
                        supervisor.do_send(ActorStatusChanged { kind: ActorKind::Copier, state, error: problem.clone() });
                        degraded = problem;
                    }
                    match stopped.recv_timeout(PERSIST_INTERVAL) {
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                }
            })
            .map_err(|e| format!("cannot start the copier's health thread: {e}"))?;
        Ok(Self { stop: Some(stop), thread: Some(thread) })
    }
}

impl Drop for HealthReporter {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Distinguishes copier lifetimes in offset-sync marks; random per process and per call.
fn lifetime_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.write_u32(std::process::id());
    h.finish()
}

fn source_consumer(plan: &FlowPlan, watch: Arc<ClusterWatch>) -> Result<BaseConsumer<WatchedConsumer>, KafkaOpError> {
    let mut cfg = kafka::client_config(&plan.source, &plan.id, "replication-consumer");
    cfg.set("group.id", format!("ferry-{}-copier-unused", plan.id))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "100")
        .set("queued.max.messages.kbytes", "65536");
    cfg.create_with_context(WatchedConsumer(watch))
        .map_err(|e| KafkaOpError::kafka(&plan.source.alias, "create replication consumer", e))
}

fn target_producer(
    plan: &FlowPlan,
    context: DeliveryContext,
) -> Result<ThreadedProducer<DeliveryContext>, KafkaOpError> {
    let s = &plan.settings;
    let mut cfg = kafka::client_config(&plan.target, &plan.id, "replication-producer");
    cfg.set("acks", "all")
        .set("enable.idempotence", "true")
        .set("compression.type", &s.compression)
        .set("linger.ms", format!("{}", s.linger.as_secs_f64() * 1000.0))
        .set("batch.size", s.batch_size_bytes.to_string())
        .set("queue.buffering.max.kbytes", "65536")
        // A record that cannot be delivered within five minutes fails its partition and restarts the
        // copier from the last acknowledged position, instead of hiding an outage forever.
        .set("message.timeout.ms", "300000");
    cfg.create_with_context(context)
        .map_err(|e| KafkaOpError::kafka(&plan.target.alias, "create replication producer", e))
}
