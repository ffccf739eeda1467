//! Protected remote topics and foreign records, on the ACL test bed of `acls.rs` (SASL_SSL clusters with
//! StandardAuthorizer; ferry runs as `alice`, the foreign producer is `bob`, granted Write on the remote
//! topic by an ALLOW binding as an operator would):
//!
//! - `protect_remote_topics = true`: ferry denies bob Write on the remote topic it creates (and only
//!   bob: ferry keeps copying), so bob's records are refused and nothing foreign reaches the topic.
//! - An ALLOW Write for `User:*` cannot be countered (a DENY for it would deny ferry): reported per
//!   topic, nothing denied, the flow copies on.
//! - Without protection bob's records land, and ferry counts exactly them as foreign, per topic
//!   (`ferry_remote_foreign_records_total`, `/flows`, a warning naming the remote topic), never its own
//!   copies and never twice.
//! - `ferry promote --topics`: bob writes the promoted topic, whose new source records are no longer
//!   copied (while another topic of the flow still is), also after the node restarts, and `/flows`
//!   shows the promotion; with two nodes of a deployment, neither copies it any more.
//!
//! The tests take turns with `acls.rs`'s on the same two brokers.

use std::sync::Mutex;
use std::time::Duration;

use rdkafka::ClientContext;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};

use crate::acls::{ARRIVAL, Bed, REPORTED, bed, flow_json, flows_dir_as, records, start_ferry};
use crate::support;
use support::observe::{self, metric_sum, metrics};
use support::scenario;
use support::scenario::{assert_alive, total};
use support::turn::take_turn;
use support::{Cluster, create_topic, produce, unique, wait_for};

/// The flow's aliases: remote topics are `up.<topic>`.
const SOURCE: &str = "up";
const TARGET: &str = "dr";
const FLOW: &str = "up->dr";

/// Every right the flow needs as alice, on both clusters, for source topic `topic`.
fn grant_flow(bed: &Bed, deployment: &str, topic: &str) {
    let (src, dst) = (&bed.source, &bed.target);
    let prefix = format!("{deployment}.");
    std::thread::scope(|s| {
        s.spawn(|| {
            let syncs = format!("mm2-offset-syncs.{TARGET}.internal");
            src.allow_all("alice", &[("topic", "heartbeats"), ("topic", &syncs)], "literal", &["All"]);
            src.allow("alice", "group", &prefix, "prefixed", &["All"]);
            src.allow("alice", "topic", topic, "literal", &["Read", "Describe", "DescribeConfigs"]);
        });
        s.spawn(|| {
            let remotes = format!("{SOURCE}.");
            dst.allow_all(
                "alice",
                &[("topic", &remotes), ("group", &prefix), ("transactional-id", &prefix)],
                "prefixed",
                &["All"],
            );
            let progress = format!("mm2-offsets.{SOURCE}.internal");
            dst.allow_all(
                "alice",
                &[
                    ("topic", "heartbeats"),
                    ("topic", &progress),
                    ("topic", &format!("ferry.leases.{SOURCE}.{TARGET}")),
                    ("topic", "ferry.control.internal"),
                ],
                "literal",
                &["All"],
            );
        });
    });
}

/// A new source topic `<prefix>-...` of 2 partitions holding 20 records, and every right the flow needs
/// for it: the topic and its remote topic's name.
fn source_topic(bed: &Bed, deployment: &str, prefix: &str) -> (String, String) {
    let topic = unique(prefix);
    create_topic(&bed.source.bootstrap, &topic, 2, &[]);
    produce(&bed.source.bootstrap, &topic, &records(&topic, 20));
    grant_flow(bed, deployment, &topic);
    let remote = format!("{SOURCE}.{topic}");
    (topic, remote)
}

/// ferry as alice on a flow of `topics` with `protect_remote_topics = true` (and Alter on the target
/// cluster to make its bindings).
fn start_protected(bed: &Bed, deployment: &str, topics: &[&str]) -> (tempfile::TempDir, support::Ferry) {
    bed.target.allow("alice", "cluster", "", "literal", &["Alter"]);
    let dir = flows_dir_as(bed, "alice", (SOURCE, TARGET), topics, &[], "protect_remote_topics = true\n");
    let ferry = start_ferry(&dir, deployment);
    (dir, ferry)
}

/// What each delivery of a producer reported.
#[derive(Default)]
struct Outcomes(Mutex<Vec<Result<(), String>>>);

impl ClientContext for Outcomes {}

