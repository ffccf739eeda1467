//! Leadership of a flow's singleton duties (topic sync, checkpoints with group offset sync, heartbeats)
//! when several nodes run the flow, elected through Kafka's own group protocol: every node is a member
//! of the group `<deployment>.leaders` on the target (one consumer per node and target cluster, see
//! [`crate::clients::leases`]), subscribed to the one-partition topic `ferry.leases.<source>.<target>`
//! of each flow it runs; the member the group gives a flow's partition leads that flow. No coordinator
//! of ferry's own, and no client per flow.
//!
//! Membership is static (`group.instance.id` = the node id and a digest of the cluster definition): a node that restarts, after a crash too,
//! takes its own place back at once and keeps leading, which is what a single-node deployment needs. A
//! leader that stops for good (or dies) hands the lease on after [`SESSION_TIMEOUT`]; the leader duties
//! are periodic, so that gap delays a checkpoint or a few heartbeats, never copying. Two nodes started
//! with the same node id fence each other, and say so. An ex-leader that was only paused finds out when it polls
//! again (its partition is revoked or lost); until then the checkpoint computer's transactional producer
//! fences it: the new leader's producer, with the same transactional id, makes the old one's commits fail
//! (its checkpoints and its group offsets alike, both written in that producer's transactions).
//!
//! The lease is an actor without a thread: the node's elector tells it what changes.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use super::copier::copier_group;
use super::members;
use super::messages::{ActorKind, ActorStatusChanged, ChildExited, Leadership, Parent};
use crate::clients::FlowConnections;
use crate::clients::leases::{Electorate, LEASE_TOPIC_PREFIX, LeaseEvent, LeaseRegistration};
use crate::config::FlowPlan;
use crate::flow::Identity;
use crate::kafka::TopicSpec;
use crate::status::ActorState;
use crate::ticks;

pub use crate::clients::leases::SESSION_TIMEOUT;

/// The node's leaders group on every target cluster.
pub fn lease_group(identity: &Identity) -> String {
    format!("{}.leaders", identity.deployment)
}

/// A flow's lease topic on its target: one partition, no records; only its assignment matters.
pub fn lease_topic(plan: &FlowPlan) -> String {
    format!("{LEASE_TOPIC_PREFIX}{}.{}", plan.id.source, plan.id.target)
}

/// The flow's place in the election, as a supervised actor: reports [`Leadership`] to the supervisor on
/// every change.
pub struct Lease {
    plan: Arc<FlowPlan>,
    conns: Arc<FlowConnections>,
    supervisor: Parent,
    identity: Arc<Identity>,
    registration: Option<LeaseRegistration>,
    /// Who copies what and who leads, for /flows (ends with the actor).
    _members: Option<ticks::Job>,
    leading: bool,
    /// The supervisor was told how the lease ended: nothing more is reported (a message still in the
    /// mailbox after the stop, a second stop request). Else its `Drop` says it panicked.
    exited: bool,
    /// Every line the actor logs carries its flow and actor, as a worker's do.
    span: tracing::Span,
    /// Looks for a connection problem while the lease topic is being made (see [`SETUP_WATCH`]).
    setup_watch: Option<SpawnHandle>,
    /// What that look last reported, so that a problem is reported once, not every look.
    setup_problem: Option<String>,
}

/// How often the lease looks for a reason while its topic is being made. A target that refuses the
/// node's credentials or certificate, or does not answer, leaves the admin call waiting for its whole
/// timeout (30 s, and more behind other calls); librdkafka logs why at once (the connection diagnosis
/// keeps it), so the flow says why within seconds instead.
const SETUP_WATCH: Duration = Duration::from_secs(2);

impl Lease {
    pub fn new(plan: Arc<FlowPlan>, conns: Arc<FlowConnections>, supervisor: Parent, identity: Arc<Identity>) -> Self {
        let span = tracing::info_span!("actor", flow = %plan.id, actor = ActorKind::Lease.name());
        Self {
            plan,
            conns,
            supervisor,
            identity,
            registration: None,
            _members: None,
            leading: false,
            exited: false,
            span,
            setup_watch: None,
            setup_problem: None,
        }
    }

    fn electorate(&self) -> Electorate {
        Electorate {
            group: lease_group(&self.identity),
            instance: self.identity.node_id.clone(),
            deployment: self.identity.deployment.clone(),
        }
    }

    fn report(&self, state: ActorState, error: Option<String>) {
        self.supervisor.status.do_send(ActorStatusChanged { kind: ActorKind::Lease, state, error });
    }

    fn lead(&mut self, leading: bool) {
        if leading != self.leading {
            let _span = self.span.clone().entered();
            self.leading = leading;
            tracing::info!(flow = %self.plan.id, node = %self.identity.node_id, leading, "flow leadership changed");
            self.supervisor.leadership.do_send(Leadership { leading });
        }
    }

