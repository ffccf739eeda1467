//! A node that carries many flows shares its Kafka clients per cluster connection (`src/clients/`):
//! threads stay bounded as flows are added, each flow still copies exactly its own topics, one flow whose
//! target refuses its records holds up nobody else, a reload that changes one cluster's properties
//! restarts only that cluster's flows, and the last flow of a connection takes its clients with it.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::observe::health;
use support::scenario::*;
use support::{Ferry, create_topic, end_offsets, produce, shared_pair, unique, wait_for};

/// Threads of a node running 20 idle-ish flows between two clusters, the bound docs/scaling.md states
/// ("Many flows per node"). Each flow keeps its own copier consumer (librdkafka: 3 threads plus one per
/// broker), a checkpoint producer once it has a group, and four threads of its own; everything else, the
/// lease election, the record producer and the offset-sync followers included, is shared per connection,
/// and the copiers' health checks and members views run on node-level threads (measured: 239 threads
/// once running alone, 308 and 338 under the suite's load; 470 with a lease consumer and a checkpoint producer per flow, 593 before that with an
/// offset-sync reader per flow).
const THREADS_AT_20_FLOWS: usize = 400;

fn threads(ferry: &Ferry) -> usize {
    let pid = ferry.pid().expect("ferry runs");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status.lines().find_map(|l| l.strip_prefix("Threads:")).and_then(|n| n.trim().parse().ok()).expect("Threads line")
}

/// The node's threads counted by name (librdkafka's `rdk:broker…` threads by their prefix), the most
/// numerous first: what a broken thread bound names.
fn thread_names(ferry: &Ferry) -> Vec<(usize, String)> {
    let pid = ferry.pid().expect("ferry runs");
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let name = name.trim().trim_end_matches(|c: char| c.is_ascii_digit() || c == '/' || c == '-');
        *counts.entry(name.to_string()).or_default() += 1;
    }
    let mut counts: Vec<(usize, String)> = counts.into_iter().map(|(n, c)| (c, n)).collect();
    counts.sort_unstable_by(|a, b| b.cmp(a));
    counts
}

fn write(dir: &Path, file: &str, text: &str) {
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, text).expect("write flow file");
    std::fs::rename(&tmp, dir.join(file)).expect("rename flow file");
}

fn flow_info(ferry: &Ferry, flow: &str) -> (u64, String) {
    // The node answers HTTP a moment after it starts.
    wait_for(Duration::from_secs(30), "the node serving HTTP", || {
        std::net::TcpStream::connect(ferry.listen_addr()).is_ok()
    });
    let h = health(ferry.listen_addr());
    let f = &h["flows"][flow];
    (f["generation"].as_u64().unwrap_or(0), f["state"].as_str().unwrap_or_default().to_string())
}

