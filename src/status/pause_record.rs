//! An operator's pause or resume, and a promotion, as the control topic records them: shown in
//! `/flows` (so here, below the `control` module that writes and reads them).

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// An operator's pause or resume of a flow, as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseRecord {
    pub paused: bool,
    /// The node that took the request.
    pub by: String,
    /// Seconds since the epoch.
    pub at: u64,
}

impl PauseRecord {
    pub fn now(paused: bool, by: &str) -> Self {
        let at = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Self { paused, by: by.to_string(), at }
    }
}

/// A remote topic an operator promoted (`ferry promote`): its flow copies it no more.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromoteRecord {
    /// Who ran `ferry promote` (the host name).
    pub by: String,
    /// Seconds since the epoch.
    pub at: u64,
}

impl PromoteRecord {
    pub fn now(by: &str) -> Self {
        let at = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Self { by: by.to_string(), at }
    }
}
