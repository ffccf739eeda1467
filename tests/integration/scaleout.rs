//! Several ferry nodes share a flow through Kafka's own group protocol: the copier group splits the source
//! partitions, the lease group elects the node that runs the leader duties, and the checkpoint producer's
//! transactions fence an ex-leader. Three and four real `ferry` processes on one machine, real brokers.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use support::observe::{self, metric_sum};
use support::scenario::*;
use support::{Cluster, Ferry, commit_group_offsets, consume_all, create_topic, end_offsets, unique, wait_for};

const PARTITIONS: i32 = 24;
/// The copier group's session timeout in these tests (set on the source cluster's client properties).
const SESSION: Duration = Duration::from_secs(10);

struct Nodes {
    dir: tempfile::TempDir,
    deployment: String,
    nodes: BTreeMap<String, Ferry>,
}

impl Nodes {
    fn new(east: &Cluster, west: &Cluster, topic: &str, group: &str) -> Nodes {
        let extra = format!(
            "groups = [\"{group}\"]\nemit_checkpoints_interval_seconds = 1\nrefresh_groups_interval_seconds = 1\n\
             refresh_topics_interval_seconds = 2\n"
        );
        let clusters = [("east", east.bootstrap.as_str()), ("west", west.bootstrap.as_str())];
        let dir = flows_dir(&clusters, &flow("east", "west", &[topic], &extra));
        let path = dir.path().join("clusters.toml");
        let text = std::fs::read_to_string(&path).expect("clusters.toml")
            + &format!("[clusters.east.client]\n\"session.timeout.ms\" = {}\n", SESSION.as_millis());
        std::fs::write(&path, text).expect("write clusters.toml");
        Nodes { dir, deployment: unique("deploy"), nodes: BTreeMap::new() }
    }

    fn start(&mut self, node: &str) {
        let env = [("FERRY_NODE_ID", node), ("FERRY_DEPLOYMENT", self.deployment.as_str())];
        let mut ferry = Ferry::start_env(self.dir.path(), &[], &env);
        ferry.wait_log("node started", Duration::from_secs(30));
        self.nodes.insert(node.to_string(), ferry);
    }

    fn metric(&self, node: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
        metric_sum(&observe::metrics(self.nodes[node].listen_addr()), name, labels)
    }

    /// Source partitions each node copies (its copier group share, `ferry_partitions_assigned`). On the
    /// shared pair that includes other tests' `x.heartbeats` topics, which every flow copies (as MM2
    /// does) and the group spreads like any other: "every node has a share" is read here, sums of this
    /// test's partitions from [`Nodes::owned`].
    fn shares(&self) -> BTreeMap<String, i64> {
        self.nodes
            .keys()
            .map(|n| (n.clone(), self.metric(n, "ferry_partitions_assigned", &[("flow", FLOW)]) as i64))
            .collect()
    }

    /// This test's partitions (its topics and the source's `heartbeats`) each node copies.
    fn owned(&self) -> BTreeMap<String, i64> {
        self.assigned().into_iter().map(|(n, set)| (n, set.len() as i64)).collect()
    }

    /// Nodes that say they lead the checkpoint duty.
    fn leaders(&self) -> Vec<String> {
        self.nodes
            .keys()
            .filter(|n| self.metric(n, "ferry_leader", &[("flow", FLOW), ("duty", "checkpoints")]) == 1.0)
            .cloned()
            .collect()
    }

    /// The partitions each live node says it copies (`/health` `assigned`, without other tests' remote
    /// heartbeats topics).
    fn assigned(&self) -> BTreeMap<String, BTreeSet<String>> {
        self.nodes.iter().map(|(n, f)| (n.clone(), observe::assigned_partitions(f.listen_addr(), FLOW))).collect()
    }

