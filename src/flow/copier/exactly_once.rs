//! The copy loop's exactly-once steps: committing a transaction (records, progress and syncs together),
//! a record refused inside one (the transaction aborted, only its partition held), revocations inside
//! an open transaction, and the exactly-once stop. The transactions themselves are `transactions`.

use std::time::Instant;

use super::*;

/// The share of an exactly-once stop's time kept from its final commit for the abort and the release
/// that follow should it fail (a commit waits until its deadline while the target is away).
const ABORT_RESERVE: f64 = 0.3;

/// When a final commit gives up for a stop due by `deadline`, counted from now (the stop's arrival).
fn reserve_from(deadline: Instant) -> Instant {
    let now = Instant::now();
    now + deadline.saturating_duration_since(now).mul_f64(1.0 - ABORT_RESERVE)
}

impl CopyLoop {
    /// Exactly-once: commit the open transaction (and the marked claims and releases). A record refused
    /// before or during the commit aborts it instead and holds only its partition
    /// ([`Self::refused_in_transaction`]); a commit that carried claims, releases or intents then fails.
    pub(super) fn commit(&mut self) -> Result<(), String> {
        self.refused_in_transaction()?;
        let (Some(txn), Some(lane)) = (self.txn.as_mut(), self.lane.as_mut()) else { return Ok(()) };
        let marked = txn.has_marks();
        // The commit's own timeout, or a stop's (less its reserve), also one that arrives while it waits.
        let timeout = Instant::now() + transactions::COMMIT_TIMEOUT;
        if let Some(stop) = self.stop {
            self.commit_by.get_or_insert_with(|| reserve_from(stop));
        }
        let (control, stop, commit_by, pending) =
            (&self.control, &mut self.stop, &mut self.commit_by, &mut self.pending);
        let mut deadline = || {
            match control.try_next() {
                Some(Signal::Stop { deadline }) => {
                    let d = stop.map_or(deadline, |d| d.min(deadline));
                    *stop = Some(d);
                    *commit_by = Some(commit_by.map_or(reserve_from(d), |c| c.min(reserve_from(d))));
                }
                Some(Signal::Msg(a)) => *pending = Some(a),
                None => {}
            }
            commit_by.map_or(timeout, |d| d.min(timeout))
        };
        match txn.commit(&self.plan, lane, &mut self.progress, &self.acks, &self.shared, &self.assigned, &mut deadline)
        {
            Err(e) if self.acks.any_failed() => {
                self.refused_in_transaction()?;
                if marked { Err(e) } else { Ok(()) }
            }
            other => other,
        }
    }

    /// Exactly-once: a record of the open transaction was refused (the target refused it, or the producer
    /// did). The transaction is aborted; once every report of its records is in, each partition that had
    /// records in it copies again from its committed position, with a new run of offset syncs, while the
    /// refused record's partition is held and retried as an at-least-once flow's is: after a backoff, one
    /// record at a time, each in a transaction of its own ([`Self::copy_batch`]), so that the same refusal
    /// aborts nothing else. Only an abort that fails (a fenced or failed producer) ends the lifetime.
    pub(super) fn refused_in_transaction(&mut self) -> Result<(), String> {
        if self.txn.is_none() || !self.acks.any_failed() {
            return Ok(());
        }
        let failed = self.acks.take_failed();
        if failed.is_empty() {
            return Ok(());
        }
        // A record the producer purged (an abort) was not refused: its partition only copies it again.
        let (purged, refused): (Vec<_>, Vec<_>) =
            failed.into_iter().partition(|s| s.failure().is_some_and(|f| f.purged));
        let first = refused.first().or(purged.first()).expect("a failed slot");
        let why = format!(
            "a record of {}-{} was not delivered: {}",
            first.topic,
            first.partition,
            first.failure().map_or_else(|| "refused".to_string(), |f| f.error)
        );
        let (Some(txn), Some(lane)) = (self.txn.as_mut(), self.lane.as_mut()) else { return Ok(()) };
        if refused.is_empty() && !txn.is_open() {
            for slot in &purged {
                if slot.in_flight() <= 0 {
                    slot.clear_failure();
                    slot.back_to_committed();
                }
                self.book.roll_back(&(slot.topic.to_string(), slot.partition));
            }
            return Ok(());
        }
        let deadline = Instant::now() + kafka::ADMIN_TIMEOUT;
        let touched = txn.abort(Some(lane), &self.shared, &why, deadline);
        if lane.client().fatal_error().is_some() {
            return Err(format!("{why}; the transaction could not be aborted: the producer failed"));
        }
        // The aborted records' reports (acknowledged before the abort, or purged) all arrive now; a
        // purged one froze its partition like a refusal, which it is not.
        if !lane.wait_idle(kafka::ADMIN_TIMEOUT) {
            return Err(format!("{why}; the aborted transaction's records are not all reported"));
        }
        let genuine: BTreeSet<SourcePartition> = refused.iter().map(|s| (s.topic.to_string(), s.partition)).collect();
        for slot in self.acks.take_failed() {
            if !genuine.contains(&(slot.topic.to_string(), slot.partition)) {
                slot.clear_failure();
            }
        }
        let mut back: BTreeSet<SourcePartition> = touched.iter().map(|s| (s.topic.to_string(), s.partition)).collect();
        back.extend(genuine.iter().cloned());
        back.extend(purged.iter().map(|s| (s.topic.to_string(), s.partition)));
        for tp in &back {
            self.acks.slot(&tp.0, tp.1).back_to_committed();
        }
        for slot in &refused {
            if let Some(remote) = self.book.delivery_failed(&self.flow, slot) {
                self.refresh_producer_metadata(&remote);
            }
        }
        for tp in &back {
            self.book.roll_back(tp);
        }
        self.shared.syncs_resume();
        tracing::warn!(flow = %self.flow, refused = genuine.len(), rolled_back = back.len(), reason = %why, "exactly-once: a record was refused; its transaction is aborted, the refused partition is held and retried alone, the others copy again from their committed positions");
        Ok(())
    }

