//! Blocking Kafka client helpers for tests, on rdkafka.
//!
//! Every helper panics with a message naming the cluster and topic on failure: tests want the
//! failure, not a `Result`. They create a fresh client per call (cheap next to a broker round trip)
//! and need no async runtime: the admin futures are driven by [`block_on`], a parking loop, so the
//! helpers also work inside `#[tokio::test]` (they block that worker thread, like any sync call).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use rdkafka::admin::{
    AdminClient, AdminOptions, ConfigSource, NewPartitions, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::wait_for;

const TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`produce`] lets a record wait for its acknowledgement: Kafka's default
/// `delivery.timeout.ms`, so that a stream goes on through a broker restarted under the suite's load
/// (a restart took over 30 s on a loaded CI machine).
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(120);

/// One record as tests see it. `offset` is ignored by [`produce`]; a negative `timestamp` there
/// means "let the producer stamp it".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rec {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// Milliseconds since the epoch (CreateTime unless the topic says LogAppendTime).
    pub timestamp: i64,
}

impl Rec {
    /// A record for `partition` with a value, no key, no headers, timestamp `ts`.
    pub fn new(partition: i32, value: &[u8], ts: i64) -> Rec {
        Rec { partition, offset: -1, key: None, value: Some(value.to_vec()), headers: Vec::new(), timestamp: ts }
    }

    pub fn key(mut self, key: &[u8]) -> Rec {
        self.key = Some(key.to_vec());
        self
    }

    pub fn header(mut self, key: &str, value: Option<&[u8]>) -> Rec {
        self.headers.push((key.to_string(), value.map(<[u8]>::to_vec)));
        self
    }
}

/// Drives a future to completion on the current thread (no runtime; rdkafka's admin futures are
/// woken from librdkafka's own threads).
pub fn block_on<F: Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

/// Client properties (security.protocol, sasl.*, ssl.*) per bootstrap address, for every helper of
/// this module: a secured [`super::Cluster`] registers its super user's here while it exists, so
/// `create_topic(&cluster.bootstrap, ..)` and friends work against it unchanged.
static SECURITY: Mutex<BTreeMap<String, Props>> = Mutex::new(BTreeMap::new());

/// Client properties, (key, value) in order.
type Props = Vec<(String, String)>;

thread_local! {
    /// [`as_client`] overrides on this thread, innermost last: (bootstrap, properties).
    static AS_CLIENT: std::cell::RefCell<Vec<(String, Props)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Makes every helper use `props` for clients of `bootstrap` (replacing what was registered).
pub fn register_security(bootstrap: &str, props: Vec<(String, String)>) {
    SECURITY.lock().unwrap_or_else(|p| p.into_inner()).insert(bootstrap.to_string(), props);
}

/// Forgets what [`register_security`] registered for `bootstrap` (plaintext again).
pub fn unregister_security(bootstrap: &str) {
    SECURITY.lock().unwrap_or_else(|p| p.into_inner()).remove(bootstrap);
}

/// The properties the helpers use for `bootstrap` on this thread: the innermost [`as_client`]
/// override, else the registered ones, else none (plaintext).
pub fn security_props(bootstrap: &str) -> Vec<(String, String)> {
    let overridden = AS_CLIENT.with(|a| a.borrow().iter().rev().find(|(b, _)| b == bootstrap).map(|(_, p)| p.clone()));
    overridden.unwrap_or_else(|| {
        SECURITY.lock().unwrap_or_else(|p| p.into_inner()).get(bootstrap).cloned().unwrap_or_default()
    })
}

/// Runs `f` with the helpers on this thread connecting to `bootstrap` with `props` instead of the
/// registered (super user's) properties, e.g. `as_client(&c.bootstrap, &c.client_props("alice"),
/// || consume_all(&c.bootstrap, "a", timeout))` reads as alice. Other threads are not affected.
pub fn as_client<T>(bootstrap: &str, props: &[(String, String)], f: impl FnOnce() -> T) -> T {
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            AS_CLIENT.with(|a| a.borrow_mut().pop());
        }
    }
    AS_CLIENT.with(|a| a.borrow_mut().push((bootstrap.to_string(), props.to_vec())));
    let _pop = Pop;
    f()
}

