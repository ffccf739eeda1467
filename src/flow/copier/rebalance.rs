//! How the copy loop applies the copier group's rebalances: assignments taken in and seeded from their
//! progress, revoked partitions drained and persisted before they are let go, and rebalances a lifetime
//! ended with acknowledged so that its consumer can close.

use std::collections::BTreeSet;
use std::time::Instant;

use rdkafka::consumer::Consumer;

use super::consumer::Rebalanced;
use super::*;

impl CopyLoop {
    /// Keep a signal for the loop: the newest assignment wins; a stop ends the loop.
    pub(super) fn take(&mut self, signal: Option<Signal<Assignment>>) {
        match signal {
            Some(Signal::Msg(a)) => self.pending = Some(a),
            Some(Signal::Stop { deadline }) => self.stop = Some(deadline),
            None => {}
        }
    }

    /// A new assignment: subscribe to its topics and let the book start and stop partitions.
    pub(super) fn reassign(&mut self, wanted: Assignment) -> Result<(), String> {
        let topics: BTreeSet<String> = wanted.partitions.iter().map(|(t, _)| t.clone()).collect();
        // A subscribed topic that grew: the consumer's metadata must show it before the group can assign
        // the new partitions (librdkafka refreshes it only every few minutes by itself).
        let (now_ready, before) = (partitions_per_topic(&wanted), partitions_per_topic(&self.ready));
        let grown: BTreeSet<&String> = topics
            .iter()
            .filter(|t| self.subscribed.contains(*t))
            .filter(|t| now_ready.get(t.as_str()) > before.get(t.as_str()))
            .collect();
        for t in grown {
            if let Err(e) = self.consumer.fetch_metadata(Some(t), kafka::ADMIN_TIMEOUT) {
                tracing::warn!(flow = %self.flow, topic = %t, error = %e, "cannot refresh the metadata of a grown source topic");
            }
        }
        if topics != self.subscribed {
            let names: Vec<&str> = topics.iter().map(String::as_str).collect();
            if names.is_empty() {
                self.consumer.unsubscribe();
            } else {
                self.consumer.subscribe(&names).map_err(|e| format!("subscribe to the source topics: {e}"))?;
            }
            self.subscribed = topics;
        }
        self.ready = wanted;
        self.update_book();
        Ok(())
    }

    /// The book copies what the group gave this node and the topic synchroniser made ready.
    pub(super) fn update_book(&mut self) {
        let partitions = self.ready.partitions.intersection(&self.assigned).cloned().collect();
        let wanted = Assignment { partitions, deleted: self.ready.deleted.clone() };
        for remote in self.book.want(&self.plan, &self.acks, wanted) {
            self.refresh_producer_metadata(&remote);
        }
        METRICS.partitions_assigned.with_label_values(&[&self.flow]).set(self.assigned.len() as i64);
        let mut assigned: Vec<String> = self.assigned.iter().map(|(t, p)| format!("{t}-{p}")).collect();
        assigned.sort_unstable();
        self.supervisor.assigned.do_send(AssignedPartitions(assigned));
    }

    /// Apply the copier group's rebalances that arrived during the last poll.
    pub(super) fn rebalance(&mut self) -> Result<(), String> {
        self.consumer.context().rebalance_pending.store(false, std::sync::atomic::Ordering::Release);
        let taken = std::mem::take(&mut *self.consumer.context().rebalances.lock().unwrap_or_else(|p| p.into_inner()));
        let mut events = taken.into_iter();
        while let Some(event) = events.next() {
            failpoints::check(failpoints::COPIER_REBALANCE)
                .and_then(|()| match &event {
                    Rebalanced::Assign(tps) => self.assign(tps.clone()),
                    Rebalanced::Revoke(tps) => self.revoke(tps.clone()),
                })
                .inspect_err(|_| {
                    // The lifetime ends: what librdkafka has not seen acknowledged yet (this event, if it
                    // failed before its (un)assign call, and every later one) waits for the stop, which
                    // acknowledges it (`acknowledge_pending_rebalances`): a consumer closes only then.
                    let unacknowledged = !self.acknowledged(&event);
                    let rest: Vec<Rebalanced> =
                        unacknowledged.then_some(event).into_iter().chain(events.by_ref()).collect();
                    let mut pending = self.consumer.context().rebalances.lock().unwrap_or_else(|p| p.into_inner());
                    pending.splice(0..0, rest);
                })?;
        }
        Ok(())
    }

    /// Whether the consumer's assignment already shows `event` applied.
    pub(super) fn acknowledged(&self, event: &Rebalanced) -> bool {
        let Ok(assignment) = self.consumer.assignment() else { return false };
        let assigned = |(t, p): &SourcePartition| assignment.find_partition(t, *p).is_some();
        match event {
            Rebalanced::Assign(tps) => tps.iter().all(assigned),
            Rebalanced::Revoke(tps) => !tps.iter().any(assigned),
        }
    }

