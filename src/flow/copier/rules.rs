//! A flow's record rules in the copy loop: which records its filters drop (counted per topic and rule in
//! `ferry_records_filtered_total`), and the headers a copy carries.
//!
//! What depends on the topic alone (a rule's topic scope, whether the topic is a heartbeats topic) is
//! decided at the topic's first record and kept: per record that is one map lookup, then only the rules
//! that look at records. A flow without rules never gets here (the copy loop's fast path).

use std::collections::HashMap;
use std::sync::Arc;

use prometheus::IntCounter;
use rdkafka::message::{BorrowedMessage, Header, Headers, Message, OwnedHeaders};

use super::provenance;
use crate::config::FlowPlan;
use crate::metrics::METRICS;
use crate::policy::ReplicationPolicy;
use crate::record_rules::{Fate, Lineage, RecordRules, RecordView, TopicVerdict};

/// What the rules make of one source topic.
struct TopicRules {
    /// A heartbeats topic: never filtered nor rewritten.
    exempt: bool,
    /// Per rule, for this topic's records.
    verdicts: Vec<TopicVerdict>,
    /// `ferry_records_filtered_total{flow, topic, rule}`, made at a rule's first drop (a series per topic
    /// and rule that never drops would only add cardinality).
    filtered: Vec<Option<IntCounter>>,
}

/// Whether a record is copied, and then whether its headers are rewritten.
pub(super) enum Decision {
    Drop,
    Copy { rewrite: bool },
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

    /// What happens to `msg` (copied to `remote`). A dropped record is counted under the first rule that
    /// drops it unless `count` is false (a record behind a held partition: it is fetched and decided again).
    pub(super) fn decide(&mut self, msg: &BorrowedMessage<'_>, remote: &str, now_ms: i64, count: bool) -> Decision {
        let topic = msg.topic();
        if !self.topics.contains_key(topic) {
            let exempt = self.policy.is_heartbeats_topic(topic);
            let verdicts = if exempt { Vec::new() } else { self.rules.for_topic(topic, remote) };
            let filtered = vec![None; verdicts.len()];
            self.topics.insert(topic.to_string(), TopicRules { exempt, verdicts, filtered });
        }
        let Some(t) = self.topics.get_mut(topic) else { return Decision::Copy { rewrite: false } };
        if t.exempt {
            return Decision::Copy { rewrite: false };
        }
        match self.rules.dropped_by(&t.verdicts, &Viewed(msg), now_ms) {
            Some(rule) => {
                if count {
                    let flow = &self.flow;
                    let name = self.rules.name(rule);
                    t.filtered[rule]
                        .get_or_insert_with(|| METRICS.records_filtered.with_label_values(&[flow, topic, name]))
                        .inc();
                }
                Decision::Drop
            }
            None => Decision::Copy { rewrite: self.rules.rewrites_headers() },
        }
    }

    /// The headers of `msg`'s copy, with ferry's provenance header `stamp` and the flow's header rules;
    /// `None` when the copy has none.
    pub(super) fn headers(&mut self, msg: &BorrowedMessage<'_>, stamp: Option<&[u8]>) -> Option<OwnedHeaders> {
        let at = Lineage {
            source: &self.source,
            target: &self.target,
            topic: msg.topic(),
            partition: msg.partition(),
            offset: msg.offset(),
            timestamp_ms: msg.timestamp().to_millis(),
        };
        build_headers(msg, stamp, Some((&self.rules, &at, &mut self.scratch)))
    }
}

/// The headers of `msg`'s copy without rules: the source's, with ferry's provenance header `stamp` in
/// place of any ferry header the record carried.
pub(super) fn copy_headers(msg: &BorrowedMessage<'_>, stamp: Option<&[u8]>) -> Option<OwnedHeaders> {
    build_headers(msg, stamp, None)
}

/// The source's headers (a stamped copy carries ferry's header of this copy only), rewritten by the
/// flow's rules when given (with where the record comes from and a buffer to render inserted values
/// in), then the provenance header, then the inserted ones; `None` when there are none.
fn build_headers(
    msg: &BorrowedMessage<'_>,
    stamp: Option<&[u8]>,
    rules: Option<(&RecordRules, &Lineage<'_>, &mut String)>,
) -> Option<OwnedHeaders> {
    let source = msg.headers();
    // Without rules a record with headers keeps a (possibly empty) header list, as it always did.
    let keep_empty = source.is_some() && rules.is_none();
    let inserts = rules.as_ref().map_or(0, |(r, ..)| r.inserts().len());
    let capacity = source.map_or(0, |h| h.count()) + usize::from(stamp.is_some()) + inserts;
    if capacity == 0 {
        return None;
    }
    let mut owned = OwnedHeaders::new_with_capacity(capacity);
    for h in source.iter().flat_map(|h| h.iter()) {
        if stamp.is_some() && provenance::is_ferry_header(h.key) {
            continue;
        }
        let key = match rules.as_ref().map(|(r, ..)| r.fate(h.key)) {
            None | Some(Fate::Keep) => h.key,
            Some(Fate::Drop) => continue,
            Some(Fate::Rename(to)) => to,
        };
        owned = owned.insert(Header { key, value: h.value });
    }
    if let Some(path) = stamp {
        owned = owned.insert(Header { key: provenance::PATH_HEADER, value: Some(path) });
    }
    if let Some((rules, at, scratch)) = rules {
        for (name, value) in rules.inserts() {
            scratch.clear();
            value.render(at, scratch);
            owned = owned.insert(Header { key: name, value: Some(scratch.as_bytes()) });
        }
    }
    (owned.count() > 0 || keep_empty).then_some(owned)
}

/// A consumed record as the filters see it.
struct Viewed<'m, 'a>(&'m BorrowedMessage<'a>);

impl RecordView for Viewed<'_, '_> {
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
