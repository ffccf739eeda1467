//! Record copying end to end: the `ferry` binary between two real KRaft clusters.

use crate::support;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use support::{Cluster, Ferry, Rec, consume_all, create_topic, produce, shared_pair, topic_partitions, wait_for};

const ARRIVAL: Duration = Duration::from_secs(120);

use support::{east_west_flow as flow, flows_dir};

/// Records of one partition ordered by offset, offsets dropped (they differ between clusters).
fn by_partition(recs: &[Rec]) -> HashMap<i32, Vec<Rec>> {
    let mut out: HashMap<i32, Vec<Rec>> = HashMap::new();
    for r in recs {
        out.entry(r.partition).or_default().push(Rec { offset: -1, ..r.clone() });
    }
    out
}

#[test]
fn ten_thousand_records_arrive_byte_identical_in_partition_order() {
    let (east, west) = shared_pair();
    let topic = "copy-identical";
    create_topic(&east.bootstrap, topic, 3, &[]);
    let base_ts = 1_700_000_000_000_i64;
    let mut recs = Vec::new();
    for i in 0..10_000_i64 {
        let p = (i % 3) as i32;
        let mut r = Rec::new(p, format!("value-{i}").as_bytes(), base_ts + i);
        if i % 7 != 0 {
            r = r.key(format!("key-{}", i % 101).as_bytes()); // every 7th record has a null key
        }
        if i % 5 == 0 {
            // headers keep order, duplicates and null values
            r = r.header("trace", Some(b"a")).header("trace", Some(b"b")).header("empty", None);
        }
        if i == 4_242 {
            r.value = None; // a tombstone
        }
        recs.push(r);
    }
    produce(&east.bootstrap, topic, &recs);

    let dir = flows_dir(east, west, &flow("\"copy-identical\"", ""));
    let mut ferry = Ferry::start(dir.path(), &[]);
    let remote = "east.copy-identical";
    wait_for(ARRIVAL, "10,000 records on west", || count(west, remote) >= 10_000);
    let got = consume_all(&west.bootstrap, remote, Duration::from_secs(30));
    ferry.terminate(Duration::from_secs(30));

    assert_eq!(topic_partitions(&west.bootstrap, remote), Some(3), "remote topic keeps the partition count");
    assert_eq!(got.len(), 10_000, "exactly the source records, no duplicates");
    let sent = by_partition(&consume_all(&east.bootstrap, topic, Duration::from_secs(30)));
    let copied = by_partition(&got);
    for p in 0..3 {
        let (s, c) = (&sent[&p], &copied[&p]);
        assert_eq!(s.len(), c.len(), "partition {p} record count");
        for (i, (a, b)) in s.iter().zip(c.iter()).enumerate() {
            assert_eq!(a, b, "partition {p} record #{i} differs");
        }
    }
    assert!(got.iter().any(|r| r.value.is_none()), "the tombstone arrived as a tombstone");
}

/// Many partitions assigned at once: every one copies from its start. (Assigned at the log end and
/// sought before librdkafka's end lookup answered, a partition was later moved to the end by that
/// lookup's retry: 1,422 of 2,000 partitions never copied a record in the bench.)
#[test]
fn every_partition_of_a_wide_topic_copies_from_its_start() {
    wide_topic_copies_completely("copy-wide", "");
}

/// The same on KIP-848's consumer group protocol (the broker assigns the partitions).
#[test]
fn the_consumer_group_protocol_copies_every_partition() {
    wide_topic_copies_completely("copy-wide-kip848", "group_protocol = \"consumer\"");
}

