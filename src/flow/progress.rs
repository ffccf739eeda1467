//! Copy progress, persisted where MM2 keeps it: Kafka Connect source offsets in
//! `mm2-offsets.<source>.internal` on the target (mm2-reference.md §1.6).
//!
//! Using MM2's own place and encoding means ferry resumes where a Java MM2 stopped, and MM2 resumes where
//! ferry stopped. The stored value is the offset of the last replicated record; copying resumes at +1.
//! Progress lives on the target because the target holds the truth about what reached it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

use super::acks::SourcePartition;
use crate::config::FlowPlan;
use crate::kafka::{self, ErrorCapture, KafkaOpError, TopicSpec};
use crate::mm2::connect_offsets::{self, SOURCE_CONNECTOR};

/// How long persisting one round of progress may take before it counts as failed.
const PERSIST_TIMEOUT: Duration = Duration::from_secs(30);

/// Read every stored position of this flow's source cluster. Records of other connectors or clusters,
/// tombstones and undecodable values are skipped (the latter with a warning naming the record).
pub fn load(plan: &FlowPlan, num_partitions: i32) -> Result<HashMap<SourcePartition, i64>, KafkaOpError> {
    let topic = connect_offsets::offsets_topic(&plan.id.source);
    let target = &plan.target.alias;
    let consumer = kafka::assign_only_consumer(&plan.target, &plan.id, "progress-reader")?;
    let mut tpl = TopicPartitionList::new();
    let mut ends = HashMap::new();
    for p in 0..num_partitions {
        let (low, high) = watermarks(&consumer, &topic, p)
            .map_err(|e| KafkaOpError::kafka(target, format!("read watermarks of {topic}-{p}"), e))?;
        if high > low {
            tpl.add_partition_offset(&topic, p, Offset::Offset(low))
                .map_err(|e| KafkaOpError::kafka(target, "assign", e))?;
            ends.insert(p, high);
        }
    }
    let mut positions = HashMap::new();
    if ends.is_empty() {
        return Ok(positions);
    }
    consumer.assign(&tpl).map_err(|e| KafkaOpError::kafka(target, format!("assign {topic}"), e))?;
    let deadline = Instant::now() + kafka::ADMIN_TIMEOUT * 4;
    while !ends.is_empty() {
        if Instant::now() > deadline {
            return Err(KafkaOpError::Other {
                cluster: target.clone(),
                op: format!("read {topic}"),
                reason: "timed out before reaching the end of the topic".into(),
            });
        }
        let Some(msg) = consumer.poll(Duration::from_millis(200)) else { continue };
        let msg = msg.map_err(|e| KafkaOpError::kafka(target, format!("read {topic}"), e))?;
        if ends.get(&msg.partition()).is_some_and(|end| msg.offset() + 1 >= *end) {
            ends.remove(&msg.partition());
        }
        let Some(key) = msg.key().and_then(connect_offsets::decode_source_key) else { continue };
        if key.connector != SOURCE_CONNECTOR || key.cluster != plan.id.source {
            continue;
        }
        match connect_offsets::decode_source_value(msg.payload()) {
            Ok(Some(last)) if last >= 0 => {
                positions.insert((key.topic, key.partition), last + 1);
            }
            // A tombstone or a negative offset means "no position" (MM2 §4.3).
            Ok(_) => {
                positions.remove(&(key.topic, key.partition));
            }
            Err(e) => tracing::warn!(
                flow = %plan.id, topic = %topic, partition = msg.partition(), offset = msg.offset(),
                error = %e, "skipping undecodable copy-progress record"
            ),
        }
    }
    Ok(positions)
}

/// Watermarks of one partition. A topic created moments ago answers "not leader" for a while; that
/// is retried until the admin timeout instead of failing the copier.
fn watermarks(consumer: &BaseConsumer, topic: &str, partition: i32) -> Result<(i64, i64), rdkafka::error::KafkaError> {
    let deadline = Instant::now() + kafka::ADMIN_TIMEOUT;
    loop {
        match consumer.fetch_watermarks(topic, partition, kafka::ADMIN_TIMEOUT) {
            Err(e) if Instant::now() < deadline && is_transient(&e) => std::thread::sleep(Duration::from_millis(200)),
            other => return other,
        }
    }
}

/// Errors a freshly created or re-electing partition gives for a short while.
pub fn is_transient(e: &rdkafka::error::KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode as C;
    matches!(
        e.rdkafka_error_code(),
        Some(
            C::NotLeaderForPartition
                | C::LeaderNotAvailable
                | C::UnknownTopicOrPartition
                | C::UnknownPartition
                | C::OperationTimedOut
                | C::RequestTimedOut
        )
    )
}

/// The offsets topic as Connect creates it: 25 partitions, compacted.
pub fn topic_spec(plan: &FlowPlan) -> TopicSpec {
    TopicSpec::compacted(
        connect_offsets::offsets_topic(&plan.id.source),
        connect_offsets::OFFSETS_TOPIC_PARTITIONS,
        plan.settings.replication_factor,
    )
}

/// Writes positions that changed since the last successful round.
pub struct ProgressWriter {
    producer: BaseProducer<ErrorCapture>,
    topic: String,
    source_alias: String,
    num_partitions: i32,
    persisted: HashMap<SourcePartition, i64>,
}

impl ProgressWriter {
    pub fn new(
        plan: &FlowPlan,
        num_partitions: i32,
        already_persisted: HashMap<SourcePartition, i64>,
    ) -> Result<Self, KafkaOpError> {
        let mut cfg = kafka::client_config(&plan.target, &plan.id, "progress-producer");
        cfg.set("acks", "all").set("enable.idempotence", "true").set("linger.ms", "5");
        let producer = cfg
            .create_with_context(ErrorCapture::default())
            .map_err(|e| KafkaOpError::kafka(&plan.target.alias, "create progress producer", e))?;
        Ok(Self {
            producer,
            topic: connect_offsets::offsets_topic(&plan.id.source),
            source_alias: plan.id.source.clone(),
            num_partitions,
            persisted: already_persisted,
        })
    }

    /// Persist every position in `positions` (next offsets) that moved. Returns how many were written.
    pub fn persist(&mut self, positions: &HashMap<SourcePartition, i64>) -> Result<usize, String> {
        let changed: Vec<(&SourcePartition, i64)> = positions
            .iter()
            .filter(|(tp, next)| self.persisted.get(*tp) != Some(next))
            .map(|(tp, next)| (tp, *next))
            .collect();
        if changed.is_empty() {
            return Ok(0);
        }
        for ((topic, partition), next) in &changed {
            let key = connect_offsets::encode_source_key(SOURCE_CONNECTOR, &self.source_alias, topic, *partition);
            let value = connect_offsets::encode_source_value(next - 1);
            let part = connect_offsets::partition_for_key(&key, self.num_partitions);
            let record = BaseRecord::to(&self.topic).partition(part).key(&key).payload(&value);
            self.producer
                .send(record)
                .map_err(|(e, _)| format!("queue progress record for {topic}-{partition}: {e}"))?;
        }
        self.producer.flush(PERSIST_TIMEOUT).map_err(|e| format!("flush progress to {}: {e}", self.topic))?;
        if let Some(e) = self.producer.context().take() {
            return Err(format!("persist progress to {}: {e}", self.topic));
        }
        let n = changed.len();
        for (tp, next) in changed {
            self.persisted.insert(tp.clone(), next);
        }
        Ok(n)
    }
}
