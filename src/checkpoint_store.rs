//! The checkpoints already published for each consumer group (KAFKA-15905, mm2-reference.md §5.3) and
//! MM2's recency rule that keeps published checkpoints from going backwards (§5.5). Pure: no I/O.
//!
//! It holds, per group and downstream `(topic, partition)`, the last [`Checkpoint`] known to be in
//! `<source>.checkpoints.internal`: first the records read back from that topic at start ([`load`],
//! whoever wrote them, ferry or MM2; last record wins), then every checkpoint ferry publishes
//! ([`update`]).
//!
//! **Invariant (what it buys):** a candidate passes [`is_more_recent`] only if it is the first for its
//! group and partition, or the group moved *back* upstream (a deliberate rewind, which checkpoints
//! follow even though the downstream offset then goes back too), or its downstream offset is strictly
//! past the last one. So the sequence of checkpoints in the topic never moves a group's downstream
//! offset backwards without an upstream rewind, and never repeats itself, even when the offset-sync
//! store translates the same upstream offset lower than before (history lost to compaction, thinning
//! or a restart, see [`crate::sync_store`]). Metadata alone changing does not make a checkpoint more
//! recent (as in MM2).
//!
//! **Caller contract.**
//! * Load the topic to its end before the first emission round. If that fails (e.g. no READ
//!   permission), start from an empty store, as MM2 does, and read the offset syncs with
//!   [`crate::sync_store::SyncStore::set_backlog_latest_only`] so that no group is translated below a
//!   sync an earlier generation may have used; that is what keeps checkpoints monotonic then.
//! * [`update`] is called once a checkpoint is acknowledged, whereas MM2 updates as soon as it computes
//!   the batch. So a group must not get a new emission round while checkpoints of its previous round
//!   are still in flight: the new round would be compared with stale state and could publish a
//!   downstream offset below an unacknowledged one. A checkpoint that failed to publish is simply not
//!   recorded and is computed again next round.
//! * Only the groups this node checkpoints belong here (MM2 ignores other groups' records while
//!   loading); drop others with [`forget_group`].
//!
//! [`load`]: CheckpointStore::load
//! [`update`]: CheckpointStore::update
//! [`is_more_recent`]: CheckpointStore::is_more_recent
//! [`forget_group`]: CheckpointStore::forget_group

use std::collections::HashMap;

use crate::mm2::records::Checkpoint;

/// downstream topic -> partition -> last checkpoint.
type GroupCheckpoints = HashMap<String, HashMap<i32, Checkpoint>>;

/// Last published checkpoint per group and downstream partition. See the module docs.
#[derive(Debug, Default)]
pub struct CheckpointStore {
    groups: HashMap<String, GroupCheckpoints>,
    len: usize,
}

