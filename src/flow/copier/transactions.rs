//! Exactly-once delivery (`delivery = "exactly_once"`): the copier's records and the progress that
//! covers them are committed in one transaction on the target, so a `read_committed` reader sees every
//! source record once whatever happens to the node.
//!
//! **The producers.** Two transactional producers per node and flow, used in turn: one transaction on
//! the first, the next on the second, and so on. Their ids are `<deployment>.<flow>.copier.<node id>`
//! ([`transactional_id`]) and the same with `~1` ([`sibling`]); progress records name the node by the
//! first, and fencing a node fences both. Why two: the coordinator writes a committed transaction's
//! markers after the commit returns, and the same producer's next transaction is refused
//! (`CONCURRENT_TRANSACTIONS`, retried every 20 ms) until they are written; the other producer begins at
//! once. Transactions never overlap: one commits (every record acknowledged) before the next begins, so
//! each partition's records stay in order across the two. Their `init_transactions` at the start of
//! every copier lifetime fences the previous lifetime of the same node (a `kill -9`, a crash, a
//! restarted copier) and aborts whatever it left open, before anything is read.
//!
//! **A transaction** opens with the first record after a commit and holds records of every partition
//! the node copies. It is committed after `transaction_interval_ms`, once it holds
//! `transaction_max_bytes` of records, before a pause is confirmed, before partitions are handed over
//! and when the copier stops. A commit writes one progress record per partition that moved (MM2's
//! Connect-offsets format, in the same transaction) at the position after the partition's last record
//! in the transaction (acknowledged or not: records and progress commit together or not at all), then
//! commits, which sends what is queued and waits for every acknowledgement; only then are the positions
//! persisted and the records' offset syncs let go to the emitter. A commit never outlives its deadline
//! (a stop's). A refused record aborts the transaction and holds only its partition (the copier's
//! `refused_in_transaction`); anything else that fails (a commit that errors or times out, a fence)
//! aborts it and ends the copier lifetime: its successor resumes from the committed progress.
//!
//! **Handing partitions between nodes** without fencing the whole flow: every exactly-once progress
//! record names its writer (`ferry.writer`) and its ownership epoch, and the record written when a node
//! lets a partition go cleanly (its transaction with the partition's last records committed before the
//! partition is released to the group) also says `ferry.released`. A node given partitions commits an
//! *intent* for each first (`progress::intent_connector`), reads their records uncommitted and fences
//! every writer of its deployment named after the partition's last release and before its intent
//! (`init_transactions` with that id, which aborts its open transaction and makes every later commit of
//! it fail), reads the committed progress, and claims the partitions (a progress record naming itself,
//! one epoch above the log's highest, committed) before it copies a record of them. A node that begins
//! taking them later sees the intent and fences this one. So at any time at most one producer may write a
//! partition's records, no claim based on an outdated read ever commits after a newer owner's records,
//! and a live node that handed partitions over cleanly is never fenced.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus::{Histogram, IntCounter};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::types::RDKafkaErrorCode;

use super::delivery::Shared;
use crate::clients::RecordLane;
use crate::config::FlowPlan;
use crate::flow::Identity;
use crate::flow::acks::{AckTable, PartitionAck, SourcePartition};
use crate::flow::progress::{Entry, ProgressWriter};
use crate::kafka;
use crate::metrics::METRICS;

/// How long a commit (records acknowledged, progress written, commit returned) may take while the copier
/// runs (a stop's deadline cuts it short).
pub const COMMIT_TIMEOUT: Duration = Duration::from_secs(60);
/// A commit waits in slices this long, looking for a stop between them: a commit that times out is
/// asked again, as librdkafka allows, until the deadline.
const COMMIT_SLICE: Duration = Duration::from_secs(1);

/// The least time a transaction call is made with: librdkafka's calls with none left (a deadline just
/// passed) wait without bound for a coordinator that is away.
const MIN_CALL: Duration = Duration::from_millis(50);

/// The copier's transactional id on the target: one per deployment, flow and node.
pub fn transactional_id(identity: &Identity, plan: &FlowPlan) -> String {
    format!("{}{}", writers_prefix(identity, plan), identity.node_id)
}

