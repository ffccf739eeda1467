//! The foreign-record count's arithmetic ([`super::foreign`] looks at the partitions): what the growth
//! of a remote partition's end offset between two quiet looks says, once ferry's own acknowledged
//! writes are taken away. Its own file so that the copier's delivery state can hold a baseline without
//! importing the watch.

/// One remote partition at one quiet look: its end offset and what ferry's deliveries to it had
/// reported by then (both monotonic in a copier lifetime).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Baseline {
    /// The partition's end offset (high watermark).
    pub end: i64,
    /// Records ferry's acknowledgements put in it (this copier lifetime).
    pub written: u64,
    /// Deliveries that failed: such a record may have been written anyway.
    pub unsure: u64,
}

impl Baseline {
    /// The records someone else wrote between `self` and `now` (0 when the stretch cannot tell: a
    /// failed delivery, a log that shrank, acknowledgements that outnumber the growth).
    pub fn observe(&self, now: &Baseline) -> u64 {
        if now.unsure != self.unsure || now.end < self.end || now.written < self.written {
            return 0;
        }
        let grew = (now.end - self.end) as u64;
        grew.saturating_sub(now.written - self.written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(end: i64, written: u64, unsure: u64) -> Baseline {
        Baseline { end, written, unsure }
    }

    #[test]
    fn growth_that_ferrys_acknowledgements_explain_is_not_foreign() {
        assert_eq!(at(100, 10, 0).observe(&at(150, 60, 0)), 0);
        assert_eq!(at(100, 10, 0).observe(&at(100, 10, 0)), 0);
    }

    #[test]
    fn the_excess_is_foreign_and_counted_once() {
        let first = at(100, 10, 0);
        let second = at(157, 60, 0);
        assert_eq!(first.observe(&second), 7);
        // The next look starts from the second: the same seven are not counted again.
        assert_eq!(second.observe(&at(160, 63, 0)), 0);
        assert_eq!(second.observe(&at(161, 63, 0)), 1);
    }

    #[test]
    fn a_stretch_that_cannot_tell_counts_nothing() {
        // A failed delivery may have landed.
        assert_eq!(at(100, 10, 0).observe(&at(120, 15, 1)), 0);
        // The log shrank (truncated, re-created) or acknowledgements outnumber the growth.
        assert_eq!(at(100, 10, 0).observe(&at(90, 15, 0)), 0);
        assert_eq!(at(100, 10, 0).observe(&at(105, 30, 0)), 0);
    }
}
