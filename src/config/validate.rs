//! Raw flow files → a trusted [`FlowSet`]: defaults filled in (MM2's, mm2-reference.md §8), regexes
//! compiled, cluster names resolved, `${VAR}` and `${file:PATH}` replaced, each cluster's client
//! properties checked by librdkafka, and every error collected with its file and key.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use super::fields::*;
use super::raw::RawFile;
use super::topology;
use super::validate_cluster::cluster;
use super::validate_flow::flow;
use super::{
    ClientCheck, ClusterSpec, ConfigError, ConfigErrors, FlowId, FlowPlan, FlowSet, OffsetSyncsLocation, PolicyKind,
};

pub fn validate(
    files: Vec<(PathBuf, RawFile)>,
    env: &dyn Fn(&str) -> Option<String>,
    check: ClientCheck,
) -> Result<FlowSet, ConfigErrors> {
    let mut errors = Vec::new();
    let mut clusters: BTreeMap<String, ClusterSpec> = BTreeMap::new();
    // Clusters defined with errors: their flows say so, not that the cluster is unknown.
    let mut refused = BTreeSet::new();
    let mut raw_flows = Vec::new();

    for (file, raw) in files {
        let mut errs = Errors { file: &file, out: &mut errors };
        for (alias, rc) in raw.clusters {
            if let Some(existing) = clusters.get(&alias) {
                let first = existing.file.display().to_string();
                errs.push(format!("clusters.{alias}"), format!("cluster `{alias}` is already defined in {first}"));
                continue;
            }
            match cluster(&alias, rc, &file, env, check, &mut errs) {
                Some(spec) => {
                    clusters.insert(alias, spec);
                }
                None => {
                    refused.insert(alias);
                }
            }
        }
        for (i, rf) in raw.flows.into_iter().enumerate() {
            raw_flows.push((file.clone(), i, rf));
        }
    }

    let mut flows: BTreeMap<FlowId, FlowPlan> = BTreeMap::new();
    for (file, i, rf) in raw_flows {
        let mut errs = Errors { file: &file, out: &mut errors };
        let Some(plan) = flow(i, rf, &file, &clusters, &refused, &mut errs) else { continue };
        if let Some(existing) = flows.get(&plan.id) {
            let first = existing.file.display().to_string();
            errs.push(format!("flows[{i}]"), format!("flow {} is already defined in {first}", plan.id));
            continue;
        }
        flows.insert(plan.id.clone(), plan);
    }

    one_principal_per_realm(&clusters, &mut errors);
    unprotected_identity_cycles(&flows, &mut errors);
    identity_deletions_in_cycles(&flows, &mut errors);
    super::validate_names::check(&flows, &clusters, &mut errors);
    one_flow_per_offset_syncs_topic(&flows, &mut errors);
    protected_flows_know_their_principal(&flows, &mut errors);
    share_routes(&mut flows);
    if errors.is_empty() { Ok(FlowSet { clusters, flows }) } else { Err(ConfigErrors(errors)) }
}

/// Two Kerberos principals of one realm cannot be told apart by the Kerberos library (see `kerberos`):
/// either cluster's clients could authenticate as the other's principal. The later definition is refused.
fn one_principal_per_realm(clusters: &BTreeMap<String, ClusterSpec>, errors: &mut Vec<ConfigError>) {
    let mut ordered: Vec<&ClusterSpec> = clusters.values().collect();
    ordered.sort_by(|a, b| (&a.file, &a.alias).cmp(&(&b.file, &b.alias)));
    let logins =
        ordered.iter().filter_map(|c| super::login::Login::of(&c.client).ok().flatten().map(|l| (c.alias.as_str(), l)));
    for ((first, first_principal), (later, principal)) in super::login::conflicting_principals(logins) {
        let (first_file, later_file) = (&clusters[&first].file, &clusters[&later].file);
        errors.push(ConfigError {
            file: later_file.clone(),
            line: None,
            key: format!("clusters.{later}.client.\"sasl.kerberos.principal\""),
            reason: format!(
                "cluster `{later}` logs in as `{principal}`, cluster `{first}` ({}) as `{first_principal}`: one ferry \
                 node holds one Kerberos principal per realm (the Kerberos library picks a ticket by realm, so either \
                 cluster could authenticate as the other); use one principal for both, or run them in separate \
                 deployments",
                first_file.display()
            ),
        });
    }
}

/// Under the identity policy a topic keeps its name, so names cannot tell where a record came from: a
/// cycle of flows (east->west->east, a ring, a mesh) copies the same records around forever unless every
/// flow on it carries the provenance header. Default-policy names carry their origin and stop loops by
/// themselves; a cycle mixing the two has neither protection. A naming template without `{source}`
/// (`dr-{topic}`) carries no origin either, and the provenance header is the identity policy's only: on
/// a cycle it is refused outright (even protected, its names would grow at every hop, `dr-dr-orders`).
/// Each unprotected flow on a cycle through such a flow is an error naming one such cycle.
fn unprotected_identity_cycles(flows: &BTreeMap<FlowId, FlowPlan>, errors: &mut Vec<ConfigError>) {
    let enabled: Vec<&FlowPlan> = flows.values().filter(|p| p.settings.enabled).collect();
    let edges: Vec<(&str, &str)> = enabled.iter().map(|p| (p.id.source.as_str(), p.id.target.as_str())).collect();
    let identity = |p: &&&FlowPlan| !p.policy.names_source();
    for p in enabled.iter().filter(|p| !p.settings.provenance()) {
        // The shortest cycle through `p` and an identity flow `q` (`p` itself if it is one).
        let cycle = enabled
            .iter()
            .filter(identity)
            .filter_map(|q| {
                let (from, to) = (p.id.target.as_str(), p.id.source.as_str());
                let path = if q.id == p.id {
                    topology::shortest_path(&edges, from, to)?
                } else {
                    let mut there = topology::shortest_path(&edges, from, &q.id.source)?;
                    let back = topology::shortest_path(&edges, &q.id.target, to)?;
                    there.extend(back);
                    there
                };
                let mut cycle = vec![p.id.source.clone()];
                cycle.extend(path);
                cycle.pop(); // back at `p`'s source
                Some(cycle)
            })
            .min_by_key(|c| (c.len(), c.clone()));
        let Some(cycle) = cycle else { continue };
        let shown = topology::show_cycle(&cycle);
        let (key, reason) = if p.settings.replication_policy == PolicyKind::Identity {
            (
                "replication_policy",
                format!(
                    "flow {} has provenance_header = false but is on the replication cycle {shown} under the identity policy: records would be copied around it forever",
                    p.id
                ),
            )
        } else if !p.policy.names_source() {
            (
                "remote_topic",
                format!(
                    "flow {} is on the replication cycle {shown}, and its remote_topic {:?} has no {{source}}: its names cannot show where a record came from, so records would be copied around the cycle; put {{source}} in the template or break the cycle",
                    p.id,
                    p.settings.remote_topic.as_deref().unwrap_or_default()
                ),
            )
        } else {
            (
                "replication_policy",
                format!(
                    "flow {} is on the replication cycle {shown} with identity-policy flows or remote_topic templates without {{source}}; use the identity policy with provenance_header on every flow of the cycle, or names that carry the source on all of them",
                    p.id
                ),
            )
        };
        errors.push(ConfigError { file: p.file.clone(), line: None, key: key.to_string(), reason });
    }
}

