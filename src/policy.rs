//! Replication policy: how remote topics and MM2's internal topics are named, and how a topic
//! name is traced back to the cluster it came from (cycle detection).
//!
//! Ports Kafka's `DefaultReplicationPolicy` and `IdentityReplicationPolicy` with the Kafka 4.x
//! rules (`isMM2InternalTopic`/`isInternalTopic` after KAFKA-17200), so that names written by
//! ferry and by a Java MM2 deployment configured the same way are interchangeable. The
//! internal-topic separator is always the replication separator
//! (`replication.policy.internal.topic.separator.enabled=true`, the KIP-949 default).
//!
//! Adds ferry's naming templates (`remote_topic = "{topic}.{source}"`, [`template`]), read back
//! by matching the template's literal text, so that every caller (cycle detection, checkpoints,
//! fail-back, `translate`) works on them unchanged.

mod template;

pub use template::{NameTemplate, TemplateError};

/// The heartbeats topic name; never affected by the separator.
pub const HEARTBEATS_TOPIC: &str = "heartbeats";

/// MM2's default `replication.policy.separator`.
pub const DEFAULT_SEPARATOR: &str = ".";

/// A replication policy as configured by `replication.policy.class` and
/// `replication.policy.separator`.
///
/// The separator should be non-empty. Java does not reject an empty one; the behaviour for it
/// here is only defined well enough not to panic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplicationPolicy {
    /// `DefaultReplicationPolicy`: remote topics are named `<source alias><separator><topic>`.
    Default { separator: String },
    /// `IdentityReplicationPolicy`: remote topics keep their names (except heartbeats, which
    /// are still prefixed). `source_alias` is Java's `source.cluster.alias`; inside MM2's
    /// connectors it is always the flow's source alias.
    Identity { separator: String, source_alias: Option<String> },
    /// ferry's naming template (`remote_topic`): remote topics are named by `template`, read back by
    /// its literal text. `source_alias` stands in for the origin when the template has no `{source}`
    /// (like the identity policy's).
    ///
    /// Heartbeats and MM2's internal topics keep MM2's default names (`<source>.heartbeats`,
    /// `<alias>.checkpoints.internal`, separator `.`): MM2's tools (`RemoteClusterUtils`, topology
    /// discovery) find heartbeats and checkpoints by those names and cannot know a ferry template.
    Template { template: NameTemplate, source_alias: Option<String> },
}

impl Default for ReplicationPolicy {
    fn default() -> Self {
        Self::default_policy(DEFAULT_SEPARATOR)
    }
}

impl ReplicationPolicy {
    /// `DefaultReplicationPolicy` with the given separator.
    #[must_use]
    pub fn default_policy(separator: impl Into<String>) -> Self {
        Self::Default { separator: separator.into() }
    }

    /// `IdentityReplicationPolicy` with the given separator and `source.cluster.alias`.
    #[must_use]
    pub fn identity(separator: impl Into<String>, source_alias: Option<&str>) -> Self {
        Self::Identity { separator: separator.into(), source_alias: source_alias.map(str::to_owned) }
    }

    /// A naming template, with the alias that stands in for `{source}` when the template has none.
    #[must_use]
    pub fn template(template: NameTemplate, source_alias: Option<&str>) -> Self {
        Self::Template { template, source_alias: source_alias.map(str::to_owned) }
    }

    /// The separator between alias and topic in remote topic names, and of internal topic names
    /// (for a template: MM2's default, which only its heartbeats and internal topics use).
    #[must_use]
    pub fn separator(&self) -> &str {
        match self {
            Self::Default { separator } | Self::Identity { separator, .. } => separator,
            Self::Template { .. } => DEFAULT_SEPARATOR,
        }
    }

    /// Whether remote names carry the alias of the cluster they came from, so that cycles are
    /// seen in the names alone: the default policy and templates with `{source}`.
    #[must_use]
    pub fn names_source(&self) -> bool {
        match self {
            Self::Default { .. } => true,
            Self::Identity { .. } => false,
            Self::Template { template, .. } => template.has_source(),
        }
    }

