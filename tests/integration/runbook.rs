//! The README's failover runbook, executed step by step on an active-active pair (both flows running
//! throughout, as the runbook says): producers stop on east, five groups' consumers (real rdkafka
//! consumers, each at its own position) stop, `ferry translate --all-groups --apply` moves every group
//! to west, producers and consumers start there; then the fail-back the same way with the reverse flow.
//! Each group's consumers, over the three sessions, read every record exactly once: 0 re-read and 0
//! skipped at each move. With the default policy and with the identity policy. And a group whose
//! checkpoint is stale (the flow stopped, the group moved on since) is refused by name, exit 3; with the
//! source gone (the disaster) an old checkpoint is refused until `--max-age` says to take it.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use support::ferry_cli;
use support::scenario::*;
use support::{Cluster, Ferry, consume_all, create_topic, end_offsets, produce, unique, wait_for};

const PARTITIONS: i32 = 2;
const EAST_RECORDS: usize = 200;
const WEST_RECORDS: usize = 100;
const GROUPS: usize = 5;

/// What the consumers of one session of a group read, and where they left the group.
struct Session {
    /// Values in the order read.
    read: Vec<String>,
    /// (topic, partition) → the offset committed (the next to read).
    committed: BTreeMap<(String, i32), i64>,
    /// When the first record arrived.
    first_at: Instant,
}

/// A consumer of `group` on `bootstrap` subscribed to `topics` reads until `done` says so (from the
/// group's committed offsets, else from the start), commits after what it read and leaves the group.
fn session(bootstrap: &str, group: &str, topics: &[&str], done: impl Fn(&[String]) -> bool) -> Session {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    consumer.subscribe(topics).expect("subscribe");
    let (mut read, mut next) = (Vec::new(), BTreeMap::new());
    let mut first_at = None;
    let deadline = Instant::now() + READ;
    while !done(&read) {
        assert!(Instant::now() < deadline, "{group} on {topics:?}: read only {} records: {read:?}", read.len());
        let Some(msg) = consumer.poll(Duration::from_millis(200)) else { continue };
        let msg = msg.expect("consume");
        first_at.get_or_insert_with(Instant::now);
        read.push(String::from_utf8_lossy(msg.payload().unwrap_or_default()).to_string());
        next.insert((msg.topic().to_string(), msg.partition()), msg.offset() + 1);
    }
    if !next.is_empty() {
        let mut tpl = TopicPartitionList::new();
        for ((t, p), o) in &next {
            tpl.add_partition_offset(t, *p, Offset::Offset(*o)).expect("tpl");
        }
        consumer.commit(&tpl, CommitMode::Sync).expect("commit");
    }
    drop(consumer); // leaves the group
    Session { read, committed: next, first_at: first_at.unwrap_or_else(Instant::now) }
}

/// The stream a value belongs to (its producer's prefix and partition) and its place in it.
fn place(value: &str) -> ((char, usize), usize) {
    let prefix = value.chars().next().expect("a value");
    let i: usize = value[1..].parse().expect("a numbered value");
    ((prefix, i % PARTITIONS as usize), i)
}

/// (re-read, skipped) of a move from the sessions `before` to the session `after`: records `after`
/// read again, and records of each stream before the last one `after` read there that nobody read.
fn moved(before: &[&Session], after: &Session) -> (usize, usize) {
    let earlier: BTreeSet<&str> = before.iter().flat_map(|s| s.read.iter().map(String::as_str)).collect();
    let reread = after.read.iter().filter(|v| earlier.contains(v.as_str())).count();
    let mut reached: BTreeMap<(char, usize), usize> = BTreeMap::new();
    for v in &after.read {
        let (stream, i) = place(v);
        let e = reached.entry(stream).or_insert(i);
        *e = (*e).max(i);
    }
    let now: BTreeSet<&str> = after.read.iter().map(String::as_str).collect();
    let all = values("e", 0..EAST_RECORDS).into_iter().chain(values("w", 0..WEST_RECORDS));
    let skipped = all
        .map(|v| String::from_utf8(v).expect("utf-8"))
        .filter(|v| {
            let (stream, i) = place(v);
            reached.get(&stream).is_some_and(|last| i < *last)
                && !earlier.contains(v.as_str())
                && !now.contains(v.as_str())
        })
        .count();
    (reread, skipped)
}

