//! ferry as a principal with only some rights, on clusters with ACLs (StandardAuthorizer,
//! `allow.everyone.if.no.acl.found=false`).
//!
//! - A principal that may read only some of a flow's topics gets those copied; each refused topic is
//!   reported once per topic refresh with the operation it lacks (log, `/flows`, metric), the flow is
//!   degraded (not failed, no restart loop), and granting the right makes the topic copy within a
//!   refresh, without restarting ferry.
//! - Missing rights on the copier and lease groups, the offset-syncs topic, the checkpoint producer's
//!   transactional id and the checkpoints topic: each actor's error names the resource and the right it
//!   lacks; granting it recovers the actor without a restart of the node.
//! - Without Read on the checkpoints topic (MM2's fallback): a warning names the topic and the right,
//!   the flow runs and publishes checkpoints, and the offset-sync backlog is read latest-only, so a
//!   group older than its partition's newest sync gets no checkpoint from an older one.
//!
//! - Topic ACL sync (`sync_topic_acls_enabled`): without Describe on the source cluster, then without
//!   Alter on the target cluster, the error names the cluster and the right while the flow copies; once
//!   granted, the target holds exactly MM2's bindings on the remote topic, and a consumer that could read
//!   the source topic reads its remote.
//! - A read-only source (offset syncs on the target, no reverse heartbeats): a principal with only read
//!   rights there copies, checkpoints and syncs group offsets, and the source's authorizer denies it
//!   nothing (its denials are logged, `scripts/kafka/log4j2.yaml`); the source's topics are unchanged.
//!
//! - `ferry check` with every right but one: it names the flow, the resource and the right, exits 1, and
//!   once the right is granted exits 0 listing the remote topics (table and JSON alike).
//!
//! The tests share one test bed (a SASL_SSL source and target, both with ACLs, users `alice`, `bob`
//! and `syncer`) and take turns: two brokers in all. `protect.rs` runs its tests on this bed too.

use crate::support;

use support::turn::take_turn;

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use support::observe::{metric_sum, metrics};
use support::scenario::{assert_alive, total};
use support::{
    Cluster, Ferry, Rec, Security, cluster_toml, commit_group_offsets, consume_all, create_topic, end_offsets,
    http_get, produce, unique, wait_for,
};

use ferry::mm2::records::{Checkpoint, OffsetSync};

pub(crate) const ARRIVAL: Duration = Duration::from_secs(60);
pub(crate) const REPORTED: Duration = Duration::from_secs(60);
const READ: Duration = Duration::from_secs(30);

/// Short intervals: topics refreshed every 2 s, checkpoints within seconds, quick restarts.
const FAST: &str = "refresh_topics_interval_seconds = 2\nemit_checkpoints_interval_seconds = 1\n\
                    refresh_groups_interval_seconds = 1\nemit_heartbeats_interval_seconds = 1\n\
                    restart_backoff_initial_seconds = 0.2\nrestart_backoff_max_seconds = 2\n";
const REFRESH: Duration = Duration::from_secs(2);

pub(crate) struct Bed {
    pub(crate) source: Cluster,
    pub(crate) target: Cluster,
}

pub(crate) fn bed() -> &'static Bed {
    static BED: OnceLock<Bed> = OnceLock::new();
    BED.get_or_init(|| {
        let t0 = Instant::now();
        let users = ["alice", "bob", "syncer"];
        let bed = std::thread::scope(|s| {
            let source = s.spawn(|| Cluster::start_secured("acl-src", Security::sasl_ssl(&users).with_acls()));
            let target = s.spawn(|| Cluster::start_secured("acl-dst", Security::sasl_ssl(&users).with_acls()));
            Bed { source: source.join().expect("source"), target: target.join().expect("target") }
        });
        eprintln!("test bed ready in {:?}", t0.elapsed());
        bed
    })
}

/// A flows directory: `source` and `target` as alice, and one flow with `topics` and `groups`.
fn flows_dir(bed: &Bed, aliases: (&str, &str), topics: &[&str], groups: &[&str]) -> tempfile::TempDir {
    flows_dir_as(bed, "alice", aliases, topics, groups, "")
}

/// [`flows_dir`] as `user`, with the flow keys `extra` besides [`FAST`].
pub(crate) fn flows_dir_as(
    bed: &Bed,
    user: &str,
    (source, target): (&str, &str),
    topics: &[&str],
    groups: &[&str],
    extra: &str,
) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("flows dir");
    let clusters = cluster_toml(source, &bed.source.bootstrap, &bed.source.client_props(user))
        + &cluster_toml(target, &bed.target.bootstrap, &bed.target.client_props(user));
    std::fs::write(dir.path().join("clusters.toml"), clusters).expect("write clusters");
    let list = |items: &[&str]| items.iter().map(|t| format!("\"{t}\"")).collect::<Vec<_>>().join(", ");
    let flow = format!(
        "[[flows]]\nsource = \"{source}\"\ntarget = \"{target}\"\ntopics = [{}]\ngroups = [{}]\n{FAST}{extra}",
        list(topics),
        list(groups)
    );
    std::fs::write(dir.path().join("flows.toml"), flow).expect("write flows");
    dir
}

/// ferry on `dir` as deployment `deployment` (its copier and lease groups and transactional id
/// start with `<deployment>.`, so the ACLs can name them).
pub(crate) fn start_ferry(dir: &tempfile::TempDir, deployment: &str) -> Ferry {
    let mut ferry = Ferry::start_env(dir.path(), &[], &[("FERRY_DEPLOYMENT", deployment)]);
    ferry.wait_log("serving /health", Duration::from_secs(30));
    ferry
}

pub(crate) fn records(prefix: &str, n: usize) -> Vec<Rec> {
    (0..n).map(|i| Rec::new((i % 2) as i32, format!("{prefix}-{i}").as_bytes(), 1_700_000_000_000 + i as i64)).collect()
}

/// `GET /flows`'s entry for `flow`.
pub(crate) fn flow_json(addr: SocketAddr, flow: &str) -> serde_json::Value {
    let body = http_get(addr, "/flows");
    let all: serde_json::Value =
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("/flows is not JSON ({e}): {body}"));
    all["flows"][flow].clone()
}

/// The reason `/flows` shows for `topic` of `flow`, if it shows one.
fn topic_problem(flow: &serde_json::Value, topic: &str) -> Option<String> {
    flow["topic_errors"][topic]["reason"].as_str().map(str::to_string)
}

/// `actor`'s last error in `/flows`.
fn actor_error(flow: &serde_json::Value, actor: &str) -> Option<String> {
    flow["actors"][actor]["last_error"].as_str().map(str::to_string)
}

