//! Kerberos (GSSAPI) logins: ferry logs each principal in itself, into a ticket cache of its own.
//!
//! librdkafka's GSSAPI (Cyrus SASL over MIT Kerberos) takes its ticket from the process's default
//! credential cache, and its own refresh (`sasl.kerberos.kinit.cmd`) writes whichever principal a client
//! names into that one cache. With two clusters the last `kinit` that worked decides who every client
//! is, and a flow whose keytab no longer works authenticates with another flow's ticket (it copied
//! thousands of records instead of failing). So:
//! - the process's default cache is a *collection* private to this process (`KRB5CCNAME=DIR:<dir>`,
//!   set by [`init_process`] before any thread starts);
//! - each principal has a cache of its own in it, written by `kinit -k -t KEYTAB -c DIR::<dir>/tkt-…`;
//!   the Kerberos library picks, for each broker, the cache whose principal is in the broker's realm;
//! - a client of a GSSAPI cluster is created only after its principal logged in from *its* keytab
//!   ([`ensure`], called by `kafka::client_config`): a failed login fails that client with a named
//!   reason, so a wrong keytab fails its own flows and never borrows another cluster's ticket;
//! - librdkafka's own kinit is off (`sasl.kerberos.min.time.before.relogin = 0`, see [`configure`]);
//!   a thread of ferry's renews every login still in use every `sasl.kerberos.min.time.before.relogin`
//!   (60 s by default), so tickets shorter than a flow's life never run out while it copies.
//!
//! What is not isolated: the library chooses a cache by realm, so one node holds one principal per
//! realm. `config::validate` refuses two principals of one realm (naming both files); two clusters in
//! different realms may use different principals.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, LazyLock, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;

/// `sasl.mechanism` of Kerberos.
pub const MECHANISM: &str = "GSSAPI";
/// How often a login is renewed unless `sasl.kerberos.min.time.before.relogin` says otherwise
/// (librdkafka's default for the same property).
pub const DEFAULT_RENEW: Duration = Duration::from_secs(60);
/// A failed login is not retried sooner than this: every client of a cluster asks for its login.
const RETRY_AFTER: Duration = Duration::from_secs(5);
/// How long `kinit` may take (an unreachable KDC makes it wait for its own timeouts).
const KINIT_TIMEOUT: Duration = Duration::from_secs(30);
const RENEW_KEY: &str = "sasl.kerberos.min.time.before.relogin";

/// One principal logged in from one keytab (as its content was when the cluster was loaded: a rewritten
/// keytab is another login, logged in from the new content at once).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Login {
    pub principal: String,
    pub keytab: PathBuf,
    pub renew: Duration,
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
                "ferry logs Kerberos principals in itself (one ticket cache per principal, see README \
                 \"Kerberos\"); remove this property"
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
        let renew = match client.get(RENEW_KEY) {
            None => DEFAULT_RENEW,
            Some(v) => match v.parse::<u64>() {
                Ok(ms) if ms >= 1000 => Duration::from_millis(ms),
                _ => {
                    return Err((
                        RENEW_KEY.into(),
                        "how often ferry renews the ticket, in milliseconds: at least 1000".into(),
                    ));
                }
            },
        };
        Ok(Some(Login { principal: principal.clone(), keytab: PathBuf::from(keytab), renew, keytab_digest: None }))
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

/// The collection of ticket caches of this process.
static CACHE_DIR: OnceLock<PathBuf> = OnceLock::new();

/// Points the Kerberos library at this process's own collection of ticket caches. Call it first thing
/// in `main`, before any thread exists (it sets an environment variable). `FERRY_KRB5_CCACHE_DIR`
/// chooses the directory (e.g. a memory-backed volume); by default it is `ferry-krb5cc-<pid>` in the
/// temp dir, with a random suffix. The directory is made at the first login, readable by this user
/// only; a directory named by `FERRY_KRB5_CCACHE_DIR` is emptied of earlier tickets then.
// The one environment variable ferry sets: MIT Kerberos reads its default cache from it, in every
// thread librdkafka starts, and has no other process-wide switch.
#[allow(unsafe_code)]
#[must_use = "the caches are removed when the guard drops: hold it until the process ends"]
pub fn init_process() -> CachesGuard {
    // SAFETY: called from `main` before any other thread runs, as `set_var` requires.
    unsafe { std::env::set_var("KRB5CCNAME", format!("DIR:{}", cache_dir().display())) };
    CachesGuard
}

/// Removes this process's ticket caches when dropped, whichever command ran (`ferry check` logs in
/// too): tickets are credentials, and must not outlive the process on disk.
pub struct CachesGuard;

impl Drop for CachesGuard {
    fn drop(&mut self) {
        remove_caches();
    }
}