fn wide_topic_copies_completely(topic: &str, extra: &str) {
    let (east, west) = shared_pair();
    const PARTITIONS: i32 = 400;
    create_topic(&east.bootstrap, topic, PARTITIONS, &[]);
    let recs: Vec<Rec> =
        (0..8_000_i64).map(|i| Rec::new((i % i64::from(PARTITIONS)) as i32, format!("w{i}").as_bytes(), i)).collect();
    produce(&east.bootstrap, topic, &recs);
    let dir = flows_dir(east, west, &flow(&format!("\"{topic}\""), extra));
    let mut ferry = Ferry::start(dir.path(), &[]);
    let remote = &format!("east.{topic}");
    let complete = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // A just-created 400-partition topic answers NotLeader for a moment: count again then.
        let counted = || std::panic::catch_unwind(|| count(west, remote)).unwrap_or(0);
        wait_for(ARRIVAL, "8,000 records on west", || counted() >= 8_000)
    }));
    let got = consume_all(&west.bootstrap, remote, Duration::from_secs(30));
    let per_partition = by_partition(&got);
    let empty = (0..PARTITIONS).filter(|p| !per_partition.contains_key(p)).count();
    assert!(complete.is_ok(), "{} of 8,000 records arrived; {empty} of {PARTITIONS} partitions got none", got.len());
    ferry.terminate(Duration::from_secs(30));
    assert_eq!(got.len(), 8_000);
    assert_eq!(empty, 0);
}

#[test]
fn a_topic_created_after_start_is_mirrored_within_the_refresh_interval() {
    let (east, west) = shared_pair();
    let dir = flows_dir(east, west, &flow("\"late-.*\"", "refresh_topics_interval_seconds = 1"));
    let mut ferry = Ferry::start(dir.path(), &[]);
    ferry.wait_log("node started", Duration::from_secs(30));

    create_topic(&east.bootstrap, "late-arrival", 2, &[]);
    produce(&east.bootstrap, "late-arrival", &[Rec::new(0, b"first", 1), Rec::new(1, b"second", 2)]);
    wait_for(Duration::from_secs(30), "late-arrival mirrored as east.late-arrival", || {
        count(west, "east.late-arrival") == 2
    });
    ferry.terminate(Duration::from_secs(30));
    assert_eq!(topic_partitions(&west.bootstrap, "east.late-arrival"), Some(2));
}

/// Produces records to `topic` in small batches until `stop` is set; returns how many it produced.
/// The stream keeps flowing while the test stops and restarts ferry, so the restart is mid-stream.
fn produce_until_stopped(
    bootstrap: String,
    topic: &'static str,
    partitions: i32,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let batch = 500;
        let mut produced = 0;
        while !stop.load(Ordering::SeqCst) {
            let recs: Vec<Rec> = (produced..produced + batch)
                .map(|i| Rec::new(i as i32 % partitions, format!("r{i}").as_bytes(), 1_000 + i as i64))
                .collect();
            produce(&bootstrap, topic, &recs);
            produced += batch;
            std::thread::sleep(Duration::from_millis(20)); // pace the stream
        }
        produced
    })
}

/// Polls `f` until it holds or `deadline` passes; returns whether it held.
fn poll_until(deadline: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + deadline;
    while std::time::Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    f()
}

/// Records on `topic`, or 0 while ferry has not created it yet.
fn count(cluster: &Cluster, topic: &str) -> usize {
    if topic_partitions(&cluster.bootstrap, topic).is_none() {
        return 0;
    }
    consume_all(&cluster.bootstrap, topic, Duration::from_secs(30)).len()
}

/// How often each produced value arrived on the target.
fn arrival_counts(west: &Cluster, remote: &str) -> HashMap<Vec<u8>, usize> {
    let mut counts = HashMap::new();
    for r in consume_all(&west.bootstrap, remote, Duration::from_secs(30)) {
        *counts.entry(r.value.unwrap_or_default()).or_insert(0) += 1;
    }
    counts
}

/// Restarts ferry mid-stream; returns (records, duplicates, records on the target beyond the persisted
/// progress at the stop).
fn restart_mid_stream(topic: &'static str, graceful: bool) -> (usize, usize, i64) {
    let (east, west) = shared_pair();
    create_topic(&east.bootstrap, topic, 3, &[]);
    let dir = flows_dir(east, west, &flow(&format!("\"{topic}\""), ""));
    let remote = format!("east.{topic}");
    let stop = Arc::new(AtomicBool::new(false));
    let producer = produce_until_stopped(east.bootstrap.clone(), topic, 3, stop.clone());

    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_for(ARRIVAL, "some records copied before the restart", || count(west, &remote) >= 5_000);
    if graceful {
        let status = ferry.terminate(Duration::from_secs(60));
        assert!(status.success(), "graceful stop exits 0: {status:?}\n{}", ferry.log());
    } else {
        ferry.kill9();
    }
    let unpersisted = support::scenario::copied_beyond_persisted(west, topic, &remote);
    assert!(!producer.is_finished(), "the producer keeps going across the restart");
    let before_restart = count(east, topic);
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_for(ARRIVAL, "copying resumed after the restart", || count(west, &remote) >= before_restart);
    stop.store(true, Ordering::SeqCst);
    let total = producer.join().expect("producer thread");
    let mut seen = 0;
    let all_arrived = poll_until(ARRIVAL, || {
        seen = arrival_counts(west, &remote).len();
        seen == total
    });
    assert!(all_arrived, "only {seen} of {total} distinct records arrived after the restart\n{}", ferry.log());
    let status = ferry.terminate(Duration::from_secs(60));
    assert!(status.success(), "{status:?}");

    let counts = arrival_counts(west, &remote);
    assert_eq!(counts.len(), total, "every record arrived");
    let duplicates: usize = counts.values().map(|n| n - 1).sum();
    (total, duplicates, unpersisted)
}