    /// Observed, not inferred from sums: no partition is copied by two nodes at once. Two rounds of
    /// samples; a partition counts as doubly owned only if two nodes list it in both rounds (so a
    /// handover between two reads of one round is not mistaken for one).
    fn assert_exclusive(&self) {
        let (a, b) = (self.assigned(), self.assigned());
        let held = |n: &str| -> BTreeSet<String> { a[n].intersection(&b[n]).cloned().collect() };
        let names: Vec<&String> = a.keys().collect();
        for (i, x) in names.iter().enumerate() {
            for y in &names[i + 1..] {
                let both: Vec<String> = held(x).intersection(&held(y)).cloned().collect();
                assert!(both.is_empty(), "{x} and {y} both copy {both:?}");
            }
        }
    }

    fn alive(&mut self) {
        for f in self.nodes.values_mut() {
            assert_alive(f);
        }
    }
}

/// Checkpoints of `group` in topic order with the node that wrote each (`ferry.node` header).
fn checkpoints_by_node(west: &Cluster, group: &str) -> Vec<(String, ferry::mm2::records::Checkpoint)> {
    if support::topic_partitions(&west.bootstrap, "east.checkpoints.internal").is_none() {
        return Vec::new();
    }
    consume_all(&west.bootstrap, "east.checkpoints.internal", READ)
        .into_iter()
        .filter_map(|r| {
            let node = r.headers.iter().find(|(k, _)| k == "ferry.node").and_then(|(_, v)| v.clone())?;
            let cp = ferry::mm2::records::Checkpoint::decode(r.key.as_deref().unwrap_or_default(), r.value.as_deref())
                .ok()?;
            (cp.group == group).then(|| (String::from_utf8_lossy(&node).to_string(), cp))
        })
        .collect()
}