/// A client configuration for `bootstrap` with exactly `props` on top (nothing registered), for
/// tests that build their own clients, e.g. with a wrong password.
pub fn client_config(bootstrap: &str, props: &[(String, String)]) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap).set("reconnect.backoff.max.ms", "1000");
    for (k, v) in props {
        c.set(k, v);
    }
    c
}

fn config(bootstrap: &str) -> ClientConfig {
    client_config(bootstrap, &security_props(bootstrap))
}

/// Why a client could not talk to a cluster: the first error librdkafka reported (through the
/// error callback, e.g. `Authentication` or `SSL`, or from the metadata request).
#[derive(Clone, Debug)]
pub struct ConnectError {
    pub code: RDKafkaErrorCode,
    pub message: String,
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

/// Records the errors librdkafka reports through its error callback.
#[derive(Default)]
struct ErrorLog(Mutex<Vec<ConnectError>>);

impl ClientContext for ErrorLog {
    fn error(&self, error: KafkaError, reason: &str) {
        let code = error.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Fail);
        self.0.lock().unwrap().push(ConnectError { code, message: reason.to_string() });
    }
}

impl ConsumerContext for ErrorLog {}

/// The client ids of the members of consumer group `group` on `bootstrap`, as the broker describes the
/// group: empty when it has none or does not exist.
pub fn group_members(bootstrap: &str, group: &str) -> Vec<String> {
    let consumer: BaseConsumer = config(bootstrap).create().expect("create consumer");
    let Ok(list) = consumer.fetch_group_list(Some(group), Duration::from_secs(10)) else { return Vec::new() };
    let found = list.groups().iter().filter(|g| g.name() == group);
    found.flat_map(|g| g.members().iter().map(|m| m.client_id().to_string())).collect()
}

/// Connects to `bootstrap` with exactly `props` (see [`client_config`]) and fetches metadata:
/// `Ok` once that works, else the first error librdkafka reported within `deadline` (a timeout if
/// it reported none). Authentication and TLS failures arrive through librdkafka's error callback
/// (served by `poll`), not as the metadata request's error (a transport failure or a timeout),
/// hence this helper.
pub fn try_connect(bootstrap: &str, props: &[(String, String)], deadline: Duration) -> Result<(), ConnectError> {
    let consumer: BaseConsumer<ErrorLog> = client_config(bootstrap, props)
        .set("reconnect.backoff.max.ms", "200")
        .create_with_context(ErrorLog::default())
        .map_err(|e| ConnectError { code: RDKafkaErrorCode::InvalidArgument, message: format!("client: {e}") })?;
    let start = Instant::now();
    loop {
        let left = deadline.saturating_sub(start.elapsed());
        let attempt = consumer.fetch_metadata(None, left.min(Duration::from_millis(250)));
        if attempt.is_ok() {
            return Ok(());
        }
        // Error events are delivered (to the context) by poll, not by the metadata request.
        let _ = consumer.poll(Duration::from_millis(50));
        if let Some(first) = consumer.context().0.lock().unwrap().first() {
            return Err(first.clone());
        }
        match attempt {
            Ok(_) => return Ok(()),
            Err(e) if start.elapsed() >= deadline => {
                let code = e.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::OperationTimedOut);
                return Err(ConnectError { code, message: format!("no error reported within {deadline:?}: {e}") });
            }
            Err(_) => {}
        }
    }
}

fn admin(bootstrap: &str) -> AdminClient<DefaultClientContext> {
    config(bootstrap).create().unwrap_or_else(|e| panic!("admin client for {bootstrap}: {e}"))
}

fn admin_opts() -> AdminOptions {
    AdminOptions::new().request_timeout(Some(TIMEOUT)).operation_timeout(Some(TIMEOUT))
}

fn metadata_client(bootstrap: &str) -> BaseConsumer {
    config(bootstrap).create().unwrap_or_else(|e| panic!("metadata client for {bootstrap}: {e}"))
}

/// [`create_topic`] unless `topic` exists already (e.g. an internal topic another test on the same
/// cluster made first, or is making now).
pub fn ensure_topic(bootstrap: &str, topic: &str, partitions: i32) {
    create(bootstrap, topic, partitions, &[], true);
}

/// [`ensure_topic`] with `configs` for the topic if it is created here.
pub fn ensure_topic_with(bootstrap: &str, topic: &str, partitions: i32, configs: &[(&str, &str)]) {
    create(bootstrap, topic, partitions, configs, true);
}

