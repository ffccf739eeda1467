//! The checkpoint computer: reads consumer-group offsets on the source, translates them to target offsets
//! through the offset syncs, and publishes checkpoints to partition 0 of `<source>.checkpoints.internal`
//! on the target in MM2's format; optionally commits the translated offsets to idle target groups.
//!
//! What it knows survives its restarts ([`CheckpointState`], owned by the flow supervisor): the checkpoints
//! already published (loaded once from the checkpoints topic before the first emission, KAFKA-15905), the
//! offset-sync history and how far the offset-syncs topic was read. A restarted computer therefore neither
//! re-reads the topics nor emits anything older than what was published, and because the history is kept
//! while the backlog is read, a lagging group gets its first checkpoint at once (KAFKA-16622).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use actix::Addr;
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

use super::offset_syncs::syncs_location;
use super::supervisor::{ActorKind, FlowSupervisor};
use super::worker::{Control, Signal, Worker};
use crate::checkpoint_store::CheckpointStore;
use crate::config::FlowPlan;
use crate::failpoints;
use crate::filter::should_replicate_topic;
use crate::kafka::{self, ErrorCapture, KafkaOpError, TopicSpec};
use crate::metrics::METRICS;
use crate::mm2::records::{Checkpoint, OffsetSync};
use crate::raw_admin::{self, CommittedOffset, GroupState};
use crate::sync_rule::{SYNC_MARK_HEADER, SyncMark};
use crate::sync_store::{StoredSync, SyncStore};

/// Offset syncs kept per upstream partition (MM2 keeps 64). 1024 syncs cost about 64 KiB a partition.
const SYNCS_PER_PARTITION: usize = 1024;

/// What the checkpoint computer knows; survives its restarts.
pub struct CheckpointState {
    pub syncs: SyncStore,
    /// Next offset to read in the offset-syncs topic.
    pub syncs_position: i64,
    pub checkpoints: CheckpointStore,
    pub checkpoints_loaded: bool,
    /// Source groups selected at the last refresh.
    pub groups: Vec<String>,
}

impl Default for CheckpointState {
    fn default() -> Self {
        Self {
            syncs: SyncStore::new(SYNCS_PER_PARTITION),
            syncs_position: 0,
            checkpoints: CheckpointStore::new(),
            checkpoints_loaded: false,
            groups: Vec::new(),
        }
    }
}

pub type SharedCheckpointState = Arc<Mutex<CheckpointState>>;

fn lock(state: &SharedCheckpointState) -> MutexGuard<'_, CheckpointState> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// The computer as a supervised actor.
pub fn worker(plan: Arc<FlowPlan>, state: SharedCheckpointState, supervisor: Addr<FlowSupervisor>) -> Worker<()> {
    let name = format!("checkpoints {}", plan.id);
    Worker::new(ActorKind::Checkpoints, name, supervisor, Vec::new(), move |control| {
        Computer::new(&plan, state)?.run(control)
    })
}

struct Computer<'a> {
    plan: &'a FlowPlan,
    state: SharedCheckpointState,
    rt: tokio::runtime::Runtime,
    source_admin: AdminClient<DefaultClientContext>,
    target_admin: AdminClient<DefaultClientContext>,
    producer: BaseProducer<ErrorCapture>,
    checkpoints_topic: String,
}

fn err(e: KafkaOpError) -> String {
    e.to_string()
}

impl<'a> Computer<'a> {
    fn new(plan: &'a FlowPlan, state: SharedCheckpointState) -> Result<Self, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("start admin runtime: {e}"))?;
        let mut cfg = kafka::client_config(&plan.target, &plan.id, "checkpoints-producer");
        cfg.set("acks", "all").set("enable.idempotence", "true").set("linger.ms", "5");
        let producer = cfg
            .create_with_context(ErrorCapture::default())
            .map_err(|e| format!("cluster `{}`: create checkpoint producer: {e}", plan.target.alias))?;
        Ok(Self {
            plan,
            state,
            rt,
            source_admin: kafka::admin_client(&plan.source, &plan.id).map_err(err)?,
            target_admin: kafka::admin_client(&plan.target, &plan.id).map_err(err)?,
            producer,
            checkpoints_topic: plan.policy.checkpoints_topic(&plan.id.source),
        })
    }

