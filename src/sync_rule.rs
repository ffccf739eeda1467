//! When an acknowledged copy must be published as an offset sync: MM2's rule (3.7+, mm2-reference.md
//! §4.6) plus ferry's delta-change rule, and the header that marks ferry's syncs.
//!
//! MM2 publishes a sync for the first record of a lifetime, after an upstream gap, after downstream
//! truncation, when the downstream offset is `offset_lag_max` past the last sync, and (KAFKA-15906) the
//! latest position of each partition once in a while. ferry additionally publishes a sync wherever
//! `downstream - upstream` (the *delta*) changes, and publishes the latest position of a partition as
//! soon as it has been quiet for [`QUIET_AFTER`].
//!
//! **The guarantee** this buys: between two consecutive ferry syncs of one partition and one copier
//! lifetime (`seq` and `seq + 1` in the [`SyncMark`] header), every upstream record `u` copied in
//! `[sync_a.upstream, sync_b.upstream)` landed at `u + delta_a`, and those records are contiguous from
//! `sync_a.upstream` on; an upstream gap can only sit right before `sync_b` (the gap itself is what
//! publishes `sync_b`). A translator can therefore map a committed offset `g` in that run to
//! `min(g + delta_a, sync_b.downstream)` exactly (see `sync_store`), where MM2's `+1` rule re-reads up
//! to a whole gap. Syncs without the header (MM2's, or another writer's) or with a broken sequence carry
//! no such promise.
//!
//! Pure: no I/O, time is passed in.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::mm2::records::OffsetSync;

/// A partition whose newest acknowledged position was not published gets it published once no new
/// acknowledgement arrived for this long, so consumers at the end of a quiet topic translate exactly.
pub const QUIET_AFTER: Duration = Duration::from_secs(1);

/// Header key of ferry's mark on its offset-sync records. MM2's readers ignore headers.
pub const SYNC_MARK_HEADER: &str = "ferry.sync";

/// ferry's mark on an offset sync: which copier lifetime wrote it, its position in that lifetime's
/// sequence for the partition, and the *ownership epoch* of the partition when it was written.
///
/// The epoch orders the owners of a partition across nodes: a node that is given a partition by the
/// copier group takes an epoch above every earlier owner's (see `flow::acks::next_epoch`). An owner that
/// lost the partition without knowing it (frozen past the session timeout, a flush that gave up) may
/// still publish syncs for records that land late; the sync store ignores them once a newer owner
/// published (`sync_store`), so they can never pull a translation past records only the new owner
/// copied.
///
/// `dense` says that every downstream offset after the previous sync of this sequence (`seq - 1`), up
/// to and including this sync's, holds a record this lifetime wrote: the copier saw the downstream
/// offsets of its acknowledgements step by exactly one. Nothing else (a record of another producer, a
/// transaction marker) sits between the two syncs in the target partition. The identity policy's
/// translation uses it to tell the forward flow's copies from the target's own records (see
/// `flow::checkpoints::identity`). The first sync of a run is never dense (there is no previous one).
///
/// Encoded as version byte `1`, then `lifetime` and `seq` as big-endian u64, then (since the epoch was
/// added) `epoch` as big-endian u64, then (since `dense` was added) a flags byte, bit 0 `dense`. A
/// shorter mark from an older ferry decodes with epoch 0 and not dense (it proves nothing); older ferry
/// versions read the fields they know at the start of a new mark and ignore the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncMark {
    pub lifetime: u64,
    pub seq: u64,
    pub epoch: u64,
    pub dense: bool,
}