#[test]
fn graceful_restart_mid_stream_copies_every_record_exactly_once() {
    let (total, duplicates, unpersisted) = restart_mid_stream("restart-graceful", true);
    println!("graceful restart: {total} records, {duplicates} duplicates");
    assert_eq!(unpersisted, 0, "a graceful stop persists every acknowledged position");
    assert_eq!(duplicates, 0, "a graceful restart must not copy anything twice");
}

#[test]
fn kill_9_mid_stream_copies_every_record_at_least_once() {
    let (total, duplicates, unpersisted) = restart_mid_stream("restart-kill9", false);
    println!("kill -9 restart: {total} records, {duplicates} duplicates, {unpersisted} copied after the last persist");
    assert!(
        duplicates as i64 <= unpersisted,
        "a kill -9 may duplicate only records acknowledged after the last persist ({unpersisted}), got {duplicates}"
    );
}

// ---------------------------------------------------------------------------------------------------------
// `start_from`: where partitions without stored progress start, and that the start holds across restarts.

/// `prefix-<i>` records on `partition`, timestamped `ts(i)`.
fn numbered(prefix: &str, partition: i32, range: std::ops::Range<i64>, ts: impl Fn(i64) -> i64) -> Vec<Rec> {
    range.map(|i| Rec::new(partition, format!("{prefix}-{i}").as_bytes(), ts(i))).collect()
}

/// The values on `topic`'s `partition` in offset order.
fn partition_values(cluster: &Cluster, topic: &str, partition: i32) -> Vec<String> {
    consume_all(&cluster.bootstrap, topic, Duration::from_secs(30))
        .into_iter()
        .filter(|r| r.partition == partition)
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect()
}

fn names(prefix: &str, range: std::ops::Range<i64>) -> Vec<String> {
    range.map(|i| format!("{prefix}-{i}")).collect()
}

/// Waits until ferry stored a position for each of `partitions` of `topic` (a start it is about to copy
/// from counts: with `start_from` it is persisted before copying begins).
fn wait_stored(west: &Cluster, topic: &str, partitions: i32) -> std::collections::BTreeMap<i32, i64> {
    let mut stored = Default::default();
    wait_for(ARRIVAL, &format!("a stored position for every partition of {topic}"), || {
        if topic_partitions(&west.bootstrap, "mm2-offsets.east.internal").is_none() {
            return false;
        }
        stored = support::scenario::stored_progress(west, topic);
        stored.len() == partitions as usize
    });
    stored
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis() as i64
}

/// Produces `<prefix><p>-<i>` (`i` in `0..n`, timestamped now) to each of `partitions`, then runs ferry
/// until `remote` holds `total` records and stops it gracefully.
fn produce_and_copy(
    (east, west): (&Cluster, &Cluster),
    dir: &std::path::Path,
    (topic, remote): (&str, &str),
    prefix: &str,
    partitions: i32,
    n: i64,
    total: usize,
) {
    for p in 0..partitions {
        produce(&east.bootstrap, topic, &numbered(&format!("{prefix}{p}"), p, 0..n, |i| now_ms() + i));
    }
    let mut ferry = Ferry::start(dir, &[]);
    wait_for(ARRIVAL, &format!("the {prefix} records on {remote}"), || count(west, remote) >= total);
    assert!(ferry.terminate(Duration::from_secs(30)).success(), "{}", ferry.log());
}

