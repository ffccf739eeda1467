//! The flow supervisor: one per flow, parent of the flow's actors, and owner of the state that must
//! survive their restarts (acknowledged copy positions, the partitions ready to copy, offset syncs not
//! yet published).
//!
//! actix's own `Supervisor` restarts immediately and forever; ferry's children instead report how they
//! ended ([`ChildExited`]) and the supervisor restarts them after an exponential backoff that resets once
//! a child has been healthy for a while. A child's failure never touches its siblings or other flows.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use tokio::sync::oneshot;

use super::acks::AckTable;
use super::checkpoints::{self, SharedCheckpointState};
use super::copier;
use super::heartbeats;
use super::lease;
use super::messages::{
    ActorKind, ActorStatusChanged, AssignedPartitions, Assignment, ChildExited, GroupMembers, ItemErrorsChanged,
    Leadership, Parent, PartitionProblems, TopicDeletionsPending, TopicsReady,
};
use super::offset_syncs::{self, SyncQueue};
use super::pause::PauseSwitch;
use super::topics::{ControlState, KeptTopics, Promoted, RefreshNow, SetLeading, StopTopics, TopicSync};
use super::worker::{Deliver, StopWorker, Worker};
use crate::clients::FlowConnections;
use crate::config::FlowPlan;
use crate::failpoints;
use crate::flow::Identity;
use crate::metrics::METRICS;
use crate::restart_policy::{RestartState, jitter};
use crate::status::{ActorState, StatusBoard};

/// Pause or resume the flow's copying. Answers `true` once the copier applied it (see
/// [`PauseSwitch`]), `false` if it did not within [`PAUSE_APPLY_TIMEOUT`]; the status board shows the
/// new state from then on.
#[derive(Message, Debug)]
#[rtype(result = "bool")]
pub struct SetPaused(pub bool);

/// How long a pause or resume waits for the copier to apply it before answering that it has not yet.
pub const PAUSE_APPLY_TIMEOUT: Duration = Duration::from_secs(15);

impl Handler<SetPaused> for FlowSupervisor {
    type Result = ResponseFuture<bool>;
    fn handle(&mut self, msg: SetPaused, _: &mut Context<Self>) -> Self::Result {
        let applied = self.paused.set(msg.0);
        if self.copier.is_none() {
            self.paused.settle(msg.0); // no copy loop: nothing is fetched; the next one starts as asked
        }
        let (status, flow, switch) = (self.status.clone(), self.flow(), self.paused.clone());
        Box::pin(async move {
            let done = tokio::time::timeout(PAUSE_APPLY_TIMEOUT, applied).await.is_ok_and(|r| r.is_ok());
            // The state wanted now: a later ask the other way may have answered this one (or this one
            // timed out after it), and `/flows` must not show the earlier ask's state.
            status.set_paused(&flow, switch.wanted());
            done
        })
    }
}

/// The flow's promoted source topics (`ferry promote`, from the control topic) changed: the topic
/// synchroniser drops them from what the flow copies at once.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct SetPromoted(pub BTreeSet<String>);

impl Handler<SetPromoted> for FlowSupervisor {
    type Result = ();
    fn handle(&mut self, msg: SetPromoted, _: &mut Context<Self>) {
        let mut promoted = self.promoted.write().unwrap_or_else(|p| p.into_inner());
        if *promoted == msg.0 {
            return;
        }
        *promoted = msg.0;
        drop(promoted);
        // At once (the copier stops the promoted partitions), and a refresh brings back un-promoted ones.
        if let Some(ready) = self.ready.clone() {
            self.deliver(ready);
        }
        if let Some(topics) = &self.topics {
            topics.do_send(RefreshNow);
        }
    }
}

impl Handler<GroupMembers> for FlowSupervisor {
    type Result = ();
    fn handle(&mut self, msg: GroupMembers, _: &mut Context<Self>) {
        self.status.set_members(&self.flow(), msg.members, msg.leader);
    }
}

/// Stop the flow: children drain by `deadline`; `done` fires when all of them have ended.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct StopFlow {
    pub deadline: Instant,
    pub done: oneshot::Sender<()>,
}

