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

/// Header of an exactly-once flow's progress record: the transactional id of the producer that wrote
/// it, which may still hold the partition (see `copier::transactions`).
pub const WRITER_HEADER: &str = "ferry.writer";
/// Header of an exactly-once flow's progress record written when the partition was handed over
/// cleanly: its writer let it go, and the next owner has nobody to fence.
pub const RELEASED_HEADER: &str = "ferry.released";

/// Read every stored position of this flow's source cluster. Records of other connectors or clusters and
/// tombstones are passed over; records that do not decode (a key that is not Connect's, or this
/// connector's key that is not a source partition; a value that is not Connect's JSON with an integral
/// `offset`) are skipped, each named in a warning and counted (`kafka::skip_internal_record`).
pub fn load(plan: &FlowPlan, num_partitions: i32) -> Result<HashMap<SourcePartition, StoredPosition>, KafkaOpError> {
    load_from(plan, 0..num_partitions)
}

/// The stored positions of `wanted` only (a node given these partitions by its copier group): reads just
/// the offsets-topic partitions their keys live in. Partitions without a stored position are absent.
pub fn load_partitions(
    plan: &FlowPlan,
    num_partitions: i32,
    wanted: &[SourcePartition],
) -> Result<HashMap<SourcePartition, StoredPosition>, KafkaOpError> {
    let mut all = load_from(plan, homes(plan, num_partitions, wanted))?;
    // A set, not `wanted.contains`: a node given 10,000 partitions would compare 10,000 x 10,000 names.
    let wanted: HashSet<&SourcePartition> = wanted.iter().collect();
    all.retain(|tp, _| wanted.contains(tp));
    Ok(all)
}

/// Partitions' possible writers (exactly-once transactional ids), from their newest progress records.
pub type Holders = HashMap<SourcePartition, String>;

