//! Which topic configs a remote topic takes from its source topic (mm2-reference.md §4.9), as pure
//! decisions over described configs.
//!
//! ferry copies only the source topic's own overrides (config source `DYNAMIC_TOPIC_CONFIG`). MM2 also
//! copies dynamic broker defaults of the source cluster as topic overrides (§10.16), which pins a
//! cluster-wide choice onto each remote topic; ferry leaves those to the target cluster's own defaults.
//! Read-only and sensitive entries are never copied, nor any property the [`ConfigPropertyFilter`]
//! excludes (MM2's list: `min.insync.replicas`, `message.timestamp.type`, throttles, ...). On the target,
//! an excluded property is left exactly as the operator set it.

use std::collections::BTreeMap;

use crate::filter::ConfigPropertyFilter;
use crate::raw_admin::ConfigOp;

/// One described config entry, reduced to what the decisions need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    pub value: Option<String>,
    /// Set on this topic (`DYNAMIC_TOPIC_CONFIG`), as opposed to a broker or cluster default.
    pub topic_override: bool,
    pub read_only: bool,
    pub sensitive: bool,
}

/// The overrides of a source topic that its remote topic should carry.
pub fn desired(source: &[ConfigEntry], filter: &ConfigPropertyFilter) -> BTreeMap<String, String> {
    source
        .iter()
        .filter(|e| e.topic_override && !e.read_only && !e.sensitive && filter.should_replicate_config(&e.name))
        .filter_map(|e| e.value.clone().map(|v| (e.name.clone(), v)))
        .collect()
}

/// Incremental changes that make `target` carry exactly the desired overrides: set what differs, delete
/// target overrides the source no longer has (unless the filter excludes the property).
pub fn changes(
    source: &[ConfigEntry],
    target: &[ConfigEntry],
    filter: &ConfigPropertyFilter,
) -> Vec<(String, ConfigOp)> {
    let want = desired(source, filter);
    let mut ops = Vec::new();
    for (name, value) in &want {
        let have = target.iter().find(|e| &e.name == name);
        let same = have.is_some_and(|e| e.topic_override && e.value.as_ref() == Some(value));
        if !same {
            ops.push((name.clone(), ConfigOp::Set(value.clone())));
        }
    }
    for e in target {
        if e.topic_override && !e.read_only && !want.contains_key(&e.name) && filter.should_replicate_config(&e.name) {
            ops.push((e.name.clone(), ConfigOp::Delete));
        }
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, value: &str, topic_override: bool) -> ConfigEntry {
        ConfigEntry { name: name.into(), value: Some(value.into()), topic_override, read_only: false, sensitive: false }
    }

    fn filter() -> ConfigPropertyFilter {
        ConfigPropertyFilter::new(None).expect("default filter")
    }

    #[test]
    fn only_allowed_topic_overrides_are_copied() {
        let source = vec![
            entry("retention.ms", "3600000", true),
            entry("min.insync.replicas", "2", true),
            entry("segment.bytes", "1073741824", false), // a default
            ConfigEntry { sensitive: true, ..entry("some.secret", "x", true) },
            ConfigEntry { read_only: true, ..entry("ro", "x", true) },
        ];
        let want = desired(&source, &filter());
        assert_eq!(want.into_iter().collect::<Vec<_>>(), vec![("retention.ms".to_string(), "3600000".to_string())]);
    }

    #[test]
    fn changes_set_what_differs_and_delete_what_went_away() {
        let source = vec![entry("retention.ms", "100", true), entry("cleanup.policy", "compact", true)];
        let target = vec![
            entry("retention.ms", "100", true),       // same: untouched
            entry("cleanup.policy", "delete", false), // default on the target: set
            entry("max.message.bytes", "5000", true), // override the source no longer has: delete
            entry("min.insync.replicas", "2", true),  // excluded: the operator's choice stays
        ];
        let ops = changes(&source, &target, &filter());
        assert_eq!(
            ops,
            vec![
                ("cleanup.policy".to_string(), ConfigOp::Set("compact".into())),
                ("max.message.bytes".to_string(), ConfigOp::Delete),
            ]
        );
        assert!(
            changes(
                &source,
                &[entry("retention.ms", "100", true), entry("cleanup.policy", "compact", true)],
                &filter()
            )
            .is_empty()
        );
    }
}
