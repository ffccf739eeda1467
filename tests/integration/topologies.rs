//! Topologies end to end: active-active pairs under load in both directions (MM2's default policy, and
//! the identity policy that MM2 cannot run active-active), a chain and a ring of three clusters. Records
//! are counted by content on every cluster: each appears exactly where it should, once, and never loops.

use crate::support;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use support::scenario::*;
use support::{
    Cluster, Ferry, Rec, commit_group_offsets, consume_all, create_topic, end_offsets, list_topics, produce,
    shared_pair, unique, wait_for,
};

/// How long both directions are loaded.
const LOAD: Duration = Duration::from_secs(60);

fn active_active_flows(topic: &str, extra: &str) -> String {
    let extra = format!("emit_checkpoints_interval_seconds = 1\nrefresh_groups_interval_seconds = 1\n{extra}");
    flow("east", "west", &[topic], &extra) + &flow("west", "east", &[topic], &extra)
}

fn values_on(bootstrap: &str, topic: &str) -> HashMap<Vec<u8>, usize> {
    arrivals(bootstrap, topic)
}

/// The value at `offset` of `topic`-`partition`.
fn value_at(bootstrap: &str, topic: &str, partition: i32, offset: i64) -> Option<Vec<u8>> {
    consume_all(bootstrap, topic, READ).into_iter().find(|r| r.partition == partition && r.offset == offset)?.value
}

/// Heartbeats of `upstream` arrive on `on` (as `<upstream>.heartbeats`).
fn heartbeats_from(on: &Cluster, upstream: &str) -> bool {
    let topic = format!("{upstream}.heartbeats");
    support::topic_partitions(&on.bootstrap, &topic).is_some() && total(&on.bootstrap, &topic) > 0
}

// ---------------------------------------------------------------------------------------------------------
// Active-active, MM2's default policy: east.orders on west, west.orders on east, nothing loops
// ---------------------------------------------------------------------------------------------------------

