//! Reading offset syncs into the stores of [`CheckpointState`], each reader from where the last one
//! stopped: this flow's own history (and its newest part while a long backlog is read), and the reverse
//! flow's (target->source), which translates a group back to the originals (fail-back) and caps identity
//! translations.
//!
//! **Where the reverse flow's syncs are.** A cluster pair has only two offset-syncs topics, named by
//! MM2's rule for the cluster that does *not* hold them: `mm2-offset-syncs.<T>.internal` on S and
//! `mm2-offset-syncs.<S>.internal` on T. Each flow writes one of them, chosen by its
//! `offset_syncs_topic_location`. Both flows with the same setting write different topics: the reverse
//! flow's is the one this flow does not write ([`reverse_syncs_location`]). With different settings they
//! write the same topic, this flow's own, where compaction (keyed by topic and partition alone) can drop
//! one flow's newest sync for the other's: `ferry validate` refuses the two in one flows directory. The
//! reverse flow may still run elsewhere (another deployment, MM2) and earlier settings leave syncs
//! behind, so its setting is not assumed; the readers tell the syncs apart by the [`FLOW_HEADER`] ferry
//! puts on every sync (see [`route`]):
//! - the forward reader keeps this flow's syncs and unmarked ones (MM2's, or a ferry before the header:
//!   the history a takeover from MM2 starts from), and sets the reverse flow's aside in
//!   [`CheckpointState::reverse_here`];
//! - the reverse reader follows the other topic when it exists, keeping the reverse flow's syncs and
//!   unmarked ones (MM2 running the reverse flow), never this flow's (left there by an earlier setting);
//! - a partition's reverse syncs found in this flow's own topic win over the other topic's
//!   ([`CheckpointState::reverse_inverse`]): only a ferry running the reverse flow with the other
//!   setting writes them, and it writes there now. Per partition, because deployments sharing the
//!   clusters may run the pair's flows with different settings for different topics.
//!
//! MM2 running the reverse flow with the other setting writes unmarked syncs into this flow's topic,
//! which cannot be told from this flow's own: not supported (MM2's own checkpoints mix them up too).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use super::{CheckpointState, EARLY_SYNCS, SharedCheckpointState, err, lock};
use crate::clients::{Connection, FlowConnections, Isolation, PartitionReader, readers};
use crate::config::{ClusterSpec, FlowId, FlowPlan, OffsetSyncsLocation};
use crate::flow::offset_syncs::{FLOW_HEADER, syncs_location};
use crate::kafka::{self, TopicSpec};
use crate::mm2::records::OffsetSync;
use crate::policy::ReplicationPolicy;
use crate::sync_rule::{SYNC_MARK_HEADER, SyncMark};
use crate::sync_store::{StoredSync, SyncStore};

/// Which offset syncs a reader follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Side {
    /// This flow's own topic: its syncs, and the reverse flow's when that flow writes the same topic.
    Forward,
    /// The pair's other offset-syncs topic, where the reverse flow writes with the same setting as this one.
    Reverse,
    /// The newest of this flow's own, while the whole history is read ([`CheckpointState::early`]).
    Early,
}

impl Side {
    fn history(self, st: &mut CheckpointState) -> (&mut SyncStore, &mut i64) {
        match self {
            Side::Forward => (&mut st.syncs, &mut st.syncs_position),
            Side::Reverse => (&mut st.reverse, &mut st.reverse_position),
            Side::Early => (&mut st.early, &mut st.early_position),
        }
    }
}

/// Where a sync read by a reader of `side` goes, given the flow its [`FLOW_HEADER`] names (`None`: no header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Route {
    /// Into the reader's own store.
    Keep,
    /// Into [`CheckpointState::reverse_here`]: the reverse flow writes this flow's topic.
    ReverseHere,
    /// Another flow's: skipped.
    Skip,
}

pub(super) fn route(side: Side, flow: Option<&[u8]>, this: &str, reverse: &str) -> Route {
    match (side, flow) {
        (Side::Forward | Side::Early, None) => Route::Keep,
        (Side::Forward | Side::Early, Some(f)) if f == this.as_bytes() => Route::Keep,
        (Side::Forward, Some(f)) if f == reverse.as_bytes() => Route::ReverseHere,
        (Side::Reverse, None) => Route::Keep,
        (Side::Reverse, Some(f)) if f == reverse.as_bytes() => Route::Keep,
        _ => Route::Skip,
    }
}

