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
//! re-created?) go to the [`probe`] thread, never block the copy thread; so does the look for records on
//! the remote topics that ferry did not write ([`foreign`]).

mod claims;
mod consumer;
mod delivery;
mod exactly_once;
pub mod foreign;
mod foreign_count;
mod health;
mod partitions;
mod probe;
pub mod provenance;
mod rebalance;
mod rules;
mod send;
pub mod transactions;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;

pub use self::consumer::copier_group;
use self::consumer::{CopierContext, source_consumer};
use self::delivery::{DeliveryContext, Shared};
use self::health::HealthReporter;
use self::partitions::Book;
use self::probe::Probe;
use self::send::{InFlight, RateLimitedLog, Sent, send};
use self::transactions::Transactions;
use super::acks::{AckTable, DeliveryFailure, PartitionAck, SourcePartition};
use super::messages::Assignment;
use super::messages::{ActorKind, AssignedPartitions, Parent, PartitionProblems};
use super::offset_syncs::SyncQueue;
use super::pause::PauseSwitch;
use super::progress::{self, ProgressWriter};
use super::worker::{Control, Signal, Worker, panic_message};
use crate::clients::{FlowConnections, RecordLane, RecordTuning};
use crate::config::{Delivery, FlowPlan};
use crate::failpoints;
use crate::flow::Identity;
use crate::kafka::{self, ClusterWatch, KafkaOpError};
use crate::metrics::METRICS;

/// Persist acknowledged positions this often: bounds what a `kill -9` copies twice to about a quarter
/// second of traffic. A round writes one small record per partition that moved, without waiting; flows
/// of more than 1,000 moving partitions persist less often ([`progress::MAX_RECORDS_PER_SECOND`]).
const PERSIST_INTERVAL: Duration = Duration::from_millis(250);
/// How long one `poll` waits for records before the loop looks at its control channel again.
const POLL_WAIT: Duration = Duration::from_millis(100);
/// The same wait once nothing was polled for [`IDLE_AFTER`] and nothing is in flight: a record wakes
/// the poll at once whatever the wait, so only the loop's own rounds (control messages, a stop) come
/// later, and an idle flow's copier wakes twice a second instead of ten times.
const IDLE_POLL_WAIT: Duration = Duration::from_millis(500);
const IDLE_AFTER: Duration = Duration::from_secs(2);
/// How often partitions that went quiet get their newest position published as an offset sync.
const QUIET_CHECK: Duration = Duration::from_millis(200);
/// How long a new copier lifetime waits at most for the reports of the records its predecessor left in
/// flight: librdkafka reports each record within its `message.timeout.ms` (five minutes) plus a
/// request's timeout. Beyond it the copier fails (and is restarted to wait again) rather than copy
/// while a late report could still move a position under it.
const PREDECESSOR_SETTLE_MAX: Duration = Duration::from_secs(400);

