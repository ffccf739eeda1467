//! Followers of internal topics, shared by the flows of one connection.
//!
//! A flow that follows an internal topic for its whole life (the checkpoint computer tails its offset
//! syncs, and in an active-active pair the reverse flow's) held a consumer of its own for it: four
//! librdkafka threads on a one-broker cluster (more with more brokers) and a fetch request every half
//! second, per flow, even with nothing written. Here the followers of one connection share an
//! assign-only consumer: each follower is one assigned partition whose records librdkafka keeps in a
//! queue of the partition's own ([`PartitionReader`]), polled by the follower's thread. So no record
//! passes between threads, each follower keeps its own position, one fetch request serves every flow's
//! partitions, and a follower that stops polling holds up only its own partition (librdkafka stops
//! fetching a partition whose queue is full, not the others).
//!
//! A consumer can be assigned a partition only once: a second follower of the same partition (the
//! reverse reader of an active-active pair follows the topic the forward flow follows) gets the next
//! consumer, made when none is free. A consumer goes with its last follower. Reads that end (start-up
//! reads of a topic to its end) keep consumers of their own: they come and go.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rdkafka::consumer::Consumer;
use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::error::KafkaResult;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};

use super::Connection;
use crate::config::ClusterSpec;
use crate::kafka::{self, AssignOnly, AssignOnlyConsumer, KafkaOpError};

/// librdkafka settings of the readers' consumers, where the cluster's own client properties do not set
/// them. librdkafka stops fetching a partition whose local queue holds `queued.min.messages` (100,000
/// by default) and tries again only after `fetch.queue.backoff.ms`, one second by default: a reader
/// that folds 100,000 small records in a fraction of that second then waited out the rest of it, so a
/// backlog of 1,000,000 offset syncs took about ten seconds to read instead of one.
const READER_TUNING: [(&str, &str); 1] = [("fetch.queue.backoff.ms", "10")];

/// The cluster as readers of internal topics connect to it: its client properties plus
/// [`READER_TUNING`] (a property the cluster sets itself wins).
pub fn tuned(cluster: &ClusterSpec) -> ClusterSpec {
    let mut tuned = cluster.clone();
    for (key, value) in READER_TUNING {
        tuned.client.entry(key.to_string()).or_insert_with(|| value.to_string());
    }
    tuned
}

/// One shared consumer and the partitions assigned to it.
struct Shared {
    consumer: Arc<AssignOnlyConsumer>,
    assigned: Vec<(String, i32)>,
}

/// A connection's shared consumers.
#[derive(Default)]
pub(super) struct Readers {
    consumers: Mutex<Vec<Shared>>,
}

impl Readers {
    fn lock(&self) -> MutexGuard<'_, Vec<Shared>> {
        self.consumers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many shared consumers are open (for tests).
    pub(super) fn consumers(&self) -> usize {
        self.lock().len()
    }
}

/// One partition of an internal topic, followed from a position on a connection's shared consumer.
/// Dropping it unassigns the partition (and closes the consumer if it was its last).
pub struct PartitionReader {
    queue: PartitionQueue<AssignOnly>,
    consumer: Arc<AssignOnlyConsumer>,
    connection: Arc<Connection>,
    topic: String,
    partition: i32,
}

