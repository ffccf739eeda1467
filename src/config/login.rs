//! The Kerberos login a cluster's client properties ask for (principal, keytab, least time between
//! logins), read without logging in: plain data that validation, the clients and the `kerberos` module
//! (which does the logging in) all use, so it lives below them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::ClusterSpec;

/// `sasl.mechanism` of Kerberos.
pub const MECHANISM: &str = "GSSAPI";
/// The least time between two logins of a principal unless `sasl.kerberos.min.time.before.relogin`
/// says otherwise (librdkafka's default for the same property).
pub const DEFAULT_MIN_RELOGIN: Duration = Duration::from_secs(60);
pub(crate) const RENEW_KEY: &str = "sasl.kerberos.min.time.before.relogin";

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
    pub fn of_cluster(cluster: &ClusterSpec) -> Result<Option<Login>, (String, String)> {
        Ok(Login::of(&cluster.client)?.map(|mut l| {
            l.keytab_digest = cluster.client_files.iter().find(|f| f.key == "sasl.kerberos.keytab").map(|f| f.digest);
            l
        }))
    }

    pub fn realm(&self) -> &str {
        self.principal.rsplit_once('@').map_or("", |(_, r)| r)
    }
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