#[test]
fn nodes_share_a_flow_hand_partitions_over_and_elect_one_leader() {
    let (east, west) = start_pair("scale");
    let topic = unique("scale");
    let group = format!("{topic}-g");
    create_topic(&east.bootstrap, &topic, PARTITIONS, &[]);
    let stream = Stream::start(&east.bootstrap, &topic, PARTITIONS, "r", 100, Duration::from_millis(30));
    let mut nodes = Nodes::new(&east, &west, &topic, &group);
    for n in ["n1", "n2", "n3"] {
        nodes.start(n);
    }
    // 24 partitions of the topic and the source's heartbeats partition, split over three nodes.
    let total_partitions = i64::from(PARTITIONS) + 1;
    let mut shares = BTreeMap::new();
    let started = Instant::now();
    wait_for(ARRIVAL, "every partition assigned to exactly one node, all nodes busy", || {
        nodes.alive();
        nodes.assert_exclusive();
        shares = nodes.shares();
        let listed: usize = nodes.assigned().values().map(BTreeSet::len).sum();
        shares.values().sum::<i64>() == total_partitions
            && shares.values().all(|n| *n > 0)
            && listed == total_partitions as usize
    });
    println!("three nodes: partitions per node {shares:?}");
    let leaders = nodes.leaders();
    assert_eq!(leaders.len(), 1, "exactly one node leads: {leaders:?}");
    let leader = leaders[0].clone();

    // Checkpoints come from the leader only.
    let commit = |at: i64| {
        let offsets: Vec<(&str, i32, i64)> = (0..PARTITIONS).map(|p| (topic.as_str(), p, at)).collect();
        commit_group_offsets(&east.bootstrap, &group, &offsets);
    };
    commit(10);
    wait_for(ARRIVAL, "checkpoints", || checkpoints_by_node(&west, &group).len() >= PARTITIONS as usize);
    let writers: Vec<String> = checkpoints_by_node(&west, &group).into_iter().map(|(n, _)| n).collect();
    assert!(writers.iter().all(|n| *n == leader), "checkpoints written by the leader {leader} only: {writers:?}");

    // kill -9 the leader: another node leads within the lease's session timeout; its partitions move on.
    let killed = Instant::now();
    nodes.nodes.get_mut(&leader).expect("leader").kill9();
    nodes.nodes.remove(&leader);
    let mut new_leader = Vec::new();
    wait_for(Duration::from_secs(30), "a new leader", || {
        nodes.alive();
        nodes.assert_exclusive();
        new_leader = nodes.leaders();
        new_leader.len() == 1
    });
    let failover = killed.elapsed();
    wait_for(ARRIVAL, "the dead node's partitions reassigned", || {
        nodes.assert_exclusive();
        nodes.shares().values().sum::<i64>() == total_partitions
    });
    let reassigned = killed.elapsed();
    // The README's bounds: the lease and the copier group's session timeout, plus a margin for the
    // rebalance and this machine's load.
    assert!(failover <= SESSION + Duration::from_secs(8), "leader failover took {failover:?}");
    assert!(reassigned <= SESSION + Duration::from_secs(15), "partitions reassigned after {reassigned:?}");
    // The group moves on to the source's current end, past every new owner's first offset sync. Not to
    // a small fixed offset: on the killed leader's partitions an offset inside the stretch its last syncs
    // cover may translate no further than the checkpoint it already published, and then no new one is
    // published (a checkpoint must advance downstream: MM2's rule). The kill loses the syncs the dead
    // copier had not published, and the new owner's first sync starts another lifetime, so from the dead
    // lifetime's last sync `s` up to that first sync only `s.downstream + 1` is known not to skip a
    // record. Seen: a killed leader's partition with the syncs 0 -> 0 (its only one) and, from its new
    // owner, 75 -> 80: the group at 10 and at 20 both translate to 1, published once, before the kill.
    let ends = commit_at_end(&east, &group, &topic);
    wait_showing(ARRIVAL, "the new leader's checkpoint of every partition at the group's new offset", || {
        let cps = checkpoints_by_node(&west, &group);
        // Each partition still waiting, with its last checkpoint (writer, upstream -> downstream).
        let missing: Vec<String> = (0..PARTITIONS)
            .filter(|p| {
                !cps.iter()
                    .any(|(n, c)| *n == new_leader[0] && c.partition == *p && c.upstream_offset == ends[*p as usize])
            })
            .map(|p| match cps.iter().rfind(|(_, c)| c.partition == p) {
                Some((n, c)) => format!("{p}: last {n} {} -> {}", c.upstream_offset, c.downstream_offset),
                None => format!("{p}: none"),
            })
            .collect();
        (missing.is_empty(), missing)
    });
    let cps: Vec<_> = checkpoints_by_node(&west, &group).into_iter().map(|(_, c)| c).collect();
    support::assert_monotonic(&cps);
    println!(
        "leader {leader} killed: {} leads after {failover:?}, partitions reassigned after {reassigned:?}, {:?}",
        new_leader[0],
        nodes.shares()
    );

    // A fourth node joins: it gets some partitions, and the others keep the rest (cooperative).
    let before = nodes.shares();
    let kept_before = nodes.assigned();
    nodes.start("n4");
    wait_for(ARRIVAL, "the fourth node copying", || {
        nodes.alive();
        nodes.assert_exclusive();
        let s = nodes.shares();
        s.get("n4").is_some_and(|n| *n > 0) && s.values().sum::<i64>() == total_partitions
    });
    let after = nodes.shares();
    println!("fourth node joined: {before:?} -> {after:?}");
    let kept_after = nodes.assigned();
    for (n, had) in &kept_before {
        let moved: Vec<&String> = kept_after[n].difference(had).collect();
        assert!(
            moved.is_empty(),
            "{n} was given partitions it did not have when n4 joined (not cooperative): {moved:?}"
        );
    }

    // One node stops gracefully: after the session timeout the others take its partitions.
    let leaving = nodes.nodes.keys().find(|n| **n != new_leader[0] && *n != "n4").cloned().expect("a follower");
    let mut f = nodes.nodes.remove(&leaving).expect("node");
    assert!(f.terminate(Duration::from_secs(30)).success());
    wait_for(ARRIVAL, "the stopped node's partitions reassigned", || {
        nodes.alive();
        nodes.assert_exclusive();
        nodes.shares().values().sum::<i64>() == total_partitions
    });
    println!("{leaving} stopped gracefully: {:?}", nodes.shares());

    let produced = stream.finish();
    let remote = format!("east.{topic}");
    let any = nodes.nodes.keys().next().cloned().expect("a node");
    let counts =
        wait_all_arrived(nodes.nodes.get_mut(&any).expect("node"), &west.bootstrap, &remote, &values("r", 0..produced));
    assert_eq!(counts.len(), produced, "nothing lost through a kill, a join and a leave");
    // What the killed node copied after its last persist (250 ms) is copied again; the join and the
    // graceful leave copy nothing twice. Bound: one second of the whole flow's traffic.
    let per_second = produced as f64 / started.elapsed().as_secs_f64();
    let dups = duplicates(&counts);
    println!("{produced} records ({per_second:.0}/s), {dups} duplicates (around the kill -9)");
    assert!((dups as f64) <= per_second, "duplicates {dups} above one second of traffic ({per_second:.0})");
    for f in nodes.nodes.values_mut() {
        assert!(f.terminate(Duration::from_secs(30)).success());
    }
}