impl ProducerContext for Outcomes {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let outcome = result.as_ref().map(|_| ()).map_err(|(e, _)| e.to_string());
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(outcome);
    }
}

/// `user` produces `n` records to partition 0 of `topic` on `cluster`: each delivery's outcome.
fn produce_as(cluster: &Cluster, user: &str, topic: &str, n: usize) -> Vec<Result<(), String>> {
    let producer: ThreadedProducer<Outcomes> =
        support::client::client_config(&cluster.bootstrap, &cluster.client_props(user))
            .set("acks", "all")
            .set("enable.idempotence", "false")
            .set("message.timeout.ms", "15000")
            .create_with_context(Outcomes::default())
            .unwrap_or_else(|e| panic!("producer as {user}: {e}"));
    for i in 0..n {
        let value = format!("{user}-{i}");
        let record = BaseRecord::to(topic).partition(0).key("foreign").payload(value.as_bytes());
        producer.send(record).unwrap_or_else(|(e, _)| panic!("queue a record as {user}: {e}"));
    }
    producer.flush(Duration::from_secs(30)).unwrap_or_else(|e| panic!("flush as {user}: {e}"));
    std::mem::take(&mut *producer.context().0.lock().unwrap_or_else(|p| p.into_inner()))
}

/// The DENY bindings on the literal topic `topic` of `cluster`, as `kafka-acls --list` prints them.
fn denials_on(cluster: &Cluster, topic: &str) -> Vec<String> {
    cluster
        .acls()
        .into_iter()
        .filter(|(r, e)| r.contains(&format!("name={topic},")) && e.contains("permissionType=DENY"))
        .map(|(r, e)| {
            assert!(r.contains("resourceType=TOPIC") && r.contains("patternType=LITERAL"), "{r}");
            e
        })
        .collect()
}

/// `ferry_remote_foreign_records_total` of `topic` on the node at `addr`.
fn foreign(addr: std::net::SocketAddr, topic: &str) -> f64 {
    metric_sum(&metrics(addr), "ferry_remote_foreign_records_total", &[("flow", FLOW), ("topic", topic)])
}

/// A protected remote topic: ferry denies bob (granted Write by name) and nobody else, bob's records are
/// refused while ferry keeps copying, and nothing on the topic counts as foreign.
#[test]
fn a_foreign_producer_is_refused_while_the_remote_topic_is_protected() {
    let bed = bed();
    let _turn = take_turn("protected remote topic");
    let (src, dst) = (&bed.source, &bed.target);
    let deployment = "acl-protect";
    let (topic, remote) = source_topic(bed, deployment, "protected");
    dst.allow("bob", "topic", &remote, "literal", &["Write", "Describe"]);
    let (_dir, mut ferry) = start_protected(bed, deployment, &[&topic]);
    let addr = ferry.listen_addr();
    wait_for(ARRIVAL, &format!("{remote} complete on the target"), || {
        assert_alive(&mut ferry);
        total(&dst.bootstrap, &remote) >= 20
    });
    wait_for(REPORTED, "bob denied Write on the remote topic", || {
        assert_alive(&mut ferry);
        ferry.log().lines().any(|l| l.contains("denied Write on the remote topic") && l.contains(&remote))
    });
    let denials = denials_on(dst, &remote);
    eprintln!("[protected] DENY bindings on {remote}: {denials:?}");
    assert_eq!(denials, ["(principal=User:bob, host=*, operation=WRITE, permissionType=DENY)"]);

    // bob is refused, as the broker says it.
    let outcomes = produce_as(dst, "bob", &remote, 3);
    eprintln!("[protected] bob's deliveries: {outcomes:?}");
    assert_eq!(outcomes.len(), 3, "{outcomes:?}");
    assert!(
        outcomes.iter().all(|o| o.as_ref().is_err_and(|e| e.contains("authorization"))),
        "bob wrote a protected remote topic: {outcomes:?}"
    );
    // ferry is not: new source records are copied.
    produce(&src.bootstrap, &topic, &records(&format!("{topic}-more"), 10));
    wait_for(ARRIVAL, "the new records copied", || {
        assert_alive(&mut ferry);
        total(&dst.bootstrap, &remote) >= 30
    });
    assert_eq!(total(&dst.bootstrap, &remote), 30, "only ferry's records on {remote}");
    let shown = flow_json(addr, FLOW);
    assert_eq!(shown["state"], "running", "{shown}");
    assert!(shown["topic_errors"].as_object().is_none_or(|e| e.is_empty()), "{shown}");
    assert_eq!(foreign(addr, &topic), 0.0, "ferry's own records counted as foreign");
    ferry.terminate(Duration::from_secs(30));
}

