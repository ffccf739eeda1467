//! Takeover from a real MM2: a Java MirrorMaker 2 in dedicated mode (from the jars the harness fetched)
//! mirrors a topic and checkpoints a group for a while and is stopped; ferry then runs the same flow. It must
//! resume copying from the positions MM2 stored in `mm2-offsets.east.internal` on west (copying nothing
//! twice) and continue MM2's checkpoints without moving any partition backwards: neither for a group that
//! committed further meanwhile (its newest checkpoint must be the new commit) nor for one that stayed put.
//!
//! A second takeover happens while a source transaction is open: MM2 (which reads uncommitted records)
//! stored a position past the last stable offset; ferry must wait there for the transaction to end and
//! copy nothing twice, not take the position for a re-created topic and copy the partition again.
//!
//! A third takes over from a Connect-run MM2 by its offsets topic and connector name
//! (`mm2_offsets_topic`, `mm2_source_connector`), from progress records written in Connect's format; a
//! fourth from MM2's connectors on a real Connect distributed worker, and hands the flow back to them.
//!
//! The tests share one east/west pair that no other test binary uses: MM2 creates and uses many internal
//! topics (Connect's offsets, configs and status topics, checkpoints, offset syncs, heartbeats). Each test
//! names the clusters with its own aliases (`east`/`west`, `txeast`/`txwest`), and MM2's herder, Connect
//! group and internal topics, and ferry's flow, all follow the alias: the two never share any of them.

use crate::support;

use support::strip_ansi;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use ferry::mm2::connect_offsets::{
    SOURCE_CONNECTOR, decode_source_key, decode_source_value, encode_source_key, encode_source_value, partition_for_key,
};
use ferry::mm2::records::Checkpoint;
use support::connect::{ConnectWorker, WorkerTopics, mirror_connectors};
use support::observe::{self, metric_sum};
use support::{
    Cluster, Ferry, Mm2, Rec, commit_group_offsets, consume_all, create_topic, dedicated_properties, end_offsets,
    list_topics, produce, shared_pair, topic_partitions, unique, wait_for,
};

const TOPIC: &str = "orders";
const REMOTE: &str = "east.orders";
const GROUP: &str = "takeover-g";
/// A second group that commits once, before MM2 starts, and never again: ferry checkpoints the very
/// position MM2 already checkpointed, and must not publish a smaller downstream offset for it.
const IDLE_GROUP: &str = "takeover-idle";
const IDLE_COMMIT: [i64; 3] = [450, 820, 999];
/// Both groups, as a Java regex for MM2 and a Rust regex for ferry.
const GROUPS: &str = "takeover-.*";
const PARTITIONS: i32 = 3;
const OFFSETS_TOPIC: &str = "mm2-offsets.east.internal";
const CHECKPOINTS_TOPIC: &str = "east.checkpoints.internal";
/// Records copied by MM2, then by ferry.
const N1: usize = 3_000;
const N2: usize = 1_500;
/// G's commits on east before MM2 starts and before ferry starts, per partition (1 000 then 1 500 records
/// per partition): mid-log positions and one at the log end.
const COMMIT_1: [i64; 3] = [600, 750, 1_000];
const COMMIT_2: [i64; 3] = [1_300, 1_100, 1_500];

const READ: Duration = Duration::from_secs(30);

/// Record `i`: partition `i % 3`, a value unique in the test, so that a copy shows up as a duplicate value.
///
/// Timestamped by the producer (now): records older than the default 7-day retention are deleted by the
/// brokers' first retention check, 30 s after they start, even from the active segment, on east and on
/// west (MM2 and ferry keep timestamps), which would make offsets vanish mid-test.
fn records(range: std::ops::Range<usize>) -> Vec<Rec> {
    range
        .map(|i| {
            Rec::new((i % PARTITIONS as usize) as i32, format!("order-{i:06}").as_bytes(), -1)
                .key(format!("k{}", i % 97).as_bytes())
        })
        .collect()
}

fn flows_dir(east: &Cluster, west: &Cluster) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("flows dir");
    let flows = format!(
        "[clusters.east]\nbootstrap_servers = \"{}\"\n[clusters.west]\nbootstrap_servers = \"{}\"\n\n\
         [[flows]]\nsource = \"east\"\ntarget = \"west\"\ntopics = [\"{TOPIC}\"]\ngroups = [\"{GROUPS}\"]\n\
         emit_checkpoints_interval_seconds = 0.5\nrefresh_groups_interval_seconds = 0.5\n\
         refresh_topics_interval_seconds = 1\n",
        east.bootstrap, west.bootstrap
    );
    std::fs::write(dir.path().join("flows.toml"), flows).expect("write flows");
    dir
}

/// Every record of `topic` (empty if it does not exist yet).
fn read_all(bootstrap: &str, topic: &str) -> Vec<Rec> {
    if topic_partitions(bootstrap, topic).is_none() {
        return Vec::new();
    }
    consume_all(bootstrap, topic, READ)
}

/// One record of the Connect offsets topic that stores a copy position of the test topic.
#[derive(Clone, Debug)]
struct Stored {
    /// Partition and offset in the offsets topic.
    at: (i32, i64),
    key: Vec<u8>,
    value: Option<Vec<u8>>,
    /// Source partition of the test topic.
    source_partition: i32,
    /// The decoded value: offset of the last replicated record.
    last: Option<i64>,
}

/// Source-connector records for the test topic in `mm2-offsets.east.internal` on west, in (partition,
/// offset) order of the offsets topic; the second value lists every distinct key of other shapes (the
/// checkpoint and heartbeat connectors' meaningless offsets).
fn stored_progress(west: &Cluster) -> (Vec<Stored>, BTreeSet<String>) {
    stored_progress_of(west, "east", TOPIC)
}

