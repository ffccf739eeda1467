//! The copier's health as `/flows` shows it: a periodic job that reports the actor degraded while a cluster
//! is away or the copier group is refused, and running again once they answer.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::config::FlowPlan;
use crate::flow::messages::{ActorKind, ActorStatusChanged, Parent};
use crate::kafka::{self, ClusterWatch};
use crate::status::ActorState;
use crate::ticks;

/// How long after librdkafka's last connection error a cluster still counts as away.
const DEGRADED_WINDOW: Duration = Duration::from_secs(15);
/// How long a refusal of the copier group is shown after librdkafka last reported it (it retries the
/// group's coordinator every few seconds while refused).
const REFUSAL_WINDOW: Duration = Duration::from_secs(30);
/// How often the health is looked at.
const CHECK_EVERY: Duration = Duration::from_millis(250);

/// Reports the copier degraded while librdkafka says a cluster is away, or partitions are failing, and
/// running again after, from the node's ticker ([`crate::ticks::quick`]), not the copy loop: the loop
/// can be busy exactly when a cluster is away (a full producer queue waits for the target), and must
/// not look healthy meanwhile. Stops when dropped.
pub(super) struct HealthReporter {
    _job: ticks::Job,
}

impl HealthReporter {
    pub(super) fn start(
        plan: &FlowPlan,
        supervisor: &Parent,
        group: &Arc<kafka::Refusal>,
        source: &Arc<ClusterWatch>,
        target: &Arc<ClusterWatch>,
        partitions: &Arc<Mutex<Option<String>>>,
    ) -> Self {
        let (source_alias, target_alias) = (plan.source.alias.clone(), plan.target.alias.clone());
        let (flow, supervisor, group, source, target, partitions) = (
            plan.id.to_string(),
            supervisor.clone(),
            group.clone(),
            source.clone(),
            target.clone(),
            partitions.clone(),
        );
        let mut degraded: Option<String> = None;
        let job = ticks::quick().every(CHECK_EVERY, move || {
            let problem = group
                .current(REFUSAL_WINDOW)
                .or_else(|| source.recent(DEGRADED_WINDOW).map(|r| format!("source `{source_alias}` unreachable: {r}")))
                .or_else(|| target.recent(DEGRADED_WINDOW).map(|r| format!("target `{target_alias}` unreachable: {r}")))
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
                supervisor.status.do_send(ActorStatusChanged { kind: ActorKind::Copier, state, error: problem.clone() });
                degraded = problem;
            }
        });
        Self { _job: job }
    }
}