#[test]
fn a_paused_ex_leader_writes_no_checkpoint_after_the_new_leader_started() {
    let (east, west) = start_pair("fence");
    let topic = unique("fence");
    let group = format!("{topic}-g");
    create_topic(&east.bootstrap, &topic, 2, &[]);
    let stream = Stream::start(&east.bootstrap, &topic, 2, "r", 50, Duration::from_millis(50));
    let mut nodes = Nodes::new(&east, &west, &topic, &group);
    nodes.start("n1");
    let mut leader = Vec::new();
    wait_for(ARRIVAL, "n1 leads", || {
        nodes.alive();
        leader = nodes.leaders();
        leader == ["n1"]
    });
    nodes.start("n2");
    // The group keeps committing: every round has new checkpoints to write.
    let committing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let (c, e, t, g) = (committing.clone(), east.bootstrap.clone(), topic.clone(), group.clone());
    let committer = std::thread::spawn(move || {
        while c.load(std::sync::atomic::Ordering::SeqCst) {
            let ends = end_offsets(&e, &t);
            let offsets: Vec<(&str, i32, i64)> =
                ends.iter().enumerate().map(|(p, o)| (t.as_str(), p as i32, *o)).collect();
            commit_group_offsets(&e, &g, &offsets);
            std::thread::sleep(Duration::from_millis(500)); // the consumer's commit interval
        }
    });
    wait_for(ARRIVAL, "checkpoints from n1", || checkpoints_by_node(&west, &group).iter().any(|(n, _)| n == "n1"));

    // Pause n1 past the lease's session timeout: n2 takes over and fences n1's producer.
    let pid = nodes.nodes["n1"].pid().expect("pid");
    support::process::signal(pid, "STOP");
    wait_for(Duration::from_secs(60), "n2 leads while n1 is paused", || {
        nodes.metric("n2", "ferry_leader", &[("flow", FLOW), ("duty", "checkpoints")]) == 1.0
    });
    wait_for(ARRIVAL, "checkpoints from n2", || checkpoints_by_node(&west, &group).iter().any(|(n, _)| n == "n2"));
    support::process::signal(pid, "CONT");
    // n1 resumes, believing for a moment that it still leads; its transactions are fenced.
    std::thread::sleep(Duration::from_secs(8)); // observation window after SIGCONT: several checkpoint rounds
    committing.store(false, std::sync::atomic::Ordering::SeqCst);
    committer.join().expect("committer");
    let cps = checkpoints_by_node(&west, &group);
    let first_n2 = cps.iter().position(|(n, _)| n == "n2").expect("n2 wrote checkpoints");
    let late: Vec<_> = cps[first_n2..].iter().filter(|(n, _)| n == "n1").collect();
    println!("{} checkpoints, n2's first at {first_n2}, n1's after it: {}", cps.len(), late.len());
    assert!(late.is_empty(), "the fenced ex-leader wrote checkpoints after the new leader's first: {late:?}");
    assert_eq!(nodes.leaders(), ["n2"], "n1 gave the lease up");
    stream.finish();
    for f in nodes.nodes.values_mut() {
        assert!(f.terminate(Duration::from_secs(30)).success());
    }
}

