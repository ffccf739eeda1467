//! Flow configuration: the operator's `flows/*.toml` files, loaded, validated, and turned into
//! the [`FlowSet`] the node runs.
//!
//! Parse, validate, apply: [`raw`] holds the serde types exactly as written, [`load_dir`] reads every
//! file of a directory and validates the whole set at once, reporting *every* problem with the file and
//! key it belongs to. A set with any error is refused whole, so a running node never half-applies one.
//! `ferry validate` and `ferry run` (startup and every reload) go through the same path, which also has
//! librdkafka check each cluster's client properties, so a property it refuses is a validation error
//! naming the key, never a failure of every client `ferry run` creates.
//!
//! Secrets ([`secrets`]) come from `${VAR}` or `${file:PATH}`; no error this module produces quotes a
//! value.

/// A character node ids cannot hold (the node's settings refuse it): an exactly-once copier names its
/// second producer with it (`flow::copier::transactions::sibling`), so that no node's id is another
/// node's second producer's.
pub const NODE_ID_RESERVED: char = '~';

pub mod client_files;
pub mod diff;
mod fields;
mod load;
pub(crate) mod locate;
pub mod login;
pub mod principal;
pub mod raw;
pub mod schema_registry;
pub mod secrets;
mod start_from;
pub mod topology;
mod validate;
mod validate_cluster;
mod validate_flow;
mod validate_names;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use diff::{FlowSetDiff, diff};
pub(crate) use load::syntax_error;
pub use load::{check_dir_offline, is_flow_file, load_dir, secret_files_in};

/// What the client library refuses in a cluster's client properties, each `(property, reason)` (the
/// property `None` when the reason names none): given by whoever loads flows
/// (`kafka::check_client_properties`), since building clients is a layer above this module.
pub type ClientCheck = fn(&ClusterSpec) -> Vec<(Option<String>, String)>;
pub use fields::valid_alias;
pub use secrets::{is_secret_key, redact, scrub};
pub use start_from::parse_start_from;

use crate::filter::{GroupFilter, TopicFilter};
use crate::policy::ReplicationPolicy;

/// One problem found in the flow files, naming where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    /// The line of a value refused while parsing (a wrong type, an unknown key), when known.
    pub line: Option<usize>,
    /// Dotted path of the offending key, e.g. `flows[0].topics[1]` or `clusters.east.client`.
    pub key: String,
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Multi-line reasons (TOML snippets, regex carets) are indented under their error.
        let reason = self.reason.trim_end().replace('\n', "\n      ");
        write!(f, "{}: ", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, "line {line}: ")?;
        }
        if self.key.is_empty() { write!(f, "{reason}") } else { write!(f, "{}: {reason}", self.key) }
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
#[derive(Clone)]
pub struct ClusterSpec {
    pub alias: String,
    pub bootstrap_servers: String,
    /// librdkafka properties for every client of this cluster (after `${VAR}` and `${file:PATH}`
    /// substitution).
    pub client: BTreeMap<String, String>,
    /// Properties whose value (or part of it) was read from a secret file: secret whatever their name.
    pub file_keys: BTreeSet<String>,
    /// Every file `${file:PATH}` references in this cluster's definition, readable or not: a reload must
    /// notice when one changes (a rotated password), though it lives outside the flows directory.
    pub secret_files: Vec<PathBuf>,
    /// The files its client properties name (certificates, keys, CA bundles, keytabs), with their
    /// digests: a rotated certificate is a changed cluster, though its path is the same.
    pub client_files: Vec<client_files::ClientFile>,
    /// The cluster's schema registry, if it names one. Not part of the cluster's identity (its clients):
    /// the flows that use it carry it in their settings, so a changed registry restarts only them.
    pub schema_registry: Option<schema_registry::RegistrySpec>,
    pub file: PathBuf,
}

impl ClusterSpec {
    /// A cluster for unit tests: `alias` at an address nothing answers, with client properties `props`.
    #[cfg(test)]
    pub(crate) fn for_test(alias: &str, props: &[(&str, &str)]) -> ClusterSpec {
        ClusterSpec {
            alias: alias.into(),
            bootstrap_servers: "localhost:1".into(),
            client: props.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            file_keys: Default::default(),
            secret_files: Vec::new(),
            client_files: Vec::new(),
            schema_registry: None,
            file: "clusters.toml".into(),
        }
    }

