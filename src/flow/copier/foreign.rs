//! Foreign records: records on a remote topic that this copier did not write (a producer still writing
//! the DR copy is the classic split-brain of a failover). Works with or without `protect_remote_topics`
//! and needs no ACLs.
//!
//! The count: each remote partition's end offset grows by one per record appended. While a partition
//! is quiet (nothing of ferry's in flight, and no acknowledgement arriving while its end offset is
//! asked), the growth of its end offset since the last quiet look, minus the records ferry's own
//! acknowledgements put there meanwhile, is what someone else wrote ([`Baseline::observe`]). Each look
//! replaces the baseline, so a record is counted once. A copier lifetime counts from the downstream
//! offset of its first acknowledged record (or, before it wrote any, from its first look): nothing is
//! counted twice across restarts, rebalances or nodes, and what was written before that (while no
//! copier of this node watched the partition) is not counted at all.
//!
//! Not watched: flows under the identity policy (the remote topic is the target's own topic of that
//! name, which applications there write by design), and exactly-once flows (each transaction's commit
//! or abort marker takes an offset, and an aborted transaction's records stay in the log; neither is a
//! record someone else wrote).
//!
//! Not exact, and so not claimed:
//! - a delivery that failed (a timeout) may still have landed: the partition's baseline starts again
//!   at the next look, counting nothing for that stretch;
//! - a foreign transactional producer's commit markers count as records;
//! - a partition handed over uncleanly (`ferry_unclean_handovers_total`): the previous owner's late
//!   records land after the new owner started counting, and count as foreign there.
//!
//! The look runs on the copier's probe thread ([`super::probe`]), which serves the copy loop's source
//! checks between the look's calls: see [`ForeignLook`].
//!
//! Cost: one ListOffsets request per 500 quiet partitions every [`CHECK_INTERVAL`], per node.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::Offset;

use super::delivery::Shared;
pub use super::foreign_count::Baseline;
use crate::clients::MetaConsumer;
use crate::flow::list_offsets::{Answer, CHUNK, list_offsets};
use crate::metrics::METRICS;

/// How often the quiet partitions' end offsets are asked (one ListOffsets per 500 quiet partitions).
pub const CHECK_INTERVAL: Duration = Duration::from_secs(5);
/// How long one ListOffsets call may take. Short, because the probe's checks of partitions being
/// assigned wait behind it: a target that answers at all answers in a round trip or two, and a call
/// that gives up loses nothing (its partitions keep their baselines; a later look counts the stretch).
const LIST_TIMEOUT: Duration = Duration::from_secs(3);

/// The foreign-record look at one copier lifetime's remote partitions, taken in turns by the probe
/// thread. A look asks its quiet partitions in calls of at most [`CHUNK`], one call per turn, and the
/// probe serves what waits for it between turns: a source check waits for one call at most
/// ([`LIST_TIMEOUT`]), never for a whole look over thousands of partitions or a target that is away.
pub struct ForeignLook {
    shared: Arc<Shared>,
    /// The target's metadata consumer, reading `read_uncommitted`: the end offsets are high watermarks.
    target: MetaConsumer,
    /// The partitions of the look under way not asked yet (remote topic, partition), named rather than
    /// held: each is looked up again right before its call, so a partition that left this lifetime
    /// meanwhile is not asked about.
    pending: Vec<(String, i32)>,
}

/// A partition being looked at: what it was before the question.
struct Look {
    remote: String,
    partition: i32,
    live: Arc<super::delivery::Live>,
    written: u64,
    unsure: u64,
}

impl ForeignLook {
    /// Looks at the partitions `shared` copies, asking `target` (read_uncommitted: the high watermark)
    /// for their end offsets.
    pub fn new(shared: Arc<Shared>, target: MetaConsumer) -> Self {
        Self { shared, target, pending: Vec::new() }
    }

