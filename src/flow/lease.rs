//! Leadership of a flow's singleton duties (topic sync, checkpoints with group offset sync, heartbeats)
//! when several nodes run the flow, elected through Kafka's own group protocol: every node joins the
//! group `<deployment>.<flow>.leader` on the target, subscribed to the one-partition topic
//! [`LEASE_TOPIC`]; the member the group gives that partition leads. No coordinator of ferry's own.
//!
//! Membership is static (`group.instance.id` = the node id): a node that restarts, after a crash too,
//! takes its own place back at once and keeps leading, which is what a single-node deployment needs. A
//! leader that stops for good (or dies) hands the lease on after [`SESSION_TIMEOUT`]; the leader duties
//! are periodic, so that gap delays a checkpoint or a few heartbeats, never copying. Two nodes started
//! with the same node id fence each other, and say so. An ex-leader that was only paused finds out when it polls
//! again (its partition is revoked or lost); until then the checkpoint computer's transactional producer
//! fences it: the new leader's producer, with the same transactional id, makes the old one's commits fail
//! (its checkpoints and its group offsets alike, both written in that producer's transactions).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::types::{RDKafkaErrorCode, RDKafkaRespErr};
use rdkafka::{ClientContext, TopicPartitionList};

use super::copier::copier_group;
use super::members;
use super::messages::{ActorKind, ActorStatusChanged, Leadership, Parent};
use super::worker::{Control, Signal, Worker};
use crate::clients::FlowConnections;
use crate::config::FlowPlan;
use crate::flow::Identity;
use crate::kafka::{self, TopicSpec};
use crate::status::ActorState;

/// The lease topic on each target cluster: one partition, no records; only its assignment matters.
pub const LEASE_TOPIC: &str = "ferry.leases.internal";
/// How long a dead leader holds the lease.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a refusal of the lease group or topic is shown after librdkafka last reported it (it
/// retries every few seconds while refused).
const REFUSAL_WINDOW: Duration = Duration::from_secs(30);

/// The leader group of a flow.
pub fn lease_group(identity: &Identity, plan: &FlowPlan) -> String {
    format!("{}.{}.leader", identity.deployment, plan.id)
}

/// Keeps the lease group's assignment changes for the loop.
struct LeaseContext {
    changes: Mutex<Vec<(bool, bool)>>,
}

impl ClientContext for LeaseContext {
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(error = %error, reason, "lease client error");
    }
}

impl ConsumerContext for LeaseContext {
    fn rebalance(&self, consumer: &BaseConsumer<Self>, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        let gained = err == RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS;
        let holds = tpl.elements().iter().any(|e| e.topic() == LEASE_TOPIC);
        let result = if gained { consumer.incremental_assign(tpl) } else { consumer.incremental_unassign(tpl) };
        if let Err(e) = result {
            tracing::warn!(error = %e, "lease rebalance");
        }
        // The lease topic holds no records: an assigned partition left fetching would send a fetch
        // request (and wake the broker thread) twice a second for nothing, in every flow of the node.
        if gained && let Err(e) = consumer.pause(tpl) {
            tracing::debug!(error = %e, "pause the lease partition");
        }
        if holds {
            self.changes.lock().unwrap_or_else(|p| p.into_inner()).push((gained, true));
        }
    }
}

/// The elector as a supervised actor: reports [`Leadership`] to the supervisor on every change.
pub fn worker(
    plan: Arc<FlowPlan>,
    conns: Arc<FlowConnections>,
    supervisor: Parent,
    identity: Arc<Identity>,
) -> Worker<()> {
    let name = format!("lease {}", plan.id);
    let sup = supervisor.clone();
    Worker::new(ActorKind::Lease, name, supervisor, Vec::new(), move |control| {
        // Alongside the elector: who copies what and who leads, for /flows (ends with the worker).
        let watched = members::Watched {
            copier_group: copier_group(&identity, &plan),
            lease_group: lease_group(&identity, &plan),
            lease_topic: LEASE_TOPIC,
        };
        let _members = members::watch(conns.clone(), watched, sup.clone());
        run(&plan, &conns, &sup, &identity, control)
    })
}

