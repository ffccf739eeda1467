//! ferry's own principal on a cluster, as the brokers name it from the cluster's client properties:
//! what `protect_remote_topics` must never deny (see [`crate::protect`]), and what validation asks of
//! a protected flow's target.

use super::ClusterSpec;

/// The principal the target cluster gives ferry's clients, from the cluster's client properties as
/// the brokers' default mappings name it: `User:<sasl.username>` (PLAIN, SCRAM), `User:<primary>` of
/// `sasl.kerberos.principal` (GSSAPI), `User:<subject>` of the client certificate (mutual TLS).
/// `Err` when the properties do not say (OAUTHBEARER's name is a token claim; PLAINTEXT is
/// `User:ANONYMOUS`, like every other client of that listener). A broker whose
/// `ssl.principal.mapping.rules` or `sasl.kerberos.principal.to.local.rules` rename principals names
/// ferry otherwise: ferry would then deny itself (see docs/security.md).
pub fn own_principal(target: &ClusterSpec) -> Result<String, String> {
    let get = |k: &str| target.client.get(k).map(|v| v.trim().to_string());
    let protocol = get("security.protocol").unwrap_or_else(|| "plaintext".into()).to_ascii_lowercase();
    let cluster = &target.alias;
    if protocol.starts_with("sasl") {
        let mechanism = get("sasl.mechanism").or_else(|| get("sasl.mechanisms")).unwrap_or_else(|| "GSSAPI".into());
        return match mechanism.to_ascii_uppercase().as_str() {
            "PLAIN" | "SCRAM-SHA-256" | "SCRAM-SHA-512" => {
                get("sasl.username").filter(|u| !u.is_empty()).map(|u| format!("User:{u}")).ok_or_else(|| {
                    format!("cluster `{cluster}`: sasl.username is not set, so ferry cannot tell its principal")
                })
            }
            "GSSAPI" => get("sasl.kerberos.principal")
                .and_then(|p| p.split(['/', '@']).next().map(str::to_string))
                .filter(|p| !p.is_empty())
                .map(|p| format!("User:{p}"))
                .ok_or_else(|| format!("cluster `{cluster}`: sasl.kerberos.principal is not set")),
            other => Err(format!(
                "cluster `{cluster}`: with sasl.mechanism {other} the broker names ferry's principal from the \
                 token, which ferry cannot know"
            )),
        };
    }
    if protocol == "ssl" {
        return target
            .client_files
            .iter()
            .filter(|f| f.role() == Some("client"))
            .flat_map(|f| f.certificates.first())
            .map(|c| format!("User:{}", c.subject))
            .next()
            .ok_or_else(|| {
                format!(
                    "cluster `{cluster}`: no client certificate (ssl.certificate.location), so ferry is User:ANONYMOUS"
                )
            });
    }
    Err(format!("cluster `{cluster}`: over {protocol} every client is User:ANONYMOUS; ferry cannot be told apart"))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn cluster(props: &[(&str, &str)]) -> ClusterSpec {
        ClusterSpec {
            alias: "west".into(),
            bootstrap_servers: "localhost:9092".into(),
            client: props.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            file_keys: BTreeSet::new(),
            secret_files: Vec::new(),
            client_files: Vec::new(),
            schema_registry: None,
            file: "flows.toml".into(),
        }
    }

    #[test]
    fn ferrys_principal_comes_from_the_targets_client_properties() {
        let scram = cluster(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "syncer"),
        ]);
        assert_eq!(own_principal(&scram).as_deref(), Ok("User:syncer"));
        let kerberos =
            cluster(&[("security.protocol", "sasl_plaintext"), ("sasl.kerberos.principal", "ferry/host@EX.COM")]);
        assert_eq!(own_principal(&kerberos).as_deref(), Ok("User:ferry"));
        let oauth = cluster(&[("security.protocol", "sasl_ssl"), ("sasl.mechanism", "OAUTHBEARER")]);
        assert!(own_principal(&oauth).unwrap_err().contains("OAUTHBEARER"));
        let plain = cluster(&[]);
        assert!(own_principal(&plain).unwrap_err().contains("User:ANONYMOUS"));
    }
}