    /// Whether the value of client property `key` must never be shown.
    pub fn is_secret(&self, key: &str) -> bool {
        is_secret_key(key) || self.file_keys.contains(key)
    }

    /// The values of the secret client properties (to scrub from text that may quote them).
    pub fn secret_values(&self) -> Vec<String> {
        self.client.iter().filter(|(k, _)| self.is_secret(k)).map(|(_, v)| v.clone()).collect()
    }

    /// The client properties as they may be shown: secret values replaced by `[redacted]`.
    pub fn shown_client(&self) -> BTreeMap<String, String> {
        secrets::redact_also(&self.client, &self.file_keys)
    }

    /// The digests of [`ClusterSpec::client_files`] in hex, `key=digest` comma-separated: part of what
    /// makes two definitions one connection (same clients), so that new files get new clients.
    pub fn files_fingerprint(&self) -> String {
        let hex = |d: &[u8]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
        self.client_files.iter().map(|f| format!("{}={}", f.key, hex(&f.digest))).collect::<Vec<_>>().join(",")
    }
}

/// Two definitions of a cluster are the same if they connect the same way, with the same files behind
/// their paths; where they are written does not matter (moving a definition to another file restarts
/// nothing).
impl PartialEq for ClusterSpec {
    fn eq(&self, other: &Self) -> bool {
        self.alias == other.alias
            && self.bootstrap_servers == other.bootstrap_servers
            && self.client == other.client
            && self.client_files == other.client_files
    }
}

impl Eq for ClusterSpec {}

impl fmt::Debug for ClusterSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterSpec")
            .field("alias", &self.alias)
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("client", &self.shown_client())
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
    /// The naming template (`remote_topic`) of a [`PolicyKind::Template`] flow, as written: part of
    /// the comparable settings so that a changed template restarts just that flow.
    pub remote_topic: Option<String>,
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
    /// Offset syncs the checkpoint computer keeps per source partition (at least MM2's 64).
    pub offset_sync_history_per_partition: usize,
    /// Under the identity policy, stamp every copied record with the clusters it has been on
    /// (`ferry.path`) and never copy a record to one of them: what makes identity cycles safe.
    pub provenance_header: bool,
    /// Per-partition series besides the per-topic ones (`ferry_partition_*`): off by default, because a
    /// wide flow would otherwise put tens of thousands of series on every scrape.
    pub metrics_per_partition: bool,
    /// How the copier group splits the flow's partitions among the nodes.
    pub group_protocol: GroupProtocol,
    /// At-least-once (the default) or exactly-once (records and progress in one transaction).
    pub delivery: Delivery,
    /// Exactly-once: the longest a transaction stays open before it is committed.
    pub transaction_interval: Duration,
    /// Exactly-once: a transaction is committed once its records hold this many bytes.
    pub transaction_max_bytes: usize,
    /// The topic on the target holding copy progress in Connect's format: where ferry reads MM2's at
    /// takeover and writes its own (for MM2 to resume from). Dedicated MM2's `mm2-offsets.<source>.internal`
    /// by default; a Connect-run MM2's `offset.storage.topic` when taking over from one.
    pub mm2_offsets_topic: String,
    /// The connector name in those records' keys: `MirrorSourceConnector` in dedicated mode, the
    /// connector's own name on a Connect cluster (Strimzi: `<source>-><target>.MirrorSourceConnector`).
    pub mm2_source_connector: String,
    /// MM2's `emit.heartbeats.enabled`: Heartbeat(source, target) into the target's `heartbeats`.
    pub emit_heartbeats_enabled: bool,
    /// Heartbeat(target, source) into the source's `heartbeats`, which the copier brings back as
    /// `<source>.heartbeats` (MM2's reverse heartbeat-only pair). The heartbeat emitter's only write to
    /// the source.
    pub emit_reverse_heartbeats_enabled: bool,
    /// MM2 4.0's `heartbeats.replication.enabled` (KIP-1089): every heartbeats topic of the source
    /// (`heartbeats`, `x.heartbeats`, ...) is copied whatever `topics` says, which is how topologies are
    /// discovered. Off: only those `topics` selects. A hub whose sources see each other's heartbeats, or
    /// a flow that must not rebalance for topics it does not copy, may switch it off.
    pub heartbeats_replication_enabled: bool,
    /// MM2's `emit.checkpoints.enabled`: checkpoint records into `<source>.checkpoints.internal`.
    pub emit_checkpoints_enabled: bool,
    /// MM2's `emit.offset-syncs.enabled` (KIP-1031): without syncs nothing can be translated, so
    /// validation refuses it together with checkpoints or group offset sync.
    pub emit_offset_syncs_enabled: bool,
    /// MM2's `refresh.topics.enabled`: look for new topics and partitions every
    /// `refresh_topics_interval`; off, the topics found at start are all the flow copies.
    pub refresh_topics_enabled: bool,
    /// MM2's `refresh.groups.enabled`: the same for the groups the checkpoint computer follows.
    pub refresh_groups_enabled: bool,
    /// MM2's `config.properties.exclude`: topic config properties never copied to remote topics;
    /// `None` is MM2's default list.
    pub config_properties_exclude: Option<Vec<String>>,
    /// Replication factors of the internal topics ferry creates; `None` follows `replication_factor`,
    /// `Some(-1)` is the cluster's default.
    pub offset_syncs_topic_replication_factor: Option<i32>,
    pub checkpoints_topic_replication_factor: Option<i32>,
    pub heartbeats_topic_replication_factor: Option<i32>,
    /// MM2's `sync.topic.acls.enabled`: copy the ALLOW bindings of replicated topics to their remote
    /// names on the target (WRITE dropped, ALL as READ). Off by default in ferry (see the README).
    pub sync_topic_acls_enabled: bool,
    pub sync_topic_acls_interval: Duration,
    /// Keep every principal but the flow's own from writing its remote topics: the leader adds a DENY
    /// Write binding on each remote topic for every other principal an ALLOW binding lets write it
    /// ([`crate::protect`]). Off by default: it needs Alter on the target cluster.
    pub protect_remote_topics: bool,
    /// Where a source partition with no stored progress starts copying.
    pub start_from: StartFrom,
    /// Schema registry sync and schema-ID translation (with both clusters' registries).
    pub schemas: schema_registry::SchemaSettings,
    /// Records not copied (`[[flows.filter]]`) and header rules (`[flows.headers]`).
    pub record_rules: crate::record_rules::RecordRulesSpec,
    /// Whether remote topics ferry created are deleted once their source topic is gone.
    pub topic_deletions: TopicDeletions,
    /// How long a source topic must stay gone before its remote topic is deleted.
    pub topic_deletion_grace: Duration,
}