#[test]
fn twenty_flows_share_their_clients_and_a_refusing_target_holds_up_only_its_own_flow() {
    const FLOWS: usize = 20;
    const RECORDS: usize = 200;
    // A pair of its own: the bound counts this node's threads for 20 flows between two clusters, and on
    // the shared pair every flow's checkpoint computer would also translate the hundreds of groups other
    // tests leave there (blocking admin calls, each on a thread of the runtime's blocking pool: 764 seen).
    let (east, west) = &start_pair("many");
    let dir = tempfile::tempdir().expect("flows dir");
    let mut clusters = String::new();
    let mut topics = Vec::new();
    for k in 1..=FLOWS {
        clusters += &format!("[clusters.e{k}]\nbootstrap_servers = \"{}\"\n", east.bootstrap);
        clusters += &format!("[clusters.w{k}]\nbootstrap_servers = \"{}\"\n", west.bootstrap);
        let topic = unique(&format!("many-{k}"));
        create_topic(&east.bootstrap, &topic, 2, &[]);
        if k > 1 {
            produce(&east.bootstrap, &topic, &records(&format!("f{k}-"), 0..RECORDS, 2));
        }
        topics.push(topic);
    }
    // Flow 1's remote topic refuses the records of its partition 0 (each larger than the topic's
    // max.message.bytes; its config sync is off, so the override stays) and takes those of partition 1.
    let refusing = format!("e1.{}", topics[0]);
    create_topic(&west.bootstrap, &refusing, 2, &[("max.message.bytes", "20000")]);
    // Incompressible (the flow compresses its batches): a simple LCG's bytes.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut noise = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                (seed >> 56) as u8
            })
            .collect()
    };
    let big: Vec<_> = (0..20).map(|i| support::Rec::new(0, &noise(50_000), 1_000 + i)).collect();
    produce(&east.bootstrap, &topics[0], &big);
    produce(
        &east.bootstrap,
        &topics[0],
        &records("f1-", 0..100, 1)
            .into_iter()
            .map(|mut r| {
                r.partition = 1;
                r
            })
            .collect::<Vec<_>>(),
    );
    write(dir.path(), "clusters.toml", &clusters);
    for (i, topic) in topics.iter().enumerate() {
        let k = i + 1;
        let extra = if k == 1 { "sync_topic_configs_enabled = false\n" } else { "" };
        write(dir.path(), &format!("f{k}.toml"), &flow(&format!("e{k}"), &format!("w{k}"), &[topic], extra));
    }
    let started = Instant::now();
    let mut ferry = Ferry::start(dir.path(), &[]);
    // The most threads seen, and their names then.
    let sample = |ferry: &Ferry, (peak, at_peak): &mut (usize, Vec<(usize, String)>)| {
        let now = threads(ferry);
        if now > *peak {
            (*peak, *at_peak) = (now, thread_names(ferry));
        }
    };
    let mut starting = (0, Vec::new());
    wait_for(Duration::from_secs(180), "flows 2..20 copied their topics", || {
        assert_alive(&mut ferry);
        sample(&ferry, &mut starting);
        (2..=FLOWS).all(|k| total(&west.bootstrap, &format!("e{k}.{}", topics[k - 1])) >= RECORDS as i64)
    });
    println!("19 flows copied {RECORDS} records each within {:?}", started.elapsed());
    // Settled: every flow's actors started (heartbeats flowing), then the thread count over a few seconds.
    wait_for(Duration::from_secs(60), "every flow running", || {
        (1..=FLOWS).all(|k| flow_info(&ferry, &format!("e{k}->w{k}")).1 != "starting")
    });
    // The bound is the running node's: while flows start, short-lived clients (progress readers, fences,
    // topic creation) come and go, and how many overlap depends on the machine's load (a peak of 710
    // was seen under the suite's load, 595 once settled).
    let mut running = (0, Vec::new());
    for _ in 0..10 {
        sample(&ferry, &mut running);
        std::thread::sleep(Duration::from_millis(300));
    }
    let (peak, at_peak) = running;
    println!("threads with {FLOWS} flows: {peak} at most once running, {} at most while starting", starting.0);
    assert!(
        peak < THREADS_AT_20_FLOWS,
        "{peak} threads with {FLOWS} flows running: docs/scaling.md promises fewer than {THREADS_AT_20_FLOWS}; by \
         name at the peak: {at_peak:?}"
    );

    // Exactly: every record of each flow's own topic, once, on its own remote topic.
    for k in 2..=FLOWS {
        let remote = format!("e{k}.{}", topics[k - 1]);
        let arrived = arrivals(&west.bootstrap, &remote);
        assert_eq!(arrived.len(), RECORDS, "flow {k}: every record of its own topic on {remote}");
        assert_eq!(duplicates(&arrived), 0, "flow {k}: no duplicates");
        assert!(arrived.keys().all(|v| v.starts_with(format!("f{k}-").as_bytes())), "flow {k}: only its own records");
    }
    wait_for(Duration::from_secs(60), "flow 1's partition 1 copied", || {
        end_offsets(&west.bootstrap, &refusing).get(1) == Some(&100)
    });
    assert_eq!(end_offsets(&west.bootstrap, &refusing)[0], 0, "the refused partition took nothing");

    // The refusing flow kept refusing while the others copied more: a second round reaches all 19.
    for (i, topic) in topics.iter().enumerate().skip(1) {
        produce(&east.bootstrap, topic, &records(&format!("f{}-more-", i + 1), 0..50, 2));
    }
    wait_for(Duration::from_secs(60), "the second round on flows 2..20", || {
        (2..=FLOWS).all(|k| total(&west.bootstrap, &format!("e{k}.{}", topics[k - 1])) >= RECORDS as i64 + 50)
    });
    assert_eq!(
        end_offsets(&west.bootstrap, &refusing),
        vec![0, 100],
        "flow 1: partition 0 refused, partition 1 copied"
    );
}

