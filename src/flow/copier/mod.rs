//! The record copier: consumes the flow's source partitions and produces every record to its remote
//! topic on the target, same partition, key, value, headers and timestamp.
//!
//! Records never pass through an actor mailbox: the copy loop runs on its own thread with rdkafka's
//! consumer and its lane of the target's shared record producer ([`crate::clients::records`]), and the
//! actor only carries control (assignments, stop) to it.
//! Delivery reports advance the supervisor-owned [`AckTable`]; every [`PERSIST_INTERVAL`] the loop
//! persists the positions that moved, in MM2's offsets topic. At-least-once: a source position counts
//! only after the target acknowledged the record.
//!
//! One partition's trouble is that partition's: each source partition has its own state
//! ([`partitions`]), and a record the target refuses, a position that fell off the source log, or a
//! source topic that was re-created affects only the partitions concerned, while the others keep
//! copying. Questions that need the source cluster (where may a partition start? was its topic
//! re-created?) go to the [`probe`] thread, never block the copy thread.

mod delivery;
mod partitions;
mod probe;
pub mod provenance;
pub mod transactions;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use actix::Addr;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Header, Headers, Message, OwnedHeaders};

use self::delivery::{DeliveryContext, Shared};
use self::partitions::Book;
use self::probe::Probe;
use self::transactions::Transactions;
use super::acks::{AckTable, DeliveryFailure, PartitionAck, SourcePartition};
use super::offset_syncs::SyncQueue;
use super::pause::PauseSwitch;
use super::progress::{self, ProgressWriter};
use super::supervisor::{ActorKind, ActorStatusChanged, AssignedPartitions, FlowSupervisor, PartitionProblems};
use super::worker::{Control, Signal, Worker, panic_message};
use crate::clients::records::Record;
use crate::clients::{FlowConnections, RecordLane, RecordTuning};
use crate::config::{Delivery, FlowPlan, GroupProtocol};
use crate::failpoints;
use crate::flow::Identity;
use crate::kafka::{self, ClusterWatch, KafkaOpError};
use crate::metrics::METRICS;
use crate::status::ActorState;

/// Persist acknowledged positions this often: bounds what a `kill -9` copies twice to about a quarter
/// second of traffic. A round writes one small record per partition that moved, without waiting; flows
/// of more than 1,000 moving partitions persist less often ([`progress::MAX_RECORDS_PER_SECOND`]).
const PERSIST_INTERVAL: Duration = Duration::from_millis(250);
/// How long one `poll` waits for records before the loop looks at its control channel again.
const POLL_WAIT: Duration = Duration::from_millis(100);
/// How often partitions that went quiet get their newest position published as an offset sync.
const QUIET_CHECK: Duration = Duration::from_millis(200);
/// How long a new copier lifetime waits at most for the reports of the records its predecessor left in
/// flight: librdkafka reports each record within its `message.timeout.ms` (five minutes) plus a
/// request's timeout. Beyond it the copier fails (and is restarted to wait again) rather than copy
/// while a late report could still move a position under it.
const PREDECESSOR_SETTLE_MAX: Duration = Duration::from_secs(400);

/// What the copier should copy, from the topic synchroniser.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Assignment {
    /// Every source partition to copy (each one's remote partition exists on the target).
    pub partitions: BTreeSet<SourcePartition>,
    /// Topics that no longer exist on the source: everything kept for them is dropped.
    pub deleted: BTreeSet<String>,
}

/// The copier as a supervised actor.
#[allow(clippy::too_many_arguments)] // each is a separate piece of the supervisor's state
pub fn worker(
    plan: Arc<FlowPlan>,
    conns: Arc<FlowConnections>,
    acks: Arc<AckTable>,
    syncs: Arc<SyncQueue>,
    supervisor: Addr<FlowSupervisor>,
    initial: Option<Assignment>,
    identity: Arc<Identity>,
    paused: Arc<PauseSwitch>,
) -> Worker<Assignment> {
    let name = format!("copier {}", plan.id);
    let sup = supervisor.clone();
    Worker::new(ActorKind::Copier, name, supervisor, initial.into_iter().collect(), move |control| {
        let mut copier = CopyLoop::new(plan, &conns, acks, syncs, control, sup, &identity)?;
        copier.operator_paused = paused;
        copier.run()
    })
}

/// The copier group of a flow on its source: every node running the flow joins it, and the group's
/// cooperative-sticky assignment splits the source partitions among them.
pub fn copier_group(identity: &Identity, plan: &FlowPlan) -> String {
    format!("{}.{}", identity.deployment, plan.id)
}

/// A change of the copier group's assignment, kept by the consumer's context for the copy loop.
enum Rebalanced {
    Assign(Vec<SourcePartition>),
    Revoke(Vec<SourcePartition>),
}

/// The copier consumer's context: reports cluster problems, and keeps rebalances for the copy loop,
/// which applies them right after `poll` returns (with access to the producer and the progress
/// writer, which the callback does not have): a revoked partition is drained and persisted before it
/// is let go.
struct CopierContext {
    watch: Arc<ClusterWatch>,
    /// The source refuses this principal the copier group: nothing is assigned while it lasts.
    group_refused: Arc<kafka::Refusal>,
    /// `copier group <name> on `<source>``, for that refusal's text.
    group: (String, String),
    rebalances: Mutex<Vec<Rebalanced>>,
    /// A rebalance arrived during a poll: the copy loop applies it before it sends another record (a
    /// revoked partition's buffered records must not be sent after the group moved it on).
    rebalance_pending: std::sync::atomic::AtomicBool,
    /// The copy loop ended: the consumer is closing and rebalances are applied at once (closing waits
    /// for its final revocation to be acknowledged).
    closing: std::sync::atomic::AtomicBool,
}

impl CopierContext {
    /// If `error` is the source refusing the copier group, records it (logged once) and returns true.
    fn group_refusal(&self, error: &KafkaError) -> bool {
        let Some(code @ "GROUP_AUTHORIZATION_FAILED") = kafka::authorization_error(error) else { return false };
        let (group, source) = &self.group;
        let reason = kafka::not_authorized(&format!("copier group {group}"), source, "Read", code);
        if self.group_refused.seen(reason.clone()) {
            tracing::warn!(reason, "the source refuses the copier group: nothing is copied until it is granted");
        }
        true
    }
}

impl rdkafka::ClientContext for CopierContext {
    fn error(&self, error: KafkaError, reason: &str) {
        if self.group_refusal(&error) {
            return;
        }
        self.watch.record(&error, reason);
        tracing::warn!(error = %error, reason, "source client error");
    }
}

impl rdkafka::consumer::ConsumerContext for CopierContext {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: rdkafka::types::RDKafkaRespErr,
        tpl: &mut rdkafka::TopicPartitionList,
    ) {
        use rdkafka::types::RDKafkaRespErr as E;
        if self.closing.load(std::sync::atomic::Ordering::Acquire) {
            let _ = match err {
                E::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => consumer.incremental_assign(tpl),
                _ => consumer.incremental_unassign(tpl),
            };
            return;
        }
        let tps: Vec<SourcePartition> = tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())).collect();
        // The group answered: whatever refused it before is granted now.
        if self.group_refused.clear() {
            tracing::info!("the source grants the copier group again");
        }
        let event = match err {
            E::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => Rebalanced::Assign(tps),
            E::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => Rebalanced::Revoke(tps),
            other => {
                tracing::warn!(error = ?other, "copier group rebalance error");
                return;
            }
        };
        self.rebalances.lock().unwrap_or_else(|p| p.into_inner()).push(event);
        self.rebalance_pending.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// How long a new copier holds while the deployment's recorded pause is not known yet (its control
/// topic cannot be read: then it copies, and follows the topic once it answers).
const PAUSE_UNKNOWN_HOLD: Duration = Duration::from_secs(10);

/// How long a pause waits for the records in flight when it was applied before it is confirmed anyway.
const PAUSE_SETTLE_MAX: Duration = Duration::from_secs(10);

