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
use rdkafka::consumer::Consumer;
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

use super::offset_syncs::syncs_location;
use super::supervisor::{ActorKind, FlowSupervisor, ItemErrorsChanged};
use super::worker::{Control, Signal, Worker};
use crate::checkpoint_store::CheckpointStore;
use crate::config::{ClusterSpec, FlowPlan, PolicyKind};
use crate::failpoints;
use crate::filter::should_replicate_topic;
use crate::flow::Identity;
use crate::kafka::{self, ErrorCapture, KafkaOpError, TopicSpec};
use crate::metrics::METRICS;
use crate::mm2::records::{Checkpoint, OffsetSync};
use crate::raw_admin::{self, CommittedOffset, GroupState};
use crate::status::ItemErrors;
use crate::sync_rule::{SYNC_MARK_HEADER, SyncMark};
use crate::sync_store::{StoredSync, SyncStore};

/// What the checkpoint computer knows; survives its restarts.
pub struct CheckpointState {
    pub syncs: SyncStore,
    /// Next offset to read in the offset-syncs topic.
    pub syncs_position: i64,
    /// While `syncs` is still reading a long backlog: the newest [`EARLY_SYNCS`] syncs of the topic,
    /// read first and followed since, so groups they cover get checkpoints without waiting for the
    /// whole history (KAFKA-16622's spirit: MM2 reads all of it first). Emptied once `syncs` is read.
    pub early: SyncStore,
    pub early_position: i64,
    /// The reverse flow's (target->source) offset syncs, when it has any: they translate a group that
    /// read copies of the target's records back to the originals (reverse checkpoints, fail-back).
    pub reverse: SyncStore,
    pub reverse_position: i64,
    pub checkpoints: CheckpointStore,
    pub checkpoints_loaded: bool,
    /// Source groups selected at the last refresh.
    pub groups: Vec<String>,
    /// Groups with checkpoints that complete listings of the source no longer show, and how many
    /// listings in a row missed them (forgotten at [`FORGET_AFTER`]).
    pub missing: HashMap<String, u32>,
    /// Groups whose offsets could not be read, across rounds.
    pub errors: ItemErrors,
    /// When each group's current offset was first seen (group, source topic, partition) → (offset,
    /// when): the start of its checkpoint latency.
    pub seen: HashMap<(String, String, i32), (i64, Instant)>,
}

/// A group absent from this many complete listings of the source in a row is forgotten: no more
/// checkpoints, and no group offset sync that would re-create it on the target after an operator
/// deleted it there. More than one listing, so a group caught between its members' sessions is kept.
const FORGET_AFTER: u32 = 3;

impl CheckpointState {
    /// `history`: offset syncs kept per upstream partition (the flow's
    /// `offset_sync_history_per_partition`).
    pub fn new(history: usize) -> Self {
        Self {
            syncs: SyncStore::new(history),
            syncs_position: 0,
            early: SyncStore::new(history),
            early_position: 0,
            reverse: SyncStore::new(history),
            reverse_position: 0,
            checkpoints: CheckpointStore::new(),
            checkpoints_loaded: false,
            groups: Vec::new(),
            missing: HashMap::new(),
            errors: ItemErrors::default(),
            seen: HashMap::new(),
        }
    }
}

impl CheckpointState {
    /// The forward history translations use: the whole of it once read, until then the early one.
    fn forward_syncs(&self) -> &SyncStore {
        if !self.syncs.is_read_to_end() && self.early.is_read_to_end() { &self.early } else { &self.syncs }
    }
}

/// A backlog longer than this many offset syncs is read in the background, after its newest
/// `EARLY_SYNCS` were read into [`CheckpointState::early`]. A sync is about 50 bytes: this tail reads in
/// well under a second, and at MM2's pace (a sync per partition at least every 100 records with lag, or
/// on every delta change) it covers the recent past of thousands of partitions.
const EARLY_SYNCS: i64 = 50_000;

pub type SharedCheckpointState = Arc<Mutex<CheckpointState>>;

