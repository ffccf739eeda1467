//! Partitions that change hands between ferry nodes, the hard ways: a node frozen past its session
//! timeout (SIGSTOP, as a VM pause or a long GC would) whose queued records land after the new owner's,
//! and a partition taken away and given back while the target is too slow to drain it. What an operator
//! would see go wrong is asserted: checkpoints that point past records, records that never arrive; and a
//! deployment-wide pause and resume driven by `ferry pause` / `ferry resume` against one node each.
//! Real brokers (the binary's shared pair), real `ferry` processes.

use crate::support;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ferry::mm2::records::Checkpoint;
use rdkafka::consumer::{BaseConsumer, Consumer};
use support::ferry_cli;
use support::observe::{self, metric_sum};
use support::process::signal;
use support::scenario::*;
use support::{
    Cluster, Ferry, client_config, commit_group_offsets, consume_all, create_topic, end_offsets, http_post, produce,
    run_tool, shared_pair, topic_partitions, unique, wait_for,
};

/// The copier group's session timeout in these tests (on the source cluster's client properties).
const SESSION: Duration = Duration::from_secs(10);

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// A flows directory for `source->target` between the shared pair, with the copier group's session
/// timeout set to [`SESSION`].
fn dir_for(source: &str, target: &str, east: &Cluster, west: &Cluster, flow_toml: &str) -> tempfile::TempDir {
    let dir = flows_dir(&[(source, east.bootstrap.as_str()), (target, west.bootstrap.as_str())], flow_toml);
    let path = dir.path().join("clusters.toml");
    let text = std::fs::read_to_string(&path).expect("clusters.toml")
        + &format!("[clusters.{source}.client]\n\"session.timeout.ms\" = {}\n", SESSION.as_millis());
    std::fs::write(&path, text).expect("write clusters.toml");
    dir
}

fn start_node(dir: &std::path::Path, node: &str, deployment: &str) -> Ferry {
    start_node_env(dir, node, deployment, &[])
}

/// [`start_node`] with `extra` environment variables (failpoints).
fn start_node_env(dir: &std::path::Path, node: &str, deployment: &str, extra: &[(&str, &str)]) -> Ferry {
    let mut env = vec![("FERRY_NODE_ID", node), ("FERRY_DEPLOYMENT", deployment)];
    env.extend_from_slice(extra);
    let mut ferry = Ferry::start_env(dir, &[], &env);
    ferry.wait_log("node started", Duration::from_secs(30));
    ferry
}

/// Source partitions `flow` copies on `ferry`, of this test's topic and the source's `heartbeats`.
fn assigned(ferry: &Ferry, flow: &str) -> i64 {
    observe::assigned_partitions(ferry.listen_addr(), flow).len() as i64
}

