//! Record filters and header rules: what MM2 users do with single message transforms and predicates
//! (Kafka's `Filter`, `InsertHeader`, `DropHeaders`, `TopicNameMatches`, `HasHeaderKey`,
//! `RecordIsTombstone`), as flow settings instead of a plug-in chain.
//!
//! A filtered record is not copied. The copier treats it as it treats a record the provenance rule
//! skips: the partition's position moves past it and the offset syncs describe the gap it leaves, so
//! checkpoints stay exact and exactly-once stays exactly-once. Heartbeats topics are never filtered nor
//! rewritten: their records are how topologies are discovered, in MM2's fixed layout. ferry's own
//! headers (`ferry.*`) cannot be named by a rule: they carry the provenance that stops loops.
//!
//! [`RecordRulesSpec`] is what the operator wrote (comparable, so a changed rule restarts its flow on
//! reload); [`RecordRules`] is compiled from it once per flow. Pure: no I/O, the clock is passed in.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::Duration;

use regex::bytes::Regex;

use crate::filter::PatternList;

/// Header names a rule may not touch: ferry's own (`ferry.path`, `ferry.origin`, ...).
const RESERVED_PREFIX: &str = "ferry.";

/// One `[[flows.filter]]` rule as written. `topics` and `remote_topics` say which topics the rule is
/// about; the record conditions (header, key, age, tombstone) say which of their records it drops, all
/// of them together. `negate` turns the record conditions around ("of these topics, keep only records
/// that match"), never the scope: records of other topics pass. A rule with a scope and no record
/// condition drops its topics' records, or with `negate` every other topic's (Kafka's `Filter` with a
/// negated `TopicNameMatches`: keep only these topics).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FilterSpec {
    /// The `rule` label of `ferry_records_filtered_total`; `filter[i]` when not named.
    pub name: String,
    /// Source topics the rule is about (full-match regexes, like `topics`); empty: every topic.
    pub topics: Vec<String>,
    /// The same by remote topic name (MM2's `TopicNameMatches` sees the remote name).
    pub remote_topics: Vec<String>,
    /// A header of this name is present.
    pub header: Option<String>,
    /// ... and one of them has a value this regex finds (anywhere: anchor with `^`/`$`).
    pub header_value: Option<String>,
    /// The key is present and this regex finds a match in its bytes.
    pub key: Option<String>,
    /// The record's timestamp is older than this when it is copied.
    pub older_than: Option<Duration>,
    /// The value is (`true`) or is not (`false`) null: a tombstone.
    pub tombstone: Option<bool>,
    pub negate: bool,
}

impl FilterSpec {
    /// `name: drops records [not] matching topics=... header=...`, for `ferry validate`.
    pub fn describe(&self) -> String {
        let mut conditions = Vec::new();
        if !self.topics.is_empty() {
            conditions.push(format!("topics={:?}", self.topics));
        }
        if !self.remote_topics.is_empty() {
            conditions.push(format!("remote_topics={:?}", self.remote_topics));
        }
        if let Some(h) = &self.header {
            conditions.push(format!("header={h:?}"));
        }
        if let Some(v) = &self.header_value {
            conditions.push(format!("header_value={v:?}"));
        }
        if let Some(k) = &self.key {
            conditions.push(format!("key={k:?}"));
        }
        if let Some(d) = self.older_than {
            conditions.push(format!("older_than={d:?}"));
        }
        if let Some(t) = self.tombstone {
            conditions.push(format!("tombstone={t}"));
        }
        let not = if self.negate { "not " } else { "" };
        format!("{}: drops records {not}matching {}", self.name, conditions.join(" "))
    }

    /// Whether the rule states any condition (a rule without one would drop everything).
    pub fn has_condition(&self) -> bool {
        self.has_scope() || self.has_record_condition()
    }

    /// Whether it names topics (source or remote).
    pub fn has_scope(&self) -> bool {
        !self.topics.is_empty() || !self.remote_topics.is_empty()
    }

    /// Whether it looks at the records themselves (besides their topic).
    pub fn has_record_condition(&self) -> bool {
        self.header.is_some() || self.key.is_some() || self.older_than.is_some() || self.tombstone.is_some()
    }
}