/// Creates `topic` with replication factor 1 and waits until its metadata shows every partition
/// with a leader. Panics if it exists already or the broker refuses.
pub fn create_topic(bootstrap: &str, topic: &str, partitions: i32, configs: &[(&str, &str)]) {
    create(bootstrap, topic, partitions, configs, false);
}

/// Creates `topic` (an existing one is fine if `existing_ok`: then it keeps its own partition count) and
/// waits until every partition has a leader.
fn create(bootstrap: &str, topic: &str, partitions: i32, configs: &[(&str, &str)], existing_ok: bool) {
    let mut new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    for (k, v) in configs {
        new = new.set(k, v);
    }
    // A request that timed out may still have created the topic: the retry then finds it (the names
    // are the test's own). A shared broker once took over 30 s to answer late in a CI run; the note
    // says when and what the broker was doing, so that a slow broker is seen, not hidden.
    let start = Instant::now();
    let mut timed_out = false;
    let results = loop {
        match block_on(admin(bootstrap).create_topics([&new], &admin_opts())) {
            Err(KafkaError::AdminOp(RDKafkaErrorCode::OperationTimedOut)) if start.elapsed() < 3 * TIMEOUT => {
                timed_out = true;
                super::timing::note(&format!(
                    "CreateTopics {topic} on {bootstrap} timed out after {:.0?}, retrying; {}",
                    start.elapsed(),
                    super::cluster::broker_state(bootstrap)
                ));
            }
            r => {
                break r.unwrap_or_else(|e| {
                    panic!("create topic {topic} on {bootstrap} after {:.0?}: {e}", start.elapsed())
                });
            }
        }
    };
    let mut existed = false;
    for r in results {
        match r {
            Ok(_) => {}
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) if existing_ok => existed = true,
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) if timed_out => {}
            Err((t, code)) => panic!("create topic {t} on {bootstrap}: {code}"),
        }
    }
    let client = metadata_client(bootstrap);
    // A broker elects a leader for each new partition and makes its log: under a loaded suite a few
    // hundred partitions took over 30 s (a 300-partition topic in a CI run).
    wait_for(leaders_deadline(partitions), &format!("topic {topic} on {bootstrap} to have leaders"), || {
        partition_leaders(&client, topic).is_some_and(|l| {
            (if existed { !l.is_empty() } else { l.len() == partitions as usize }) && l.iter().all(|&l| l >= 0)
        })
    });
}

/// How long new partitions may take to get leaders: [`TIMEOUT`], or 200 ms a partition for a wide topic.
fn leaders_deadline(partitions: i32) -> Duration {
    TIMEOUT.max(Duration::from_millis(200) * partitions.max(0) as u32)
}

/// Grows `topic` to `partitions` partitions and waits until metadata shows every partition with a
/// leader. Panics if the broker refuses (e.g. fewer partitions than the topic has).
pub fn create_partitions(bootstrap: &str, topic: &str, partitions: i32) {
    let new = NewPartitions::new(topic, partitions as usize);
    let results = block_on(admin(bootstrap).create_partitions([&new], &admin_opts()))
        .unwrap_or_else(|e| panic!("create partitions of {topic} on {bootstrap}: {e}"));
    for r in results {
        if let Err((t, code)) = r {
            panic!("grow {t} to {partitions} partitions on {bootstrap}: {code}");
        }
    }
    let client = metadata_client(bootstrap);
    let deadline = leaders_deadline(partitions);
    wait_for(deadline, &format!("topic {topic} on {bootstrap} to have {partitions} partitions with leaders"), || {
        partition_leaders(&client, topic).is_some_and(|l| l.len() == partitions as usize && l.iter().all(|&l| l >= 0))
    });
}

/// The topic-level overrides of `topic` (config source `DYNAMIC_TOPIC_CONFIG`), name → value: what
/// `kafka-configs --describe --entity-type topics` lists. Panics if the topic does not exist.
pub fn topic_overrides(bootstrap: &str, topic: &str) -> BTreeMap<String, Option<String>> {
    let results = block_on(admin(bootstrap).describe_configs([&ResourceSpecifier::Topic(topic)], &admin_opts()))
        .unwrap_or_else(|e| panic!("describe configs of {topic} on {bootstrap}: {e}"));
    let resource = match results.into_iter().next() {
        Some(Ok(r)) => r,
        Some(Err(code)) => panic!("describe configs of {topic} on {bootstrap}: {code}"),
        None => panic!("describe configs of {topic} on {bootstrap}: no result"),
    };
    resource.entries.into_iter().filter(|e| e.source == ConfigSource::DynamicTopic).map(|e| (e.name, e.value)).collect()
}