/// Waits until `flow`'s offset syncs of `topic` (in `syncs` on `on`) reach `last` on every partition:
/// the syncs of the last copied records, after which every position translates exactly.
fn wait_final_syncs(ferry: &mut Ferry, on: &Cluster, syncs: &str, flow: &str, topic: &str, last: &[i64]) {
    wait_for(ARRIVAL, &format!("{flow}'s syncs of {topic} up to {last:?}"), || {
        assert_alive(ferry);
        let mut seen = vec![false; PARTITIONS as usize];
        for r in consume_all(&on.bootstrap, syncs, READ) {
            let ours = r.headers.iter().any(|(k, v)| k == "ferry.flow" && v.as_deref() == Some(flow.as_bytes()));
            let sync =
                ferry::mm2::records::OffsetSync::decode(r.key.as_deref().unwrap_or_default(), r.value.as_deref());
            if let Some(s) = sync.ok().filter(|s| ours && s.topic == topic) {
                seen[s.partition as usize] |= s.upstream_offset == last[s.partition as usize];
            }
        }
        seen.iter().all(|s| *s)
    });
}

/// The offset of the last record of each partition of `topic` whose value starts with `prefix`.
fn last_of(bootstrap: &str, topic: &str, prefix: &str) -> Vec<i64> {
    let mut last = vec![-1; PARTITIONS as usize];
    for r in consume_all(bootstrap, topic, READ) {
        if r.value.as_deref().is_some_and(|v| v.starts_with(prefix.as_bytes())) {
            last[r.partition as usize] = last[r.partition as usize].max(r.offset);
        }
    }
    last
}

/// Waits until `on`'s checkpoints of every group (from `source`) translate exactly the offsets its last
/// session committed: the runbook's "wait for the final checkpoints".
fn wait_checkpointed(
    ferry: &mut Ferry,
    on: &Cluster,
    source: &str,
    sessions: &BTreeMap<String, Session>,
    rename: impl Fn(&str) -> String,
) {
    for (group, s) in sessions {
        let what = format!("{group}'s checkpoints on {source}'s target of {:?}", s.committed);
        wait_showing(ARRIVAL, &what, || {
            assert_alive(ferry);
            let cps = newest_checkpoints(on, source, group);
            (s.committed.iter().all(|((t, p), o)| cps.get(&(rename(t), *p)).is_some_and(|(up, _)| up == o)), cps)
        });
    }
}

/// `ferry translate --flows DIR --flow FLOW --all-groups --apply -o json`, as the runbook has it: exit 0
/// and every group committed.
fn translate_all(dir: &std::path::Path, flow: &str, groups: &[String]) {
    let dir = dir.to_str().expect("utf-8 path");
    let (code, out, err) =
        ferry_cli(&["translate", "--flows", dir, "--flow", flow, "--all-groups", "--apply", "-o", "json"]);
    assert_eq!(code, 0, "ferry translate --flow {flow} --all-groups --apply: {out}{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"));
    let committed: Vec<&str> =
        doc["committed"].as_array().expect("committed").iter().filter_map(|g| g.as_str()).collect();
    assert_eq!(committed, groups.iter().map(String::as_str).collect::<Vec<_>>(), "{doc}");
    assert_eq!(doc["refused"], serde_json::json!([]), "{doc}");
}

struct Policy {
    tag: &'static str,
    extra: &'static str,
    identity: bool,
    /// Under the identity policy: the consumers on west read records produced there.
    west_read: bool,
}

