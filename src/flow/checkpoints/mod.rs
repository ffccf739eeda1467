//! The checkpoint computer: reads consumer-group offsets on the source, translates them to target offsets
//! through the offset syncs, and publishes checkpoints to partition 0 of `<source>.checkpoints.internal`
//! on the target in MM2's format; optionally commits the translated offsets to idle target groups.
//!
//! What it knows survives its restarts ([`CheckpointState`], owned by the flow supervisor): the checkpoints
//! already published (loaded from the checkpoints topic before the first emission, KAFKA-15905), the
//! offset-sync history and how far the offset-syncs topic was read. A restarted computer therefore neither
//! re-reads the topics nor emits anything older than what was published, and because the history is kept
//! while the backlog is read, a lagging group gets its first checkpoint at once (KAFKA-16622).
//!
//! **The checkpoint producer comes with the first group.** A flow whose source has no group to checkpoint
//! (or to sync) writes nothing, so its computer has no producer: no librdkafka threads, no idle wake-ups, no
//! transactional id on the target (issue 33). The computer reads the published checkpoints at its start
//! without it (the offset-sync history needs to know whether they could be read); once the first group is
//! listed, [`Computer::writer`] creates the producer and initialises its transactions, which fences any
//! earlier producer of the flow's checkpoints (a paused ex-leader), and only then reads the checkpoints
//! topic on from where the first read stopped, to its end: whatever an ex-leader published before the
//! fence is in the store before this computer emits or syncs anything, and after the fence it can publish
//! nothing. So the order that keeps checkpoints from going backward across a leader change is the same as
//! with a producer made at start: fence, read to the end, then write.
//!
//! This module runs the loop and translates; `sync_reader` reads the offset syncs (this flow's and the
//! reverse flow's, wherever each writes them), `backlog` reads the rest of a long backlog on its own
//! thread once its newest syncs are in (a group older than them is translated as soon as it is read),
//! `emit` is the emission round and `group_sync` the group offset sync. Both write only in transactions of the flow's checkpoint producer, which a new
//! leader fences.
//!
//! With `emit_checkpoints_enabled = false` it publishes nothing and never touches the checkpoints topic;
//! it translates the groups' offsets right before each group offset sync instead. What then stands in
//! for the published checkpoints of KAFKA-15905 (the floor no translation may go under) is the target
//! groups' own committed offsets: group offset sync never commits below them, so a translation that
//! comes out lower after a restart or a new leader (history lost, read again) never moves a group back.
//! Nor is the latest-only sync history needed then: it only serves to keep *published* checkpoints
//! monotonic. With `refresh_groups_enabled = false` the groups of the first complete listing are kept.

use std::cell::OnceCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, Producer};

mod backlog;
mod emit;
mod group_sync;
mod identity;
mod sync_reader;

pub(crate) use sync_reader::reverse_syncs_location;

use super::messages::{ActorKind, ItemErrorsChanged, Parent};
use super::worker::{Control, Signal, Worker};
use crate::checkpoint_store::CheckpointStore;
use crate::clients::{Admin, FlowConnections};
use crate::config::{FlowPlan, PolicyKind};
use crate::flow::Identity;
use crate::kafka::{self, ErrorCapture, KafkaOpError, TopicSpec};
use crate::metrics::METRICS;
use crate::mm2::records::Checkpoint;
use crate::raw_admin;
use crate::status::ItemErrors;
use crate::sync_store::{SyncStore, Translation};
use backlog::BacklogThread;
use sync_reader::SyncReader;