pub struct FlowSupervisor {
    plan: Arc<FlowPlan>,
    /// The node's shared clients of the flow's two clusters, held for the flow's life.
    conns: Arc<FlowConnections>,
    status: StatusBoard,
    /// How many times the node started this flow, this start included.
    generation: u64,
    /// Who this node is among the nodes sharing the flow.
    identity: Arc<Identity>,
    /// Paused by an operator: the copier stops fetching (it reads the switch every pass and record).
    paused: Arc<PauseSwitch>,
    /// Survives copier restarts: where each source partition resumes.
    acks: Arc<AckTable>,
    /// Survives copier restarts: what the copier should be mirroring (None: not known yet).
    ready: Option<Assignment>,
    /// Survives restarts of the copier and the emitter: syncs selected but not yet published.
    syncs: Arc<SyncQueue>,
    /// Survives checkpoint-computer restarts: published checkpoints and the offset-sync history.
    checkpoint_state: SharedCheckpointState,
    /// Survives topic-sync restarts: the topics found at start, when topic refresh is off.
    kept_topics: KeptTopics,
    /// The source topics promoted at a failover (the node sets them from the control topic); the topic
    /// synchroniser reads them at every refresh.
    promoted: Promoted,
    copier: Option<Addr<Worker<Assignment>>>,
    offset_syncs: Option<Addr<Worker<()>>>,
    checkpoints: Option<Addr<Worker<()>>>,
    heartbeats: Option<Addr<heartbeats::HeartbeatEmitter>>,
    topics: Option<Addr<TopicSync>>,
    lease: Option<Addr<lease::Lease>>,
    /// This node holds the flow's lease: it runs the leader duties.
    leading: bool,
    /// The checkpoint computer was fenced by another node: leader duties stay off until then, even if
    /// the lease says otherwise (a node that was paused learns it lost the lease only a moment later,
    /// and must not fence the new leader back meanwhile).
    fenced_until: Option<Instant>,
    restarts: HashMap<ActorKind, RestartState>,
    stopping: Option<Stopping>,
}

/// A stop in progress: the copier drains first (it publishes final offset syncs), then the emitter.
struct Stopping {
    deadline: Instant,
    done: oneshot::Sender<()>,
    /// When the stop began (each actor's end is logged with the time it took).
    began: Instant,
}

/// `assignment` without the partitions of `promoted` topics.
fn without_promoted(mut assignment: Assignment, promoted: &BTreeSet<String>) -> Assignment {
    assignment.partitions.retain(|(topic, _)| !promoted.contains(topic));
    assignment
}

/// What the deployment's control topic says of a flow when it starts (see `control`).
pub struct Recorded {
    /// Paused by an operator.
    pub paused: bool,
    /// The control topic was read to its end: `paused` is what the deployment decided, not a guess.
    pub pause_known: bool,
    /// Source topics promoted at a failover.
    pub promoted: BTreeSet<String>,
}

impl FlowSupervisor {
    pub fn new(
        plan: Arc<FlowPlan>,
        conns: Arc<FlowConnections>,
        status: StatusBoard,
        generation: u64,
        identity: Arc<Identity>,
        recorded: Recorded,
    ) -> Self {
        let Recorded { paused, pause_known, promoted } = recorded;
        let flow = plan.id.to_string();
        let syncs = Arc::new(if plan.settings.emit_offset_syncs_enabled {
            SyncQueue::new(&flow)
        } else {
            SyncQueue::discarding(&flow)
        });
        let history = plan.settings.offset_sync_history_per_partition;
        Self {
            plan,
            conns,
            status: status.scoped(generation),
            generation,
            identity,
            paused: Arc::new(PauseSwitch::new(paused, pause_known)),
            acks: Arc::new(AckTable::default()),
            ready: None,
            syncs,
            checkpoint_state: Arc::new(std::sync::Mutex::new(checkpoints::CheckpointState::new(history))),
            kept_topics: KeptTopics::default(),
            promoted: Arc::new(std::sync::RwLock::new(promoted)),
            copier: None,
            offset_syncs: None,
            checkpoints: None,
            heartbeats: None,
            topics: None,
            lease: None,
            leading: false,
            fenced_until: None,
            restarts: HashMap::new(),
            stopping: None,
        }
    }

    fn flow(&self) -> String {
        self.plan.id.to_string()
    }

    /// Hands the copier what to copy, without the promoted topics' partitions. The supervisor is the
    /// one gate: a refresh that began before a promotion, or a writability answer, may still name them.
    fn deliver(&mut self, assignment: Assignment) {
        let assignment = without_promoted(assignment, &self.promoted.read().unwrap_or_else(|p| p.into_inner()));
        if self.ready.as_ref() != Some(&assignment) {
            if let Some(c) = &self.copier {
                c.do_send(Deliver(assignment.clone()));
            }
            self.ready = Some(assignment);
        }
    }