/// `sync_topic_deletions`: off (the default), reported only, or done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TopicDeletions {
    #[default]
    Off,
    /// Pending deletions are shown in `/flows` and logged; nothing is deleted.
    DryRun,
    On,
}

/// Where a source partition that has no stored progress (a new flow, a new topic or partition)
/// starts copying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartFrom {
    /// The partition's log start: everything the source still holds (MM2's behaviour).
    Earliest,
    /// The partition's end when the copier first sees it: only records written from then on.
    Latest,
    /// The first record whose timestamp is at or after this time (milliseconds since the epoch), as
    /// ListOffsets by timestamp answers; the end if there is none.
    Timestamp(i64),
}

impl FlowSettings {
    /// The copier stamps and honours the provenance header.
    pub fn provenance(&self) -> bool {
        self.replication_policy == PolicyKind::Identity && self.provenance_header
    }

    /// Replication factor of the offset-syncs topic ferry creates (`None`: the cluster's default).
    pub fn offset_syncs_rf(&self) -> Option<i32> {
        internal_rf(self.offset_syncs_topic_replication_factor, self.replication_factor)
    }

    /// Replication factor of `<source>.checkpoints.internal`.
    pub fn checkpoints_rf(&self) -> Option<i32> {
        internal_rf(self.checkpoints_topic_replication_factor, self.replication_factor)
    }

    /// Replication factor of the `heartbeats` topics ferry creates.
    pub fn heartbeats_rf(&self) -> Option<i32> {
        internal_rf(self.heartbeats_topic_replication_factor, self.replication_factor)
    }

    /// Whether the checkpoint computer has anything to do: emit checkpoints, sync group offsets, or both.
    pub fn runs_checkpoints(&self) -> bool {
        self.emit_checkpoints_enabled || self.sync_group_offsets_enabled
    }

    /// Whether the heartbeat emitter has anything to do.
    pub fn runs_heartbeats(&self) -> bool {
        self.emit_heartbeats_enabled || self.emit_reverse_heartbeats_enabled
    }

