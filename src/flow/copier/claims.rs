//! Claiming partitions: before copying a partition it was given, a lifetime writes a claim under a new
//! epoch into the progress topic; an exactly-once lifetime first takes the partition over from its
//! earlier writers (intent, fence, committed read). The log's order decides who owns a partition (see
//! `progress`).

use std::sync::Arc;
use std::time::Instant;

use super::*;

impl CopyLoop {
    /// The claim of `tps`, before any record of them is sent: their positions under this node's new
    /// epoch, persisted, so that whoever takes them next takes an epoch above it (and, exactly-once,
    /// knows whom to fence).
    ///
    /// At-least-once, the claim is then checked against the log: a node that read the progress, was
    /// frozen and claimed after another node had taken the partitions over (the group gave them on) has
    /// a claim that does not count ([`progress::Progress::apply`]); it copies nothing and ends the
    /// lifetime (its successor joins the group again). Exactly-once needs no check: every writer that
    /// began taking the partitions before this node was fenced by it ([`Self::take_over`]), and any
    /// that began after fences this node, whose commits then fail.
    pub(super) fn claim(&mut self, tps: &[SourcePartition]) -> Result<(), String> {
        let slots: Vec<Arc<PartitionAck>> = tps.iter().map(|(t, p)| self.acks.slot(t, *p)).collect();
        if let Some(txn) = self.txn.as_mut() {
            txn.mark(slots, false);
            return self.commit();
        }
        self.progress.claim(&slots, Instant::now() + HANDOVER_TIMEOUT)?;
        let now = progress::load_partitions(&self.plan, self.offsets_partitions, tps).map_err(|e| e.to_string())?;
        let me = self.writer.as_str();
        for slot in &slots {
            let tp = (slot.topic.to_string(), slot.partition);
            let log = now.get(&tp).cloned().unwrap_or_default();
            // Only a node of this deployment can have taken the partition from this one (another
            // deployment copying the same source partitions, e.g. the source's heartbeats, is not in its
            // copier group: its records are not a reason to stop).
            let kin_won = log.epoch_writer.as_deref().is_some_and(|w| w != me && w.starts_with(&self.kin));
            if kin_won && log.epoch >= slot.epoch() {
                return Err(format!(
                    "{}-{} is claimed by {} (epoch {}) in the progress log, not by this node (epoch {}): it took the \
                     partition over while this node was claiming it; starting again",
                    slot.topic,
                    slot.partition,
                    log.epoch_writer.as_deref().unwrap_or("another writer"),
                    log.epoch,
                    slot.epoch()
                ));
            }
        }
        Ok(())
    }

    /// Exactly-once: take `tps` over from whoever may still write them, then read their committed
    /// progress. This node first commits an intent for each (so that a node taking them after it sees
    /// it and fences it), then fences every other writer that the log names for them after their last
    /// release and before this intent, committed or not (the previous owner, a frozen writer whose
    /// transaction is open, a node that began taking them first): none of them can commit anything
    /// after this, and nothing of theirs keeps the read below waiting for a transaction to end.
    pub(super) fn take_over(&mut self, tps: &[SourcePartition]) -> Result<progress::Folded, String> {
        let me = self.writer.clone();
        // Nothing of this node's may be open while it reads: the read waits for open transactions.
        self.commit()?;
        if let Some(txn) = self.txn.as_mut() {
            txn.intend(tps.iter().map(|(t, p)| self.acks.slot(t, *p)));
        }
        self.commit()?;
        let others = progress::contenders(&self.plan, self.offsets_partitions, tps, &me, &self.kin)
            .map_err(|e| e.to_string())?;
        for writer in &others {
            let took = transactions::fence(&self.plan, writer)?;
            METRICS.producers_fenced.with_label_values(&[&self.flow]).inc();
            tracing::info!(flow = %self.flow, fenced = %writer, millis = took.as_millis() as u64, "exactly-once: fenced an earlier writer of partitions given to this node");
        }
        let folded = progress::load_partitions(&self.plan, self.offsets_partitions, tps).map_err(|e| e.to_string())?;
        // A holder not fenced here claimed after this node's intent: it takes the partitions after this
        // node, and fences it.
        for ((t, p), progress) in &folded {
            let late = |h: &&String| **h != me && h.starts_with(&self.kin) && !others.contains(*h);
            if let Some(holder) = progress.holder.as_ref().filter(late) {
                return Err(format!(
                    "{t}-{p} was claimed by {holder} after this node began taking it over; starting again"
                ));
            }
        }
        Ok(folded)
    }
}