    /// What the flow's actors get to report to this supervisor.
    fn parent(me: &Addr<Self>) -> Parent {
        Parent {
            exited: me.clone().recipient(),
            status: me.clone().recipient(),
            leadership: me.clone().recipient(),
            members: me.clone().recipient(),
            topics_ready: me.clone().recipient(),
            assigned: me.clone().recipient(),
            problems: me.clone().recipient(),
            item_errors: me.clone().recipient(),
            deletions: me.clone().recipient(),
        }
    }

    /// The actors of `kinds` this flow runs.
    fn running(&self, kinds: &[ActorKind]) -> Vec<ActorKind> {
        kinds.iter().copied().filter(|k| k.runs_in(&self.plan)).collect()
    }

    fn start_child(&mut self, kind: ActorKind, ctx: &mut Context<Self>) {
        if self.stopping.is_some() || !kind.runs_in(&self.plan) {
            return;
        }
        if matches!(kind, ActorKind::Checkpoints | ActorKind::Heartbeats)
            && (!self.leading || self.fenced_until.is_some_and(|t| Instant::now() < t))
        {
            return; // another node leads; started when this node gains the lease
        }
        let (me, plan, conns) = (Self::parent(&ctx.address()), self.plan.clone(), self.conns.clone());
        match kind {
            ActorKind::Copier => {
                let w = copier::worker(
                    plan,
                    conns,
                    self.acks.clone(),
                    self.syncs.clone(),
                    me,
                    self.ready.clone(),
                    self.identity.clone(),
                    self.paused.clone(),
                );
                self.copier = Some(w.start());
            }
            ActorKind::OffsetSyncs => {
                self.offset_syncs = Some(offset_syncs::worker(plan, conns, self.syncs.clone(), me).start())
            }
            ActorKind::Checkpoints => {
                let w = checkpoints::worker(plan, conns, self.checkpoint_state.clone(), me, self.identity.clone());
                self.checkpoints = Some(w.start())
            }
            ActorKind::Heartbeats => self.heartbeats = Some(heartbeats::HeartbeatEmitter::new(plan, conns, me).start()),
            ActorKind::Topics => {
                let control = ControlState {
                    deployment: self.identity.deployment.clone(),
                    promoted: self.promoted.clone(),
                    read: self.paused.clone(),
                };
                let topics = TopicSync::new(plan, conns, me, self.leading, self.kept_topics.clone(), control);
                self.topics = Some(topics.start());
            }
            ActorKind::Lease => self.lease = Some(lease::Lease::new(plan, conns, me, self.identity.clone()).start()),
        }
        let first_start = !self.restarts.contains_key(&kind);
        self.restarts.entry(kind).or_default().started(Instant::now());
        // The actor reports itself running once its clusters answered (see `Control::running`, `TopicsReady`);
        // a restarted one keeps showing restarting (or failed) until then.
        if first_start {
            self.status.set(&self.flow(), kind.name(), ActorState::Starting, None);
        }
    }

    /// Advance an ordered stop: copier, then offset-sync emitter, then checkpoint computer (which reads
    /// the final syncs); done when every worker has ended.
    ///
    /// Each step gets its share of the time, so that one that uses all of its share (a cluster away)
    /// leaves the next steps theirs and the flow still stops by the deadline: the copier by 60 % of
    /// it, the offset-sync emitter by 75 %, the checkpoint computer by 90 %, the lease by the deadline.
    fn advance_stop(&mut self, ctx: &mut Context<Self>) {
        let Some(stopping) = &self.stopping else { return };
        let deadline = stopping.deadline;
        let share = |f: f64| stopping.began + deadline.saturating_duration_since(stopping.began).mul_f64(f);
        if let Some(t) = self.topics.take() {
            t.do_send(StopTopics); // holds nothing to flush
        }
        if let Some(h) = &self.heartbeats {
            h.do_send(StopWorker { deadline });
        }
        if let Some(c) = &self.copier {
            c.do_send(StopWorker { deadline: share(0.6) });
        } else if let Some(o) = &self.offset_syncs {
            o.do_send(StopWorker { deadline: share(0.75) });
        } else if let Some(c) = &self.checkpoints {
            c.do_send(StopWorker { deadline: share(0.9) });
        }
        // The lease goes last: the next leader starts after this one's final checkpoints.
        if self.copier.is_none()
            && self.offset_syncs.is_none()
            && self.checkpoints.is_none()
            && let Some(l) = &self.lease
        {
            l.do_send(lease::StopLease);
        }
        if self.copier.is_none()
            && self.offset_syncs.is_none()
            && self.checkpoints.is_none()
            && self.heartbeats.is_none()
            && self.lease.is_none()
        {
            if let Some(pause) = failpoints::hold_for(failpoints::FLOW_STOP) {
                ctx.run_later(pause, |me, ctx| me.advance_stop(ctx));
                return;
            }
            if let Some(s) = self.stopping.take() {
                let _ = s.done.send(());
            }
            ctx.stop();
        }
    }
}