impl CheckpointStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// A record read from `<source>.checkpoints.internal`, in topic order (last wins).
    pub fn load(&mut self, cp: Checkpoint) {
        self.put(cp);
    }

    /// MM2's `checkpointIsMoreRecent`: whether `cp` may be published given the last checkpoint of its
    /// group and partition.
    pub fn is_more_recent(&self, cp: &Checkpoint) -> bool {
        match self.last(&cp.group, &cp.topic, cp.partition) {
            // First checkpoint for the group or for this partition.
            None => true,
            Some(last) => {
                // The group was rewound upstream: follow it, even backwards downstream.
                cp.upstream_offset < last.upstream_offset
                // Otherwise only forwards; equal is a repeat, lower would rewind the group.
                    || cp.downstream_offset > last.downstream_offset
            }
        }
    }

    /// Records a checkpoint once it was acknowledged.
    pub fn update(&mut self, cp: Checkpoint) {
        self.put(cp);
    }

    /// The last checkpoint of `group` for downstream `topic`-`partition`.
    pub fn last(&self, group: &str, topic: &str, partition: i32) -> Option<&Checkpoint> {
        self.groups.get(group)?.get(topic)?.get(&partition)
    }

    /// Every partition's last checkpoint of `group`, in no particular order (e.g. for group offset sync,
    /// MM2's `computeConvertedUpstreamOffset`).
    pub fn group<'a>(&'a self, group: &str) -> impl Iterator<Item = &'a Checkpoint> + use<'a> {
        self.groups.get(group).into_iter().flat_map(HashMap::values).flat_map(HashMap::values)
    }

    /// Groups with at least one checkpoint, in no particular order.
    pub fn groups(&self) -> impl Iterator<Item = &str> {
        self.groups.keys().map(String::as_str)
    }

    /// Checkpoints stored over all groups.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Drops everything known about `group` (no longer checkpointed by this node).
    pub fn forget_group(&mut self, group: &str) {
        if let Some(topics) = self.groups.remove(group) {
            self.len -= topics.values().map(HashMap::len).sum::<usize>();
        }
    }

    fn put(&mut self, cp: Checkpoint) {
        // Looked up first so that updating a known partition does not allocate names.
        if !self.groups.contains_key(&cp.group) {
            self.groups.insert(cp.group.clone(), HashMap::new());
        }
        let Some(topics) = self.groups.get_mut(&cp.group) else { return };
        if !topics.contains_key(&cp.topic) {
            topics.insert(cp.topic.clone(), HashMap::new());
        }
        let Some(partitions) = topics.get_mut(&cp.topic) else { return };
        if partitions.insert(cp.partition, cp).is_none() {
            self.len += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync_store::{StoredSync, SyncStore, Translation};

    fn cp(group: &str, topic: &str, partition: i32, upstream: i64, downstream: i64) -> Checkpoint {
        Checkpoint {
            group: group.to_owned(),
            topic: topic.to_owned(),
            partition,
            upstream_offset: upstream,
            downstream_offset: downstream,
            metadata: String::new(),
        }
    }

    /// A sync store fed from a list of `(upstream, downstream)` syncs of upstream `t1`-0.
    fn sync_store(syncs: impl IntoIterator<Item = (i64, i64)>, latest_only: bool) -> SyncStore {
        let mut store = SyncStore::new(1024);
        store.set_backlog_latest_only(latest_only);
        for (position, (upstream, downstream)) in syncs.into_iter().enumerate() {
            store.handle("t1", 0, StoredSync { upstream, downstream, mark: None, position: position as i64 });
        }
        store.set_read_to_end();
        store
    }

    /// One checkpoint computation for `group` at upstream `g` of `t1`-0, as MM2's
    /// `checkpointsForGroup` does it (downstream topic `source1.t1`); returns the candidate if it would
    /// be published, after recording it as acknowledged.
    fn round(syncs: &SyncStore, store: &mut CheckpointStore, group: &str, g: i64) -> Option<Checkpoint> {
        let downstream = syncs.translate("t1", 0, g).offset()?;
        let candidate = cp(group, "source1.t1", 0, g, downstream);
        if !store.is_more_recent(&candidate) {
            return None;
        }
        store.update(candidate.clone());
        Some(candidate)
    }

    // --- Ports of CheckpointStoreTest ----------------------------------------------------------------

    #[test]
    fn read_checkpoints_topic() {
        // CheckpointStoreTest.testReadCheckpointsTopic. (The malformed record in the Java test is the
        // codec's business: `Checkpoint::decode` fails and the reader skips it.)
        let mut store = CheckpointStore::new();
        store.load(cp("group1", "t1", 0, 0, 0));
        store.load(cp("group2", "t1", 0, 0, 0));
        store.load(cp("group1", "t1", 0, 1, 1));
        // group2 is not one of this task's groups.
        store.forget_group("group2");
        assert_eq!(store.group("group1").collect::<Vec<_>>(), [&cp("group1", "t1", 0, 1, 1)]);
        assert_eq!(store.groups().collect::<Vec<_>>(), ["group1"]);
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn read_checkpoints_topic_error() {
        // CheckpointStoreTest.testReadCheckpointsTopicError: a failed load leaves an empty store...
        let store = CheckpointStore::new();
        assert!(store.is_empty());
        assert!(store.is_more_recent(&cp("group1", "topic", 1, 0, 0)));
        // ...and the offset syncs are read keeping only the latest (Java's start(!loadSuccess)), so a
        // group below it gets no checkpoint rather than one that may be older than a published one.
        let syncs = sync_store([(100, 100), (200, 200), (300, 300)], true);
        assert_eq!(syncs.translate("t1", 0, 250), Translation::TooOld);
        assert_eq!(syncs.translate("t1", 0, 350), Translation::Approx(301));
    }

    #[test]
    fn is_more_recent_follows_mm2s_rules() {
        let mut store = CheckpointStore::new();
        let last = cp("g", "A.t", 0, 100, 50);
        assert!(store.is_more_recent(&last), "first for the group");
        store.update(last);
        assert!(store.is_more_recent(&cp("g", "A.t", 1, 0, 0)), "first for the partition");
        assert!(store.is_more_recent(&cp("g", "A.u", 0, 0, 0)), "first for the topic");
        assert!(store.is_more_recent(&cp("h", "A.t", 0, 0, 0)), "other group");
        assert!(store.is_more_recent(&cp("g", "A.t", 0, 150, 51)), "downstream advanced");
        assert!(store.is_more_recent(&cp("g", "A.t", 0, 100, 51)), "downstream advanced, same upstream");
        assert!(store.is_more_recent(&cp("g", "A.t", 0, 99, 20)), "upstream rewind, downstream back");
        assert!(store.is_more_recent(&cp("g", "A.t", 0, 99, 50)), "upstream rewind, downstream same");
        assert!(!store.is_more_recent(&cp("g", "A.t", 0, 100, 50)), "repeated");
        assert!(!store.is_more_recent(&cp("g", "A.t", 0, 150, 50)), "upstream moved, downstream did not");
        assert!(!store.is_more_recent(&cp("g", "A.t", 0, 150, 49)), "would rewind the group downstream");
        let mut with_metadata = cp("g", "A.t", 0, 100, 50);
        with_metadata.metadata = "new".to_owned();
        assert!(!store.is_more_recent(&with_metadata), "metadata alone is not more recent");
    }

    #[test]
    fn update_and_load_keep_the_last_per_partition() {
        let mut store = CheckpointStore::new();
        store.load(cp("g", "A.t", 0, 10, 10));
        store.load(cp("g", "A.t", 1, 10, 10));
        store.load(cp("h", "A.t", 0, 10, 10));
        store.update(cp("g", "A.t", 0, 5, 3)); // an upstream rewind was published
        assert_eq!(store.len(), 3);
        assert_eq!(store.last("g", "A.t", 0), Some(&cp("g", "A.t", 0, 5, 3)));
        let mut groups: Vec<_> = store.groups().collect();
        groups.sort_unstable();
        assert_eq!(groups, ["g", "h"]);
        store.forget_group("g");
        store.forget_group("nobody");
        assert_eq!(store.len(), 1);
        assert_eq!(store.group("g").count(), 0);
        assert_eq!(store.last("g", "A.t", 1), None);
    }

    // --- Ports of MirrorCheckpointTaskTest -----------------------------------------------------------

    #[test]
    fn sync_offset_uses_last_checkpoints() {
        // MirrorCheckpointTaskTest.testSyncOffset: group offset sync writes the checkpoints' downstream
        // offsets.
        let mut store = CheckpointStore::new();
        store.load(Checkpoint { metadata: "metadata".to_owned(), ..cp("consumer1", "topic1", 0, 200, 101) });
        store.load(Checkpoint { metadata: "metadata".to_owned(), ..cp("consumer2", "topic2", 0, 100, 51) });
        let offsets = |g| store.group(g).map(|c| (c.topic.as_str(), c.partition, c.downstream_offset)).collect();
        let c1: Vec<_> = offsets("consumer1");
        assert_eq!(c1, [("topic1", 0, 101)]);
        let c2: Vec<_> = offsets("consumer2");
        assert_eq!(c2, [("topic2", 0, 51)]);
    }

    #[test]
    fn checkpoint_records_monotonic_if_store_rewinds() {
        // MirrorCheckpointTaskTest.testCheckpointRecordsMonotonicIfStoreRewinds
        let mut store = CheckpointStore::new();
        // Syncs 0 and 1; the group at 13 translates with sync 1.
        let syncs = sync_store([(11, 4), (12, 5)], false);
        assert_eq!(syncs.translate("t1", 0, 13), Translation::Approx(6));
        assert_eq!(round(&syncs, &mut store, "g1", 13), Some(cp("g1", "source1.t1", 0, 13, 6)));

        // Syncs 2-6: MM2's 64 slots then drop sync 1 and translate 13 to 5 (12 -> 5 is lost); ferry
        // keeps them all and says 6 again.
        let syncs = sync_store([(11, 4), (12, 5), (13, 6), (14, 7), (15, 8), (16, 9), (17, 10)], false);
        assert_eq!(syncs.translate("t1", 0, 13), Translation::Exact(6));
        assert_eq!(round(&syncs, &mut store, "g1", 13), None, "repeated");
        // MM2's lower translation is filtered out, not published.
        assert!(!store.is_more_recent(&cp("g1", "source1.t1", 0, 13, 5)));

        // The group rewinds upstream and is still translatable: the checkpoint follows, also moving
        // back downstream.
        assert_eq!(round(&syncs, &mut store, "g1", 12), Some(cp("g1", "source1.t1", 0, 12, 5)));
    }

    #[test]
    fn checkpoints_task_restart_uses_existing_checkpoints() {
        // MirrorCheckpointTaskTest.testCheckpointsTaskRestartUsesExistingCheckpoints
        // Sync store with 100->100, 200->200, 300->300 (backlog folded in: checkpoints loaded fine).
        let syncs = sync_store((100..=300).step_by(100).map(|i| (i, i)), false);
        let mut store = CheckpointStore::new();
        // Upstream 250 maps to 201 (nearest sync 200->200).
        let first = round(&syncs, &mut store, "group1", 250);
        assert_eq!(first, Some(cp("group1", "source1.t1", 0, 250, 201)));

        // Restart: more syncs were written meanwhile and compaction removed 100->100; the backlog now
        // holds 175, 275, 375, 475. The checkpoints topic is loaded back.
        let syncs = sync_store((175..=475).step_by(100).map(|i| (i, i)), false);
        let mut store = CheckpointStore::new();
        store.load(first.unwrap());

        // 250 now translates to 176, before the last checkpoint's 201: not published.
        assert_eq!(syncs.translate("t1", 0, 250), Translation::Approx(176));
        assert_eq!(round(&syncs, &mut store, "group1", 250), None);
        // MM2's slots lost 275 too and also give 176 for 370 (no checkpoint). ferry kept 275 and gives
        // 276: past 201, so it is published (still not past 370).
        assert_eq!(syncs.translate("t1", 0, 370), Translation::Approx(276));
        assert_eq!(round(&syncs, &mut store, "group1", 370), Some(cp("group1", "source1.t1", 0, 370, 276)));
        // 400 -> 376, later than the last checkpoint: published (MM2 too).
        assert_eq!(round(&syncs, &mut store, "group1", 400), Some(cp("group1", "source1.t1", 0, 400, 376)));
    }

    use crate::test_rng::SplitMix;

    #[test]
    fn restarted_task_never_moves_a_group_back_without_an_upstream_rewind() {
        // Many restarts, each with a freshly loaded checkpoint store and a sync store rebuilt from a
        // randomly compacted backlog; the group mostly moves forward and sometimes rewinds.
        let mut rng = SplitMix(11);
        for _ in 0..50 {
            let mut topic: Vec<Checkpoint> = Vec::new(); // <source>.checkpoints.internal
            let mut all_syncs: Vec<(i64, i64)> = Vec::new();
            let mut produced = 0i64;
            let mut g = 0i64;
            for _restart in 0..8 {
                let mut store = CheckpointStore::new();
                for c in &topic {
                    store.load(c.clone());
                }
                for _ in 0..rng.below(300) {
                    produced += 1 + rng.below(20);
                    all_syncs.push((produced, produced + 7));
                }
                let last = all_syncs.len().saturating_sub(1);
                let backlog: Vec<_> = all_syncs
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i == last || rng.below(3) == 0)
                    .map(|(_, s)| *s)
                    .collect();
                let syncs = sync_store(backlog, false);
                for _ in 0..50 {
                    g = if rng.below(10) == 0 { (g - rng.below(500)).max(0) } else { g + rng.below(100) };
                    let g = g.min(produced + 5);
                    let previous = store.last("g", "source1.t1", 0).cloned();
                    let emitted = round(&syncs, &mut store, "g", g);
                    if let (Some(prev), Some(_)) = (&previous, syncs.translate("t1", 0, g).offset())
                        && g < prev.upstream_offset
                    {
                        assert!(emitted.is_some(), "an upstream rewind to {g} is followed");
                    }
                    topic.extend(emitted);
                }
            }
            for w in topic.windows(2) {
                let (a, b) = (&w[0], &w[1]);
                assert!(
                    b.downstream_offset > a.downstream_offset || b.upstream_offset < a.upstream_offset,
                    "{a:?} then {b:?}"
                );
                assert!(b.downstream_offset <= b.upstream_offset + 7, "never ahead: {b:?}");
            }
        }
    }
}