    /// The group gave this node `tps`: read where each was persisted (another node may have copied it
    /// meanwhile), take a new ownership epoch above every earlier owner's, assign them paused at those
    /// positions and claim them (see [`Self::claim`]); the book probes and starts them.
    pub(super) fn assign(&mut self, tps: Vec<SourcePartition>) -> Result<(), String> {
        let folded = match &self.txn {
            Some(_) => self.take_over(&tps)?,
            None => progress::load_partitions(&self.plan, self.offsets_partitions, &tps).map_err(|e| e.to_string())?,
        };
        let mut tpl = rdkafka::TopicPartitionList::new();
        let eos = self.txn.is_some();
        let mut recovered = 0;
        for (t, p) in &tps {
            let progress = folded.get(&(t.clone(), *p));
            let stored = progress.and_then(|f| f.position.clone());
            recovered += usize::from(stored.is_some());
            self.acks.adopt(t, *p, stored, progress.map_or(0, |f| f.epoch), eos);
            // Assigned paused at an absolute offset (the stored position, else 0); the book seeks each
            // partition to its verified position when the probe has checked it. Never at a logical offset
            // (End, Beginning): librdkafka looks those up, and a seek while the lookup is in flight makes
            // its outdated answer schedule the lookup again, which later moves the partition to the end:
            // records skipped. An absolute position that fell off the log stops the partition's fetcher
            // (auto.offset.reset=error); the book then assigns it again at its verified position.
            let at = self.acks.next(t, *p).unwrap_or(0);
            tpl.add_partition_offset(t, *p, rdkafka::Offset::Offset(at)).map_err(|e| format!("assign {t}-{p}: {e}"))?;
        }
        self.consumer.incremental_assign(&tpl).map_err(|e| format!("assign source partitions: {e}"))?;
        self.consumer.pause(&tpl).map_err(|e| format!("pause new source partitions: {e}"))?;
        tracing::info!(flow = %self.flow, assigned = tps.len(), partitions = recovered, "the copier group assigned partitions to this node; recovered copy progress");
        failpoints::hold(failpoints::COPIER_CLAIM);
        self.claim(&tps)?;
        self.assigned.extend(tps);
        self.update_book();
        Ok(())
    }

    /// The group takes `tps` away: stop fetching them, let the target acknowledge what is in flight,
    /// publish their final offset syncs and persist their positions, then let them go (at-least-once
    /// across the handover, and no duplicate when it goes well).
    ///
    /// When the handover cannot be clean (the assignment was lost: this node was presumed dead, e.g.
    /// frozen past its session timeout, and another node copies the partitions already; or the target
    /// did not acknowledge within [`HANDOVER_TIMEOUT`]), the partitions' deliveries stop counting at once
    /// (no position, no offset sync from them: the next owner's must not be contradicted). Records of
    /// them still queued are not purged (the producer is shared by other flows, and librdkafka purges
    /// per producer): they may reach the target after the next owner's copies, as duplicates, at most
    /// this flow's share of the queue.
    pub(super) fn revoke(&mut self, tps: Vec<SourcePartition>) -> Result<(), String> {
        let lost = self.consumer.assignment_lost();
        let mut tpl = rdkafka::TopicPartitionList::new();
        for (t, p) in &tps {
            tpl.add_partition(t, *p);
            self.assigned.remove(&(t.clone(), *p));
        }
        let _ = self.consumer.pause(&tpl);
        if self.txn.is_some() {
            return self.revoke_in_transaction(tps, tpl, lost);
        }
        // Only the revoked partitions' records are waited for: another partition of the flow that the
        // target does not take must not make every handover unclean.
        let slots: Vec<_> = tps.iter().map(|(t, p)| self.acks.slot(t, *p)).collect();
        let clean = !lost
            && {
                let until = Instant::now() + HANDOVER_TIMEOUT;
                while slots.iter().any(|s| s.in_flight() > 0) && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(2));
                }
                let left: i64 = slots.iter().map(|s| s.in_flight().max(0)).sum();
                if left > 0 {
                    tracing::warn!(flow = %self.flow, in_flight = left, "records of revoked partitions not acknowledged within the handover time; they no longer count here and the next owner copies them again");
                }
                left == 0
            };
        if !clean {
            self.book.revoke_deliveries(&tps);
            METRICS.unclean_handovers.with_label_values(&[&self.flow]).inc_by(tps.len() as u64);
        }
        self.update_book();
        self.book.advance(&self.shared, &self.probe, Instant::now());
        if !lost {
            // Persisting after the group moved a partition on (it was lost, not handed over) would move
            // the next owner's position back.
            self.shared.publish_quiet(Instant::now(), true);
            self.shared.syncs.wait_published(HANDOVER_TIMEOUT);
            self.progress.persist(&self.acks);
            if let Err(e) = self.progress.flush(Instant::now() + HANDOVER_TIMEOUT) {
                tracing::warn!(flow = %self.flow, error = %e, "positions of revoked partitions not persisted; the next owner copies some records again");
            }
        }
        self.consumer.incremental_unassign(&tpl).map_err(|e| format!("unassign source partitions: {e}"))?;
        tracing::info!(flow = %self.flow, partitions = tps.len(), lost, "the copier group took partitions from this node");
        Ok(())
    }

    /// Rebalances the loop took in and never applied (it ended first, e.g. on an error right after a
    /// lost assignment): librdkafka waits for each to be acknowledged with an (un)assign call, and until
    /// then the consumer can never close (its drop would wait forever). Acknowledged here; from now on
    /// the callback applies them itself (`closing`).
    pub(super) fn acknowledge_pending_rebalances(&mut self) {
        let pending =
            std::mem::take(&mut *self.consumer.context().rebalances.lock().unwrap_or_else(|p| p.into_inner()));
        for event in pending {
            let (tps, assign) = match event {
                Rebalanced::Assign(tps) => (tps, true),
                Rebalanced::Revoke(tps) => (tps, false),
            };
            let mut tpl = rdkafka::TopicPartitionList::new();
            for (t, p) in &tps {
                tpl.add_partition(t, *p);
            }
            let done =
                if assign { self.consumer.incremental_assign(&tpl) } else { self.consumer.incremental_unassign(&tpl) };
            if let Err(e) = done {
                tracing::warn!(flow = %self.flow, error = %e, assign, "cannot acknowledge a rebalance at stop");
            }
        }
    }
}
