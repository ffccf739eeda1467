//! Logging principals in (`kinit` from the keytab, into the principal's cache) and renewing their
//! tickets while flows use them.
//!
//! A ticket is renewed at 80 % of its life (start to end, the KDC's clock), as the JVM's Kerberos login
//! does, and never sooner than `sasl.kerberos.min.time.before.relogin` after the last login (librdkafka's
//! meaning: a minimum between relogins). The renewal is a fresh login from the keytab into a new cache
//! file, which gets the still-valid service tickets of the old one ([`super::ccache`]) and then replaces
//! it (a rename: a client reading the cache sees the old file or the new one, never a partial one).

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant, SystemTime};

use super::{Login, cache_dir, ccache};

/// The fraction of a ticket's life after which it is renewed (the JVM's `ticketRenewWindowFactor`).
const RENEW_AT: f64 = 0.8;
/// A failed login is not retried sooner than this: every client of a cluster asks for its login.
const RETRY_AFTER: Duration = Duration::from_secs(5);
/// How long `kinit` may take (an unreachable KDC makes it wait for its own timeouts).
const KINIT_TIMEOUT: Duration = Duration::from_secs(30);

/// What became of one login.
#[derive(Default)]
struct State {
    /// When the ticket of the last successful login is due for renewal.
    renew_at: Option<Instant>,
    /// The last failure and when: later clients get it without another `kinit` for a while.
    failed: Option<(Instant, String)>,
    /// A `kinit` of it is running: others wait for its result instead of running their own.
    in_flight: bool,
    /// Who still needs it: the node's connections of its clusters.
    holders: Vec<Weak<Hold>>,
    /// Whether a connection held it: it is forgotten when none does any more. (A one-shot command's
    /// logins are never held, and go when it exits.)
    held: bool,
}

static LOGINS: LazyLock<Mutex<HashMap<Login, State>>> = LazyLock::new(Default::default);
/// Signalled whenever a `kinit` finishes.
static FINISHED: std::sync::Condvar = std::sync::Condvar::new();
static RENEWER: OnceLock<()> = OnceLock::new();

