//! Which client properties are secrets, and how they are shown: never.
//!
//! Flow files carry passwords and SASL settings; logs, metrics, `ferry validate` and the status
//! endpoints print client properties only through [`redact`].

use std::collections::BTreeMap;

const REDACTED: &str = "[redacted]";

/// True for librdkafka properties whose value must never be shown. Every `sasl.*` setting counts
/// (a JAAS line or an OAuth config embeds credentials), as does anything that names a password, secret,
/// token, credential or private key.
pub fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    k.starts_with("sasl.")
        || ["password", "secret", "token", "credential", "jaas", "private", "key.pem"].iter().any(|w| k.contains(w))
}

/// A copy of `props` with secret values replaced.
pub fn redact(props: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    props
        .iter()
        .map(|(k, v)| {
            let shown = if is_secret_key(k) { REDACTED.to_string() } else { v.clone() };
            (k.clone(), shown)
        })
        .collect()
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
        for k in ["security.protocol", "ssl.ca.location", "client.id", "linger.ms"] {
            assert!(!is_secret_key(k), "{k}");
        }
    }

    #[test]
    fn redact_hides_values_keeps_keys() {
        let props: BTreeMap<_, _> = [
            ("sasl.password".to_string(), "hunter2".to_string()),
            ("security.protocol".to_string(), "sasl_ssl".to_string()),
        ]
        .into();
        let shown = format!("{:?}", redact(&props));
        assert!(!shown.contains("hunter2"));
        assert!(shown.contains("sasl.password"));
        assert!(shown.contains("sasl_ssl"));
    }
}
