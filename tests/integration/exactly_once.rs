//! Exactly-once delivery (`delivery = "exactly_once"`) end to end, on the shared pair, asserting what a
//! `read_committed` reader of the target sees:
//!
//! - `kill -9` of the node at random moments under load, 10 rounds: every source record exactly once,
//!   in source order per partition, keys, headers and timestamps intact (a `read_uncommitted` reader's
//!   duplicates, the aborted copies, are counted and printed);
//! - a source topic written in transactions, some committed and some aborted: only the committed arrive;
//! - a consumer group failed over from an exactly-once flow re-reads nothing and skips nothing;
//! - `/flows` and `/metrics` show the delivery mode and the transactions.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use support::observe::{self, metric_sum};
use support::scenario::*;
use support::{
    Cluster, Ferry, commit_group_offsets, consume_all, create_topic, produce, shared_pair, unique, wait_for,
};

const EXACTLY_ONCE: &str = "delivery = \"exactly_once\"\n";

/// Keyed records with headers and timestamps, produced in paced batches on a thread until stopped.
struct KeyedStream {
    stop: Arc<AtomicBool>,
    produced: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl KeyedStream {
    fn start(bootstrap: &str, topic: &str, prefix: &str, batch: usize, pause: Duration) -> Self {
        let (stop, produced) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
        let (b, t, p, s, n) =
            (bootstrap.to_string(), topic.to_string(), prefix.to_string(), stop.clone(), produced.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let from = n.load(Ordering::SeqCst);
                produce(&b, &t, &keyed_records(&p, from..from + batch));
                n.store(from + batch, Ordering::SeqCst);
                std::thread::sleep(pause); // pacing, not synchronisation
            }
        });
        Self { stop, produced, thread: Some(thread) }
    }

    fn finish(mut self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take()
            && let Err(e) = t.join()
        {
            std::panic::resume_unwind(e);
        }
        self.produced.load(Ordering::SeqCst)
    }
}

#[test]
fn kill_9_at_random_moments_copies_every_record_exactly_once_for_read_committed_readers() {
    const ROUNDS: usize = 10;
    let (east, west) = shared_pair();
    let topic = unique("eos-kill9");
    let remote = format!("east.{topic}");
    create_topic(&east.bootstrap, &topic, 2, &[]);
    let dir = pair_dir(east, west, &flow("east", "west", &[&topic], EXACTLY_ONCE));
    let stream = KeyedStream::start(&east.bootstrap, &topic, "r", 100, Duration::from_millis(20));
    let mut uncommitted_dups = Vec::new();
    for round in 1..=ROUNDS {
        let before = total(&west.bootstrap, &remote);
        let mut ferry = Ferry::start(dir.path(), &[]);
        wait_for(ARRIVAL, &format!("round {round}: records arriving"), || {
            assert_alive(&mut ferry);
            total(&west.bootstrap, &remote) > before
        });
        std::thread::sleep(random_secs(0.5, 3.0)); // the random moment of the crash: the scenario
        assert_alive(&mut ferry);
        ferry.kill9();
        let committed = consume_all(&west.bootstrap, &remote, READ);
        let mut seen = std::collections::HashSet::new();
        let dups = committed.iter().filter(|r| !seen.insert(r.value.clone())).count();
        assert_eq!(dups, 0, "round {round}: a read_committed reader sees no record twice after a kill -9");
        let all = support::consume_all_as(&west.bootstrap, &remote, READ, "read_uncommitted");
        uncommitted_dups.push(all.len() - committed.len());
    }
    let produced = stream.finish();
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &keyed_values("r", 0..produced));
    let status = ferry.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status:?}");
    let source = per_partition(consume_all(&east.bootstrap, &topic, READ));
    let target = per_partition(consume_all(&west.bootstrap, &remote, READ));
    assert_eq!(source.values().map(Vec::len).sum::<usize>(), produced);
    for (p, recs) in &source {
        let copied = target.get(p).map_or(&[][..], Vec::as_slice);
        assert_eq!(copied.len(), recs.len(), "partition {p}: every record once for a read_committed reader");
        assert!(copied == recs.as_slice(), "partition {p}: the copy is the source, in order, byte for byte");
    }
    let all = support::consume_all_as(&west.bootstrap, &remote, READ, "read_uncommitted");
    println!(
        "{produced} records over {ROUNDS} kill -9 rounds: read_committed duplicates 0; read_uncommitted extra records per round {uncommitted_dups:?}, {} in all",
        all.len() - produced
    );
}

