//! Hardening: paths where ferry lost records silently, stalled a whole flow on one bad item, or waited
//! for ever on input MM2 handles. Each test asserts what an operator sees (records on the target, the
//! published checkpoints, `/flows` and `/metrics`), against real brokers.
//!
//! - a source topic deleted and created again, while ferry is stopped and while it runs;
//! - records near and above the size limit: copied when the target takes them, a named per-partition
//!   failure when it does not, the other partitions copying on;
//! - a remote topic name that collides on the target: only that topic waits;
//! - a consumer group whose offsets cannot be read: only that group waits; a group deleted on the
//!   source is forgotten and never re-created on the target;
//! - internal topics that end with a transaction marker (MM2 with exactly-once source support);
//! - SIGTERM while the target cluster is away;
//! - offset gaps that lose nothing (transaction markers, aborted transactions, compaction) cost no probe
//!   query, and a failed probe query is asked again without restarting the copier.

use crate::support;

use std::time::{Duration, Instant};

use ferry::mm2::connect_offsets::{self, SOURCE_CONNECTOR};
use ferry::mm2::records::{Checkpoint, OffsetSync};
use support::observe::{self, actor_restarts, flow_actors, health, metric_sum};
use support::scenario::*;
use support::{
    Ferry, Rec, commit_group_offsets, consume_all, create_topic, delete_group, delete_topic, end_offsets,
    group_offsets, produce, produce_transactional, set_topic_configs, shared_pair, unique, wait_for,
};

/// `/flows` entry of `flow`.
fn flow_status(ferry: &Ferry, flow: &str) -> serde_json::Value {
    health(ferry.listen_addr())["flows"][flow].clone()
}

fn metric(ferry: &Ferry, name: &str, labels: &[(&str, &str)]) -> f64 {
    metric_sum(&observe::metrics(ferry.listen_addr()), name, labels)
}

// ---------------------------------------------------------------------------------------------------------
// 1. A deleted and re-created source topic is copied completely
// ---------------------------------------------------------------------------------------------------------

/// Copies 1,000 records per partition of a fresh topic (2 partitions); returns the running node.
fn copy_old_topic(tag: &str, extra: &str) -> (Ferry, tempfile::TempDir, String) {
    let (east, west) = shared_pair();
    let topic = unique(tag);
    create_topic(&east.bootstrap, &topic, 2, &[]);
    produce(&east.bootstrap, &topic, &records("old", 0..2_000, 2));
    let dir = pair_dir(east, west, &flow("east", "west", &[&topic], extra));
    let mut ferry = Ferry::start(dir.path(), &[]);
    let remote = format!("east.{topic}");
    wait_for(ARRIVAL, "the old topic copied", || {
        assert_alive(&mut ferry);
        total(&west.bootstrap, &remote) == 2_000
    });
    (ferry, dir, topic)
}

/// Deletes `topic` on east, creates it again and writes 5,000 new records (more than the old topic had,
/// so that a position of the old topic lies inside the new one).
fn recreate_with_new_records(topic: &str) {
    let (east, _) = shared_pair();
    delete_topic(&east.bootstrap, topic);
    create_topic(&east.bootstrap, topic, 2, &[]);
    produce(&east.bootstrap, topic, &records("new", 0..5_000, 2));
}

fn old_and_new() -> Vec<Vec<u8>> {
    let mut expected = values("old", 0..2_000);
    expected.extend(values("new", 0..5_000));
    expected
}

fn assert_reset_reported(ferry: &Ferry, topic: &str) {
    let resets = metric(ferry, "ferry_source_resets_total", &[("flow", FLOW), ("topic", topic)]);
    assert_eq!(resets, 2.0, "each re-created partition is counted once");
    let log = observe::strip_ansi(&ferry.log());
    let line = log
        .lines()
        .find(|l| l.contains("source partition reset") && l.contains(topic))
        .unwrap_or_else(|| panic!("the reset is logged; log:\n{}", support::tail(&log, 40)));
    println!("{line}");
    assert!(line.contains("re-created"), "the log says why: {line}");
}