/// The copier as a supervised actor.
#[allow(clippy::too_many_arguments)] // each is a separate piece of the supervisor's state
pub fn worker(
    plan: Arc<FlowPlan>,
    conns: Arc<FlowConnections>,
    acks: Arc<AckTable>,
    syncs: Arc<SyncQueue>,
    supervisor: Parent,
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

/// How long a new copier holds while the deployment's recorded pause is not known yet (its control
/// topic cannot be read: then it copies, and follows the topic once it answers).
const PAUSE_UNKNOWN_HOLD: Duration = Duration::from_secs(10);

/// How long a pause waits for the records in flight when it was applied before it is confirmed anyway.
const PAUSE_SETTLE_MAX: Duration = Duration::from_secs(10);

/// How long a revoked partition's handover (in-flight records, final syncs, persist) may take.
const HANDOVER_TIMEOUT: Duration = Duration::from_secs(15);

/// The copy loop: the consumer, the producer and every partition's state, on the copier's thread.
struct CopyLoop {
    plan: Arc<FlowPlan>,
    flow: String,
    control: Control<Assignment>,
    supervisor: Parent,
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
    /// When a poll last returned something (for [`IDLE_POLL_WAIT`]).
    last_polled: Instant,
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
    /// Exactly-once: when a stop's final commit gives up, earlier than the stop's deadline so that the
    /// abort and the release that follow a failed commit still fit (see `exactly_once`).
    commit_by: Option<Instant>,
    /// The newest assignment that arrived while the loop was busy.
    pending: Option<Assignment>,
    consumer_errors: RateLimitedLog,
    /// Stamp and honour the provenance header (identity replication); `None` for flows without it.
    provenance: Option<provenance::Provenance>,
    /// `schemas = "sync" | "translate"`: the flow's schema IDs and its registries' refresh.
    schemas: Option<crate::schemas::FlowSchemas>,
    /// The flow's record filters and header rules (`None`: it has none).
    rules: Option<rules::CopyRules>,
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
        supervisor: Parent,
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
        let mut txn = (plan.settings.delivery == Delivery::ExactlyOnce).then(|| Transactions::new(&plan, identity));
        let sink = Arc::new(DeliveryContext(shared.clone()));
        let transactional =
            |id: &str| conns.target.transactional_lane(&flow, record_tuning(&plan), sink.clone(), id).map_err(err);
        let lane = match &txn {
            Some(t) => transactional(&t.ids()[0])?,
            None => conns.target.record_lane(&flow, record_tuning(&plan), sink.clone()).map_err(err)?,
        };
        // Before the group assigns anything (and so before any progress is read): fences this node's
        // previous copier and aborts what it left open.
        if let Some(t) = txn.as_mut() {
            // Positions an earlier lifetime left dirty may be aborted ones: the committed progress,
            // read when the group assigns, is the truth, and nothing else is written.
            for slot in acks.take_dirty() {
                slot.take_dirty();
            }
            let spare = transactional(&t.ids()[1])?;
            t.init(&plan, &lane, spare)?;
            tracing::info!(flow = %flow, transactional_ids = ?t.ids(), "exactly-once: the copier's transactions are initialised");
        }
        // The fetch sizes follow the source's round trip (a long link needs larger responses).
        let rtt = conns.source.round_trip();
        let consumer = source_consumer(&plan, source_watch.clone(), identity, rtt).map_err(err)?;
        // Records on the remote partitions that this copier did not write are counted by the probe's
        // thread (see `foreign`). Not under the identity policy: there the remote topic is the target's
        // own topic of the same name, which its applications write by design (active-active); nor for
        // exactly-once flows.
        let watched = plan.settings.replication_policy != crate::config::PolicyKind::Identity;
        let foreign = match plan.settings.delivery {
            Delivery::AtLeastOnce if watched => {
                let target = conns.target.meta(crate::clients::Isolation::Uncommitted).map_err(err)?;
                Some(foreign::ForeignLook::new(shared.clone(), target))
            }
            Delivery::AtLeastOnce | Delivery::ExactlyOnce => None,
        };
        let probe = Probe::start(&plan, conns, foreign)?;
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
            last_polled: Instant::now(),
            lane: Some(lane),
            progress,
            probe,
            book,
            source_watch,
            problems: Arc::new(Mutex::new(None)),
            stop,
            commit_by: None,
            pending,
            consumer_errors: RateLimitedLog::new(Duration::from_secs(10)),
            provenance: provenance::Provenance::for_plan(&plan),
            schemas: crate::schemas::start(&plan),
            rules: rules::CopyRules::for_plan(&plan),
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
        );
        // A panic in the loop still goes through the ordered shutdown below: in-flight records are waited
        // for, and the final position of every partition is published.
        let copied = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.copy()));
        let outcome: Result<Instant, String> =
            copied.unwrap_or_else(|panic| Err(format!("panicked: {}", panic_message(&panic))));
        // After a failure, the shutdown gets 5 s, or what is left of a stop that arrived before it.
        let deadline = match &outcome {
            Ok(deadline) => *deadline,
            Err(_) => {
                let failed = Instant::now() + Duration::from_secs(5);
                self.stop.map_or(failed, |d| d.min(failed))
            }
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
        let idle = self.last_polled.elapsed() >= IDLE_AFTER
            && self.lane.as_ref().is_none_or(|l| l.in_flight() == 0)
            && self.txn.as_ref().is_none_or(|t| !t.is_open());
        let mut wait = if idle { IDLE_POLL_WAIT } else { POLL_WAIT };
        let mut now_ms = 0;
        for i in 0..10_000 {
            let Some(polled) = self.consumer.poll(wait) else { return Ok(()) };
            wait = Duration::ZERO;
            // Records after the first come from the local queue, microseconds apart: one clock read per
            // 256 of them is enough for the age histogram (a read per record cost a few % of the CPU).
            if i % 256 == 0 {
                now_ms = delivery::wall_ms();
                self.last_polled = Instant::now();
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
            // Before the hold: a stale record held back would seek the partition back to it.
            if let Some(first) = part.stale(msg.offset()) {
                if first {
                    tracing::info!(flow = %self.flow, topic = msg.topic(), partition = msg.partition(), offset = msg.offset(), "dropping records fetched before the partition's last seek (they are fetched again from its position)");
                }
                continue;
            }
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
            // Record filters: a dropped record is skipped as provenance skips one (the position moves past
            // it once what was sent before it is settled; the offset syncs describe the gap).
            let mut rewrite = false;
            if let Some(rules) = self.rules.as_mut() {
                match rules.decide(&msg, remote, now_ms, !part.ack.has_failed()) {
                    rules::Decision::Drop => {
                        part.ack.skipped(&self.acks, msg.offset());
                        continue;
                    }
                    rules::Decision::Copy { rewrite: r } => rewrite = r,
                }
            }
            // Schema IDs: the target's in place of the source's (before provenance, which binds its header
            // to the bytes sent). A record whose ID cannot be resolved holds its partition like a refused
            // delivery (retried with backoff, named in `/flows`); the partition's later records wait for
            // it, unseen by provenance (a skip there would move the position past the held record), so
            // the target gets them in order.
            let mut translated = crate::schemas::Translated::default();
            if let Some(schemas) = self.schemas.as_mut() {
                if part.ack.has_failed() {
                    continue;
                }
                match schemas.translator.record(msg.topic(), msg.key(), msg.payload()) {
                    Ok(t) => translated = t,
                    Err(error) => {
                        let size = msg.payload_len() + msg.key().map_or(0, <[u8]>::len);
                        let failure = DeliveryFailure {
                            offset: msg.offset(),
                            size,
                            error,
                            permanent: false,
                            unknown_partition: false,
                            purged: false,
                        };
                        part.ack.fail(&self.acks, failure, false);
                        continue;
                    }
                }
            }
            // Provenance: a record that has been on the target is never copied back (see `provenance`).
            let mut stamp = None;
            let sent = (translated.key.is_some() || translated.value.is_some())
                .then(|| (translated.key.as_deref().or(msg.key()), translated.value.as_deref().or(msg.payload())));
            if let Some(provenance) = self.provenance.as_mut() {
                let lane = self.lane.as_ref().expect("the lane exists until the loop ends");
                match provenance.decide(&msg, sent, remote, self.consumer.client(), lane.client())? {
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
            let headers = match self.rules.as_mut() {
                Some(rules) if rewrite => rules.headers(&msg, stamp),
                _ => rules::copy_headers(&msg, stamp),
            };
            match send(lane, &self.control, &mut self.pending, remote, &msg, headers, &translated) {
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
        self.supervisor.problems.do_send(PartitionProblems(problems));
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
