//! Exactly-once delivery (`delivery = "exactly_once"`) with several nodes sharing a flow, on the shared
//! pair, asserting what a `read_committed` reader of the target sees:
//!
//! - a node frozen (SIGSTOP) past the copier group's session timeout under load: the other node takes
//!   its partitions, fences its transactional producer, and the frozen node, resumed, writes nothing a
//!   `read_committed` reader sees; every source record arrives once, in order, byte for byte. The
//!   fencing delay (SIGSTOP until the frozen node's partitions get new committed records) is printed;
//! - a rebalance under load (a node joins, a third joins, the first leaves gracefully): every source
//!   record once, in order, byte for byte.
//!
//! The figures printed: duplicates a `read_uncommitted` reader sees (the aborted copies), the fences
//! each node did (`ferry_producers_fenced_total`), the fencing delay.

use crate::support;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};
use support::observe::{self, metric_sum};
use support::scenario::*;
use support::{Cluster, Ferry, Rec, consume_all, consume_all_as, create_topic, shared_pair, unique, wait_for};

const EXACTLY_ONCE: &str = "delivery = \"exactly_once\"\n";
const PARTITIONS: i32 = 4;
/// The topic's partitions and the source's heartbeats partition: what the copier group splits.
const GROUP_PARTITIONS: i64 = PARTITIONS as i64 + 1;
/// The copier group's session timeout (set on the source cluster's client properties).
const SESSION: Duration = Duration::from_secs(10);
/// The stream sends this many records every [`PAUSE`]: at most 1,000 a second.
const STEP: usize = 10;
const PAUSE: Duration = Duration::from_millis(10);

/// Records `prefix-<i>` for `range` over the topic's partitions (`i % 4`), with a key, two headers (one
/// of them without a value) and a timestamp (of 2023): everything a byte-for-byte comparison looks at.
fn keyed(prefix: &str, range: std::ops::Range<usize>) -> Vec<Rec> {
    range
        .map(|i| {
            Rec::new((i % PARTITIONS as usize) as i32, format!("{prefix}-{i}").as_bytes(), 1_700_000_000_000 + i as i64)
                .key(format!("k{i}").as_bytes())
                .header("h", Some(format!("{i}").as_bytes()))
                .header("none", None)
        })
        .collect()
}

/// The index `i` of a value `prefix-<i>`.
fn index(value: &[u8]) -> Option<usize> {
    std::str::from_utf8(value).ok()?.rsplit_once('-')?.1.parse().ok()
}

/// Keyed records (see [`keyed`]) produced at a steady pace by one idempotent producer on a thread until
/// finished: the copier always has records to copy, so its transaction is open nearly all the time.
struct KeyedStream {
    stop: Arc<AtomicBool>,
    produced: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl KeyedStream {
    fn start(bootstrap: &str, topic: &str, prefix: &str) -> Self {
        let (stop, produced) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
        let producer: BaseProducer = support::client_config(bootstrap, &support::client::security_props(bootstrap))
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("linger.ms", "5")
            .set("message.timeout.ms", "60000")
            .create()
            .expect("stream producer");
        let (t, p, s, n) = (topic.to_string(), prefix.to_string(), stop.clone(), produced.clone());
        let thread = std::thread::spawn(move || {
            let mut i = 0;
            while !s.load(Ordering::SeqCst) {
                for rec in keyed(&p, i..i + STEP) {
                    let mut headers = OwnedHeaders::new();
                    for (key, value) in &rec.headers {
                        headers = headers.insert(Header { key, value: value.as_deref() });
                    }
                    let mut record = BaseRecord::to(&t)
                        .partition(rec.partition)
                        .key(rec.key.as_deref().unwrap_or_default())
                        .payload(rec.value.as_deref().unwrap_or_default())
                        .timestamp(rec.timestamp)
                        .headers(headers);
                    loop {
                        match producer.send(record) {
                            Ok(()) => break,
                            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                                record = r;
                                producer.poll(Duration::from_millis(10));
                            }
                            Err((e, _)) => panic!("produce to {t}: {e}"),
                        }
                    }
                    n.fetch_add(1, Ordering::SeqCst);
                }
                i += STEP;
                producer.poll(Duration::ZERO);
                std::thread::sleep(PAUSE); // pacing, not synchronisation
            }
            producer.flush(Duration::from_secs(60)).expect("flush the stream");
        });
        Self { stop, produced, thread: Some(thread) }
    }