/// [`stored_progress`] of `topic` on a source cluster aliased `source`.
fn stored_progress_of(west: &Cluster, source: &str, topic: &str) -> (Vec<Stored>, BTreeSet<String>) {
    let mut ours = Vec::new();
    let mut others = BTreeSet::new();
    for r in read_all(&west.bootstrap, &format!("mm2-offsets.{source}.internal")) {
        let key = r.key.clone().unwrap_or_default();
        match decode_source_key(&key) {
            Some(k) if k.connector == SOURCE_CONNECTOR && k.cluster == source && k.topic == topic => {
                let last = decode_source_value(r.value.as_deref())
                    .unwrap_or_else(|e| panic!("undecodable value at {}-{}: {e}", r.partition, r.offset));
                ours.push(Stored {
                    at: (r.partition, r.offset),
                    key,
                    value: r.value,
                    source_partition: k.partition,
                    last,
                });
            }
            _ => {
                others.insert(String::from_utf8_lossy(&key).into_owned());
            }
        }
    }
    (ours, others)
}

/// Source partition → last replicated offset, from the newest record of each key. Each key must live in
/// exactly one partition of the offsets topic, otherwise "newest" would be undefined (and Connect, which
/// reads partitions in no particular order, could resume from either).
fn last_positions(stored: &[Stored]) -> BTreeMap<i32, Option<i64>> {
    let mut partition_of: HashMap<i32, i32> = HashMap::new();
    let mut last = BTreeMap::new();
    for s in stored {
        let home = *partition_of.entry(s.source_partition).or_insert(s.at.0);
        assert_eq!(
            home, s.at.0,
            "positions of {TOPIC}-{} are spread over partitions {home} and {} of {OFFSETS_TOPIC}",
            s.source_partition, s.at.0
        );
        last.insert(s.source_partition, s.last);
    }
    last
}

/// Every checkpoint of `group` on west with its offset in the checkpoints topic, oldest first.
fn checkpoints(west: &Cluster, group: &str) -> Vec<(i64, Checkpoint)> {
    checkpoints_in(west, CHECKPOINTS_TOPIC, group)
}

/// [`checkpoints`] in the checkpoints topic `topic`.
fn checkpoints_in(west: &Cluster, topic: &str, group: &str) -> Vec<(i64, Checkpoint)> {
    read_all(&west.bootstrap, topic)
        .into_iter()
        .filter(|r| r.partition == 0)
        .filter_map(|r| {
            Checkpoint::decode(r.key.as_deref().unwrap_or_default(), r.value.as_deref()).ok().map(|c| (r.offset, c))
        })
        .filter(|(_, c)| c.group == group)
        .collect()
}

/// The newest checkpoint per partition of the remote topic.
fn latest<'a>(cps: impl IntoIterator<Item = &'a (i64, Checkpoint)>) -> BTreeMap<i32, Checkpoint> {
    latest_of(cps, REMOTE)
}

/// [`latest`] of the remote topic `remote`.
fn latest_of<'a>(cps: impl IntoIterator<Item = &'a (i64, Checkpoint)>, remote: &str) -> BTreeMap<i32, Checkpoint> {
    cps.into_iter().filter(|(_, c)| c.topic == remote).map(|(_, c)| (c.partition, c.clone())).collect()
}

fn show(cp: &Checkpoint) -> String {
    format!("{}-{} upstream {} -> downstream {}", cp.topic, cp.partition, cp.upstream_offset, cp.downstream_offset)
}

fn values(recs: &[Rec], partition: i32) -> Vec<String> {
    recs.iter()
        .filter(|r| r.partition == partition)
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect()
}

/// Prints both brokers' logs (WARN and above) if the test panics, for diagnosis.
struct BrokerLogsOnPanic<'a>(&'a Cluster, &'a Cluster);

impl Drop for BrokerLogsOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for c in [self.0, self.1] {
                let alive = c.pid().is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists());
                eprintln!(
                    "[{}] broker {} pid {:?} alive {alive}; log ({}):\n{}",
                    c.name,
                    c.bootstrap,
                    c.pid(),
                    c.log_path().display(),
                    support::tail(&c.log(), 40)
                );
            }
        }
    }
}

