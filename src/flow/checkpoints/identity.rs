//! Where a group lands on the target under the identity policy. Both clusters' topic (one name) holds
//! records of both origins: on the target, the target's own records and this flow's copies of the
//! source's records interleave. The forward answer (this flow's syncs) places the group among this
//! flow's copies; it knows nothing of the target's own records in between. Those the group read on the
//! source as the reverse flow's copies, and the reverse flow's syncs inverted place it among them: the
//! answer is the lower of the two, so that no own record of the target the group has not read is
//! skipped.
//!
//! That cap is too low after a group read, on the source, records produced there (a fail-back after a
//! failover): the inverted reverse syncs end at the target's last own record and answer "at most
//! there", so the group would re-read every copy of the source's records after it. The cap is lifted
//! when the forward syncs prove that every offset between the two answers holds a copy this flow wrote
//! (their dense links, `sync_store` "Dense links"): then no own record of the target sits there, and
//! every copy there is of a source record below the group's offset (read) or of one at or after it,
//! whose copy from the forward answer on the forward guarantee already provides. A re-read remains
//! possible (the links are not proven dense: MM2's or older ferry syncs, a restart between them, the
//! target's own records in between); a skip is not.
//!
//! Why flags in the syncs rather than reading the target's records in that range and checking their
//! provenance header: the copier sees every downstream offset it is acknowledged in order, so the
//! proof costs one comparison per record and no reads, and the computer stays free of per-group I/O.

use crate::sync_store::{SyncStore, Translation};