/// This flow's own offset syncs: read by their own thread until the history is complete, then
/// followed by the computer's loop.
enum Forward {
    Reading(BacklogThread),
    Following(SyncReader),
}

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
    /// read copies of the target's records back to the originals (reverse checkpoints, fail-back). Read
    /// from the pair's other offset-syncs topic, where the reverse flow writes with this flow's setting.
    pub reverse: SyncStore,
    pub reverse_position: i64,
    /// The reverse flow's syncs found in this flow's own topic (it writes there with the other
    /// `offset_syncs_topic_location`), set aside by the forward reader; position: `syncs_position`.
    pub reverse_here: SyncStore,
    pub checkpoints: CheckpointStore,
    /// The checkpoints topic was read at the computer's first start (or could not be: see `run`).
    pub checkpoints_loaded: bool,
    /// Where the next read of the checkpoints topic starts (partition 0): everything below it is in
    /// `checkpoints`. `None` when it could not be read; each new checkpoint producer reads on from here
    /// after its fence ([`Computer::writer`]).
    pub checkpoints_position: Option<i64>,
    /// Source groups selected at the last refresh.
    pub groups: Vec<String>,
    /// A complete listing selected `groups`: with `refresh_groups_enabled = false` they are kept.
    pub groups_listed: bool,
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
/// Whether `group` is one of this deployment's own: a flow's copier group (`<deployment>.<source>-><target>`,
/// which commits no offsets: positions live in the progress topic) or the leaders group. Never
/// checkpointed, as MM2's default excludes Connect's own groups (`connect-.*`): on a node of many flows
/// from one cluster each computer would otherwise ask every other flow's group for offsets it never has,
/// and start a checkpoint producer for them.
fn own_group(identity: &Identity, group: &str) -> bool {
    if group == super::lease::lease_group(identity) {
        return true;
    }
    group.strip_prefix(identity.deployment.as_str()).and_then(|rest| rest.strip_prefix('.')).is_some_and(|flow| {
        flow.parse::<crate::config::FlowId>().is_ok_and(|f| {
            crate::config::valid_alias(&f.source).is_ok() && crate::config::valid_alias(&f.target).is_ok()
        })
    })
}

/// The longest the following computer waits for offset syncs before it looks at its timers and its
/// control channel: a stop is seen within this.
const FOLLOW_WAIT: Duration = Duration::from_secs(1);

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
            reverse_here: SyncStore::new(history),
            checkpoints: CheckpointStore::new(),
            checkpoints_loaded: false,
            checkpoints_position: None,
            groups: Vec::new(),
            groups_listed: false,
            missing: HashMap::new(),
            errors: ItemErrors::default(),
            seen: HashMap::new(),
        }
    }
}

impl CheckpointState {
    /// The forward history translations use: the whole of it once read, until then the early one.
    fn forward_syncs(&self) -> &SyncStore {
        // Never in the latest-only fallback, which may be switched on after the early store was read
        // (see `backlog`): a tail could translate a group below a sync an earlier generation used.
        if !self.syncs.is_read_to_end() && !self.syncs.is_backlog_latest_only() && self.early.is_read_to_end() {
            &self.early
        } else {
            &self.syncs
        }
    }