#[test]
fn ferry_continues_a_stopped_mm2_without_recopying_or_regressing_checkpoints() {
    let t0 = Instant::now();
    let (east, west) = shared_pair();
    let _logs = BrokerLogsOnPanic(east, west);
    println!("clusters up after {:.1?}: east {}, west {}", t0.elapsed(), east.bootstrap, west.bootstrap);
    create_topic(&east.bootstrap, TOPIC, PARTITIONS, &[]);
    produce(&east.bootstrap, TOPIC, &records(0..N1));
    let commit = |group: &str, offsets: [i64; 3]| {
        let offsets: Vec<(&str, i32, i64)> = (0..PARTITIONS).map(|p| (TOPIC, p, offsets[p as usize])).collect();
        commit_group_offsets(&east.bootstrap, group, &offsets);
    };
    commit(GROUP, COMMIT_1);
    commit(IDLE_GROUP, IDLE_COMMIT);
    let per_partition_1 = N1 as i64 / i64::from(PARTITIONS);

    // ---- MM2 mirrors and checkpoints.
    let mut mm2 = Mm2::start(&dedicated_properties(east, west, TOPIC, GROUPS));
    wait_for(Duration::from_secs(90), "MM2 to copy the first records", || {
        mm2.assert_running();
        read_all(&west.bootstrap, REMOTE).len() == N1
    });
    let copied_at = mm2.uptime();
    wait_for(Duration::from_secs(60), "MM2's checkpoints of both groups for every partition", || {
        mm2.assert_running();
        [GROUP, IDLE_GROUP].iter().all(|g| latest(&checkpoints(west, g)).len() == PARTITIONS as usize)
    });
    let checkpointed_at = mm2.uptime();
    wait_for(Duration::from_secs(60), "MM2 to flush source offsets covering every copied record", || {
        mm2.assert_running();
        let last = last_positions(&stored_progress(west).0);
        (0..PARTITIONS).all(|p| last.get(&p) == Some(&Some(per_partition_1 - 1)))
    });
    let flushed_at = mm2.uptime();
    let stop_start = Instant::now();
    let (status, killed) = mm2.stop(Duration::from_secs(60));
    let stop_took = stop_start.elapsed();
    assert!(!killed, "MM2 ignored SIGTERM for 60 s; log tail:\n{}", support::tail(&mm2.log(), 60));
    println!(
        "MM2: all {N1} records on west {copied_at:.1?} after start, checkpoints for all partitions at \
         {checkpointed_at:.1?}, offsets flushed by {flushed_at:.1?}; SIGTERM -> exit ({status}) in {stop_took:.1?}"
    );
    let log = mm2.log();
    println!(
        "MM2 log: {} lines, {} WARN, {} ERROR ({})",
        log.lines().count(),
        log.lines().filter(|l| l.contains("] WARN ")).count(),
        log.lines().filter(|l| l.contains("] ERROR ")).count(),
        mm2.log_path().display()
    );
    println!("topics on east: {:?}", list_topics(&east.bootstrap));
    println!("topics on west: {:?}", list_topics(&west.bootstrap));

    // What MM2 stored, byte for byte, against what ferry computes for the same position.
    let offsets_partitions = topic_partitions(&west.bootstrap, OFFSETS_TOPIC).expect("MM2 created the offsets topic");
    let (mm2_stored, other_keys) = stored_progress(west);
    println!("{OFFSETS_TOPIC}: {offsets_partitions} partitions; other connectors' keys: {other_keys:?}");
    let mm2_positions = last_positions(&mm2_stored);
    for s in &mm2_stored {
        let ours = encode_source_key(SOURCE_CONNECTOR, "east", TOPIC, s.source_partition);
        assert_eq!(
            String::from_utf8_lossy(&s.key),
            String::from_utf8_lossy(&ours),
            "ferry's key for {TOPIC}-{} differs from MM2's",
            s.source_partition
        );
        assert_eq!(
            partition_for_key(&ours, offsets_partitions),
            s.at.0,
            "ferry would put the position of {TOPIC}-{} into another partition than MM2",
            s.source_partition
        );
        let last = s.last.expect("MM2 stores a position");
        assert_eq!(s.value.as_deref(), Some(&encode_source_value(last)[..]), "ferry encodes values like MM2");
    }
    println!("MM2 wrote {} position records; the newest per source partition, and ferry's:", mm2_stored.len());
    for p in 0..PARTITIONS {
        let s = mm2_stored.iter().rfind(|s| s.source_partition == p).expect("a position per partition");
        let key = encode_source_key(SOURCE_CONNECTOR, "east", TOPIC, p);
        println!(
            "  MM2:   {OFFSETS_TOPIC}-{} @{}: key {} value {}\n  ferry: {OFFSETS_TOPIC}-{}:     key {} value {}",
            s.at.0,
            s.at.1,
            String::from_utf8_lossy(&s.key),
            String::from_utf8_lossy(s.value.as_deref().unwrap_or_default()),
            partition_for_key(&key, offsets_partitions),
            String::from_utf8_lossy(&key),
            String::from_utf8_lossy(&encode_source_value(s.last.unwrap_or(-1))),
        );
    }
    println!("MM2's stored positions (last replicated offset): {mm2_positions:?}");

    // Everything from this offset on in the checkpoints topic is ferry's.
    let mm2_end = read_all(&west.bootstrap, CHECKPOINTS_TOPIC).last().map_or(0, |r| r.offset + 1);
    let mut mm2_last = BTreeMap::new();
    for (group, commit) in [(GROUP, COMMIT_1), (IDLE_GROUP, IDLE_COMMIT)] {
        let cps = checkpoints(west, group);
        let last = latest(&cps);
        println!("MM2's {} checkpoints of {group}; the last ones:", cps.len());
        for (p, cp) in &last {
            println!("  {}", show(cp));
            assert_eq!(cp.upstream_offset, commit[*p as usize], "MM2 checkpointed {group}'s commit");
        }
        mm2_last.insert(group, last);
    }

    // ---- More data and a further commit of G while nothing mirrors; then ferry takes over.
    produce(&east.bootstrap, TOPIC, &records(N1..N1 + N2));
    commit(GROUP, COMMIT_2);
    let dir = flows_dir(east, west);
    let ferry_start = Instant::now();
    let mut ferry = Ferry::start(dir.path(), &[]);
    ferry.wait_log("recovered copy progress", Duration::from_secs(60));
    wait_for(Duration::from_secs(60), "ferry to copy the new records", || {
        assert!(ferry.try_status().is_none(), "ferry exited");
        read_all(&west.bootstrap, REMOTE).len() >= N1 + N2
    });
    let ferry_copied_at = ferry_start.elapsed();
    wait_for(Duration::from_secs(60), "ferry's checkpoints of G's new commit", || {
        assert!(ferry.try_status().is_none(), "ferry exited");
        let cps = checkpoints(west, GROUP);
        let newest = latest(cps.iter().filter(|(offset, _)| *offset >= mm2_end));
        (0..PARTITIONS).all(|p| newest.get(&p).is_some_and(|c| c.upstream_offset == COMMIT_2[p as usize]))
    });
    let ferry_checkpointed_at = ferry_start.elapsed();
    // The emission that published G's new commit considered the idle group too (every selected group is
    // translated in each round), and ferry emits once more when it stops.
    ferry.terminate(Duration::from_secs(30));
    println!(
        "ferry: all {} records on west {ferry_copied_at:.1?} after start, checkpoints of G's new commit at \
         {ferry_checkpointed_at:.1?}",
        N1 + N2
    );

    // ---- Copying resumed exactly where MM2 stopped.
    let log = strip_ansi(&ferry.log());
    let recovered = log.lines().find(|l| l.contains("recovered copy progress")).expect("recovery line");
    println!("ferry log: {recovered}");
    // Every partition of TOPIC at least; the count also holds the `*.heartbeats` topics that other tests on
    // this shared pair leave on east and whose progress their flows stored in the same offsets topic. That
    // TOPIC's copy resumed exactly where MM2 stopped is asserted on the records below.
    let recovered_count: i32 = recovered
        .split_whitespace()
        .find_map(|w| w.strip_prefix("partitions=")?.parse().ok())
        .expect("a partitions= count in the recovery line");
    assert!(recovered_count >= PARTITIONS, "ferry recovered every partition: {recovered}");
    let source = consume_all(&east.bootstrap, TOPIC, READ);
    let target = consume_all(&west.bootstrap, REMOTE, READ);
    let distinct: BTreeSet<&[u8]> = target.iter().map(|r| r.value.as_deref().unwrap_or_default()).collect();
    let recopied = target.len() - distinct.len();
    println!("west has {} records, {} distinct: ferry re-copied {recopied}", target.len(), distinct.len());
    assert_eq!(recopied, 0, "ferry copied records MM2 had already copied");
    assert_eq!(target.len(), N1 + N2, "every record exactly once");
    for p in 0..PARTITIONS {
        assert_eq!(values(&target, p), values(&source, p), "partition {p}: same records in the same order");
    }
    // Hence offset k of a partition holds the same record on both clusters: the exact translation is the
    // identity, which bounds every checkpoint below.
    assert!(target.iter().zip(&source).all(|(t, s)| t.offset == s.offset), "offsets line up");

    // ---- Checkpoints continue from MM2's: per partition, never below MM2's last downstream offset (no
    // group went back upstream here), never past the group's position, and G's newest is its new commit.
    for (group, commit) in [(GROUP, COMMIT_2), (IDLE_GROUP, IDLE_COMMIT)] {
        let all = checkpoints(west, group);
        let ferry_cps: Vec<&(i64, Checkpoint)> = all.iter().filter(|(offset, _)| *offset >= mm2_end).collect();
        let mut previous = mm2_last[group].clone();
        for (offset, cp) in &ferry_cps {
            assert_eq!(cp.topic, REMOTE, "checkpoint at {offset}: {}", show(cp));
            let prev = &previous[&cp.partition];
            assert!(cp.upstream_offset >= prev.upstream_offset, "{group} never went back upstream: {}", show(cp));
            assert!(
                cp.downstream_offset >= prev.downstream_offset,
                "{group}: checkpoint at {offset} regresses: {} after {}",
                show(cp),
                show(prev)
            );
            assert!(cp.downstream_offset <= cp.upstream_offset, "{group}: checkpoint at {offset} skips: {}", show(cp));
            previous.insert(cp.partition, cp.clone());
        }
        println!(
            "{group}: ferry published {} checkpoints; the newest of all (a consumer there re-reads):",
            ferry_cps.len()
        );
        for (p, cp) in &latest(&all) {
            let by = if ferry_cps.iter().any(|(_, c)| c == cp) { "ferry" } else { "MM2" };
            println!(
                "  {} by {by} (MM2's last: {}), re-reads {}",
                show(cp),
                show(&mm2_last[group][p]),
                cp.upstream_offset - cp.downstream_offset
            );
            assert_eq!(cp.upstream_offset, commit[*p as usize], "{group}: the newest checkpoint is its commit");
        }
    }
    assert!(
        checkpoints(west, GROUP).iter().any(|(offset, _)| *offset >= mm2_end),
        "ferry checkpointed G after the takeover"
    );

    // ---- And ferry's own positions sit where MM2 (or a restarted MM2) looks for them.
    let (stored, _) = stored_progress(west);
    let positions = last_positions(&stored);
    let per_partition = (N1 + N2) as i64 / i64::from(PARTITIONS);
    println!("stored positions after ferry's graceful stop: {positions:?} ({} records)", stored.len());
    for p in 0..PARTITIONS {
        assert_eq!(positions.get(&p), Some(&Some(per_partition - 1)), "partition {p}: last copied offset");
    }
}