/// How long a revoked partition's handover (in-flight records, final syncs, persist) may take.
const HANDOVER_TIMEOUT: Duration = Duration::from_secs(15);

/// How long after librdkafka's last connection error a cluster still counts as away.
const DEGRADED_WINDOW: Duration = Duration::from_secs(15);
/// How long a refusal of the copier group is shown after librdkafka last reported it (it retries the
/// group's coordinator every few seconds while refused).
const REFUSAL_WINDOW: Duration = Duration::from_secs(30);

/// The copy loop: the consumer, the producer and every partition's state, on the copier's thread.
struct CopyLoop {
    plan: Arc<FlowPlan>,
    flow: String,
    control: Control<Assignment>,
    supervisor: Addr<FlowSupervisor>,
    acks: Arc<AckTable>,
    shared: Arc<Shared>,
    consumer: BaseConsumer<CopierContext>,
    /// Source partitions the copier group gave this node.
    assigned: BTreeSet<SourcePartition>,
    /// What the topic synchroniser says can be copied (remote partitions exist).
    ready: Assignment,
    /// Topics the consumer subscribes to.
    subscribed: BTreeSet<String>,
    /// Partitions of the progress topic.
    offsets_partitions: i32,
    /// Every copying partition is paused while the offset-sync queue is backlogged or an operator paused
    /// the flow.
    held: bool,
    /// Set by an operator's `POST /flows/{id}/pause`; answered once applied (see [`PauseSwitch`]).
    operator_paused: Arc<PauseSwitch>,
    /// Since when the consumer has been held for an operator's pause (for the bound on waiting for
    /// in-flight records before the pause is confirmed).
    held_since: Option<Instant>,
    /// When this copy loop was created (for [`PAUSE_UNKNOWN_HOLD`]).
    created: Instant,
    /// This lifetime's lane of the target's shared record producer (`None` once shut down).
    lane: Option<RecordLane>,
    progress: ProgressWriter,
    probe: Probe,
    book: Book,
    source_watch: Arc<ClusterWatch>,
    /// A summary of failing partitions for the health reporter (`None`: all well).
    problems: Arc<Mutex<Option<String>>>,
    /// Set when a stop arrived while the loop was busy (e.g. waiting on a full producer queue).
    stop: Option<Instant>,
    /// The newest assignment that arrived while the loop was busy.
    pending: Option<Assignment>,
    consumer_errors: RateLimitedLog,
    /// Stamp and honour the provenance header (identity replication); `None` for flows without it.
    provenance: Option<provenance::Provenance>,
    /// Exactly-once flows: the transactions of the lane's own producer (see [`transactions`]).
    txn: Option<Transactions>,
    /// This node as the flow's writer of progress (`<deployment>.<flow>.copier.<node>`; an exactly-once
    /// flow's transactional id).
    writer: String,
    /// What every writer of the flow in this deployment is named with ([`transactions::writers_prefix`]).
    kin: String,
    /// The group took partitions from this lifetime as lost: another node copies them already.
    lost: bool,
}

impl CopyLoop {
    fn new(
        plan: Arc<FlowPlan>,
        conns: &FlowConnections,
        acks: Arc<AckTable>,
        syncs: Arc<SyncQueue>,
        control: Control<Assignment>,
        supervisor: Addr<FlowSupervisor>,
        identity: &Identity,
    ) -> Result<Self, String> {
        let flow = plan.id.to_string();
        let err = |e: KafkaOpError| e.to_string();
        // Connect's offsets topic has 25 partitions unless someone created it otherwise: key records onto
        // the partitions that really exist. Positions are read when the copier group assigns partitions.
        let offsets_partitions = conns.target.ensure_topic(&plan.id, &progress::topic_spec(&plan)).map_err(err)?;
        // Records the previous lifetime left in flight on the shared producer report to it, not here;
        // until they have, their partitions' positions may still move and fail.
        let (pending, stop) = wait_for_predecessor(&plan, conns, &acks, &control)?;
        // Failures of an earlier lifetime are retried by this one, from the frozen positions (nothing
        // of that lifetime is in flight any more).
        for slot in acks.take_failed() {
            slot.clear_failure();
        }
        acks.clear_unowned_failures();
        let writer = transactions::transactional_id(identity, &plan);
        let progress =
            ProgressWriter::new(&plan, &conns.target, offsets_partitions, acks.clone(), &writer).map_err(err)?;
        let shared = Arc::new(Shared::new(acks.clone(), syncs, lifetime_id(), &plan));
        let mut progress = progress;
        progress.set_bridges(shared.clone());
        let source_watch = Arc::new(ClusterWatch::default());
        let txn = (plan.settings.delivery == Delivery::ExactlyOnce).then(|| Transactions::new(&plan, identity));
        let sink = Arc::new(DeliveryContext(shared.clone()));
        let lane = match &txn {
            Some(t) => conns.target.transactional_lane(&flow, record_tuning(&plan), sink, t.id()).map_err(err)?,
            None => conns.target.record_lane(&flow, record_tuning(&plan), sink).map_err(err)?,
        };
        // Before the group assigns anything (and so before any progress is read): fences this node's
        // previous copier and aborts what it left open.
        if let Some(t) = &txn {
            // Positions an earlier lifetime left dirty may be aborted ones: the committed progress,
            // read when the group assigns, is the truth, and nothing else is written.
            for slot in acks.take_dirty() {
                slot.take_dirty();
            }
            t.init(&plan, &lane)?;
            tracing::info!(flow = %flow, transactional_id = t.id(), "exactly-once: the copier's transactions are initialised");
        }
        let consumer = source_consumer(&plan, source_watch.clone(), identity).map_err(err)?;
        let probe = Probe::start(&plan, conns)?;
        let book = Book::new(&plan);
        Ok(Self {
            flow,
            control,
            supervisor,
            acks,
            shared,
            consumer,
            assigned: BTreeSet::new(),
            ready: Assignment::default(),
            subscribed: BTreeSet::new(),
            offsets_partitions,
            held: false,
            operator_paused: Arc::default(),
            held_since: None,
            created: Instant::now(),
            lane: Some(lane),
            progress,
            probe,
            book,
            source_watch,
            problems: Arc::new(Mutex::new(None)),
            stop,
            pending,
            consumer_errors: RateLimitedLog::new(Duration::from_secs(10)),
            provenance: provenance::Provenance::for_plan(&plan),
            txn,
            kin: transactions::writers_prefix(identity, &plan),
            writer,
            lost: false,
            plan,
        })
    }

