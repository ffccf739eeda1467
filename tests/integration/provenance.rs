//! The provenance header of identity replication, end to end: topologies where a record could come
//! back to a cluster it has been on or reach one by two routes (a full mesh of three clusters, a feeder
//! into an active-active pair), under load, hold every record exactly once on every cluster; and a topic
//! derived from replicated records by a pipeline that forwards their headers is copied like any local
//! topic, while the real loop candidates are skipped and counted.

use crate::support;

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use support::observe::metric_sum;
use support::scenario::*;
use support::{Cluster, Ferry, Rec, consume_all, create_topic, http_get, produce, shared_pair, unique, wait_for};

/// How long every cluster is loaded.
const LOAD: Duration = Duration::from_secs(20);
/// How long after the load stops every cluster must still hold each record exactly once (C6).
const SETTLE: Duration = Duration::from_secs(30);
/// The shortest watch for copies after every record arrived.
const WATCH_AFTER_ARRIVAL: Duration = Duration::from_secs(10);
const IDENTITY: &str = "replication_policy = \"identity\"\n";

/// A third cluster beside the shared east/west pair, shared by this binary's tests.
fn north() -> &'static Cluster {
    static NORTH: OnceLock<Cluster> = OnceLock::new();
    NORTH.get_or_init(|| Cluster::start("north"))
}

/// `a` (east), `b` (west) and `c` (north), each with `topic` (2 partitions).
fn three_clusters(topic: &str) -> [&'static Cluster; 3] {
    let (east, west) = shared_pair();
    let clusters = [east, west, north()];
    for c in clusters {
        create_topic(&c.bootstrap, topic, 2, &[]);
    }
    clusters
}

fn identity_flows(pairs: &[(&str, &str)], topic: &str) -> String {
    pairs.iter().map(|(s, t)| flow(s, t, &[topic], IDENTITY)).collect()
}

/// Loads `topic` on each cluster (prefixes `a`, `b`, `c`) for [`LOAD`] with ferry running `flows`; then
/// checks that each cluster ends with every record of the clusters in `reaching` (per cluster: those
/// whose records reach it) exactly once and still does [`SETTLE`] after the load stopped (a loop shows as
/// a count that keeps growing). Returns the node's `/metrics`.
fn every_record_once_everywhere(flows: &str, topic: &str, reaching: [&[&str]; 3]) -> String {
    let clusters = three_clusters(topic);
    let dir = flows_dir(
        &[("a", &clusters[0].bootstrap), ("b", &clusters[1].bootstrap), ("c", &clusters[2].bootstrap)],
        flows,
    );
    let mut ferry = Ferry::start(dir.path(), &[]);
    let prefixes = ["a", "b", "c"];
    let streams: Vec<Stream> = clusters
        .iter()
        .zip(prefixes)
        .map(|(c, p)| Stream::start(&c.bootstrap, topic, 2, p, 50, Duration::from_millis(50)))
        .collect();
    std::thread::sleep(LOAD); // the load's duration: the scenario itself
    let produced: Vec<usize> = streams.into_iter().map(Stream::finish).collect();
    let stopped = Instant::now();
    let expected: Vec<Vec<Vec<u8>>> = reaching
        .iter()
        .map(|origins| {
            prefixes
                .iter()
                .zip(&produced)
                .filter(|(p, _)| origins.contains(p))
                .flat_map(|(p, n)| values(p, 0..*n))
                .collect()
        })
        .collect();
    println!("{topic}: produced {produced:?} (a, b, c)");
    for (c, expected) in clusters.iter().zip(&expected) {
        wait_all_arrived(&mut ferry, &c.bootstrap, topic, expected);
    }
    println!("{topic}: every record where it belongs {:?} after the load stopped", stopped.elapsed());
    // Until SETTLE has passed, and for a while after everything arrived on a slow machine: no cluster
    // ever holds more than one copy of each record.
    let settled = (stopped + SETTLE).max(Instant::now() + WATCH_AFTER_ARRIVAL);
    let wanted: Vec<i64> = expected.iter().map(|e| e.len() as i64).collect();
    wait_for(SETTLE + ARRIVAL, "the settling time to pass with no record copied twice", || {
        assert_alive(&mut ferry);
        let totals: Vec<i64> = clusters.iter().map(|c| total(&c.bootstrap, topic)).collect();
        assert_eq!(
            totals,
            wanted,
            "{topic}: records on a, b, c {:?} after the load stopped (left), expected (right): records are copied again",
            stopped.elapsed()
        );
        Instant::now() >= settled
    });
    for ((c, name), expected) in clusters.iter().zip(prefixes).zip(&expected) {
        let counts = arrivals(&c.bootstrap, topic);
        let twice: Vec<String> = counts
            .iter()
            .filter(|(_, n)| **n > 1)
            .take(5)
            .map(|(v, n)| format!("{}x{n}", String::from_utf8_lossy(v)))
            .collect();
        assert_eq!(
            (counts.len(), duplicates(&counts)),
            (expected.len(), 0),
            "{name} holds its records once: {twice:?}"
        );
        assert!(expected.iter().all(|v| counts.contains_key(v)), "{name} holds every record it should");
    }
    let metrics = support::observe::metrics(ferry.listen_addr());
    assert!(ferry.terminate(Duration::from_secs(30)).success());
    metrics
}