/// `[flows.headers]` as written: applied in this order to every copied record's headers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HeaderSpec {
    /// Headers removed (every header of each name).
    pub drop: Vec<String>,
    /// Headers renamed, old name to new; the value and position are kept.
    pub rename: BTreeMap<String, String>,
    /// Headers added after the others (Kafka's `InsertHeader` adds too: a header of the same name
    /// already on the record stays). Values are templates: see [`Template`].
    pub insert: BTreeMap<String, String>,
}

impl HeaderSpec {
    pub fn is_empty(&self) -> bool {
        self.drop.is_empty() && self.rename.is_empty() && self.insert.is_empty()
    }
}

/// A flow's record rules as written.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecordRulesSpec {
    pub filters: Vec<FilterSpec>,
    pub headers: HeaderSpec,
}

impl RecordRulesSpec {
    pub fn is_empty(&self) -> bool {
        self.filters.is_empty() && self.headers.is_empty()
    }

    /// Every mistake, as (key under the flow, reason): `filter[1].key`, `headers.insert.x`.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (i, f) in self.filters.iter().enumerate() {
            let k = |name: &str| format!("filter[{i}].{name}");
            if !f.has_condition() {
                out.push((
                    format!("filter[{i}]"),
                    "states no condition (topics, remote_topics, header, key, older_than_seconds or tombstone): it would drop every record; use topics_exclude to stop copying a topic"
                        .into(),
                ));
            }
            for (name, list) in [("topics", &f.topics), ("remote_topics", &f.remote_topics)] {
                if let Err(e) = PatternList::new(list) {
                    out.push((k(name), e.to_string()));
                }
            }
            if f.header_value.is_some() && f.header.is_none() {
                out.push((k("header_value"), "needs `header`: the name of the header whose value it matches".into()));
            }
            for (name, pattern) in [("header_value", &f.header_value), ("key", &f.key)] {
                if let Some(p) = pattern
                    && let Err(e) = Regex::new(p)
                {
                    out.push((k(name), format!("invalid pattern {p:?}: {e}")));
                }
            }
            if f.older_than.is_some_and(|d| d.is_zero()) {
                out.push((k("older_than_seconds"), "must be more than 0".into()));
            }
            if let Some(h) = &f.header {
                reserved(&k("header"), h, &mut out);
            }
            let taken = self.filters[..i].iter().any(|g| g.name == f.name);
            if taken {
                out.push((
                    k("name"),
                    format!("`{}` names an earlier rule too: each rule is counted by its name", f.name),
                ));
            }
        }
        let h = &self.headers;
        for name in &h.drop {
            reserved("headers.drop", name, &mut out);
            if h.rename.contains_key(name) {
                out.push(("headers.drop".into(), format!("`{name}` is both dropped and renamed")));
            }
        }
        for (from, to) in &h.rename {
            reserved(&format!("headers.rename.{from}"), from, &mut out);
            reserved(&format!("headers.rename.{from}"), to, &mut out);
            if to.is_empty() {
                out.push((format!("headers.rename.{from}"), "the new name is empty".into()));
            }
        }
        for (name, value) in &h.insert {
            let key = format!("headers.insert.{name}");
            reserved(&key, name, &mut out);
            if let Err(e) = Template::parse(value) {
                out.push((key, e));
            }
        }
        out
    }
}

fn reserved(key: &str, name: &str, out: &mut Vec<(String, String)>) {
    if name.starts_with(RESERVED_PREFIX) {
        out.push((
            key.to_string(),
            format!("`{name}`: headers starting with `{RESERVED_PREFIX}` are ferry's own (provenance) and cannot be filtered or rewritten"),
        ));
    }
}

/// What a filter sees of a record.
pub trait RecordView {
    fn key(&self) -> Option<&[u8]>;
    fn value_is_null(&self) -> bool;
    /// Milliseconds since the epoch; `None` when the record has none.
    fn timestamp_ms(&self) -> Option<i64>;
    /// Calls `f` with each header until it returns `true`; whether one did.
    fn any_header(&self, f: &mut dyn FnMut(&str, Option<&[u8]>) -> bool) -> bool;
}

struct Filter {
    /// `None`: every topic.
    topics: Option<PatternList>,
    remote_topics: Option<PatternList>,
    header: Option<String>,
    header_value: Option<Regex>,
    key: Option<Regex>,
    older_than_ms: Option<i64>,
    tombstone: Option<bool>,
    negate: bool,
    /// Some record condition is stated.
    looks_at_records: bool,
}

