//! `replication.policy.class` → ferry's naming: `replication_policy` for MM2's two policies and the
//! hand-written classes that behave like one of them, `remote_topic` for a class the operator says a
//! template implements (`--policy-class CLASS=TEMPLATE`), and a report for every other class.
//!
//! Classes are known by what their published source does, not by their names: a class name alone
//! says nothing about the names it writes, so an unknown class is never guessed at.

use std::collections::BTreeMap;

use crate::policy::NameTemplate;

/// How a flow with a given policy class names its remote topics, in ferry's keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Naming {
    /// `replication_policy = "default"` or `"identity"`.
    Policy(&'static str),
    /// `remote_topic = "..."`.
    Template(String),
}

/// Hand-written classes published for MM2 deployments, by fully qualified name, with what they do.
/// Both keep every name, heartbeats too, where ferry's identity policy (like Kafka's) prefixes
/// heartbeats (`east.heartbeats`): only the heartbeats topics' names differ, which is what lets MM2's
/// tools see the flow at all.
const KNOWN: &[(&str, &str, &str)] = &[
    // aws-samples/mirrormaker2-msk-migration: keeps topic names, `topicSource` is the flow's source.
    ("com.amazonaws.kafka.samples.CustomMM2ReplicationPolicy", "identity", "AWS's MSK migration sample, names kept"),
    // Instaclustr's: keeps topic names ("Defines remote topics without renaming them").
    ("com.instaclustr.kafka.connect.mirror.SimpleReplicationPolicy", "identity", "Instaclustr's, names kept"),
];

/// The naming for `class`: the operator's word first (`given`: class → template, `default` or
/// `identity`), then MM2's policies by simple name (Kafka's, and Strimzi's identity policy of the same
/// name), then the known hand-written classes. `Err` says why the class is not carried over.
pub fn naming(class: &str, given: &BTreeMap<String, String>) -> Result<Naming, String> {
    if let Some(said) = given.get(class) {
        return match said.as_str() {
            "default" => Ok(Naming::Policy("default")),
            "identity" => Ok(Naming::Policy("identity")),
            template => NameTemplate::parse(template)
                .map(|_| Naming::Template(template.to_string()))
                .map_err(|e| format!("--policy-class {class}={template}: {e}")),
        };
    }
    match class.rsplit('.').next() {
        Some("DefaultReplicationPolicy") => return Ok(Naming::Policy("default")),
        Some("IdentityReplicationPolicy") => return Ok(Naming::Policy("identity")),
        _ => {}
    }
    if let Some((_, policy, _)) = KNOWN.iter().find(|(name, _, _)| *name == class) {
        return Ok(Naming::Policy(policy));
    }
    Err(format!(
        "custom policy class `{class}`: ferry knows MM2's default and identity policies and {}; if the class \
         names remote topics by a pattern, say which with --policy-class '{class}={{topic}}.{{source}}' (any \
         template, or `default`/`identity`); otherwise remote topic names would differ",
        KNOWN.iter().map(|(name, _, what)| format!("{name} ({what})")).collect::<Vec<_>>().join(", ")
    ))
}

/// Parses `--policy-class CLASS=TEMPLATE`.
///
/// # Errors
///
/// A value without `=` or with an empty side.
pub fn parse_flag(value: &str) -> Result<(String, String), String> {
    match value.split_once('=') {
        Some((class, naming)) if !class.trim().is_empty() && !naming.trim().is_empty() => {
            Ok((class.trim().to_string(), naming.trim().to_string()))
        }
        _ => Err(format!("`{value}`: expected CLASS=TEMPLATE, e.g. com.acme.SuffixPolicy={{topic}}.{{source}}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> BTreeMap<String, String> {
        BTreeMap::new()
    }

    #[test]
    fn mm2s_policies_and_known_classes_map() {
        let p = |class: &str| naming(class, &none());
        assert_eq!(p("org.apache.kafka.connect.mirror.DefaultReplicationPolicy"), Ok(Naming::Policy("default")));
        assert_eq!(p("org.apache.kafka.connect.mirror.IdentityReplicationPolicy"), Ok(Naming::Policy("identity")));
        assert_eq!(p("io.strimzi.kafka.connect.mirror.IdentityReplicationPolicy"), Ok(Naming::Policy("identity")));
        assert_eq!(p("com.amazonaws.kafka.samples.CustomMM2ReplicationPolicy"), Ok(Naming::Policy("identity")));
        assert_eq!(p("com.instaclustr.kafka.connect.mirror.SimpleReplicationPolicy"), Ok(Naming::Policy("identity")));
    }

    #[test]
    fn unknown_classes_are_reported_with_the_escape_hatch() {
        let why = naming("com.acme.SuffixPolicy", &none()).unwrap_err();
        assert!(why.starts_with("custom policy class `com.acme.SuffixPolicy`"), "{why}");
        assert!(why.contains("--policy-class 'com.acme.SuffixPolicy={topic}.{source}'"), "{why}");
        // A class named like a known one in another package is not guessed at.
        assert!(naming("com.acme.CustomMM2ReplicationPolicy", &none()).is_err());
    }

    #[test]
    fn the_operators_word_wins() {
        let given: BTreeMap<String, String> = [
            ("com.acme.SuffixPolicy".to_string(), "{topic}.{source}".to_string()),
            ("com.acme.Keep".to_string(), "identity".to_string()),
            ("com.acme.Bad".to_string(), "{source}{topic}".to_string()),
        ]
        .into();
        assert_eq!(naming("com.acme.SuffixPolicy", &given), Ok(Naming::Template("{topic}.{source}".into())));
        assert_eq!(naming("com.acme.Keep", &given), Ok(Naming::Policy("identity")));
        let why = naming("com.acme.Bad", &given).unwrap_err();
        assert!(why.starts_with("--policy-class com.acme.Bad={source}{topic}: {source} and {topic} need"), "{why}");
    }

    #[test]
    fn flag_values() {
        assert_eq!(parse_flag("a.B={topic}-x"), Ok(("a.B".into(), "{topic}-x".into())));
        assert!(parse_flag("a.B").is_err());
        assert!(parse_flag("=x").is_err());
    }
}