/// Under the identity policy a remote topic is also the target's own topic of that name: in an
/// active-active pair (any cycle back to the source) producers on the target write it too, so deleting
/// it because the source's went would delete the target's data. Refused.
fn identity_deletions_in_cycles(flows: &BTreeMap<FlowId, FlowPlan>, errors: &mut Vec<ConfigError>) {
    let enabled: Vec<&FlowPlan> = flows.values().filter(|p| p.settings.enabled).collect();
    let edges: Vec<(&str, &str)> = enabled.iter().map(|p| (p.id.source.as_str(), p.id.target.as_str())).collect();
    for p in &enabled {
        let s = &p.settings;
        if s.topic_deletions == super::TopicDeletions::Off || s.replication_policy != PolicyKind::Identity {
            continue;
        }
        // Fan-in: another identity flow into the same cluster writes the same names.
        if let Some(q) = enabled.iter().find(|q| {
            q.id != p.id && q.id.target == p.id.target && q.settings.replication_policy == PolicyKind::Identity
        }) {
            errors.push(ConfigError {
                file: p.file.clone(),
                line: None,
                key: "sync_topic_deletions".to_string(),
                reason: format!(
                    "flow {} uses the identity policy and flow {} copies into `{}` under it too: a remote topic may hold both flows' records, and deleting it when one source's topic goes would delete the other's. Turn sync_topic_deletions off for this flow, or use the default policy",
                    p.id, q.id, p.id.target
                ),
            });
            continue;
        }
        let Some(path) = topology::shortest_path(&edges, &p.id.target, &p.id.source) else { continue };
        let mut cycle = vec![p.id.source.clone()];
        cycle.extend(path);
        cycle.pop();
        errors.push(ConfigError {
            file: p.file.clone(),
            line: None,
            key: "sync_topic_deletions".to_string(),
            reason: format!(
                "flow {} uses the identity policy on the replication cycle {}: its remote topics are also `{}`'s own topics, written there too; deleting them when the source's go would delete that data. Turn sync_topic_deletions off for this flow, or use the default policy",
                p.id,
                topology::show_cycle(&cycle),
                p.id.target
            ),
        });
    }
}

/// The two flows of a cluster pair with different `offset_syncs_topic_location`s (`a->b` with
/// `"source"`, `b->a` with `"target"`) both write `mm2-offset-syncs.b.internal` on `a`. The topic is
/// compacted, keyed by source topic and partition only (MM2's format: no room for a flow), so where both
/// flows copy a topic of the same name (active-active, or a fail-back flow once producers write on the
/// other side) compaction keeps one sync per partition for the two flows together: a flow's newest sync
/// can be dropped for the other's, and its groups translated from an older sync or not at all. Which
/// names the two flows will share is not known before they run (patterns, topics created later), and
/// the keys cannot be told apart, so the set is refused, naming both flows and the topic. Flows that
/// write no syncs, or do not run, share nothing.
fn one_flow_per_offset_syncs_topic(flows: &BTreeMap<FlowId, FlowPlan>, errors: &mut Vec<ConfigError>) {
    let mut writers: BTreeMap<(String, String), Vec<&FlowPlan>> = BTreeMap::new();
    for p in flows.values().filter(|p| p.settings.enabled && p.settings.emit_offset_syncs_enabled) {
        let (cluster, topic) = p.offset_syncs_topic();
        writers.entry((cluster.alias.clone(), topic)).or_default().push(p);
    }
    let location = |p: &FlowPlan| match p.settings.offset_syncs_topic_location {
        OffsetSyncsLocation::Source => "source",
        OffsetSyncsLocation::Target => "target",
    };
    for ((cluster, topic), plans) in writers.into_iter().filter(|(_, plans)| plans.len() > 1) {
        let named: Vec<String> = plans
            .iter()
            .map(|p| format!("{} (offset_syncs_topic_location = \"{}\", {})", p.id, location(p), p.file.display()))
            .collect();
        let last = plans[plans.len() - 1];
        errors.push(ConfigError {
            file: last.file.clone(),
            line: None,
            key: "offset_syncs_topic_location".to_string(),
            reason: format!(
                "flows {} {} write their offset syncs to {topic} on cluster `{cluster}`: the topic is compacted by \
                 source topic and partition alone, so for a topic name both flows copy, compaction keeps only the \
                 newer of their syncs of each partition, and a flow may translate its groups from an older sync or \
                 none; give the flows the same offset_syncs_topic_location (\"target\" on both keeps the sources \
                 read-only; the flow that moves starts a new sync history in its new topic)",
                named.join(" and "),
                if plans.len() == 2 { "both" } else { "all" }
            ),
        });
    }
}