fn lock(state: &SharedCheckpointState) -> MutexGuard<'_, CheckpointState> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// The computer as a supervised actor.
pub fn worker(
    plan: Arc<FlowPlan>,
    state: SharedCheckpointState,
    supervisor: Addr<FlowSupervisor>,
    identity: Arc<Identity>,
) -> Worker<()> {
    let name = format!("checkpoints {}", plan.id);
    let sup = supervisor.clone();
    Worker::new(ActorKind::Checkpoints, name, supervisor, Vec::new(), move |control| {
        Computer::new(&plan, state, sup, identity)?.run(control)
    })
}

/// In the error of a checkpoint computer whose producer another node fenced: this node lost the lease.
pub const FENCED: &str = "fenced by the flow's new leader";

fn fenced_or(e: rdkafka::error::KafkaError, what: impl FnOnce(&rdkafka::error::KafkaError) -> String) -> String {
    use rdkafka::types::RDKafkaErrorCode as C;
    match e.rdkafka_error_code() {
        Some(C::ProducerFenced | C::InvalidProducerEpoch | C::Fenced) => format!("{FENCED}: {e}"),
        _ => what(&e),
    }
}

/// Header of a checkpoint record naming the node that published it (MM2's readers ignore headers).
pub const NODE_HEADER: &str = "ferry.node";

/// The checkpoint producer's transactional id: one per flow, so that a node that takes the flow's lease
/// fences the producer of the node that held it (Kafka Connect's pattern): an ex-leader that was paused
/// cannot publish a checkpoint, or commit group offsets, after the new leader started.
pub fn transactional_id(identity: &Identity, plan: &FlowPlan) -> String {
    format!("{}.{}.checkpoints", identity.deployment, plan.id)
}

struct Computer<'a> {
    plan: &'a FlowPlan,
    state: SharedCheckpointState,
    supervisor: Addr<FlowSupervisor>,
    identity: Arc<Identity>,
    rt: tokio::runtime::Runtime,
    source_admin: kafka::Admin,
    target_admin: kafka::Admin,
    producer: BaseProducer<ErrorCapture>,
    checkpoints_topic: String,
    transactional_id: String,
}

fn err(e: KafkaOpError) -> String {
    e.to_string()
}

