//! MM2's single message transforms (SMTs) and predicates to ferry's record rules: Kafka's `Filter` with
//! the predicate `TopicNameMatches`, `HasHeaderKey` or `RecordIsTombstone` becomes a `[[flows.filter]]`
//! rule, `InsertHeader` and `DropHeaders` become `[flows.headers]`. Any other transform is reported, and
//! so is one whose meaning would change under ferry's fixed order (filters see the source record; headers
//! are dropped, then inserted): a `Filter` on a header an earlier transform of the chain inserts or drops,
//! a `DropHeaders` of a header an earlier `InsertHeader` adds, a header transform with a predicate.

use std::collections::BTreeMap;

use toml::Value;

use super::java_regex::java_only;
use super::model::{Prop, Unmapped};

const TRANSFORMS: &str = "org.apache.kafka.connect.transforms.";
const PREDICATES: &str = "org.apache.kafka.connect.transforms.predicates.";

/// What a connector's transform chain becomes.
#[derive(Debug, Default, PartialEq)]
pub struct Rules {
    /// `[[flows.filter]]` tables, in chain order.
    pub filters: Vec<Value>,
    pub drop: Vec<String>,
    pub insert: BTreeMap<String, String>,
    /// (MM2 key, ferry key) of each transform carried over.
    pub mapped: Vec<(String, String)>,
    pub unmapped: Vec<Unmapped>,
}

impl Rules {
    /// The `[flows.headers]` table, if any header rule was mapped.
    pub fn headers(&self) -> Option<Value> {
        if self.drop.is_empty() && self.insert.is_empty() {
            return None;
        }
        let mut t = toml::Table::new();
        if !self.drop.is_empty() {
            t.insert("drop".into(), Value::Array(self.drop.iter().cloned().map(Value::String).collect()));
        }
        if !self.insert.is_empty() {
            let insert = self.insert.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
            t.insert("insert".into(), Value::Table(insert));
        }
        Some(Value::Table(t))
    }
}

/// Whether `key` belongs to the transform chain (handled here, not by the key-by-key mapping).
pub fn is_chain_key(key: &str) -> bool {
    key == "transforms" || key.starts_with("transforms.") || key == "predicates" || key.starts_with("predicates.")
}

/// The class a `type` names, as Connect resolves Kafka's own transforms: the full name or the simple one.
fn kafka_class<'a>(value: &'a str, package: &str) -> Option<&'a str> {
    let v = value.trim();
    match v.strip_prefix(package) {
        Some(simple) => Some(simple),
        None if !v.contains('.') => Some(v),
        None => None,
    }
}