// ---------------------------------------------------------------------------------------------------------
// Takeover during an open source transaction.

const TX_SOURCE: &str = "txeast";
const TX_TARGET: &str = "txwest";
const TX_TOPIC: &str = "payments";
const TX_REMOTE: &str = "txeast.payments";
/// Committed records on partition 0 before the transaction, the transaction's records written while MM2
/// copies and after it stopped, committed records after the commit; and partition 1's records.
const TX_BEFORE: usize = 100;
const TX_OPEN_MM2: usize = 50;
const TX_OPEN_LATER: usize = 10;
const TX_AFTER: usize = 20;
const TX_P1: usize = 20;

/// `{prefix}-{i}` on `partition`, timestamped now, keyed.
fn tx_records(prefix: &str, partition: i32, range: std::ops::Range<usize>) -> Vec<Rec> {
    range.map(|i| Rec::new(partition, format!("{prefix}-{i:04}").as_bytes(), -1).key(b"k")).collect()
}

/// A transaction a producer keeps open (as Flink's exactly-once sink does for a checkpoint interval)
/// until [`OpenTransaction::commit`].
struct OpenTransaction {
    producer: rdkafka::producer::BaseProducer,
}

impl OpenTransaction {
    const TIMEOUT: Duration = Duration::from_secs(30);

    fn begin(bootstrap: &str) -> OpenTransaction {
        use rdkafka::producer::Producer;
        let producer: rdkafka::producer::BaseProducer = support::client_config(bootstrap, &[])
            .set("transactional.id", unique("takeover-open-txn"))
            // Open for the whole test: well past the minutes MM2 and ferry take, below the brokers'
            // transaction.max.timeout.ms (15 min).
            .set("transaction.timeout.ms", "600000")
            .set("acks", "all")
            .create()
            .expect("transactional producer");
        producer.init_transactions(Self::TIMEOUT).expect("init transactions");
        producer.begin_transaction().expect("begin transaction");
        OpenTransaction { producer }
    }

    /// Writes `recs` inside the transaction and waits until the broker has them (uncommitted).
    fn send(&self, topic: &str, recs: &[Rec]) {
        use rdkafka::producer::Producer;
        for r in recs {
            let value = r.value.clone().unwrap_or_default();
            let key = r.key.clone().unwrap_or_default();
            let record = rdkafka::producer::BaseRecord::to(topic).partition(r.partition).payload(&value).key(&key);
            self.producer.send(record).unwrap_or_else(|(e, _)| panic!("send in the transaction: {e}"));
        }
        self.producer.flush(Self::TIMEOUT).expect("flush the transaction's records");
    }

    fn commit(self) {
        use rdkafka::producer::Producer;
        self.producer.commit_transaction(Self::TIMEOUT).expect("commit the transaction");
    }
}

