//! Calls on a consumer or a producer rather than an admin client: a consumer's positions of chosen
//! partitions, and committing any group's offsets inside a producer's transaction.

use std::ffi::c_int;
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::{Offset, TopicPartitionList};

use super::ffi::*;
use super::types::*;

/// The consumer's application position of each of `partitions`: the offset after the last record it
/// handed over or the last transaction marker it passed (a marker is never handed over, but the position
/// moves past it). `None` for a partition without one: not fetched from since it was assigned or sought,
/// or not assigned. rdkafka's `Consumer::position` answers for the whole assignment, a search over the
/// client's topics per partition; this asks about `partitions` only.
pub fn consumer_positions<C: rdkafka::consumer::ConsumerContext>(
    consumer: &rdkafka::consumer::BaseConsumer<C>,
    partitions: &[(String, i32)],
) -> Vec<(String, i32, Option<i64>)> {
    use rdkafka::consumer::Consumer as _;
    let mut tpl = TopicPartitionList::with_capacity(partitions.len());
    for (topic, partition) in partitions {
        tpl.add_partition(topic, *partition);
    }
    // SAFETY: the consumer's live handle (borrowed for the call) and a valid list we own; the call only
    // writes each element's offset and error, and returns a plain code (always "no error").
    unsafe { rd_kafka_position(consumer.client().native_ptr(), tpl.ptr()) };
    tpl.elements()
        .iter()
        .map(|e| {
            let at = match e.offset() {
                Offset::Offset(o) if o >= 0 => Some(o),
                _ => None,
            };
            (e.topic().to_string(), e.partition(), at)
        })
        .collect()
}

/// Commits `offsets` of consumer group `group` inside the producer's open transaction
/// (AddOffsetsToTxn + TxnOffsetCommit, as Kafka Connect's exactly-once source tasks and Streams do):
/// they become the group's committed offsets only when the transaction commits, and never once a
/// newer producer with the same transactional id fenced this one. The group is named by id only
/// (generation -1, no member id), as a commit from outside the group. Blocks up to `timeout`.
///
/// rdkafka 0.39 takes the group metadata only from a consumer of that group; this builds it from the id.
pub fn send_offsets_to_transaction<C: rdkafka::producer::ProducerContext>(
    producer: &rdkafka::producer::BaseProducer<C>,
    group: &str,
    offsets: &[CommittedOffset],
    timeout: Duration,
) -> Result<(), TxnError> {
    const OP: &str = "SendOffsetsToTransaction";
    let plain = |error| TxnError { error, fatal: false, requires_abort: false };
    if offsets.is_empty() {
        return Ok(());
    }
    let group_c = c_string(OP, "group id", group).map_err(plain)?;
    let mut tpl = TopicPartitionList::with_capacity(offsets.len());
    for o in offsets {
        c_string(OP, "topic name", &o.topic).map_err(plain)?;
        let subject = format!("{}-{}", o.topic, o.partition);
        if o.offset < 0 {
            let why = format!("offset {} is not a valid offset to commit", o.offset);
            return Err(plain(AdminError::about(OP, ERR_INVALID_ARG, &subject, Some(why))));
        }
        let mut elem = tpl.add_partition(&o.topic, o.partition);
        elem.set_offset(Offset::Offset(o.offset))
            .map_err(|e| plain(AdminError::about(OP, ERR_INVALID_ARG, &subject, Some(e.to_string()))))?;
        elem.set_metadata(&o.metadata);
    }
    use rdkafka::producer::Producer as _;
    let rk = producer.client().native_ptr();
    let timeout_ms = c_int::try_from(timeout.as_millis()).unwrap_or(c_int::MAX);
    // SAFETY: the group id is a valid C string (copied by librdkafka); the metadata object is ours and
    // destroyed below, after the call that only reads it.
    let cgm = unsafe { rd::rd_kafka_consumer_group_metadata_new(group_c.as_ptr()) };
    if cgm.is_null() {
        let why = Some("could not create the group metadata".to_string());
        return Err(plain(AdminError::about(OP, ERR_FAIL, &format!("group {group}"), why)));
    }
    // SAFETY: `rk` is the producer's live handle (borrowed for the call), `tpl` a valid list and
    // `cgm` valid metadata; the call blocks until done and returns an error object we own (or NULL).
    let err = ErrorObject(unsafe { rd::rd_kafka_send_offsets_to_transaction(rk, tpl.ptr(), cgm, timeout_ms) });
    // SAFETY: created above, destroyed once.
    unsafe { rd::rd_kafka_consumer_group_metadata_destroy(cgm) };
    // SAFETY: `err.0` is NULL or the valid error object returned above, alive until `err` drops.
    let Some(error) = (unsafe { AdminError::from_error_object(OP, err.0) }) else { return Ok(()) };
    // SAFETY: as above; the accessors only read the object.
    let (fatal, requires_abort) =
        unsafe { (rd::rd_kafka_error_is_fatal(err.0) != 0, rd::rd_kafka_error_txn_requires_abort(err.0) != 0) };
    Err(TxnError {
        error: AdminError { message: format!("group {group}: {}", error.message), ..error },
        fatal,
        requires_abort,
    })
}

/// Send everything `producer` has queued at once (linger ignored) and wait until every record is
/// reported, at most `timeout`. True if none is left. librdkafka's own flush, blocking: rdkafka's
/// `flush` calls it without a timeout and then waits up to 100 ms for an event on the producer's queue,
/// which a `ThreadedProducer`'s polling thread takes first, so each flush with anything in flight
/// lasted at least 100 ms (every exactly-once commit did: bench/results.md, 2026-12-05).
pub fn flush<C: rdkafka::producer::ProducerContext>(
    producer: &rdkafka::producer::ThreadedProducer<C>,
    timeout: Duration,
) -> bool {
    use rdkafka::producer::Producer as _;
    let timeout_ms = c_int::try_from(timeout.as_millis()).unwrap_or(c_int::MAX);
    // SAFETY: the producer's live handle, borrowed for the call; librdkafka's flush only waits for the
    // producer's message count (its polling thread serves the reports meanwhile).
    let err = unsafe { rd::rd_kafka_flush(producer.client().native_ptr(), timeout_ms) };
    err == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
}
