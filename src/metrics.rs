//! Every metric ferry exports, defined in one place (Prometheus naming: `ferry_<what>_<unit>`,
//! `_total` for counters, labels bounded to flow and topic).
//!
//! The registry is process-wide; `/metrics` renders it. Hot paths cache the labelled children they
//! use instead of looking labels up per record.

use std::sync::LazyLock;

use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry};

pub struct Metrics {
    pub registry: Registry,
    /// Records the target acknowledged, per flow and source topic.
    pub records_copied: IntCounterVec,
    /// Value bytes of acknowledged records (MM2's `byte-count` counts values only; so do we).
    pub bytes_copied: IntCounterVec,
    /// Copy progress records written to `mm2-offsets.<source>.internal`.
    pub progress_commits: IntCounterVec,
    /// Remote topics ferry created on the target.
    pub topics_created: IntCounterVec,
    /// Source partitions the copier currently mirrors.
    pub partitions_assigned: IntGaugeVec,
    /// Offset syncs the rule selected, by reason (first, upstream_gap, downstream_truncated,
    /// delta_changed, lag, quiet).
    pub offset_syncs_emitted: IntCounterVec,
    /// Offset syncs selected but not yet acknowledged by the offset-syncs cluster.
    pub offset_syncs_queued: IntGaugeVec,
    /// Heartbeat rounds published (one record to the target, one to the source).
    pub heartbeats_emitted: IntCounterVec,
    /// Checkpoints published to `<source>.checkpoints.internal`.
    pub checkpoints_emitted: IntCounterVec,
    /// Source consumer groups selected for checkpointing.
    pub checkpoint_groups: IntGaugeVec,
    /// Group offset sync attempts per target group, by result (ok, failed, skipped_active).
    pub group_offset_syncs: IntCounterVec,
    /// Actor restarts after an error or a panic.
    pub actor_restarts: IntCounterVec,
    /// Source records lost before they were copied (retention, topic re-creation).
    pub source_gap_records: IntCounterVec,
}

fn gauge(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("static metric definition is valid");
    registry.register(Box::new(g.clone())).expect("metric names are unique");
    g
}

fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("static metric definition is valid");
    registry.register(Box::new(c.clone())).expect("metric names are unique");
    c
}

impl Metrics {
    fn new() -> Self {
        let registry = Registry::new();
        #[cfg(target_os = "linux")]
        {
            let pc = prometheus::process_collector::ProcessCollector::for_self();
            registry.register(Box::new(pc)).expect("process collector registers once");
        }
        Self {
            records_copied: counter(
                &registry,
                "ferry_records_copied_total",
                "Records copied and acknowledged by the target.",
                &["flow", "topic"],
            ),
            bytes_copied: counter(
                &registry,
                "ferry_bytes_copied_total",
                "Value bytes of records copied and acknowledged by the target.",
                &["flow", "topic"],
            ),
            progress_commits: counter(
                &registry,
                "ferry_progress_commits_total",
                "Copy-progress records persisted to the target.",
                &["flow"],
            ),
            topics_created: counter(
                &registry,
                "ferry_topics_created_total",
                "Remote topics created on the target.",
                &["flow"],
            ),
            partitions_assigned: gauge(
                &registry,
                "ferry_partitions_assigned",
                "Source partitions the record copier mirrors.",
                &["flow"],
            ),
            offset_syncs_emitted: counter(
                &registry,
                "ferry_offset_syncs_total",
                "Offset syncs selected for publishing, by reason.",
                &["flow", "reason"],
            ),
            offset_syncs_queued: gauge(
                &registry,
                "ferry_offset_syncs_queued",
                "Offset syncs waiting for the offset-syncs cluster to acknowledge them.",
                &["flow"],
            ),
            heartbeats_emitted: counter(&registry, "ferry_heartbeats_total", "Heartbeat rounds published.", &["flow"]),
            checkpoints_emitted: counter(&registry, "ferry_checkpoints_total", "Checkpoints published.", &["flow"]),
            checkpoint_groups: gauge(
                &registry,
                "ferry_checkpoint_groups",
                "Source consumer groups selected for checkpointing.",
                &["flow"],
            ),
            group_offset_syncs: counter(
                &registry,
                "ferry_group_offset_syncs_total",
                "Group offset sync attempts per target group, by result.",
                &["flow", "result"],
            ),
            actor_restarts: counter(
                &registry,
                "ferry_actor_restarts_total",
                "Actor restarts after an error or a panic.",
                &["flow", "actor"],
            ),
            source_gap_records: counter(
                &registry,
                "ferry_source_gap_records_total",
                "Source records lost before they were copied.",
                &["flow", "topic"],
            ),
            registry,
        }
    }

    /// Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = String::new();
        let encoder = prometheus::TextEncoder::new();
        if let Err(e) = encoder.encode_utf8(&self.registry.gather(), &mut buf) {
            tracing::warn!(error = %e, "could not encode metrics");
        }
        buf
    }
}

pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_registers_and_renders() {
        METRICS.records_copied.with_label_values(&["a->b", "orders"]).inc();
        METRICS.offset_syncs_queued.with_label_values(&["a->b"]).set(3);
        let text = METRICS.render();
        assert!(text.contains("ferry_records_copied_total{flow=\"a->b\",topic=\"orders\"} 1"), "{text}");
        assert!(text.contains("ferry_offset_syncs_queued{flow=\"a->b\"} 3"), "{text}");
    }
}
