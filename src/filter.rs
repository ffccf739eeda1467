//! Topic, consumer-group and topic-config filters, with MirrorMaker 2's default lists and its
//! `shouldReplicateTopic` gate (filters + internal topics + cycle detection).
//!
//! MM2 joins a list of Java regexes with `|` and requires a full-string match (`matches()`);
//! an empty list matches nothing. Patterns here use the Rust `regex` crate's syntax, which
//! covers what MM2 users write in practice (literals, `.*`, classes, alternation) but differs
//! from `java.util.regex` in places:
//!
//! * no lookaround (`(?=…)`, `(?!…)`, `(?<=…)`), backreferences, atomic groups, possessive
//!   quantifiers or `\Q…\E` quoting: such patterns are rejected with a [`PatternError`];
//! * `\d`, `\w`, `\s` and `.` are Unicode-aware, and `.` only excludes `\n` (Java's also
//!   excludes `\r`, `\u0085`, `\u2028`, `\u2029`). Topic names are ASCII without line breaks,
//!   so this only matters for unusual group ids.
//!
//! Splitting a comma-separated config value into patterns is the caller's job.

use std::marker::PhantomData;

use regex::Regex;

use crate::policy::{ReplicationPolicy, is_cycle};

/// MM2's `topics` default.
pub const DEFAULT_TOPICS: &[&str] = &[".*"];
/// MM2's `topics.exclude` default.
pub const DEFAULT_TOPICS_EXCLUDE: &[&str] = &[".*[\\-\\.]internal", ".*\\.replica", "__.*"];
/// MM2's `groups` default.
pub const DEFAULT_GROUPS: &[&str] = &[".*"];
/// MM2's `groups.exclude` default.
pub const DEFAULT_GROUPS_EXCLUDE: &[&str] = &["console-consumer-.*", "connect-.*", "__.*"];
/// MM2's `config.properties.exclude` default (`DefaultConfigPropertyFilter`, unchanged 3.4 → 4.x).
pub const DEFAULT_CONFIG_PROPERTIES_EXCLUDE: &[&str] = &[
    "follower\\.replication\\.throttled\\.replicas",
    "leader\\.replication\\.throttled\\.replicas",
    "message\\.timestamp\\.difference\\.max\\.ms",
    "message\\.timestamp\\.type",
    "unclean\\.leader\\.election\\.enable",
    "min\\.insync\\.replicas",
];

/// A pattern in a filter list did not compile.
#[derive(Clone, Debug, thiserror::Error)]
#[error("invalid pattern {pattern:?}: {source}")]
pub struct PatternError {
    /// The offending pattern as given (or the joined list, if only the combination failed).
    pub pattern: String,
    #[source]
    pub source: regex::Error,
}

/// A list of regexes matched like MM2's `Pattern.compile(String.join("|", list)).matcher(s)
/// .matches()`: a name is accepted if any pattern matches all of it.
#[derive(Clone, Debug)]
pub struct PatternList {
    /// `None` for the empty list, which matches nothing (an empty regex would match `""`).
    regex: Option<Regex>,
    patterns: Vec<String>,
}

impl PatternList {
    /// Compiles `patterns` into one anchored alternation.
    ///
    /// The patterns are joined raw (`^(?:p1|p2)$`) rather than each in its own group, as Java
    /// does; this keeps Java's behaviour for inline flags such as `(?i)`, which then reach into
    /// the later alternatives.
    ///
    /// # Errors
    ///
    /// [`PatternError`] naming the first pattern that does not compile on its own.
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> Result<Self, PatternError> {
        let patterns: Vec<String> = patterns.iter().map(|p| p.as_ref().to_owned()).collect();
        if patterns.is_empty() {
            return Ok(Self { regex: None, patterns });
        }
        // Compiling one by one pinpoints the bad entry; the joined regex alone would only say
        // that the whole list is wrong.
        for pattern in &patterns {
            Regex::new(pattern).map_err(|source| PatternError { pattern: pattern.clone(), source })?;
        }
        let joined = format!("^(?:{})$", patterns.join("|"));
        let regex = Regex::new(&joined).map_err(|source| PatternError { pattern: joined.clone(), source })?;
        Ok(Self { regex: Some(regex), patterns })
    }

    /// An empty list, matching nothing.
    #[must_use]
    pub fn empty() -> Self {
        Self { regex: None, patterns: Vec::new() }
    }

