//! The record copier: consumes the flow's source partitions and produces every record to its remote
//! topic on the target, same partition, key, value, headers and timestamp.
//!
//! Records never pass through an actor mailbox: the copy loop runs on its own thread with rdkafka's
//! consumer and a threaded producer, and the [`RecordCopier`] actor only carries control (assignments,
//! stop) to it. Delivery reports advance the supervisor-owned [`AckTable`]; once a second the loop
//! persists the acknowledged positions in MM2's offsets topic. At-least-once: a source position counts
//! only after the target acknowledged the record.

use std::collections::{BTreeSet, HashMap};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use actix::prelude::*;
use prometheus::IntCounter;
use rdkafka::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

use super::acks::{AckTable, SourcePartition};
use super::progress::{self, ProgressWriter};
use super::supervisor::{ActorKind, ChildExited, FlowSupervisor};
use crate::config::FlowPlan;
use crate::kafka::{self, KafkaOpError};
use crate::metrics::METRICS;

/// Persist acknowledged positions at least this often (bounds duplicates after a `kill -9`).
const PERSIST_INTERVAL: Duration = Duration::from_secs(1);
/// How long one `poll` waits for records before the loop looks at its control channel again.
const POLL_WAIT: Duration = Duration::from_millis(100);

/// Control messages from the actor to its copy loop.
#[derive(Debug)]
enum Command {
    /// The complete set of source partitions to mirror (each one's remote partition exists).
    Assign(BTreeSet<SourcePartition>),
    /// Stop fetching, wait for outstanding acknowledgements until `deadline`, persist, exit.
    Stop { deadline: Instant },
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
    control: Receiver<Command>,
}