#[test]
fn an_overlapping_rolling_restart_copies_nothing_twice() {
    let (east, west) = start_pair("rolling");
    let topic = unique("rolling");
    let group = format!("{topic}-g");
    create_topic(&east.bootstrap, &topic, 6, &[]);
    let stream = Stream::start(&east.bootstrap, &topic, 6, "r", 60, Duration::from_millis(30));
    let mut nodes = Nodes::new(&east, &west, &topic, &group);
    nodes.start("old");
    let remote = format!("east.{topic}");
    wait_for(ARRIVAL, "the old node copying", || {
        nodes.alive();
        total(&west.bootstrap, &remote) > 1_000
    });
    // The new node starts before the old one stops (a Deployment's surge), then the old one stops.
    nodes.start("new");
    wait_for(ARRIVAL, "both nodes share the partitions", || {
        nodes.alive();
        nodes.shares().values().all(|n| *n > 0)
    });
    let mut old = nodes.nodes.remove("old").expect("old");
    assert!(old.terminate(Duration::from_secs(30)).success());
    wait_for(ARRIVAL, "the new node copies everything", || {
        nodes.alive();
        nodes.shares()["new"] == 7
    });
    let produced = stream.finish();
    let counts =
        wait_all_arrived(nodes.nodes.get_mut("new").expect("new"), &west.bootstrap, &remote, &values("r", 0..produced));
    println!("{produced} records, {} duplicates across the overlapping restart", duplicates(&counts));
    assert_eq!(counts.len(), produced);
    assert_eq!(
        duplicates(&counts),
        0,
        "graceful handovers copy nothing twice: {}",
        where_twice(&east.bootstrap, &topic, &west.bootstrap, &remote, 5)
    );
    for f in nodes.nodes.values_mut() {
        assert!(f.terminate(Duration::from_secs(30)).success());
    }
}

/// A flow-file edit in the directory every node reads reaches every node: each reloads it on its own
/// (watch), restarts the flow once with the new plan, and the new topic is copied, split over the nodes.
#[test]
fn a_reload_on_every_node_converges() {
    let (east, west) = support::shared_pair();
    let topic = unique("scale-reload");
    let added = unique("scale-reload-added");
    let group = format!("{topic}-g");
    for t in [&topic, &added] {
        create_topic(&east.bootstrap, t, 4, &[]);
    }
    support::produce(&east.bootstrap, &topic, &records("a", 0..400, 4));
    let mut nodes = Nodes::new(east, west, &topic, &group);
    for n in ["r1", "r2"] {
        nodes.start(n);
    }
    wait_for(ARRIVAL, "both nodes copying the first topic", || {
        nodes.alive();
        total(&west.bootstrap, &format!("east.{topic}")) == 400 && nodes.shares().values().all(|n| *n > 0)
    });
    let generation =
        |nodes: &Nodes, n: &str| observe::health(nodes.nodes[n].listen_addr())["flows"][FLOW]["generation"].clone();
    assert!(["r1", "r2"].iter().all(|n| generation(&nodes, n) == 1));
    // The edit: the same flow with a second topic.
    let path = nodes.dir.path().join("flow.toml");
    let text = std::fs::read_to_string(&path).expect("flow.toml");
    std::fs::write(&path, text.replace(&format!("\"{topic}\""), &format!("\"{topic}\", \"{added}\""))).expect("edit");
    wait_for(Duration::from_secs(60), "every node restarted the flow once, with the edit applied", || {
        nodes.alive();
        ["r1", "r2"].iter().all(|n| {
            let h = observe::health(nodes.nodes[*n].listen_addr());
            h["flows"][FLOW]["generation"] == 2 && h["last_reload"]["result"] == "applied"
        })
    });
    support::produce(&east.bootstrap, &added, &records("b", 0..400, 4));
    let counts = wait_all_arrived(
        nodes.nodes.get_mut("r1").expect("r1"),
        &west.bootstrap,
        &format!("east.{added}"),
        &values("b", 0..400),
    );
    assert_eq!(duplicates(&counts), 0);
    wait_for(ARRIVAL, "both nodes share both topics", || {
        nodes.assert_exclusive();
        nodes.assigned().values().map(BTreeSet::len).sum::<usize>() == 9 && nodes.shares().values().all(|n| *n > 0)
    });
    assert!(["r1", "r2"].iter().all(|n| generation(&nodes, n) == 2), "one restart per node, not one per event");
    for f in nodes.nodes.values_mut() {
        assert!(f.terminate(Duration::from_secs(30)).success());
    }
}

