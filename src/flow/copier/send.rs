//! Sending one record: counted in flight only once the producer took it (a panic between the count and
//! the send uncounts it), and the send's outcome as the copy loop acts on it.

use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Message, OwnedHeaders};

use crate::clients::RecordLane;
use crate::clients::records::Record;
use crate::failpoints;
use crate::flow::acks::PartitionAck;
use crate::flow::messages::Assignment;
use crate::flow::worker::{Control, Signal};

/// A record counted in flight in its partition's slot until it is handed to the producer: dropped
/// before that (a stop, a panic that unwinds through the send), it is uncounted, so that no count
/// outlives the lifetime that took it.
pub(super) struct InFlight<'a>(Option<&'a PartitionAck>);

impl<'a> InFlight<'a> {
    pub(super) fn count(ack: &'a PartitionAck) -> Self {
        ack.sent();
        Self(Some(ack))
    }

    /// The producer took the record (its report settles the count), or its refusal settles it.
    pub(super) fn handed_over(mut self) {
        self.0 = None;
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(ack) = self.0 {
            ack.unsent();
        }
    }
}

/// The outcome of handing one record to the producer.
pub(super) enum Sent {
    Ok,
    /// A stop arrived while the producer queue was full (the target is slow or away): not sent.
    Stop(Instant),
    /// The producer refused the record outright (e.g. larger than its `message.max.bytes`).
    Refused(Option<RDKafkaErrorCode>, String),
}

/// Produce one source record to its remote topic, same partition. Waits while the producer queue is
/// full (backpressure on the consumer), but keeps listening for a stop; an assignment that arrives
/// meanwhile is kept in `pending` for the loop.
pub(super) fn send(
    lane: &mut RecordLane,
    control: &Control<Assignment>,
    pending: &mut Option<Assignment>,
    remote: &str,
    msg: &BorrowedMessage<'_>,
    headers: Option<OwnedHeaders>,
    translated: &crate::schemas::Translated,
) -> Sent {
    if let Err(e) = failpoints::check(failpoints::COPIER_DELIVER) {
        return Sent::Refused(None, e);
    }
    let mut record: Record<'_> = lane.record(remote, msg.offset()).partition(msg.partition());
    // Translated bytes (schema IDs of the target's registry) in place of the source's.
    if let Some(key) = translated.key.as_deref().or(msg.key()) {
        record = record.key(key);
    }
    if let Some(payload) = translated.value.as_deref().or(msg.payload()) {
        record = record.payload(payload);
    }
    if let Some(ts) = msg.timestamp().to_millis().filter(|t| *t >= 0) {
        record = record.timestamp(ts);
    }
    if let Some(headers) = headers {
        record = record.headers(headers);
    }
    loop {
        match lane.send(record) {
            Ok(()) => return Sent::Ok,
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                record = back;
                match control.next_within(Duration::from_millis(5)) {
                    Some(Signal::Stop { deadline }) => return Sent::Stop(deadline),
                    Some(Signal::Msg(a)) => *pending = Some(a),
                    None => {}
                }
            }
            Err((e, _)) => return Sent::Refused(e.rdkafka_error_code(), e.to_string()),
        }
    }
}

/// A warning that repeats at most once per `every`, with the number of suppressed repeats.
pub(super) struct RateLimitedLog {
    every: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl RateLimitedLog {
    pub(super) fn new(every: Duration) -> Self {
        Self { every, last: None, suppressed: 0 }
    }

    pub(super) fn warn(&mut self, flow: &str, e: &KafkaError) {
        if self.last.is_some_and(|t| t.elapsed() < self.every) {
            self.suppressed += 1;
            return;
        }
        tracing::warn!(flow, error = %e, suppressed = self.suppressed, "source consumer error");
        self.last = Some(Instant::now());
        self.suppressed = 0;
    }
}
