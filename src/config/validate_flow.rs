//! One `[[flows]]` table → a [`FlowPlan`]: every setting with MM2's default, checked, and the flow's
//! policy, filters and routes built.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::fields::*;
use super::raw::{RawFilterRule, RawFlow, RawHeaderRules, RawValue};
use super::schema_registry::{OnUnknownSchema, SchemaMode, SchemaSettings};
use super::{
    ClusterSpec, Delivery, FlowId, FlowPlan, FlowSettings, GroupProtocol, OffsetSyncsLocation, PolicyKind,
    SourceGapPolicy, StartFrom, TopicDeletions,
};
use crate::filter::{self, GroupFilter, TopicFilter};
use crate::mm2::connect_offsets;
use crate::policy::{DEFAULT_SEPARATOR, NameTemplate, ReplicationPolicy};
use crate::record_rules::{FilterSpec, HeaderSpec, RecordRules, RecordRulesSpec};
use crate::restart_policy::RestartSettings;

/// Exactly-once flows commit at least this often (see `transaction_interval_ms` in docs/configuration.md).
pub const DEFAULT_TRANSACTION_INTERVAL_MS: u64 = 100;
/// ... and once a transaction holds this many bytes of records.
pub const DEFAULT_TRANSACTION_MAX_BYTES: u64 = 16 * 1024 * 1024;

