//! The record copier: consumes the flow's source partitions and produces every record to its remote
//! topic on the target, same partition, key, value, headers and timestamp.
//!
//! Records never pass through an actor mailbox: the copy loop runs on its own thread with rdkafka's
//! consumer and a threaded producer, and the [`RecordCopier`] actor only carries control (assignments,
//! stop) to it. Delivery reports advance the supervisor-owned [`AckTable`]; once a second the loop
//! persists the acknowledged positions in MM2's offsets topic. At-least-once: a source position counts
//! only after the target acknowledged the record.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock};
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
use super::supervisor::{ActorKind, FlowSupervisor};
use super::worker::{Control, Signal, Worker};
use crate::config::FlowPlan;
use crate::failpoints;
use crate::kafka::{self, KafkaOpError};
use crate::metrics::METRICS;
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
    Worker::new(ActorKind::Copier, name, supervisor, initial, move |control| {
        CopyLoop { plan, acks, syncs, control }.run()
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
    /// Remote topic → its source topic; read per report, written when topics are assigned.
    remotes: RwLock<HashMap<String, RemoteTopic>>,
}

impl ClientContext for DeliveryContext {}

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

        let consumer = source_consumer(plan).map_err(err)?;
        let rule = Arc::new(Mutex::new(SyncRule::new(lifetime_id(), plan.settings.offset_lag_max)));
        let context = DeliveryContext {
            acks: self.acks.clone(),
            rule: rule.clone(),
            syncs: self.syncs.clone(),
            remotes: RwLock::new(HashMap::new()),
        };
        let producer = target_producer(plan, context).map_err(err)?;
        let mut assigned: BTreeSet<SourcePartition> = BTreeSet::new();
        let mut renames: HashMap<String, String> = HashMap::new();
        let mut last_persist = Instant::now();
        let gauge = METRICS.partitions_assigned.with_label_values(&[&flow]);

        let outcome = loop {
            // With nothing assigned, wait for an assignment instead of spinning on poll.
            let signal =
                if assigned.is_empty() { self.control.next_within(POLL_WAIT) } else { self.control.try_next() };
            match signal {
                Some(Signal::Msg(wanted)) => {
                    self.reassign(&consumer, &producer, &mut assigned, &mut renames, wanted)?;
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
                            self.send(&producer, remote, &msg)?;
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
                self.persist(&mut writer)?;
                last_persist = Instant::now();
            }
        };

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
        consumer: &BaseConsumer,
        producer: &ThreadedProducer<DeliveryContext>,
        assigned: &mut BTreeSet<SourcePartition>,
        renames: &mut HashMap<String, String>,
        wanted: BTreeSet<SourcePartition>,
    ) -> Result<(), String> {
        let flow = &self.plan.id;
        let mut add = TopicPartitionList::new();
        for (topic, partition) in wanted.difference(assigned) {
            let offset = match self.acks.next(topic, *partition) {
                Some(next) => Offset::Offset(next),
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

    fn persist(&self, writer: &mut ProgressWriter) -> Result<(), String> {
        let written = writer.persist(&self.acks.snapshot())?;
        if written > 0 {
            METRICS.progress_commits.with_label_values(&[&self.plan.id.to_string()]).inc_by(written as u64);
        }
        Ok(())
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

fn source_consumer(plan: &FlowPlan) -> Result<BaseConsumer, KafkaOpError> {
    let mut cfg = kafka::client_config(&plan.source, &plan.id, "replication-consumer");
    cfg.set("group.id", format!("ferry-{}-copier-unused", plan.id))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "100")
        .set("queued.max.messages.kbytes", "65536");
    cfg.create().map_err(|e| KafkaOpError::kafka(&plan.source.alias, "create replication consumer", e))
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
