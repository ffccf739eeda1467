//! Acknowledged copy positions: for every source partition, the next upstream offset to copy.
//!
//! A position advances only when the target acknowledged the record (at-least-once). The table is owned
//! by the flow's supervisor and outlives copier restarts, so a restarted copier resumes exactly where
//! the acknowledgements stopped instead of where progress was last persisted.
//!
//! Each partition has its own slot ([`PartitionAck`]) that the copier holds directly: the producer's
//! delivery thread advances it with a few atomic operations and no lookup by name, and marks it dirty
//! once per persist round; the copy loop then persists only the dirty slots. Nothing here scans every
//! partition on the per-record path.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use crate::sync_rule::Bridge;

/// A source topic-partition.
pub type SourcePartition = (String, i32);

/// A Kafka topic id in its text form (22 characters of base64url). A topic deleted and created again
/// under the same name gets a new one: that is how a re-created source partition is told apart from
/// the one a stored position belongs to.
pub type TopicId = Arc<str>;

/// `next` when nothing is known.
const UNKNOWN: i64 = -1;

/// Why a record could not be delivered to the target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryFailure {
    /// Upstream offset of the record.
    pub offset: i64,
    /// Key plus value bytes of the record.
    pub size: usize,
    pub error: String,
    /// The target refused the record itself (too large, invalid, not authorised): retrying soon will
    /// not help; as opposed to a timeout or an outage.
    pub permanent: bool,
    /// The producer did not know the partition (its metadata predates the partition).
    pub unknown_partition: bool,
    /// The producer purged the record (an exactly-once transaction was aborted): nothing was refused.
    pub purged: bool,
}

/// One source partition's position. Written by the delivery thread (acknowledgements) and by the copy
/// loop (rewinds, only while nothing is in flight); read by the copy loop and the progress writer.
#[derive(Debug)]
pub struct PartitionAck {
    pub topic: Arc<str>,
    pub partition: i32,
    /// Next upstream offset to copy (last acknowledged + 1); [`UNKNOWN`] until known.
    next: AtomicI64,
    /// The value last persisted to the progress topic ([`UNKNOWN`]: none).
    persisted: AtomicI64,
    /// Records sent and not yet settled (acknowledged or failed).
    in_flight: AtomicI64,
    /// Set by the first failed delivery: the position freezes there so that a later success in the
    /// same partition cannot skip the failed record.
    failed: AtomicBool,
    failure: Mutex<Option<DeliveryFailure>>,
    /// In the table's dirty list, waiting to be persisted.
    dirty: AtomicBool,
    /// Records up to here (exclusive) were deliberately not copied (see [`PartitionAck::skipped`]); the
    /// position moves past them once nothing sent before them is in flight.
    skip_to: AtomicI64,
    /// The source topic id the position belongs to, when known.
    topic_id: Mutex<Option<TopicId>>,
    /// This node's ownership epoch of the partition (see [`next_epoch`]), stamped on its offset syncs
    /// and progress records; 0 until the copier group gives the partition to this node.
    epoch: AtomicU64,
    /// Exactly-once: the position after the last record sent in the open transaction, and whether one
    /// was. The transaction's progress says this, acknowledged or not: its records and its progress
    /// commit together or not at all.
    txn_next: AtomicI64,
    in_txn: AtomicBool,
    /// The previous owner's last acknowledged position, from the progress this node adopted: published
    /// as a sync when the partition starts right after it, and carried in this node's progress records
    /// until its own acknowledgements replace it.
    bridge: Mutex<Option<Bridge>>,
}