    fn run(self, control: Control<()>) -> Result<(), String> {
        let plan = self.plan;
        let spec = TopicSpec::compacted(self.checkpoints_topic.clone(), 1, plan.settings.replication_factor);
        kafka::ensure_topic(&plan.target, &plan.id, &spec).map_err(err)?;
        if !lock(&self.state).checkpoints_loaded {
            let loaded = load_checkpoints(plan, &self.checkpoints_topic)?;
            let mut st = lock(&self.state);
            for cp in loaded {
                st.checkpoints.load(cp);
            }
            st.checkpoints_loaded = true;
            tracing::info!(flow = %plan.id, checkpoints = st.checkpoints.len(), "loaded published checkpoints");
        }
        let mut syncs = SyncReader::new(plan, &self.state)?;
        syncs.read_to_end(&self.state)?;
        control.running();

        let s = &plan.settings;
        let gauge_groups = METRICS.checkpoint_groups.with_label_values(&[&plan.id.to_string()]);
        let mut next_refresh = Instant::now();
        let mut next_emit = Instant::now();
        let mut next_group_sync = Instant::now() + s.sync_group_offsets_interval;
        loop {
            if let Some(Signal::Stop { deadline }) = control.try_next() {
                // The copier and the emitter stopped first: catch up with their final syncs, then publish
                // the checkpoints they allow, so consumers fail over to the newest positions.
                syncs.catch_up(&self.state, deadline)?;
                self.emit()?;
                return Ok(());
            }
            syncs.poll(&self.state, Duration::from_millis(200))?;
            let now = Instant::now();
            if now >= next_refresh {
                let groups = self.refresh_groups()?;
                gauge_groups.set(groups.len() as i64);
                lock(&self.state).groups = groups;
                next_refresh = now + s.refresh_groups_interval;
            }
            if now >= next_emit {
                self.emit()?;
                next_emit = now + s.emit_checkpoints_interval;
            }
            if s.sync_group_offsets_enabled && now >= next_group_sync {
                self.sync_group_offsets();
                next_group_sync = now + s.sync_group_offsets_interval;
            }
        }
    }

    fn refresh_groups(&self) -> Result<Vec<String>, String> {
        let listed = self
            .rt
            .block_on(raw_admin::list_consumer_groups(&self.source_admin, kafka::ADMIN_TIMEOUT))
            .map_err(|e| format!("cluster `{}`: {e}", self.plan.source.alias))?;
        let mut groups: Vec<String> = listed
            .into_iter()
            .map(|g| g.group_id)
            .filter(|g| self.plan.group_filter.should_replicate_group(g))
            .collect();
        groups.sort();
        Ok(groups)
    }

    /// One emission round over every selected group.
    fn emit(&self) -> Result<(), String> {
        failpoints::check(failpoints::CHECKPOINTS_EMIT)?;
        let plan = self.plan;
        let groups = lock(&self.state).groups.clone();
        let mut emitted = Vec::new();
        for group in &groups {
            let offsets = self
                .rt
                .block_on(raw_admin::list_consumer_group_offsets(&self.source_admin, group, kafka::ADMIN_TIMEOUT))
                .map_err(|e| format!("cluster `{}`: {e}", plan.source.alias))?;
            let st = lock(&self.state);
            for o in offsets {
                if !should_replicate_topic(&plan.topic_filter, &plan.policy, &plan.id.target, &o.topic) {
                    continue;
                }
                let Some(downstream) = st.syncs.translate(&o.topic, o.partition, o.offset).offset() else { continue };
                let cp = Checkpoint {
                    group: group.clone(),
                    topic: plan.policy.format_remote_topic(&plan.id.source, &o.topic),
                    partition: o.partition,
                    upstream_offset: o.offset,
                    downstream_offset: downstream,
                    metadata: o.metadata,
                };
                if st.checkpoints.is_more_recent(&cp) {
                    emitted.push(cp);
                }
            }
        }
        if emitted.is_empty() {
            return Ok(());
        }
        let now_ms = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        for cp in &emitted {
            let (key, value) = cp.encode().map_err(|e| format!("encode checkpoint: {e}"))?;
            let record =
                BaseRecord::to(&self.checkpoints_topic).partition(0).key(&key).payload(&value).timestamp(now_ms);
            self.producer.send(record).map_err(|(e, _)| format!("queue checkpoint: {e}"))?;
        }
        self.producer
            .flush(kafka::ADMIN_TIMEOUT)
            .map_err(|e| format!("publish checkpoints to {}: {e}", self.checkpoints_topic))?;
        if let Some(e) = self.producer.context().take() {
            return Err(format!("publish checkpoints to {}: {e}", self.checkpoints_topic));
        }
        let n = emitted.len();
        let mut st = lock(&self.state);
        for cp in emitted {
            st.checkpoints.update(cp);
        }
        METRICS.checkpoints_emitted.with_label_values(&[&plan.id.to_string()]).inc_by(n as u64);
        tracing::debug!(flow = %plan.id, checkpoints = n, "published checkpoints");
        Ok(())
    }