/// Maps the chain in `props` (one connector's keys); `None` when it has none.
pub fn map(props: &BTreeMap<String, Prop>) -> Option<Rules> {
    let chain = props.get("transforms")?;
    let mut out = Rules::default();
    let list = |v: &str| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect::<Vec<_>>();
    let get = |k: String| props.get(&k);
    // Headers the chain changed before the transform at hand.
    let mut touched: Vec<String> = Vec::new();
    let mut inserted: Vec<String> = Vec::new();
    for name in list(&chain.value) {
        let prefix = format!("transforms.{name}.");
        let Some(kind) = get(format!("{prefix}type")) else {
            out.unmapped.push(Unmapped {
                key: chain.origin.clone(),
                reason: format!("transform `{name}` has no `{prefix}type`"),
            });
            continue;
        };
        let predicate = get(format!("{prefix}predicate")).map(|p| p.value.trim().to_string()).filter(|p| !p.is_empty());
        let negate = get(format!("{prefix}negate")).is_some_and(|p| p.value.trim().eq_ignore_ascii_case("true"));
        let refuse = |out: &mut Rules, reason: String| out.unmapped.push(Unmapped { key: kind.origin.clone(), reason });
        match kafka_class(&kind.value, TRANSFORMS) {
            Some("Filter") => {
                let Some(p) = predicate else {
                    refuse(&mut out, "a `Filter` without a predicate drops every record; not carried over".into());
                    continue;
                };
                match filter(&name, &p, negate, props, &touched) {
                    Ok(rule) => {
                        out.mapped.push((kind.origin.clone(), format!("filter[{}]", out.filters.len())));
                        out.filters.push(Value::Table(rule));
                    }
                    Err(reason) => refuse(&mut out, reason),
                }
            }
            Some(header_kind @ ("InsertHeader" | "DropHeaders")) if predicate.is_some() => refuse(
                &mut out,
                format!("`{header_kind}` with a predicate: ferry's header rules apply to every copied record"),
            ),
            Some("InsertHeader") => {
                let header = get(format!("{prefix}header")).map(|p| p.value.trim().to_string());
                let literal = get(format!("{prefix}value.literal")).map(|p| p.value.clone());
                match (header, literal) {
                    (Some(h), Some(_)) if out.insert.contains_key(&h) => refuse(
                        &mut out,
                        format!("a second `InsertHeader` of `{h}`: Kafka adds both, ferry inserts a header once"),
                    ),
                    (Some(h), Some(v)) if !h.is_empty() => {
                        // Braces are placeholders in ferry's values: a literal keeps its own.
                        let v = v.replace('{', "{{").replace('}', "}}");
                        out.mapped.push((kind.origin.clone(), format!("headers.insert.{h}")));
                        touched.push(h.clone());
                        inserted.push(h.clone());
                        out.insert.insert(h, v);
                    }
                    _ => refuse(&mut out, "`InsertHeader` without `header` and `value.literal`".into()),
                }
            }
            Some("DropHeaders") => {
                let names = get(format!("{prefix}headers")).map(|p| list(&p.value)).unwrap_or_default();
                if let Some(h) = names.iter().find(|h| inserted.contains(h)) {
                    refuse(
                        &mut out,
                        format!("drops `{h}`, which an earlier `InsertHeader` adds: ferry drops before it inserts"),
                    );
                    continue;
                }
                out.mapped.push((kind.origin.clone(), "headers.drop".into()));
                touched.extend(names.iter().cloned());
                out.drop.extend(names);
            }
            _ => refuse(
                &mut out,
                format!(
                    "transform `{}`: ferry maps Kafka's Filter (with TopicNameMatches, HasHeaderKey or RecordIsTombstone), InsertHeader and DropHeaders; records are copied without this one",
                    kind.value.trim()
                ),
            ),
        }
    }
    Some(out)
}