/// Deletes `topic` (absent is fine) and waits until metadata no longer shows it.
pub fn delete_topic(bootstrap: &str, topic: &str) {
    let results = block_on(admin(bootstrap).delete_topics(&[topic], &admin_opts()))
        .unwrap_or_else(|e| panic!("delete topic {topic} on {bootstrap}: {e}"));
    for r in results {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::UnknownTopicOrPartition)) => {}
            Err((t, code)) => panic!("delete topic {t} on {bootstrap}: {code}"),
        }
    }
    wait_for(TIMEOUT, &format!("topic {topic} to disappear from {bootstrap}"), || {
        topic_partitions(bootstrap, topic).is_none()
    });
}

/// The partition count of `topic`, `None` if the cluster does not know it.
pub fn topic_partitions(bootstrap: &str, topic: &str) -> Option<i32> {
    partition_leaders(&metadata_client(bootstrap), topic).map(|l| l.len() as i32)
}

/// Leader per partition (index = partition id), `None` if the topic is unknown.
fn partition_leaders(client: &BaseConsumer, topic: &str) -> Option<Vec<i32>> {
    let md = client.fetch_metadata(Some(topic), TIMEOUT).unwrap_or_else(|e| panic!("metadata for {topic}: {e}"));
    let t = md.topics().iter().find(|t| t.name() == topic)?;
    if t.error().is_some() || t.partitions().is_empty() {
        return None;
    }
    let mut leaders: Vec<(i32, i32)> = t.partitions().iter().map(|p| (p.id(), p.leader())).collect();
    leaders.sort_unstable();
    Some(leaders.into_iter().map(|(_, l)| l).collect())
}

/// Every topic of the cluster, sorted, except Kafka's own `__`-prefixed internal topics
/// (`__consumer_offsets`, `__transaction_state`, ...). MM2-style internal topics are included.
pub fn list_topics(bootstrap: &str) -> Vec<String> {
    let md = metadata_client(bootstrap)
        .fetch_metadata(None, TIMEOUT)
        .unwrap_or_else(|e| panic!("metadata of {bootstrap}: {e}"));
    let mut names: Vec<String> =
        md.topics().iter().map(|t| t.name().to_string()).filter(|n| !n.starts_with("__")).collect();
    names.sort();
    names
}

/// Counts the acknowledgements of a producer and collects its delivery failures.
#[derive(Default)]
pub struct Deliveries {
    pub failed: Mutex<Vec<String>>,
    pub done: AtomicUsize,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, m)) = result {
            self.failed.lock().unwrap().push(format!("partition {}: {e}", m.partition()));
        }
        self.done.fetch_add(1, Ordering::Relaxed);
    }
}

/// Produces `recs` in order, each to its own partition with its key, value, headers and (unless
/// negative) timestamp; acks=all, in order; returns after all were acknowledged. Panics on any
/// delivery error.
pub fn produce(bootstrap: &str, topic: &str, recs: &[Rec]) {
    let producer: BaseProducer<Deliveries> = config(bootstrap)
        .set("acks", "all")
        // Not idempotent: librdkafka delays its first InitProducerId by 500 ms, which made every
        // call cost 0.6 s. One request in flight keeps retries in order; on loopback a retry
        // that duplicates a record (lost response) is not a practical concern.
        .set("enable.idempotence", "false")
        .set("max.in.flight.requests.per.connection", "1")
        .set("linger.ms", "0")
        .set("message.timeout.ms", DELIVERY_TIMEOUT.as_millis().to_string())
        // Records near and above 1 MB (librdkafka's default limit); the topic decides what it takes.
        .set("message.max.bytes", "10000000")
        .create_with_context(Deliveries::default())
        .unwrap_or_else(|e| panic!("producer for {bootstrap}: {e}"));
    for rec in recs {
        let mut record = base_record(topic, rec);
        if rec.timestamp >= 0 {
            record = record.timestamp(rec.timestamp);
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    producer.poll(Duration::from_millis(50));
                }
                Err((e, _)) => panic!("produce to {topic} on {bootstrap}: {e}"),
            }
        }
        producer.poll(Duration::ZERO);
    }
    // rdkafka's flush() sleeps in 100 ms steps; polling in small steps returns as soon as the
    // last acknowledgement arrives.
    let ctx = producer.context();
    let start = Instant::now();
    while ctx.done.load(Ordering::Relaxed) < recs.len() && start.elapsed() < DELIVERY_TIMEOUT {
        producer.poll(Duration::from_millis(2));
    }
    producer.flush(TIMEOUT).unwrap_or_else(|e| panic!("flush to {topic} on {bootstrap}: {e}"));
    let failed = ctx.failed.lock().unwrap();
    assert!(failed.is_empty(), "produce to {topic} on {bootstrap} failed: {failed:?}");
    assert_eq!(ctx.done.load(Ordering::Relaxed), recs.len(), "deliveries reported");
}

