//! Every metric ferry exports, defined in one place (Prometheus naming: `ferry_<what>_<unit>`,
//! `_total` for counters, labels bounded to flow and topic).
//!
//! The registry is process-wide; `/metrics` renders it. Hot paths cache the labelled children they
//! use instead of looking labels up per record.

use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;

use prometheus::core::{Collector, MetricVec, MetricVecBuilder};
use prometheus::{GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

pub struct Metrics {
    pub registry: Registry,
    /// Records the target acknowledged, per flow and source topic.
    pub records_copied: IntCounterVec,
    /// Value bytes of acknowledged records (MM2's `byte-count` counts values only; so do we).
    pub bytes_copied: IntCounterVec,
    /// Copy progress records written to the flow's `mm2_offsets_topic`.
    pub progress_commits: IntCounterVec,
    /// Source partitions this node let go without a clean handover (its assignment was lost, or the
    /// target did not acknowledge within the handover time): their late deliveries were disowned.
    pub unclean_handovers: IntCounterVec,
    /// Exactly-once transactions of the copier, by result (`committed`, `aborted`).
    pub transactions: IntCounterVec,
    /// How long committing a copier transaction took (flush of its records, progress, commit).
    pub transaction_commit: HistogramVec,
    /// When the flow's copier last committed a transaction, seconds since the epoch.
    pub transaction_last_commit: GaugeVec,
    /// Earlier writers of partitions given to this node that its copier fenced (exactly-once).
    pub producers_fenced: IntCounterVec,
    /// Remote topics ferry created on the target.
    pub topics_created: IntCounterVec,
    /// ACL bindings the topic ACL sync created on the target.
    pub acl_bindings_synced: IntCounterVec,
    /// Records on remote topics that the flow's copier did not write, per source topic.
    pub remote_foreign_records: IntCounterVec,
    pub kerberos_logins: IntCounterVec,
    /// Source partitions the copier currently mirrors.
    pub partitions_assigned: IntGaugeVec,
    /// Offset syncs the rule selected, by reason (first, upstream_gap, downstream_truncated,
    /// delta_changed, lag, quiet, handover).
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
    /// Source records lost before they were copied (retention, delete-records).
    pub source_gap_records: IntCounterVec,
    /// Source partitions found re-created or truncated below the copy position, and copied again
    /// from their start.
    pub source_resets: IntCounterVec,
    /// Source records the provenance rule did not copy, by reason (been_on_target, other_route,
    /// legacy_origin; see `flow/copier/provenance.rs`).
    pub records_skipped: IntCounterVec,
    /// Source records a flow's `[[flows.filter]]` rules dropped, per topic and rule.
    pub records_filtered: IntCounterVec,
    /// Remote topics deleted because their source topic was gone (`sync_topic_deletions`).
    pub remote_topics_deleted: IntCounterVec,
    /// Remote topics waiting out the deletion grace period (the leader's figure).
    pub remote_topics_pending_deletion: IntGaugeVec,
    /// Records of internal topics (offset syncs, checkpoints, copy progress, control) that their readers
    /// skipped because they could not use them (see `kafka::skip_internal_record`).
    pub internal_records_skipped: IntCounterVec,
    /// Records the target refused or that could not be delivered; each stops its partition for a
    /// retry.
    pub partition_failures: IntCounterVec,
    /// Source subjects brought to the target registry (schemas = sync | translate), per flow.
    pub schema_subjects_synced: IntCounterVec,
    /// Keys and values whose schema ID was replaced by the target registry's (schemas = translate).
    pub schema_ids_translated: IntCounterVec,
    /// Records with neither key nor value in the Confluent framing, copied unchanged.
    pub records_unframed: IntCounterVec,
    /// Keys and values copied with their source ID because it could not be resolved (on_unknown_schema = pass).
    pub schema_ids_passed: IntCounterVec,
    /// Records held because their schema ID could not be resolved (each retry counts), per flow and topic.
    pub schema_resolution_failures: IntCounterVec,
    /// Calls to a schema registry that failed (no answer, or refused), per cluster whose registry it is.
    pub schema_registry_errors: IntCounterVec,
    /// Source partitions currently not copying because of a failure (retrying or stopped).
    pub partitions_failing: IntGaugeVec,
    /// Target acknowledgement time minus record timestamp (MM2: replication-latency-ms).
    pub replication_latency: HistogramVec,
    /// Fetch time minus record timestamp (MM2: record-age-ms).
    pub record_age: HistogramVec,
    /// Topic synchroniser errors per topic (create refused, name collision, configs rejected, ...).
    pub topic_errors: IntCounterVec,
    /// Checkpoint computer errors per consumer group (offsets could not be read, ...).
    pub group_errors: IntCounterVec,
    /// Whether the last reload of the flows directory applied (1) or not (0).
    pub config_last_reload_successful: IntGauge,
    /// When the last reload applied, seconds since the epoch.
    pub config_last_reload_success_timestamp: IntGauge,
    /// Reloads by result: applied, rejected, rolled_back.
    pub config_reloads: IntCounterVec,
    /// Rounds of the copier probe's source queries, by kind (assign, range, ids, lag) and result (ok,
    /// failed).
    pub probe_queries: IntCounterVec,
    /// Source high watermark minus the next offset to copy, summed per topic.
    pub source_lag: IntGaugeVec,
    /// The same per partition, with `metrics_per_partition = true`.
    pub partition_lag: IntGaugeVec,
    /// Records copied per partition, with `metrics_per_partition = true` (MM2: record-count).
    pub partition_records_copied: IntCounterVec,
    /// Source group offset seen changed → its checkpoint acknowledged (MM2: checkpoint-latency-ms).
    pub checkpoint_latency: HistogramVec,
    /// When each group was last checkpointed successfully (its round read its offsets and published what
    /// was due), seconds since the epoch.
    pub checkpoint_last_success: IntGaugeVec,
    /// Each flow's configured `emit_checkpoints_interval_seconds`, on every node running the flow (so
    /// that staleness alerts compare the last success with the interval, whichever node leads).
    pub checkpoint_interval: GaugeVec,
    /// 1 for each flow's current state, 0 for its other states.
    pub flow_state: IntGaugeVec,
    /// Age of the newest heartbeat of each flow that reached its target (set at scrape time).
    pub heartbeat_age: prometheus::GaugeVec,
    /// Timestamps (ms) of the newest heartbeat of each flow that reached its target.
    heartbeat_timestamps: std::sync::Mutex<std::collections::BTreeMap<String, i64>>,
    /// The build: version and source revision.
    pub build_info: IntGaugeVec,
    /// 1 on the node that leads a flow's duty (topics, checkpoints, heartbeats), 0 on the others.
    pub leader: IntGaugeVec,
    /// librdkafka statistics of the shared clients (see `clients::stats`), by cluster, client and broker.
    pub client_broker_rtt: GaugeVec,
    pub client_broker_throttle: GaugeVec,
    pub client_broker_requests_queued: IntGaugeVec,
    pub client_broker_requests_in_flight: IntGaugeVec,
    pub client_broker_tx_errors: IntCounterVec,
    /// Average produce batch of a shared producer, by cluster and client.
    pub client_batch_bytes: IntGaugeVec,
    pub client_batch_records: IntGaugeVec,
    /// notAfter of each certificate in the clusters' `ssl.certificate.location` (role `client`) and
    /// `ssl.ca.location` (role `ca`) files, as the flow set last applied read them.
    pub client_certificate_expiry: IntGaugeVec,
}

/// Bucket boundaries for replication delays: 1 ms to 6 hours.
pub const DELAY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0,
    3600.0, 7200.0, 21600.0,
];

