//! Active-active fail-back: a group fails over from east to west and back, and each move re-reads nothing
//! and skips nothing. With `target` on both flows, each flow's syncs live on its target, where the other
//! flow's reader must look for them. Different
//! `offset_syncs_topic_location`s on the two flows would share one compacted topic: `ferry validate`
//! refuses them (tests/integration/validate.rs). And the identity policy, where both sides' `orders` hold both sides'
//! records and each translation is capped by the reverse flow's syncs. And a naming template
//! (`remote_topic = "{topic}.{source}"`), whose names both flows must read back to stop loops and to
//! checkpoint the way back.

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use support::scenario::*;
use support::{
    Cluster, Ferry, Rec, commit_group_offsets, consume_all, create_topic, end_offsets, produce, produce_transactional,
    unique, wait_for,
};

const PARTITIONS: i32 = 2;

/// A topic's records by (partition, offset), and the offset of each value by (partition, value).
struct Contents {
    at: HashMap<(i32, i64), Vec<u8>>,
    offset_of: HashMap<(i32, Vec<u8>), i64>,
}

fn contents(bootstrap: &str, topic: &str) -> Contents {
    let recs: Vec<Rec> = consume_all(bootstrap, topic, READ);
    let mut c = Contents { at: HashMap::new(), offset_of: HashMap::new() };
    for r in recs {
        let v = r.value.unwrap_or_default();
        c.offset_of.insert((r.partition, v.clone()), r.offset);
        c.at.insert((r.partition, r.offset), v);
    }
    c
}

/// (re-read, skipped) of a group that read `from` up to `consumed` (exclusive) and resumes on `to` at
/// `resumed`: the record `to` holds there is the copy (or original) of the one at `from`'s `next`.
fn moved(from: &Contents, to: &Contents, p: i32, consumed: i64, resumed: i64) -> (i64, i64) {
    let value = to.at.get(&(p, resumed)).unwrap_or_else(|| panic!("a record at {resumed} of partition {p}"));
    let next = from.offset_of[&(p, value.clone())];
    ((consumed - next).max(0), (next - consumed).max(0))
}

/// Where flow `source->target` with `offset_syncs_topic_location = location` writes its syncs.
fn syncs_topic<'a>(
    location: &str,
    source: &'a Cluster,
    target: &'a Cluster,
    names: (&str, &str),
) -> (&'a Cluster, String) {
    match location {
        "source" => (source, format!("mm2-offset-syncs.{}.internal", names.1)),
        _ => (target, format!("mm2-offset-syncs.{}.internal", names.0)),
    }
}

/// The offset of the last record of each partition of `c` whose value `copied` says the flow copied.
fn last_copied(c: &Contents, copied: impl Fn(&[u8]) -> bool) -> Vec<i64> {
    (0..PARTITIONS)
        .map(|p| {
            c.at.iter().filter(|((q, _), v)| *q == p && copied(v)).map(|((_, o), _)| *o).max().expect("copied records")
        })
        .collect()
}

/// Waits until `flow`'s syncs of `topic` in `syncs` on `on` name `last` upstream on every partition (the
/// sync of the last copied record, published once the partition is quiet): before that, translations
/// past the flow's newest sync are MM2's `+1` estimates, which a test of exactness must not read.
fn wait_final_syncs(ferry: &mut Ferry, (on, syncs): (&Cluster, String), flow: &str, topic: &str, last: &[i64]) {
    wait_for(ARRIVAL, &format!("{flow}'s syncs of {topic} up to {last:?}"), || {
        assert_alive(ferry);
        let mut seen = vec![false; PARTITIONS as usize];
        for r in consume_all(&on.bootstrap, &syncs, READ) {
            // Unmarked too: a ferry before the flow header (to run this test against it).
            let ours = r
                .headers
                .iter()
                .find(|(k, _)| k == "ferry.flow")
                .is_none_or(|(_, v)| v.as_deref() == Some(flow.as_bytes()));
            let sync =
                ferry::mm2::records::OffsetSync::decode(r.key.as_deref().unwrap_or_default(), r.value.as_deref());
            if let Some(sync) = sync.ok().filter(|s| ours && s.topic == topic) {
                seen[sync.partition as usize] |= sync.upstream_offset == last[sync.partition as usize];
            }
        }
        seen.iter().all(|s| *s)
    });
}

