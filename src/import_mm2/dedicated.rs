//! Dedicated mode's `mm2.properties` (MirrorMakerConfig) into the common [`Mm2Config`]: `clusters`,
//! `<alias>.<key>` per cluster, top-level keys for every cluster and flow, `S->T.<key>` per flow (winning
//! over the top level), and only the flows with `S->T.enabled = true`.

use std::collections::BTreeMap;

use super::model::{Cluster, Flow, Mm2Config, Prop};
use crate::mm2::connect_offsets;

/// Java client properties about how to connect: at the top level they apply to every cluster.
pub fn is_connection_key(key: &str) -> bool {
    key == "security.protocol" || key.starts_with("ssl.") || key.starts_with("sasl.")
}

pub fn read(props: &BTreeMap<String, (String, usize)>) -> Result<Mm2Config, Vec<String>> {
    let mut cfg = Mm2Config::default();
    let Some((list, _)) = props.get("clusters") else {
        return Err(vec!["clusters: missing (the list of cluster aliases, e.g. `clusters = east, west`)".into()]);
    };
    let aliases: Vec<String> = list.split(',').map(|a| a.trim().to_string()).filter(|a| !a.is_empty()).collect();
    let mut clusters: BTreeMap<String, Cluster> =
        aliases.iter().map(|a| (a.clone(), Cluster { alias: a.clone(), ..Cluster::default() })).collect();
    let mut flows: BTreeMap<(String, String), BTreeMap<String, Prop>> = BTreeMap::new();
    let mut top: BTreeMap<String, Prop> = BTreeMap::new();
    let mut worker: BTreeMap<String, Prop> = BTreeMap::new();

    for (key, (value, _)) in props {
        let prop = Prop::new(value.clone(), key.clone());
        if key == "clusters" {
            continue;
        }
        if let Some((pair, rest)) = flow_key(key, &aliases) {
            flows.entry(pair).or_default().insert(rest.to_string(), prop);
            continue;
        }
        if let Some((alias, rest)) = aliases.iter().find_map(|a| key.strip_prefix(&format!("{a}.")).map(|r| (a, r))) {
            let cluster = clusters.get_mut(alias).expect("alias listed");
            if rest == "bootstrap.servers" {
                cluster.bootstrap = Some(prop);
            } else if rest == "offset.storage.topic" {
                worker.insert(alias.clone(), prop);
            } else if rest.starts_with("consumer.") || rest.starts_with("producer.") || rest.starts_with("admin.") {
                cfg.skip(key, "per-client tuning: ferry gives all clients of a cluster the same properties; set librdkafka equivalents under [clusters.X.client] by hand");
            } else if is_connection_key(rest) {
                cluster.client.insert(rest.to_string(), prop);
            } else {
                cfg.skip(key, "a Connect worker or client setting of the cluster with no ferry equivalent");
            }
            continue;
        }
        top.insert(key.clone(), prop);
    }

    for cluster in clusters.values_mut() {
        for (k, p) in top.iter().filter(|(k, _)| is_connection_key(k)) {
            cluster.client.entry(k.clone()).or_insert_with(|| p.clone());
        }
    }
    let mut dropped_top: Vec<String> = top.keys().filter(|k| !is_connection_key(k)).cloned().collect();
    let is_enabled =
        |own: &BTreeMap<String, Prop>| own.get("enabled").is_some_and(|p| p.value.trim().eq_ignore_ascii_case("true"));
    let enabled_pairs: Vec<(String, String)> =
        flows.iter().filter(|(_, own)| is_enabled(own)).map(|(pair, _)| pair.clone()).collect();
    // MM2 runs a heartbeat-only herder for every pair that is not enabled, so `T->S`'s
    // `emit.heartbeats.enabled` decides whether heartbeats go into S: in ferry, flow S->T's reverse ones.
    let reverse_heartbeats = |source: &str, target: &str| -> Option<Prop> {
        let reverse = flows.get(&(target.to_string(), source.to_string()));
        reverse
            .and_then(|own| own.get("emit.heartbeats.enabled"))
            .or_else(|| top.get("emit.heartbeats.enabled"))
            .cloned()
    };
    // When T->S is a flow of its own, its heartbeats into S are the same records: one writer is enough.
    let reverse_props: BTreeMap<(String, String), Prop> = enabled_pairs
        .iter()
        .filter_map(|(s, t)| {
            let prop = if enabled_pairs.contains(&(t.clone(), s.clone())) {
                Some(Prop::new("false", format!("(flow {t}->{s} writes these heartbeats into {s} itself)")))
            } else {
                reverse_heartbeats(s, t)
            };
            prop.map(|p| ((s.clone(), t.clone()), p))
        })
        .collect();
    for ((source, target), own) in flows {
        if !is_enabled(&own) {
            for k in own.keys() {
                if k == "emit.heartbeats.enabled" && enabled_pairs.contains(&(target.clone(), source.clone())) {
                    continue; // carried over as the reverse flow's emit_reverse_heartbeats_enabled
                }
                cfg.skip(
                    format!("{source}->{target}.{k}"),
                    "the flow is not enabled (`S->T.enabled = true`), so no flow file is written for it",
                );
            }
            continue;
        }
        let mut merged: BTreeMap<String, Prop> =
            top.iter().filter(|(k, _)| !is_connection_key(k)).map(|(k, p)| (k.clone(), p.clone())).collect();
        merged.extend(own.into_iter().filter(|(k, _)| k != "enabled"));
        if let Some(p) = reverse_props.get(&(source.clone(), target.clone())) {
            merged.insert(REVERSE_HEARTBEATS.into(), p.clone());
        }
        let default_topic = || Prop::new(connect_offsets::offsets_topic(&source), "(dedicated MM2's default)");
        cfg.flows.push(Flow {
            offsets_topic: Some(worker.get(&target).cloned().unwrap_or_else(default_topic)),
            source_connector: Some(Prop::new(connect_offsets::SOURCE_CONNECTOR, "(dedicated MM2's connector name)")),
            source,
            target,
            props: merged,
        });
        dropped_top.clear(); // top-level keys are reported through the flows that use them
    }
    for k in dropped_top {
        cfg.skip(k, "no enabled flow uses it");
    }
    cfg.clusters = clusters.into_values().collect();
    Ok(cfg)
}

