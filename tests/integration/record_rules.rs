//! Record filters and header rules (`[[flows.filter]]`, `[flows.headers]`) end to end:
//!
//! - every rule kind drops exactly the records it names, counted per rule in `ferry_records_filtered_total`
//!   and `/flows`; no filtered record reaches the target;
//! - headers are dropped, renamed and inserted (with lineage placeholders) as configured;
//! - a consumer group fails over from the filtered topic to its copy reading nothing twice and missing
//!   nothing that was copied, wherever it stands: on a filtered record, after one, at the end of a
//!   partition that ends with one; in at-least-once and exactly-once flows.

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use support::observe::{self, metric_sum};
use support::scenario::*;
use support::{Rec, commit_group_offsets, consume_all, create_topic, produce, shared_pair, unique};

/// A record's key and value.
type KeyValue = (Option<Vec<u8>>, Option<Vec<u8>>);

/// Records per partition; record 120 (the last) is filtered, so a partition ends on a gap.
const N: i64 = 121;

const RULES: &str = r#"
[[flows.filter]]
name = "debug"
header = "x-debug"

[[flows.filter]]
name = "tmp"
key = "^tmp-"

[[flows.filter]]
name = "tombstones"
tombstone = true

[[flows.filter]]
name = "old"
older_than_seconds = 86400

[[flows.filter]]
name = "test-env"
header = "env"
header_value = "^test$"

[flows.headers]
drop = ["secret"]
rename = { trace = "x-trace" }
insert = { "x-lineage" = "{source}/{topic}/{partition}/{offset}", "x-copied-by" = "ferry" }
"#;

/// The rule that drops record `i` (the first that matches, in the order of `RULES`), if one does.
fn dropped_by(i: i64) -> Option<&'static str> {
    if i % 5 == 0 {
        Some("debug")
    } else if i % 7 == 3 {
        Some("tmp")
    } else if i % 11 == 4 {
        Some("tombstones")
    } else if i % 13 == 6 {
        Some("old")
    } else if i % 4 == 1 {
        Some("test-env")
    } else {
        None
    }
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_millis() as i64
}

/// Record `i` of `partition`, shaped so that `dropped_by` says what the rules do with it.
fn record(partition: i32, i: i64, now: i64) -> Rec {
    let old = i % 13 == 6;
    let ts = if old { now - 2 * 86_400_000 } else { now };
    let key = if i % 7 == 3 { format!("tmp-{i}") } else { format!("k-{i}") };
    let mut r = Rec::new(partition, format!("v-{partition}-{i}").as_bytes(), ts).key(key.as_bytes());
    if i % 11 == 4 {
        r.value = None;
    }
    if i % 5 == 0 {
        r = r.header("x-debug", None);
    }
    let env: &[u8] = if i % 4 == 1 { b"test" } else { b"prod" };
    r.header("env", Some(env)).header("trace", Some(format!("t-{i}").as_bytes())).header("secret", Some(b"s3cret"))
}

/// What the copy of source record `r` (at `offset` of `topic`) must carry.
fn expected_headers(topic: &str, r: &Rec, offset: i64) -> Vec<(String, Option<Vec<u8>>)> {
    let mut out: Vec<(String, Option<Vec<u8>>)> = r
        .headers
        .iter()
        .filter(|(k, _)| k != "secret")
        .map(|(k, v)| (if k == "trace" { "x-trace".to_string() } else { k.clone() }, v.clone()))
        .collect();
    // Inserted after the others, in name order.
    out.push(("x-copied-by".into(), Some(b"ferry".to_vec())));
    out.push(("x-lineage".into(), Some(format!("east/{topic}/{}/{offset}", r.partition).into_bytes())));
    out
}