/// `protect_remote_topics` denies Write to every principal but ferry's own, which it reads from the
/// target's client properties: a flow whose principal they do not say would deny itself or nobody.
fn protected_flows_know_their_principal(flows: &BTreeMap<FlowId, FlowPlan>, errors: &mut Vec<ConfigError>) {
    for p in flows.values().filter(|p| p.settings.protect_remote_topics) {
        if let Err(e) = super::principal::own_principal(&p.target) {
            errors.push(ConfigError {
                file: p.file.clone(),
                line: None,
                key: "protect_remote_topics".to_string(),
                reason: format!(
                    "flow {}: protection denies Write to every principal but ferry's, and {e}; use SASL \
                     PLAIN/SCRAM, GSSAPI or mutual TLS towards the target, or set protect_remote_topics = false",
                    p.id
                ),
            });
        }
    }
}

/// Gives every header-carrying flow the header-carrying flows it is connected to: the copier routes each
/// record along one of them only (see [`topology`]).
fn share_routes(flows: &mut BTreeMap<FlowId, FlowPlan>) {
    let all = topology::Topology::new(
        flows
            .values()
            .filter(|p| p.settings.enabled && p.settings.provenance())
            .map(|p| {
                let s = &p.settings;
                topology::Edge::new(
                    &p.id.source,
                    &p.id.target,
                    p.topic_filter.clone(),
                    p.policy.clone(),
                    &s.topics,
                    &s.topics_exclude,
                )
            })
            .collect(),
    );
    for plan in flows.values_mut().filter(|p| p.settings.enabled && p.settings.provenance()) {
        plan.topology = Arc::new(all.component_of(&plan.id.source));
    }
}

#[cfg(test)]
mod tests {
    use super::super::validate_cluster::substitute_env;
    use super::super::validate_flow::DEFAULT_TRANSACTION_MAX_BYTES;
    use super::*;
    use crate::config::{Delivery, StartFrom};
    use crate::filter;
    use std::path::Path;
    use std::time::Duration;