impl Connection {
    /// A follower of `topic`'s `partition` from `start`, on one of the connection's shared consumers.
    pub fn partition_reader(
        self: &Arc<Self>,
        topic: &str,
        partition: i32,
        start: Offset,
    ) -> Result<PartitionReader, KafkaOpError> {
        let alias = self.alias().to_string();
        let mut consumers = self.readers.lock();
        let key = (topic.to_string(), partition);
        let index = match consumers.iter().position(|s| !s.assigned.contains(&key)) {
            Some(i) => i,
            None => {
                let consumer = kafka::assign_only_consumer(&tuned(self.cluster()), &"ferry", "internal-reader")?;
                consumers.push(Shared { consumer: Arc::new(consumer), assigned: Vec::new() });
                consumers.len() - 1
            }
        };
        let shared = &mut consumers[index];
        // The partition's own queue first: once it is split off, librdkafka never forwards the
        // partition's records to the consumer's queue, not even when the assignment starts fetching.
        let queue = shared.consumer.split_partition_queue(topic, partition).ok_or_else(|| KafkaOpError::Other {
            cluster: alias.clone(),
            op: format!("follow {topic}-{partition}"),
            reason: "librdkafka has no queue for the partition".into(),
        })?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, start)
            .map_err(|e| KafkaOpError::kafka(&alias, format!("assign {topic}-{partition}"), e))?;
        shared
            .consumer
            .incremental_assign(&tpl)
            .map_err(|e| KafkaOpError::kafka(&alias, format!("assign {topic}-{partition}"), e))?;
        shared.assigned.push(key);
        let consumer = shared.consumer.clone();
        drop(consumers);
        Ok(PartitionReader { queue, consumer, connection: self.clone(), topic: topic.to_string(), partition })
    }

    /// How many shared reader consumers the connection has open.
    pub fn reader_consumers(&self) -> usize {
        self.readers.consumers()
    }
}

impl PartitionReader {
    /// The next record of the partition (or its error), waiting up to `wait` for one.
    pub fn poll(&self, wait: Duration) -> Option<KafkaResult<BorrowedMessage<'_>>> {
        self.serve_consumer_queue();
        self.queue.poll(wait)
    }

    /// The consumer the partition is assigned to: watermarks and positions.
    pub fn consumer(&self) -> &AssignOnlyConsumer {
        &self.consumer
    }

    /// The offset of the next record the reader will return, once it has one.
    pub fn position(&self) -> KafkaResult<Option<i64>> {
        let positions = self.consumer.position()?;
        Ok(positions.find_partition(&self.topic, self.partition).and_then(|p| match p.offset() {
            Offset::Offset(o) => Some(o),
            _ => None,
        }))
    }

    /// Whatever lands in the consumer's own queue (errors of the client and of the unused group; no
    /// records: every partition has its own queue) is served by whichever reader polls next, so it
    /// never piles up.
    fn serve_consumer_queue(&self) {
        while let Some(event) = self.consumer.poll(Duration::ZERO) {
            match event {
                Err(e) if kafka::is_unused_group_refusal(&e) => {}
                Err(e) => tracing::debug!(cluster = %self.connection.alias(), error = %e, "internal-topic reader"),
                Ok(msg) => tracing::warn!(
                    cluster = %self.connection.alias(), topic = msg.topic(), partition = msg.partition(),
                    "a record of an internal topic reached the shared reader's own queue; skipped"
                ),
            }
        }
    }
}

impl Drop for PartitionReader {
    fn drop(&mut self) {
        let mut consumers = self.connection.readers.lock();
        let key = (self.topic.clone(), self.partition);
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&self.topic, self.partition);
        if let Err(e) = self.consumer.incremental_unassign(&tpl) {
            tracing::debug!(topic = %self.topic, partition = self.partition, error = %e, "unassign an internal-topic reader");
        }
        if let Some(i) = consumers.iter().position(|s| Arc::ptr_eq(&s.consumer, &self.consumer)) {
            consumers[i].assigned.retain(|k| *k != key);
            if consumers[i].assigned.is_empty() {
                // The queue and this reader hold the last references: the consumer closes after this.
                consumers.remove(i);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_fetch_without_librdkafkas_one_second_backoff_unless_the_cluster_says_otherwise() {
        let mut cluster = ClusterSpec::for_test("east", &[("client.rack", "r1")]);
        let reader = tuned(&cluster);
        assert_eq!(reader.client.get("fetch.queue.backoff.ms").map(String::as_str), Some("10"));
        assert_eq!(reader.client.get("client.rack").map(String::as_str), Some("r1"), "everything else kept");
        cluster.client.insert("fetch.queue.backoff.ms".into(), "250".into());
        assert_eq!(tuned(&cluster).client.get("fetch.queue.backoff.ms").map(String::as_str), Some("250"));
    }
}
