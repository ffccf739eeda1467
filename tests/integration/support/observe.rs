//! What an operator reads from a running node: `/health` as JSON, `/metrics` samples by name and labels,
//! and invariants over published checkpoints.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use ferry::mm2::records::Checkpoint;

use super::http_get;

/// One sample of the Prometheus text exposition.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Every sample in a Prometheus text exposition (comments skipped). Label values must not contain
/// escaped quotes (ferry's never do: flows, topics and actor names).
pub fn parse_metrics(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let (series, value) = match line.rsplit_once(' ') {
            Some(x) => x,
            None => continue,
        };
        let Ok(value) = value.parse::<f64>() else { continue };
        let (name, labels) = match series.split_once('{') {
            None => (series.to_string(), BTreeMap::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').unwrap_or(rest);
                let mut labels = BTreeMap::new();
                let mut rest = body;
                while let Some((k, after)) = rest.split_once("=\"") {
                    let Some((v, after)) = after.split_once('"') else { break };
                    labels.insert(k.trim_start_matches(',').trim().to_string(), v.to_string());
                    rest = after;
                }
                (name.to_string(), labels)
            }
        };
        out.push(Sample { name, labels, value });
    }
    out
}

/// The sum of every sample of `name` whose labels include all of `labels` (0 when there is none: a
/// counter that was never incremented is not exported).
pub fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    parse_metrics(text)
        .into_iter()
        .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.labels.get(*k).is_some_and(|x| x == v)))
        .fold(0.0, |sum, s| sum + s.value)
}

/// `GET /metrics` of the node at `addr`.
pub fn metrics(addr: SocketAddr) -> String {
    http_get(addr, "/metrics")
}

/// `ferry_actor_restarts_total` of one actor of one flow.
pub fn actor_restarts(addr: SocketAddr, flow: &str, actor: &str) -> f64 {
    metric_sum(&metrics(addr), "ferry_actor_restarts_total", &[("flow", flow), ("actor", actor)])
}

/// `GET /health` of the node at `addr`, parsed.
pub fn health(addr: SocketAddr) -> serde_json::Value {
    let body = http_get(addr, "/health");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("/health is not JSON ({e}): {body}"))
}

/// The source partitions (`topic-partition`) flow `flow` of the node at `addr` says it copies (`/health`
/// `assigned`), without other tests' remote heartbeats topics: tests on the shared pair leave `x.heartbeats`
/// topics on east, and every flow copies heartbeats topics (as MM2 does) whatever its topic list says. The
/// source's own `heartbeats` stays in.
pub fn assigned_partitions(addr: SocketAddr, flow: &str) -> std::collections::BTreeSet<String> {
    health(addr)["flows"][flow]["assigned"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str())
                .filter(|p| !p.rsplit_once('-').map_or(*p, |(t, _)| t).ends_with(".heartbeats"))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// `GET /flows` of the node at `addr`, parsed.
pub fn flows(addr: SocketAddr) -> serde_json::Value {
    let body = http_get(addr, "/flows");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("/flows is not JSON ({e}): {body}"))
}

/// Every reason a flow's entry in `/flows` shows: actors' last errors, partition problems, topic and
/// group errors.
pub fn flow_reasons(flow: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(actors) = flow["actors"].as_object() {
        out.extend(actors.values().filter_map(|a| a["last_error"].as_str().map(str::to_string)));
    }
    if let Some(problems) = flow["partition_problems"].as_array() {
        out.extend(problems.iter().filter_map(|p| p["reason"].as_str().map(str::to_string)));
    }
    for items in ["topic_errors", "group_errors"] {
        if let Some(errors) = flow[items].as_object() {
            out.extend(errors.values().filter_map(|e| e["reason"].as_str().map(str::to_string)));
        }
    }
    out
}

/// One actor's entry in `/health`.
#[derive(Clone, Debug, PartialEq)]
pub struct ActorHealth {
    pub state: String,
    pub restarts: u64,
    pub last_error: Option<String>,
}

/// The actors of `flow` in a `/health` document, by name (empty if the flow is not listed).
pub fn flow_actors(health: &serde_json::Value, flow: &str) -> BTreeMap<String, ActorHealth> {
    let Some(actors) = health["flows"][flow]["actors"].as_object() else { return BTreeMap::new() };
    actors
        .iter()
        .map(|(name, a)| {
            let h = ActorHealth {
                state: a["state"].as_str().unwrap_or_default().to_string(),
                restarts: a["restarts"].as_u64().unwrap_or_default(),
                last_error: a["last_error"].as_str().map(str::to_string),
            };
            (name.clone(), h)
        })
        .collect()
}

/// The actors of `flow` that are degraded, restarting or failed (not starting, running or stopped), with
/// their states: what makes `/health` report the node degraded.
pub fn unhealthy(health: &serde_json::Value, flow: &str) -> BTreeMap<String, ActorHealth> {
    flow_actors(health, flow)
        .into_iter()
        .filter(|(_, a)| matches!(a.state.as_str(), "degraded" | "restarting" | "failed"))
        .collect()
}

/// For each (group, topic, partition), checkpoints in topic order never move the downstream offset back
/// unless the upstream offset went back too (a deliberate rewind), and never repeat.
pub fn assert_monotonic(cps: &[Checkpoint]) {
    let mut last: BTreeMap<(String, String, i32), &Checkpoint> = BTreeMap::new();
    for cp in cps {
        let key = (cp.group.clone(), cp.topic.clone(), cp.partition);
        if let Some(prev) = last.get(&key) {
            assert!(
                cp.downstream_offset >= prev.downstream_offset || cp.upstream_offset < prev.upstream_offset,
                "checkpoint moved backward without an upstream rewind: {prev:?} -> {cp:?}"
            );
            assert!(
                cp.downstream_offset != prev.downstream_offset || cp.upstream_offset < prev.upstream_offset,
                "repeated checkpoint {cp:?}"
            );
        }
        last.insert(key, cp);
    }
}

/// `text` without ANSI escape sequences (ferry colours its text logs even into a file), so that log
/// lines read `topic=x partition=0 offset=3`.
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters final-byte (0x40..=0x7e)
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('\u{40}'..='\u{7e}').contains(&c) {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