/// Commits `group` on the source, every half second, at the end offsets the topic had `lag` ago: a
/// consumer that keeps up, some seconds behind.
struct LaggingGroup {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LaggingGroup {
    fn start(bootstrap: &str, group: &str, topic: &str, lag: Duration) -> LaggingGroup {
        let stop = Arc::new(AtomicBool::new(false));
        let (b, g, t, s) = (bootstrap.to_string(), group.to_string(), topic.to_string(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut history: VecDeque<(Instant, Vec<i64>)> = VecDeque::new();
            while !s.load(Ordering::SeqCst) {
                history.push_back((Instant::now(), end_offsets(&b, &t)));
                let mut due = None;
                while history.front().is_some_and(|(at, _)| at.elapsed() >= lag) {
                    due = history.pop_front();
                }
                if let Some((_, ends)) = due {
                    let offsets: Vec<(&str, i32, i64)> =
                        ends.iter().enumerate().map(|(p, e)| (t.as_str(), p as i32, *e)).collect();
                    commit_group_offsets(&b, &g, &offsets);
                }
                std::thread::sleep(Duration::from_millis(500)); // pacing, not synchronisation
            }
        });
        LaggingGroup { stop, thread: Some(thread) }
    }
}

impl Drop for LaggingGroup {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Checkpoints of `group` on `remote` written after `since_ms` (record time), from `<source>.checkpoints.internal`.
fn checkpoints_since(west: &Cluster, source: &str, group: &str, remote: &str, since_ms: i64) -> Vec<Checkpoint> {
    let topic = format!("{source}.checkpoints.internal");
    if topic_partitions(&west.bootstrap, &topic).is_none() {
        return Vec::new();
    }
    consume_all(&west.bootstrap, &topic, READ)
        .into_iter()
        .filter(|r| r.timestamp >= since_ms)
        .filter_map(|r| Checkpoint::decode(r.key.as_deref().unwrap_or_default(), r.value.as_deref()).ok())
        .filter(|c| c.group == group && c.topic == remote)
        .collect()
}

/// For every checkpoint (p, u -> d): the checkpoints whose consumer, starting at `d` on the target,
/// would miss a source record of `p` at or after `u` (no copy of it at or after `d`). Empty when
/// failover skips nothing.
fn checkpoints_past_the_truth(
    east: &Cluster,
    west: &Cluster,
    topic: &str,
    remote: &str,
    cps: &[Checkpoint],
) -> Vec<String> {
    // Where each value's last copy sits, per target partition.
    let mut last_copy: HashMap<(i32, Vec<u8>), i64> = HashMap::new();
    for r in consume_all(&west.bootstrap, remote, READ) {
        let at = last_copy.entry((r.partition, r.value.unwrap_or_default())).or_insert(r.offset);
        *at = (*at).max(r.offset);
    }
    // Per source partition, from the end back: the lowest "last copy" of any record at or after offset o.
    let mut source: BTreeMap<i32, Vec<(i64, Vec<u8>)>> = BTreeMap::new();
    for r in consume_all(&east.bootstrap, topic, READ) {
        source.entry(r.partition).or_default().push((r.offset, r.value.unwrap_or_default()));
    }
    let mut bad = Vec::new();
    for cp in cps {
        let Some(records) = source.get(&cp.partition) else { continue };
        let worst = records
            .iter()
            .filter(|(o, _)| *o >= cp.upstream_offset)
            .map(|(o, v)| (*o, last_copy.get(&(cp.partition, v.clone())).copied().unwrap_or(-1)))
            .min_by_key(|(_, copy)| *copy);
        if let Some((o, copy)) = worst
            && copy < cp.downstream_offset
        {
            bad.push(format!(
                "checkpoint p{} {} -> {}: source record at {o} has its last copy at {copy}",
                cp.partition, cp.upstream_offset, cp.downstream_offset
            ));
        }
    }
    bad
}

/// Two nodes share a flow under load; one is frozen (SIGSTOP) past the copier group's session timeout
/// while its producer holds a queue of records, then thawed: its queued records land after the new
/// owner's, and its offset syncs for them carry upstream offsets the new owner has long passed. No
/// checkpoint published afterwards may point past a record: a group failed over from any of them
/// reads a copy of every source record at or after its position.
#[test]
fn a_frozen_ex_owner_never_pushes_a_checkpoint_past_the_truth() {
    let (east, west) = shared_pair();
    let topic = unique("frozen");
    let remote = format!("east.{topic}");
    let group = format!("{topic}-g");
    let partitions = 6;
    create_topic(&east.bootstrap, &topic, partitions, &[]);
    // A long linger keeps a few hundred records queued in each node's producer at any moment.
    let extra = format!(
        "groups = [\"{group}\"]\nemit_checkpoints_interval_seconds = 1\nrefresh_groups_interval_seconds = 1\n\
         refresh_topics_interval_seconds = 2\nlinger_ms = 300\n"
    );
    let dir = dir_for("east", "west", east, west, &flow("east", "west", &[&topic], &extra));
    let deployment = unique("frozen-deploy");
    let stream = Stream::start(&east.bootstrap, &topic, partitions, "f", 60, Duration::from_millis(20));
    let mut n1 = start_node(dir.path(), "n1", &deployment);
    let mut n2 = start_node(dir.path(), "n2", &deployment);
    wait_for(ARRIVAL, "both nodes copying", || {
        assert_alive(&mut n1);
        assert_alive(&mut n2);
        let (a, b) = (assigned(&n1, FLOW), assigned(&n2, FLOW));
        a > 0 && b > 0 && total(&west.bootstrap, &remote) > 2_000
    });
    let lagging = LaggingGroup::start(&east.bootstrap, &group, &topic, Duration::from_secs(8));
    wait_for(ARRIVAL, "checkpoints of the lagging group", || {
        !checkpoints_since(west, "east", &group, &remote, 0).is_empty()
    });

    let pid = n1.pid().expect("n1 runs");
    signal(pid, "STOP");
    let frozen = Instant::now();
    // n2 takes n1's partitions after the session timeout and copies on.
    wait_for(Duration::from_secs(60), "n2 owns every partition", || {
        assigned(&n2, FLOW) == i64::from(partitions) + 1 // + the source's heartbeats partition
    });
    while frozen.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(200)); // the freeze itself, not synchronisation
    }
    let thawed_ms = now_ms();
    signal(pid, "CONT");
    // n1 rejoins; both copy again.
    wait_for(Duration::from_secs(90), "n1 copying again", || {
        assert_alive(&mut n1);
        assigned(&n1, FLOW) > 0
    });
    // Checkpoints keep coming for a while after the thaw: the group passes the records n1 had queued.
    let after = Instant::now();
    wait_for(Duration::from_secs(90), "checkpoints 20 s after the thaw", || {
        after.elapsed() >= Duration::from_secs(20)
            && !checkpoints_since(west, "east", &group, &remote, thawed_ms + 15_000).is_empty()
    });
    drop(lagging);
    let produced = stream.finish();
    let expected = values("f", 0..produced);
    let counts = wait_all_arrived(&mut n2, &west.bootstrap, &remote, &expected);
    let unclean = metric_sum(&observe::metrics(n1.listen_addr()), "ferry_unclean_handovers_total", &[("flow", FLOW)]);
    let cps = checkpoints_since(west, "east", &group, &remote, thawed_ms);
    let bad = checkpoints_past_the_truth(east, west, &topic, &remote, &cps);
    println!(
        "{produced} records, {} duplicates; {} checkpoints after the thaw, {} past the truth; n1 let go of {unclean} partitions uncleanly",
        duplicates(&counts),
        cps.len(),
        bad.len()
    );
    assert!(bad.is_empty(), "checkpoints published after the thaw that skip records on failover:\n{}", bad.join("\n"));
    assert!(cps.len() >= partitions as usize, "checkpoints were published after the thaw: {}", cps.len());
    assert!(unclean >= 1.0, "the thawed node counted its lost partitions: {unclean}");
    for f in [&mut n1, &mut n2] {
        assert!(f.terminate(Duration::from_secs(30)).success());
    }
}

