//! Copy progress, persisted where MM2 keeps it: Kafka Connect source offsets in the flow's
//! `mm2_offsets_topic` on the target (dedicated MM2's `mm2-offsets.<source>.internal` by default, a
//! Connect cluster's `offset.storage.topic` when taking over from one; mm2-reference.md §1.6), keyed by
//! the flow's `mm2_source_connector`.
//!
//! Using MM2's own place and encoding means ferry resumes where a Java MM2 stopped, and MM2 resumes where
//! ferry stopped. The stored value is the offset of the last replicated record; copying resumes at +1.
//! Progress lives on the target because the target holds the truth about what reached it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::IntCounter;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};

use super::acks::{AckTable, PartitionAck, SourcePartition, StoredPosition, TopicId};
use crate::clients::internal::Outcome;
use crate::clients::{Connection, Lane, Outgoing};
use crate::config::FlowPlan;
use crate::kafka::{self, KafkaOpError, TopicSpec};
use crate::metrics::METRICS;
use crate::mm2::connect_offsets;
use crate::sync_rule::Bridge;

/// Header of a progress record naming the source topic id the position belongs to. MM2 reads only the
/// key and value of Connect's offsets topic, so the record stays MM2's.
pub const TOPIC_ID_HEADER: &str = "ferry.topic.id";
/// Header of a progress record with the writer's ownership epoch of the partition (decimal), so that
/// the next owner takes a higher one (`acks::next_epoch`) and a record written late by an owner that
/// was already replaced does not win over its successor's.
pub const EPOCH_HEADER: &str = "ferry.epoch";
/// Header of a progress record whose position is offset 0, which MM2's value cannot say (it stores the
/// last replicated offset: -1, "no position"). Written for a partition that started at `latest` or a
/// time while still empty, so that a restart keeps that start instead of deriving a later one. MM2
/// reads -1 as no position and starts at its consumer's `auto.offset.reset` (`earliest` by default):
/// offset 0 as well.
pub const NEXT_HEADER: &str = "ferry.next";

/// Header of a progress record with its writer's last acknowledged position before it, as the sync its
/// lifetime would publish next (`sync_rule::Bridge`): a node that takes the partition after a crash of
/// the writer publishes it, so translation stays exact across the handover.
pub const BRIDGE_HEADER: &str = "ferry.sync.last";

/// Header of an exactly-once flow's progress record: the transactional id of the producer that wrote
/// it, which may still hold the partition (see `copier::transactions`).
pub const WRITER_HEADER: &str = "ferry.writer";
/// Header of an exactly-once flow's progress record written when the partition was handed over
/// cleanly: its writer let it go, and the next owner has nobody to fence.
pub const RELEASED_HEADER: &str = "ferry.released";

/// Header of an at-least-once flow's progress record: the node that wrote it (`<deployment>.<flow>.copier.<node>`),
/// so that of two owners that took the same epoch the first in the log wins (see [`Progress::apply`]).
/// Not `ferry.writer`: an at-least-once owner has no transactions to fence.
pub const OWNER_HEADER: &str = "ferry.owner";

/// Connector name of an exactly-once taker's intent records (see `copier::transactions`): the same
/// Connect key shape as a position, under a connector nobody else uses, in the partition's own
/// offsets-topic partition, so that it sits in the log among the partition's progress records.
/// MM2 and Connect read only their own connector's keys.
pub fn intent_connector(connector: &str) -> String {
    format!("ferry-intent:{connector}")
}

/// One progress record of the flow, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgressRecord {
    pub tp: SourcePartition,
    /// Next offset to copy; `None`: no position (MM2's -1, a tombstone).
    pub next: Option<i64>,
    pub topic_id: Option<TopicId>,
    /// The writer's ownership epoch (0: none, e.g. MM2's).
    pub epoch: u64,
    /// Who wrote it: an exactly-once writer's transactional id or an at-least-once owner.
    pub writer: Option<String>,
    /// `writer` is an exactly-once producer, which may go on writing until it is fenced.
    pub transactional: bool,
    /// Written at a clean handover: its writer let the partition go.
    pub released: bool,
    /// An exactly-once taker's intent (not a position): see [`intent_connector`].
    pub intent: bool,
    /// The writer's last acknowledged position as a sync ([`BRIDGE_HEADER`]).
    pub bridge: Option<Bridge>,
}