    /// Records handed to the producer so far: every record from this index on is sent after the call.
    fn produced(&self) -> usize {
        self.produced.load(Ordering::SeqCst)
    }

    /// Stops producing; returns how many records were produced (the source holding them all is
    /// asserted by [`assert_exactly_once`]).
    fn finish(mut self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take()
            && let Err(e) = t.join()
        {
            std::panic::resume_unwind(e);
        }
        self.produced()
    }
}

impl Drop for KeyedStream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// A `read_committed` consumer reading a topic from its start on a thread, noting when each record
/// arrived (partition and the value's index): shows when committed records flow again.
struct CommittedTail {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<(Instant, i32, usize)>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl CommittedTail {
    fn start(bootstrap: &str, topic: &str, partitions: i32) -> Self {
        let consumer: BaseConsumer = support::client_config(bootstrap, &support::client::security_props(bootstrap))
            .set("group.id", unique("eos-nodes-tail"))
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .create()
            .expect("tail consumer");
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition_offset(topic, p, Offset::Beginning).expect("add partition");
        }
        consumer.assign(&tpl).expect("assign");
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (s, a) = (stop.clone(), seen.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                if let Some(Ok(m)) = consumer.poll(Duration::from_millis(50))
                    && let Some(i) = m.payload().and_then(index)
                {
                    a.lock().expect("tail").push((Instant::now(), m.partition(), i));
                }
            }
        });
        Self { stop, seen, thread: Some(thread) }
    }

    /// When the first record of `partitions` with an index of at least `from` arrived.
    fn first(&self, partitions: &BTreeSet<i32>, from: usize) -> Option<Instant> {
        let seen = self.seen.lock().expect("tail");
        seen.iter().find(|(_, p, i)| partitions.contains(p) && *i >= from).map(|(t, _, _)| *t)
    }
}

impl Drop for CommittedTail {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Ferry nodes of one deployment sharing an exactly-once flow of one topic. A frozen node is never
/// asked anything over HTTP (it would not answer): the helpers take the nodes to ask.
struct Nodes {
    dir: tempfile::TempDir,
    deployment: String,
    topic: String,
    nodes: BTreeMap<String, Ferry>,
}

impl Nodes {
    fn new(east: &Cluster, west: &Cluster, topic: &str) -> Nodes {
        let extra = format!("{EXACTLY_ONCE}refresh_topics_interval_seconds = 2\n");
        Self::with_flow(east, west, topic, &flow("east", "west", &[topic], &extra))
    }

    /// The nodes of `flow_toml`, an exactly-once flow of `topic` from east to west.
    fn with_flow(east: &Cluster, west: &Cluster, topic: &str, flow_toml: &str) -> Nodes {
        let clusters = [("east", east.bootstrap.as_str()), ("west", west.bootstrap.as_str())];
        let dir = flows_dir(&clusters, flow_toml);
        let path = dir.path().join("clusters.toml");
        let text = std::fs::read_to_string(&path).expect("clusters.toml")
            + &format!("[clusters.east.client]\n\"session.timeout.ms\" = {}\n", SESSION.as_millis());
        std::fs::write(&path, text).expect("write clusters.toml");
        Nodes { dir, deployment: unique("eos-deploy"), topic: topic.to_string(), nodes: BTreeMap::new() }
    }

    fn start(&mut self, node: &str) {
        self.start_env(node, &[]);
    }