impl Actor for FlowSupervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        tracing::info!(flow = %self.plan.id, file = %self.plan.file.display(), generation = self.generation, "starting flow");
        self.status.flow_started(&self.flow(), self.generation, self.plan.settings.delivery);
        self.status.set_paused(&self.flow(), self.paused.wanted());
        let flow = self.flow();
        let actors: Vec<&str> = self.running(&ActorKind::ALL).iter().map(|k| k.name()).collect();
        METRICS.init_flow(&flow, &actors);
        // An exactly-once flow's transaction series exist from its start (at zero), even while its copier
        // cannot start: an alert on them sees the flow.
        if self.plan.settings.delivery == crate::config::Delivery::ExactlyOnce {
            for result in ["committed", "aborted"] {
                METRICS.transactions.with_label_values(&[&flow, result]).inc_by(0);
            }
        } else {
            for result in ["committed", "aborted"] {
                let _ = METRICS.transactions.remove_label_values(&[&flow, result]);
            }
            let _ = METRICS.transaction_last_commit.remove_label_values(&[&flow]);
        }
        // A restarted flow (reload) keeps its series: those of an actor switched off since must go, or the
        // leader alert would see a duty nobody leads.
        for kind in ActorKind::ALL.into_iter().filter(|k| !k.runs_in(&self.plan)) {
            let _ = METRICS.actor_restarts.remove_label_values(&[&flow, kind.name()]);
            let _ = METRICS.leader.remove_label_values(&[&flow, kind.name()]);
        }
        if !self.plan.settings.emit_reverse_heartbeats_enabled {
            METRICS.forget_heartbeats(&flow);
        }
        if self.plan.settings.emit_checkpoints_enabled {
            // On every node, not only the checkpoints leader: the staleness alert compares against it.
            METRICS
                .checkpoint_interval
                .with_label_values(&[&self.flow()])
                .set(self.plan.settings.emit_checkpoints_interval.as_secs_f64());
        } else {
            METRICS.forget_checkpoints(&flow);
        }
        for duty in self.running(&ActorKind::LEADER_DUTIES) {
            METRICS.leader.with_label_values(&[&flow, duty.name()]).set(0);
        }
        for kind in ActorKind::EVERY_NODE {
            self.start_child(kind, ctx);
        }
        for kind in self.running(&[ActorKind::Checkpoints, ActorKind::Heartbeats]) {
            self.status.set(&flow, kind.name(), ActorState::Standby, None);
        }
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        for kind in self.running(&ActorKind::ALL) {
            self.status.set(&self.flow(), kind.name(), ActorState::Stopped, None);
        }
        tracing::info!(flow = %self.plan.id, "flow stopped");
    }
}

impl Handler<Leadership> for FlowSupervisor {
    type Result = ();
    fn handle(&mut self, msg: Leadership, ctx: &mut Context<Self>) {
        if msg.leading == self.leading || self.stopping.is_some() {
            return;
        }
        self.leading = msg.leading;
        for duty in self.running(&ActorKind::LEADER_DUTIES) {
            METRICS.leader.with_label_values(&[&self.flow(), duty.name()]).set(i64::from(msg.leading));
        }
        if let Some(t) = &self.topics {
            t.do_send(SetLeading(msg.leading));
        }
        if msg.leading {
            tracing::info!(flow = %self.plan.id, node = %self.identity.node_id, "this node leads the flow: topic sync, checkpoints, heartbeats");
            for kind in [ActorKind::Checkpoints, ActorKind::Heartbeats] {
                self.start_child(kind, ctx);
            }
        } else {
            tracing::info!(flow = %self.plan.id, node = %self.identity.node_id, "another node leads the flow");
            let deadline = Instant::now() + std::time::Duration::from_secs(5);
            if let Some(c) = &self.checkpoints {
                c.do_send(StopWorker { deadline });
            }
            if let Some(h) = &self.heartbeats {
                h.do_send(StopWorker { deadline });
            }
        }
    }
}