/// What a record of the offsets topic is to this flow.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    Ours(ProgressRecord),
    /// Another connector's or another source cluster's record (a shared Connect offsets topic).
    Other,
    /// A key that is not Connect's, this connector's key that is not a source partition, or the flow's
    /// key with a value that is not Connect's JSON with an integral `offset`.
    Bad(String),
}

/// Decodes one record of the offsets topic for the flow copying from `source` under `connector`.
/// `header` gives a header's value as text.
pub fn decode(
    connector: &str,
    source: &str,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    header: impl Fn(&str) -> Option<String>,
) -> Decoded {
    // Someone else's key (another connector's, another source cluster's: Connect's topic may be shared)
    // is passed over; a key that is not Connect's, or this connector's that is no source partition, is bad.
    let (key, intent) = match connect_offsets::source_key_for(key, connector, source) {
        Ok(Some(k)) => (k, false),
        Ok(None) => match connect_offsets::source_key_for(key, &intent_connector(connector), source) {
            Ok(Some(k)) => (k, true),
            Ok(None) => return Decoded::Other,
            Err(e) => return Decoded::Bad(e.to_string()),
        },
        Err(e) => return Decoded::Bad(e.to_string()),
    };
    let next = match connect_offsets::decode_source_value(value) {
        Ok(Some(last)) if last >= 0 => Some(last + 1),
        Ok(Some(_)) => header(NEXT_HEADER).and_then(|n| n.parse::<i64>().ok()).filter(|n| *n == 0),
        Ok(None) => None,
        Err(e) => return Decoded::Bad(e.to_string()),
    };
    let transactional = header(WRITER_HEADER);
    Decoded::Ours(ProgressRecord {
        tp: (key.topic, key.partition),
        next,
        topic_id: header(TOPIC_ID_HEADER).map(TopicId::from),
        epoch: header(EPOCH_HEADER).and_then(|e| e.parse::<u64>().ok()).unwrap_or(0),
        transactional: transactional.is_some(),
        writer: transactional.or_else(|| header(OWNER_HEADER)),
        released: header(RELEASED_HEADER).is_some(),
        intent,
        bridge: header(BRIDGE_HEADER).and_then(|b| Bridge::decode(&b)),
    })
}

/// One partition's progress as its records say it, folded in log order: the log decides ownership,
/// never a clock.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// The position of the newest record that counts.
    pub position: Option<StoredPosition>,
    /// The highest ownership epoch of a record that counted, kept when a later one removed the position:
    /// the next owner takes one above it.
    pub epoch: u64,
    /// Who wrote the first record that counted at `epoch`: two owners that took the same epoch (each
    /// read the log before the other's claim was in it) are told apart by the log's order.
    pub epoch_writer: Option<String>,
    /// An exactly-once writer that may still write the partition (its newest record that counted did
    /// not release it): whoever takes the partition fences it first.
    pub holder: Option<String>,
}

/// What [`Progress::apply`] made of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    Counted,
    /// Written by an owner that was already replaced (a lower epoch than one before it).
    Older,
    /// Written at the epoch of an owner before it in the log by another writer: a node that took the
    /// partition on an outdated read, after the other had claimed it.
    Contender,
    /// An intent: it names a taker, it says nothing of the position.
    Intent,
}

impl Progress {
    /// Folds in the next record of the partition (records in log order).
    pub fn apply(&mut self, r: &ProgressRecord) -> Applied {
        if r.intent {
            return Applied::Intent;
        }
        // A record without an epoch is MM2's (or an old ferry's): MM2 took over after ferry, it counts.
        if r.epoch > 0 {
            if r.epoch < self.epoch {
                return Applied::Older;
            }
            if r.epoch == self.epoch && self.epoch_writer.is_some() && r.writer != self.epoch_writer {
                return Applied::Contender;
            }
            if r.epoch > self.epoch {
                self.epoch_writer = r.writer.clone();
            }
            self.epoch = r.epoch;
        }
        self.position =
            r.next.map(|next| StoredPosition { next, topic_id: r.topic_id.clone(), epoch: r.epoch, bridge: r.bridge });
        self.holder = r.writer.clone().filter(|_| r.transactional && !r.released);
        Applied::Counted
    }
}

