//! Faults end to end, asserting what an operator sees: the records on the target, the checkpoints, and
//! the node's `/health` and `/metrics`.
//!
//! - injected panics and errors in every actor (the `failpoints` feature, `FAILPOINTS` per ferry process);
//! - the target broker restarted mid-stream and the source broker away for 30 s (dedicated clusters);
//! - a cluster unreachable from the start, next to a healthy flow;
//! - `kill -9` of the node at random moments under load, and a graceful SIGTERM;
//! - corrupt records in the internal topics (dedicated clusters: they write into internal topics; the
//!   copy-progress garbage goes into a progress topic of its own flow on the shared pair);
//! - source records deleted before they were copied (`on_source_gap`).
//!
//! Tests that stop brokers or write into internal topics run on their own clusters; the others use the
//! shared pair with unique topic and group names.

use crate::support;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use ferry::mm2::connect_offsets::{self, SOURCE_CONNECTOR};
use ferry::mm2::records::{Checkpoint, OffsetSync};
use support::observe::{self, actor_restarts, assert_monotonic, flow_actors, health, metric_sum, unhealthy};
use support::{
    Ferry, Rec, commit_group_offsets, consume_all, create_topic, delete_records, end_offsets, free_port, produce,
    shared_pair, tail, unique, wait_for,
};

use support::scenario::*;

// ---------------------------------------------------------------------------------------------------------
// 1. Injected failures in every actor
// ---------------------------------------------------------------------------------------------------------

#[test]
fn every_actor_restarts_after_a_panic_or_an_error_and_nothing_is_lost() {
    let (east, west) = shared_pair();
    let topic = unique("faults-actors");
    let remote = format!("east.{topic}");
    let group = format!("{topic}-g");
    create_topic(&east.bootstrap, &topic, 3, &[]);
    let extra = format!(
        "groups = [\"{group}\"]\nemit_checkpoints_interval_seconds = 0.5\nrefresh_groups_interval_seconds = 0.5\n\
         refresh_topics_interval_seconds = 1\n"
    );
    let dir = pair_dir(east, west, &flow("east", "west", &[&topic], &extra));
    // Panics in three actors, errors in the others; the copier gets both, mid-stream.
    let failpoints = [
        "copier-poll=20*off->1*panic",
        "copier-deliver=1500*off->2*return(target refused the record)",
        "offset-syncs-send=2*return(offset-syncs cluster away)",
        "checkpoints-emit=2*off->1*panic",
        "heartbeats-emit=2*return(heartbeats cluster away)",
        "topics-refresh=1*off->1*panic",
        "lease-poll=100*off->1*return(lease cluster away)",
    ]
    .join(";");
    let stream = Stream::start(&east.bootstrap, &topic, 3, "a", 200, Duration::from_millis(50));
    let started = Instant::now();
    let mut ferry = Ferry::start_env(dir.path(), &[], &[("FAILPOINTS", &failpoints)]);
    ferry.wait_log("node started", STARTED);
    let addr = ferry.listen_addr();

    // The group consumes right behind the stream and commits as it goes: its checkpoints follow it
    // through every restart.
    let mut restarts = BTreeMap::new();
    wait_for(ARRIVAL, "every actor restarted at least once", || {
        assert_alive(&mut ferry);
        commit_at_end(east, &group, &topic);
        let text = observe::metrics(addr);
        restarts = ACTORS
            .iter()
            .map(|a| (*a, metric_sum(&text, "ferry_actor_restarts_total", &[("flow", FLOW), ("actor", a)])))
            .collect();
        restarts.values().all(|n| *n >= 1.0)
    });
    println!("every actor restarted after {:?}: {restarts:?}", started.elapsed());
    let produced = stream.finish();
    let ends = commit_at_end(east, &group, &topic);
    // Every failure point fires: the copier restarts once (the panic); the two refused records fail only
    // their partitions, which are retried without a restart of the copier.
    let expected = [
        ("copier", 1.0),
        ("offset_syncs", 2.0),
        ("checkpoints", 1.0),
        ("heartbeats", 2.0),
        ("topics", 1.0),
        ("lease", 1.0),
    ];
    wait_showing(Duration::from_secs(60), "every failure point fired", || {
        assert_alive(&mut ferry);
        let text = observe::metrics(addr);
        let got: Vec<(&str, f64)> = expected
            .iter()
            .map(|(a, _)| (*a, metric_sum(&text, "ferry_actor_restarts_total", &[("flow", FLOW), ("actor", a)])))
            .collect();
        (got.iter().zip(&expected).all(|((_, n), (_, want))| n >= want), got)
    });

    let failures =
        metric_sum(&observe::metrics(addr), "ferry_partition_failures_total", &[("flow", FLOW), ("topic", &topic)]);
    // Both refusals may hit one partition before it stops: at least one failure is counted.
    assert!(failures >= 1.0, "the refused records are counted as partition failures: {failures}");
    let counts = wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &values("a", 0..produced));
    assert_eq!(counts.len(), produced, "nothing but the produced records on {remote}");
    // A group at the end of the source translates to the end of the remote topic: a consumer failing over
    // re-reads nothing and skips nothing.
    let remote_ends = end_offsets(&west.bootstrap, &remote);
    wait_showing(Duration::from_secs(60), "checkpoints of the group at the end of every partition", || {
        assert_alive(&mut ferry);
        let l = latest(&checkpoints(west, &group), &remote);
        let ok = (0..3).all(|p| {
            l.get(&p).is_some_and(|c| {
                c.upstream_offset == ends[p as usize] && c.downstream_offset == remote_ends[p as usize]
            })
        });
        // For the failure message: the newest offset syncs of each partition.
        let mut syncs: BTreeMap<i32, Vec<(i64, i64)>> = BTreeMap::new();
        for s in offset_syncs(east, &topic) {
            syncs.entry(s.partition).or_default().push((s.upstream_offset, s.downstream_offset));
        }
        let newest: BTreeMap<i32, Vec<(i64, i64)>> =
            syncs.into_iter().map(|(p, v)| (p, v[v.len().saturating_sub(3)..].to_vec())).collect();
        (ok, (ends.clone(), remote_ends.clone(), l, newest))
    });
    let cps = checkpoints(west, &group);
    assert_monotonic(&cps);
    wait_healthy(&mut ferry, FLOW, Duration::from_secs(30));
    let h = health(addr);
    for (name, a) in flow_actors(&h, FLOW) {
        assert!(a.restarts >= 1, "/health counts the restarts of {name}: {a:?}");
    }

    let log = observe::strip_ansi(&ferry.log());
    for needle in [
        "failpoint copier-poll panic",
        "failpoint copier-deliver: target refused the record",
        "failpoint offset-syncs-send: offset-syncs cluster away",
        "failpoint checkpoints-emit panic",
        "failpoint heartbeats-emit: heartbeats cluster away",
        "failpoint topics-refresh panic",
        "topic synchroniser panicked",
    ] {
        assert!(log.contains(needle), "the log names the failure {needle:?}");
    }
    let status = ferry.terminate(Duration::from_secs(30));
    assert!(status.success(), "graceful stop after the faults: {status:?}");
    println!(
        "{produced} records, {} duplicates, {} checkpoints for the group, total {:?}",
        duplicates(&counts),
        cps.len(),
        started.elapsed()
    );
}