#[test]
fn active_active_with_the_default_policy_under_load_both_ways() {
    let (east, west) = shared_pair();
    let topic = unique("aa-default");
    for c in [east, west] {
        create_topic(&c.bootstrap, &topic, 2, &[]);
    }
    let dir = pair_dir(east, west, &active_active_flows(&topic, ""));
    let mut ferry = Ferry::start(dir.path(), &[]);
    let on_east = Stream::start(&east.bootstrap, &topic, 2, "e", 50, Duration::from_millis(20));
    let on_west = Stream::start(&west.bootstrap, &topic, 2, "w", 50, Duration::from_millis(20));
    std::thread::sleep(LOAD); // the load's duration: the scenario itself
    let (produced_e, produced_w) = (on_east.finish(), on_west.finish());
    let (copy_on_west, copy_on_east) = (format!("east.{topic}"), format!("west.{topic}"));
    let e = wait_all_arrived(&mut ferry, &west.bootstrap, &copy_on_west, &values("e", 0..produced_e));
    let w = wait_all_arrived(&mut ferry, &east.bootstrap, &copy_on_east, &values("w", 0..produced_w));
    println!("default policy: {produced_e} records east->west, {produced_w} west->east in {LOAD:?}");
    assert_eq!((e.len(), duplicates(&e)), (produced_e, 0), "east's records on west, each once");
    assert_eq!((w.len(), duplicates(&w)), (produced_w, 0), "west's records on east, each once");
    // Each local topic holds only its own records: nothing looped back.
    assert_eq!(values_on(&east.bootstrap, &topic).len(), produced_e);
    assert_eq!(values_on(&west.bootstrap, &topic).len(), produced_w);
    for (cluster, name) in [(east, "east"), (west, "west")] {
        let looped: Vec<String> =
            list_topics(&cluster.bootstrap).into_iter().filter(|t| t.contains(&format!(".{name}.{topic}"))).collect();
        assert!(looped.is_empty(), "no loop on {name}: {looped:?}");
    }
    wait_for(ARRIVAL, "heartbeats both ways", || heartbeats_from(west, "east") && heartbeats_from(east, "west"));

    // A group fails over from east to west mid-topic, then back: it re-reads nothing, skips nothing.
    let group = format!("{topic}-g");
    let on_east_ends = end_offsets(&east.bootstrap, &topic);
    let at: Vec<i64> = on_east_ends.iter().map(|e| e / 2).collect();
    commit_group_offsets(&east.bootstrap, &group, &[(&topic, 0, at[0]), (&topic, 1, at[1])]);
    let mut there = BTreeMap::new();
    wait_for(ARRIVAL, "the group's checkpoints on west", || {
        there = newest_checkpoints(west, "east", &group);
        (0..2).all(|p| there.get(&(copy_on_west.clone(), p)).is_some_and(|(up, _)| *up == at[p as usize]))
    });
    for p in 0..2 {
        let (up, down) = there[&(copy_on_west.clone(), p)];
        assert_eq!(
            value_at(&west.bootstrap, &copy_on_west, p, down),
            value_at(&east.bootstrap, &topic, p, up),
            "failover: the next record on west is the copy of the next record on east (partition {p})"
        );
    }
    // On west the group reads 10 more per partition, then fails back to east.
    let further: Vec<i64> = (0..2).map(|p| there[&(copy_on_west.clone(), p)].1 + 10).collect();
    commit_group_offsets(&west.bootstrap, &group, &[(&copy_on_west, 0, further[0]), (&copy_on_west, 1, further[1])]);
    let mut back = BTreeMap::new();
    wait_for(ARRIVAL, "the group's reverse checkpoints on east", || {
        back = newest_checkpoints(east, "west", &group);
        (0..2).all(|p| back.get(&(topic.clone(), p)).is_some_and(|(up, _)| *up == further[p as usize]))
    });
    for p in 0..2 {
        let (up, down) = back[&(topic.clone(), p)];
        assert_eq!(
            value_at(&east.bootstrap, &topic, p, down),
            value_at(&west.bootstrap, &copy_on_west, p, up),
            "fail-back: the next record on east is the original of the next record on west (partition {p})"
        );
    }
    println!("failover to west at {there:?}, back to east at {back:?}");
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

// ---------------------------------------------------------------------------------------------------------
// Active-active, identity policy: one `orders` on each side, kept apart by the provenance header
// ---------------------------------------------------------------------------------------------------------

#[test]
fn active_active_with_the_identity_policy_under_load_both_ways() {
    // A pair of its own: under the identity policy each side's `heartbeats` (and every `x.heartbeats` other
    // tests leave) is copied into the same name on the other side, which would mix this test's copies into
    // the topics every other test on the shared pair reads.
    let (east, west) = &start_pair("aa-identity");
    let topic = unique("aa-identity");
    for c in [east, west] {
        create_topic(&c.bootstrap, &topic, 2, &[]);
    }
    let dir = pair_dir(east, west, &active_active_flows(&topic, "replication_policy = \"identity\"\n"));
    let mut ferry = Ferry::start(dir.path(), &[]);
    let on_east = Stream::start(&east.bootstrap, &topic, 2, "e", 50, Duration::from_millis(20));
    let on_west = Stream::start(&west.bootstrap, &topic, 2, "w", 50, Duration::from_millis(20));
    std::thread::sleep(LOAD); // the load's duration: the scenario itself
    let (produced_e, produced_w) = (on_east.finish(), on_west.finish());
    let mut both = values("e", 0..produced_e);
    both.extend(values("w", 0..produced_w));
    // Each side's `orders` ends up with both sides' records, each exactly once: nothing loops.
    let on_w = wait_all_arrived(&mut ferry, &west.bootstrap, &topic, &both);
    let on_e = wait_all_arrived(&mut ferry, &east.bootstrap, &topic, &both);
    println!("identity policy: {produced_e} records from east, {produced_w} from west in {LOAD:?}");
    for (name, counts) in [("east", &on_e), ("west", &on_w)] {
        assert_eq!(counts.len(), produced_e + produced_w, "{name} holds both sides' records");
        assert_eq!(duplicates(counts), 0, "no record twice on {name}: nothing loops");
    }
    // Copies carry the clusters they have been on, origin first (`ferry.path`, `1;<binding>;<id>:<alias>,...`);
    // records written locally carry nothing.
    let recs = consume_all(&west.bootstrap, &topic, READ);
    for r in &recs {
        let path = r.headers.iter().find(|(k, _)| k == "ferry.path").and_then(|(_, v)| v.clone());
        let aliases: Option<Vec<String>> = path.map(|p| {
            let hops = String::from_utf8_lossy(&p).split(';').nth(2).unwrap_or_default().to_string();
            hops.split(',').map(|h| h.rsplit(':').next().unwrap_or_default().to_string()).collect()
        });
        let from_east = r.value.as_deref().is_some_and(|v| v.starts_with(b"e"));
        let expected = from_east.then(|| vec!["east".to_string(), "west".to_string()]);
        assert_eq!(aliases, expected, "provenance header of {r:?}");
    }
    wait_for(ARRIVAL, "heartbeats both ways", || heartbeats_from(west, "east") && heartbeats_from(east, "west"));

    // A group at the end of east's topic fails over to west: it skips nothing there.
    let group = format!("{topic}-g");
    let ends = end_offsets(&east.bootstrap, &topic);
    commit_group_offsets(&east.bootstrap, &group, &[(&topic, 0, ends[0]), (&topic, 1, ends[1])]);
    let mut there = BTreeMap::new();
    wait_for(ARRIVAL, "the group's checkpoints on west", || {
        there = newest_checkpoints(west, "east", &group);
        (0..2).all(|p| there.get(&(topic.clone(), p)).is_some_and(|(up, _)| *up == ends[p as usize]))
    });
    // Consumed on east: everything. From the translated offsets on, west must hold nothing the group has
    // not seen, and every record it has not seen: here, nothing at all would be skipped, and re-reads
    // (records of the other side interleaved differently) are counted.
    let west_ends = end_offsets(&west.bootstrap, &topic);
    let mut reread = 0;
    for p in 0..2 {
        let down = there[&(topic.clone(), p)].1;
        assert!(down <= west_ends[p as usize], "never ahead of west's end");
        reread += west_ends[p as usize] - down;
    }
    println!("identity failover at the end: {reread} records re-read on west (checkpoints {there:?})");
    // Checkpoints both ways.
    commit_group_offsets(&west.bootstrap, &group, &[(&topic, 0, 1), (&topic, 1, 1)]);
    wait_for(ARRIVAL, "checkpoints from west to east", || !newest_checkpoints(east, "west", &group).is_empty());
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

// ---------------------------------------------------------------------------------------------------------
// Three clusters: a chain and a ring (MM2's default policy)
// ---------------------------------------------------------------------------------------------------------

/// Three clusters of the test's own, started side by side. Not the shared pair: a chain or a ring over it
/// would copy every `*.heartbeats` topic other tests leave there around the ring, and leave hundreds of
/// new ones (`c.b.x.heartbeats`) for every later test to copy.
fn three(name: &str) -> (Cluster, Cluster, Cluster) {
    std::thread::scope(|s| {
        let a = s.spawn(|| Cluster::start(&format!("{name}-a")));
        let b = s.spawn(|| Cluster::start(&format!("{name}-b")));
        let c = Cluster::start(&format!("{name}-c"));
        (a.join().expect("cluster a"), b.join().expect("cluster b"), c)
    })
}

fn three_dir(a: &Cluster, b: &Cluster, c: &Cluster, flows: &str) -> tempfile::TempDir {
    flows_dir(&[("a", &a.bootstrap), ("b", &b.bootstrap), ("c", &c.bootstrap)], flows)
}

#[test]
fn a_chain_of_three_clusters_copies_two_hops() {
    let (a, b, c) = three("chain");
    let topic = unique("chain");
    create_topic(&a.bootstrap, &topic, 1, &[]);
    produce(&a.bootstrap, &topic, &records("x", 0..100, 1));
    // The second hop copies what the first one made (`a.<topic>` on b).
    // b->c refreshes every second: `a.heartbeats` appears on b only after a->b started.
    let flows = flow("a", "b", &[&topic], "")
        + &flow("b", "c", &[&format!("a\\\\.{topic}")], "refresh_topics_interval_seconds = 1\n");
    let dir = three_dir(&a, &b, &c, &flows);
    let mut ferry = Ferry::start(dir.path(), &[]);
    let two_hops = format!("b.a.{topic}");
    let counts = wait_all_arrived(&mut ferry, &c.bootstrap, &two_hops, &values("x", 0..100));
    assert_eq!((counts.len(), duplicates(&counts)), (100, 0));
    wait_for(ARRIVAL, "heartbeats over both hops", || heartbeats_from(&c, "b") && heartbeats_from(&c, "b.a"));
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

#[test]
fn a_ring_of_three_clusters_never_brings_a_record_home() {
    let (a, b, c) = three("ring");
    let topic = unique("ring");
    create_topic(&a.bootstrap, &topic, 1, &[]);
    produce(&a.bootstrap, &topic, &[Rec::new(0, b"from-a", 1)]);
    let flows = flow("a", "b", &[".*ring.*"], "refresh_topics_interval_seconds = 1\n")
        + &flow("b", "c", &[".*ring.*"], "refresh_topics_interval_seconds = 1\n")
        + &flow("c", "a", &[".*ring.*"], "refresh_topics_interval_seconds = 1\n");
    let dir = three_dir(&a, &b, &c, &flows);
    let mut ferry = Ferry::start(dir.path(), &[]);
    let (on_b, on_c) = (format!("a.{topic}"), format!("b.a.{topic}"));
    wait_for(ARRIVAL, "the record two hops away", || {
        assert_alive(&mut ferry);
        support::topic_partitions(&c.bootstrap, &on_c).is_some() && total(&c.bootstrap, &on_c) == 1
    });
    assert_eq!(total(&b.bootstrap, &on_b), 1);
    // Several refreshes of c->a pass: it must not copy `b.a.<topic>` home to a.
    std::thread::sleep(Duration::from_secs(5)); // observation window of five refreshes
    let home: Vec<String> =
        list_topics(&a.bootstrap).into_iter().filter(|t| t.ends_with(&format!("a.{topic}"))).collect();
    assert!(home.is_empty(), "nothing came home to a: {home:?}");
    assert_eq!(consume_all(&a.bootstrap, &topic, READ).len(), 1, "a's own topic is untouched");
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}