#[test]
fn ferry_takes_over_from_mm2_during_an_open_transaction_without_recopying() {
    let (east, west) = shared_pair();
    let _logs = BrokerLogsOnPanic(east, west);
    create_topic(&east.bootstrap, TX_TOPIC, 2, &[]);
    produce(&east.bootstrap, TX_TOPIC, &tx_records("pay", 0, 0..TX_BEFORE));
    produce(&east.bootstrap, TX_TOPIC, &tx_records("one", 1, 0..TX_P1));
    let txn = OpenTransaction::begin(&east.bootstrap);
    txn.send(TX_TOPIC, &tx_records("tx", 0, 0..TX_OPEN_MM2));
    let hw = support::end_offsets(&east.bootstrap, TX_TOPIC);
    println!(
        "partition 0: {TX_BEFORE} committed records, then an open transaction; end offsets (read_committed) {hw:?}"
    );

    // ---- MM2 (reading uncommitted, its default) copies the open transaction's records too.
    let props = support::mm2::dedicated_properties_as(TX_SOURCE, east, TX_TARGET, west, TX_TOPIC, "no-such-group");
    let mut mm2 = Mm2::start(&props);
    let copied_by_mm2 = TX_BEFORE + TX_OPEN_MM2 + TX_P1;
    wait_for(Duration::from_secs(120), "MM2 to copy every record, the open transaction's too", || {
        mm2.assert_running();
        read_all(&west.bootstrap, TX_REMOTE).len() == copied_by_mm2
    });
    let mm2_last = ((TX_BEFORE + TX_OPEN_MM2) as i64 - 1, TX_P1 as i64 - 1);
    wait_for(Duration::from_secs(60), "MM2 to flush its positions", || {
        mm2.assert_running();
        let last = last_positions(&stored_progress_of(west, TX_SOURCE, TX_TOPIC).0);
        last.get(&0) == Some(&Some(mm2_last.0)) && last.get(&1) == Some(&Some(mm2_last.1))
    });
    let (_, killed) = mm2.stop(Duration::from_secs(60));
    assert!(!killed, "MM2 ignored SIGTERM");
    println!(
        "MM2 stored positions (last copied offset) {mm2_last:?}: partition 0's is past the last stable offset {}",
        TX_BEFORE
    );
    // The transaction goes on while nothing copies.
    txn.send(TX_TOPIC, &tx_records("tx", 0, TX_OPEN_MM2..TX_OPEN_MM2 + TX_OPEN_LATER));

    // ---- ferry takes over while the transaction is still open.
    let dir = tempfile::tempdir().expect("flows dir");
    let flows = format!(
        "[clusters.{TX_SOURCE}]\nbootstrap_servers = \"{}\"\n[clusters.{TX_TARGET}]\nbootstrap_servers = \"{}\"\n\n\
         [[flows]]\nsource = \"{TX_SOURCE}\"\ntarget = \"{TX_TARGET}\"\ntopics = [\"{TX_TOPIC}\"]\n",
        east.bootstrap, west.bootstrap
    );
    std::fs::write(dir.path().join("flows.toml"), flows).expect("write flows");
    let mut ferry = Ferry::start(dir.path(), &[]);
    ferry.wait_log("recovered copy progress", Duration::from_secs(60));
    // Both partitions are probed together: once partition 1 copies, partition 0 has its verdict too.
    produce(&east.bootstrap, TX_TOPIC, &tx_records("one", 1, TX_P1..TX_P1 + 1));
    wait_for(Duration::from_secs(60), "ferry to copy partition 1's new record", || {
        assert!(ferry.try_status().is_none(), "ferry exited");
        read_all(&west.bootstrap, TX_REMOTE).iter().filter(|r| r.partition == 1).count() == TX_P1 + 1
    });
    let addr = ferry.listen_addr();
    let resets = || metric_sum(&observe::metrics(addr), "ferry_source_resets_total", &[("topic", TX_TOPIC)]);
    let on_p0 = read_all(&west.bootstrap, TX_REMOTE).iter().filter(|r| r.partition == 0).count();
    println!("transaction open, ferry copying: partition 0 has {on_p0} records on the target, resets {}", resets());

    // ---- The transaction commits; more committed records follow.
    let committed = Instant::now();
    txn.commit();
    produce(&east.bootstrap, TX_TOPIC, &tx_records("after", 0, 0..TX_AFTER));
    let all = copied_by_mm2 + TX_OPEN_LATER + TX_AFTER + 1;
    wait_for(Duration::from_secs(60), "ferry to copy the rest", || {
        assert!(ferry.try_status().is_none(), "ferry exited");
        read_all(&west.bootstrap, TX_REMOTE).len() >= all
    });
    println!("everything on the target {:.1?} after the commit", committed.elapsed());
    let resets = resets();
    ferry.terminate(Duration::from_secs(30));

    let source = consume_all(&east.bootstrap, TX_TOPIC, READ);
    let target = consume_all(&west.bootstrap, TX_REMOTE, READ);
    let distinct: BTreeSet<&[u8]> = target.iter().map(|r| r.value.as_deref().unwrap_or_default()).collect();
    let recopied = target.len() - distinct.len();
    println!("target: {} records, {} distinct: {recopied} copied twice; resets {resets}", target.len(), distinct.len());
    assert_eq!(recopied, 0, "records copied twice");
    assert_eq!(resets, 0.0, "ferry_source_resets_total");
    assert_eq!(source.len(), all, "committed records on the source");
    for p in 0..2 {
        assert_eq!(values(&target, p), values(&source, p), "partition {p}: every committed record once, in order");
    }
}

