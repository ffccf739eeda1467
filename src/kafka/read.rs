//! Reading a topic to its end and a partition's watermarks (start-up reads of internal topics), and what
//! every reader of an internal topic does with a record it cannot use ([`skip_internal_record`]).

use super::*;

/// Read `partitions` of `topic` from their start to their current end, calling `f` per record. The
/// end is where the consumer's *position* reaches the end offset: a topic written transactionally ends
/// with a commit marker, a control record that is never returned but that the position moves past.
/// Fails when the topic cannot be read (e.g. not authorised) or stops moving for [`ADMIN_TIMEOUT`].
///
/// A consumer reading `read_committed` (librdkafka's default) is told the partitions' *last stable*
/// offsets as their ends: the read stops before the first record of a transaction still open, and
/// misses what committed after it. [`read_to_end_of`] reads to ends asked of another consumer.
pub fn read_to_end<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    cluster: &str,
    topic: &str,
    partitions: impl IntoIterator<Item = i32>,
    f: impl FnMut(&BorrowedMessage<'_>),
) -> Result<(), KafkaOpError> {
    read_to_end_of(consumer, consumer, cluster, topic, partitions, f)
}

/// [`read_to_end`] up to the ends `ends_from` reports: a `read_uncommitted` consumer's are the high
/// watermarks, so a `read_committed` read goes past transactions open now, waiting (within
/// [`ADMIN_TIMEOUT`] without progress) until they end, and misses nothing committed before it began.
pub fn read_to_end_of<C: ConsumerContext, E: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    ends_from: &BaseConsumer<E>,
    cluster: &str,
    topic: &str,
    partitions: impl IntoIterator<Item = i32>,
    f: impl FnMut(&BorrowedMessage<'_>),
) -> Result<(), KafkaOpError> {
    read_from_to_end(consumer, ends_from, cluster, topic, partitions.into_iter().map(|p| (p, 0)), f).map(|_| ())
}

/// [`read_to_end`] of one partition from offset `from` on (from its start if that is later), for a
/// reader that goes on where an earlier read stopped. Returns where the next read starts: past every
/// record read, and at least at the end this read went to (the last stable offset for a
/// `read_committed` consumer: a transaction open now is read by the next read, once it ended).
pub fn read_partition_from<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    cluster: &str,
    topic: &str,
    partition: i32,
    from: i64,
    f: impl FnMut(&BorrowedMessage<'_>),
) -> Result<i64, KafkaOpError> {
    let next = read_from_to_end(consumer, consumer, cluster, topic, [(partition, from)], f)?;
    Ok(next.get(&partition).copied().unwrap_or(from))
}

/// Reads each `(partition, from)` of `topic` from `from` (or the partition's start, if later) to the end
/// `ends_from` reports; returns, per partition, where a next read would start (see
/// [`read_partition_from`]).
fn read_from_to_end<C: ConsumerContext, E: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    ends_from: &BaseConsumer<E>,
    cluster: &str,
    topic: &str,
    partitions: impl IntoIterator<Item = (i32, i64)>,
    mut f: impl FnMut(&BorrowedMessage<'_>),
) -> Result<HashMap<i32, i64>, KafkaOpError> {
    let mut tpl = TopicPartitionList::new();
    let mut ends = HashMap::new();
    // Where a next read starts: at least the end aimed for (an end below `from` is a topic created
    // again, whose offsets began anew), past each record read.
    let mut next = HashMap::new();
    for (p, from) in partitions {
        let (low, high) = watermarks(ends_from, topic, p)
            .map_err(|e| KafkaOpError::kafka(cluster, format!("read the end offsets of {topic}-{p}"), e))?;
        let start = from.max(low);
        next.insert(p, high);
        if high > start {
            tpl.add_partition_offset(topic, p, Offset::Offset(start))
                .map_err(|e| KafkaOpError::kafka(cluster, "assign", e))?;
            ends.insert(p, high);
        }
    }
    if ends.is_empty() {
        return Ok(next);
    }
    consumer.assign(&tpl).map_err(|e| KafkaOpError::kafka(cluster, format!("assign {topic}"), e))?;
    let mut last_progress = std::time::Instant::now();
    while !ends.is_empty() {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(msg)) => {
                f(&msg);
                if let Some(n) = next.get_mut(&msg.partition()) {
                    *n = (*n).max(msg.offset() + 1);
                }
                if ends.get(&msg.partition()).is_some_and(|end| msg.offset() + 1 >= *end) {
                    ends.remove(&msg.partition());
                }
                last_progress = std::time::Instant::now();
            }
            Some(Err(e)) if is_unused_group_refusal(&e) => {}
            Some(Err(e)) => return Err(KafkaOpError::kafka(cluster, format!("read {topic}"), e)),
            None => {
                let positions =
                    consumer.position().map_err(|e| KafkaOpError::kafka(cluster, format!("read {topic}"), e))?;
                for e in positions.elements_for_topic(topic) {
                    if let Offset::Offset(pos) = e.offset()
                        && ends.get(&e.partition()).is_some_and(|end| pos >= *end)
                    {
                        ends.remove(&e.partition());
                    }
                }
                if !ends.is_empty() && last_progress.elapsed() > ADMIN_TIMEOUT {
                    return Err(KafkaOpError::Other {
                        cluster: cluster.to_string(),
                        op: format!("read {topic}"),
                        reason: format!("no progress for {ADMIN_TIMEOUT:?} before the end of the topic"),
                    });
                }
            }
        }
    }
    let _ = consumer.unassign();
    Ok(next)
}

/// Watermarks of one partition. A topic created moments ago answers "not leader" for a while; that
/// is retried until the admin timeout instead of failing.
pub fn watermarks<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partition: i32,
) -> Result<(i64, i64), KafkaError> {
    let deadline = std::time::Instant::now() + ADMIN_TIMEOUT;
    loop {
        match consumer.fetch_watermarks(topic, partition, ADMIN_TIMEOUT) {
            Err(e) if std::time::Instant::now() < deadline && is_transient(&e) => {
                std::thread::sleep(Duration::from_millis(200))
            }
            other => return other,
        }
    }
}

/// A record of an internal topic (offset syncs, checkpoints, copy progress, control) that its reader
/// cannot use, `what` (e.g. "a checkpoint record") for `why`: the reader skips it and goes on, and the
/// record is named in a warning (topic, partition, offset, why) and counted in
/// `ferry_internal_records_skipped_total{cluster, topic}`: a tool writing garbage into ferry's (and MM2's)
/// topics is the beginning of a bad migration, never to pass in silence. Records that are legitimately
/// someone else's (another flow's, connector's or deployment's) are not for this: their readers pass them
/// over without a word.
pub fn skip_internal_record(
    flow: Option<&str>,
    cluster: &str,
    msg: &rdkafka::message::BorrowedMessage<'_>,
    what: &str,
    why: &dyn std::fmt::Display,
) {
    use rdkafka::message::Message;
    let (topic, partition, offset) = (msg.topic(), msg.partition(), msg.offset());
    match flow {
        Some(flow) => {
            tracing::warn!(flow = %flow, cluster = %cluster, topic = %topic, partition, offset, error = %why, "skipping {what} that ferry cannot read")
        }
        None => {
            tracing::warn!(cluster = %cluster, topic = %topic, partition, offset, error = %why, "skipping {what} that ferry cannot read")
        }
    }
    crate::metrics::METRICS.internal_records_skipped.with_label_values(&[cluster, topic]).inc();
}