/// Several nodes on the consumer group protocol (KIP-848, `group_protocol = "consumer"`): the broker
/// splits the partitions, each is copied by one node, and a node that dies hands its share on.
#[test]
fn several_nodes_share_a_flow_on_the_consumer_group_protocol() {
    let (east, west) = support::shared_pair();
    let topic = unique("scale-848");
    let group = format!("{topic}-g");
    create_topic(&east.bootstrap, &topic, 6, &[]);
    let stream = Stream::start(&east.bootstrap, &topic, 6, "k", 40, Duration::from_millis(30));
    let mut nodes = Nodes::new(east, west, &topic, &group);
    let path = nodes.dir.path().join("flow.toml");
    let text = std::fs::read_to_string(&path).expect("flow.toml");
    std::fs::write(&path, format!("{text}group_protocol = \"consumer\"\n")).expect("edit");
    for n in ["k1", "k2"] {
        nodes.start(n);
    }
    let mut seen = BTreeMap::new();
    let shared = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for(ARRIVAL, "both nodes copying on the consumer protocol", || {
            nodes.alive();
            nodes.assert_exclusive();
            seen = nodes.owned();
            seen.values().sum::<i64>() == 7 && nodes.shares().values().all(|n| *n > 0)
        })
    }));
    assert!(shared.is_ok(), "shares last seen: {seen:?}");
    println!("consumer protocol: {:?}", nodes.shares());
    nodes.nodes.get_mut("k1").expect("k1").kill9();
    nodes.nodes.remove("k1");
    wait_for(ARRIVAL, "the survivor copies everything", || {
        nodes.alive();
        nodes.owned()["k2"] == 7
    });
    let produced = stream.finish();
    let counts = wait_all_arrived(
        nodes.nodes.get_mut("k2").expect("k2"),
        &west.bootstrap,
        &format!("east.{topic}"),
        &values("k", 0..produced),
    );
    println!("{produced} records, {} duplicates across the kill -9", duplicates(&counts));
    for f in nodes.nodes.values_mut() {
        assert!(f.terminate(Duration::from_secs(30)).success());
    }
}