impl Handler<TopicsReady> for FlowSupervisor {
    type Result = ();
    fn handle(&mut self, msg: TopicsReady, _: &mut Context<Self>) {
        self.deliver(msg.0);
    }
}

impl Handler<AssignedPartitions> for FlowSupervisor {
    type Result = ();
    fn handle(&mut self, msg: AssignedPartitions, _: &mut Context<Self>) {
        self.status.set_assigned(&self.flow(), msg.0);
    }
}

impl Handler<PartitionProblems> for FlowSupervisor {
    type Result = ();
    fn handle(&mut self, msg: PartitionProblems, _: &mut Context<Self>) {
        self.status.set_partition_problems(&self.flow(), msg.0);
    }
}

impl Handler<TopicDeletionsPending> for FlowSupervisor {
    type Result = ();
    fn handle(&mut self, msg: TopicDeletionsPending, _: &mut Context<Self>) {
        self.status.set_topic_deletions(&self.flow(), msg.0);
    }
}

impl Handler<ItemErrorsChanged> for FlowSupervisor {
    type Result = ();
    fn handle(&mut self, msg: ItemErrorsChanged, _: &mut Context<Self>) {
        match msg {
            ItemErrorsChanged::Topics(e) => self.status.set_topic_errors(&self.flow(), e),
            ItemErrorsChanged::Groups(e) => self.status.set_group_errors(&self.flow(), e),
        }
    }
}

impl Handler<ActorStatusChanged> for FlowSupervisor {
    type Result = ();
    fn handle(&mut self, msg: ActorStatusChanged, _: &mut Context<Self>) {
        self.status.set(&self.flow(), msg.kind.name(), msg.state, msg.error);
    }
}

impl Handler<ChildExited> for FlowSupervisor {
    type Result = ();
    fn handle(&mut self, msg: ChildExited, ctx: &mut Context<Self>) {
        let kind = msg.kind;
        if let Some(stopping) = &self.stopping {
            let millis = stopping.began.elapsed().as_millis() as u64;
            let late = Instant::now() > stopping.deadline;
            tracing::info!(flow = %self.plan.id, actor = kind.name(), millis, late, "actor stopped");
        }
        match kind {
            ActorKind::Copier => self.copier = None,
            ActorKind::OffsetSyncs => self.offset_syncs = None,
            ActorKind::Checkpoints => self.checkpoints = None,
            ActorKind::Heartbeats => self.heartbeats = None,
            ActorKind::Topics => self.topics = None,
            ActorKind::Lease => self.lease = None,
        }
        if kind == ActorKind::Checkpoints
            && let Err(e) = &msg.result
            && e.contains(checkpoints::FENCED)
        {
            tracing::warn!(flow = %self.plan.id, node = %self.identity.node_id, "another node took the flow's lease: leader duties off");
            let hold = Instant::now() + lease::SESSION_TIMEOUT * 2;
            self.fenced_until = Some(hold);
            if let Some(h) = &self.heartbeats {
                h.do_send(StopWorker { deadline: Instant::now() });
            }
            self.status.set(&self.flow(), kind.name(), ActorState::Standby, None);
            // Resume the duties after the hold if the lease still says this node leads.
            ctx.run_later(lease::SESSION_TIMEOUT * 2, |me, ctx| {
                me.fenced_until = None;
                for kind in [ActorKind::Checkpoints, ActorKind::Heartbeats] {
                    let running = match kind {
                        ActorKind::Checkpoints => me.checkpoints.is_some(),
                        _ => me.heartbeats.is_some(),
                    };
                    if !running {
                        me.start_child(kind, ctx);
                    }
                }
            });
            return;
        }
        if matches!(kind, ActorKind::Checkpoints | ActorKind::Heartbeats) && !self.leading && self.stopping.is_none() {
            // Stopped because the lease moved (or failed meanwhile): nothing to restart here.
            if let Err(e) = &msg.result {
                tracing::info!(flow = %self.plan.id, actor = kind.name(), error = %e, "leader duty ended after the lease moved");
            }
            self.status.set(&self.flow(), kind.name(), ActorState::Standby, None);
            return;
        }
        if self.stopping.is_some() {
            if let Err(e) = &msg.result {
                tracing::warn!(flow = %self.plan.id, actor = kind.name(), error = %e, "actor failed while stopping");
            }
            self.advance_stop(ctx);
            return;
        }
        let reason = match msg.result {
            Ok(()) => "exited unexpectedly".to_string(),
            Err(e) => e,
        };
        let decision =
            self.restarts.entry(kind).or_default().failed(&self.plan.settings.restart, Instant::now(), jitter());
        METRICS.actor_restarts.with_label_values(&[&self.flow(), kind.name()]).inc();
        let delay = decision.delay;
        if decision.exhausted {
            tracing::error!(
                flow = %self.plan.id, actor = kind.name(), attempt = decision.attempt, backoff_ms = delay.as_millis() as u64,
                reason = %reason, "actor failed and its restart budget is spent; flow marked failed, retrying slowly"
            );
            self.status.set(&self.flow(), kind.name(), ActorState::Failed, Some(reason));
        } else {
            tracing::warn!(
                flow = %self.plan.id, actor = kind.name(), attempt = decision.attempt, backoff_ms = delay.as_millis() as u64,
                reason = %reason, "actor failed; restarting after backoff"
            );
            // A cluster that does not answer or refuses ferry (network, TLS, authentication) is the
            // operator's or the cluster's to fix: the flow is degraded, and keeps retrying.
            let state = if is_cluster_problem(&reason) { ActorState::Degraded } else { ActorState::Restarting };
            self.status.set(&self.flow(), kind.name(), state, Some(reason));
            if state == ActorState::Degraded {
                self.status.count_restart(&self.flow(), kind.name());
            }
        }
        ctx.run_later(delay, move |me, ctx| me.start_child(kind, ctx));
    }
}