/// `start_from = "latest"`: records the source held before are not copied, on partitions with records
/// and on an empty one. A kill -9 before anything was copied does not move the start (it was persisted
/// first): the records produced while ferry was down are all copied. A graceful restart copies nothing
/// twice. The first offset sync of each partition maps its start offset to the remote's offset 0.
#[test]
fn start_from_latest_skips_what_the_source_held_and_keeps_its_start_across_restarts() {
    let (east, west) = shared_pair();
    let topic = "start-latest";
    let remote = "east.start-latest";
    create_topic(&east.bootstrap, topic, 3, &[]);
    let now = now_ms();
    for p in 0..2 {
        produce(&east.bootstrap, topic, &numbered(&format!("old{p}"), p, 0..10, |i| now + i));
    }
    let dir = flows_dir(east, west, &flow("\"start-latest\"", "start_from = \"latest\""));
    let mut ferry = Ferry::start(dir.path(), &[]);
    let starts = wait_stored(west, topic, 3);
    assert_eq!(starts, [(0, 9), (1, 9), (2, -1)].into(), "each partition starts at its end");
    ferry.kill9();

    // Produced while ferry is down, after the start: copied. Then after a graceful stop.
    produce_and_copy((east, west), dir.path(), (topic, remote), "mid", 3, 5, 15);
    produce_and_copy((east, west), dir.path(), (topic, remote), "late", 3, 5, 30);

    for p in 0..3 {
        let mut expected = names(&format!("mid{p}"), 0..5);
        expected.extend(names(&format!("late{p}"), 0..5));
        assert_eq!(partition_values(west, remote, p), expected, "partition {p}: from the start on, each once");
    }
    let syncs = support::scenario::offset_syncs(east, topic);
    for (p, start) in [(0, 10), (1, 10), (2, 0)] {
        let first = syncs.iter().find(|s| s.partition == p).expect("an offset sync per partition");
        assert_eq!((first.upstream_offset, first.downstream_offset), (start, 0), "partition {p}'s first sync");
    }
}

/// `start_from` a time: each partition starts at its first record timestamped at or after it (a record
/// exactly at the time counts), or at its end when it has none; a restart continues from there.
#[test]
fn start_from_a_time_starts_at_the_first_record_at_or_after_it() {
    let (east, west) = shared_pair();
    let topic = "start-time";
    let remote = "east.start-time";
    create_topic(&east.bootstrap, topic, 2, &[]);
    // Whole seconds (the setting's precision here), an hour ago; records from two hours ago on.
    let at = (now_ms() - 3_600_000) / 1000 * 1000;
    let before = |i: i64| at - 3_600_000 + i * 1000;
    produce(&east.bootstrap, topic, &numbered("before0", 0, 0..5, before));
    produce(&east.bootstrap, topic, &numbered("after0", 0, 0..5, |i| at + i * 1000));
    produce(&east.bootstrap, topic, &numbered("before1", 1, 0..5, before));
    let time = std::time::UNIX_EPOCH + Duration::from_millis(at as u64);
    let extra = format!("start_from = \"{}\"", ferry::status::rfc3339(time));
    let dir = flows_dir(east, west, &flow("\"start-time\"", &extra));
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_for(ARRIVAL, "partition 0's records from the time on", || count(west, remote) >= 5);
    assert_eq!(wait_stored(west, topic, 2).get(&1), Some(&4), "partition 1 starts at its end");
    produce(&east.bootstrap, topic, &numbered("new1", 1, 0..3, |i| now_ms() + i));
    wait_for(ARRIVAL, "partition 1's new records", || count(west, remote) >= 8);
    assert!(ferry.terminate(Duration::from_secs(30)).success(), "{}", ferry.log());
    produce_and_copy((east, west), dir.path(), (topic, remote), "late", 2, 3, 14);

    let mut p0 = names("after0", 0..5);
    p0.extend(names("late0", 0..3));
    let mut p1 = names("new1", 0..3);
    p1.extend(names("late1", 0..3));
    assert_eq!(partition_values(west, remote, 0), p0, "partition 0: from the first record at the time on, once");
    assert_eq!(partition_values(west, remote, 1), p1, "partition 1: from its end at the start on, once");
}