pub(super) fn flow(
    i: usize,
    rf: RawFlow,
    file: &Path,
    clusters: &BTreeMap<String, ClusterSpec>,
    refused: &BTreeSet<String>,
    errs: &mut Errors<'_>,
) -> Option<FlowPlan> {
    let k = |name: &str| format!("flows[{i}].{name}");
    let before = errs.out.len();
    let missing = |alias: &str| {
        if refused.contains(alias) {
            format!("cluster `{alias}` has errors (above)")
        } else {
            format!("unknown cluster `{alias}` (define it under [clusters.{alias}])")
        }
    };

    let source = clusters.get(&rf.source).cloned();
    if source.is_none() {
        errs.push(k("source"), missing(&rf.source));
    }
    let target = clusters.get(&rf.target).cloned();
    if target.is_none() {
        errs.push(k("target"), missing(&rf.target));
    }
    if rf.source == rf.target {
        errs.push(k("target"), "a flow's source and target must be different clusters");
    }

    let (topics, topics_inc) = patterns(&k("topics"), rf.topics, filter::DEFAULT_TOPICS, errs);
    let (topics_exclude, topics_exc) =
        patterns(&k("topics_exclude"), rf.topics_exclude, filter::DEFAULT_TOPICS_EXCLUDE, errs);
    let (groups, groups_inc) = patterns(&k("groups"), rf.groups, filter::DEFAULT_GROUPS, errs);
    let (groups_exclude, groups_exc) =
        patterns(&k("groups_exclude"), rf.groups_exclude, filter::DEFAULT_GROUPS_EXCLUDE, errs);

    let replication_policy = match rf.replication_policy.as_deref().unwrap_or("default") {
        "default" => PolicyKind::Default,
        "identity" => PolicyKind::Identity,
        other => {
            errs.push(k("replication_policy"), format!("`{other}` is not a policy; use \"default\" or \"identity\""));
            PolicyKind::Default
        }
    };
    let separator = rf.replication_policy_separator.unwrap_or_else(|| ".".to_string());
    if separator.is_empty() {
        errs.push(k("replication_policy_separator"), "must not be empty");
    }
    let template = rf
        .remote_topic
        .as_deref()
        .and_then(|text| remote_topic(text, rf.replication_policy.as_deref(), &separator, &k, errs));
    let replication_policy = if rf.remote_topic.is_some() { PolicyKind::Template } else { replication_policy };
    let replication_factor = match rf.replication_factor {
        None | Some(-1) => None,
        Some(n) if n >= 1 => Some(n),
        Some(n) => {
            errs.push(k("replication_factor"), format!("must be -1 (the target's default) or at least 1, got {n}"));
            None
        }
    };
    let offset_lag_max = rf.offset_lag_max.unwrap_or(100);
    if offset_lag_max < 0 {
        errs.push(k("offset_lag_max"), format!("must not be negative, got {offset_lag_max}"));
    }
    let offset_syncs_topic_location = match rf.offset_syncs_topic_location.as_deref().unwrap_or("source") {
        "source" => OffsetSyncsLocation::Source,
        "target" => OffsetSyncsLocation::Target,
        other => {
            errs.push(
                k("offset_syncs_topic_location"),
                format!("`{other}` is not a location; use \"source\" or \"target\""),
            );
            OffsetSyncsLocation::Source
        }
    };
    let compression = rf.compression.unwrap_or_else(|| "lz4".to_string());
    if !COMPRESSIONS.contains(&compression.as_str()) {
        errs.push(k("compression"), format!("`{compression}` is not one of {}", COMPRESSIONS.join(", ")));
    }
    let linger_ms = rf.linger_ms.unwrap_or(20.0);
    if !(0.0..=900_000.0).contains(&linger_ms) {
        errs.push(k("linger_ms"), format!("must be between 0 and 900000, got {linger_ms}"));
    }
    let batch_size_bytes = rf.batch_size_bytes.unwrap_or(1_000_000);
    if !(1..=2_147_483_647).contains(&batch_size_bytes) {
        errs.push(k("batch_size_bytes"), format!("must be between 1 and 2147483647, got {batch_size_bytes}"));
    }

    let defaults = RestartSettings::default();
    let restart = RestartSettings {
        initial: seconds(
            &k("restart_backoff_initial_seconds"),
            rf.restart_backoff_initial_seconds,
            defaults.initial.as_secs_f64(),
            errs,
        ),
        max: seconds(
            &k("restart_backoff_max_seconds"),
            rf.restart_backoff_max_seconds,
            defaults.max.as_secs_f64(),
            errs,
        ),
        budget: rf.restart_budget.unwrap_or(defaults.budget),
        healthy_after: seconds(
            &k("restart_healthy_after_seconds"),
            rf.restart_healthy_after_seconds,
            defaults.healthy_after.as_secs_f64(),
            errs,
        ),
    };
    if restart.max < restart.initial {
        errs.push(k("restart_backoff_max_seconds"), "must not be smaller than restart_backoff_initial_seconds");
    }
    let group_protocol = match rf.group_protocol.as_deref().unwrap_or("classic") {
        "classic" => GroupProtocol::Classic,
        "consumer" => GroupProtocol::Consumer,
        other => {
            errs.push(
                k("group_protocol"),
                format!("`{other}` is not a group protocol; use \"classic\" or \"consumer\""),
            );
            GroupProtocol::Classic
        }
    };
    let delivery = match rf.delivery.as_deref().unwrap_or("at_least_once") {
        "at_least_once" => Delivery::AtLeastOnce,
        "exactly_once" => Delivery::ExactlyOnce,
        other => {
            errs.push(
                k("delivery"),
                format!("`{other}` is not a delivery mode; use \"at_least_once\" or \"exactly_once\""),
            );
            Delivery::AtLeastOnce
        }
    };
    // Measured (bench/results.md, exactly-once): 100 ms keeps the copy rate within a few % of
    // at-least-once, and is what a `read_committed` reader waits at most on top of the copy.
    let transaction_interval_ms = rf.transaction_interval_ms.unwrap_or(DEFAULT_TRANSACTION_INTERVAL_MS);
    if !(10..=30_000).contains(&transaction_interval_ms) {
        errs.push(k("transaction_interval_ms"), format!("must be between 10 and 30000 (well inside the transaction timeout of 60 s), got {transaction_interval_ms}"));
    }
    let transaction_max_bytes = rf.transaction_max_bytes.unwrap_or(DEFAULT_TRANSACTION_MAX_BYTES);
    if !(1..=1_073_741_824).contains(&transaction_max_bytes) {
        errs.push(k("transaction_max_bytes"), format!("must be between 1 and 1073741824, got {transaction_max_bytes}"));
    }
    if delivery == Delivery::AtLeastOnce {
        for (key, set) in [
            ("transaction_interval_ms", rf.transaction_interval_ms.is_some()),
            ("transaction_max_bytes", rf.transaction_max_bytes.is_some()),
        ] {
            if set {
                errs.push(k(key), "applies only to delivery = \"exactly_once\"");
            }
        }
    }
    let on_source_gap = match rf.on_source_gap.as_deref().unwrap_or("skip") {
        "skip" => SourceGapPolicy::Skip,
        "fail" => SourceGapPolicy::Fail,
        other => {
            errs.push(k("on_source_gap"), format!("`{other}` is not a policy; use \"skip\" or \"fail\""));
            SourceGapPolicy::Skip
        }
    };

    let offset_sync_history_per_partition =
        rf.offset_sync_history_per_partition.unwrap_or(crate::sync_store::DEFAULT_PER_PARTITION_BUDGET);
    if offset_sync_history_per_partition < crate::sync_store::MIN_PER_PARTITION_BUDGET {
        errs.push(
            k("offset_sync_history_per_partition"),
            format!(
                "must be at least {} (MM2's own history), got {offset_sync_history_per_partition}",
                crate::sync_store::MIN_PER_PARTITION_BUDGET
            ),
        );
    }

    let mm2_offsets_topic = rf.mm2_offsets_topic.unwrap_or_else(|| connect_offsets::offsets_topic(&rf.source));
    if let Err(reason) = kafka_topic_name(&mm2_offsets_topic) {
        errs.push(k("mm2_offsets_topic"), reason);
    }
    let mm2_source_connector = rf.mm2_source_connector.unwrap_or_else(|| connect_offsets::SOURCE_CONNECTOR.to_string());
    if mm2_source_connector.trim().is_empty() {
        errs.push(k("mm2_source_connector"), "must not be empty");
    }

    let internal_rf = |key: &str, v: Option<i32>, errs: &mut Errors<'_>| match v {
        None => None,
        Some(n) if n >= 1 || n == -1 => Some(n),
        Some(n) => {
            errs.push(k(key), format!("must be -1 (the cluster's default) or at least 1, got {n}"));
            None
        }
    };
    let offset_syncs_topic_replication_factor =
        internal_rf("offset_syncs_topic_replication_factor", rf.offset_syncs_topic_replication_factor, errs);
    let checkpoints_topic_replication_factor =
        internal_rf("checkpoints_topic_replication_factor", rf.checkpoints_topic_replication_factor, errs);
    let heartbeats_topic_replication_factor =
        internal_rf("heartbeats_topic_replication_factor", rf.heartbeats_topic_replication_factor, errs);
    if let Some(exclude) = &rf.config_properties_exclude {
        for (j, pattern) in exclude.iter().enumerate() {
            if let Err(e) = crate::filter::ConfigPropertyFilter::new(Some(std::slice::from_ref(pattern))) {
                errs.push(format!("{}[{j}]", k("config_properties_exclude")), e.to_string());
            }
        }
    }
    let start_from = match rf.start_from.as_deref().map(super::parse_start_from) {
        None => StartFrom::Earliest,
        Some(Ok(s)) => s,
        Some(Err(reason)) => {
            errs.push(k("start_from"), reason);
            StartFrom::Earliest
        }
    };
    let emit_checkpoints_enabled = rf.emit_checkpoints_enabled.unwrap_or(true);
    let emit_offset_syncs_enabled = rf.emit_offset_syncs_enabled.unwrap_or(true);
    let sync_group_offsets_enabled = rf.sync_group_offsets_enabled.unwrap_or(false);
    if !emit_offset_syncs_enabled && (emit_checkpoints_enabled || sync_group_offsets_enabled) {
        // MM2 refuses the same (KIP-1031): checkpoints translate through the syncs.
        errs.push(
            k("emit_offset_syncs_enabled"),
            "checkpoints and group offset sync translate through the offset syncs: with \
             emit_offset_syncs_enabled = false, set emit_checkpoints_enabled = false and leave \
             sync_group_offsets_enabled off",
        );
    }

    let schemas = schema_settings(
        (rf.schemas.as_deref(), rf.on_unknown_schema.as_deref(), rf.schemas_refresh_interval_seconds, rf.schemas_keys),
        source.as_ref(),
        target.as_ref(),
        &k,
        errs,
    );

    let record_rules = record_rules(rf.filter, rf.headers, &k, errs);
    let topic_deletions = match rf.sync_topic_deletions {
        None | Some(RawValue::Bool(false)) => TopicDeletions::Off,
        Some(RawValue::Bool(true)) => TopicDeletions::On,
        Some(RawValue::String(s)) if s == "dry_run" => TopicDeletions::DryRun,
        Some(other) => {
            errs.push(
                k("sync_topic_deletions"),
                format!("`{}` is not a choice; use true, false or \"dry_run\"", other.into_string()),
            );
            TopicDeletions::Off
        }
    };
    if topic_deletions == TopicDeletions::Off && rf.topic_deletion_grace_seconds.is_some() {
        errs.push(k("topic_deletion_grace_seconds"), "applies only with sync_topic_deletions = true or \"dry_run\"");
    }
    let topic_deletion_grace =
        seconds(&k("topic_deletion_grace_seconds"), rf.topic_deletion_grace_seconds, 3600.0, errs);

    let settings = FlowSettings {
        topics,
        topics_exclude,
        groups,
        groups_exclude,
        replication_policy,
        replication_policy_separator: separator.clone(),
        remote_topic: rf.remote_topic,
        replication_factor,
        refresh_topics_interval: seconds(
            &k("refresh_topics_interval_seconds"),
            rf.refresh_topics_interval_seconds,
            600.0,
            errs,
        ),
        emit_checkpoints_interval: seconds(
            &k("emit_checkpoints_interval_seconds"),
            rf.emit_checkpoints_interval_seconds,
            60.0,
            errs,
        ),
        refresh_groups_interval: seconds(
            &k("refresh_groups_interval_seconds"),
            rf.refresh_groups_interval_seconds,
            600.0,
            errs,
        ),
        emit_heartbeats_interval: seconds(
            &k("emit_heartbeats_interval_seconds"),
            rf.emit_heartbeats_interval_seconds,
            1.0,
            errs,
        ),
        sync_group_offsets_enabled,
        sync_group_offsets_interval: seconds(
            &k("sync_group_offsets_interval_seconds"),
            rf.sync_group_offsets_interval_seconds,
            60.0,
            errs,
        ),
        sync_topic_configs_enabled: rf.sync_topic_configs_enabled.unwrap_or(true),
        sync_topic_configs_interval: seconds(
            &k("sync_topic_configs_interval_seconds"),
            rf.sync_topic_configs_interval_seconds,
            600.0,
            errs,
        ),
        offset_lag_max,
        offset_syncs_topic_location,
        compression,
        linger: Duration::from_secs_f64(linger_ms.clamp(0.0, 900_000.0) / 1000.0),
        batch_size_bytes,
        enabled: rf.enabled.unwrap_or(true),
        restart,
        on_source_gap,
        offset_sync_history_per_partition,
        provenance_header: rf.provenance_header.unwrap_or(true),
        metrics_per_partition: rf.metrics_per_partition.unwrap_or(false),
        group_protocol,
        delivery,
        transaction_interval: Duration::from_millis(transaction_interval_ms.clamp(10, 30_000)),
        transaction_max_bytes: transaction_max_bytes.clamp(1, 1_073_741_824) as usize,
        mm2_offsets_topic,
        mm2_source_connector,
        emit_heartbeats_enabled: rf.emit_heartbeats_enabled.unwrap_or(true),
        emit_reverse_heartbeats_enabled: rf.emit_reverse_heartbeats_enabled.unwrap_or(true),
        heartbeats_replication_enabled: rf.heartbeats_replication_enabled.unwrap_or(true),
        emit_checkpoints_enabled,
        emit_offset_syncs_enabled,
        refresh_topics_enabled: rf.refresh_topics_enabled.unwrap_or(true),
        refresh_groups_enabled: rf.refresh_groups_enabled.unwrap_or(true),
        config_properties_exclude: rf.config_properties_exclude,
        offset_syncs_topic_replication_factor,
        checkpoints_topic_replication_factor,
        heartbeats_topic_replication_factor,
        sync_topic_acls_enabled: rf.sync_topic_acls_enabled.unwrap_or(false),
        protect_remote_topics: rf.protect_remote_topics.unwrap_or(false),
        sync_topic_acls_interval: seconds(
            &k("sync_topic_acls_interval_seconds"),
            rf.sync_topic_acls_interval_seconds,
            600.0,
            errs,
        ),
        start_from,
        schemas,
        record_rules,
        topic_deletions,
        topic_deletion_grace,
    };

    if errs.out.len() > before {
        return None;
    }
    let (source, target) = (source?, target?);
    if settings.delivery == Delivery::ExactlyOnce {
        // Exactly-once reads the source's records and the target's progress committed only; a cluster
        // definition that asks every client to read uncommitted data contradicts it.
        for c in [&source, &target] {
            if c.client.get("isolation.level").is_some_and(|v| v == "read_uncommitted") {
                errs.push(
                    k("delivery"),
                    format!(
                        "\"exactly_once\" reads committed data only, but cluster `{}` sets isolation.level = read_uncommitted ({})",
                        c.alias,
                        c.file.display()
                    ),
                );
                return None;
            }
        }
    }
    let Ok(compiled_rules) = RecordRules::compile(&settings.record_rules) else {
        return None; // refused above, key by key
    };
    let policy = match (replication_policy, template) {
        (PolicyKind::Template, Some(template)) => ReplicationPolicy::template(template, Some(&source.alias)),
        (PolicyKind::Identity, _) => ReplicationPolicy::identity(&separator, Some(&source.alias)),
        _ => ReplicationPolicy::default_policy(&separator),
    };
    Some(FlowPlan {
        id: FlowId { source: source.alias.clone(), target: target.alias.clone() },
        topic_filter: Arc::new(TopicFilter::new(topics_inc?, topics_exc?)),
        group_filter: Arc::new(GroupFilter::new(groups_inc?, groups_exc?)),
        source,
        target,
        settings,
        policy,
        topology: Arc::default(),
        record_rules: Arc::new(compiled_rules),
        file: file.to_path_buf(),
    })
}