/// Sets (or with `None` removes) a produce quota for a client id on a cluster, as an operator would.
fn produce_quota(bootstrap: &str, client_id: &str, bytes_per_second: Option<u64>) {
    let config = bytes_per_second.map(|b| format!("producer_byte_rate={b}"));
    let mut args =
        vec!["--bootstrap-server", bootstrap, "--alter", "--entity-type", "clients", "--entity-name", client_id];
    match &config {
        Some(c) => args.extend(["--add-config", c.as_str()]),
        None => args.extend(["--delete-config", "producer_byte_rate"]),
    }
    let out = run_tool("kafka.admin.ConfigCommand", &args, Duration::from_secs(60));
    assert!(out.status.success(), "kafka-configs {args:?}: {}\n{}", out.stdout, out.stderr);
}

/// A partition the copier group takes from the node and gives back while the target is so slow (a
/// produce quota on the copier's client id) that its records are still queued: the node copies it
/// again, and every record arrives.
#[test]
fn a_partition_given_back_while_it_drains_is_copied_again() {
    let (east, west) = shared_pair();
    // Own aliases, and the target's own `client.id`: the quota names the record producer's client id,
    // `<client.id>|record-producer`, and must not slow the other tests' flows (nor other nodes' shared
    // `ferry|record-producer`).
    let (source, target) = ("slowsrc", "slowdst");
    let flow_id = format!("{source}->{target}");
    let topic = unique("given-back");
    let remote = format!("{source}.{topic}");
    let partitions = 4;
    create_topic(&east.bootstrap, &topic, partitions, &[]);
    // Incompressible values (the copier compresses): hex of a pseudo-random sequence, 1 KB each.
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut noise = || {
        (0..64)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                format!("{seed:016x}")
            })
            .collect::<String>()
    };
    let recs: Vec<_> = (0..3_000)
        .map(|i| support::Rec::new(i % partitions, format!("g{i}-{}", noise()).as_bytes(), 1_000 + i64::from(i)))
        .collect();
    produce(&east.bootstrap, &topic, &recs);
    let client_id = format!("{}|record-producer", unique("slow-target"));
    produce_quota(&west.bootstrap, &client_id, Some(20_000));
    let dir =
        dir_for(source, target, east, west, &flow(source, target, &[&topic], "refresh_topics_interval_seconds = 2\n"));
    let clusters = dir.path().join("clusters.toml");
    let text = std::fs::read_to_string(&clusters).expect("clusters.toml");
    let prefix = client_id.trim_end_matches("|record-producer");
    std::fs::write(&clusters, format!("{text}[clusters.{target}.client]\n\"client.id\" = \"{prefix}\"\n"))
        .expect("write clusters.toml");
    let deployment = unique("given-back-deploy");
    let mut node = start_node(dir.path(), "n1", &deployment);
    wait_for(ARRIVAL, "the first records on the slow target", || {
        assert_alive(&mut node);
        total(&west.bootstrap, &remote) > 0
    });

    // Another member joins the copier group, takes its share, and leaves again at once.
    let mut cfg = client_config(&east.bootstrap, &[]);
    cfg.set("group.id", format!("{deployment}.{flow_id}"))
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("session.timeout.ms", SESSION.as_millis().to_string())
        .set("enable.auto.commit", "false");
    let intruder: BaseConsumer = cfg.create().expect("intruder consumer");
    intruder.subscribe(&[&topic]).expect("subscribe");
    let mut taken = 0;
    wait_for(Duration::from_secs(90), "the other member given a share", || {
        let _ = intruder.poll(Duration::from_millis(100));
        taken = intruder.assignment().map_or(0, |a| a.count());
        taken > 0
    });
    intruder.unsubscribe();
    let _ = intruder.poll(Duration::from_millis(100));
    drop(intruder); // leaves the group: the partitions go back to the node
    println!("the other member held {taken} partitions and left");
    wait_for(Duration::from_secs(60), "the node owns every partition again", || {
        assigned(&node, &flow_id) == i64::from(partitions) + 1
    });
    produce_quota(&west.bootstrap, &client_id, None);
    // Records written after the partitions came back must arrive too (the ones queued before could
    // arrive from the old queue even if a partition were never copied again).
    let later: Vec<_> =
        (0..400).map(|i| support::Rec::new(i % partitions, format!("later{i}").as_bytes(), 9_000)).collect();
    produce(&east.bootstrap, &topic, &later);

    let expected: Vec<Vec<u8>> = recs.iter().chain(&later).map(|r| r.value.clone().unwrap_or_default()).collect();
    let counts = wait_all_arrived(&mut node, &west.bootstrap, &remote, &expected);
    println!("{} records arrived, {} duplicates", expected.len(), duplicates(&counts));
    assert!(node.terminate(Duration::from_secs(30)).success());
}

