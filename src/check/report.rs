//! What `ferry check` found ([`Report`]), as plain data that `ferry check`'s table and JSON show
//! ([`crate::cli::check`]), and the problems in it: what would fail, one line each.

use serde::Serialize;

use super::internal::State;
use super::rights::{self, Resource, Verdict};

/// Everything `ferry check` found.
#[derive(Debug, Serialize)]
pub struct Report {
    pub deployment: String,
    pub clusters: Vec<ClusterReport>,
    pub flows: Vec<FlowReport>,
    /// Disabled flows, not checked (unless named with `--flow`).
    pub disabled: Vec<String>,
}

/// Whether a cluster answered.
#[derive(Debug, Serialize)]
pub struct ClusterReport {
    pub alias: String,
    pub bootstrap_servers: String,
    pub reachable: bool,
    pub cluster_id: Option<String>,
    pub brokers: Option<usize>,
    /// Why it did not answer.
    pub error: Option<String>,
}

/// One flow's findings.
#[derive(Debug, Serialize)]
pub struct FlowReport {
    pub flow: String,
    pub file: String,
    /// Source topics the flow would copy, with their names on the target.
    pub topics: Vec<CopiedTopic>,
    /// Source groups the flow would checkpoint.
    pub groups: Vec<String>,
    pub rights: Vec<RightCheck>,
    pub internal_topics: Vec<InternalCheck>,
    /// What prevented part of the check (a cluster that did not answer, a listing that failed).
    pub errors: Vec<String>,
    /// Worth knowing, not a failure (a topic named in `topics` that does not exist).
    pub notes: Vec<String>,
    /// The schema registries of a flow with `schemas` on.
    pub registries: Vec<RegistryCheck>,
}

/// A flow's schema registry: whether it answered and let ferry read (and, the target's, write).
#[derive(Debug, Serialize)]
pub struct RegistryCheck {
    pub cluster: String,
    /// `source` or `target`.
    pub role: &'static str,
    pub url: String,
    /// `Ok` or why not (never checked: `None`).
    #[serde(serialize_with = "outcome")]
    pub read: Option<Result<(), String>>,
    #[serde(serialize_with = "outcome")]
    pub write: Option<Result<(), String>>,
    /// Subjects the registry lists.
    pub subjects: Option<usize>,
}

impl RegistryCheck {
    pub fn problems(&self) -> Vec<String> {
        [("read", &self.read), ("write", &self.write)]
            .into_iter()
            .filter_map(|(what, r)| match r {
                Some(Err(e)) => {
                    Some(format!("{} registry of `{}` ({}), {what}: {e}", self.role, self.cluster, self.url))
                }
                _ => None,
            })
            .collect()
    }
}

/// `"ok"`, the error, or null.
fn outcome<S: serde::Serializer>(r: &Option<Result<(), String>>, s: S) -> Result<S::Ok, S::Error> {
    match r {
        None => s.serialize_none(),
        Some(Ok(())) => s.serialize_str("ok"),
        Some(Err(e)) => s.serialize_str(e),
    }
}

#[derive(Debug, Serialize)]
pub struct CopiedTopic {
    pub topic: String,
    pub remote: String,
    pub partitions: i32,
}

#[derive(Debug, Serialize)]
pub struct RightCheck {
    /// The row of [`rights::RIGHTS`] this check is of.
    #[serde(skip)]
    pub row: &'static rights::Row,
    pub cluster: String,
    pub resource: Resource,
    pub rights: Vec<&'static str>,
    pub used_by: String,
    #[serde(flatten)]
    pub verdict: Verdict,
}

#[derive(Debug, Serialize)]
pub struct InternalCheck {
    pub cluster: String,
    pub role: &'static str,
    pub topic: String,
    #[serde(flatten)]
    pub state: State,
}

impl FlowReport {
    /// One line per thing that would fail, naming the flow, the resource and the right or the reason.
    pub fn problems(&self) -> Vec<String> {
        let mut out: Vec<String> = self.errors.iter().map(|e| format!("flow {}: {e}", self.flow)).collect();
        for r in &self.rights {
            match &r.verdict {
                Verdict::Missing { rights, reason } => out.push(format!(
                    "flow {}: MISSING {} on {} on `{}`: {reason}",
                    self.flow,
                    rights.join(", "),
                    r.resource,
                    r.cluster
                )),
                Verdict::Failed { reason } => {
                    out.push(format!("flow {}: {} on `{}`: {reason}", self.flow, r.resource, r.cluster));
                }
                _ => {}
            }
        }
        for r in &self.registries {
            out.extend(r.problems().into_iter().map(|p| format!("flow {}: {p}", self.flow)));
        }
        for t in &self.internal_topics {
            if let State::Wrong { reasons, .. } = &t.state {
                out.push(format!(
                    "flow {}: {} topic {} on `{}`: {}",
                    self.flow,
                    t.role,
                    t.topic,
                    t.cluster,
                    reasons.join("; ")
                ));
            }
        }
        out
    }
}

impl Report {
    /// Everything that would fail: unreachable clusters first, then each flow's problems.
    pub fn problems(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .clusters
            .iter()
            .filter_map(|c| c.error.as_ref().map(|e| format!("cluster `{}` ({}): {e}", c.alias, c.bootstrap_servers)))
            .collect();
        out.extend(self.flows.iter().flat_map(FlowReport::problems));
        out
    }
}
