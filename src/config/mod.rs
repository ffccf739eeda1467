//! Flow configuration: the operator's `flows/*.toml` files, loaded, validated, and turned into
//! the [`FlowSet`] the node runs.
//!
//! Parse, validate, apply: [`raw`] holds the serde types exactly as written, [`load_dir`] reads every
//! file of a directory and validates the whole set at once, reporting *every* problem with the file and
//! key it belongs to. A set with any error is refused whole, so a running node never half-applies one.
//! `ferry validate` and `ferry run` (startup and, later, reload) go through the same path.

mod load;
pub mod raw;
mod secrets;
mod validate;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use load::load_dir;
pub use secrets::{is_secret_key, redact};

use crate::filter::{GroupFilter, TopicFilter};
use crate::policy::ReplicationPolicy;

/// One problem found in the flow files, naming where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    /// Dotted path of the offending key, e.g. `flows[0].topics[1]` or `clusters.east.client`.
    pub key: String,
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Multi-line reasons (TOML snippets, regex carets) are indented under their error.
        let reason = self.reason.trim_end().replace('\n', "\n      ");
        if self.key.is_empty() {
            write!(f, "{}: {}", self.file.display(), reason)
        } else {
            write!(f, "{}: {}: {}", self.file.display(), self.key, reason)
        }
    }
}

/// Every error of a refused flow set.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} error(s) in the flow files:", self.0.len())?;
        for e in &self.0 {
            writeln!(f, "  {e}")?;
        }
        Ok(())
    }
}

/// A flow's identity: the ordered cluster pair. At most one flow per pair.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlowId {
    pub source: String,
    pub target: String,
}

impl fmt::Display for FlowId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}->{}", self.source, self.target)
    }
}

impl std::str::FromStr for FlowId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once("->") {
            Some((a, b)) if !a.is_empty() && !b.is_empty() => {
                Ok(FlowId { source: a.to_string(), target: b.to_string() })
            }
            _ => Err(format!("`{s}` is not a flow id; expected SOURCE->TARGET")),
        }
    }
}

/// A Kafka cluster as the flow files define it. `client` may hold secrets: its `Debug` redacts them,
/// and nothing else in ferry prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSpec {
    pub alias: String,
    pub bootstrap_servers: String,
    /// librdkafka properties for every client of this cluster (after `${VAR}` substitution).
    pub client: BTreeMap<String, String>,
    pub file: PathBuf,
}

impl fmt::Debug for ClusterSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterSpec")
            .field("alias", &self.alias)
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("client", &redact(&self.client))
            .field("file", &self.file)
            .finish()
    }
}

/// Where the offset-syncs topic lives (MM2's `offset-syncs.topic.location`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffsetSyncsLocation {
    Source,
    Target,
}

/// The validated, comparable settings of a flow: what an operator wrote, with MM2's defaults filled in.
/// Two plans with equal settings (and equal clusters) run identically, which is what reload diffs on.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowSettings {
    pub topics: Vec<String>,
    pub topics_exclude: Vec<String>,
    pub groups: Vec<String>,
    pub groups_exclude: Vec<String>,
    pub replication_policy: PolicyKind,
    pub replication_policy_separator: String,
    /// Replication factor of created remote topics; `None` means the target's default.
    pub replication_factor: Option<i32>,
    pub refresh_topics_interval: Duration,
    pub emit_checkpoints_interval: Duration,
    pub refresh_groups_interval: Duration,
    pub emit_heartbeats_interval: Duration,
    pub sync_group_offsets_enabled: bool,
    pub sync_group_offsets_interval: Duration,
    pub sync_topic_configs_enabled: bool,
    pub sync_topic_configs_interval: Duration,
    pub offset_lag_max: i64,
    pub offset_syncs_topic_location: OffsetSyncsLocation,
    pub compression: String,
    pub linger: Duration,
    pub batch_size_bytes: i64,
    pub enabled: bool,
    pub restart: crate::restart_policy::RestartSettings,
    pub on_source_gap: SourceGapPolicy,
}

/// What the copier does when records were lost on the source before it copied them (retention deleted
/// them, or the topic was re-created).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceGapPolicy {
    /// Log the lost range, count it, continue after it (MM2's behaviour, made visible).
    Skip,
    /// Stop the copier; it retries with backoff and keeps failing until an operator acts.
    Fail,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyKind {
    Default,
    Identity,
}

/// A flow ready to run: settings plus everything compiled from them.
#[derive(Clone, Debug)]
pub struct FlowPlan {
    pub id: FlowId,
    pub source: ClusterSpec,
    pub target: ClusterSpec,
    pub settings: FlowSettings,
    pub topic_filter: Arc<TopicFilter>,
    pub group_filter: Arc<GroupFilter>,
    pub policy: ReplicationPolicy,
    /// The file that defines this flow.
    pub file: PathBuf,
}

impl PartialEq for FlowPlan {
    /// Compiled parts derive from the settings, so comparing settings and clusters is enough.
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
            && self.source == other.source
            && self.target == other.target
            && self.settings == other.settings
    }
}

/// Every cluster and flow of a flows directory, validated.
#[derive(Clone, Debug, Default)]
pub struct FlowSet {
    pub clusters: BTreeMap<String, ClusterSpec>,
    pub flows: BTreeMap<FlowId, FlowPlan>,
}

impl FlowSet {
    /// A human-readable summary for `ferry validate`; secrets are redacted.
    pub fn describe(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        for c in self.clusters.values() {
            let _ = writeln!(out, "cluster {} bootstrap={} ({})", c.alias, c.bootstrap_servers, c.file.display());
            for (k, v) in redact(&c.client) {
                let _ = writeln!(out, "  {k} = {v}");
            }
        }
        for f in self.flows.values() {
            let s = &f.settings;
            let _ = writeln!(
                out,
                "flow {}{} ({})\n  topics={:?} exclude={:?}\n  groups={:?} exclude={:?}\n  policy={:?} separator={:?} \
                 refresh_topics={:?} emit_checkpoints={:?} emit_heartbeats={:?} offset_lag_max={} compression={}",
                f.id,
                if s.enabled { "" } else { " (disabled)" },
                f.file.display(),
                s.topics,
                s.topics_exclude,
                s.groups,
                s.groups_exclude,
                s.replication_policy,
                s.replication_policy_separator,
                s.refresh_topics_interval,
                s.emit_checkpoints_interval,
                s.emit_heartbeats_interval,
                s.offset_lag_max,
                s.compression,
            );
        }
        out
    }
}