/// The runbook's planned failover east → west and fail-back under `policy`; returns the flows directory
/// and the group prefix for what follows.
fn planned_failover_and_back(policy: &Policy) -> (tempfile::TempDir, String, Ferry) {
    let (east, west) = support::shared_pair();
    let topic = unique(policy.tag);
    for c in [east, west] {
        create_topic(&c.bootstrap, &topic, PARTITIONS, &[]);
    }
    let prefix = format!("{topic}-g");
    let extra = format!(
        "emit_checkpoints_interval_seconds = 1\nrefresh_groups_interval_seconds = 1\ngroups = [\"{prefix}.*\"]\n{}",
        policy.extra
    );
    let flows = flow("east", "west", &[&topic], &extra) + &flow("west", "east", &[&topic], &extra);
    let dir = pair_dir(east, west, &flows);
    let mut ferry = Ferry::start(dir.path(), &[]);
    // Remote names: east's topic on west, west's on east (one name under the identity policy).
    let (on_west, on_east) = if policy.identity {
        (topic.clone(), topic.clone())
    } else {
        (format!("east.{topic}"), format!("west.{topic}"))
    };
    let west_topics: Vec<&str> = if policy.identity { vec![&topic] } else { vec![&on_west, &topic] };
    let east_topics: Vec<&str> = if policy.identity { vec![&topic] } else { vec![&topic, &on_east] };

    // The applications on east: producers wrote, and have stopped; everything reached west.
    produce(&east.bootstrap, &topic, &records("e", 0..EAST_RECORDS, PARTITIONS));
    wait_all_arrived(&mut ferry, &west.bootstrap, &on_west, &values("e", 0..EAST_RECORDS));
    let last = end_offsets(&east.bootstrap, &topic).iter().map(|e| e - 1).collect::<Vec<_>>();
    wait_final_syncs(&mut ferry, east, "mm2-offset-syncs.west.internal", "east->west", &topic, &last);
    // Five groups at five positions; their consumers stop.
    let groups: Vec<String> = (0..GROUPS).map(|i| format!("{prefix}{i}")).collect();
    let first: BTreeMap<String, Session> = groups
        .iter()
        .enumerate()
        .map(|(i, g)| (g.clone(), session(&east.bootstrap, g, &[&topic], |r| r.len() >= 20 * (i + 1))))
        .collect();
    let stopped = Instant::now();

    // Wait for the final checkpoints, then move every group.
    let to_west = |t: &str| if policy.identity { t.to_string() } else { format!("east.{t}") };
    wait_checkpointed(&mut ferry, west, "east", &first, to_west);
    translate_all(dir.path(), "east->west", &groups);
    // Producers start on west, then the consumers (each reads at most 90 records there, so none reaches
    // the end of a partition of west's topic). Under the identity policy, with `policy.west_read` the
    // groups read west's own records too (their fail-back needs west->east's dense syncs to lift the cap
    // by east->west's, see the README's runbook); without it the producers start once the consumers
    // have moved back.
    let produce_west = || produce(&west.bootstrap, &topic, &records("w", 0..WEST_RECORDS, PARTITIONS));
    if !policy.identity || policy.west_read {
        produce_west();
    }
    let second: BTreeMap<String, Session> = std::thread::scope(|s| {
        let handles: Vec<_> = groups
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let topics = &west_topics;
                s.spawn(move || (g.clone(), session(&west.bootstrap, g, topics, |r| r.len() >= 50 + 10 * i)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a west consumer")).collect()
    });
    let running = second.values().map(|s| s.first_at).max().expect("sessions") - stopped;
    let west_own = second.values().map(|s| s.read.iter().filter(|v| v.starts_with('w')).count()).sum::<usize>();
    println!("{}: on west the groups read {west_own} records produced there", policy.tag);
    if policy.west_read {
        assert!(west_own > 0, "the groups on west must read records produced there for this test to mean anything");
    }
    if policy.identity && !policy.west_read {
        produce_west();
    }

    // Fail-back: west's producers and consumers stop; wait until east has west's records and the reverse
    // flow's final checkpoints; move every group back; consumers on east read the rest.
    wait_all_arrived(&mut ferry, &east.bootstrap, &on_east, &values("w", 0..WEST_RECORDS));
    let last = last_of(&west.bootstrap, &topic, "w");
    wait_final_syncs(&mut ferry, west, "mm2-offset-syncs.east.internal", "west->east", &topic, &last);
    let back_stopped = Instant::now();
    let to_east = |t: &str| match (policy.identity, t.strip_prefix("east.")) {
        (true, _) => t.to_string(),
        (false, Some(original)) => original.to_string(),
        (false, None) => format!("west.{t}"),
    };
    wait_checkpointed(&mut ferry, east, "west", &second, to_east);
    translate_all(dir.path(), "west->east", &groups);
    let mut third = BTreeMap::new();
    for g in &groups {
        let read_before: BTreeSet<String> = first[g].read.iter().chain(&second[g].read).cloned().collect();
        let total = EAST_RECORDS + WEST_RECORDS;
        let s = session(&east.bootstrap, g, &east_topics, |r| {
            read_before.len() + r.iter().filter(|v| !read_before.contains(*v)).count() >= total
        });
        third.insert(g.clone(), s);
    }
    let back_running = third.values().map(|s| s.first_at).max().expect("sessions") - back_stopped;

    let mut figures = Vec::new();
    for g in &groups {
        let over = moved(&[&first[g]], &second[g]);
        let back = moved(&[&first[g], &second[g]], &third[g]);
        let reads = (first[g].read.len(), second[g].read.len(), third[g].read.len());
        println!(
            "{}: {g}: read {reads:?} (east, west, east); failover (re-read, skipped) = {over:?}; fail-back = {back:?}",
            policy.tag
        );
        figures.push((g.clone(), over, back));
    }
    println!(
        "{}: stop consumers -> all {GROUPS} consumers running on west: {running:?}; on east again: {back_running:?}",
        policy.tag
    );
    for (g, over, back) in &figures {
        assert_eq!(*over, (0, 0), "{g}: failover to west (re-read, skipped)");
        assert_eq!(*back, (0, 0), "{g}: fail-back to east (re-read, skipped)");
    }
    (dir, prefix, ferry)
}

#[test]
fn runbook_planned_failover_and_fail_back_with_the_default_policy_and_a_stale_group_refused() {
    let policy = Policy { tag: "rb-default", extra: "", identity: false, west_read: true };
    let (dir, prefix, mut ferry) = planned_failover_and_back(&policy);
    let (east, west) = support::shared_pair();
    // A group checkpointed while the flow ran; then the flow stops and the group moves on at the source.
    let topic = prefix.strip_suffix("-g").expect("the group prefix").to_string();
    let stale = format!("{prefix}-stale");
    let s = session(&east.bootstrap, &stale, &[&topic], |r| r.len() >= 10);
    let mut sessions = BTreeMap::new();
    sessions.insert(stale.clone(), s);
    wait_checkpointed(&mut ferry, west, "east", &sessions, |t| format!("east.{t}"));
    assert!(ferry.terminate(Duration::from_secs(30)).success(), "graceful stop");
    let flows = dir.path().to_str().expect("utf-8 path");
    let args = ["translate", "--flows", flows, "--flow", "east->west", "--groups", &stale, "--max-age", "1s"];
    // Older than 1 s but exactly where the group still is: taken (the source confirms it).
    wait_for(Duration::from_secs(30), "the stale group's checkpoint older than 1 s", || {
        let (code, out, err) = ferry_cli(&[&args[..], &["-o", "json"]].concat());
        assert_eq!(code, 0, "{out}{err}");
        let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON");
        let g = &doc["groups"][0];
        assert_eq!(g["group"], stale.as_str(), "{doc}");
        assert!(g["refused"].is_null(), "the source confirms the checkpoint: {doc}");
        g["checkpoint_age_seconds"].as_f64().is_some_and(|a| a > 1.5)
    });
    let remote = format!("east.{topic}");
    let partitions = [(remote.as_str(), 0), (remote.as_str(), 1)];
    let before = support::group_offsets(&west.bootstrap, &stale, &partitions);
    session(&east.bootstrap, &stale, &[&topic], |r| r.len() >= 10);
    let (code, out, err) = ferry_cli(&[&args[..], &["--apply"]].concat());
    println!("stale group: exit {code}\n{out}{err}");
    assert_eq!(code, 3, "a refused group exits 3: {out}{err}");
    assert!(err.contains(&format!("refused group `{stale}`")), "{err}");
    assert!(err.contains("(--max-age 1s)") && err.contains("does not show the group's offsets on `east`"), "{err}");
    let after = support::group_offsets(&west.bootstrap, &stale, &partitions);
    assert_eq!(after, before, "a refused group's offsets on west are not touched");

    // The disaster: east gone (nothing answers at its address). The group is refused because east
    // cannot confirm its checkpoint; the runbook's explicit, larger bound takes it.
    let flows_text = std::fs::read_to_string(dir.path().join("flow.toml")).expect("the flow file");
    let gone = format!("127.0.0.1:{}", support::free_port());
    let disaster = flows_dir(&[("east", &gone), ("west", &west.bootstrap)], &flows_text);
    let flows = disaster.path().to_str().expect("utf-8 path");
    let args = ["translate", "--flows", flows, "--flow", "east->west", "--groups", &stale, "--apply"];
    let started = Instant::now();
    let (code, out, err) = ferry_cli(&[&args[..], &["--max-age", "1s"]].concat());
    println!("disaster, --max-age 1s: exit {code} after {:?}\n{out}{err}", started.elapsed());
    assert_eq!(code, 3, "{out}{err}");
    assert!(err.contains(&format!("refused group `{stale}`")) && err.contains("`east` cannot confirm it"), "{err}");
    assert_eq!(support::group_offsets(&west.bootstrap, &stale, &partitions), before, "nothing committed");
    let (code, out, err) = ferry_cli(&[&args[..], &["--max-age", "2h"]].concat());
    assert_eq!(code, 0, "the explicit bound takes the group: {out}{err}");
    assert_ne!(support::group_offsets(&west.bootstrap, &stale, &partitions), before, "committed on west");
}

#[test]
fn runbook_planned_failover_and_fail_back_with_the_identity_policy() {
    let extra = "replication_policy = \"identity\"\n";
    let policy = Policy { tag: "rb-identity", extra, identity: true, west_read: false };
    let (_dir, _prefix, mut ferry) = planned_failover_and_back(&policy);
    assert!(ferry.terminate(Duration::from_secs(30)).success(), "graceful stop");
}

/// Under the identity policy, consumers on west that read records produced there fail back exactly:
/// the cap by east->west's inverted syncs (east's last own record) is lifted because west->east's syncs
/// prove that only its copies lie between the cap and the forward answer.
#[test]
fn runbook_identity_fail_back_after_reading_records_produced_on_west() {
    let extra = "replication_policy = \"identity\"\n";
    let policy = Policy { tag: "rb-identity-w", extra, identity: true, west_read: true };
    let (_dir, _prefix, mut ferry) = planned_failover_and_back(&policy);
    assert!(ferry.terminate(Duration::from_secs(30)).success(), "graceful stop");
}