    /// Whether some pattern matches the whole of `name`.
    #[must_use]
    pub fn is_match(&self, name: &str) -> bool {
        self.regex.as_ref().is_some_and(|regex| regex.is_match(name))
    }

    /// The patterns as given.
    #[must_use]
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }
}

/// Compiles one of this module's constant lists, which the tests prove valid.
fn builtin(patterns: &[&str]) -> PatternList {
    match PatternList::new(patterns) {
        Ok(list) => list,
        Err(error) => unreachable!("built-in pattern list is invalid: {error}"),
    }
}

/// An include list and an exclude list, as MM2's `DefaultTopicFilter` (`topics` / `topics.exclude`) and
/// `DefaultGroupFilter` (`groups` / `groups.exclude`) use them: a name is admitted when it matches an
/// include pattern and no exclude pattern. `K` only selects the defaults and the method names.
#[derive(Clone, Debug)]
pub struct NameFilter<K> {
    pub include: PatternList,
    pub exclude: PatternList,
    kind: PhantomData<K>,
}

/// MM2's default lists of one kind of filter.
pub trait FilterDefaults {
    const INCLUDE: &'static [&'static str];
    const EXCLUDE: &'static [&'static str];
}

/// Topics: everything except `.*[\-\.]internal`, `.*\.replica`, `__.*`.
#[derive(Clone, Debug)]
pub enum Topics {}
/// Groups: every group except `console-consumer-.*`, `connect-.*`, `__.*`.
#[derive(Clone, Debug)]
pub enum Groups {}

impl FilterDefaults for Topics {
    const INCLUDE: &'static [&'static str] = DEFAULT_TOPICS;
    const EXCLUDE: &'static [&'static str] = DEFAULT_TOPICS_EXCLUDE;
}

impl FilterDefaults for Groups {
    const INCLUDE: &'static [&'static str] = DEFAULT_GROUPS;
    const EXCLUDE: &'static [&'static str] = DEFAULT_GROUPS_EXCLUDE;
}

/// `DefaultTopicFilter`.
pub type TopicFilter = NameFilter<Topics>;
/// `DefaultGroupFilter`.
pub type GroupFilter = NameFilter<Groups>;

impl<K> NameFilter<K> {
    /// A filter from compiled include and exclude lists.
    #[must_use]
    pub fn new(include: PatternList, exclude: PatternList) -> Self {
        Self { include, exclude, kind: PhantomData }
    }

    /// A filter from include and exclude pattern strings.
    ///
    /// # Errors
    ///
    /// [`PatternError`] for the first pattern that does not compile.
    pub fn from_patterns<S: AsRef<str>>(include: &[S], exclude: &[S]) -> Result<Self, PatternError> {
        Ok(Self::new(PatternList::new(include)?, PatternList::new(exclude)?))
    }

    fn admits(&self, name: &str) -> bool {
        self.include.is_match(name) && !self.exclude.is_match(name)
    }
}

impl<K: FilterDefaults> Default for NameFilter<K> {
    fn default() -> Self {
        Self::new(builtin(K::INCLUDE), builtin(K::EXCLUDE))
    }
}

impl TopicFilter {
    /// Whether the filter lists alone admit `topic` (no heartbeat, internal or cycle rules;
    /// see [`should_replicate_topic`]).
    #[must_use]
    pub fn should_replicate_topic(&self, topic: &str) -> bool {
        self.admits(topic)
    }
}

impl GroupFilter {
    /// Whether checkpoints should be emitted for consumer group `group`.
    #[must_use]
    pub fn should_replicate_group(&self, group: &str) -> bool {
        self.admits(group)
    }
}

/// `MirrorSourceConnector.shouldReplicateTopic` for the flow into `target_alias` (Kafka 4.x).
///
/// With `heartbeats` (`heartbeats.replication.enabled`, the only behaviour before 4.0), heartbeats
/// topics are replicated even when the topic filter excludes them, because `MirrorClient` relies on
/// them to discover replication hops; internal topics and topics that would loop back to the target
/// never are.
#[must_use]
pub fn should_replicate_topic(
    filter: &TopicFilter,
    policy: &ReplicationPolicy,
    heartbeats: bool,
    target_alias: &str,
    topic: &str,
) -> bool {
    (filter.should_replicate_topic(topic) || (heartbeats && policy.is_heartbeats_topic(topic)))
        && !policy.is_internal_topic(topic)
        && !is_cycle(policy, target_alias, topic)
}

