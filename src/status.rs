//! What each flow and actor is doing, for `/health` and `/flows`: a shared board that actors write
//! and the HTTP handlers read. It never holds configuration values, so it cannot leak secrets.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ActorState {
    Starting,
    Running,
    /// Running but a cluster it needs is not answering.
    Degraded,
    /// Stopped by an error; waiting for its restart.
    Restarting,
    /// Its restart budget is spent: still retrying, slowly, until an operator fixes the cause.
    Failed,
    Stopped,
}

#[derive(Clone, Debug, Serialize)]
pub struct ActorStatus {
    pub state: ActorState,
    pub restarts: u64,
    pub last_error: Option<String>,
    /// Seconds since the Unix epoch at which `state` was entered.
    pub since: u64,
}

#[derive(Clone, Debug, Default)]
pub struct StatusBoard {
    inner: Arc<RwLock<BTreeMap<String, BTreeMap<String, ActorStatus>>>>,
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl StatusBoard {
    /// Record that `actor` of `flow` entered `state`; `error` replaces the last error when given.
    pub fn set(&self, flow: &str, actor: &str, state: ActorState, error: Option<String>) {
        let mut board = self.inner.write().unwrap_or_else(|p| p.into_inner());
        let actors = board.entry(flow.to_string()).or_default();
        let entry = actors.entry(actor.to_string()).or_insert(ActorStatus {
            state,
            restarts: 0,
            last_error: None,
            since: now_secs(),
        });
        if entry.state != state {
            entry.state = state;
            entry.since = now_secs();
        }
        if matches!(state, ActorState::Restarting | ActorState::Failed) {
            entry.restarts += 1;
        }
        if error.is_some() {
            entry.last_error = error;
        }
    }

    pub fn remove_flow(&self, flow: &str) {
        self.inner.write().unwrap_or_else(|p| p.into_inner()).remove(flow);
    }

    pub fn snapshot(&self) -> BTreeMap<String, BTreeMap<String, ActorStatus>> {
        self.inner.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