/// The `group.id` of [`consume_all`]'s consumer. It never joins nor commits, but librdkafka still
/// looks up the group's coordinator: under ACLs, a user needs Describe on this group (and Read on
/// the topic) to use [`consume_all`].
pub const CONSUME_ALL_GROUP: &str = "ferry-test-consume-all";

/// Reads every partition of `topic` from its start up to the high watermark seen when called
/// (assign, no consumer group; read_committed, so aborted transactional records are skipped) and
/// returns the records sorted by (partition, offset). Panics if that takes longer than `timeout`.
/// Under ACLs see [`CONSUME_ALL_GROUP`].
pub fn consume_all(bootstrap: &str, topic: &str, timeout: Duration) -> Vec<Rec> {
    consume_all_as(bootstrap, topic, timeout, "read_committed")
}

/// [`consume_all`] with `isolation` (`read_committed` or `read_uncommitted`: the latter also returns
/// the records of aborted and open transactions).
pub fn consume_all_as(bootstrap: &str, topic: &str, timeout: Duration, isolation: &str) -> Vec<Rec> {
    let consumer: BaseConsumer = config(bootstrap)
        .set("group.id", CONSUME_ALL_GROUP) // required by librdkafka's consumer; never used
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", isolation)
        .create()
        .unwrap_or_else(|e| panic!("consumer for {bootstrap}: {e}"));
    let partitions = partition_leaders(&consumer, topic)
        .unwrap_or_else(|| panic!("consume_all: topic {topic} does not exist on {bootstrap}"))
        .len() as i32;
    // high watermark per partition still to reach
    let mut todo: BTreeMap<i32, i64> = BTreeMap::new();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        let (low, high) = watermarks(&consumer, bootstrap, topic, p);
        if high > low {
            todo.insert(p, high);
            tpl.add_partition_offset(topic, p, Offset::Offset(low)).expect("add partition");
        }
    }
    let mut out = Vec::new();
    if todo.is_empty() {
        return out;
    }
    consumer.assign(&tpl).unwrap_or_else(|e| panic!("assign {topic} on {bootstrap}: {e}"));
    let start = Instant::now();
    while !todo.is_empty() {
        assert!(
            start.elapsed() < timeout,
            "consume_all {topic} on {bootstrap}: after {timeout:?} still waiting for {todo:?} \
             (partition -> high watermark), got {} records",
            out.len()
        );
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(m)) => {
                let rec = Rec {
                    partition: m.partition(),
                    offset: m.offset(),
                    key: m.key().map(<[u8]>::to_vec),
                    value: m.payload().map(<[u8]>::to_vec),
                    headers: m
                        .headers()
                        .map(|h| h.iter().map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec))).collect())
                        .unwrap_or_default(),
                    timestamp: m.timestamp().to_millis().unwrap_or(-1),
                };
                if todo.get(&rec.partition).is_some_and(|&high| rec.offset + 1 >= high) {
                    todo.remove(&rec.partition);
                }
                out.push(rec);
            }
            // End of partition: done if the position passed the high watermark (it can stop short
            // of it only at a transaction marker or an open transaction, which read_committed hides).
            Some(Err(KafkaError::PartitionEOF(p))) => {
                let pos = consumer.position().expect("position");
                let reached = pos
                    .find_partition(topic, p)
                    .and_then(|e| e.offset().to_raw())
                    .is_some_and(|o| todo.get(&p).is_some_and(|&high| o >= high));
                if reached {
                    todo.remove(&p);
                }
            }
            Some(Err(e)) => panic!("consume {topic} on {bootstrap}: {e}"),
        }
    }
    out.sort_by_key(|r| (r.partition, r.offset));
    out
}

