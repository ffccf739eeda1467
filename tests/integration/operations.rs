//! What an operator does to a running node and sees of it: pause and resume a flow (positions kept, across
//! a reload), through HTTP and through `ferry pause`/`ferry resume` (with their errors in words),
//! readiness with its reasons, `ferry status` (table, `-o json`, `--watch`), the JSON of `validate` and
//! `translate` against their tables, the group members and leader in `/flows`, the series every flow has
//! from its start, JSON logs, and the completions and man page. A real node between the shared east/west
//! clusters.

use crate::support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::ferry_cli_env as cli;
use support::observe::{self, health, metric_sum};
use support::scenario::*;
use support::web::{http_post, http_request};
use support::{Ferry, commit_group_offsets, create_topic, produce, shared_pair, unique, wait_for};

const PATH: &str = "/flows/east-%3Ewest";

fn flow_json(ferry: &Ferry) -> serde_json::Value {
    health(ferry.listen_addr())["flows"][FLOW].clone()
}

fn ready(ferry: &Ferry) -> (u16, serde_json::Value) {
    let (status, body) = http_request(ferry.listen_addr(), "GET", "/ready", &[], b"");
    (status, serde_json::from_str(&body).unwrap_or_else(|e| panic!("/ready is not JSON ({e}): {body}")))
}

fn status_table(ferry: &Ferry) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["status", "--url", &format!("http://{}", ferry.listen_addr())])
        .output()
        .expect("run ferry status");
    assert!(out.status.success(), "ferry status: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The cells of the table line of `flow` (whitespace-separated).
fn row<'a>(table: &'a str, flow: &str) -> Vec<&'a str> {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(flow))
        .map_or_else(Vec::new, |l| l.split_whitespace().collect())
}