/// Every partition's folded progress.
pub type Folded = HashMap<SourcePartition, Progress>;

/// The progress of `wanted` only (a node given these partitions by its copier group), read committed:
/// reads just the offsets-topic partitions their keys live in. Partitions without any record are absent.
pub fn load_partitions(
    plan: &FlowPlan,
    num_partitions: i32,
    wanted: &[SourcePartition],
) -> Result<Folded, KafkaOpError> {
    let mut all = Folded::new();
    read_records(plan, homes(plan, num_partitions, wanted), Isolation::Committed, |r, offset| {
        let applied = all.entry(r.tp.clone()).or_default().apply(&r);
        if matches!(applied, Applied::Older | Applied::Contender) {
            tracing::info!(flow = %plan.id, topic = %r.tp.0, partition = r.tp.1, offset, epoch = r.epoch, writer = r.writer.as_deref().unwrap_or("-"), why = ?applied, "ignoring a copy-progress record of an owner that was replaced or lost the partition");
        }
    })?;
    // A set, not `wanted.contains`: a node given 10,000 partitions would compare 10,000 x 10,000 names.
    let wanted: HashSet<&SourcePartition> = wanted.iter().collect();
    all.retain(|tp, _| wanted.contains(tp));
    Ok(all)
}

/// Exactly-once: the writers other than `me` that may still write one of `wanted`, as the log says
/// it *including* what is not committed (read uncommitted: open transactions of frozen writers, other
/// takers' intents). See [`Contenders`].
pub fn contenders(
    plan: &FlowPlan,
    num_partitions: i32,
    wanted: &[SourcePartition],
    me: &str,
    kin: &str,
) -> Result<std::collections::BTreeSet<String>, KafkaOpError> {
    let wanted_set: HashSet<&SourcePartition> = wanted.iter().collect();
    let mut found = Contenders::new(me, kin);
    read_records(plan, homes(plan, num_partitions, wanted), Isolation::Uncommitted, |r, _| {
        if wanted_set.contains(&r.tp) {
            found.see(r);
        }
    })?;
    Ok(found.writers())
}

/// The exactly-once writers to fence before taking partitions over: for each partition, every writer
/// named by a record of it (committed or not) after its last release and before `me`'s newest intent
/// for it. Records after that intent are of takers that came later: they fence `me`, not the other
/// way round. At-least-once owners and MM2 name no one: they have no transactions to fence; nor do
/// writers of another deployment (not named with `kin`, see `copier::transactions::writers_prefix`).
pub struct Contenders {
    me: String,
    kin: String,
    /// Per partition, the writers named since its last release, in log order, and how many of them
    /// came before `me`'s newest intent.
    seen: HashMap<SourcePartition, (Vec<String>, Option<usize>)>,
}

impl Contenders {
    pub fn new(me: &str, kin: &str) -> Self {
        Self { me: me.to_string(), kin: kin.to_string(), seen: HashMap::new() }
    }

    /// The next record of its partition, in log order.
    pub fn see(&mut self, r: ProgressRecord) {
        let (writers, mine) = self.seen.entry(r.tp.clone()).or_default();
        let Some(writer) = r.writer.filter(|w| (r.transactional || r.intent) && w.starts_with(&self.kin)) else {
            return;
        };
        if r.released && !r.intent {
            writers.clear();
            *mine = None;
        } else if writer == self.me {
            if r.intent {
                *mine = Some(writers.len());
            }
        } else {
            writers.push(writer);
        }
    }

    pub fn writers(self) -> std::collections::BTreeSet<String> {
        self.seen
            .into_values()
            .flat_map(|(writers, mine)| {
                let upto = mine.unwrap_or(writers.len());
                writers.into_iter().take(upto)
            })
            .collect()
    }
}

#[derive(Clone, Copy)]
enum Isolation {
    Committed,
    Uncommitted,
}

