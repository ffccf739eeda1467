//! Strimzi's `KafkaMirrorMaker2` resource into the common [`Mm2Config`], in both shapes Strimzi has
//! published: `v1beta2` (`spec.clusters`, `spec.connectCluster`, `mirrors[].sourceCluster` and
//! `targetCluster`) and `v1` (`spec.target`, `mirrors[].source`).
//!
//! Strimzi runs MM2 as connectors on a Connect cluster connected to the target, named
//! `<source>-><target>.MirrorSourceConnector`, with the offsets topic `spec.target.offsetStorageTopic`
//! (v1) or the connect cluster's `config.offset.storage.topic`, default `mirrormaker2-cluster-offsets`
//! (v1beta2). Secrets Strimzi reads from Kubernetes secrets become `${file:DIR/<secret>/<key>}`: ferry's
//! pod is assumed to mount each secret as a directory under `--secrets-dir`.

use std::path::Path;

use yaml_rust2::Yaml;

use super::dedicated::is_connection_key;
use super::model::{Cluster, Flow, Login, Mm2Config, Prop};

/// Strimzi's v1beta2 default for the Connect cluster's `offset.storage.topic`.
pub const DEFAULT_OFFSETS_TOPIC: &str = "mirrormaker2-cluster-offsets";

/// Whether `text` looks like a Kubernetes resource rather than Java properties.
pub fn looks_like_yaml(path: &Path, text: &str) -> bool {
    path.extension().is_some_and(|e| e == "yaml" || e == "yml")
        || text.lines().any(|l| l.starts_with("apiVersion:") || l.starts_with("kind:"))
}