#[test]
fn a_changed_cluster_restarts_only_its_flows_and_its_last_flow_takes_the_clients_along() {
    let (east, west) = shared_pair();
    let (a, b) = (unique("conn-a"), unique("conn-b"));
    for t in [&a, &b] {
        create_topic(&east.bootstrap, t, 1, &[]);
    }
    // Two connections to the same brokers: `east2` carries a property `east` does not.
    let clusters = |rack: &str| {
        format!(
            "[clusters.east]\nbootstrap_servers = \"{e}\"\n[clusters.west]\nbootstrap_servers = \"{w}\"\n\
             [clusters.east2]\nbootstrap_servers = \"{e}\"\n[clusters.east2.client]\n\"client.rack\" = \"{rack}\"\n\
             [clusters.west2]\nbootstrap_servers = \"{w}\"\n",
            e = east.bootstrap,
            w = west.bootstrap
        )
    };
    let dir = tempfile::tempdir().expect("flows dir");
    write(dir.path(), "clusters.toml", &clusters("r1"));
    write(dir.path(), "a.toml", &flow("east", "west", &[&a], ""));
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_for(Duration::from_secs(60), "east->west running", || {
        assert_alive(&mut ferry);
        flow_info(&ferry, "east->west").1 == "running"
    });
    // Threads of a node with one flow, settled.
    let settle = |ferry: &Ferry| {
        let mut last = threads(ferry);
        let start = Instant::now();
        loop {
            std::thread::sleep(Duration::from_secs(2));
            let now = threads(ferry);
            if now == last || start.elapsed() > Duration::from_secs(30) {
                return now;
            }
            last = now;
        }
    };
    let one_flow = settle(&ferry);

    write(dir.path(), "b.toml", &flow("east2", "west2", &[&b], ""));
    wait_for(Duration::from_secs(60), "east2->west2 running", || flow_info(&ferry, "east2->west2").1 == "running");
    let two_flows = settle(&ferry);
    println!("threads: one flow {one_flow}, with a flow on a second source connection {two_flows}");
    assert!(two_flows > one_flow, "a second connection's flow brings threads: {one_flow} -> {two_flows}");

    // east2's properties change: its flow restarts on a new connection, east->west keeps running.
    let untouched = flow_info(&ferry, "east->west");
    produce(&east.bootstrap, &a, &records("a", 0..100, 1));
    write(dir.path(), "clusters.toml", &clusters("r2"));
    wait_for(Duration::from_secs(60), "east2->west2 restarted", || flow_info(&ferry, "east2->west2").0 == 2);
    assert_eq!(flow_info(&ferry, "east->west"), untouched, "the flow on the other connection keeps its generation");
    wait_for(Duration::from_secs(60), "east->west copies across the reload", || {
        total(&west.bootstrap, &format!("east.{a}")) >= 100
    });

    // The last flow of east2's connection goes: so do its clients.
    std::fs::remove_file(dir.path().join("b.toml")).expect("remove b.toml");
    wait_for(Duration::from_secs(60), "east2->west2 stopped", || {
        health(ferry.listen_addr())["flows"].get("east2->west2").is_none()
    });
    let mut after = threads(&ferry);
    wait_for(Duration::from_secs(60), "threads back to one flow's", || {
        after = threads(&ferry);
        after <= one_flow + 2
    });
    println!("threads after the second connection's last flow went: {after} (one flow: {one_flow})");
    assert_eq!(flow_info(&ferry, "east->west"), untouched);
}

/// What the node costs, read from /proc: threads, resident memory and CPU time used so far.
#[derive(Clone, Copy, Debug)]
struct Cost {
    threads: usize,
    rss_mib: f64,
    cpu_s: f64,
    /// Voluntary context switches of the live threads: how often they went to sleep, which is what
    /// idle timers cost whatever the machine's load (CPU time grows with a loaded machine's contention).
    switches: u64,
}