    fn run(mut self) -> Result<(), String> {
        self.control.running(); // before the health reporter, whose reports must come after this one
        let _health = HealthReporter::start(
            &self.plan,
            &self.supervisor,
            &self.consumer.context().group_refused,
            &self.source_watch,
            &self.shared.watch,
            &self.problems,
        )?;
        // A panic in the loop still goes through the ordered shutdown below: in-flight records are waited
        // for, and the final position of every partition is published.
        let copied = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.copy()));
        let outcome: Result<Instant, String> =
            copied.unwrap_or_else(|panic| Err(format!("panicked: {}", panic_message(&panic))));
        let deadline = match &outcome {
            Ok(deadline) => *deadline,
            Err(_) => Instant::now() + Duration::from_secs(5),
        };
        let persisted = self.shutdown(deadline, outcome.as_ref().err().map(String::as_str));
        outcome?;
        persisted
    }

    /// Copies until asked to stop; returns the stop's deadline.
    fn copy(&mut self) -> Result<Instant, String> {
        let mut last_persist = Instant::now();
        let mut persist_every = PERSIST_INTERVAL;
        let mut last_tick = Instant::now();
        let mut last_quiet = Instant::now();
        loop {
            if let Some(deadline) = self.stop {
                return Ok(deadline);
            }
            let signal = self.control.try_next();
            self.take(signal);
            if let Some(wanted) = self.pending.take() {
                self.reassign(wanted)?;
            }
            self.rebalance()?;
            for (tp, verdict) in self.probe.reports() {
                self.book.verdict(&self.plan, &self.shared, tp, verdict);
            }
            if let Some(why) = self.shared.panicked() {
                return Err(why);
            }
            // Exactly-once: a refused record is a hole in the open transaction, which cannot commit.
            self.refused_in_transaction()?;
            for slot in self.acks.take_failed() {
                if let Some(remote) = self.book.delivery_failed(&self.flow, &slot) {
                    self.refresh_producer_metadata(&remote);
                }
            }
            self.book.advance(&self.shared, &self.probe, Instant::now());
            self.book.apply(&self.consumer, self.held)?;
            self.book.settle_gaps(&self.consumer, &self.acks);
            // The offset-sync emitter is behind (its cluster may be away): stop copying rather than drop
            // syncs; the queue drains when it comes back. Same when an operator paused the flow. The
            // consumer is polled on regardless: it serves the copier group (rebalances, liveness).
            // Until the deployment's recorded pause is known (its control topic is being read, at most
            // PAUSE_UNKNOWN_HOLD), nothing is copied: a paused flow must not copy while it restarts.
            let unknown = !self.operator_paused.known() && self.created.elapsed() < PAUSE_UNKNOWN_HOLD;
            let hold = self.shared.syncs.is_backlogged() || self.operator_paused.wanted() || unknown;
            if hold != self.held {
                let tpl = self.book.copying_partitions();
                let paused = if hold { self.consumer.pause(&tpl) } else { self.consumer.resume(&tpl) };
                paused.map_err(|e| format!("pause/resume copying: {e}"))?;
                self.held = hold;
                self.held_since = hold.then(Instant::now);
                if !hold {
                    // Records polled while held were not sent: fetch them again.
                    self.book.release_held();
                    self.book.apply(&self.consumer, false)?;
                }
            }
            self.confirm_pause();
            if self.book.any_copying() {
                failpoints::check(failpoints::COPIER_POLL)?;
            }
            self.copy_batch()?;
            self.progress.poll();
            let now = Instant::now();
            if now.duration_since(last_quiet) >= QUIET_CHECK {
                self.shared.publish_quiet(now, false);
                last_quiet = now;
            }
            if let Some(txn) = &self.txn {
                // Held (a pause, a sync backlog): what was copied is committed now, so a confirmed pause
                // leaves nothing open and the syncs of the copied records can drain.
                // Positions that moved with no transaction open (a start anchored at `latest`, skipped
                // records) are committed on their own every persist interval.
                let idle_moves = !txn.is_open() && now.duration_since(last_persist) >= PERSIST_INTERVAL;
                if txn.due(now) || (self.held && txn.is_open()) || (idle_moves && self.acks.any_dirty()) {
                    self.commit()?;
                    last_persist = now;
                }
            } else if now.duration_since(last_persist) >= persist_every {
                let written = self.progress.persist(&self.acks);
                persist_every = progress::next_round_after(written, PERSIST_INTERVAL);
                last_persist = now;
            }
            if now.duration_since(last_tick) >= PERSIST_INTERVAL {
                self.book.tick(&self.probe);
                self.report_problems();
                last_tick = now;
            }
        }
    }

    /// Answer an operator who waits for a pause or resume once it is applied: a pause when the consumer
    /// is held and what was in flight is settled (at most [`PAUSE_SETTLE_MAX`] after the hold, so a
    /// target that is away does not keep the answer back forever), a resume when fetching restarted.
    fn confirm_pause(&mut self) {
        if !self.operator_paused.awaited() {
            return;
        }
        let wanted = self.operator_paused.wanted();
        let applied = if wanted {
            let committed = self.txn.as_ref().is_none_or(|t| !t.is_open());
            let settled = committed && self.lane.as_ref().is_none_or(|l| l.in_flight() == 0)
                || self.held_since.is_some_and(|t| t.elapsed() >= PAUSE_SETTLE_MAX);
            self.held && settled
        } else {
            true
        };
        if applied {
            self.operator_paused.settle(wanted);
        }
    }

    /// Keep a signal for the loop: the newest assignment wins; a stop ends the loop.
    fn take(&mut self, signal: Option<Signal<Assignment>>) {
        match signal {
            Some(Signal::Msg(a)) => self.pending = Some(a),
            Some(Signal::Stop { deadline }) => self.stop = Some(deadline),
            None => {}
        }
    }

    /// A new assignment: subscribe to its topics and let the book start and stop partitions.
    fn reassign(&mut self, wanted: Assignment) -> Result<(), String> {
        let topics: BTreeSet<String> = wanted.partitions.iter().map(|(t, _)| t.clone()).collect();
        // A subscribed topic that grew: the consumer's metadata must show it before the group can assign
        // the new partitions (librdkafka refreshes it only every few minutes by itself).
        let (now_ready, before) = (partitions_per_topic(&wanted), partitions_per_topic(&self.ready));
        let grown: BTreeSet<&String> = topics
            .iter()
            .filter(|t| self.subscribed.contains(*t))
            .filter(|t| now_ready.get(t.as_str()) > before.get(t.as_str()))
            .collect();
        for t in grown {
            if let Err(e) = self.consumer.fetch_metadata(Some(t), kafka::ADMIN_TIMEOUT) {
                tracing::warn!(flow = %self.flow, topic = %t, error = %e, "cannot refresh the metadata of a grown source topic");
            }
        }
        if topics != self.subscribed {
            let names: Vec<&str> = topics.iter().map(String::as_str).collect();
            if names.is_empty() {
                self.consumer.unsubscribe();
            } else {
                self.consumer.subscribe(&names).map_err(|e| format!("subscribe to the source topics: {e}"))?;
            }
            self.subscribed = topics;
        }
        self.ready = wanted;
        self.update_book();
        Ok(())
    }

    /// The book copies what the group gave this node and the topic synchroniser made ready.
    fn update_book(&mut self) {
        let partitions = self.ready.partitions.intersection(&self.assigned).cloned().collect();
        let wanted = Assignment { partitions, deleted: self.ready.deleted.clone() };
        for remote in self.book.want(&self.plan, &self.acks, wanted) {
            self.refresh_producer_metadata(&remote);
        }
        METRICS.partitions_assigned.with_label_values(&[&self.flow]).set(self.assigned.len() as i64);
        let mut assigned: Vec<String> = self.assigned.iter().map(|(t, p)| format!("{t}-{p}")).collect();
        assigned.sort_unstable();
        self.supervisor.do_send(AssignedPartitions(assigned));
    }

    /// Apply the copier group's rebalances that arrived during the last poll.
    fn rebalance(&mut self) -> Result<(), String> {
        self.consumer.context().rebalance_pending.store(false, std::sync::atomic::Ordering::Release);
        let taken = std::mem::take(&mut *self.consumer.context().rebalances.lock().unwrap_or_else(|p| p.into_inner()));
        let mut events = taken.into_iter();
        while let Some(event) = events.next() {
            failpoints::check(failpoints::COPIER_REBALANCE)
                .and_then(|()| match &event {
                    Rebalanced::Assign(tps) => self.assign(tps.clone()),
                    Rebalanced::Revoke(tps) => self.revoke(tps.clone()),
                })
                .inspect_err(|_| {
                    // The lifetime ends: what librdkafka has not seen acknowledged yet (this event, if it
                    // failed before its (un)assign call, and every later one) waits for the stop, which
                    // acknowledges it (`acknowledge_pending_rebalances`): a consumer closes only then.
                    let unacknowledged = !self.acknowledged(&event);
                    let rest: Vec<Rebalanced> =
                        unacknowledged.then_some(event).into_iter().chain(events.by_ref()).collect();
                    let mut pending = self.consumer.context().rebalances.lock().unwrap_or_else(|p| p.into_inner());
                    pending.splice(0..0, rest);
                })?;
        }
        Ok(())
    }

    /// Whether the consumer's assignment already shows `event` applied.
    fn acknowledged(&self, event: &Rebalanced) -> bool {
        let Ok(assignment) = self.consumer.assignment() else { return false };
        let assigned = |(t, p): &SourcePartition| assignment.find_partition(t, *p).is_some();
        match event {
            Rebalanced::Assign(tps) => tps.iter().all(assigned),
            Rebalanced::Revoke(tps) => !tps.iter().any(assigned),
        }
    }

    /// The group gave this node `tps`: read where each was persisted (another node may have copied it
    /// meanwhile), take a new ownership epoch above every earlier owner's, assign them paused at those
    /// positions and claim them (see [`Self::claim`]); the book probes and starts them.
    fn assign(&mut self, tps: Vec<SourcePartition>) -> Result<(), String> {
        let folded = match &self.txn {
            Some(_) => self.take_over(&tps)?,
            None => progress::load_partitions(&self.plan, self.offsets_partitions, &tps).map_err(|e| e.to_string())?,
        };
        let mut tpl = rdkafka::TopicPartitionList::new();
        let eos = self.txn.is_some();
        let mut recovered = 0;
        for (t, p) in &tps {
            let progress = folded.get(&(t.clone(), *p));
            let stored = progress.and_then(|f| f.position.clone());
            recovered += usize::from(stored.is_some());
            self.acks.adopt(t, *p, stored, progress.map_or(0, |f| f.epoch), eos);
            // Assigned paused at an absolute offset (the stored position, else 0); the book seeks each
            // partition to its verified position when the probe has checked it. Never at a logical offset
            // (End, Beginning): librdkafka looks those up, and a seek while the lookup is in flight makes
            // its outdated answer schedule the lookup again, which later moves the partition to the end:
            // records skipped. An absolute position that fell off the log stops the partition's fetcher
            // (auto.offset.reset=error); the book then assigns it again at its verified position.
            let at = self.acks.next(t, *p).unwrap_or(0);
            tpl.add_partition_offset(t, *p, rdkafka::Offset::Offset(at)).map_err(|e| format!("assign {t}-{p}: {e}"))?;
        }
        self.consumer.incremental_assign(&tpl).map_err(|e| format!("assign source partitions: {e}"))?;
        self.consumer.pause(&tpl).map_err(|e| format!("pause new source partitions: {e}"))?;
        tracing::info!(flow = %self.flow, assigned = tps.len(), partitions = recovered, "the copier group assigned partitions to this node; recovered copy progress");
        failpoints::hold(failpoints::COPIER_CLAIM);
        self.claim(&tps)?;
        self.assigned.extend(tps);
        self.update_book();
        Ok(())
    }

    /// The claim of `tps`, before any record of them is sent: their positions under this node's new
    /// epoch, persisted, so that whoever takes them next takes an epoch above it (and, exactly-once,
    /// knows whom to fence).
    ///
    /// At-least-once, the claim is then checked against the log: a node that read the progress, was
    /// frozen and claimed after another node had taken the partitions over (the group gave them on) has
    /// a claim that does not count ([`progress::Progress::apply`]); it copies nothing and ends the
    /// lifetime (its successor joins the group again). Exactly-once needs no check: every writer that
    /// began taking the partitions before this node was fenced by it ([`Self::take_over`]), and any
    /// that began after fences this node, whose commits then fail.
    fn claim(&mut self, tps: &[SourcePartition]) -> Result<(), String> {
        let slots: Vec<Arc<PartitionAck>> = tps.iter().map(|(t, p)| self.acks.slot(t, *p)).collect();
        if let Some(txn) = self.txn.as_mut() {
            txn.mark(slots, false);
            return self.commit();
        }
        self.progress.claim(&slots, Instant::now() + HANDOVER_TIMEOUT)?;
        let now = progress::load_partitions(&self.plan, self.offsets_partitions, tps).map_err(|e| e.to_string())?;
        let me = self.writer.as_str();
        for slot in &slots {
            let tp = (slot.topic.to_string(), slot.partition);
            let log = now.get(&tp).cloned().unwrap_or_default();
            // Only a node of this deployment can have taken the partition from this one (another
            // deployment copying the same source partitions, e.g. the source's heartbeats, is not in its
            // copier group: its records are not a reason to stop).
            let kin_won = log.epoch_writer.as_deref().is_some_and(|w| w != me && w.starts_with(&self.kin));
            if kin_won && log.epoch >= slot.epoch() {
                return Err(format!(
                    "{}-{} is claimed by {} (epoch {}) in the progress log, not by this node (epoch {}): it took the \
                     partition over while this node was claiming it; starting again",
                    slot.topic,
                    slot.partition,
                    log.epoch_writer.as_deref().unwrap_or("another writer"),
                    log.epoch,
                    slot.epoch()
                ));
            }
        }
        Ok(())
    }

    /// Exactly-once: take `tps` over from whoever may still write them, then read their committed
    /// progress. This node first commits an intent for each (so that a node taking them after it sees
    /// it and fences it), then fences every other writer that the log names for them after their last
    /// release and before this intent, committed or not (the previous owner, a frozen writer whose
    /// transaction is open, a node that began taking them first): none of them can commit anything
    /// after this, and nothing of theirs keeps the read below waiting for a transaction to end.
    fn take_over(&mut self, tps: &[SourcePartition]) -> Result<progress::Folded, String> {
        let me = self.writer.clone();
        // Nothing of this node's may be open while it reads: the read waits for open transactions.
        self.commit()?;
        if let Some(txn) = self.txn.as_mut() {
            txn.intend(tps.iter().map(|(t, p)| self.acks.slot(t, *p)));
        }
        self.commit()?;
        let others = progress::contenders(&self.plan, self.offsets_partitions, tps, &me, &self.kin)
            .map_err(|e| e.to_string())?;
        for writer in &others {
            let took = transactions::fence(&self.plan, writer)?;
            METRICS.producers_fenced.with_label_values(&[&self.flow]).inc();
            tracing::info!(flow = %self.flow, fenced = %writer, millis = took.as_millis() as u64, "exactly-once: fenced an earlier writer of partitions given to this node");
        }
        let folded = progress::load_partitions(&self.plan, self.offsets_partitions, tps).map_err(|e| e.to_string())?;
        // A holder not fenced here claimed after this node's intent: it takes the partitions after this
        // node, and fences it.
        for ((t, p), progress) in &folded {
            let late = |h: &&String| **h != me && h.starts_with(&self.kin) && !others.contains(*h);
            if let Some(holder) = progress.holder.as_ref().filter(late) {
                return Err(format!(
                    "{t}-{p} was claimed by {holder} after this node began taking it over; starting again"
                ));
            }
        }
        Ok(folded)
    }

    /// Exactly-once: commit the open transaction (and the marked claims and releases). A record refused
    /// before or during the commit aborts it instead and holds only its partition
    /// ([`Self::refused_in_transaction`]); a commit that carried claims, releases or intents then fails.
    fn commit(&mut self) -> Result<(), String> {
        self.refused_in_transaction()?;
        let (Some(txn), Some(lane)) = (self.txn.as_mut(), self.lane.as_mut()) else { return Ok(()) };
        let marked = txn.has_marks();
        // The commit's own timeout, or a stop's deadline, also one that arrives while it waits.
        let timeout = Instant::now() + transactions::COMMIT_TIMEOUT;
        let (control, stop, pending) = (&self.control, &mut self.stop, &mut self.pending);
        let mut deadline = || {
            match control.try_next() {
                Some(Signal::Stop { deadline }) => *stop = Some(stop.map_or(deadline, |d| d.min(deadline))),
                Some(Signal::Msg(a)) => *pending = Some(a),
                None => {}
            }
            stop.map_or(timeout, |d| d.min(timeout))
        };
        match txn.commit(&self.plan, lane, &mut self.progress, &self.acks, &self.shared, &self.assigned, &mut deadline)
        {
            Err(e) if self.acks.any_failed() => {
                self.refused_in_transaction()?;
                if marked { Err(e) } else { Ok(()) }
            }
            other => other,
        }
    }

    /// Exactly-once: a record of the open transaction was refused (the target refused it, or the producer
    /// did). The transaction is aborted; once every report of its records is in, each partition that had
    /// records in it copies again from its committed position, with a new run of offset syncs, while the
    /// refused record's partition is held and retried as an at-least-once flow's is: after a backoff, one
    /// record at a time, each in a transaction of its own ([`Self::copy_batch`]), so that the same refusal
    /// aborts nothing else. Only an abort that fails (a fenced or failed producer) ends the lifetime.
    fn refused_in_transaction(&mut self) -> Result<(), String> {
        if self.txn.is_none() || !self.acks.any_failed() {
            return Ok(());
        }
        let failed = self.acks.take_failed();
        if failed.is_empty() {
            return Ok(());
        }
        // A record the producer purged (an abort) was not refused: its partition only copies it again.
        let (purged, refused): (Vec<_>, Vec<_>) =
            failed.into_iter().partition(|s| s.failure().is_some_and(|f| f.purged));
        let first = refused.first().or(purged.first()).expect("a failed slot");
        let why = format!(
            "a record of {}-{} was not delivered: {}",
            first.topic,
            first.partition,
            first.failure().map_or_else(|| "refused".to_string(), |f| f.error)
        );
        let (Some(txn), Some(lane)) = (self.txn.as_mut(), self.lane.as_mut()) else { return Ok(()) };
        if refused.is_empty() && !txn.is_open() {
            for slot in &purged {
                if slot.in_flight() <= 0 {
                    slot.clear_failure();
                    slot.back_to_committed();
                }
                self.book.roll_back(&(slot.topic.to_string(), slot.partition));
            }
            return Ok(());
        }
        let deadline = Instant::now() + kafka::ADMIN_TIMEOUT;
        let touched = txn.abort(Some(lane), &self.shared, &why, deadline);
        if lane.client().fatal_error().is_some() {
            return Err(format!("{why}; the transaction could not be aborted: the producer failed"));
        }
        // The aborted records' reports (acknowledged before the abort, or purged) all arrive now; a
        // purged one froze its partition like a refusal, which it is not.
        if !lane.wait_idle(kafka::ADMIN_TIMEOUT) {
            return Err(format!("{why}; the aborted transaction's records are not all reported"));
        }
        let genuine: BTreeSet<SourcePartition> = refused.iter().map(|s| (s.topic.to_string(), s.partition)).collect();
        for slot in self.acks.take_failed() {
            if !genuine.contains(&(slot.topic.to_string(), slot.partition)) {
                slot.clear_failure();
            }
        }
        let mut back: BTreeSet<SourcePartition> = touched.iter().map(|s| (s.topic.to_string(), s.partition)).collect();
        back.extend(genuine.iter().cloned());
        back.extend(purged.iter().map(|s| (s.topic.to_string(), s.partition)));
        for tp in &back {
            self.acks.slot(&tp.0, tp.1).back_to_committed();
        }
        for slot in &refused {
            if let Some(remote) = self.book.delivery_failed(&self.flow, slot) {
                self.refresh_producer_metadata(&remote);
            }
        }
        for tp in &back {
            self.book.roll_back(tp);
        }
        self.shared.syncs_resume();
        tracing::warn!(flow = %self.flow, refused = genuine.len(), rolled_back = back.len(), reason = %why, "exactly-once: a record was refused; its transaction is aborted, the refused partition is held and retried alone, the others copy again from their committed positions");
        Ok(())
    }

    /// The group takes `tps` away: stop fetching them, let the target acknowledge what is in flight,
    /// publish their final offset syncs and persist their positions, then let them go (at-least-once
    /// across the handover, and no duplicate when it goes well).
    ///
    /// When the handover cannot be clean (the assignment was lost: this node was presumed dead, e.g.
    /// frozen past its session timeout, and another node copies the partitions already; or the target
    /// did not acknowledge within [`HANDOVER_TIMEOUT`]), the partitions' deliveries stop counting at once
    /// (no position, no offset sync from them: the next owner's must not be contradicted). Records of
    /// them still queued are not purged (the producer is shared by other flows, and librdkafka purges
    /// per producer): they may reach the target after the next owner's copies, as duplicates, at most
    /// this flow's share of the queue.
    fn revoke(&mut self, tps: Vec<SourcePartition>) -> Result<(), String> {
        let lost = self.consumer.assignment_lost();
        let mut tpl = rdkafka::TopicPartitionList::new();
        for (t, p) in &tps {
            tpl.add_partition(t, *p);
            self.assigned.remove(&(t.clone(), *p));
        }
        let _ = self.consumer.pause(&tpl);
        if self.txn.is_some() {
            return self.revoke_in_transaction(tps, tpl, lost);
        }
        // Only the revoked partitions' records are waited for: another partition of the flow that the
        // target does not take must not make every handover unclean.
        let slots: Vec<_> = tps.iter().map(|(t, p)| self.acks.slot(t, *p)).collect();
        let clean = !lost
            && {
                let until = Instant::now() + HANDOVER_TIMEOUT;
                while slots.iter().any(|s| s.in_flight() > 0) && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(2));
                }
                let left: i64 = slots.iter().map(|s| s.in_flight().max(0)).sum();
                if left > 0 {
                    tracing::warn!(flow = %self.flow, in_flight = left, "records of revoked partitions not acknowledged within the handover time; they no longer count here and the next owner copies them again");
                }
                left == 0
            };
        if !clean {
            self.book.revoke_deliveries(&tps);
            METRICS.unclean_handovers.with_label_values(&[&self.flow]).inc_by(tps.len() as u64);
        }
        self.update_book();
        self.book.advance(&self.shared, &self.probe, Instant::now());
        if !lost {
            // Persisting after the group moved a partition on (it was lost, not handed over) would move
            // the next owner's position back.
            self.shared.publish_quiet(Instant::now(), true);
            self.shared.syncs.wait_published(HANDOVER_TIMEOUT);
            self.progress.persist(&self.acks);
            if let Err(e) = self.progress.flush(Instant::now() + HANDOVER_TIMEOUT) {
                tracing::warn!(flow = %self.flow, error = %e, "positions of revoked partitions not persisted; the next owner copies some records again");
            }
        }
        self.consumer.incremental_unassign(&tpl).map_err(|e| format!("unassign source partitions: {e}"))?;
        tracing::info!(flow = %self.flow, partitions = tps.len(), lost, "the copier group took partitions from this node");
        Ok(())
    }

    /// Exactly-once handover: the open transaction, with the revoked partitions' last records and their
    /// release, is committed before they are let go. A lost assignment (this node was presumed dead and
    /// another copies them already, having fenced this node's producer) ends the lifetime: what is open
    /// is aborted, and the successor resumes every partition from committed progress.
    fn revoke_in_transaction(
        &mut self,
        tps: Vec<SourcePartition>,
        tpl: rdkafka::TopicPartitionList,
        lost: bool,
    ) -> Result<(), String> {
        if lost {
            self.lost = true;
            let _ = self.consumer.incremental_unassign(&tpl);
            METRICS.unclean_handovers.with_label_values(&[&self.flow]).inc_by(tps.len() as u64);
            return Err(format!(
                "the copier group took {} partitions from this node as lost (it was presumed dead); its open transaction is aborted",
                tps.len()
            ));
        }
        if let Some(txn) = self.txn.as_mut() {
            txn.mark(tps.iter().map(|(t, p)| self.acks.slot(t, *p)), true);
        }
        self.commit()?;
        self.update_book();
        self.book.advance(&self.shared, &self.probe, Instant::now());
        self.shared.publish_quiet(Instant::now(), true);
        self.shared.syncs.wait_published(HANDOVER_TIMEOUT);
        self.consumer.incremental_unassign(&tpl).map_err(|e| format!("unassign source partitions: {e}"))?;
        tracing::info!(flow = %self.flow, partitions = tps.len(), "the copier group took partitions from this node; their transaction is committed and they are released");
        Ok(())
    }

    /// librdkafka refreshes a producer's metadata every few minutes; a remote topic that just grew must be
    /// known at once, or records for its new partitions fail as unknown partitions.
    fn refresh_producer_metadata(&self, remote: &str) {
        if let Some(l) = &self.lane
            && let Err(e) = l.client().fetch_metadata(Some(remote), kafka::ADMIN_TIMEOUT)
        {
            tracing::warn!(flow = %self.flow, topic = remote, error = %e, "cannot refresh the target's metadata of a grown topic");
        }
    }

    /// Copy what the consumer has buffered (up to a budget), then come back to the control channel.
    fn copy_batch(&mut self) -> Result<(), String> {
        let mut wait = POLL_WAIT;
        let mut now_ms = 0;
        for i in 0..10_000 {
            let Some(polled) = self.consumer.poll(wait) else { return Ok(()) };
            wait = Duration::ZERO;
            // Records after the first come from the local queue, microseconds apart: one clock read per
            // 256 of them is enough for the age histogram (a read per record cost a few % of the CPU).
            if i % 256 == 0 {
                now_ms = delivery::wall_ms();
            }
            let msg = match polled {
                Ok(msg) => msg,
                Err(e) => {
                    self.consumer_error(&e);
                    return Ok(());
                }
            };
            if self.consumer.context().rebalance_pending.load(std::sync::atomic::Ordering::Acquire) {
                // The group moved partitions during this poll: apply that first. The record is not sent
                // now: if its partition is still this node's, it is fetched again from this offset.
                let (topic, partition, offset) = (msg.topic().to_string(), msg.partition(), msg.offset());
                drop(msg);
                self.rebalance()?;
                self.book.hold_back(&topic, partition, offset);
                if !self.held {
                    self.book.release_held();
                    self.book.apply(&self.consumer, false)?;
                }
                return Ok(());
            }
            // Records of a partition that is not copying (failed, being reset) are dropped: it is
            // assigned again at its own position later.
            let Some((remote, part)) = self.book.copying(msg.topic(), msg.partition()) else { continue };
            // Held (an operator's pause, checked per record so a pass in progress stops at once, or a
            // sync backlog): the record is not sent; the partition is sought back to it when the hold ends.
            if self.held || self.operator_paused.wanted() {
                let (topic, partition, offset) = (msg.topic().to_string(), msg.partition(), msg.offset());
                drop(msg);
                self.book.hold_back(&topic, partition, offset);
                if !self.held {
                    return Ok(()); // the loop applies the pause now
                }
                continue;
            }
            let pause = part.fetched(msg.offset());
            if pause && self.txn.as_ref().is_some_and(Transactions::is_open) {
                // One record at a time after a refusal: it goes into a transaction of its own, so that the
                // same refusal aborts nothing else. The open one is committed first; the record is
                // fetched again.
                let (topic, partition, offset) = (msg.topic().to_string(), msg.partition(), msg.offset());
                drop(msg);
                self.book.hold_back(&topic, partition, offset);
                self.commit()?;
                self.book.release_held();
                self.book.apply(&self.consumer, self.held)?;
                return Ok(());
            }
            if let Some(ts) = msg.timestamp().to_millis() {
                part.age.observe(delivery::seconds_since(ts, now_ms));
            }
            // Provenance: a record that has been on the target is never copied back (see `provenance`).
            let mut stamp = None;
            if let Some(provenance) = self.provenance.as_mut() {
                let lane = self.lane.as_ref().expect("the lane exists until the loop ends");
                match provenance.decide(&msg, remote, self.consumer.client(), lane.client())? {
                    Some(header) => stamp = Some(header),
                    None => {
                        part.ack.skipped(&self.acks, msg.offset());
                        continue;
                    }
                }
            }
            let lane = self.lane.as_mut().expect("the lane exists until the loop ends");
            if let Some(txn) = self.txn.as_mut() {
                txn.ensure_open(&self.plan, lane, &self.shared)?;
                txn.added(msg.payload_len() + msg.key().map_or(0, <[u8]>::len));
            }
            // Counted before the producer takes it (its report may come at once), uncounted if a panic
            // comes before it does.
            let counted = InFlight::count(&part.ack);
            match send(lane, &self.control, &mut self.pending, remote, &msg, stamp) {
                Sent::Ok => {
                    counted.handed_over();
                    failpoints::check(failpoints::COPIER_SENT)?;
                    if let Some(txn) = self.txn.as_mut() {
                        txn.sent(&part.ack, msg.offset());
                    }
                    if pause {
                        self.book.pause_after_send(msg.topic(), msg.partition());
                        if self.txn.is_some() {
                            // Its report comes before any other record joins its transaction: a refusal
                            // then aborts this record only.
                            lane.wait_idle(kafka::ADMIN_TIMEOUT);
                            return Ok(());
                        }
                    }
                    if self.txn.as_ref().is_some_and(|t| t.due(Instant::now())) {
                        return Ok(()); // the loop commits
                    }
                }
                Sent::Stop(deadline) => {
                    drop(counted);
                    self.stop = Some(deadline);
                    return Ok(());
                }
                Sent::Refused(code, error) => {
                    counted.handed_over(); // the failure settles it
                    let size = msg.payload_len() + msg.key().map_or(0, <[u8]>::len);
                    let failure = DeliveryFailure {
                        offset: msg.offset(),
                        size,
                        error,
                        permanent: delivery::is_permanent(code),
                        unknown_partition: code == Some(RDKafkaErrorCode::UnknownPartition),
                        purged: false,
                    };
                    part.ack.fail(&self.acks, failure, true);
                }
            }
        }
        Ok(())
    }

    fn consumer_error(&mut self, e: &KafkaError) {
        if self.consumer.context().group_refusal(e) {
            return;
        }
        match e.rdkafka_error_code() {
            // `auto.offset.reset = error`: a fetch position fell off the log (retention, truncation, a
            // re-created topic). librdkafka does not say which partition: the probe checks them all.
            Some(RDKafkaErrorCode::AutoOffsetReset) => {
                tracing::info!(flow = %self.flow, error = %e, "a source partition's position is out of range; checking the copied partitions");
                self.book.range_check(&self.probe);
            }
            Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic) => {
                self.probe.send(probe::Request::CheckIds);
                self.consumer_errors.warn(&self.flow, e);
            }
            _ => self.consumer_errors.warn(&self.flow, e),
        }
    }

    fn report_problems(&mut self) {
        let Some(problems) = self.book.take_problems_if_changed() else { return };
        let summary = (!problems.is_empty()).then(|| {
            let first = &problems[0];
            let more = if problems.len() > 1 { format!(" (and {} more)", problems.len() - 1) } else { String::new() };
            format!("{}-{}: {}{more}", first.topic, first.partition, first.reason)
        });
        *self.problems.lock().unwrap_or_else(|p| p.into_inner()) = summary;
        METRICS.partitions_failing.with_label_values(&[&self.flow]).set(problems.len() as i64);
        self.supervisor.do_send(PartitionProblems(problems));
    }

    /// Ordered shutdown (also after an error, so that what was acknowledged is not copied again): stop
    /// fetching, let the target acknowledge what is in flight, publish the final offset syncs, persist.
    /// Everything is bounded by `deadline`, whatever the clusters do.
    fn shutdown(&mut self, deadline: Instant, failed: Option<&str>) -> Result<(), String> {
        // Stop fetching. Closing the consumer afterwards leaves the copier group at once, so the other
        // nodes (or this flow's next generation) take the partitions without waiting for a session timeout.
        self.consumer.context().closing.store(true, std::sync::atomic::Ordering::Release);
        self.acknowledge_pending_rebalances();
        if let Ok(all) = self.consumer.assignment() {
            let _ = self.consumer.pause(&all);
        }
        if self.txn.is_some() {
            return self.shutdown_in_transaction(deadline, failed);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        // Keep a share of the time for the final persist.
        let flush_until = Instant::now() + left.mul_f64(0.75);
        if let Some(lane) = self.lane.take() {
            if !lane.wait_idle(flush_until.saturating_duration_since(Instant::now())) {
                tracing::warn!(flow = %self.flow, in_flight = lane.in_flight(), "not every record was acknowledged before the deadline; they no longer count here and are copied again after the restart");
                // Their late reports must not move what is persisted now; the next lifetime waits for
                // them before it starts (the producer is shared: nothing here can purge them).
                self.book.revoke_every_delivery();
            }
            // The last lane of the producer takes it along: librdkafka purges what is left, and the
            // reports of the purged records arrive before the drop returns.
            drop(lane);
        }
        // Publish the final position of every partition, so translation is exact after the stop.
        self.shared.publish_quiet(Instant::now(), true);
        self.progress.persist(&self.acks);
        self.progress.flush(deadline)
    }
}