fn skipped(metrics: &str, labels: &[(&str, &str)]) -> f64 {
    metric_sum(metrics, "ferry_records_skipped_total", labels)
}

#[test]
fn a_full_mesh_of_three_holds_every_record_once_on_every_cluster() {
    let topic = unique("mesh");
    let mesh = [("a", "b"), ("a", "c"), ("b", "a"), ("b", "c"), ("c", "a"), ("c", "b")];
    let all: &[&str] = &["a", "b", "c"];
    let metrics = every_record_once_everywhere(&identity_flows(&mesh, &topic), &topic, [all, all, all]);
    // Each flow reads the copies the other two flows into its source wrote: those from its target are
    // skipped as having been there, those from the third cluster as reaching the target directly.
    for (s, t) in mesh {
        let flow = format!("{s}->{t}");
        let labels = |reason| [("flow", flow.as_str()), ("topic", topic.as_str()), ("reason", reason)];
        let (back, other) = (skipped(&metrics, &labels("been_on_target")), skipped(&metrics, &labels("other_route")));
        println!("{flow}: skipped {back} been_on_target, {other} other_route");
        assert!(back > 0.0 && other > 0.0, "{flow} skipped copies of both kinds");
    }
}

#[test]
fn a_feeder_into_an_active_active_pair_holds_every_record_once_on_every_cluster() {
    let topic = unique("feeder");
    let flows = [("a", "b"), ("b", "c"), ("c", "b")];
    // Nothing flows into a: it keeps its own records only.
    let all: &[&str] = &["a", "b", "c"];
    let metrics = every_record_once_everywhere(&identity_flows(&flows, &topic), &topic, [&["a"], all, all]);
    // c->b reads a's and b's records on c (copied by b->c): never copied back.
    let back = skipped(&metrics, &[("flow", "c->b"), ("topic", &topic), ("reason", "been_on_target")]);
    println!("c->b skipped {back} records that came from b");
    assert!(back > 0.0);
    assert_eq!(skipped(&metrics, &[("reason", "other_route"), ("topic", &topic)]), 0.0, "one route only");
}

/// `GET /flows`'s entry for `flow`.
fn flow_json(ferry: &Ferry, flow: &str) -> serde_json::Value {
    let body = http_get(ferry.listen_addr(), "/flows");
    let all: serde_json::Value =
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("/flows is not JSON ({e}): {body}"));
    all["flows"][flow].clone()
}