/// A wide flow (300 partitions) shared by two nodes, one killed with -9 in the middle of the copy and
/// started again: every record arrives, each partition's records in their source order (the stretch a
/// killed node had copied but not persisted is copied again after it, never interleaved), and a group
/// committed at the end is checkpointed exactly: a consumer failing over to the target at the
/// checkpoints re-reads nothing and skips nothing. The partitions are spread over both nodes' copier
/// consumers (the group's cooperative assignor), so both librdkafka paths that a wide flow exercises
/// (a consumer's fetch decisions, a producer's per-partition batches) run beside a handover.
#[test]
fn a_wide_flow_on_two_nodes_survives_a_kill_9_in_order_with_exact_checkpoints() {
    const WIDE: i32 = 300;
    let (east, west) = support::shared_pair();
    let topic = unique("wide-scale");
    let remote = format!("east.{topic}");
    let group = format!("{topic}-g");
    create_topic(&east.bootstrap, &topic, WIDE, &[]);
    let stream = Stream::start(&east.bootstrap, &topic, WIDE, "w", 600, Duration::from_millis(100));
    let mut nodes = Nodes::new(east, west, &topic, &group);
    nodes.start("n1");
    nodes.start("n2");
    let ours = |set: &BTreeSet<String>| set.iter().filter(|p| p.starts_with(topic.as_str())).count();
    let mut split = BTreeMap::new();
    wait_for(ARRIVAL, "the 300 partitions split over both nodes, records arriving", || {
        nodes.alive();
        split = nodes.assigned().iter().map(|(n, set)| (n.clone(), ours(set))).collect::<BTreeMap<_, _>>();
        split.values().sum::<usize>() == WIDE as usize
            && split.values().all(|n| *n > 0)
            && total(&west.bootstrap, &remote) > 0
    });
    println!("partitions per node: {split:?}");

    // The crash, at a random moment of the copy (the scenario, not synchronisation).
    std::thread::sleep(random_secs(1.0, 3.0));
    let victim = nodes.nodes.get_mut("n1").expect("n1");
    assert_alive(victim);
    victim.kill9();
    nodes.nodes.remove("n1");
    let killed = Instant::now();
    wait_for(ARRIVAL, "the survivor copying all 300 partitions", || {
        nodes.alive();
        nodes.assigned().values().map(ours).sum::<usize>() == WIDE as usize
    });
    println!("n2 copies every partition {:?} after the kill", killed.elapsed());
    nodes.start("n1");
    wait_for(ARRIVAL, "the restarted node copying a share again", || {
        nodes.alive();
        nodes.assigned().get("n1").is_some_and(|set| ours(set) > 0)
    });

    let produced = stream.finish();
    let counts =
        wait_all_arrived(nodes.nodes.get_mut("n2").expect("n2"), &west.bootstrap, &remote, &values("w", 0..produced));
    assert_eq!(counts.len(), produced, "every record, and only those, on the target");

    // Per partition: the target's records, each taken at its first arrival, are the source's in order.
    let source = by_position(consume_all(&east.bootstrap, &topic, READ));
    let target = by_position(consume_all(&west.bootstrap, &remote, READ));
    let in_order = |recs: &[support::Rec], first_only: bool| {
        let mut out: BTreeMap<i32, Vec<Vec<u8>>> = BTreeMap::new();
        let mut seen = std::collections::HashSet::new();
        for r in recs {
            let v = r.value.clone().unwrap_or_default();
            if !first_only || seen.insert(v.clone()) {
                out.entry(r.partition).or_default().push(v);
            }
        }
        out
    };
    let (from, to) = (in_order(&source, false), in_order(&target, true));
    for p in 0..WIDE {
        assert!(
            from.get(&p) == to.get(&p),
            "partition {p}: the target's first arrivals are not the source's records in order"
        );
    }

    // Exact checkpoints: the group at the source's end translates to the target's end of each
    // partition (everything before it copied; a replayed stretch lies before it too).
    let ends = commit_at_end(east, &group, &topic);
    let target_ends = end_offsets(&west.bootstrap, &remote);
    let exact = wait_showing(ARRIVAL, "a checkpoint of every partition at the group's offset", || {
        let cps = latest(&checkpoints(west, &group), &remote);
        let waiting: Vec<String> = (0..WIDE)
            .filter(|p| cps.get(p).is_none_or(|c| c.upstream_offset != ends[*p as usize]))
            .map(|p| format!("{p}"))
            .collect();
        (waiting.is_empty(), (cps, waiting.len()))
    })
    .0;
    for p in 0..WIDE {
        let cp = &exact[&p];
        assert_eq!(
            cp.downstream_offset, target_ends[p as usize],
            "partition {p}: upstream {} checkpointed at {} on the target, whose end is {}",
            cp.upstream_offset, cp.downstream_offset, target_ends[p as usize]
        );
    }
    println!(
        "{produced} records over {WIDE} partitions, {} duplicates (the kill -9); checkpoints exact",
        duplicates(&counts)
    );
    for f in nodes.nodes.values_mut() {
        assert!(f.terminate(Duration::from_secs(30)).success());
    }
}