impl CopyLoop {
    /// Rebalances the loop took in and never applied (it ended first, e.g. on an error right after a
    /// lost assignment): librdkafka waits for each to be acknowledged with an (un)assign call, and until
    /// then the consumer can never close (its drop would wait forever). Acknowledged here; from now on
    /// the callback applies them itself (`closing`).
    fn acknowledge_pending_rebalances(&mut self) {
        let pending =
            std::mem::take(&mut *self.consumer.context().rebalances.lock().unwrap_or_else(|p| p.into_inner()));
        for event in pending {
            let (tps, assign) = match event {
                Rebalanced::Assign(tps) => (tps, true),
                Rebalanced::Revoke(tps) => (tps, false),
            };
            let mut tpl = rdkafka::TopicPartitionList::new();
            for (t, p) in &tps {
                tpl.add_partition(t, *p);
            }
            let done =
                if assign { self.consumer.incremental_assign(&tpl) } else { self.consumer.incremental_unassign(&tpl) };
            if let Err(e) = done {
                tracing::warn!(flow = %self.flow, error = %e, assign, "cannot acknowledge a rebalance at stop");
            }
        }
    }

    /// Exactly-once stop: commit what is open with every partition released (the consumer leaves the
    /// group next), or abort it after a failure; then publish the committed positions' syncs.
    fn shutdown_in_transaction(&mut self, deadline: Instant, failed: Option<&str>) -> Result<(), String> {
        // Every commit from here on is bounded by the stop's deadline (`--shutdown-timeout`).
        self.stop = Some(self.stop.map_or(deadline, |d| d.min(deadline)));
        let outcome = match failed {
            None => {
                if let Some(txn) = self.txn.as_mut() {
                    txn.mark(self.assigned.iter().map(|(t, p)| self.acks.slot(t, *p)), true);
                }
                self.commit()
            }
            Some(why) => Err(why.to_string()),
        };
        if let Err(e) = &outcome
            && let (Some(txn), Some(lane)) = (self.txn.as_mut(), self.lane.as_mut())
        {
            txn.abort(Some(lane), &self.shared, e, deadline);
            // The partitions are released at their committed positions, unless the group or a fence
            // already gave them to another node: whoever takes them next then has nobody to fence, so
            // this node's next lifetime, which writes under the same transactional id, is not fenced
            // for a failure it already paid for with this restart.
            if !self.lost && !e.contains(transactions::FENCED) && !self.assigned.is_empty() {
                let slots: Vec<_> = self.assigned.iter().map(|(t, p)| self.acks.slot(t, *p)).collect();
                match txn.release_committed(&self.plan, lane, &mut self.progress, &self.shared, &slots, deadline) {
                    Ok(()) => {
                        tracing::info!(flow = %self.flow, partitions = slots.len(), "exactly-once: the failed copier released its partitions at their committed positions")
                    }
                    Err(why) => {
                        tracing::warn!(flow = %self.flow, error = %why, "exactly-once: the failed copier could not release its partitions; whoever takes them fences this node's producer")
                    }
                }
            }
        }
        drop(self.lane.take());
        if outcome.is_ok() {
            self.shared.publish_quiet(Instant::now(), true);
        }
        // The error itself is the copier's (returned by `run`); a failed commit is this one's.
        if failed.is_some() { Ok(()) } else { outcome }
    }
}