/// A panic anywhere in the copy path (before a record is handed to the producer, right after, in its
/// delivery report) ends one copier lifetime; the next one resumes within seconds and copies everything.
/// (It once counted a record in flight that never reached the producer and waited minutes for it.)
#[test]
fn a_copier_panic_anywhere_in_the_copy_path_resumes_within_seconds_and_loses_nothing() {
    const RECORDS: usize = 20_000;
    const RESUME_WITHIN: Duration = Duration::from_secs(10);
    let (east, west) = shared_pair();
    for point in ["copier-deliver", "copier-sent", "copier-report"] {
        let topic = unique(&format!("faults-{point}"));
        let remote = format!("east.{topic}");
        create_topic(&east.bootstrap, &topic, 4, &[]);
        produce(&east.bootstrap, &topic, &records("p", 0..RECORDS, 4));
        let dir = pair_dir(east, west, &flow("east", "west", &[&topic], ""));
        let failpoints = format!("{point}=2000*off->1*panic");
        let mut ferry = Ferry::start_env(dir.path(), &[], &[("FAILPOINTS", &failpoints)]);
        ferry.wait_log("node started", STARTED);
        let addr = ferry.listen_addr();
        let restarts = || {
            metric_sum(&observe::metrics(addr), "ferry_actor_restarts_total", &[("flow", FLOW), ("actor", "copier")])
        };
        wait_for(ARRIVAL, &format!("the copier panics at {point} and is restarted"), || {
            assert_alive(&mut ferry);
            restarts() >= 1.0
        });
        let restarted = Instant::now();
        let (expected, mut copied) = (values("p", 0..RECORDS), 0);
        let resumed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_for(RESUME_WITHIN, &format!("all {RECORDS} records on {remote} after the panic at {point}"), || {
                copied = total(&west.bootstrap, &remote);
                copied >= RECORDS as i64 && {
                    let counts = arrivals(&west.bootstrap, &remote);
                    expected.iter().all(|v| counts.contains_key(v))
                }
            })
        }));
        if let Err(e) = resumed {
            eprintln!(
                "{copied} of {RECORDS} copied; the log's tail:\n{}",
                tail(&observe::strip_ansi(&ferry.log()), 30)
            );
            std::panic::resume_unwind(e);
        }
        let took = restarted.elapsed();
        let counts = wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &expected);
        let log = observe::strip_ansi(&ferry.log());
        assert!(log.contains(&format!("failpoint {point} panic")), "the log names the panic at {point}");
        assert_eq!(restarts(), 1.0, "one copier restart for the one panic at {point}");
        println!(
            "{point}: resumed and copied every record {took:?} after the restart; {} duplicates",
            duplicates(&counts)
        );
        assert!(ferry.terminate(Duration::from_secs(30)).success());
    }
}