/// Lines of `log` that mention `needle` and `also`.
fn log_lines(log: &str, needle: &str, also: &str) -> usize {
    log.lines().filter(|l| l.contains(needle) && l.contains(also)).count()
}

/// Waits until `/flows` shows `actor`'s error containing every one of `words`; returns it.
fn wait_actor_error(ferry: &mut Ferry, flow: &str, actor: &str, words: &[&str]) -> String {
    let addr = ferry.listen_addr();
    let mut last = None;
    let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for(REPORTED, &format!("{actor}'s error naming {words:?}"), || {
            assert_alive(ferry);
            last = actor_error(&flow_json(addr, flow), actor);
            last.as_ref().is_some_and(|e| words.iter().all(|w| e.contains(w)))
        })
    }));
    if found.is_err() {
        panic!("{actor} never reported {words:?}; last error: {last:?}; flow: {}", flow_json(addr, flow));
    }
    last.unwrap_or_default()
}

/// A principal may read one topic of three: the readable one is copied; the one it may only describe
/// and the one it may not even see (named literally in `topics`) are reported per topic, once per
/// refresh, with the operation missing. Granting the rights copies them within a refresh, no restart.
#[test]
fn refused_topics_are_reported_per_topic_and_copied_once_granted() {
    let bed = bed();
    let _turn = take_turn("refused topics");
    let (src, dst) = (&bed.source, &bed.target);
    let (deployment, flow) = ("acl-a", "east->west");
    let p = unique("acl");
    let (open, closed, hidden) = (format!("{p}-open"), format!("{p}-closed"), format!("{p}-hidden"));
    for t in [&open, &closed, &hidden] {
        create_topic(&src.bootstrap, t, 2, &[]);
        produce(&src.bootstrap, t, &records(t, 20));
    }
    // Everything the flow needs, except Read on `closed` and any right on `hidden`.
    std::thread::scope(|s| {
        s.spawn(|| {
            src.allow_all(
                "alice",
                &[("topic", "heartbeats"), ("topic", "mm2-offset-syncs.west.internal")],
                "literal",
                &["All"],
            );
            src.allow("alice", "group", &format!("{deployment}."), "prefixed", &["All"]);
            src.allow("alice", "topic", &open, "literal", &["Read", "Describe", "DescribeConfigs"]);
            src.allow("alice", "topic", &closed, "literal", &["Describe", "DescribeConfigs"]);
        });
        s.spawn(|| {
            let prefix = format!("{deployment}.");
            dst.allow_all(
                "alice",
                &[("topic", "east."), ("group", &prefix), ("transactional-id", &prefix)],
                "prefixed",
                &["All"],
            );
            dst.allow_all(
                "alice",
                &[
                    ("topic", "heartbeats"),
                    ("topic", "mm2-offsets.east.internal"),
                    ("topic", "ferry.leases.east.west"),
                    ("topic", "ferry.control.internal"),
                ],
                "literal",
                &["All"],
            );
        });
    });

    let dir = flows_dir(bed, ("east", "west"), &[&format!("{p}-.*"), &hidden], &[]);
    let mut ferry = start_ferry(&dir, deployment);
    let addr = ferry.listen_addr();
    wait_for(ARRIVAL, &format!("east.{open} complete on the target"), || {
        assert_alive(&mut ferry);
        total(&dst.bootstrap, &format!("east.{open}")) >= 20
    });

    // Both refused topics are reported, with the operation missing.
    let mut shown = serde_json::Value::Null;
    wait_for(REPORTED, "both refused topics in /flows", || {
        shown = flow_json(addr, flow);
        topic_problem(&shown, &closed).is_some() && topic_problem(&shown, &hidden).is_some()
    });
    let closed_reason = topic_problem(&shown, &closed).unwrap();
    let hidden_reason = topic_problem(&shown, &hidden).unwrap();
    eprintln!("[refused topics] /flows: {closed}: {closed_reason}");
    eprintln!("[refused topics] /flows: {hidden}: {hidden_reason}");
    assert!(
        closed_reason.contains("not authorized to Read") && closed_reason.contains("TOPIC_AUTHORIZATION_FAILED"),
        "{closed_reason}"
    );
    assert!(hidden_reason.contains("not authorized to Describe"), "{hidden_reason}");
    assert_eq!(shown["state"], "degraded", "{shown}");
    assert_eq!(shown["actors"]["copier"]["restarts"], 0, "{shown}");

    // Once per refresh: after a few refreshes, as many log lines as metric increments, and no more
    // than refreshes.
    let watched = Instant::now();
    let count = || metric_sum(&metrics(addr), "ferry_topic_errors_total", &[("flow", flow), ("topic", &closed)]);
    let first = count();
    wait_for(REPORTED, "three more refreshes reporting the refused topic", || count() >= first + 3.0);
    let (metric, lines) = (count(), log_lines(&ferry.log(), &closed, "not authorized"));
    let refreshes = watched.elapsed().as_secs_f64() / REFRESH.as_secs_f64();
    eprintln!("[refused topics] ferry_topic_errors_total{{topic={closed}}} = {metric}, log lines {lines}");
    assert!((lines as f64 - metric).abs() <= 1.0, "{lines} log lines for {metric} reports:\n{}", ferry.log());
    assert!(metric - first <= refreshes + 2.0, "{metric} - {first} reports in {refreshes:.1} refreshes");

    // Nothing of the refused topics reached the target.
    for t in [&closed, &hidden] {
        assert_eq!(total(&dst.bootstrap, &format!("east.{t}")), 0, "{t}");
    }

    // Grant, and the flow recovers within a refresh, without a restart.
    src.allow_all(
        "alice",
        &[("topic", &closed), ("topic", &hidden)],
        "literal",
        &["Read", "Describe", "DescribeConfigs"],
    );
    let granted = Instant::now();
    for t in [&closed, &hidden] {
        wait_for(ARRIVAL, &format!("east.{t} complete after the grant"), || {
            assert_alive(&mut ferry);
            total(&dst.bootstrap, &format!("east.{t}")) >= 20
        });
    }
    eprintln!("[refused topics] both topics copied {:?} after the grant", granted.elapsed());
    wait_for(REPORTED, "the flow running again", || flow_json(addr, flow)["state"] == "running");
    let shown = flow_json(addr, flow);
    assert_eq!(shown["actors"]["copier"]["restarts"], 0, "{shown}");
    let sorted = |mut r: Vec<Rec>| {
        r.sort_by_key(|r| (r.partition, r.offset));
        r
    };
    for t in [&open, &closed, &hidden] {
        assert_eq!(
            sorted(consume_all(&dst.bootstrap, &format!("east.{t}"), READ)).len(),
            sorted(consume_all(&src.bootstrap, t, READ)).len(),
            "{t}"
        );
    }
    ferry.terminate(Duration::from_secs(30));
}

