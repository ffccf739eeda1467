//! Which client properties are secrets, how they are shown (never), and how text that may quote one is
//! cleaned before anyone sees it.
//!
//! A value is secret when its key is ([`is_secret_key`]) or when it was read from a mounted secret file
//! (`${file:/path}`), whatever its key. Flow files carry passwords and SASL settings; logs, metrics,
//! `ferry validate` and the status endpoints print client properties only through [`redact`], and errors
//! that come from librdkafka (which quotes values) go through [`scrub`] or are rebuilt from the
//! property's *name*. This module does not decide what an error says; it only guarantees that no secret
//! value survives in it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{LazyLock, RwLock};

pub const REDACTED: &str = "[redacted]";

/// Secret values shorter than this are not scrubbed from free text: replacing every `ab` of a message
/// would garble it without protecting much. Such values are still never printed by ferry itself
/// ([`redact`], and errors name keys, not values).
const MIN_SCRUB_LEN: usize = 4;

/// True for librdkafka properties whose value must never be shown. Every `sasl.*` setting but the
/// mechanism counts (a JAAS line or an OAuth config embeds credentials), as does anything that names a
/// password, secret, token, credential or private key. The mechanism (`SCRAM-SHA-512`) is not secret,
/// and librdkafka's authentication errors name it; nor are Kerberos' names (the broker's service name,
/// the client's principal, where its keytab lives, how often it logs in), which every Kerberos error
/// names and an operator needs to read: the keytab's *content* is the secret, and is never read into
/// the configuration; nor are OIDC's method and token endpoint URL (`sasl.oauthbearer.method`,
/// `sasl.oauthbearer.token.endpoint.url`): an error naming the endpoint tells the operator which
/// provider refused (one read from a secret file stays secret).
pub fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    const PUBLIC: [&str; 8] = [
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.kerberos.service.name",
        "sasl.kerberos.principal",
        "sasl.kerberos.keytab",
        "sasl.kerberos.min.time.before.relogin",
        "sasl.oauthbearer.method",
        "sasl.oauthbearer.token.endpoint.url",
    ];
    if PUBLIC.contains(&k.as_str()) {
        return false;
    }
    k.starts_with("sasl.")
        || ["password", "secret", "token", "credential", "jaas", "private", "key.pem"].iter().any(|w| k.contains(w))
}

/// A copy of `props` with the values of secret keys replaced.
pub fn redact(props: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    redact_also(props, &BTreeSet::new())
}

/// A copy of `props` with the values of secret keys and of `also` (keys whose value came from a secret
/// file) replaced.
pub fn redact_also(props: &BTreeMap<String, String>, also: &BTreeSet<String>) -> BTreeMap<String, String> {
    props
        .iter()
        .map(|(k, v)| {
            let shown = if is_secret_key(k) || also.contains(k) { REDACTED.to_string() } else { v.clone() };
            (k.clone(), shown)
        })
        .collect()
}

/// Every secret value any flow set of this process has held. Only ever grows (an operator rotating a
/// password every hour adds 24 short strings a day); kept so that text produced far from the
/// configuration (a librdkafka error inside an actor) can still be scrubbed.
static KNOWN: LazyLock<RwLock<BTreeSet<String>>> = LazyLock::new(Default::default);

/// Remembers `values` as secrets for [`scrub`].
pub fn remember<'a>(values: impl IntoIterator<Item = &'a String>) {
    let fresh: Vec<&String> = {
        let known = KNOWN.read().unwrap_or_else(|p| p.into_inner());
        values.into_iter().filter(|v| v.len() >= MIN_SCRUB_LEN && !known.contains(*v)).collect()
    };
    if !fresh.is_empty() {
        KNOWN.write().unwrap_or_else(|p| p.into_inner()).extend(fresh.into_iter().cloned());
    }
}

/// `text` with every remembered secret value replaced by `[redacted]`.
pub fn scrub(text: &str) -> String {
    let known = KNOWN.read().unwrap_or_else(|p| p.into_inner());
    scrub_with(text, known.iter())
}

/// `text` with each of `secrets` (at least [`MIN_SCRUB_LEN`] long) replaced by `[redacted]`; longer
/// secrets first, so that a secret containing another is replaced whole.
pub fn scrub_with<'a>(text: &str, secrets: impl IntoIterator<Item = &'a String>) -> String {
    let mut secrets: Vec<&String> = secrets.into_iter().filter(|s| s.len() >= MIN_SCRUB_LEN).collect();
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let mut out = text.to_string();
    for s in secrets {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), REDACTED);
        }
    }
    out
}

/// `msg` without anything between double quotes: serde and librdkafka quote *values* that way
/// (`invalid type: string "hunter2", expected ...`), keys with backticks. Used on messages about input
/// whose values may be secret.
pub fn unquote_values(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    let mut parts = msg.split('"');
    if let Some(first) = parts.next() {
        out.push_str(first);
    }
    let mut inside = true;
    for part in parts {
        if inside {
            out.push_str("\"…\"");
        } else {
            out.push_str(part);
        }
        inside = !inside;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_recognised() {
        for k in [
            "sasl.password",
            "sasl.username",
            "sasl.jaas.config",
            "ssl.key.password",
            "ssl.keystore.password",
            "sasl.oauthbearer.client.secret",
            "ssl.key.pem",
        ] {
            assert!(is_secret_key(k), "{k}");
        }
        assert!(is_secret_key("sasl.oauthbearer.client.id") && is_secret_key("sasl.oauthbearer.scope"));
        for k in [
            "security.protocol",
            "ssl.ca.location",
            "client.id",
            "linger.ms",
            "sasl.mechanism",
            "sasl.oauthbearer.method",
            "sasl.oauthbearer.token.endpoint.url",
        ] {
            assert!(!is_secret_key(k), "{k}");
        }
    }

    #[test]
    fn redact_hides_values_keeps_keys() {
        let props: BTreeMap<_, _> = [
            ("sasl.password".to_string(), "hunter2".to_string()),
            ("security.protocol".to_string(), "sasl_ssl".to_string()),
            ("ssl.ca.pem".to_string(), "from-a-file".to_string()),
        ]
        .into();
        let shown = format!("{:?}", redact_also(&props, &["ssl.ca.pem".to_string()].into()));
        assert!(!shown.contains("hunter2") && !shown.contains("from-a-file"), "{shown}");
        assert!(shown.contains("sasl.password"));
        assert!(shown.contains("sasl_ssl"));
    }

    #[test]
    fn scrubbing_replaces_every_remembered_value() {
        let secrets = ["s3cret-long".to_string(), "s3cret".to_string(), "ab".to_string()];
        let text = "login s3cret-long failed, s3cret too; ab stays";
        assert_eq!(scrub_with(text, &secrets), "login [redacted] failed, [redacted] too; ab stays");
        remember(&secrets);
        assert!(!scrub("x s3cret-long y").contains("s3cret"));
    }

    #[test]
    fn quoted_values_are_dropped() {
        assert_eq!(
            unquote_values("invalid type: string \"hunter2\", expected a map for key `clusters.a.client`"),
            "invalid type: string \"…\", expected a map for key `clusters.a.client`"
        );
        assert_eq!(unquote_values("no quotes"), "no quotes");
        assert_eq!(unquote_values("dangling \"secret"), "dangling \"…\"");
    }
}