/// A copier lifetime that ends with a rebalance of its group taken in and not applied must still close its
/// consumer: librdkafka closes it only once every rebalance is acknowledged. Here the node is frozen past
/// the session timeout (the group declares its assignment lost: a revocation to apply when it resumes)
/// and the failpoint fails applying that revocation, as an error right after it would. The copier
/// restarts and copies everything; before, its consumer's close could wait forever.
#[test]
fn a_copier_that_fails_with_a_rebalance_pending_restarts_and_copies_everything() {
    let (east, west) = shared_pair();
    let topic = unique("faults-rebalance");
    let remote = format!("east.{topic}");
    create_topic(&east.bootstrap, &topic, 4, &[]);
    produce(&east.bootstrap, &topic, &records("r", 0..1_000, 4));
    let dir = pair_dir(east, west, &flow("east", "west", &[&topic], ""));
    // The first rebalance (the assignment) is applied, the next (the lost one) fails.
    let mut ferry = Ferry::start_env(dir.path(), &[], &[("FAILPOINTS", "copier-rebalance=1*off->1*return")]);
    ferry.wait_log("node started", STARTED);
    wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &values("r", 0..1_000));
    let pid = ferry.pid().expect("pid");
    support::process::signal(pid, "STOP");
    // Past the copier group's session timeout (10 s): the group takes the assignment away.
    std::thread::sleep(Duration::from_secs(13)); // the scenario: a node frozen this long
    support::process::signal(pid, "CONT");
    wait_for(ARRIVAL, "the copier fails on the lost assignment and restarts", || {
        assert_alive(&mut ferry);
        actor_restarts(ferry.listen_addr(), FLOW, "copier") >= 1.0
    });
    produce(&east.bootstrap, &topic, &records("r", 1_000..2_000, 4));
    let counts = wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &values("r", 0..2_000));
    let restarts = actor_restarts(ferry.listen_addr(), FLOW, "copier");
    println!("every record copied after {restarts} copier restart(s); {} duplicates", duplicates(&counts));
    assert!(observe::strip_ansi(&ferry.log()).contains("failpoint copier-rebalance"), "the failpoint fired");
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

// ---------------------------------------------------------------------------------------------------------
// 2. Brokers away: the target restarted mid-stream, the source stopped for 30 s
// ---------------------------------------------------------------------------------------------------------