    /// One turn: starts a look when none is under way (at the quiet partitions), and asks the next call's
    /// partitions. True while the look has calls left: the next turn comes once the probe served what
    /// waits; the next look, [`CHECK_INTERVAL`] after this one's last call.
    pub fn turn(&mut self) -> bool {
        if self.pending.is_empty() {
            self.pending = self.looks(None).into_iter().map(|l| (l.remote, l.partition)).collect();
        }
        let chunk = self.pending.split_off(self.pending.len().saturating_sub(CHUNK));
        if !chunk.is_empty() {
            self.ask(&chunk);
        }
        !self.pending.is_empty()
    }

    /// The partitions of `only` (every partition: `None`) that are quiet now, with what ferry's deliveries
    /// to them had reported.
    fn looks(&self, only: Option<&[(String, i32)]>) -> Vec<Look> {
        let remotes = self.shared.remotes.read().unwrap_or_else(|p| p.into_inner());
        let quiet = |remote: &String, p: usize, live: &Arc<super::delivery::Live>| {
            (!live.is_revoked() && live.ack.in_flight() == 0).then(|| Look {
                remote: remote.clone(),
                partition: p as i32,
                written: live.written(),
                unsure: live.unsure(),
                live: live.clone(),
            })
        };
        match only {
            None => remotes
                .iter()
                .flat_map(|(remote, t)| {
                    t.parts.iter().enumerate().filter_map(move |(p, live)| quiet(remote, p, live.as_ref()?))
                })
                .collect(),
            Some(tps) => tps
                .iter()
                .filter_map(|(remote, p)| {
                    let live = remotes.get(remote)?.parts.get(*p as usize)?.as_ref()?;
                    quiet(remote, *p as usize, live)
                })
                .collect(),
        }
    }

    /// Asks the end offsets of those of `tps` still quiet, and counts what someone else wrote.
    fn ask(&self, tps: &[(String, i32)]) {
        let shared = &self.shared;
        let looks = self.looks(Some(tps));
        if looks.is_empty() {
            return;
        }
        let tps: Vec<(String, i32)> = looks.iter().map(|l| (l.remote.clone(), l.partition)).collect();
        let ends = list_offsets(self.target.as_ref(), &tps, Offset::End, LIST_TIMEOUT);
        let unanswered: Vec<String> = ends
            .iter()
            .filter_map(|((t, p), a)| match a {
                Answer::Offset(_) => None,
                Answer::Refused(e) | Answer::Unanswered(e) => Some(format!("{t}-{p}: {e}")),
            })
            .collect();
        tracing::debug!(flow = %shared.flow, quiet = tps.len(), unanswered = ?unanswered, "foreign-record look");
        for look in looks {
            let key = (look.remote.clone(), look.partition);
            let Some(Answer::Offset(end)) = ends.get(&key) else { continue };
            if *end < 0 {
                continue;
            }
            // Quiet throughout the question: nothing of ferry's was in flight or settled meanwhile.
            let live = &look.live;
            if live.is_revoked()
                || live.ack.in_flight() != 0
                || live.written() != look.written
                || live.unsure() != look.unsure
            {
                continue;
            }
            let now = Baseline { end: *end, written: look.written, unsure: look.unsure };
            // The baseline lives in the partition's `Live`: a partition given back to this lifetime
            // gets a new one, whose counters start at zero, and so a new baseline.
            // Without an earlier look, the count starts at this lifetime's first acknowledged record:
            // everything from there to the end is ferry's `written` records or someone else's.
            let first = live.first_downstream().map(|end| Baseline { end, written: 0, unsure: 0 });
            let Some(before) = live.foreign_baseline(now).or(first) else { continue };
            let foreign = before.observe(&now);
            if foreign > 0 {
                METRICS
                    .remote_foreign_records
                    .with_label_values(&[shared.flow.as_str(), &live.ack.topic])
                    .inc_by(foreign);
                tracing::warn!(
                    flow = %shared.flow, topic = %look.remote, partition = look.partition, source_topic = %live.ack.topic,
                    records = foreign, end_offset = *end,
                    "records on the remote topic that ferry did not write: another producer writes the DR copy (split-brain after a failover?)"
                );
            }
        }
    }
}