#[test]
fn a_derived_topic_carrying_forwarded_headers_is_copied() {
    let (east, west) = shared_pair();
    let (orders, derived) = (unique("orders"), unique("derived"));
    for c in [east, west] {
        create_topic(&c.bootstrap, &orders, 2, &[]);
        create_topic(&c.bootstrap, &derived, 2, &[]);
    }
    // Active-active on both topics.
    let topics = [orders.as_str(), derived.as_str()];
    let flows = flow("east", "west", &topics, IDENTITY) + &flow("west", "east", &topics, IDENTITY);
    let dir = pair_dir(east, west, &flows);
    let mut ferry = Ferry::start(dir.path(), &[]);
    const N: usize = 200;
    produce(&east.bootstrap, &orders, &records("o", 0..N, 2));
    wait_all_arrived(&mut ferry, &west.bootstrap, &orders, &values("o", 0..N));

    // A pipeline on west (a Streams app forwarding its input's headers) derives a record from each copy:
    // a new value, every header of the input, ferry's included.
    let copies = consume_all(&west.bootstrap, &orders, READ);
    let forwarded: Vec<Rec> = copies
        .iter()
        .enumerate()
        .map(|(i, r)| {
            assert!(r.headers.iter().any(|(k, _)| k.starts_with("ferry.")), "a copy carries ferry's header: {r:?}");
            let mut rec = Rec::new(r.partition, format!("d{i}").as_bytes(), 2_000 + i as i64);
            rec.headers = r.headers.clone();
            rec
        })
        .collect();
    produce(&west.bootstrap, &derived, &forwarded);
    // The derived records are west's own: every one reaches east, once.
    let on_east = wait_all_arrived(&mut ferry, &east.bootstrap, &derived, &values("d", 0..N));
    assert_eq!((on_east.len(), duplicates(&on_east)), (N, 0));
    let copied = consume_all(&east.bootstrap, &derived, READ);
    for r in &copied {
        let path: Vec<&(String, Option<Vec<u8>>)> = r.headers.iter().filter(|(k, _)| k.starts_with("ferry.")).collect();
        assert_eq!(path.len(), 1, "one ferry header on a copy: {r:?}");
        let value = String::from_utf8_lossy(path[0].1.as_deref().unwrap_or_default()).to_string();
        assert_eq!(path[0].0, "ferry.path");
        let first_hop = value.split(';').nth(2).and_then(|hops| hops.split(',').next()).unwrap_or_default();
        assert!(first_hop.ends_with(":west"), "the derived record starts on west: {value}");
    }

    // Meanwhile west->east read east's copies on west and skipped each; nothing came back to either side.
    let addr = ferry.listen_addr();
    let mut seen = HashMap::new();
    wait_for(ARRIVAL, "west->east to count its skips of east's records", || {
        let m = support::observe::metrics(addr);
        let back = skipped(&m, &[("flow", "west->east"), ("topic", &orders), ("reason", "been_on_target")]);
        let derived_back = skipped(&m, &[("flow", "east->west"), ("topic", &derived), ("reason", "been_on_target")]);
        seen = HashMap::from([("orders", back), ("derived", derived_back)]);
        back >= N as f64 && derived_back >= N as f64
    });
    println!("skips: {seen:?}");
    // /flows takes its figures from the metrics once a second: polled, not read once.
    let mut status = serde_json::Value::Null;
    let shows = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for(Duration::from_secs(15), "/flows to show the skips", || {
            status = flow_json(&ferry, "west->east");
            let shown = &status["records_skipped"];
            shown["total"].as_u64().is_some_and(|n| n >= N as u64)
                && shown["by_reason"]["been_on_target"].as_u64().is_some_and(|n| n >= N as u64)
        })
    }));
    assert!(shows.is_ok(), "/flows shows the skips: {status}");
    for (c, topic, n) in [(east, &orders, N), (west, &orders, N), (east, &derived, N), (west, &derived, N)] {
        assert_eq!(total(&c.bootstrap, topic), n as i64, "{topic} on {} holds each record once", c.name);
    }
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}