#[test]
fn a_broker_outage_on_either_side_is_reported_and_loses_nothing() {
    let (mut east, mut west) = start_pair("outage");
    let topic = "outage";
    let remote = "east.outage";
    create_topic(&east.bootstrap, topic, 3, &[]);
    let dir = pair_dir(&east, &west, &flow("east", "west", &[topic], ""));
    let stream = Stream::start(&east.bootstrap, topic, 3, "o", 200, Duration::from_millis(50));
    let mut ferry = Ferry::start(dir.path(), &[]);
    ferry.wait_log("node started", STARTED);
    wait_healthy(&mut ferry, FLOW, Duration::from_secs(30));
    wait_for(ARRIVAL, "copying under way", || total(&west.bootstrap, remote) >= 2_000);

    // The target goes away mid-stream and comes back.
    let down = Instant::now();
    west.stop();
    let stopped = down.elapsed();
    // librdkafka reports the lost connections at once; the copier shows degraded within its window.
    let seen = wait_unhealthy(&mut ferry, FLOW, Duration::from_secs(20));
    println!("target stopped (took {stopped:?}): /health after {:?}: {seen:?}", down.elapsed());
    west.restart();
    assert_alive(&mut ferry);
    println!("target back after {:?}", down.elapsed());
    let at_restart = total(&west.bootstrap, remote);
    wait_for(ARRIVAL, "copying resumed after the target came back", || {
        assert_alive(&mut ferry);
        total(&west.bootstrap, remote) > at_restart
    });
    wait_healthy(&mut ferry, FLOW, Duration::from_secs(90));
    println!("healthy again {:?} after the target stopped", down.elapsed());

    // The source goes away for 30 s. Its producers stop first (they would fail too).
    let produced = stream.finish();
    wait_all_arrived(&mut ferry, &west.bootstrap, remote, &values("o", 0..produced));
    let down = Instant::now();
    east.stop();
    let mut seen = None;
    // Keeping the broker down for 30 s is the scenario; meanwhile watch what an operator sees: once the
    // flow shows unhealthy, it stays so until the source is back.
    while down.elapsed() < Duration::from_secs(30) {
        assert_alive(&mut ferry);
        let h = health(ferry.listen_addr());
        let nr = unhealthy(&h, FLOW);
        match &seen {
            None if !nr.is_empty() => seen = Some((down.elapsed(), nr)),
            None => {}
            Some(_) => assert!(!nr.is_empty(), "the flow looked healthy while the source was down: {h}"),
        }
        if seen.is_some() {
            assert_eq!(h["status"], "degraded", "{h}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let (after, states) = seen.expect("/health showed the flow not running while the source was down");
    println!("source stopped: /health after {after:?}: {states:?}");
    assert!(after < Duration::from_secs(20), "the source outage showed on /health only after {after:?}");
    east.restart();
    assert_alive(&mut ferry);
    produce(&east.bootstrap, topic, &records("p", 0..2_000, 3));
    let mut expected = values("o", 0..produced);
    expected.extend(values("p", 0..2_000));
    let counts = wait_all_arrived(&mut ferry, &west.bootstrap, remote, &expected);
    wait_healthy(&mut ferry, FLOW, Duration::from_secs(90));
    println!("healthy again {:?} after the source stopped", down.elapsed());
    let status = ferry.terminate(Duration::from_secs(60));
    assert!(status.success(), "{status:?}");
    assert_eq!(counts.len(), expected.len(), "only the produced records arrived");
    println!("{} records, {} duplicates across both outages", expected.len(), duplicates(&counts));
}

// ---------------------------------------------------------------------------------------------------------
// 3. A cluster unreachable from the start
// ---------------------------------------------------------------------------------------------------------

#[test]
fn a_cluster_unreachable_at_start_fails_only_its_own_flow() {
    let (east, west) = shared_pair();
    let nowhere = format!("127.0.0.1:{}", free_port()); // nothing listens there
    let topic = unique("faults-unreachable");
    let remote = format!("east.{topic}");
    create_topic(&east.bootstrap, &topic, 2, &[]);
    produce(&east.bootstrap, &topic, &records("u", 0..2_000, 2));
    let flows = flow("east", "west", &[&topic], "") + &flow("east", "nowhere", &[&topic], "");
    let dir = flows_dir(&[("east", &east.bootstrap), ("west", &west.bootstrap), ("nowhere", &nowhere)], &flows);
    let started = Instant::now();
    let mut ferry = Ferry::start(dir.path(), &["--shutdown-timeout", "5"]);
    ferry.wait_log("node started", STARTED);
    let addr = ferry.listen_addr();

    wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &values("u", 0..2_000));
    println!("east->west copied everything after {:?}", started.elapsed());
    let seen = wait_unhealthy(&mut ferry, "east->nowhere", Duration::from_secs(90));
    println!("east->nowhere not running after {:?}: {seen:?}", started.elapsed());
    // Restarts per actor of east->nowhere, from /metrics.
    let restarts = || -> BTreeMap<&str, f64> {
        let text = observe::metrics(addr);
        ACTORS
            .iter()
            .map(|a| (*a, metric_sum(&text, "ferry_actor_restarts_total", &[("flow", "east->nowhere"), ("actor", a)])))
            .collect()
    };
    // Unhealthy comes first (the lease names the refused connection within seconds), a restart when an
    // actor's call to the cluster times out.
    let first = wait_showing(Duration::from_secs(90), "the unhealthy actors restarted", || {
        assert_alive(&mut ferry);
        let now = restarts();
        (now.values().any(|n| *n >= 1.0), now)
    });
    println!("east->nowhere restarts after {:?}: {first:?}", started.elapsed());
    // It keeps retrying with backoff: some actor fails again after its restart.
    let later = wait_showing(Duration::from_secs(90), "east->nowhere retrying", || {
        assert_alive(&mut ferry);
        // Between its retries the flow never looks healthy.
        let h = health(addr);
        assert!(!unhealthy(&h, "east->nowhere").is_empty(), "east->nowhere reported healthy while failing: {h}");
        assert_eq!(h["status"], "degraded", "{h}");
        let now = restarts();
        (now.values().any(|n| *n >= 2.0), now)
    });
    println!("east->nowhere restarts after {:?}: {later:?}", started.elapsed());

    // Meanwhile the healthy flow copies new records and is reported running, never restarted.
    produce(&east.bootstrap, &topic, &records("v", 0..1_000, 2));
    wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &values("v", 0..1_000));
    let h = health(addr);
    let actors = flow_actors(&h, FLOW);
    assert_eq!(actors.len(), ACTORS.len(), "{h}");
    assert!(actors.values().all(|a| a.state == "running" && a.restarts == 0), "east->west is unaffected: {h}");
    assert!(!unhealthy(&h, "east->nowhere").is_empty(), "east->nowhere still reported: {h}");
    assert_eq!(h["status"], "degraded", "{h}");
    for a in ACTORS {
        assert_eq!(actor_restarts(addr, FLOW, a), 0.0, "east->west {a} never restarted");
    }
    let log = observe::strip_ansi(&ferry.log());
    assert!(
        log.lines().any(|l| l.contains("restarting after backoff") && l.contains("flow=east->nowhere")),
        "the log tells why east->nowhere restarts"
    );
    // The stuck flow does not hold the node beyond its --shutdown-timeout (5 s).
    let stopping = Instant::now();
    let status = ferry.terminate(Duration::from_secs(30));
    let took = stopping.elapsed();
    println!("SIGTERM with east->nowhere stuck: exited {status:?} after {took:?}");
    assert!(status.success(), "{status:?}");
    assert!(took < Duration::from_secs(8), "the node exits within --shutdown-timeout 5 (plus a margin): {took:?}");
}

// ---------------------------------------------------------------------------------------------------------
// 4. kill -9 at random moments under load
// ---------------------------------------------------------------------------------------------------------

#[test]
fn kill_9_at_random_moments_under_load_loses_nothing() {
    const ROUNDS: usize = 5;
    let (east, west) = shared_pair();
    let topic = unique("faults-kill9");
    let remote = format!("east.{topic}");
    create_topic(&east.bootstrap, &topic, 3, &[]);
    let dir = pair_dir(east, west, &flow("east", "west", &[&topic], ""));
    let stream = Stream::start(&east.bootstrap, &topic, 3, "k", 200, Duration::from_millis(30));

    // Duplicates on the target after each killed node; the next node copies again what the killed one
    // had copied but not yet persisted.
    let mut dups_after = vec![0usize];
    let mut killed_after = Vec::new();
    // Per kill: records on the target beyond the persisted progress (what the next node may copy again).
    let mut bounds = Vec::new();
    for round in 1..=ROUNDS {
        let before = total(&west.bootstrap, &remote);
        let mut ferry = Ferry::start(dir.path(), &[]);
        wait_for(ARRIVAL, &format!("round {round}: records arriving"), || {
            assert_alive(&mut ferry);
            total(&west.bootstrap, &remote) > before
        });
        let wait = random_secs(1.0, 4.0);
        std::thread::sleep(wait); // the random moment of the crash: the scenario, not synchronisation
        assert_alive(&mut ferry);
        ferry.kill9();
        killed_after.push(wait);
        bounds.push(copied_beyond_persisted(west, &topic, &remote));
        dups_after.push(duplicates(&arrivals(&west.bootstrap, &remote)));
    }
    let produced = stream.finish();
    let mut ferry = Ferry::start(dir.path(), &[]);
    let counts = wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &values("k", 0..produced));
    let status = ferry.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status:?}");
    let counts_final = arrivals(&west.bootstrap, &remote);
    assert_eq!(counts_final.len(), produced, "every record, and only those, on the target");
    dups_after.push(duplicates(&counts_final));
    for round in 1..=ROUNDS {
        let dups = dups_after[round + 1] - dups_after[round];
        let bound = bounds[round - 1];
        println!(
            "round {round}: killed {:.2} s after records arrived; duplicates from this kill: {dups} (copied after the last persist: {bound})",
            killed_after[round - 1].as_secs_f64(),
        );
        assert!(
            dups as i64 <= bound,
            "round {round}: a kill -9 may duplicate only records acknowledged after the last persist ({bound}), got {dups}"
        );
    }
    println!(
        "{produced} records, {} on the target, {} duplicates in total ({} before the final run)",
        counts_final.values().sum::<usize>(),
        duplicates(&counts_final),
        duplicates(&counts)
    );
}

