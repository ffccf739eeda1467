//! A flow's record rules in the copy loop: which records its filters drop (counted per topic and rule in
//! `ferry_records_filtered_total`), and the headers a copy carries.
//!
//! Per record this is one map lookup by topic (the rules are not consulted at all for a flow without
//! any); heartbeats topics are looked up once and then always pass untouched (see `record_rules`).

use std::collections::HashMap;
use std::sync::Arc;

use prometheus::IntCounter;
use rdkafka::message::{BorrowedMessage, Header, Headers, Message, OwnedHeaders};

use super::provenance;
use crate::config::FlowPlan;
use crate::metrics::METRICS;
use crate::policy::ReplicationPolicy;
use crate::record_rules::{Fate, Lineage, RecordRules, RecordView};

/// What the rules make of one source topic.
struct TopicRules {
    /// A heartbeats topic: never filtered nor rewritten.
    exempt: bool,
    /// `ferry_records_filtered_total{flow, topic, rule}`, one per filter (none when exempt).
    filtered: Vec<IntCounter>,
}

pub(super) struct CopyRules {
    flow: String,
    source: String,
    target: String,
    rules: Arc<RecordRules>,
    policy: ReplicationPolicy,
    topics: HashMap<String, TopicRules>,
    /// Inserted header values are rendered here, one record at a time.
    scratch: String,
}

impl CopyRules {
    /// `None` for a flow without filters or header rules: the copy loop's fast path.
    pub(super) fn for_plan(plan: &FlowPlan) -> Option<Self> {
        (!plan.record_rules.is_empty()).then(|| Self {
            flow: plan.id.to_string(),
            source: plan.id.source.clone(),
            target: plan.id.target.clone(),
            rules: plan.record_rules.clone(),
            policy: plan.policy.clone(),
            topics: HashMap::new(),
            scratch: String::new(),
        })
    }

    fn topic(&mut self, topic: &str) -> &TopicRules {
        if !self.topics.contains_key(topic) {
            let exempt = self.policy.is_heartbeats_topic(topic);
            let filtered = if exempt {
                Vec::new()
            } else {
                let counter = |rule: &String| {
                    METRICS.records_filtered.with_label_values(&[self.flow.as_str(), topic, rule.as_str()])
                };
                self.rules.names().iter().map(counter).collect()
            };
            self.topics.insert(topic.to_string(), TopicRules { exempt, filtered });
        }
        &self.topics[topic]
    }

    /// Whether a filter drops `msg` (counted under the first rule that does). `now_ms`: the wall clock
    /// for `older_than_seconds`.
    pub(super) fn drops(&mut self, msg: &BorrowedMessage<'_>, now_ms: i64) -> bool {
        if !self.rules.has_filters() {
            return false;
        }
        let rules = self.rules.clone();
        let topic = self.topic(msg.topic());
        if topic.exempt {
            return false;
        }
        match rules.dropped_by(&Viewed(msg), now_ms) {
            Some(rule) => {
                topic.filtered[rule].inc();
                true
            }
            None => false,
        }
    }

    /// The headers of `msg`'s copy, with ferry's provenance header `stamp` and the flow's header rules;
    /// `None` when the copy has none.
    pub(super) fn headers(&mut self, msg: &BorrowedMessage<'_>, stamp: Option<&[u8]>) -> Option<OwnedHeaders> {
        let rewrite = self.rules.rewrites_headers() && !self.topic(msg.topic()).exempt;
        if !rewrite {
            return copy_headers(msg, stamp);
        }
        let rules = &self.rules;
        let source = msg.headers();
        let capacity = source.map_or(0, |h| h.count()) + usize::from(stamp.is_some()) + rules.inserts().len();
        let mut owned = OwnedHeaders::new_with_capacity(capacity);
        if let Some(headers) = source {
            for h in headers.iter() {
                if stamp.is_some() && provenance::is_ferry_header(h.key) {
                    continue;
                }
                let key = match rules.fate(h.key) {
                    Fate::Keep => h.key,
                    Fate::Drop => continue,
                    Fate::Rename(to) => to,
                };
                owned = owned.insert(Header { key, value: h.value });
            }
        }
        if let Some(path) = stamp {
            owned = owned.insert(Header { key: provenance::PATH_HEADER, value: Some(path) });
        }
        let at = Lineage {
            source: &self.source,
            target: &self.target,
            topic: msg.topic(),
            partition: msg.partition(),
            offset: msg.offset(),
            timestamp_ms: msg.timestamp().to_millis(),
        };
        for (name, value) in rules.inserts() {
            self.scratch.clear();
            value.render(&at, &mut self.scratch);
            owned = owned.insert(Header { key: name, value: Some(self.scratch.as_bytes()) });
        }
        (owned.count() > 0).then_some(owned)
    }
}

/// The headers of `msg`'s copy without rules: the source's, with ferry's provenance header `stamp` in
/// place of any ferry header the record carried.
pub(super) fn copy_headers(msg: &BorrowedMessage<'_>, stamp: Option<&[u8]>) -> Option<OwnedHeaders> {
    let Some(headers) = msg.headers() else {
        return stamp.map(|path| {
            OwnedHeaders::new_with_capacity(1).insert(Header { key: provenance::PATH_HEADER, value: Some(path) })
        });
    };
    let mut owned = OwnedHeaders::new_with_capacity(headers.count() + usize::from(stamp.is_some()));
    for h in headers.iter() {
        // A stamped copy carries ferry's header of this copy only.
        if stamp.is_none() || !provenance::is_ferry_header(h.key) {
            owned = owned.insert(Header { key: h.key, value: h.value });
        }
    }
    if let Some(path) = stamp {
        owned = owned.insert(Header { key: provenance::PATH_HEADER, value: Some(path) });
    }
    Some(owned)
}

/// A consumed record as the filters see it.
struct Viewed<'m, 'a>(&'m BorrowedMessage<'a>);

impl RecordView for Viewed<'_, '_> {
    fn topic(&self) -> &str {
        self.0.topic()
    }

    fn key(&self) -> Option<&[u8]> {
        self.0.key()
    }

    fn value_is_null(&self) -> bool {
        self.0.payload().is_none()
    }

    fn timestamp_ms(&self) -> Option<i64> {
        self.0.timestamp().to_millis()
    }

    fn any_header(&self, f: &mut dyn FnMut(&str, Option<&[u8]>) -> bool) -> bool {
        self.0.headers().is_some_and(|h| h.iter().any(|h| f(h.key, h.value)))
    }
}