fn flow_status(ferry: &Ferry) -> serde_json::Value {
    observe::health(ferry.listen_addr())["flows"][FLOW].clone()
}

/// Nothing reaches `remote` for an observation window (a negative check needs one): 3 s is 30 polls.
fn assert_still(west: &Cluster, remote: &str, expected: i64, what: &str) {
    let since = Instant::now();
    while since.elapsed() < Duration::from_secs(3) {
        assert_eq!(total(&west.bootstrap, remote), expected, "{what}");
        std::thread::sleep(Duration::from_millis(100)); // the observation window, not synchronisation
    }
}

/// A pause taken on one node holds on every node of the deployment (the other node's share too, and
/// whichever node a rebalance gives the partitions to), survives restarts of every node, shows who took
/// it on each node, and a resume on another node brings everything across once.
#[test]
fn a_pause_on_one_node_holds_on_every_node_and_across_restarts() {
    let (east, west) = shared_pair();
    let topic = unique("deploy-pause");
    let remote = format!("east.{topic}");
    create_topic(&east.bootstrap, &topic, 4, &[]);
    produce(&east.bootstrap, &topic, &records("a", 0..1_000, 4));
    let dir =
        dir_for("east", "west", east, west, &flow("east", "west", &[&topic], "refresh_topics_interval_seconds = 2\n"));
    let deployment = unique("pause-deploy");
    let mut nodes: BTreeMap<&str, Ferry> =
        ["n1", "n2"].into_iter().map(|n| (n, start_node(dir.path(), n, &deployment))).collect();
    wait_for(ARRIVAL, "the first 1,000 records, both nodes copying", || {
        nodes.values_mut().for_each(assert_alive);
        total(&west.bootstrap, &remote) == 1_000 && nodes.values().all(|f| assigned(f, FLOW) > 0)
    });

    // The operator's way: `ferry pause` against one node (its listener has no token: loopback).
    let (code, out, err) = ferry_cli(&["pause", FLOW, "--url", &format!("http://{}", nodes["n1"].listen_addr())]);
    assert_eq!(code, 0, "ferry pause exits 0 once recorded for the deployment and applied\n{out}{err}");
    assert!(out.contains("paused") && out.contains("east->west"), "{out}");
    wait_for(Duration::from_secs(10), "both nodes paused, saying who paused", || {
        nodes.values().all(|f| {
            let s = flow_status(f);
            s["state"] == "paused" && s["pause"]["by"] == "n1" && s["pause"]["paused"] == true
        })
    });
    produce(&east.bootstrap, &topic, &records("b", 0..500, 4));
    assert_still(west, &remote, 1_000, "no node copies while the deployment is paused");

    // Every node restarts (one after the other, then both at once): the pause stands.
    for n in ["n2", "n1"] {
        let mut f = nodes.remove(n).expect("node");
        assert!(f.terminate(Duration::from_secs(30)).success());
        nodes.insert(n, start_node(dir.path(), n, &deployment));
        wait_for(Duration::from_secs(30), "the restarted node paused", || flow_status(&nodes[n])["state"] == "paused");
        assert_still(west, &remote, 1_000, "still paused after a node restarted");
    }
    let names: Vec<&str> = nodes.keys().copied().collect();
    for n in &names {
        let mut f = nodes.remove(n).expect("node");
        assert!(f.terminate(Duration::from_secs(30)).success());
    }
    for n in &names {
        nodes.insert(n, start_node(dir.path(), n, &deployment));
    }
    wait_for(Duration::from_secs(30), "both restarted nodes paused", || {
        nodes.values().all(|f| flow_status(f)["state"] == "paused")
    });
    assert_still(west, &remote, 1_000, "still paused after the whole deployment restarted");

    // A resume on the other node: everything arrives, once.
    let (code, out, err) = ferry_cli(&["resume", FLOW, "--url", &format!("http://{}", nodes["n2"].listen_addr())]);
    assert_eq!(code, 0, "ferry resume exits 0 once recorded and applied\n{out}{err}");
    assert!(out.contains("resumed") && out.contains("east->west"), "{out}");
    let mut expected = values("a", 0..1_000);
    expected.extend(values("b", 0..500));
    let n1 = nodes.get_mut("n1").expect("n1");
    let counts = wait_all_arrived(n1, &west.bootstrap, &remote, &expected);
    assert_eq!(duplicates(&counts), 0, "pausing and resuming the deployment copies nothing twice");
    wait_for(Duration::from_secs(10), "both nodes running, resumed by n2", || {
        nodes.values().all(|f| {
            let s = flow_status(f);
            s["state"] == "running" && s["pause"]["by"] == "n2" && s["pause"]["paused"] == false
        })
    });
    for f in nodes.values_mut() {
        assert!(f.terminate(Duration::from_secs(30)).success());
    }
}

