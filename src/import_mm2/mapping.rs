//! MM2's keys to ferry's: cluster client properties (Java → librdkafka, secrets → references) and flow
//! keys (mm2-reference.md §8.2 → README "Configuration reference"), each key carried over or reported.

use std::collections::BTreeMap;

use toml::Value;

use super::java_regex::java_only;
use super::model::{Cluster, Flow, Login, Mm2Config, Prop, Unmapped};
use super::policy_class::{self, Naming};
use crate::config::is_secret_key;
use crate::filter::PatternList;

/// A TOML table's keys and values in the order they are written.
pub type OrderedTable = Vec<(String, Value)>;

/// What the import produces, before it is written.
#[derive(Debug, Default)]
pub struct Mapped {
    /// `[clusters.X]` tables, in order.
    pub clusters: Vec<(String, Value)>,
    /// One flow table (ordered keys) per flow.
    pub flows: Vec<(String, String, OrderedTable)>,
    /// `MM2 key → ferry key`.
    pub mapped: Vec<(String, String)>,
    pub unmapped: Vec<Unmapped>,
    /// Environment variables the flow files reference, with what each must hold.
    pub env: Vec<(String, String)>,
    pub errors: Vec<String>,
}

/// `policy_classes`: what the operator said custom `replication.policy.class`es do (`--policy-class`).
pub fn map(cfg: Mm2Config, policy_classes: &BTreeMap<String, String>) -> Mapped {
    let mut out = Mapped { unmapped: cfg.unmapped, ..Mapped::default() };
    for c in &cfg.clusters {
        if let Some(table) = cluster(c, &mut out) {
            out.clusters.push((c.alias.clone(), table));
        }
    }
    for f in cfg.flows {
        flow(f, policy_classes, &mut out);
    }
    out.mapped.sort();
    out.mapped.dedup();
    out.unmapped.sort_by(|a, b| a.key.cmp(&b.key));
    out.unmapped.dedup();
    out
}

/// `FERRY_<ALIAS>_<KEY>`, upper case, anything but letters and digits as `_`.
pub fn env_var(alias: &str, key: &str) -> String {
    let clean = |s: &str| {
        s.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect::<String>()
    };
    format!("FERRY_{}_{}", clean(alias), clean(key))
}

/// A secret's value as written: a reference the operator resolves (Kafka's `${env:VAR}` becomes ferry's
/// `${VAR}`), never the literal.
fn secret_ref(alias: &str, key: &str, literal: &str, out: &mut Mapped) -> String {
    if let Some(var) = literal.strip_prefix("${env:").and_then(|r| r.strip_suffix('}')) {
        return format!("${{{var}}}");
    }
    if literal.starts_with("${file:") {
        return literal.to_string();
    }
    let var = env_var(alias, key);
    out.env.push((var.clone(), format!("`{key}` of cluster `{alias}`")));
    format!("${{{var}}}")
}