impl SyncMark {
    const VERSION: u8 = 1;
    pub const LEN: usize = 26;
    const DENSE: u8 = 1;

    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[0] = Self::VERSION;
        out[1..9].copy_from_slice(&self.lifetime.to_be_bytes());
        out[9..17].copy_from_slice(&self.seq.to_be_bytes());
        out[17..25].copy_from_slice(&self.epoch.to_be_bytes());
        out[25] = if self.dense { Self::DENSE } else { 0 };
        out
    }

    /// `None` for anything that is not a version-1 mark (a future version is treated as unmarked).
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        if bytes.len() < 17 || bytes[0] != Self::VERSION {
            return None;
        }
        let lifetime = u64::from_be_bytes(bytes[1..9].try_into().ok()?);
        let seq = u64::from_be_bytes(bytes[9..17].try_into().ok()?);
        let epoch = match bytes.get(17..25) {
            Some(e) => u64::from_be_bytes(e.try_into().ok()?),
            None => 0,
        };
        let dense = bytes.get(25).is_some_and(|f| f & Self::DENSE != 0);
        Some(Self { lifetime, seq, epoch, dense })
    }
}

/// The last acknowledged position of a partition in one copier lifetime, marked as that lifetime's next
/// sync would be: persisted with the partition's progress, so that the partition's next owner, after a
/// crash of this one, publishes it as the sync this lifetime never got to publish (reason
/// [`SyncReason::Handover`]). It chains to the lifetime's last published sync when nothing was
/// published since it was taken (the same sequence), and the store proves the run between them exact;
/// otherwise its sequence number was used already and the store ignores it as republished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bridge {
    pub upstream: i64,
    pub downstream: i64,
    pub mark: SyncMark,
}

impl Bridge {
    /// `upstream,downstream,lifetime,seq,epoch,dense` (decimal, dense 0 or 1): a progress record's header.
    pub fn encode(&self) -> String {
        let m = &self.mark;
        format!("{},{},{},{},{},{}", self.upstream, self.downstream, m.lifetime, m.seq, m.epoch, u8::from(m.dense))
    }

    pub fn decode(text: &str) -> Option<Self> {
        let mut f = text.split(',');
        let mut next = || f.next().and_then(|v| v.parse::<i128>().ok());
        let (upstream, downstream) = (i64::try_from(next()?).ok()?, i64::try_from(next()?).ok()?);
        let (lifetime, seq, epoch) =
            (u64::try_from(next()?).ok()?, u64::try_from(next()?).ok()?, u64::try_from(next()?).ok()?);
        let dense = match next()? {
            0 => false,
            1 => true,
            _ => return None,
        };
        (upstream >= 0 && downstream >= 0).then_some(Self {
            upstream,
            downstream,
            mark: SyncMark { lifetime, seq, epoch, dense },
        })
    }

    pub fn named(self, topic: &str, partition: i32) -> MarkedSync {
        marked(topic, partition, self.upstream, self.downstream, self.mark)
    }
}

/// A sync to publish, with its mark.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkedSync {
    pub sync: OffsetSync,
    pub mark: SyncMark,
}

/// Why a sync was published (for metrics and logs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SyncReason {
    FirstOfLifetime,
    UpstreamGap,
    DownstreamTruncated,
    DeltaChanged,
    LagExceeded,
    Quiet,
    /// A previous owner's last position, published by the partition's next owner ([`Bridge`]).
    Handover,
}

impl SyncReason {
    pub const ALL: [SyncReason; 7] = [
        Self::FirstOfLifetime,
        Self::UpstreamGap,
        Self::DownstreamTruncated,
        Self::DeltaChanged,
        Self::LagExceeded,
        Self::Quiet,
        Self::Handover,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::FirstOfLifetime => "first",
            Self::UpstreamGap => "upstream_gap",
            Self::DownstreamTruncated => "downstream_truncated",
            Self::DeltaChanged => "delta_changed",
            Self::LagExceeded => "lag",
            Self::Quiet => "quiet",
            Self::Handover => "handover",
        }
    }
}