/// Exactly-once: the stored positions of `wanted`, and for each partition whose newest progress record
/// names an exactly-once writer that did not release it, that writer's transactional id (the producer
/// that may still write the partition: see `copier::transactions`).
pub fn load_with_holders(
    plan: &FlowPlan,
    num_partitions: i32,
    wanted: &[SourcePartition],
) -> Result<(HashMap<SourcePartition, StoredPosition>, Holders), KafkaOpError> {
    let mut holders = HashMap::new();
    let homes = homes(plan, num_partitions, wanted);
    let mut all = load_inner(plan, homes, Some(&mut holders))?;
    let wanted: HashSet<&SourcePartition> = wanted.iter().collect();
    all.retain(|tp, _| wanted.contains(tp));
    holders.retain(|tp, _| wanted.contains(tp));
    Ok((all, holders))
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

fn load_from(
    plan: &FlowPlan,
    partitions: impl IntoIterator<Item = i32>,
) -> Result<HashMap<SourcePartition, StoredPosition>, KafkaOpError> {
    load_inner(plan, partitions, None)
}

fn load_inner(
    plan: &FlowPlan,
    partitions: impl IntoIterator<Item = i32>,
    mut holders: Option<&mut HashMap<SourcePartition, String>>,
) -> Result<HashMap<SourcePartition, StoredPosition>, KafkaOpError> {
    let topic = &plan.settings.mm2_offsets_topic;
    let connector = &plan.settings.mm2_source_connector;
    let target = &plan.target.alias;
    let consumer = kafka::assign_only_consumer(&plan.target, &plan.id, "progress-reader")?;
    let mut positions = HashMap::new();
    let flow = plan.id.to_string();
    kafka::read_to_end(&consumer, target, topic, partitions, |msg| {
        let skip = |why: &dyn std::fmt::Display| {
            kafka::skip_internal_record(Some(&flow), target, msg, "a copy-progress record", why);
        };
        let key = match connect_offsets::source_key_for(msg.key(), connector, &plan.id.source) {
            Ok(Some(key)) => key,
            Ok(None) => return, // another connector's or source cluster's (Connect's topic may be shared)
            Err(e) => return skip(&e),
        };
        let header = |name: &str| {
            msg.headers()
                .and_then(|h| h.iter().find(|h| h.key == name))
                .and_then(|h| h.value)
                .and_then(|v| std::str::from_utf8(v).ok())
        };
        let next = match connect_offsets::decode_source_value(msg.payload()) {
            Ok(Some(last)) if last >= 0 => Ok(Some(last + 1)),
            Ok(Some(_)) => Ok(header(NEXT_HEADER).and_then(|n| n.parse::<i64>().ok()).filter(|n| *n == 0)),
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        };
        match next {
            Ok(Some(next)) => {
                let topic_id = header(TOPIC_ID_HEADER).map(TopicId::from);
                let epoch = header(EPOCH_HEADER).and_then(|e| e.parse::<u64>().ok()).unwrap_or(0);
                let tp = (key.topic, key.partition);
                // A ferry record of a lower epoch than the one before it was written late by a replaced
                // owner. A record without an epoch (MM2's) always counts: MM2 took over after ferry.
                if epoch > 0 && positions.get(&tp).is_some_and(|p: &StoredPosition| p.epoch > epoch) {
                    tracing::info!(flow = %plan.id, topic = %tp.0, partition = tp.1, offset = msg.offset(), epoch, "ignoring a copy-progress record of an earlier owner written after its successor's");
                    return;
                }
                if let Some(holders) = holders.as_deref_mut() {
                    note_holder(holders, &tp, header(WRITER_HEADER), header(RELEASED_HEADER).is_some());
                }
                positions.insert(tp, StoredPosition { next, topic_id, epoch });
            }
            // A tombstone or a negative offset means "no position" (MM2 §4.3).
            Ok(None) => {
                if let Some(holders) = holders.as_deref_mut() {
                    let tp = (key.topic.clone(), key.partition);
                    note_holder(holders, &tp, header(WRITER_HEADER), header(RELEASED_HEADER).is_some());
                }
                positions.remove(&(key.topic, key.partition));
            }
            Err(e) => skip(&e),
        }
    })?;
    Ok(positions)
}

/// The newest progress record of `tp` names `writer` (an exactly-once writer), which `released` it or not.
fn note_holder(holders: &mut Holders, tp: &SourcePartition, writer: Option<&str>, released: bool) {
    match writer.filter(|_| !released) {
        Some(w) => holders.insert(tp.clone(), w.to_string()),
        None => holders.remove(tp),
    };
}

/// The offsets topic as Connect creates it: 25 partitions, compacted.
pub fn topic_spec(plan: &FlowPlan) -> TopicSpec {
    TopicSpec::compacted(
        plan.settings.mm2_offsets_topic.clone(),
        connect_offsets::OFFSETS_TOPIC_PARTITIONS,
        plan.settings.replication_factor,
    )
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
            flow,
            num_partitions,
            last_warning: None,
        })
    }

    /// Queue a record for every partition whose position moved since it was last persisted. Returns
    /// how many were queued.
    pub fn persist(&mut self, acks: &AckTable) -> usize {
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
            let (part, key, value, headers) = self.record_for(&slot, Some(next), None);
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

    /// The progress record of `slot` at `next`: its offsets-topic partition, key, value and headers.
    /// `writer`: an exactly-once writer's transactional id and whether it releases the partition.
    fn record_for(
        &self,
        slot: &PartitionAck,
        next: Option<i64>,
        writer: Option<(&str, bool)>,
    ) -> (i32, Vec<u8>, Vec<u8>, OwnedHeaders) {
        let key = connect_offsets::encode_source_key(&self.connector, &self.source_alias, &slot.topic, slot.partition);
        // No position yet (an exactly-once claim of a partition still being probed): MM2's "none".
        let value = connect_offsets::encode_source_value(next.map_or(-1, |n| n - 1));
        let part = connect_offsets::partition_for_key(&key, self.num_partitions);
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
        if let Some((writer, released)) = writer {
            headers = headers.insert(Header { key: WRITER_HEADER, value: Some(writer.as_bytes()) });
            if released {
                headers = headers.insert(Header { key: RELEASED_HEADER, value: Some(b"1") });
            }
        }
        (part, key, value, headers)
    }

    /// Exactly-once: the progress records of `slots` (every partition whose position moved in the
    /// transaction, and those claimed or released by it), each at its position, into the open
    /// transaction of `lane`, as `writer`. Nothing counts as persisted until [`ProgressWriter::committed`] after the commit.
    pub fn write_in_transaction(
        &mut self,
        lane: &mut crate::clients::RecordLane,
        slots: &[(Arc<PartitionAck>, Option<i64>, bool)],
        writer: &str,
    ) -> Result<Vec<(Arc<PartitionAck>, i64)>, String> {
        let mut written = Vec::with_capacity(slots.len());
        for (slot, next, released) in slots {
            let next = *next;
            let (part, key, value, headers) = self.record_for(slot, next, Some((writer, *released)));
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
                        record = back;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err((e, _)) => return Err(format!("write copy progress to {}: {e}", self.topic)),
                }
            }
            if let Some(next) = next {
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
