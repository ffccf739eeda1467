//! Kerberos (GSSAPI) logins: ferry logs each principal in itself, into a ticket cache of its own.
//!
//! librdkafka's GSSAPI (Cyrus SASL over MIT Kerberos) takes its ticket from the process's default
//! credential cache, and its own refresh (`sasl.kerberos.kinit.cmd`) writes whichever principal a client
//! names into that one cache. With two clusters the last `kinit` that worked decides who every client
//! is, and a flow whose keytab no longer works authenticates with another flow's ticket (it copied
//! thousands of records instead of failing). So:
//! - the process's default cache is a *collection* private to this process (`KRB5CCNAME=DIR:<dir>`,
//!   set by [`init_process`] before any thread starts; [`cache_dir`]);
//! - each principal has a cache of its own in it, written by `kinit -k -t KEYTAB`; the Kerberos library
//!   picks, for each broker, the cache whose principal is in the broker's realm;
//! - a client of a GSSAPI cluster is created only after its principal logged in from *its* keytab
//!   ([`ensure`], called by `kafka::client_config`): a failed login fails that client with a named
//!   reason, so a wrong keytab fails its own flows and never borrows another cluster's ticket;
//! - librdkafka's own kinit is off (`sasl.kerberos.min.time.before.relogin = 0`, see [`configure`]);
//!   a thread of ferry's renews every login still in use at 80 % of its ticket's life, keeping the
//!   service tickets the clients hold ([`login`]), so tickets shorter than a flow's life never run out
//!   while it copies.
//!
//! What is not isolated: the library chooses a cache by realm, so one node holds one principal per
//! realm. `config::validate` refuses two principals of one realm (naming both files); two clusters in
//! different realms may use different principals.

mod cache_dir;
mod ccache;
mod login;

use std::collections::BTreeMap;

use rdkafka::config::ClientConfig;

use crate::config::login::RENEW_KEY;
pub use crate::config::login::{DEFAULT_MIN_RELOGIN, Login, MECHANISM, conflicting_principals};
pub use cache_dir::{CachesGuard, init_process};
pub use login::{Hold, ensure, hold};

impl Login {
    /// The name of its cache in the collection: readable in `klist -A`, unique per principal.
    pub(crate) fn cache_file(&self) -> String {
        let readable: String = self
            .principal
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || ".-".contains(c) { c } else { '_' })
            .collect();
        let digest = openssl::sha::sha256(self.principal.as_bytes());
        format!("tkt-{readable}-{}", hex(&digest[..4]))
    }
}

/// Sets what ferry needs on a client of a GSSAPI cluster (nothing for others): librdkafka's own kinit
/// off, since ferry logs in and renews (see the module doc).
pub fn configure(cfg: &mut ClientConfig, client: &BTreeMap<String, String>) {
    if matches!(Login::of(client), Ok(Some(_))) {
        cfg.set(RENEW_KEY, "0");
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    const GSSAPI: (&str, &str) = ("sasl.mechanism", "GSSAPI");
    const PRINCIPAL: (&str, &str) = ("sasl.kerberos.principal", "ferry@EXAMPLE.COM");
    const KEYTAB: (&str, &str) = ("sasl.kerberos.keytab", "/etc/ferry/ferry.keytab");

    #[test]
    fn a_gssapi_cluster_needs_a_principal_with_its_realm_and_a_keytab() {
        assert_eq!(Login::of(&props(&[("sasl.mechanism", "SCRAM-SHA-512")])), Ok(None));
        let login = Login::of(&props(&[GSSAPI, PRINCIPAL, KEYTAB])).unwrap().unwrap();
        assert_eq!((login.realm(), login.min_relogin), ("EXAMPLE.COM", DEFAULT_MIN_RELOGIN));
        assert!(login.cache_file().starts_with("tkt-ferry_EXAMPLE.COM-"), "{}", login.cache_file());

        let key = |p: &[(&str, &str)]| Login::of(&props(p)).unwrap_err().0;
        assert_eq!(key(&[GSSAPI, KEYTAB]), "sasl.kerberos.principal");
        assert_eq!(key(&[GSSAPI, ("sasl.kerberos.principal", "ferry"), KEYTAB]), "sasl.kerberos.principal");
        assert_eq!(key(&[GSSAPI, PRINCIPAL]), "sasl.kerberos.keytab");
        assert_eq!(key(&[GSSAPI, PRINCIPAL, KEYTAB, ("sasl.kerberos.kinit.cmd", "kinit")]), "sasl.kerberos.kinit.cmd");
        assert_eq!(key(&[GSSAPI, PRINCIPAL, KEYTAB, (RENEW_KEY, "0")]), RENEW_KEY);
        let fast = Login::of(&props(&[GSSAPI, PRINCIPAL, KEYTAB, (RENEW_KEY, "20000")])).unwrap().unwrap();
        assert_eq!(fast.min_relogin, Duration::from_secs(20));
    }

    #[test]
    fn gssapi_is_also_what_a_sasl_protocol_without_a_mechanism_means() {
        let key = |p: &[(&str, &str)]| Login::of(&props(p)).unwrap_err().0;
        // librdkafka's default mechanism, and the alias of `sasl.mechanism`: both need ferry's login.
        assert_eq!(key(&[("security.protocol", "SASL_SSL"), KEYTAB]), "sasl.kerberos.principal");
        assert_eq!(key(&[("sasl.mechanisms", "GSSAPI"), PRINCIPAL]), "sasl.kerberos.keytab");
        assert_eq!(Login::of(&props(&[("security.protocol", "SSL")])), Ok(None));
        assert_eq!(Login::of(&props(&[("security.protocol", "SASL_SSL"), ("sasl.mechanisms", "PLAIN")])), Ok(None));
    }

    #[test]
    fn librdkafka_never_runs_its_own_kinit_for_a_gssapi_cluster() {
        let mut cfg = ClientConfig::new();
        configure(&mut cfg, &props(&[GSSAPI, PRINCIPAL, KEYTAB, (RENEW_KEY, "20000")]));
        assert_eq!(cfg.get(RENEW_KEY), Some("0"));
        let mut plain = ClientConfig::new();
        configure(&mut plain, &props(&[("sasl.mechanism", "PLAIN")]));
        assert_eq!(plain.get(RENEW_KEY), None);
    }

    #[test]
    fn one_principal_per_realm() {
        let login = |p: &str| Login {
            principal: p.into(),
            keytab: "/k".into(),
            min_relogin: DEFAULT_MIN_RELOGIN,
            keytab_digest: None,
        };
        let found = conflicting_principals([
            ("east", login("ferry@CORP")),
            ("west", login("ferry@CORP")),
            ("lab", login("ferry@LAB")),
            ("audit", login("auditor@CORP")),
        ]);
        assert_eq!(found, vec![(("east".into(), "ferry@CORP".into()), ("audit".into(), "auditor@CORP".into()))]);
    }
}