/// The rule's state for one partition in one copier lifetime. The copier keeps one per partition it
/// copies (so the per-record path looks nothing up by name); [`SyncRule`] bundles them by name for
/// callers that have no such table.
#[derive(Clone, Debug)]
pub struct PartitionRule {
    previous_upstream: i64,
    previous_downstream: i64,
    /// Downstream offset of the last published sync (`-1`: none this lifetime). Quiet syncs do not move
    /// it, like MM2's promoted delayed syncs.
    last_sync_downstream: i64,
    /// Delta of the last published sync.
    last_sync_delta: i64,
    /// Newest acknowledged position not yet published, and when it was acknowledged.
    unpublished: Option<(i64, i64, Instant)>,
    next_seq: u64,
    /// The partition's ownership epoch, stamped on every sync (see [`SyncMark`]).
    epoch: u64,
    /// Every acknowledgement since the last published sync (quiet ones too) landed right after the one
    /// before it: the next sync is [`SyncMark::dense`]. False until the run's first sync.
    dense: bool,
}

impl Default for PartitionRule {
    fn default() -> Self {
        Self {
            previous_upstream: -1,
            previous_downstream: -1,
            last_sync_downstream: -1,
            last_sync_delta: 0,
            unpublished: None,
            next_seq: 0,
            epoch: 0,
            dense: false,
        }
    }
}

impl PartitionRule {
    /// The rule of a partition owned under `epoch`.
    pub fn with_epoch(epoch: u64) -> Self {
        Self { epoch, ..Self::default() }
    }

    /// The target acknowledged upstream record `upstream` at `downstream`. Returns the sync to publish
    /// now, if any, marked with `lifetime` and this partition's next sequence number.
    pub fn on_ack(
        &mut self,
        lifetime: u64,
        lag_max: i64,
        upstream: i64,
        downstream: i64,
        now: Instant,
    ) -> Option<(OffsetSyncPoint, SyncReason)> {
        let delta = downstream - upstream;
        // A first acknowledgement has no predecessor, so it never proves density.
        self.dense &= self.previous_downstream != -1 && downstream == self.previous_downstream + 1;
        let reason = if self.last_sync_downstream == -1 {
            Some(SyncReason::FirstOfLifetime)
        } else if upstream - self.previous_upstream != 1 {
            Some(SyncReason::UpstreamGap)
        } else if downstream < self.previous_downstream {
            Some(SyncReason::DownstreamTruncated)
        } else if delta != self.last_sync_delta {
            Some(SyncReason::DeltaChanged)
        } else if downstream - (self.last_sync_downstream + 1) >= lag_max {
            Some(SyncReason::LagExceeded)
        } else {
            None
        };
        self.previous_upstream = upstream;
        self.previous_downstream = downstream;
        let Some(reason) = reason else {
            self.unpublished = Some((upstream, downstream, now));
            return None;
        };
        self.last_sync_downstream = downstream;
        self.last_sync_delta = delta;
        self.unpublished = None;
        Some((self.point(lifetime, upstream, downstream), reason))
    }

    /// The newest position if it is unpublished and has been quiet for [`QUIET_AFTER`] (or at all,
    /// with `force`, e.g. at shutdown).
    pub fn quiet(&mut self, lifetime: u64, now: Instant, force: bool) -> Option<OffsetSyncPoint> {
        let (up, down, at) = self.unpublished?;
        if !force && now.duration_since(at) < QUIET_AFTER {
            return None;
        }
        self.unpublished = None;
        Some(self.point(lifetime, up, down))
    }

    /// The newest acknowledged position as this lifetime's next sync would carry it (see [`Bridge`]).
    pub fn bridge(&self, lifetime: u64) -> Option<Bridge> {
        (self.previous_upstream >= 0 && self.previous_downstream >= 0).then_some(Bridge {
            upstream: self.previous_upstream,
            downstream: self.previous_downstream,
            mark: SyncMark { lifetime, seq: self.next_seq, epoch: self.epoch, dense: self.dense },
        })
    }

    /// Whether an acknowledged position waits to be published (by the lag rule or as a quiet sync).
    pub fn has_unpublished(&self) -> bool {
        self.unpublished.is_some()
    }

    /// The source partition was rewound (re-created or truncated upstream): the next acknowledgement
    /// starts a new run, published as the first of the lifetime. The sequence continues, so syncs
    /// from before the rewind never chain into the new run.
    pub fn rewind(&mut self) {
        *self = Self { next_seq: self.next_seq, epoch: self.epoch, ..Self::default() };
    }