impl CopyLoop {
    fn run(self) -> Result<(), String> {
        let plan = &self.plan;
        let flow = plan.id.to_string();
        let err = |e: KafkaOpError| e.to_string();

        // Recover persisted progress once per flow lifetime; restarts reuse the in-memory table.
        let offsets_partitions = ensure_offsets_topic(plan).map_err(err)?;
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
        let context = DeliveryContext { acks: self.acks.clone(), remotes: RwLock::new(HashMap::new()) };
        let producer = target_producer(plan, context).map_err(err)?;
        let mut assigned: BTreeSet<SourcePartition> = BTreeSet::new();
        let mut renames: HashMap<String, String> = HashMap::new();
        let mut last_persist = Instant::now();
        let gauge = METRICS.partitions_assigned.with_label_values(&[&flow]);

        let outcome = loop {
            match self.control.try_recv() {
                Ok(Command::Assign(wanted)) => {
                    self.reassign(&consumer, &producer, &mut assigned, &mut renames, wanted)?;
                    gauge.set(assigned.len() as i64);
                }
                Ok(Command::Stop { deadline }) => break Ok(deadline),
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => break Ok(Instant::now() + Duration::from_secs(10)),
            }
            if let Some(failure) = self.acks.first_failure() {
                break Err(format!("delivery to the target failed: {failure}"));
            }
            if assigned.is_empty() {
                // Nothing to fetch yet: wait for an assignment instead of spinning on poll.
                match self.control.recv_timeout(POLL_WAIT) {
                    Ok(Command::Assign(wanted)) => {
                        self.reassign(&consumer, &producer, &mut assigned, &mut renames, wanted)?;
                        gauge.set(assigned.len() as i64);
                    }
                    Ok(Command::Stop { deadline }) => break Ok(deadline),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => break Ok(Instant::now()),
                }
            } else {
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

/// Make sure `mm2-offsets.<source>.internal` exists; returns its partition count (Connect's 25 unless
/// someone created it otherwise: records must be keyed onto the partitions that really exist).
fn ensure_offsets_topic(plan: &FlowPlan) -> Result<i32, KafkaOpError> {
    let spec = progress::topic_spec(plan);
    let admin = kafka::admin_client(&plan.target, &plan.id)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| KafkaOpError::Other {
        cluster: plan.target.alias.clone(),
        op: "start admin runtime".into(),
        reason: e.to_string(),
    })?;
    rt.block_on(kafka::create_topic(&admin, &plan.target.alias, &spec))?;
    let probe = kafka::assign_only_consumer(&plan.target, &plan.id, "progress-probe")?;
    let deadline = Instant::now() + kafka::ADMIN_TIMEOUT;
    loop {
        let topics = kafka::topic_partitions(&probe, &plan.target.alias)?;
        match topics.get(&spec.name) {
            Some(n) if *n > 0 => return Ok(*n),
            _ if Instant::now() > deadline => {
                return Err(KafkaOpError::Other {
                    cluster: plan.target.alias.clone(),
                    op: format!("create {}", spec.name),
                    reason: "the topic did not appear in metadata".into(),
                });
            }
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
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

// ---------------------------------------------------------------------------------------------------
// The actor

/// Assign the copier a new set of source partitions.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct AssignPartitions(pub BTreeSet<SourcePartition>);

/// Ask the copier to stop gracefully by `deadline`.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct StopCopier {
    pub deadline: Instant,
}

/// The copy loop ended (sent by the loop's thread to its own actor).
#[derive(Message, Debug)]
#[rtype(result = "()")]
struct LoopEnded(Result<(), String>);

/// Owns the copy-loop thread and its control channel.
pub struct RecordCopier {
    plan: Arc<FlowPlan>,
    acks: Arc<AckTable>,
    supervisor: Addr<FlowSupervisor>,
    initial: BTreeSet<SourcePartition>,
    control: Option<Sender<Command>>,
    thread: Option<JoinHandle<()>>,
}

impl RecordCopier {
    pub fn new(
        plan: Arc<FlowPlan>,
        acks: Arc<AckTable>,
        supervisor: Addr<FlowSupervisor>,
        initial: BTreeSet<SourcePartition>,
    ) -> Self {
        Self { plan, acks, supervisor, initial, control: None, thread: None }
    }
}

impl Actor for RecordCopier {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let (tx, rx) = mpsc::channel();
        if !self.initial.is_empty() {
            let _ = tx.send(Command::Assign(std::mem::take(&mut self.initial)));
        }
        let copy = CopyLoop { plan: self.plan.clone(), acks: self.acks.clone(), control: rx };
        let me = ctx.address();
        let spawned = std::thread::Builder::new().name(format!("copier {}", self.plan.id)).spawn(move || {
            // A panic in the loop ends this actor like an error does; the supervisor restarts it.
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| copy.run()))
                .unwrap_or_else(|panic| Err(format!("copy loop panicked: {}", panic_message(&panic))));
            me.do_send(LoopEnded(result));
        });
        match spawned {
            Ok(handle) => {
                self.thread = Some(handle);
                self.control = Some(tx);
            }
            Err(e) => {
                self.supervisor.do_send(ChildExited {
                    kind: ActorKind::Copier,
                    result: Err(format!("cannot start the copy thread: {e}")),
                });
                ctx.stop();
            }
        }
    }
}

pub fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

impl Handler<AssignPartitions> for RecordCopier {
    type Result = ();
    fn handle(&mut self, msg: AssignPartitions, _: &mut Context<Self>) {
        if let Some(tx) = &self.control {
            let _ = tx.send(Command::Assign(msg.0));
        }
    }
}

impl Handler<StopCopier> for RecordCopier {
    type Result = ();
    fn handle(&mut self, msg: StopCopier, _: &mut Context<Self>) {
        if let Some(tx) = &self.control {
            let _ = tx.send(Command::Stop { deadline: msg.deadline });
        }
    }
}

impl Handler<LoopEnded> for RecordCopier {
    type Result = ();
    fn handle(&mut self, msg: LoopEnded, ctx: &mut Context<Self>) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.supervisor.do_send(ChildExited { kind: ActorKind::Copier, result: msg.0 });
        ctx.stop();
    }
}