/// `DefaultConfigPropertyFilter`: which source topic config properties are copied to the
/// remote topic (`config.properties.exclude`).
#[derive(Clone, Debug)]
pub struct ConfigPropertyFilter {
    pub exclude: PatternList,
}

impl ConfigPropertyFilter {
    /// A filter with a custom exclude list, or MM2's default when `exclude` is `None`. An empty
    /// custom list excludes nothing.
    ///
    /// # Errors
    ///
    /// [`PatternError`] for the first pattern that does not compile.
    pub fn new(exclude: Option<&[String]>) -> Result<Self, PatternError> {
        Ok(Self {
            exclude: match exclude {
                Some(patterns) => PatternList::new(patterns)?,
                None => builtin(DEFAULT_CONFIG_PROPERTIES_EXCLUDE),
            },
        })
    }

    /// Whether the topic config property `name` should be replicated.
    #[must_use]
    pub fn should_replicate_config(&self, name: &str) -> bool {
        !self.exclude.is_match(name)
    }
}

impl Default for ConfigPropertyFilter {
    fn default() -> Self {
        Self { exclude: builtin(DEFAULT_CONFIG_PROPERTIES_EXCLUDE) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(patterns: &[&str]) -> Vec<String> {
        patterns.iter().map(|p| (*p).to_owned()).collect()
    }

    // --- PatternList ----------------------------------------------------------------------

    #[test]
    fn builtin_lists_compile() {
        for list in [
            DEFAULT_TOPICS,
            DEFAULT_TOPICS_EXCLUDE,
            DEFAULT_GROUPS,
            DEFAULT_GROUPS_EXCLUDE,
            DEFAULT_CONFIG_PROPERTIES_EXCLUDE,
        ] {
            assert!(PatternList::new(list).is_ok(), "{list:?}");
        }
    }

    #[test]
    fn pattern_list_requires_a_full_match() {
        let list = PatternList::new(&["orders", "pay.*"]).unwrap();
        assert!(list.is_match("orders"));
        assert!(list.is_match("payments"));
        assert!(list.is_match("pay"));
        assert!(!list.is_match("orders2"));
        assert!(!list.is_match("my-orders"));
        assert!(!list.is_match("xpayments"));
        // `$` must not match before a trailing newline.
        assert!(!list.is_match("orders\n"));
        assert_eq!(list.patterns(), &strings(&["orders", "pay.*"])[..]);
    }

    #[test]
    fn alternation_inside_a_pattern_stays_anchored() {
        let list = PatternList::new(&["a|b", "c"]).unwrap();
        assert!(list.is_match("a"));
        assert!(list.is_match("b"));
        assert!(list.is_match("c"));
        assert!(!list.is_match("ab"));
        assert!(!list.is_match("xa"));
    }

    #[test]
    fn empty_list_matches_nothing() {
        let list = PatternList::new::<String>(&[]).unwrap();
        assert!(!list.is_match(""));
        assert!(!list.is_match("orders"));
        assert!(!PatternList::empty().is_match("x"));
        // ...while a list holding one empty pattern matches only the empty name, as in Java.
        let blank = PatternList::new(&[""]).unwrap();
        assert!(blank.is_match(""));
        assert!(!blank.is_match("x"));
    }

    #[test]
    fn inline_flags_reach_later_alternatives_like_java() {
        let list = PatternList::new(&["(?i)orders", "pay"]).unwrap();
        assert!(list.is_match("ORDERS"));
        assert!(list.is_match("PAY"));
    }

    #[test]
    fn bad_pattern_error_names_the_pattern() {
        let error = PatternList::new(&["orders", "pay(", "x"]).unwrap_err();
        assert_eq!(error.pattern, "pay(");
        let message = error.to_string();
        assert!(message.starts_with("invalid pattern \"pay(\": "), "{message}");

        // Java-only syntax is reported the same way.
        let lookahead = PatternList::new(&["(?!internal).*"]).unwrap_err();
        assert_eq!(lookahead.pattern, "(?!internal).*");
        let backref = PatternList::new(&["(a)\\1"]).unwrap_err();
        assert_eq!(backref.pattern, "(a)\\1");

        let topic_error = TopicFilter::from_patterns(&[".*"], &["[unclosed"]).unwrap_err();
        assert_eq!(topic_error.pattern, "[unclosed");
        let group_error = GroupFilter::from_patterns(&["*"], &[]).unwrap_err();
        assert_eq!(group_error.pattern, "*");
        let config_error = ConfigPropertyFilter::new(Some(&strings(&["a{"]))).unwrap_err();
        assert_eq!(config_error.pattern, "a{");
    }

    // --- TopicFilter ----------------------------------------------------------------------

    #[test]
    fn default_topic_filter() {
        let filter = TopicFilter::default();
        assert!(filter.should_replicate_topic("orders"));
        assert!(filter.should_replicate_topic("A.orders"));
        assert!(filter.should_replicate_topic("heartbeats"));
        assert!(!filter.should_replicate_topic("orders.internal"));
        assert!(!filter.should_replicate_topic("orders-internal"));
        assert!(!filter.should_replicate_topic("mm2-offsets.A.internal"));
        assert!(!filter.should_replicate_topic("A.checkpoints.internal"));
        assert!(!filter.should_replicate_topic("orders.replica"));
        assert!(!filter.should_replicate_topic("__consumer_offsets"));
        // `_internal` is not in the default exclude list.
        assert!(filter.should_replicate_topic("orders_internal"));
        assert!(filter.should_replicate_topic("replica.orders"));
    }

    #[test]
    fn topic_excludes_win_over_includes() {
        let filter = TopicFilter::from_patterns(&["orders.*", "payments"], &["orders-test"]).unwrap();
        assert!(filter.should_replicate_topic("orders"));
        assert!(filter.should_replicate_topic("orders-prod"));
        assert!(filter.should_replicate_topic("payments"));
        assert!(!filter.should_replicate_topic("orders-test"));
        assert!(!filter.should_replicate_topic("refunds"));
    }

    #[test]
    fn empty_topic_include_list_replicates_nothing() {
        let filter = TopicFilter::from_patterns::<String>(&[], &[]).unwrap();
        assert!(!filter.should_replicate_topic("orders"));
    }

    // --- GroupFilter ----------------------------------------------------------------------

    #[test]
    fn default_group_filter() {
        let filter = GroupFilter::default();
        assert!(filter.should_replicate_group("billing"));
        assert!(filter.should_replicate_group("consumer-console"));
        assert!(!filter.should_replicate_group("console-consumer-12345"));
        assert!(!filter.should_replicate_group("connect-my-sink"));
        assert!(!filter.should_replicate_group("__share"));
        assert!(filter.should_replicate_group("my-connect-group"));
    }

    #[test]
    fn custom_group_filter() {
        let filter = GroupFilter::from_patterns(&strings(&["app-.*"]), &strings(&["app-test-.*"])).unwrap();
        assert!(filter.should_replicate_group("app-billing"));
        assert!(!filter.should_replicate_group("app-test-1"));
        assert!(!filter.should_replicate_group("other"));
    }

    // --- shouldReplicateTopic -------------------------------------------------------------

    #[test]
    fn replicates_plain_topics_and_skips_internal_ones() {
        let filter = TopicFilter::default();
        let policy = ReplicationPolicy::default();
        assert!(should_replicate_topic(&filter, &policy, true, "B", "orders"));
        assert!(!should_replicate_topic(&filter, &policy, true, "B", "__consumer_offsets"));
        assert!(!should_replicate_topic(&filter, &policy, true, "B", ".hidden"));
        assert!(!should_replicate_topic(&filter, &policy, true, "B", "mm2-offset-syncs.B.internal"));
        assert!(!should_replicate_topic(&filter, &policy, true, "B", "C.checkpoints.internal"));
    }

    #[test]
    fn heartbeats_are_always_replicated() {
        let policy = ReplicationPolicy::default();
        // Even an include list that admits nothing and an exclude list naming them.
        let nothing = TopicFilter::from_patterns::<String>(&[], &[]).unwrap();
        let excluded = TopicFilter::from_patterns(&[".*"], &[".*heartbeats"]).unwrap();
        for filter in [&nothing, &excluded] {
            assert!(!filter.should_replicate_topic("heartbeats"));
            assert!(should_replicate_topic(filter, &policy, true, "B", "heartbeats"));
            assert!(should_replicate_topic(filter, &policy, true, "B", "C.heartbeats"));
        }
        assert!(!should_replicate_topic(&nothing, &policy, true, "B", "orders"));
        assert!(should_replicate_topic(&excluded, &policy, true, "B", "orders"));
        // ...but never back to the cluster they came from.
        assert!(!should_replicate_topic(&nothing, &policy, true, "B", "B.heartbeats"));
        assert!(!should_replicate_topic(&nothing, &policy, true, "A", "B.A.heartbeats"));
        // heartbeats.replication.enabled = false (MM2 4.0): only what the filter selects.
        assert!(!should_replicate_topic(&nothing, &policy, false, "B", "heartbeats"));
        assert!(!should_replicate_topic(&nothing, &policy, false, "B", "C.heartbeats"));
        let selected = TopicFilter::from_patterns(&["heartbeats"], &[]).unwrap();
        assert!(should_replicate_topic(&selected, &policy, false, "B", "heartbeats"));
    }

    #[test]
    fn active_active_flow_skips_cycles() {
        // Cluster A holds orders, B.orders, heartbeats, B.heartbeats; flow A -> B.
        let filter = TopicFilter::default();
        let policy = ReplicationPolicy::default();
        assert!(should_replicate_topic(&filter, &policy, true, "B", "orders"));
        assert!(should_replicate_topic(&filter, &policy, true, "B", "heartbeats"));
        assert!(!should_replicate_topic(&filter, &policy, true, "B", "B.orders"));
        assert!(!should_replicate_topic(&filter, &policy, true, "B", "B.heartbeats"));
        // Chain A -> B -> C with a flow C -> A.
        assert!(!should_replicate_topic(&filter, &policy, true, "A", "B.A.orders"));
    }

    #[test]
    fn kafka_4_lets_look_alike_internal_topics_through_a_permissive_filter() {
        let policy = ReplicationPolicy::default();
        let everything = TopicFilter::from_patterns(&[".*"], &[]).unwrap();
        assert!(should_replicate_topic(&everything, &policy, true, "B", "orders.internal"));
        assert!(should_replicate_topic(&everything, &policy, true, "B", "orders-internal"));
        // MM2's own topics stay internal regardless of the filter.
        assert!(!should_replicate_topic(&everything, &policy, true, "B", "mm2-status.A.internal"));
        // With the default excludes, look-alikes are still filtered out.
        let defaults = TopicFilter::default();
        assert!(!should_replicate_topic(&defaults, &policy, true, "B", "orders.internal"));
    }

    #[test]
    fn identity_policy_flow() {
        let filter = TopicFilter::default();
        let policy = ReplicationPolicy::identity(".", Some("A"));
        assert!(should_replicate_topic(&filter, &policy, true, "B", "orders"));
        assert!(should_replicate_topic(&filter, &policy, true, "B", "heartbeats"));
        assert!(!should_replicate_topic(&filter, &policy, true, "B", "B.heartbeats"));
    }

    // --- ConfigPropertyFilter -------------------------------------------------------------

    #[test]
    fn default_config_property_filter() {
        let filter = ConfigPropertyFilter::default();
        for excluded in [
            "follower.replication.throttled.replicas",
            "leader.replication.throttled.replicas",
            "message.timestamp.difference.max.ms",
            "message.timestamp.type",
            "unclean.leader.election.enable",
            "min.insync.replicas",
        ] {
            assert!(!filter.should_replicate_config(excluded), "{excluded}");
        }
        for kept in [
            "retention.ms",
            "cleanup.policy",
            "segment.bytes",
            "compression.type",
            "max.message.bytes",
            // Escaped dots are literal.
            "minXinsyncXreplicas",
            "min.insync.replicas.extra",
        ] {
            assert!(filter.should_replicate_config(kept), "{kept}");
        }
        let via_new = ConfigPropertyFilter::new(None).unwrap();
        assert!(!via_new.should_replicate_config("min.insync.replicas"));
    }

    #[test]
    fn custom_config_property_filter() {
        let filter = ConfigPropertyFilter::new(Some(&strings(&["retention\\..*"]))).unwrap();
        assert!(!filter.should_replicate_config("retention.ms"));
        assert!(!filter.should_replicate_config("retention.bytes"));
        // A custom list replaces the default one.
        assert!(filter.should_replicate_config("min.insync.replicas"));

        let none = ConfigPropertyFilter::new(Some(&[])).unwrap();
        assert!(none.should_replicate_config("min.insync.replicas"));
    }
}