    fn point(&mut self, lifetime: u64, upstream: i64, downstream: i64) -> OffsetSyncPoint {
        let mark = SyncMark { lifetime, seq: self.next_seq, epoch: self.epoch, dense: self.dense };
        self.next_seq += 1;
        // The next sync's run starts at this one.
        self.dense = true;
        OffsetSyncPoint { upstream, downstream, mark }
    }
}

/// A sync selected for one partition, before the partition's name is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffsetSyncPoint {
    pub upstream: i64,
    pub downstream: i64,
    pub mark: SyncMark,
}

impl OffsetSyncPoint {
    pub fn named(self, topic: &str, partition: i32) -> MarkedSync {
        marked(topic, partition, self.upstream, self.downstream, self.mark)
    }
}

/// The rule over many partitions of one copier lifetime, looked up by name (tests and tools).
#[derive(Debug)]
pub struct SyncRule {
    lifetime: u64,
    offset_lag_max: i64,
    partitions: HashMap<(String, i32), PartitionRule>,
}

impl SyncRule {
    /// `lifetime` must differ between copier lifetimes (a random number will do).
    pub fn new(lifetime: u64, offset_lag_max: i64) -> Self {
        Self { lifetime, offset_lag_max, partitions: HashMap::new() }
    }

    /// The target acknowledged upstream record `upstream` of `topic`-`partition` at `downstream`.
    /// Returns the sync to publish now, if any.
    pub fn on_ack(
        &mut self,
        topic: &str,
        partition: i32,
        upstream: i64,
        downstream: i64,
        now: Instant,
    ) -> Option<(MarkedSync, SyncReason)> {
        let rule = self.partitions.entry((topic.to_string(), partition)).or_default();
        rule.on_ack(self.lifetime, self.offset_lag_max, upstream, downstream, now)
            .map(|(p, reason)| (p.named(topic, partition), reason))
    }

    /// Syncs for partitions whose newest position is unpublished and that have been quiet for
    /// [`QUIET_AFTER`] (all of them with `force`, e.g. at shutdown).
    pub fn quiet_syncs(&mut self, now: Instant, force: bool) -> Vec<MarkedSync> {
        let lifetime = self.lifetime;
        self.partitions
            .iter_mut()
            .filter_map(|((topic, partition), rule)| {
                rule.quiet(lifetime, now, force).map(|p| p.named(topic, *partition))
            })
            .collect()
    }
}