/// `[[flows.filter]]` and `[flows.headers]`, each mistake under its own key.
fn record_rules(
    filter: Option<Vec<RawFilterRule>>,
    headers: Option<RawHeaderRules>,
    k: &dyn Fn(&str) -> String,
    errs: &mut Errors<'_>,
) -> RecordRulesSpec {
    let filters = filter
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, f)| {
            let older_than = f.older_than_seconds.map(|s| {
                if !s.is_finite() || s <= 0.0 || s > 1e10 {
                    errs.push(
                        k(&format!("filter[{i}].older_than_seconds")),
                        format!("must be a positive number of seconds, got {s}"),
                    );
                    Duration::from_secs(1)
                } else {
                    Duration::from_secs_f64(s)
                }
            });
            FilterSpec {
                name: f.name.unwrap_or_else(|| format!("filter[{i}]")),
                topics: f.topics.unwrap_or_default(),
                remote_topics: f.remote_topics.unwrap_or_default(),
                header: f.header,
                header_value: f.header_value,
                key: f.key,
                older_than,
                tombstone: f.tombstone,
                negate: f.negate.unwrap_or(false),
            }
        })
        .collect();
    let headers = headers.map_or_else(HeaderSpec::default, |h| HeaderSpec {
        drop: h.drop.unwrap_or_default(),
        rename: h.rename.unwrap_or_default(),
        insert: h.insert.unwrap_or_default(),
    });
    let spec = RecordRulesSpec { filters, headers };
    for (key, reason) in spec.problems() {
        errs.push(k(&key), reason);
    }
    spec
}