#[test]
fn a_source_topic_recreated_while_ferry_is_stopped_is_copied_completely() {
    let (_, west) = shared_pair();
    let (mut ferry, dir, topic) = copy_old_topic("recreated-stopped", "");
    assert!(ferry.terminate(Duration::from_secs(30)).success());
    recreate_with_new_records(&topic);
    let remote = format!("east.{topic}");
    let started = Instant::now();
    let mut ferry = Ferry::start(dir.path(), &[]);
    let counts = wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &old_and_new());
    println!("7,000 distinct records on {remote} {:?} after the restart", started.elapsed());
    assert_eq!(counts.len(), 7_000, "the old records stay, every new one arrives");
    assert_eq!(duplicates(&counts), 0, "the new topic is copied from its start, once");
    assert_reset_reported(&ferry, &topic);
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

#[test]
fn a_source_topic_recreated_while_ferry_runs_is_copied_completely() {
    let (_, west) = shared_pair();
    // The default refresh interval (600 s): the copier notices by itself, not through the topic sync.
    let (mut ferry, _dir, topic) = copy_old_topic("recreated-running", "");
    recreate_with_new_records(&topic);
    let remote = format!("east.{topic}");
    let started = Instant::now();
    let counts = wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &old_and_new());
    println!(
        "7,000 distinct records on {remote} {:?} after the re-creation, {} duplicates",
        started.elapsed(),
        duplicates(&counts)
    );
    assert_eq!(counts.len(), 7_000, "the old records stay, every new one arrives");
    assert_reset_reported(&ferry, &topic);
    assert_eq!(actor_restarts(ferry.listen_addr(), FLOW, "copier"), 0.0);
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