/// The epoch under which a node owns a partition it was just given: one above the highest epoch it
/// knows of (`previous`: the highest epoch in the partition's progress records, and this node's own
/// last one). No clock: the progress log orders the owners (see `progress::Progress`), and a node that
/// took the partition before persisting anything is outranked because takers claim before they copy.
pub fn next_epoch(previous: u64) -> u64 {
    previous.saturating_add(1)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl PartitionAck {
    fn new(topic: Arc<str>, partition: i32) -> Self {
        Self {
            topic,
            partition,
            next: AtomicI64::new(UNKNOWN),
            persisted: AtomicI64::new(UNKNOWN),
            in_flight: AtomicI64::new(0),
            failed: AtomicBool::new(false),
            failure: Mutex::new(None),
            dirty: AtomicBool::new(false),
            skip_to: AtomicI64::new(UNKNOWN),
            topic_id: Mutex::new(None),
            epoch: AtomicU64::new(0),
            txn_next: AtomicI64::new(UNKNOWN),
            in_txn: AtomicBool::new(false),
            bridge: Mutex::new(None),
        }
    }

    /// The adopted previous owner's last position (see [`PartitionAck::bridge`] field docs).
    pub fn bridge(&self) -> Option<Bridge> {
        *lock(&self.bridge)
    }

    /// Exactly-once: the record at `upstream` went into the open transaction. True for the
    /// partition's first record in it.
    pub fn sent_in_transaction(&self, upstream: i64) -> bool {
        self.txn_next.store(upstream + 1, Ordering::Release);
        !self.in_txn.swap(true, Ordering::AcqRel)
    }

    /// Exactly-once: the position after the partition's last record in the open transaction, if it
    /// has one there.
    pub fn transaction_position(&self) -> Option<i64> {
        self.in_txn.load(Ordering::Acquire).then(|| self.txn_next.load(Ordering::Acquire))
    }

    /// Exactly-once: the transaction was aborted: the position goes back to the committed one (`None`:
    /// nothing committed yet). Only while nothing is in flight.
    pub fn back_to_committed(&self) {
        self.next.store(self.persisted.load(Ordering::Acquire), Ordering::Release);
        self.skip_to.store(UNKNOWN, Ordering::Release);
    }

    /// Exactly-once: the transaction ends; the position after its last record of this partition, if
    /// it had one.
    pub fn take_transaction(&self) -> Option<i64> {
        self.in_txn.swap(false, Ordering::AcqRel).then(|| self.txn_next.load(Ordering::Acquire))
    }

    /// Next offset to copy, if known.
    pub fn next(&self) -> Option<i64> {
        Some(self.next.load(Ordering::Acquire)).filter(|n| *n != UNKNOWN)
    }

    pub fn topic_id(&self) -> Option<TopicId> {
        lock(&self.topic_id).clone()
    }

    pub fn set_topic_id(&self, id: Option<TopicId>) {
        *lock(&self.topic_id) = id;
    }

    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    pub fn in_flight(&self) -> i64 {
        self.in_flight.load(Ordering::Acquire)
    }

    /// A record of this partition was handed to the producer.
    pub fn sent(&self) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
    }

    /// A record sent under an ownership that ended was acknowledged at `Some(upstream)`, or failed
    /// (`None`): it no longer counts in flight. An acknowledgement still moves the position in memory
    /// (the record is on the target: should the partition come back to this node, it is not copied
    /// again), but the slot is not marked for persisting: nothing is persisted from an ownership that
    /// ended. A failure freezes the position as usual, without reporting it (nobody retries it here).
    pub fn settled_unowned(&self, acked: Option<i64>) {
        match acked {
            Some(upstream) if !self.failed.load(Ordering::Acquire) => {
                self.next.fetch_max(upstream + 1, Ordering::AcqRel);
            }
            Some(_) => {}
            None => self.failed.store(true, Ordering::Release),
        }
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }

    /// The record counted by [`PartitionAck::sent`] was not handed over after all.
    pub fn unsent(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }

    /// The target acknowledged the record at `upstream` (delivery thread).
    pub fn acked(self: &Arc<Self>, table: &AckTable, upstream: i64) {
        if !self.failed.load(Ordering::Acquire) {
            self.next.fetch_max(upstream + 1, Ordering::AcqRel);
            self.mark_dirty(table);
        }
        if self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.apply_skip(table);
        }
    }

    /// The copy loop decided not to copy the record at `upstream` (it came from the target cluster). It
    /// counts as done, but only once every record sent before it is settled: the position must never pass
    /// a record still in flight, which may yet fail.
    pub fn skipped(self: &Arc<Self>, table: &AckTable, upstream: i64) {
        // Stored first, then checked: whichever of this thread and the delivery thread sees the partition
        // idle applies it.
        self.skip_to.fetch_max(upstream + 1, Ordering::AcqRel);
        if self.in_flight() == 0 {
            self.apply_skip(table);
        }
    }

    fn apply_skip(self: &Arc<Self>, table: &AckTable) {
        let to = self.skip_to.load(Ordering::Acquire);
        if to != UNKNOWN && !self.failed.load(Ordering::Acquire) && self.next.fetch_max(to, Ordering::AcqRel) < to {
            self.mark_dirty(table);
        }
    }

    /// The record could not be delivered (delivery thread, or the copy loop when the producer refused
    /// it outright). The position freezes before it.
    pub fn fail(self: &Arc<Self>, table: &AckTable, failure: DeliveryFailure, was_in_flight: bool) {
        if !self.failed.swap(true, Ordering::AcqRel) {
            *lock(&self.failure) = Some(failure);
            lock(&table.failed).push(self.clone());
            table.any_failed.store(true, Ordering::Release);
        }
        if was_in_flight {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Whether a failure froze this partition (until the retry clears it).
    pub fn has_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// The failure that froze this partition, if any.
    pub fn failure(&self) -> Option<DeliveryFailure> {
        lock(&self.failure).clone()
    }

    /// Forget the failure before copying from the frozen position again. Only while nothing is in
    /// flight (a late acknowledgement must not move the position past the failed record).
    pub fn clear_failure(&self) {
        debug_assert_eq!(self.in_flight(), 0);
        // Skips decided on records after the failed one go: the partition copies again from its position
        // and decides again; a skip kept would carry the position past records not copied again yet.
        self.skip_to.store(UNKNOWN, Ordering::Release);
        *lock(&self.failure) = None;
        self.failed.store(false, Ordering::Release);
    }

    /// Move the position to `next` whatever it was (the source partition was re-created, truncated, or
    /// lost records before they were copied). Only while nothing is in flight.
    pub fn rewind(self: &Arc<Self>, table: &AckTable, next: i64) {
        self.next.store(next, Ordering::Release);
        self.skip_to.store(UNKNOWN, Ordering::Release);
        // Exactly-once: an open transaction holding records from before the rewind commits the rewound
        // position (its records stay copied; the position they led to belongs to what was rewound).
        if self.in_txn.load(Ordering::Acquire) {
            self.txn_next.store(next, Ordering::Release);
        }
        self.mark_dirty(table);
    }

    fn mark_dirty(self: &Arc<Self>, table: &AckTable) {
        // Pairs with the fence in `take_dirty` (a store then a load of another variable on each side,
        // which acquire/release alone lets the CPU reorder): either the writer's read of the position
        // sees this move, or this swap sees the flag it cleared and queues the slot again. Without it a
        // partition's last acknowledgement before a handover could be left unpersisted (one duplicate).
        std::sync::atomic::fence(Ordering::SeqCst);
        if !self.dirty.swap(true, Ordering::AcqRel) {
            lock(&table.dirty).push(self.clone());
        }
    }

    /// The progress writer took the slot from the dirty list: clear the flag before reading the value,
    /// so an acknowledgement after the read marks it again.
    pub fn take_dirty(&self) {
        self.dirty.store(false, Ordering::Release);
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    pub fn persisted(&self) -> Option<i64> {
        Some(self.persisted.load(Ordering::Acquire)).filter(|n| *n != UNKNOWN)
    }

    /// The progress topic acknowledged `next` for this partition.
    pub fn set_persisted(&self, next: i64) {
        self.persisted.store(next, Ordering::Release);
    }
}

#[derive(Debug, Default)]
pub struct AckTable {
    slots: RwLock<HashMap<SourcePartition, Arc<PartitionAck>>>,
    /// Slots whose position moved since they were last taken for persisting.
    dirty: Mutex<Vec<Arc<PartitionAck>>>,
    /// Slots frozen by a failed delivery, not yet handled by the copy loop.
    failed: Mutex<Vec<Arc<PartitionAck>>>,
    any_failed: AtomicBool,
    /// Persisted progress has been loaded into the table (once per flow lifetime).
    recovered: AtomicBool,
}

/// A position recovered from the progress topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredPosition {
    pub next: i64,
    pub topic_id: Option<TopicId>,
    /// The ownership epoch of the node that wrote it (0: unknown, e.g. written by MM2).
    pub epoch: u64,
    /// Its writer's last acknowledged position before it, as a sync (see [`Bridge`]).
    pub bridge: Option<Bridge>,
}

impl AckTable {
    pub fn is_recovered(&self) -> bool {
        self.recovered.load(Ordering::Acquire)
    }

    pub fn set_recovered(&self) {
        self.recovered.store(true, Ordering::Release);
    }

    /// The slot of one partition, created on first use.
    pub fn slot(&self, topic: &str, partition: i32) -> Arc<PartitionAck> {
        let key = (topic.to_string(), partition);
        if let Some(s) = self.slots.read().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return s.clone();
        }
        let mut slots = self.slots.write().unwrap_or_else(|p| p.into_inner());
        slots.entry(key).or_insert_with(|| Arc::new(PartitionAck::new(Arc::from(topic), partition))).clone()
    }

    /// Seed positions recovered from persisted progress. Positions already known in memory are newer
    /// than anything persisted and win.
    pub fn seed(&self, positions: impl IntoIterator<Item = (SourcePartition, StoredPosition)>) {
        for ((topic, partition), stored) in positions {
            let slot = self.slot(&topic, partition);
            if slot.next().is_none() {
                slot.next.store(stored.next, Ordering::Release);
                slot.persisted.store(stored.next, Ordering::Release);
                slot.set_topic_id(stored.topic_id);
            }
        }
    }

    /// This node was given the partition (by its copier group): take a new ownership epoch, and adopt
    /// the persisted position unless the
    /// one in memory is newer (acknowledged here, not yet persisted). Another node that copied it
    /// meanwhile started from this node's last persisted position and only moved forward, unless the
    /// source topic was re-created: a different topic id makes the persisted position win.
    ///
    /// `committed_wins` (exactly-once): the stored position is what was committed with the records, and
    /// one in memory may be ahead of it by records of an aborted transaction: the stored one wins.
    ///
    /// `seen_epoch`: the highest epoch in the partition's progress records.
    pub fn adopt(
        &self,
        topic: &str,
        partition: i32,
        stored: Option<StoredPosition>,
        seen_epoch: u64,
        committed_wins: bool,
    ) {
        let slot = self.slot(topic, partition);
        let previous = slot.epoch().max(seen_epoch).max(stored.as_ref().map_or(0, |s| s.epoch));
        if committed_wins {
            // A skip noted by an aborted transaction's lifetime must not move the committed position.
            slot.skip_to.store(UNKNOWN, Ordering::Release);
        }
        slot.epoch.store(next_epoch(previous), Ordering::Release);
        *lock(&slot.bridge) = None;
        let Some(stored) = stored else {
            if committed_wins {
                // Nothing committed: whatever is in memory came from aborted transactions.
                slot.next.store(UNKNOWN, Ordering::Release);
            }
            return;
        };
        let other_topic = matches!((&stored.topic_id, slot.topic_id()), (Some(a), Some(b)) if *a != b);
        let next = match slot.next() {
            Some(mine) if !other_topic && !committed_wins => mine.max(stored.next),
            _ => stored.next,
        };
        slot.next.store(next, Ordering::Release);
        slot.persisted.store(stored.next, Ordering::Release);
        // Only where this node starts right after it: a position in memory past it was copied here.
        *lock(&slot.bridge) = stored.bridge.filter(|b| b.upstream + 1 == next);
        if stored.topic_id.is_some() {
            slot.set_topic_id(stored.topic_id);
        }
    }

    /// Next offset to copy for one partition.
    pub fn next(&self, topic: &str, partition: i32) -> Option<i64> {
        let key = (topic.to_string(), partition);
        self.slots.read().unwrap_or_else(|p| p.into_inner()).get(&key).and_then(|s| s.next())
    }

    /// Slots whose position moved since the last call (each clears its flag with
    /// [`PartitionAck::take_dirty`] when handled).
    pub fn take_dirty(&self) -> Vec<Arc<PartitionAck>> {
        std::mem::take(&mut *lock(&self.dirty))
    }

    /// Some position moved since the dirty list was last taken.
    pub fn any_dirty(&self) -> bool {
        !lock(&self.dirty).is_empty()
    }

    /// Put `slot` back in the dirty list (its last persist failed).
    pub fn mark_dirty(&self, slot: &Arc<PartitionAck>) {
        slot.mark_dirty(self);
    }

    /// Records sent and not yet settled, over every partition (a new copier lifetime waits for its
    /// predecessor's to reach zero; one pass over the slots, every 100 ms while it waits).
    pub fn in_flight(&self) -> i64 {
        self.slots.read().unwrap_or_else(|p| p.into_inner()).values().map(|s| s.in_flight().max(0)).sum()
    }

    /// A new copier lifetime starts and the producers report nothing of the flow in flight any more
    /// (the producers' own counts, which a panic cannot skip): every count left here is of a record
    /// whose report was lost to a panic, or that never reached the producer. Zeroes them; returns how
    /// many there were.
    pub fn settle_in_flight(&self) -> i64 {
        let slots = self.slots.read().unwrap_or_else(|p| p.into_inner());
        slots.values().map(|s| s.in_flight.swap(0, Ordering::AcqRel).max(0)).sum()
    }

    /// Forget failures that late reports of an ended ownership left (see
    /// [`PartitionAck::settled_unowned`]): a new copier lifetime copies those partitions again from
    /// their frozen positions. Only while nothing is in flight.
    pub fn clear_unowned_failures(&self) {
        for slot in self.slots.read().unwrap_or_else(|p| p.into_inner()).values() {
            if slot.failed.load(Ordering::Acquire) && slot.in_flight() == 0 {
                slot.clear_failure();
            }
        }
    }

    /// Some slot was frozen by a failed delivery since [`AckTable::take_failed`] was last called.
    pub fn any_failed(&self) -> bool {
        self.any_failed.load(Ordering::Acquire)
    }

    /// Slots frozen by a failed delivery since the last call.
    pub fn take_failed(&self) -> Vec<Arc<PartitionAck>> {
        if !self.any_failed.swap(false, Ordering::AcqRel) {
            return Vec::new();
        }
        std::mem::take(&mut *lock(&self.failed))
    }

    /// Forget every partition of `topic` (it was deleted on the source). Its persisted progress stays
    /// in the progress topic, with the topic id that tells a later topic of the same name apart.
    /// Whether it had any slot.
    pub fn forget_topic(&self, topic: &str) -> bool {
        let mut slots = self.slots.write().unwrap_or_else(|p| p.into_inner());
        let before = slots.len();
        slots.retain(|(t, _), _| t != topic);
        slots.len() < before
    }

    /// Every known position.
    pub fn snapshot(&self) -> HashMap<SourcePartition, i64> {
        self.slots
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(|(tp, s)| s.next().map(|n| (tp.clone(), n)))
            .collect()
    }

    /// Number of partitions with a slot.
    pub fn len(&self) -> usize {
        self.slots.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(offset: i64) -> DeliveryFailure {
        DeliveryFailure {
            offset,
            size: 10,
            error: "boom".into(),
            permanent: false,
            unknown_partition: false,
            purged: false,
        }
    }

    #[test]
    fn positions_advance_only_on_acks_and_freeze_on_failure() {
        let t = AckTable::default();
        t.seed([(("orders".to_string(), 0), StoredPosition { next: 10, topic_id: None, epoch: 0, bridge: None })]);
        let s = t.slot("orders", 0);
        assert_eq!(s.next(), Some(10));
        for _ in 0..4 {
            s.sent();
        }
        s.acked(&t, 10);
        s.acked(&t, 11);
        assert_eq!(s.next(), Some(12));
        s.fail(&t, failure(12), true);
        s.acked(&t, 13);
        assert_eq!(s.next(), Some(12), "a success after a failure must not skip it");
        assert_eq!(s.in_flight(), 0);
        let failed = t.take_failed();
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].failure().map(|f| f.offset), Some(12));
        assert!(t.take_failed().is_empty(), "reported once");
        s.clear_failure();
        s.sent();
        s.acked(&t, 12);
        assert_eq!(s.next(), Some(13));
    }

    /// Records skipped (provenance) behind a held record must not carry the position past it once the
    /// partition copies again: the skip was decided on records that are fetched again after the retry.
    #[test]
    fn skips_behind_a_failure_do_not_outlive_it() {
        let t = AckTable::default();
        t.seed([(("orders".to_string(), 0), StoredPosition { next: 10, topic_id: None, epoch: 0, bridge: None })]);
        let s = t.slot("orders", 0);
        s.fail(&t, failure(10), false);
        s.skipped(&t, 14); // a later record of the same fetch, skipped while the partition is held
        assert_eq!(s.next(), Some(10));
        s.clear_failure(); // the retry: the partition copies again from 10
        s.sent();
        s.acked(&t, 10);
        assert_eq!(s.next(), Some(11), "the retried record moves the position by one, not past 11..14");
    }

    #[test]
    fn an_epoch_is_the_logs_highest_plus_one_whatever_the_clock() {
        // A node whose clock runs ahead must not take an epoch that outranks the owners after it: the
        // epoch follows the progress log only (issue 31 item 5: it was the wall clock in milliseconds).
        let t = AckTable::default();
        let stored = Some(StoredPosition { next: 3, topic_id: None, epoch: 5, bridge: None });
        t.adopt("a", 0, stored, 5, false);
        assert_eq!(t.slot("a", 0).epoch(), 6);
        t.adopt("b", 0, None, 0, false);
        assert_eq!(t.slot("b", 0).epoch(), 1, "a partition nobody owned yet");
    }

    #[test]
    fn each_adoption_outranks_every_earlier_owner() {
        let t = AckTable::default();
        let stored = |epoch| Some(StoredPosition { next: 3, topic_id: None, epoch, bridge: None });
        t.adopt("a", 0, stored(0), 0, false);
        assert_eq!(t.slot("a", 0).epoch(), 1, "the first owner ever");
        t.adopt("a", 0, stored(1_764_582_000_123), 1_764_582_000_123, false);
        assert_eq!(t.slot("a", 0).epoch(), 1_764_582_000_124, "above a later owner's (an older ferry's clock)");
        t.adopt("a", 0, None, 7, false);
        assert_eq!(t.slot("a", 0).epoch(), 1_764_582_000_125, "and above this node's own last one");
        t.adopt("b", 0, None, 41, false);
        assert_eq!(t.slot("b", 0).epoch(), 42, "above the highest epoch the log shows, even without a position");
    }

    #[test]
    fn deliveries_of_an_ended_ownership_move_memory_only_and_freeze_on_failure() {
        let t = AckTable::default();
        let s = t.slot("a", 0);
        for _ in 0..3 {
            s.sent();
        }
        s.settled_unowned(Some(10));
        assert_eq!(s.next(), Some(11));
        assert!(t.take_dirty().is_empty(), "nothing to persist from an ended ownership");
        s.settled_unowned(None);
        s.settled_unowned(Some(12));
        assert_eq!(s.next(), Some(11), "a failure freezes the position");
        assert_eq!(s.in_flight(), 0);
        assert!(t.take_failed().is_empty(), "and is not retried here");
    }

    #[test]
    fn seeding_never_overrides_newer_memory() {
        let t = AckTable::default();
        let s = t.slot("a", 1);
        s.sent();
        s.acked(&t, 99);
        let id: TopicId = Arc::from("id");
        t.seed([
            (("a".to_string(), 1), StoredPosition { next: 50, topic_id: None, epoch: 0, bridge: None }),
            (("a".to_string(), 2), StoredPosition { next: 7, topic_id: Some(id.clone()), epoch: 0, bridge: None }),
        ]);
        assert_eq!(t.next("a", 1), Some(100));
        assert_eq!(t.next("a", 2), Some(7));
        assert_eq!(t.slot("a", 2).topic_id(), Some(id));
        assert_eq!(t.slot("a", 2).persisted(), Some(7), "a seeded position is already persisted");
        assert_eq!(t.snapshot().len(), 2);
    }

    #[test]
    fn a_slot_is_listed_dirty_once_per_round() {
        let t = AckTable::default();
        let s = t.slot("a", 0);
        for i in 0..100 {
            s.sent();
            s.acked(&t, i);
        }
        let dirty = t.take_dirty();
        assert_eq!(dirty.len(), 1);
        dirty[0].take_dirty();
        assert!(t.take_dirty().is_empty());
        s.sent();
        s.acked(&t, 100);
        assert_eq!(t.take_dirty().len(), 1, "moved again after being taken");
    }

    #[test]
    fn a_skipped_record_counts_only_once_what_was_sent_before_it_is_settled() {
        let t = AckTable::default();
        let s = t.slot("a", 0);
        s.sent(); // offset 5
        s.skipped(&t, 6);
        assert_eq!(s.next(), None, "5 is still in flight: 6 does not count yet");
        s.acked(&t, 5);
        assert_eq!(s.next(), Some(7), "5 acknowledged: the skipped 6 counts");
        s.skipped(&t, 7);
        assert_eq!(s.next(), Some(8), "nothing in flight: counts at once");
        // A failure before the skip freezes the position before the failed record.
        s.sent(); // 8
        s.skipped(&t, 9);
        s.fail(&t, failure(8), true);
        assert_eq!(s.next(), Some(8));
    }

    #[test]
    fn a_rewind_inside_an_open_transaction_is_what_the_transaction_commits() {
        // Records of the old topic went into the open transaction; then the source topic was re-created
        // and the partition rewound to 0: the commit must say 0, not 5,000 under the new topic's id.
        let t = AckTable::default();
        let s = t.slot("a", 0);
        for upstream in 0..5_000 {
            s.sent();
            s.sent_in_transaction(upstream);
            s.acked(&t, upstream);
        }
        s.rewind(&t, 0);
        assert_eq!(s.take_transaction(), Some(0), "the transaction commits the rewound position");
        // Records of the new topic sent after the rewind move it on as usual.
        s.sent_in_transaction(0);
        s.sent_in_transaction(1);
        assert_eq!(s.take_transaction(), Some(2));
        assert_eq!(s.take_transaction(), None, "nothing of the partition in the next transaction");
    }

    #[test]
    fn rewind_moves_back_and_forgetting_a_topic_drops_its_slots() {
        let t = AckTable::default();
        let s = t.slot("a", 0);
        s.sent();
        s.acked(&t, 999);
        s.rewind(&t, 0);
        assert_eq!(s.next(), Some(0));
        t.slot("b", 0);
        t.forget_topic("a");
        assert_eq!(t.len(), 1);
        assert_eq!(t.next("a", 0), None);
    }
}