/// Reads `partitions` of the flow's offsets topic to their end and hands each of the flow's records to
/// `f` with its offset, in log order per partition. Records that do not decode are skipped, each named
/// in a warning and counted (`kafka::skip_internal_record`).
fn read_records(
    plan: &FlowPlan,
    partitions: impl IntoIterator<Item = i32>,
    isolation: Isolation,
    mut f: impl FnMut(ProgressRecord, i64),
) -> Result<(), KafkaOpError> {
    let topic = &plan.settings.mm2_offsets_topic;
    let connector = &plan.settings.mm2_source_connector;
    // The ends are the high watermarks, asked of a `read_uncommitted` consumer: a committed read then
    // waits for the transactions open now instead of stopping before them (their last stable offsets),
    // which would miss what a fenced writer committed after one of them began.
    let uncommitted = kafka::assign_only_consumer_with(
        &plan.target,
        &plan.id,
        "progress-scanner",
        &[("isolation.level", "read_uncommitted")],
    )?;
    let committed = match isolation {
        Isolation::Committed => Some(kafka::assign_only_consumer_with(
            &plan.target,
            &plan.id,
            "progress-reader",
            &[("isolation.level", "read_committed")],
        )?),
        Isolation::Uncommitted => None,
    };
    let consumer = committed.as_ref().unwrap_or(&uncommitted);
    kafka::read_to_end_of(consumer, &uncommitted, &plan.target.alias, topic, partitions, |msg| {
        let header = |name: &str| {
            msg.headers()
                .and_then(|h| h.iter().find(|h| h.key == name))
                .and_then(|h| h.value)
                .and_then(|v| std::str::from_utf8(v).ok())
                .map(str::to_string)
        };
        match decode(connector, &plan.id.source, msg.key(), msg.payload(), header) {
            Decoded::Ours(r) => f(r, msg.offset()),
            Decoded::Other => {}
            Decoded::Bad(e) => kafka::skip_internal_record(
                Some(&plan.id.to_string()),
                &plan.target.alias,
                msg,
                "a copy-progress record",
                &e,
            ),
        }
    })
}

fn homes(plan: &FlowPlan, num_partitions: i32, wanted: &[SourcePartition]) -> Vec<i32> {
    let mut homes: Vec<i32> = wanted
        .iter()
        .map(|(t, p)| {
            let key = connect_offsets::encode_source_key(&plan.settings.mm2_source_connector, &plan.id.source, t, *p);
            connect_offsets::partition_for_key(&key, num_partitions)
        })
        .collect();
    homes.sort_unstable();
    homes.dedup();
    homes
}

/// The offsets topic as Connect creates it: 25 partitions, compacted.
pub fn topic_spec(plan: &FlowPlan) -> TopicSpec {
    TopicSpec::compacted(
        plan.settings.mm2_offsets_topic.clone(),
        connect_offsets::OFFSETS_TOPIC_PARTITIONS,
        plan.settings.replication_factor,
    )
}

/// Where the progress writer finds a partition's last acknowledged position as a sync, to carry it in
/// the partition's progress records ([`BRIDGE_HEADER`]): the copier's delivery state.
pub trait Bridges: Send + Sync {
    fn bridge(&self, slot: &PartitionAck) -> Option<Bridge>;
}