/// The id of a node's second producer: its writer id (the first's) and `~1`. Node ids cannot hold
/// `~` ([`crate::config::NODE_ID_RESERVED`]), so no node's first id is another's second.
pub fn sibling(writer: &str) -> String {
    format!("{writer}{}1", crate::config::NODE_ID_RESERVED)
}

/// What every writer of the flow's progress in this deployment is named with (the transactional ids of
/// its nodes). Another deployment copying the same source partitions (the source's `heartbeats`, in a
/// test bed of many deployments) writes the same progress keys: it is never fenced, nor waited for.
pub fn writers_prefix(identity: &Identity, plan: &FlowPlan) -> String {
    format!("{}.{}.copier.", identity.deployment, plan.id)
}

/// In the error of a copier whose transactions another producer fenced.
pub const FENCED: &str = "fenced: another copier took this node's partitions over";

/// A transaction error, named: not authorised (the resource and the right), fenced, or the
/// operation's error.
fn named(plan: &FlowPlan, id: &str, what: &str, e: &KafkaError) -> String {
    if let Some(code) = kafka::authorization_error(e) {
        let target = &plan.target.alias;
        return match code {
            "TOPIC_AUTHORIZATION_FAILED" => kafka::not_authorized(
                &format!("a topic of the transaction (the remote topics or {})", plan.settings.mm2_offsets_topic),
                target,
                "Write",
                code,
            ),
            "CLUSTER_AUTHORIZATION_FAILED" => kafka::not_authorized("the cluster", target, "IdempotentWrite", code),
            _ => kafka::not_authorized(&format!("transactional id {id}"), target, "Write", code),
        };
    }
    match e.rdkafka_error_code() {
        Some(RDKafkaErrorCode::ProducerFenced | RDKafkaErrorCode::InvalidProducerEpoch | RDKafkaErrorCode::Fenced) => {
            format!("{FENCED} ({id}): {e}")
        }
        _ => format!("cluster `{}`: {what} (transactional id {id}): {e}", plan.target.alias),
    }
}

/// The copier's transactions: what is open, and the counts of what was committed.
pub struct Transactions {
    /// The node's writer id (its first producer's transactional id), named in progress records.
    id: String,
    /// The transactional ids of the copy loop's current lane and of `spare`, in that order.
    ids: [String; 2],
    /// The producer that takes the next transaction: swapped with the copy loop's lane at each commit.
    spare: Option<RecordLane>,
    flow: String,
    interval: Duration,
    max_bytes: usize,
    /// When the open transaction began (`None`: none is open).
    opened: Option<Instant>,
    /// Bytes of records in the open transaction.
    bytes: usize,
    /// Partitions to claim (no record of theirs may be sent before a commit names this writer) or
    /// release (handed over) in the next commit, with `true` for a release.
    marks: Vec<(Arc<PartitionAck>, bool)>,
    /// Partitions with records in the open transaction.
    touched: Vec<Arc<PartitionAck>>,
    /// Partitions this writer is taking: an intent for each goes into the next commit.
    intents: Vec<Arc<PartitionAck>>,
    committed: IntCounter,
    aborted: IntCounter,
    commit_latency: Histogram,
}

impl Transactions {
    pub fn new(plan: &FlowPlan, identity: &Identity) -> Self {
        let flow = plan.id.to_string();
        let id = transactional_id(identity, plan);
        Self {
            ids: [id.clone(), sibling(&id)],
            spare: None,
            id,
            interval: plan.settings.transaction_interval,
            max_bytes: plan.settings.transaction_max_bytes,
            opened: None,
            bytes: 0,
            marks: Vec::new(),
            touched: Vec::new(),
            intents: Vec::new(),
            committed: METRICS.transactions.with_label_values(&[&flow, "committed"]),
            aborted: METRICS.transactions.with_label_values(&[&flow, "aborted"]),
            commit_latency: METRICS.transaction_commit.with_label_values(&[&flow]),
            flow,
        }
    }

    /// The transactional ids of the two producers: the lane the copy loop starts with, then the spare.
    pub fn ids(&self) -> &[String; 2] {
        &self.ids
    }