    fn start_env(&mut self, node: &str, extra: &[(&str, &str)]) {
        let mut env = vec![("FERRY_NODE_ID", node), ("FERRY_DEPLOYMENT", self.deployment.as_str())];
        env.extend_from_slice(extra);
        let mut ferry = Ferry::start_env(self.dir.path(), &[], &env);
        ferry.wait_log("node started", STARTED);
        self.nodes.insert(node.to_string(), ferry);
    }

    fn metric(&self, node: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
        metric_sum(&observe::metrics(self.nodes[node].listen_addr()), name, labels)
    }

    fn fenced(&self, node: &str) -> f64 {
        self.metric(node, "ferry_producers_fenced_total", &[("flow", FLOW)])
    }

    /// Source partitions `node` copies (its copier group share).
    fn share(&self, node: &str) -> i64 {
        self.assigned(node).len() as i64
    }

    /// The partitions `node` says it copies (`/health` `assigned`, without other tests' remote heartbeats).
    fn assigned(&self, node: &str) -> BTreeSet<String> {
        observe::assigned_partitions(self.nodes[node].listen_addr(), FLOW)
    }

    /// The partitions of the test's topic `node` copies.
    fn topic_partitions(&self, node: &str) -> BTreeSet<i32> {
        self.assigned(node)
            .iter()
            .filter_map(|s| s.rsplit_once('-'))
            .filter(|(t, _)| *t == self.topic)
            .filter_map(|(_, p)| p.parse().ok())
            .collect()
    }

    /// `names` split every partition among them, each copying some (by the metric and by `/health`).
    fn split_among(&self, names: &[&str]) -> bool {
        let shares: Vec<i64> = names.iter().map(|n| self.share(n)).collect();
        let listed: usize = names.iter().map(|n| self.assigned(n).len()).sum();
        shares.iter().sum::<i64>() == GROUP_PARTITIONS
            && shares.iter().all(|s| *s > 0)
            && listed == GROUP_PARTITIONS as usize
    }

    fn alive(&mut self) {
        for f in self.nodes.values_mut() {
            assert_alive(f);
        }
    }