fn scalar(y: &Yaml) -> Option<String> {
    match y {
        Yaml::String(s) | Yaml::Real(s) => Some(s.clone()),
        Yaml::Integer(i) => Some(i.to_string()),
        Yaml::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

fn entries(y: &Yaml) -> Vec<(String, &Yaml)> {
    match y {
        Yaml::Hash(h) => h.iter().filter_map(|(k, v)| scalar(k).map(|k| (k, v))).collect(),
        _ => Vec::new(),
    }
}

pub fn read(text: &str, secrets_dir: &Path) -> Result<Mm2Config, Vec<String>> {
    let docs = yaml_rust2::YamlLoader::load_from_str(text).map_err(|e| vec![format!("invalid YAML: {e}")])?;
    let Some(doc) = docs.iter().find(|d| d["kind"].as_str() == Some("KafkaMirrorMaker2")) else {
        return Err(vec!["no `kind: KafkaMirrorMaker2` document in the file".into()]);
    };
    let spec = &doc["spec"];
    let mut cfg = Mm2Config::default();
    let mut errors = Vec::new();
    for (k, _) in entries(spec) {
        if !matches!(k.as_str(), "clusters" | "connectCluster" | "target" | "mirrors") {
            cfg.skip(
                format!("spec.{k}"),
                "a setting of Strimzi's Connect deployment; ferry's own deployment is configured separately",
            );
        }
    }
    let v1 = !spec["target"].is_badvalue();
    let (target_alias, offsets_topic) = if v1 {
        let target = &spec["target"];
        let c = cluster(target, "spec.target", secrets_dir, &mut cfg, &mut errors);
        for k in ["groupId", "configStorageTopic", "statusStorageTopic"] {
            if !target[k].is_badvalue() {
                cfg.skip(format!("spec.target.{k}"), "Connect's own group and topics: ferry does not use them");
            }
        }
        let offsets = match scalar(&target["offsetStorageTopic"]) {
            Some(t) => Prop::new(t, "spec.target.offsetStorageTopic"),
            None => Prop::new(DEFAULT_OFFSETS_TOPIC, "(Strimzi's default)"),
        };
        let alias = c.alias.clone();
        cfg.clusters.push(c);
        (Some(alias), offsets)
    } else {
        let connect = scalar(&spec["connectCluster"]);
        let mut offsets = Prop::new(DEFAULT_OFFSETS_TOPIC, "(Strimzi's default)");
        for (i, y) in spec["clusters"].as_vec().into_iter().flatten().enumerate() {
            let base = format!("spec.clusters[{i}]");
            let mut c = cluster(y, &base, secrets_dir, &mut cfg, &mut errors);
            if Some(&c.alias) == connect.as_ref()
                && let Some(p) = c.client.remove("offset.storage.topic")
            {
                offsets = p;
            }
            cfg.clusters.push(c);
        }
        (connect, offsets)
    };
    if target_alias.is_none() {
        errors.push("spec.connectCluster: missing (the alias of the cluster Strimzi's Connect runs against)".into());
    }
    for (i, m) in spec["mirrors"].as_vec().into_iter().flatten().enumerate() {
        let base = format!("spec.mirrors[{i}]");
        let source = if v1 {
            let c = cluster(&m["source"], &format!("{base}.source"), secrets_dir, &mut cfg, &mut errors);
            let alias = c.alias.clone();
            if !cfg.clusters.iter().any(|x| x.alias == alias) {
                cfg.clusters.push(c);
            }
            Some(alias)
        } else {
            scalar(&m["sourceCluster"])
        };
        let target = if v1 { target_alias.clone() } else { scalar(&m["targetCluster"]) };
        let (Some(source), Some(target)) = (source, target) else {
            errors.push(format!("{base}: needs a source and a target cluster"));
            continue;
        };
        if Some(&target) != target_alias.as_ref() {
            cfg.skip(
                format!("{base}.targetCluster"),
                "Strimzi's Connect runs against another cluster, so MM2's progress for this mirror is not on its target: ferry starts it without MM2's progress",
            );
        }
        let mut flow = Flow {
            offsets_topic: Some(offsets_topic.clone()),
            source_connector: Some(Prop::new(
                format!("{source}->{target}.MirrorSourceConnector"),
                "(Strimzi's connector name)",
            )),
            source,
            target,
            ..Flow::default()
        };
        for (k, v) in entries(m) {
            let origin = format!("{base}.{k}");
            let mapped = match k.as_str() {
                "topicsPattern" => Some("topics"),
                "topicsExcludePattern" | "topicsBlacklistPattern" => Some("topics.exclude"),
                "groupsPattern" => Some("groups"),
                "groupsExcludePattern" | "groupsBlacklistPattern" => Some("groups.exclude"),
                _ => None,
            };
            if let (Some(key), Some(value)) = (mapped, scalar(v)) {
                flow.props.insert(key.to_string(), Prop::new(value, origin));
                continue;
            }
            match k.as_str() {
                "source" | "sourceCluster" | "targetCluster" => {}
                "sourceConnector" | "checkpointConnector" | "heartbeatConnector" => {
                    for (ck, cv) in entries(v) {
                        if ck == "config" {
                            for (pk, pv) in entries(cv) {
                                let Some(value) = scalar(pv) else { continue };
                                flow.props.insert(pk.clone(), Prop::new(value, format!("{base}.{k}.config.{pk}")));
                            }
                        } else {
                            cfg.skip(format!("{base}.{k}.{ck}"), match ck.as_str() {
                                "tasksMax" => "ferry spreads a flow's partitions over the nodes of its copier group; there is no task count",
                                _ => "a Strimzi connector setting with no ferry equivalent",
                            });
                        }
                    }
                }
                _ => cfg.skip(origin, "a Strimzi mirror setting with no ferry equivalent"),
            }
        }
        // An absent connector emits nothing: the flow's switch says so. Strimzi runs no heartbeats into
        // the source (no reverse pair), which ferry would otherwise write.
        for (connector, key) in
            [("checkpointConnector", "emit.checkpoints.enabled"), ("heartbeatConnector", "emit.heartbeats.enabled")]
        {
            if m[connector].is_badvalue() {
                flow.props
                    .entry(key.into())
                    .or_insert_with(|| Prop::new("false", format!("{base}.{connector} (absent)")));
            }
        }
        flow.props.insert(
            super::dedicated::REVERSE_HEARTBEATS.into(),
            Prop::new("false", "(Strimzi writes no heartbeats into the source cluster)"),
        );
        cfg.flows.push(flow);
    }
    if errors.is_empty() { Ok(cfg) } else { Err(errors) }
}

/// One of Strimzi's cluster specs: alias, bootstrap servers, `tls`, `authentication`, `config`.
fn cluster(y: &Yaml, base: &str, secrets_dir: &Path, cfg: &mut Mm2Config, errors: &mut Vec<String>) -> Cluster {
    let mut c = Cluster { alias: scalar(&y["alias"]).unwrap_or_default(), ..Cluster::default() };
    if c.alias.is_empty() {
        errors.push(format!("{base}.alias: missing"));
    }
    c.bootstrap = scalar(&y["bootstrapServers"]).map(|b| Prop::new(b, format!("{base}.bootstrapServers")));
    let file = |secret: &Yaml, key: &str| -> Option<String> {
        let name = scalar(&secret["secretName"])?;
        let key = scalar(&secret[key])?;
        Some(secrets_dir.join(name).join(key).display().to_string())
    };
    let tls = !y["tls"].is_badvalue();
    if tls {
        let certs = y["tls"]["trustedCertificates"].as_vec().cloned().unwrap_or_default();
        if let Some(first) = certs.first() {
            // A `pattern` (`*.crt`) names no file; Strimzi's cluster CA secrets hold `ca.crt`.
            let name = scalar(&first["certificate"]).unwrap_or_else(|| "ca.crt".into());
            let path = scalar(&first["secretName"]).map(|s| secrets_dir.join(s).join(name).display().to_string());
            if let Some(path) = path {
                c.librdkafka
                    .insert("ssl.ca.location".into(), Prop::new(path, format!("{base}.tls.trustedCertificates[0]")));
            }
        }
        for i in 1..certs.len() {
            cfg.skip(
                format!("{base}.tls.trustedCertificates[{i}]"),
                "librdkafka takes one CA file: concatenate the certificates into the first one's file",
            );
        }
    }
    let auth = &y["authentication"];
    let kind = scalar(&auth["type"]);
    let protocol = match (kind.as_deref(), tls) {
        (Some("scram-sha-256" | "scram-sha-512" | "plain"), true) => "sasl_ssl",
        (Some("scram-sha-256" | "scram-sha-512" | "plain"), false) => "sasl_plaintext",
        (_, true) => "ssl",
        (_, false) => "plaintext",
    };
    if tls || kind.is_some() {
        c.librdkafka.insert("security.protocol".into(), Prop::new(protocol, format!("{base}.tls/authentication")));
    }
    let origin = format!("{base}.authentication");
    match kind.as_deref() {
        None => {}
        Some(k @ ("scram-sha-256" | "scram-sha-512" | "plain")) => {
            let mechanism = match k {
                "plain" => "PLAIN",
                "scram-sha-256" => "SCRAM-SHA-256",
                _ => "SCRAM-SHA-512",
            };
            match (scalar(&auth["username"]), file(&auth["passwordSecret"], "password")) {
                (Some(username), Some(path)) => {
                    c.login = Some(Login::Sasl {
                        mechanism: mechanism.into(),
                        username,
                        password: format!("${{file:{path}}}"),
                        origin,
                    })
                }
                _ => errors.push(format!("{origin}: needs `username` and `passwordSecret` (`secretName`, `password`)")),
            }
        }
        Some("tls") => match (file(&auth["certificateAndKey"], "certificate"), file(&auth["certificateAndKey"], "key"))
        {
            (Some(cert), Some(key)) => {
                c.librdkafka.insert("ssl.certificate.location".into(), Prop::new(cert, origin.clone()));
                c.librdkafka.insert("ssl.key.location".into(), Prop::new(key, origin));
            }
            _ => errors.push(format!("{origin}: needs `certificateAndKey` (`secretName`, `certificate`, `key`)")),
        },
        Some(other) => cfg.skip(
            origin,
            format!(
                "authentication type `{other}` has no ferry equivalent in this build (PLAIN, SCRAM and mutual TLS only)"
            ),
        ),
    }
    for (k, v) in entries(&y["config"]) {
        let Some(value) = scalar(v) else { continue };
        let prop = Prop::new(value, format!("{base}.config.{k}"));
        if is_connection_key(&k) || k == "offset.storage.topic" {
            c.client.insert(k, prop);
        } else {
            cfg.skip(prop.origin, "a Connect worker or client setting with no ferry equivalent");
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1BETA2: &str = r#"
apiVersion: kafka.strimzi.io/v1beta2
kind: KafkaMirrorMaker2
metadata:
  name: my-mm2
spec:
  version: 3.8.0
  replicas: 1
  connectCluster: "my-target"
  clusters:
  - alias: "my-source"
    bootstrapServers: my-source-kafka-bootstrap:9092
  - alias: "my-target"
    bootstrapServers: my-target-kafka-bootstrap:9093
    authentication:
      passwordSecret: { secretName: target-login, password: pw }
      username: mm2-target
      type: scram-sha-256
    tls: { trustedCertificates: [ { certificate: ca.pem, secretName: my-target-cluster-ca-cert } ] }
    config:
      config.storage.replication.factor: -1
      offset.storage.topic: my-mm2-offsets
  mirrors:
  - sourceCluster: "my-source"
    targetCluster: "my-target"
    sourceConnector:
      tasksMax: 2
      config:
        replication.factor: -1
    checkpointConnector:
      config:
        emit.checkpoints.interval.seconds: 30
    topicsPattern: "orders.*|payments"
    groupsPattern: ".*"
"#;

    #[test]
    fn v1beta2_with_clusters_and_connect_cluster() {
        let cfg = read(V1BETA2, Path::new("/etc/ferry/secrets")).expect("valid");
        assert_eq!(cfg.flows.len(), 1);
        let f = &cfg.flows[0];
        assert_eq!((f.source.as_str(), f.target.as_str()), ("my-source", "my-target"));
        assert_eq!(f.offsets_topic.as_ref().map(|p| p.value.as_str()), Some("my-mm2-offsets"));
        assert_eq!(
            f.source_connector.as_ref().map(|p| p.value.as_str()),
            Some("my-source->my-target.MirrorSourceConnector")
        );
        assert_eq!(f.props["topics"].value, "orders.*|payments");
        assert_eq!(f.props["emit.checkpoints.interval.seconds"].value, "30");
        let target = &cfg.clusters[1];
        assert_eq!(target.librdkafka["security.protocol"].value, "sasl_ssl");
        assert_eq!(target.librdkafka["ssl.ca.location"].value, "/etc/ferry/secrets/my-target-cluster-ca-cert/ca.pem");
        let Some(Login::Sasl { mechanism, username, password, .. }) = &target.login else { panic!("login") };
        assert_eq!(
            (mechanism.as_str(), username.as_str(), password.as_str()),
            ("SCRAM-SHA-256", "mm2-target", "${file:/etc/ferry/secrets/target-login/pw}")
        );
        let skipped: Vec<&str> = cfg.unmapped.iter().map(|u| u.key.as_str()).collect();
        for k in [
            "spec.version",
            "spec.replicas",
            "spec.clusters[1].config.config.storage.replication.factor",
            "spec.mirrors[0].sourceConnector.tasksMax",
        ] {
            assert!(skipped.contains(&k), "{k} not reported: {skipped:?}");
        }
        // No heartbeat connector: no heartbeats, and Strimzi never writes any into the source.
        let props = &cfg.flows[0].props;
        assert_eq!(props["emit.heartbeats.enabled"], Prop::new("false", "spec.mirrors[0].heartbeatConnector (absent)"));
        assert_eq!(props[crate::import_mm2::dedicated::REVERSE_HEARTBEATS].value, "false");
    }

    #[test]
    fn v1_with_target_and_mirror_sources() {
        let text = r#"
apiVersion: kafka.strimzi.io/v1
kind: KafkaMirrorMaker2
metadata:
  name: my-mirror-maker-2
spec:
  target:
    alias: cluster-b
    bootstrapServers: cluster-b-kafka-bootstrap:9093
    groupId: my-mirror-maker-2-group
    offsetStorageTopic: my-mirror-maker-2-offset
    authentication:
      certificateAndKey: { certificate: user.crt, key: user.key, secretName: mm2-user }
      type: tls
    tls: { trustedCertificates: [ { pattern: "*.crt", secretName: cluster-b-cluster-ca-cert } ] }
  mirrors:
  - source:
      alias: cluster-a
      bootstrapServers: cluster-a-kafka-bootstrap:9092
    sourceConnector:
      config:
        sync.topic.acls.enabled: "false"
    topicsPattern: ".*"
"#;
        let cfg = read(text, Path::new("/s")).expect("valid");
        let f = &cfg.flows[0];
        assert_eq!((f.source.as_str(), f.target.as_str()), ("cluster-a", "cluster-b"));
        assert_eq!(f.offsets_topic.as_ref().map(|p| p.value.as_str()), Some("my-mirror-maker-2-offset"));
        let b = cfg.clusters.iter().find(|c| c.alias == "cluster-b").expect("target");
        assert_eq!(b.librdkafka["ssl.ca.location"].value, "/s/cluster-b-cluster-ca-cert/ca.crt");
        assert_eq!(b.librdkafka["ssl.key.location"].value, "/s/mm2-user/user.key");
        assert_eq!(b.librdkafka["security.protocol"].value, "ssl");
        assert!(cfg.clusters.iter().any(|c| c.alias == "cluster-a" && c.librdkafka.is_empty()));
    }
}