#[test]
fn only_committed_source_transactions_are_copied() {
    let (east, west) = shared_pair();
    let topic = unique("eos-source-txn");
    let remote = format!("east.{topic}");
    create_topic(&east.bootstrap, &topic, 1, &[]);
    let producer: ThreadedProducer<_> = ClientConfig::new()
        .set("bootstrap.servers", &east.bootstrap)
        .set("transactional.id", unique("eos-source-producer"))
        .create()
        .expect("transactional producer");
    producer.init_transactions(Duration::from_secs(30)).expect("init");
    let mut committed = Vec::new();
    for batch in 0..10 {
        producer.begin_transaction().expect("begin");
        for i in 0..20 {
            let value = format!("b{batch}-{i}");
            producer.send(BaseRecord::<[u8], [u8]>::to(&topic).partition(0).payload(value.as_bytes())).expect("send");
            if batch % 3 != 1 {
                committed.push(value.into_bytes());
            }
        }
        if batch % 3 == 1 {
            producer.abort_transaction(Duration::from_secs(30)).expect("abort");
        } else {
            producer.commit_transaction(Duration::from_secs(30)).expect("commit");
        }
    }
    let dir = pair_dir(east, west, &flow("east", "west", &[&topic], EXACTLY_ONCE));
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &committed);
    let all = support::consume_all_as(&west.bootstrap, &remote, READ, "read_uncommitted");
    let values: Vec<Vec<u8>> = all.into_iter().filter_map(|r| r.value).collect();
    assert_eq!(values, committed, "only the committed source records, in order, and nothing of the aborted ones");
    // Visible: the delivery mode and the transactions, in /flows and /metrics.
    let flows = observe::flows(ferry.listen_addr());
    let f = &flows["flows"][FLOW];
    assert_eq!(f["delivery"], "exactly_once", "{f}");
    assert!(f["transactions"]["committed"].as_u64().unwrap_or(0) > 0, "{f}");
    assert!(f["transactions"]["last_commit_at"].is_string(), "{f}");
    let text = observe::metrics(ferry.listen_addr());
    let committed_metric = metric_sum(&text, "ferry_transactions_total", &[("flow", FLOW), ("result", "committed")]);
    assert!(committed_metric > 0.0, "ferry_transactions_total{{result=committed}} counts the commits");
    // Everything is copied: the lag is 0, although the source partition ends with a commit marker that
    // no reader is handed.
    support::scenario::wait_showing(Duration::from_secs(60), "the source lag at 0", || {
        let text = observe::metrics(ferry.listen_addr());
        let lag = metric_sum(&text, "ferry_source_lag_records", &[("flow", FLOW), ("topic", &topic)]);
        let measured = text.contains(&format!("ferry_source_lag_records{{flow=\"{FLOW}\",topic=\"{topic}\"}}"));
        (measured && lag == 0.0, lag)
    });
    let status = ferry.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_group_failed_over_from_an_exactly_once_flow_rereads_nothing_and_skips_nothing() {
    let (east, west) = shared_pair();
    let topic = unique("eos-failover");
    let remote = format!("east.{topic}");
    let group = unique("eos-failover-group");
    create_topic(&east.bootstrap, &topic, 2, &[]);
    let extra = format!(
        "{EXACTLY_ONCE}groups = [\"{group}\"]\nemit_checkpoints_interval_seconds = 1\nrefresh_groups_interval_seconds = 1\n"
    );
    let dir = pair_dir(east, west, &flow("east", "west", &[&topic], &extra));
    let mut ferry = Ferry::start(dir.path(), &[]);
    // Several transactions' worth, so that markers sit between the copies on the target.
    for chunk in 0..5 {
        produce(&east.bootstrap, &topic, &keyed_records("f", chunk * 40..(chunk + 1) * 40));
        std::thread::sleep(Duration::from_millis(150)); // spread over transactions: the scenario
    }
    wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &keyed_values("f", 0..200));
    // The group consumed part of each partition on the source.
    let source = per_partition(consume_all(&east.bootstrap, &topic, READ));
    let at: BTreeMap<i32, i64> = [(0, 37), (1, 61)].into();
    let offsets: Vec<(&str, i32, i64)> = at.iter().map(|(p, o)| (topic.as_str(), *p, *o)).collect();
    commit_group_offsets(&east.bootstrap, &group, &offsets);
    let cps = wait_showing(ARRIVAL, "checkpoints at the group's offsets", || {
        let cps = newest_checkpoints(west, "east", &group);
        let done = at.iter().all(|(p, o)| cps.get(&(remote.clone(), *p)).is_some_and(|(up, _)| up == o));
        (done, (cps, offset_syncs(east, &topic)))
    });
    let (cps, _) = cps;
    let target = consume_all(&west.bootstrap, &remote, READ);
    for (p, o) in &at {
        let (_, downstream) = cps[&(remote.clone(), *p)];
        // What the failed-over group reads from its translated offset, read_committed.
        let resumed: Vec<_> = by_position(target.clone())
            .into_iter()
            .filter(|r| r.partition == *p && r.offset >= downstream)
            .map(|r| r.value)
            .collect();
        let expected: Vec<_> = source[p][*o as usize..].iter().map(|(_, v, _, _)| v.clone()).collect();
        assert_eq!(
            resumed, expected,
            "partition {p}: from checkpoint {o} -> {downstream}, nothing re-read, nothing skipped"
        );
    }
    let status = ferry.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status:?}");
}

