//! The offset-sync emitter: publishes the (upstream, downstream) pairs the copier's rule selected to
//! partition 0 of `mm2-offset-syncs.<target>.internal` (on the source cluster by default), in MM2's format
//! plus ferry's [`SyncMark`](crate::sync_rule::SyncMark) header.
//!
//! The queue between copier and emitter is owned by the flow supervisor, so a sync survives a restart of
//! either. A sync leaves the queue only after the broker acknowledged it: nothing is silently dropped.
//! When the queue is long the copier pauses (backpressure) instead of the queue growing without bound.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use actix::Addr;
use prometheus::IntGauge;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use super::supervisor::{ActorKind, FlowSupervisor};
use super::worker::{Control, Signal, Worker};
use crate::config::{ClusterSpec, FlowPlan, OffsetSyncsLocation};
use crate::failpoints;
use crate::kafka::{self, ErrorCapture, TopicSpec};
use crate::metrics::METRICS;
use crate::sync_rule::{MarkedSync, SYNC_MARK_HEADER, SyncReason};

/// In-flight bound: syncs sent before waiting for their acknowledgements.
const BATCH: usize = 512;
/// Above this many queued syncs the copier pauses.
const BACKLOG: usize = 100_000;

/// Syncs waiting to be published, in the order the rule produced them.
pub struct SyncQueue {
    flow: String,
    queue: Mutex<VecDeque<MarkedSync>>,
    ready: Condvar,
    depth: IntGauge,
}

impl SyncQueue {
    pub fn new(flow: &str) -> Self {
        Self {
            flow: flow.to_string(),
            queue: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            depth: METRICS.offset_syncs_queued.with_label_values(&[flow]),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<MarkedSync>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn push(&self, sync: MarkedSync, reason: SyncReason) {
        METRICS.offset_syncs_emitted.with_label_values(&[&self.flow, reason.name()]).inc();
        let mut q = self.lock();
        q.push_back(sync);
        self.depth.set(q.len() as i64);
        self.ready.notify_one();
    }

    pub fn push_quiet(&self, syncs: Vec<MarkedSync>) {
        for s in syncs {
            self.push(s, SyncReason::Quiet);
        }
    }

    pub fn is_backlogged(&self) -> bool {
        self.lock().len() >= BACKLOG
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Up to `n` syncs from the front, waiting up to `wait` for the first one. They stay queued.
    fn peek(&self, n: usize, wait: Duration) -> Vec<MarkedSync> {
        let q = self.lock();
        let (q, _) = self.ready.wait_timeout_while(q, wait, |q| q.is_empty()).unwrap_or_else(|p| p.into_inner());
        q.iter().take(n).cloned().collect()
    }

    /// Remove the `n` front syncs (published).
    fn pop(&self, n: usize) {
        let mut q = self.lock();
        let n = n.min(q.len());
        q.drain(..n);
        self.depth.set(q.len() as i64);
    }
}

/// The cluster that holds the offset-syncs topic and the topic's name (mm2-reference.md §2.1).
pub fn syncs_location(plan: &FlowPlan) -> (&ClusterSpec, String) {
    match plan.settings.offset_syncs_topic_location {
        OffsetSyncsLocation::Source => (&plan.source, plan.policy.offset_syncs_topic(&plan.id.target)),
        OffsetSyncsLocation::Target => (&plan.target, plan.policy.offset_syncs_topic(&plan.id.source)),
    }
}

/// The emitter as a supervised actor.
pub fn worker(plan: Arc<FlowPlan>, queue: Arc<SyncQueue>, supervisor: Addr<FlowSupervisor>) -> Worker<()> {
    let name = format!("offset-syncs {}", plan.id);
    Worker::new(ActorKind::OffsetSyncs, name, supervisor, Vec::new(), move |control| run(&plan, &queue, control))
}

fn run(plan: &FlowPlan, queue: &SyncQueue, control: Control<()>) -> Result<(), String> {
    let (cluster, topic) = syncs_location(plan);
    let spec = TopicSpec::compacted(topic.clone(), 1, plan.settings.replication_factor);
    kafka::ensure_topic(cluster, &plan.id, &spec).map_err(|e| e.to_string())?;
    let mut cfg = kafka::client_config(cluster, &plan.id, "offset-syncs-producer");
    cfg.set("acks", "all").set("enable.idempotence", "true").set("linger.ms", "5");
    let producer: BaseProducer<ErrorCapture> = cfg
        .create_with_context(ErrorCapture::default())
        .map_err(|e| format!("cluster `{}`: create offset-syncs producer: {e}", cluster.alias))?;
    control.running();

    let mut stopping: Option<Instant> = None;
    loop {
        match control.try_next() {
            Some(Signal::Stop { deadline }) => stopping = Some(deadline),
            Some(Signal::Msg(())) | None => {}
        }
        let batch = queue.peek(BATCH, Duration::from_millis(100));
        if batch.is_empty() {
            if stopping.is_some() {
                return Ok(());
            }
            continue;
        }
        failpoints::check(failpoints::OFFSET_SYNCS_SEND)?;
        for s in &batch {
            let key = s.sync.encode_key().map_err(|e| format!("encode offset sync: {e}"))?;
            let value = s.sync.encode_value();
            let mark = s.mark.encode();
            let headers =
                OwnedHeaders::new_with_capacity(1).insert(Header { key: SYNC_MARK_HEADER, value: Some(&mark[..]) });
            let record = BaseRecord::to(&topic).partition(0).key(&key).payload(&value).headers(headers);
            producer.send(record).map_err(|(e, _)| format!("queue offset sync to {topic}: {e}"))?;
        }
        let timeout = stopping.map_or(kafka::ADMIN_TIMEOUT, |d| d.saturating_duration_since(Instant::now()));
        producer.flush(timeout).map_err(|e| format!("publish offset syncs to {topic}: {e}"))?;
        if let Some(e) = producer.context().take() {
            return Err(format!("publish offset syncs to {topic}: {e}"));
        }
        queue.pop(batch.len());
        if stopping.is_some_and(|d| Instant::now() >= d) {
            return Err(format!("{} offset syncs still queued at the shutdown deadline", queue.len()));
        }
    }
}