/// Removes this process's ticket caches (at exit): tickets are credentials.
fn remove_caches() {
    if let Some(dir) = CACHE_DIR.get()
        && std::env::var_os("FERRY_KRB5_CCACHE_DIR").is_none()
    {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The directory of this process's caches, chosen once: `FERRY_KRB5_CCACHE_DIR`, else a name in the temp
/// dir nobody could have made beforehand (it is created fresh, see `prepare_dir`).
fn cache_dir() -> PathBuf {
    CACHE_DIR
        .get_or_init(|| {
            std::env::var_os("FERRY_KRB5_CCACHE_DIR").map(PathBuf::from).unwrap_or_else(|| {
                let mut random = [0u8; 8];
                let _ = openssl::rand::rand_bytes(&mut random);
                std::env::temp_dir().join(format!("ferry-krb5cc-{}-{}", std::process::id(), hex(&random)))
            })
        })
        .clone()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What became of one login.
#[derive(Default)]
struct State {
    /// The last successful `kinit`.
    ok_at: Option<Instant>,
    /// The last failure and when: later clients get it without another `kinit` for a while.
    failed: Option<(Instant, String)>,
    /// A `kinit` of it is running: others wait for its result instead of running their own.
    in_flight: bool,
    /// Who still needs it renewed: the connections of its clusters.
    holders: Vec<Weak<Hold>>,
}

static LOGINS: LazyLock<Mutex<HashMap<Login, State>>> = LazyLock::new(Default::default);
/// Signalled whenever a `kinit` finishes.
static FINISHED: std::sync::Condvar = std::sync::Condvar::new();
static RENEWER: OnceLock<()> = OnceLock::new();

/// Keeps a login renewed while it lives (a cluster connection holds one).
#[derive(Debug)]
pub struct Hold;

/// Keeps `login` renewed for as long as the returned value lives.
pub fn hold(login: &Login) -> Arc<Hold> {
    let h = Arc::new(Hold);
    let mut logins = LOGINS.lock().unwrap_or_else(|p| p.into_inner());
    let state = logins.entry(login.clone()).or_default();
    state.holders.retain(|w| w.strong_count() > 0);
    state.holders.push(Arc::downgrade(&h));
    h
}

/// Makes sure `login` holds a valid ticket: logs it in unless it did so less than its renewal interval
/// ago. `Err` is the named reason, for the client that needed it. One `kinit` per login at a time: a
/// caller that finds one running waits for its result.
pub fn ensure(login: &Login) -> Result<(), String> {
    RENEWER.get_or_init(start_renewer);
    {
        let mut logins = LOGINS.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let s = logins.entry(login.clone()).or_default();
            if s.in_flight {
                logins = FINISHED.wait(logins).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            if s.ok_at.is_some_and(|at| at.elapsed() < login.renew) && s.failed.is_none() {
                return Ok(());
            }
            if let Some((at, reason)) = &s.failed
                && at.elapsed() < RETRY_AFTER
            {
                let reason = reason.clone();
                drop(logins);
                return if transient(&reason) && ticket_valid(login) { Ok(()) } else { Err(reason) };
            }
            s.in_flight = true;
            break;
        }
    }
    let result = kinit(login);
    record(login, &result);
    match result {
        // The KDC did not answer, but the ticket from the last login is still good: use it.
        Err(reason) if transient(&reason) && ticket_valid(login) => Ok(()),
        other => other,
    }
}

/// A failure that says nothing about the keytab: the KDC did not answer.
fn transient(reason: &str) -> bool {
    let r = reason.to_ascii_lowercase();
    r.contains("cannot contact any kdc") || r.contains("did not finish within")
}

/// Whether the principal's cache holds a ticket that has not expired (`klist -s`).
fn ticket_valid(login: &Login) -> bool {
    let cache = format!("DIR::{}", cache_dir().join(login.cache_file()).display());
    Command::new("klist")
        .args(["-s", "-c", &cache])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn record(login: &Login, result: &Result<(), String>) {
    let mut logins = LOGINS.lock().unwrap_or_else(|p| p.into_inner());
    let state = logins.entry(login.clone()).or_default();
    state.in_flight = false;
    match result {
        Ok(()) => {
            state.ok_at = Some(Instant::now());
            state.failed = None;
        }
        Err(reason) => state.failed = Some((Instant::now(), reason.clone())),
    }
    if result.is_ok() {
        // A new principal of a realm replaces any other's ticket there (a reload changed the principal):
        // the library would pick either.
        let others: Vec<String> = logins
            .keys()
            .filter(|l| l.principal != login.principal && l.realm().eq_ignore_ascii_case(login.realm()))
            .map(|l| l.cache_file())
            .collect();
        for file in others {
            let _ = std::fs::remove_file(cache_dir().join(file));
        }
    }
    set_primary(&logins);
    drop(logins);
    FINISHED.notify_all();
    let result_label = if result.is_ok() { "ok" } else { "failed" };
    let keytab = login.keytab.display().to_string();
    crate::metrics::METRICS
        .kerberos_logins
        .with_label_values(&[login.principal.as_str(), keytab.as_str(), result_label])
        .inc();
}

/// The collection's primary cache (what the library uses for a broker whose realm it cannot tell): the
/// one principal's when the node logs in only one, none otherwise (it could be another realm's).
fn set_primary(logins: &HashMap<Login, State>) {
    let mut principals: Vec<&Login> = logins.iter().filter(|(_, s)| s.ok_at.is_some()).map(|(l, _)| l).collect();
    principals.sort_by(|a, b| a.principal.cmp(&b.principal));
    principals.dedup_by(|a, b| a.principal == b.principal);
    let primary = cache_dir().join("primary");
    match principals.as_slice() {
        [only] => {
            let tmp = cache_dir().join(".primary.tmp");
            if std::fs::write(&tmp, format!("{}\n", only.cache_file())).is_ok() {
                let _ = std::fs::rename(&tmp, &primary);
            }
        }
        _ => {
            let _ = std::fs::remove_file(&primary);
        }
    }
}

/// Renews, every few seconds, each login that is held and due; forgets logins nobody holds.
fn start_renewer() {
    let spawned = std::thread::Builder::new().name("kerberos-renew".into()).spawn(|| {
        loop {
            std::thread::sleep(Duration::from_secs(2));
            let due: Vec<Login> = {
                let mut logins = LOGINS.lock().unwrap_or_else(|p| p.into_inner());
                let before: Vec<Login> = logins.keys().cloned().collect();
                logins.retain(|_, s| {
                    s.holders.retain(|w| w.strong_count() > 0);
                    s.in_flight
                        || !s.holders.is_empty()
                        || s.ok_at.is_none_or(|at| at.elapsed() < Duration::from_secs(600))
                });
                // A principal nobody logs in any more: its ticket goes (it must not serve anyone else).
                for gone in before.iter().filter(|l| !logins.keys().any(|k| k.principal == l.principal)) {
                    let _ = std::fs::remove_file(cache_dir().join(gone.cache_file()));
                }
                if logins.len() != before.len() {
                    set_primary(&logins);
                }
                // A login that never worked is retried by the clients that need it (their flows restart
                // with backoff), not here: renewal is for tickets that exist.
                logins
                    .iter()
                    .filter(|(_, s)| !s.holders.is_empty() && s.ok_at.is_some() && !s.in_flight)
                    .filter(|(l, s)| {
                        let renew_due = s.ok_at.is_none_or(|at| at.elapsed() >= l.renew);
                        let retry_due = s.failed.as_ref().is_none_or(|(at, _)| at.elapsed() >= RETRY_AFTER);
                        renew_due && retry_due
                    })
                    .map(|(l, _)| l.clone())
                    .collect()
            };
            for login in due {
                let was_failing = {
                    let mut logins = LOGINS.lock().unwrap_or_else(|p| p.into_inner());
                    match logins.get_mut(&login) {
                        Some(s) if !s.in_flight => {
                            s.in_flight = true;
                            s.failed.is_some()
                        }
                        _ => continue,
                    }
                };
                let result = kinit(&login);
                if let Err(reason) = &result
                    && !was_failing
                {
                    tracing::warn!(principal = %login.principal, keytab = %login.keytab.display(), %reason,
                        "Kerberos ticket renewal failed; the clients of this principal keep their current ticket until it expires");
                }
                record(&login, &result);
            }
        }
    });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the Kerberos renewal thread; tickets will not be renewed");
    }
}

/// `kinit` from the keytab into the principal's own cache.
fn kinit(login: &Login) -> Result<(), String> {
    let dir = cache_dir();
    let failed = |why: String| {
        format!("Kerberos login as `{}` from keytab `{}` failed: {why}", login.principal, login.keytab.display())
    };
    prepare_dir(&dir).map_err(|e| failed(format!("cannot prepare the ticket cache dir {}: {e}", dir.display())))?;
    let cache = format!("DIR::{}", dir.join(login.cache_file()).display());
    let mut child = Command::new("kinit")
        .arg("-k")
        .arg("-t")
        .arg(&login.keytab)
        .args(["-c", &cache, &login.principal])
        .env("KRB5CCNAME", format!("DIR:{}", dir.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            failed(format!("cannot run kinit ({e}): ferry needs MIT Kerberos' kinit on PATH (Debian: krb5-user)"))
        })?;
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() > KINIT_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(failed(format!("kinit did not finish within {KINIT_TIMEOUT:?} (is the KDC reachable?)")));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(failed(format!("waiting for kinit: {e}"))),
        }
    };
    if status.success() {
        return Ok(());
    }
    let mut stderr = String::new();
    if let Some(mut err) = child.stderr.take() {
        use std::io::Read;
        let _ = err.read_to_string(&mut stderr);
    }
    let said = stderr.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ");
    let said = if said.is_empty() { format!("kinit exited with {status}") } else { said };
    Err(failed(match hint(&said) {
        Some(h) => format!("{said} ({h})"),
        None => said,
    }))
}

/// What an operator does about kinit's usual complaints.
fn hint(said: &str) -> Option<&'static str> {
    let s = said.to_ascii_lowercase();
    [
        ("password incorrect", "the keytab's key is not the principal's current key: export a new keytab"),
        ("preauthentication failed", "the keytab's key is not the principal's current key: export a new keytab"),
        ("key table entry not found", "the keytab holds no key for this principal"),
        ("no suitable keys", "the keytab holds no key for this principal"),
        ("not found in kerberos database", "the KDC does not know this principal"),
        ("key table file", "the keytab cannot be read"),
        ("cannot contact any kdc", "no KDC of the realm answers: check krb5.conf and the network"),
        ("cannot find kdc", "krb5.conf names no KDC for the principal's realm"),
        ("clock skew", "this machine's clock differs too much from the KDC's"),
        ("expired", "the principal or its password has expired at the KDC"),
    ]
    .iter()
    .find(|(needle, _)| s.contains(needle))
    .map(|(_, h)| *h)
}