// ---------------------------------------------------------------------------------------------------------
// 5. SIGTERM: drain, persist, final offset syncs and checkpoints; nothing twice after a restart
// ---------------------------------------------------------------------------------------------------------

#[test]
fn sigterm_drains_in_time_publishes_final_positions_and_restarts_without_duplicates() {
    let (east, west) = shared_pair();
    let streamed = unique("faults-term");
    let fixed = format!("{streamed}-fixed");
    let group = format!("{streamed}-g");
    let (remote_streamed, remote_fixed) = (format!("east.{streamed}"), format!("east.{fixed}"));
    create_topic(&east.bootstrap, &streamed, 3, &[]);
    create_topic(&east.bootstrap, &fixed, 2, &[]);
    produce(&east.bootstrap, &fixed, &records("f", 0..1_000, 2));
    commit_group_offsets(&east.bootstrap, &group, &[(&fixed, 0, 100), (&fixed, 1, 100)]);
    // Groups are listed and checkpoints emitted at the start and then only at the stop.
    let extra = format!(
        "groups = [\"{group}\"]\nemit_checkpoints_interval_seconds = 600\nrefresh_groups_interval_seconds = 600\n"
    );
    let dir = pair_dir(east, west, &flow("east", "west", &[&streamed, &fixed], &extra));
    let stream = Stream::start(&east.bootstrap, &streamed, 3, "s", 200, Duration::from_millis(30));
    let mut ferry = Ferry::start(dir.path(), &["--shutdown-timeout", "20"]);
    ferry.wait_log("node started", STARTED);
    wait_for(ARRIVAL, "the fixed topic copied and the stream under way", || {
        assert_alive(&mut ferry);
        end_offsets(&west.bootstrap, &remote_fixed) == [500, 500] && total(&west.bootstrap, &remote_streamed) >= 3_000
    });
    // The start's checkpoint round first: the copy can be done before the checkpoint computer ran. Whether
    // that round could translate 100 depends on whether the syncs were published yet, so wait for the round
    // itself (it stamps the group's last success even when nothing was due), not for its checkpoints.
    wait_for(ARRIVAL, "the checkpoint round of the start", || {
        assert_alive(&mut ferry);
        let text = observe::metrics(ferry.listen_addr());
        metric_sum(
            &text,
            "ferry_checkpoint_last_success_timestamp_seconds",
            &[("flow", FLOW), ("group", group.as_str())],
        ) > 0.0
    });
    // The group finishes the fixed topic: only the stop can checkpoint that.
    commit_group_offsets(&east.bootstrap, &group, &[(&fixed, 0, 500), (&fixed, 1, 500)]);
    // A round may still come between (one was seen under load: 500 -> 405, translated through the last
    // sync it knew); what only the stop's final round can write is the end translated exactly, through
    // the syncs at the last records that the stop publishes.
    let before = latest(&checkpoints(west, &group), &remote_fixed);
    assert!(
        before.values().all(|c| (c.upstream_offset, c.downstream_offset) != (500, 500)),
        "no checkpoint translating the end exactly before the stop: {before:?}"
    );

    // SIGTERM mid-stream.
    let stopping = Instant::now();
    let status = ferry.terminate(Duration::from_secs(20));
    let took = stopping.elapsed();
    println!("SIGTERM mid-stream: exited {status:?} after {took:?}");
    assert!(status.success(), "a graceful stop exits 0: {status:?}");
    assert!(took < Duration::from_secs(20), "drained within --shutdown-timeout: {took:?}");

    // The last record copied of every partition has an offset sync and is the persisted progress.
    let source_offset: HashMap<Vec<u8>, i64> = consume_all(&east.bootstrap, &streamed, READ)
        .into_iter()
        .map(|r| (r.value.unwrap_or_default(), r.offset))
        .collect();
    let copied = consume_all(&west.bootstrap, &remote_streamed, READ);
    let syncs = offset_syncs(east, &streamed);
    let progress = stored_progress(west, &streamed);
    for p in 0..3 {
        let last = copied.iter().rfind(|r| r.partition == p).expect("records copied in every partition");
        let upstream = source_offset[last.value.as_deref().unwrap_or_default()];
        assert!(
            syncs
                .iter()
                .any(|s| s.partition == p && s.upstream_offset == upstream && s.downstream_offset == last.offset),
            "{streamed}-{p}: an offset sync at the last copied record ({upstream} -> {})",
            last.offset
        );
        assert_eq!(progress.get(&p), Some(&upstream), "{streamed}-{p}: persisted progress is the last copied record");
    }
    let fixed_syncs = offset_syncs(east, &fixed);
    for p in 0..2 {
        assert!(
            fixed_syncs.iter().any(|s| s.partition == p && s.upstream_offset == 499 && s.downstream_offset == 499),
            "{fixed}-{p}: an offset sync at the last record: {fixed_syncs:?}"
        );
    }
    let cps = checkpoints(west, &group);
    let l = latest(&cps, &remote_fixed);
    for p in 0..2 {
        let cp = l.get(&p).unwrap_or_else(|| panic!("a final checkpoint for {remote_fixed}-{p}: {cps:?}"));
        assert_eq!(
            (cp.upstream_offset, cp.downstream_offset),
            (500, 500),
            "the group at the end translates to the end"
        );
    }
    assert_monotonic(&cps);

    // After a restart nothing is copied twice.
    let mut ferry = Ferry::start(dir.path(), &[]);
    ferry.wait_log("node started", STARTED);
    let at_restart = total(&west.bootstrap, &remote_streamed);
    wait_for(ARRIVAL, "copying resumed", || {
        assert_alive(&mut ferry);
        total(&west.bootstrap, &remote_streamed) > at_restart
    });
    let produced = stream.finish();
    let counts = wait_all_arrived(&mut ferry, &west.bootstrap, &remote_streamed, &values("s", 0..produced));
    assert!(ferry.terminate(Duration::from_secs(30)).success());
    let fixed_counts = arrivals(&west.bootstrap, &remote_fixed);
    println!(
        "{produced} streamed records, {} duplicates; fixed topic {} records, {} duplicates",
        duplicates(&counts),
        fixed_counts.len(),
        duplicates(&fixed_counts)
    );
    assert_eq!(counts.len(), produced);
    assert_eq!(duplicates(&counts), 0, "a graceful stop copies nothing twice");
    assert_eq!((fixed_counts.len(), duplicates(&fixed_counts)), (1_000, 0));
}