/// The key under which a flow carries whether MM2 wrote heartbeats into its source (no MM2 key: the
/// reverse pair's `emit.heartbeats.enabled`, or nothing at all in Strimzi's case).
pub const REVERSE_HEARTBEATS: &str = "(reverse) emit.heartbeats.enabled";

/// `S->T.rest` for listed aliases S and T.
fn flow_key<'a>(key: &'a str, aliases: &[String]) -> Option<((String, String), &'a str)> {
    let (source, after) = key.split_once("->")?;
    let target = aliases.iter().filter(|t| after.starts_with(&format!("{t}."))).max_by_key(|t| t.len())?;
    if !aliases.iter().any(|a| a == source) {
        return None;
    }
    Some(((source.to_string(), target.clone()), &after[target.len() + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import_mm2::properties;

    #[test]
    fn flows_take_top_level_keys_and_their_own_overrides() {
        let props = properties::parse(
            "clusters = east, west\neast.bootstrap.servers = e:9092\nwest.bootstrap.servers = w:9092\n\
             security.protocol = SASL_SSL\nwest.security.protocol = SSL\ntopics = a.*\n\
             east->west.enabled = true\neast->west.topics = b.*\nwest->east.enabled = false\nwest->east.topics = c\n\
             west.offset.storage.topic = my-offsets\n",
        );
        let cfg = read(&props).expect("valid");
        assert_eq!(cfg.flows.len(), 1);
        let flow = &cfg.flows[0];
        assert_eq!((flow.source.as_str(), flow.target.as_str()), ("east", "west"));
        assert_eq!(flow.props["topics"], Prop::new("b.*", "east->west.topics"));
        assert_eq!(flow.offsets_topic.as_ref().map(|p| p.value.as_str()), Some("my-offsets"));
        let east = &cfg.clusters[0];
        assert_eq!(east.client["security.protocol"].value, "SASL_SSL");
        assert_eq!(cfg.clusters[1].client["security.protocol"].value, "SSL");
        assert!(cfg.unmapped.iter().any(|u| u.key == "west->east.topics"), "{:?}", cfg.unmapped);
        assert!(!flow.props.contains_key(REVERSE_HEARTBEATS), "MM2's default: heartbeats into the source too");
    }

    #[test]
    fn the_reverse_pairs_heartbeat_switch_is_the_flows_reverse_heartbeats() {
        let base = "clusters = east, west\neast.bootstrap.servers = e:9092\nwest.bootstrap.servers = w:9092\n\
                    east->west.enabled = true\n";
        let cfg =
            read(&properties::parse(&format!("{base}west->east.emit.heartbeats.enabled = false\n"))).expect("valid");
        assert_eq!(cfg.flows[0].props[REVERSE_HEARTBEATS], Prop::new("false", "west->east.emit.heartbeats.enabled"));
        assert!(cfg.unmapped.is_empty(), "{:?}", cfg.unmapped);
        assert!(!cfg.flows[0].props.contains_key("emit.heartbeats.enabled"));
        // The top level applies to every pair, the reverse one included.
        let cfg = read(&properties::parse(&format!("{base}emit.heartbeats.enabled = false\n"))).expect("valid");
        assert_eq!(cfg.flows[0].props[REVERSE_HEARTBEATS].value, "false");
        assert_eq!(cfg.flows[0].props["emit.heartbeats.enabled"].value, "false");
        // Both directions enabled: each flow's own heartbeats reach the other's source; no second writer.
        let cfg = read(&properties::parse(&format!("{base}west->east.enabled = true\n"))).expect("valid");
        for flow in &cfg.flows {
            assert_eq!(flow.props[REVERSE_HEARTBEATS].value, "false", "{}->{}", flow.source, flow.target);
        }
    }
}