/// A Connect-run MM2 (Strimzi's connectors, or `connect-distributed.sh`) keeps its progress in the Connect
/// cluster's own offsets topic under the connector's own name. With `mm2_offsets_topic` and
/// `mm2_source_connector` naming them, ferry resumes from there (copying nothing again) and writes its own
/// progress there, under that name, for the MM2 to resume from. The progress records are written here as
/// Connect writes them (the same key and value bytes the dedicated-mode test above reads from a real MM2);
/// a real Connect worker is not started. Records under the default topic and connector name, which a
/// dedicated MM2 would have written, must be ignored.
#[test]
fn ferry_takes_over_from_a_connect_run_mm2_by_its_topic_and_connector_name_and_hands_back() {
    let (east, west) = shared_pair();
    let (source, target) = ("ceast", "cwest");
    let topic = unique("conn-orders");
    let offsets_topic = unique("connect-cluster-offsets");
    let connector = format!("{source}->{target}.MirrorSourceConnector");
    create_topic(&east.bootstrap, &topic, 2, &[]);
    let recs: Vec<Rec> = (0..200).map(|i| Rec::new(i % 2, format!("c-{i:03}").as_bytes(), -1)).collect();
    produce(&east.bootstrap, &topic, &recs);

    // MM2 copied offsets 0..=59 of each partition; the decoys claim less, elsewhere or under another name.
    let progress = |name: &str, last: i64| -> Vec<Rec> {
        (0..2)
            .map(|p| {
                let key = encode_source_key(name, source, &topic, p);
                Rec::new(partition_for_key(&key, 25), &encode_source_value(last), -1).key(&key)
            })
            .collect()
    };
    create_topic(&west.bootstrap, &offsets_topic, 25, &[("cleanup.policy", "compact")]);
    produce(&west.bootstrap, &offsets_topic, &progress(&connector, 59));
    produce(&west.bootstrap, &offsets_topic, &progress(SOURCE_CONNECTOR, 9));
    let default_topic = format!("mm2-offsets.{source}.internal");
    create_topic(&west.bootstrap, &default_topic, 25, &[("cleanup.policy", "compact")]);
    produce(&west.bootstrap, &default_topic, &progress(SOURCE_CONNECTOR, 19));

    let dir = tempfile::tempdir().expect("flows dir");
    let flows = format!(
        "[clusters.{source}]\nbootstrap_servers = \"{}\"\n[clusters.{target}]\nbootstrap_servers = \"{}\"\n\n\
         [[flows]]\nsource = \"{source}\"\ntarget = \"{target}\"\ntopics = [\"{topic}\"]\ngroups = []\n\
         mm2_offsets_topic = \"{offsets_topic}\"\nmm2_source_connector = \"{connector}\"\n",
        east.bootstrap, west.bootstrap
    );
    std::fs::write(dir.path().join("flows.toml"), flows).expect("write flows");
    let started = Instant::now();
    let mut ferry = Ferry::start(dir.path(), &[]);
    let remote = format!("{source}.{topic}");
    wait_for(Duration::from_secs(90), "the remaining 40 records of each partition copied", || {
        topic_partitions(&west.bootstrap, &remote).is_some() && end_offsets(&west.bootstrap, &remote) == [40, 40]
    });
    println!("resumed from the Connect offsets in {:.1?}", started.elapsed());
    let copied = consume_all(&west.bootstrap, &remote, READ);
    for p in 0..2 {
        let first = copied.iter().find(|r| r.partition == p).and_then(|r| r.value.clone());
        let expected = format!("c-{:03}", 60 * 2 + p as usize);
        assert_eq!(first.as_deref(), Some(expected.as_bytes()), "partition {p} resumes at offset 60");
    }
    assert!(ferry.terminate(Duration::from_secs(30)).success(), "{}", strip_ansi(&ferry.log()));

    // Hand-back: the newest record of each partition under the connector's name says 99, in Connect's
    // topic; the decoys' places got nothing new from ferry.
    let newest = |topic_name: &str, name: &str| -> BTreeMap<i32, Option<i64>> {
        let mut out = BTreeMap::new();
        for r in read_all(&west.bootstrap, topic_name) {
            let Some(k) = r.key.as_deref().and_then(decode_source_key) else { continue };
            if k.connector == name && k.cluster == source && k.topic == topic {
                out.insert(k.partition, decode_source_value(r.value.as_deref()).expect("decodable"));
            }
        }
        out
    };
    assert_eq!(newest(&offsets_topic, &connector), BTreeMap::from([(0, Some(99)), (1, Some(99))]));
    assert_eq!(newest(&offsets_topic, SOURCE_CONNECTOR), BTreeMap::from([(0, Some(9)), (1, Some(9))]));
    assert_eq!(newest(&default_topic, SOURCE_CONNECTOR), BTreeMap::from([(0, Some(19)), (1, Some(19))]));
}

