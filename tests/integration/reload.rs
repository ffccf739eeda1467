//! Hot reload of the flows directory, end to end: flows added, removed, changed and left alone while the
//! node runs; invalid sets refused whole; every trigger (the directory watch, a Kubernetes ConfigMap
//! symlink swap, SIGHUP, `POST /reload`) counted once; a changed flow whose new plan cannot start keeps
//! its old plan, and a rolled-back change is tried again by itself, less and less often while it keeps
//! failing (the periodic rescan finds changed secret files the watcher does not see). `ferry reload --dry-run` on a node that reloads only when asked
//! (`--reload manual`) lists what would change and changes nothing; reading the directory (an operator's
//! `ls`, a dry run) sets off no reload. What is asserted is what an operator sees: records on the target,
//! `/flows`, `/metrics`, the CLI's output, the node's reads of its files.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::observe::{self, health, metric_sum};
use support::scenario::*;
use support::{Cluster, Ferry, create_topic, end_offsets, ferry_cli, produce, shared_pair, unique, wait_for};

/// Largest pause of an untouched flow's copying that counts as "no pause" (records arrive in batches
/// every few tens of milliseconds; a restart takes seconds).
const NO_PAUSE: Duration = Duration::from_secs(2);

fn clusters_toml(clusters: &[(&str, &str)]) -> String {
    clusters.iter().map(|(alias, b)| format!("[clusters.{alias}]\nbootstrap_servers = \"{b}\"\n")).collect()
}

/// `flow` in `/flows`: (generation, started_at, state).
fn flow_info(ferry: &Ferry, flow: &str) -> (u64, String, String) {
    let h = health(ferry.listen_addr());
    let f = &h["flows"][flow];
    (
        f["generation"].as_u64().unwrap_or(0),
        f["started_at"].as_str().unwrap_or_default().to_string(),
        f["state"].as_str().unwrap_or_default().to_string(),
    )
}

/// `flow_info` once the flow is running: the snapshot an untouched flow must keep across a reload.
fn running_info(ferry: &Ferry, flow: &str) -> (u64, String, String) {
    wait_for(Duration::from_secs(60), &format!("{flow} running"), || flow_info(ferry, flow).2 == "running");
    flow_info(ferry, flow)
}

fn last_reload(ferry: &Ferry) -> serde_json::Value {
    health(ferry.listen_addr())["last_reload"].clone()
}

fn reloads(ferry: &Ferry, result: &str) -> f64 {
    metric_sum(&observe::metrics(ferry.listen_addr()), "ferry_config_reloads_total", &[("result", result)])
}

fn all_reloads(ferry: &Ferry) -> f64 {
    metric_sum(&observe::metrics(ferry.listen_addr()), "ferry_config_reloads_total", &[])
}

/// A flows directory with the clusters file of the east/west pair (the flows are the test's to write).
fn east_west_dir(east: &Cluster, west: &Cluster) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("flows dir");
    write(dir.path(), "clusters.toml", &clusters_toml(&[("east", &east.bootstrap), ("west", &west.bootstrap)]));
    dir
}

fn write(dir: &Path, file: &str, text: &str) {
    // Written aside and renamed, as editors and tools do: the reload never sees half a file.
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, text).expect("write flow file");
    std::fs::rename(&tmp, dir.join(file)).expect("rename flow file");
}

/// Waits until the last reload was at least the `n`th (by count) and returns it.
fn wait_reloads(ferry: &mut Ferry, n: f64) -> serde_json::Value {
    wait_for(Duration::from_secs(30), &format!("{n} reloads"), || {
        assert_alive(ferry);
        all_reloads(ferry) >= n
    });
    last_reload(ferry)
}

// ---------------------------------------------------------------------------------------------------------