/// The `[[flows.filter]]` table of a `Filter` transform `name` with predicate `p`.
fn filter(
    name: &str,
    p: &str,
    negate: bool,
    props: &BTreeMap<String, Prop>,
    touched: &[String],
) -> Result<toml::Table, String> {
    let get = |k: &str| props.get(&format!("predicates.{p}.{k}")).map(|v| v.value.trim().to_string());
    let Some(kind) = get("type") else {
        return Err(format!("predicate `{p}` has no `predicates.{p}.type`"));
    };
    let mut rule = toml::Table::new();
    rule.insert("name".into(), Value::String(name.to_string()));
    match kafka_class(&kind, PREDICATES) {
        Some("TopicNameMatches") => {
            let pattern = get("pattern").ok_or_else(|| format!("predicate `{p}`: no `pattern`"))?;
            if let Some(feature) = java_only(&pattern) {
                return Err(format!("predicate `{p}`: pattern `{pattern}` uses {feature}, which Rust's regex lacks"));
            }
            // MM2 runs its transforms on the record it is about to write: the predicate sees the remote
            // topic's name (`east.orders`), not the source's.
            rule.insert("remote_topics".into(), Value::Array(vec![Value::String(pattern)]));
        }
        Some("HasHeaderKey") => {
            let header = get("name").ok_or_else(|| format!("predicate `{p}`: no `name`"))?;
            if touched.contains(&header) {
                return Err(format!(
                    "filters on header `{header}`, which an earlier transform of the chain changes: ferry filters the source record"
                ));
            }
            rule.insert("header".into(), Value::String(header));
        }
        Some("RecordIsTombstone") => {
            rule.insert("tombstone".into(), Value::Boolean(true));
        }
        _ => {
            return Err(format!("predicate `{kind}`: ferry maps TopicNameMatches, HasHeaderKey and RecordIsTombstone"));
        }
    }
    if negate {
        rule.insert("negate".into(), Value::Boolean(true));
    }
    Ok(rule)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(text: &str) -> BTreeMap<String, Prop> {
        text.lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), Prop::new(v.trim(), format!("a->b.{}", k.trim()))))
            .collect()
    }

    #[test]
    fn kafkas_filter_insert_and_drop_become_rules() {
        let p = props(
            "transforms = dropDebug, keepOrders, noTombstones, lineage, strip
             transforms.dropDebug.type = org.apache.kafka.connect.transforms.Filter
             transforms.dropDebug.predicate = isDebug
             transforms.keepOrders.type = Filter
             transforms.keepOrders.predicate = isOrders
             transforms.keepOrders.negate = true
             transforms.noTombstones.type = org.apache.kafka.connect.transforms.Filter
             transforms.noTombstones.predicate = isTombstone
             transforms.lineage.type = org.apache.kafka.connect.transforms.InsertHeader
             transforms.lineage.header = x-origin
             transforms.lineage.value.literal = east {dc}
             transforms.strip.type = org.apache.kafka.connect.transforms.DropHeaders
             transforms.strip.headers = secret, internal
             predicates = isDebug, isOrders, isTombstone
             predicates.isDebug.type = org.apache.kafka.connect.transforms.predicates.HasHeaderKey
             predicates.isDebug.name = x-debug
             predicates.isOrders.type = org.apache.kafka.connect.transforms.predicates.TopicNameMatches
             predicates.isOrders.pattern = orders.*
             predicates.isTombstone.type = org.apache.kafka.connect.transforms.predicates.RecordIsTombstone",
        );
        let r = map(&p).expect("a chain");
        assert_eq!(r.unmapped, vec![]);
        let text = toml::to_string(&toml::Table::from_iter([
            ("filter".to_string(), Value::Array(r.filters.clone())),
            ("headers".to_string(), r.headers().expect("headers")),
        ]))
        .expect("toml");
        let back: toml::Table = toml::from_str(&text).expect("parses");
        let f = back["filter"].as_array().expect("filters");
        assert_eq!(f[0]["header"].as_str(), Some("x-debug"));
        assert_eq!(f[1]["remote_topics"][0].as_str(), Some("orders.*"), "MM2's predicate sees the remote name");
        assert_eq!(f[1]["negate"].as_bool(), Some(true));
        assert_eq!(f[2]["tombstone"].as_bool(), Some(true));
        assert_eq!(f[2]["name"].as_str(), Some("noTombstones"));
        assert_eq!(back["headers"]["insert"]["x-origin"].as_str(), Some("east {{dc}}"), "braces kept literal");
        assert_eq!(back["headers"]["drop"].as_array().map(Vec::len), Some(2));
        assert_eq!(r.mapped.len(), 5);
    }

    #[test]
    fn what_would_change_meaning_is_reported() {
        let p = props(
            "transforms = all, tag, onTag, cast, dropTag, routed
             transforms.all.type = org.apache.kafka.connect.transforms.Filter
             transforms.tag.type = InsertHeader
             transforms.tag.header = tag
             transforms.tag.value.literal = x
             transforms.onTag.type = Filter
             transforms.onTag.predicate = hasTag
             transforms.cast.type = org.apache.kafka.connect.transforms.Cast$Value
             transforms.dropTag.type = DropHeaders
             transforms.dropTag.headers = tag
             transforms.routed.type = DropHeaders
             transforms.routed.headers = a
             transforms.routed.predicate = hasTag
             predicates = hasTag
             predicates.hasTag.type = HasHeaderKey
             predicates.hasTag.name = tag",
        );
        let r = map(&p).expect("a chain");
        let reasons: Vec<String> = r.unmapped.iter().map(|u| format!("{}: {}", u.key, u.reason)).collect();
        let has = |words: &str| assert!(reasons.iter().any(|r| r.contains(words)), "{words} in {reasons:#?}");
        has("a->b.transforms.all.type: a `Filter` without a predicate drops every record");
        has("a->b.transforms.onTag.type: filters on header `tag`, which an earlier transform");
        has("transform `org.apache.kafka.connect.transforms.Cast$Value`");
        has("drops `tag`, which an earlier `InsertHeader` adds");
        has("`DropHeaders` with a predicate");
        assert_eq!(r.insert.len(), 1, "the InsertHeader itself is carried over");
        let twice = props(
            "transforms = a, b
             transforms.a.type = InsertHeader
             transforms.a.header = h
             transforms.a.value.literal = 1
             transforms.b.type = InsertHeader
             transforms.b.header = h
             transforms.b.value.literal = 2",
        );
        let r = map(&twice).expect("a chain");
        assert!(r.unmapped.iter().any(|u| u.reason.contains("a second `InsertHeader` of `h`")), "{:?}", r.unmapped);
        assert!(map(&props("topics = x")).is_none());
    }
}