fn logins() -> std::sync::MutexGuard<'static, HashMap<Login, State>> {
    LOGINS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Keeps a login while it lives (a node's cluster connection holds one). When the last holder of a
/// login goes, the login is forgotten, and its principal's ticket deleted unless another login of the
/// principal remains.
#[derive(Debug)]
pub struct Hold;

/// Keeps `login` for as long as the returned value lives.
pub fn hold(login: &Login) -> Arc<Hold> {
    let h = Arc::new(Hold);
    let mut logins = logins();
    let state = logins.entry(login.clone()).or_default();
    state.holders.retain(|w| w.strong_count() > 0);
    state.holders.push(Arc::downgrade(&h));
    state.held = true;
    h
}

/// Makes sure `login` holds a valid ticket: logs it in unless its last login is not due for renewal
/// yet. `Err` is the named reason, for the client that needed it. One `kinit` per login at a time: a
/// caller that finds one running waits for its result.
pub fn ensure(login: &Login) -> Result<(), String> {
    RENEWER.get_or_init(start_renewer);
    {
        let mut logins = logins();
        loop {
            let s = logins.entry(login.clone()).or_default();
            if s.in_flight {
                logins = FINISHED.wait(logins).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            if s.failed.is_none() && s.renew_at.is_some_and(|at| Instant::now() < at) {
                return Ok(());
            }
            if let Some((at, reason)) = &s.failed
                && at.elapsed() < RETRY_AFTER
            {
                let (reason, logged_in) = (reason.clone(), s.renew_at.is_some());
                drop(logins);
                return still_valid(login, logged_in, reason);
            }
            s.in_flight = true;
            break;
        }
    }
    let result = kinit(login);
    let logged_in = record(login, &result);
    result.map(drop).or_else(|reason| still_valid(login, logged_in, reason))
}

/// A KDC that does not answer says nothing about the keytab: while the ticket of this login's last
/// success is valid, clients use it (a renewal failed during a KDC outage, and a flow restarts).
fn still_valid(login: &Login, logged_in: bool, reason: String) -> Result<(), String> {
    if stands_in(logged_in, &reason, || ticket_valid(login)) { Ok(()) } else { Err(reason) }
}

/// Whether the cached ticket stands in for a login that failed for `reason`. Only for a login (keytab
/// content) that worked before: one that never did may be a stale keytab's, and must not use the ticket
/// that another keytab of the principal obtained.
fn stands_in(logged_in: bool, reason: &str, ticket_valid: impl FnOnce() -> bool) -> bool {
    logged_in && transient(reason) && ticket_valid()
}

/// A failure that says nothing about the keytab: the KDC did not answer.
fn transient(reason: &str) -> bool {
    let r = reason.to_ascii_lowercase();
    r.contains("cannot contact any kdc") || r.contains("did not finish within")
}

/// Whether the principal's cache holds a ticket that has not expired (`klist -s`).
fn ticket_valid(login: &Login) -> bool {
    let cache = format!("DIR::{}", cache_dir::path().join(login.cache_file()).display());
    Command::new("klist")
        .args(["-s", "-c", &cache])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// When a login is renewed after it succeeded: at 80 % of its ticket's life, never sooner than the
/// minimum between relogins (nor later, when the life is unknown).
fn renew_after(life: Option<Duration>, min_relogin: Duration) -> Duration {
    life.map_or(min_relogin, |life| life.mul_f64(RENEW_AT).max(min_relogin))
}

/// A login that worked: its ticket's life (when the cache could be read) and how many service tickets
/// it kept from the cache it replaced.
struct LoggedIn {
    life: Option<Duration>,
    kept: usize,
}

/// Records a `kinit`'s outcome; whether the login has a ticket from this or an earlier success.
fn record(login: &Login, result: &Result<LoggedIn, String>) -> bool {
    let mut logins = logins();
    let state = logins.entry(login.clone()).or_default();
    state.in_flight = false;
    let renewal = state.renew_at.is_some();
    match result {
        Ok(done) => {
            let after = renew_after(done.life, login.min_relogin);
            state.renew_at = Some(Instant::now() + after);
            state.failed = None;
            let (principal, keytab) = (&login.principal, login.keytab.display());
            let life = done.life.map(|l| format!("{l:?}")).unwrap_or_else(|| "unknown".into());
            tracing::info!(%principal, %keytab, %life, next_renewal_in = ?after, kept_service_tickets = done.kept,
                "{}", if renewal { "Kerberos ticket renewed" } else { "Kerberos login" });
            if done.life.is_some_and(|life| login.min_relogin >= life) {
                tracing::warn!(%principal, %keytab, %life, min_relogin = ?login.min_relogin,
                    "the ticket expires before sasl.kerberos.min.time.before.relogin allows its renewal: lower that property");
            }
        }
        Err(reason) => state.failed = Some((Instant::now(), reason.clone())),
    }
    let logged_in = state.renew_at.is_some();
    if result.is_ok() {
        // A new principal of a realm replaces any other's ticket there (a reload changed the principal):
        // the library would pick either.
        let others: Vec<String> = logins
            .keys()
            .filter(|l| l.principal != login.principal && l.realm().eq_ignore_ascii_case(login.realm()))
            .map(|l| l.cache_file())
            .collect();
        for file in others {
            let _ = std::fs::remove_file(cache_dir::path().join(file));
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
    logged_in
}

/// The collection's primary cache (what the library uses for a broker whose realm it cannot tell): the
/// one principal's when the node logs in only one, none otherwise (it could be another realm's).
fn set_primary(logins: &HashMap<Login, State>) {
    let mut principals: Vec<&Login> = logins.iter().filter(|(_, s)| s.renew_at.is_some()).map(|(l, _)| l).collect();
    principals.sort_by(|a, b| a.principal.cmp(&b.principal));
    principals.dedup_by(|a, b| a.principal == b.principal);
    let dir = cache_dir::path();
    let primary = dir.join("primary");
    match principals.as_slice() {
        [only] => {
            let tmp = dir.join(".primary.tmp");
            if std::fs::write(&tmp, format!("{}\n", only.cache_file())).is_ok() {
                let _ = std::fs::rename(&tmp, &primary);
            }
        }
        _ => {
            let _ = std::fs::remove_file(&primary);
        }
    }
}

/// Renews, every second, each login that is held and due; forgets logins nobody holds.
fn start_renewer() {
    let spawned = std::thread::Builder::new().name("kerberos-renew".into()).spawn(|| {
        loop {
            std::thread::sleep(Duration::from_secs(1));
            for login in due() {
                renew(&login);
            }
        }
    });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the Kerberos renewal thread; tickets will not be renewed");
    }
}

/// The logins due for renewal. Logins nobody holds any more (their clusters' flows went) are
/// forgotten, and a principal no login uses loses its ticket at once: it must not serve anyone else.
fn due() -> Vec<Login> {
    let mut logins = logins();
    let before: Vec<Login> = logins.keys().cloned().collect();
    logins.retain(|_, s| {
        s.holders.retain(|w| w.strong_count() > 0);
        s.in_flight || !s.holders.is_empty() || !s.held
    });
    for gone in before.iter().filter(|l| !logins.keys().any(|k| k.principal == l.principal)) {
        let _ = std::fs::remove_file(cache_dir::path().join(gone.cache_file()));
    }
    if logins.len() != before.len() {
        set_primary(&logins);
    }
    // A login that never worked is retried by the clients that need it (their flows restart with
    // backoff), not here: renewal is for tickets that exist.
    let now = Instant::now();
    logins
        .iter()
        .filter(|(_, s)| !s.in_flight && s.renew_at.is_some_and(|at| now >= at))
        .filter(|(_, s)| s.failed.as_ref().is_none_or(|(at, _)| at.elapsed() >= RETRY_AFTER))
        .map(|(l, _)| l.clone())
        .collect()
}

fn renew(login: &Login) {
    let was_failing = {
        let mut logins = logins();
        match logins.get_mut(login) {
            Some(s) if !s.in_flight => {
                s.in_flight = true;
                s.failed.is_some()
            }
            _ => return,
        }
    };
    let result = kinit(login);
    if let Err(reason) = &result
        && !was_failing
    {
        tracing::warn!(principal = %login.principal, keytab = %login.keytab.display(), %reason,
            "Kerberos ticket renewal failed; the clients of this principal keep their current ticket until it expires");
    }
    record(login, &result);
}

/// `kinit` from the keytab into a new cache file, which gets the old cache's service tickets and then
/// replaces it.
fn kinit(login: &Login) -> Result<LoggedIn, String> {
    static FRESH: AtomicU64 = AtomicU64::new(0);
    let failed = |why: String| {
        format!("Kerberos login as `{}` from keytab `{}` failed: {why}", login.principal, login.keytab.display())
    };
    crate::failpoints::check(crate::failpoints::KINIT).map_err(failed)?;
    let dir = cache_dir::prepared()
        .map_err(|e| failed(format!("cannot prepare the ticket cache dir {}: {e}", cache_dir::path().display())))?;
    let cache = dir.join(login.cache_file());
    // Outside the collection until it is complete (the library reads only files named `tkt…`).
    let fresh = dir.join(format!("new-{}-{}", login.cache_file(), FRESH.fetch_add(1, Ordering::Relaxed)));
    let ran = run_kinit(login, &dir, &fresh).map_err(failed);
    let done = ran.and_then(|()| {
        let bytes = std::fs::read(&fresh).map_err(|e| failed(format!("cannot read the new ticket cache: {e}")))?;
        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let (merged, kept) = match std::fs::read(&cache) {
            Ok(old) => ccache::keep_service_tickets(&bytes, &old, now),
            Err(_) => (bytes.clone(), 0),
        };
        if kept > 0 {
            std::fs::write(&fresh, merged).map_err(|e| failed(format!("cannot write the ticket cache: {e}")))?;
        }
        std::fs::rename(&fresh, &cache).map_err(|e| failed(format!("cannot replace the ticket cache: {e}")))?;
        Ok(LoggedIn { life: ccache::tgt_life(&bytes), kept })
    });
    if done.is_err() {
        let _ = std::fs::remove_file(&fresh);
    }
    done
}

/// Runs `kinit -k -t KEYTAB -c FILE:<fresh> PRINCIPAL`; `Err` is kinit's complaint with a hint.
fn run_kinit(login: &Login, dir: &Path, fresh: &Path) -> Result<(), String> {
    let mut child = Command::new("kinit")
        .arg("-k")
        .arg("-t")
        .arg(&login.keytab)
        .args(["-c", &format!("FILE:{}", fresh.display()), &login.principal])
        .env("KRB5CCNAME", format!("DIR:{}", dir.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run kinit ({e}): ferry needs MIT Kerberos' kinit on PATH (Debian: krb5-user)"))?;
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() > KINIT_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("kinit did not finish within {KINIT_TIMEOUT:?} (is the KDC reachable?)"));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("waiting for kinit: {e}")),
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
    Err(match hint(&said) {
        Some(h) => format!("{said} ({h})"),
        None => said,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_is_renewed_at_80_percent_of_its_life_and_no_sooner_than_the_minimum() {
        let (secs, min) = (Duration::from_secs, Duration::from_secs(60));
        assert_eq!(renew_after(Some(secs(10 * 3600)), min), secs(8 * 3600));
        assert_eq!(renew_after(Some(secs(40)), secs(10)), secs(32));
        // sasl.kerberos.min.time.before.relogin is a minimum between relogins, as librdkafka documents it.
        assert_eq!(renew_after(Some(secs(40)), min), min);
        assert_eq!(renew_after(None, min), min);
    }

    #[test]
    fn a_kdc_that_does_not_answer_lets_a_login_that_worked_use_its_valid_ticket() {
        let away = "kinit: Cannot contact any KDC for realm 'CORP' while getting initial credentials";
        assert!(stands_in(true, away, || true));
        assert!(stands_in(true, "kinit did not finish within 30s (is the KDC reachable?)", || true));
        // The ticket expired; the login never worked; the KDC answered and refused the key.
        assert!(!stands_in(true, away, || false));
        assert!(!stands_in(false, away, || true));
        assert!(!stands_in(true, "kinit: Preauthentication failed while getting initial credentials", || true));
    }

    #[test]
    fn kinit_complaints_get_a_hint() {
        assert!(hint("kinit: Password incorrect while getting initial credentials").unwrap().contains("export a new"));
        assert!(hint("kinit: Cannot contact any KDC for realm 'X' while getting initial credentials").is_some());
        assert_eq!(hint("something else"), None);
    }
}