    /// Fence every earlier producer with this node's ids and abort what they left open (both producers
    /// at once); `spare` takes the second transaction.
    pub fn init(&mut self, plan: &FlowPlan, lane: &RecordLane, spare: RecordLane) -> Result<(), String> {
        both([(lane, &self.ids[0]), (&spare, &self.ids[1])], |(lane, id)| {
            lane.producer()
                .init_transactions(kafka::ADMIN_TIMEOUT)
                .map_err(|e| named(plan, id, "initialise the copier's transactions", &e))
        })?;
        self.spare = Some(spare);
        Ok(())
    }

    /// The transactional id of the lane the copy loop holds now (for errors).
    fn current(&self) -> &str {
        &self.ids[0]
    }

    /// Open a transaction unless one is open: called before each record is sent.
    pub fn ensure_open(&mut self, plan: &FlowPlan, lane: &RecordLane, shared: &Shared) -> Result<(), String> {
        if self.opened.is_some() {
            return Ok(());
        }
        shared.transaction_opened();
        lane.producer().begin_transaction().map_err(|e| named(plan, self.current(), "begin a transaction", &e))?;
        self.opened = Some(Instant::now());
        self.bytes = 0;
        Ok(())
    }

    pub fn is_open(&self) -> bool {
        self.opened.is_some()
    }

    /// A record of `bytes` went into the open transaction.
    pub fn added(&mut self, bytes: usize) {
        self.bytes += bytes;
    }

    /// The record of `slot` at `upstream` went into the open transaction (one atomic swap per record).
    pub fn sent(&mut self, slot: &Arc<PartitionAck>, upstream: i64) {
        if slot.sent_in_transaction(upstream) {
            self.touched.push(slot.clone());
        }
    }

    /// The open transaction is due for a commit (its interval is over, or it is full).
    pub fn due(&self, now: Instant) -> bool {
        self.opened.is_some_and(|t| now.duration_since(t) >= self.interval) || self.bytes >= self.max_bytes
    }

    /// Name `slots` in the next commit as partitions this writer is taking (intents: see the module docs).
    pub fn intend(&mut self, slots: impl IntoIterator<Item = Arc<PartitionAck>>) {
        self.intents.extend(slots);
    }

    /// Name `slots` in the next commit: claimed by this writer, or released by it.
    pub fn mark(&mut self, slots: impl IntoIterator<Item = Arc<PartitionAck>>, released: bool) {
        self.marks.extend(slots.into_iter().map(|s| (s, released)));
    }