    /// Exactly-once handover: the open transaction, with the revoked partitions' last records and their
    /// release, is committed before they are let go. A lost assignment (this node was presumed dead and
    /// another copies them already, having fenced this node's producer) ends the lifetime: what is open
    /// is aborted, and the successor resumes every partition from committed progress.
    pub(super) fn revoke_in_transaction(
        &mut self,
        tps: Vec<SourcePartition>,
        tpl: rdkafka::TopicPartitionList,
        lost: bool,
    ) -> Result<(), String> {
        if lost {
            self.lost = true;
            let _ = self.consumer.incremental_unassign(&tpl);
            METRICS.unclean_handovers.with_label_values(&[&self.flow]).inc_by(tps.len() as u64);
            return Err(format!(
                "the copier group took {} partitions from this node as lost (it was presumed dead); its open transaction is aborted",
                tps.len()
            ));
        }
        if let Some(txn) = self.txn.as_mut() {
            txn.mark(tps.iter().map(|(t, p)| self.acks.slot(t, *p)), true);
        }
        self.commit()?;
        self.update_book();
        self.book.advance(&self.shared, &self.probe, Instant::now());
        self.shared.publish_quiet(Instant::now(), true);
        self.shared.syncs.wait_published(HANDOVER_TIMEOUT);
        self.consumer.incremental_unassign(&tpl).map_err(|e| format!("unassign source partitions: {e}"))?;
        tracing::info!(flow = %self.flow, partitions = tps.len(), "the copier group took partitions from this node; their transaction is committed and they are released");
        Ok(())
    }

    /// Exactly-once stop: commit what is open with every partition released (the consumer leaves the
    /// group next), or abort it after a failure; then publish the committed positions' syncs.
    pub(super) fn shutdown_in_transaction(&mut self, deadline: Instant, failed: Option<&str>) -> Result<(), String> {
        // Every commit from here on is bounded by the stop's deadline (`--shutdown-timeout`), less a
        // reserve for what follows a commit that fails: the abort and the release of the partitions.
        self.stop = Some(self.stop.map_or(deadline, |d| d.min(deadline)));
        let by = reserve_from(deadline);
        self.commit_by = Some(self.commit_by.map_or(by, |c| c.min(by)));
        let outcome = match failed {
            None => {
                if let Some(txn) = self.txn.as_mut() {
                    txn.mark(self.assigned.iter().map(|(t, p)| self.acks.slot(t, *p)), true);
                }
                self.commit()
            }
            Some(why) => Err(why.to_string()),
        };
        if let Err(e) = &outcome
            && let (Some(txn), Some(lane)) = (self.txn.as_mut(), self.lane.as_mut())
        {
            txn.abort(Some(lane), &self.shared, e, deadline);
            // The partitions are released at their committed positions, unless the group or a fence
            // already gave them to another node: whoever takes them next then has nobody to fence, so
            // this node's next lifetime, which writes under the same transactional id, is not fenced
            // for a failure it already paid for with this restart.
            if !self.lost && !e.contains(transactions::FENCED) && !self.assigned.is_empty() {
                let slots: Vec<_> = self.assigned.iter().map(|(t, p)| self.acks.slot(t, *p)).collect();
                match txn.release_committed(&self.plan, lane, &mut self.progress, &self.shared, &slots, deadline) {
                    Ok(()) => {
                        tracing::info!(flow = %self.flow, partitions = slots.len(), "exactly-once: the failed copier released its partitions at their committed positions")
                    }
                    Err(why) => {
                        tracing::warn!(flow = %self.flow, error = %why, "exactly-once: the failed copier could not release its partitions; whoever takes them fences this node's producer")
                    }
                }
            }
        }
        drop(self.lane.take());
        if outcome.is_ok() {
            self.shared.publish_quiet(Instant::now(), true);
        }
        // The error itself is the copier's (returned by `run`); a failed commit is this one's.
        if failed.is_some() { Ok(()) } else { outcome }
    }
}
