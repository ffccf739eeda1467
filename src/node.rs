//! The node: one process running many flows. It starts a [`FlowSupervisor`] per enabled flow and
//! stops them all, in order and within a deadline, when the process is asked to terminate.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use tokio::sync::oneshot;

use crate::config::{FlowId, FlowSet};
use crate::flow::{FlowSupervisor, StopFlow};
use crate::status::StatusBoard;

pub struct Node {
    set: FlowSet,
    status: StatusBoard,
    flows: BTreeMap<FlowId, Addr<FlowSupervisor>>,
}

impl Node {
    pub fn new(set: FlowSet, status: StatusBoard) -> Self {
        Self { set, status, flows: BTreeMap::new() }
    }
}

impl Actor for Node {
    type Context = Context<Self>;

    fn started(&mut self, _: &mut Context<Self>) {
        for (id, plan) in &self.set.flows {
            if !plan.settings.enabled {
                tracing::info!(flow = %id, "flow is disabled; not starting it");
                continue;
            }
            let sup = FlowSupervisor::new(Arc::new(plan.clone()), self.status.clone()).start();
            self.flows.insert(id.clone(), sup);
        }
        tracing::info!(flows = self.flows.len(), "node started");
    }
}

/// Stop every flow gracefully; resolves when all have drained or `timeout` passed.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Shutdown {
    pub timeout: Duration,
}

impl Handler<Shutdown> for Node {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: Shutdown, _: &mut Context<Self>) -> Self::Result {
        // Leave a margin after the flows' own deadline for the final acknowledgements to land.
        let deadline = Instant::now() + msg.timeout.mul_f64(0.9);
        let waits: Vec<(FlowId, oneshot::Receiver<()>)> = std::mem::take(&mut self.flows)
            .into_iter()
            .map(|(id, sup)| {
                let (done, wait) = oneshot::channel();
                sup.do_send(StopFlow { deadline, done });
                (id, wait)
            })
            .collect();
        // One deadline for all flows: they drain in parallel, so N stuck flows cost one timeout, not N.
        let until = tokio::time::Instant::now() + msg.timeout;
        Box::pin(async move {
            for (id, wait) in waits {
                if tokio::time::timeout_at(until, wait).await.is_err() {
                    tracing::warn!(flow = %id, "flow did not stop within the shutdown timeout");
                }
            }
        })
    }
}