    /// Commit translated offsets to target groups that have no active members, never moving one
    /// backwards. Failures are counted and logged; they do not stop checkpointing.
    fn sync_group_offsets(&self) {
        let plan = self.plan;
        let flow = plan.id.to_string();
        let groups: Vec<String> = {
            let st = lock(&self.state);
            st.checkpoints
                .groups()
                .filter(|g| plan.group_filter.should_replicate_group(g))
                .map(str::to_string)
                .collect()
        };
        if groups.is_empty() {
            return;
        }
        let described = match self.rt.block_on(raw_admin::describe_consumer_groups(
            &self.target_admin,
            &groups,
            kafka::ADMIN_TIMEOUT,
        )) {
            Ok(d) => d,
            Err(e) => {
                METRICS.group_offset_syncs.with_label_values(&[&flow, "failed"]).inc();
                tracing::warn!(flow = %flow, error = %e, "cannot describe target groups; group offset sync skipped");
                return;
            }
        };
        for d in described {
            let idle = matches!(d.state, GroupState::Empty | GroupState::Dead) && d.members == 0 && d.error.is_none();
            if !idle {
                METRICS.group_offset_syncs.with_label_values(&[&flow, "skipped_active"]).inc();
                continue;
            }
            match self.sync_group(&d.group_id) {
                Ok(0) => {}
                Ok(n) => {
                    METRICS.group_offset_syncs.with_label_values(&[&flow, "ok"]).inc();
                    tracing::info!(flow = %flow, group = %d.group_id, partitions = n, "committed translated offsets to the target group");
                }
                Err(e) => {
                    METRICS.group_offset_syncs.with_label_values(&[&flow, "failed"]).inc();
                    tracing::warn!(flow = %flow, group = %d.group_id, error = %e, "group offset sync failed");
                }
            }
        }
    }

    fn sync_group(&self, group: &str) -> Result<usize, String> {
        let current: HashMap<(String, i32), i64> = self
            .rt
            .block_on(raw_admin::list_consumer_group_offsets(&self.target_admin, group, kafka::ADMIN_TIMEOUT))
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|o| ((o.topic, o.partition), o.offset))
            .collect();
        let wanted: Vec<CommittedOffset> = lock(&self.state)
            .checkpoints
            .group(group)
            .filter(|cp| current.get(&(cp.topic.clone(), cp.partition)).is_none_or(|t| *t < cp.downstream_offset))
            .map(|cp| CommittedOffset {
                topic: cp.topic.clone(),
                partition: cp.partition,
                offset: cp.downstream_offset,
                metadata: cp.metadata.clone(),
            })
            .collect();
        if wanted.is_empty() {
            return Ok(0);
        }
        self.rt
            .block_on(raw_admin::alter_consumer_group_offsets(&self.target_admin, group, &wanted, kafka::ADMIN_TIMEOUT))
            .map_err(|e| e.to_string())?;
        Ok(wanted.len())
    }
}

/// Every checkpoint in `topic` (partition 0) on the target, oldest first. Records that do not decode
/// are skipped with a warning naming them; they never stop the flow.
pub fn load_checkpoints(plan: &FlowPlan, topic: &str) -> Result<Vec<Checkpoint>, String> {
    let consumer = kafka::assign_only_consumer(&plan.target, &plan.id, "checkpoints-reader").map_err(err)?;
    let mut out = Vec::new();
    read_partition_to_end(&consumer, &plan.target.alias, topic, 0, |msg| {
        match Checkpoint::decode(msg.key().unwrap_or_default(), msg.payload()) {
            Ok(cp) => out.push(cp),
            Err(e) => tracing::warn!(
                flow = %plan.id, topic, partition = 0, offset = msg.offset(), error = %e,
                "skipping a checkpoint record that does not decode"
            ),
        }
    })?;
    Ok(out)
}