fn marked(topic: &str, partition: i32, upstream: i64, downstream: i64, mark: SyncMark) -> MarkedSync {
    MarkedSync {
        sync: OffsetSync {
            topic: topic.to_string(),
            partition,
            upstream_offset: upstream,
            downstream_offset: downstream,
        },
        mark,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(rule: &mut SyncRule, pairs: &[(i64, i64)], now: Instant) -> Vec<(i64, i64, SyncReason)> {
        pairs
            .iter()
            .filter_map(|(u, d)| rule.on_ack("t", 0, *u, *d, now))
            .map(|(s, r)| (s.sync.upstream_offset, s.sync.downstream_offset, r))
            .collect()
    }

    #[test]
    fn one_to_one_copy_syncs_like_mm2() {
        // MM2 with offset.lag.max=100 emits for downstream 0, 101, 202, ...
        let mut rule = SyncRule::new(1, 100);
        let pairs: Vec<_> = (0..=250).map(|i| (i, i)).collect();
        let got: Vec<_> = run(&mut rule, &pairs, Instant::now()).into_iter().map(|(u, _, _)| u).collect();
        assert_eq!(got, vec![0, 101, 202]);
    }

    #[test]
    fn a_bridge_is_the_last_acknowledgement_marked_as_the_next_sync_and_round_trips() {
        let mut rule = PartitionRule::with_epoch(7);
        let now = Instant::now();
        assert_eq!(rule.bridge(9), None, "nothing acknowledged yet");
        let first = rule.on_ack(9, 1_000, 0, 100, now).expect("the first sync");
        assert_eq!(first.0.mark.seq, 0);
        for u in 1..=50 {
            assert!(rule.on_ack(9, 1_000, u, 100 + u, now).is_none());
        }
        let b = rule.bridge(9).expect("a bridge");
        assert_eq!((b.upstream, b.downstream), (50, 150));
        assert_eq!(b.mark, SyncMark { lifetime: 9, seq: 1, epoch: 7, dense: true }, "chains to seq 0");
        assert_eq!(Bridge::decode(&b.encode()), Some(b));
        assert_eq!(Bridge::decode("1,2,3"), None);
        assert_eq!(Bridge::decode("-1,2,3,4,5,0"), None);
    }

    #[test]
    fn lag_zero_syncs_every_record() {
        let mut rule = SyncRule::new(1, 0);
        let got = run(&mut rule, &[(5, 0), (6, 1), (7, 2)], Instant::now());
        assert_eq!(got.len(), 3);
    }

    #[test]
    fn upstream_gap_truncation_and_delta_change_publish() {
        let mut rule = SyncRule::new(1, 100);
        let now = Instant::now();
        let got = run(&mut rule, &[(0, 10), (1, 11), (5, 12), (6, 13), (7, 3), (8, 9)], now);
        assert_eq!(
            got,
            vec![
                (0, 10, SyncReason::FirstOfLifetime),
                (5, 12, SyncReason::UpstreamGap),
                (7, 3, SyncReason::DownstreamTruncated),
                (8, 9, SyncReason::DeltaChanged), // a downstream gap: 3 -> 9
            ]
        );
    }

    #[test]
    fn between_consecutive_marks_every_record_has_the_same_delta() {
        // Property over a messy stream: for each pair of consecutive syncs, all acks in between share the
        // first sync's delta.
        let mut rule = SyncRule::new(7, 3);
        let now = Instant::now();
        let mut pairs = Vec::new();
        let (mut u, mut d) = (0i64, 0i64);
        for i in 0..500 {
            pairs.push((u, d));
            u += if i % 37 == 0 { 3 } else { 1 };
            d += if i % 53 == 0 { 2 } else { 1 };
        }
        let mut syncs = Vec::new();
        for (up, down) in &pairs {
            if let Some((s, _)) = rule.on_ack("t", 0, *up, *down, now) {
                syncs.push(s);
            }
        }
        for w in syncs.windows(2) {
            assert_eq!(w[1].mark.seq, w[0].mark.seq + 1);
            let delta = w[0].sync.downstream_offset - w[0].sync.upstream_offset;
            for (up, down) in
                pairs.iter().filter(|(up, _)| *up >= w[0].sync.upstream_offset && *up < w[1].sync.upstream_offset)
            {
                assert_eq!(down - up, delta, "record {up} inside run starting at {}", w[0].sync.upstream_offset);
            }
        }
    }

    #[test]
    fn quiet_partitions_publish_their_latest_position() {
        let mut rule = SyncRule::new(1, 100);
        let t0 = Instant::now();
        run(&mut rule, &[(0, 0), (1, 1), (2, 2)], t0);
        assert!(rule.quiet_syncs(t0 + Duration::from_millis(500), false).is_empty());
        let quiet = rule.quiet_syncs(t0 + QUIET_AFTER, false);
        assert_eq!(quiet.len(), 1);
        assert_eq!((quiet[0].sync.upstream_offset, quiet[0].sync.downstream_offset, quiet[0].mark.seq), (2, 2, 1));
        assert!(rule.quiet_syncs(t0 + QUIET_AFTER * 5, false).is_empty(), "published once");
        // The next ack continues the sequence and does not count the quiet sync for the lag rule (MM2).
        assert!(rule.on_ack("t", 0, 3, 3, t0).is_none());
    }

    #[test]
    fn mark_round_trips_and_rejects_other_versions() {
        let m = SyncMark { lifetime: 0xdead_beef, seq: 42, epoch: 1_764_582_000_123, dense: true };
        assert_eq!(SyncMark::decode(&m.encode()), Some(m));
        let sparse = SyncMark { dense: false, ..m };
        assert_eq!(SyncMark::decode(&sparse.encode()), Some(sparse));
        let mut other = m.encode();
        other[0] = 2;
        assert_eq!(SyncMark::decode(&other), None);
        assert_eq!(SyncMark::decode(&[1, 2, 3]), None);
        // A mark written before the epoch existed (17 bytes) is epoch 0; an older reader sees the same
        // lifetime and sequence in the first 17 bytes of a new mark.
        let old = &m.encode()[..17];
        assert_eq!(SyncMark::decode(old), Some(SyncMark { epoch: 0, dense: false, ..m }));
        // A mark written before `dense` existed (25 bytes) proves no density.
        let before_dense = &m.encode()[..25];
        assert_eq!(SyncMark::decode(before_dense), Some(SyncMark { dense: false, ..m }));
    }

    #[test]
    fn a_sync_is_dense_only_when_every_downstream_offset_since_the_previous_one_is_this_lifetimes() {
        let t0 = Instant::now();
        let dense = |rule: &mut SyncRule, pairs: &[(i64, i64)]| -> Vec<(i64, bool)> {
            pairs
                .iter()
                .filter_map(|(u, d)| rule.on_ack("t", 0, *u, *d, t0))
                .map(|(s, _)| (s.sync.upstream_offset, s.mark.dense))
                .collect()
        };
        let mut rule = SyncRule::new(1, 3);
        // First of the lifetime: nothing before it. Then lag syncs over contiguous copies: dense.
        assert_eq!(dense(&mut rule, &[(0, 10), (1, 11), (2, 12), (3, 13), (4, 14)]), vec![(0, false), (4, true)]);
        // An upstream gap with a foreign record downstream and the delta unchanged (filtered 5..=6,
        // another producer's record at 15, a marker at 16): not dense.
        assert_eq!(dense(&mut rule, &[(7, 17)]), vec![(7, false)]);
        // An upstream gap without a downstream one (filtered records): dense.
        assert_eq!(dense(&mut rule, &[(9, 18)]), vec![(9, true)]);
        // A downstream jump inside a run publishes (delta change) and is not dense.
        assert_eq!(dense(&mut rule, &[(10, 19), (11, 21)]), vec![(11, false)]);
        // A quiet sync is dense when the acknowledgements since the last sync were, and starts a run.
        assert!(rule.on_ack("t", 0, 12, 22, t0).is_none());
        let quiet = rule.quiet_syncs(t0 + QUIET_AFTER, false);
        assert_eq!((quiet[0].sync.upstream_offset, quiet[0].mark.dense), (12, true));
        assert!(rule.on_ack("t", 0, 13, 24, t0).is_some(), "a downstream jump after the quiet sync");
        let mut rule = PartitionRule::default();
        rule.on_ack(1, 100, 0, 0, t0).expect("first");
        assert!(rule.on_ack(1, 100, 1, 2, t0).is_some_and(|(p, _)| !p.mark.dense), "jump after 0");
        // After a rewind the run starts over: its first sync is not dense, even at downstream 0.
        rule.rewind();
        assert!(rule.on_ack(1, 100, 0, 0, t0).is_some_and(|(p, _)| !p.mark.dense));
    }

    #[test]
    fn a_rule_stamps_its_epoch_on_every_sync_and_keeps_it_across_rewinds() {
        let t0 = Instant::now();
        let mut rule = PartitionRule::with_epoch(7);
        let (p, _) = rule.on_ack(1, 100, 0, 0, t0).expect("first");
        assert_eq!((p.mark.epoch, p.mark.seq), (7, 0));
        rule.rewind();
        let (p, reason) = rule.on_ack(1, 100, 0, 5, t0).expect("first after rewind");
        assert_eq!((p.mark.epoch, p.mark.seq, reason), (7, 1, SyncReason::FirstOfLifetime));
    }
}