    fn parse(files: &[(&str, &str)], env: &dyn Fn(&str) -> Option<String>) -> Result<FlowSet, ConfigErrors> {
        let parsed = files
            .iter()
            .map(|(name, text)| (PathBuf::from(name), toml::from_str::<RawFile>(text).expect("test TOML parses")))
            .collect();
        validate(parsed, env, crate::kafka::check_client_properties)
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    const CLUSTERS: &str = r#"
        [clusters.east]
        bootstrap_servers = "127.0.0.1:19092"
        [clusters.west]
        bootstrap_servers = "127.0.0.1:29092"
    "#;

    #[test]
    fn defaults_are_mm2s() {
        let set =
            parse(&[("c.toml", CLUSTERS), ("f.toml", "[[flows]]\nsource = \"east\"\ntarget = \"west\"\n")], &no_env)
                .expect("valid");
        let plan = set.flows.values().next().expect("one flow");
        assert_eq!(plan.id.to_string(), "east->west");
        let s = &plan.settings;
        assert_eq!(s.topics, vec![".*"]);
        assert_eq!(s.topics_exclude, filter::DEFAULT_TOPICS_EXCLUDE.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(s.groups_exclude, filter::DEFAULT_GROUPS_EXCLUDE.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(s.refresh_topics_interval, Duration::from_secs(600));
        assert_eq!(s.emit_checkpoints_interval, Duration::from_secs(60));
        assert_eq!(s.emit_heartbeats_interval, Duration::from_secs(1));
        assert_eq!(s.offset_lag_max, 100);
        assert!(!s.sync_group_offsets_enabled);
        assert_eq!(s.offset_syncs_topic_location, OffsetSyncsLocation::Source);
        assert_eq!(plan.policy.format_remote_topic("east", "orders"), "east.orders");
        assert_eq!(plan.file, PathBuf::from("f.toml"));
        assert_eq!(
            (s.mm2_offsets_topic.as_str(), s.mm2_source_connector.as_str()),
            ("mm2-offsets.east.internal", "MirrorSourceConnector")
        );
        assert!(s.emit_heartbeats_enabled && s.emit_reverse_heartbeats_enabled && s.emit_checkpoints_enabled);
        assert!(s.emit_offset_syncs_enabled && s.refresh_topics_enabled && s.refresh_groups_enabled);
        assert!(!s.sync_topic_acls_enabled, "ferry's own default");
        assert_eq!(s.sync_topic_acls_interval, Duration::from_secs(600));
        assert_eq!((s.start_from, s.config_properties_exclude.as_ref()), (StartFrom::Earliest, None));
        assert_eq!((s.offset_syncs_rf(), s.checkpoints_rf(), s.heartbeats_rf()), (None, None, None));
        assert_eq!(s.source_writes().len(), 2, "offset syncs and reverse heartbeats");
    }

    #[test]
    fn schema_flows_need_a_registry_on_both_sides_whose_secrets_never_show() {
        use crate::config::schema_registry::{Auth, OnUnknownSchema, SchemaMode};
        let flow = |extra: &str| format!("[[flows]]\nsource = \"east\"\ntarget = \"west\"\n{extra}\n");
        let east = "[clusters.east.schema_registry]\nurl = \"http://r-east:8081/\"\nusername = \"ferry\"\npassword = \"${REG_PW}\"\n";
        let west =
            "[clusters.west.schema_registry]\nurl = \"https://r-west:8081\"\nbearer_token = \"tok-abcdef-123\"\n";
        let env = |k: &str| (k == "REG_PW").then(|| "s3cret-registry-pw".to_string());
        let text =
            |e: ConfigErrors| e.0.iter().map(|e| format!("{}: {}", e.key, e.reason)).collect::<Vec<_>>().join("\n");

        let refused = parse(&[("c.toml", &format!("{CLUSTERS}{east}")), ("f.toml", &flow("schemas = \"sync\""))], &env)
            .expect_err("no registry on west");
        let shown = text(refused);
        assert!(shown.contains("flows[0].schemas") && shown.contains("the target `west` has none"), "{shown}");

        let both = format!("{CLUSTERS}{east}{west}");
        let set = parse(&[("c.toml", &both), ("f.toml", &flow("schemas = \"translate\""))], &env).expect("valid");
        let s = &set.flows.values().next().expect("flow").settings.schemas;
        assert_eq!((s.mode, s.on_unknown), (SchemaMode::Translate, OnUnknownSchema::Hold));
        let source = s.source.as_ref().expect("source registry");
        assert_eq!(source.url, "http://r-east:8081", "the trailing / dropped");
        assert!(matches!(&source.auth, Auth::Basic { password, .. } if password == "s3cret-registry-pw"));
        let shown = format!("{}\n{set:?}", set.describe());
        assert!(!shown.contains("s3cret-registry-pw") && !shown.contains("tok-abcdef-123"), "{shown}");
        assert!(shown.contains("schema registry http://r-east:8081 (basic: ferry, password [redacted])"), "{shown}");
        assert!(shown.contains("schemas=Translate"), "{shown}");

        // A flow without `schemas` carries no registry: a changed registry restarts only the flows using it.
        let off = parse(&[("c.toml", &both), ("f.toml", &flow(""))], &env).expect("valid");
        assert_eq!(off.flows.values().next().expect("flow").settings.schemas, Default::default());

        for (extra, key, why) in [
            ("schemas = \"always\"", "flows[0].schemas", "not a schema mode"),
            (
                "schemas = \"sync\"\non_unknown_schema = \"pass\"",
                "flows[0].on_unknown_schema",
                "only to schemas = \"translate\"",
            ),
            (
                "schemas = \"translate\"\non_unknown_schema = \"drop\"",
                "flows[0].on_unknown_schema",
                "use \"hold\" or \"pass\"",
            ),
            (
                "schemas = \"sync\"\nschemas_refresh_interval_seconds = 0",
                "flows[0].schemas_refresh_interval_seconds",
                "between 1",
            ),
            ("schemas_keys = false", "flows[0].schemas_keys", "only to schemas = \"sync\" or \"translate\""),
        ] {
            let shown = text(parse(&[("c.toml", &both), ("f.toml", &flow(extra))], &env).expect_err(extra));
            assert!(shown.contains(key) && shown.contains(why), "{extra}: {shown}");
        }
        for (registry, key, why) in [
            ("url = \"registry:8081\"", "url", "http:// or https://"),
            ("url = \"http://r\"\nusername = \"u\"", "password", "set password too"),
            ("url = \"http://r\"\npassword = \"p\"", "username", "set username too"),
            (
                "url = \"http://r\"\nusername = \"u\"\npassword = \"p\"\nbearer_token = \"t\"",
                "bearer_token",
                "not both",
            ),
            ("url = \"https://\"", "url", "http:// or https://"),
            ("url = \"https://u:pw-in-url@r:8081\"", "url", "must not hold credentials"),
            ("url = \"http://r\"\nca_file = \"/nonexistent/ca.pem\"", "ca_file", "cannot read"),
            ("url = \"http://r\"\ntimeout_seconds = 0", "timeout_seconds", "between 0.1"),
        ] {
            let clusters = format!("{CLUSTERS}[clusters.east.schema_registry]\n{registry}\n");
            let shown = text(parse(&[("c.toml", &clusters)], &env).expect_err(registry));
            assert!(
                shown.contains(&format!("clusters.east.schema_registry.{key}")) && shown.contains(why),
                "{registry}: {shown}"
            );
            assert!(!shown.contains("pw-in-url"), "a credential in an error: {shown}");
        }
    }

    #[test]
    fn mm2s_switches_and_what_a_flow_writes_to_its_source() {
        let flow = "[[flows]]\nsource = \"east\"\ntarget = \"west\"\nreplication_factor = 3\n\
                    checkpoints_topic_replication_factor = -1\nheartbeats_topic_replication_factor = 1\n\
                    offset_syncs_topic_location = \"target\"\nemit_reverse_heartbeats_enabled = false\n\
                    config_properties_exclude = [\"retention\\\\..*\"]\nstart_from = \"latest\"\n";
        let set = parse(&[("a.toml", &format!("{CLUSTERS}\n{flow}"))], &no_env).expect("valid");
        let s = &set.flows.values().next().expect("flow").settings;
        assert_eq!((s.offset_syncs_rf(), s.checkpoints_rf(), s.heartbeats_rf()), (Some(3), None, Some(1)));
        assert_eq!(s.config_properties_exclude.as_deref(), Some(&["retention\\..*".to_string()][..]));
        assert_eq!(s.start_from, StartFrom::Latest);
        assert!(s.source_writes().is_empty(), "a read-only source flow: {:?}", s.source_writes());
        assert!(set.describe().contains("writes nothing to source `east`"), "{}", set.describe());

        let flow = "[[flows]]\nsource = \"east\"\ntarget = \"west\"\nemit_offset_syncs_enabled = false\n\
                    checkpoints_topic_replication_factor = 0\nconfig_properties_exclude = [\"a{\"]\n\
                    start_from = \"yesterday\"\n";
        let errs = parse(&[("a.toml", &format!("{CLUSTERS}\n{flow}"))], &no_env).expect_err("invalid").0;
        let keys: Vec<&str> = errs.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "flows[0].checkpoints_topic_replication_factor",
                "flows[0].config_properties_exclude[0]",
                "flows[0].start_from",
                "flows[0].emit_offset_syncs_enabled"
            ],
            "{errs:?}"
        );
        let flow = "[[flows]]\nsource = \"east\"\ntarget = \"west\"\nemit_offset_syncs_enabled = false\n\
                    emit_checkpoints_enabled = false\n";
        let set =
            parse(&[("a.toml", &format!("{CLUSTERS}\n{flow}"))], &no_env).expect("syncs off with nothing to translate");
        assert!(!set.flows.values().next().expect("flow").settings.runs_checkpoints());
    }

    #[test]
    fn two_flows_writing_one_offset_syncs_topic_are_refused_naming_both_and_the_topic() {
        let flows = |east_west: &str, west_east: &str| {
            let flow =
                |s: &str, t: &str, extra: &str| format!("[[flows]]\nsource = \"{s}\"\ntarget = \"{t}\"\n{extra}\n");
            let at = |l: &str| {
                if l.contains('=') { l.to_string() } else { format!("offset_syncs_topic_location = \"{l}\"") }
            };
            let files = [
                ("c.toml", CLUSTERS.to_string()),
                ("ew.toml", flow("east", "west", &at(east_west))),
                ("we.toml", flow("west", "east", &at(west_east))),
            ];
            let files: Vec<(&str, &str)> = files.iter().map(|(n, t)| (*n, t.as_str())).collect();
            parse(&files, &no_env)
        };
        // The same setting: a topic each (mm2-offset-syncs.west.internal on east, .east. on west).
        for l in ["source", "target"] {
            flows(l, l).unwrap_or_else(|e| panic!("{l} on both: {e}"));
        }
        // Different settings: both flows write one topic.
        for (ew, we, topic, cluster) in [
            ("source", "target", "mm2-offset-syncs.west.internal", "east"),
            ("target", "source", "mm2-offset-syncs.east.internal", "west"),
        ] {
            let errs = flows(ew, we).expect_err("one topic for two flows").0;
            assert_eq!(errs.len(), 1, "{errs:?}");
            let e = &errs[0];
            assert_eq!((e.file.to_str(), e.key.as_str()), (Some("we.toml"), "offset_syncs_topic_location"), "{e:?}");
            for part in ["east->west", "west->east", "ew.toml", &format!("{topic} on cluster `{cluster}`"), "compact"] {
                assert!(e.reason.contains(part), "`{part}` in: {}", e.reason);
            }
        }
        // A flow that writes no syncs, or does not run, shares nothing.
        let silent = "offset_syncs_topic_location = \"target\"\nemit_offset_syncs_enabled = false\nemit_checkpoints_enabled = false";
        flows("source", silent).expect("the second flow writes no syncs");
        flows("source", "offset_syncs_topic_location = \"target\"\nenabled = false")
            .expect("the second flow is disabled");
    }

    #[test]
    fn delivery_is_at_least_once_unless_exactly_once_is_asked_for() {
        let parse_flow = |extra: &str| {
            let flow = format!("[[flows]]\nsource = \"east\"\ntarget = \"west\"\n{extra}");
            parse(&[("a.toml", &format!("{CLUSTERS}\n{flow}"))], &no_env)
        };
        let set = parse_flow("").expect("valid");
        assert_eq!(set.flows.values().next().expect("flow").settings.delivery, Delivery::AtLeastOnce);
        let set = parse_flow("delivery = \"exactly_once\"\ntransaction_interval_ms = 250\n").expect("valid");
        let s = &set.flows.values().next().expect("flow").settings;
        assert_eq!((s.delivery, s.transaction_interval), (Delivery::ExactlyOnce, Duration::from_millis(250)));
        assert_eq!(s.transaction_max_bytes, DEFAULT_TRANSACTION_MAX_BYTES as usize);
        assert!(set.describe().contains("delivery=exactly_once transaction_interval_ms=250"), "{}", set.describe());
        let errs = parse_flow("delivery = \"twice\"\ntransaction_max_bytes = 5\n").expect_err("invalid").0;
        let keys: Vec<&str> = errs.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["flows[0].delivery", "flows[0].transaction_max_bytes"], "{errs:?}");
        assert!(errs[1].reason.contains("only to delivery = \"exactly_once\""), "{errs:?}");
        let errs = parse_flow("delivery = \"exactly_once\"\ntransaction_interval_ms = 1\n").expect_err("invalid").0;
        assert!(errs[0].reason.contains("between 10 and 30000"), "{errs:?}");
    }