/// `remote_topic`: the template parsed, and refused beside `replication_policy` or a separator (a
/// template replaces the policy, and its internal topics keep MM2's `.`: one way to name things).
/// Checks that need the other flows and the cluster aliases are in `validate_names`.
fn remote_topic(
    text: &str,
    policy: Option<&str>,
    separator: &str,
    k: &dyn Fn(&str) -> String,
    errs: &mut Errors<'_>,
) -> Option<NameTemplate> {
    let before = errs.out.len();
    if let Some(policy) = policy {
        errs.push(
            k("remote_topic"),
            format!(
                "a template replaces the replication policy: remove replication_policy = \"{policy}\" or remote_topic"
            ),
        );
    }
    if separator != DEFAULT_SEPARATOR {
        errs.push(
            k("remote_topic"),
            format!(
                "a template names remote topics itself and keeps MM2's internal topic names (separator \".\"): \
                 remove replication_policy_separator = {separator:?} or remote_topic"
            ),
        );
    }
    let parsed = NameTemplate::parse(text).map_err(|e| errs.push(k("remote_topic"), format!("`{text}`: {e}"))).ok();
    if errs.out.len() > before { None } else { parsed }
}

/// `schemas`, `on_unknown_schema` and `schemas_refresh_interval_seconds`, with the registries of both
/// clusters when the flow uses them (refused, naming the side, when one has none).
fn schema_settings(
    (schemas, on_unknown_schema, refresh_seconds, keys): (Option<&str>, Option<&str>, Option<f64>, Option<bool>),
    source: Option<&ClusterSpec>,
    target: Option<&ClusterSpec>,
    k: &dyn Fn(&str) -> String,
    errs: &mut Errors<'_>,
) -> SchemaSettings {
    let mode = match schemas.unwrap_or("off") {
        "off" => SchemaMode::Off,
        "sync" => SchemaMode::Sync,
        "translate" => SchemaMode::Translate,
        other => {
            errs.push(k("schemas"), format!("`{other}` is not a schema mode; use \"off\", \"sync\" or \"translate\""));
            SchemaMode::Off
        }
    };
    let on_unknown = match on_unknown_schema.unwrap_or("hold") {
        "hold" => OnUnknownSchema::Hold,
        "pass" => OnUnknownSchema::Pass,
        other => {
            errs.push(k("on_unknown_schema"), format!("`{other}` is not a choice; use \"hold\" or \"pass\""));
            OnUnknownSchema::Hold
        }
    };
    if on_unknown_schema.is_some() && mode != SchemaMode::Translate {
        errs.push(k("on_unknown_schema"), "applies only to schemas = \"translate\"");
    }
    if keys.is_some() && mode == SchemaMode::Off {
        errs.push(k("schemas_keys"), "applies only to schemas = \"sync\" or \"translate\"");
    }
    let refresh = refresh_seconds.unwrap_or(super::schema_registry::DEFAULT_REFRESH_INTERVAL.as_secs_f64());
    if !(1.0..=86_400.0).contains(&refresh) {
        errs.push(k("schemas_refresh_interval_seconds"), format!("must be between 1 and 86400, got {refresh}"));
    }
    let mut settings = SchemaSettings {
        mode,
        on_unknown,
        refresh_interval: Duration::from_secs_f64(refresh.clamp(1.0, 86_400.0)),
        keys: keys.unwrap_or(true),
        source: None,
        target: None,
    };
    if mode == SchemaMode::Off {
        return settings;
    }
    let named = if mode == SchemaMode::Sync { "sync" } else { "translate" };
    for (side, cluster) in [("source", source), ("target", target)] {
        let Some(cluster) = cluster else { continue };
        match &cluster.schema_registry {
            Some(r) => {
                if side == "source" {
                    settings.source = Some(r.clone());
                } else {
                    settings.target = Some(r.clone());
                }
            }
            None => errs.push(
                k("schemas"),
                format!(
                    "schemas = \"{named}\" needs a schema registry on both clusters, and the {side} `{}` has none (add [clusters.{}.schema_registry] with its url)",
                    cluster.alias, cluster.alias
                ),
            ),
        }
    }
    if let (Some(s), Some(t)) = (&settings.source, &settings.target)
        && s.url == t.url
    {
        errs.push(
            k("schemas"),
            format!("the source and the target name the same schema registry ({}): there is nothing to sync", s.url),
        );
    }
    settings
}