/// Makes the cache directory, once per process: created fresh (it must not exist: nobody else may have
/// prepared it), or, when the operator named it, a real directory (not a link) emptied of earlier
/// tickets, readable by this user only.
fn prepare_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    static PREPARED: Mutex<bool> = Mutex::new(false);
    let mut prepared = PREPARED.lock().unwrap_or_else(|p| p.into_inner());
    if *prepared {
        return Ok(());
    }
    if std::env::var_os("FERRY_KRB5_CCACHE_DIR").is_none() {
        std::fs::DirBuilder::new().mode(0o700).create(dir)?;
    } else {
        if !dir.exists() {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        }
        let meta = std::fs::symlink_metadata(dir)?;
        if !meta.is_dir() {
            return Err(std::io::Error::other("not a directory (a link is not accepted)"));
        }
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        for entry in std::fs::read_dir(dir)?.flatten() {
            let name = entry.file_name();
            if name.to_string_lossy().starts_with("tkt") || name == "primary" {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    *prepared = true;
    Ok(())
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
        assert_eq!((login.realm(), login.renew), ("EXAMPLE.COM", DEFAULT_RENEW));
        assert!(login.cache_file().starts_with("tkt-ferry_EXAMPLE.COM-"), "{}", login.cache_file());

        let key = |p: &[(&str, &str)]| Login::of(&props(p)).unwrap_err().0;
        assert_eq!(key(&[GSSAPI, KEYTAB]), "sasl.kerberos.principal");
        assert_eq!(key(&[GSSAPI, ("sasl.kerberos.principal", "ferry"), KEYTAB]), "sasl.kerberos.principal");
        assert_eq!(key(&[GSSAPI, PRINCIPAL]), "sasl.kerberos.keytab");
        assert_eq!(key(&[GSSAPI, PRINCIPAL, KEYTAB, ("sasl.kerberos.kinit.cmd", "kinit")]), "sasl.kerberos.kinit.cmd");
        assert_eq!(key(&[GSSAPI, PRINCIPAL, KEYTAB, (RENEW_KEY, "0")]), RENEW_KEY);
        let fast = Login::of(&props(&[GSSAPI, PRINCIPAL, KEYTAB, (RENEW_KEY, "20000")])).unwrap().unwrap();
        assert_eq!(fast.renew, Duration::from_secs(20));
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
        let login =
            |p: &str| Login { principal: p.into(), keytab: "/k".into(), renew: DEFAULT_RENEW, keytab_digest: None };
        let found = conflicting_principals([
            ("east", login("ferry@CORP")),
            ("west", login("ferry@CORP")),
            ("lab", login("ferry@LAB")),
            ("audit", login("auditor@CORP")),
        ]);
        assert_eq!(found, vec![(("east".into(), "ferry@CORP".into()), ("audit".into(), "auditor@CORP".into()))]);
    }

    #[test]
    fn kinit_complaints_get_a_hint() {
        assert!(hint("kinit: Password incorrect while getting initial credentials").unwrap().contains("export a new"));
        assert!(hint("kinit: Cannot contact any KDC for realm 'X' while getting initial credentials").is_some());
        assert_eq!(hint("something else"), None);
    }
}