fn cost_now(ferry: &Ferry) -> Cost {
    let pid = ferry.pid().expect("ferry runs");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let field = |name: &str| -> f64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0)
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("proc stat");
    // Fields after the command's closing parenthesis: state is the first, utime the 12th, stime the 13th
    // (in clock ticks of 1/100 s, Linux's USER_HZ).
    let after: Vec<&str> = stat.rsplit_once(')').expect("stat has a command").1.split_whitespace().collect();
    let ticks: f64 = after[11].parse::<f64>().unwrap_or(0.0) + after[12].parse::<f64>().unwrap_or(0.0);
    let mut switches = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        switches += status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
    }
    Cost { threads: field("Threads:") as usize, rss_mib: field("VmRSS:") / 1024.0, cpu_s: ticks / 100.0, switches }
}

/// The node at rest: threads (the fewest of the samples: short-lived setup threads come and go), RSS
/// at the end, CPU as a share of a core and wake-ups per second over `window`.
fn idle_cost(ferry: &mut Ferry, window: Duration) -> (usize, f64, f64, f64) {
    let start = cost_now(ferry);
    let began = Instant::now();
    let mut fewest = start.threads;
    while began.elapsed() < window {
        std::thread::sleep(Duration::from_millis(500));
        assert_alive(ferry);
        fewest = fewest.min(cost_now(ferry).threads);
    }
    let end = cost_now(ferry);
    let took = began.elapsed().as_secs_f64();
    let cpu = (end.cpu_s - start.cpu_s) / took;
    // Threads that ended in the window take their counts along: never below zero.
    let wakeups = end.switches.saturating_sub(start.switches) as f64 / took;
    (fewest, end.rss_mib, cpu, wakeups)
}

/// What an idle flow adds to a node, the bounds of docs/scaling.md ("Many flows per node") with a
/// margin for this debug build on a machine the rest of the suite loads (CPU time most: measured 0.14 %
/// of a core per flow alone, 0.25 % beside two other tests; the wake-ups, which grow less with the load
/// (20 a second here, 38 once in a loaded CI run), hold the idle timers to account) (the release figures are the
/// bench's, `scripts/bench.sh flows`): the node is measured with one flow, then after a reload added
/// 49, and the difference shared out. A flow costs its copier's consumer (librdkafka: its main thread,
/// the internal broker's, one per broker, the group coordinator's) and four threads of its own (the
/// copy loop, the copier's probe, the offset-sync emitter, the checkpoint computer); everything else is
/// the node's or its connections'.
const THREADS_PER_IDLE_FLOW: f64 = 8.5;
const RSS_MIB_PER_IDLE_FLOW: f64 = 2.5;
const CORE_SHARE_PER_IDLE_FLOW: f64 = 0.005;
const WAKEUPS_PER_IDLE_FLOW: f64 = 40.0;

