//! Reading offset syncs: this flow's own (the forward history, and its newest part while a long backlog
//! is read) and the reverse flow's, each into its store in [`CheckpointState`], from where the last
//! reader stopped.

use super::*;

/// Which offset syncs a reader follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Side {
    /// This flow's own.
    Forward,
    /// The reverse flow's (target->source), read from the target where its emitter writes them.
    Reverse,
    /// The newest of this flow's own, while the whole history is read ([`CheckpointState::early`]).
    Early,
}

impl Side {
    pub(super) fn history(self, st: &mut CheckpointState) -> (&mut SyncStore, &mut i64) {
        match self {
            Side::Forward => (&mut st.syncs, &mut st.syncs_position),
            Side::Reverse => (&mut st.reverse, &mut st.reverse_position),
            Side::Early => (&mut st.early, &mut st.early_position),
        }
    }
}

/// The reverse flow's offset-syncs topic: on this flow's target, named for this flow's source (where the
/// reverse flow keeps it with MM2's default `offset-syncs.topic.location = source`).
pub(super) fn reverse_syncs_location(plan: &FlowPlan) -> (&ClusterSpec, String) {
    (&plan.target, plan.policy.offset_syncs_topic(&plan.id.source))
}

/// An offset-sync backlog being read: where it ends, and when reading last moved.
pub(super) struct Backlog {
    end: i64,
    progress: (Instant, i64),
}

/// Follows an offset-syncs topic into the shared store, from where the last reader stopped.
pub(super) struct SyncReader {
    consumer: kafka::AssignOnlyConsumer,
    topic: String,
    cluster: String,
    side: Side,
}

impl SyncReader {
    pub(super) fn new(plan: &FlowPlan, state: &SharedCheckpointState) -> Result<Self, String> {
        let (cluster, topic) = syncs_location(plan);
        // The emitter creates it too; whoever comes first wins, with the same definition.
        let spec = TopicSpec::compacted(topic.clone(), 1, plan.settings.replication_factor);
        kafka::ensure_topic(cluster, &plan.id, &spec).map_err(err)?;
        Self::open(plan, state, cluster, topic, Side::Forward)
    }

    /// A reader of the reverse flow's syncs if that topic exists (it is never created here: it is the
    /// other flow's, which may not exist).
    pub(super) fn reverse(plan: &FlowPlan, state: &SharedCheckpointState) -> Result<Option<Self>, String> {
        let (cluster, topic) = reverse_syncs_location(plan);
        let probe = kafka::assign_only_consumer(cluster, &plan.id, "reverse-syncs-probe").map_err(err)?;
        let exists = kafka::topic_partitions(&probe, &cluster.alias).map_err(err)?.contains_key(&topic);
        if !exists {
            return Ok(None);
        }
        Self::open(plan, state, cluster, topic, Side::Reverse).map(Some)
    }

    pub(super) fn open(
        plan: &FlowPlan,
        state: &SharedCheckpointState,
        cluster: &ClusterSpec,
        topic: String,
        side: Side,
    ) -> Result<Self, String> {
        let consumer = kafka::assign_only_consumer(cluster, &plan.id, "offset-syncs-reader").map_err(err)?;
        let position = *side.history(&mut lock(state)).1;
        let mut tpl = TopicPartitionList::new();
        let start = if position > 0 { Offset::Offset(position) } else { Offset::Beginning };
        tpl.add_partition_offset(&topic, 0, start).map_err(|e| e.to_string())?;
        consumer.assign(&tpl).map_err(|e| format!("cluster `{}`: assign {topic}: {e}", cluster.alias))?;
        Ok(Self { consumer, topic, cluster: cluster.alias.clone(), side })
    }

    pub(super) fn position(&self, state: &SharedCheckpointState) -> i64 {
        *self.side.history(&mut lock(state)).1
    }

    /// Read the backlog; only then may the store translate (MM2: no translation before read-to-end).
    pub(super) fn read_to_end(&mut self, state: &SharedCheckpointState) -> Result<(), String> {
        if self.side.history(&mut lock(state)).0.is_read_to_end() {
            return Ok(());
        }
        let (_, high) = kafka::watermarks(&self.consumer, &self.topic, 0)
            .map_err(|e| format!("cluster `{}`: watermarks of {}: {e}", self.cluster, self.topic))?;
        let mut backlog = Backlog { end: high, progress: (Instant::now(), self.position(state)) };
        while !self.reached(state, high)? {
            self.check_progress(state, &mut backlog)?;
            self.poll(state, Duration::from_millis(200))?;
        }
        let mut st = lock(state);
        let (store, _) = self.side.history(&mut st);
        store.set_read_to_end();
        tracing::info!(syncs = store.len(), partitions = store.partitions(), topic = %self.topic, side = ?self.side, "offset syncs read");
        Ok(())
    }