    /// What this flow writes to its source cluster, as `(setting, what it writes)`: empty for a flow
    /// that a principal with only Read and Describe rights on the source can run.
    pub fn source_writes(&self) -> Vec<(&'static str, &'static str)> {
        let mut out = Vec::new();
        if self.emit_offset_syncs_enabled && self.offset_syncs_topic_location == OffsetSyncsLocation::Source {
            out.push((
                "offset_syncs_topic_location = \"source\"",
                "offset syncs into mm2-offset-syncs.<target>.internal on the source",
            ));
        }
        if self.emit_reverse_heartbeats_enabled {
            out.push(("emit_reverse_heartbeats_enabled = true", "heartbeats into `heartbeats` on the source"));
        }
        out
    }
}

/// An internal topic's replication factor: its own setting (-1: the cluster's default), else the flow's.
fn internal_rf(own: Option<i32>, flow: Option<i32>) -> Option<i32> {
    match own {
        Some(-1) => None,
        Some(n) => Some(n),
        None => flow,
    }
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

/// What a flow promises about copies (`delivery`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Delivery {
    /// A source position counts once the target acknowledged its record; a crash copies again what
    /// was acknowledged after the last persist.
    #[default]
    AtLeastOnce,
    /// Records and the progress that covers them are committed in one transaction on the target: a
    /// `read_committed` reader sees every source record once (see `flow::copier::transactions`).
    ExactlyOnce,
}

impl Delivery {
    pub fn name(self) -> &'static str {
        match self {
            Self::AtLeastOnce => "at_least_once",
            Self::ExactlyOnce => "exactly_once",
        }
    }
}

/// The copier group's rebalance protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupProtocol {
    /// Kafka's classic group protocol with librdkafka's cooperative-sticky assignor, computed by the
    /// group leader in the client. Works with every broker; the assignor's time grows steeply with the
    /// partition count (librdkafka #4629): beyond about 5,000 partitions in one flow it outlasts the
    /// session timeout and the group never settles.
    Classic,
    /// KIP-848 (`group.protocol = consumer`): the broker assigns, incrementally, in milliseconds at any
    /// width. Needs Kafka 4.0+ brokers (or 3.7+ with the new protocol enabled).
    Consumer,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyKind {
    Default,
    Identity,
    /// `remote_topic = "..."`: a naming template (the text is in [`FlowSettings::remote_topic`]).
    Template,
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
    /// The header-carrying flows this flow shares record routes with (empty unless it carries the
    /// provenance header): see [`topology`].
    pub topology: Arc<topology::Topology>,
    /// `settings.record_rules` compiled.
    pub record_rules: Arc<crate::record_rules::RecordRules>,
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
            && self.topology == other.topology
    }
}

impl FlowPlan {
    /// Whether the flow copies the source topic `topic`: its topic filter, its heartbeats switch, never
    /// an internal topic nor one that would loop back to the target (MM2's `shouldReplicateTopic`).
    pub fn copies_topic(&self, topic: &str) -> bool {
        crate::filter::should_replicate_topic(
            &self.topic_filter,
            &self.policy,
            self.settings.heartbeats_replication_enabled,
            &self.id.target,
            topic,
        )
    }

    /// The cluster that holds the flow's offset-syncs topic, and the topic's name (MM2's rule,
    /// mm2-reference.md §2.1: named for the cluster that does not hold it).
    pub fn offset_syncs_topic(&self) -> (&ClusterSpec, String) {
        match self.settings.offset_syncs_topic_location {
            OffsetSyncsLocation::Source => (&self.source, self.policy.offset_syncs_topic(&self.id.target)),
            OffsetSyncsLocation::Target => (&self.target, self.policy.offset_syncs_topic(&self.id.source)),
        }
    }
}

/// Every cluster and flow of a flows directory, validated.
#[derive(Clone, Debug, Default)]
pub struct FlowSet {
    pub clusters: BTreeMap<String, ClusterSpec>,
    pub flows: BTreeMap<FlowId, FlowPlan>,
}

impl FlowSet {
    /// Every secret file (`${file:PATH}`) the set's clusters reference, sorted, without duplicates. A
    /// reload re-reads them all, so a rotated secret is picked up by the next reload; whoever decides
    /// whether the configuration changed (the reload's content hash) must include their contents.
    pub fn secret_files(&self) -> Vec<PathBuf> {
        let files: BTreeSet<PathBuf> = self.clusters.values().flat_map(|c| c.secret_files.iter().cloned()).collect();
        files.into_iter().collect()
    }