/// Whether a failure is a cluster's (unreachable, refusing TLS or authentication) rather than ferry's.
fn is_cluster_problem(reason: &str) -> bool {
    let r = reason.to_ascii_lowercase();
    [
        "last connection error",
        "brokertransportfailure",
        "allbrokersdown",
        "broker transport failure",
        "authentication",
        "kerberos",
        "ssl handshake",
        "certificate",
        "does not answer",
        "unreachable",
        "timed out",
        "timedout",
    ]
    .iter()
    .any(|w| r.contains(w))
}

impl Handler<StopFlow> for FlowSupervisor {
    type Result = ();
    fn handle(&mut self, msg: StopFlow, ctx: &mut Context<Self>) {
        tracing::info!(flow = %self.plan.id, "stopping flow");
        self.stopping = Some(Stopping { deadline: msg.deadline, done: msg.done, began: Instant::now() });
        self.advance_stop(ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(extra: &str) -> Vec<&'static str> {
        let plan = crate::check::rights::tests::plan(extra);
        ActorKind::ALL.into_iter().filter(|k| k.runs_in(&plan)).map(ActorKind::name).collect()
    }

    #[test]
    fn emitters_whose_switches_are_off_do_not_run() {
        assert_eq!(runs(""), ["lease", "topics", "copier", "offset_syncs", "checkpoints", "heartbeats"]);
        let off = runs("emit_heartbeats_enabled = false\nemit_reverse_heartbeats_enabled = false");
        assert_eq!(off, ["lease", "topics", "copier", "offset_syncs", "checkpoints"]);
        // One heartbeat destination is enough to run the emitter; group sync alone runs the computer.
        assert!(runs("emit_heartbeats_enabled = false").contains(&"heartbeats"));
        assert!(runs("emit_checkpoints_enabled = false\nsync_group_offsets_enabled = true").contains(&"checkpoints"));
        let none = runs("emit_checkpoints_enabled = false\nemit_offset_syncs_enabled = false");
        assert_eq!(none, ["lease", "topics", "copier", "heartbeats"]);
    }

    #[test]
    fn promoted_topics_never_reach_the_copier_and_deleted_ones_stay_named() {
        let assignment = Assignment {
            partitions: [("orders", 0), ("orders", 1), ("pay", 0)].iter().map(|(t, p)| (t.to_string(), *p)).collect(),
            deleted: ["gone".to_string()].into(),
        };
        let left = without_promoted(assignment.clone(), &["orders".to_string()].into());
        assert_eq!(left.partitions, [("pay".to_string(), 0)].into());
        assert_eq!(left.deleted, assignment.deleted);
        assert_eq!(without_promoted(assignment.clone(), &BTreeSet::new()), assignment);
    }
}