/// MM2 as connectors on a real Kafka Connect distributed worker (as `connect-distributed.sh` or Strimzi
/// run it), its offsets in the worker's `offset.storage.topic` (`connect-offsets-it`, not a dedicated MM2's
/// name) under Strimzi's connector names. MM2 copies and checkpoints, its connectors are stopped the way
/// the README says (`PUT /connectors/NAME/stop`) and the worker with them; ferry takes over by that topic
/// and name, copies what was produced meanwhile and nothing again, and continues the checkpoints without
/// going below MM2's; then ferry stops, the worker starts again, the connectors are resumed, and MM2 copies
/// on from ferry's progress, again without copying anything twice.
#[test]
fn ferry_takes_over_from_mm2_on_a_connect_worker_and_hands_back_to_it() {
    let (east, west) = shared_pair();
    let _logs = BrokerLogsOnPanic(east, west);
    let (source, target) = ("keast", "kwest");
    let topic = unique("k-orders");
    let remote = format!("{source}.{topic}");
    let group = unique("k-group");
    let checkpoints_topic = format!("{source}.checkpoints.internal");
    let worker_topics = WorkerTopics { offsets: "connect-offsets-it".into(), ..WorkerTopics::named("connect-it") };
    const N: [usize; 3] = [600, 300, 150];
    const COMMIT_1: [i64; 3] = [50, 120, 200];
    const COMMIT_2: [i64; 3] = [250, 260, 300];
    create_topic(&east.bootstrap, &topic, PARTITIONS, &[]);
    let batch = |range: std::ops::Range<usize>| -> Vec<Rec> {
        range.map(|i| Rec::new((i % PARTITIONS as usize) as i32, format!("k-{i:05}").as_bytes(), -1)).collect()
    };
    let commit = |offsets: [i64; 3]| {
        let offsets: Vec<(&str, i32, i64)> =
            (0..PARTITIONS).map(|p| (topic.as_str(), p, offsets[p as usize])).collect();
        commit_group_offsets(&east.bootstrap, &group, &offsets);
    };
    // Every record of the remote topic exactly once (a copy shows up as a repeated value), in order.
    let assert_exactly_once = |produced: usize, when: &str| {
        let (source_recs, target_recs) = (read_all(&east.bootstrap, &topic), read_all(&west.bootstrap, &remote));
        let distinct: BTreeSet<&[u8]> = target_recs.iter().map(|r| r.value.as_deref().unwrap_or_default()).collect();
        println!(
            "{when}: {} records on the target, {} distinct, {produced} produced",
            target_recs.len(),
            distinct.len()
        );
        assert_eq!(target_recs.len(), produced, "{when}: every record exactly once, none copied again");
        for p in 0..PARTITIONS {
            assert_eq!(values(&target_recs, p), values(&source_recs, p), "{when}: partition {p} in order");
        }
    };
    let connector_config = mirror_connectors((source, east), (target, west), &topic, &group);
    let connectors: Vec<String> = connector_config.iter().map(|(name, _)| name.clone()).collect();
    let source_connector = connectors[0].clone();
    let stored = |last: i64| {
        let positions: BTreeMap<i32, i64> = read_all(&west.bootstrap, &worker_topics.offsets)
            .into_iter()
            .filter_map(|r| {
                let k = r.key.as_deref().and_then(decode_source_key)?;
                let ours = k.connector == source_connector && k.cluster == source && k.topic == topic;
                ours.then(|| Some((k.partition, decode_source_value(r.value.as_deref()).ok()??)))?
            })
            .collect();
        (0..PARTITIONS).all(|p| positions.get(&p) == Some(&last))
    };
    let per_partition = |n: usize| (n / PARTITIONS as usize) as i64;

    // ---- MM2 on Connect copies and checkpoints.
    produce(&east.bootstrap, &topic, &batch(0..N[0]));
    commit(COMMIT_1);
    let started = Instant::now();
    let mut worker = ConnectWorker::start(west, &worker_topics);
    println!("Connect worker answering at {} after {:.1?}", worker.rest, started.elapsed());
    for (name, config) in &connector_config {
        worker.put_connector(name, config);
    }
    for name in &connectors {
        worker.wait_running(name);
    }
    wait_for(Duration::from_secs(120), "MM2 on Connect to copy the first records", || {
        worker.jvm.assert_running();
        read_all(&west.bootstrap, &remote).len() == N[0]
    });
    wait_for(Duration::from_secs(60), "MM2's checkpoints of the group for every partition", || {
        latest_of(&checkpoints_in(west, &checkpoints_topic, &group), &remote).len() == PARTITIONS as usize
    });
    wait_for(Duration::from_secs(60), "the worker to flush positions covering every copied record", || {
        stored(per_partition(N[0]) - 1)
    });
    for name in &connectors {
        worker.stop_connector(name);
    }
    stop_worker(&mut worker);
    println!("MM2 on Connect copied {} records and checkpointed in {:.1?}; stopped", N[0], started.elapsed());
    assert_exactly_once(N[0], "after MM2");
    let mm2_end = read_all(&west.bootstrap, &checkpoints_topic).last().map_or(0, |r| r.offset + 1);
    let mm2_last = latest_of(&checkpoints_in(west, &checkpoints_topic, &group), &remote);
    for cp in mm2_last.values() {
        println!("  MM2's last checkpoint: {}", show(cp));
    }

    // ---- ferry takes over by the worker's offsets topic and the connector's name.
    produce(&east.bootstrap, &topic, &batch(N[0]..N[0] + N[1]));
    commit(COMMIT_2);
    let dir = tempfile::tempdir().expect("flows dir");
    let flows = format!(
        "[clusters.{source}]\nbootstrap_servers = \"{}\"\n[clusters.{target}]\nbootstrap_servers = \"{}\"\n\n\
         [[flows]]\nsource = \"{source}\"\ntarget = \"{target}\"\ntopics = [\"{topic}\"]\ngroups = [\"{group}\"]\n\
         mm2_offsets_topic = \"{}\"\nmm2_source_connector = \"{source_connector}\"\n\
         emit_checkpoints_interval_seconds = 0.5\nrefresh_groups_interval_seconds = 0.5\n",
        east.bootstrap, west.bootstrap, worker_topics.offsets
    );
    std::fs::write(dir.path().join("flows.toml"), flows).expect("write flows");
    let mut ferry = Ferry::start(dir.path(), &[]);
    ferry.wait_log("recovered copy progress", Duration::from_secs(60));
    let produced = N[0] + N[1];
    wait_for(
        Duration::from_secs(90),
        "ferry to copy the records produced meanwhile, and checkpoint the commit",
        || {
            assert!(ferry.try_status().is_none(), "ferry exited:\n{}", strip_ansi(&ferry.log()));
            let newest = latest_of(&checkpoints_in(west, &checkpoints_topic, &group), &remote);
            end_offsets(&west.bootstrap, &remote).iter().sum::<i64>() >= produced as i64
                && (0..PARTITIONS).all(|p| newest.get(&p).is_some_and(|c| c.upstream_offset == COMMIT_2[p as usize]))
        },
    );
    assert!(ferry.terminate(Duration::from_secs(30)).success(), "{}", strip_ansi(&ferry.log()));
    assert_exactly_once(produced, "after ferry");
    let mut previous = mm2_last.clone();
    let all = checkpoints_in(west, &checkpoints_topic, &group);
    let ferry_cps: Vec<&Checkpoint> = all.iter().filter(|(o, _)| *o >= mm2_end).map(|(_, c)| c).collect();
    assert!(!ferry_cps.is_empty(), "ferry checkpointed the group");
    for cp in ferry_cps.iter().filter(|c| c.topic == remote) {
        let prev = &previous[&cp.partition];
        assert!(cp.downstream_offset >= prev.downstream_offset, "regresses: {} after {}", show(cp), show(prev));
        assert!(cp.downstream_offset <= cp.upstream_offset, "skips: {}", show(cp));
        previous.insert(cp.partition, (*cp).clone());
    }
    println!("ferry published {} checkpoints of the group, none below MM2's", ferry_cps.len());
    assert!(stored(per_partition(produced) - 1), "ferry's positions where the connector reads them");

    // ---- Back to MM2 on Connect: the same worker group and topics, the connectors resumed.
    produce(&east.bootstrap, &topic, &batch(produced..produced + N[2]));
    let produced = produced + N[2];
    let mut worker = ConnectWorker::start(west, &worker_topics);
    for name in &connectors {
        worker.resume_connector(name);
    }
    worker.wait_running(&source_connector);
    wait_for(Duration::from_secs(120), "MM2 on Connect to copy on from ferry's positions", || {
        worker.jvm.assert_running();
        end_offsets(&west.bootstrap, &remote).iter().sum::<i64>() >= produced as i64
    });
    for name in &connectors {
        worker.stop_connector(name);
    }
    stop_worker(&mut worker);
    assert_exactly_once(produced, "after MM2 resumed");
}