/// `--shutdown-timeout` holds for an exactly-once flow whose target went away under load: the commit the
/// stop asks for, and the writing of its progress into a full producer queue, give up at the deadline.
/// (What a read_committed reader sees after the target and the node are back is the ignored test below.)
#[test]
fn an_exactly_once_stop_with_the_target_away_keeps_the_shutdown_timeout() {
    stop_with_the_target_away("eos-stop");
}

/// The same stop; after the target and the node are back, every record once for `read_committed`.
///
/// Ignored: the reproducer of an open defect (docs/guarantees.md, "Known defect"). Under load (about one
/// run in three with three other tests beside it), the node's next lifetime commits records or a progress
/// record of the transaction the stop left open, which the coordinator's abort did not cover: duplicates
/// or a skipped stretch for `read_committed` readers. `scripts/test.sh --ignored exactly_once::after_an`
/// runs it.
#[test]
#[ignore = "reproduces an open exactly-once defect after a stop with the target away (docs/guarantees.md)"]
fn after_an_exactly_once_stop_with_the_target_away_every_record_is_copied_once() {
    let mut stopped = stop_with_the_target_away("eos-stop-once");
    stopped.west.restart();
    let mut ferry = start_stopping_node(stopped.dir.path());
    let (west, remote) = (&stopped.west.bootstrap, stopped.remote.as_str());
    let counts = wait_all_arrived(&mut ferry, west, remote, &keyed_values("r", 0..stopped.produced));
    assert_eq!(
        duplicates(&counts),
        0,
        "records copied twice, the first ten: {}; the copy as runs: {}\n{}",
        where_twice(&stopped.east.bootstrap, &stopped.topic, west, remote, 10),
        support::scenario::runs(consume_all(west, remote, READ)),
        support::tail(&observe::strip_ansi(&ferry.log()), 40)
    );
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

/// What [`stop_with_the_target_away`] leaves: the pair (the target stopped), the flows directory, the
/// remote topic and how many records were produced.
struct Stopped {
    east: Cluster,
    west: Cluster,
    dir: tempfile::TempDir,
    topic: String,
    remote: String,
    produced: usize,
}

/// The `--shutdown-timeout` of the nodes in [`stop_with_the_target_away`].
const STOP_TIMEOUT: Duration = Duration::from_secs(8);

fn start_stopping_node(dir: &std::path::Path) -> Ferry {
    Ferry::start(dir, &["--shutdown-timeout", &STOP_TIMEOUT.as_secs().to_string()])
}

/// An exactly-once flow copying under load on a pair of its own (`tag`), its target stopped, the node
/// stopped with [`STOP_TIMEOUT`]: asserts the stop kept the timeout.
fn stop_with_the_target_away(tag: &str) -> Stopped {
    let (east, mut west) = start_pair(tag);
    let remote = format!("east.{tag}");
    create_topic(&east.bootstrap, tag, 2, &[]);
    let dir = pair_dir(&east, &west, &flow("east", "west", &[tag], EXACTLY_ONCE));
    let stream = KeyedStream::start(&east.bootstrap, tag, "r", 200, Duration::from_millis(10));
    let mut ferry = start_stopping_node(dir.path());
    wait_for(ARRIVAL, "copying under way", || {
        assert_alive(&mut ferry);
        support::topic_partitions(&west.bootstrap, &remote).is_some()
            && consume_all(&west.bootstrap, &remote, Duration::from_secs(5)).len() >= 2_000
    });
    west.stop();
    // The copier keeps fetching while the target is away, until its share of the producer queue is full.
    wait_unhealthy(&mut ferry, FLOW, Duration::from_secs(30));
    let asked = std::time::Instant::now();
    let status = ferry.terminate(Duration::from_secs(180));
    let took = asked.elapsed();
    println!("stopped {took:?} after SIGTERM with --shutdown-timeout {STOP_TIMEOUT:?} and the target away: {status:?}");
    let log = observe::strip_ansi(&ferry.log());
    assert!(
        took < STOP_TIMEOUT + Duration::from_secs(5),
        "the stop took {took:?}, past --shutdown-timeout {STOP_TIMEOUT:?}:\n{}",
        support::tail(&log, 30)
    );
    // The node gives up on a flow at the timeout; the flow itself (its copier's commit) kept it.
    assert!(
        !log.contains("did not stop within the shutdown timeout"),
        "the flow outlived the shutdown timeout:\n{}",
        support::tail(&log, 30)
    );
    let produced = stream.finish();
    Stopped { east, west, dir, topic: tag.to_string(), remote, produced }
}