fn cluster(c: &Cluster, out: &mut Mapped) -> Option<Value> {
    let alias = &c.alias;
    let Some(bootstrap) = &c.bootstrap else {
        out.errors.push(format!("cluster `{alias}`: no bootstrap servers (`{alias}.bootstrap.servers`)"));
        return None;
    };
    out.mapped.push((bootstrap.origin.clone(), format!("clusters.{alias}.bootstrap_servers")));
    let mut client: BTreeMap<String, String> = BTreeMap::new();
    let mut set = |k: &str, v: String, origin: &str, out: &mut Mapped| {
        out.mapped.push((origin.to_string(), format!("clusters.{alias}.client.\"{k}\"")));
        client.insert(k.to_string(), v);
    };
    for (k, p) in &c.librdkafka {
        set(k, p.value.clone(), &p.origin, out);
    }
    if let Some(Login::Sasl { mechanism, username, password, origin }) = &c.login {
        set("sasl.mechanism", mechanism.clone(), origin, out);
        set("sasl.username", username.clone(), origin, out);
        set("sasl.password", password.clone(), origin, out);
    }
    let store_type = |which: &str| c.client.get(&format!("ssl.{which}.type")).map(|p| p.value.to_ascii_uppercase());
    for (k, p) in &c.client {
        let v = p.value.trim();
        match k.as_str() {
            "security.protocol" => set(k, v.to_ascii_lowercase(), &p.origin, out),
            "sasl.mechanism" => set(k, v.to_string(), &p.origin, out),
            "sasl.jaas.config" => match jaas(v) {
                Ok((username, password)) => {
                    set("sasl.username", username, &p.origin, out);
                    let reference = secret_ref(alias, "sasl.password", &password, out);
                    set("sasl.password", reference, &p.origin, out);
                }
                Err(reason) => out.unmapped.push(Unmapped { key: p.origin.clone(), reason }),
            },
            "ssl.endpoint.identification.algorithm" => {
                let v = if v.is_empty() { "none".to_string() } else { v.to_ascii_lowercase() };
                set(k, v, &p.origin, out);
            }
            "ssl.truststore.location" if store_type("truststore").as_deref() == Some("PEM") => {
                set("ssl.ca.location", v.to_string(), &p.origin, out)
            }
            "ssl.keystore.location" if store_type("keystore").as_deref() == Some("PKCS12") => {
                set(k, v.to_string(), &p.origin, out)
            }
            "ssl.keystore.password" if store_type("keystore").as_deref() == Some("PKCS12") => {
                let reference = secret_ref(alias, k, v, out);
                set(k, reference, &p.origin, out)
            }
            "ssl.key.password" => {
                let reference = secret_ref(alias, k, v, out);
                set(k, reference, &p.origin, out)
            }
            "ssl.truststore.type" | "ssl.keystore.type" => {}
            "ssl.truststore.location" | "ssl.keystore.location" => out.unmapped.push(Unmapped {
                key: p.origin.clone(),
                reason: "a Java key store (JKS): librdkafka needs PEM files (`ssl.ca.location`; `ssl.certificate.location` and `ssl.key.location`) or PKCS#12".into(),
            }),
            "ssl.truststore.password" => out.unmapped.push(Unmapped {
                key: p.origin.clone(),
                reason: "a trust store's password: PEM CA files have none".into(),
            }),
            _ if is_secret_key(k) => {
                let reason = "a secret with no librdkafka equivalent (not written)";
                out.unmapped.push(Unmapped { key: p.origin.clone(), reason: reason.into() });
            }
            _ => out.unmapped.push(Unmapped {
                key: p.origin.clone(),
                reason: "a Java client property with no known librdkafka equivalent; set one under [clusters.X.client] by hand if needed".into(),
            }),
        }
    }
    let mut table = toml::Table::new();
    table.insert("bootstrap_servers".into(), Value::String(bootstrap.value.trim().to_string()));
    if !client.is_empty() {
        table.insert("client".into(), Value::Table(client.into_iter().map(|(k, v)| (k, Value::String(v))).collect()));
    }
    Some(Value::Table(table))
}