/// Commits offsets for `group` as a member that never joins (generation -1), the way MM2 writes
/// translated offsets: the broker accepts it only while the group is empty or absent.
pub fn commit_group_offsets(bootstrap: &str, group: &str, offsets: &[(&str, i32, i64)]) {
    let consumer = group_client(bootstrap, group);
    let mut tpl = TopicPartitionList::new();
    for &(topic, partition, offset) in offsets {
        tpl.add_partition_offset(topic, partition, Offset::Offset(offset)).expect("add partition");
    }
    retry_transient(|| consumer.commit(&tpl, CommitMode::Sync))
        .unwrap_or_else(|e| panic!("commit offsets of group {group} on {bootstrap}: {e}"));
}

/// The committed offsets of `group` for `partitions` (`None`: nothing committed), in order.
pub fn group_offsets(bootstrap: &str, group: &str, partitions: &[(&str, i32)]) -> Vec<Option<i64>> {
    let consumer = group_client(bootstrap, group);
    let mut tpl = TopicPartitionList::new();
    for &(topic, partition) in partitions {
        tpl.add_partition(topic, partition);
    }
    // A fresh cluster answers NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS while __consumer_offsets
    // is created and loaded: retry those until the deadline.
    let committed = retry_transient(|| consumer.committed_offsets(tpl.clone(), TIMEOUT))
        .unwrap_or_else(|e| panic!("committed offsets of group {group} on {bootstrap}: {e}"));
    partitions
        .iter()
        .map(|&(topic, partition)| {
            committed.find_partition(topic, partition).and_then(|e| match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            })
        })
        .collect()
}

fn group_client(bootstrap: &str, group: &str) -> BaseConsumer {
    config(bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap_or_else(|e| panic!("consumer for group {group} on {bootstrap}: {e}"))
}

/// Run `f` until it succeeds or fails with a non-transient error, for at most [`TIMEOUT`].
fn retry_transient<T>(mut f: impl FnMut() -> KafkaResult<T>) -> KafkaResult<T> {
    use rdkafka::types::RDKafkaErrorCode as C;
    let start = Instant::now();
    loop {
        match f() {
            Err(e)
                if start.elapsed() < TIMEOUT
                    && matches!(
                        e.rdkafka_error_code(),
                        Some(C::NotCoordinator | C::CoordinatorLoadInProgress | C::CoordinatorNotAvailable)
                    ) =>
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            other => return other,
        }
    }
}

/// The high watermark (end offset) of every partition of `topic`, index = partition; empty if the
/// cluster does not know the topic. Cheap next to [`consume_all`]: one metadata and one list-offsets
/// round trip per partition. A topic created moments ago (e.g. by ferry while the test polls) answers
/// "no leader" for a while: that is retried.
pub fn end_offsets(bootstrap: &str, topic: &str) -> Vec<i64> {
    let client = metadata_client(bootstrap);
    let Some(leaders) = partition_leaders(&client, topic) else { return Vec::new() };
    (0..leaders.len() as i32).map(|p| watermarks(&client, bootstrap, topic, p).1).collect()
}

/// (low, high) watermarks of one partition. A topic created moments ago (e.g. by ferry while the test
/// polls) answers "no leader" for a while: that is retried for up to [`TIMEOUT`].
fn watermarks<X: ConsumerContext>(client: &BaseConsumer<X>, bootstrap: &str, topic: &str, p: i32) -> (i64, i64) {
    use rdkafka::types::RDKafkaErrorCode as C;
    let start = Instant::now();
    loop {
        match client.fetch_watermarks(topic, p, TIMEOUT) {
            Ok(w) => break w,
            Err(e)
                if start.elapsed() < TIMEOUT
                    && matches!(
                        e.rdkafka_error_code(),
                        Some(
                            C::NotLeaderForPartition
                                | C::LeaderNotAvailable
                                | C::UnknownTopicOrPartition
                                | C::UnknownPartition
                        )
                    ) =>
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("watermarks of {topic}-{p} on {bootstrap}: {e}"),
        }
    }
}

/// Deletes the records of `topic`-`partition` below offset `before` (Kafka's DeleteRecords, what
/// `kafka-delete-records` does: the partition's log start moves to `before`). Panics on refusal.
pub fn delete_records(bootstrap: &str, topic: &str, partition: i32, before: i64) {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(before)).expect("add partition");
    let result = block_on(admin(bootstrap).delete_records(&tpl, &admin_opts()))
        .unwrap_or_else(|e| panic!("delete records of {topic}-{partition} before {before} on {bootstrap}: {e}"));
    for e in result.elements() {
        if let Err(err) = e.error() {
            panic!("delete records of {topic}-{partition} before {before} on {bootstrap}: {err}");
        }
    }
    let (low, _) = metadata_client(bootstrap)
        .fetch_watermarks(topic, partition, TIMEOUT)
        .unwrap_or_else(|e| panic!("watermarks of {topic}-{partition} on {bootstrap}: {e}"));
    assert_eq!(low, before, "log start of {topic}-{partition} after DeleteRecords");
}