/// Both flows with `offset_syncs_topic_location`s `east_west` and `west_east`, and the naming template
/// `template` if any (MM2's default policy otherwise); a group fails over and back.
fn fail_over_and_back(tag: &str, east_west: &str, west_east: &str, template: Option<&str>) {
    let (east, west) = support::shared_pair();
    let topic = unique(tag);
    for c in [east, west] {
        create_topic(&c.bootstrap, &topic, PARTITIONS, &[]);
    }
    let fast = "emit_checkpoints_interval_seconds = 1\nrefresh_groups_interval_seconds = 1\n";
    let naming = template.map(|t| format!("remote_topic = \"{t}\"\nrefresh_topics_interval_seconds = 1\n"));
    let location =
        |l: &str| format!("{fast}offset_syncs_topic_location = \"{l}\"\n{}", naming.as_deref().unwrap_or(""));
    // With a template, each flow selects every topic starting with the name, so the other flow's copies
    // too: only reading their names back keeps them from being copied home again.
    let selected = if template.is_some() { format!("{topic}.*") } else { topic.clone() };
    let flows = flow("east", "west", &[&selected], &location(east_west))
        + &flow("west", "east", &[&selected], &location(west_east));
    let dir = pair_dir(east, west, &flows);
    let mut ferry = Ferry::start(dir.path(), &[]);
    // Different amounts on each side: the two flows' syncs of the same topic name differ everywhere.
    produce(&east.bootstrap, &topic, &records("e", 0..400, PARTITIONS));
    produce(&west.bootstrap, &topic, &records("w", 0..150, PARTITIONS));
    let remote = |source: &str, name: &str| match template {
        Some(t) => ferry::policy::NameTemplate::parse(t).expect("a valid template").format(source, name),
        None => format!("{source}.{name}"),
    };
    let (copy_on_west, copy_on_east) = (remote("east", &topic), remote("west", &topic));
    wait_all_arrived(&mut ferry, &west.bootstrap, &copy_on_west, &values("e", 0..400));
    wait_all_arrived(&mut ferry, &east.bootstrap, &copy_on_east, &values("w", 0..150));
    if template.is_some() {
        no_copies_come_home(&mut ferry, (east, west), &topic, &remote);
    }
    let (originals, copies) = (contents(&east.bootstrap, &topic), contents(&west.bootstrap, &copy_on_west));
    let last = last_copied(&originals, |_| true);
    wait_final_syncs(&mut ferry, syncs_topic(east_west, east, west, ("east", "west")), "east->west", &topic, &last);
    let last = last_copied(&contents(&west.bootstrap, &topic), |_| true);
    wait_final_syncs(&mut ferry, syncs_topic(west_east, west, east, ("west", "east")), "west->east", &topic, &last);

    // Fail over: the group read east's topic halfway.
    let group = format!("{topic}-g");
    let at: Vec<i64> = end_offsets(&east.bootstrap, &topic).iter().map(|e| e / 2).collect();
    commit_group_offsets(&east.bootstrap, &group, &[(&topic, 0, at[0]), (&topic, 1, at[1])]);
    let there = support::scenario::wait_showing(ARRIVAL, "the group's checkpoints on west", || {
        assert_alive(&mut ferry);
        let cps = newest_checkpoints(west, "east", &group);
        let ok =
            (0..PARTITIONS).all(|p| cps.get(&(copy_on_west.clone(), p)).is_some_and(|(up, _)| *up == at[p as usize]));
        (ok, cps)
    });
    // Fail back: on west the group reads 10 more per partition.
    let further: Vec<i64> = (0..PARTITIONS).map(|p| there[&(copy_on_west.clone(), p)].1 + 10).collect();
    commit_group_offsets(&west.bootstrap, &group, &[(&copy_on_west, 0, further[0]), (&copy_on_west, 1, further[1])]);
    let back = wait_showing(ARRIVAL, "the group's fail-back checkpoints on east", || {
        assert_alive(&mut ferry);
        let cps = newest_checkpoints(east, "west", &group);
        let ok =
            (0..PARTITIONS).all(|p| cps.get(&(topic.clone(), p)).is_some_and(|(up, _)| *up == further[p as usize]));
        (ok, cps)
    });
    let mut over = (0, 0);
    let mut home = (0, 0);
    for p in 0..PARTITIONS {
        let (r, s) = moved(&originals, &copies, p, at[p as usize], there[&(copy_on_west.clone(), p)].1);
        over = (over.0 + r, over.1 + s);
        let (r, s) = moved(&copies, &originals, p, further[p as usize], back[&(topic.clone(), p)].1);
        home = (home.0 + r, home.1 + s);
    }
    println!("{tag}: failover at {there:?} (re-read, skipped) = {over:?}; fail-back at {back:?} = {home:?}");
    assert_eq!(over, (0, 0), "failover to west: (re-read, skipped)");
    assert_eq!(home, (0, 0), "fail-back to east: (re-read, skipped)");
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

#[test]
fn fail_back_with_the_offset_syncs_on_each_flows_target() {
    fail_over_and_back("fb-target", "target", "target", None);
}

/// Active-active with the suffix template `{topic}.{source}`: records copied both ways, no copy copied
/// back, and a group moved over and back with 0 re-read and 0 skipped.
#[test]
fn suffix_template_active_active_fails_over_and_back() {
    fail_over_and_back("fb-tmpl", "target", "target", Some("{topic}.{source}"));
}

/// Neither flow copies the other's copies back (`orders.east.west` on east would be a loop), although
/// both select them. A new topic on each side, copied to the other, shows that each flow has listed
/// its source's topics since the copies existed: the listing that found the new topic also saw them.
fn no_copies_come_home(
    ferry: &mut Ferry,
    (east, west): (&Cluster, &Cluster),
    topic: &str,
    remote: &dyn Fn(&str, &str) -> String,
) {
    let late = format!("{topic}-late");
    for (c, side) in [(east, "e"), (west, "w")] {
        create_topic(&c.bootstrap, &late, 1, &[]);
        produce(&c.bootstrap, &late, &records(side, 0..1, 1));
    }
    wait_all_arrived(ferry, &west.bootstrap, &remote("east", &late), &values("e", 0..1));
    wait_all_arrived(ferry, &east.bootstrap, &remote("west", &late), &values("w", 0..1));
    let home_on_east = remote("west", &remote("east", topic));
    let home_on_west = remote("east", &remote("west", topic));
    assert!(!support::list_topics(&east.bootstrap).contains(&home_on_east), "{home_on_east} on east: a loop");
    assert!(!support::list_topics(&west.bootstrap).contains(&home_on_west), "{home_on_west} on west: a loop");
}

/// Identity policy, both flows `target`: one topic name on both sides, each holding both sides' records.
/// They are written in four phases (east, west, east, west; each copied before the next), so both sides
/// hold them in the same order and a group can move between them with 0 re-read and 0 skipped. Among
/// west's records, which east->west skipped as copies of west's own, only the cap by west->east's
/// syncs gets the failover right, and the other way round for the fail-back.
#[test]
fn identity_fail_over_and_back_mid_topic() {
    let (east, west) = support::shared_pair();
    let topic = unique("fb-identity");
    for c in [east, west] {
        create_topic(&c.bootstrap, &topic, PARTITIONS, &[]);
    }
    let extra = "emit_checkpoints_interval_seconds = 1\nrefresh_groups_interval_seconds = 1\n\
                 replication_policy = \"identity\"\noffset_syncs_topic_location = \"target\"\n";
    let flows = flow("east", "west", &[&topic], extra) + &flow("west", "east", &[&topic], extra);
    let dir = pair_dir(east, west, &flows);
    let mut ferry = Ferry::start(dir.path(), &[]);
    // First a committed transaction on west: its commit markers put every later record of west one
    // offset after its place on east, so each flow's syncs differ from the other's.
    produce_transactional(&west.bootstrap, &topic, &records("t", 0..10, PARTITIONS));
    let mut all = values("t", 0..10);
    wait_all_arrived(&mut ferry, &east.bootstrap, &topic, &all);
    for (on, prefix, range) in [(east, "e", 0..100), (west, "w", 0..50), (east, "e", 100..200), (west, "w", 50..100)] {
        produce(&on.bootstrap, &topic, &records(prefix, range.clone(), PARTITIONS));
        all.extend(values(prefix, range));
        for c in [east, west] {
            wait_all_arrived(&mut ferry, &c.bootstrap, &topic, &all);
        }
    }
    // Per partition, in this order on both sides: 5 of west's, 50 of east's, 25 of west's, 50 of east's,
    // 25 of west's; on east from offset 0, 55, 80, ...; on west one later from east's first records on.
    let (on_east, on_west) = (contents(&east.bootstrap, &topic), contents(&west.bootstrap, &topic));
    let from_east = |v: &[u8]| v.starts_with(b"e");
    let last = last_copied(&on_east, from_east);
    wait_final_syncs(&mut ferry, syncs_topic("target", east, west, ("east", "west")), "east->west", &topic, &last);
    let last = last_copied(&on_west, |v| !from_east(v));
    wait_final_syncs(&mut ferry, syncs_topic("target", west, east, ("west", "east")), "west->east", &topic, &last);
    let group = format!("{topic}-g");
    // Partition 0 among west's first records, partition 1 among east's second ones; each moves back 10
    // records later.
    let at = [65, 105];
    commit_group_offsets(&east.bootstrap, &group, &[(&topic, 0, at[0]), (&topic, 1, at[1])]);
    let there = wait_showing(ARRIVAL, "the group's checkpoints on west", || {
        assert_alive(&mut ferry);
        let cps = newest_checkpoints(west, "east", &group);
        let ok = (0..PARTITIONS).all(|p| cps.get(&(topic.clone(), p)).is_some_and(|(up, _)| *up == at[p as usize]));
        (ok, cps)
    });
    let further: Vec<i64> = (0..PARTITIONS).map(|p| there[&(topic.clone(), p)].1 + 10).collect();
    commit_group_offsets(&west.bootstrap, &group, &[(&topic, 0, further[0]), (&topic, 1, further[1])]);
    let back = wait_showing(ARRIVAL, "the group's fail-back checkpoints on east", || {
        assert_alive(&mut ferry);
        let cps = newest_checkpoints(east, "west", &group);
        let ok =
            (0..PARTITIONS).all(|p| cps.get(&(topic.clone(), p)).is_some_and(|(up, _)| *up == further[p as usize]));
        (ok, cps)
    });
    let (mut over, mut home) = ((0, 0), (0, 0));
    for p in 0..PARTITIONS {
        let (r, s) = moved(&on_east, &on_west, p, at[p as usize], there[&(topic.clone(), p)].1);
        over = (over.0 + r, over.1 + s);
        let (r, s) = moved(&on_west, &on_east, p, further[p as usize], back[&(topic.clone(), p)].1);
        home = (home.0 + r, home.1 + s);
    }
    println!("identity: failover at {there:?} (re-read, skipped) = {over:?}; fail-back at {back:?} = {home:?}");
    assert_eq!(over, (0, 0), "failover to west: (re-read, skipped)");
    assert_eq!(home, (0, 0), "fail-back to east: (re-read, skipped)");
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}
