//! The heartbeat emitter: every `emit_heartbeats_interval_seconds`, a Heartbeat(source, target, now) to
//! partition 0 of `heartbeats` on the target, like MM2's heartbeat connector (mm2-reference.md §7.1).
//!
//! MM2 also runs a heartbeat-only herder for the reverse pair, which writes Heartbeat(target, source)
//! into the source's `heartbeats`; the copier then replicates that topic to `<source>.heartbeats` on the
//! target, whose name tells MirrorClient that `source` is upstream and whose timestamps measure the whole
//! pipeline. ferry's flow does both, so a single flow is discoverable on its own.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use actix::Addr;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use super::supervisor::{ActorKind, FlowSupervisor};
use super::worker::{Control, Signal, Worker};
use crate::config::{ClusterSpec, FlowPlan};
use crate::failpoints;
use crate::kafka::{self, ErrorCapture, TopicSpec};
use crate::metrics::METRICS;
use crate::mm2::records::Heartbeat;

/// The emitter as a supervised actor.
pub fn worker(plan: Arc<FlowPlan>, supervisor: Addr<FlowSupervisor>) -> Worker<()> {
    let name = format!("heartbeats {}", plan.id);
    Worker::new(ActorKind::Heartbeats, name, supervisor, Vec::new(), move |control| run(&plan, control))
}

/// One destination: Heartbeat(`from`, `to`) into `heartbeats` on `to`'s cluster.
struct Beat<'a> {
    cluster: &'a ClusterSpec,
    from: &'a str,
    to: &'a str,
    producer: BaseProducer<ErrorCapture>,
}

fn run(plan: &FlowPlan, control: Control<()>) -> Result<(), String> {
    let topic = plan.policy.heartbeats_topic();
    let mut beats = Vec::new();
    for (cluster, from, to) in
        [(&plan.target, &plan.id.source, &plan.id.target), (&plan.source, &plan.id.target, &plan.id.source)]
    {
        let spec = TopicSpec::compacted(topic, 1, plan.settings.replication_factor);
        kafka::ensure_topic(cluster, &plan.id, &spec).map_err(|e| e.to_string())?;
        let mut cfg = kafka::client_config(cluster, &plan.id, "heartbeats-producer");
        cfg.set("acks", "all").set("linger.ms", "0");
        let producer = cfg
            .create_with_context(ErrorCapture::default())
            .map_err(|e| format!("cluster `{}`: create heartbeat producer: {e}", cluster.alias))?;
        beats.push(Beat { cluster, from, to, producer });
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
        for b in &beats {
            let hb =
                Heartbeat { source_alias: b.from.to_string(), target_alias: b.to.to_string(), timestamp_ms: now_ms };
            let key = hb.encode_key().map_err(|e| format!("encode heartbeat: {e}"))?;
            let value = hb.encode_value();
            let record = BaseRecord::to(topic).partition(0).key(&key).payload(&value).timestamp(now_ms);
            b.producer.send(record).map_err(|(e, _)| format!("cluster `{}`: queue heartbeat: {e}", b.cluster.alias))?;
        }
        for b in &beats {
            b.producer
                .flush(Duration::from_secs(30).max(interval))
                .map_err(|e| format!("cluster `{}`: publish heartbeat: {e}", b.cluster.alias))?;
            if let Some(e) = b.producer.context().take() {
                return Err(match e.refused {
                    Some(code) => {
                        kafka::not_authorized(&format!("heartbeats topic {topic}"), &b.cluster.alias, "Write", code)
                    }
                    None => format!("cluster `{}`: publish heartbeat: {e}", b.cluster.alias),
                });
            }
        }
        counter.inc();
    }
}
