//! `ferry validate -o json`: the flow set `ferry validate` prints ([`FlowSet::describe`]), or every error
//! of a refused one, as one JSON document. Secret client properties are redacted exactly as in the text.

use std::path::Path;

use serde_json::{Value, json};

use crate::config::{ConfigErrors, FlowSet, PolicyKind};

/// A valid set: its clusters and flows, with the same facts as [`FlowSet::describe`].
pub fn set_json(dir: &Path, set: &FlowSet) -> Value {
    let clusters: Vec<Value> = set
        .clusters
        .values()
        .map(|c| {
            json!({
                "alias": c.alias,
                "bootstrap_servers": c.bootstrap_servers,
                "file": c.file.display().to_string(),
                "client": c.shown_client(),
            })
        })
        .collect();
    let flows: Vec<Value> = set
        .flows
        .values()
        .map(|f| {
            let s = &f.settings;
            json!({
                "flow": f.id.to_string(),
                "enabled": s.enabled,
                "file": f.file.display().to_string(),
                "topics": s.topics,
                "topics_exclude": s.topics_exclude,
                "groups": s.groups,
                "groups_exclude": s.groups_exclude,
                "replication_policy": match s.replication_policy {
                    PolicyKind::Default => "default",
                    PolicyKind::Identity => "identity",
                    PolicyKind::Template => "template",
                },
                "remote_topic": s.remote_topic,
                "replication_policy_separator": s.replication_policy_separator,
                "refresh_topics_interval_seconds": s.refresh_topics_interval.as_secs_f64(),
                "emit_checkpoints_interval_seconds": s.emit_checkpoints_interval.as_secs_f64(),
                "emit_heartbeats_interval_seconds": s.emit_heartbeats_interval.as_secs_f64(),
                "offset_lag_max": s.offset_lag_max,
                "compression": s.compression,
                "delivery": s.delivery.name(),
                "transaction_interval_ms": s.transaction_interval.as_millis() as u64,
                "transaction_max_bytes": s.transaction_max_bytes,
            })
        })
        .collect();
    json!({ "dir": dir.display().to_string(), "valid": true, "errors": [], "clusters": clusters, "flows": flows })
}

/// A refused set: every error with its file and key (the same lines `ferry validate` prints).
pub fn errors_json(dir: &Path, errors: &ConfigErrors) -> Value {
    let list: Vec<Value> = errors
        .0
        .iter()
        .map(|e| json!({ "file": e.file.display().to_string(), "line": e.line, "key": e.key, "reason": e.reason.trim_end() }))
        .collect();
    json!({ "dir": dir.display().to_string(), "valid": false, "errors": list, "clusters": [], "flows": [] })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_what_the_text_has_and_no_secret() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(
            dir.path().join("c.toml"),
            "[clusters.east]\nbootstrap_servers = \"e:1\"\n[clusters.east.client]\n\"sasl.password\" = \"hunter2\"\n\
             \"linger.ms\" = \"5\"\n[clusters.west]\nbootstrap_servers = \"w:1\"\n\
             [[flows]]\nsource = \"east\"\ntarget = \"west\"\ntopics = [\"orders\"]\nenabled = false\n",
        )
        .expect("write");
        let set = crate::config::load_dir(dir.path(), crate::kafka::check_client_properties).expect("valid");
        let text = set.describe();
        let v = set_json(dir.path(), &set);
        let dumped = v.to_string();
        assert!(!dumped.contains("hunter2") && !text.contains("hunter2"), "{dumped}");
        assert_eq!(v["clusters"][0]["alias"], "east");
        assert_eq!(v["clusters"][0]["client"]["linger.ms"], "5");
        assert!(text.contains("linger.ms = 5"), "{text}");
        let flow = &v["flows"][0];
        assert_eq!(flow["flow"], "east->west");
        assert_eq!(flow["enabled"], false);
        assert!(text.contains("flow east->west (disabled)"), "{text}");
        assert_eq!(flow["topics"][0], "orders");
        assert_eq!(flow["replication_policy"], "default");
        assert_eq!(flow["remote_topic"], serde_json::Value::Null);
        let template = crate::check::rights::tests::plan("remote_topic = \"{topic}.{source}\"");
        let set = FlowSet { flows: [(template.id.clone(), template)].into(), ..set };
        let flow = &set_json(dir.path(), &set)["flows"][0];
        assert_eq!(flow["replication_policy"], "template");
        assert_eq!(flow["remote_topic"], "{topic}.{source}");
        assert!(
            set.describe().contains("policy=Template separator=\".\" remote_topic=\"{topic}.{source}\""),
            "{}",
            set.describe()
        );

        std::fs::write(dir.path().join("bad.toml"), "[[flows]]\nsource = \"east\"\ntarget = \"nowhere\"\n")
            .expect("write");
        let errors = crate::config::load_dir(dir.path(), crate::kafka::check_client_properties).expect_err("invalid");
        let v = errors_json(dir.path(), &errors);
        assert_eq!(v["valid"], false);
        assert!(v["errors"][0]["file"].as_str().is_some_and(|f| f.ends_with("bad.toml")), "{v}");
        assert_eq!(v["errors"].as_array().map(Vec::len), Some(errors.0.len()));
        assert_eq!(v["errors"][0]["line"], serde_json::Value::Null, "a validation error has no line");

        // A value refused while parsing carries its line.
        std::fs::write(dir.path().join("bad.toml"), "[[flows]]\nsource = \"east\"\ntarget = \"west\"\nenabled = 0\n")
            .expect("write");
        let v = errors_json(
            dir.path(),
            &crate::config::load_dir(dir.path(), crate::kafka::check_client_properties).expect_err("invalid"),
        );
        let e = &v["errors"][0];
        assert_eq!((&e["line"], &e["key"]), (&json!(4), &json!("flows[0].enabled")), "{v}");
    }
}