/// A record counted in flight in its partition's slot until it is handed to the producer: dropped
/// before that (a stop, a panic that unwinds through the send), it is uncounted, so that no count
/// outlives the lifetime that took it.
struct InFlight<'a>(Option<&'a PartitionAck>);

impl<'a> InFlight<'a> {
    fn count(ack: &'a PartitionAck) -> Self {
        ack.sent();
        Self(Some(ack))
    }

    /// The producer took the record (its report settles the count), or its refusal settles it.
    fn handed_over(mut self) {
        self.0 = None;
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(ack) = self.0 {
            ack.unsent();
        }
    }
}

/// The outcome of handing one record to the producer.
enum Sent {
    Ok,
    /// A stop arrived while the producer queue was full (the target is slow or away): not sent.
    Stop(Instant),
    /// The producer refused the record outright (e.g. larger than its `message.max.bytes`).
    Refused(Option<RDKafkaErrorCode>, String),
}

/// Produce one source record to its remote topic, same partition. Waits while the producer queue is
/// full (backpressure on the consumer), but keeps listening for a stop; an assignment that arrives
/// meanwhile is kept in `pending` for the loop.
fn send(
    lane: &mut RecordLane,
    control: &Control<Assignment>,
    pending: &mut Option<Assignment>,
    remote: &str,
    msg: &BorrowedMessage<'_>,
    stamp: Option<&[u8]>,
) -> Sent {
    if let Err(e) = failpoints::check(failpoints::COPIER_DELIVER) {
        return Sent::Refused(None, e);
    }
    let mut record: Record<'_> = lane.record(remote, msg.offset()).partition(msg.partition());
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
        let mut owned = OwnedHeaders::new_with_capacity(headers.count() + usize::from(stamp.is_some()));
        for h in headers.iter() {
            // A stamped copy carries ferry's header of this copy only.
            if stamp.is_none() || !provenance::is_ferry_header(h.key) {
                owned = owned.insert(Header { key: h.key, value: h.value });
            }
        }
        if let Some(path) = stamp {
            owned = owned.insert(Header { key: provenance::PATH_HEADER, value: Some(path) });
        }
        record = record.headers(owned);
    } else if let Some(path) = stamp {
        record = record.headers(
            OwnedHeaders::new_with_capacity(1).insert(Header { key: provenance::PATH_HEADER, value: Some(path) }),
        );
    }
    loop {
        match lane.send(record) {
            Ok(()) => return Sent::Ok,
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                record = back;
                match control.next_within(Duration::from_millis(5)) {
                    Some(Signal::Stop { deadline }) => return Sent::Stop(deadline),
                    Some(Signal::Msg(a)) => *pending = Some(a),
                    None => {}
                }
            }
            Err((e, _)) => return Sent::Refused(e.rdkafka_error_code(), e.to_string()),
        }
    }
}

