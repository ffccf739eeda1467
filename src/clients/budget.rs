//! The node's memory budget for records being copied, shared by its flows.
//!
//! Each copier holds records in two places: its consumer's prefetch (librdkafka's
//! `queued.max.messages.kbytes`, per consumer) and its share of the record producer's queue (its lane).
//! 16 MiB of each is what one flow needs for its full copy rate on a near cluster (bench/results.md,
//! headline 2026-12-05: 181k records/s of 512 B at 117 MiB peak RSS, where 32 MiB copied as fast at
//! 171 MiB and 8 MiB copied 126k; before fetches followed the round trip, 16 MiB starved a flow), but a
//! node of 20 busy flows held 20 × 64 MiB that way (1,068 MiB peak RSS in `flows-busy`), while the
//! brokers and the cores, not the buffers, bound what those flows copy together. So a flow gets its
//! share of [`NODE_BYTES`] for each of the two, between [`FLOW_MIN_BYTES`] (enough for a flow's share of
//! the rate) and [`FLOW_MAX_BYTES`] (what one flow alone uses): up to eight flows keep 16 MiB each,
//! sixteen or more 8 MiB. A copier over a long link prefetches more (see the copier's consumer).
//!
//! A copier is sized when it starts, from the flows the node runs then (set at every reload before
//! flows start): librdkafka cannot resize a consumer's prefetch, and untouched flows must never restart
//! because another flow was added. After a reload that adds flows the earlier copiers keep their size
//! until they restart.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The node's bytes for prefetched records, and again for queued records, before the floor per flow.
pub const NODE_BYTES: usize = 128 * 1024 * 1024;
/// The most one flow gets of each (a flow alone on its node).
pub const FLOW_MAX_BYTES: usize = 16 * 1024 * 1024;
/// The least one flow gets of each, however many flows share the node.
pub const FLOW_MIN_BYTES: usize = 8 * 1024 * 1024;

/// Enabled flows of the node's current flow set.
static FLOWS: AtomicUsize = AtomicUsize::new(1);

/// The node now runs `flows` enabled flows: copiers started from now on are sized for them.
pub fn set_flows(flows: usize) {
    FLOWS.store(flows.max(1), Ordering::Release);
}

/// One flow's share of each buffer, for a node of `flows` flows.
pub fn share_of(flows: usize) -> usize {
    (NODE_BYTES / flows.max(1)).clamp(FLOW_MIN_BYTES, FLOW_MAX_BYTES)
}

/// One flow's share of each buffer now.
pub fn flow_share() -> usize {
    share_of(FLOWS.load(Ordering::Acquire))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_alone_keeps_its_full_buffers_and_many_share_the_node_down_to_a_floor() {
        const MIB: usize = 1024 * 1024;
        assert_eq!(share_of(0), 16 * MIB);
        assert_eq!(share_of(1), 16 * MIB);
        assert_eq!(share_of(8), 16 * MIB);
        assert_eq!(share_of(12), 128 * MIB / 12);
        assert_eq!(share_of(16), 8 * MIB);
        assert_eq!(share_of(100), 8 * MIB);
    }
}
