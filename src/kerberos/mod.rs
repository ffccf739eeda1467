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
use std::path::PathBuf;
use std::time::Duration;

use rdkafka::config::ClientConfig;

pub use cache_dir::{CachesGuard, init_process};
pub use login::{Hold, ensure, hold};

/// `sasl.mechanism` of Kerberos.
pub const MECHANISM: &str = "GSSAPI";
/// The least time between two logins of a principal unless `sasl.kerberos.min.time.before.relogin`
/// says otherwise (librdkafka's default for the same property).
pub const DEFAULT_MIN_RELOGIN: Duration = Duration::from_secs(60);
const RENEW_KEY: &str = "sasl.kerberos.min.time.before.relogin";

/// One principal logged in from one keytab (as its content was when the cluster was loaded: a rewritten
/// keytab is another login, logged in from the new content at once).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Login {
    pub principal: String,
    pub keytab: PathBuf,
    /// `sasl.kerberos.min.time.before.relogin`: the least time between two logins.
    pub min_relogin: Duration,
    pub keytab_digest: Option<[u8; 32]>,
}

/// Whether a client with these properties authenticates with GSSAPI: librdkafka's default mechanism
/// for a `SASL_*` protocol is GSSAPI, and `sasl.mechanisms` is an alias of `sasl.mechanism`.
fn uses_gssapi(client: &BTreeMap<String, String>) -> bool {
    let get = |k: &str| client.iter().find(|(key, _)| key.eq_ignore_ascii_case(k)).map(|(_, v)| v.trim());
    match get("sasl.mechanism").or_else(|| get("sasl.mechanisms")) {
        Some(m) => m.eq_ignore_ascii_case(MECHANISM),
        None => get("security.protocol").is_some_and(|p| p.to_ascii_uppercase().starts_with("SASL_")),
    }
}

impl Login {
    /// The login a cluster's client properties ask for: `None` unless they authenticate with GSSAPI;
    /// `Err((property, reason))` when they cannot be logged in by ferry.
    pub fn of(client: &BTreeMap<String, String>) -> Result<Option<Login>, (String, String)> {
        if !uses_gssapi(client) {
            return Ok(None);
        }
        if client.contains_key("sasl.kerberos.kinit.cmd") {
            return Err((
                "sasl.kerberos.kinit.cmd".into(),
                "ferry logs Kerberos principals in itself (one ticket cache per principal, see docs/security.md, \
                 \"Kerberos (GSSAPI)\"); remove this property"
                    .into(),
            ));
        }
        let principal = client.get("sasl.kerberos.principal").ok_or_else(|| {
            (
                "sasl.kerberos.principal".to_string(),
                "GSSAPI needs the client's principal, e.g. `ferry@EXAMPLE.COM`".into(),
            )
        })?;
        if principal.rsplit_once('@').is_none_or(|(name, realm)| name.is_empty() || realm.is_empty()) {
            return Err((
                "sasl.kerberos.principal".into(),
                format!("`{principal}` names no realm: write it as `name@REALM` (the realm picks its ticket cache)"),
            ));
        }
        let keytab = client.get("sasl.kerberos.keytab").ok_or_else(|| {
            (
                "sasl.kerberos.keytab".to_string(),
                "GSSAPI needs a keytab: ferry logs the principal in from it and renews the ticket itself".into(),
            )
        })?;
        let min_relogin = match client.get(RENEW_KEY) {
            None => DEFAULT_MIN_RELOGIN,
            Some(v) => match v.parse::<u64>() {
                Ok(ms) if ms >= 1000 => Duration::from_millis(ms),
                _ => {
                    return Err((
                        RENEW_KEY.into(),
                        "the least time between two logins of the principal, in milliseconds: at least 1000".into(),
                    ));
                }
            },
        };
        Ok(Some(Login {
            principal: principal.clone(),
            keytab: PathBuf::from(keytab),
            min_relogin,
            keytab_digest: None,
        }))
    }

    /// [`Login::of`] a loaded cluster, with its keytab's digest.
    pub fn of_cluster(cluster: &crate::config::ClusterSpec) -> Result<Option<Login>, (String, String)> {
        Ok(Login::of(&cluster.client)?.map(|mut l| {
            l.keytab_digest = cluster.client_files.iter().find(|f| f.key == "sasl.kerberos.keytab").map(|f| f.digest);
            l
        }))
    }

    pub fn realm(&self) -> &str {
        self.principal.rsplit_once('@').map_or("", |(_, r)| r)
    }

    /// The name of its cache in the collection: readable in `klist -A`, unique per principal.
    fn cache_file(&self) -> String {
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

/// Two clusters of one node that log in to one realm as different principals: the Kerberos library
/// would pick one ticket for both (see the module doc). Each pair found is `(earlier, later)` by the
/// order given, each as (name, principal).
pub fn conflicting_principals<'a>(
    clusters: impl IntoIterator<Item = (&'a str, Login)>,
) -> Vec<((String, String), (String, String))> {
    let mut by_realm: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut conflicts = Vec::new();
    for (name, login) in clusters {
        let realm = login.realm().to_string();
        match by_realm.get(&realm) {
            Some((first, principal)) if *principal != login.principal => {
                conflicts.push(((first.clone(), principal.clone()), (name.to_string(), login.principal.clone())));
            }
            Some(_) => {}
            None => {
                by_realm.insert(realm, (name.to_string(), login.principal.clone()));
            }
        }
    }
    conflicts
}

#[cfg(test)]
mod tests {
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