    /// Commit: write the progress of every partition that moved (those with records in the transaction
    /// at the position after their last one, acknowledged or not: the records and the progress commit
    /// together or not at all), of the claims and releases marked, and the intents; commit (which sends
    /// what is queued at once and waits for every acknowledgement); then count the positions as
    /// persisted and publish the records' offset syncs. Never past `deadline()`, asked again while it
    /// waits (a stop that arrives meanwhile brings it forward): what cannot be written or committed by
    /// then is an error. An error leaves the transaction for [`Self::abort`].
    #[allow(clippy::too_many_arguments)] // the copier's parts a commit touches, each separate
    pub fn commit(
        &mut self,
        plan: &FlowPlan,
        lane: &mut RecordLane,
        progress: &mut ProgressWriter,
        acks: &AckTable,
        shared: &Shared,
        owned: &std::collections::BTreeSet<SourcePartition>,
        deadline: &mut dyn FnMut() -> Instant,
    ) -> Result<(), String> {
        if self.opened.is_none() && self.marks.is_empty() && self.intents.is_empty() && !acks.any_dirty() {
            return Ok(());
        }
        let started = Instant::now();
        self.ensure_open(plan, lane, shared)?;
        // Every partition that moved, once, marked ones with their mark.
        let mut entries: Vec<Entry> = Vec::new();
        let mut seen: HashMap<SourcePartition, usize> = HashMap::new();
        // The touched partitions stay listed until the commit succeeds: an abort rolls them back.
        for slot in &self.touched {
            let next = slot.transaction_position();
            seen.insert((slot.topic.to_string(), slot.partition), entries.len());
            entries.push(Entry::Position(slot.clone(), next, false));
        }
        for slot in acks.take_dirty() {
            slot.take_dirty();
            // Only this lifetime's partitions: a slot another node owns now keeps what it committed.
            let tp = (slot.topic.to_string(), slot.partition);
            if !owned.contains(&tp) || seen.contains_key(&tp) {
                continue;
            }
            seen.insert(tp, entries.len());
            let next = slot.next();
            entries.push(Entry::Position(slot, next, false));
        }
        for (slot, released) in std::mem::take(&mut self.marks) {
            match seen.get(&(slot.topic.to_string(), slot.partition)) {
                Some(i) => {
                    if let Entry::Position(_, _, r) = &mut entries[*i] {
                        *r |= released;
                    }
                }
                None => {
                    seen.insert((slot.topic.to_string(), slot.partition), entries.len());
                    let next = slot.next();
                    entries.push(Entry::Position(slot, next, released));
                }
            }
        }
        entries.extend(std::mem::take(&mut self.intents).into_iter().map(Entry::Intent));
        let written = progress.write_in_transaction(lane, &entries, &self.id, deadline)?;
        // The test freezes the node with its progress records in the log, their transaction open.
        crate::failpoints::hold_after(crate::failpoints::COPIER_COMMIT, || {
            let _ = lane.producer().flush(Duration::from_secs(10));
        });
        // A commit that timed out is asked again, as librdkafka asks (an abort would not be taken). One
        // whose wait for the acknowledgements timed out (rdkafka's `commit_transaction` flushes first and
        // returns that as a flush error) is not: it is aborted, and the lifetime ends. Asking again kept
        // records and progress queued while a target shut down, and a progress record that reached it
        // outside the aborted transaction was committed by the next lifetime's (see the known defect in
        // docs/guarantees.md).
        loop {
            let left = deadline().saturating_duration_since(Instant::now());
            if left < MIN_CALL {
                return Err(format!(
                    "cluster `{}`: commit a transaction (transactional id {}): not committed by the deadline",
                    plan.target.alias,
                    self.current()
                ));
            }
            match commit_flushed(lane, left.min(COMMIT_SLICE)) {
                Err(KafkaError::Transaction(e)) if e.is_retriable() => {}
                other => {
                    other.map_err(|e| named(plan, self.current(), "commit a transaction", &e))?;
                    break;
                }
            }
        }
        for slot in std::mem::take(&mut self.touched) {
            slot.take_transaction();
        }
        self.opened = None;
        self.bytes = 0;
        progress.committed(&written);
        shared.transaction_committed();
        self.committed.inc();
        self.commit_latency.observe(started.elapsed().as_secs_f64());
        METRICS.transaction_committed(&self.flow);
        // The next transaction goes to the other producer: this one's markers are still being written.
        if let Some(spare) = self.spare.as_mut() {
            std::mem::swap(lane, spare);
            self.ids.swap(0, 1);
        }
        Ok(())
    }

    /// Abort the open transaction (best effort: a fenced or failed producer aborts nothing, and the
    /// coordinator aborts what it left within `transaction.timeout.ms`, or the next owner's fence does).
    /// Returns the partitions that had records in it.
    pub fn abort(
        &mut self,
        lane: Option<&RecordLane>,
        shared: &Shared,
        why: &str,
        deadline: Instant,
    ) -> Vec<Arc<PartitionAck>> {
        self.marks.clear();
        self.intents.clear();
        let touched = std::mem::take(&mut self.touched);
        for slot in &touched {
            slot.take_transaction();
        }
        shared.transaction_aborted();
        if self.opened.take().is_none() {
            return touched;
        }
        self.aborted.inc();
        tracing::warn!(flow = %self.flow, transactional_id = %self.current(), reason = why, "aborting the copier's transaction; copying resumes from the last committed progress");
        let left = kafka::ADMIN_TIMEOUT.min(deadline.saturating_duration_since(Instant::now()));
        // librdkafka's abort with no time left does not return while the coordinator is away.
        if left < MIN_CALL {
            tracing::warn!(flow = %self.flow, "no time left to abort the transaction; the coordinator aborts it when it times out, or this node's next lifetime does");
        } else if let Some(lane) = lane
            && let Err(e) = lane.producer().abort_transaction(left)
        {
            tracing::warn!(flow = %self.flow, error = %e, "the transaction could not be aborted; the coordinator aborts it when it times out");
        }
        touched
    }