fn run(
    plan: &FlowPlan,
    conns: &FlowConnections,
    supervisor: &Parent,
    identity: &Identity,
    control: Control<()>,
) -> Result<(), String> {
    let node_id = identity.node_id.as_str();
    let spec =
        TopicSpec { configs: Vec::new(), ..TopicSpec::compacted(LEASE_TOPIC, 1, plan.settings.replication_factor) };
    conns.target.ensure_topic(&plan.id, &spec).map_err(|e| e.to_string())?;
    // The flow's own client: its membership of the flow's lease group is what elects the leader.
    let mut cfg = kafka::client_config(&plan.target, &plan.id, "lease").map_err(|e| e.to_string())?;
    cfg.set("group.id", lease_group(identity, plan))
        .set("group.instance.id", node_id)
        .set("client.id", format!("{}|ferry|lease|{node_id}", plan.id))
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("session.timeout.ms", SESSION_TIMEOUT.as_millis().to_string())
        .set("heartbeat.interval.ms", "1000")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "latest");
    let consumer: BaseConsumer<LeaseContext> = cfg
        .create_with_context(LeaseContext { changes: Mutex::new(Vec::new()) })
        .map_err(|e| format!("cluster `{}`: create the lease consumer: {e}", plan.target.alias))?;
    consumer.subscribe(&[LEASE_TOPIC]).map_err(|e| format!("subscribe to {LEASE_TOPIC}: {e}"))?;
    control.running();
    let group = lease_group(identity, plan);
    let refused = kafka::Refusal::default();
    let report = |state: ActorState, error: Option<String>| {
        supervisor.status.do_send(ActorStatusChanged { kind: ActorKind::Lease, state, error });
    };
    let mut leading = false;
    let result = loop {
        match control.try_next() {
            Some(Signal::Stop { .. }) => break Ok(()),
            Some(Signal::Msg(())) | None => {}
        }
        if let Err(e) = crate::failpoints::check(crate::failpoints::LEASE_POLL) {
            break Err(e);
        }
        match consumer.poll(Duration::from_millis(200)) {
            // librdkafka reports a fenced static member as a fatal error: the consumer is unusable.
            Some(Err(e))
                if matches!(
                    e.rdkafka_error_code(),
                    Some(RDKafkaErrorCode::FencedInstanceId | RDKafkaErrorCode::Fatal)
                ) =>
            {
                break Err(format!(
                    "lease group: {e} (another node may be running with this node's id `{node_id}`: give every node its own --node-id)"
                ));
            }
            // The target refuses this principal the lease group or topic: no node can lead (no topic
            // config sync, checkpoints or heartbeats) until it is granted. Degraded, and said once.
            Some(Err(e)) if kafka::authorization_error(&e).is_some() => {
                let code = kafka::authorization_error(&e).unwrap_or_default();
                let resource = if code == "GROUP_AUTHORIZATION_FAILED" {
                    format!("lease group {group}")
                } else {
                    format!("lease topic {LEASE_TOPIC}")
                };
                let reason = kafka::not_authorized(&resource, &plan.target.alias, "Read", code);
                if refused.seen(reason.clone()) {
                    tracing::warn!(flow = %plan.id, reason, "no node can lead the flow until this is granted");
                    report(ActorState::Degraded, Some(reason));
                }
            }
            Some(Err(e)) => tracing::debug!(flow = %plan.id, error = %e, "lease consumer"),
            _ => {}
        }
        let changes = std::mem::take(&mut *consumer.context().changes.lock().unwrap_or_else(|p| p.into_inner()));
        // The group answered (or stopped refusing for a while): granted.
        if (!changes.is_empty() || refused.current(REFUSAL_WINDOW).is_none()) && refused.clear() {
            tracing::info!(flow = %plan.id, "the lease group is granted again");
            report(ActorState::Running, None);
        }
        for (gained, _) in changes {
            if gained != leading {
                leading = gained;
                tracing::info!(flow = %plan.id, node = node_id, leading, "flow leadership changed");
                supervisor.leadership.do_send(Leadership { leading });
            }
        }
    };
    if leading {
        supervisor.leadership.do_send(Leadership { leading: false });
    }
    // A static member does not leave: the lease stays this node's for a restart within the session
    // timeout, and moves on after it.
    consumer.unsubscribe();
    result
}
