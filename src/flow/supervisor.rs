//! The flow supervisor: one per flow, parent of the flow's actors, and owner of the state that must
//! survive their restarts (acknowledged copy positions, the partitions ready to copy, offset syncs not
//! yet published).
//!
//! actix's own `Supervisor` restarts immediately and forever; ferry's children instead report how they
//! ended ([`ChildExited`]) and the supervisor restarts them after an exponential backoff that resets once
//! a child has been healthy for a while. A child's failure never touches its siblings or other flows.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use tokio::sync::oneshot;

use super::acks::{AckTable, SourcePartition};
use super::checkpoints::{self, SharedCheckpointState};
use super::copier::{self, Assignment};
use super::heartbeats;
use super::offset_syncs::{self, SyncQueue};
use super::topics::{StopTopics, TopicSync};
use super::worker::{Deliver, StopWorker, Worker};
use crate::config::FlowPlan;
use crate::metrics::METRICS;
use crate::restart_policy::{RestartState, jitter};
use crate::status::{ActorState, StatusBoard};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActorKind {
    Copier,
    OffsetSyncs,
    Checkpoints,
    Heartbeats,
    Topics,
}

impl ActorKind {
    pub const ALL: [ActorKind; 5] =
        [Self::Topics, Self::Copier, Self::OffsetSyncs, Self::Checkpoints, Self::Heartbeats];

    /// The name used in logs, metrics and status output.
    pub fn name(self) -> &'static str {
        match self {
            Self::Copier => "copier",
            Self::OffsetSyncs => "offset_syncs",
            Self::Checkpoints => "checkpoints",
            Self::Heartbeats => "heartbeats",
            Self::Topics => "topics",
        }
    }
}

/// A child actor ended, with its reason.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct ChildExited {
    pub kind: ActorKind,
    pub result: Result<(), String>,
}

/// A child reports a state change that is not an exit (e.g. degraded while a cluster is away).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct ActorStatusChanged {
    pub kind: ActorKind,
    pub state: ActorState,
    pub error: Option<String>,
}

/// The topic synchroniser found these source partitions ready to copy.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct TopicsReady(pub BTreeSet<SourcePartition>);

/// Stop the flow: children drain by `deadline`; `done` fires when all of them have ended.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct StopFlow {
    pub deadline: Instant,
    pub done: oneshot::Sender<()>,
}

pub struct FlowSupervisor {
    plan: Arc<FlowPlan>,
    status: StatusBoard,
    /// Survives copier restarts: where each source partition resumes.
    acks: Arc<AckTable>,
    /// Survives copier restarts: what the copier should be mirroring.
    ready: BTreeSet<SourcePartition>,
    /// Survives restarts of the copier and the emitter: syncs selected but not yet published.
    syncs: Arc<SyncQueue>,
    /// Survives checkpoint-computer restarts: published checkpoints and the offset-sync history.
    checkpoint_state: SharedCheckpointState,
    copier: Option<Addr<Worker<Assignment>>>,
    offset_syncs: Option<Addr<Worker<()>>>,
    checkpoints: Option<Addr<Worker<()>>>,
    heartbeats: Option<Addr<Worker<()>>>,
    topics: Option<Addr<TopicSync>>,
    restarts: HashMap<ActorKind, RestartState>,
    stopping: Option<Stopping>,
}

/// A stop in progress: the copier drains first (it publishes final offset syncs), then the emitter.
struct Stopping {
    deadline: Instant,
    done: oneshot::Sender<()>,
}

impl FlowSupervisor {
    pub fn new(plan: Arc<FlowPlan>, status: StatusBoard) -> Self {
        let syncs = Arc::new(SyncQueue::new(&plan.id.to_string()));
        Self {
            plan,
            status,
            acks: Arc::new(AckTable::default()),
            ready: BTreeSet::new(),
            syncs,
            checkpoint_state: SharedCheckpointState::default(),
            copier: None,
            offset_syncs: None,
            checkpoints: None,
            heartbeats: None,
            topics: None,
            restarts: HashMap::new(),
            stopping: None,
        }
    }

    fn flow(&self) -> String {
        self.plan.id.to_string()
    }

    fn start_child(&mut self, kind: ActorKind, ctx: &mut Context<Self>) {
        if self.stopping.is_some() {
            return;
        }
        let (me, plan) = (ctx.address(), self.plan.clone());
        match kind {
            ActorKind::Copier => {
                let w = copier::worker(plan, self.acks.clone(), self.syncs.clone(), me, self.ready.clone());
                self.copier = Some(w.start());
            }
            ActorKind::OffsetSyncs => {
                self.offset_syncs = Some(offset_syncs::worker(plan, self.syncs.clone(), me).start())
            }
            ActorKind::Checkpoints => {
                self.checkpoints = Some(checkpoints::worker(plan, self.checkpoint_state.clone(), me).start())
            }
            ActorKind::Heartbeats => self.heartbeats = Some(heartbeats::worker(plan, me).start()),
            ActorKind::Topics => self.topics = Some(TopicSync::new(plan, me).start()),
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
    fn advance_stop(&mut self, ctx: &mut Context<Self>) {
        let Some(stopping) = &self.stopping else { return };
        let deadline = stopping.deadline;
        if let Some(t) = self.topics.take() {
            t.do_send(StopTopics); // holds nothing to flush
        }
        if let Some(h) = &self.heartbeats {
            h.do_send(StopWorker { deadline });
        }
        if let Some(c) = &self.copier {
            c.do_send(StopWorker { deadline });
        } else if let Some(o) = &self.offset_syncs {
            o.do_send(StopWorker { deadline });
        } else if let Some(c) = &self.checkpoints {
            c.do_send(StopWorker { deadline });
        }
        if self.copier.is_none()
            && self.offset_syncs.is_none()
            && self.checkpoints.is_none()
            && self.heartbeats.is_none()
        {
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
        tracing::info!(flow = %self.plan.id, file = %self.plan.file.display(), "starting flow");
        for kind in ActorKind::ALL {
            self.start_child(kind, ctx);
        }
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        for kind in ActorKind::ALL {
            self.status.set(&self.flow(), kind.name(), ActorState::Stopped, None);
        }
        tracing::info!(flow = %self.plan.id, "flow stopped");
    }
}

impl Handler<TopicsReady> for FlowSupervisor {
    type Result = ();
    fn handle(&mut self, msg: TopicsReady, _: &mut Context<Self>) {
        self.status.set(&self.flow(), ActorKind::Topics.name(), ActorState::Running, None);
        if msg.0 != self.ready {
            self.ready = msg.0;
            if let Some(c) = &self.copier {
                c.do_send(Deliver(self.ready.clone()));
            }
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
        match kind {
            ActorKind::Copier => self.copier = None,
            ActorKind::OffsetSyncs => self.offset_syncs = None,
            ActorKind::Checkpoints => self.checkpoints = None,
            ActorKind::Heartbeats => self.heartbeats = None,
            ActorKind::Topics => self.topics = None,
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
            self.status.set(&self.flow(), kind.name(), ActorState::Restarting, Some(reason));
        }
        ctx.run_later(delay, move |me, ctx| me.start_child(kind, ctx));
    }
}

impl Handler<StopFlow> for FlowSupervisor {
    type Result = ();
    fn handle(&mut self, msg: StopFlow, ctx: &mut Context<Self>) {
        tracing::info!(flow = %self.plan.id, "stopping flow");
        self.stopping = Some(Stopping { deadline: msg.deadline, done: msg.done });
        self.advance_stop(ctx);
    }
}
