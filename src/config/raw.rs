//! The flow files exactly as an operator writes them: serde types with unknown keys rejected.
//!
//! Nothing here is trusted yet; `validate` turns these into a [`super::FlowSet`]. Optional keys are
//! `Option`s so that validation, not serde, decides the defaults (MM2's, see mm2-reference.md §8).

use std::collections::BTreeMap;

use serde::Deserialize;

/// One `*.toml` file in the flows directory. Any file may define clusters, flows, or both.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFile {
    #[serde(default)]
    pub clusters: BTreeMap<String, RawCluster>,
    #[serde(default)]
    pub flows: Vec<RawFlow>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCluster {
    pub bootstrap_servers: String,
    /// librdkafka properties applied to every client of this cluster.
    #[serde(default)]
    pub client: BTreeMap<String, RawValue>,
    /// The cluster's schema registry (flows with `schemas = "sync"` or `"translate"`).
    pub schema_registry: Option<RawRegistry>,
}

/// `[clusters.X.schema_registry]`: a Confluent-compatible schema registry API.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRegistry {
    pub url: String,
    pub username: Option<String>,
    pub password: Option<String>,
    pub bearer_token: Option<String>,
    pub ca_file: Option<String>,
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
    pub timeout_seconds: Option<f64>,
}

/// A librdkafka property value: operators write `"lz4"`, `5` or `true`; librdkafka wants strings.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum RawValue {
    String(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl RawValue {
    pub fn into_string(self) -> String {
        match self {
            Self::String(s) => s,
            Self::Int(i) => i.to_string(),
            Self::Float(f) => f.to_string(),
            Self::Bool(b) => b.to_string(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFlow {
    pub source: String,
    pub target: String,
    pub topics: Option<Vec<String>>,
    pub topics_exclude: Option<Vec<String>>,
    pub groups: Option<Vec<String>>,
    pub groups_exclude: Option<Vec<String>>,
    pub replication_policy: Option<String>,
    pub replication_policy_separator: Option<String>,
    /// A naming template for remote topics (`"{topic}.{source}"`) instead of a policy.
    pub remote_topic: Option<String>,
    pub replication_factor: Option<i32>,
    pub refresh_topics_interval_seconds: Option<f64>,
    pub emit_checkpoints_interval_seconds: Option<f64>,
    pub refresh_groups_interval_seconds: Option<f64>,
    pub emit_heartbeats_interval_seconds: Option<f64>,
    pub sync_group_offsets_enabled: Option<bool>,
    pub sync_group_offsets_interval_seconds: Option<f64>,
    pub sync_topic_configs_enabled: Option<bool>,
    pub sync_topic_configs_interval_seconds: Option<f64>,
    pub offset_lag_max: Option<i64>,
    pub offset_syncs_topic_location: Option<String>,
    /// Producer compression for copied records: none, gzip, snappy, lz4, zstd.
    pub compression: Option<String>,
    pub linger_ms: Option<f64>,
    pub batch_size_bytes: Option<i64>,
    pub enabled: Option<bool>,
    pub restart_backoff_initial_seconds: Option<f64>,
    pub restart_backoff_max_seconds: Option<f64>,
    pub restart_budget: Option<u32>,
    pub restart_healthy_after_seconds: Option<f64>,
    /// What the copier does when source records vanished before they were copied: "skip" or "fail".
    pub on_source_gap: Option<String>,
    /// Offset syncs kept per source partition for translating lagging groups (memory per partition).
    pub offset_sync_history_per_partition: Option<usize>,
    /// Identity policy: stamp and honour the `ferry.path` provenance header (loop protection).
    pub provenance_header: Option<bool>,
    /// Also export per-partition series (lag, records copied), as MM2 does for every partition.
    pub metrics_per_partition: Option<bool>,
    /// The copier group's rebalance protocol: "classic" or "consumer" (KIP-848).
    pub group_protocol: Option<String>,
    /// "at_least_once" (default) or "exactly_once": records and progress in one target transaction.
    pub delivery: Option<String>,
    /// Exactly-once: a transaction is committed after this long at most.
    pub transaction_interval_ms: Option<u64>,
    /// Exactly-once: a transaction is committed once it holds this many bytes of records.
    pub transaction_max_bytes: Option<u64>,
    /// Where MM2 kept its copy progress (Connect's `offset.storage.topic`), on the target.
    pub mm2_offsets_topic: Option<String>,
    /// The MM2 source connector's name: the first element of every progress record's key.
    pub mm2_source_connector: Option<String>,
    // MM2's switches (issue 20), under ferry's names; the configuration reference names each MM2 key.
    pub emit_heartbeats_enabled: Option<bool>,
    /// Heartbeats into the source's `heartbeats` (MM2's reverse heartbeat-only pair): writes to the source.
    pub emit_reverse_heartbeats_enabled: Option<bool>,
    /// MM2 4.0's `heartbeats.replication.enabled` (KIP-1089): heartbeats topics copied whatever `topics` says.
    pub heartbeats_replication_enabled: Option<bool>,
    pub emit_checkpoints_enabled: Option<bool>,
    pub emit_offset_syncs_enabled: Option<bool>,
    pub refresh_topics_enabled: Option<bool>,
    pub refresh_groups_enabled: Option<bool>,
    pub config_properties_exclude: Option<Vec<String>>,
    pub offset_syncs_topic_replication_factor: Option<i32>,
    pub checkpoints_topic_replication_factor: Option<i32>,
    pub heartbeats_topic_replication_factor: Option<i32>,
    pub sync_topic_acls_enabled: Option<bool>,
    pub sync_topic_acls_interval_seconds: Option<f64>,
    /// Make ferry the only writer of its remote topics (DENY Write bindings for every other writer).
    pub protect_remote_topics: Option<bool>,
    /// Where a partition with no stored progress starts: "earliest", "latest" or an RFC 3339 time.
    pub start_from: Option<String>,
    /// "off" (default), "sync" (subjects kept in step on the target registry) or "translate" (also each
    /// record's schema ID replaced by the target's).
    pub schemas: Option<String>,
    /// `translate`: "hold" (default) a partition on an ID that cannot be resolved, or "pass" it unchanged.
    pub on_unknown_schema: Option<String>,
    pub schemas_refresh_interval_seconds: Option<f64>,
    /// `false`: keys are never in the Confluent framing (strings, longs, UUIDs): not read or rewritten.
    pub schemas_keys: Option<bool>,
    /// Records not copied: `[[flows.filter]]` rules (see `record_rules`).
    pub filter: Option<Vec<RawFilterRule>>,
    /// `[flows.headers]`: headers dropped, renamed and inserted on every copied record.
    pub headers: Option<RawHeaderRules>,
    /// `true`, `false` or `"dry_run"`: delete remote topics ferry created once their source topic is gone.
    pub sync_topic_deletions: Option<RawValue>,
    pub topic_deletion_grace_seconds: Option<f64>,
}

/// One `[[flows.filter]]` rule: drops a record when every condition it states holds.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFilterRule {
    pub name: Option<String>,
    pub topics: Option<Vec<String>>,
    pub remote_topics: Option<Vec<String>>,
    pub header: Option<String>,
    pub header_value: Option<String>,
    pub key: Option<String>,
    pub older_than_seconds: Option<f64>,
    pub tombstone: Option<bool>,
    pub negate: Option<bool>,
}

/// `[flows.headers]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHeaderRules {
    pub drop: Option<Vec<String>>,
    pub rename: Option<BTreeMap<String, String>>,
    pub insert: Option<BTreeMap<String, String>>,
}
