//! The types `/flows` shows that other modules produce: what a reload did, who is in a flow's copier
//! group. They live here, below the node, the reload triggers and the flows, so that status imports none
//! of them.

use std::fmt;

use serde::Serialize;

/// A node in the flow's copier group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Member {
    pub node: String,
    /// Source partitions the group gave it.
    pub partitions: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    Startup,
    Watch,
    Rescan,
    Signal,
    Http,
    /// A rolled-back change tried again by itself once its wait ran out (see `reload::retry_delay`).
    Retry,
}

impl Trigger {
    /// Whether the reload happens even if the directory's content did not change.
    pub fn forces(self) -> bool {
        matches!(self, Self::Startup | Self::Signal | Self::Http)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReloadResult {
    /// The new flow set runs.
    Applied,
    /// The new flow set is invalid: nothing changed.
    Rejected,
    /// Valid, but a changed flow's new plan could not start: it kept its old plan (the rest applied).
    RolledBack,
    /// Nothing to do: the directory did not change (watch events and rescans only; not counted).
    Unchanged,
}

impl ReloadResult {
    pub fn name(self) -> &'static str {
        match self {
            Self::Applied => "applied",
            Self::Rejected => "rejected",
            Self::RolledBack => "rolled_back",
            Self::Unchanged => "unchanged",
        }
    }
}

/// What a reload did, for the log, `/flows` and `POST /reload`.
#[derive(Clone, Debug, Serialize)]
pub struct ReloadOutcome {
    pub trigger: Trigger,
    pub result: ReloadResult,
    /// RFC 3339.
    pub at: String,
    /// Every validation error (file and key) of a rejected set, or why plans were rolled back.
    pub error: Option<String>,
    pub started: Vec<String>,
    pub stopped: Vec<String>,
    pub restarted: Vec<String>,
    pub rolled_back: Vec<String>,
    /// How many reloads in a row have tried to apply this content: 1, or more when a rolled-back change
    /// is tried again.
    pub attempt: u32,
    /// For a rolled-back reload: when the change is tried again, in words.
    pub retry: Option<String>,
    /// For a rolled-back reload on a node that reloads by itself: when it tries the change again (RFC
    /// 3339), unless an edit or a reload that is asked for comes first.
    pub next_attempt_at: Option<String>,
}

impl fmt::Display for ReloadOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({:?}): started {:?}, stopped {:?}, restarted {:?}, rolled back {:?}",
            self.result.name(),
            self.trigger,
            self.started,
            self.stopped,
            self.restarted,
            self.rolled_back
        )?;
        if self.attempt > 1 {
            write!(f, ", attempt {}", self.attempt)?;
        }
        Ok(())
    }
}