#[test]
fn a_recreated_source_topic_stops_its_partitions_with_on_source_gap_fail() {
    let (_, west) = shared_pair();
    let (mut ferry, dir, topic) = copy_old_topic("recreated-fail", "on_source_gap = \"fail\"\n");
    assert!(ferry.terminate(Duration::from_secs(30)).success());
    recreate_with_new_records(&topic);
    let mut ferry = Ferry::start(dir.path(), &[]);
    ferry.wait_log("node started", STARTED);
    let mut problems = Vec::new();
    wait_for(Duration::from_secs(60), "both partitions stopped in /flows", || {
        assert_alive(&mut ferry);
        problems = flow_status(&ferry, FLOW)["partition_problems"].as_array().cloned().unwrap_or_default();
        problems.iter().filter(|p| p["topic"] == topic.as_str() && p["state"] == "stopped").count() == 2
    });
    println!("{problems:#?}");
    assert!(problems.iter().all(|p| p["reason"].as_str().is_some_and(|r| r.contains("re-created"))));
    assert_eq!(total(&west.bootstrap, &format!("east.{topic}")), 2_000, "nothing of the new topic copied");
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

// ---------------------------------------------------------------------------------------------------------
// 2. Records near the size limit
// ---------------------------------------------------------------------------------------------------------

/// `size` bytes starting with `tag`, the rest pseudo-random: compression cannot shrink it below the
/// limits under test.
fn big(tag: &str, size: usize) -> Vec<u8> {
    let mut v = tag.as_bytes().to_vec();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    while v.len() < size {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(size);
    v
}

#[test]
fn a_record_above_one_megabyte_is_copied_byte_identical() {
    let (east, west) = shared_pair();
    let topic = unique("big-record");
    let remote = format!("east.{topic}");
    create_topic(&east.bootstrap, &topic, 1, &[("max.message.bytes", "2000000")]);
    let payload = big("big-", 1_040_000);
    produce(
        &east.bootstrap,
        &topic,
        &[Rec::new(0, b"before", 1), Rec::new(0, &payload, 2).key(b"k"), Rec::new(0, b"after", 3)],
    );
    let dir = pair_dir(east, west, &flow("east", "west", &[&topic], ""));
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_for(ARRIVAL, "the three records copied", || {
        assert_alive(&mut ferry);
        end_offsets(&west.bootstrap, &remote) == [3]
    });
    let got = consume_all(&west.bootstrap, &remote, READ);
    assert_eq!(got[1].value.as_deref(), Some(&payload[..]), "1,040,000 bytes arrive byte-identical");
    assert_eq!(got[1].key.as_deref(), Some(&b"k"[..]));
    assert_eq!(actor_restarts(ferry.listen_addr(), FLOW, "copier"), 0.0);
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

#[test]
fn a_record_the_target_refuses_fails_only_its_partition_visibly() {
    refused_record_fails_only_its_partition("");
}

/// The same with exactly-once delivery: the refused record's transaction is aborted, its partition is
/// held and retried alone, and the other partition goes on copying and committing meanwhile; every
/// record arrives once for a `read_committed` reader.
#[test]
fn an_exactly_once_flow_holds_only_the_partition_of_a_refused_record() {
    refused_record_fails_only_its_partition("delivery = \"exactly_once\"\n");
}

fn refused_record_fails_only_its_partition(delivery: &str) {
    let exactly_once = !delivery.is_empty();
    let (east, west) = shared_pair();
    let topic = unique("refused-record");
    let remote = format!("east.{topic}");
    create_topic(&east.bootstrap, &topic, 2, &[("max.message.bytes", "2000000")]);
    // The remote topic exists with a smaller limit, and config sync is off: the target refuses the record.
    create_topic(&west.bootstrap, &remote, 2, &[("max.message.bytes", "100000")]);
    let mut recs: Vec<Rec> = (0..10).map(|i| Rec::new(0, format!("p0-{i}").as_bytes(), i)).collect();
    recs.push(Rec::new(0, &big("p0-10", 300_000), 10));
    recs.extend((11..21).map(|i| Rec::new(0, format!("p0-{i}").as_bytes(), i)));
    recs.extend((0..100).map(|i| Rec::new(1, format!("p1-{i}").as_bytes(), i)));
    produce(&east.bootstrap, &topic, &recs);
    let extra = format!("sync_topic_configs_enabled = false\n{delivery}");
    let dir = pair_dir(east, west, &flow("east", "west", &[&topic], &extra));
    let mut ferry = Ferry::start(dir.path(), &[]);
    ferry.wait_log("node started", STARTED);
    let mut problem = serde_json::Value::Null;
    wait_for(ARRIVAL, "partition 1 copied and partition 0's failure in /flows", || {
        assert_alive(&mut ferry);
        problem = flow_status(&ferry, FLOW)["partition_problems"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["topic"] == topic.as_str()).cloned())
            .unwrap_or_default();
        // The target refuses whole batches; ferry then sends record by record until it names the one.
        // (Counted as a reader sees them: an exactly-once flow's aborted copies and markers take offsets.)
        problem["offset"] == 10
            && consume_all(&west.bootstrap, &remote, READ).iter().filter(|r| r.partition == 1).count() == 100
    });
    println!("partition problem: {problem}");
    assert_eq!(problem["partition"], 0);
    assert_eq!(problem["offset"], 10, "names the refused record's offset");
    assert!(problem["size"].as_u64().is_some_and(|s| s >= 300_000), "names its size: {problem}");
    let reason = problem["reason"].as_str().unwrap_or_default().to_lowercase();
    assert!(reason.contains("too large"), "{reason}");
    let values: Vec<Vec<u8>> = consume_all(&west.bootstrap, &remote, READ)
        .into_iter()
        .filter(|r| r.partition == 0)
        .filter_map(|r| r.value)
        .collect();
    assert!(values.iter().all(|v| v.len() < 1_000), "nothing past the refused record is counted as copied");
    assert!(metric(&ferry, "ferry_partition_failures_total", &[("flow", FLOW), ("topic", &topic)]) >= 1.0);
    assert_eq!(metric(&ferry, "ferry_partitions_failing", &[("flow", FLOW)]), 1.0);
    assert_eq!(actor_restarts(ferry.listen_addr(), FLOW, "copier"), 0.0, "the copier itself never restarts");
    let copier = flow_actors(&health(ferry.listen_addr()), FLOW).remove("copier").expect("copier");
    assert_eq!(copier.state, "degraded", "{copier:?}");
    // The other partition goes on copying while this one is held.
    let more: Vec<Rec> = (100..150).map(|i| Rec::new(1, format!("p1-{i}").as_bytes(), i)).collect();
    produce(&east.bootstrap, &topic, &more);
    wait_for(ARRIVAL, "partition 1's new records copied while partition 0 is held", || {
        assert_alive(&mut ferry);
        end_offsets(&west.bootstrap, &remote).get(1).is_some_and(|e| *e >= 150)
            && consume_all(&west.bootstrap, &remote, READ).iter().filter(|r| r.partition == 1).count() == 150
    });
    assert_eq!(metric(&ferry, "ferry_partitions_failing", &[("flow", FLOW)]), 1.0, "partition 0 is still held");

    // The operator raises the remote topic's limit: the partition's retry copies the rest.
    set_topic_configs(&west.bootstrap, &remote, &[("max.message.bytes", "2000000")]);
    let mut expected: Vec<Vec<u8>> = recs.iter().filter_map(|r| r.value.clone()).collect();
    expected.extend(more.iter().filter_map(|r| r.value.clone()));
    let counts = wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &expected);
    assert_eq!(counts.len(), 171);
    if exactly_once {
        assert_eq!(duplicates(&counts), 0, "every record once for a read_committed reader");
        assert_eq!(actor_restarts(ferry.listen_addr(), FLOW, "copier"), 0.0, "the copier never restarted");
    }
    wait_for(Duration::from_secs(30), "the problem cleared", || {
        flow_status(&ferry, FLOW)["partition_problems"].as_array().is_some_and(Vec::is_empty)
            && metric(&ferry, "ferry_partitions_failing", &[("flow", FLOW)]) == 0.0
    });
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

// ---------------------------------------------------------------------------------------------------------
// 3. One bad topic or group stalls nothing else
// ---------------------------------------------------------------------------------------------------------

#[test]
fn a_remote_name_collision_holds_back_only_its_topic() {
    let (east, west) = shared_pair();
    let base = unique("collide");
    let (clashing, ok, late) = (format!("{base}_y"), format!("{base}-ok"), format!("{base}-late"));
    // On the target, `east.<base>.y` collides with `east.<base>_y` (Kafka treats `.` and `_` alike).
    create_topic(&west.bootstrap, &format!("east.{base}.y"), 1, &[]);
    for t in [&clashing, &ok] {
        create_topic(&east.bootstrap, t, 1, &[]);
        produce(&east.bootstrap, t, &records(t, 0..10, 1));
    }
    let pattern = format!("{base}.*");
    let dir = pair_dir(east, west, &flow("east", "west", &[&pattern], "refresh_topics_interval_seconds = 1\n"));
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_for(ARRIVAL, "the other topic copied", || {
        assert_alive(&mut ferry);
        total(&west.bootstrap, &format!("east.{ok}")) == 10
    });
    create_topic(&east.bootstrap, &late, 1, &[]);
    produce(&east.bootstrap, &late, &records(&late, 0..10, 1));
    wait_for(ARRIVAL, "a topic created after the collision copied too", || {
        assert_alive(&mut ferry);
        total(&west.bootstrap, &format!("east.{late}")) == 10
    });
    let errors = flow_status(&ferry, FLOW)["topic_errors"].clone();
    println!("topic errors: {errors}");
    let reason = errors[&clashing]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("collides") && reason.contains(&format!("east.{base}.y")), "{errors}");
    assert!(metric(&ferry, "ferry_topic_errors_total", &[("flow", FLOW), ("topic", &clashing)]) >= 1.0);
    assert_eq!(flow_status(&ferry, FLOW)["state"], "degraded");
    assert_eq!(actor_restarts(ferry.listen_addr(), FLOW, "topics"), 0.0);
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

#[test]
fn a_group_whose_offsets_cannot_be_read_holds_back_only_itself() {
    let (east, west) = shared_pair();
    let topic = unique("group-errors");
    let remote = format!("east.{topic}");
    let (good, bad) = (format!("{topic}-good"), format!("{topic}-bad"));
    create_topic(&east.bootstrap, &topic, 1, &[]);
    produce(&east.bootstrap, &topic, &records("g", 0..100, 1));
    for g in [&good, &bad] {
        commit_group_offsets(&east.bootstrap, g, &[(&topic, 0, 60)]);
    }
    let extra = format!(
        "groups = [\"{good}\", \"{bad}\"]\nemit_checkpoints_interval_seconds = 0.5\nrefresh_groups_interval_seconds = 0.5\n\
         sync_group_offsets_enabled = true\nsync_group_offsets_interval_seconds = 0.5\n"
    );
    let dir = pair_dir(east, west, &flow("east", "west", &[&topic], &extra));
    let failpoint = format!("checkpoints-group-offsets=return({bad})");
    let mut ferry = Ferry::start_env(dir.path(), &[], &[("FAILPOINTS", &failpoint)]);
    wait_for(ARRIVAL, "the good group's checkpoint", || {
        assert_alive(&mut ferry);
        checkpoints(west, &good).iter().any(|c| c.topic == remote && c.upstream_offset == 60)
    });
    wait_for(Duration::from_secs(30), "the bad group's error in /flows", || {
        flow_status(&ferry, FLOW)["group_errors"][&bad]["count"].as_u64().is_some_and(|n| n >= 2)
    });
    assert!(checkpoints(west, &bad).is_empty(), "no checkpoint for the group that cannot be read");
    assert!(metric(&ferry, "ferry_group_errors_total", &[("flow", FLOW), ("group", &bad)]) >= 2.0);
    assert_eq!(actor_restarts(ferry.listen_addr(), FLOW, "checkpoints"), 0.0, "the computer itself never restarts");
    println!("group errors: {}", flow_status(&ferry, FLOW)["group_errors"]);

    // The good group is synced to the (idle) target group; then an operator deletes it on both sides.
    wait_for(ARRIVAL, "the good group's offsets committed on west", || {
        group_offsets(&west.bootstrap, &good, &[(&remote, 0)]) == [Some(60)]
    });
    delete_group(&east.bootstrap, &good);
    wait_for(ARRIVAL, "the group forgotten", || {
        assert_alive(&mut ferry);
        observe::strip_ansi(&ferry.log())
            .lines()
            .any(|l| l.contains("consumer group gone from the source") && l.contains(&format!("group={good}")))
    });
    delete_group(&west.bootstrap, &good);
    // An observation window of many sync rounds (0.5 s each): the group must not come back on west.
    let window = Instant::now();
    while window.elapsed() < Duration::from_secs(5) {
        assert_eq!(
            group_offsets(&west.bootstrap, &good, &[(&remote, 0)]),
            [None],
            "a group deleted on the source is not re-created on the target"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

// ---------------------------------------------------------------------------------------------------------
// 4. Internal topics that end with a transaction marker
// ---------------------------------------------------------------------------------------------------------

#[test]
fn internal_topics_ending_in_a_transaction_marker_are_read_at_once() {
    // Dedicated clusters: this test writes the flow's internal topics itself.
    let (east, west) = start_pair("txn-marker");
    let topic = "orders";
    let group = "billing";
    create_topic(&east.bootstrap, topic, 1, &[]);
    produce(&east.bootstrap, topic, &records("t", 0..1_000, 1));
    commit_group_offsets(&east.bootstrap, group, &[(topic, 0, 800)]);

    // As MM2 with exactly-once source support writes them: transactions, each partition ending with a
    // commit marker.
    let offsets_topic = connect_offsets::offsets_topic("east");
    create_topic(&west.bootstrap, &offsets_topic, 25, &[("cleanup.policy", "compact")]);
    let key = connect_offsets::encode_source_key(SOURCE_CONNECTOR, "east", topic, 0);
    let partition = connect_offsets::partition_for_key(&key, 25);
    let progress = Rec::new(partition, &connect_offsets::encode_source_value(499), -1).key(&key);
    produce_transactional(&west.bootstrap, &offsets_topic, &[progress]);

    create_topic(&west.bootstrap, "east.checkpoints.internal", 1, &[("cleanup.policy", "compact")]);
    let cp = Checkpoint {
        group: "earlier".into(),
        topic: "east.orders".into(),
        partition: 0,
        upstream_offset: 10,
        downstream_offset: 10,
        metadata: String::new(),
    };
    let (k, v) = cp.encode().expect("encode checkpoint");
    produce_transactional(&west.bootstrap, "east.checkpoints.internal", &[Rec::new(0, &v, -1).key(&k)]);

    create_topic(&east.bootstrap, "mm2-offset-syncs.west.internal", 1, &[("cleanup.policy", "compact")]);
    let sync = OffsetSync { topic: "other".into(), partition: 0, upstream_offset: 5, downstream_offset: 5 };
    let k = sync.encode_key().expect("encode sync");
    produce_transactional(
        &east.bootstrap,
        "mm2-offset-syncs.west.internal",
        &[Rec::new(0, &sync.encode_value(), -1).key(&k)],
    );

    let extra =
        format!("groups = [\"{group}\"]\nemit_checkpoints_interval_seconds = 1\nrefresh_groups_interval_seconds = 1\n");
    let dir = pair_dir(&east, &west, &flow("east", "west", &[topic], &extra));
    let started = Instant::now();
    let mut ferry = Ferry::start(dir.path(), &[]);
    // Before the fix each read waited 120 s for a record at the marker's offset and failed.
    let limit = Duration::from_secs(40);
    wait_for(limit, "copying from the stored position 500", || {
        assert_alive(&mut ferry);
        end_offsets(&west.bootstrap, "east.orders") == [500]
    });
    let copied = consume_all(&west.bootstrap, "east.orders", READ);
    assert_eq!(copied[0].value.as_deref(), Some(&b"t500"[..]), "resumed after MM2's stored offset 499");
    wait_for(limit, "a checkpoint of the group", || {
        checkpoints(&west, group).iter().any(|c| c.upstream_offset == 800 && c.downstream_offset == 300)
    });
    println!("copying and checkpointing {:?} after start", started.elapsed());
    assert!(!ferry.log().contains("no progress"), "no read timed out");
    assert_eq!(actor_restarts(ferry.listen_addr(), FLOW, "copier"), 0.0);
    assert_eq!(actor_restarts(ferry.listen_addr(), FLOW, "checkpoints"), 0.0);
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

// ---------------------------------------------------------------------------------------------------------
// 5. SIGTERM while the target is away
// ---------------------------------------------------------------------------------------------------------

#[test]
fn sigterm_while_the_target_is_away_exits_within_the_deadline_and_loses_nothing() {
    let (east, mut west) = start_pair("sigterm-away");
    let topic = "events";
    let remote = "east.events";
    create_topic(&east.bootstrap, topic, 3, &[]);
    // A small producer queue, so that it is full while the target is away.
    let clusters = [("east", east.bootstrap.as_str()), ("west", west.bootstrap.as_str())];
    let dir = flows_dir(&clusters, &flow("east", "west", &[topic], ""));
    let client = "[clusters.west.client]\n\"queue.buffering.max.messages\" = 2000\n";
    let path = dir.path().join("clusters.toml");
    let text = std::fs::read_to_string(&path).expect("clusters.toml") + client;
    std::fs::write(&path, text).expect("write clusters.toml");
    let stream = Stream::start(&east.bootstrap, topic, 3, "s", 200, Duration::from_millis(20));
    let mut ferry = Ferry::start(dir.path(), &["--shutdown-timeout", "10"]);
    wait_for(ARRIVAL, "copying", || {
        assert_alive(&mut ferry);
        total(&west.bootstrap, remote) > 5_000
    });
    west.stop();
    wait_unhealthy(&mut ferry, FLOW, Duration::from_secs(60));
    // Keep the source busy until the copier is stuck on its full producer queue.
    let copied_so_far = stream.produced();
    wait_for(Duration::from_secs(30), "more records on the source while the target is away", || {
        stream.produced() > copied_so_far + 5_000
    });

    let t0 = Instant::now();
    let status = ferry.terminate(Duration::from_secs(30));
    let took = t0.elapsed();
    println!("SIGTERM with the target away: exited {status:?} after {took:?} (deadline 10 s)");
    assert!(took <= Duration::from_secs(12), "a stop is honoured within --shutdown-timeout: {took:?}");
    assert!(status.success(), "{status:?}");
    let log = ferry.log();
    assert!(log.contains("stopping: draining flows"));

    let produced = stream.finish();
    west.restart();
    let unpersisted = copied_beyond_persisted(&west, topic, remote);
    let stored = stored_progress(&west, topic);
    let ends = end_offsets(&west.bootstrap, remote);
    println!("after the stop: stored progress {stored:?}, target ends {ends:?}");
    for (p, end) in ends.iter().enumerate() {
        let next = stored.get(&(p as i32)).map_or(0, |l| l + 1);
        assert!(next <= *end, "persisted progress is never ahead of the target (partition {p})");
    }
    let mut ferry = Ferry::start(dir.path(), &[]);
    let counts = wait_all_arrived(&mut ferry, &west.bootstrap, remote, &values("s", 0..produced));
    let dups = duplicates(&counts);
    println!("{produced} records, {dups} duplicates, {unpersisted} copied after the last persist");
    assert!(dups as i64 <= unpersisted, "only records acknowledged after the last persist are copied twice");
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

// ---------------------------------------------------------------------------------------------------------
// 6. Offset gaps that lose nothing, and failed probe queries
// ---------------------------------------------------------------------------------------------------------

/// Produces `recs` in one transaction that is then aborted: the records stay in the log, followed by an
/// abort marker, and a `read_committed` consumer skips them.
fn produce_aborted(bootstrap: &str, topic: &str, recs: &[Rec]) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let timeout = Duration::from_secs(30);
    let producer: BaseProducer = support::client_config(bootstrap, &[])
        .set("transactional.id", format!("ferry-test-abort-{}-{topic}", std::process::id()))
        .set("acks", "all")
        .create()
        .expect("transactional producer");
    producer.init_transactions(timeout).expect("init transactions");
    producer.begin_transaction().expect("begin transaction");
    for r in recs {
        let value = r.value.as_deref().unwrap_or_default();
        producer.send(BaseRecord::<[u8], [u8]>::to(topic).partition(r.partition).payload(value)).expect("send");
    }
    // Written to the log first: an abort purges what is still queued.
    producer.flush(timeout).expect("flush");
    producer.abort_transaction(timeout).expect("abort transaction");
}

/// `ferry_probe_queries_total` of the flow for `kind` and `result`.
fn probe_queries(ferry: &Ferry, kind: &str, result: &str) -> f64 {
    metric(ferry, "ferry_probe_queries_total", &[("flow", FLOW), ("kind", kind), ("result", result)])
}

/// The values of `topic`'s records, in offset order (one partition).
fn values_of(bootstrap: &str, topic: &str) -> Vec<Vec<u8>> {
    consume_all(bootstrap, topic, READ).into_iter().map(|r| r.value.unwrap_or_default()).collect()
}

/// A source topic written in transactions (commit markers, an aborted transaction) and a compacted one
/// whose cleaner removed most of its offsets: every surviving record is copied once, in order, with no
/// source gap or reset reported, and the probe is asked only where assigned partitions start. Its first
/// two queries fail (`copier-probe=2*return`): they are asked again, and the copier never restarts.
#[test]
fn offset_gaps_that_lose_nothing_cost_no_probe_query_and_failed_queries_are_asked_again() {
    let (east, west) = shared_pair();
    let txn = unique("gaps-txn");
    let compacted = unique("gaps-compacted");

    // Five committed transactions of 20 records, an aborted one of 10 after the second: 100 records at
    // offsets 0..116 (six markers and ten aborted records are offsets without a record to copy).
    create_topic(&east.bootstrap, &txn, 1, &[]);
    let mut committed = Vec::new();
    for t in 0..5 {
        let batch = records(&format!("t{t}-"), 0..20, 1);
        committed.extend(batch.iter().filter_map(|r| r.value.clone()));
        produce_transactional(&east.bootstrap, &txn, &batch);
        if t == 1 {
            produce_aborted(&east.bootstrap, &txn, &records("aborted-", 0..10, 1));
        }
    }

    // 20 rounds of a unique key and an overwritten one, each round in a segment of its own, then a last
    // record in the active segment: once cleaned, 22 records survive of 41 offsets, a gap after nearly
    // every one.
    create_topic(
        &east.bootstrap,
        &compacted,
        1,
        &[("cleanup.policy", "compact"), ("segment.ms", "100"), ("min.cleanable.dirty.ratio", "0.01")],
    );
    for r in 0..20 {
        let (u, hot) = (format!("u{r}"), format!("hot{r}"));
        produce(
            &east.bootstrap,
            &compacted,
            &[Rec::new(0, u.as_bytes(), -1).key(u.as_bytes()), Rec::new(0, hot.as_bytes(), -1).key(b"hot")],
        );
        std::thread::sleep(Duration::from_millis(150)); // pacing: the next round rolls a new segment
    }
    produce(&east.bootstrap, &compacted, &[Rec::new(0, b"end", -1).key(b"end")]);
    let mut survivors: Vec<Vec<u8>> = (0..20).map(|r| format!("u{r}").into_bytes()).collect();
    survivors.extend([b"hot19".to_vec(), b"end".to_vec()]);
    // The cleaner runs every 15 s (log.cleaner.backoff.ms).
    wait_for(Duration::from_secs(90), "the source topic compacted", || {
        values_of(&east.bootstrap, &compacted) == survivors
    });

    // The gaps are real: fewer records than offsets between the log start and end.
    assert_eq!(end_offsets(&east.bootstrap, &txn), [116], "100 records, 10 aborted, 6 markers");
    assert_eq!(values_of(&east.bootstrap, &txn), committed);
    assert_eq!(end_offsets(&east.bootstrap, &compacted), [41]);
    let source_offsets: Vec<i64> = consume_all(&east.bootstrap, &compacted, READ).iter().map(|r| r.offset).collect();
    println!("compacted source: {} records at offsets {source_offsets:?} of 0..41", source_offsets.len());
    assert_eq!(source_offsets[0], 0, "the log start stays 0: the gaps are inside the log");

    let dir = pair_dir(east, west, &flow("east", "west", &[&txn, &compacted], ""));
    let mut ferry = Ferry::start_env(dir.path(), &[], &[("FAILPOINTS", "copier-probe=2*return")]);
    let (remote_txn, remote_compacted) = (format!("east.{txn}"), format!("east.{compacted}"));
    wait_for(ARRIVAL, "every surviving record copied", || {
        assert_alive(&mut ferry);
        end_offsets(&west.bootstrap, &remote_txn) == [100] && end_offsets(&west.bootstrap, &remote_compacted) == [22]
    });
    assert_eq!(values_of(&west.bootstrap, &remote_txn), committed, "the committed records, once, in order");
    assert_eq!(values_of(&west.bootstrap, &remote_compacted), survivors, "the survivors, once, in order");

    let addr = ferry.listen_addr();
    let kinds: Vec<(String, f64)> = ["assign", "range", "ids", "lag"]
        .iter()
        .flat_map(|k| ["ok", "failed"].map(|r| (format!("{k}/{r}"), probe_queries(&ferry, k, r))))
        .collect();
    println!("probe queries after the copy: {kinds:?}");
    for t in [&txn, &compacted] {
        let labels = [("flow", FLOW), ("topic", t.as_str())];
        assert_eq!(metric(&ferry, "ferry_source_gap_records_total", &labels), 0.0, "{t}: no records lost");
        assert_eq!(metric(&ferry, "ferry_source_resets_total", &labels), 0.0, "{t}: no reset");
    }
    assert_eq!(probe_queries(&ferry, "range", "ok") + probe_queries(&ferry, "range", "failed"), 0.0, "no range check");
    assert_eq!(probe_queries(&ferry, "assign", "failed"), 2.0, "the two failed queries");
    let assigned = probe_queries(&ferry, "assign", "ok");
    assert!((1.0..=2.0).contains(&assigned), "one answered check per assignment (2 partitions): {assigned}");
    assert_eq!(actor_restarts(addr, FLOW, "copier"), 0.0, "a failed probe query does not restart the copier");
    let log = observe::strip_ansi(&ferry.log());
    assert!(log.contains("cannot check where to copy the partition from; trying again"), "{}", support::tail(&log, 40));
    assert!(!log.contains("out of range"), "no offset out of range: {}", support::tail(&log, 40));
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}