/// The value of the control topic's last pause record of [`FLOW`] for `deployment`, read from the target
/// as an operator would (`kafka-console-consumer` on `ferry.control.internal`): the deployment's decision.
fn last_pause_record(west: &Cluster, deployment: &str) -> serde_json::Value {
    let key = format!("pause|{deployment}|{FLOW}");
    consume_all(&west.bootstrap, "ferry.control.internal", READ)
        .into_iter()
        .rfind(|r| r.key.as_deref() == Some(key.as_bytes()))
        .and_then(|r| r.value)
        .map(|v| serde_json::from_slice(&v).expect("a pause record is JSON"))
        .expect("a pause record of the flow")
}

/// Whether a node's `/flows` entry is in the state `record` decides: its copier confirmed it (`paused`,
/// `state`) and it shows that record as the deployment's decision.
fn follows(status: &serde_json::Value, record: &serde_json::Value) -> bool {
    let paused = record["paused"] == true;
    status["paused"] == paused
        && (status["state"] == "paused") == paused
        && status["pause"]["paused"] == record["paused"]
        && status["pause"]["by"] == record["by"]
}

/// Operators who disagree: a pause through one node and a resume through the other at the same moment,
/// round after round. Every node must end each round in the state of the control topic's last record (read
/// here from the topic), whichever decision it took itself: a node applies the topic's records in the
/// topic's order, its own included, so a resume acknowledged late cannot undo the pause recorded after
/// it. Each node applies its own acknowledgements 300 ms late here (`control-ack` failpoint, as a loaded
/// node may), so every round races. A round that ends paused must copy nothing, on either node.
#[test]
fn conflicting_pauses_and_resumes_through_two_nodes_end_in_the_control_topic_s_last_record_everywhere() {
    const ROUNDS: usize = 20;
    let (east, west) = shared_pair();
    let topic = unique("pause-race");
    let remote = format!("east.{topic}");
    create_topic(&east.bootstrap, &topic, 4, &[]);
    produce(&east.bootstrap, &topic, &records("a", 0..200, 4));
    let dir = dir_for("east", "west", east, west, &flow("east", "west", &[&topic], ""));
    let deployment = unique("pause-race");
    let failpoints = [("FAILPOINTS", "control-ack=return(300)")];
    let mut nodes: Vec<Ferry> =
        ["n1", "n2"].into_iter().map(|n| start_node_env(dir.path(), n, &deployment, &failpoints)).collect();
    wait_for(ARRIVAL, "the first 200 records, both nodes copying", || {
        nodes.iter_mut().for_each(assert_alive);
        total(&west.bootstrap, &remote) == 200 && nodes.iter().all(|f| assigned(f, FLOW) > 0)
    });
    let path = "/flows/east-%3Ewest";
    let mut expected = values("a", 0..200);
    let mut answers_202 = 0;
    let mut ended_paused = 0;
    for round in 0..ROUNDS {
        // n1 pauses and n2 resumes in even rounds, the other way round in odd ones; both at once.
        let start = Barrier::new(2);
        let answers: Vec<(bool, u16, String)> = std::thread::scope(|s| {
            let asks: Vec<_> = nodes
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    let (start, addr) = (&start, f.listen_addr());
                    let pause = (round + i) % 2 == 0;
                    s.spawn(move || {
                        start.wait();
                        let (code, body) =
                            http_post(addr, &format!("{path}/{}", if pause { "pause" } else { "resume" }));
                        (pause, code, body)
                    })
                })
                .collect();
            asks.into_iter().map(|a| a.join().expect("request thread")).collect()
        });
        for (pause, code, body) in &answers {
            assert!(matches!(code, 200 | 202), "round {round}, pause={pause}: {code} {body}");
            answers_202 += usize::from(*code == 202);
        }
        let last = last_pause_record(west, &deployment);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let shown: Vec<serde_json::Value> = nodes.iter().map(flow_status).collect();
            if shown.iter().all(|s| follows(s, &last)) {
                break;
            }
            let summary: Vec<String> = shown
                .iter()
                .zip(["n1", "n2"])
                .map(|(s, n)| format!("{n}: state {} paused {} pause {}", s["state"], s["paused"], s["pause"]))
                .collect();
            assert!(
                Instant::now() < deadline,
                "round {round}: the control topic's last record is {last}, but after 10 s the nodes show [{}] \
                 (answers: {answers:?})",
                summary.join("; ")
            );
            std::thread::sleep(Duration::from_millis(100)); // polling interval
        }
        if last["paused"] == true {
            ended_paused += 1;
            let before = total(&west.bootstrap, &remote);
            let prefix = format!("r{round}-");
            produce(&east.bootstrap, &topic, &records(&prefix, 0..20, 4));
            expected.extend(values(&prefix, 0..20));
            assert_still(
                west,
                &remote,
                before,
                &format!("round {round}: no node copies while the last record says paused"),
            );
        }
    }
    println!("{ROUNDS} rounds: {ended_paused} ended paused, {answers_202} answers were 202 (overtaken)");
    let (code, body) = http_post(nodes[0].listen_addr(), &format!("{path}/resume"));
    assert_eq!(code, 200, "{body}");
    let counts = wait_all_arrived(&mut nodes[0], &west.bootstrap, &remote, &expected);
    assert_eq!(duplicates(&counts), 0, "pausing and resuming copies nothing twice");
    for f in &mut nodes {
        assert!(f.terminate(Duration::from_secs(30)).success());
    }
}