// ---------------------------------------------------------------------------------------------------------
// 6. Corrupt records in the internal topics
// ---------------------------------------------------------------------------------------------------------

#[test]
fn corrupt_internal_records_are_skipped_with_a_warning_naming_them() {
    let (east, west) = start_pair("corrupt");
    let topic = "corrupt";
    let remote = "east.corrupt";
    let group = "corrupt-g";
    let syncs_topic = "mm2-offset-syncs.west.internal";
    let cps_topic = "east.checkpoints.internal";
    let compact = [("cleanup.policy", "compact")];
    create_topic(&east.bootstrap, syncs_topic, 1, &compact);
    create_topic(&west.bootstrap, cps_topic, 1, &compact);
    // A tombstone under a well-formed key, then bytes that decode as nothing (compacted topics need keys).
    let sync_key = OffsetSync { topic: topic.into(), partition: 0, upstream_offset: 0, downstream_offset: 0 }
        .encode_key()
        .expect("encode key");
    let (cp_key, _) = Checkpoint {
        group: group.into(),
        topic: remote.into(),
        partition: 0,
        upstream_offset: 0,
        downstream_offset: 0,
        metadata: String::new(),
    }
    .encode()
    .expect("encode checkpoint");
    let corrupt = |key: &[u8]| {
        vec![
            Rec { value: None, ..Rec::new(0, b"", 1_000).key(key) },
            Rec::new(0, b"\xff\x00 not a record \x01", 1_001).key(b"\x00\x07garbage"),
        ]
    };
    produce(&east.bootstrap, syncs_topic, &corrupt(&sync_key));
    produce(&west.bootstrap, cps_topic, &corrupt(&cp_key));
    create_topic(&east.bootstrap, topic, 1, &[]);
    produce(&east.bootstrap, topic, &records("c", 0..1_000, 1));
    commit_group_offsets(&east.bootstrap, group, &[(topic, 0, 700)]);

    let extra = format!(
        "groups = [\"{group}\"]\nemit_checkpoints_interval_seconds = 0.5\nrefresh_groups_interval_seconds = 0.5\n"
    );
    let dir = pair_dir(&east, &west, &flow("east", "west", &[topic], &extra));
    let mut ferry = Ferry::start(dir.path(), &[]);
    ferry.wait_log("node started", STARTED);
    wait_all_arrived(&mut ferry, &west.bootstrap, remote, &values("c", 0..1_000));
    // Translated exactly (records are copied one to one): the syncs after the corrupt records were read.
    wait_showing(Duration::from_secs(60), "a checkpoint of the group past the corrupt records", || {
        assert_alive(&mut ferry);
        let cps = checkpoints(&west, group);
        let ok = latest(&cps, remote).get(&0).is_some_and(|c| (c.upstream_offset, c.downstream_offset) == (700, 700));
        (ok, cps)
    });

    let log = observe::strip_ansi(&ferry.log());
    for t in [syncs_topic, cps_topic] {
        for offset in [0, 1] {
            let found = names_record(&log, t, 0, offset);
            assert!(found, "a warning names {t} partition 0 offset {offset}; log:\n{}", tail(&log, 60));
        }
    }
    let text = observe::metrics(ferry.listen_addr());
    for (cluster, t) in [("east", syncs_topic), ("west", cps_topic)] {
        let skipped = metric_sum(&text, SKIPPED, &[("cluster", cluster), ("topic", t)]);
        assert!(skipped >= 2.0, "{SKIPPED} counts {t}'s 2 corrupt records (each time they are read): {skipped}");
    }
    wait_healthy(&mut ferry, FLOW, Duration::from_secs(30));
    for a in ACTORS {
        assert_eq!(actor_restarts(ferry.listen_addr(), FLOW, a), 0.0, "corrupt records restart nothing ({a})");
    }
    for l in log.lines().filter(|l| l.contains("does not decode")) {
        println!("{l}");
    }
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

/// Internal records skipped by ferry's readers, per cluster and topic.
const SKIPPED: &str = "ferry_internal_records_skipped_total";

/// Whether a warning in `log` names the record at `offset` of `topic`'s `partition`.
fn names_record(log: &str, topic: &str, partition: i32, offset: i64) -> bool {
    log.lines().any(|l| {
        l.contains("WARN")
            && (l.contains(&format!("topic={topic} ")) || l.contains(&format!("topic=\"{topic}\" ")))
            && l.contains(&format!("partition={partition} "))
            && l.contains(&format!("offset={offset} "))
    })
}

/// Garbage in the copy-progress topic, written as a new user would after a graceful stop: a key that is
/// not Connect's JSON, an `offset` that is not a number, a value that is not JSON, a key of the flow's
/// connector and cluster without a partition (a compacted topic refuses a record without a key). Each
/// is named in a warning (topic, partition, offset, why) and counted in
/// `ferry_internal_records_skipped_total`, and copying resumes from the last good position: nothing is
/// lost, nothing copied twice. Records of other connectors and of other source clusters, which a Connect
/// offsets topic shared with others legitimately holds, pass without a word. (The flow has its own
/// `mm2_offsets_topic`, so the shared pair's other flows never read this garbage.)
#[test]
fn corrupt_copy_progress_records_are_named_counted_and_lose_nothing() {
    let (east, west) = shared_pair();
    let topic = unique("faults-progress");
    let remote = format!("east.{topic}");
    let progress = unique("faults-progress-offsets");
    create_topic(&east.bootstrap, &topic, 1, &[]);
    produce(&east.bootstrap, &topic, &records("p", 0..100, 1));
    let extra = format!("mm2_offsets_topic = \"{progress}\"\n");
    let dir = pair_dir(east, west, &flow("east", "west", &[&topic], &extra));
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &values("p", 0..100));
    assert!(ferry.terminate(Duration::from_secs(30)).success());

    // Into the partition that holds the flow's position of the topic (the one ferry reads for it).
    let key = connect_offsets::encode_source_key(SOURCE_CONNECTOR, "east", &topic, 0);
    let home = connect_offsets::partition_for_key(&key, connect_offsets::OFFSETS_TOPIC_PARTITIONS);
    let first = end_offsets(&west.bootstrap, &progress)[home as usize];
    let elsewhere = connect_offsets::encode_source_key(SOURCE_CONNECTOR, "elsewhere", &topic, 0);
    let at = |ts| Rec::new(home, br#"{"offset":5}"#, ts);
    let no_partition = format!(r#"["{SOURCE_CONNECTOR}",{{"cluster":"east","topic":"{topic}"}}]"#);
    let garbage = [
        at(1).key(b"not json"),
        Rec::new(home, br#"{"offset":"abc"}"#, 2).key(&key),
        Rec::new(home, b"not json", 3).key(&key),
        at(4).key(no_partition.as_bytes()),
    ];
    let legitimate = [
        at(5).key(br#"["jdbc-orders",{"table":"orders"}]"#),
        at(6).key(br#"["MirrorCheckpointConnector",{"partition":0,"topic":"east.orders","group":"g1"}]"#),
        Rec::new(home, br#"{"offset":"abc"}"#, 7).key(&elsewhere),
    ];
    produce(&west.bootstrap, &progress, &garbage);
    produce(&west.bootstrap, &progress, &legitimate);
    produce(&east.bootstrap, &topic, &records("p", 100..200, 1));

    let mut ferry = Ferry::start(dir.path(), &[]);
    let counts = wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &values("p", 0..200));
    assert_eq!(duplicates(&counts), 0, "copying resumed after the last good position");
    let log = observe::strip_ansi(&ferry.log());
    let offsets = |range: std::ops::Range<usize>| range.map(|i| first + i as i64);
    let unnamed: Vec<i64> = offsets(0..garbage.len()).filter(|o| !names_record(&log, &progress, home, *o)).collect();
    let named: Vec<i64> = offsets(garbage.len()..garbage.len() + legitimate.len())
        .filter(|o| names_record(&log, &progress, home, *o))
        .collect();
    for l in log.lines().filter(|l| l.contains(&progress) && l.contains("WARN")) {
        println!("{l}");
    }
    assert!(unnamed.is_empty(), "no warning names the corrupt records at {unnamed:?}; log:\n{}", tail(&log, 60));
    assert!(named.is_empty(), "other connectors' and clusters' records at {named:?} are legitimate, not named");
    let warnings =
        log.lines().filter(|l| l.contains("WARN") && l.contains("skipping") && l.contains(&progress)).count() as f64;
    let skipped =
        metric_sum(&observe::metrics(ferry.listen_addr()), SKIPPED, &[("cluster", "west"), ("topic", &progress)]);
    assert!(
        skipped >= 4.0 && skipped == warnings,
        "{SKIPPED} counts each named record: {skipped} for {warnings} warnings"
    );
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

// ---------------------------------------------------------------------------------------------------------
// 7. Records deleted on the source before they were copied
// ---------------------------------------------------------------------------------------------------------

/// Copies 1,000 records, stops ferry gracefully, produces 1,000 more and deletes the source partition up
/// to 1,500: records 1,000..1,500 are gone before ferry saw them. Returns ferry started again on it.
fn lose_records_before_they_are_copied(policy: &str) -> (Ferry, tempfile::TempDir, String) {
    let (east, west) = shared_pair();
    let topic = unique(&format!("faults-gap-{policy}"));
    let remote = format!("east.{topic}");
    create_topic(&east.bootstrap, &topic, 1, &[]);
    produce(&east.bootstrap, &topic, &records("g", 0..1_000, 1));
    let dir = pair_dir(east, west, &flow("east", "west", &[&topic], &format!("on_source_gap = \"{policy}\"\n")));
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_for(ARRIVAL, "the first 1,000 records copied", || {
        assert_alive(&mut ferry);
        end_offsets(&west.bootstrap, &remote) == [1_000]
    });
    assert!(ferry.terminate(Duration::from_secs(30)).success());
    assert_eq!(stored_progress(west, &topic).get(&0), Some(&999), "progress persisted at the stop");

    produce(&east.bootstrap, &topic, &records("g", 1_000..2_000, 1));
    delete_records(&east.bootstrap, &topic, 0, 1_500);
    let ferry = Ferry::start(dir.path(), &[]);
    (ferry, dir, topic)
}

#[test]
fn a_source_gap_is_logged_counted_and_skipped_by_default() {
    let (_, west) = shared_pair();
    let (mut ferry, _dir, topic) = lose_records_before_they_are_copied("skip");
    let remote = format!("east.{topic}");
    let mut expected = values("g", 0..1_000);
    expected.extend(values("g", 1_500..2_000));
    ferry.wait_log("node started", STARTED);
    let counts = wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &expected);
    assert_eq!(counts.len(), 1_500, "exactly the records that survived on the source");
    assert_eq!(duplicates(&counts), 0);
    let addr = ferry.listen_addr();
    let lost =
        metric_sum(&observe::metrics(addr), "ferry_source_gap_records_total", &[("flow", FLOW), ("topic", &topic)]);
    assert_eq!(lost, 500.0, "ferry_source_gap_records_total counts the lost records");
    let log = observe::strip_ansi(&ferry.log());
    let line = log
        .lines()
        .find(|l| l.contains("records lost on the source") && l.contains(&topic))
        .unwrap_or_else(|| panic!("the loss is logged; log:\n{}", tail(&log, 40)));
    println!("{line}");
    assert!(line.contains("1000..1500") && line.contains("500 records"), "the log names the lost range: {line}");
    wait_healthy(&mut ferry, FLOW, Duration::from_secs(30));
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

/// Right after the copier group assigns a partition, librdkafka refuses to seek it until its fetch has
/// started (`__STATE`); such a partition is assigned again at its position, and must not stay paused.
#[test]
fn a_partition_not_yet_seekable_is_assigned_again_and_copied() {
    let (east, west) = shared_pair();
    let topic = unique("faults-seek");
    let remote = format!("east.{topic}");
    create_topic(&east.bootstrap, &topic, 3, &[]);
    let recs: Vec<Rec> = (0..900).map(|i| Rec::new(i % 3, format!("s{i}").as_bytes(), 1_000 + i64::from(i))).collect();
    produce(&east.bootstrap, &topic, &recs);
    let dir = pair_dir(east, west, &flow("east", "west", &[&topic], ""));
    let mut ferry = Ferry::start_env(dir.path(), &[], &[("FAILPOINTS", "copier-seek=1*return")]);
    ferry.wait_log("node started", STARTED);
    let counts = wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &values("s", 0..900));
    assert_eq!(duplicates(&counts), 0);
    let log = observe::strip_ansi(&ferry.log());
    assert!(log.contains("partition not seekable; assigned again at its position"), "{}", tail(&log, 40));
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

#[test]
fn a_source_gap_stops_its_partition_with_on_source_gap_fail() {
    let (_, west) = shared_pair();
    let (mut ferry, _dir, topic) = lose_records_before_they_are_copied("fail");
    let remote = format!("east.{topic}");
    ferry.wait_log("node started", STARTED);
    let addr = ferry.listen_addr();
    let mut problem = serde_json::Value::Null;
    wait_for(Duration::from_secs(60), "/flows shows the partition stopped over the lost records", || {
        assert_alive(&mut ferry);
        let h = health(addr);
        problem = h["flows"][FLOW]["partition_problems"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["topic"] == topic.as_str()).cloned())
            .unwrap_or_default();
        problem["state"] == "stopped" && flow_actors(&h, FLOW).get("copier").is_some_and(|c| c.state == "degraded")
    });
    println!("partition problem: {problem}");
    assert_eq!(problem["partition"], 0);
    let reason = problem["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("records lost on the source") && reason.contains("1000..1500"), "{reason}");
    let copier = flow_actors(&health(addr), FLOW).remove("copier").expect("copier status");
    assert_eq!(copier.state, "degraded", "the copier runs on, degraded by the stopped partition: {copier:?}");
    assert!(copier.last_error.as_deref().is_some_and(|e| e.contains(&format!("{topic}-0"))), "{copier:?}");
    assert_eq!(actor_restarts(addr, FLOW, "copier"), 0.0, "a stopped partition does not restart the copier");
    assert_eq!(end_offsets(&west.bootstrap, &remote), [1_000], "nothing after the gap was copied");
    let lost =
        metric_sum(&observe::metrics(addr), "ferry_source_gap_records_total", &[("flow", FLOW), ("topic", &topic)]);
    assert_eq!(lost, 500.0, "the lost records are counted");
    let failing = metric_sum(&observe::metrics(addr), "ferry_partitions_failing", &[("flow", FLOW)]);
    assert_eq!(failing, 1.0);
    let h = health(addr);
    assert_eq!(h["status"], "degraded", "{h}");
    assert_eq!(h["flows"][FLOW]["state"], "degraded", "{h}");
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}