    /// With a backlog longer than [`EARLY_SYNCS`] (the first start, or a restart before the history
    /// was read), reads its newest syncs into the early store and returns their reader, following the
    /// topic, and the backlog for [`SyncReader::backlog_read`]; the caller reads the rest in the
    /// background. `None`: read the backlog now (short, already read, or the latest-only fallback, where
    /// a tail could translate a group below a sync an earlier generation used).
    pub(super) fn read_early(&self, plan: &FlowPlan, state: &SharedCheckpointState) -> Result<Option<(Self, Backlog)>, String> {
        {
            let st = lock(state);
            if st.syncs.is_read_to_end() || st.syncs.is_backlog_latest_only() {
                return Ok(None);
            }
        }
        let (low, high) = kafka::watermarks(&self.consumer, &self.topic, 0)
            .map_err(|e| format!("cluster `{}`: watermarks of {}: {e}", self.cluster, self.topic))?;
        let from = self.position(state).max(low);
        if high - from <= EARLY_SYNCS {
            return Ok(None);
        }
        {
            let mut st = lock(state);
            st.early = SyncStore::new(plan.settings.offset_sync_history_per_partition);
            st.early_position = high - EARLY_SYNCS;
        }
        let (cluster, _) = syncs_location(plan);
        let mut early = Self::open(plan, state, cluster, self.topic.clone(), Side::Early)?;
        early.read_to_end(state)?;
        tracing::info!(
            flow = %plan.id, topic = %self.topic, backlog = high - from,
            "offset-sync backlog: translating with its newest syncs while the rest is read"
        );
        Ok(Some((early, Backlog { end: high, progress: (Instant::now(), from) })))
    }

    /// Whether the backlog was read (then the history is complete: translations use it from now on and
    /// the early store is emptied). Fails when reading made no progress for [`kafka::ADMIN_TIMEOUT`].
    pub(super) fn backlog_read(&self, state: &SharedCheckpointState, backlog: &mut Backlog) -> Result<bool, String> {
        if !self.reached(state, backlog.end)? {
            self.check_progress(state, backlog)?;
            return Ok(false);
        }
        let mut st = lock(state);
        st.syncs.set_read_to_end();
        let budget = st.syncs.budget();
        st.early = SyncStore::new(budget);
        tracing::info!(syncs = st.syncs.len(), partitions = st.syncs.partitions(), topic = %self.topic, "offset-sync backlog read");
        Ok(true)
    }

    /// Fails when the reader's position has not moved for [`kafka::ADMIN_TIMEOUT`] before the backlog's end.
    pub(super) fn check_progress(&self, state: &SharedCheckpointState, backlog: &mut Backlog) -> Result<(), String> {
        let position = self.position(state);
        if position != backlog.progress.1 {
            backlog.progress = (Instant::now(), position);
        } else if backlog.progress.0.elapsed() > kafka::ADMIN_TIMEOUT {
            return Err(format!(
                "cluster `{}`: reading {} made no progress for {:?} before its end",
                self.cluster,
                self.topic,
                kafka::ADMIN_TIMEOUT
            ));
        }
        Ok(())
    }

    /// Read everything published so far (bounded by `deadline`).
    pub(super) fn catch_up(&mut self, state: &SharedCheckpointState, deadline: Instant) -> Result<(), String> {
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(100));
        let high = match self.consumer.fetch_watermarks(&self.topic, 0, left) {
            Ok((_, high)) => high,
            Err(e) => {
                tracing::warn!(cluster = %self.cluster, topic = %self.topic, error = %e, "cannot read the final offset syncs before the deadline");
                return Ok(());
            }
        };
        while Instant::now() < deadline && !self.reached(state, high)? {
            self.poll(state, Duration::from_millis(100))?;
        }
        Ok(())
    }

    /// Whether everything before `end` was read. A transaction marker at the end is never returned as
    /// a record, but the consumer's position moves past it.
    pub(super) fn reached(&self, state: &SharedCheckpointState, end: i64) -> Result<bool, String> {
        if self.position(state) >= end {
            return Ok(true);
        }
        let positions = self
            .consumer
            .position()
            .map_err(|e| format!("cluster `{}`: position in {}: {e}", self.cluster, self.topic))?;
        Ok(positions
            .find_partition(&self.topic, 0)
            .is_some_and(|p| matches!(p.offset(), Offset::Offset(o) if o >= end)))
    }

    /// Why reading failed; a refused principal is told which right it lacks on which topic.
    pub(super) fn read_error(&self, e: &rdkafka::error::KafkaError) -> String {
        match kafka::authorization_error(e) {
            Some(code) => {
                kafka::not_authorized(&format!("offset-syncs topic {}", self.topic), &self.cluster, "Read", code)
            }
            None => format!("cluster `{}`: read {}: {e}", self.cluster, self.topic),
        }
    }

    /// Fold newly arrived syncs into the store (waits up to `wait` for the first one).
    pub(super) fn poll(&mut self, state: &SharedCheckpointState, wait: Duration) -> Result<(), String> {
        let mut wait = wait;
        for _ in 0..10_000 {
            let Some(msg) = self.consumer.poll(wait) else { return Ok(()) };
            wait = Duration::ZERO;
            let msg = match msg {
                Ok(msg) => msg,
                Err(e) if kafka::is_unused_group_refusal(&e) => continue,
                Err(e) => return Err(self.read_error(&e)),
            };
            let mut st = lock(state);
            let (store, position) = self.side.history(&mut st);
            *position = msg.offset() + 1;
            match OffsetSync::decode(msg.key().unwrap_or_default(), msg.payload()) {
                Ok(sync) => {
                    let mark = msg
                        .headers()
                        .and_then(|h| h.iter().find(|h| h.key == SYNC_MARK_HEADER))
                        .and_then(|h| h.value)
                        .and_then(SyncMark::decode);
                    let stored = StoredSync {
                        upstream: sync.upstream_offset,
                        downstream: sync.downstream_offset,
                        mark,
                        position: msg.offset(),
                    };
                    store.handle(&sync.topic, sync.partition, stored);
                }
                Err(e) => tracing::warn!(
                    topic = %self.topic, partition = msg.partition(), offset = msg.offset(), error = %e,
                    "skipping an offset-sync record that does not decode"
                ),
            }
        }
        Ok(())
    }
}