impl<'a> Computer<'a> {
    fn new(
        plan: &'a FlowPlan,
        state: SharedCheckpointState,
        supervisor: Addr<FlowSupervisor>,
        identity: Arc<Identity>,
    ) -> Result<Self, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("start admin runtime: {e}"))?;
        let txn = transactional_id(&identity, plan);
        let mut cfg = kafka::client_config(&plan.target, &plan.id, "checkpoints-producer");
        cfg.set("acks", "all").set("linger.ms", "5").set("transactional.id", &txn);
        let producer: BaseProducer<ErrorCapture> = cfg
            .create_with_context(ErrorCapture::default())
            .map_err(|e| format!("cluster `{}`: create checkpoint producer: {e}", plan.target.alias))?;
        // Fences any earlier producer of this flow's checkpoints (and aborts its open transaction).
        producer.init_transactions(kafka::ADMIN_TIMEOUT).map_err(|e| match kafka::authorization_error(&e) {
            Some(code) => kafka::not_authorized(&format!("transactional id {txn}"), &plan.target.alias, "Write", code),
            None => format!("cluster `{}`: initialise the checkpoint producer's transactions: {e}", plan.target.alias),
        })?;
        Ok(Self {
            plan,
            state,
            supervisor,
            identity,
            rt,
            source_admin: kafka::admin_client(&plan.source, &plan.id).map_err(err)?,
            target_admin: kafka::admin_client(&plan.target, &plan.id).map_err(err)?,
            producer,
            checkpoints_topic: plan.policy.checkpoints_topic(&plan.id.source),
            transactional_id: txn,
        })
    }

    fn run(self, control: Control<()>) -> Result<(), String> {
        let plan = self.plan;
        let spec = TopicSpec::compacted(self.checkpoints_topic.clone(), 1, plan.settings.replication_factor);
        kafka::ensure_topic(&plan.target, &plan.id, &spec).map_err(err)?;
        if !lock(&self.state).checkpoints_loaded {
            match load_checkpoints(plan, &self.checkpoints_topic) {
                Ok(loaded) => {
                    let mut st = lock(&self.state);
                    for cp in loaded {
                        st.checkpoints.load(cp);
                    }
                    tracing::info!(flow = %plan.id, checkpoints = st.checkpoints.len(), "loaded published checkpoints");
                }
                Err(e) if is_authorization(&e) => {
                    // MM2's fallback: without the published checkpoints, start empty and read the offset
                    // syncs keeping only the latest per partition, so no group is translated below a
                    // sync an earlier generation may have used.
                    tracing::warn!(
                        flow = %plan.id, topic = %self.checkpoints_topic, error = %e,
                        "cannot read the published checkpoints (READ on the topic is missing?); starting without them, with latest-only offset-sync history"
                    );
                    lock(&self.state).syncs.set_backlog_latest_only(true);
                }
                Err(e) => return Err(e.to_string()),
            }
            lock(&self.state).checkpoints_loaded = true;
        }
        let mut syncs = SyncReader::new(plan, &self.state)?;
        let mut early = syncs.read_early(plan, &self.state)?;
        if early.is_none() {
            syncs.read_to_end(&self.state)?;
        }
        let mut reverse = self.open_reverse();
        control.running();

        let s = &plan.settings;
        let gauge_groups = METRICS.checkpoint_groups.with_label_values(&[&plan.id.to_string()]);
        let mut next_refresh = Instant::now();
        let mut next_emit = Instant::now();
        let mut next_group_sync = Instant::now() + s.sync_group_offsets_interval;
        loop {
            if let Some(Signal::Stop { deadline }) = control.try_next() {
                // The copier and the emitter stopped first: catch up with their final syncs, then publish
                // the checkpoints they allow, so consumers fail over to the newest positions. All of it
                // within the deadline, whatever the clusters do.
                syncs.catch_up(&self.state, deadline)?;
                if let Some(r) = &mut reverse {
                    r.catch_up(&self.state, deadline)?;
                }
                self.emit(deadline)?;
                return Ok(());
            }
            if early.is_some() && failpoints::held(failpoints::CHECKPOINTS_BACKLOG) {
                std::thread::sleep(Duration::from_millis(200));
            } else {
                syncs.poll(&self.state, Duration::from_millis(200))?;
            }
            if let Some((reader, backlog)) = &mut early {
                reader.poll(&self.state, Duration::ZERO)?;
                if syncs.backlog_read(&self.state, backlog)? {
                    early = None;
                }
            }
            if let Some(r) = &mut reverse {
                r.poll(&self.state, Duration::ZERO)?;
            }
            let now = Instant::now();
            if now >= next_refresh {
                if reverse.is_none() {
                    reverse = self.open_reverse();
                }
                match self.refresh_groups() {
                    Ok(groups) => gauge_groups.set(groups as i64),
                    // The previous list stands; the next refresh tries again.
                    Err(e) => tracing::warn!(flow = %plan.id, error = %e, "cannot list the source's consumer groups"),
                }
                next_refresh = now + s.refresh_groups_interval;
            }
            if now >= next_emit {
                self.emit(now + kafka::ADMIN_TIMEOUT)?;
                next_emit = now + s.emit_checkpoints_interval;
            }
            if s.sync_group_offsets_enabled && now >= next_group_sync {
                self.sync_group_offsets();
                next_group_sync = now + s.sync_group_offsets_interval;
            }
        }
    }

    /// Follows the reverse flow's offset syncs once they exist (another node, or MM2, may run that flow).
    /// Problems only mean no reverse checkpoints for now: logged, retried at the next group refresh.
    fn open_reverse(&self) -> Option<SyncReader> {
        let opened = SyncReader::reverse(self.plan, &self.state).and_then(|r| match r {
            Some(mut r) => r.read_to_end(&self.state).map(|()| Some(r)),
            None => Ok(None),
        });
        match opened {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(flow = %self.plan.id, error = %e, "cannot read the reverse flow's offset syncs; no reverse checkpoints for now");
                None
            }
        }
    }

    /// Where group `offset` on source `topic` lands on the target, and under which name: the checkpoint's
    /// topic and downstream offset, or `None` when it cannot be translated (yet).
    ///
    /// - A topic that came from the target (`T.orders` on S, default policy) is a copy made by the reverse
    ///   flow: the group is translated back to the original (`orders` on T) through the reverse flow's
    ///   syncs, inverted. MM2 emits nothing here (KAFKA-12635): this is how a group fails back.
    /// - Otherwise the group is translated forward. With the identity policy both sides share a topic
    ///   name and each holds records of both clusters: the answer is also capped by the inverted reverse
    ///   syncs, so that the target's own records the group already read as copies are not skipped.
    fn translate(&self, st: &CheckpointState, topic: &str, partition: i32, offset: i64) -> Option<(String, i64)> {
        let plan = self.plan;
        let came_from_target = plan.policy.topic_source(topic).as_deref() == Some(plan.id.target.as_str())
            && plan.settings.replication_policy == PolicyKind::Default;
        if came_from_target {
            let original = plan.policy.upstream_topic(topic)?;
            let back = st.reverse.translate_inverse(&original, partition, offset).offset()?;
            return Some((original, back));
        }
        if !should_replicate_topic(&plan.topic_filter, &plan.policy, &plan.id.target, topic) {
            return None;
        }
        let mut downstream = st.forward_syncs().translate(topic, partition, offset).offset()?;
        if plan.settings.replication_policy == PolicyKind::Identity
            && let Some(back) = st.reverse.translate_inverse(topic, partition, offset).offset()
        {
            downstream = downstream.min(back);
        }
        Some((plan.policy.format_remote_topic(&plan.id.source, topic), downstream))
    }

    /// Lists the source's groups, selects those the flow checkpoints, and forgets groups that complete
    /// listings stopped showing. Returns how many groups are selected.
    fn refresh_groups(&self) -> Result<usize, String> {
        let (listed, errors) = self
            .rt
            .block_on(raw_admin::list_consumer_groups_partial(&self.source_admin, kafka::ADMIN_TIMEOUT))
            .map_err(|e| format!("cluster `{}`: {e}", self.plan.source.alias))?;
        for e in &errors {
            tracing::warn!(flow = %self.plan.id, error = %e, "listing consumer groups: a broker did not answer; its groups are missing this round");
        }
        let mut groups: Vec<String> = listed
            .into_iter()
            .map(|g| g.group_id)
            .filter(|g| self.plan.group_filter.should_replicate_group(g))
            .collect();
        groups.sort();
        let mut st = lock(&self.state);
        if errors.is_empty() {
            let known: Vec<String> = st.checkpoints.groups().map(str::to_string).collect();
            for g in known {
                if groups.binary_search(&g).is_ok() {
                    st.missing.remove(&g);
                    continue;
                }
                let n = st.missing.entry(g.clone()).or_default();
                *n += 1;
                if *n >= FORGET_AFTER {
                    st.missing.remove(&g);
                    st.checkpoints.forget_group(&g);
                    METRICS.remove_matching(&[("flow", &self.plan.id.to_string()), ("group", &g)]);
                    tracing::info!(flow = %self.plan.id, group = %g, "consumer group gone from the source: no more checkpoints or group offset sync for it");
                }
            }
        }
        let before = st.errors.snapshot().len();
        st.errors.retain(|g| groups.binary_search_by(|x| x.as_str().cmp(g)).is_ok());
        if st.errors.snapshot().len() != before {
            self.supervisor.do_send(ItemErrorsChanged::Groups(st.errors.snapshot()));
        }
        let n = groups.len();
        st.groups = groups;
        Ok(n)
    }

    /// One emission round over every selected group, by `deadline`. A group whose offsets cannot be
    /// read is that group's error (logged, counted, shown in `/flows`, retried next round); only a
    /// failure to publish is the computer's.
    fn emit(&self, deadline: Instant) -> Result<(), String> {
        failpoints::check(failpoints::CHECKPOINTS_EMIT)?;
        let plan = self.plan;
        let flow = plan.id.to_string();
        let groups = lock(&self.state).groups.clone();
        let mut emitted = Vec::new();
        let mut errors_changed = false;
        // Groups whose offsets were read this round, and when each emitted checkpoint's offset was first seen.
        let mut read_ok = Vec::new();
        let mut since = Vec::new();
        let mut seen = HashMap::new();
        for group in &groups {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::warn!(flow = %flow, "checkpoint round cut short by its deadline; the other groups come next round");
                break;
            }
            let fetched = failpoints::check_for(failpoints::CHECKPOINTS_GROUP_OFFSETS, group).and_then(|()| {
                self.rt
                    .block_on(raw_admin::list_consumer_group_offsets(
                        &self.source_admin,
                        group,
                        left.min(kafka::ADMIN_TIMEOUT),
                    ))
                    .map_err(|e| format!("cluster `{}`: {e}", plan.source.alias))
            });
            let offsets = match fetched {
                Ok(o) => {
                    errors_changed |= lock(&self.state).errors.cleared(group);
                    o
                }
                Err(e) => {
                    tracing::warn!(flow = %flow, group = %group, error = %e, "cannot read the group's offsets; its checkpoints wait for the next round");
                    METRICS.group_errors.with_label_values(&[&flow, group]).inc();
                    lock(&self.state).errors.failed(group, e);
                    errors_changed = true;
                    continue;
                }
            };
            read_ok.push(group.clone());
            let st = lock(&self.state);
            for o in offsets {
                let key = (group.clone(), o.topic.clone(), o.partition);
                let first_seen = match st.seen.get(&key) {
                    Some((offset, at)) if *offset == o.offset => *at,
                    _ => Instant::now(),
                };
                seen.insert(key, (o.offset, first_seen));
                let Some((topic, downstream)) = self.translate(&st, &o.topic, o.partition, o.offset) else { continue };
                let cp = Checkpoint {
                    group: group.clone(),
                    topic,
                    partition: o.partition,
                    upstream_offset: o.offset,
                    downstream_offset: downstream,
                    metadata: o.metadata,
                };
                if st.checkpoints.is_more_recent(&cp) {
                    emitted.push(cp);
                    since.push(first_seen);
                }
            }
        }
        if errors_changed {
            self.supervisor.do_send(ItemErrorsChanged::Groups(lock(&self.state).errors.snapshot()));
        }
        lock(&self.state).seen = seen;
        let succeeded = |groups: &[String]| {
            let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
            for g in groups {
                METRICS.checkpoint_last_success.with_label_values(&[&flow, g]).set(now);
            }
        };
        if emitted.is_empty() {
            succeeded(&read_ok);
            return Ok(());
        }
        let now_ms = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(100));
        self.in_transaction(left, |producer| {
            for cp in &emitted {
                let (key, value) = cp.encode().map_err(|e| format!("encode checkpoint: {e}"))?;
                let headers = rdkafka::message::OwnedHeaders::new_with_capacity(1).insert(rdkafka::message::Header {
                    key: NODE_HEADER,
                    value: Some(self.identity.node_id.as_bytes()),
                });
                let record = BaseRecord::to(&self.checkpoints_topic)
                    .partition(0)
                    .key(&key)
                    .payload(&value)
                    .timestamp(now_ms)
                    .headers(headers);
                producer.send(record).map_err(|(e, _)| format!("queue checkpoint: {e}"))?;
            }
            Ok(())
        })?;
        let n = emitted.len();
        let latency = METRICS.checkpoint_latency.with_label_values(&[&flow]);
        for at in since {
            latency.observe(at.elapsed().as_secs_f64());
        }
        succeeded(&read_ok);
        let mut st = lock(&self.state);
        for cp in emitted {
            st.checkpoints.update(cp);
        }
        METRICS.checkpoints_emitted.with_label_values(&[&flow]).inc_by(n as u64);
        tracing::debug!(flow = %flow, checkpoints = n, "published checkpoints");
        Ok(())
    }

    /// Runs `f` in a transaction of the checkpoint producer and commits it within `timeout`. A fenced
    /// producer (another node took the flow's lease) fails here: nothing `f` sent becomes visible.
    fn in_transaction(
        &self,
        timeout: Duration,
        f: impl FnOnce(&BaseProducer<ErrorCapture>) -> Result<(), String>,
    ) -> Result<(), String> {
        let topic = &self.checkpoints_topic;
        self.producer.begin_transaction().map_err(|e| {
            fenced_or(e, |e| {
                self.refused(kafka::authorization_error(e), || format!("begin a transaction on {topic}: {e}"))
            })
        })?;
        if let Err(e) = f(&self.producer) {
            let _ = self.producer.abort_transaction(timeout);
            return Err(e);
        }
        if let Err(e) = self.producer.commit_transaction(timeout) {
            let _ = self.producer.abort_transaction(timeout);
            // The record's own refusal (a topic ACL) says more than the failed commit.
            let refused = self.producer.context().take().and_then(|c| c.refused);
            return Err(fenced_or(e, |e| {
                self.refused(refused.or(kafka::authorization_error(e)), || {
                    format!("publish checkpoints to {topic}: {e}")
                })
            }));
        }
        match self.producer.context().take() {
            Some(e) => Err(self.refused(e.refused, || format!("publish checkpoints to {topic}: {e}"))),
            None => Ok(()),
        }
    }

    /// What to say when publishing failed: which right is missing if the target refused this
    /// principal (`code`), else `otherwise`.
    fn refused(&self, code: Option<&'static str>, otherwise: impl FnOnce() -> String) -> String {
        let target = &self.plan.target.alias;
        match code {
            Some(code @ "TRANSACTIONAL_ID_AUTHORIZATION_FAILED") => {
                kafka::not_authorized(&format!("transactional id {}", self.transactional_id), target, "Write", code)
            }
            Some(code @ "CLUSTER_AUTHORIZATION_FAILED") => {
                kafka::not_authorized("the cluster", target, "IdempotentWrite", code)
            }
            Some(code) => {
                kafka::not_authorized(&format!("checkpoints topic {}", self.checkpoints_topic), target, "Write", code)
            }
            None => otherwise(),
        }
    }

    /// Commit translated offsets to target groups that have no active members, never moving one
    /// backwards. Failures are counted and logged; they do not stop checkpointing.
    fn sync_group_offsets(&self) {
        let plan = self.plan;
        let flow = plan.id.to_string();
        // Only groups the source still has: a group gone there is not re-created on the target.
        let groups: Vec<String> = {
            let st = lock(&self.state);
            st.groups.iter().filter(|g| st.checkpoints.group(g).next().is_some()).cloned().collect()
        };
        if groups.is_empty() {
            return;
        }
        // Still the leader? An empty transaction fails once another node's producer fenced this one.
        if let Err(e) = self.in_transaction(kafka::ADMIN_TIMEOUT, |_| Ok(())) {
            tracing::warn!(flow = %flow, error = %e, "group offset sync skipped: this node no longer leads the flow");
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
pub fn load_checkpoints(plan: &FlowPlan, topic: &str) -> Result<Vec<Checkpoint>, KafkaOpError> {
    let consumer = kafka::assign_only_consumer(&plan.target, &plan.id, "checkpoints-reader")?;
    let mut out = Vec::new();
    kafka::read_to_end(&consumer, &plan.target.alias, topic, [0], |msg| {
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

/// The cluster refused the principal (no READ or DESCRIBE on the topic).
fn is_authorization(e: &KafkaOpError) -> bool {
    use rdkafka::types::RDKafkaErrorCode as C;
    match e {
        KafkaOpError::Kafka { source, .. } => {
            matches!(source.rdkafka_error_code(), Some(C::TopicAuthorizationFailed | C::GroupAuthorizationFailed))
        }
        KafkaOpError::NotAuthorized(_) => true,
        KafkaOpError::Other { .. } => false,
    }
}

/// Which offset syncs a reader follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    /// This flow's own.
    Forward,
    /// The reverse flow's (target->source), read from the target where its emitter writes them.
    Reverse,
    /// The newest of this flow's own, while the whole history is read ([`CheckpointState::early`]).
    Early,
}

impl Side {
    fn history(self, st: &mut CheckpointState) -> (&mut SyncStore, &mut i64) {
        match self {
            Side::Forward => (&mut st.syncs, &mut st.syncs_position),
            Side::Reverse => (&mut st.reverse, &mut st.reverse_position),
            Side::Early => (&mut st.early, &mut st.early_position),
        }
    }
}

/// The reverse flow's offset-syncs topic: on this flow's target, named for this flow's source (where the
/// reverse flow keeps it with MM2's default `offset-syncs.topic.location = source`).
fn reverse_syncs_location(plan: &FlowPlan) -> (&ClusterSpec, String) {
    (&plan.target, plan.policy.offset_syncs_topic(&plan.id.source))
}

/// An offset-sync backlog being read: where it ends, and when reading last moved.
struct Backlog {
    end: i64,
    progress: (Instant, i64),
}

/// Follows an offset-syncs topic into the shared store, from where the last reader stopped.
struct SyncReader {
    consumer: kafka::AssignOnlyConsumer,
    topic: String,
    cluster: String,
    side: Side,
}

impl SyncReader {
    fn new(plan: &FlowPlan, state: &SharedCheckpointState) -> Result<Self, String> {
        let (cluster, topic) = syncs_location(plan);
        // The emitter creates it too; whoever comes first wins, with the same definition.
        let spec = TopicSpec::compacted(topic.clone(), 1, plan.settings.replication_factor);
        kafka::ensure_topic(cluster, &plan.id, &spec).map_err(err)?;
        Self::open(plan, state, cluster, topic, Side::Forward)
    }

    /// A reader of the reverse flow's syncs if that topic exists (it is never created here: it is the
    /// other flow's, which may not exist).
    fn reverse(plan: &FlowPlan, state: &SharedCheckpointState) -> Result<Option<Self>, String> {
        let (cluster, topic) = reverse_syncs_location(plan);
        let probe = kafka::assign_only_consumer(cluster, &plan.id, "reverse-syncs-probe").map_err(err)?;
        let exists = kafka::topic_partitions(&probe, &cluster.alias).map_err(err)?.contains_key(&topic);
        if !exists {
            return Ok(None);
        }
        Self::open(plan, state, cluster, topic, Side::Reverse).map(Some)
    }

    fn open(
        plan: &FlowPlan,
        state: &SharedCheckpointState,
        cluster: &ClusterSpec,
        topic: String,
        side: Side,
    ) -> Result<Self, String> {
        let consumer = kafka::assign_only_consumer(cluster, &plan.id, "offset-syncs-reader").map_err(err)?;
        let position = *side.history(&mut lock(state)).1;
        let mut tpl = TopicPartitionList::new();
        let start = if position > 0 { Offset::Offset(position) } else { Offset::Beginning };
        tpl.add_partition_offset(&topic, 0, start).map_err(|e| e.to_string())?;
        consumer.assign(&tpl).map_err(|e| format!("cluster `{}`: assign {topic}: {e}", cluster.alias))?;
        Ok(Self { consumer, topic, cluster: cluster.alias.clone(), side })
    }

    fn position(&self, state: &SharedCheckpointState) -> i64 {
        *self.side.history(&mut lock(state)).1
    }

    /// Read the backlog; only then may the store translate (MM2: no translation before read-to-end).
    fn read_to_end(&mut self, state: &SharedCheckpointState) -> Result<(), String> {
        if self.side.history(&mut lock(state)).0.is_read_to_end() {
            return Ok(());
        }
        let (_, high) = kafka::watermarks(&self.consumer, &self.topic, 0)
            .map_err(|e| format!("cluster `{}`: watermarks of {}: {e}", self.cluster, self.topic))?;
        let mut backlog = Backlog { end: high, progress: (Instant::now(), self.position(state)) };
        while !self.reached(state, high)? {
            self.check_progress(state, &mut backlog)?;
            self.poll(state, Duration::from_millis(200))?;
        }
        let mut st = lock(state);
        let (store, _) = self.side.history(&mut st);
        store.set_read_to_end();
        tracing::info!(syncs = store.len(), partitions = store.partitions(), topic = %self.topic, side = ?self.side, "offset syncs read");
        Ok(())
    }

    /// With a backlog longer than [`EARLY_SYNCS`] (the first start, or a restart before the history
    /// was read), reads its newest syncs into the early store and returns their reader, following the
    /// topic, and the backlog for [`SyncReader::backlog_read`]; the caller reads the rest in the
    /// background. `None`: read the backlog now (short, already read, or the latest-only fallback, where
    /// a tail could translate a group below a sync an earlier generation used).
    fn read_early(&self, plan: &FlowPlan, state: &SharedCheckpointState) -> Result<Option<(Self, Backlog)>, String> {
        {
            let st = lock(state);
            if st.syncs.is_read_to_end() || st.syncs.is_backlog_latest_only() {
                return Ok(None);
            }
        }
        let (low, high) = kafka::watermarks(&self.consumer, &self.topic, 0)
            .map_err(|e| format!("cluster `{}`: watermarks of {}: {e}", self.cluster, self.topic))?;
        let from = self.position(state).max(low);
        if high - from <= EARLY_SYNCS {
            return Ok(None);
        }
        {
            let mut st = lock(state);
            st.early = SyncStore::new(plan.settings.offset_sync_history_per_partition);
            st.early_position = high - EARLY_SYNCS;
        }
        let (cluster, _) = syncs_location(plan);
        let mut early = Self::open(plan, state, cluster, self.topic.clone(), Side::Early)?;
        early.read_to_end(state)?;
        tracing::info!(
            flow = %plan.id, topic = %self.topic, backlog = high - from,
            "offset-sync backlog: translating with its newest syncs while the rest is read"
        );
        Ok(Some((early, Backlog { end: high, progress: (Instant::now(), from) })))
    }

    /// Whether the backlog was read (then the history is complete: translations use it from now on and
    /// the early store is emptied). Fails when reading made no progress for [`kafka::ADMIN_TIMEOUT`].
    fn backlog_read(&self, state: &SharedCheckpointState, backlog: &mut Backlog) -> Result<bool, String> {
        if !self.reached(state, backlog.end)? {
            self.check_progress(state, backlog)?;
            return Ok(false);
        }
        let mut st = lock(state);
        st.syncs.set_read_to_end();
        let budget = st.syncs.budget();
        st.early = SyncStore::new(budget);
        tracing::info!(syncs = st.syncs.len(), partitions = st.syncs.partitions(), topic = %self.topic, "offset-sync backlog read");
        Ok(true)
    }

    /// Fails when the reader's position has not moved for [`kafka::ADMIN_TIMEOUT`] before the backlog's end.
    fn check_progress(&self, state: &SharedCheckpointState, backlog: &mut Backlog) -> Result<(), String> {
        let position = self.position(state);
        if position != backlog.progress.1 {
            backlog.progress = (Instant::now(), position);
        } else if backlog.progress.0.elapsed() > kafka::ADMIN_TIMEOUT {
            return Err(format!(
                "cluster `{}`: reading {} made no progress for {:?} before its end",
                self.cluster,
                self.topic,
                kafka::ADMIN_TIMEOUT
            ));
        }
        Ok(())
    }

    /// Read everything published so far (bounded by `deadline`).
    fn catch_up(&mut self, state: &SharedCheckpointState, deadline: Instant) -> Result<(), String> {
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(100));
        let high = match self.consumer.fetch_watermarks(&self.topic, 0, left) {
            Ok((_, high)) => high,
            Err(e) => {
                tracing::warn!(cluster = %self.cluster, topic = %self.topic, error = %e, "cannot read the final offset syncs before the deadline");
                return Ok(());
            }
        };
        while Instant::now() < deadline && !self.reached(state, high)? {
            self.poll(state, Duration::from_millis(100))?;
        }
        Ok(())
    }

    /// Whether everything before `end` was read. A transaction marker at the end is never returned as
    /// a record, but the consumer's position moves past it.
    fn reached(&self, state: &SharedCheckpointState, end: i64) -> Result<bool, String> {
        if self.position(state) >= end {
            return Ok(true);
        }
        let positions = self
            .consumer
            .position()
            .map_err(|e| format!("cluster `{}`: position in {}: {e}", self.cluster, self.topic))?;
        Ok(positions
            .find_partition(&self.topic, 0)
            .is_some_and(|p| matches!(p.offset(), Offset::Offset(o) if o >= end)))
    }

    /// Why reading failed; a refused principal is told which right it lacks on which topic.
    fn read_error(&self, e: &rdkafka::error::KafkaError) -> String {
        match kafka::authorization_error(e) {
            Some(code) => {
                kafka::not_authorized(&format!("offset-syncs topic {}", self.topic), &self.cluster, "Read", code)
            }
            None => format!("cluster `{}`: read {}: {e}", self.cluster, self.topic),
        }
    }

    /// Fold newly arrived syncs into the store (waits up to `wait` for the first one).
    fn poll(&mut self, state: &SharedCheckpointState, wait: Duration) -> Result<(), String> {
        let mut wait = wait;
        for _ in 0..10_000 {
            let Some(msg) = self.consumer.poll(wait) else { return Ok(()) };
            wait = Duration::ZERO;
            let msg = match msg {
                Ok(msg) => msg,
                Err(e) if kafka::is_unused_group_refusal(&e) => continue,
                Err(e) => return Err(self.read_error(&e)),
            };
            let mut st = lock(state);
            let (store, position) = self.side.history(&mut st);
            *position = msg.offset() + 1;
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
                    store.handle(&sync.topic, sync.partition, stored);
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