/// The principal lacks, one after the other, Read on the copier and lease groups, Write on the
/// offset-syncs topic and the checkpoint producer's transactional id, and Write on the checkpoints
/// topic: each actor's error names what it lacks, and each grant recovers it without a restart.
#[test]
fn missing_rights_on_groups_and_internal_topics_are_named_and_recovered() {
    let bed = bed();
    let _turn = take_turn("internal rights");
    let (src, dst) = (&bed.source, &bed.target);
    let (deployment, flow) = ("acl-b", "south->north");
    let (copier_group, lease_group, txn) =
        (format!("{deployment}.{flow}"), format!("{deployment}.leaders"), format!("{deployment}.{flow}.checkpoints"));
    let (syncs_topic, checkpoints_topic) = ("mm2-offset-syncs.north.internal", "south.checkpoints.internal");
    let topic = unique("acl-data");
    let group = unique("acl-group");
    let remote = format!("south.{topic}");
    create_topic(&src.bootstrap, &topic, 2, &[]);
    produce(&src.bootstrap, &topic, &records(&topic, 20));
    let ends = end_offsets(&src.bootstrap, &topic);
    commit_group_offsets(&src.bootstrap, &group, &[(&topic, 0, ends[0]), (&topic, 1, ends[1])]);

    // Everything but: the copier and lease groups, Write on both internal topics, the transactional id.
    std::thread::scope(|s| {
        s.spawn(|| {
            src.allow_all("alice", &[("topic", "heartbeats")], "literal", &["All"]);
            src.allow("alice", "topic", &topic, "literal", &["Read", "Describe", "DescribeConfigs"]);
            src.allow("alice", "group", &group, "literal", &["Describe"]);
            src.allow("alice", "topic", syncs_topic, "literal", &["Create", "Describe", "Read"]);
        });
        s.spawn(|| {
            dst.allow_all(
                "alice",
                &[
                    ("topic", &remote),
                    ("topic", "south.heartbeats"),
                    ("topic", "heartbeats"),
                    ("topic", "mm2-offsets.south.internal"),
                    ("topic", "ferry.leases.south.north"),
                    ("topic", "ferry.control.internal"),
                ],
                "literal",
                &["All"],
            );
            dst.allow("alice", "topic", checkpoints_topic, "literal", &["Create", "Describe", "Read"]);
        });
    });

    let dir = flows_dir(bed, ("south", "north"), &[&topic], &[&group]);
    let mut ferry = start_ferry(&dir, deployment);
    let addr = ferry.listen_addr();

    // 1. The groups.
    let copier = wait_actor_error(&mut ferry, flow, "copier", &[&copier_group, "Read"]);
    eprintln!("[internal rights] copier: {copier}");
    let lease = wait_actor_error(&mut ferry, flow, "lease", &[&lease_group, "Read"]);
    eprintln!("[internal rights] lease: {lease}");
    assert_ne!(flow_json(addr, flow)["state"], "running");
    assert_eq!(total(&dst.bootstrap, &remote), 0, "copied without the copier group");
    src.allow("alice", "group", &copier_group, "literal", &["Read"]);
    let granted = Instant::now();
    wait_for(ARRIVAL, &format!("{remote} complete after the copier group's grant"), || {
        assert_alive(&mut ferry);
        total(&dst.bootstrap, &remote) >= 20
    });
    eprintln!("[internal rights] records copied {:?} after the copier group's grant", granted.elapsed());
    dst.allow("alice", "group", &lease_group, "literal", &["Read"]);
    let granted = Instant::now();
    wait_for(REPORTED, "this node leading after the lease group's grant", || flow_json(addr, flow)["leading"] == true);
    eprintln!("[internal rights] leading {:?} after the lease group's grant", granted.elapsed());

    // 2. Write on the offset-syncs topic; the transactional id.
    let syncs = wait_actor_error(&mut ferry, flow, "offset_syncs", &[syncs_topic, "Write"]);
    eprintln!("[internal rights] offset_syncs: {syncs}");
    let checkpoints = wait_actor_error(&mut ferry, flow, "checkpoints", &[&txn, "Write"]);
    eprintln!("[internal rights] checkpoints: {checkpoints}");
    // Restarts with backoff go on meanwhile; the node stays up.
    let restarts = |actor: &str| flow_json(addr, flow)["actors"][actor]["restarts"].as_u64().unwrap_or(0);
    let before = restarts("offset_syncs");
    wait_for(REPORTED, "the offset-sync emitter restarted again", || restarts("offset_syncs") > before);
    src.allow("alice", "topic", syncs_topic, "literal", &["Write"]);
    dst.allow("alice", "transactional-id", &txn, "literal", &["Write", "Describe"]);
    wait_for(ARRIVAL, "offset syncs on the source", || {
        consume_all(&src.bootstrap, syncs_topic, READ).iter().any(|r| {
            ferry::mm2::records::OffsetSync::decode(r.key.as_deref().unwrap_or_default(), r.value.as_deref())
                .is_ok_and(|s| s.topic == topic)
        })
    });

    // 3. Write on the checkpoints topic.
    let checkpoints = wait_actor_error(&mut ferry, flow, "checkpoints", &[checkpoints_topic, "Write"]);
    eprintln!("[internal rights] checkpoints: {checkpoints}");
    dst.allow("alice", "topic", checkpoints_topic, "literal", &["Write"]);
    let granted = Instant::now();
    wait_for(ARRIVAL, &format!("checkpoints of {group}"), || {
        assert_alive(&mut ferry);
        consume_all(&dst.bootstrap, checkpoints_topic, READ).iter().any(|r| {
            ferry::mm2::records::Checkpoint::decode(r.key.as_deref().unwrap_or_default(), r.value.as_deref())
                .is_ok_and(|c| c.group == group && c.topic == remote)
        })
    });
    eprintln!("[internal rights] checkpoints published {:?} after the grant", granted.elapsed());
    wait_for(REPORTED, "the flow running again", || flow_json(addr, flow)["state"] == "running");
    ferry.terminate(Duration::from_secs(30));
}

/// The checkpoints published in `topic` on `cluster` for `group`, oldest first.
fn checkpoints_of(cluster: &Cluster, topic: &str, group: &str) -> Vec<Checkpoint> {
    consume_all(&cluster.bootstrap, topic, READ)
        .iter()
        .filter_map(|r| Checkpoint::decode(r.key.as_deref().unwrap_or_default(), r.value.as_deref()).ok())
        .filter(|c| c.group == group)
        .collect()
}