/// Read partition `partition` of `topic` from the beginning to its current end, calling `f` per record.
fn read_partition_to_end(
    consumer: &BaseConsumer,
    cluster: &str,
    topic: &str,
    partition: i32,
    mut f: impl FnMut(&rdkafka::message::BorrowedMessage<'_>),
) -> Result<(), String> {
    let (low, high) = consumer
        .fetch_watermarks(topic, partition, kafka::ADMIN_TIMEOUT)
        .map_err(|e| format!("cluster `{cluster}`: watermarks of {topic}-{partition}: {e}"))?;
    if high <= low {
        return Ok(());
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(low)).map_err(|e| e.to_string())?;
    consumer.assign(&tpl).map_err(|e| format!("cluster `{cluster}`: assign {topic}: {e}"))?;
    let deadline = Instant::now() + kafka::ADMIN_TIMEOUT * 4;
    loop {
        if Instant::now() > deadline {
            return Err(format!("cluster `{cluster}`: reading {topic} did not reach its end in time"));
        }
        let Some(msg) = consumer.poll(Duration::from_millis(200)) else { continue };
        let msg = msg.map_err(|e| format!("cluster `{cluster}`: read {topic}: {e}"))?;
        f(&msg);
        if msg.offset() + 1 >= high {
            return Ok(());
        }
    }
}

/// Follows the offset-syncs topic into the shared store, from where the last reader stopped.
struct SyncReader {
    consumer: BaseConsumer,
    topic: String,
    cluster: String,
}

impl SyncReader {
    fn new(plan: &FlowPlan, state: &SharedCheckpointState) -> Result<Self, String> {
        let (cluster, topic) = syncs_location(plan);
        // The emitter creates it too; whoever comes first wins, with the same definition.
        let spec = TopicSpec::compacted(topic.clone(), 1, plan.settings.replication_factor);
        kafka::ensure_topic(cluster, &plan.id, &spec).map_err(err)?;
        let consumer = kafka::assign_only_consumer(cluster, &plan.id, "offset-syncs-reader").map_err(err)?;
        let position = lock(state).syncs_position;
        let mut tpl = TopicPartitionList::new();
        let start = if position > 0 { Offset::Offset(position) } else { Offset::Beginning };
        tpl.add_partition_offset(&topic, 0, start).map_err(|e| e.to_string())?;
        consumer.assign(&tpl).map_err(|e| format!("cluster `{}`: assign {topic}: {e}", cluster.alias))?;
        Ok(Self { consumer, topic, cluster: cluster.alias.clone() })
    }

    /// Read the backlog; only then may the store translate (MM2: no translation before read-to-end).
    fn read_to_end(&mut self, state: &SharedCheckpointState) -> Result<(), String> {
        if lock(state).syncs.is_read_to_end() {
            return Ok(());
        }
        let (_, high) = self
            .consumer
            .fetch_watermarks(&self.topic, 0, kafka::ADMIN_TIMEOUT)
            .map_err(|e| format!("cluster `{}`: watermarks of {}: {e}", self.cluster, self.topic))?;
        let deadline = Instant::now() + kafka::ADMIN_TIMEOUT * 4;
        while lock(state).syncs_position < high {
            if Instant::now() > deadline {
                return Err(format!(
                    "cluster `{}`: reading {} did not reach its end in time",
                    self.cluster, self.topic
                ));
            }
            self.poll(state, Duration::from_millis(200))?;
        }
        let mut st = lock(state);
        st.syncs.set_read_to_end();
        tracing::info!(syncs = st.syncs.len(), partitions = st.syncs.partitions(), topic = %self.topic, "offset syncs read");
        Ok(())
    }

    /// Read everything published so far (bounded by `deadline`).
    fn catch_up(&mut self, state: &SharedCheckpointState, deadline: Instant) -> Result<(), String> {
        let (_, high) = self
            .consumer
            .fetch_watermarks(&self.topic, 0, kafka::ADMIN_TIMEOUT)
            .map_err(|e| format!("cluster `{}`: watermarks of {}: {e}", self.cluster, self.topic))?;
        while lock(state).syncs_position < high && Instant::now() < deadline {
            self.poll(state, Duration::from_millis(100))?;
        }
        Ok(())
    }

    /// Fold newly arrived syncs into the store (waits up to `wait` for the first one).
    fn poll(&mut self, state: &SharedCheckpointState, wait: Duration) -> Result<(), String> {
        let mut wait = wait;
        for _ in 0..10_000 {
            let Some(msg) = self.consumer.poll(wait) else { return Ok(()) };
            wait = Duration::ZERO;
            let msg = msg.map_err(|e| format!("cluster `{}`: read {}: {e}", self.cluster, self.topic))?;
            let mut st = lock(state);
            st.syncs_position = msg.offset() + 1;
            match OffsetSync::decode(msg.key().unwrap_or_default(), msg.payload()) {
                Ok(sync) => {
                    let mark = msg
                        .headers()
                        .and_then(|h| h.iter().find(|h| h.key == SYNC_MARK_HEADER))
                        .and_then(|h| h.value)
                        .and_then(SyncMark::decode);
                    let stored = StoredSync {
                        upstream: sync.upstream_offset,
                        downstream: sync.downstream_offset,
                        mark,
                        position: msg.offset(),
                    };
                    st.syncs.handle(&sync.topic, sync.partition, stored);
                }
                Err(e) => tracing::warn!(
                    topic = %self.topic, partition = msg.partition(), offset = msg.offset(), error = %e,
                    "skipping an offset-sync record that does not decode"
                ),
            }
        }
        Ok(())
    }
}