    /// Claims, releases or intents wait for the next commit.
    pub fn has_marks(&self) -> bool {
        !self.marks.is_empty() || !self.intents.is_empty()
    }
}

impl Transactions {
    /// After an abort: release `slots` at their committed positions, in a transaction of their own.
    pub fn release_committed(
        &mut self,
        plan: &FlowPlan,
        lane: &mut RecordLane,
        progress: &mut ProgressWriter,
        shared: &Shared,
        slots: &[Arc<PartitionAck>],
        deadline: Instant,
    ) -> Result<(), String> {
        if deadline.saturating_duration_since(Instant::now()) < MIN_CALL {
            return Err("no time left before the deadline".to_string());
        }
        self.ensure_open(plan, lane, shared)?;
        let entries: Vec<Entry> = slots.iter().map(|s| Entry::Position(s.clone(), s.persisted(), true)).collect();
        let outcome = progress.write_in_transaction(lane, &entries, &self.id, &mut || deadline).and_then(|_| {
            let left = COMMIT_TIMEOUT.min(deadline.saturating_duration_since(Instant::now()));
            commit_flushed(lane, left).map_err(|e| named(plan, self.current(), "release partitions", &e))
        });
        self.opened = None;
        if outcome.is_err() {
            let left = kafka::ADMIN_TIMEOUT.min(deadline.saturating_duration_since(Instant::now()));
            if left >= MIN_CALL {
                let _ = lane.producer().abort_transaction(left);
            }
        }
        outcome
    }
}

/// Fence the producers of `writer` (another node's, which may still hold partitions this node was just
/// given): `init_transactions` with each of its two ids ([`sibling`]) bumps that producer's epoch, so
/// none of its later commits succeeds, and returns once its open transaction is aborted (or its pending
/// commit completed). Both at once.
pub fn fence(plan: &FlowPlan, writer: &str) -> Result<Duration, String> {
    let started = Instant::now();
    let one = |id: &str| -> Result<(), String> {
        let mut cfg = kafka::client_config(&plan.target, &plan.id, "fence-producer").map_err(|e| e.to_string())?;
        cfg.set("transactional.id", id).set("acks", "all");
        let producer: BaseProducer = cfg
            .create()
            .map_err(|e| format!("cluster `{}`: create a producer to fence {id}: {e}", plan.target.alias))?;
        producer.init_transactions(kafka::ADMIN_TIMEOUT).map_err(|e| named(plan, id, "fence an earlier writer", &e))
    };
    both([writer.to_string(), sibling(writer)], |id| one(id))?;
    Ok(started.elapsed())
}

/// `call` for each of two items at once (a node's two producers), the first error if any.
fn both<T: Sync>(items: [T; 2], call: impl Fn(&T) -> Result<(), String> + Sync) -> Result<(), String> {
    let [first, second] = &items;
    let (a, b) = std::thread::scope(|s| {
        let b = s.spawn(|| call(second));
        (call(first), b.join().unwrap_or_else(|_| Err("a call for the second producer panicked".to_string())))
    });
    a.and(b)
}

/// Commit `lane`'s transaction, its records sent and acknowledged first with librdkafka's own flush:
/// rdkafka's, inside its commit, waited at least 100 ms whenever a record was in flight
/// (`raw_admin::flush`). What is not acknowledged within `timeout` fails the commit with the flush
/// error rdkafka's commit gave.
fn commit_flushed(lane: &RecordLane, timeout: Duration) -> Result<(), KafkaError> {
    if !crate::raw_admin::flush(lane.producer(), timeout) {
        return Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut));
    }
    lane.producer().commit_transaction(timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nodes_second_producer_is_of_its_deployment_and_no_other_nodes_first() {
        let first = "ferry.east->west.copier.n1";
        let second = sibling(first);
        assert_eq!(second, "ferry.east->west.copier.n1~1");
        assert!(second.starts_with("ferry.east->west.copier."), "covered by the prefixed binding and the kin rule");
        // A node id cannot hold `~` (settings refuse it), so no node's first id looks like this.
        assert!(second.contains(crate::config::NODE_ID_RESERVED));
    }
}