/// An operator's ALLOW Write for `User:*` on a remote topic cannot be countered without denying ferry
/// too: the topic is reported (the binding named, what to do instead), nothing is denied, and the flow
/// copies on.
#[test]
fn a_wildcard_writer_is_reported_not_papered_over() {
    let bed = bed();
    let _turn = take_turn("wildcard writer");
    let dst = &bed.target;
    let deployment = "acl-wildcard";
    let (topic, remote) = source_topic(bed, deployment, "wildcard");
    dst.allow("*", "topic", &remote, "literal", &["Write"]);
    let (_dir, mut ferry) = start_protected(bed, deployment, &[&topic]);
    let addr = ferry.listen_addr();
    let mut reason = None;
    wait_for(REPORTED, "the wildcard writer reported for the topic", || {
        assert_alive(&mut ferry);
        reason = flow_json(addr, FLOW)["topic_errors"][&topic]["reason"].as_str().map(str::to_string);
        reason.is_some()
    });
    let reason = reason.unwrap_or_default();
    eprintln!("[wildcard] {topic}: {reason}");
    assert!(
        reason.contains("User:*") && reason.contains(&remote) && reason.contains("grant Write by name"),
        "{reason}"
    );
    wait_for(ARRIVAL, &format!("{remote} complete on the target"), || {
        assert_alive(&mut ferry);
        total(&dst.bootstrap, &remote) >= 20
    });
    let denials = denials_on(dst, &remote);
    assert!(denials.is_empty(), "{denials:?}");
    ferry.terminate(Duration::from_secs(30));
}

/// Without protection bob's records land on the remote topic; ferry counts them, per topic, once, and
/// never its own copies (before, between and after bob's records).
#[test]
fn a_foreign_producers_records_are_counted_per_topic_without_protection() {
    let bed = bed();
    let _turn = take_turn("foreign records");
    let (src, dst) = (&bed.source, &bed.target);
    let deployment = "acl-foreign";
    let (topic, remote) = source_topic(bed, deployment, "unprotected");
    dst.allow("bob", "topic", &remote, "literal", &["Write", "Describe"]);

    let dir = flows_dir_as(bed, "alice", (SOURCE, TARGET), &[&topic], &[], "");
    let mut ferry = start_ferry(&dir, deployment);
    let addr = ferry.listen_addr();
    wait_for(ARRIVAL, &format!("{remote} complete on the target"), || {
        assert_alive(&mut ferry);
        total(&dst.bootstrap, &remote) >= 20
    });

    let outcomes = produce_as(dst, "bob", &remote, 5);
    assert!(outcomes.iter().all(Result::is_ok) && outcomes.len() == 5, "bob's deliveries: {outcomes:?}");
    wait_for(REPORTED, "bob's 5 records counted as foreign", || {
        assert_alive(&mut ferry);
        foreign(addr, &topic) >= 5.0
    });
    assert_eq!(foreign(addr, &topic), 5.0);
    // `/flows` takes its figures from the metrics every second.
    let mut shown = serde_json::Value::Null;
    wait_for(REPORTED, "bob's records in /flows", || {
        shown = flow_json(addr, FLOW);
        !shown["foreign_records"][&topic].is_null()
    });
    eprintln!("[foreign] /flows foreign_records: {}", shown["foreign_records"]);
    assert_eq!(shown["foreign_records"][&topic], 5, "{shown}");
    let warned: Vec<String> = ferry
        .log()
        .lines()
        .filter(|l| l.contains("did not write") && l.contains(&remote))
        .map(str::to_string)
        .collect();
    assert!(!warned.is_empty() && warned.iter().all(|l| l.contains("partition=0")), "{warned:?}");

    // ferry copies on; its copies do not count, bob's next two do, and the first five not again.
    produce(&src.bootstrap, &topic, &records(&format!("{topic}-more"), 20));
    wait_for(ARRIVAL, "the new records copied", || {
        assert_alive(&mut ferry);
        total(&dst.bootstrap, &remote) >= 45
    });
    let outcomes = produce_as(dst, "bob", &remote, 2);
    assert!(outcomes.iter().all(Result::is_ok), "bob's deliveries: {outcomes:?}");
    wait_for(REPORTED, "bob's 2 more records counted", || {
        assert_alive(&mut ferry);
        foreign(addr, &topic) >= 7.0
    });
    assert_eq!(foreign(addr, &topic), 7.0, "foreign records counted twice, or ferry's own counted");
    assert_eq!(total(&dst.bootstrap, &remote), 47);
    ferry.terminate(Duration::from_secs(30));
}