/// A warning that repeats at most once per `every`, with the number of suppressed repeats.
struct RateLimitedLog {
    every: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl RateLimitedLog {
    fn new(every: Duration) -> Self {
        Self { every, last: None, suppressed: 0 }
    }

    fn warn(&mut self, flow: &str, e: &KafkaError) {
        if self.last.is_some_and(|t| t.elapsed() < self.every) {
            self.suppressed += 1;
            return;
        }
        tracing::warn!(flow, error = %e, suppressed = self.suppressed, "source consumer error");
        self.last = Some(Instant::now());
        self.suppressed = 0;
    }
}

/// Reports the copier degraded while librdkafka says a cluster is away, or partitions are failing, and
/// running again after, from its own thread: the copy loop can be busy exactly when a cluster is away
/// (a full producer queue waits for the target), and must not look healthy meanwhile.
/// Stops when dropped.
struct HealthReporter {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HealthReporter {
    fn start(
        plan: &FlowPlan,
        supervisor: &Addr<FlowSupervisor>,
        group: &Arc<kafka::Refusal>,
        source: &Arc<ClusterWatch>,
        target: &Arc<ClusterWatch>,
        partitions: &Arc<Mutex<Option<String>>>,
    ) -> Result<Self, String> {
        let (stop, stopped) = mpsc::channel::<()>();
        let (source_alias, target_alias) = (plan.source.alias.clone(), plan.target.alias.clone());
        let (flow, supervisor, group, source, target, partitions) = (
            plan.id.to_string(),
            supervisor.clone(),
            group.clone(),
            source.clone(),
            target.clone(),
            partitions.clone(),
        );
        let thread = std::thread::Builder::new()
            .name(format!("copier-health {flow}"))
            .spawn(move || {
                let mut degraded: Option<String> = None;
                loop {
                    let problem = group
                        .current(REFUSAL_WINDOW)
                        .or_else(|| source.recent(DEGRADED_WINDOW).map(|r| format!("source `{source_alias}` unreachable: {r}")))
                        .or_else(|| {
                            target.recent(DEGRADED_WINDOW).map(|r| format!("target `{target_alias}` unreachable: {r}"))
                        })
                        .or_else(|| {
                            partitions
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .as_ref()
                                .map(|p| format!("partitions not copying: {p}"))
                        });
                    if problem != degraded {
                        let state = if problem.is_some() { ActorState::Degraded } else { ActorState::Running };
                        if problem.is_some() != degraded.is_some() {
                            tracing::info!(flow = %flow, actor = "copier", ?state, reason = problem.as_deref().unwrap_or("copying"), "copier health changed");
                        }
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

/// Partitions of each topic in `a`, counted in one pass (a flow of a thousand topics must not count
/// per topic).
fn partitions_per_topic(a: &Assignment) -> std::collections::HashMap<&str, usize> {
    let mut n = std::collections::HashMap::new();
    for (t, _) in &a.partitions {
        *n.entry(t.as_str()).or_default() += 1;
    }
    n
}

/// Distinguishes copier lifetimes in offset-sync marks; random per process and per call.
fn lifetime_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.write_u32(std::process::id());
    h.finish()
}

fn source_consumer(
    plan: &FlowPlan,
    watch: Arc<ClusterWatch>,
    identity: &Identity,
) -> Result<BaseConsumer<CopierContext>, KafkaOpError> {
    let group = (copier_group(identity, plan), plan.source.alias.clone());
    let mut cfg = kafka::client_config(&plan.source, &plan.id, "replication-consumer")?;
    // Positions live in MM2's progress topic, never in the group: the group only splits the work.
    cfg.set("group.id", copier_group(identity, plan))
        // Dynamic membership, deliberately: a static member that rejoins after a restart gets its old
        // assignment back without a rebalance, even when its subscription changed meanwhile (a reloaded
        // flow with other topics would copy nothing). The client id names the node in the group listing.
        .set("client.id", format!("{}|ferry|replication-consumer|{}", plan.id, identity.node_id))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        // Never jump silently: a position that fell off the log is reported, and the probe decides
        // (records lost to retention, or a re-created topic to copy from its start).
        .set("auto.offset.reset", "error")
        // The group leader notices a grown source topic only at a metadata refresh (default every
        // 5 minutes): refresh often, it is one small request for the subscribed topics.
        .set("topic.metadata.refresh.interval.ms", "5000")
        .set("fetch.wait.max.ms", "100")
        // Prefetch: librdkafka's 64 MiB is the largest share of the copier's memory. Measured on the
        // headline bench (bench/results.md): 32 MiB keeps the copy rate (93-99k vs 103k records/s of
        // 512 B) at 150 MiB instead of 210 MiB peak RSS; 16 MiB starves a flow alone (52-64k records/s).
        // Many flows share the node's budget instead (clients::budget): together they copy no faster.
        .set("queued.max.messages.kbytes", (crate::clients::budget::flow_share() / 1024).to_string());
    if plan.settings.delivery == Delivery::ExactlyOnce {
        // Aborted source transactions are never copied, whatever the cluster's client properties say.
        cfg.set("isolation.level", "read_committed");
    }
    match plan.settings.group_protocol {
        GroupProtocol::Classic => {
            cfg.set("partition.assignment.strategy", "cooperative-sticky");
            if !plan.source.client.contains_key("session.timeout.ms") {
                // A node that dies (kill -9, lost host) gives its partitions up after this long; a
                // graceful stop leaves the group at once. Kafka's minimum is 6 s.
                cfg.set("session.timeout.ms", "10000");
            }
        }
        // The broker assigns and owns the session timeout (group.consumer.session.timeout.ms); the
        // client-side assignor and timeouts do not apply. Rebalances reach the copier as incremental
        // assign/revoke events, as with cooperative-sticky.
        GroupProtocol::Consumer => {
            cfg.set("group.protocol", "consumer");
            // librdkafka refuses to create a consumer-protocol client with the classic protocol's
            // timeouts and assignor set; the source cluster's client properties may hold them for the
            // classic flows and other clients of the cluster.
            for key in ["session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"] {
                if cfg.get(key).is_some() {
                    tracing::info!(flow = %plan.id, key, "ignored for the copier group on the consumer protocol (the broker owns it: group.consumer.*)");
                    cfg.remove(key);
                }
            }
        }
    }
    cfg.create_with_context(CopierContext {
        watch,
        group_refused: Arc::default(),
        group,
        rebalances: Mutex::new(Vec::new()),
        rebalance_pending: std::sync::atomic::AtomicBool::new(false),
        closing: std::sync::atomic::AtomicBool::new(false),
    })
    .map_err(|e| KafkaOpError::kafka(&plan.source.alias, "create replication consumer", e))
}

/// The flow's settings that its record producer is made with: flows that agree share one.
fn record_tuning(plan: &FlowPlan) -> RecordTuning {
    let s = &plan.settings;
    RecordTuning {
        compression: s.compression.clone(),
        linger_ms: format!("{}", s.linger.as_secs_f64() * 1000.0),
        batch_size: s.batch_size_bytes,
    }
}

/// Wait until nothing the flow's previous copier lifetimes sent is in flight (the target connection
/// counts each flow's records on its shared producers; an exactly-once lifetime's own producer went
/// with it, every record reported), at most [`PREDECESSOR_SETTLE_MAX`], and never past a stop. Immediate unless a lifetime
/// ended while the target was not acknowledging. Returns the newest assignment and a stop that arrived
/// meanwhile, for the loop.
fn wait_for_predecessor(
    plan: &FlowPlan,
    conns: &FlowConnections,
    acks: &AckTable,
    control: &Control<Assignment>,
) -> Result<(Option<Assignment>, Option<Instant>), String> {
    let flow = plan.id.to_string();
    let started = Instant::now();
    let mut logged = false;
    let mut pending = None;
    loop {
        // The producers' counts are the truth: they settle every record they took, whatever the flow's
        // code did with its report. The ack table's may hold records that a panic kept from ever being
        // reported (counted, then the lifetime died before the producer took them, or the report
        // panicked): those are settled here, their positions never moved past them.
        let left = conns.target.records_in_flight(&flow);
        if left == 0 {
            let stale = acks.settle_in_flight();
            if stale > 0 {
                tracing::warn!(flow = %plan.id, records = stale, "the previous copier counted records in flight that the producer never reported (it panicked); they are copied again from their partitions' positions");
            }
            return Ok((pending, None));
        }
        if started.elapsed() >= PREDECESSOR_SETTLE_MAX {
            return Err(format!(
                "{left} records of the previous copier still unreported by the target after {} s",
                PREDECESSOR_SETTLE_MAX.as_secs()
            ));
        }
        if !logged && started.elapsed() >= Duration::from_secs(1) {
            tracing::info!(flow = %plan.id, in_flight = left, "waiting for the target to acknowledge or time out the previous copier's records");
            logged = true;
        }
        match control.next_within(Duration::from_millis(100)) {
            Some(Signal::Stop { deadline }) => return Ok((pending, Some(deadline))),
            Some(Signal::Msg(a)) => pending = Some(a),
            None => {}
        }
    }
}