/// Who a record names as its writer.
#[derive(Clone, Copy)]
enum Kind<'a> {
    /// An at-least-once owner: this node ([`OWNER_HEADER`]).
    Owner,
    /// An exactly-once writer, and whether the record releases the partition.
    Transactional(&'a str, bool),
    /// An exactly-once taker's intent.
    Intent(&'a str),
}

/// One record of an exactly-once transaction's progress.
pub enum Entry {
    /// The partition's position (`None`: none yet), releasing it or not.
    Position(Arc<PartitionAck>, Option<i64>, bool),
    /// An intent: this writer is taking the partition (see `copier::transactions`).
    Intent(Arc<PartitionAck>),
}

/// What a progress record's report does (on the shared producer's thread).
struct Deliveries {
    acks: Arc<AckTable>,
    commits: IntCounter,
    error: Mutex<Option<String>>,
}

impl Deliveries {
    fn report(&self, slot: &Arc<PartitionAck>, next: i64, outcome: Outcome) {
        match outcome {
            Ok(_) => {
                slot.set_persisted(next);
                self.commits.inc();
            }
            Err(e) => {
                // Written again at the next round.
                self.acks.mark_dirty(slot);
                self.error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(|| e.text);
            }
        }
    }
}

/// Writes the positions that moved since they were last written, without waiting for the broker: a
/// round that cannot be delivered (the target is away) is written again later, and the copy loop never
/// blocks on it. Records go through the target connection's shared producer for internal topics.
pub struct ProgressWriter {
    lane: Lane,
    deliveries: Arc<Deliveries>,
    topic: String,
    connector: String,
    source_alias: String,
    /// This node's name as the flow's writer (`<deployment>.<flow>.copier.<node>`), on every record.
    owner: String,
    bridges: Option<Arc<dyn Bridges>>,
    flow: String,
    num_partitions: i32,
    last_warning: Option<Instant>,
}

/// Delivery problems are logged at most this often.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Progress records a flow writes per second at most, however many partitions it copies. A round
/// writes one record for each partition that moved since the last, so a wide flow spaces its rounds
/// out: up to 1,000 moving partitions persist every quarter second, 2,000 every half second, 10,000
/// every 2.5 s. Without the bound a flow copying 10,000 partitions at 26,000 records/s wrote 40,000
/// progress records/s, more than it copied.
pub const MAX_RECORDS_PER_SECOND: usize = 4_000;

/// When the round after one that wrote `written` records may run, at the earliest: `interval` after
/// it, or later so that rounds stay within [`MAX_RECORDS_PER_SECOND`].
pub fn next_round_after(written: usize, interval: Duration) -> Duration {
    interval.max(Duration::from_secs_f64(written as f64 / MAX_RECORDS_PER_SECOND as f64))
}

impl ProgressWriter {
    pub fn new(
        plan: &FlowPlan,
        target: &Arc<Connection>,
        num_partitions: i32,
        acks: Arc<AckTable>,
        owner: &str,
    ) -> Result<Self, KafkaOpError> {
        let flow = plan.id.to_string();
        let deliveries = Arc::new(Deliveries {
            acks,
            commits: METRICS.progress_commits.with_label_values(&[&flow]),
            error: Mutex::new(None),
        });
        Ok(Self {
            lane: target.internal()?,
            deliveries,
            topic: plan.settings.mm2_offsets_topic.clone(),
            connector: plan.settings.mm2_source_connector.clone(),
            source_alias: plan.id.source.clone(),
            owner: owner.to_string(),
            bridges: None,
            flow,
            num_partitions,
            last_warning: None,
        })
    }

    /// Where the partitions' last acknowledged positions are (see [`Bridges`]).
    pub fn set_bridges(&mut self, bridges: Arc<dyn Bridges>) {
        self.bridges = Some(bridges);
    }

    /// Queue a record for every partition whose position moved since it was last persisted. Returns
    /// how many were queued.
    pub fn persist(&mut self, acks: &AckTable) -> usize {
        if crate::failpoints::held(crate::failpoints::COPIER_PERSIST) {
            return 0;
        }
        let mut queued = 0;
        let mut refused = false;
        for slot in acks.take_dirty() {
            slot.take_dirty();
            if refused {
                // The producer refused this round (queue full, producer failed): the rest waits for
                // the next round. Re-marking needs the flag cleared first (`mark_dirty` queues a slot
                // only when its flag goes up), or the slot would never be written again.
                acks.mark_dirty(&slot);
                continue;
            }
            let Some(next) = slot.next() else { continue };
            if slot.persisted() == Some(next) {
                continue;
            }
            let (part, key, value, headers) = self.record_for(&slot, Some(next), Kind::Owner);
            let record = Outgoing {
                topic: &self.topic,
                partition: part,
                key: &key,
                payload: &value,
                headers: Some(headers),
                timestamp: None,
            };
            let (deliveries, sent) = (self.deliveries.clone(), slot.clone());
            match self.lane.send(record, move |outcome| deliveries.report(&sent, next, outcome)) {
                Ok(()) => queued += 1,
                Err(e) => {
                    acks.mark_dirty(&slot);
                    self.warn(&format!("queue progress record for {}-{}: {e}", slot.topic, slot.partition));
                    refused = true;
                }
            }
        }
        queued
    }

    /// At-least-once: persist the position of each of `slots` under its new epoch, whether it moved or
    /// not (a claim: the next owner of the partition takes an epoch above it), and wait until they are.
    pub fn claim(&mut self, slots: &[Arc<PartitionAck>], deadline: Instant) -> Result<(), String> {
        for slot in slots {
            let next = slot.next();
            let (part, key, value, headers) = self.record_for(slot, next, Kind::Owner);
            let record = Outgoing {
                topic: &self.topic,
                partition: part,
                key: &key,
                payload: &value,
                headers: Some(headers),
                timestamp: None,
            };
            let (deliveries, sent) = (self.deliveries.clone(), slot.clone());
            self.lane
                .send(record, move |outcome| {
                    if let Some(next) = next {
                        deliveries.report(&sent, next, outcome);
                    } else if let Err(e) = outcome {
                        deliveries.error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e.text);
                    }
                })
                .map_err(|e| format!("claim {}-{} in {}: {e}", slot.topic, slot.partition, self.topic))?;
        }
        self.flush(deadline)
    }

    /// The progress record of `slot` at `next`: its offsets-topic partition, key, value and headers.
    fn record_for(
        &self,
        slot: &PartitionAck,
        next: Option<i64>,
        kind: Kind<'_>,
    ) -> (i32, Vec<u8>, Vec<u8>, OwnedHeaders) {
        let key = connect_offsets::encode_source_key(&self.connector, &self.source_alias, &slot.topic, slot.partition);
        // The partition of the position's own key, also for an intent (its key differs): an intent must
        // sit in the log among the partition's records.
        let part = connect_offsets::partition_for_key(&key, self.num_partitions);
        let key = match kind {
            Kind::Intent(_) => connect_offsets::encode_source_key(
                &intent_connector(&self.connector),
                &self.source_alias,
                &slot.topic,
                slot.partition,
            ),
            _ => key,
        };
        // No position yet (a claim of a partition still being probed): MM2's "none".
        let value = connect_offsets::encode_source_value(next.map_or(-1, |n| n - 1));
        let id = slot.topic_id();
        let epoch = slot.epoch().to_string();
        let mut headers = OwnedHeaders::new_with_capacity(5);
        if let Some(id) = id.as_deref() {
            headers = headers.insert(Header { key: TOPIC_ID_HEADER, value: Some(id.as_bytes()) });
        }
        if next == Some(0) {
            headers = headers.insert(Header { key: NEXT_HEADER, value: Some(b"0") });
        }
        if slot.epoch() > 0 {
            headers = headers.insert(Header { key: EPOCH_HEADER, value: Some(epoch.as_bytes()) });
        }
        // Only a bridge right before the position: the record it describes is the last one copied.
        let bridge = self.bridges.as_ref().and_then(|b| b.bridge(slot)).filter(|b| Some(b.upstream + 1) == next);
        let bridge = bridge.map(|b| b.encode());
        if let (Kind::Owner | Kind::Transactional(..), Some(b)) = (kind, &bridge) {
            headers = headers.insert(Header { key: BRIDGE_HEADER, value: Some(b.as_bytes()) });
        }
        match kind {
            Kind::Owner => headers = headers.insert(Header { key: OWNER_HEADER, value: Some(self.owner.as_bytes()) }),
            Kind::Transactional(writer, released) => {
                headers = headers.insert(Header { key: WRITER_HEADER, value: Some(writer.as_bytes()) });
                if released {
                    headers = headers.insert(Header { key: RELEASED_HEADER, value: Some(b"1") });
                }
            }
            Kind::Intent(writer) => {
                headers = headers.insert(Header { key: WRITER_HEADER, value: Some(writer.as_bytes()) })
            }
        }
        (part, key, value, headers)
    }

    /// Exactly-once: the records of `slots` into the open transaction of `lane`, as `writer`: each
    /// partition's position (every partition whose position moved in the transaction, and those claimed
    /// or released by it, with `true` for a release), or an intent ([`Entry::Intent`]). Nothing counts
    /// as persisted until [`ProgressWriter::committed`] after the commit. Gives up at `deadline()` (asked
    /// again while it waits) while the producer's queue stays full.
    pub fn write_in_transaction(
        &mut self,
        lane: &mut crate::clients::RecordLane,
        entries: &[Entry],
        writer: &str,
        deadline: &mut dyn FnMut() -> Instant,
    ) -> Result<Vec<(Arc<PartitionAck>, i64)>, String> {
        let mut written = Vec::with_capacity(entries.len());
        for entry in entries {
            let (slot, next, kind) = match entry {
                Entry::Position(slot, next, released) => (slot, *next, Kind::Transactional(writer, *released)),
                Entry::Intent(slot) => (slot, None, Kind::Intent(writer)),
            };
            let (part, key, value, headers) = self.record_for(slot, next, kind);
            let mut record = lane
                .record(&self.topic, crate::clients::records::UNTRACKED)
                .partition(part)
                .key(&key[..])
                .payload(&value[..])
                .headers(headers);
            loop {
                match lane.send(record) {
                    Ok(()) => break,
                    Err((
                        rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                        back,
                    )) => {
                        if Instant::now() >= deadline() {
                            return Err(format!(
                                "write copy progress to {}: the producer's queue stayed full until the deadline",
                                self.topic
                            ));
                        }
                        record = back;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err((e, _)) => return Err(format!("write copy progress to {}: {e}", self.topic)),
                }
            }
            if let (Entry::Position(..), Some(next)) = (entry, next) {
                written.push((slot.clone(), next));
            }
        }
        Ok(written)
    }

    /// The transaction that held `written` committed: those positions are persisted.
    pub fn committed(&self, written: &[(Arc<PartitionAck>, i64)]) {
        for (slot, next) in written {
            slot.set_persisted(*next);
            self.deliveries.commits.inc();
        }
    }

    /// Log (rate-limited) when the progress topic refused or was away since the last call.
    pub fn poll(&mut self) {
        let error = self.deliveries.error.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(e) = error {
            self.warn(&e);
        }
    }

    fn warn(&mut self, e: &str) {
        if self.last_warning.is_none_or(|t| t.elapsed() >= WARN_EVERY) {
            tracing::warn!(flow = %self.flow, topic = %self.topic, error = %e, "cannot persist copy progress yet; retrying");
            self.last_warning = Some(Instant::now());
        }
    }

    /// Wait until everything queued is persisted, or `deadline`.
    pub fn flush(&mut self, deadline: Instant) -> Result<(), String> {
        let left = deadline.saturating_duration_since(Instant::now());
        let flushed = self.lane.wait_idle(left);
        let error = self.deliveries.error.lock().unwrap_or_else(|p| p.into_inner()).take();
        match (flushed, error) {
            (true, None) => Ok(()),
            (false, _) => Err(format!(
                "persist progress to {}: {} records not acknowledged in time (the last positions persisted earlier stand)",
                self.topic,
                self.lane.in_flight()
            )),
            (_, Some(e)) => Err(format!("persist progress to {}: {e}", self.topic)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(epoch: u64, writer: &str, next: Option<i64>) -> ProgressRecord {
        ProgressRecord {
            tp: ("orders".to_string(), 3),
            next,
            topic_id: None,
            epoch,
            writer: Some(writer.to_string()),
            transactional: true,
            released: false,
            intent: false,
            bridge: None,
        }
    }

    fn fold(records: &[ProgressRecord]) -> (Progress, Vec<Applied>) {
        let mut p = Progress::default();
        let applied = records.iter().map(|r| p.apply(r)).collect();
        (p, applied)
    }

    #[test]
    fn a_stale_claim_after_the_new_owners_records_does_not_count() {
        // c took the partition (epoch 5) and committed position 100; b read the log before c's claim,
        // took the same epoch and claimed "no position" after c's records.
        let (p, applied) = fold(&[rec(5, "c", None), rec(5, "c", Some(100)), rec(5, "b", None)]);
        assert_eq!(applied, [Applied::Counted, Applied::Counted, Applied::Contender]);
        assert_eq!(p.position.map(|s| s.next), Some(100), "the position stays c's");
        assert_eq!(p.holder.as_deref(), Some("c"), "c is the one to fence, not b");
        assert_eq!((p.epoch, p.epoch_writer.as_deref()), (5, Some("c")));
        // A late record of an owner already replaced, position or none, does not count either.
        let (p, applied) = fold(&[rec(6, "c", Some(100)), rec(5, "b", None), rec(5, "b", Some(7))]);
        assert_eq!(applied[1..], [Applied::Older, Applied::Older]);
        assert_eq!((p.position.map(|s| s.next), p.holder.as_deref()), (Some(100), Some("c")));
    }

    #[test]
    fn a_removal_keeps_the_highest_epoch_and_a_release_names_no_holder() {
        let (p, applied) = fold(&[rec(9, "c", Some(50)), rec(9, "c", None), rec(8, "b", Some(10))]);
        assert_eq!(applied, [Applied::Counted, Applied::Counted, Applied::Older]);
        assert_eq!((p.position, p.epoch), (None, 9), "no position, and epoch 9 still outranks b's 8");
        let released = ProgressRecord { released: true, ..rec(9, "c", Some(60)) };
        let (p, _) = fold(&[rec(9, "c", Some(50)), released]);
        assert_eq!((p.position.map(|s| s.next), p.holder), (Some(60), None));
        // The next owner, one epoch up, counts whatever its predecessor wrote.
        let (p, applied) = fold(&[rec(9, "c", Some(50)), rec(10, "b", Some(50))]);
        assert_eq!(applied[1], Applied::Counted);
        assert_eq!(p.holder.as_deref(), Some("b"));
    }

    #[test]
    fn mm2_records_always_count_and_intents_never_move_a_position() {
        let mm2 = ProgressRecord { epoch: 0, writer: None, transactional: false, ..rec(0, "", Some(200)) };
        let intent = ProgressRecord { intent: true, ..rec(0, "d", None) };
        let (p, applied) = fold(&[rec(9, "c", Some(50)), mm2, intent]);
        assert_eq!(applied, [Applied::Counted, Applied::Counted, Applied::Intent]);
        assert_eq!((p.position.map(|s| s.next), p.holder, p.epoch), (Some(200), None, 9));
        // At-least-once owners are told apart by `ferry.owner`, and never held.
        let owner = |w: &str, next| ProgressRecord { transactional: false, ..rec(4, w, Some(next)) };
        let (p, applied) = fold(&[owner("x", 5), owner("y", 1), owner("x", 9)]);
        assert_eq!(applied, [Applied::Counted, Applied::Contender, Applied::Counted]);
        assert_eq!((p.position.map(|s| s.next), p.holder), (Some(9), None));
    }

    #[test]
    fn contenders_are_the_writers_since_the_last_release_and_before_my_intent() {
        let intent = |w: &str| ProgressRecord { intent: true, ..rec(0, w, None) };
        let mut c = Contenders::new("me", "");
        for r in [
            rec(3, "a", Some(1)),
            ProgressRecord { released: true, ..rec(3, "a", Some(2)) },
            rec(4, "b", Some(2)),  // the holder
            intent("f"),           // a frozen taker's intent, its transaction maybe open
            rec(0, "me", Some(2)), // an earlier lifetime of mine: fenced by my own start
            ProgressRecord { transactional: false, ..rec(4, "alo", Some(2)) },
            intent("me"),
            intent("later"), // a later taker: it fences me
        ] {
            c.see(r);
        }
        let other = ProgressRecord { tp: ("orders".to_string(), 4), ..rec(2, "z", Some(1)) };
        c.see(other);
        let found: Vec<String> = c.writers().into_iter().collect();
        assert_eq!(found, ["b", "f", "z"]);
        // Writers of another deployment are never fenced.
        let mut c = Contenders::new("d1.f.copier.me", "d1.f.copier.");
        for w in ["d2.f.copier.x", "d1.f.copier.y"] {
            c.see(rec(1, w, Some(1)));
        }
        assert_eq!(c.writers().into_iter().collect::<Vec<_>>(), ["d1.f.copier.y"]);
    }

    #[test]
    fn wide_flows_space_their_persist_rounds_out() {
        let quarter = Duration::from_millis(250);
        assert_eq!(next_round_after(0, quarter), quarter);
        assert_eq!(next_round_after(8, quarter), quarter, "narrow flows persist every interval");
        assert_eq!(next_round_after(1_000, quarter), quarter);
        assert_eq!(next_round_after(2_000, quarter), Duration::from_millis(500));
        assert_eq!(next_round_after(10_000, quarter), Duration::from_millis(2_500));
    }
}