/// `ferry promote --flows DIR --flow up->dr --deployment D ARGS`: exit code, stdout, stderr.
fn promote(dir: &tempfile::TempDir, deployment: &str, args: &[&str]) -> (i32, String, String) {
    let flows = dir.path().to_string_lossy().to_string();
    let base = ["promote", "--flows", &flows, "--flow", FLOW, "--deployment", deployment];
    support::ferry_cli(&[&base[..], args].concat())
}

/// A protected flow of two topics; `ferry promote --topics` one of them: ferry lifts bob's DENY (and
/// the leader does not make it again), bob writes the promoted topic, and its new source records are no
/// longer copied while the other topic's are.
#[test]
fn after_promote_the_foreign_producer_writes_and_the_flow_no_longer_copies_the_topic() {
    let bed = bed();
    let _turn = take_turn("promote");
    let (src, dst) = (&bed.source, &bed.target);
    let deployment = "acl-promote";
    let p = unique("promo");
    let (promoted, kept) = (format!("{p}-promoted"), format!("{p}-kept"));
    let (remote, kept_remote) = (format!("{SOURCE}.{promoted}"), format!("{SOURCE}.{kept}"));
    for t in [&promoted, &kept] {
        create_topic(&src.bootstrap, t, 2, &[]);
        produce(&src.bootstrap, t, &records(t, 20));
        grant_flow(bed, deployment, t);
    }
    dst.allow("bob", "topic", &remote, "literal", &["Write", "Describe"]);
    let (dir, mut ferry) = start_protected(bed, deployment, &[&promoted, &kept]);
    let addr = ferry.listen_addr();
    for r in [&remote, &kept_remote] {
        wait_for(ARRIVAL, &format!("{r} complete on the target"), || {
            assert_alive(&mut ferry);
            total(&dst.bootstrap, r) >= 20
        });
    }
    wait_for(REPORTED, "bob denied Write on the remote topic", || {
        ferry.log().lines().any(|l| l.contains("denied Write on the remote topic") && l.contains(&remote))
    });
    assert!(produce_as(dst, "bob", &remote, 1).iter().all(Result::is_err), "bob wrote before the promotion");

    let (code, out, err) = promote(&dir, deployment, &["--topics", &promoted]);
    eprintln!("[promote] ferry promote:\n{out}{err}");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("{promoted} -> {remote} (DENY Write lifted for: User:bob)")), "{out}");
    assert!(!out.contains(&kept), "only the matching topic is promoted: {out}");

    // Every node follows the control topic: /flows shows the promotion, the partitions leave the copier.
    wait_for(REPORTED, "the promotion in /flows and the copier", || {
        let shown = flow_json(addr, FLOW);
        let assigned = shown["assigned"].as_array().cloned().unwrap_or_default();
        !shown["promoted"][&promoted].is_null()
            && !assigned.iter().any(|a| a.as_str().is_some_and(|a| a.starts_with(promoted.as_str())))
    });
    // bob writes now (the broker's ACL cache follows the deletion within moments).
    let mut outcomes = Vec::new();
    wait_for(REPORTED, "bob writing the promoted topic", || {
        outcomes = produce_as(dst, "bob", &remote, 3);
        outcomes.iter().all(Result::is_ok)
    });
    // New source records: the kept topic's are copied, the promoted topic's are not.
    produce(&src.bootstrap, &promoted, &records(&format!("{promoted}-late"), 10));
    produce(&src.bootstrap, &kept, &records(&format!("{kept}-late"), 10));
    wait_for(ARRIVAL, "the kept topic's new records copied", || {
        assert_alive(&mut ferry);
        total(&dst.bootstrap, &kept_remote) >= 30
    });
    // Refreshes ran meanwhile (every 2 s): bob's DENY has not come back either.
    assert_eq!(total(&dst.bootstrap, &remote), 23, "20 copied before the promotion, bob's 3 after, nothing since");
    let denials = denials_on(dst, &remote);
    assert!(denials.is_empty(), "ferry's DENY came back on the promoted topic: {denials:?}");
    ferry.terminate(Duration::from_secs(30));

    // The promotion outlives the node: a new one reads it from the control topic before it copies.
    produce(&src.bootstrap, &promoted, &records(&format!("{promoted}-after-restart"), 10));
    produce(&src.bootstrap, &kept, &records(&format!("{kept}-after-restart"), 10));
    let mut ferry = start_ferry(&dir, deployment);
    let addr = ferry.listen_addr();
    wait_for(ARRIVAL, "the kept topic's records copied after the restart", || {
        assert_alive(&mut ferry);
        total(&dst.bootstrap, &kept_remote) >= 40
    });
    let shown = flow_json(addr, FLOW);
    assert!(!shown["promoted"][&promoted].is_null(), "{shown}");
    assert_eq!(total(&dst.bootstrap, &remote), 23, "the promoted topic copied after a restart");
    // Nor did the restarted leader deny the applications' producers on it before it had read the promotion.
    assert!(denials_on(dst, &remote).is_empty(), "a DENY on the promoted topic after the restart");
    let denied_again = ferry
        .log()
        .lines()
        .any(|l| l.contains("denied Write on the remote topic") && l.contains(&format!("topic={remote}")));
    assert!(!denied_again, "the restarted node protected the promoted topic:\n{}", support::tail(&ferry.log(), 30));
    ferry.terminate(Duration::from_secs(30));
}