    /// The reverse flow's syncs inverted: where a consumer of the copy of `topic`-`partition` (upstream
    /// names) at `position` resumes on the original. A partition's syncs found in this flow's own topic
    /// win (only a ferry writes syncs marked as the reverse flow's, and it writes there now); without
    /// any, the pair's other topic answers.
    pub fn reverse_inverse(&self, topic: &str, partition: i32, position: i64) -> Translation {
        match self.reverse_here.translate_inverse(topic, partition, position) {
            Translation::NoSyncs | Translation::NotReady => self.reverse.translate_inverse(topic, partition, position),
            here => here,
        }
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
    conns: Arc<FlowConnections>,
    state: SharedCheckpointState,
    supervisor: Parent,
    identity: Arc<Identity>,
) -> Worker<()> {
    let name = format!("checkpoints {}", plan.id);
    let sup = supervisor.clone();
    Worker::new(ActorKind::Checkpoints, name, supervisor, Vec::new(), move |control| {
        // The start of its start-up (offset syncs, topics, published checkpoints), for the record.
        tracing::info!(flow = %plan.id, "checkpoint computer starting");
        // The offset syncs are read from the start, while the producer and the topics are set up.
        let syncs = BacklogThread::start(plan.clone(), conns.clone(), state.clone())?;
        Computer::new(&plan, &conns, state, sup, identity)?.run(control, syncs)
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
    conns: &'a FlowConnections,
    state: SharedCheckpointState,
    supervisor: Parent,
    identity: Arc<Identity>,
    /// The node's admin runtime ([`kafka::runtime`]).
    rt: &'static tokio::runtime::Runtime,
    source_admin: Admin,
    target_admin: Admin,
    /// The flow's own: its transactional id fences an ex-leader of this flow (see [`transactional_id`]).
    /// Made by [`Computer::writer`] when the computer first has a group, then kept for its lifetime.
    producer: OnceCell<BaseProducer<ErrorCapture>>,
    checkpoints_topic: String,
    transactional_id: String,
}

fn err(e: KafkaOpError) -> String {
    e.to_string()
}

impl<'a> Computer<'a> {
    fn new(
        plan: &'a FlowPlan,
        conns: &'a FlowConnections,
        state: SharedCheckpointState,
        supervisor: Parent,
        identity: Arc<Identity>,
    ) -> Result<Self, String> {
        let rt = kafka::runtime().map_err(|e| format!("start admin runtime: {e}"))?;
        let txn = transactional_id(&identity, plan);
        Ok(Self {
            plan,
            conns,
            state,
            supervisor,
            identity,
            rt,
            source_admin: conns.source.admin().map_err(err)?,
            target_admin: conns.target.admin().map_err(err)?,
            producer: OnceCell::new(),
            checkpoints_topic: plan.policy.checkpoints_topic(&plan.id.source),
            transactional_id: txn,
        })
    }

    /// Whether the computer has something to write: a group to checkpoint, or to sync offsets for.
    fn has_groups_to_write(&self) -> bool {
        let s = &self.plan.settings;
        (s.emit_checkpoints_enabled || s.sync_group_offsets_enabled) && !lock(&self.state).groups.is_empty()
    }

    /// The checkpoint producer, made the first time it is asked for and kept until the computer ends:
    /// making it again later would fence (and cost a start-up) each time, and a flow whose groups come and
    /// go would start producers over and over. Every write goes through here, and whatever a write
    /// depends on (the published checkpoints, the target groups' offsets) is read after it returned.
    ///
    /// The order is what keeps a paused ex-leader from moving a checkpoint backward: first the
    /// producer's transactions are initialised, which fences every earlier producer of the flow's
    /// checkpoints and aborts its open transaction; then the checkpoints topic is read on from where the
    /// store's knowledge ends, `read_committed`, to its end, so what an earlier producer committed before
    /// the fence is in the store; only then does the caller write.
    fn writer(&self) -> Result<&BaseProducer<ErrorCapture>, String> {
        if let Some(p) = self.producer.get() {
            return Ok(p);
        }
        let (plan, txn) = (self.plan, &self.transactional_id);
        let started = Instant::now();
        let mut cfg =
            kafka::client_config(&plan.target, &plan.id, "checkpoints-producer").map_err(|e| e.to_string())?;
        cfg.set("acks", "all").set("linger.ms", "5").set("transactional.id", txn);
        let producer: BaseProducer<ErrorCapture> = cfg
            .create_with_context(ErrorCapture::default())
            .map_err(|e| format!("cluster `{}`: create checkpoint producer: {e}", plan.target.alias))?;
        // Fences any earlier producer of this flow's checkpoints (and aborts its open transaction).
        producer.init_transactions(kafka::ADMIN_TIMEOUT).map_err(|e| match kafka::authorization_error(&e) {
            Some(code) => kafka::not_authorized(&format!("transactional id {txn}"), &plan.target.alias, "Write", code),
            None => format!("cluster `{}`: initialise the checkpoint producer's transactions: {e}", plan.target.alias),
        })?;
        let read = self.read_published_since()?;
        tracing::info!(
            flow = %plan.id, checkpoints_read = read, millis = started.elapsed().as_millis() as u64,
            "checkpoint producer started: earlier producers of the flow fenced, published checkpoints read to the end"
        );
        Ok(self.producer.get_or_init(|| producer))
    }

    /// After the fence ([`Computer::writer`]): the checkpoints published since the store's knowledge ends
    /// (an ex-leader's before the fence; this node's own, read again, change nothing), loaded in topic
    /// order. Returns how many were read. Nothing to read without emission, or when the topic could not
    /// be read at the start (then the latest-only history keeps checkpoints monotonic, see `run`).
    fn read_published_since(&self) -> Result<usize, String> {
        let Some(from) = lock(&self.state).checkpoints_position.filter(|_| self.plan.settings.emit_checkpoints_enabled)
        else {
            return Ok(0);
        };
        let (loaded, next) = load_checkpoints_from(self.plan, &self.checkpoints_topic, from).map_err(|e| {
            match read_refusal(&e, &self.checkpoints_topic, &self.plan.target.alias) {
                Some(refusal) => refusal,
                None => e.to_string(),
            }
        })?;
        let n = loaded.len();
        let mut st = lock(&self.state);
        for cp in loaded {
            st.checkpoints.load(cp);
        }
        st.checkpoints_position = Some(next);
        Ok(n)
    }

    /// `syncs`: the thread reading this flow's offset syncs, started with the computer.
    fn run(self, control: Control<()>, syncs: BacklogThread) -> Result<(), String> {
        let plan = self.plan;
        let emits = plan.settings.emit_checkpoints_enabled;
        if emits {
            let spec = TopicSpec::compacted(self.checkpoints_topic.clone(), 1, plan.settings.checkpoints_rf());
            self.conns.target.ensure_topic(&plan.id, &spec).map_err(err)?;
        }
        // Without emission nothing was published to recover: the target groups' offsets are the floor
        // (see the module docs). The sync reader waits for this flag before it completes the history.
        if !emits {
            lock(&self.state).checkpoints_loaded = true;
        }
        // Read once, at the first start, without the producer (which may never be needed, see the module
        // docs); a producer reads on from where this stopped after its fence, before any write.
        if !lock(&self.state).checkpoints_loaded {
            match load_checkpoints_from(plan, &self.checkpoints_topic, 0) {
                Ok((loaded, next)) => {
                    let mut st = lock(&self.state);
                    for cp in loaded {
                        st.checkpoints.load(cp);
                    }
                    st.checkpoints_position = Some(next);
                    tracing::info!(flow = %plan.id, checkpoints = st.checkpoints.len(), "loaded published checkpoints");
                }
                Err(e) => {
                    let Some(refusal) = read_refusal(&e, &self.checkpoints_topic, &plan.target.alias) else {
                        return Err(e.to_string());
                    };
                    // MM2's fallback: without the published checkpoints, start empty and read the offset
                    // syncs keeping only the latest per partition, so no group is translated below a
                    // sync an earlier generation may have used (what was read meanwhile shrinks to it).
                    tracing::warn!(
                        flow = %plan.id, topic = %self.checkpoints_topic, error = %refusal,
                        "cannot read the published checkpoints; starting without them, with latest-only offset-sync history"
                    );
                    lock(&self.state).syncs.set_backlog_latest_only(true);
                }
            }
            lock(&self.state).checkpoints_loaded = true;
        }
        let mut forward = Forward::Reading(syncs);
        let mut reverse = self.open_reverse();
        // Running once translations can start (the offset syncs' cluster answered, the newest syncs or
        // the whole history are in); only then are there checkpoints to emit.
        let mut ready = false;

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
                let syncs = match forward {
                    Forward::Following(syncs) => Some(syncs),
                    Forward::Reading(thread) => thread.stop().ok(),
                };
                if let Some(mut syncs) = syncs {
                    syncs.catch_up(&self.state, deadline)?;
                }
                if let Some(r) = &mut reverse {
                    r.catch_up(&self.state, deadline)?;
                }
                // Without a producer this computer has had no group to write for: no producer is made
                // (and no one fenced) on the way out.
                if ready && emits && self.producer.get().is_some() {
                    self.emit(deadline)?;
                }
                return Ok(());
            }
            let news = match &mut forward {
                Forward::Following(syncs) => {
                    // A new sync ends the wait at once; the wait only paces the loop's own rounds and
                    // how soon it sees a stop. An idle computer (one per flow) wakes once a second.
                    let mut due = next_refresh;
                    if ready && emits {
                        due = due.min(next_emit);
                    }
                    if ready && s.sync_group_offsets_enabled {
                        due = due.min(next_group_sync);
                    }
                    let wait = due.saturating_duration_since(Instant::now()).min(FOLLOW_WAIT);
                    syncs.poll(&self.state, wait)?;
                    None
                }
                Forward::Reading(thread) => {
                    // A short pause: the loop notices soon when the thread has news.
                    std::thread::sleep(Duration::from_millis(20));
                    match thread.finished()? {
                        Some(syncs) => Some(Some(syncs)),
                        None => (!ready && thread.ready()).then_some(None),
                    }
                }
            };
            if let Some(done) = news {
                // Translations can start (the newest syncs are in), or use the whole history now: emit
                // at once, not an emission interval (60 s by default) later.
                next_emit = Instant::now();
                if !emits {
                    next_group_sync = Instant::now(); // the sync is the round then
                }
                if !ready {
                    ready = true;
                    control.running();
                }
                if let Some(syncs) = done {
                    forward = Forward::Following(syncs);
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
                // The first group: the producer starts now, while the offset syncs may still be read,
                // rather than in the first round that has a checkpoint to publish.
                if self.has_groups_to_write() {
                    self.writer()?;
                }
            }
            if ready && emits && now >= next_emit {
                self.emit(now + kafka::ADMIN_TIMEOUT)?;
                next_emit = now + s.emit_checkpoints_interval;
            }
            if ready && s.sync_group_offsets_enabled && now >= next_group_sync {
                if !emits {
                    self.translate_only(now + kafka::ADMIN_TIMEOUT);
                }
                self.sync_group_offsets()?;
                next_group_sync = now + s.sync_group_offsets_interval;
            }
        }
    }

    /// Follows the reverse flow's offset syncs once they exist (another node, or MM2, may run that flow).
    /// Problems only mean no reverse checkpoints for now: logged, retried at the next group refresh.
    fn open_reverse(&self) -> Option<SyncReader> {
        let opened = SyncReader::reverse(self.plan, self.conns, &self.state).and_then(|r| match r {
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
    /// - A topic that came from the target (`T.orders` on S, default policy; `orders.T` with the template
    ///   `{topic}.{source}`) is a copy made by the reverse
    ///   flow: the group is translated back to the original (`orders` on T) through the reverse flow's
    ///   syncs, inverted. MM2 emits nothing here (KAFKA-12635): this is how a group fails back.
    /// - Otherwise the group is translated forward. With the identity policy both sides share a topic
    ///   name and each holds records of both clusters: the answer is also capped by the inverted reverse
    ///   syncs, so that the target's own records the group already read as copies are not skipped,
    ///   unless the forward syncs prove that only this flow's copies lie under the cap (`identity`).
    fn translate(&self, st: &CheckpointState, topic: &str, partition: i32, offset: i64) -> Option<(String, i64)> {
        let plan = self.plan;
        // Only names that carry their source (the default policy, a template with `{source}`) can say so.
        let came_from_target =
            plan.policy.topic_source(topic).as_deref() == Some(plan.id.target.as_str()) && plan.policy.names_source();
        if came_from_target {
            let original = plan.policy.upstream_topic(topic)?;
            let back = st.reverse_inverse(&original, partition, offset).offset()?;
            return Some((original, back));
        }
        if !plan.copies_topic(topic) {
            return None;
        }
        let forward = st.forward_syncs().translate(topic, partition, offset);
        let downstream = if plan.settings.replication_policy == PolicyKind::Identity {
            let back = st.reverse_inverse(topic, partition, offset);
            identity::downstream(st.forward_syncs(), topic, partition, forward, back)?
        } else {
            forward.offset()?
        };
        Some((plan.policy.format_remote_topic(&plan.id.source, topic), downstream))
    }

    /// Lists the source's groups, selects those the flow checkpoints, and forgets groups that complete
    /// listings stopped showing. Returns how many groups are selected.
    fn refresh_groups(&self) -> Result<usize, String> {
        {
            let st = lock(&self.state);
            if !self.plan.settings.refresh_groups_enabled && st.groups_listed {
                return Ok(st.groups.len());
            }
        }
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
            .filter(|g| self.plan.group_filter.should_replicate_group(g) && !own_group(&self.identity, g))
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
            self.supervisor.item_errors.do_send(ItemErrorsChanged::Groups(st.errors.snapshot()));
        }
        let n = groups.len();
        st.groups = groups;
        if errors.is_empty() && !st.groups_listed {
            st.groups_listed = true;
            if !self.plan.settings.refresh_groups_enabled {
                tracing::info!(flow = %self.plan.id, groups = n, "refresh_groups_enabled = false: the groups found now are all the flow follows");
            }
        }
        Ok(n)
    }
}

/// Every checkpoint in `topic` (partition 0) on the target from offset `from` on, oldest first, read
/// `read_committed` to the end, and where a next read starts ([`kafka::read_partition_from`]). Records
/// that do not decode are skipped, each named in a warning and counted (`kafka::skip_internal_record`);
/// they never stop the flow.
pub fn load_checkpoints_from(plan: &FlowPlan, topic: &str, from: i64) -> Result<(Vec<Checkpoint>, i64), KafkaOpError> {
    let consumer = kafka::assign_only_consumer(&plan.target, &plan.id, "checkpoints-reader")?;
    let mut out = Vec::new();
    let flow = plan.id.to_string();
    let next =
        kafka::read_partition_from(&consumer, &plan.target.alias, topic, 0, from, |msg| {
            match Checkpoint::decode(msg.key().unwrap_or_default(), msg.payload()) {
                Ok(cp) => out.push(cp),
                Err(e) => kafka::skip_internal_record(Some(&flow), &plan.target.alias, msg, "a checkpoint record", &e),
            }
        })?;
    Ok((out, next))
}

/// What an operator reads when the target refused this principal reading the checkpoints topic
/// `topic` on `cluster` (MM2 falls back on any authorization error there); `None` for other failures.
fn read_refusal(e: &KafkaOpError, topic: &str, cluster: &str) -> Option<String> {
    match e {
        KafkaOpError::Kafka { source, .. } => match kafka::authorization_error(source)? {
            code @ "TOPIC_AUTHORIZATION_FAILED" => {
                Some(kafka::not_authorized(&format!("checkpoints topic {topic}"), cluster, "Read", code))
            }
            _ => Some(e.to_string()),
        },
        KafkaOpError::NotAuthorized(message) => Some(message.clone()),
        KafkaOpError::Other { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deployments_own_groups_are_never_checkpointed() {
        let identity = Identity { node_id: "n1".into(), deployment: "ferry".into() };
        for own in ["ferry.east->west", "ferry.e1->w_2", "ferry.leaders"] {
            assert!(own_group(&identity, own), "{own}");
        }
        for other in
            ["billing", "ferry", "ferry.billing", "ferry.a->", "other.east->west", "ferry.a->b.c", "ferryx.a->b"]
        {
            assert!(!own_group(&identity, other), "{other}");
        }
    }
}