    /// Name of `topic` from cluster `source_alias` once replicated (`formatRemoteTopic`).
    #[must_use]
    pub fn format_remote_topic(&self, source_alias: &str, topic: &str) -> String {
        if self.defers_to_default(topic) {
            return format!("{source_alias}{}{topic}", self.separator());
        }
        match self {
            Self::Template { template, .. } => template.format(source_alias, topic),
            _ => topic.to_owned(),
        }
    }

    /// Alias of the cluster `topic` was replicated from, `None` for a local topic
    /// (`topicSource`).
    ///
    /// The default policy reproduces Java's `topic.split(Pattern.quote(sep))[0]`, which drops
    /// trailing empty parts but keeps a leading one: `"foo."` is local, while `".foo"` comes
    /// from the cluster with the empty alias.
    #[must_use]
    pub fn topic_source(&self, topic: &str) -> Option<String> {
        match self {
            Self::Identity { source_alias, .. } if !self.defers_to_default(topic) => source_alias.clone(),
            Self::Template { template, source_alias } if !self.defers_to_default(topic) => {
                match template.read(topic)? {
                    (Some(source), _) => Some(source.to_owned()),
                    (None, _) => source_alias.clone(),
                }
            }
            _ => java_split_source(topic, self.separator()).map(str::to_owned),
        }
    }

    /// Name of `topic` on the cluster it was replicated from, `None` for a local topic
    /// (`upstreamTopic`). The identity policy returns the topic itself, since it cannot tell.
    #[must_use]
    pub fn upstream_topic(&self, topic: &str) -> Option<String> {
        if !self.defers_to_default(topic) {
            return match self {
                Self::Template { template, .. } => template.read(topic).map(|(_, upstream)| upstream.to_owned()),
                _ => Some(topic.to_owned()),
            };
        }
        let separator = self.separator();
        let source = java_split_source(topic, separator)?;
        // `java_split_source` only answers when a separator follows the source prefix (or, for
        // an empty separator, when more characters follow), so the slice is in bounds; `get`
        // keeps that an invariant rather than a panic.
        topic.get(source.len() + separator.len()..).map(str::to_owned)
    }

    /// The topic's name on the cluster where it was first produced, following `upstream_topic`
    /// over any number of hops (`originalTopic`). Stops when a policy cannot see further
    /// upstream (the identity policy returns the same name).
    #[must_use]
    pub fn original_topic(&self, topic: &str) -> String {
        let mut current = topic.to_owned();
        while let Some(upstream) = self.upstream_topic(&current) {
            if upstream == current {
                break;
            }
            current = upstream;
        }
        current
    }

    /// The heartbeats topic name (`heartbeatsTopic`).
    #[must_use]
    pub fn heartbeats_topic(&self) -> &'static str {
        HEARTBEATS_TOPIC
    }

    /// Whether `topic` is a heartbeats topic, local or replicated any number of hops
    /// (`heartbeats`, `A.heartbeats`, `B.A.heartbeats`).
    #[must_use]
    pub fn is_heartbeats_topic(&self, topic: &str) -> bool {
        match self {
            // Heartbeats keep MM2's default names under a template.
            Self::Template { .. } => Self::default().is_heartbeats_topic(topic),
            _ => self.original_topic(topic) == HEARTBEATS_TOPIC,
        }
    }

    /// `mm2-offset-syncs<sep><alias><sep>internal`.
    #[must_use]
    pub fn offset_syncs_topic(&self, cluster_alias: &str) -> String {
        let sep = self.separator();
        format!("mm2-offset-syncs{sep}{cluster_alias}{sep}internal")
    }

    /// `<alias><sep>checkpoints<sep>internal`.
    #[must_use]
    pub fn checkpoints_topic(&self, cluster_alias: &str) -> String {
        let sep = self.separator();
        format!("{cluster_alias}{sep}checkpoints{sep}internal")
    }

    /// Whether `topic` is some cluster's checkpoints topic.
    #[must_use]
    pub fn is_checkpoints_topic(&self, topic: &str) -> bool {
        let sep = self.separator();
        topic.ends_with(&format!("{sep}checkpoints{sep}internal"))
    }

    /// Whether `topic` is one of MM2's own internal topics (Kafka 4.0+, KAFKA-17200): an
    /// `mm2…<sep>internal` topic or a checkpoints topic.
    #[must_use]
    pub fn is_mm2_internal_topic(&self, topic: &str) -> bool {
        let internal_suffix = format!("{}internal", self.separator());
        (topic.starts_with("mm2") && topic.ends_with(&internal_suffix)) || self.is_checkpoints_topic(topic)
    }

    /// Whether `topic` is internal and so never replicated (Kafka 4.0+): MM2-internal, or a
    /// Kafka-internal (`__…`) or hidden (`.…`) topic. Since 4.0 user topics merely ending in
    /// `-internal`/`.internal` are not internal.
    #[must_use]
    pub fn is_internal_topic(&self, topic: &str) -> bool {
        self.is_mm2_internal_topic(topic) || topic.starts_with("__") || topic.starts_with('.')
    }

    /// The identity policy delegates heartbeat-looking names to the default rules so heartbeats
    /// keep their prefixes and hop tracking. A template delegates heartbeats topics only (by the
    /// default rules: `heartbeats`, `A.heartbeats`, ...), not every name ending in `heartbeats`:
    /// Java's suffix test is kept where MM2 compatibility asks for it, not carried into new naming.
    fn defers_to_default(&self, topic: &str) -> bool {
        match self {
            Self::Default { .. } => true,
            Self::Identity { .. } => looks_like_heartbeat(topic),
            Self::Template { .. } => self.is_heartbeats_topic(topic),
        }
    }
}