/// What a rule does with the records of one topic, decided once per topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopicVerdict {
    /// Every record of the topic passes this rule.
    Keep,
    /// Every record of the topic is dropped by this rule.
    Drop,
    /// Each record is checked against the rule's record conditions.
    Check,
}

impl Filter {
    fn compile(spec: &FilterSpec) -> Result<Self, String> {
        let regex = |p: &Option<String>| p.as_deref().map(Regex::new).transpose().map_err(|e| e.to_string());
        let list =
            |l: &Vec<String>| (!l.is_empty()).then(|| PatternList::new(l)).transpose().map_err(|e| e.to_string());
        Ok(Self {
            topics: list(&spec.topics)?,
            remote_topics: list(&spec.remote_topics)?,
            header: spec.header.clone(),
            header_value: regex(&spec.header_value)?,
            key: regex(&spec.key)?,
            older_than_ms: spec.older_than.map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            tombstone: spec.tombstone,
            negate: spec.negate,
            looks_at_records: spec.has_record_condition(),
        })
    }

    fn for_topic(&self, topic: &str, remote: &str) -> TopicVerdict {
        let in_scope = self.topics.as_ref().is_none_or(|t| t.is_match(topic))
            && self.remote_topics.as_ref().is_none_or(|t| t.is_match(remote));
        match (in_scope, self.looks_at_records) {
            (true, true) => TopicVerdict::Check,
            (false, true) => TopicVerdict::Keep,
            // A scope alone: its topics' records go (negated: every other topic's).
            (scoped, false) if scoped != self.negate => TopicVerdict::Drop,
            (_, false) => TopicVerdict::Keep,
        }
    }

    /// The record conditions (every one stated holds), turned around by `negate`: drop it?
    fn drops(&self, r: &dyn RecordView, now_ms: i64) -> bool {
        self.matches(r, now_ms) != self.negate
    }

    /// Every stated record condition holds (cheapest first).
    fn matches(&self, r: &dyn RecordView, now_ms: i64) -> bool {
        if self.tombstone.is_some_and(|t| t != r.value_is_null()) {
            return false;
        }
        if let Some(age) = self.older_than_ms {
            // A record without a timestamp is not older than anything.
            let Some(ts) = r.timestamp_ms() else { return false };
            if now_ms.saturating_sub(ts) <= age {
                return false;
            }
        }
        if let Some(k) = &self.key
            && !r.key().is_some_and(|key| k.is_match(key))
        {
            return false;
        }
        if let Some(name) = &self.header {
            let value = self.header_value.as_ref();
            let found =
                r.any_header(&mut |k, v| k == name && value.is_none_or(|re| v.is_some_and(|bytes| re.is_match(bytes))));
            if !found {
                return false;
            }
        }
        true
    }
}

/// A header value with placeholders: `{source}`, `{target}`, `{topic}` (the source topic),
/// `{partition}`, `{offset}`, `{timestamp}` (milliseconds); `{{` and `}}` are literal braces.
#[derive(Clone, Debug, PartialEq)]
pub struct Template(Vec<Part>);

#[derive(Clone, Debug, PartialEq)]
enum Part {
    Text(String),
    Source,
    Target,
    Topic,
    Partition,
    Offset,
    Timestamp,
}

impl Template {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    literal.push('}');
                }
                '{' => {
                    let mut name = String::new();
                    let closed = loop {
                        match chars.next() {
                            Some('}') => break true,
                            Some(c) => name.push(c),
                            None => break false,
                        }
                    };
                    if !closed {
                        return Err(format!("`{{{name}` is not closed: write `{{{{` for a brace"));
                    }
                    let part = match name.as_str() {
                        "source" => Part::Source,
                        "target" => Part::Target,
                        "topic" => Part::Topic,
                        "partition" => Part::Partition,
                        "offset" => Part::Offset,
                        "timestamp" => Part::Timestamp,
                        other => {
                            return Err(format!(
                                "unknown placeholder `{{{other}}}`; use {{source}}, {{target}}, {{topic}}, {{partition}}, {{offset}} or {{timestamp}} ({{{{ and }}}} for braces)"
                            ));
                        }
                    };
                    if !literal.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut literal)));
                    }
                    parts.push(part);
                }
                '}' => return Err("a lone `}`: write `}}` for a brace".into()),
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        Ok(Self(parts))
    }

    /// Appends the value for one record to `out`.
    pub fn render(&self, at: &Lineage<'_>, out: &mut String) {
        for part in &self.0 {
            // Writing to a String cannot fail.
            let _ = match part {
                Part::Text(t) => out.write_str(t),
                Part::Source => out.write_str(at.source),
                Part::Target => out.write_str(at.target),
                Part::Topic => out.write_str(at.topic),
                Part::Partition => write!(out, "{}", at.partition),
                Part::Offset => write!(out, "{}", at.offset),
                Part::Timestamp => match at.timestamp_ms {
                    Some(ts) => write!(out, "{ts}"),
                    None => Ok(()),
                },
            };
        }
    }
}