#[test]
fn fifty_idle_flows_cost_little_each_a_failing_one_stays_alone_and_a_reload_of_one_touches_no_other() {
    const FLOWS: usize = 50;
    // A pair of its own: on the shared pair every flow would copy the reverse heartbeats that the other
    // tests' flows write into east's `heartbeats`, and checkpoint their groups: not idle.
    let (east, west) = &start_pair("idle");
    let dir = tempfile::tempdir().expect("flows dir");
    let mut clusters = String::new();
    let topics: Vec<String> = (1..=FLOWS).map(|k| unique(&format!("idle-{k}"))).collect();
    std::thread::scope(|s| {
        for chunk in topics.chunks(10) {
            s.spawn(move || chunk.iter().for_each(|t| create_topic(&east.bootstrap, t, 1, &[])));
        }
    });
    for k in 1..FLOWS {
        clusters += &format!("[clusters.e{k}]\nbootstrap_servers = \"{}\"\n", east.bootstrap);
        clusters += &format!("[clusters.w{k}]\nbootstrap_servers = \"{}\"\n", west.bootstrap);
    }
    // The last flow's source answers nothing: its copier and emitters fail and retry, alone.
    let nobody = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let dead = nobody.local_addr().expect("addr");
    drop(nobody);
    clusters += &format!("[clusters.e{FLOWS}]\nbootstrap_servers = \"{dead}\"\n");
    clusters += &format!("[clusters.w{FLOWS}]\nbootstrap_servers = \"{}\"\n", west.bootstrap);
    write(dir.path(), "clusters.toml", &clusters);
    // Heartbeats every minute, as the bench: every flow copies east's `heartbeats`, where each flow's
    // reverse heartbeats land (n² records per interval).
    let file = |k: usize, extra: &str| {
        let extra = format!("emit_heartbeats_interval_seconds = 60\n{extra}");
        flow(&format!("e{k}"), &format!("w{k}"), &[&topics[k - 1]], &extra)
    };
    write(dir.path(), "f1.toml", &file(1, ""));
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_for(Duration::from_secs(60), "e1->w1 running", || {
        assert_alive(&mut ferry);
        flow_info(&ferry, "e1->w1").1 == "running"
    });
    let window = Duration::from_secs(15);
    let one = idle_cost(&mut ferry, window);
    println!(
        "one flow: {} threads, {:.1} MiB, {:.2} % of a core, {:.0} wake-ups/s",
        one.0,
        one.1,
        one.2 * 100.0,
        one.3
    );

    for k in 2..=FLOWS {
        write(dir.path(), &format!("f{k}.toml"), &file(k, ""));
    }
    let added = Instant::now();
    let live = (1..FLOWS).map(|k| format!("e{k}->w{k}")).collect::<Vec<_>>();
    wait_for(Duration::from_secs(180), "the 49 reachable flows running", || {
        assert_alive(&mut ferry);
        let h = health(ferry.listen_addr());
        live.iter().all(|f| h["flows"][f]["state"] == "running")
    });
    println!("49 flows added and running within {:?}", added.elapsed());
    let dead_flow = format!("e{FLOWS}->w{FLOWS}");
    let state = flow_info(&ferry, &dead_flow).1;
    assert_ne!(state, "running", "the flow whose source answers nothing is not shown running");
    // Running is not yet at rest: each flow still joins the leaders group (a rebalance per flow that
    // subscribes) and its leader duties start. Measured once every flow leads.
    wait_for(Duration::from_secs(120), "the 49 reachable flows leading", || {
        assert_alive(&mut ferry);
        let shown = support::observe::flows(ferry.listen_addr());
        live.iter().all(|f| shown["flows"][f]["leading"] == true)
    });
    let n = (FLOWS - 1) as f64;
    let mut all = idle_cost(&mut ferry, window);
    // A window that caught the tail of the start (a late rebalance, the failing flow's restart) is
    // measured again: an idle cost is what every window shows, a transient is not.
    let over = |c: &(usize, f64, f64, f64)| {
        (c.2 - one.2) / n > CORE_SHARE_PER_IDLE_FLOW || (c.3 - one.3) / n > WAKEUPS_PER_IDLE_FLOW
    };
    if over(&all) {
        println!(
            "over a bound in the first window ({:.2} % of a core, {:.0} wake-ups/s): measured again",
            all.2 * 100.0,
            all.3
        );
        let again = idle_cost(&mut ferry, window);
        all = (all.0.min(again.0), again.1, all.2.min(again.2), all.3.min(again.3));
    }
    println!(
        "{FLOWS} flows: {} threads, {:.1} MiB, {:.2} % of a core, {:.0} wake-ups/s",
        all.0,
        all.1,
        all.2 * 100.0,
        all.3
    );
    let per_flow = ((all.0 as f64 - one.0 as f64) / n, (all.1 - one.1) / n, (all.2 - one.2) / n, (all.3 - one.3) / n);
    println!(
        "per added flow: {:.2} threads, {:.2} MiB, {:.3} % of a core, {:.1} wake-ups/s (bounds \
         {THREADS_PER_IDLE_FLOW}, {RSS_MIB_PER_IDLE_FLOW} MiB, {:.2} %, {WAKEUPS_PER_IDLE_FLOW})",
        per_flow.0,
        per_flow.1,
        per_flow.2 * 100.0,
        per_flow.3,
        CORE_SHARE_PER_IDLE_FLOW * 100.0
    );
    assert!(
        per_flow.0 <= THREADS_PER_IDLE_FLOW,
        "{:.2} threads per idle flow; by name: {:?}",
        per_flow.0,
        thread_names(&ferry)
    );
    assert!(per_flow.1 <= RSS_MIB_PER_IDLE_FLOW, "{:.2} MiB per idle flow", per_flow.1);
    assert!(per_flow.2 <= CORE_SHARE_PER_IDLE_FLOW, "{:.3} % of a core per idle flow", per_flow.2 * 100.0);
    assert!(per_flow.3 <= WAKEUPS_PER_IDLE_FLOW, "{:.1} wake-ups a second per idle flow", per_flow.3);

    // Idle, not asleep: records reach three of the flows' remote topics.
    for k in [1, 25, FLOWS - 1] {
        produce(&east.bootstrap, &topics[k - 1], &records(&format!("f{k}-"), 0..10, 1));
    }
    wait_for(Duration::from_secs(60), "records copied by flows 1, 25 and 49", || {
        [1, 25, FLOWS - 1].iter().all(|k| total(&west.bootstrap, &format!("e{k}.{}", topics[k - 1])) >= 10)
    });

    // A changed flow restarts alone: every other flow keeps its generation.
    let before: Vec<(u64, String)> = (1..=FLOWS).map(|k| flow_info(&ferry, &format!("e{k}->w{k}"))).collect();
    write(dir.path(), "f7.toml", &file(7, "emit_checkpoints_interval_seconds = 30\n"));
    wait_for(Duration::from_secs(60), "e7->w7 restarted and running", || {
        assert_alive(&mut ferry);
        flow_info(&ferry, "e7->w7") == (before[6].0 + 1, "running".to_string())
    });
    for k in (1..=FLOWS).filter(|k| *k != 7) {
        let (generation, state) = flow_info(&ferry, &format!("e{k}->w{k}"));
        assert_eq!(generation, before[k - 1].0, "flow {k} kept its generation across flow 7's reload");
        if k < FLOWS {
            assert_eq!(state, "running", "flow {k}");
        }
    }
}