fn histogram(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> HistogramVec {
    let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(DELAY_BUCKETS.to_vec()), labels)
        .expect("static metric definition is valid");
    registry.register(Box::new(h.clone())).expect("metric names are unique");
    h
}

fn gauge(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("static metric definition is valid");
    registry.register(Box::new(g.clone())).expect("metric names are unique");
    g
}

fn plain_gauge(registry: &Registry, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).expect("static metric definition is valid");
    registry.register(Box::new(g.clone())).expect("metric names are unique");
    g
}

fn float_gauge(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> GaugeVec {
    let g = GaugeVec::new(Opts::new(name, help), labels).expect("static metric definition is valid");
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
            transactions: counter(
                &registry,
                "ferry_transactions_total",
                "Exactly-once copier transactions, by result (committed, aborted).",
                &["flow", "result"],
            ),
            transaction_commit: histogram(
                &registry,
                "ferry_transaction_commit_seconds",
                "Time to commit an exactly-once copier transaction: its records acknowledged, its progress written, the commit returned.",
                &["flow"],
            ),
            transaction_last_commit: float_gauge(
                &registry,
                "ferry_transaction_last_commit_timestamp_seconds",
                "When the flow's exactly-once copier last committed a transaction (seconds since the epoch).",
                &["flow"],
            ),
            producers_fenced: counter(
                &registry,
                "ferry_producers_fenced_total",
                "Earlier exactly-once writers of partitions given to this node that its copier fenced before copying them.",
                &["flow"],
            ),
            unclean_handovers: counter(
                &registry,
                "ferry_unclean_handovers_total",
                "Source partitions let go without a clean handover (assignment lost, or the target did not acknowledge in time).",
                &["flow"],
            ),
            topics_created: counter(
                &registry,
                "ferry_topics_created_total",
                "Remote topics created on the target.",
                &["flow"],
            ),
            acl_bindings_synced: counter(
                &registry,
                "ferry_acl_bindings_synced_total",
                "ACL bindings of replicated topics created on their remote topics (sync_topic_acls_enabled).",
                &["flow"],
            ),
            remote_foreign_records: counter(
                &registry,
                "ferry_remote_foreign_records_total",
                "Records on a remote topic that the flow did not write (another producer writes the DR copy), by source topic; at-least-once flows under the default policy.",
                &["flow", "topic"],
            ),
            kerberos_logins: counter(
                &registry,
                "ferry_kerberos_logins_total",
                "Kerberos logins (kinit from the keytab: the first, then each renewal) by principal, keytab and result.",
                &["principal", "keytab", "result"],
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
            source_resets: counter(
                &registry,
                "ferry_source_resets_total",
                "Source partitions found re-created or truncated below the copy position, copied again from their start.",
                &["flow", "topic"],
            ),
            records_skipped: counter(
                &registry,
                "ferry_records_skipped_total",
                "Source records not copied by the provenance rule (identity replication), by reason.",
                &["flow", "topic", "reason"],
            ),
            records_filtered: counter(
                &registry,
                "ferry_records_filtered_total",
                "Source records not copied because a filter rule of the flow dropped them, by topic and rule (the first rule that matched).",
                &["flow", "topic", "rule"],
            ),
            remote_topics_deleted: counter(
                &registry,
                "ferry_remote_topics_deleted_total",
                "Remote topics ferry deleted because their source topic had been gone for the grace period (sync_topic_deletions).",
                &["flow"],
            ),
            remote_topics_pending_deletion: gauge(
                &registry,
                "ferry_remote_topics_pending_deletion",
                "Remote topics ferry created whose source topic is gone, waiting out the grace period (or never deleted, with sync_topic_deletions = \"dry_run\"), on the node that leads the flow.",
                &["flow"],
            ),
            internal_records_skipped: counter(
                &registry,
                "ferry_internal_records_skipped_total",
                "Records of internal topics (offset syncs, checkpoints, copy progress, control) skipped because their readers could not use them; each is named in a warning.",
                &["cluster", "topic"],
            ),
            partition_failures: counter(
                &registry,
                "ferry_partition_failures_total",
                "Records the target refused or that could not be delivered (each stops its partition for a retry).",
                &["flow", "topic"],
            ),
            schema_subjects_synced: counter(
                &registry,
                "ferry_schema_subjects_synced_total",
                "Source subjects brought to the target's schema registry (every version in order).",
                &["flow"],
            ),
            schema_ids_translated: counter(
                &registry,
                "ferry_schema_ids_translated_total",
                "Record keys and values whose schema ID was replaced by the target registry's ID of the same schema.",
                &["flow", "topic"],
            ),
            records_unframed: counter(
                &registry,
                "ferry_records_unframed_total",
                "Records of a schema flow with neither key nor value in the Confluent framing (copied unchanged).",
                &["flow", "topic"],
            ),
            schema_ids_passed: counter(
                &registry,
                "ferry_schema_ids_passed_total",
                "Record keys and values copied with the source's schema ID because it could not be resolved (on_unknown_schema = \"pass\").",
                &["flow", "topic"],
            ),
            schema_resolution_failures: counter(
                &registry,
                "ferry_schema_resolution_failures_total",
                "Records whose schema ID could not be resolved, each holding its partition until it does (every retry counts).",
                &["flow", "topic"],
            ),
            schema_registry_errors: counter(
                &registry,
                "ferry_schema_registry_errors_total",
                "Calls to a schema registry without an answer or refused, per cluster whose registry it is.",
                &["registry"],
            ),
            partitions_failing: gauge(
                &registry,
                "ferry_partitions_failing",
                "Source partitions not copying because of a failure (retrying or stopped).",
                &["flow"],
            ),
            replication_latency: histogram(
                &registry,
                "ferry_replication_latency_seconds",
                "Target acknowledgement time minus record timestamp.",
                &["flow", "topic"],
            ),
            record_age: histogram(
                &registry,
                "ferry_record_age_seconds",
                "Fetch time minus record timestamp.",
                &["flow", "topic"],
            ),
            topic_errors: counter(
                &registry,
                "ferry_topic_errors_total",
                "Topic synchroniser errors per source topic (the topic is retried at the next refresh).",
                &["flow", "topic"],
            ),
            group_errors: counter(
                &registry,
                "ferry_group_errors_total",
                "Checkpoint computer errors per consumer group (the group is retried at the next round).",
                &["flow", "group"],
            ),
            config_last_reload_successful: plain_gauge(
                &registry,
                "ferry_config_last_reload_successful",
                "Whether the last reload of the flows directory applied.",
            ),
            config_last_reload_success_timestamp: plain_gauge(
                &registry,
                "ferry_config_last_reload_success_timestamp_seconds",
                "When the last reload of the flows directory applied.",
            ),
            config_reloads: counter(
                &registry,
                "ferry_config_reloads_total",
                "Reloads of the flows directory, by result (applied, rejected, rolled_back).",
                &["result"],
            ),
            probe_queries: counter(
                &registry,
                "ferry_probe_queries_total",
                "Rounds of source queries of the copier's probe, by kind (assign, range, ids, lag) and result (ok, failed).",
                &["flow", "kind", "result"],
            ),
            source_lag: gauge(
                &registry,
                "ferry_source_lag_records",
                "Source high watermark minus the next offset to copy, summed per source topic.",
                &["flow", "topic"],
            ),
            partition_lag: gauge(
                &registry,
                "ferry_partition_lag_records",
                "Source high watermark minus the next offset to copy, per partition (metrics_per_partition).",
                &["flow", "topic", "partition"],
            ),
            partition_records_copied: counter(
                &registry,
                "ferry_partition_records_copied_total",
                "Records copied and acknowledged by the target, per partition (metrics_per_partition).",
                &["flow", "topic", "partition"],
            ),
            checkpoint_latency: histogram(
                &registry,
                "ferry_checkpoint_latency_seconds",
                "From a source group offset seen changed to its checkpoint acknowledged.",
                &["flow"],
            ),
            checkpoint_last_success: gauge(
                &registry,
                "ferry_checkpoint_last_success_timestamp_seconds",
                "When each consumer group was last checkpointed successfully.",
                &["flow", "group"],
            ),
            checkpoint_interval: float_gauge(
                &registry,
                "ferry_checkpoint_interval_seconds",
                "The flow's configured checkpoint emission interval (emit_checkpoints_interval_seconds).",
                &["flow"],
            ),
            flow_state: gauge(&registry, "ferry_flow_state", "1 for each flow's current state.", &["flow", "state"]),
            heartbeat_age: {
                let g = prometheus::GaugeVec::new(
                    Opts::new(
                        "ferry_heartbeat_age_seconds",
                        "Age of the newest heartbeat of the flow seen on its target.",
                    ),
                    &["flow"],
                )
                .expect("static metric definition is valid");
                registry.register(Box::new(g.clone())).expect("metric names are unique");
                g
            },
            heartbeat_timestamps: std::sync::Mutex::new(std::collections::BTreeMap::new()),
            build_info: gauge(
                &registry,
                "ferry_build_info",
                "The build of this node (value 1).",
                &["version", "revision"],
            ),
            leader: gauge(
                &registry,
                "ferry_leader",
                "1 on the node that leads the flow's duty (sum by flow and duty is 1 in a healthy cluster).",
                &["flow", "duty"],
            ),
            client_broker_rtt: float_gauge(
                &registry,
                "ferry_client_broker_rtt_seconds",
                "Average round trip to the broker over librdkafka's statistics window, per shared client.",
                &["cluster", "client", "broker"],
            ),
            client_broker_throttle: float_gauge(
                &registry,
                "ferry_client_broker_throttle_seconds",
                "Average time the broker throttled the client (quotas) over the statistics window.",
                &["cluster", "client", "broker"],
            ),
            client_broker_requests_queued: gauge(
                &registry,
                "ferry_client_broker_requests_queued",
                "Requests waiting to be sent to the broker.",
                &["cluster", "client", "broker"],
            ),
            client_broker_requests_in_flight: gauge(
                &registry,
                "ferry_client_broker_requests_in_flight",
                "Requests sent to the broker and not yet answered.",
                &["cluster", "client", "broker"],
            ),
            client_broker_tx_errors: counter(
                &registry,
                "ferry_client_broker_transmit_errors_total",
                "Requests that could not be sent to the broker.",
                &["cluster", "client", "broker"],
            ),
            client_batch_bytes: gauge(
                &registry,
                "ferry_client_batch_bytes",
                "Average produce batch size over the statistics window, per shared producer.",
                &["cluster", "client"],
            ),
            client_batch_records: gauge(
                &registry,
                "ferry_client_batch_records",
                "Average records per produce batch over the statistics window, per shared producer.",
                &["cluster", "client"],
            ),
            client_certificate_expiry: gauge(
                &registry,
                "ferry_client_certificate_expiry_timestamp_seconds",
                "When each certificate of a cluster's client certificate (role client) or CA file (role ca) expires.",
                &["cluster", "role", "file", "subject"],
            ),
            registry,
        }
    }

    /// Every series a flow has from its start, at zero, so that `rate()` and alerts work before the
    /// first event.
    pub fn init_flow(&self, flow: &str, actors: &[&str]) {
        for a in actors {
            self.actor_restarts.with_label_values(&[flow, a]).inc_by(0);
        }
        for c in [
            &self.progress_commits,
            &self.unclean_handovers,
            &self.topics_created,
            &self.acl_bindings_synced,
            &self.heartbeats_emitted,
            &self.checkpoints_emitted,
        ] {
            c.with_label_values(&[flow]).inc_by(0);
        }
        for g in
            [&self.partitions_assigned, &self.partitions_failing, &self.offset_syncs_queued, &self.checkpoint_groups]
        {
            g.with_label_values(&[flow]).add(0);
        }
        for r in ["ok", "failed", "skipped_active"] {
            self.group_offset_syncs.with_label_values(&[flow, r]).inc_by(0);
        }
        for k in ["assign", "range", "ids", "lag"] {
            for r in ["ok", "failed"] {
                self.probe_queries.with_label_values(&[flow, k, r]).inc_by(0);
            }
        }
        for r in crate::sync_rule::SyncReason::ALL {
            self.offset_syncs_emitted.with_label_values(&[flow, r.name()]).inc_by(0);
        }
        let _ = self.checkpoint_latency.with_label_values(&[flow]);
    }

    /// A heartbeat of `flow`, written at `timestamp_ms`, reached the target.
    pub fn heartbeat_seen(&self, flow: &str, timestamp_ms: i64) {
        let mut seen = self.heartbeat_timestamps.lock().unwrap_or_else(|p| p.into_inner());
        let e = seen.entry(flow.to_string()).or_insert(timestamp_ms);
        *e = (*e).max(timestamp_ms);
    }

    /// Forgets the newest heartbeat seen of `flow` (a flow restarted without reverse heartbeats): its age
    /// would otherwise grow from the last one the old generation saw, and the staleness alert fire.
    /// A flow restarted without checkpoint emission: its per-group checkpoint times and its interval
    /// would otherwise stay, frozen, and the staleness alert fire for checkpoints switched off.
    pub fn forget_checkpoints(&self, flow: &str) {
        self.checkpoint_last_success.remove_matching(&[("flow", flow)]);
        let _ = self.checkpoint_interval.remove_label_values(&[flow]);
    }

    pub fn forget_heartbeats(&self, flow: &str) {
        self.heartbeat_timestamps.lock().unwrap_or_else(|p| p.into_inner()).remove(flow);
        let _ = self.heartbeat_age.remove_label_values(&[flow]);
    }

    /// Refresh what depends on the time of the scrape or on the status board: heartbeat ages and flow
    /// states (a removed flow has no status: its series are gone already).
    pub fn refresh(&self, flows: &std::collections::BTreeMap<String, crate::status::FlowStatus>) {
        let now_ms =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        let mut seen = self.heartbeat_timestamps.lock().unwrap_or_else(|p| p.into_inner());
        seen.retain(|flow, _| flows.contains_key(flow));
        for (flow, ts) in seen.iter() {
            self.heartbeat_age.with_label_values(&[flow]).set(((now_ms - ts).max(0) as f64) / 1000.0);
        }
        drop(seen);
        for (flow, status) in flows {
            for s in crate::status::FlowState::ALL {
                self.flow_state.with_label_values(&[flow, s.name()]).set(i64::from(status.state == s));
            }
        }
        let revision = env!("FERRY_REVISION");
        self.build_info.with_label_values(&[env!("CARGO_PKG_VERSION"), revision]).set(1);
    }

    /// Every flow's figures for `/flows`, from one pass over the few series they come from (never the
    /// whole registry: that is every series of every flow, and this runs each second on the node's
    /// thread). `previous` holds each flow's last (records copied, when), for rates.
    pub fn figures(
        &self,
        flows: &[String],
        previous: &BTreeMap<String, (f64, std::time::Instant)>,
    ) -> Vec<(String, crate::status::FlowFigures, (f64, std::time::Instant))> {
        fn flow_of(m: &prometheus::proto::Metric) -> Option<&str> {
            m.get_label().iter().find(|l| l.name() == "flow").map(|l| l.value())
        }
        let now = std::time::Instant::now();
        let mut copied: HashMap<&str, f64> = HashMap::new();
        let copied_families = self.records_copied.collect();
        for m in copied_families.iter().flat_map(|f| f.get_metric().iter()) {
            if let Some(flow) = flow_of(m) {
                *copied.entry(flow).or_default() += m.get_counter().get_value();
            }
        }
        let mut lag: HashMap<&str, i64> = HashMap::new();
        let lag_families = self.source_lag.collect();
        for m in lag_families.iter().flat_map(|f| f.get_metric().iter()) {
            if let Some(flow) = flow_of(m) {
                *lag.entry(flow).or_default() += m.get_gauge().get_value() as i64;
            }
        }
        let mut last_checkpoint: HashMap<&str, u64> = HashMap::new();
        let checkpoint_families = self.checkpoint_last_success.collect();
        for m in checkpoint_families.iter().flat_map(|f| f.get_metric().iter()) {
            if let Some(flow) = flow_of(m) {
                let t = last_checkpoint.entry(flow).or_default();
                *t = (*t).max(m.get_gauge().get_value() as u64);
            }
        }
        let mut transactions: HashMap<&str, crate::status::TransactionFigures> = HashMap::new();
        let txn_families = self.transactions.collect();
        for m in txn_families.iter().flat_map(|f| f.get_metric().iter()) {
            let Some(flow) = flow_of(m) else { continue };
            let result = m.get_label().iter().find(|l| l.name() == "result").map_or("", |l| l.value());
            let t = transactions.entry(flow).or_default();
            match result {
                "committed" => t.committed = m.get_counter().get_value() as u64,
                _ => t.aborted += m.get_counter().get_value() as u64,
            }
        }
        let last_commit_families = self.transaction_last_commit.collect();
        for m in last_commit_families.iter().flat_map(|f| f.get_metric().iter()) {
            let Some(flow) = flow_of(m) else { continue };
            let at = m.get_gauge().get_value();
            if at > 0.0 {
                transactions.entry(flow).or_default().last_commit_at =
                    Some(crate::status::rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(at)));
            }
        }
        /// Per flow: the counters' sum, and their sums per value of `label`.
        fn tally<'a>(
            families: &'a [prometheus::proto::MetricFamily],
            label: &str,
        ) -> HashMap<&'a str, (u64, BTreeMap<String, u64>)> {
            let mut out: HashMap<&str, (u64, BTreeMap<String, u64>)> = HashMap::new();
            for m in families.iter().flat_map(|f| f.get_metric().iter()) {
                let Some(flow) = flow_of(m) else { continue };
                let value = m.get_label().iter().find(|l| l.name() == label).map_or("", |l| l.value());
                let n = m.get_counter().get_value() as u64;
                let t = out.entry(flow).or_default();
                t.0 += n;
                *t.1.entry(value.to_string()).or_insert(0) += n;
            }
            out
        }
        let skipped_families = self.records_skipped.collect();
        let mut skipped = tally(&skipped_families, "reason");
        let filtered_families = self.records_filtered.collect();
        let mut filtered = tally(&filtered_families, "rule");
        // A flow has schema figures once its schema work started (its series exist).
        let mut schemas: HashMap<&str, crate::status::SchemaFigures> = HashMap::new();
        type Field = fn(&mut crate::status::SchemaFigures) -> &mut u64;
        let schema_families: [(Vec<prometheus::proto::MetricFamily>, Field); 4] = [
            (self.schema_subjects_synced.collect(), |s| &mut s.subjects_synced),
            (self.schema_ids_translated.collect(), |s| &mut s.ids_translated),
            (self.records_unframed.collect(), |s| &mut s.records_unframed),
            (self.schema_ids_passed.collect(), |s| &mut s.ids_passed),
        ];
        for (families, field) in &schema_families {
            for m in families.iter().flat_map(|f| f.get_metric().iter()) {
                let Some(flow) = flow_of(m) else { continue };
                *field(schemas.entry(flow).or_default()) += m.get_counter().get_value() as u64;
            }
        }
        let mut foreign: HashMap<&str, std::collections::BTreeMap<String, u64>> = HashMap::new();
        let foreign_families = self.remote_foreign_records.collect();
        for m in foreign_families.iter().flat_map(|f| f.get_metric().iter()) {
            let Some(flow) = flow_of(m) else { continue };
            let topic = m.get_label().iter().find(|l| l.name() == "topic").map_or("", |l| l.value());
            foreign.entry(flow).or_default().insert(topic.to_string(), m.get_counter().get_value() as u64);
        }
        flows
            .iter()
            .map(|flow| {
                let total = copied.get(flow.as_str()).copied().unwrap_or(0.0);
                let rate = previous.get(flow).and_then(|(before, at)| {
                    let dt = now.duration_since(*at).as_secs_f64();
                    (dt > 0.0).then(|| ((total - before).max(0.0) / dt * 10.0).round() / 10.0)
                });
                let figures = crate::status::FlowFigures {
                    // Topic sync is the one duty every flow runs (checkpoints and heartbeats may be switched off).
                    leading: self.leader.with_label_values(&[flow, "topics"]).get() == 1,
                    partitions: self.partitions_assigned.with_label_values(&[flow]).get(),
                    lag_records: lag.get(flow.as_str()).copied(),
                    records_per_second: rate,
                    last_checkpoint_at: last_checkpoint
                        .get(flow.as_str())
                        .copied()
                        .filter(|t| *t > 0)
                        .map(|t| crate::status::rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_secs(t))),
                    records_skipped: skipped
                        .remove(flow.as_str())
                        .map(|(total, by_reason)| crate::status::Skipped { total, by_reason })
                        .unwrap_or_default(),
                    records_filtered: filtered
                        .remove(flow.as_str())
                        .map(|(total, by_rule)| crate::status::Filtered { total, by_rule }),
                    transactions: transactions.remove(flow.as_str()),
                    schemas: schemas.remove(flow.as_str()),
                    foreign_records: foreign.remove(flow.as_str()).unwrap_or_default(),
                };
                (flow.clone(), figures, (total, now))
            })
            .collect()
    }

    /// An exactly-once copier of `flow` committed a transaction now.
    pub fn transaction_committed(&self, flow: &str) {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        self.transaction_last_commit.with_label_values(&[flow]).set(now);
    }

    /// Every labelled metric, for removing series by label.
    fn vecs(&self) -> Vec<&dyn RemoveMatching> {
        vec![
            &self.records_copied,
            &self.bytes_copied,
            &self.progress_commits,
            &self.unclean_handovers,
            &self.transactions,
            &self.transaction_commit,
            &self.transaction_last_commit,
            &self.producers_fenced,
            &self.topics_created,
            &self.acl_bindings_synced,
            &self.remote_foreign_records,
            &self.partitions_assigned,
            &self.offset_syncs_emitted,
            &self.offset_syncs_queued,
            &self.heartbeats_emitted,
            &self.checkpoints_emitted,
            &self.checkpoint_groups,
            &self.group_offset_syncs,
            &self.actor_restarts,
            &self.source_gap_records,
            &self.source_resets,
            &self.records_skipped,
            &self.records_filtered,
            &self.remote_topics_deleted,
            &self.remote_topics_pending_deletion,
            &self.partition_failures,
            &self.schema_subjects_synced,
            &self.schema_ids_translated,
            &self.records_unframed,
            &self.schema_ids_passed,
            &self.schema_resolution_failures,
            &self.partitions_failing,
            &self.replication_latency,
            &self.record_age,
            &self.topic_errors,
            &self.group_errors,
            &self.probe_queries,
            &self.source_lag,
            &self.partition_lag,
            &self.partition_records_copied,
            &self.checkpoint_latency,
            &self.checkpoint_last_success,
            &self.checkpoint_interval,
            &self.flow_state,
            &self.heartbeat_age,
            &self.leader,
        ]
    }

    /// The certificates of `clusters` replace those shown before (a cluster removed, a file rotated).
    /// Two certificates with the same labels (one subject twice in a CA file during a CA rotation)
    /// show the earlier expiry: the one an alert must see.
    pub fn set_client_certificates<'a>(&self, clusters: impl IntoIterator<Item = &'a crate::config::ClusterSpec>) {
        let mut earliest: BTreeMap<[String; 4], i64> = BTreeMap::new();
        for c in clusters {
            for f in &c.client_files {
                let Some(role) = f.role() else { continue };
                for cert in &f.certificates {
                    let labels =
                        [c.alias.clone(), role.to_string(), f.path.display().to_string(), cert.subject.clone()];
                    let at = earliest.entry(labels).or_insert(cert.not_after);
                    *at = (*at).min(cert.not_after);
                }
            }
        }
        self.client_certificate_expiry.reset();
        for (labels, not_after) in earliest {
            let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
            self.client_certificate_expiry.with_label_values(&labels).set(not_after);
        }
    }

    /// Drops every series whose labels include all of `labels`; how many there were.
    pub fn remove_matching(&self, labels: &[(&str, &str)]) -> usize {
        self.vecs().iter().map(|v| v.remove_matching(labels)).sum()
    }

    /// Drops every series of `flow` (the flow was removed).
    pub fn remove_flow(&self, flow: &str) {
        self.remove_matching(&[("flow", flow)]);
        self.heartbeat_timestamps.lock().unwrap_or_else(|p| p.into_inner()).remove(flow);
    }

    /// Drops the gauges of `topic` in `flow` (this node no longer copies it): its lag would stay frozen.
    pub fn remove_topic_gauges(&self, flow: &str, topic: &str) {
        for v in [&self.source_lag, &self.partition_lag] {
            v.remove_matching(&[("flow", flow), ("topic", topic)]);
        }
    }

    /// Drops every series of `topic` in `flow` (the topic is no longer copied or was deleted); whether
    /// there was any.
    pub fn remove_topic(&self, flow: &str, topic: &str) -> bool {
        self.remove_matching(&[("flow", flow), ("topic", topic)]) > 0
    }

    /// Drops the per-partition series of one partition (no longer copied here: revoked, removed).
    pub fn remove_partition(&self, flow: &str, topic: &str, partition: i32) {
        let partition = partition.to_string();
        self.remove_matching(&[("flow", flow), ("topic", topic), ("partition", &partition)]);
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

/// Removing series by a subset of their labels (prometheus' vectors need the full label set).
trait RemoveMatching {
    /// How many series were removed.
    fn remove_matching(&self, labels: &[(&str, &str)]) -> usize;
}

impl<T: MetricVecBuilder> RemoveMatching for MetricVec<T> {
    fn remove_matching(&self, labels: &[(&str, &str)]) -> usize {
        let mut removed = 0;
        for family in self.collect() {
            for m in family.get_metric() {
                let pairs = m.get_label();
                let matches = labels.iter().all(|(k, v)| pairs.iter().any(|p| p.name() == *k && p.value() == *v));
                if matches {
                    let all: std::collections::HashMap<&str, &str> =
                        pairs.iter().map(|p| (p.name(), p.value())).collect();
                    removed += usize::from(self.remove(&all).is_ok());
                }
            }
        }
        removed
    }
}

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

    #[test]
    fn a_flow_without_checkpoint_emission_forgets_its_checkpoint_series() {
        let m = Metrics::new();
        m.checkpoint_last_success.with_label_values(&["a->b", "billing"]).set(1);
        m.checkpoint_last_success.with_label_values(&["c->d", "billing"]).set(1);
        m.checkpoint_interval.with_label_values(&["a->b"]).set(60.0);
        m.forget_checkpoints("a->b");
        let text = m.render();
        assert!(!text.contains("flow=\"a->b\""), "{text}");
        assert!(text.contains("ferry_checkpoint_last_success_timestamp_seconds{flow=\"c->d\""), "{text}");
    }

    #[test]
    fn certificate_expiry_follows_the_last_applied_clusters() {
        use crate::config::client_files::{Certificate, ClientFile};
        let file = |key: &str, path: &str, certs: &[(&str, i64)]| ClientFile {
            key: key.into(),
            path: path.into(),
            digest: [0; 32],
            certificates: certs.iter().map(|(s, t)| Certificate { subject: s.to_string(), not_after: *t }).collect(),
        };
        let cluster = |alias: &str, files: Vec<ClientFile>| crate::config::ClusterSpec {
            alias: alias.into(),
            bootstrap_servers: "x:1".into(),
            client: Default::default(),
            file_keys: Default::default(),
            secret_files: Vec::new(),
            client_files: files,
            schema_registry: None,
            file: "c.toml".into(),
        };
        let m = Metrics::new();
        let a = cluster(
            "certs-a",
            vec![
                file("ssl.certificate.location", "/c/a.pem", &[("CN=a", 2_000)]),
                file("ssl.key.location", "/c/a.key", &[]),
                // A CA rotation: the same subject twice; the earlier expiry shows.
                file("ssl.ca.location", "/c/ca.pem", &[("CN=ca", 9_000), ("CN=ca", 5_000)]),
            ],
        );
        m.set_client_certificates([
            &a,
            &cluster("certs-b", vec![file("ssl.certificate.location", "/c/b.pem", &[("CN=b", 7)])]),
        ]);
        let text = m.render();
        let name = "ferry_client_certificate_expiry_timestamp_seconds";
        assert!(
            text.contains(&format!(
                "{name}{{cluster=\"certs-a\",file=\"/c/a.pem\",role=\"client\",subject=\"CN=a\"}} 2000"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "{name}{{cluster=\"certs-a\",file=\"/c/ca.pem\",role=\"ca\",subject=\"CN=ca\"}} 5000"
            )),
            "{text}"
        );
        assert!(text.contains("cluster=\"certs-b\""), "{text}");
        assert!(!text.contains("a.key"), "a key file has no certificate: {text}");
        // The next set has no certs-b and a rotated certificate in certs-a.
        let rotated = cluster("certs-a", vec![file("ssl.certificate.location", "/c/a.pem", &[("CN=a", 3_000)])]);
        m.set_client_certificates([&rotated]);
        let text = m.render();
        assert!(
            text.contains(&format!(
                "{name}{{cluster=\"certs-a\",file=\"/c/a.pem\",role=\"client\",subject=\"CN=a\"}} 3000"
            )),
            "{text}"
        );
        assert!(!text.contains("certs-b") && !text.contains("/c/ca.pem"), "{text}");
    }

    /// Every metric name `Metrics::new` registers: its name literals (each helper call names its metric
    /// with one), each confirmed by the registry, and the families the registry gathers by itself
    /// (the process collector's).
    fn registered_names() -> Vec<String> {
        let m = Metrics::new();
        let source = include_str!("metrics.rs");
        let definitions = &source[..source.find("#[cfg(test)]").expect("tests")];
        let mut names: Vec<String> = definitions
            .split('"')
            .skip(1)
            .step_by(2)
            .filter(|s| {
                s.starts_with("ferry_") && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            })
            .map(str::to_string)
            .collect();
        for name in &names {
            // A name the registry holds refuses a second collector with other labels.
            let probe = IntCounterVec::new(Opts::new(name.as_str(), "probe"), &["probe"]).expect("probe");
            assert!(m.registry.register(Box::new(probe)).is_err(), "{name} is named in metrics.rs but not registered");
        }
        names.extend(m.registry.gather().iter().map(|f| f.name().to_string()));
        names.sort();
        names.dedup();
        names
    }

    #[test]
    fn every_metric_is_in_the_metrics_reference() {
        let documented = crate::reference_docs::documented(&crate::reference_docs::page("docs/metrics.md"));
        let names = registered_names();
        assert!(names.len() > 50 && names.iter().any(|n| n.starts_with("process_")), "{names:?}");
        let missing: Vec<_> = names.iter().filter(|n| !crate::reference_docs::is_documented(&documented, n)).collect();
        assert!(
            missing.is_empty(),
            "metrics the node registers that docs/metrics.md's table does not name: {missing:?}"
        );
    }
}