    fn terminate_all(&mut self) {
        for (n, f) in self.nodes.iter_mut() {
            let status = f.terminate(Duration::from_secs(30));
            assert!(status.success(), "{n} exits cleanly: {status:?}");
        }
    }
}

/// Waits until every produced record is on `remote` for a `read_committed` reader, then asserts that it
/// holds the source exactly: every record once, in source order per partition, byte for byte. Returns
/// the extra records a `read_uncommitted` reader sees (the copies of aborted transactions).
fn assert_exactly_once(ferry: &mut Ferry, east: &Cluster, west: &Cluster, topic: &str, produced: usize) -> usize {
    let remote = format!("east.{topic}");
    let counts = wait_all_arrived(ferry, &west.bootstrap, &remote, &keyed_values("r", 0..produced));
    let committed = consume_all(&west.bootstrap, &remote, READ);
    let mut seen = HashSet::new();
    let dups = committed.iter().filter(|r| !seen.insert(r.value.clone())).count();
    assert_eq!(dups, 0, "a read_committed reader sees no record twice ({} duplicated values)", duplicates(&counts));
    let source = per_partition(consume_all(&east.bootstrap, topic, READ));
    assert_eq!(source.values().map(Vec::len).sum::<usize>(), produced, "the source holds what was produced");
    let target = per_partition(committed);
    for (p, recs) in &source {
        let copied = target.get(p).map_or(&[][..], Vec::as_slice);
        assert_eq!(copied.len(), recs.len(), "partition {p}: every record once for a read_committed reader");
        if let Some(i) = copied.iter().zip(recs).position(|(c, s)| c != s) {
            panic!(
                "partition {p}: the copy differs from the source at position {i}: copied {:?}, source {:?}",
                copied[i], recs[i]
            );
        }
    }
    let all = consume_all_as(&west.bootstrap, &remote, READ, "read_uncommitted");
    all.len() - produced
}

#[test]
fn a_frozen_node_is_fenced_and_writes_nothing_a_read_committed_reader_sees() {
    /// How long the node stays frozen: past the session timeout, so that the group presumes it dead.
    const FROZEN: Duration = Duration::from_secs(15);
    let started = Instant::now();
    let (east, west) = shared_pair();
    let topic = unique("eos-frozen");
    let remote = format!("east.{topic}");
    create_topic(&east.bootstrap, &topic, PARTITIONS, &[]);
    let stream = KeyedStream::start(&east.bootstrap, &topic, "r");
    let mut nodes = Nodes::new(east, west, &topic);
    for n in ["f1", "f2"] {
        nodes.start(n);
    }
    wait_for(ARRIVAL, "both nodes copying, every partition assigned once", || {
        nodes.alive();
        nodes.split_among(&["f1", "f2"])
    });
    wait_for(ARRIVAL, "the remote topic", || support::topic_partitions(&west.bootstrap, &remote) == Some(PARTITIONS));
    let tail = CommittedTail::start(&west.bootstrap, &remote, PARTITIONS);
    // Both nodes committed copies of their partitions: the frozen node leaves committed progress behind,
    // and (the stream never pauses) a transaction open with records after it.
    wait_for(ARRIVAL, "committed records on every partition of the remote topic", || {
        nodes.alive();
        (0..PARTITIONS).all(|p| tail.first(&BTreeSet::from([p]), 0).is_some())
    });

    // The victim: the node copying more of the topic's partitions.
    let parts: BTreeMap<&str, BTreeSet<i32>> = ["f1", "f2"].iter().map(|n| (*n, nodes.topic_partitions(n))).collect();
    let victim = if parts["f1"].len() >= parts["f2"].len() { "f1" } else { "f2" };
    let survivor = if victim == "f1" { "f2" } else { "f1" };
    let frozen_parts = parts[victim].clone();
    assert!(!frozen_parts.is_empty(), "the victim copies partitions of the topic: {parts:?}");
    let leading = nodes.metric(victim, "ferry_leader", &[("flow", FLOW), ("duty", "checkpoints")]) == 1.0;
    let fenced_before = nodes.fenced(survivor);
    println!("{victim} (leading: {leading}) copies {frozen_parts:?}, {survivor} {:?}", parts[survivor]);

    let pid = nodes.nodes[victim].pid().expect("pid");
    let stopped = Instant::now();
    support::process::signal(pid, "STOP");
    // Every record from this index on was produced after the SIGSTOP: the frozen node cannot have
    // copied it, so a committed copy of it on the frozen node's partitions is the survivor's.
    let after_stop = stream.produced();
    wait_for(Duration::from_secs(60), &format!("{survivor} copies every partition while {victim} is frozen"), || {
        assert_alive(nodes.nodes.get_mut(survivor).expect("survivor"));
        nodes.share(survivor) == GROUP_PARTITIONS && nodes.assigned(survivor).len() == GROUP_PARTITIONS as usize
    });
    let reassigned = stopped.elapsed();
    let mut resumed_at = None;
    wait_for(Duration::from_secs(90), "new committed records on the frozen node's partitions", || {
        resumed_at = tail.first(&frozen_parts, after_stop);
        resumed_at.is_some()
    });
    let fencing_delay = resumed_at.expect("polled").duration_since(stopped);
    // The scenario: the node stays frozen a while longer after it was replaced, then resumes believing
    // for a moment that it still copies its partitions, with a transaction open.
    std::thread::sleep(FROZEN.saturating_sub(stopped.elapsed()));
    let frozen_for = stopped.elapsed();
    support::process::signal(pid, "CONT");
    wait_for(ARRIVAL, &format!("{victim} back in the copier group after it resumed"), || {
        nodes.alive();
        nodes.split_among(&["f1", "f2"])
    });
    let restarts = observe::actor_restarts(nodes.nodes[victim].listen_addr(), FLOW, "copier");
    // What the resumed node said about its lost partitions and its fenced producer.
    let log = nodes.nodes[victim].log();
    let said: Vec<&str> = log.lines().filter(|l| l.contains("as lost") || l.contains("fenced")).take(4).collect();
    println!("{victim} after it resumed:\n{}", said.join("\n"));
    let produced = stream.finish();
    let uncommitted_extra =
        assert_exactly_once(nodes.nodes.get_mut(survivor).expect("survivor"), east, west, &topic, produced);
    let fenced = nodes.fenced(survivor);
    let aborted: BTreeMap<&str, f64> = ["f1", "f2"]
        .iter()
        .map(|n| (*n, nodes.metric(n, "ferry_transactions_total", &[("flow", FLOW), ("result", "aborted")])))
        .collect();
    println!(
        "{produced} records; {victim} frozen {frozen_for:?}: its partitions reassigned after {reassigned:?}, \
         fencing delay (SIGSTOP to new committed records on its partitions) {fencing_delay:?}; \
         {survivor} fenced {fenced} (before the freeze {fenced_before}), {victim} fenced {}; \
         {victim}'s copier restarted {restarts} times; aborted transactions {aborted:?}; \
         read_committed duplicates 0, read_uncommitted extra records {uncommitted_extra}; {:?} in all",
        nodes.fenced(victim),
        started.elapsed()
    );
    assert!(fenced >= 1.0, "{survivor} fenced the frozen node's producer (ferry_producers_fenced_total {fenced})");
    assert!(restarts >= 1.0, "the resumed node's copier lost its assignment and restarted");
    assert!(fencing_delay < Duration::from_secs(60), "fencing delay {fencing_delay:?}");
    nodes.terminate_all();
}

#[test]
fn a_rebalance_under_load_copies_every_record_exactly_once() {
    let started = Instant::now();
    let (east, west) = shared_pair();
    let topic = unique("eos-rebalance");
    let remote = format!("east.{topic}");
    create_topic(&east.bootstrap, &topic, PARTITIONS, &[]);
    let stream = KeyedStream::start(&east.bootstrap, &topic, "r");
    let mut nodes = Nodes::new(east, west, &topic);
    nodes.start("a");
    wait_for(ARRIVAL, "a copies everything", || {
        nodes.alive();
        nodes.split_among(&["a"]) && total(&west.bootstrap, &remote) > 0
    });
    let mut phases = vec![("a alone", started.elapsed())];
    nodes.start("b");
    wait_for(ARRIVAL, "a and b share the partitions", || {
        nodes.alive();
        nodes.split_among(&["a", "b"])
    });
    phases.push(("b joined", started.elapsed()));
    nodes.start("c");
    wait_for(ARRIVAL, "a, b and c share the partitions", || {
        nodes.alive();
        nodes.split_among(&["a", "b", "c"])
    });
    phases.push(("c joined", started.elapsed()));
    let fenced_a = nodes.fenced("a");
    let mut a = nodes.nodes.remove("a").expect("a");
    let status = a.terminate(Duration::from_secs(30));
    assert!(status.success(), "a leaves cleanly: {status:?}");
    wait_for(ARRIVAL, "b and c share the partitions after a left", || {
        nodes.alive();
        nodes.split_among(&["b", "c"])
    });
    phases.push(("a left", started.elapsed()));
    let produced = stream.finish();
    let load = started.elapsed();
    let uncommitted_extra = assert_exactly_once(nodes.nodes.get_mut("b").expect("b"), east, west, &topic, produced);
    println!(
        "{produced} records over {load:?} of load, phases {phases:?}; ferry_producers_fenced_total a {fenced_a}, b {}, c {}; \
         read_committed duplicates 0, read_uncommitted extra records {uncommitted_extra}",
        nodes.fenced("b"),
        nodes.fenced("c")
    );
    nodes.terminate_all();
}

/// Node b is given the partitions while nothing of them is copied yet, reads their progress and is
/// frozen (SIGSTOP) before its claim commits; c takes them over and copies the backlog; b resumes and
/// tries to claim after c's records. The log, not b's stale read, must decide: b is the node fenced
/// (never c) and its claim never counts. Then c dies (kill -9) and b takes every partition from the
/// progress c left: every record arrives once for a `read_committed` reader.
#[test]
fn a_node_frozen_while_it_claims_gives_way_and_only_it_is_fenced() {
    /// The claim is held this long at the failpoint: b is frozen inside the hold, and the hold is over
    /// by the time b resumes (its claim then commits, or fails, at once).
    const HOLD_MS: &str = "12000";
    let started = Instant::now();
    let (east, west) = shared_pair();
    let topic = unique("eos-claim");
    let remote = format!("east.{topic}");
    create_topic(&east.bootstrap, &topic, PARTITIONS, &[]);
    let backlog = 2_000;
    support::produce(&east.bootstrap, &topic, &keyed("r", 0..backlog));
    let mut nodes = Nodes::new(east, west, &topic);
    let failpoint = format!("copier-claim=1*return({HOLD_MS})");
    nodes.start_env("b", &[("FAILPOINTS", &failpoint)]);
    nodes.nodes.get_mut("b").expect("b").wait_log("failpoint copier-claim: holding", ARRIVAL);
    let pid = nodes.nodes["b"].pid().expect("pid");
    support::process::signal(pid, "STOP");
    let stopped = Instant::now();
    nodes.start("c");
    wait_for(ARRIVAL, "c copies the backlog while b is frozen", || {
        assert_alive(nodes.nodes.get_mut("c").expect("c"));
        consume_all(&west.bootstrap, &remote, Duration::from_secs(5)).len() >= backlog
    });
    let took_over = stopped.elapsed();
    support::process::signal(pid, "CONT");
    // b's claim commits (or fails) right after it resumes; then it shares the partitions with c again.
    wait_for(ARRIVAL, "b and c share the partitions after b resumed", || {
        nodes.alive();
        nodes.split_among(&["b", "c"])
    });
    let fenced_by_c = nodes.fenced("c");
    let c_restarts = observe::actor_restarts(nodes.nodes["c"].listen_addr(), FLOW, "copier");
    let (b_log, c_log) = (observe::strip_ansi(&nodes.nodes["b"].log()), observe::strip_ansi(&nodes.nodes["c"].log()));
    // c dies without writing again: b takes its partitions from what the log says of them.
    nodes.nodes.get_mut("c").expect("c").kill9();
    nodes.nodes.remove("c");
    wait_for(ARRIVAL, "b copies every partition after c died", || {
        nodes.alive();
        nodes.split_among(&["b"])
    });
    support::produce(&east.bootstrap, &topic, &keyed("r", backlog..2 * backlog));
    let produced = 2 * backlog;
    let uncommitted_extra = assert_exactly_once(nodes.nodes.get_mut("b").expect("b"), east, west, &topic, produced);
    println!(
        "{produced} records; c took the partitions over {took_over:?} after b froze; c fenced {fenced_by_c} \
         producers, then b fenced {} after c died; c's copier restarts {c_restarts}; read_uncommitted extra \
         records {uncommitted_extra}; {:?} in all",
        nodes.fenced("b"),
        started.elapsed()
    );
    assert!(fenced_by_c >= 1.0, "c fenced b, whose claim was in flight");
    assert!(b_log.contains("fenced: another copier took this node's partitions over"), "b was fenced and says so");
    assert!(!c_log.contains("fenced: another copier"), "c, the rightful owner, was never fenced");
    assert_eq!(c_restarts, 0.0, "c's copier never restarted");
    nodes.terminate_all();
}

/// A node frozen (SIGSTOP) inside a commit, its progress records written and its transaction not ended:
/// the survivor's read of that progress would wait for the transaction until the coordinator aborts it
/// (`transaction.timeout.ms`, 60 s). It fences the frozen writer at once instead: the frozen node's
/// partitions copy again within the session timeout and a few seconds.
#[test]
fn a_writer_frozen_inside_its_commit_does_not_hold_up_the_takeover() {
    /// The session timeout, the rebalance and the takeover.
    const BOUND: Duration = Duration::from_secs(25);
    let started = Instant::now();
    let (east, west) = shared_pair();
    let topic = unique("eos-commit-frozen");
    let remote = format!("east.{topic}");
    create_topic(&east.bootstrap, &topic, PARTITIONS, &[]);
    let stream = KeyedStream::start(&east.bootstrap, &topic, "r");
    let mut nodes = Nodes::new(east, west, &topic);
    nodes.start("s");
    wait_for(ARRIVAL, "s copies everything", || {
        nodes.alive();
        nodes.split_among(&["s"]) && total(&west.bootstrap, &remote) > 0
    });
    let tail = CommittedTail::start(&west.bootstrap, &remote, PARTITIONS);
    // f's 41st commit (it joined, claimed its share and copies under load) holds inside the commit.
    nodes.start_env("f", &[("FAILPOINTS", "copier-commit=40*off->1*return(20000)")]);
    nodes.nodes.get_mut("f").expect("f").wait_log("failpoint copier-commit: holding", ARRIVAL);
    let frozen_parts = nodes.topic_partitions("f");
    assert!(!frozen_parts.is_empty(), "f copies partitions of the topic when it holds inside its commit");
    let pid = nodes.nodes["f"].pid().expect("pid");
    support::process::signal(pid, "STOP");
    let stopped = Instant::now();
    let after_stop = stream.produced();
    let mut resumed_at = None;
    wait_for(Duration::from_secs(120), "new committed records on the frozen node's partitions", || {
        assert_alive(nodes.nodes.get_mut("s").expect("s"));
        resumed_at = tail.first(&frozen_parts, after_stop);
        resumed_at.is_some()
    });
    let resumed = resumed_at.expect("polled").duration_since(stopped);
    support::process::signal(pid, "CONT");
    wait_for(ARRIVAL, "s and f share the partitions after f resumed", || {
        nodes.alive();
        nodes.split_among(&["s", "f"])
    });
    let produced = stream.finish();
    let uncommitted_extra = assert_exactly_once(nodes.nodes.get_mut("s").expect("s"), east, west, &topic, produced);
    println!(
        "{produced} records; f frozen inside its commit with {frozen_parts:?}: s copied them again {resumed:?} after \
         the SIGSTOP; s fenced {}; read_uncommitted extra records {uncommitted_extra}; {:?} in all",
        nodes.fenced("s"),
        started.elapsed()
    );
    assert!(resumed < BOUND, "the takeover took {resumed:?}: more than {BOUND:?}");
    nodes.terminate_all();
}

/// A copier lifetime fails (a panic) on a node that shares the flow with another: it releases its
/// partitions at their committed positions, so the other node takes them without fencing anyone, and the
/// failed node's next lifetime (the same transactional id) is not fenced for it: one failure, one restart.
#[test]
fn a_failed_lifetime_releases_its_partitions_and_costs_one_restart() {
    let started = Instant::now();
    let (east, west) = shared_pair();
    let topic = unique("eos-failed");
    let remote = format!("east.{topic}");
    create_topic(&east.bootstrap, &topic, PARTITIONS, &[]);
    let stream = KeyedStream::start(&east.bootstrap, &topic, "r");
    // f's copier restarts after 3 s: by then s has taken f's partitions (f's consumer left the group).
    let slow_restart = format!(
        "[[flows]]\nsource = \"east\"\ntarget = \"west\"\ntopics = [\"{topic}\"]\n{EXACTLY_ONCE}\
         refresh_topics_interval_seconds = 2\nrestart_backoff_initial_seconds = 3\nrestart_backoff_max_seconds = 3\n"
    );
    let mut nodes = Nodes::with_flow(east, west, &topic, &slow_restart);
    nodes.start("s");
    wait_for(ARRIVAL, "s copies everything", || {
        nodes.alive();
        nodes.split_among(&["s"]) && total(&west.bootstrap, &remote) > 0
    });
    nodes.start_env("f", &[("FAILPOINTS", "copier-poll=300*off->1*panic")]);
    let restarts = |nodes: &Nodes| observe::actor_restarts(nodes.nodes["f"].listen_addr(), FLOW, "copier");
    wait_for(ARRIVAL, "f's copier panics and restarts", || {
        nodes.alive();
        restarts(&nodes) >= 1.0
    });
    wait_for(ARRIVAL, "s and f share the partitions after f's restart", || {
        nodes.alive();
        nodes.split_among(&["s", "f"])
    });
    let produced = stream.finish();
    let uncommitted_extra = assert_exactly_once(nodes.nodes.get_mut("s").expect("s"), east, west, &topic, produced);
    let (f_restarts, s_fenced, f_fenced) = (restarts(&nodes), nodes.fenced("s"), nodes.fenced("f"));
    let f_log = observe::strip_ansi(&nodes.nodes["f"].log());
    println!(
        "{produced} records; f's copier restarts {f_restarts}; fences: by s {s_fenced}, by f {f_fenced}; \
         read_uncommitted extra records {uncommitted_extra}; {:?} in all",
        started.elapsed()
    );
    assert!(f_log.contains("failpoint copier-poll panic"), "f's copier panicked");
    assert_eq!((s_fenced, f_fenced), (0.0, 0.0), "nobody fenced anybody");
    assert_eq!(f_restarts, 1.0, "one failure, one restart of f's copier");
    assert!(f_log.contains("released its partitions at their committed positions"), "f released its partitions");
    nodes.terminate_all();
}

/// Fencing a node fences both of its producers: an exactly-once copier uses two, `<writer>` and
/// `<writer>~1`, one transaction each in turn, so a node taking partitions over from a frozen node must
/// also stop the transaction the frozen node has open on its second. Each producer holds an open
/// transaction with a record; after ferry's fence of the node's writer id neither commits, and a
/// `read_committed` reader sees none of their records.
#[test]
fn fencing_a_node_fences_both_of_its_producers() {
    const WAIT: Duration = Duration::from_secs(30);
    let (east, west) = shared_pair();
    let topic = unique("fence-both");
    create_topic(&west.bootstrap, &topic, 1, &[]);
    let dir = support::flows_dir(east, west, &support::east_west_flow("\"x\"", "delivery = \"exactly_once\""));
    let set = ferry::config::load_dir(dir.path(), ferry::kafka::check_client_properties).expect("valid flows");
    let plan = set.flows.values().next().expect("one flow");
    let writer = format!("ferry.{}.copier.{}", plan.id, unique("node"));
    let ids = [writer.clone(), ferry::flow::copier::transactions::sibling(&writer)];
    let producers: Vec<BaseProducer> = ids
        .iter()
        .map(|id| {
            let p: BaseProducer =
                support::client_config(&west.bootstrap, &[]).set("transactional.id", id).create().expect("producer");
            p.init_transactions(WAIT).expect("init transactions");
            p.begin_transaction().expect("begin");
            p.send(BaseRecord::<[u8], [u8]>::to(&topic).partition(0).payload(id.as_bytes())).expect("send");
            p.flush(WAIT).expect("the record is in the log, its transaction open");
            p
        })
        .collect();
    ferry::flow::copier::transactions::fence(plan, &writer).expect("fence the node");
    for (p, id) in producers.iter().zip(&ids) {
        let outcome = p.commit_transaction(WAIT);
        println!("{id}: commit after the fence: {outcome:?}");
        assert!(outcome.is_err(), "{id} committed after its node was fenced");
    }
    let seen = consume_all(&west.bootstrap, &topic, Duration::from_secs(10));
    assert!(seen.is_empty(), "a read_committed reader sees records of a fenced node: {}", seen.len());
}