#[test]
fn adding_a_flow_starts_it_within_seconds_and_leaves_the_running_flow_untouched() {
    let (east, west) = shared_pair();
    let (a, b) = (unique("reload-add-a"), unique("reload-add-b"));
    create_topic(&east.bootstrap, &a, 2, &[]);
    create_topic(&west.bootstrap, &b, 1, &[]);
    produce(&west.bootstrap, &b, &records("b", 0..100, 1));
    let dir = east_west_dir(east, west);
    write(dir.path(), "east-west.toml", &flow("east", "west", &[&a], ""));
    let stream = Stream::start(&east.bootstrap, &a, 2, "a", 100, Duration::from_millis(20));
    let mut ferry = Ferry::start(dir.path(), &[]);
    let remote_a = format!("east.{a}");
    wait_for(ARRIVAL, "east->west copying", || {
        assert_alive(&mut ferry);
        total(&west.bootstrap, &remote_a) > 500
    });
    let tail = Tail::start(&west.bootstrap, &remote_a);
    let before = running_info(&ferry, "east->west");

    let t0 = Instant::now();
    write(dir.path(), "west-east.toml", &flow("west", "east", &[&b], ""));
    let remote_b = format!("west.{b}");
    wait_for(Duration::from_secs(30), "west's topic on east", || {
        assert_alive(&mut ferry);
        total(&east.bootstrap, &remote_b) == 100
    });
    let latency = t0.elapsed();
    std::thread::sleep(Duration::from_secs(1)); // a second of copying after the reload, for the gap window
    let gap = tail.largest_gap(t0 - Duration::from_secs(1), Instant::now());
    println!("reload latency (file written -> the new flow's records on the target): {latency:?}");
    println!("largest copy pause of the untouched flow across the reload: {gap:?} ({} arrivals)", tail.count());
    // Seconds, not the 30 s rescan: the watch sees the file at once. 15 s, not 5: on the shared pair the
    // new flow also creates, waits to write to, joins its group for and probes the remote partitions of
    // every `x.heartbeats` other tests left on west (61 partitions), with five other tests running beside
    // it on two cores (6.6 s seen at four tests at a time, 10.1 s at six: 1 s debounce, 0.5 s lease,
    // 2.3 s until the 61 remote partitions took writes, 1.4 s group join, 2 s probing, then the copy).
    assert!(latency <= Duration::from_secs(15), "west's topics appear on east within 15 s: {latency:?}");
    assert!(gap < NO_PAUSE, "the untouched flow never pauses: {gap:?}");
    assert_eq!(flow_info(&ferry, "east->west"), before, "generation and started_at unchanged");
    assert_eq!(flow_info(&ferry, "west->east").0, 1);
    let r = last_reload(&ferry);
    assert_eq!(r["result"], "applied", "{r}");
    assert_eq!(r["started"], serde_json::json!(["west->east"]), "{r}");
    let produced = stream.finish();
    let counts = wait_all_arrived(&mut ferry, &west.bootstrap, &remote_a, &values("a", 0..produced));
    assert_eq!(duplicates(&counts), 0);
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

/// What a graceful stop leaves on the topics, checked after the flow east->west stopped (as after a
/// SIGTERM, tests/integration/faults.rs): the last copied record of each partition of `streamed` is the persisted
/// progress and has an offset sync; `fixed` (2 partitions of 250 records) has syncs at its last records,
/// and `group`, which finished it, has a final checkpoint at the end: 0 records re-read after a failover.
fn assert_stopped_gracefully(streamed: &str, fixed: &str, group: &str) {
    let (east, west) = shared_pair();
    let source_offset: std::collections::HashMap<Vec<u8>, i64> = support::consume_all(&east.bootstrap, streamed, READ)
        .into_iter()
        .map(|r| (r.value.unwrap_or_default(), r.offset))
        .collect();
    let copied = support::consume_all(&west.bootstrap, &format!("east.{streamed}"), READ);
    let syncs = offset_syncs(east, streamed);
    let progress = stored_progress(west, streamed);
    for p in 0..2 {
        let last = copied.iter().rfind(|r| r.partition == p).expect("records copied in every partition");
        let upstream = source_offset[last.value.as_deref().unwrap_or_default()];
        assert_eq!(
            progress.get(&p),
            Some(&upstream),
            "{streamed}-{p}: the persisted progress is the last copied record"
        );
        assert!(
            syncs
                .iter()
                .any(|s| s.partition == p && s.upstream_offset == upstream && s.downstream_offset == last.offset),
            "{streamed}-{p}: an offset sync at the last copied record ({upstream} -> {})",
            last.offset
        );
    }
    let fixed_syncs = offset_syncs(east, fixed);
    let remote_fixed = format!("east.{fixed}");
    for p in 0..2 {
        assert!(
            fixed_syncs.iter().any(|s| s.partition == p && s.upstream_offset == 249 && s.downstream_offset == 249),
            "{fixed}-{p}: an offset sync at the last record: {fixed_syncs:?}"
        );
    }
    let cps = checkpoints(west, group);
    let l = latest(&cps, &remote_fixed);
    for p in 0..2 {
        let cp = l.get(&p).unwrap_or_else(|| panic!("a final checkpoint for {remote_fixed}-{p}: {cps:?}"));
        assert_eq!((cp.upstream_offset, cp.downstream_offset), (250, 250), "the group at the end re-reads nothing");
    }
    support::assert_monotonic(&cps);
}

#[test]
fn changing_a_flow_restarts_only_it_and_removing_it_stops_it_gracefully() {
    let (east, west) = shared_pair();
    // west->east copies `a` untouched throughout; east->west copies b1, then (changed) b2 and b2-fixed.
    let (a, b1, b2) = (unique("reload-chg-a"), unique("reload-chg-b1"), unique("reload-chg-b2"));
    let (fixed, group) = (format!("{b2}-fixed"), format!("{b2}-g"));
    create_topic(&west.bootstrap, &a, 1, &[]);
    create_topic(&east.bootstrap, &b1, 1, &[]);
    produce(&east.bootstrap, &b1, &records(&b1, 0..50, 1));
    create_topic(&east.bootstrap, &b2, 2, &[]);
    create_topic(&east.bootstrap, &fixed, 2, &[]);
    produce(&east.bootstrap, &fixed, &records("f", 0..500, 2));
    support::commit_group_offsets(&east.bootstrap, &group, &[(&fixed, 0, 100), (&fixed, 1, 100)]);
    let dir = east_west_dir(east, west);
    write(dir.path(), "west-east.toml", &flow("west", "east", &[&a], ""));
    write(dir.path(), "east-west.toml", &flow("east", "west", &[&b1], ""));
    let stream = Stream::start(&west.bootstrap, &a, 1, "a", 100, Duration::from_millis(20));
    let mut ferry = Ferry::start(dir.path(), &[]);
    let remote_a = format!("west.{a}");
    wait_for(ARRIVAL, "both flows copying", || {
        assert_alive(&mut ferry);
        total(&east.bootstrap, &remote_a) > 500 && total(&west.bootstrap, &format!("east.{b1}")) == 50
    });
    let tail = Tail::start(&east.bootstrap, &remote_a);
    let untouched = running_info(&ferry, "west->east");

    // Change east->west's topics: only it restarts. Its groups are listed and checkpointed at its start
    // and then only at its stop.
    let streamed = Stream::start(&east.bootstrap, &b2, 2, "b", 100, Duration::from_millis(30));
    let t0 = Instant::now();
    let extra = format!(
        "groups = [\"{group}\"]\nemit_checkpoints_interval_seconds = 600\nrefresh_groups_interval_seconds = 600\n"
    );
    write(dir.path(), "east-west.toml", &flow("east", "west", &[&b2, &fixed], &extra));
    let remote_fixed = format!("east.{fixed}");
    wait_for(ARRIVAL, "the changed flow copying its new topics", || {
        assert_alive(&mut ferry);
        end_offsets(&west.bootstrap, &remote_fixed) == [250, 250]
            && total(&west.bootstrap, &format!("east.{b2}")) >= 1_000
    });
    assert_eq!(flow_info(&ferry, FLOW).0, 2, "the changed flow is a new generation");
    assert_eq!(flow_info(&ferry, "west->east"), untouched, "the other flow is not touched");
    let r = last_reload(&ferry);
    assert_eq!(r["restarted"], serde_json::json!([FLOW]), "{r}");
    // The start's checkpoint round first (it stamps the group's last success even when nothing was due);
    // then the group finishes the fixed topic: only the stop can checkpoint that.
    wait_for(ARRIVAL, "the checkpoint round of the start", || {
        assert_alive(&mut ferry);
        let labels = [("flow", FLOW), ("group", group.as_str())];
        metric_sum(&observe::metrics(ferry.listen_addr()), "ferry_checkpoint_last_success_timestamp_seconds", &labels)
            > 0.0
    });
    // A start emits twice: once the newest offset syncs are in, and again once the whole history is
    // (right after the history's "offset syncs read" line, or "offset-sync backlog read" when the history
    // was long enough to be read in the background, as on the shared pair's offset-syncs topic that every
    // test writes). Wait for the second, or a slow box lets it pick up the commit below (seen under load).
    let history_read = || -> Option<u64> {
        let log = ferry.log();
        let line = log
            .lines()
            .filter(|l| l.contains("mm2-offset-syncs.west.internal"))
            .filter(|l| {
                (l.contains("offset syncs read") && l.contains("side=Forward"))
                    || l.contains("offset-sync backlog read")
            })
            .nth(1)?; // generation 2's
        ferry::status::parse_rfc3339(line.get(..19)?)
    };
    wait_for(ARRIVAL, "the changed flow's checkpoint round after its whole offset-sync history", || {
        let Some(read_at) = history_read() else { return false };
        let labels = [("flow", FLOW), ("group", group.as_str())];
        metric_sum(&observe::metrics(ferry.listen_addr()), "ferry_checkpoint_last_success_timestamp_seconds", &labels)
            >= read_at as f64
    });
    support::commit_group_offsets(&east.bootstrap, &group, &[(&fixed, 0, 250), (&fixed, 1, 250)]);
    let before = latest(&checkpoints(west, &group), &remote_fixed);
    assert!(
        before.values().all(|c| c.upstream_offset < 250),
        "no checkpoint at the end before the removal: {before:?}"
    );

    // Remove it mid-stream: it stops gracefully, its series disappear, the other flow copies on.
    std::fs::remove_file(dir.path().join("east-west.toml")).expect("remove");
    wait_for(Duration::from_secs(30), "the removed flow gone from /flows", || {
        assert_alive(&mut ferry);
        health(ferry.listen_addr())["flows"].get(FLOW).is_none()
    });
    ferry.wait_log("flow stopped flow=east->west", Duration::from_secs(30));
    let text = observe::metrics(ferry.listen_addr());
    let left: Vec<&str> = text.lines().filter(|l| l.contains("flow=\"east->west\"")).collect();
    assert!(left.is_empty(), "a removed flow's series disappear: {left:?}");
    assert_stopped_gracefully(&b2, &fixed, &group);
    let _ = streamed.finish();
    std::thread::sleep(Duration::from_secs(1)); // copying after the removal, for the gap window
    let gap = tail.largest_gap(t0, Instant::now());
    println!("largest copy pause of the untouched flow across two reloads: {gap:?}");
    assert!(gap < NO_PAUSE, "the untouched flow never pauses: {gap:?}");
    assert_eq!(flow_info(&ferry, "west->east"), untouched);
    let produced = stream.finish();
    let counts = wait_all_arrived(&mut ferry, &east.bootstrap, &remote_a, &values("a", 0..produced));
    assert_eq!(duplicates(&counts), 0);
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

#[test]
fn changing_a_cluster_restarts_exactly_the_flows_that_use_it() {
    let (east, west) = shared_pair();
    let north = Cluster::start("north");
    let a = unique("reload-cluster");
    create_topic(&east.bootstrap, &a, 1, &[]);
    produce(&east.bootstrap, &a, &records("a", 0..50, 1));
    let dir = tempfile::tempdir().expect("flows dir");
    let clusters = |north_bootstrap: &str| {
        clusters_toml(&[("east", &east.bootstrap), ("west", &west.bootstrap), ("north", north_bootstrap)])
    };
    write(dir.path(), "clusters.toml", &clusters(&north.bootstrap));
    write(dir.path(), "flows.toml", &(flow("east", "west", &[&a], "") + &flow("east", "north", &[&a], "")));
    let mut ferry = Ferry::start(dir.path(), &[]);
    let remote = format!("east.{a}");
    wait_for(ARRIVAL, "both flows copying", || {
        assert_alive(&mut ferry);
        total(&west.bootstrap, &remote) == 50 && total(&north.bootstrap, &remote) == 50
    });
    let untouched = running_info(&ferry, "east->west");
    // The same broker under another name: a different cluster definition.
    let renamed = north.bootstrap.replace("127.0.0.1", "localhost");
    write(dir.path(), "clusters.toml", &clusters(&renamed));
    wait_for(Duration::from_secs(30), "the flow using north restarted", || {
        assert_alive(&mut ferry);
        flow_info(&ferry, "east->north").0 == 2
    });
    assert_eq!(flow_info(&ferry, "east->west"), untouched, "a flow not using north is not touched");
    let r = last_reload(&ferry);
    assert_eq!(r["restarted"], serde_json::json!(["east->north"]), "{r}");
    produce(&east.bootstrap, &a, &records("a", 50..60, 1));
    wait_for(ARRIVAL, "the restarted flow copies on", || total(&north.bootstrap, &remote) == 60);
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

/// A flow restarted by a reload recovers what it published from the topics: no checkpoint goes backward,
/// and groups behind the newest offset sync, deep in the sync history, are checkpointed at the first
/// rounds after the restart without moving again (KAFKA-16622), translated exactly as before it.
#[test]
fn a_flow_restarted_by_a_reload_recovers_its_checkpoints_and_sync_history() {
    let (east, west) = shared_pair();
    let t = unique("reload-history");
    let remote = format!("east.{t}");
    let (lead, deep, late) = (format!("{t}-lead"), format!("{t}-deep"), format!("{t}-late"));
    create_topic(&east.bootstrap, &t, 1, &[]);
    produce(&east.bootstrap, &t, &records("h", 0..5_000, 1));
    support::commit_group_offsets(&east.bootstrap, &lead, &[(&t, 0, 4_900)]);
    support::commit_group_offsets(&east.bootstrap, &deep, &[(&t, 0, 1_037)]);
    let settings = |interval: f64| {
        format!(
            "groups = [\"{t}-.*\"]\nemit_checkpoints_interval_seconds = {interval}\nrefresh_groups_interval_seconds = 1\n"
        )
    };
    let dir = east_west_dir(east, west);
    write(dir.path(), "flow.toml", &flow("east", "west", &[&t], &settings(1.0)));
    let mut ferry = Ferry::start(dir.path(), &[]);
    // (upstream, downstream) of the newest checkpoint of `group`.
    let newest = |group: &str| {
        latest(&checkpoints(west, group), &remote).get(&0).map(|c| (c.upstream_offset, c.downstream_offset))
    };
    wait_for(ARRIVAL, "checkpoints of both groups", || {
        assert_alive(&mut ferry);
        newest(&lead) == Some((4_900, 4_900)) && newest(&deep).is_some_and(|(up, _)| up == 1_037)
    });
    let deep_before = newest(&deep).expect("deep checkpoint");
    println!("before the reload: deep {deep_before:?}, {} offset syncs", offset_syncs(east, &t).len());
    assert_eq!(deep_before, (1_037, 1_037), "a group deep in the history translates exactly");
    let generation = running_info(&ferry, FLOW).0;

    // A reload that restarts the flow (another emission interval).
    write(dir.path(), "flow.toml", &flow("east", "west", &[&t], &settings(1.5)));
    wait_for(Duration::from_secs(60), "the flow restarted by the reload", || {
        assert_alive(&mut ferry);
        let (g, _, state) = flow_info(&ferry, FLOW);
        g == generation + 1 && state == "running"
    });
    assert_eq!(last_reload(&ferry)["restarted"], serde_json::json!([FLOW]));
    // After the restart: a new group and the deep one, both far behind the newest sync.
    let restarted = Instant::now();
    support::commit_group_offsets(&east.bootstrap, &late, &[(&t, 0, 1_537)]);
    support::commit_group_offsets(&east.bootstrap, &deep, &[(&t, 0, 1_100)]);
    wait_for(Duration::from_secs(60), "checkpoints of the groups behind the newest sync", || {
        assert_alive(&mut ferry);
        newest(&late).is_some() && newest(&deep).is_some_and(|(up, _)| up == 1_100)
    });
    let first = restarted.elapsed();
    println!("after the reload: first checkpoints of late {:?}, deep {:?} in {first:?}", newest(&late), newest(&deep));
    assert!(first < Duration::from_secs(2 * 2 + 8), "KAFKA-16622: the groups did not move again, took {first:?}");
    assert_eq!(newest(&late), Some((1_537, 1_537)), "the sync history is recovered: exact deep in it");
    assert_eq!(newest(&deep), Some((1_100, 1_100)));
    assert_eq!(newest(&lead), Some((4_900, 4_900)), "the lead group's checkpoint stands");

    // The restarted flow copies on, and checkpoints follow.
    produce(&east.bootstrap, &t, &records("h", 5_000..5_500, 1));
    wait_for(ARRIVAL, "the new records copied", || total(&west.bootstrap, &remote) == 5_500);
    support::commit_group_offsets(&east.bootstrap, &lead, &[(&t, 0, 5_400)]);
    wait_for(Duration::from_secs(30), "the lead group moves on", || newest(&lead) == Some((5_400, 5_400)));
    assert!(ferry.terminate(Duration::from_secs(30)).success());
    let all: Vec<_> = [&lead, &deep, &late].iter().flat_map(|g| checkpoints(west, g)).collect();
    support::assert_monotonic(&all);
}

/// One flow east->west (file `flow_file`) over a new topic that a stream keeps writing to, copying.
struct Streaming {
    dir: tempfile::TempDir,
    stream: Stream,
    ferry: Ferry,
    remote: String,
    /// The flow's (generation, started_at, state) once copying.
    running: (u64, String, String),
}

impl Streaming {
    fn start(tag: &str, flow_file: &str) -> Streaming {
        let (east, west) = shared_pair();
        let a = unique(tag);
        create_topic(&east.bootstrap, &a, 1, &[]);
        let dir = east_west_dir(east, west);
        write(dir.path(), flow_file, &flow("east", "west", &[&a], ""));
        let stream = Stream::start(&east.bootstrap, &a, 1, "a", 50, Duration::from_millis(20));
        let mut ferry = Ferry::start(dir.path(), &[]);
        let remote = format!("east.{a}");
        wait_for(ARRIVAL, "copying", || {
            assert_alive(&mut ferry);
            total(&west.bootstrap, &remote) > 200
        });
        let running = running_info(&ferry, "east->west");
        Streaming { dir, stream, ferry, remote, running }
    }
}

/// Stops the stream; every record it wrote arrives on west exactly once, and the node stops cleanly.
fn finish(stream: Stream, mut ferry: Ferry, remote: &str) {
    let (_, west) = shared_pair();
    let produced = stream.finish();
    let counts = wait_all_arrived(&mut ferry, &west.bootstrap, remote, &values("a", 0..produced));
    assert_eq!(duplicates(&counts), 0);
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

#[test]
fn an_invalid_flow_set_changes_nothing_and_a_later_good_edit_applies() {
    let Streaming { dir, stream, mut ferry, remote, running } = Streaming::start("reload-invalid", "east-west.toml");
    let addr = ferry.listen_addr();
    let mut n = all_reloads(&ferry);
    for (file, text, says) in [
        ("broken.toml", "[[flows]\nsource = \"east\"\n".to_string(), "invalid TOML"),
        ("unknown.toml", "[[flows]]\nsource = \"east\"\ntarget = \"mars\"\n".to_string(), "unknown cluster `mars`"),
        ("dup.toml", flow("east", "west", &["other"], ""), "already defined"),
    ] {
        write(dir.path(), file, &text);
        let r = wait_reloads(&mut ferry, n + 1.0);
        n += 1.0;
        println!("{file}: {}", r["error"]);
        assert_eq!(r["result"], "rejected", "{r}");
        let error = r["error"].as_str().unwrap_or_default();
        assert!(error.contains(file) && error.contains(says), "the error names the file and the problem: {error}");
        assert_eq!(metric_sum(&observe::metrics(addr), "ferry_config_last_reload_successful", &[]), 0.0);
        assert_eq!(flow_info(&ferry, "east->west").0, running.0, "the running flow is untouched");
        std::fs::remove_file(dir.path().join(file)).expect("remove the bad file");
        let r = wait_reloads(&mut ferry, n + 1.0);
        n += 1.0;
        assert_eq!(r["result"], "applied", "the good set applies again: {r}");
    }
    assert_eq!(reloads(&ferry, "rejected"), 3.0);
    assert_eq!(metric_sum(&observe::metrics(addr), "ferry_config_last_reload_successful", &[]), 1.0);
    assert!(metric_sum(&observe::metrics(addr), "ferry_config_last_reload_success_timestamp_seconds", &[]) > 0.0);
    assert_eq!(flow_info(&ferry, "east->west"), running, "never restarted");
    finish(stream, ferry, &remote);
}

/// A directory laid out like a Kubernetes ConfigMap volume: `..<version>/` holds the files, `..data`
/// points at the current version, and each file is a symlink through `..data`.
fn configmap_version(dir: &Path, version: &str, files: &[(&str, String)]) {
    let v = dir.join(format!("..{version}"));
    std::fs::create_dir(&v).expect("version dir");
    for (name, text) in files {
        std::fs::write(v.join(name), text).expect("write");
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(format!("..data/{name}"), &link).expect("file symlink");
        }
    }
    // The atomic swap: a new symlink renamed over `..data`.
    let tmp = dir.join("..data_tmp");
    std::os::unix::fs::symlink(format!("..{version}"), &tmp).expect("data symlink");
    std::fs::rename(&tmp, dir.join("..data")).expect("swap ..data");
}

#[test]
fn a_configmap_swap_sighup_and_post_reload_are_one_reload_each() {
    let (east, west) = shared_pair();
    let (a, b) = (unique("reload-cm-a"), unique("reload-cm-b"));
    for t in [&a, &b] {
        create_topic(&east.bootstrap, t, 1, &[]);
        produce(&east.bootstrap, t, &records(t, 0..20, 1));
    }
    let dir = tempfile::tempdir().expect("flows dir");
    let clusters = clusters_toml(&[("east", &east.bootstrap), ("west", &west.bootstrap)]);
    configmap_version(
        dir.path(),
        "2026_11_30_v1",
        &[("clusters.toml", clusters.clone()), ("flow.toml", flow("east", "west", &[&a], ""))],
    );
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_for(ARRIVAL, "copying", || {
        assert_alive(&mut ferry);
        total(&west.bootstrap, &format!("east.{a}")) == 20
    });
    let start = all_reloads(&ferry);
    assert_eq!(start, 1.0, "startup is the first reload");

    configmap_version(
        dir.path(),
        "2026_11_30_v2",
        &[("clusters.toml", clusters), ("flow.toml", flow("east", "west", &[&a, &b], ""))],
    );
    let r = wait_reloads(&mut ferry, start + 1.0);
    assert_eq!(r["result"], "applied", "{r}");
    assert_eq!(r["trigger"], "watch", "{r}");
    wait_for(ARRIVAL, "the new topic copied", || total(&west.bootstrap, &format!("east.{b}")) == 20);
    // An observation window longer than the debounce: the swap's burst of events stays one reload.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(all_reloads(&ferry), start + 1.0, "one swap, one reload");

    support::process::signal(ferry.pid().expect("pid"), "HUP");
    let r = wait_reloads(&mut ferry, start + 2.0);
    assert_eq!((r["trigger"].as_str(), r["result"].as_str()), (Some("signal"), Some("applied")), "{r}");

    let (status, body) = support::http_post(ferry.listen_addr(), "/reload");
    assert_eq!(status, 200, "{body}");
    let posted: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!((posted["trigger"].as_str(), posted["result"].as_str()), (Some("http"), Some("applied")));
    std::thread::sleep(Duration::from_secs(2)); // observation window: nothing else reloads
    assert_eq!(all_reloads(&ferry), start + 3.0, "SIGHUP and POST /reload are one reload each");
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

#[test]
fn disabling_a_flow_stops_it_and_enabling_resumes_where_it_stopped() {
    let (east, west) = shared_pair();
    let a = unique("reload-enable");
    create_topic(&east.bootstrap, &a, 1, &[]);
    produce(&east.bootstrap, &a, &records("a", 0..100, 1));
    let dir = east_west_dir(east, west);
    write(dir.path(), "flow.toml", &flow("east", "west", &[&a], ""));
    let mut ferry = Ferry::start(dir.path(), &[]);
    let remote = format!("east.{a}");
    wait_for(ARRIVAL, "copying", || {
        assert_alive(&mut ferry);
        total(&west.bootstrap, &remote) == 100
    });
    write(dir.path(), "flow.toml", &flow("east", "west", &[&a], "enabled = false\n"));
    ferry.wait_log("flow stopped flow=east->west", Duration::from_secs(30));
    let (_, _, state) = flow_info(&ferry, "east->west");
    assert_eq!(state, "stopped");
    // The status board learns of the stop from the supervisor, a moment after the log line.
    wait_for(Duration::from_secs(10), "/flows saying the flow is disabled", || {
        health(ferry.listen_addr())["flows"]["east->west"]["enabled"] == false
    });
    produce(&east.bootstrap, &a, &records("a", 100..200, 1));
    std::thread::sleep(Duration::from_secs(2)); // observation window: a disabled flow copies nothing
    assert_eq!(total(&west.bootstrap, &remote), 100, "a disabled flow copies nothing");
    write(dir.path(), "flow.toml", &flow("east", "west", &[&a], ""));
    let counts = wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &values("a", 0..200));
    assert_eq!(duplicates(&counts), 0, "re-enabled, it resumes from its persisted position");
    assert_eq!(flow_info(&ferry, "east->west").0, 2);
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

/// A changed flow whose old generation ends after the new one started (its stop outlasted the node's
/// wait, as a stop stuck in a cluster's timeouts does; the failpoint holds it 8 s) shows the new
/// generation in `/flows`: the old generation's last "stopped" used to cover the new one's actors for
/// good, a flow that copies shown as stopped.
#[test]
fn a_flow_whose_old_generation_ends_late_shows_the_new_generation_running() {
    let (east, west) = shared_pair();
    let a = unique("reload-late-stop");
    create_topic(&east.bootstrap, &a, 1, &[]);
    produce(&east.bootstrap, &a, &records("a", 0..100, 1));
    let dir = east_west_dir(east, west);
    write(dir.path(), "flow.toml", &flow("east", "west", &[&a], ""));
    let mut ferry =
        Ferry::start_env(dir.path(), &["--shutdown-timeout", "2"], &[("FAILPOINTS", "flow-stop=1*return(8000)")]);
    let remote = format!("east.{a}");
    wait_for(ARRIVAL, "copying", || {
        assert_alive(&mut ferry);
        total(&west.bootstrap, &remote) == 100
    });
    let (generation, _, _) = running_info(&ferry, "east->west");
    write(dir.path(), "flow.toml", &flow("east", "west", &[&a], "refresh_topics_interval_seconds = 7\n"));
    ferry.wait_log("starting its new plan anyway", Duration::from_secs(30));
    // The old generation's end, after the new generation's actors reported in.
    ferry.wait_log("flow stopped flow=east->west", Duration::from_secs(30));
    let seen = wait_showing(Duration::from_secs(30), "the new generation running in /flows", || {
        let f = health(ferry.listen_addr())["flows"]["east->west"].clone();
        (f["state"] == "running" && f["generation"].as_u64() == Some(generation + 1), f)
    });
    produce(&east.bootstrap, &a, &records("a", 100..200, 1));
    let counts = wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &values("a", 0..200));
    assert_eq!(duplicates(&counts), 0, "the new generation copies on: {seen}");
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

#[test]
fn a_changed_flow_that_cannot_start_keeps_its_old_plan() {
    let (east, _) = shared_pair();
    let Streaming { dir, stream, mut ferry, remote, running } = Streaming::start("reload-rollback", "flow.toml");
    let nowhere = format!("127.0.0.1:{}", support::free_port());
    write(dir.path(), "clusters.toml", &clusters_toml(&[("east", &east.bootstrap), ("west", &nowhere)]));
    let r = wait_reloads(&mut ferry, 2.0);
    println!("{r}");
    assert_eq!(r["result"], "rolled_back", "{r}");
    assert_eq!(r["rolled_back"], serde_json::json!(["east->west"]), "{r}");
    assert!(r["error"].as_str().is_some_and(|e| e.contains("does not answer")), "{r}");
    assert_eq!(reloads(&ferry, "rolled_back"), 1.0);
    assert_eq!(flow_info(&ferry, "east->west"), running, "the old plan runs on");
    finish(stream, ferry, &remote);
}

/// `n` records `{prefix}{i}` for `range` on partition 0, timestamped now (a test that outlives a broker's
/// first retention check must not write records older than the retention).
fn fresh(prefix: &str, range: std::ops::Range<usize>) -> Vec<support::Rec> {
    range.map(|i| support::Rec::new(0, format!("{prefix}{i}").as_bytes(), -1)).collect()
}

/// Polls `/flows` until `last_reload` satisfies `f`; returns it.
fn wait_last_reload(
    ferry: &mut Ferry,
    deadline: Duration,
    what: &str,
    f: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    wait_for(deadline, what, || {
        assert_alive(ferry);
        f(&last_reload(ferry))
    });
    last_reload(ferry)
}

/// A secret rotated during a brief outage of the cluster it is for. The secret file lies outside the
/// flows directory, so the watcher never reports it: the periodic rescan finds the change. The changed
/// flow's cluster does not answer, so the flow keeps its old plan (`rolled_back`); once the cluster
/// answers again, a later retry tries the same content again and applies it. The rescan runs every 2 s
/// here (the test knob `FERRY_TEST_RESCAN_INTERVAL_MS`; 30 s in production), and the retries wait 2, 4,
/// 8 s, ... (doubling from the rescan interval).
#[test]
fn a_change_rolled_back_during_an_outage_is_applied_by_a_later_retry() {
    let (east, _) = shared_pair();
    let mut north = Cluster::start("north-retry");
    let a = unique("reload-retry");
    create_topic(&east.bootstrap, &a, 1, &[]);
    produce(&east.bootstrap, &a, &fresh("a", 0..50));
    let secrets = tempfile::tempdir().expect("secrets dir");
    let secret = secrets.path().join("north-password");
    write(secrets.path(), "north-password", "first-password");
    let dir = tempfile::tempdir().expect("flows dir");
    write(
        dir.path(),
        "clusters.toml",
        &format!(
            "{}[clusters.north.client]\n\"sasl.password\" = \"${{file:{}}}\"\n",
            clusters_toml(&[("east", &east.bootstrap), ("north", &north.bootstrap)]),
            secret.display()
        ),
    );
    write(dir.path(), "flow.toml", &flow("east", "north", &[&a], ""));
    let mut ferry = Ferry::start_env(dir.path(), &[], &[("FERRY_TEST_RESCAN_INTERVAL_MS", "2000")]);
    let remote = format!("east.{a}");
    wait_for(ARRIVAL, "copying to north", || {
        assert_alive(&mut ferry);
        total(&north.bootstrap, &remote) == 50
    });
    let before = running_info(&ferry, "east->north");

    // The outage, and the rotation during it.
    north.stop();
    write(secrets.path(), "north-password", "second-password");
    let r = wait_last_reload(&mut ferry, Duration::from_secs(60), "a rescan rolling the change back", |r| {
        r["result"] == "rolled_back"
    });
    println!("during the outage: {r}");
    assert_eq!(r["trigger"], "rescan", "the watcher does not see the secret file; the rescan does: {r}");
    assert_eq!(r["rolled_back"], serde_json::json!(["east->north"]), "{r}");
    assert!(r["error"].as_str().is_some_and(|e| e.contains("does not answer")), "{r}");
    assert!(r["next_attempt_at"].is_string(), "last_reload says when it retries: {r}");
    assert!(r["retry"].as_str().is_some_and(|m| m.contains("the wait doubles")), "last_reload says it retries: {r}");
    assert_eq!(flow_info(&ferry, "east->north").0, before.0, "the old plan runs on");
    assert!(!r.to_string().contains("-password"), "no secret in the outcome: {r}");

    // The cluster answers again: the same content, tried again by itself, applies.
    north.restart();
    let r = wait_last_reload(&mut ferry, Duration::from_secs(90), "the change applied by a later retry", |r| {
        r["result"] == "applied" && r["restarted"] == serde_json::json!(["east->north"])
    });
    println!("after the outage: {r}");
    assert_eq!(r["trigger"], "retry", "{r}");
    assert!(r["attempt"].as_u64().is_some_and(|n| n >= 2), "the outcome counts the attempts: {r}");
    assert!(r["retry"].is_null(), "{r}");
    // The outcome is recorded when the new supervisor is started; /flows shows it once it runs.
    wait_for(Duration::from_secs(10), "the flow running its new plan (next generation)", || {
        flow_info(&ferry, "east->north").0 == before.0 + 1
    });
    assert!(reloads(&ferry, "rolled_back") >= 1.0);
    produce(&east.bootstrap, &a, &fresh("a", 50..60));
    wait_for(ARRIVAL, "the new plan copying", || {
        assert_alive(&mut ferry);
        total(&north.bootstrap, &remote) >= 60
    });
    let copied: Vec<Vec<u8>> = support::consume_all(&north.bootstrap, &remote, Duration::from_secs(30))
        .into_iter()
        .map(|r| r.value.unwrap_or_default())
        .collect();
    assert_eq!(copied, values("a", 0..60), "every record once, in order");
    // Applied: later rescans find nothing to do.
    let applied = reloads(&ferry, "applied");
    std::thread::sleep(Duration::from_secs(5)); // observation window: two rescans
    assert_eq!(reloads(&ferry, "applied"), applied, "an applied change is not reloaded again");
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

/// A change rolled back while its cluster stays away is tried again with a growing wait, not at every
/// rescan (each attempt costs the node up to 10 s): the wait starts at the rescan interval and doubles
/// after each failed attempt, `last_reload` says when the next attempt is (`next_attempt_at`, and
/// `retry` in words), and `POST /reload` and a new edit still try at once. The check of the changed
/// flow's clusters fails at once here (`reload-preflight` failpoint; against a cluster that is away it
/// takes its full 10 s) and the rescan runs every 500 ms. No broker is needed.
#[test]
fn a_change_rolled_back_again_and_again_is_retried_with_a_growing_wait_shown_in_last_reload() {
    let [east, west] = [(); 2].map(|()| format!("127.0.0.1:{}", support::free_port()));
    let dir = tempfile::tempdir().expect("flows dir");
    write(dir.path(), "clusters.toml", &clusters_toml(&[("east", &east), ("west", &west)]));
    let original = flow("east", "west", &["t"], "");
    write(dir.path(), "flow.toml", &original);
    let env = [("FAILPOINTS", "reload-preflight=return(clusters away)"), ("FERRY_TEST_RESCAN_INTERVAL_MS", "500")];
    let mut ferry = Ferry::start_env(dir.path(), &[], &env);
    ferry.wait_log("listening on", Duration::from_secs(30));
    wait_last_reload(&mut ferry, Duration::from_secs(30), "the startup reload", |r| r["result"] == "applied");

    write(dir.path(), "flow.toml", &flow("east", "west", &["t"], "refresh_topics_interval_seconds = 7\n"));
    let first = wait_last_reload(&mut ferry, Duration::from_secs(30), "the change rolled back", |r| {
        r["result"] == "rolled_back"
    });
    println!("first: {first}");
    // Retried by itself with a wait that doubles (0.5, 1, 2, 4 s): attempts 1 to 5 take at least 7.5 s,
    // where a retry at every rescan would make them 2 s. Observed as they happen (a fixed window counted
    // under load misses or gains an attempt); each attempt says when the next one is.
    let seconds = |r: &serde_json::Value, key: &str| {
        r[key].as_str().and_then(ferry::status::parse_rfc3339).unwrap_or_else(|| panic!("{key} in {r}")) as f64
    };
    let attempt = |r: &serde_json::Value| r["attempt"].as_f64().unwrap_or_else(|| panic!("attempt in {r}"));
    let wait = |n: f64| 0.5 * 2f64.powf(n - 1.0);
    let mut seen = vec![first.clone()];
    wait_for(Duration::from_secs(60), "the change to be tried again by itself up to its 5th attempt", || {
        assert_alive(&mut ferry);
        let r = last_reload(&ferry);
        if r["attempt"] != seen[seen.len() - 1]["attempt"] {
            seen.push(r);
        }
        attempt(&seen[seen.len() - 1]) >= 5.0
    });
    let r = seen[seen.len() - 1].clone();
    let n = attempt(&r);
    println!("attempts seen: {:?}", seen.iter().map(|r| (attempt(r), r["at"].clone())).collect::<Vec<_>>());
    for r in &seen[1..] {
        assert_eq!((&r["result"], &r["trigger"]), (&"rolled_back".into(), &"retry".into()), "{r}");
    }
    for r in &seen {
        let (n, gap) = (attempt(r), seconds(r, "next_attempt_at") - seconds(r, "at"));
        // `at` and `next_attempt_at` are whole seconds.
        assert!(
            gap >= wait(n).floor() - 1.0 && gap <= wait(n).ceil() + 1.0,
            "the attempt after {n} failed ones is about {} s later: {r}",
            wait(n)
        );
        assert!(r["retry"].as_str().is_some_and(|m| m.contains(r["next_attempt_at"].as_str().unwrap_or("?"))), "{r}");
    }
    let (n1, took) = (attempt(&seen[0]), seconds(&r, "at") - seconds(&seen[0], "at"));
    let least: f64 = (n1 as u32..n as u32).map(|k| wait(f64::from(k))).sum();
    assert!(
        took >= least - 1.0,
        "attempts {n1} to {n} took {took} s, the waits between them {least} s: the retries do not back off"
    );
    assert_eq!(n, reloads(&ferry, "rolled_back"), "every attempt counted: {r}");

    // Asked for, it is tried at once, and waits longer after that.
    let (code, body) = support::http_post(ferry.listen_addr(), "/reload");
    let asked: serde_json::Value = serde_json::from_str(&body).expect("reload answer");
    assert_eq!((code, &asked["result"], &asked["trigger"]), (200, &"rolled_back".into(), &"http".into()), "{asked}");
    assert_eq!(asked["attempt"].as_f64(), Some(n + 1.0), "{asked}");
    // A new edit (back to the running plan) applies at once.
    write(dir.path(), "flow.toml", &original);
    let r =
        wait_last_reload(&mut ferry, Duration::from_secs(10), "the edit back applied", |r| r["result"] == "applied");
    assert!(r["next_attempt_at"].is_null() && r["retry"].is_null(), "{r}");
    // Nothing to persist, and a graceful stop would wait out the shutdown timeout for clusters that are away.
    ferry.kill9();
}

fn flows_log_lines(ferry: &Ferry) -> usize {
    ferry.log().lines().filter(|l| l.contains("flows reloaded")).count()
}

/// On a node that reloads only when asked, an edit is reviewed with `ferry reload --dry-run`: it lists the
/// flow that would restart and the one that would start, and nothing happens (same generation and
/// start time, no reload counted, `last_reload` unchanged) until `ferry reload` applies exactly that. A
/// directory that would be refused is said so, naming the file; a misspelt dry-run query is refused, not
/// taken for a real reload.
#[test]
fn a_dry_run_lists_the_flow_that_would_restart_and_nothing_restarts() {
    let (east, west) = shared_pair();
    let topic = unique("reload-dry");
    create_topic(&east.bootstrap, &topic, 1, &[]);
    produce(&east.bootstrap, &topic, &records("a", 0..50, 1));
    let dir = east_west_dir(east, west);
    write(dir.path(), "east-west.toml", &flow("east", "west", &[&topic], "refresh_topics_interval_seconds = 2\n"));
    let mut ferry = Ferry::start(dir.path(), &["--reload", "manual"]);
    let url = format!("http://{}", ferry.listen_addr());
    wait_for(ARRIVAL, "copying", || {
        assert_alive(&mut ferry);
        total(&west.bootstrap, &format!("east.{topic}")) == 50
    });
    let before = running_info(&ferry, "east->west");
    let reloaded = last_reload(&ferry);
    assert_eq!(all_reloads(&ferry), 1.0, "startup only");

    // The edit: east->west changes, west->east is new.
    write(dir.path(), "east-west.toml", &flow("east", "west", &[&topic], "refresh_topics_interval_seconds = 3\n"));
    let back = unique("reload-dry-back");
    write(dir.path(), "west-east.toml", &flow("west", "east", &[&back], ""));
    let (code, text, err) = ferry_cli(&["reload", "--dry-run", "--url", &url]);
    println!("{text}");
    assert_eq!(code, 0, "{text}{err}");
    assert!(text.starts_with("reload dry run (nothing changed): would_apply\n"), "{text}");
    assert!(text.contains("  would restart east->west\n") && text.contains("  would start   west->east\n"), "{text}");
    let (code, doc, err) = ferry_cli(&["reload", "--dry-run", "--url", &url, "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let plan: serde_json::Value = serde_json::from_str(&doc).unwrap_or_else(|e| panic!("not JSON ({e}): {doc}"));
    assert_eq!(plan["dry_run"], true, "{plan}");
    assert_eq!(plan["result"], "would_apply", "{plan}");
    assert_eq!(plan["would_restart"], serde_json::json!(["east->west"]), "{plan}");
    assert_eq!(plan["would_start"], serde_json::json!(["west->east"]), "{plan}");
    assert_eq!(plan["would_stop"], serde_json::json!([]), "{plan}");

    // Nothing happened, and nothing does: a window longer than the watcher's debounce (an automatic node
    // would have restarted the flow a second after the edit).
    let window = Instant::now();
    while window.elapsed() < Duration::from_secs(3) {
        assert_eq!(flow_info(&ferry, "east->west"), before, "the dry run restarted nothing");
        std::thread::sleep(Duration::from_millis(300)); // the observation window, not synchronisation
    }
    assert!(health(ferry.listen_addr())["flows"]["west->east"].is_null(), "nor started anything");
    assert_eq!(all_reloads(&ferry), 1.0, "a dry run is no reload");
    assert_eq!(last_reload(&ferry), reloaded, "last_reload is still the startup");

    // A misspelt query is refused, not taken for a real reload.
    let (status, body) = support::http_post(ferry.listen_addr(), "/reload?dryrun=true");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("dryrun"), "{body}");
    assert_eq!(all_reloads(&ferry), 1.0);

    // A directory that would be refused: said so, with the file and the key.
    write(dir.path(), "broken.toml", "[[flows]]\nsource = \"east\"\ntarget = \"mars\"\n");
    let (code, text, _) = ferry_cli(&["reload", "--dry-run", "--url", &url]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("rejected") && text.contains("broken.toml") && text.contains("mars"), "{text}");
    std::fs::remove_file(dir.path().join("broken.toml")).expect("remove broken.toml");
    assert_eq!((all_reloads(&ferry), flow_info(&ferry, "east->west")), (1.0, before.clone()));

    // The real reload does what the dry run said.
    let (code, text, err) = ferry_cli(&["reload", "--url", &url]);
    println!("{text}");
    assert_eq!(code, 0, "{text}{err}");
    assert!(text.contains("  restarted     east->west\n") && text.contains("  started       west->east\n"), "{text}");
    // The generation shows in /flows a moment after the reload's answer.
    wait_for(Duration::from_secs(30), "restarted: a new generation", || {
        flow_info(&ferry, "east->west").0 == before.0 + 1
    });
    assert_eq!(all_reloads(&ferry), 2.0);
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

/// Reading the flows directory is no change: an operator's `ls` and `cat`, and a dry run (which reads
/// every file in the node), set off no reload, and the node does not read its files again afterwards.
/// Seen with inotify, as an operator would: after the reads, the node opens none of its files (before the
/// watcher ignored open events, each read made it read the directory again a second later, for ever).
#[test]
fn reading_the_flows_directory_sets_off_no_reload() {
    use notify_debouncer_full::notify::{self, EventKind, RecursiveMode, Watcher as _};

    let (east, west) = shared_pair();
    let dir = east_west_dir(east, west);
    write(dir.path(), "notes.toml", "# no flows yet\n");
    // No periodic rescan during the test: it reads the files too (every 30 s by default).
    let mut ferry = Ferry::start_env(dir.path(), &[], &[("FERRY_TEST_RESCAN_INTERVAL_MS", "3600000")]);
    ferry.wait_log("node started", STARTED);
    wait_for(Duration::from_secs(10), "the startup reload counted", || all_reloads(&ferry) == 1.0);
    let url = format!("http://{}", ferry.listen_addr());
    let reloaded = last_reload(&ferry);

    let listing = dir.path().to_str().expect("utf-8 path").to_string();
    for _ in 0..5 {
        let ls = std::process::Command::new("ls").args(["-la", &listing]).output().expect("ls");
        assert!(ls.status.success());
        for entry in std::fs::read_dir(dir.path()).expect("read_dir") {
            std::fs::read(entry.expect("entry").path()).expect("read a flow file");
        }
        let (code, text, err) = ferry_cli(&["reload", "--dry-run", "--url", &url]);
        assert_eq!(code, 0, "{text}{err}");
    }
    let last_read = Instant::now();

    // From a moment after the last read (longer than the watcher's debounce) on, count the opens of the
    // directory and its files: only the node can make them now.
    let (tx, rx) = std::sync::mpsc::channel();
    let mut inotify = notify::recommended_watcher(move |e: notify::Result<notify::Event>| {
        if let Ok(e) = e {
            let _ = tx.send(e);
        }
    })
    .expect("inotify watcher");
    std::thread::sleep(Duration::from_millis(2_500).saturating_sub(last_read.elapsed())); // the quiet time
    inotify.watch(dir.path(), RecursiveMode::NonRecursive).expect("watch the flows directory");
    std::thread::sleep(Duration::from_secs(5)); // the observation window, not synchronisation
    drop(inotify);
    let opens: Vec<notify::Event> =
        rx.try_iter().filter(|e| matches!(e.kind, EventKind::Access(notify::event::AccessKind::Open(_)))).collect();
    println!("opens of the flows directory or its files by the node in 5 s: {}", opens.len());
    assert!(
        opens.is_empty(),
        "the node read its directory again after it was only read: {} opens in 5 s, e.g. {:?}",
        opens.len(),
        opens.iter().take(4).map(|e| &e.paths).collect::<Vec<_>>()
    );
    assert_eq!(all_reloads(&ferry), 1.0, "no reload counted");
    assert_eq!(last_reload(&ferry), reloaded, "last_reload is still the startup");
    assert_eq!(flows_log_lines(&ferry), 1, "one `flows reloaded` line, the startup's:\n{}", ferry.log());
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}