/// The username and password of a PLAIN or SCRAM `sasl.jaas.config`; any other login module is an
/// error naming it (the line itself holds a password and is never quoted).
pub fn jaas(line: &str) -> Result<(String, String), String> {
    let module = line.split_whitespace().next().unwrap_or_default();
    if !module.ends_with("PlainLoginModule") && !module.ends_with("ScramLoginModule") {
        let name = module.rsplit('.').next().unwrap_or(module);
        return Err(format!(
            "login module `{name}`: only PLAIN and SCRAM logins map to librdkafka's sasl.username and sasl.password"
        ));
    }
    let mut rest = &line[module.len()..];
    let (mut user, mut pass) = (None, None);
    while let Some(eq) = rest.find('=') {
        let name = rest[..eq].trim().rsplit(char::is_whitespace).next().unwrap_or_default().to_string();
        let after = rest[eq + 1..].trim_start();
        let (value, tail) = if let Some(quoted) = after.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let mut end = quoted.len();
            while let Some((i, ch)) = chars.next() {
                match ch {
                    '\\' => {
                        if let Some((_, n)) = chars.next() {
                            value.push(n);
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    _ => value.push(ch),
                }
            }
            (value, &quoted[end.min(quoted.len())..])
        } else {
            let end = after.find(|c: char| c.is_whitespace() || c == ';').unwrap_or(after.len());
            (after[..end].to_string(), &after[end..])
        };
        match name.as_str() {
            "username" => user = Some(value),
            "password" => pass = Some(value),
            _ => {}
        }
        rest = tail;
    }
    match (user, pass) {
        (Some(u), Some(p)) => Ok((u, p)),
        _ => Err("sasl.jaas.config: no `username` and `password` options found".into()),
    }
}

/// An MM2 list (comma separated, whitespace around commas dropped; empty means none), each entry a Java
/// regex that must mean the same under Rust's `regex`.
fn regex_list(p: &Prop, out: &mut Mapped) -> Option<Value> {
    let trimmed = p.value.trim();
    let list: Vec<String> =
        if trimmed.is_empty() { Vec::new() } else { trimmed.split(',').map(|s| s.trim().to_string()).collect() };
    for pattern in &list {
        if let Some(feature) = java_only(pattern) {
            out.errors.push(format!(
                "{}: pattern `{pattern}` uses {feature}, which Rust's regex lacks; rewrite it without",
                p.origin
            ));
            return None;
        }
        if let Err(e) = PatternList::new(std::slice::from_ref(pattern)) {
            out.errors
                .push(format!("{}: pattern `{pattern}` does not compile under Rust's regex: {}", p.origin, e.source));
            return None;
        }
    }
    Some(Value::Array(list.into_iter().map(Value::String).collect()))
}

fn flow(f: Flow, policy_classes: &BTreeMap<String, String>, out: &mut Mapped) {
    let id = format!("{}->{}", f.source, f.target);
    let mut keys: OrderedTable =
        vec![("source".into(), Value::String(f.source.clone())), ("target".into(), Value::String(f.target.clone()))];
    let mut put = |ferry: &str, v: Value, origin: &str, out: &mut Mapped| {
        out.mapped.push((origin.to_string(), format!("flows[{id}].{ferry}")));
        keys.push((ferry.to_string(), v));
    };
    let naming = f.props.get("replication.policy.class").map(|p| policy_class::naming(p.value.trim(), policy_classes));
    let templated = matches!(naming, Some(Ok(Naming::Template(_))));
    for (k, p) in &f.props {
        if super::transforms::is_chain_key(k) {
            continue; // the whole chain at once, below
        }
        let v = p.value.trim();
        if k == "replication.policy.separator" && templated && v != crate::policy::DEFAULT_SEPARATOR {
            out.unmapped.push(Unmapped {
                key: p.origin.clone(),
                reason: format!(
                    "the policy class's template names the remote topics; a remote_topic flow keeps MM2's `.` in its \
                     internal topic names (mm2-offset-syncs.<alias>.internal, <alias>.checkpoints.internal), where \
                     this MM2 used `{v}`"
                ),
            });
            continue;
        }
        let number = |out: &mut Mapped| -> Option<Value> {
            if let Ok(i) = v.parse::<i64>() {
                Some(Value::Integer(i))
            } else if let Ok(x) = v.parse::<f64>() {
                Some(Value::Float(x))
            } else {
                out.errors.push(format!("{}: `{v}` is not a number", p.origin));
                None
            }
        };
        let boolean = |out: &mut Mapped| -> Option<Value> {
            match v.to_ascii_lowercase().as_str() {
                "true" => Some(Value::Boolean(true)),
                "false" => Some(Value::Boolean(false)),
                _ => {
                    out.errors.push(format!("{}: `{v}` is not true or false", p.origin));
                    None
                }
            }
        };
        let direct = match k.as_str() {
            "topics" => Some(("topics", regex_list(p, out))),
            "topics.exclude" | "topics.blacklist" => Some(("topics_exclude", regex_list(p, out))),
            "groups" => Some(("groups", regex_list(p, out))),
            "groups.exclude" | "groups.blacklist" => Some(("groups_exclude", regex_list(p, out))),
            "replication.policy.separator" => Some(("replication_policy_separator", Some(Value::String(v.into())))),
            "replication.factor" => Some(("replication_factor", number(out))),
            "refresh.topics.interval.seconds" => Some(("refresh_topics_interval_seconds", number(out))),
            "refresh.groups.interval.seconds" => Some(("refresh_groups_interval_seconds", number(out))),
            "emit.checkpoints.interval.seconds" => Some(("emit_checkpoints_interval_seconds", number(out))),
            "emit.heartbeats.interval.seconds" => Some(("emit_heartbeats_interval_seconds", number(out))),
            "sync.group.offsets.enabled" => Some(("sync_group_offsets_enabled", boolean(out))),
            "sync.group.offsets.interval.seconds" => Some(("sync_group_offsets_interval_seconds", number(out))),
            "sync.topic.configs.enabled" => Some(("sync_topic_configs_enabled", boolean(out))),
            "sync.topic.configs.interval.seconds" => Some(("sync_topic_configs_interval_seconds", number(out))),
            "offset.lag.max" => Some(("offset_lag_max", number(out))),
            "emit.heartbeats.enabled" => Some(("emit_heartbeats_enabled", boolean(out))),
            "heartbeats.replication.enabled" => Some(("heartbeats_replication_enabled", boolean(out))),
            super::dedicated::REVERSE_HEARTBEATS => Some(("emit_reverse_heartbeats_enabled", boolean(out))),
            "emit.checkpoints.enabled" => Some(("emit_checkpoints_enabled", boolean(out))),
            "emit.offset-syncs.enabled" => Some(("emit_offset_syncs_enabled", boolean(out))),
            "refresh.topics.enabled" => Some(("refresh_topics_enabled", boolean(out))),
            "refresh.groups.enabled" => Some(("refresh_groups_enabled", boolean(out))),
            "sync.topic.acls.enabled" => Some(("sync_topic_acls_enabled", boolean(out))),
            "sync.topic.acls.interval.seconds" => Some(("sync_topic_acls_interval_seconds", number(out))),
            "config.properties.exclude" | "config.properties.blacklist" => {
                Some(("config_properties_exclude", regex_list(p, out)))
            }
            "offset-syncs.topic.replication.factor" => Some(("offset_syncs_topic_replication_factor", number(out))),
            "checkpoints.topic.replication.factor" => Some(("checkpoints_topic_replication_factor", number(out))),
            "heartbeats.topic.replication.factor" => Some(("heartbeats_topic_replication_factor", number(out))),
            "offset-syncs.topic.location" => {
                Some(("offset_syncs_topic_location", Some(Value::String(v.to_ascii_lowercase()))))
            }
            _ => None,
        };
        if let Some((ferry, value)) = direct {
            if let Some(value) = value {
                put(ferry, value, &p.origin, out);
            }
            continue;
        }
        if k == "replication.policy.class" {
            match naming.clone().expect("the class is among the props") {
                Ok(Naming::Policy(policy)) => put("replication_policy", Value::String(policy.into()), &p.origin, out),
                Ok(Naming::Template(template)) => put("remote_topic", Value::String(template), &p.origin, out),
                Err(reason) => out.unmapped.push(Unmapped { key: p.origin.clone(), reason }),
            }
            continue;
        }
        out.unmapped.push(Unmapped { key: p.origin.clone(), reason: unmapped_reason(k, v) });
    }
    if let Some(rules) = super::transforms::map(&f.props) {
        for (origin, ferry) in &rules.mapped {
            out.mapped.push((origin.clone(), format!("flows[{id}].{ferry}")));
        }
        let chain = &f.props["transforms"].origin;
        if !rules.filters.is_empty() {
            put("filter", Value::Array(rules.filters.clone()), chain, out);
        }
        if let Some(headers) = rules.headers() {
            put("headers", headers, chain, out);
        }
        out.unmapped.extend(rules.unmapped);
    }
    // MM2 syncs topic ACLs unless told not to; ferry does not by default, so an imported flow says so.
    if !f.props.contains_key("sync.topic.acls.enabled") {
        put("sync_topic_acls_enabled", Value::Boolean(true), "(MM2's default sync.topic.acls.enabled = true)", out);
    }
    if let Some(p) = &f.offsets_topic {
        put("mm2_offsets_topic", Value::String(p.value.clone()), &p.origin, out);
    }
    if let Some(p) = &f.source_connector {
        put("mm2_source_connector", Value::String(p.value.clone()), &p.origin, out);
    }
    out.flows.push((f.source, f.target, keys));
}

/// Why MM2 connector key `k` (value `v`) has no ferry equivalent.
fn unmapped_reason(k: &str, v: &str) -> String {
    let same = |default: &str| {
        if v.eq_ignore_ascii_case(default) {
            " (this value is what ferry does)"
        } else {
            " (ferry cannot do otherwise yet)"
        }
    };
    match k {
        "tasks.max" => {
            "ferry spreads a flow's partitions over the nodes of its copier group; there is no task count".into()
        }
        "config.property.filter.class" => format!("custom class `{v}`: ferry has no plug-ins"),
        "use.defaults.from" => {
            format!("ferry copies only the source's non-default topic configs (MM2's `target`){}", same("target"))
        }
        "topic.filter.class" | "group.filter.class" | "forwarding.admin.class" => {
            format!("custom class `{v}`: ferry has no plug-ins")
        }
        "header.converter" if !v.ends_with("ByteArrayConverter") => format!(
            "header converter `{v}`: with it MM2 writes header values as text (binary ones base64-encoded, measured with SimpleHeaderConverter); ferry copies header bytes unchanged, so consumers that decode MM2's text must read the original bytes"
        ),
        _ if k.ends_with("converter") || k.contains("converter.") => "converters: ferry copies bytes unchanged".into(),
        _ if k.starts_with("config.providers") => {
            "Kafka config providers: ferry reads `${VAR}` and `${file:PATH}` instead".into()
        }
        _ => "no ferry equivalent".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import_mm2::{dedicated, properties};

    #[test]
    fn jaas_lines_give_username_and_password() {
        let scram =
            r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="mm2" password="p\"w;x";"#;
        assert_eq!(jaas(scram), Ok(("mm2".to_string(), "p\"w;x".to_string())));
        let plain = "org.apache.kafka.common.security.plain.PlainLoginModule required username=alice password=s3cret ;";
        assert_eq!(jaas(plain), Ok(("alice".to_string(), "s3cret".to_string())));
        let kerberos = "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab=\"/k\";";
        let e = jaas(kerberos).expect_err("not mapped");
        assert!(e.contains("Krb5LoginModule"), "{e}");
        let e = jaas("org.apache.kafka.common.security.plain.PlainLoginModule required password=\"only-pw\";")
            .expect_err("no username");
        assert!(!e.contains("only-pw"), "{e}");
    }

    #[test]
    fn java_only_regex_features_are_named() {
        for (p, feature) in [
            ("orders(?!-test).*", "negative lookahead"),
            ("(?<=a)b", "lookbehind"),
            ("a*+b", "a possessive quantifier"),
            ("x{2}+", "a possessive quantifier"),
            ("(a)\\1", "a backreference"),
            ("\\Qa.b\\E", "`\\Q...\\E` quoting"),
            ("(?>ab)", "an atomic group"),
        ] {
            assert_eq!(java_only(p), Some(feature), "{p}");
        }
        for p in ["orders.*", "a+b", "payments\\+x", "(?i)billing-.*", "\\\\1", "[0-9]{2}"] {
            assert_eq!(java_only(p), None, "{p}");
        }
    }

    fn mapped(text: &str) -> Mapped {
        map(dedicated::read(&properties::parse(text)).expect("reads"), &BTreeMap::new())
    }

    const BASE: &str =
        "clusters = a, b\na.bootstrap.servers = a:9092\nb.bootstrap.servers = b:9092\na->b.enabled = true\n";

    #[test]
    fn a_java_only_pattern_is_an_error_naming_key_and_pattern() {
        let m = mapped(&format!("{BASE}a->b.topics = orders, (?!test).*\n"));
        assert_eq!(m.errors.len(), 1, "{:?}", m.errors);
        assert!(
            m.errors[0].starts_with("a->b.topics: pattern `(?!test).*` uses negative lookahead"),
            "{}",
            m.errors[0]
        );
    }

    #[test]
    fn lists_split_like_mm2() {
        let m = mapped(&format!("{BASE}topics = a.* ,b,  c\\\\.d\ngroups =\n"));
        let keys = &m.flows[0].2;
        let get = |k: &str| keys.iter().find(|(n, _)| n == k).map(|(_, v)| v.to_string());
        assert_eq!(get("topics").as_deref(), Some(r#"["a.*", "b", 'c\.d']"#));
        assert_eq!(get("groups").as_deref(), Some("[]"), "an empty MM2 list matches nothing");
        assert_eq!(get("mm2_offsets_topic").as_deref(), Some("\"mm2-offsets.a.internal\""));
        assert_eq!(get("mm2_source_connector").as_deref(), Some("\"MirrorSourceConnector\""));
    }

    #[test]
    fn secrets_become_references_and_config_providers_are_translated() {
        let m = mapped(&format!(
            "{BASE}ssl.key.password = KeyPW-123\nb.ssl.key.password = ${{env:B_KEY_PW}}\n\
             sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule required username=\"u\" password=\"Lit-PW-456\";\n"
        ));
        let shown = format!("{:?}", m.clusters);
        assert!(!shown.contains("KeyPW-123") && !shown.contains("Lit-PW-456"), "{shown}");
        assert!(shown.contains("${FERRY_A_SSL_KEY_PASSWORD}") && shown.contains("${B_KEY_PW}"), "{shown}");
        assert!(shown.contains("${FERRY_A_SASL_PASSWORD}"), "{shown}");
        let vars: Vec<&str> = m.env.iter().map(|(v, _)| v.as_str()).collect();
        assert_eq!(vars, ["FERRY_A_SASL_PASSWORD", "FERRY_A_SSL_KEY_PASSWORD", "FERRY_B_SASL_PASSWORD"]);
    }

    #[test]
    fn mm2s_switches_map_and_acl_sync_defaults_to_mm2s_on() {
        let m = mapped(&format!(
            "{BASE}emit.heartbeats.enabled = false\nemit.checkpoints.enabled = false\nheartbeats.replication.enabled = false\n\
             config.properties.exclude = retention\\\\..*, min\\\\.insync\\\\.replicas\n\
             heartbeats.topic.replication.factor = 1\nrefresh.groups.enabled = false\n"
        ));
        let (_, _, keys) = &m.flows[0];
        let get = |k: &str| keys.iter().find(|(key, _)| key == k).map(|(_, v)| v.to_string());
        assert_eq!(get("emit_heartbeats_enabled").as_deref(), Some("false"));
        assert_eq!(get("emit_checkpoints_enabled").as_deref(), Some("false"));
        assert_eq!(get("heartbeats_replication_enabled").as_deref(), Some("false"));
        assert_eq!(get("refresh_groups_enabled").as_deref(), Some("false"));
        assert_eq!(get("heartbeats_topic_replication_factor").as_deref(), Some("1"));
        assert_eq!(get("config_properties_exclude").as_deref(), Some(r#"['retention\..*', 'min\.insync\.replicas']"#));
        assert_eq!(get("sync_topic_acls_enabled").as_deref(), Some("true"), "MM2's default is on");
        assert!(m.unmapped.iter().all(|u| !u.key.contains("enabled")), "{:?}", m.unmapped);
    }

    #[test]
    fn a_policy_class_the_operator_names_becomes_a_template_and_its_separator_is_reported() {
        let text =
            format!("{BASE}replication.policy.class = com.acme.SuffixPolicy\nreplication.policy.separator = _\n");
        let classes: BTreeMap<String, String> =
            [("com.acme.SuffixPolicy".to_string(), "{topic}_{source}".to_string())].into();
        let m = map(dedicated::read(&properties::parse(&text)).expect("reads"), &classes);
        let (_, _, keys) = &m.flows[0];
        let get = |k: &str| keys.iter().find(|(key, _)| key == k).map(|(_, v)| v.to_string());
        assert_eq!(get("remote_topic").as_deref(), Some("\"{topic}_{source}\""));
        assert_eq!(get("replication_policy"), None);
        assert_eq!(get("replication_policy_separator"), None);
        let why = m.unmapped.iter().find(|u| u.key == "replication.policy.separator").expect("reported");
        assert!(
            why.reason.contains("keeps MM2's `.` in its internal topic names") && why.reason.contains("used `_`"),
            "{}",
            why.reason
        );
        assert!(
            m.mapped.contains(&("replication.policy.class".to_string(), "flows[a->b].remote_topic".to_string())),
            "{:?}",
            m.mapped
        );
        // The same file without the flag: the class is reported, the separator carried over.
        let m = mapped(&text);
        assert!(m.unmapped.iter().any(|u| u.key == "replication.policy.class" && u.reason.contains("--policy-class")));
        assert!(m.flows[0].2.iter().any(|(k, _)| k == "replication_policy_separator"));
    }

    #[test]
    fn unmapped_keys_say_why() {
        let m = mapped(&format!(
            "{BASE}tasks.max = 8\nreplication.policy.class = com.acme.MyPolicy\na->b.transforms = x\n\
             key.converter = org.apache.kafka.connect.converters.ByteArrayConverter\nuse.defaults.from = source\n"
        ));
        let why = |k: &str| m.unmapped.iter().find(|u| u.key == k).map(|u| u.reason.clone()).unwrap_or_default();
        assert!(why("tasks.max").contains("no task count"));
        assert!(why("replication.policy.class").contains("custom policy class `com.acme.MyPolicy`"));
        assert!(why("a->b.transforms").contains("transform `x` has no `transforms.x.type`"));
        assert!(why("key.converter").contains("converters"));
        assert!(why("use.defaults.from").contains("ferry cannot do otherwise yet"));
    }
}