/// The offset-syncs topic of flow `source->target` with `location`: the alias of the cluster that holds
/// it and its name (MM2's rule; [`syncs_location`] for a plan).
fn syncs_topic(
    location: OffsetSyncsLocation,
    policy: &ReplicationPolicy,
    source: &str,
    target: &str,
) -> (String, String) {
    match location {
        OffsetSyncsLocation::Source => (source.to_string(), policy.offset_syncs_topic(target)),
        OffsetSyncsLocation::Target => (target.to_string(), policy.offset_syncs_topic(source)),
    }
}

/// The pair's offset-syncs topic that this flow does not write: the reverse flow's when it has the same
/// `offset_syncs_topic_location` as this one (with the other setting it writes this flow's own topic).
fn other_syncs_topic(
    location: OffsetSyncsLocation,
    policy: &ReplicationPolicy,
    source: &str,
    target: &str,
) -> (String, String) {
    let other = match location {
        OffsetSyncsLocation::Source => OffsetSyncsLocation::Target,
        OffsetSyncsLocation::Target => OffsetSyncsLocation::Source,
    };
    syncs_topic(other, policy, source, target)
}

/// The cluster and name of [`other_syncs_topic`] for `plan`.
pub(crate) fn reverse_syncs_location(plan: &FlowPlan) -> (&ClusterSpec, String) {
    let s = &plan.settings;
    let (alias, topic) =
        other_syncs_topic(s.offset_syncs_topic_location, &plan.policy, &plan.id.source, &plan.id.target);
    (if alias == plan.id.source { &plan.source } else { &plan.target }, topic)
}

/// The reverse flow's id as its syncs name it.
fn reverse_flow(id: &FlowId) -> String {
    FlowId { source: id.target.clone(), target: id.source.clone() }.to_string()
}

/// An offset-sync backlog being read: where it ends, and when reading last moved.
pub(super) struct Backlog {
    end: i64,
    progress: (Instant, i64),
}

impl Backlog {
    /// The offset the backlog ends before.
    pub(super) fn end(&self) -> i64 {
        self.end
    }

    /// Reading was held back on purpose (a failpoint): that is not the cluster failing to answer.
    pub(super) fn held(&mut self) {
        self.progress.0 = Instant::now();
    }
}

/// Records folded into the stores per [`SyncReader::poll`], under one lock of the state: a backlog is
/// read in batches of this many (a few milliseconds each), and the computer's loop sees to its timers
/// in between.
const BATCH: usize = 10_000;

/// The flow and mark headers of a sync record ([`FLOW_HEADER`], [`SYNC_MARK_HEADER`]; the first of
/// each), in one pass over its headers.
fn sync_headers<'a>(msg: &'a BorrowedMessage<'_>) -> (Option<&'a [u8]>, Option<&'a [u8]>) {
    let (mut flow, mut mark) = (None, None);
    if let Some(headers) = msg.headers() {
        for h in headers.iter() {
            if h.key == FLOW_HEADER && flow.is_none() {
                flow = Some(h.value);
            } else if h.key == SYNC_MARK_HEADER && mark.is_none() {
                mark = Some(h.value);
            }
        }
    }
    (flow.flatten(), mark.flatten())
}

/// Where a reader's records come from.
enum Records {
    /// A partition of the connection's shared followers ([`PartitionReader`]): the forward and reverse
    /// readers follow their topics for the computer's whole life.
    Shared(PartitionReader),
    /// A consumer of the reader's own: the early reader follows the partition the forward reader reads
    /// at the same time (a shared consumer holds a partition once), and only while the backlog is read.
    Own(kafka::AssignOnlyConsumer),
}

impl Records {
    fn consumer(&self) -> &kafka::AssignOnlyConsumer {
        match self {
            Records::Shared(r) => r.consumer(),
            Records::Own(c) => c,
        }
    }

    fn poll(&self, wait: Duration) -> Option<rdkafka::error::KafkaResult<BorrowedMessage<'_>>> {
        match self {
            Records::Shared(r) => r.poll(wait),
            Records::Own(c) => c.poll(wait),
        }
    }
}

/// Follows an offset-syncs topic into the shared store, from where the last reader stopped.
pub(super) struct SyncReader {
    records: Records,
    topic: String,
    cluster: String,
    side: Side,
    /// This flow's id and the reverse flow's, as [`FLOW_HEADER`] names them.
    this: String,
    reverse: String,
    /// Set to stop a reader that reads on a thread of its own ([`super::backlog`]): reading to the
    /// end then gives up with [`STOPPED`].
    cancel: Arc<AtomicBool>,
}

/// The error of a read given up because its reader was stopped.
pub(super) const STOPPED: &str = "stopped before the offset syncs were read";