/// The downstream offset for a group on `topic`-`partition` (upstream names), from the `forward`
/// answer of this flow's syncs (`forward_syncs`) and the `back` answer of the reverse flow's inverted;
/// `None` when it cannot be translated (yet).
pub(super) fn downstream(
    forward_syncs: &SyncStore,
    topic: &str,
    partition: i32,
    forward: Translation,
    back: Translation,
) -> Option<i64> {
    match (forward, back) {
        // Before this flow's first sync of the partition: on a standby whose topic holds only the
        // target's records (copies, which this flow skips) until its first own record, the inverted
        // reverse syncs alone know where the group stands (a fail-back from a standby).
        (Translation::TooOld | Translation::NoSyncs, back @ Translation::Exact(_)) => back.offset(),
        (forward, back) => {
            let f = forward.offset()?;
            match back.offset() {
                Some(a) if a < f && !forward_syncs.copies_cover(topic, partition, a, f) => Some(a),
                _ => Some(f),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync_rule::SyncMark;
    use crate::sync_store::{DEFAULT_PER_PARTITION_BUDGET, MIN_PER_PARTITION_BUDGET, StoredSync};

    const T: &str = "orders";

    /// The forward flow's syncs: `(upstream, downstream, lifetime, seq, dense)`, `lifetime` 0 unmarked.
    fn store(budget: usize, syncs: &[(i64, i64, u64, u64, bool)]) -> SyncStore {
        let mut s = SyncStore::new(budget);
        for (position, &(upstream, downstream, lifetime, seq, dense)) in syncs.iter().enumerate() {
            let mark = (lifetime != 0).then_some(SyncMark { lifetime, seq, epoch: 0, dense });
            s.handle(T, 0, StoredSync { upstream, downstream, mark, position: position as i64 });
        }
        s.set_read_to_end();
        s
    }

    fn chain(syncs: &[(i64, i64, u64, u64, bool)]) -> SyncStore {
        store(DEFAULT_PER_PARTITION_BUDGET, syncs)
    }

    /// The fail-back of the runbook: the target (east) holds its own records at 0..100, then copies
    /// of the source's (west's) records 100.. at 100..; west holds east's copies at 0..100 first. A
    /// group at 140 on west: forward exact 140, inverted reverse syncs "at most 100".
    fn answer(s: &SyncStore, g: i64) -> Option<i64> {
        downstream(s, T, 0, s.translate(T, 0, g), Translation::Approx(100))
    }

    #[test]
    fn lifts_the_cap_over_a_dense_chain() {
        let s = chain(&[(100, 100, 1, 0, false), (120, 120, 1, 1, true), (149, 149, 1, 2, true)]);
        assert_eq!(answer(&s, 140), Some(140));
        assert_eq!(answer(&s, 150), Some(150), "past the last sync: its record is a copy too");
        assert_eq!(answer(&s, 100), Some(100));
        // The inverted answer below the chain's first sync proves nothing about what lies before it.
        assert_eq!(downstream(&s, T, 0, s.translate(T, 0, 140), Translation::Approx(99)), Some(99));
        // Below this flow's first sync the inverted answer alone stands, as before.
        assert_eq!(downstream(&s, T, 0, s.translate(T, 0, 50), Translation::Exact(50)), Some(50));
    }

    #[test]
    fn keeps_the_cap_over_a_foreign_record() {
        // West filtered 110..=114 and east's own records sit at 110..=114: the delta is unchanged, the
        // sync for 115 is not dense. A group at 140 has not read them.
        let s = chain(&[(100, 100, 1, 0, false), (115, 115, 1, 1, false), (149, 149, 1, 2, true)]);
        assert_eq!(answer(&s, 140), Some(100));
        assert_eq!(answer(&s, 112), Some(100), "inside the run up to the foreign records");
        // The inverted answer at or past the non-dense link: the dense rest lifts.
        assert_eq!(downstream(&s, T, 0, s.translate(T, 0, 140), Translation::Approx(115)), Some(140));
    }

    #[test]
    fn keeps_the_cap_with_syncs_that_do_not_prove_density() {
        // MM2's syncs (unmarked), and marks without the flag (older ferry).
        let mm2 = chain(&[(100, 100, 0, 0, false), (120, 120, 0, 0, false), (149, 149, 0, 0, false)]);
        assert_eq!(answer(&mm2, 140), Some(100));
        let older = chain(&[(100, 100, 1, 0, false), (120, 120, 1, 1, false), (149, 149, 1, 2, false)]);
        assert_eq!(answer(&older, 140), Some(100));
    }

    #[test]
    fn keeps_the_cap_across_lifetimes_and_broken_sequences() {
        // A restart between 120 and 130: the new lifetime's first sync says nothing of what is before it.
        let s =
            chain(&[(100, 100, 1, 0, false), (120, 120, 1, 1, true), (130, 130, 2, 0, false), (149, 149, 2, 1, true)]);
        assert_eq!(answer(&s, 140), Some(100));
        assert_eq!(answer(&s, 125), Some(121), "lifetime 1's copies up to its last sync are proven");
        // A flagged sync whose predecessor was lost (seq 2 missing) proves nothing either.
        let lost = chain(&[(100, 100, 1, 0, false), (120, 120, 1, 1, true), (149, 149, 1, 3, true)]);
        assert_eq!(answer(&lost, 150), Some(100));
        assert_eq!(answer(&lost, 140), Some(121));
    }

    #[test]
    fn thinning_keeps_a_merged_link_dense_only_if_both_were() {
        // Many syncs, thinned to the budget; one link in the older half is over a foreign record.
        let syncs = |foreign: Option<u64>| -> Vec<(i64, i64, u64, u64, bool)> {
            let mut down = 1000;
            (0..300u64)
                .map(|seq| {
                    let dense = seq != 0 && Some(seq) != foreign;
                    if Some(seq) == foreign {
                        down += 3; // three of the target's own records before this copy
                    }
                    let s = (seq as i64 * 2, down, 1, seq, dense);
                    down += 2;
                    s
                })
                .collect()
        };
        let a = Translation::Approx(1000);
        let dense = store(MIN_PER_PARTITION_BUDGET, &syncs(None));
        assert!(dense.len() <= MIN_PER_PARTITION_BUDGET, "thinned");
        assert_eq!(downstream(&dense, T, 0, dense.translate(T, 0, 590), a), Some(1590));
        let foreign = store(MIN_PER_PARTITION_BUDGET, &syncs(Some(41)));
        // The sync right after the foreign records was thinned away: 82 is no longer a sync.
        assert_ne!(foreign.translate(T, 0, 82), Translation::Exact(1085));
        // The merged link over the foreign records is not dense.
        assert_eq!(downstream(&foreign, T, 0, foreign.translate(T, 0, 590), a), Some(1000));
        // From past the foreign records (as the inverted answer may be), the rest is dense again.
        let after = foreign.translate(T, 0, 500).offset().expect("translated");
        assert_eq!(downstream(&foreign, T, 0, foreign.translate(T, 0, 590), Translation::Approx(after)), Some(1593));
    }
}