    fn exit(&mut self, result: Result<(), String>, ctx: &mut Context<Self>) {
        if self.exited {
            return;
        }
        self.lead(false);
        self.exited = true;
        self.registration = None;
        self.supervisor.exited.do_send(ChildExited { kind: ActorKind::Lease, result });
        ctx.stop();
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.exited {
            if self.leading {
                self.supervisor.leadership.do_send(Leadership { leading: false });
            }
            let result = Err("lease panicked".into());
            self.supervisor.exited.do_send(ChildExited { kind: ActorKind::Lease, result });
        }
    }
}

/// An event of the elector, for the actor.
#[derive(Message, Debug)]
#[rtype(result = "()")]
struct Event(LeaseEvent);

/// The lease topic was made (or could not be).
#[derive(Message, Debug)]
#[rtype(result = "()")]
struct TopicMade(Result<(), String>);

/// Leave the election (the flow stops).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct StopLease;

impl Actor for Lease {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let topic = lease_topic(&self.plan);
        let watched = members::Watched {
            copier_group: copier_group(&self.identity, &self.plan),
            lease_group: lease_group(&self.identity),
            lease_topic: topic.clone(),
        };
        self._members = Some(members::watch(self.conns.clone(), watched, self.supervisor.clone()));
        let spec =
            TopicSpec { configs: Vec::new(), ..TopicSpec::compacted(topic, 1, self.plan.settings.replication_factor) };
        // Creating the topic blocks (and may wait for a cluster that is away): a short-lived thread,
        // so that neither the actors' thread nor the node's elector waits for it.
        let (conns, flow, me) = (self.conns.clone(), self.plan.id.clone(), ctx.address());
        let spawned = std::thread::Builder::new().name(format!("lease-setup {flow}")).spawn(move || {
            me.do_send(TopicMade(conns.target.ensure_topic(&flow, &spec).map(|_| ()).map_err(|e| e.to_string())));
        });
        if let Err(e) = spawned {
            return self.exit(Err(format!("cannot start a thread: {e}")), ctx);
        }
        self.setup_watch = Some(ctx.run_interval(SETUP_WATCH, |lease, _| lease.look_for_a_setup_problem()));
    }
}

impl Lease {
    /// The topic is not made yet: if librdkafka said why the target does not answer this connection,
    /// the flow says so (and takes it back when a later diagnosis found the target answering).
    fn look_for_a_setup_problem(&mut self) {
        if self.exited {
            return;
        }
        let problem = self.conns.target.problem();
        if self.setup_problem == problem {
            return;
        }
        let target = self.plan.id.target.clone();
        let _span = self.span.clone().entered();
        match &problem {
            Some(p) => {
                tracing::warn!(flow = %self.plan.id, cluster = %target, problem = p, "the lease topic waits for the target");
                let reason = crate::config::scrub(&format!("cannot reach target `{target}`: {p}"));
                self.report(ActorState::Degraded, Some(reason));
            }
            None => self.report(ActorState::Starting, None),
        }
        self.setup_problem = problem;
    }
}

impl Handler<TopicMade> for Lease {
    type Result = ();
    fn handle(&mut self, TopicMade(made): TopicMade, ctx: &mut Context<Self>) {
        if self.exited {
            return;
        }
        if let Some(watch) = self.setup_watch.take() {
            ctx.cancel_future(watch);
        }
        if let Err(e) = made {
            return self.exit(Err(e), ctx);
        }
        // A weak address: the elector's registration must not keep a lease whose supervisor is gone.
        let me = ctx.address().downgrade();
        let notify = move |e| {
            if let Some(me) = me.upgrade() {
                me.do_send(Event(e));
            }
        };
        match self.conns.target.lease(&self.electorate(), &lease_topic(&self.plan), notify) {
            Ok(r) => self.registration = Some(r),
            Err(e) => self.exit(Err(e), ctx),
        }
    }
}

impl Handler<Event> for Lease {
    type Result = ();
    fn handle(&mut self, Event(event): Event, ctx: &mut Context<Self>) {
        if self.exited {
            return;
        }
        match event {
            LeaseEvent::Joined | LeaseEvent::Granted => self.report(ActorState::Running, None),
            LeaseEvent::Leading(leading) => self.lead(leading),
            LeaseEvent::Refused(reason) => {
                let _span = self.span.clone().entered();
                tracing::warn!(flow = %self.plan.id, reason, "no node can lead the flow until this is granted");
                self.report(ActorState::Degraded, Some(reason));
            }
            LeaseEvent::Failed(reason) => self.exit(Err(reason), ctx),
        }
    }
}

impl Handler<StopLease> for Lease {
    type Result = ();
    fn handle(&mut self, _: StopLease, ctx: &mut Context<Self>) {
        self.exit(Ok(()), ctx);
    }
}
