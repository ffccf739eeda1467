//! The heartbeat emitter: every `emit_heartbeats_interval_seconds`, a Heartbeat(source, target, now) to
//! partition 0 of `heartbeats` on the target, like MM2's heartbeat connector (mm2-reference.md §7.1).
//!
//! MM2 also runs a heartbeat-only herder for the reverse pair, which writes Heartbeat(target, source)
//! into the source's `heartbeats`; the copier then replicates that topic to `<source>.heartbeats` on the
//! target, whose name tells MirrorClient that `source` is upstream and whose timestamps measure the whole
//! pipeline. ferry's flow does both, so a single flow is discoverable on its own; each destination has
//! its switch (`emit_heartbeats_enabled`, `emit_reverse_heartbeats_enabled`), and a destination that is
//! off is never touched: no topic is created there (a read-only source stays unwritten).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::messages::{ActorKind, Parent};
use super::worker::{Control, Signal, Worker};
use crate::clients::{FlowConnections, Lane, Outgoing};
use crate::config::FlowPlan;
use crate::failpoints;
use crate::kafka::{self, Captured, TopicSpec};
use crate::metrics::METRICS;
use crate::mm2::records::Heartbeat;

/// The emitter as a supervised actor.
pub fn worker(plan: Arc<FlowPlan>, conns: Arc<FlowConnections>, supervisor: Parent) -> Worker<()> {
    let name = format!("heartbeats {}", plan.id);
    Worker::new(ActorKind::Heartbeats, name, supervisor, Vec::new(), move |control| run(&plan, &conns, control))
}

/// One destination: Heartbeat(`from`, `to`) into `heartbeats` on `cluster`, through the connection's
/// shared producer for internal topics (many flows' heartbeats into one cluster share it).
struct Beat<'a> {
    cluster: &'a str,
    from: &'a str,
    to: &'a str,
    lane: Lane,
}

fn run(plan: &FlowPlan, conns: &FlowConnections, control: Control<()>) -> Result<(), String> {
    let topic = plan.policy.heartbeats_topic();
    let s = &plan.settings;
    let mut beats = Vec::new();
    for (on, conn, cluster, from, to) in [
        (s.emit_heartbeats_enabled, &conns.target, &plan.target.alias, &plan.id.source, &plan.id.target),
        (s.emit_reverse_heartbeats_enabled, &conns.source, &plan.source.alias, &plan.id.target, &plan.id.source),
    ] {
        if !on {
            continue;
        }
        let spec = TopicSpec::compacted(topic, 1, plan.settings.heartbeats_rf());
        conn.ensure_topic(&plan.id, &spec).map_err(|e| e.to_string())?;
        let lane = conn.internal().map_err(|e| e.to_string())?;
        beats.push(Beat { cluster, from, to, lane });
    }
    control.running();
    let counter = METRICS.heartbeats_emitted.with_label_values(&[&plan.id.to_string()]);
    let interval = plan.settings.emit_heartbeats_interval;
    let mut next = Instant::now();
    loop {
        if let Some(Signal::Stop { .. }) = control.next_within(next.saturating_duration_since(Instant::now())) {
            return Ok(());
        }
        if Instant::now() < next {
            continue;
        }
        next += interval;
        if next < Instant::now() {
            next = Instant::now() + interval; // fell behind (a cluster was slow): do not burst
        }
        failpoints::check(failpoints::HEARTBEATS_EMIT)?;
        let now_ms = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        let failed: Arc<Mutex<Option<(String, Captured)>>> = Arc::default();
        for b in &beats {
            let hb =
                Heartbeat { source_alias: b.from.to_string(), target_alias: b.to.to_string(), timestamp_ms: now_ms };
            let key = hb.encode_key().map_err(|e| format!("encode heartbeat: {e}"))?;
            let value = hb.encode_value();
            let record =
                Outgoing { topic, partition: 0, key: &key, payload: &value, headers: None, timestamp: Some(now_ms) };
            let (failed, cluster) = (failed.clone(), b.cluster.to_string());
            b.lane
                .send(record, move |outcome| {
                    if let Err(e) = outcome {
                        failed.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert((cluster, e));
                    }
                })
                .map_err(|e| format!("cluster `{}`: queue heartbeat: {e}", b.cluster))?;
        }
        let wait = Duration::from_secs(30).max(interval);
        let until = Instant::now() + wait;
        for b in &beats {
            // In slices, so that a stop (its cluster may be away) is not kept waiting: a heartbeat in
            // flight needs no flush, the next emitter sends a fresh one.
            while !b.lane.wait_idle(Duration::from_millis(200).min(until.saturating_duration_since(Instant::now()))) {
                if Instant::now() >= until {
                    return Err(format!(
                        "cluster `{}`: publish heartbeat: not acknowledged within {wait:?}",
                        b.cluster
                    ));
                }
                if let Some(Signal::Stop { .. }) = control.try_next() {
                    return Ok(());
                }
            }
        }
        if let Some((cluster, e)) = failed.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(match e.refused {
                Some(code) => kafka::not_authorized(&format!("heartbeats topic {topic}"), &cluster, "Write", code),
                None => format!("cluster `{cluster}`: publish heartbeat: {e}"),
            });
        }
        counter.inc();
    }
}