/// Where a copied record comes from, for inserted header values.
pub struct Lineage<'a> {
    pub source: &'a str,
    pub target: &'a str,
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub timestamp_ms: Option<i64>,
}

/// What becomes of a header of the source record.
#[derive(Debug, PartialEq, Eq)]
pub enum Fate<'a> {
    Keep,
    Drop,
    Rename(&'a str),
}

/// A flow's compiled rules.
#[derive(Default)]
pub struct RecordRules {
    filters: Vec<Filter>,
    /// `name` of each filter, its metric label.
    names: Vec<String>,
    /// Dropped (`None`) and renamed (`Some(new)`) headers.
    fates: HashMap<String, Option<String>>,
    insert: Vec<(String, Template)>,
}

impl std::fmt::Debug for RecordRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordRules").field("filters", &self.names).field("headers", &self.fates.len()).finish()
    }
}

impl RecordRules {
    /// Compiles validated rules; an error names the first part that does not compile (validation
    /// refuses those before a flow gets here).
    pub fn compile(spec: &RecordRulesSpec) -> Result<Self, String> {
        let filters = spec
            .filters
            .iter()
            .map(|f| Filter::compile(f).map_err(|e| format!("filter `{}`: {e}", f.name)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut fates = HashMap::new();
        for name in &spec.headers.drop {
            fates.insert(name.clone(), None);
        }
        for (from, to) in &spec.headers.rename {
            fates.insert(from.clone(), Some(to.clone()));
        }
        let insert = spec
            .headers
            .insert
            .iter()
            .map(|(name, value)| Template::parse(value).map(|t| (name.clone(), t)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { filters, names: spec.filters.iter().map(|f| f.name.clone()).collect(), fates, insert })
    }

    /// No rules at all: the copier's fast path.
    pub fn is_empty(&self) -> bool {
        self.filters.is_empty() && !self.rewrites_headers()
    }

    pub fn rewrites_headers(&self) -> bool {
        !self.fates.is_empty() || !self.insert.is_empty()
    }

    /// What each rule does with the records of source topic `topic` (remote name `remote`): decided once
    /// per topic, passed to [`RecordRules::dropped_by`] for each of its records.
    pub fn for_topic(&self, topic: &str, remote: &str) -> Vec<TopicVerdict> {
        self.filters.iter().map(|f| f.for_topic(topic, remote)).collect()
    }

    /// The first rule that drops the record (its index), `None` when it is copied; `verdicts` are its
    /// topic's ([`RecordRules::for_topic`]).
    pub fn dropped_by(&self, verdicts: &[TopicVerdict], r: &dyn RecordView, now_ms: i64) -> Option<usize> {
        self.filters.iter().zip(verdicts).position(|(f, v)| match v {
            TopicVerdict::Keep => false,
            TopicVerdict::Drop => true,
            TopicVerdict::Check => f.drops(r, now_ms),
        })
    }

    /// The name of rule `i` (the metric's `rule` label).
    pub fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    pub fn fate(&self, header: &str) -> Fate<'_> {
        match self.fates.get(header) {
            None => Fate::Keep,
            Some(None) => Fate::Drop,
            Some(Some(to)) => Fate::Rename(to),
        }
    }

    /// Headers to add, with their value templates.
    pub fn inserts(&self) -> &[(String, Template)] {
        &self.insert
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Rec {
        topic: &'static str,
        key: Option<&'static [u8]>,
        value: Option<&'static [u8]>,
        ts: Option<i64>,
        headers: Vec<(&'static str, Option<&'static [u8]>)>,
    }

    impl RecordView for Rec {
        fn key(&self) -> Option<&[u8]> {
            self.key
        }
        fn value_is_null(&self) -> bool {
            self.value.is_none()
        }
        fn timestamp_ms(&self) -> Option<i64> {
            self.ts
        }
        fn any_header(&self, f: &mut dyn FnMut(&str, Option<&[u8]>) -> bool) -> bool {
            self.headers.iter().any(|(k, v)| f(k, *v))
        }
    }

    fn rec() -> Rec {
        Rec { topic: "orders", key: Some(b"k-1"), value: Some(b"v"), ts: Some(1_000_000), headers: vec![] }
    }

    fn rules(filters: Vec<FilterSpec>) -> Rules {
        let spec = RecordRulesSpec { filters, headers: HeaderSpec::default() };
        assert_eq!(spec.problems(), vec![]);
        Rules(RecordRules::compile(&spec).expect("compiles"))
    }

    /// Rules checked as the copier does: the topic's verdicts first (remote name `east.<topic>`).
    struct Rules(RecordRules);

    impl Rules {
        fn dropped_by(&self, r: &Rec, now_ms: i64) -> Option<usize> {
            let verdicts = self.0.for_topic(r.topic, &format!("east.{}", r.topic));
            self.0.dropped_by(&verdicts, r, now_ms)
        }

        fn name(&self, i: usize) -> &str {
            self.0.name(i)
        }
    }

    fn named(name: &str) -> FilterSpec {
        FilterSpec { name: name.into(), ..FilterSpec::default() }
    }

    #[test]
    fn every_stated_condition_must_hold() {
        let r = rules(vec![FilterSpec {
            topics: vec!["orders".into()],
            header: Some("env".into()),
            header_value: Some("^test$".into()),
            ..named("a")
        }]);
        let mut x = rec();
        assert_eq!(r.dropped_by(&x, 0), None, "no header");
        x.headers = vec![("env", Some(b"prod"))];
        assert_eq!(r.dropped_by(&x, 0), None, "another value");
        x.headers = vec![("env", Some(b"prod")), ("env", Some(b"test"))];
        assert_eq!(r.dropped_by(&x, 0), Some(0), "any header of the name");
        x.topic = "payments";
        assert_eq!(r.dropped_by(&x, 0), None, "another topic");
        x.topic = "orders";
        x.headers = vec![("env", None)];
        assert_eq!(r.dropped_by(&x, 0), None, "a null value matches no pattern");
    }

    #[test]
    fn header_presence_key_tombstone_and_age() {
        let r = rules(vec![
            FilterSpec { header: Some("debug".into()), ..named("debug") },
            FilterSpec { key: Some("^tmp-".into()), ..named("tmp") },
            FilterSpec { tombstone: Some(true), ..named("tombstones") },
            FilterSpec { older_than: Some(Duration::from_secs(60)), ..named("old") },
        ]);
        let now = 1_000_000 + 30_000;
        assert_eq!(r.dropped_by(&rec(), now), None);
        let mut x = rec();
        x.headers = vec![("debug", None)];
        assert_eq!(r.dropped_by(&x, now), Some(0), "present, even with a null value");
        let mut x = rec();
        x.key = Some(b"tmp-9");
        assert_eq!(r.dropped_by(&x, now), Some(1));
        x.key = None;
        assert_eq!(r.dropped_by(&x, now), None, "no key matches no key pattern");
        let mut x = rec();
        x.value = None;
        assert_eq!(r.dropped_by(&x, now), Some(2));
        assert_eq!(r.dropped_by(&rec(), 1_000_000 + 60_001), Some(3), "older than 60 s");
        assert_eq!(r.dropped_by(&rec(), 1_000_000 + 60_000), None, "exactly 60 s is not older");
        let mut x = rec();
        x.ts = None;
        assert_eq!(r.dropped_by(&x, i64::MAX), None, "no timestamp: never old");
        assert_eq!(r.name(3), "old");
    }

    #[test]
    fn negate_keeps_only_what_matches() {
        // Kafka's Filter with `negate = true` on TopicNameMatches: only matching topics are kept.
        let r = rules(vec![FilterSpec { topics: vec!["orders.*".into()], negate: true, ..named("keep") }]);
        assert_eq!(r.dropped_by(&rec(), 0), None);
        let mut x = rec();
        x.topic = "payments";
        assert_eq!(r.dropped_by(&x, 0), Some(0));
        // By remote name, as MM2's predicate sees it.
        let r = rules(vec![FilterSpec { remote_topics: vec!["east\\.orders".into()], negate: true, ..named("keep") }]);
        assert_eq!(r.dropped_by(&rec(), 0), None);
        assert_eq!(r.dropped_by(&x, 0), Some(0));
    }

    #[test]
    fn negate_never_turns_the_scope_around() {
        // Of the orders topics keep only EU records; every other topic passes untouched.
        let r = rules(vec![FilterSpec {
            topics: vec!["orders.*".into()],
            header: Some("market".into()),
            header_value: Some("^eu$".into()),
            negate: true,
            ..named("eu-only")
        }]);
        let mut x = rec();
        x.headers = vec![("market", Some(b"us"))];
        assert_eq!(r.dropped_by(&x, 0), Some(0), "an orders record of another market");
        x.headers = vec![("market", Some(b"eu"))];
        assert_eq!(r.dropped_by(&x, 0), None);
        x.topic = "payments";
        x.headers = vec![("market", Some(b"us"))];
        assert_eq!(r.dropped_by(&x, 0), None, "another topic is out of the rule's scope");
        // A scope alone drops its topics.
        let r = rules(vec![FilterSpec { topics: vec!["orders".into()], ..named("drop-orders") }]);
        assert_eq!(r.dropped_by(&rec(), 0), Some(0));
        assert_eq!(r.dropped_by(&x, 0), None);
    }

    #[test]
    fn keys_are_matched_as_bytes() {
        let r = rules(vec![FilterSpec { key: Some(r"^\x00\x01".into()), ..named("bin") }]);
        let mut x = rec();
        x.key = Some(&[0, 1, 0xff, 0xfe]);
        assert_eq!(r.dropped_by(&x, 0), Some(0), "not UTF-8, still matched");
    }

    #[test]
    fn mistakes_are_named() {
        let spec = RecordRulesSpec {
            filters: vec![
                named("a"),
                FilterSpec { header_value: Some("x".into()), key: Some("(".into()), ..named("a") },
                FilterSpec { header: Some("ferry.path".into()), ..named("b") },
            ],
            headers: HeaderSpec {
                drop: vec!["x".into(), "ferry.origin".into()],
                rename: [("x".to_string(), "y".to_string())].into(),
                insert: [("lineage".to_string(), "{cluster}".to_string())].into(),
            },
        };
        let keys: Vec<String> = spec.problems().into_iter().map(|(k, r)| format!("{k}: {r}")).collect();
        let has = |key: &str, words: &str| {
            assert!(keys.iter().any(|k| k.starts_with(key) && k.contains(words)), "{key} / {words} in {keys:#?}")
        };
        has("filter[0]", "no condition");
        has("filter[1].header_value", "needs `header`");
        has("filter[1].key", "invalid pattern");
        has("filter[1].name", "earlier rule");
        has("filter[2].header", "ferry's own");
        has("headers.drop", "ferry's own");
        has("headers.drop", "both dropped and renamed");
        has("headers.insert.lineage", "unknown placeholder `{cluster}`");
    }

    #[test]
    fn templates_render_lineage() {
        let t =
            Template::parse("{source}/{topic}-{partition}@{offset} t={timestamp} {{x}} to {target}").expect("parses");
        let at = Lineage {
            source: "east",
            target: "west",
            topic: "orders",
            partition: 3,
            offset: 42,
            timestamp_ms: Some(1_700_000_000_000),
        };
        let mut out = String::new();
        t.render(&at, &mut out);
        assert_eq!(out, "east/orders-3@42 t=1700000000000 {x} to west");
        assert!(Template::parse("a } b").is_err());
        assert!(Template::parse("{offset").is_err(), "an unclosed placeholder");
    }

    #[test]
    fn header_fates() {
        let spec = RecordRulesSpec {
            filters: vec![],
            headers: HeaderSpec {
                drop: vec!["debug".into()],
                rename: [("trace".to_string(), "x-trace".to_string())].into(),
                insert: [("lineage".to_string(), "{source}".to_string())].into(),
            },
        };
        let r = RecordRules::compile(&spec).expect("compiles");
        assert_eq!(r.fate("debug"), Fate::Drop);
        assert_eq!(r.fate("trace"), Fate::Rename("x-trace"));
        assert_eq!(r.fate("other"), Fate::Keep);
        assert_eq!(r.inserts().len(), 1);
        assert!(r.rewrites_headers() && !r.is_empty());
        assert!(RecordRules::default().is_empty());
    }
}