impl SyncReader {
    pub(super) fn new(plan: &FlowPlan, conns: &FlowConnections, state: &SharedCheckpointState) -> Result<Self, String> {
        let (cluster, topic) = syncs_location(plan);
        // The emitter creates it too; whoever comes first wins, with the same definition.
        let spec = TopicSpec::compacted(topic.clone(), 1, plan.settings.offset_syncs_rf());
        conns.on(cluster).ensure_topic(&plan.id, &spec).map_err(err)?;
        Self::open(plan, state, Some(conns.on(cluster)), cluster, topic, Side::Forward)
    }

    /// A reader of the reverse flow's syncs if that topic exists (it is never created here: it is the
    /// other flow's, which may not exist).
    pub(super) fn reverse(
        plan: &FlowPlan,
        conns: &FlowConnections,
        state: &SharedCheckpointState,
    ) -> Result<Option<Self>, String> {
        let (cluster, topic) = reverse_syncs_location(plan);
        let probe = conns.on(cluster).meta(Isolation::AsConfigured).map_err(err)?;
        let exists = kafka::topic_partitions(&probe, &cluster.alias).map_err(err)?.contains_key(&topic);
        if !exists {
            return Ok(None);
        }
        Self::open(plan, state, Some(conns.on(cluster)), cluster, topic, Side::Reverse).map(Some)
    }

    /// A reader of `topic` on `cluster` from where the last reader of `side` stopped: on the shared
    /// followers of `shared` (the cluster's connection), or on a consumer of its own without one.
    fn open(
        plan: &FlowPlan,
        state: &SharedCheckpointState,
        shared: Option<&Arc<Connection>>,
        cluster: &ClusterSpec,
        topic: String,
        side: Side,
    ) -> Result<Self, String> {
        let position = *side.history(&mut lock(state)).1;
        let start = if position > 0 { Offset::Offset(position) } else { Offset::Beginning };
        let records = match shared {
            Some(connection) => Records::Shared(connection.partition_reader(&topic, 0, start).map_err(err)?),
            None => {
                let consumer = kafka::assign_only_consumer(&readers::tuned(cluster), &plan.id, "offset-syncs-reader")
                    .map_err(err)?;
                let mut tpl = TopicPartitionList::new();
                tpl.add_partition_offset(&topic, 0, start).map_err(|e| e.to_string())?;
                consumer.assign(&tpl).map_err(|e| format!("cluster `{}`: assign {topic}: {e}", cluster.alias))?;
                Records::Own(consumer)
            }
        };
        Ok(Self {
            records,
            topic,
            cluster: cluster.alias.clone(),
            side,
            this: plan.id.to_string(),
            reverse: reverse_flow(&plan.id),
            cancel: Arc::default(),
        })
    }

    /// The reader, stopped (with the readers it opens) when `cancel` is set.
    pub(super) fn cancelled_by(mut self, cancel: Arc<AtomicBool>) -> Self {
        self.cancel = cancel;
        self
    }

    fn check_cancel(&self) -> Result<(), String> {
        if self.cancel.load(Ordering::Relaxed) { Err(STOPPED.to_string()) } else { Ok(()) }
    }

    pub(super) fn position(&self, state: &SharedCheckpointState) -> i64 {
        *self.side.history(&mut lock(state)).1
    }

