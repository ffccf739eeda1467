//! Acknowledged copy positions: for every source partition, the next upstream offset to copy.
//!
//! A position advances only when the target acknowledged the record (at-least-once). The table is owned
//! by the flow's supervisor and outlives copier restarts, so a restarted copier resumes exactly where
//! the acknowledgements stopped instead of where progress was last persisted. The producer's delivery
//! callback writes it (one short, uncontended lock per record); the copy loop reads it once a second to
//! persist progress.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// A source topic-partition.
pub type SourcePartition = (String, i32);

#[derive(Clone, Debug, Default)]
struct PartitionAcks {
    /// Next upstream offset to copy: last acknowledged upstream offset + 1. `None`: nothing known yet.
    next: Option<i64>,
    /// Set by the first failed delivery; the position freezes there so that a later success in the same
    /// partition cannot skip the failed record.
    failed: Option<String>,
}

#[derive(Debug, Default)]
pub struct AckTable {
    /// Keyed by source topic, then partition. Remote-topic lookups from the delivery callback go through
    /// the copier's own rename map, so no string is allocated per record.
    inner: Mutex<HashMap<String, HashMap<i32, PartitionAcks>>>,
    /// Persisted progress has been loaded into the table (once per flow lifetime).
    recovered: AtomicBool,
}

impl AckTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<i32, PartitionAcks>>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn is_recovered(&self) -> bool {
        self.recovered.load(Ordering::Acquire)
    }

    pub fn set_recovered(&self) {
        self.recovered.store(true, Ordering::Release);
    }

    /// Seed positions recovered from persisted progress (`next` = stored last offset + 1). Positions
    /// already known in memory are newer than anything persisted and win.
    pub fn seed(&self, positions: impl IntoIterator<Item = (SourcePartition, i64)>) {
        let mut t = self.lock();
        for ((topic, partition), next) in positions {
            let p = t.entry(topic).or_default().entry(partition).or_default();
            if p.next.is_none() {
                p.next = Some(next);
            }
        }
    }

    /// The target acknowledged the record at `upstream` offset.
    pub fn acked(&self, topic: &str, partition: i32, upstream: i64) {
        let mut t = self.lock();
        let p = match t.get_mut(topic) {
            Some(parts) => parts.entry(partition).or_default(),
            None => t.entry(topic.to_string()).or_default().entry(partition).or_default(),
        };
        if p.failed.is_none() && p.next.is_none_or(|n| upstream + 1 > n) {
            p.next = Some(upstream + 1);
        }
    }

    /// The record at `upstream` could not be delivered; freeze the partition before it.
    pub fn failed(&self, topic: &str, partition: i32, upstream: i64, reason: String) {
        let mut t = self.lock();
        let p = t.entry(topic.to_string()).or_default().entry(partition).or_default();
        if p.failed.is_none() {
            p.failed = Some(format!("{topic}-{partition} at offset {upstream}: {reason}"));
        }
    }

    /// The first delivery failure, if any.
    pub fn first_failure(&self) -> Option<String> {
        self.lock().values().flat_map(|parts| parts.values()).find_map(|p| p.failed.clone())
    }

    /// Forget failures: a new copier resends from the frozen positions.
    pub fn clear_failures(&self) {
        for parts in self.lock().values_mut() {
            for p in parts.values_mut() {
                p.failed = None;
            }
        }
    }

    /// Next offset to copy for one partition.
    pub fn next(&self, topic: &str, partition: i32) -> Option<i64> {
        self.lock().get(topic).and_then(|parts| parts.get(&partition)).and_then(|p| p.next)
    }

    /// Every known position.
    pub fn snapshot(&self) -> HashMap<SourcePartition, i64> {
        self.lock()
            .iter()
            .flat_map(|(topic, parts)| {
                parts.iter().filter_map(move |(part, p)| p.next.map(|n| ((topic.clone(), *part), n)))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_advance_only_on_acks_and_freeze_on_failure() {
        let t = AckTable::default();
        t.seed([(("orders".to_string(), 0), 10)]);
        assert_eq!(t.next("orders", 0), Some(10));
        t.acked("orders", 0, 10);
        t.acked("orders", 0, 11);
        assert_eq!(t.next("orders", 0), Some(12));
        t.failed("orders", 0, 12, "boom".into());
        t.acked("orders", 0, 13);
        assert_eq!(t.next("orders", 0), Some(12), "a success after a failure must not skip it");
        assert!(t.first_failure().is_some_and(|f| f.contains("orders-0 at offset 12")));
        t.clear_failures();
        assert!(t.first_failure().is_none());
    }

    #[test]
    fn seeding_never_overrides_newer_memory() {
        let t = AckTable::default();
        t.acked("a", 1, 99);
        t.seed([(("a".to_string(), 1), 50), (("a".to_string(), 2), 7)]);
        assert_eq!(t.next("a", 1), Some(100));
        assert_eq!(t.next("a", 2), Some(7));
        assert_eq!(t.snapshot().len(), 2);
    }
}