    #[test]
    fn a_protected_flow_must_know_ferrys_principal_on_its_target() {
        let flow = "[[flows]]\nsource = \"east\"\ntarget = \"west\"\nprotect_remote_topics = true\n";
        let errs = parse(&[("a.toml", &format!("{CLUSTERS}\n{flow}"))], &no_env).expect_err("plaintext target").0;
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!((errs[0].file.to_str(), errs[0].key.as_str()), (Some("a.toml"), "protect_remote_topics"));
        assert!(errs[0].reason.contains("east->west") && errs[0].reason.contains("User:ANONYMOUS"), "{errs:?}");
    }

    #[test]
    fn one_node_holds_one_kerberos_principal_per_realm() {
        let dir = tempfile::tempdir().expect("dir");
        let keytab = dir.path().join("k.keytab");
        std::fs::write(&keytab, b"\x05\x02not parsed here").expect("write keytab");
        let kerberos = |alias: &str, principal: &str| {
            format!(
                "[clusters.{alias}]\nbootstrap_servers = \"{alias}:9092\"\n[clusters.{alias}.client]\n\
                 \"security.protocol\" = \"SASL_PLAINTEXT\"\n\"sasl.mechanism\" = \"GSSAPI\"\n\
                 \"sasl.kerberos.principal\" = \"{principal}\"\n\"sasl.kerberos.keytab\" = \"{}\"\n",
                keytab.display()
            )
        };
        let flows = "[[flows]]\nsource = \"a\"\ntarget = \"b\"\n[[flows]]\nsource = \"a\"\ntarget = \"c\"\n";
        // The same principal for two clusters, another realm's for the third: fine.
        let same = [kerberos("a", "ferry@CORP"), kerberos("b", "ferry@CORP"), kerberos("c", "mirror@LAB")].concat();
        parse(&[("x.toml", &format!("{same}{flows}"))], &no_env).expect("one principal per realm");
        // A second principal of realm CORP is refused, naming both clusters and the earlier file.
        let two = [kerberos("a", "ferry@CORP"), kerberos("b", "ferry@CORP"), kerberos("c", "auditor@CORP")].concat();
        let errs = parse(&[("x.toml", &format!("{two}{flows}"))], &no_env).expect_err("two principals").0;
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].key, "clusters.c.client.\"sasl.kerberos.principal\"");
        assert!(
            errs[0].reason.contains("`auditor@CORP`") && errs[0].reason.contains("`ferry@CORP`"),
            "{}",
            errs[0].reason
        );
        // A principal without its realm, or no keytab: named.
        let bare =
            kerberos("a", "ferry").replace(&format!("\"sasl.kerberos.keytab\" = \"{}\"\n", keytab.display()), "");
        let errs =
            parse(&[("x.toml", &format!("{bare}{}", kerberos("b", "ferry@CORP")))], &no_env).expect_err("bare").0;
        assert!(errs.iter().any(|e| e.key == "clusters.a.client.\"sasl.kerberos.principal\""), "{errs:?}");
    }

    #[test]
    fn progress_of_a_connect_run_mm2_is_named_by_two_keys() {
        let flow = "[[flows]]\nsource = \"east\"\ntarget = \"west\"\nmm2_offsets_topic = \"mirrormaker2-cluster-offsets\"\n\
                    mm2_source_connector = \"east->west.MirrorSourceConnector\"\n";
        let set = parse(&[("a.toml", &format!("{CLUSTERS}\n{flow}"))], &no_env).expect("valid");
        let s = &set.flows.values().next().expect("flow").settings;
        assert_eq!(s.mm2_offsets_topic, "mirrormaker2-cluster-offsets");
        assert_eq!(s.mm2_source_connector, "east->west.MirrorSourceConnector");

        let flow = "[[flows]]\nsource = \"east\"\ntarget = \"west\"\nmm2_offsets_topic = \"no/slash\"\nmm2_source_connector = \" \"\n";
        let errs = parse(&[("a.toml", &format!("{CLUSTERS}\n{flow}"))], &no_env).expect_err("invalid").0;
        let keys: Vec<&str> = errs.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["flows[0].mm2_offsets_topic", "flows[0].mm2_source_connector"], "{errs:?}");
        assert!(errs[0].reason.contains("is not a Kafka topic name"), "{}", errs[0].reason);
    }

    #[test]
    fn fractional_intervals_are_accepted() {
        let flow = "[[flows]]\nsource = \"east\"\ntarget = \"west\"\nrefresh_topics_interval_seconds = 0.5\n";
        let set = parse(&[("a.toml", &format!("{CLUSTERS}\n{flow}"))], &no_env).expect("valid");
        let plan = set.flows.values().next().expect("flow");
        assert_eq!(plan.settings.refresh_topics_interval, Duration::from_millis(500));
    }

    #[test]
    fn every_error_is_reported_with_file_and_key() {
        let flow = r#"
            [[flows]]
            source = "east"
            target = "north"
            topics = ["ok", "(unclosed"]
            refresh_topics_interval_seconds = -1
            replication_policy = "fancy"
        "#;
        let errs = parse(&[("c.toml", CLUSTERS), ("bad.toml", flow)], &no_env).expect_err("invalid").0;
        let keys: Vec<_> =
            errs.iter().map(|e| (e.file.to_str().unwrap_or_default().to_string(), e.key.clone())).collect();
        for key in [
            "flows[0].target",
            "flows[0].topics[1]",
            "flows[0].refresh_topics_interval_seconds",
            "flows[0].replication_policy",
        ] {
            assert!(keys.contains(&("bad.toml".to_string(), key.to_string())), "missing {key} in {keys:?}");
        }
        let unknown = errs.iter().find(|e| e.key == "flows[0].target").expect("target error");
        assert!(unknown.reason.contains("unknown cluster `north`"), "{}", unknown.reason);
    }

    #[test]
    fn env_vars_are_substituted_and_missing_ones_named() {
        let text = r#"
            [clusters.east]
            bootstrap_servers = "${EAST_BOOTSTRAP}"
            [clusters.east.client]
            "sasl.password" = "${EAST_PASSWORD}"
        "#;
        let env = |n: &str| (n == "EAST_BOOTSTRAP").then(|| "10.0.0.1:9092".to_string());
        let errs = parse(&[("s.toml", text)], &env).expect_err("missing var").0;
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].key, "clusters.east.client.\"sasl.password\"");
        assert!(errs[0].reason.contains("EAST_PASSWORD"));

        let env = |n: &str| Some(format!("<{n}>"));
        let set = parse(&[("s.toml", text)], &env).expect("valid");
        let east = &set.clusters["east"];
        assert_eq!(east.bootstrap_servers, "<EAST_BOOTSTRAP>");
        assert_eq!(east.client["sasl.password"], "<EAST_PASSWORD>");
        assert!(!format!("{east:?}").contains("<EAST_PASSWORD>"), "Debug must redact secrets");
        assert!(!set.describe().contains("<EAST_PASSWORD>"), "describe must redact secrets");
    }

    #[test]
    fn secret_files_are_read_trimmed_tracked_and_redacted() {
        let dir = tempfile::tempdir().expect("dir");
        let secret = dir.path().join("password");
        std::fs::write(&secret, "SECRET-from-file\n").expect("write");
        let text = format!(
            "[clusters.east]\nbootstrap_servers = \"e:1\"\n[clusters.east.client]\n\"sasl.password\" = \"${{file:{}}}\"\n\
             \"ssl.ca.pem\" = \"${{file:ca}}\"\n",
            secret.display()
        );
        std::fs::write(dir.path().join("ca"), "not really a PEM").expect("write");
        let flow = dir.path().join("c.toml");
        let parsed = vec![(flow.clone(), toml::from_str::<RawFile>(&text).expect("TOML"))];
        // ssl.ca.pem is checked by librdkafka only when a TLS client is built; plaintext here.
        let set = validate(parsed, &no_env, crate::kafka::check_client_properties).expect("valid");
        let east = &set.clusters["east"];
        assert_eq!(east.client["sasl.password"], "SECRET-from-file");
        assert_eq!(set.secret_files(), vec![dir.path().join("ca"), secret.clone()]);
        assert!(east.is_secret("ssl.ca.pem"), "a value from a file is secret whatever its key");
        assert!(!set.describe().contains("SECRET-from-file") && !set.describe().contains("not really"));

        std::fs::remove_file(&secret).expect("rm");
        let parsed = vec![(flow, toml::from_str::<RawFile>(&text).expect("TOML"))];
        let errs = validate(parsed, &no_env, crate::kafka::check_client_properties).expect_err("missing file").0;
        assert_eq!(errs[0].key, "clusters.east.client.\"sasl.password\"");
        assert!(
            errs[0].reason.contains(&format!("cannot read secret file {}", secret.display())),
            "{}",
            errs[0].reason
        );
    }

    #[test]
    fn librdkafka_checks_the_client_properties_and_no_value_is_shown() {
        let text = r#"
            [clusters.east]
            bootstrap_servers = "e:1"
            [clusters.east.client]
            "sasl.jaas.config" = "org.apache.kafka.common.security.plain.PlainLoginModule required password='SECRET-jaas';"
            "security.protocol" = "SECRET-protocol"
            "no.such.property" = "x"
            [clusters.west]
            bootstrap_servers = "w:1"
            [clusters.west.client]
            "security.protocol" = "ssl"
            "ssl.ca.location" = "/nonexistent/ca.pem"
            "ssl.key.password" = "SECRET-key-password"
            [clusters.north]
            bootstrap_servers = "n:1"
            [clusters.north.client]
            "enable.idempotence" = true
            "max.in.flight.requests.per.connection" = 20
        "#;
        let errs = parse(&[("c.toml", text)], &no_env).expect_err("refused").0;
        let shown: Vec<String> = errs.iter().map(ToString::to_string).collect();
        for e in &shown {
            assert!(!e.contains("SECRET"), "{e}");
        }
        let find = |key: &str| {
            errs.iter()
                .find(|e| e.key == key)
                .unwrap_or_else(|| panic!("no error for {key}: {shown:#?}"))
                .reason
                .clone()
        };
        assert!(find("clusters.east.client.\"sasl.jaas.config\"").contains("sasl.username"));
        assert!(find("clusters.east.client.\"security.protocol\"").contains("invalid value"));
        assert!(find("clusters.east.client.\"no.such.property\"").contains("no property"));
        assert!(find("clusters.west.client.\"ssl.ca.location\"").contains("ssl.ca.location"));
        assert!(errs.iter().any(|e| e.key.starts_with("clusters.north.client")), "{shown:#?}");
    }

    #[test]
    fn substitution_rules() {
        let env = |n: &str| (n == "A").then(|| "x".to_string());
        assert_eq!(substitute_env("a${A}b${A}", &env).as_deref(), Ok("axbx"));
        assert_eq!(substitute_env("plain", &env).as_deref(), Ok("plain"));
        assert!(substitute_env("${A", &env).is_err());
        assert!(substitute_env("${B}", &env).expect_err("missing").contains('B'));
    }

    #[test]
    fn duplicates_across_files_name_both() {
        let flow = "[[flows]]\nsource = \"east\"\ntarget = \"west\"\n";
        let errs = parse(&[("c.toml", CLUSTERS), ("d.toml", CLUSTERS), ("f1.toml", flow), ("f2.toml", flow)], &no_env)
            .expect_err("dup")
            .0;
        assert!(errs.iter().any(|e| e.file == Path::new("d.toml") && e.reason.contains("already defined in c.toml")));
        assert!(errs.iter().any(|e| e.file == Path::new("f2.toml") && e.reason.contains("already defined in f1.toml")));
    }

    #[test]
    fn aliases_must_be_topic_safe() {
        let text = "[clusters.\"ea.st\"]\nbootstrap_servers = \"x:1\"\n";
        let errs = parse(&[("a.toml", text)], &no_env).expect_err("bad alias").0;
        assert_eq!(errs[0].key, "clusters.ea.st");
    }

    fn identity_flow(source: &str, target: &str, extra: &str) -> String {
        format!("[[flows]]\nsource = \"{source}\"\ntarget = \"{target}\"\nreplication_policy = \"identity\"\n{extra}")
    }

    const THREE: &str = "[clusters.a]\nbootstrap_servers = \"a:9092\"\n[clusters.b]\nbootstrap_servers = \"b:9092\"\n[clusters.c]\nbootstrap_servers = \"c:9092\"\n";

    #[test]
    fn deletions_that_follow_are_refused_for_identity_flows_on_a_cycle() {
        let deleting = identity_flow("a", "b", "sync_topic_deletions = true\n");
        let dry = identity_flow("a", "b", "sync_topic_deletions = \"dry_run\"\n");
        let ba = identity_flow("b", "a", "");
        // One way, or the default policy both ways: valid.
        parse(&[("c.toml", THREE), ("ab.toml", &deleting)], &no_env).expect("no cycle");
        let default_ab = "[[flows]]\nsource = \"a\"\ntarget = \"b\"\nsync_topic_deletions = true\n";
        let default_ba = "[[flows]]\nsource = \"b\"\ntarget = \"a\"\n";
        parse(&[("c.toml", THREE), ("ab.toml", default_ab), ("ba.toml", default_ba)], &no_env).expect("default policy");
        for ab in [&deleting, &dry] {
            let err = parse(&[("c.toml", THREE), ("ab.toml", ab), ("ba.toml", &ba)], &no_env).expect_err("refused");
            assert_eq!(err.0.len(), 1, "{err}");
            assert_eq!(
                (err.0[0].file.as_path(), err.0[0].key.as_str()),
                (Path::new("ab.toml"), "sync_topic_deletions")
            );
            assert!(err.0[0].reason.contains("flow a->b") && err.0[0].reason.contains("a->b->a"), "{err}");
        }
        // Fan-in under identity: refused too.
        let cb = identity_flow("c", "b", "");
        let err = parse(&[("c.toml", THREE), ("ab.toml", &deleting), ("cb.toml", &cb)], &no_env).expect_err("fan-in");
        assert!(err.0[0].reason.contains("flow c->b copies into `b`"), "{err}");
        let bad = identity_flow("a", "b", "sync_topic_deletions = \"yes\"\ntopic_deletion_grace_seconds = 0\n");
        let err = parse(&[("c.toml", THREE), ("ab.toml", &bad)], &no_env).expect_err("refused").to_string();
        assert!(err.contains("flows[0].sync_topic_deletions") && err.contains("`yes` is not a choice"), "{err}");
        assert!(err.contains("flows[0].topic_deletion_grace_seconds"), "{err}");
    }

    #[test]
    fn identity_cycles_need_the_provenance_header_on_every_flow() {
        let ab = identity_flow("a", "b", "");
        let ba = identity_flow("b", "a", "");
        // Protected active-active, and an acyclic chain without the header: valid.
        parse(&[("c.toml", THREE), ("ab.toml", &ab), ("ba.toml", &ba)], &no_env).expect("header on both flows");
        let ab_off = identity_flow("a", "b", "provenance_header = false\n");
        let bc_off = identity_flow("b", "c", "provenance_header = false\n");
        parse(&[("c.toml", THREE), ("ab.toml", &ab_off), ("bc.toml", &bc_off)], &no_env).expect("no cycle");

        // The header off on one flow of a pair: that flow is refused, by file and flow.
        let err = parse(&[("c.toml", THREE), ("ab.toml", &ab_off), ("ba.toml", &ba)], &no_env).expect_err("loop");
        assert_eq!(err.0.len(), 1, "{err}");
        assert_eq!(err.0[0].file, PathBuf::from("ab.toml"));
        assert!(
            err.0[0].reason.contains("flow a->b") && err.0[0].reason.contains("provenance_header = false"),
            "{err}"
        );
        assert!(err.0[0].reason.contains("cycle a->b->a"), "the cycle is named: {err}");

        // A ring mixing the identity and default policies: the default flow is named.
        let bc = "[[flows]]\nsource = \"b\"\ntarget = \"c\"\n";
        let ca = identity_flow("c", "a", "");
        let err = parse(&[("c.toml", THREE), ("ab.toml", &ab), ("bc.toml", bc), ("ca.toml", &ca)], &no_env)
            .expect_err("mixed ring");
        assert_eq!(err.0.len(), 1, "{err}");
        assert!(err.0[0].reason.contains("flow b->c") && err.0[0].reason.contains("identity-policy flows"), "{err}");
        assert!(err.0[0].reason.contains("cycle b->c->a->b"), "the cycle is named: {err}");

        // A disabled flow closes no cycle.
        let ba_disabled = identity_flow("b", "a", "enabled = false\n");
        parse(&[("c.toml", THREE), ("ab.toml", &ab_off), ("ba.toml", &ba_disabled)], &no_env).expect("disabled");
    }

    #[test]
    fn meshes_feeders_and_rings_with_the_header_are_accepted_and_share_their_routes() {
        let flow = |s: &str, t: &str| identity_flow(s, t, "");
        let mesh: String = [("a", "b"), ("a", "c"), ("b", "a"), ("b", "c"), ("c", "a"), ("c", "b")]
            .iter()
            .map(|(s, t)| flow(s, t))
            .collect();
        let borrowed = [("c.toml", THREE), ("mesh.toml", mesh.as_str())];
        let set = parse(&borrowed, &no_env).expect("a full mesh with the header");
        for plan in set.flows.values() {
            assert_eq!(plan.topology.edges().len(), 6, "{} routes with the whole mesh", plan.id);
        }
        let feeder = [flow("a", "b"), flow("b", "c"), flow("c", "b")];
        let set = parse(
            &[("c.toml", THREE), ("1.toml", &feeder[0]), ("2.toml", &feeder[1]), ("3.toml", &feeder[2])],
            &no_env,
        )
        .expect("a feeder into a pair");
        let bc = &set.flows[&FlowId { source: "b".into(), target: "c".into() }];
        assert_eq!(bc.topology.parents_into("c", "orders")["a"], "b", "a's records reach c through b");

        // Flows without the header share no routes, and a flow's routes are part of its plan: a change of
        // another flow of its component restarts it, a default-policy flow is never concerned.
        let ab_default = "[[flows]]\nsource = \"a\"\ntarget = \"b\"\n";
        let before = parse(
            &[("c.toml", THREE), ("1.toml", &feeder[1]), ("2.toml", &feeder[2]), ("3.toml", ab_default)],
            &no_env,
        )
        .expect("valid");
        let after = parse(
            &[("c.toml", THREE), ("1.toml", &feeder[1]), ("2.toml", &feeder[2]), ("3.toml", &feeder[0])],
            &no_env,
        )
        .expect("valid");
        let id = |s: &str, t: &str| FlowId { source: s.into(), target: t.into() };
        assert!(before.flows[&id("a", "b")].topology.edges().is_empty());
        assert_ne!(before.flows[&id("b", "c")], after.flows[&id("b", "c")], "b->c's routes changed");
    }

    #[test]
    fn same_pair_reversed_is_a_second_flow() {
        let flows =
            "[[flows]]\nsource = \"east\"\ntarget = \"west\"\n[[flows]]\nsource = \"west\"\ntarget = \"east\"\n";
        let set = parse(&[("a.toml", &format!("{CLUSTERS}\n{flows}"))], &no_env).expect("valid");
        assert_eq!(set.flows.len(), 2);
    }
}