    /// Read the backlog; only then may the store translate (MM2: no translation before read-to-end).
    pub(super) fn read_to_end(&mut self, state: &SharedCheckpointState) -> Result<(), String> {
        if self.side.history(&mut lock(state)).0.is_read_to_end() {
            return Ok(());
        }
        let (_, high) = kafka::watermarks(self.records.consumer(), &self.topic, 0)
            .map_err(|e| format!("cluster `{}`: watermarks of {}: {e}", self.cluster, self.topic))?;
        let mut backlog = Backlog { end: high, progress: (Instant::now(), self.position(state)) };
        while !self.reached(state, high)? {
            self.check_cancel()?;
            self.check_progress(state, &mut backlog)?;
            self.poll(state, Duration::from_millis(200))?;
        }
        let mut st = lock(state);
        if self.side == Side::Forward {
            st.reverse_here.set_read_to_end();
        }
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
    pub(super) fn read_early(
        &self,
        plan: &FlowPlan,
        state: &SharedCheckpointState,
    ) -> Result<Option<(Self, Backlog)>, String> {
        {
            let st = lock(state);
            if st.syncs.is_read_to_end() || st.syncs.is_backlog_latest_only() {
                return Ok(None);
            }
        }
        let (low, high) = kafka::watermarks(self.records.consumer(), &self.topic, 0)
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
        let mut early =
            Self::open(plan, state, None, cluster, self.topic.clone(), Side::Early)?.cancelled_by(self.cancel.clone());
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
        st.reverse_here.set_read_to_end();
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
        let high = match self.records.consumer().fetch_watermarks(&self.topic, 0, left) {
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
            .records
            .consumer()
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

    /// Fold newly arrived syncs into the store (waits up to `wait` for the first one): what has arrived,
    /// up to [`BATCH`] records, under one lock of the state.
    pub(super) fn poll(&mut self, state: &SharedCheckpointState, wait: Duration) -> Result<(), String> {
        // The wait happens without the lock; the rest is what librdkafka already holds.
        let Some(mut msg) = self.records.poll(wait) else { return Ok(()) };
        let mut st = lock(state);
        for taken in 1..=BATCH {
            match msg {
                Ok(msg) => self.fold(&mut st, &msg),
                Err(e) if kafka::is_unused_group_refusal(&e) => {}
                Err(e) => return Err(self.read_error(&e)),
            }
            if taken == BATCH {
                break;
            }
            match self.records.poll(Duration::ZERO) {
                Some(m) => msg = m,
                None => break,
            }
        }
        Ok(())
    }

    /// One record of the offset-syncs topic into the store its flow header routes it to. Decoded in
    /// place: nothing is allocated per record.
    fn fold(&self, st: &mut CheckpointState, msg: &BorrowedMessage<'_>) {
        let (flow, mark) = sync_headers(msg);
        *self.side.history(st).1 = msg.offset() + 1;
        let route = route(self.side, flow, &self.this, &self.reverse);
        if route == Route::Skip {
            return;
        }
        match OffsetSync::decode_ref(msg.key().unwrap_or_default(), msg.payload()) {
            Ok(sync) => {
                let stored = StoredSync {
                    upstream: sync.upstream_offset,
                    downstream: sync.downstream_offset,
                    mark: mark.and_then(SyncMark::decode),
                    position: msg.offset(),
                };
                let store = match route {
                    Route::ReverseHere => &mut st.reverse_here,
                    _ => self.side.history(st).0,
                };
                store.handle(sync.topic, sync.partition, stored);
            }
            Err(e) => kafka::skip_internal_record(Some(&self.this), &self.cluster, msg, "an offset-sync record", &e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCATIONS: [OffsetSyncsLocation; 2] = [OffsetSyncsLocation::Source, OffsetSyncsLocation::Target];

    #[test]
    fn the_reverse_flow_writes_the_other_topic_with_the_same_setting_and_this_flows_own_with_the_other() {
        for policy in [ReplicationPolicy::default_policy("."), ReplicationPolicy::default_policy("_")] {
            for this in LOCATIONS {
                for reverse in LOCATIONS {
                    let own = syncs_topic(this, &policy, "east", "west");
                    let theirs = syncs_topic(reverse, &policy, "west", "east");
                    let other = other_syncs_topic(this, &policy, "east", "west");
                    assert_ne!(own, other, "the pair's two topics");
                    let expected = if this == reverse { &other } else { &own };
                    assert_eq!(&theirs, expected, "east->west {this:?}, west->east {reverse:?}");
                }
            }
        }
        // MM2's names: the topic on a cluster is named for the other one.
        let p = ReplicationPolicy::default_policy(".");
        assert_eq!(
            other_syncs_topic(OffsetSyncsLocation::Target, &p, "east", "west"),
            ("east".to_string(), "mm2-offset-syncs.west.internal".to_string())
        );
        assert_eq!(
            other_syncs_topic(OffsetSyncsLocation::Source, &p, "east", "west"),
            ("west".to_string(), "mm2-offset-syncs.east.internal".to_string())
        );
    }

    #[test]
    fn each_reader_keeps_its_flows_syncs_and_sets_the_reverse_flows_aside() {
        let (this, reverse) = ("east->west", "west->east");
        let r = |side, flow: Option<&str>| route(side, flow.map(str::as_bytes), this, reverse);
        assert_eq!(r(Side::Forward, None), Route::Keep, "unmarked: MM2's or an older ferry's, this flow's");
        assert_eq!(r(Side::Forward, Some(this)), Route::Keep);
        assert_eq!(r(Side::Forward, Some(reverse)), Route::ReverseHere);
        assert_eq!(r(Side::Forward, Some("north->west")), Route::Skip);
        assert_eq!(r(Side::Early, Some(this)), Route::Keep);
        assert_eq!(r(Side::Early, None), Route::Keep);
        assert_eq!(r(Side::Early, Some(reverse)), Route::Skip, "the forward reader sets those aside");
        assert_eq!(r(Side::Reverse, None), Route::Keep, "MM2 running the reverse flow");
        assert_eq!(r(Side::Reverse, Some(reverse)), Route::Keep);
        assert_eq!(r(Side::Reverse, Some(this)), Route::Skip, "this flow's, left by an earlier setting");
    }
}
