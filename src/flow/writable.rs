//! Which remote partitions take writes yet: the topic synchroniser hands the copier a source partition
//! only once its remote partition has answered a ListOffsets as its leader.
//!
//! A remote topic shows up in the target's metadata, with a leader for every partition, before that
//! broker has created the partitions' logs: a KRaft broker publishes the new metadata first and then
//! creates the logs one by one, refusing writes (NOT_LEADER_OR_FOLLOWER) until each is done. For a
//! topic of thousands of partitions that takes the broker seconds to minutes. A copier started at the
//! metadata would fill its producer with records for every partition, and librdkafka would retry the
//! batches and refresh the topic's metadata over and over meanwhile: measured at 2,000 partitions,
//! 8 s of ferry's CPU in 130 s of waiting (bench/results.md), load on a broker already busy. Asking
//! costs one ListOffsets per [`CHECK_CHUNK`] partitions about every second while some are waiting, and
//! nothing once every partition answered (a partition that answered once is not asked again).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::acks::SourcePartition;
use super::list_offsets::{self, Answer};
use super::messages::Assignment;

/// A remote partition: topic and partition.
pub type RemotePartition = (String, i32);

/// What the topic synchroniser last found and which of its remote partitions were seen taking writes.
#[derive(Debug, Default)]
pub struct Writable {
    /// Remote partitions that answered as their leader's (by remote topic).
    known: HashMap<String, BTreeSet<i32>>,
    /// The last assignment found (every partition whose remote partition exists).
    found: Assignment,
    /// Source partitions of `found` whose remote partition has not answered yet, with that partition.
    waiting: BTreeMap<SourcePartition, RemotePartition>,
    /// What the target said about one of the waiting partitions, last time it was asked.
    reason: Option<String>,
    /// Checks so far: each starts one wave further into the waiting partitions, so that a wave that
    /// never answers (a partition whose leader is away) does not keep the others from being asked.
    turn: usize,
}

impl Writable {
    /// A refresh found `assignment` (`remote` names a source topic's remote topic). Returns the part of
    /// it the copier may copy now.
    pub fn found(&mut self, assignment: Assignment, remote: impl Fn(&str) -> String) -> Assignment {
        let mut remotes: HashMap<&str, String> = HashMap::new();
        self.waiting.clear();
        for (topic, partition) in &assignment.partitions {
            let name = remotes.entry(topic.as_str()).or_insert_with(|| remote(topic));
            if !self.known.get(name.as_str()).is_some_and(|k| k.contains(partition)) {
                self.waiting.insert((topic.clone(), *partition), (name.clone(), *partition));
            }
        }
        // Forget remote topics no longer copied: one created again later is asked about afresh.
        let copied: BTreeSet<&String> = remotes.values().collect();
        self.known.retain(|t, _| copied.contains(t));
        self.found = assignment;
        self.ready()
    }

    /// The remote partitions to ask about, starting `wave` partitions further than the last time.
    pub fn to_check(&mut self, wave: usize) -> Vec<RemotePartition> {
        let mut tps: Vec<RemotePartition> = self.waiting.values().cloned().collect();
        if !tps.is_empty() {
            let start = self.turn.wrapping_mul(wave) % tps.len();
            tps.rotate_left(start);
        }
        self.turn = self.turn.wrapping_add(1);
        tps
    }

    /// Source partitions still waiting.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// What the target last said about a waiting partition (`topic-partition: error`).
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// The broker's answers about [`Writable::to_check`]. Returns the new assignment if partitions
    /// became copyable.
    pub fn answered(&mut self, answers: &HashMap<RemotePartition, Answer>) -> Option<Assignment> {
        let before = self.waiting.len();
        let known = &mut self.known;
        let mut reason = None;
        self.waiting.retain(|_, (topic, partition)| {
            let answer = answers.get(&(topic.clone(), *partition));
            let writable = answer.is_some_and(takes_writes);
            if writable {
                known.entry(topic.clone()).or_default().insert(*partition);
            } else if reason.is_none()
                && let Some(Answer::Refused(e) | Answer::Unanswered(e)) = answer
            {
                reason = Some(format!("{topic}-{partition}: {e}"));
            }
            !writable
        });
        if reason.is_some() {
            self.reason = reason;
        }
        (self.waiting.len() < before).then(|| self.ready())
    }

    fn ready(&self) -> Assignment {
        Assignment {
            partitions: self.found.partitions.iter().filter(|tp| !self.waiting.contains_key(*tp)).cloned().collect(),
            deleted: self.found.deleted.clone(),
        }
    }
}

/// Whether the answer shows the partition taking writes. Only answers that say "not led (yet)" or
/// "no answer in time" hold a partition back; any other refusal (an authorization error, an old
/// broker) lets it through to the copier, which reports what the target does with its records.
pub fn takes_writes(answer: &Answer) -> bool {
    match answer {
        Answer::Offset(_) => true,
        Answer::Refused(e) | Answer::Unanswered(e) => !not_led_yet(e),
    }
}

fn not_led_yet(e: &KafkaError) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        e.rdkafka_error_code(),
        Some(
            C::NotLeaderForPartition
                | C::LeaderNotAvailable
                | C::ReplicaNotAvailable
                | C::UnknownTopicOrPartition
                | C::UnknownPartition
                | C::UnknownTopic
                | C::KafkaStorageError
                | C::OffsetNotAvailable
                | C::FencedLeaderEpoch
                | C::UnknownLeaderEpoch
                | C::RequestTimedOut
                | C::OperationTimedOut
                | C::BrokerTransportFailure
                | C::AllBrokersDown
        )
    )
}