/// The principal may Create, Describe and Write the checkpoints topic but not Read it, and an earlier
/// generation (MM2) left offset syncs and a checkpoint behind. ferry warns once, naming the topic and
/// the right; it starts without the published checkpoints and reads the sync backlog keeping only each
/// partition's newest sync (MM2's `initializationMustReadToEnd`): a group at that sync's level gets its
/// checkpoint at once, without moving; a group committed deep in the history gets none (an older sync
/// could translate it below what the earlier generation published); the flow copies and checkpoints
/// a group of a topic it copies.
#[test]
fn unreadable_checkpoints_topic_warns_and_translates_from_the_newest_syncs_only() {
    let bed = bed();
    let _turn = take_turn("unreadable checkpoints");
    let (src, dst) = (&bed.source, &bed.target);
    let (deployment, flow) = ("acl-c", "left->right");
    let (syncs_topic, checkpoints_topic) = ("mm2-offset-syncs.right.internal", "left.checkpoints.internal");
    let p = unique("acl-cp");
    // `history`: empty on the source, only the earlier generation's syncs describe it (ferry writes none);
    // `copied`: records ferry copies now.
    let (history, copied) = (format!("{p}-history"), format!("{p}-copied"));
    let (deep, recent, live) = (format!("{p}-g-deep"), format!("{p}-g-recent"), format!("{p}-g-live"));
    create_topic(&src.bootstrap, &history, 1, &[]);
    create_topic(&src.bootstrap, &copied, 2, &[]);
    produce(&src.bootstrap, &copied, &records(&copied, 20));
    let ends = end_offsets(&src.bootstrap, &copied);

    // The earlier generation's syncs of history-0 (MM2's format, unmarked), upstream 20 i -> downstream
    // 10 i, and its checkpoint of the deep group, from the sync at 30.
    create_topic(&src.bootstrap, syncs_topic, 1, &[("cleanup.policy", "compact")]);
    let syncs: Vec<Rec> = [(0, 0), (20, 10), (30, 15), (40, 20), (60, 30), (80, 40)]
        .into_iter()
        .map(|(upstream, downstream)| {
            let sync = OffsetSync {
                topic: history.clone(),
                partition: 0,
                upstream_offset: upstream,
                downstream_offset: downstream,
            };
            let (key, value) = sync.encode().expect("encode sync");
            Rec::new(0, &value, 1_700_000_000_000).key(&key)
        })
        .collect();
    produce(&src.bootstrap, syncs_topic, &syncs);
    let remote_history = format!("left.{history}");
    let earlier = Checkpoint {
        group: deep.clone(),
        topic: remote_history.clone(),
        partition: 0,
        upstream_offset: 30,
        downstream_offset: 15,
        metadata: String::new(),
    };
    create_topic(&dst.bootstrap, checkpoints_topic, 1, &[("cleanup.policy", "compact")]);
    let (key, value) = earlier.encode().expect("encode checkpoint");
    produce(&dst.bootstrap, checkpoints_topic, &[Rec::new(0, &value, 1_700_000_000_000).key(&key)]);
    // deep: below the newest sync (80 -> 40); recent: past it (MM2's +1 rule: 41); live: the copied
    // topic's end.
    commit_group_offsets(&src.bootstrap, &deep, &[(&history, 0, 30)]);
    commit_group_offsets(&src.bootstrap, &recent, &[(&history, 0, 90)]);
    commit_group_offsets(&src.bootstrap, &live, &[(&copied, 0, ends[0]), (&copied, 1, ends[1])]);

    // Everything the flow needs; on the checkpoints topic all but Read.
    std::thread::scope(|s| {
        s.spawn(|| {
            src.allow_all("alice", &[("topic", "heartbeats"), ("topic", syncs_topic)], "literal", &["All"]);
            src.allow("alice", "group", &format!("{deployment}."), "prefixed", &["All"]);
            src.allow("alice", "topic", &p, "prefixed", &["Read", "Describe", "DescribeConfigs"]);
            src.allow("alice", "group", &format!("{p}-g-"), "prefixed", &["Describe"]);
        });
        s.spawn(|| {
            let prefix = format!("{deployment}.");
            dst.allow_all("alice", &[("group", &prefix), ("transactional-id", &prefix)], "prefixed", &["All"]);
            dst.allow_all(
                "alice",
                &[
                    ("topic", &remote_history),
                    ("topic", &format!("left.{copied}")),
                    ("topic", "left.heartbeats"),
                    ("topic", "heartbeats"),
                    ("topic", "mm2-offsets.left.internal"),
                    ("topic", "ferry.leases.left.right"),
                    ("topic", "ferry.control.internal"),
                ],
                "literal",
                &["All"],
            );
            dst.allow("alice", "topic", checkpoints_topic, "literal", &["Create", "Describe", "Write"]);
        });
    });

    let dir = flows_dir(bed, ("left", "right"), &[&history, &copied], &[&format!("{p}-g-.*")]);
    let mut ferry = start_ferry(&dir, deployment);
    let started = Instant::now();
    let addr = ferry.listen_addr();

    // The warning names the topic and the right.
    ferry.wait_log("cannot read the published checkpoints", REPORTED);
    let log = ferry.log();
    let warning = log.lines().find(|l| l.contains("cannot read the published checkpoints")).unwrap_or_default();
    eprintln!("[unreadable checkpoints] {warning}");
    assert!(warning.contains("WARN"), "{warning}");
    assert!(warning.contains(checkpoints_topic) && warning.contains("not authorized to Read"), "{warning}");

    // The recent group's checkpoint, from the newest sync, without the group moving.
    let mut first = Vec::new();
    wait_for(ARRIVAL, &format!("a checkpoint of {recent}"), || {
        assert_alive(&mut ferry);
        first = checkpoints_of(dst, checkpoints_topic, &recent);
        !first.is_empty()
    });
    eprintln!("[unreadable checkpoints] {recent}: {first:?} {:?} after the start", started.elapsed());
    assert_eq!(
        (first[0].topic.as_str(), first[0].upstream_offset, first[0].downstream_offset),
        (remote_history.as_str(), 90, 41),
        "{first:?}"
    );

    // The copied topic arrives and the live group is checkpointed.
    wait_for(ARRIVAL, &format!("left.{copied} complete on the target"), || {
        assert_alive(&mut ferry);
        total(&dst.bootstrap, &format!("left.{copied}")) >= 20
    });
    let copies = end_offsets(&dst.bootstrap, &format!("left.{copied}"));
    let mut live_cps = Vec::new();
    wait_for(ARRIVAL, &format!("checkpoints of {live} at the copied topic's end"), || {
        live_cps = checkpoints_of(dst, checkpoints_topic, &live);
        (0..2).all(|part| live_cps.iter().any(|c| c.partition == part && c.upstream_offset == ends[part as usize]))
    });
    eprintln!("[unreadable checkpoints] {live}: {live_cps:?}");
    for c in &live_cps {
        assert_eq!(c.topic, format!("left.{copied}"), "{c:?}");
        assert!(c.downstream_offset <= copies[c.partition as usize], "past the copies ({copies:?}): {c:?}");
    }

    // The deep group: nothing but the earlier generation's checkpoint. Its round was the recent group's
    // (every group is translated in each round), and several rounds have passed since.
    let deep_cps = checkpoints_of(dst, checkpoints_topic, &deep);
    assert_eq!(deep_cps, vec![earlier], "the deep group was translated from an older sync than the newest");

    assert_eq!(flow_json(addr, flow)["state"], "running", "{}", flow_json(addr, flow));
    let warnings = log_lines(&ferry.log(), "cannot read the published checkpoints", "");
    assert_eq!(warnings, 1, "{}", ferry.log());
    ferry.terminate(Duration::from_secs(30));
}