/// Stops the Connect worker: SIGTERM, SIGKILL after 60 s. Nothing after depends on a graceful stop (its
/// connectors are stopped and its positions were flushed, both asserted first), and a worker that needs
/// the SIGKILL is Connect's own shutdown, not what this test is about: once in a clean-clone run the
/// herder logged nothing for 60 s after "Kafka Connect stopping" while its group was rebalancing.
fn stop_worker(worker: &mut ConnectWorker) {
    if worker.stop(Duration::from_secs(60)) {
        println!("the Connect worker ignored SIGTERM for 60 s and was killed");
    }
}

/// MM2 with exactly-once source support (KIP-618) and an exactly-once ferry flow take over from each
/// other: MM2 copies, ferry resumes from MM2's committed progress, MM2 resumes from ferry's. A
/// `read_committed` reader of the remote topic sees every record once, in order, across both handovers
/// (its own aliases `eeast`/`ewest`: MM2's herder, Connect group and internal topics are its own).
#[test]
fn mm2_and_ferry_both_exactly_once_take_over_from_each_other_copying_nothing_twice() {
    let (east, west) = shared_pair();
    let _logs = BrokerLogsOnPanic(east, west);
    let (source, target) = ("eeast", "ewest");
    let topic = unique("eos-orders");
    let remote = format!("{source}.{topic}");
    const N: [usize; 3] = [900, 600, 300];
    create_topic(&east.bootstrap, &topic, PARTITIONS, &[]);
    let batch = |range: std::ops::Range<usize>| -> Vec<Rec> {
        range.map(|i| Rec::new((i % PARTITIONS as usize) as i32, format!("e-{i:05}").as_bytes(), -1)).collect()
    };
    let assert_exactly_once = |produced: usize, when: &str| {
        let (source_recs, target_recs) = (read_all(&east.bootstrap, &topic), read_all(&west.bootstrap, &remote));
        let uncommitted = support::consume_all_as(&west.bootstrap, &remote, READ, "read_uncommitted").len();
        println!(
            "{when}: {} records for read_committed, {uncommitted} read_uncommitted, {produced} produced",
            target_recs.len()
        );
        assert_eq!(target_recs.len(), produced, "{when}: every record exactly once for a read_committed reader");
        for p in 0..PARTITIONS {
            assert_eq!(values(&target_recs, p), values(&source_recs, p), "{when}: partition {p} in order");
        }
    };
    let properties = support::mm2::dedicated_properties_as(source, east, target, west, &topic, "none")
        // A worker setting of the target cluster's herder: MM2 takes those with the target's prefix.
        + &format!("{target}.exactly.once.source.support = enabled\n");
    let run_mm2 = |produced: usize, when: &str| {
        let mut mm2 = Mm2::start(&properties);
        wait_for(Duration::from_secs(120), &format!("{when}: MM2 to copy every record"), || {
            mm2.assert_running();
            read_all(&west.bootstrap, &remote).len() >= produced
        });
        let (_, killed) = mm2.stop(Duration::from_secs(60));
        assert!(!killed, "MM2 ignored SIGTERM; log tail:\n{}", support::tail(&mm2.log(), 60));
        // Transactional copies leave commit markers: the remote topic's end offsets pass its records.
        let ends: i64 = end_offsets(&west.bootstrap, &remote).iter().sum();
        let log = mm2.log();
        let eos_lines: Vec<&str> = log.lines().filter(|l| l.to_lowercase().contains("exactly")).take(5).collect();
        println!("{when}: remote end offsets {ends} for {produced} records; MM2 on exactly-once: {eos_lines:#?}");
        assert!(ends > produced as i64, "{when}: MM2 wrote in transactions (commit markers on the remote topic)");
    };

    // ---- MM2, exactly-once.
    produce(&east.bootstrap, &topic, &batch(0..N[0]));
    run_mm2(N[0], "MM2 first");
    assert_exactly_once(N[0], "after MM2");

    // ---- ferry, exactly-once, from MM2's committed progress.
    produce(&east.bootstrap, &topic, &batch(N[0]..N[0] + N[1]));
    let dir = tempfile::tempdir().expect("flows dir");
    let flows = format!(
        "[clusters.{source}]\nbootstrap_servers = \"{}\"\n[clusters.{target}]\nbootstrap_servers = \"{}\"\n\n\
         [[flows]]\nsource = \"{source}\"\ntarget = \"{target}\"\ntopics = [\"{topic}\"]\n\
         delivery = \"exactly_once\"\n",
        east.bootstrap, west.bootstrap
    );
    std::fs::write(dir.path().join("flows.toml"), flows).expect("write flows");
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_for(Duration::from_secs(90), "ferry to copy the records produced meanwhile", || {
        assert!(ferry.try_status().is_none(), "ferry exited:\n{}", strip_ansi(&ferry.log()));
        read_all(&west.bootstrap, &remote).len() >= N[0] + N[1]
    });
    let status = ferry.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status:?}");
    assert_exactly_once(N[0] + N[1], "after ferry");

    // ---- MM2 again, from ferry's committed progress.
    let produced = N[0] + N[1] + N[2];
    produce(&east.bootstrap, &topic, &batch(N[0] + N[1]..produced));
    run_mm2(produced, "MM2 again");
    assert_exactly_once(produced, "after MM2 again");
}