/// Java's `IdentityReplicationPolicy.looksLikeHeartbeat`: a suffix test, so `myheartbeats`
/// counts too.
fn looks_like_heartbeat(topic: &str) -> bool {
    topic.ends_with(HEARTBEATS_TOPIC)
}

/// `parts[0]` of Java's `topic.split(Pattern.quote(separator))` when there are at least two
/// parts after trailing empty parts are dropped.
fn java_split_source<'a>(topic: &'a str, separator: &str) -> Option<&'a str> {
    if separator.is_empty() {
        // Java splits between every UTF-16 unit here; with >= 2 units the first is the source.
        let mut chars = topic.char_indices();
        let _first = chars.next()?;
        let (second_at, _) = chars.next()?;
        return topic.get(..second_at);
    }
    let mut parts: Vec<&str> = topic.split(separator).collect();
    while parts.last().is_some_and(|part| part.is_empty()) {
        parts.pop();
    }
    if parts.len() < 2 { None } else { Some(parts[0]) }
}

/// Whether replicating `topic` into the cluster `target_alias` would close a loop: the topic,
/// or any topic it was replicated from, originated on the target (`MirrorSourceConnector.isCycle`).
///
/// Gives up (returns `false`) as soon as the policy cannot name a different upstream topic,
/// which is always the case for the identity policy's non-heartbeat topics: identity topologies
/// must be acyclic.
#[must_use]
pub fn is_cycle(policy: &ReplicationPolicy, target_alias: &str, topic: &str) -> bool {
    let mut current = topic.to_owned();
    loop {
        let Some(source) = policy.topic_source(&current) else {
            return false;
        };
        if source == target_alias {
            return true;
        }
        match policy.upstream_topic(&current) {
            Some(upstream) if upstream != current => current = upstream,
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dflt() -> ReplicationPolicy {
        ReplicationPolicy::default()
    }

    fn underscore() -> ReplicationPolicy {
        ReplicationPolicy::default_policy("_")
    }

    // --- DefaultReplicationPolicy naming -------------------------------------------------

    #[test]
    fn formats_remote_topics_with_the_separator() {
        assert_eq!(dflt().format_remote_topic("A", "orders"), "A.orders");
        assert_eq!(dflt().format_remote_topic("B", "A.orders"), "B.A.orders");
        assert_eq!(underscore().format_remote_topic("A", "orders"), "A_orders");
        assert_eq!(ReplicationPolicy::default_policy("__").format_remote_topic("us-west", "topic1"), "us-west__topic1");
    }

    #[test]
    fn topic_source_and_upstream_of_remote_topics() {
        let p = dflt();
        assert_eq!(p.topic_source("us-west.topic1").as_deref(), Some("us-west"));
        assert_eq!(p.upstream_topic("us-west.topic1").as_deref(), Some("topic1"));
        assert_eq!(p.topic_source("B.A.orders").as_deref(), Some("B"));
        assert_eq!(p.upstream_topic("B.A.orders").as_deref(), Some("A.orders"));
        assert_eq!(p.original_topic("B.A.orders"), "orders");
        assert_eq!(p.topic_source("orders"), None);
        assert_eq!(p.upstream_topic("orders"), None);
        assert_eq!(p.original_topic("orders"), "orders");
    }

    #[test]
    fn topic_source_follows_java_split_semantics() {
        let p = dflt();
        assert_eq!(p.topic_source("A.b.c").as_deref(), Some("A"));
        assert_eq!(p.upstream_topic("A.b.c").as_deref(), Some("b.c"));
        // Trailing empty parts are dropped: ["foo"] has fewer than two parts.
        assert_eq!(p.topic_source("foo."), None);
        assert_eq!(p.topic_source("foo..."), None);
        assert_eq!(p.upstream_topic("foo."), None);
        assert_eq!(p.original_topic("foo."), "foo.");
        // A leading empty part is kept: the empty alias.
        assert_eq!(p.topic_source(".foo").as_deref(), Some(""));
        assert_eq!(p.upstream_topic(".foo").as_deref(), Some("foo"));
        assert_eq!(p.topic_source("a..b").as_deref(), Some("a"));
        assert_eq!(p.upstream_topic("a..b").as_deref(), Some(".b"));
        assert_eq!(p.original_topic("a..b"), "b");
        assert_eq!(p.topic_source(""), None);
        assert_eq!(p.topic_source("."), None);
        // Caveat of the policy: any dotted local name looks remote.
        assert_eq!(p.topic_source("my.topic").as_deref(), Some("my"));
    }

    #[test]
    fn multi_character_separators_split_left_to_right() {
        let p = ReplicationPolicy::default_policy("__");
        assert_eq!(p.topic_source("A__orders").as_deref(), Some("A"));
        assert_eq!(p.upstream_topic("A__orders").as_deref(), Some("orders"));
        assert_eq!(p.topic_source("A___x").as_deref(), Some("A"));
        assert_eq!(p.upstream_topic("A___x").as_deref(), Some("_x"));
        assert_eq!(p.topic_source("A.orders"), None);
        // The separator is literal, not a regex.
        let dot = dflt();
        assert_eq!(dot.topic_source("AxB"), None);
    }

    #[test]
    fn empty_separator_does_not_panic() {
        let p = ReplicationPolicy::default_policy("");
        assert_eq!(p.topic_source("ab").as_deref(), Some("a"));
        assert_eq!(p.upstream_topic("ab").as_deref(), Some("b"));
        assert_eq!(p.topic_source("a"), None);
        assert_eq!(p.topic_source("éx").as_deref(), Some("é"));
        assert_eq!(p.original_topic("abc"), "c");
    }

    // --- Internal topic names (ReplicationPolicyTest) -------------------------------------

    #[test]
    fn internal_topic_names_use_the_separator() {
        assert_eq!(dflt().offset_syncs_topic("B"), "mm2-offset-syncs.B.internal");
        assert_eq!(dflt().checkpoints_topic("A"), "A.checkpoints.internal");
        assert_eq!(underscore().offset_syncs_topic("B"), "mm2-offset-syncs_B_internal");
        assert_eq!(underscore().checkpoints_topic("A"), "A_checkpoints_internal");
        let dunder = ReplicationPolicy::default_policy("__");
        assert_eq!(dunder.offset_syncs_topic("CLUSTER"), "mm2-offset-syncs__CLUSTER__internal");
        assert_eq!(dunder.checkpoints_topic("CLUSTER"), "CLUSTER__checkpoints__internal");
    }

    #[test]
    fn heartbeats_topic_ignores_the_separator() {
        assert_eq!(dflt().heartbeats_topic(), "heartbeats");
        assert_eq!(ReplicationPolicy::default_policy("__").heartbeats_topic(), "heartbeats");
        assert_eq!(ReplicationPolicy::identity("_", None).heartbeats_topic(), "heartbeats");
    }

    #[test]
    fn recognises_heartbeats_topics_over_hops() {
        let p = dflt();
        assert!(p.is_heartbeats_topic("heartbeats"));
        assert!(p.is_heartbeats_topic("A.heartbeats"));
        assert!(p.is_heartbeats_topic("B.A.heartbeats"));
        assert!(!p.is_heartbeats_topic("heartbeats.A"));
        assert!(!p.is_heartbeats_topic("myheartbeats"));
        assert!(!p.is_heartbeats_topic("A_heartbeats"));
        assert!(underscore().is_heartbeats_topic("A_heartbeats"));
    }

    #[test]
    fn recognises_checkpoints_topics() {
        assert!(dflt().is_checkpoints_topic("A.checkpoints.internal"));
        assert!(!dflt().is_checkpoints_topic("A_checkpoints_internal"));
        assert!(underscore().is_checkpoints_topic("A_checkpoints_internal"));
        assert!(!underscore().is_checkpoints_topic("A.checkpoints.internal"));
    }

    #[test]
    fn internal_topics_follow_the_kafka_4_rule() {
        let p = dflt();
        // Kafka internal and hidden topics.
        assert!(p.is_internal_topic("__consumer_offsets"));
        assert!(p.is_internal_topic(".hiddentopic"));
        // MM2 and Connect (dedicated mode) internal topics.
        assert!(p.is_internal_topic("mm2-offsets.CLUSTER.internal"));
        assert!(p.is_internal_topic("mm2-status.A.internal"));
        assert!(p.is_internal_topic("mm2-configs.A.internal"));
        assert!(p.is_internal_topic("mm2-offset-syncs.B.internal"));
        assert!(p.is_internal_topic("A.checkpoints.internal"));
        assert!(p.is_mm2_internal_topic("mm2-offset-syncs.B.internal"));
        assert!(p.is_mm2_internal_topic("A.checkpoints.internal"));
        // KAFKA-17200: user topics that only look internal are no longer internal.
        assert!(!p.is_internal_topic("mm2-offsets-CLUSTER-internal"));
        assert!(!p.is_internal_topic("mm2-offsets_CLUSTER_internal"));
        assert!(!p.is_internal_topic("orders.internal"));
        assert!(!p.is_internal_topic("orders-internal"));
        assert!(!p.is_mm2_internal_topic("orders.internal"));
        assert!(!p.is_internal_topic("orders"));
        assert!(!p.is_internal_topic("heartbeats"));
        assert!(!p.is_internal_topic("_single_underscore"));
    }

    #[test]
    fn internal_topics_with_a_custom_separator() {
        let p = underscore();
        assert!(p.is_internal_topic("mm2-offset-syncs_B_internal"));
        assert!(p.is_internal_topic("A_checkpoints_internal"));
        assert!(p.is_mm2_internal_topic("mm2-offsets_CLUSTER_internal"));
        // With `_`, the dotted forms are not MM2's own topics any more.
        assert!(!p.is_mm2_internal_topic("orders.checkpoints.internal"));
        assert!(!p.is_internal_topic("x.checkpoints.internal"));
        assert!(p.is_internal_topic("__consumer_offsets"));
    }

    // --- IdentityReplicationPolicy (IdentityReplicationPolicyTest) ------------------------

    #[test]
    fn identity_keeps_names_except_heartbeats() {
        let p = ReplicationPolicy::identity(".", Some("A"));
        assert_eq!(p.format_remote_topic("A", "orders"), "orders");
        assert_eq!(p.format_remote_topic("A", "B.orders"), "B.orders");
        assert_eq!(p.format_remote_topic("A", "heartbeats"), "A.heartbeats");
        assert_eq!(p.format_remote_topic("B", "A.heartbeats"), "B.A.heartbeats");
        // A suffix match, exactly like Java's looksLikeHeartbeat.
        assert_eq!(p.format_remote_topic("A", "myheartbeats"), "A.myheartbeats");
    }

    #[test]
    fn identity_topic_source_is_the_configured_alias() {
        let with_alias = ReplicationPolicy::identity(".", Some("A"));
        assert_eq!(with_alias.topic_source("orders").as_deref(), Some("A"));
        assert_eq!(with_alias.topic_source("B.orders").as_deref(), Some("A"));
        assert_eq!(with_alias.upstream_topic("orders").as_deref(), Some("orders"));
        assert_eq!(with_alias.original_topic("orders"), "orders");
        assert_eq!(with_alias.original_topic("B.orders"), "B.orders");

        let without = ReplicationPolicy::identity(".", None);
        assert_eq!(without.topic_source("orders"), None);
        assert_eq!(without.upstream_topic("orders").as_deref(), Some("orders"));
    }

    #[test]
    fn identity_heartbeats_use_default_rules() {
        let p = ReplicationPolicy::identity(".", Some("A"));
        assert_eq!(p.topic_source("heartbeats"), None);
        assert_eq!(p.upstream_topic("heartbeats"), None);
        assert_eq!(p.topic_source("B.heartbeats").as_deref(), Some("B"));
        assert_eq!(p.upstream_topic("B.A.heartbeats").as_deref(), Some("A.heartbeats"));
        assert_eq!(p.original_topic("B.A.heartbeats"), "heartbeats");
        assert!(p.is_heartbeats_topic("heartbeats"));
        assert!(p.is_heartbeats_topic("A.heartbeats"));
        assert!(p.is_heartbeats_topic("B.A.heartbeats"));
        assert!(!p.is_heartbeats_topic("orders"));
        // Relies on the separator to find heartbeats (apache/kafka#15932).
        let underscored = ReplicationPolicy::identity("_", None);
        assert!(underscored.is_heartbeats_topic("A_heartbeats"));
        assert!(!underscored.is_heartbeats_topic("A.heartbeats"));
    }

    #[test]
    fn identity_internal_topics_match_default() {
        let p = ReplicationPolicy::identity("_", Some("A"));
        assert_eq!(p.offset_syncs_topic("B"), "mm2-offset-syncs_B_internal");
        assert_eq!(p.checkpoints_topic("A"), "A_checkpoints_internal");
        assert!(p.is_internal_topic("A_checkpoints_internal"));
        assert!(p.is_checkpoints_topic("A_checkpoints_internal"));
    }

    // --- Cycle detection (§3.4) ------------------------------------------------------------

    #[test]
    fn active_active_cycles() {
        // Cluster A holds orders, B.orders, heartbeats, B.heartbeats; flow A -> B.
        let p = dflt();
        assert!(!is_cycle(&p, "B", "orders"));
        assert!(!is_cycle(&p, "B", "heartbeats"));
        assert!(is_cycle(&p, "B", "B.orders"));
        assert!(is_cycle(&p, "B", "B.heartbeats"));
        // And the reverse flow B -> A.
        assert!(is_cycle(&p, "A", "A.orders"));
        assert!(!is_cycle(&p, "A", "orders"));
    }

    #[test]
    fn multi_hop_cycles() {
        let p = dflt();
        // Chain A -> B -> C; C -> A would bring A's own data home.
        assert!(is_cycle(&p, "A", "B.A.orders"));
        assert!(is_cycle(&p, "A", "C.B.A.orders"));
        assert!(is_cycle(&p, "A", "B.A.heartbeats"));
        assert!(!is_cycle(&p, "D", "C.B.A.orders"));
        assert!(!is_cycle(&p, "C", "B.A.orders"));
    }

    #[test]
    fn cycles_with_custom_separator() {
        let p = underscore();
        assert!(is_cycle(&p, "B", "B_orders"));
        assert!(is_cycle(&p, "A", "B_A_orders"));
        assert!(!is_cycle(&p, "B", "B.orders"));
    }

    #[test]
    fn identity_cannot_detect_data_cycles() {
        // Inside MM2 the identity policy carries the flow's source alias (A for A -> B).
        let p = ReplicationPolicy::identity(".", Some("A"));
        assert!(!is_cycle(&p, "B", "orders"));
        assert!(!is_cycle(&p, "B", "B.orders"));
        // Heartbeats still follow default naming, so their cycles are caught.
        assert!(is_cycle(&p, "B", "B.heartbeats"));
        assert!(!is_cycle(&p, "B", "heartbeats"));
        // If the configured alias were the target itself, every topic would be a cycle.
        let misconfigured = ReplicationPolicy::identity(".", Some("B"));
        assert!(is_cycle(&misconfigured, "B", "orders"));
    }

    #[test]
    fn empty_alias_edge_case() {
        // ".foo" comes from the cluster with the empty alias.
        assert!(is_cycle(&dflt(), "", ".foo"));
        assert!(!is_cycle(&dflt(), "A", ".foo"));
    }

    // --- Naming templates ---------------------------------------------------------------------

    fn templated(text: &str, alias: &str) -> ReplicationPolicy {
        ReplicationPolicy::template(NameTemplate::parse(text).expect("valid template"), Some(alias))
    }

    #[test]
    fn template_names_and_reads_back_over_hops() {
        let p = templated("{topic}.{source}", "east");
        assert_eq!(p.format_remote_topic("east", "orders"), "orders.east");
        assert_eq!(p.topic_source("orders.east").as_deref(), Some("east"));
        assert_eq!(p.upstream_topic("orders.east").as_deref(), Some("orders"));
        assert_eq!(p.topic_source("orders.east.west").as_deref(), Some("west"));
        assert_eq!(p.original_topic("orders.east.west"), "orders");
        assert_eq!(p.topic_source("orders"), None);
        assert_eq!(p.upstream_topic("orders"), None);
        assert!(p.names_source());
    }

    #[test]
    fn template_keeps_mm2_heartbeats_and_internal_names() {
        let p = templated("{source}_{topic}_v2", "east");
        assert_eq!(p.format_remote_topic("east", "heartbeats"), "east.heartbeats");
        assert_eq!(p.format_remote_topic("west", "east.heartbeats"), "west.east.heartbeats");
        assert!(p.is_heartbeats_topic("west.east.heartbeats"));
        assert!(!p.is_heartbeats_topic("east_heartbeats_v2"));
        assert_eq!(p.topic_source("east.heartbeats").as_deref(), Some("east"));
        // Only heartbeats topics are MM2-named, not every name that ends like one.
        assert_eq!(p.format_remote_topic("east", "myheartbeats"), "east_myheartbeats_v2");
        assert_eq!(p.checkpoints_topic("east"), "east.checkpoints.internal");
        assert_eq!(p.offset_syncs_topic("west"), "mm2-offset-syncs.west.internal");
        assert!(p.is_internal_topic("east.checkpoints.internal"));
        assert_eq!(p.separator(), ".");
    }

    #[test]
    fn template_cycles_are_seen_in_names() {
        // east <-> west with `{topic}.{source}`: west holds orders.east, east holds orders.west.
        let west_to_east = templated("{topic}.{source}", "west");
        assert!(is_cycle(&west_to_east, "east", "orders.east"));
        assert!(!is_cycle(&west_to_east, "east", "orders"));
        assert!(is_cycle(&west_to_east, "east", "east.heartbeats"));
        assert!(is_cycle(&west_to_east, "east", "orders.east.c"));
        assert!(!is_cycle(&west_to_east, "east", "orders.c"));
    }

    #[test]
    fn template_without_source_reads_the_flows_alias() {
        let p = templated("dr-{topic}", "east");
        assert!(!p.names_source());
        assert_eq!(p.format_remote_topic("east", "orders"), "dr-orders");
        assert_eq!(p.topic_source("dr-orders").as_deref(), Some("east"));
        assert_eq!(p.upstream_topic("dr-orders").as_deref(), Some("orders"));
        assert_eq!(p.topic_source("orders"), None);
        assert_eq!(p.original_topic("dr-dr-orders"), "orders");
        // Names cannot show a cycle: validation refuses such a flow on one.
        assert!(!is_cycle(&p, "west", "dr-orders"));
    }

    #[test]
    fn constructors_and_default() {
        assert_eq!(ReplicationPolicy::default(), ReplicationPolicy::Default { separator: ".".to_owned() });
        assert_eq!(
            ReplicationPolicy::identity("_", Some("A")),
            ReplicationPolicy::Identity { separator: "_".to_owned(), source_alias: Some("A".to_owned()) }
        );
        assert_eq!(underscore().separator(), "_");
    }
}