/// Runs the scenario on a flow with `extra` keys besides the rules.
fn filtered_topic_fails_over_exactly(tag: &str, extra: &str) {
    let (east, west) = shared_pair();
    let topic = unique(tag);
    let remote = format!("east.{topic}");
    let (g1, g2) = (unique(&format!("{tag}-g1")), unique(&format!("{tag}-g2")));
    create_topic(&east.bootstrap, &topic, 2, &[]);
    let now = now_ms();
    let source: Vec<Rec> = (0..2).flat_map(|p| (0..N).map(move |i| record(p, i, now))).collect();
    produce(&east.bootstrap, &topic, &source);

    let groups = format!(
        "groups = [\"{g1}\", \"{g2}\"]\nemit_checkpoints_interval_seconds = 1\nrefresh_groups_interval_seconds = 1\n{extra}"
    );
    let dir = pair_dir(east, west, &format!("{}{RULES}", flow("east", "west", &[&topic], &groups)));
    let mut ferry = support::Ferry::start(dir.path(), &[]);

    // What must arrive: every record no rule drops, in order, nothing else.
    let kept = |p: i32| -> Vec<KeyValue> {
        source
            .iter()
            .enumerate()
            .filter(|(_, r)| r.partition == p)
            .map(|(n, r)| (n as i64 - i64::from(p) * N, r))
            .filter(|(i, _)| dropped_by(*i).is_none())
            .map(|(_, r)| (r.key.clone(), r.value.clone()))
            .collect()
    };
    let values: Vec<Vec<u8>> = (0..2).flat_map(kept).filter_map(|(_, v)| v).collect();
    wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &values);
    let target = by_position(consume_all(&west.bootstrap, &remote, READ));
    for p in 0..2 {
        let got: Vec<_> =
            target.iter().filter(|r| r.partition == p).map(|r| (r.key.clone(), r.value.clone())).collect();
        assert_eq!(got, kept(p), "partition {p}: exactly the records no rule drops, in order");
    }

    // Headers: `secret` dropped, `trace` renamed, lineage inserted naming the source record.
    for r in &target {
        let i: i64 = String::from_utf8_lossy(&r.key.clone().unwrap_or_default())[2..].parse().expect("k-<i>");
        let src = &source[(i64::from(r.partition) * N + i) as usize];
        assert_eq!(r.headers, expected_headers(&topic, src, i), "headers of the copy of {}-{i}", r.partition);
    }

    // Counted per rule, in /metrics and /flows.
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    for i in 0..N {
        if let Some(rule) = dropped_by(i) {
            *counts.entry(rule).or_default() += 2;
        }
    }
    let text = observe::metrics(ferry.listen_addr());
    for (rule, n) in &counts {
        let got =
            metric_sum(&text, "ferry_records_filtered_total", &[("flow", FLOW), ("topic", &topic), ("rule", rule)]);
        assert_eq!(got, *n as f64, "ferry_records_filtered_total{{rule={rule}}}");
    }
    let total: u64 = counts.values().sum();
    wait_showing(Duration::from_secs(10), "/flows records_filtered", || {
        let f = observe::flows(ferry.listen_addr())["flows"][FLOW]["records_filtered"].clone();
        (f["total"].as_u64() == Some(total) && f["by_rule"]["debug"].as_u64() == Some(counts["debug"]), f)
    });

    // The filtered records count as copied: the lag reaches 0 although each partition ends with one.
    wait_showing(Duration::from_secs(60), "the source lag at 0", || {
        let text = observe::metrics(ferry.listen_addr());
        let measured = text.contains(&format!("ferry_source_lag_records{{flow=\"{FLOW}\",topic=\"{topic}\"}}"));
        let lag = metric_sum(&text, "ferry_source_lag_records", &[("flow", FLOW), ("topic", &topic)]);
        (measured && lag == 0.0, lag)
    });

    // Fail over: groups standing on a filtered record (3: tmp), after one (61: 60 is debug), in a run
    // of kept records (37) and at the end of a partition that ends with a filtered record (121).
    let at: [(&str, i32, i64); 4] = [(&g1, 0, 3), (&g1, 1, N), (&g2, 0, 61), (&g2, 1, 37)];
    for (g, p, o) in at {
        commit_group_offsets(&east.bootstrap, g, &[(topic.as_str(), p, o)]);
    }
    for (g, p, o) in at {
        let (_, downstream) = wait_showing(ARRIVAL, &format!("checkpoint of {g} at {p}:{o}"), || {
            let cp = newest_checkpoints(west, "east", g).get(&(remote.clone(), p)).copied();
            (cp.is_some_and(|(up, _)| up == o), cp)
        })
        .expect("a checkpoint");
        let resumed: Vec<_> = target
            .iter()
            .filter(|r| r.partition == p && r.offset >= downstream)
            .map(|r| (r.key.clone(), r.value.clone()))
            .collect();
        let remaining: Vec<_> = kept(p)
            .into_iter()
            .filter(|(k, _)| {
                let i: i64 = String::from_utf8_lossy(k.as_deref().unwrap_or_default())[2..].parse().expect("k-<i>");
                i >= o
            })
            .collect();
        assert_eq!(resumed, remaining, "{g} at {p}:{o} -> {downstream}: nothing re-read, nothing skipped");
    }
    assert_alive(&mut ferry);
    let status = ferry.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_filtered_topic_fails_over_rereading_nothing_and_skipping_nothing() {
    filtered_topic_fails_over_exactly("rules-alo", "");
}

#[test]
fn an_exactly_once_filtered_topic_fails_over_rereading_nothing_and_skipping_nothing() {
    filtered_topic_fails_over_exactly("rules-eos", "delivery = \"exactly_once\"\n");
}