/// Two nodes of one deployment share a flow (plain clusters: no protection, so nothing to lift);
/// `ferry promote` reaches both through the control topic: neither copies the promoted topic any more
/// while both keep copying the other one.
#[test]
fn a_promotion_applies_on_every_node_of_the_deployment() {
    let (east, west) = support::shared_pair();
    let deployment = unique("promote-nodes");
    let p = unique("promo-nodes");
    let (promoted, kept) = (format!("{p}-promoted"), format!("{p}-kept"));
    let (remote, kept_remote) = (format!("east.{promoted}"), format!("east.{kept}"));
    for t in [&promoted, &kept] {
        create_topic(&east.bootstrap, t, 4, &[]);
        produce(&east.bootstrap, t, &records(t, 40));
    }
    let clusters = [("east", east.bootstrap.as_str()), ("west", west.bootstrap.as_str())];
    let extra = "refresh_topics_interval_seconds = 2\n";
    let dir = scenario::flows_dir(&clusters, &scenario::flow("east", "west", &[&promoted, &kept], extra));
    let start = |node: &str| {
        let env = [("FERRY_NODE_ID", node), ("FERRY_DEPLOYMENT", deployment.as_str())];
        let mut ferry = support::Ferry::start_env(dir.path(), &[], &env);
        ferry.wait_log("node started", Duration::from_secs(30));
        ferry
    };
    let mut nodes = [start("n1"), start("n2")];
    let flow = scenario::FLOW;
    // Both nodes copy a share of the flow's partitions.
    wait_for(ARRIVAL, "both topics complete, each node with a share", || {
        nodes.iter_mut().for_each(assert_alive);
        let shares: Vec<usize> =
            nodes.iter().map(|n| observe::assigned_partitions(n.listen_addr(), flow).len()).collect();
        shares.iter().all(|s| *s > 0)
            && total(&west.bootstrap, &remote) >= 40
            && total(&west.bootstrap, &kept_remote) >= 40
    });

    let flows = dir.path().to_string_lossy().to_string();
    let args = ["promote", "--flows", &flows, "--flow", flow, "--deployment", &deployment, "--topics", &promoted];
    let (code, out, err) = support::ferry_cli(&args);
    eprintln!("[promote nodes] ferry promote:\n{out}{err}");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("{promoted} -> {remote}")) && out.contains("no binding lifted"), "{out}");

    wait_for(REPORTED, "every node showing the promotion, none copying the topic", || {
        nodes.iter().all(|n| {
            let shown = flow_json(n.listen_addr(), flow);
            let copying = observe::assigned_partitions(n.listen_addr(), flow);
            !shown["promoted"][&promoted].is_null() && !copying.iter().any(|tp| tp.starts_with(promoted.as_str()))
        })
    });
    produce(&east.bootstrap, &promoted, &records(&format!("{promoted}-late"), 20));
    produce(&east.bootstrap, &kept, &records(&format!("{kept}-late"), 20));
    wait_for(ARRIVAL, "the kept topic's new records copied", || {
        nodes.iter_mut().for_each(assert_alive);
        total(&west.bootstrap, &kept_remote) >= 60
    });
    assert_eq!(total(&west.bootstrap, &remote), 40, "a node copied the promoted topic");
    for mut n in nodes {
        n.terminate(Duration::from_secs(30));
    }
}