/// Two definitions of one target cluster with different client properties are two connections, each
/// with its member of the node's leaders group: both flows lead, neither fences the other (one static
/// member id for both made them fence each other in turn).
#[test]
fn flows_into_two_connections_of_one_cluster_both_lead() {
    let (east, west) = shared_pair();
    let (a, b) = (unique("lead-a"), unique("lead-b"));
    for t in [&a, &b] {
        create_topic(&east.bootstrap, t, 1, &[]);
    }
    let clusters = format!(
        "[clusters.east]\nbootstrap_servers = \"{e}\"\n[clusters.west]\nbootstrap_servers = \"{w}\"\n\
         [clusters.west2]\nbootstrap_servers = \"{w}\"\n[clusters.west2.client]\n\"client.rack\" = \"r2\"\n",
        e = east.bootstrap,
        w = west.bootstrap
    );
    let dir = tempfile::tempdir().expect("flows dir");
    write(dir.path(), "clusters.toml", &clusters);
    write(dir.path(), "a.toml", &flow("east", "west", &[&a], ""));
    write(dir.path(), "b.toml", &flow("east", "west2", &[&b], ""));
    let mut ferry = Ferry::start(dir.path(), &[]);
    let leading = |ferry: &Ferry, f: &str| support::observe::flows(ferry.listen_addr())["flows"][f]["leading"] == true;
    flow_info(&ferry, "east->west"); // waits for the node to serve HTTP
    wait_for(Duration::from_secs(60), "both flows leading", || {
        assert_alive(&mut ferry);
        leading(&ferry, "east->west") && leading(&ferry, "east->west2")
    });
    // And they stay so: a fenced member would lose its leases within a session timeout or two.
    let until = Instant::now() + Duration::from_secs(12);
    while Instant::now() < until {
        assert!(leading(&ferry, "east->west") && leading(&ferry, "east->west2"), "a flow stopped leading");
        std::thread::sleep(Duration::from_secs(1));
    }
    let lease_restarts: f64 = ["east->west", "east->west2"]
        .iter()
        .map(|f| support::observe::actor_restarts(ferry.listen_addr(), f, "lease"))
        .sum();
    assert_eq!(lease_restarts, 0.0, "no lease restarted");
}
