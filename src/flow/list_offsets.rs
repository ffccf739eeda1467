//! ListOffsets over many partitions at a cost linear in their number.
//!
//! librdkafka's `rd_kafka_offsets_for_times` (rdkafka's `offsets_for_times`) matches each answered
//! partition to the asked list with a linear search (`rd_kafka_topic_partition_list_update`), so one
//! call over `n` partitions costs `n²` topic-name comparisons: 4 million at 2,000 partitions, 100
//! million (about a second of CPU) at 10,000. `rd_kafka_seek_partitions` has the same shape. Asking in
//! calls of at most [`CHUNK`] partitions keeps the cost at `n · CHUNK` comparisons for the price of
//! `n / CHUNK` round trips.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use super::acks::SourcePartition;

/// Partitions per librdkafka call whose answer is matched by a linear search: small enough that the
/// `CHUNK²` comparisons of one call are negligible (250,000: a few milliseconds), large enough that 10,000
/// partitions need only 20 round trips.
pub const CHUNK: usize = 500;

/// The answer for one partition.
#[derive(Clone, Debug)]
pub enum Answer {
    Offset(i64),
    /// The broker answered with an error for this partition (e.g. not its leader yet).
    Refused(KafkaError),
    /// The call that asked for it failed as a whole (timeout, cluster away, unknown partition in the
    /// client's metadata).
    Unanswered(KafkaError),
}

/// The offsets of `tps` at `at` (`Offset::Beginning`: the log start, `Offset::End`: the high watermark
/// or last stable offset, by the consumer's isolation level), in calls of at most [`CHUNK`] partitions.
/// A call that fails leaves only its own chunk unanswered; `timeout` bounds each call.
pub fn list_offsets<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    tps: &[SourcePartition],
    at: Offset,
    timeout: Duration,
) -> HashMap<SourcePartition, Answer> {
    let mut out = HashMap::with_capacity(tps.len());
    for chunk in tps.chunks(CHUNK) {
        match list_chunk(consumer, chunk, at, timeout) {
            Ok(answered) => out.extend(answered),
            Err(e) => out.extend(chunk.iter().map(|tp| (tp.clone(), Answer::Unanswered(e.clone())))),
        }
    }
    out
}

/// [`list_offsets`] in calls of `chunk` partitions, up to `threads` calls at a time: for questions whose
/// calls may each take the whole `timeout` (librdkafka retries a call while one of its partitions has no
/// leader, and looks its partitions' leaders up with another quadratic search).
pub fn list_offsets_concurrently<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    tps: &[SourcePartition],
    at: Offset,
    timeout: Duration,
    chunk: usize,
    threads: usize,
) -> HashMap<SourcePartition, Answer> {
    let chunks: Vec<&[SourcePartition]> = tps.chunks(chunk.max(1)).collect();
    let threads = threads.clamp(1, chunks.len().max(1));

    let next = AtomicUsize::new(0);
    let out = Mutex::new(HashMap::with_capacity(tps.len()));
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                while let Some(chunk) = chunks.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let answered = match list_chunk(consumer, chunk, at, timeout) {
                        Ok(answered) => answered,
                        Err(e) => chunk.iter().map(|tp| (tp.clone(), Answer::Unanswered(e.clone()))).collect(),
                    };
                    out.lock().unwrap_or_else(|p| p.into_inner()).extend(answered);
                }
            });
        }
    });
    out.into_inner().unwrap_or_else(|p| p.into_inner())
}

fn list_chunk<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    chunk: &[SourcePartition],
    at: Offset,
    timeout: Duration,
) -> Result<Vec<(SourcePartition, Answer)>, KafkaError> {
    let mut tpl = TopicPartitionList::with_capacity(chunk.len());
    for (t, p) in chunk {
        tpl.add_partition_offset(t, *p, at)?;
    }
    let answered = consumer.offsets_for_times(tpl, timeout)?;
    Ok(answered
        .elements()
        .iter()
        .map(|e| {
            let offset = match (e.error(), e.offset()) {
                (Err(err), _) => Answer::Refused(err),
                (Ok(()), Offset::Offset(o)) => Answer::Offset(o),
                // A logical offset in an answer means the broker had none to give.
                (Ok(()), _) => Answer::Refused(KafkaError::OffsetFetch(RDKafkaErrorCode::NoOffset)),
            };
            ((e.topic().to_string(), e.partition()), offset)
        })
        .collect())
}