/// A table cell for a JSON value: `-` for null.
fn cell(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => "-".to_string(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Whether a table cell shows a JSON value: `-` for null, numbers by value (`0` and `0.0` alike).
fn shows(cell_text: &str, v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Number(n) => cell_text.parse::<f64>().ok() == n.as_f64(),
        other => cell_text == cell(other),
    }
}

fn flow_state_metric(ferry: &Ferry, state: &str) -> f64 {
    metric_sum(&observe::metrics(ferry.listen_addr()), "ferry_flow_state", &[("flow", FLOW), ("state", state)])
}

#[test]
fn a_paused_flow_copies_nothing_keeps_its_place_across_a_reload_and_resumes_without_duplicates() {
    let (east, west) = shared_pair();
    let topic = unique("ops-pause");
    let remote = format!("east.{topic}");
    create_topic(&east.bootstrap, &topic, 3, &[]);
    produce(&east.bootstrap, &topic, &records("a", 0..1_000, 3));
    let dir = pair_dir(east, west, &flow("east", "west", &[&topic], "refresh_topics_interval_seconds = 2\n"));
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_for(ARRIVAL, "the first 1,000 records", || {
        assert_alive(&mut ferry);
        total(&west.bootstrap, &remote) == 1_000
    });
    wait_healthy(&mut ferry, FLOW, STARTED);

    // Pause: the answer, /flows, the state metric, readiness and `ferry status` all say so.
    let (code, body) = http_post(ferry.listen_addr(), &format!("{PATH}/pause"));
    assert_eq!(code, 200, "{body}");
    wait_for(Duration::from_secs(10), "the flow paused in /flows", || flow_json(&ferry)["state"] == "paused");
    assert_eq!(flow_json(&ferry)["paused"], true);
    assert_eq!(flow_state_metric(&ferry, "paused"), 1.0);
    assert_eq!(flow_state_metric(&ferry, "running"), 0.0);
    assert_eq!(ready(&ferry).0, 200, "a paused flow is an operator's choice, not a reason to be unready");
    let table = status_table(&ferry);
    println!("{table}");
    assert!(table.lines().any(|l| l.starts_with(FLOW) && l.contains("paused")), "{table}");

    // Records written while paused stay on the source. A negative check needs a window: 5 s is more
    // than 20 fetch rounds of the copier.
    produce(&east.bootstrap, &topic, &records("b", 0..500, 3));
    let paused_at = Instant::now();
    while paused_at.elapsed() < Duration::from_secs(5) {
        assert_eq!(total(&west.bootstrap, &remote), 1_000, "a paused flow copies nothing");
        std::thread::sleep(Duration::from_millis(500)); // the observation window, not synchronisation
    }

    // A reload that restarts the flow keeps it paused.
    std::fs::write(
        dir.path().join("flow.toml"),
        flow("east", "west", &[&topic], "refresh_topics_interval_seconds = 3\n"),
    )
    .expect("rewrite flow.toml");
    wait_for(Duration::from_secs(30), "the changed flow restarted", || flow_json(&ferry)["generation"] == 2);
    wait_for(Duration::from_secs(30), "the restarted flow paused", || flow_json(&ferry)["state"] == "paused");
    let restarted = Instant::now();
    while restarted.elapsed() < Duration::from_secs(3) {
        assert_eq!(total(&west.bootstrap, &remote), 1_000, "still paused after the restart");
        std::thread::sleep(Duration::from_millis(500)); // the observation window, not synchronisation
    }

    // Resume: everything arrives, once.
    let (code, body) = http_post(ferry.listen_addr(), &format!("{PATH}/resume"));
    assert_eq!(code, 200, "{body}");
    let mut expected = values("a", 0..1_000);
    expected.extend(values("b", 0..500));
    let counts = wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &expected);
    assert_eq!(duplicates(&counts), 0, "pausing and resuming copies nothing twice");
    wait_for(Duration::from_secs(10), "running again", || flow_json(&ferry)["state"] == "running");
    assert_eq!(flow_state_metric(&ferry, "running"), 1.0);

    // Wrong requests get a 4xx, never a panic.
    assert_eq!(http_post(ferry.listen_addr(), "/flows/east-%3Enowhere/pause").0, 404);
    assert_eq!(http_post(ferry.listen_addr(), "/flows/not-a-flow/pause").0, 400);
    assert_eq!(http_request(ferry.listen_addr(), "GET", &format!("{PATH}/pause"), &[], b"").0, 405);
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

/// The answer to a pause is the pause: from the 200 on nothing more reaches the target, even while a copy
/// pass is in progress (`copier-deliver=sleep(1)` makes every record of a pass take a millisecond, so a
/// pass of a few hundred records outlasts the request). Five rounds of producing and pausing at once.
#[test]
fn a_pause_holds_from_its_answer_on_even_in_the_middle_of_a_copy_pass() {
    let (east, west) = shared_pair();
    let topic = unique("ops-pause-pass");
    let remote = format!("east.{topic}");
    create_topic(&east.bootstrap, &topic, 2, &[]);
    produce(&east.bootstrap, &topic, &records("w", 0..10, 2));
    let dir = pair_dir(east, west, &flow("east", "west", &[&topic], "refresh_topics_interval_seconds = 2\n"));
    let mut ferry = Ferry::start_env(dir.path(), &[], &[("FAILPOINTS", "copier-deliver=sleep(1)")]);
    wait_for(ARRIVAL, "the first records", || {
        assert_alive(&mut ferry);
        total(&west.bootstrap, &remote) == 10
    });
    let mut expected = values("w", 0..10);
    let mut grew_after_answer = Vec::new();
    for round in 0..5 {
        let prefix = format!("r{round}-");
        let recs = records(&prefix, 0..600, 2);
        let bootstrap = east.bootstrap.clone();
        let t = topic.clone();
        let producer = std::thread::spawn(move || produce(&bootstrap, &t, &recs));
        // Let the copier get into the middle of the round's records, then pause.
        let before = total(&west.bootstrap, &remote);
        wait_for(Duration::from_secs(30), "the copier busy with the round", || {
            total(&west.bootstrap, &remote) > before
        });
        let (code, body) = http_post(ferry.listen_addr(), &format!("{PATH}/pause"));
        assert_eq!(code, 200, "round {round}: {body}");
        let at_answer = total(&west.bootstrap, &remote);
        assert_eq!(flow_json(&ferry)["paused"], true, "round {round}: /flows says paused with the answer");
        producer.join().expect("producer");
        // The observation window of a negative check: 2 s is 20 poll rounds of the copier.
        let answered = Instant::now();
        let mut most = at_answer;
        while answered.elapsed() < Duration::from_secs(2) {
            most = most.max(total(&west.bootstrap, &remote));
            std::thread::sleep(Duration::from_millis(100));
        }
        grew_after_answer.push(most - at_answer);
        let (code, body) = http_post(ferry.listen_addr(), &format!("{PATH}/resume"));
        assert_eq!(code, 200, "round {round}: {body}");
        expected.extend(values(&prefix, 0..600));
        let counts = wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &expected);
        assert_eq!(duplicates(&counts), 0, "round {round}: pausing and resuming copies nothing twice");
    }
    println!("records that reached the target after each pause was answered: {grew_after_answer:?}");
    assert!(grew_after_answer.iter().all(|n| *n == 0), "a pause holds from its answer on: {grew_after_answer:?}");
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

#[test]
fn ready_stays_200_with_a_cluster_away_and_names_the_flow_that_cannot_run() {
    let (east, west) = shared_pair();
    let topic = unique("ops-ready");
    create_topic(&east.bootstrap, &topic, 1, &[]);
    let dir = pair_dir(east, west, &flow("east", "west", &[&topic], ""));
    // A second flow to a cluster nobody listens on: one Kafka cluster away.
    std::fs::write(
        dir.path().join("nowhere.toml"),
        "[clusters.nowhere]\nbootstrap_servers = \"127.0.0.1:1\"\n".to_string()
            + &flow("east", "nowhere", &[&topic], "emit_checkpoints_interval_seconds = 45\n"),
    )
    .expect("write nowhere.toml");
    let mut ferry = Ferry::start(dir.path(), &[]);
    ferry.wait_log("node started", STARTED);
    // Readiness is about this node serving its API with its flows loaded: the pod stays in service (a
    // rollout or a drain can proceed) while the flow to the missing cluster is listed with its reason.
    let mut answer = (0, serde_json::Value::Null);
    wait_for(Duration::from_secs(60), "/ready naming east->nowhere with a reason", || {
        assert_alive(&mut ferry);
        answer = ready(&ferry);
        let flows = answer.1["flows"].as_array().cloned().unwrap_or_default();
        flows.iter().any(|f| {
            f["flow"] == "east->nowhere"
                && f["reasons"]
                    .as_array()
                    .is_some_and(|r| r.iter().any(|x| x.as_str().is_some_and(|s| s.contains("nowhere"))))
        })
    });
    println!("/ready with the cluster away: {} {}", answer.0, answer.1);
    assert_eq!(answer.0, 200, "a cluster away leaves the node ready: {}", answer.1);
    assert_eq!(answer.1["ready"], true, "{}", answer.1);
    assert!(
        answer.1["flows"].as_array().is_some_and(|f| f.iter().all(|f| f["flow"] != FLOW)),
        "east->west is fine: {}",
        answer.1
    );
    // The degraded flow is visible where operators and alerts look: /health, /flows and the metrics.
    let h = health(ferry.listen_addr());
    assert_eq!(h["status"], "degraded", "{h}");
    assert_ne!(h["flows"]["east->nowhere"]["state"], "running", "{h}");
    let states = observe::metrics(ferry.listen_addr());
    assert!(
        states.contains("ferry_flow_state{flow=\"east->nowhere\",state=\"running\"} 0"),
        "ferry_flow_state shows east->nowhere not running"
    );
    // Each flow's configured checkpoint interval, for the staleness alert, even where the flow has no
    // leader (east->nowhere never reaches its target) and where it is the default.
    for (flow, interval) in [("east->nowhere", 45.0), (FLOW, 60.0)] {
        let exported = metric_sum(&states, "ferry_checkpoint_interval_seconds", &[("flow", flow)]);
        assert_eq!(exported, interval, "ferry_checkpoint_interval_seconds of {flow}");
    }

    std::fs::remove_file(dir.path().join("nowhere.toml")).expect("remove nowhere.toml");
    wait_for(Duration::from_secs(60), "/ready lists nothing once the broken flow is gone", || {
        assert_alive(&mut ferry);
        let (code, body) = ready(&ferry);
        code == 200 && body["flows"].as_array().is_some_and(Vec::is_empty)
    });
    assert_eq!(ready(&ferry).1["ready"], true);
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

#[test]
fn flows_show_members_and_leader_and_every_series_exists_from_the_start_with_json_logs() {
    let (east, west) = shared_pair();
    let topic = unique("ops-members");
    create_topic(&east.bootstrap, &topic, 4, &[]);
    let dir = pair_dir(east, west, &flow("east", "west", &[&topic], ""));
    let mut ferry = Ferry::start_env(dir.path(), &["--log-format", "json"], &[("FERRY_NODE_ID", "ops-node-1")]);
    ferry.wait_log("node started", STARTED);

    // Series of a flow exist before anything happened in it (counters at 0), so alerts work at once.
    let text = observe::metrics(ferry.listen_addr());
    for actor in ACTORS {
        let line = format!("ferry_actor_restarts_total{{actor=\"{actor}\",flow=\"{FLOW}\"}} 0");
        assert!(text.contains(&line), "{line} from the start:\n{text}");
    }
    for name in [
        "ferry_progress_commits_total",
        "ferry_unclean_handovers_total",
        "ferry_topics_created_total",
        "ferry_checkpoints_total",
        "ferry_heartbeats_total",
        "ferry_partitions_assigned",
        "ferry_partitions_failing",
        "ferry_offset_syncs_queued",
        "ferry_checkpoint_groups",
    ] {
        assert!(text.lines().any(|l| l.starts_with(&format!("{name}{{flow=\"{FLOW}\"}}"))), "{name} from the start");
    }
    assert!(text.contains("ferry_build_info{"), "ferry_build_info");

    // The copier group's members and the lease holder, as the clusters describe them.
    let mut f = serde_json::Value::Null;
    wait_for(Duration::from_secs(60), "/flows lists this node with all 5 partitions and as the leader", || {
        assert_alive(&mut ferry);
        f = flow_json(&ferry);
        f["leader_node"] == "ops-node-1"
            && f["nodes"] == serde_json::json!([{ "node": "ops-node-1", "partitions": 5 }])
            && f["leading"] == true
            && f["partitions"] == 5
    });
    println!("members: {} leader: {}", f["nodes"], f["leader_node"]);
    let leader =
        metric_sum(&observe::metrics(ferry.listen_addr()), "ferry_leader", &[("flow", FLOW), ("duty", "checkpoints")]);
    assert_eq!(leader, 1.0);
    assert!(ferry.terminate(Duration::from_secs(30)).success());

    // Every log line is one JSON object with a level, a message and a timestamp.
    // An actor's lines carry its flow and actor (the `actor` span), so a log collector can filter by them.
    let log = ferry.log();
    let mut lines = 0;
    let mut actors = std::collections::BTreeSet::new();
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        assert!(v["level"].is_string() && v["timestamp"].is_string(), "{line}");
        assert!(v["fields"]["message"].is_string(), "{line}");
        if v["span"]["name"] == "actor" {
            assert_eq!(v["span"]["flow"], FLOW, "{line}");
            actors.insert(v["span"]["actor"].as_str().unwrap_or_default().to_string());
        }
        lines += 1;
    }
    assert!(lines > 5, "{log}");
    println!("JSON log: {lines} lines; actors with their own lines: {actors:?}");
    for actor in ["copier", "topics", "lease"] {
        assert!(actors.contains(actor), "lines of the {actor} actor carry flow and actor: {actors:?}\n{log}");
    }
}

/// `metrics_per_partition = true` adds MM2-like per-partition series (lag, records copied) that add up to
/// the per-topic ones; without it there are none (a wide flow would put thousands on every scrape).
/// `ferry run`'s own settings in layers: a settings file (named by FERRY_CONFIG) sets the flows, the
/// listener, the log format, the node id and the deployment; FERRY_NODE_ID and FERRY_DEPLOYMENT override
/// the file; `--deployment` overrides both. What the node uses is seen from outside: it answers on the
/// file's address and logs JSON, `/flows` shows the variable's node id as the member and leader, and the
/// copier group on the source carries the flag's deployment.
#[test]
fn node_settings_come_from_a_file_under_ferry_variables_under_the_command_line() {
    let (east, west) = shared_pair();
    let topic = unique("ops-settings");
    create_topic(&east.bootstrap, &topic, 2, &[]);
    let flows = pair_dir(east, west, &flow("east", "west", &[&topic], ""));
    let listen = std::net::SocketAddr::from(([127, 0, 0, 1], support::free_port()));
    let (file_dep, env_dep, flag_dep) = (unique("file-dep"), unique("env-dep"), unique("flag-dep"));
    let settings = tempfile::tempdir().expect("settings dir");
    let path = settings.path().join("node.toml");
    let text = format!(
        "flows = {:?}\nlisten = \"{listen}\"\nlog_format = \"json\"\nnode_id = \"file-node\"\ndeployment = \"{file_dep}\"\n",
        flows.path().display().to_string()
    );
    std::fs::write(&path, text).expect("write node.toml");
    let path_text = path.display().to_string();
    let env = [("FERRY_CONFIG", path_text.as_str()), ("FERRY_NODE_ID", "env-node"), ("FERRY_DEPLOYMENT", &env_dep)];
    let mut ferry = Ferry::start_run(&["--deployment", &flag_dep], &env, listen);
    ferry.wait_log("node started", STARTED);

    // The file's listener answers; the file's log format is used from the first line on.
    assert_eq!(ferry.listen_addr(), listen);
    let log = ferry.log();
    let first: serde_json::Value = json(log.lines().next().expect("a log line"));
    assert_eq!(first["fields"]["message"], "node settings", "{log}");
    let from = first["fields"]["from"].as_str().unwrap_or_default();
    for source in
        [format!("listen from {path_text}"), "node_id from FERRY_NODE_ID".into(), "deployment from --deployment".into()]
    {
        assert!(from.contains(&source), "the settings line says `{source}`: {from}");
    }

    // The variable's node id is the member and the leader.
    wait_for(Duration::from_secs(60), "/flows lists env-node as the member and the leader", || {
        assert_alive(&mut ferry);
        let f = flow_json(&ferry);
        f["leader_node"] == "env-node"
            && f["nodes"].as_array().is_some_and(|n| n.len() == 1 && n[0]["node"] == "env-node")
    });

    // The flag's deployment names the copier group; neither the file's nor the variable's has members.
    let group = |deployment: &str| format!("{deployment}.{FLOW}");
    wait_for(Duration::from_secs(30), "the copier group of the flag's deployment has a member", || {
        !support::client::group_members(&east.bootstrap, &group(&flag_dep)).is_empty()
    });
    for other in [&file_dep, &env_dep] {
        assert!(support::client::group_members(&east.bootstrap, &group(other)).is_empty(), "{other}");
    }
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

#[test]
fn per_partition_series_exist_only_when_asked_and_add_up_to_the_topic() {
    let (east, west) = shared_pair();
    let topic = unique("ops-per-partition");
    create_topic(&east.bootstrap, &topic, 3, &[]);
    let recs: Vec<support::Rec> =
        (0..30).map(|i| support::Rec::new(if i < 10 { 0 } else { 1 }, format!("v{i}").as_bytes(), 1_000 + i)).collect();
    produce(&east.bootstrap, &topic, &recs);
    let dir = pair_dir(east, west, &flow("east", "west", &[&topic], "metrics_per_partition = true"));
    let mut ferry = Ferry::start(dir.path(), &[]);
    ferry.wait_log("node started", STARTED);
    let series = |text: &str, name: &str, partition: &str| {
        metric_sum(text, name, &[("flow", FLOW), ("topic", topic.as_str()), ("partition", partition)])
    };
    wait_for(ARRIVAL, "per-partition records and lag series", || {
        assert_alive(&mut ferry);
        let text = observe::metrics(ferry.listen_addr());
        series(&text, "ferry_partition_records_copied_total", "0") == 10.0
            && series(&text, "ferry_partition_records_copied_total", "1") == 20.0
            && ["0", "1", "2"].iter().all(|p| {
                text.contains(&format!(
                    "ferry_partition_lag_records{{flow=\"{FLOW}\",partition=\"{p}\",topic=\"{topic}\"}} 0"
                ))
            })
    });
    let text = observe::metrics(ferry.listen_addr());
    let topic_total = metric_sum(&text, "ferry_records_copied_total", &[("flow", FLOW), ("topic", topic.as_str())]);
    assert_eq!(topic_total, 30.0, "the per-topic series counts the same records");
    // The flow's status carries the same lag (summed over the flow's topics) and the copy rate (both
    // refreshed from the metrics each second). The sum is not 0 at every measurement: the flow also
    // copies the heartbeats topics, which this node and other tests' nodes write to each second. So the
    // status is compared with the metrics read just before and just after it (the lag is measured every
    // 5 s: most reads fall between two measurements).
    let flow_lag = || metric_sum(&observe::metrics(ferry.listen_addr()), "ferry_source_lag_records", &[("flow", FLOW)]);
    let seen =
        wait_showing(Duration::from_secs(30), "the flow's status to carry its summed lag and a copy rate", || {
            let before = flow_lag();
            let f = flow_json(&ferry);
            let after = flow_lag();
            let ok =
                before == after && f["lag_records"].as_f64() == Some(before) && f["records_per_second"].is_number();
            (ok, (before, f["lag_records"].clone(), f["records_per_second"].clone(), after))
        });
    println!("metrics lag, status lag, status records/s, metrics lag: {seen:?}");
    assert!(ferry.terminate(Duration::from_secs(30)).success());

    // The same flow without the option: per-topic series only.
    std::fs::write(dir.path().join("flow.toml"), {
        let text = std::fs::read_to_string(dir.path().join("flow.toml")).expect("flow.toml");
        text.replace("metrics_per_partition = true", "")
    })
    .expect("rewrite flow.toml");
    let mut ferry = Ferry::start(dir.path(), &[]);
    ferry.wait_log("node started", STARTED);
    produce(&east.bootstrap, &topic, &[support::Rec::new(2, b"late", 2_000)]);
    wait_for(ARRIVAL, "the new record counted per topic", || {
        assert_alive(&mut ferry);
        let text = observe::metrics(ferry.listen_addr());
        metric_sum(&text, "ferry_records_copied_total", &[("flow", FLOW), ("topic", topic.as_str())]) >= 1.0
    });
    let text = observe::metrics(ferry.listen_addr());
    assert!(!text.contains("ferry_partition_"), "no per-partition series without the option:\n{text}");
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

/// A topic deleted on the source leaves no series behind (a dashboard would show it lagging forever),
/// while the flow's other topics keep theirs. Here the topic sync (every second) usually tells of the
/// deletion before the copier group takes the topic's partitions away.
#[test]
fn a_deleted_source_topic_loses_its_series_and_the_others_keep_theirs() {
    a_deleted_source_topic_loses_its_series(1);
}

/// The same when the copier group takes the deleted topic's partitions away first (its consumer sees
/// the topic go within seconds; the topic sync looks every 30 s): the series used to stay for good.
#[test]
fn a_deleted_source_topic_loses_its_series_also_when_the_copier_group_drops_it_first() {
    a_deleted_source_topic_loses_its_series(30);
}

fn a_deleted_source_topic_loses_its_series(refresh_topics_seconds: u32) {
    let (east, west) = shared_pair();
    let prefix = unique("ops-deleted");
    let (gone, kept) = (format!("{prefix}-gone"), format!("{prefix}-kept"));
    for t in [&gone, &kept] {
        create_topic(&east.bootstrap, t, 2, &[]);
        produce(&east.bootstrap, t, &[support::Rec::new(0, b"a", 1), support::Rec::new(1, b"b", 2)]);
    }
    let pattern = format!("{prefix}-.*");
    let extra = format!("refresh_topics_interval_seconds = {refresh_topics_seconds}\nmetrics_per_partition = true");
    let dir = pair_dir(east, west, &flow("east", "west", &[&pattern], &extra));
    let mut ferry = Ferry::start(dir.path(), &[]);
    ferry.wait_log("node started", STARTED);
    let has_series = |text: &str, topic: &str| {
        let label = format!("topic=\"{topic}\"");
        text.lines().any(|l| l.starts_with("ferry_") && l.contains(&label))
    };
    wait_for(ARRIVAL, "both topics copied and measured", || {
        assert_alive(&mut ferry);
        let text = observe::metrics(ferry.listen_addr());
        [&gone, &kept].iter().all(|t| {
            metric_sum(&text, "ferry_records_copied_total", &[("flow", FLOW), ("topic", t.as_str())]) == 2.0
                && text.contains(&format!("ferry_source_lag_records{{flow=\"{FLOW}\",topic=\"{t}\"}} 0"))
        })
    });
    // The topic sync looks again 5 s after its first pass when the source had no `heartbeats` yet (the
    // flow's own emitter creates it): past that look, its next one is a whole interval away.
    wait_for(ARRIVAL, "the source's heartbeats topic copied", || {
        assert_alive(&mut ferry);
        observe::assigned_partitions(ferry.listen_addr(), FLOW).contains("heartbeats-0")
    });
    support::delete_topic(&east.bootstrap, &gone);
    wait_for(ARRIVAL, "the deleted topic's series gone", || {
        assert_alive(&mut ferry);
        !has_series(&observe::metrics(ferry.listen_addr()), &gone)
    });
    // Still gone after a few lag measurements (every 5 s), and the other topic keeps its series.
    std::thread::sleep(Duration::from_secs(12));
    let text = observe::metrics(ferry.listen_addr());
    assert!(!has_series(&text, &gone), "a series of the deleted topic came back:\n{text}");
    assert!(has_series(&text, &kept), "the other topic's series stay:\n{text}");
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

/// `ferry pause` and `ferry resume` against a node with an admin token: each refusal says why in words
/// (no token, wrong token, unknown flow, node unreachable) and changes nothing; the pause copies nothing
/// (0 records in a 5 s window) and the resume copies everything once. Meanwhile `ferry status`,
/// `ferry validate` and `ferry translate` print JSON that parses and carries the facts of their tables,
/// and `ferry status --watch` redraws.
#[test]
fn the_cli_pauses_and_resumes_a_flow_and_its_json_says_what_its_tables_say() {
    let (east, west) = shared_pair();
    let topic = unique("ops-cli");
    let remote = format!("east.{topic}");
    let group = unique("ops-cli-g");
    create_topic(&east.bootstrap, &topic, 2, &[]);
    produce(&east.bootstrap, &topic, &records("a", 0..400, 2));
    let extra = "refresh_topics_interval_seconds = 2\nemit_checkpoints_interval_seconds = 1\nrefresh_groups_interval_seconds = 1\n";
    let dir = pair_dir(east, west, &flow("east", "west", &[&topic], extra));
    let secrets = tempfile::tempdir().expect("token dir");
    let token = secrets.path().join("admin-token");
    std::fs::write(&token, "ops-cli-token\n").expect("write token");
    let wrong = secrets.path().join("wrong-token");
    std::fs::write(&wrong, "not-the-token\n").expect("write token");
    let token = token.to_str().expect("utf-8 path").to_string();
    let mut ferry = Ferry::start(dir.path(), &["--admin-token-file", &token]);
    let url = format!("http://{}", ferry.listen_addr());
    wait_for(ARRIVAL, "the first 400 records", || {
        assert_alive(&mut ferry);
        total(&west.bootstrap, &remote) == 400
    });
    wait_healthy(&mut ferry, FLOW, STARTED);

    // Refusals, each in words, none of which pauses anything.
    let (code, _, err) = cli(&["pause", FLOW, "--url", &url], &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("401") && err.contains("--token-file (or FERRY_ADMIN_TOKEN_FILE)"), "{err}");
    let (code, _, err) = cli(&["pause", FLOW, "--url", &url, "--token-file", wrong.to_str().expect("path")], &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("401") && err.contains("is not the node's admin token"), "{err}");
    assert!(!err.contains("not-the-token") && !err.contains("ops-cli-token"), "no token in messages: {err}");
    let (code, _, err) = cli(&["pause", "east->nowhere", "--url", &url], &[("FERRY_ADMIN_TOKEN_FILE", &token)]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("runs no flow east->nowhere"), "{err}");
    let (code, _, err) = cli(&["pause", "east-west", "--url", &url], &[]);
    assert_eq!(code, 2, "a malformed flow is a usage error: {err}");
    assert!(err.contains("malformed flow id"), "{err}");
    let nobody = format!("http://127.0.0.1:{}", support::free_port());
    let (code, _, err) = cli(&["pause", FLOW, "--url", &nobody], &[("FERRY_ADMIN_TOKEN_FILE", &token)]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&format!("cannot reach the node at {nobody}")), "{err}");
    assert_eq!(flow_json(&ferry)["state"], "running", "no refused call paused the flow");

    // Pause: done when the command returns.
    let (code, out, err) = cli(&["pause", FLOW, "--url", &url], &[("FERRY_ADMIN_TOKEN_FILE", &token)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("{FLOW}: paused, recorded for the deployment and applied on this node")), "{out}");
    wait_for(Duration::from_secs(10), "the flow paused in /flows", || flow_json(&ferry)["state"] == "paused");
    produce(&east.bootstrap, &topic, &records("b", 0..300, 2));
    let paused_at = Instant::now();
    while paused_at.elapsed() < Duration::from_secs(5) {
        assert_eq!(total(&west.bootstrap, &remote), 400, "a paused flow copies nothing");
        std::thread::sleep(Duration::from_millis(500)); // the observation window, not synchronisation
    }

    // `ferry status` as a table and as JSON, while nothing moves: the same facts.
    let mut last = (String::new(), serde_json::Value::Null);
    let agree = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for(Duration::from_secs(30), "the status table and its JSON agree", || {
            let (c1, table, _) = cli(&["status", "--url", &url], &[]);
            let (c2, doc, _) = cli(&["status", "--url", &url, "-o", "json"], &[]);
            let doc = json(&doc);
            let f = &doc["flows"][0];
            let cells = row(&table, FLOW);
            let same = c1 == 0
                && c2 == 0
                && doc["flows"].as_array().map(Vec::len) == Some(1)
                && f["flow"] == FLOW
                && f["state"] == "paused"
                && cells.len() >= 6
                && shows(cells[1], &f["state"])
                && shows(cells[2], &f["generation"])
                && shows(cells[3], &f["partitions"])
                && shows(cells[4], &f["lag_records"])
                && shows(cells[5], &f["records_per_second"]);
            last = (table, doc);
            same
        });
    }));
    let (table, doc) = last;
    if let Err(e) = agree {
        eprintln!("last seen:\n{table}{doc:#}");
        std::panic::resume_unwind(e);
    }
    println!("{table}{doc:#}");
    let reload = &doc["last_reload"];
    assert!(
        table.contains(&format!(
            "last reload: {} ({}) at {}",
            cell(&reload["result"]),
            cell(&reload["trigger"]),
            cell(&reload["at"])
        )),
        "{table}"
    );

    // --watch redraws: three frames within a few seconds.
    let mut watch = Command::new(support::ferry_bin())
        .args(["status", "--url", &url, "--watch", "--interval", "0.3", "-o", "json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn ferry status --watch");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(watch.stdout.take().expect("stdout")));
    for n in 0..3 {
        let line = lines.next().expect("a frame").expect("read a frame");
        assert_eq!(json(&line)["flows"][0]["state"], "paused", "frame {n}: {line}");
    }
    watch.kill().expect("stop the watch");
    watch.wait().expect("reap the watch");

    // Resume: everything arrives, once.
    let (code, out, err) = cli(&["resume", FLOW, "--url", &url], &[("FERRY_ADMIN_TOKEN_FILE", &token)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("{FLOW}: resumed")), "{out}");
    let mut expected = values("a", 0..400);
    expected.extend(values("b", 0..300));
    let counts = wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &expected);
    assert_eq!(duplicates(&counts), 0, "pausing and resuming through the CLI copies nothing twice");

    // `ferry translate`: the table's rows are the JSON's.
    commit_at_end(east, &group, &topic);
    wait_for(Duration::from_secs(60), "checkpoints of the group at the end of both partitions", || {
        let cps = newest_checkpoints(west, "east", &group);
        cps.len() == 2 && cps.values().all(|(up, _)| *up > 0)
    });
    let flows = dir.path().to_str().expect("utf-8 path");
    let args = ["translate", "--flows", flows, "--flow", FLOW, "--group", group.as_str()];
    // A newer checkpoint may land between the two calls: compare until one pair agrees.
    wait_for(Duration::from_secs(30), "the translate table and its JSON agree", || {
        let (c1, table, e1) = cli(&args, &[]);
        let (c2, doc, e2) = cli(&[&args[..], &["-o", "json"]].concat(), &[]);
        assert!(c1 == 0 && c2 == 0, "{e1}{e2}");
        let doc = json(&doc);
        let rows = doc["offsets"].as_array().cloned().unwrap_or_default();
        assert_eq!((doc["flow"].as_str(), doc["group"].as_str()), (Some(FLOW), Some(group.as_str())), "{doc}");
        rows.len() == 2
            && table.lines().count() == 3
            && rows.iter().all(|r| {
                let line =
                    format!("{}\t{}\t{}\t{}", cell(&r["topic"]), r["partition"], r["translated"], cell(&r["current"]));
                table.lines().any(|l| l == line)
            })
    });

    // `ferry validate`: the JSON names what the text names.
    let (code, text, _) = cli(&["validate", "--flows", flows], &[]);
    assert_eq!(code, 0, "{text}");
    let (code, doc, _) = cli(&["validate", "--flows", flows, "-o", "json"], &[]);
    assert_eq!(code, 0, "{doc}");
    let doc = json(&doc);
    assert_eq!(doc["valid"], true);
    for c in doc["clusters"].as_array().expect("clusters") {
        let line = format!("cluster {} bootstrap={}", cell(&c["alias"]), cell(&c["bootstrap_servers"]));
        assert!(text.contains(&line), "{line} in\n{text}");
    }
    let f = &doc["flows"][0];
    assert_eq!(f["flow"], FLOW);
    assert!(text.contains(&format!("flow {FLOW} (")) && text.contains(&format!("topics=[{:?}]", topic)), "{text}");
    assert_eq!(f["topics"], serde_json::json!([topic]));
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