/// `rec` as a record for `topic`: partition, headers, key and value (the timestamp is the caller's).
fn base_record<'a>(topic: &'a str, rec: &'a Rec) -> BaseRecord<'a, [u8], [u8]> {
    let mut headers = OwnedHeaders::new_with_capacity(rec.headers.len());
    for (k, v) in &rec.headers {
        headers = headers.insert(Header { key: k, value: v.as_deref() });
    }
    let mut record = BaseRecord::to(topic).partition(rec.partition).headers(headers);
    if let Some(k) = &rec.key {
        record = record.key(k.as_slice());
    }
    if let Some(v) = &rec.value {
        record = record.payload(v.as_slice());
    }
    record
}

/// Produces `recs` in one committed transaction (a transactional producer, as MM2 writes its offsets
/// with `exactly.once.source.support=enabled`): the partitions then end with a commit marker.
pub fn produce_transactional(bootstrap: &str, topic: &str, recs: &[Rec]) {
    let producer: BaseProducer = config(bootstrap)
        .set("transactional.id", format!("ferry-test-{}-{topic}", std::process::id()))
        .set("acks", "all")
        .create()
        .unwrap_or_else(|e| panic!("transactional producer for {bootstrap}: {e}"));
    producer.init_transactions(TIMEOUT).unwrap_or_else(|e| panic!("init transactions on {bootstrap}: {e}"));
    producer.begin_transaction().unwrap_or_else(|e| panic!("begin transaction on {bootstrap}: {e}"));
    for rec in recs {
        let record = base_record(topic, rec);
        producer.send(record).unwrap_or_else(|(e, _)| panic!("produce to {topic} on {bootstrap}: {e}"));
    }
    producer.commit_transaction(TIMEOUT).unwrap_or_else(|e| panic!("commit transaction on {bootstrap}: {e}"));
}

/// Sets topic-level configs of `topic` (AlterConfigs: the given keys replace the topic's overrides).
pub fn set_topic_configs(bootstrap: &str, topic: &str, configs: &[(&str, &str)]) {
    let mut alter = rdkafka::admin::AlterConfig::new(ResourceSpecifier::Topic(topic));
    for (k, v) in configs {
        alter = alter.set(k, v);
    }
    let results = block_on(admin(bootstrap).alter_configs([&alter], &admin_opts()))
        .unwrap_or_else(|e| panic!("alter configs of {topic} on {bootstrap}: {e}"));
    for r in results {
        if let Err((_, code)) = r {
            panic!("alter configs of {topic} on {bootstrap}: {code}");
        }
    }
}

/// Deletes consumer `group` (it must have no members).
pub fn delete_group(bootstrap: &str, group: &str) {
    let results = block_on(admin(bootstrap).delete_groups(&[group], &admin_opts()))
        .unwrap_or_else(|e| panic!("delete group {group} on {bootstrap}: {e}"));
    for r in results {
        if let Err((g, code)) = r {
            panic!("delete group {g} on {bootstrap}: {code}");
        }
    }
}