/// `ferry check --flows DIR --deployment D ARGS`: exit code, stdout, stderr.
fn check(dir: &tempfile::TempDir, deployment: &str, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(support::ferry_bin())
        .args(["check", "--flows"])
        .arg(dir.path())
        .args(["--deployment", deployment])
        .args(args)
        .output()
        .expect("run ferry check");
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// `ferry check` as a principal granted everything a flow needs but Read on its copier group (it may
/// describe the group) and Write on the offset-syncs topic an operator created beforehand: exit 1, each
/// missing right named with the flow and the resource, in the table and in the JSON; the transactional id
/// shown as not checkable; no password in the output. Once both are granted: exit 0, the remote topic
/// names listed.
#[test]
fn check_names_each_missing_right_and_passes_once_granted() {
    let bed = bed();
    let _turn = take_turn("check");
    let (src, dst) = (&bed.source, &bed.target);
    let (deployment, flow) = ("acl-d", "up->down");
    let copier_group = format!("{deployment}.{flow}");
    let p = unique("acl-chk");
    let (topic, group) = (format!("{p}-data"), format!("{p}-g"));
    let syncs_topic = "mm2-offset-syncs.down.internal";
    create_topic(&src.bootstrap, &topic, 2, &[]);
    create_topic(&src.bootstrap, syncs_topic, 1, &[("cleanup.policy", "compact")]);
    commit_group_offsets(&src.bootstrap, &group, &[(&topic, 0, 0)]);
    std::thread::scope(|s| {
        s.spawn(|| {
            src.allow("alice", "topic", "heartbeats", "literal", &["All"]);
            src.allow("alice", "topic", syncs_topic, "literal", &["Describe", "Read"]);
            src.allow("alice", "topic", &topic, "literal", &["Read", "Describe", "DescribeConfigs"]);
            src.allow_all("alice", &[("group", &group), ("group", &copier_group)], "literal", &["Describe"]);
        });
        s.spawn(|| {
            let prefix = format!("{deployment}.");
            dst.allow_all(
                "alice",
                &[("topic", "up."), ("group", &prefix), ("transactional-id", &prefix)],
                "prefixed",
                &["All"],
            );
            dst.allow_all(
                "alice",
                &[
                    ("topic", "heartbeats"),
                    ("topic", "mm2-offsets.up.internal"),
                    ("topic", "ferry.leases.up.down"),
                    ("topic", "ferry.control.internal"),
                ],
                "literal",
                &["All"],
            );
        });
    });
    let dir = flows_dir(bed, ("up", "down"), &[&topic], &[&group]);
    let remote = format!("up.{topic}");

    let (code, table, err) = check(&dir, deployment, &[]);
    eprintln!("[check] one right missing:\n{table}{err}");
    assert_eq!(code, 1, "{table}{err}");
    let missing: Vec<&str> = table.lines().filter(|l| l.trim_start().starts_with("MISSING")).collect();
    assert_eq!(missing.len(), 2, "{table}");
    assert!(missing[0].contains(&format!("group {copier_group}")) && missing[0].contains("Read"), "{table}");
    assert!(
        missing[1].contains(&format!("topic {syncs_topic}")) && missing[1].contains("not granted Write"),
        "{table}"
    );
    let problem = table.lines().find(|l| l.contains("MISSING Read")).unwrap_or_default();
    assert!(problem.contains(&format!("flow {flow}")) && problem.contains(&copier_group), "{table}");
    let problem = table.lines().find(|l| l.contains("MISSING Write")).unwrap_or_default();
    assert!(problem.contains(&format!("flow {flow}")) && problem.contains(syncs_topic), "{table}");
    // It exists, compacted as ferry requires; its configs are not the principal's to describe.
    let state = table.lines().find(|l| l.contains(syncs_topic) && !l.contains("topic ")).unwrap_or_default();
    assert!(state.trim_start().starts_with("OK") && state.contains("cleanup.policy unknown"), "{table}");
    let txn = table.lines().find(|l| l.contains("transactional id")).unwrap_or_default();
    assert!(txn.contains("UNCHECKED") && txn.contains("kafka-acls"), "{table}");
    for secret in [src.password("alice"), dst.password("alice")] {
        assert!(!table.contains(secret) && !err.contains(secret), "a password in the output");
    }
    let (code, doc, _) = check(&dir, deployment, &["-o", "json"]);
    assert_eq!(code, 1);
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap_or_else(|e| panic!("not JSON ({e}): {doc}"));
    let rights = doc["flows"][0]["rights"].as_array().cloned().unwrap_or_default();
    let missing: Vec<&serde_json::Value> = rights.iter().filter(|r| r["status"] == "missing").collect();
    assert_eq!(missing.len(), 2, "{doc}");
    assert_eq!(missing[0]["resource"], serde_json::json!({"type": "group", "name": copier_group}), "{doc}");
    assert_eq!((missing[0]["rights"][0].as_str(), missing[0]["cluster"].as_str()), (Some("Read"), Some("up")));
    assert_eq!(missing[1]["resource"], serde_json::json!({"type": "topic", "name": syncs_topic}), "{doc}");
    assert_eq!(missing[1]["rights"], serde_json::json!(["Write"]), "{doc}");
    assert_eq!(doc["ok"], false);

    src.allow("alice", "group", &copier_group, "literal", &["Read"]);
    src.allow("alice", "topic", syncs_topic, "literal", &["Write"]);
    let mut last = String::new();
    wait_for(REPORTED, "ferry check passing after the grant", || {
        let (code, table, err) = check(&dir, deployment, &[]);
        last = format!("{table}{err}");
        code == 0
    });
    eprintln!("[check] granted:\n{last}");
    assert!(last.contains(&format!("{topic} -> {remote}")) && last.contains("no problems"), "{last}");
    let (code, doc, _) = check(&dir, deployment, &["-o", "json"]);
    assert_eq!(code, 0);
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap_or_else(|e| panic!("not JSON ({e}): {doc}"));
    assert_eq!(doc["flows"][0]["topics"][0]["remote"], remote.as_str(), "{doc}");
    assert_eq!(doc["ok"], true, "{doc}");
}

/// Topic ACL sync with MM2's rules, as principal `syncer`. Consumer `bob` may Read, Describe, All and
/// Write `orders` on the source (literal), is denied Write on it, and may Read every topic of the test's
/// prefix (prefixed) and a topic the flow does not copy. `ferry check` first names both missing rights
/// on the clusters (and passes at the end). Without Describe on the source cluster the topics
/// actor names that right; with it but without Alter on the target cluster, the topic names that one; the
/// flow copies meanwhile. Once both are granted the remote topic holds exactly ALLOW Read, ALLOW Describe
/// (Read from All, no Write) and DENY Write for bob (besides ferry's own Read, Describe and
/// DescribeConfigs), nothing of the prefixed or uncopied bindings reaches the target, and bob (granted Read on his group there, as MM2 syncs no group ACLs) reads the remote topic.
#[test]
fn topic_acls_are_synced_by_mm2s_rules_once_the_rights_are_granted() {
    let bed = bed();
    let _turn = take_turn("topic ACL sync");
    let (src, dst) = (&bed.source, &bed.target);
    let (deployment, flow, user) = ("acl-e", "here->there", "syncer");
    let p = unique("acl-sync");
    let (orders, secret) = (format!("{p}-orders"), format!("{p}-secret"));
    let remote = format!("here.{orders}");
    for t in [&orders, &secret] {
        create_topic(&src.bootstrap, t, 2, &[]);
    }
    produce(&src.bootstrap, &orders, &records(&orders, 20));
    let group = support::client::CONSUME_ALL_GROUP;
    std::thread::scope(|s| {
        s.spawn(|| {
            // bob's bindings, the ones to sync and the ones not to.
            src.allow("bob", "topic", &orders, "literal", &["Read", "Describe", "All", "Write"]);
            src.deny("bob", "topic", &orders, "literal", &["Write"]);
            src.allow("bob", "topic", &format!("{p}-"), "prefixed", &["Read"]);
            src.allow("bob", "topic", &secret, "literal", &["Read"]);
            src.allow("bob", "group", group, "literal", &["Read"]);
            // Everything the flow needs, but no right on the cluster.
            src.allow_all(
                user,
                &[("topic", "heartbeats"), ("topic", "mm2-offset-syncs.there.internal")],
                "literal",
                &["All"],
            );
            src.allow(user, "group", &format!("{deployment}."), "prefixed", &["All"]);
            src.allow(user, "topic", &orders, "literal", &["Read", "Describe", "DescribeConfigs"]);
        });
        s.spawn(|| {
            let prefix = format!("{deployment}.");
            dst.allow_all(
                user,
                &[("topic", "here."), ("group", &prefix), ("transactional-id", &prefix)],
                "prefixed",
                &["All"],
            );
            dst.allow_all(
                user,
                &[
                    ("topic", "heartbeats"),
                    ("topic", "mm2-offsets.here.internal"),
                    ("topic", "ferry.leases.here.there"),
                    ("topic", "ferry.control.internal"),
                ],
                "literal",
                &["All"],
            );
            dst.allow("bob", "group", group, "literal", &["Read"]);
        });
    });
    // bob reads the source topic.
    let bob_reads = |c: &Cluster, topic: &str| {
        support::client::as_client(&c.bootstrap, &c.client_props("bob"), || consume_all(&c.bootstrap, topic, READ))
    };
    assert_eq!(bob_reads(src, &orders).len(), 20);

    let sync = "sync_topic_acls_enabled = true\nsync_topic_acls_interval_seconds = 1\n";
    let dir = flows_dir_as(bed, user, ("here", "there"), &[&orders], &[], sync);
    // `ferry check` names both rights on the clusters.
    let (code, table, err) = check(&dir, deployment, &[]);
    eprintln!("[acl sync] check:\n{table}{err}");
    assert_eq!(code, 1, "{table}{err}");
    let missing: Vec<&str> = table.lines().filter(|l| l.trim_start().starts_with("MISSING")).collect();
    assert_eq!(missing.len(), 2, "{table}");
    for (line, (cluster, right)) in missing.iter().zip([("here", "Describe"), ("there", "Alter")]) {
        assert!(
            line.contains(cluster)
                && line.contains("cluster kafka-cluster")
                && line.contains(&format!("grant {right}")),
            "{table}"
        );
    }

    let mut ferry = start_ferry(&dir, deployment);
    let addr = ferry.listen_addr();

    // 1. No Describe on the source cluster: the topics actor says so; the flow copies.
    let error = wait_actor_error(&mut ferry, flow, "topics", &["cluster on `here`", "not authorized to Describe"]);
    eprintln!("[acl sync] topics: {error}");
    assert!(error.contains("CLUSTER_AUTHORIZATION_FAILED") && error.contains("grant Describe"), "{error}");
    wait_for(ARRIVAL, &format!("{remote} complete on the target"), || {
        assert_alive(&mut ferry);
        total(&dst.bootstrap, &remote) >= 20
    });
    assert_eq!(flow_json(addr, flow)["state"], "degraded", "{}", flow_json(addr, flow));

    // 2. Describe granted, no Alter on the target cluster: the topic names it.
    src.allow(user, "cluster", "", "literal", &["Describe"]);
    let mut reason = None;
    wait_for(REPORTED, "the topic's error naming Alter on the target cluster", || {
        assert_alive(&mut ferry);
        reason = topic_problem(&flow_json(addr, flow), &orders);
        reason.as_deref().is_some_and(|r| r.contains("not authorized to Alter"))
    });
    let reason = reason.unwrap_or_default();
    eprintln!("[acl sync] {orders}: {reason}");
    assert!(reason.contains(&remote) && reason.contains("cluster on `there`"), "{reason}");

    // 3. Alter granted: MM2's bindings, exactly, on the remote topic.
    dst.allow(user, "cluster", "", "literal", &["Alter"]);
    let granted = Instant::now();
    wait_for(ARRIVAL, "ACL bindings synced", || {
        assert_alive(&mut ferry);
        ferry.log().lines().any(|l| l.contains("synced topic ACL bindings") && l.contains(&remote))
    });
    eprintln!("[acl sync] bindings synced {:?} after the grant", granted.elapsed());
    let synced = || metric_sum(&metrics(addr), "ferry_acl_bindings_synced_total", &[("flow", flow)]);
    let first = synced();
    assert!(first >= 3.0, "{first}");
    let on_target = dst.acls();
    let of = |name: &str| -> Vec<&str> {
        let mut v: Vec<&str> = on_target
            .iter()
            .filter(|(r, _)| r.contains(&format!("name={name},")))
            .map(|(r, e)| {
                assert!(r.contains("resourceType=TOPIC") && r.contains("patternType=LITERAL"), "{r}");
                e.as_str()
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        of(&remote),
        [
            "(principal=User:bob, host=*, operation=DESCRIBE, permissionType=ALLOW)",
            "(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)",
            "(principal=User:bob, host=*, operation=WRITE, permissionType=DENY)",
            // ferry's own, granted on the source above, are the topic's bindings too.
            "(principal=User:syncer, host=*, operation=DESCRIBE, permissionType=ALLOW)",
            "(principal=User:syncer, host=*, operation=DESCRIBE_CONFIGS, permissionType=ALLOW)",
            "(principal=User:syncer, host=*, operation=READ, permissionType=ALLOW)",
        ],
        "{on_target:?}"
    );
    for name in [format!("here.{p}-"), format!("here.{secret}")] {
        assert!(of(&name).is_empty(), "{name} on the target: {on_target:?}");
    }
    wait_for(REPORTED, "the flow running again", || flow_json(addr, flow)["state"] == "running");

    // bob reads the remote topic. The syncs since (one a second, while the listing and the reads took
    // seconds) created nothing again.
    assert_eq!(bob_reads(dst, &remote).len(), 20, "bob on the target");
    assert_eq!(synced(), first, "bindings created twice");
    assert_eq!(log_lines(&ferry.log(), "synced topic ACL bindings", ""), 1, "{}", ferry.log());
    ferry.terminate(Duration::from_secs(30));
    let (code, table, err) = check(&dir, deployment, &[]);
    assert_eq!(code, 0, "ferry check once granted:\n{table}{err}");
}

/// Lines of the broker log of `cluster` from byte `from` on in which its authorizer denied alice.
fn denials_of_alice(cluster: &Cluster, from: usize) -> Vec<String> {
    let log = cluster.log();
    log.get(from..)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("User:alice is Denied"))
        .map(str::to_string)
        .collect()
}

/// A read-only source (offset syncs on the target, no reverse heartbeats), read rights only: copied,
/// checkpointed, group offsets synced; its topics unchanged, no denial of the principal in its log (a
/// refused attempt first proves denials are logged), every actor running; `validate` and `check` agree.
#[test]
fn a_read_only_source_is_copied_and_checkpointed_without_a_single_write_to_it() {
    let bed = bed();
    let _turn = take_turn("read-only source");
    let (src, dst) = (&bed.source, &bed.target);
    let (deployment, (source, target)) = ("acl-ro", ("ro-src", "ro-dst"));
    let flow = format!("{source}->{target}");
    let p = unique("acl-ro");
    let (topic, group) = (format!("{p}-data"), format!("{p}-g"));
    let remote = format!("{source}.{topic}");
    create_topic(&src.bootstrap, &topic, 2, &[]);
    produce(&src.bootstrap, &topic, &records(&topic, 20));
    let ends = end_offsets(&src.bootstrap, &topic);
    commit_group_offsets(&src.bootstrap, &group, &[(&topic, 0, ends[0]), (&topic, 1, ends[1])]);
    std::thread::scope(|s| {
        s.spawn(|| {
            src.allow("alice", "topic", &p, "prefixed", &["Read", "Describe", "DescribeConfigs"]);
            src.allow("alice", "group", &format!("{deployment}."), "prefixed", &["Read"]);
            src.allow("alice", "group", &group, "literal", &["Describe"]);
            // librdkafka looks up the coordinator of the never-joined group of ferry's assign-only
            // consumers (`ferry-...-unused`): harmless if refused, but each refusal is a denial logged.
            src.allow("alice", "group", "ferry-", "prefixed", &["Describe"]);
        });
        s.spawn(|| {
            let prefix = format!("{deployment}.");
            dst.allow_all(
                "alice",
                &[("topic", &format!("{source}.")), ("group", &prefix), ("transactional-id", &prefix)],
                "prefixed",
                &["All"],
            );
            dst.allow_all(
                "alice",
                &[
                    ("group", &group),
                    ("topic", "heartbeats"),
                    ("topic", &format!("mm2-offsets.{source}.internal")),
                    ("topic", &format!("mm2-offset-syncs.{source}.internal")),
                    ("topic", &format!("ferry.leases.{source}.{target}")),
                    ("topic", "ferry.control.internal"),
                ],
                "literal",
                &["All"],
            );
        });
    });
    let dir = flows_dir(bed, (source, target), &[&topic], &[&group]);
    let mut flows = std::fs::OpenOptions::new().append(true).open(dir.path().join("flows.toml")).expect("flows.toml");
    std::io::Write::write_all(
        &mut flows,
        b"offset_syncs_topic_location = \"target\"\nemit_reverse_heartbeats_enabled = false\n\
          sync_group_offsets_enabled = true\nsync_group_offsets_interval_seconds = 1\n",
    )
    .expect("append to flows.toml");

    // What the operator is told before running it.
    let (code, out, err) = support::ferry_cli(&["validate", "--flows", dir.path().to_str().expect("path")]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("writes nothing to source `{source}`")), "{out}");
    let (code, doc, err) = check(&dir, deployment, &["-o", "json"]);
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap_or_else(|e| panic!("not JSON ({e}): {doc}{err}"));
    assert_eq!(code, 0, "ferry check with read-only rights on the source: {doc}");
    for r in doc["flows"][0]["rights"].as_array().cloned().unwrap_or_default() {
        if r["cluster"] == source {
            let rights: Vec<&str> = r["rights"].as_array().into_iter().flatten().filter_map(|v| v.as_str()).collect();
            assert!(rights.iter().all(|r| ["Read", "Describe", "DescribeConfigs"].contains(r)), "{r}");
            assert_ne!(r["used_by"].as_str().map(|u| u.contains("heartbeat emitter")), Some(true), "{r}");
        }
    }
    for t in doc["flows"][0]["internal_topics"].as_array().cloned().unwrap_or_default() {
        assert_ne!(t["cluster"], source, "no internal topic on the source: {t}");
    }

    // The authorizer's denials reach the broker log: a refused creation as alice shows as one.
    let before = src.log().len();
    let denied = format!("{p}-denied");
    eprintln!("[read-only source] creating {denied} as alice, which the source must refuse:");
    let refused = support::as_client(&src.bootstrap, &src.client_props("alice"), || {
        std::panic::catch_unwind(|| create_topic(&src.bootstrap, &denied, 1, &[])).is_err()
    });
    assert!(refused, "alice may not create {denied}");
    wait_for(REPORTED, "the refused creation in the source broker's log", || !denials_of_alice(src, before).is_empty());
    let source_topics = support::list_topics(&src.bootstrap);
    let from = src.log().len();

    let mut ferry = start_ferry(&dir, deployment);
    let addr = ferry.listen_addr();
    wait_for(ARRIVAL, &format!("{remote} complete on the target"), || {
        assert_alive(&mut ferry);
        total(&dst.bootstrap, &remote) >= 20
    });
    let checkpoints_topic = format!("{source}.checkpoints.internal");
    wait_for(ARRIVAL, &format!("checkpoints of {group} at the topic's end"), || {
        assert_alive(&mut ferry);
        let cps = checkpoints_of(dst, &checkpoints_topic, &group);
        (0..2).all(|part| cps.iter().any(|c| c.partition == part && c.upstream_offset == ends[part as usize]))
    });
    let copies = end_offsets(&dst.bootstrap, &remote);
    wait_for(ARRIVAL, &format!("{group}'s offsets synced to the target"), || {
        assert_alive(&mut ferry);
        support::group_offsets(&dst.bootstrap, &group, &[(&remote, 0), (&remote, 1)])
            == [Some(copies[0]), Some(copies[1])]
    });
    support::scenario::wait_healthy(&mut ferry, &flow, REPORTED);
    let shown = flow_json(addr, &flow);
    assert_eq!(shown["state"], "running", "{shown}");

    // Nothing was written to the source, nor attempted.
    assert_eq!(support::list_topics(&src.bootstrap), source_topics, "the source's topics changed");
    if source_topics.iter().any(|t| t == "heartbeats") {
        let reverse = consume_all(&src.bootstrap, "heartbeats", READ)
            .iter()
            .filter_map(|r| {
                ferry::mm2::records::Heartbeat::decode(r.key.as_deref().unwrap_or_default(), r.value.as_deref()).ok()
            })
            .filter(|h| h.source_alias == target && h.target_alias == source)
            .count();
        assert_eq!(reverse, 0, "reverse heartbeats written to the source");
    }
    let denials = denials_of_alice(src, from);
    assert!(denials.is_empty(), "the source refused ferry's principal:\n{}", denials.join("\n"));
    ferry.terminate(Duration::from_secs(30));
}

/// An exactly-once flow whose principal may not use the copier's transactional id: the copier's error
/// names the id and the right, nothing reaches the remote topic (not even uncommitted), and granting
/// the prefixed id (`<deployment>.<flow>.copier.`, every node's) copies every record once.
#[test]
fn an_exactly_once_copier_without_its_transactional_id_is_named_and_copies_nothing() {
    let bed = bed();
    let _turn = take_turn("exactly-once rights");
    let (src, dst) = (&bed.source, &bed.target);
    // Aliases of its own: the internal topics it grants are not those the other tests keep refused.
    let (deployment, flow) = ("acl-e", "esouth->enorth");
    let copier_txn = format!("{deployment}.{flow}.copier.");
    let topic = unique("acl-eos");
    let remote = format!("esouth.{topic}");
    create_topic(&src.bootstrap, &topic, 2, &[]);
    produce(&src.bootstrap, &topic, &records(&topic, 30));
    std::thread::scope(|s| {
        s.spawn(|| {
            src.allow_all(
                "alice",
                &[("topic", "heartbeats"), ("topic", &topic), ("topic", "mm2-offset-syncs.enorth.internal")],
                "literal",
                &["All"],
            );
            src.allow("alice", "group", &format!("{deployment}.{flow}"), "literal", &["Read"]);
        });
        s.spawn(|| {
            dst.allow_all(
                "alice",
                &[
                    ("topic", &remote),
                    ("topic", "esouth.heartbeats"),
                    ("topic", "heartbeats"),
                    ("topic", "mm2-offsets.esouth.internal"),
                    ("topic", "esouth.checkpoints.internal"),
                    ("topic", "ferry.leases.esouth.enorth"),
                    ("topic", "ferry.control.internal"),
                ],
                "literal",
                &["All"],
            );
            dst.allow("alice", "group", &format!("{deployment}.leaders"), "literal", &["Read"]);
            dst.allow(
                "alice",
                "transactional-id",
                &format!("{deployment}.{flow}.checkpoints"),
                "literal",
                &["Write", "Describe"],
            );
        });
    });
    let dir = flows_dir_as(bed, "alice", ("esouth", "enorth"), &[&topic], &[], "delivery = \"exactly_once\"\n");
    let mut ferry = Ferry::start_env(dir.path(), &[], &[("FERRY_DEPLOYMENT", deployment), ("FERRY_NODE_ID", "n1")]);
    ferry.wait_log("serving /health", Duration::from_secs(30));
    let addr = ferry.listen_addr();
    let copier = wait_actor_error(&mut ferry, flow, "copier", &[&format!("{copier_txn}n1"), "Write"]);
    eprintln!("[exactly-once rights] copier: {copier}");
    assert_ne!(flow_json(addr, flow)["state"], "running");
    assert_eq!(flow_json(addr, flow)["delivery"], "exactly_once");
    let uncommitted = support::consume_all_as(&dst.bootstrap, &remote, READ, "read_uncommitted");
    assert!(uncommitted.is_empty(), "nothing written without the transactional id, not even uncommitted");
    dst.allow("alice", "transactional-id", &copier_txn, "prefixed", &["Write", "Describe"]);
    wait_for(ARRIVAL, &format!("{remote} complete after the transactional id's grant"), || {
        assert_alive(&mut ferry);
        total(&dst.bootstrap, &remote) >= 30 && consume_all(&dst.bootstrap, &remote, READ).len() == 30
    });
    ferry.terminate(Duration::from_secs(30));
    assert_eq!(consume_all(&dst.bootstrap, &remote, READ).len(), 30, "every record once");
}