/// `ferry check` between the shared clusters (no authorizer): every right granted, the topics listed with
/// their remote names, the group it would checkpoint, exit 0; a checkpoints topic created beforehand
/// without compaction is reported with the reason, exit 1; a cluster that does not answer is named with
/// its bootstrap within seconds, exit 1, and the other flow is still checked. The JSON carries the same.
#[test]
fn check_lists_remote_names_and_reports_a_bad_internal_topic_and_an_unreachable_cluster() {
    let (east, west) = shared_pair();
    // Aliases of this test's own: its internal topics are no other test's.
    let (src, dst, gone) = ("chk_src", "chk_dst", "chk_gone");
    let (topic, group) = (unique("chk"), unique("chk-group"));
    create_topic(&east.bootstrap, &topic, 2, &[]);
    commit_group_offsets(&east.bootstrap, &group, &[(&topic, 0, 0)]);
    let remote = format!("{src}.{topic}");
    let flows = flow(src, dst, &[&topic], &format!("groups = [\"{group}\"]"));
    let dir = support::scenario::flows_dir(&[(src, &east.bootstrap), (dst, &west.bootstrap)], &flows);
    let path = dir.path().to_str().expect("path");

    let (code, table, err) = cli(&["check", "--flows", path], &[]);
    eprintln!("[check] healthy:\n{table}{err}");
    assert_eq!(code, 0, "{table}{err}");
    assert!(table.contains(&format!("{topic} -> {remote}")), "{table}");
    assert!(table.contains(&format!("groups (1): {group}")), "{table}");
    assert!(!table.contains("MISSING") && table.contains("no problems"), "{table}");
    let (code, doc, err) = cli(&["check", "--flows", path, "-o", "json"], &[]);
    assert_eq!(code, 0, "{err}");
    let doc = json(&doc);
    let f = &doc["flows"][0];
    assert_eq!((doc["ok"].as_bool(), f["flow"].as_str()), (Some(true), Some("chk_src->chk_dst")), "{doc}");
    assert_eq!(f["topics"][0]["remote"], remote.as_str(), "{doc}");
    assert_eq!(f["groups"], serde_json::json!([group]), "{doc}");
    assert!(f["rights"].as_array().is_some_and(|r| r.iter().all(|r| r["status"] != "missing")), "{doc}");

    // A checkpoints topic someone created without compaction.
    let checkpoints = format!("{src}.checkpoints.internal");
    create_topic(&west.bootstrap, &checkpoints, 1, &[("cleanup.policy", "delete")]);
    let (code, table, err) = cli(&["check", "--flows", path], &[]);
    eprintln!("[check] bad checkpoints topic:\n{table}{err}");
    assert_eq!(code, 1, "{table}{err}");
    let line = table.lines().find(|l| l.contains(&checkpoints) && l.contains("WRONG")).unwrap_or_default();
    assert!(line.contains("cleanup.policy=delete") && line.contains("requires compact"), "{table}");
    let (code, doc, _) = cli(&["check", "--flows", path, "-o", "json"], &[]);
    assert_eq!(code, 1);
    let doc = json(&doc);
    let bad: Vec<&serde_json::Value> = doc["flows"][0]["internal_topics"]
        .as_array()
        .map(|t| t.iter().filter(|t| t["status"] == "wrong").collect())
        .unwrap_or_default();
    assert_eq!(bad.len(), 1, "{doc}");
    assert_eq!((bad[0]["topic"].as_str(), bad[0]["cluster"].as_str()), (Some(checkpoints.as_str()), Some(dst)));
    assert!(
        doc["problems"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p.as_str().is_some_and(|p| p.contains(&checkpoints))))
    );

    // A cluster nobody listens on, the target of a second flow.
    let nowhere = format!("127.0.0.1:{}", support::free_port());
    let flows = format!("{flows}\n{}", flow(src, gone, &[&topic], ""));
    let dir = support::scenario::flows_dir(&[(src, &east.bootstrap), (dst, &west.bootstrap), (gone, &nowhere)], &flows);
    let started = Instant::now();
    let (code, table, err) = cli(&["check", "--flows", dir.path().to_str().expect("path")], &[]);
    let took = started.elapsed();
    eprintln!("[check] unreachable cluster ({took:?}):\n{table}{err}");
    assert_eq!(code, 1, "{table}{err}");
    assert!(took < Duration::from_secs(30), "{took:?}");
    let line = table.lines().find(|l| l.starts_with(&format!("cluster {gone} "))).unwrap_or_default();
    assert!(line.contains(&nowhere) && line.contains("UNREACHABLE"), "{table}");
    assert!(table.contains(&format!("{topic} -> {remote}")), "the reachable flow is still checked: {table}");
}