    /// A human-readable summary for `ferry validate`; secrets are redacted.
    pub fn describe(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        for c in self.clusters.values() {
            let _ = writeln!(out, "cluster {} bootstrap={} ({})", c.alias, c.bootstrap_servers, c.file.display());
            for (k, v) in c.shown_client() {
                let _ = writeln!(out, "  {k} = {v}");
            }
            if let Some(r) = &c.schema_registry {
                let _ = writeln!(out, "  schema registry {} ({})", r.url, r.auth_shown());
            }
        }
        for f in self.flows.values() {
            let s = &f.settings;
            let _ = writeln!(
                out,
                "flow {}{} ({})\n  topics={:?} exclude={:?}\n  groups={:?} exclude={:?}\n  policy={:?} separator={:?} \
                 {}refresh_topics={:?} emit_checkpoints={:?} emit_heartbeats={:?} offset_lag_max={} compression={}\n  delivery={}",
                f.id,
                if s.enabled { "" } else { " (disabled)" },
                f.file.display(),
                s.topics,
                s.topics_exclude,
                s.groups,
                s.groups_exclude,
                s.replication_policy,
                s.replication_policy_separator,
                s.remote_topic.as_ref().map(|t| format!("remote_topic={t:?} ")).unwrap_or_default(),
                s.refresh_topics_interval,
                s.emit_checkpoints_interval,
                s.emit_heartbeats_interval,
                s.offset_lag_max,
                s.compression,
                match s.delivery {
                    Delivery::AtLeastOnce => s.delivery.name().to_string(),
                    Delivery::ExactlyOnce => format!(
                        "{} transaction_interval_ms={} transaction_max_bytes={}",
                        s.delivery.name(),
                        s.transaction_interval.as_millis(),
                        s.transaction_max_bytes
                    ),
                },
            );
            let switches: Vec<String> = [
                ("emit_heartbeats", s.emit_heartbeats_enabled),
                ("emit_reverse_heartbeats", s.emit_reverse_heartbeats_enabled),
                ("heartbeats_replication", s.heartbeats_replication_enabled),
                ("emit_checkpoints", s.emit_checkpoints_enabled),
                ("emit_offset_syncs", s.emit_offset_syncs_enabled),
                ("sync_group_offsets", s.sync_group_offsets_enabled),
                ("sync_topic_configs", s.sync_topic_configs_enabled),
                ("sync_topic_acls", s.sync_topic_acls_enabled),
                ("protect_remote_topics", s.protect_remote_topics),
                ("refresh_topics", s.refresh_topics_enabled),
                ("refresh_groups", s.refresh_groups_enabled),
            ]
            .iter()
            .map(|(name, on)| format!("{name}={}", if *on { "on" } else { "off" }))
            .collect();
            let _ = writeln!(out, "  {} start_from={:?}", switches.join(" "), s.start_from);
            if s.schemas.mode != schema_registry::SchemaMode::Off {
                let _ = writeln!(
                    out,
                    "  schemas={:?} on_unknown_schema={:?} schemas_refresh={:?}",
                    s.schemas.mode, s.schemas.on_unknown, s.schemas.refresh_interval
                );
            }
            if s.topic_deletions != TopicDeletions::Off {
                let mode = if s.topic_deletions == TopicDeletions::On { "on" } else { "dry_run" };
                let _ = writeln!(out, "  sync_topic_deletions={mode} grace={:?}", s.topic_deletion_grace);
            }
            for rule in &s.record_rules.filters {
                let _ = writeln!(out, "  filter {}", rule.describe());
            }
            let h = &s.record_rules.headers;
            if !h.is_empty() {
                let _ = writeln!(out, "  headers drop={:?} rename={:?} insert={:?}", h.drop, h.rename, h.insert);
            }
            let writes = s.source_writes();
            if writes.is_empty() {
                let _ = writeln!(
                    out,
                    "  writes nothing to source `{}`: Read and Describe rights there suffice",
                    f.id.source
                );
            } else {
                for (setting, what) in writes {
                    let _ = writeln!(out, "  writes to source `{}`: {what} ({setting})", f.id.source);
                }
            }
        }
        out
    }
}