/// Partitions per call of the check. Smaller than [`list_offsets::CHUNK`]: the check repeats every
/// second or so while partitions wait, and a chunk answers only once all of its partitions are led.
const CHECK_CHUNK: usize = 200;

/// Partitions in one wave of calls of [`check`] with `threads` calls at a time.
pub fn wave(threads: usize) -> usize {
    CHECK_CHUNK * threads.max(1)
}

/// Ask the target about `tps`, [`CHECK_CHUNK`] partitions per call, `threads` calls at a time. A chunk
/// with one partition that is not led yet takes the whole `timeout` (librdkafka retries the call until
/// then), so once a wave of calls finds nothing writable the rest waits for the next check: while a
/// broker creates thousands of partitions, a check costs one wave, not one call per chunk.
pub fn check<C: rdkafka::consumer::ConsumerContext>(
    consumer: &rdkafka::consumer::BaseConsumer<C>,
    tps: &[RemotePartition],
    timeout: std::time::Duration,
    threads: usize,
) -> HashMap<RemotePartition, Answer> {
    let mut answers = HashMap::with_capacity(tps.len());
    for wave in tps.chunks(wave(threads)) {
        let answered = list_offsets::list_offsets_concurrently(
            consumer,
            wave,
            rdkafka::Offset::End,
            timeout,
            CHECK_CHUNK,
            threads,
        );
        let any = answered.values().any(takes_writes);
        answers.extend(answered);
        if !any {
            break;
        }
    }
    answers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(tps: &[(&str, i32)]) -> Assignment {
        Assignment { partitions: tps.iter().map(|(t, p)| (t.to_string(), *p)).collect(), deleted: BTreeSet::new() }
    }

    fn remote(t: &str) -> String {
        format!("src.{t}")
    }

    fn not_led() -> Answer {
        Answer::Refused(KafkaError::OffsetFetch(RDKafkaErrorCode::NotLeaderForPartition))
    }

    #[test]
    fn partitions_are_copied_once_their_remote_partition_answers_as_leader() {
        let mut w = Writable::default();
        let ready = w.found(assignment(&[("a", 0), ("a", 1), ("b", 0)]), remote);
        assert!(ready.partitions.is_empty(), "nothing answered yet");
        assert_eq!(w.to_check(2).len(), 3);
        let answers: HashMap<RemotePartition, Answer> = [
            (("src.a".to_string(), 0), Answer::Offset(0)),
            (("src.a".to_string(), 1), not_led()),
            (
                ("src.b".to_string(), 0),
                Answer::Unanswered(KafkaError::OffsetFetch(RDKafkaErrorCode::OperationTimedOut)),
            ),
        ]
        .into_iter()
        .collect();
        let ready = w.answered(&answers).expect("a-0 became copyable");
        assert_eq!(ready.partitions, [("a".to_string(), 0)].into_iter().collect());
        assert_eq!(w.waiting(), 2);
        assert!(w.reason().is_some_and(|r| r.starts_with("src.a-1: ")), "{:?}", w.reason());
        assert!(w.answered(&answers).is_none(), "nothing new");
        let later: HashMap<RemotePartition, Answer> =
            [(("src.a".to_string(), 1), Answer::Offset(5)), (("src.b".to_string(), 0), Answer::Offset(0))]
                .into_iter()
                .collect();
        assert_eq!(w.answered(&later).expect("the rest").partitions.len(), 3);
        assert_eq!(w.waiting(), 0);
        // The next refresh asks nothing about partitions that answered once, only about new ones.
        let ready = w.found(assignment(&[("a", 0), ("a", 1), ("a", 2), ("b", 0)]), remote);
        assert_eq!(ready.partitions.len(), 3);
        assert_eq!(w.to_check(2), [("src.a".to_string(), 2)]);
    }

    #[test]
    fn a_remote_topic_no_longer_copied_is_asked_about_again_when_it_comes_back() {
        let mut w = Writable::default();
        w.found(assignment(&[("a", 0)]), remote);
        w.answered(&[(("src.a".to_string(), 0), Answer::Offset(0))].into_iter().collect());
        assert!(w.found(assignment(&[]), remote).partitions.is_empty());
        assert!(w.found(assignment(&[("a", 0)]), remote).partitions.is_empty(), "asked again (re-created?)");
    }

    #[test]
    fn each_check_starts_one_wave_further() {
        let mut w = Writable::default();
        w.found(assignment(&[("a", 0), ("a", 1), ("a", 2), ("a", 3), ("a", 4)]), remote);
        let first = |v: Vec<RemotePartition>| v[0].1;
        assert_eq!(first(w.to_check(2)), 0);
        assert_eq!(first(w.to_check(2)), 2);
        assert_eq!(first(w.to_check(2)), 4);
        let all = w.to_check(2);
        assert_eq!(all.len(), 5, "every waiting partition, rotated");
        assert_eq!(first(all), 1);
    }

    #[test]
    fn only_leadership_and_timeouts_hold_a_partition_back() {
        assert!(!takes_writes(&not_led()));
        assert!(!takes_writes(&Answer::Unanswered(KafkaError::OffsetFetch(RDKafkaErrorCode::OperationTimedOut))));
        assert!(!takes_writes(&Answer::Refused(KafkaError::OffsetFetch(RDKafkaErrorCode::LeaderNotAvailable))));
        assert!(takes_writes(&Answer::Offset(0)));
        // Whatever else the target says, the copier tries and reports what happens to its records.
        assert!(takes_writes(&Answer::Refused(KafkaError::OffsetFetch(RDKafkaErrorCode::TopicAuthorizationFailed))));
        assert!(takes_writes(&Answer::Unanswered(KafkaError::OffsetFetch(RDKafkaErrorCode::UnsupportedVersion))));
    }
}