/// Completions for each shell and the man pages come out of the clap definitions and name every command.
#[test]
fn completions_and_man_pages_are_generated_for_every_command() {
    let commands =
        ["run", "status", "pause", "resume", "reload", "health", "validate", "check", "translate", "import-mm2"];
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let (code, script, err) = cli(&["completions", shell], &[]);
        assert_eq!(code, 0, "{shell}: {err}");
        for c in commands {
            assert!(script.contains(c), "{shell} completion names `{c}`");
        }
        assert!(script.contains("dry-run") && script.contains("token-file"), "{shell}: the options too");
    }
    let (code, page, err) = cli(&["man"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(page.starts_with(".ie") || page.starts_with(".TH"), "roff: {}", &page[..page.len().min(200)]);
    assert!(page.contains(".TH ferry 1"), "a section-1 page for ferry");
    for c in commands {
        // roff escapes every `-`: `ferry\-import\-mm2(1)`.
        let escaped = c.replace('-', "\\-");
        assert!(page.contains(&format!("ferry\\-{escaped}(1)")), "the page lists `ferry-{c}(1)`");
    }
    let dir = tempfile::tempdir().expect("man dir");
    let (code, _, err) = cli(&["man", "--dir", dir.path().to_str().expect("path")], &[]);
    assert_eq!(code, 0, "{err}");
    for page in std::iter::once("ferry.1".to_string()).chain(commands.iter().map(|c| format!("ferry-{c}.1"))) {
        let text = std::fs::read_to_string(dir.path().join(&page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.contains(".SH SYNOPSIS"), "{page} has a synopsis");
    }
    let pause = std::fs::read_to_string(dir.path().join("ferry-pause.1")).expect("ferry-pause.1");
    assert!(pause.contains("token\\-file") && pause.contains("FERRY_ADMIN_TOKEN_FILE"), "{pause}");
}

// MM2's switches, acted on. Each flow has cluster aliases of its own on the shared pair, so every
// internal topic, remote topic and heartbeat it would write is its own, whatever the other tests do.

/// The actors a flow runs with every heartbeat switch off (or without checkpoints, the same less
/// `checkpoints`): the others are not started, and `/flows` does not list them.
const NO_HEARTBEATS: [&str; 5] = ["checkpoints", "copier", "lease", "offset_syncs", "topics"];

/// Heartbeats of the pair (`a`, `b`), either way, in `heartbeats` on `bootstrap` (none if no such topic).
fn heartbeats_between(bootstrap: &str, a: &str, b: &str) -> usize {
    if !support::list_topics(bootstrap).iter().any(|t| t == "heartbeats") {
        return 0;
    }
    support::consume_all(bootstrap, "heartbeats", READ)
        .iter()
        .filter_map(|r| {
            ferry::mm2::records::Heartbeat::decode(r.key.as_deref().unwrap_or_default(), r.value.as_deref()).ok()
        })
        .filter(|h| [a, b].contains(&h.source_alias.as_str()) && [a, b].contains(&h.target_alias.as_str()))
        .count()
}

/// A node running the flow `src`->`dst` (aliases of the shared pair) of `topic` with `extra` keys, once
/// the topic's 200 records (100 per partition) were copied; its flows directory and the remote topic.
/// `groups` are committed at these offsets of partition 0 before the start.
fn copying(
    src: &str,
    dst: &str,
    topic: &str,
    extra: &str,
    groups: &[(&str, i64)],
) -> (Ferry, tempfile::TempDir, String) {
    let (east, west) = shared_pair();
    let remote = format!("{src}.{topic}");
    create_topic(&east.bootstrap, topic, 2, &[]);
    produce(&east.bootstrap, topic, &records("a", 0..200, 2));
    for (group, offset) in groups {
        commit_group_offsets(&east.bootstrap, group, &[(topic, 0, *offset)]);
    }
    let dir = flows_dir(&[(src, &east.bootstrap), (dst, &west.bootstrap)], &flow(src, dst, &[topic], extra));
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_for(ARRIVAL, "the 200 records copied", || {
        assert_alive(&mut ferry);
        total(&west.bootstrap, &remote) == 200
    });
    (ferry, dir, remote)
}

/// `emit_checkpoints_enabled = false` with group offset sync: no checkpoints topic and no checkpoint,
/// yet the idle target group gets the translated offsets, and never moves back (a partition committed
/// ahead on the target keeps its offset: the target's offsets are the floor without published checkpoints).
#[test]
fn without_checkpoint_emission_group_offsets_are_still_synced_forwards_only() {
    let (east, west) = shared_pair();
    let (src, dst) = ("nocp", "nocp-w");
    let flow_id = format!("{src}->{dst}");
    let topic = unique("ops-nocp");
    let group = unique("ops-nocp-g");
    let extra = format!(
        "emit_checkpoints_enabled = false\nsync_group_offsets_enabled = true\nsync_group_offsets_interval_seconds = 1\n\
         refresh_groups_interval_seconds = 1\ngroups = [\"{group}\"]\n"
    );
    let (mut ferry, _dir, remote) = copying(src, dst, &topic, &extra, &[]);
    // The source group at the end of both partitions (translated exactly, by the copier's final syncs);
    // partition 1 of the target group ahead of that.
    commit_group_offsets(&west.bootstrap, &group, &[(&remote, 1, 150)]);
    commit_group_offsets(&east.bootstrap, &group, &[(&topic, 0, 100), (&topic, 1, 100)]);
    wait_for(ARRIVAL, "the target group at the translated end of partition 0", || {
        assert_alive(&mut ferry);
        support::group_offsets(&west.bootstrap, &group, &[(&remote, 0)])[0] == Some(100)
    });
    let offsets = support::group_offsets(&west.bootstrap, &group, &[(&remote, 0), (&remote, 1)]);
    assert_eq!(offsets, [Some(100), Some(150)], "partition 1 is not moved back from 150 to 100");

    let topics = support::list_topics(&west.bootstrap);
    assert!(!topics.contains(&format!("{src}.checkpoints.internal")), "no checkpoints topic: {topics:?}");
    let text = observe::metrics(ferry.listen_addr());
    assert_eq!(metric_sum(&text, "ferry_checkpoints_total", &[("flow", &flow_id)]), 0.0);
    assert_eq!(metric_sum(&text, "ferry_group_offset_syncs_total", &[("flow", &flow_id), ("result", "failed")]), 0.0);
    wait_healthy(&mut ferry, &flow_id, STARTED);
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

/// Both heartbeat switches off: no heartbeat of the flow on either cluster (the shared `heartbeats`
/// topics hold other flows' only), the heartbeat emitter neither started nor listed, no leader series for
/// its duty, and the flow healthy.
#[test]
fn with_both_heartbeat_switches_off_nothing_beats_and_the_flow_is_healthy() {
    let (east, west) = shared_pair();
    let (src, dst) = ("nohb", "nohb-w");
    let flow_id = format!("{src}->{dst}");
    let topic = unique("ops-nohb");
    let extra = "emit_heartbeats_enabled = false\nemit_reverse_heartbeats_enabled = false\n\
                 emit_heartbeats_interval_seconds = 1\nrefresh_topics_interval_seconds = 1\n";
    let (mut ferry, _dir, _) = copying(src, dst, &topic, extra, &[]);
    wait_running(&mut ferry, &flow_id, &NO_HEARTBEATS, STARTED);
    // The negative check's window: three heartbeat intervals and refreshes after the flow ran.
    let running = Instant::now();
    while running.elapsed() < Duration::from_secs(3) {
        assert!(flow_json_of(&ferry, &flow_id)["actors"].get("heartbeats").is_none(), "no heartbeats actor");
        std::thread::sleep(Duration::from_millis(500)); // the observation window, not synchronisation
    }
    assert_eq!(heartbeats_between(&west.bootstrap, src, dst), 0, "no heartbeat of the flow on the target");
    assert_eq!(heartbeats_between(&east.bootstrap, src, dst), 0, "no reverse heartbeat on the source");
    let text = observe::metrics(ferry.listen_addr());
    let mut duties: Vec<String> = observe::parse_metrics(&text)
        .into_iter()
        .filter(|m| m.name == "ferry_leader" && m.labels.get("flow") == Some(&flow_id))
        .filter_map(|m| m.labels.get("duty").cloned())
        .collect();
    duties.sort();
    assert_eq!(duties, ["checkpoints", "topics"], "no leader series for a duty nobody runs");
    assert_eq!(metric_sum(&text, "ferry_leader", &[("flow", &flow_id), ("duty", "topics")]), 1.0);
    assert_eq!(metric_sum(&text, "ferry_heartbeats_total", &[("flow", &flow_id)]), 0.0);
    assert_eq!(flow_json_of(&ferry, &flow_id)["leading"], true, "leading shows without the heartbeat duty");
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

/// `refresh_topics_enabled = false`: a matching topic created after the start is not copied, while the
/// topics found at the start go on copying.
#[test]
fn without_topic_refresh_a_topic_created_after_the_start_is_not_copied() {
    let (east, west) = shared_pair();
    let (src, dst) = ("norefresh", "norefresh-w");
    let p = unique("ops-norefresh");
    let (first, later) = (format!("{p}-first"), format!("{p}-later"));
    create_topic(&east.bootstrap, &first, 1, &[]);
    produce(&east.bootstrap, &first, &records("a", 0..50, 1));
    let extra = "refresh_topics_enabled = false\nrefresh_topics_interval_seconds = 1\n";
    let pattern = format!("{p}-.*");
    let dir = flows_dir(&[(src, &east.bootstrap), (dst, &west.bootstrap)], &flow(src, dst, &[&pattern], extra));
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_for(ARRIVAL, "the first topic copied", || {
        assert_alive(&mut ferry);
        total(&west.bootstrap, &format!("{src}.{first}")) == 50
    });
    ferry.wait_log("the topics found now are all the flow copies", STARTED);

    create_topic(&east.bootstrap, &later, 1, &[]);
    produce(&east.bootstrap, &later, &records("b", 0..20, 1));
    let created = Instant::now();
    produce(&east.bootstrap, &first, &records("c", 0..50, 1));
    wait_for(ARRIVAL, "the first topic's new records copied", || {
        assert_alive(&mut ferry);
        total(&west.bootstrap, &format!("{src}.{first}")) == 100
    });
    // The negative check's window: four refresh intervals after the topic appeared.
    while created.elapsed() < Duration::from_secs(4) {
        std::thread::sleep(Duration::from_millis(500)); // the observation window, not synchronisation
    }
    let remote_later = format!("{src}.{later}");
    assert_eq!(support::topic_partitions(&west.bootstrap, &remote_later), None, "{remote_later} created");
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

/// `refresh_groups_enabled = false`: a group committed after the start is never checkpointed, while the
/// groups found at the start go on being checkpointed.
#[test]
fn without_group_refresh_a_group_committed_after_the_start_is_not_checkpointed() {
    let (east, west) = shared_pair();
    let (src, dst) = ("nogrefresh", "nogrefresh-w");
    let topic = unique("ops-nogrefresh");
    let (early, late) = (format!("{topic}-early"), format!("{topic}-late"));
    let extra = format!(
        "refresh_groups_enabled = false\nrefresh_groups_interval_seconds = 1\nemit_checkpoints_interval_seconds = 1\n\
         groups = [\"{topic}-.*\"]\n"
    );
    let (mut ferry, _dir, remote) = copying(src, dst, &topic, &extra, &[(&early, 50)]);
    let at = |group: &str, offset: i64| {
        newest_checkpoints(west, src, group).get(&(remote.clone(), 0)).is_some_and(|&(up, _)| up == offset)
    };
    wait_for(ARRIVAL, "the early group's checkpoint", || {
        assert_alive(&mut ferry);
        at(&early, 50)
    });
    ferry.wait_log("the groups found now are all the flow follows", STARTED);
    commit_group_offsets(&east.bootstrap, &late, &[(&topic, 0, 60)]);
    // Rounds after the late group's commit, more than one group listing apart: the early group moves
    // twice, and each new offset is checkpointed.
    for offset in [80, 100] {
        commit_group_offsets(&east.bootstrap, &early, &[(&topic, 0, offset)]);
        wait_for(ARRIVAL, &format!("the early group's checkpoint at {offset}"), || {
            assert_alive(&mut ferry);
            at(&early, offset)
        });
    }
    assert!(newest_checkpoints(west, src, &late).is_empty(), "the late group was checkpointed");
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

fn flow_json_of(ferry: &Ferry, flow: &str) -> serde_json::Value {
    health(ferry.listen_addr())["flows"][flow].clone()
}

/// `ferry_source_lag_records` of `flow`'s `topic` (summed over its partitions; `None` before the first
/// measurement).
fn source_lag(ferry: &Ferry, flow: &str, topic: &str) -> Option<f64> {
    let text = observe::metrics(ferry.listen_addr());
    let series = format!("ferry_source_lag_records{{flow=\"{flow}\",topic=\"{topic}\"}}");
    text.contains(&series).then(|| metric_sum(&text, "ferry_source_lag_records", &[("flow", flow), ("topic", topic)]))
}

/// A source topic written in transactions has a transaction marker after each transaction's records,
/// which no consumer is ever handed: the high watermark stays past the last record a copier can copy.
/// Once every record is copied the lag is 0 all the same, reading `read_committed` (the default: a
/// committed transaction leaves its commit marker behind, an aborted one its records and its abort
/// marker) and `read_uncommitted` (which copies the aborted records too). Real lag is not hidden: the
/// records of a transaction still open are lag for the `read_committed` flow, which cannot copy them
/// yet, and not for the `read_uncommitted` one, which copied them.
#[test]
fn the_lag_of_a_transactional_source_reaches_zero_once_every_record_is_copied() {
    use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};

    let (east, west) = shared_pair();
    let topic = unique("ops-txn-lag");
    create_topic(&east.bootstrap, &topic, 2, &[]);
    let producer: ThreadedProducer<_> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &east.bootstrap)
        .set("transactional.id", unique("ops-txn-lag-producer"))
        .create()
        .expect("transactional producer");
    let txn = Duration::from_secs(30);
    producer.init_transactions(txn).expect("init transactions");
    let send = |partition: i32, values: std::ops::Range<usize>, prefix: &str| {
        producer.begin_transaction().expect("begin");
        for i in values {
            let value = format!("{prefix}{i}");
            let record = BaseRecord::<[u8], [u8]>::to(&topic).partition(partition).payload(value.as_bytes());
            producer.send(record).map_err(|(e, _)| e).expect("send");
        }
    };
    // Partition 0: 10 committed records and the commit marker. Partition 1: the same, then 5 aborted
    // records and the abort marker.
    send(0, 0..10, "c");
    producer.commit_transaction(txn).expect("commit");
    send(1, 10..20, "c");
    producer.commit_transaction(txn).expect("commit");
    send(1, 0..5, "a");
    producer.flush(txn).expect("flush the records to abort"); // an abort purges what is still queued
    producer.abort_transaction(txn).expect("abort");

    let dir = tempfile::tempdir().expect("flows dir");
    let uncommitted = [("isolation.level".to_string(), "read_uncommitted".to_string())];
    let clusters = support::cluster_toml("txc", &east.bootstrap, &[])
        + &support::cluster_toml("txc-w", &west.bootstrap, &[])
        + &support::cluster_toml("txu", &east.bootstrap, &uncommitted)
        + &support::cluster_toml("txu-w", &west.bootstrap, &[]);
    std::fs::write(dir.path().join("clusters.toml"), clusters).expect("write clusters");
    let flows = flow("txc", "txc-w", &[&topic], "") + &flow("txu", "txu-w", &[&topic], "");
    std::fs::write(dir.path().join("flow.toml"), flows).expect("write flows");
    let (committed_flow, uncommitted_flow) = ("txc->txc-w", "txu->txu-w");
    let (committed_copy, uncommitted_copy) = (format!("txc.{topic}"), format!("txu.{topic}"));
    let mut ferry = Ferry::start(dir.path(), &[]);
    let committed = values("c", 0..20);
    let mut everything = committed.clone();
    everything.extend(values("a", 0..5));
    wait_all_arrived(&mut ferry, &west.bootstrap, &committed_copy, &committed);
    wait_all_arrived(&mut ferry, &west.bootstrap, &uncommitted_copy, &everything);
    let lags = |ferry: &mut Ferry| {
        assert_alive(ferry);
        (source_lag(ferry, committed_flow, &topic), source_lag(ferry, uncommitted_flow, &topic))
    };
    wait_showing(Duration::from_secs(60), "both flows' lag at 0 once every record is copied", || {
        let seen = lags(&mut ferry);
        (seen == (Some(0.0), Some(0.0)), seen)
    });

    // An open transaction of 4 records on partition 0: lag of the read_committed flow only.
    send(0, 0..4, "o");
    producer.flush(txn).expect("flush the open transaction");
    everything.extend(values("o", 0..4));
    wait_all_arrived(&mut ferry, &west.bootstrap, &uncommitted_copy, &everything);
    wait_showing(Duration::from_secs(60), "the open transaction's 4 records as lag of the read_committed flow", || {
        let seen = lags(&mut ferry);
        (seen == (Some(4.0), Some(0.0)), seen)
    });
    producer.commit_transaction(txn).expect("commit the open transaction");
    let mut committed = committed;
    committed.extend(values("o", 0..4));
    wait_all_arrived(&mut ferry, &west.bootstrap, &committed_copy, &committed);
    wait_showing(Duration::from_secs(60), "both flows' lag at 0 after the commit", || {
        let seen = lags(&mut ferry);
        (seen == (Some(0.0), Some(0.0)), seen)
    });
    assert_eq!(duplicates(&arrivals(&west.bootstrap, &committed_copy)), 0);
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

/// `/flows` shows a flow's delivery mode from its definition, on every node, from the moment the flow is
/// listed and whatever its copier does: here an exactly-once flow whose clusters do not answer (its
/// copier cannot start) and a disabled exactly-once flow (never started). Both are `exactly_once`
/// throughout. No broker is needed.
#[test]
fn flows_show_the_delivery_mode_of_the_definition_whatever_the_copier_does() {
    let [east, west, north] = [(); 3].map(|()| format!("127.0.0.1:{}", support::free_port()));
    let exactly_once = "delivery = \"exactly_once\"\n";
    let flows = flow("east", "west", &["t"], exactly_once)
        + &flow("east", "north", &["t"], &format!("{exactly_once}enabled = false\n"));
    let dir = support::scenario::flows_dir(&[("east", &east), ("west", &west), ("north", &north)], &flows);
    let mut ferry = Ferry::start(dir.path(), &[]);
    // As soon as the node answers (its listener opens while the flows start).
    let listed = |ferry: &Ferry| {
        let flows = support::web::try_http_request(ferry.listen_addr(), "GET", "/flows", &[], b"")
            .ok()
            .and_then(|(_, body)| serde_json::from_str::<serde_json::Value>(&body).ok())
            .unwrap_or_default();
        ["east->west", "east->north"].map(|f| flows["flows"][f]["delivery"].clone())
    };
    wait_for(STARTED, "both flows listed in /flows", || {
        assert_alive(&mut ferry);
        listed(&ferry).iter().all(|d| !d.is_null())
    });
    // From the first listing on, through the copier's first failures and restarts.
    let since = Instant::now();
    while since.elapsed() < Duration::from_secs(3) {
        let shown = listed(&ferry);
        assert_eq!(
            shown,
            ["exactly_once", "exactly_once"],
            "delivery of east->west (its copier cannot start) and east->north (disabled) after {:?}",
            since.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100)); // the observation window, not synchronisation
    }
    // Nothing to persist, and a graceful stop would wait out the shutdown timeout for clusters that are away.
    ferry.kill9();
}
