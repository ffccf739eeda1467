//! Why a cluster does not answer: the connection problems librdkafka reports (a wrong password, an
//! untrusted certificate, a refused port), kept per broker address and cluster, so that a timed-out
//! operation names its cause instead of only "timed out".

use super::*;

/// How long a connection problem librdkafka reported explains later failures of the same cluster.
const CAUSE_WINDOW: Duration = Duration::from_secs(300);

/// What librdkafka said recently about connections, by broker address (`host:port`), and the bootstrap
/// servers of each cluster alias, to attribute the former to a cluster.
#[derive(Default)]
pub(super) struct Causes {
    pub(super) by_address: HashMap<String, (std::time::Instant, String)>,
    pub(super) bootstraps: HashMap<String, String>,
    /// What the last [`diagnose`] of each cluster alias found (`None`: it connected), and when.
    pub(super) by_cluster: HashMap<String, (std::time::Instant, Option<String>)>,
    /// Aliases with a diagnosis running.
    pub(super) diagnosing: std::collections::HashSet<String>,
}

/// At most one diagnosis per cluster this often.
const DIAGNOSE_EVERY: Duration = Duration::from_secs(30);

/// Connects to `cluster` once, on a thread of its own, and records why it refuses the connection, if
/// it does (see [`KafkaOpError`]'s `cause`). Clients of the actors cannot tell: librdkafka delivers
/// their connection errors only when they are polled, and admin and metadata clients are not. Runs
/// when a client of the cluster is built, at most every [`DIAGNOSE_EVERY`].
pub(super) fn diagnose(cluster: &ClusterSpec) {
    {
        let mut causes = CAUSES.lock().unwrap_or_else(|p| p.into_inner());
        let recent = causes.by_cluster.get(&cluster.alias).is_some_and(|(at, _)| at.elapsed() < DIAGNOSE_EVERY);
        if recent || !causes.diagnosing.insert(cluster.alias.clone()) {
            return;
        }
    }
    let (cluster, alias) = (cluster.clone(), cluster.alias.clone());
    let spawned = std::thread::Builder::new().name(format!("diagnose {alias}")).spawn(move || {
        let found = connection_error(&cluster, Duration::from_secs(10));
        let mut causes = CAUSES.lock().unwrap_or_else(|p| p.into_inner());
        causes.diagnosing.remove(&cluster.alias);
        causes.by_cluster.insert(cluster.alias.clone(), (std::time::Instant::now(), found));
    });
    if spawned.is_err() {
        CAUSES.lock().unwrap_or_else(|p| p.into_inner()).diagnosing.remove(&alias);
    }
}

/// Records the first connection error librdkafka reports through its error callback.
#[derive(Default)]
struct FirstError(Mutex<Option<String>>);

impl ClientContext for FirstError {
    fn log(&self, _: RDKafkaLogLevel, _: &str, _: &str) {}
    fn error(&self, _: KafkaError, reason: &str) {
        let reason = connection_line(reason).map_or_else(|| reason.to_string(), |(_, r)| r);
        self.0.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(reason);
    }
}

impl ConsumerContext for FirstError {}

/// Why `cluster` refuses a connection (authentication, TLS, unreachable), scrubbed of its secrets;
/// `None` if metadata could be fetched within `deadline`.
fn connection_error(cluster: &ClusterSpec, deadline: Duration) -> Option<String> {
    let mut cfg = ClientConfig::new();
    for (k, v) in &cluster.client {
        cfg.set(k, v);
    }
    cfg.set("bootstrap.servers", &cluster.bootstrap_servers)
        .set("client.id", "ferry-diagnose")
        .set_log_level(RDKafkaLogLevel::Warning);
    if let Err(e) = kerberos_login(cluster, &mut cfg) {
        return Some(e.to_string());
    }
    let consumer: BaseConsumer<FirstError> = match cfg.create_with_context(FirstError::default()) {
        Ok(c) => c,
        Err(e) => return Some(KafkaOpError::kafka(&cluster.alias, "create a client", e).to_string()),
    };
    let start = std::time::Instant::now();
    while start.elapsed() < deadline {
        if consumer.fetch_metadata(None, Duration::from_millis(500)).is_ok() {
            return None;
        }
        // Error events reach the context only through poll.
        let _ = consumer.poll(Duration::from_millis(50));
        if let Some(reason) = consumer.context().0.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            return Some(secrets::scrub_with(&with_token_endpoint(reason, cluster), &cluster.secret_values()));
        }
    }
    Some(format!("no answer within {deadline:?}"))
}

/// librdkafka's OIDC failures (`Failed to acquire SASL OAUTHBEARER token: <the provider's answer or
/// curl's error>`) do not say where the token was asked for: name the cluster's token endpoint.
fn with_token_endpoint(reason: String, cluster: &ClusterSpec) -> String {
    match cluster.client.get("sasl.oauthbearer.token.endpoint.url") {
        Some(url) if reason.contains("OAUTHBEARER token") && !reason.contains(url.as_str()) => {
            format!("{reason} (token endpoint {url})")
        }
        _ => reason,
    }
}

pub(super) static CAUSES: std::sync::LazyLock<Mutex<Causes>> = std::sync::LazyLock::new(Default::default);

/// Feeds one librdkafka log or error line (as rdkafka's default client context logs it, e.g.
/// `FAIL [thrd:sasl_ssl://host:9093/bootstrap]: sasl_ssl://host:9093/bootstrap: SASL authentication
/// error: ... (after 3ms in state AUTH_REQ)`) to the record of connection problems. Lines without a
/// broker address are ignored. `ferry run` calls this for every librdkafka line it logs.
pub fn note_client_log(line: &str) {
    let Some((address, reason)) = connection_line(line) else { return };
    let mut causes = CAUSES.lock().unwrap_or_else(|p| p.into_inner());
    // A refused TCP connection to one of a name's addresses (`localhost` as ::1) must not hide the
    // authentication or TLS failure on another for long: the specific cause wins for a minute.
    if !is_specific(&reason)
        && causes
            .by_address
            .get(&address)
            .is_some_and(|(at, old)| is_specific(old) && at.elapsed() < Duration::from_secs(60))
    {
        return;
    }
    causes.by_address.insert(address, (std::time::Instant::now(), secrets::scrub(&reason)));
}

/// An authentication or TLS failure, as opposed to a connection that was refused or dropped.
fn is_specific(reason: &str) -> bool {
    ["SASL", "SSL", "ssl", "uthentication", "certificate", "handshake"].iter().any(|w| reason.contains(w))
}

/// `(host:port, reason)` of a librdkafka line about a broker connection.
fn connection_line(line: &str) -> Option<(String, String)> {
    let at = line.rfind("://")?;
    let rest = &line[at + 3..];
    let (address, after) = rest.split_once('/')?;
    // After the address comes the broker's name (`bootstrap` or its id), then ": reason".
    let (_, reason) = after.split_once(": ")?;
    let reason = reason.split(" (after ").next().unwrap_or(reason).trim();
    let relevant = ["SASL", "SSL", "ssl", "uthentication", "certificate", "handshake", "refused", "Connect to"];
    (relevant.iter().any(|w| reason.contains(w)) && !address.is_empty())
        .then(|| (address.to_string(), reason.to_string()))
}

/// Why `cluster` does not answer: its last diagnosis, else the most recent connection problem librdkafka
/// logged for any of its bootstrap servers, within [`CAUSE_WINDOW`].
pub fn connection_problem(cluster: &str) -> Option<String> {
    problem_since(cluster, std::time::Instant::now().checked_sub(CAUSE_WINDOW))
}

/// [`connection_problem`], from what was found or logged after `since` only: a caller that began
/// waiting for the cluster then is told neither of an outage that ended before (a stale diagnosis) nor
/// kept from hearing of a new problem by a diagnosis that found the cluster fine before.
pub fn connection_problem_since(cluster: &str, since: std::time::Instant) -> Option<String> {
    problem_since(cluster, Some(since))
}

fn problem_since(cluster: &str, since: Option<std::time::Instant>) -> Option<String> {
    let recent = |at: &std::time::Instant| at.elapsed() <= CAUSE_WINDOW && since.is_none_or(|s| *at >= s);
    let causes = CAUSES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((at, found)) = causes.by_cluster.get(cluster)
        && recent(at)
    {
        return found.clone();
    }
    let bootstrap = causes.bootstraps.get(cluster)?;
    bootstrap
        .split(',')
        .filter_map(|server| causes.by_address.get(server.trim()))
        .filter(|(at, _)| recent(at))
        .max_by_key(|(at, _)| *at)
        .map(|(_, reason)| reason.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_lines_are_attributed_to_their_broker() {
        let line = "FAIL [thrd:sasl_ssl://127.0.0.1:38771/bootstrap]: sasl_ssl://127.0.0.1:38771/bootstrap: SASL \
                    authentication error: Authentication failed due to invalid credentials with SASL mechanism \
                    SCRAM-SHA-512 (after 1701ms in state AUTH_REQ)";
        let (address, reason) = connection_line(line).expect("a connection line");
        assert_eq!(address, "127.0.0.1:38771");
        assert!(reason.starts_with("SASL authentication error") && reason.ends_with("SCRAM-SHA-512"), "{reason}");
        assert!(connection_line("Global error: AllBrokersDown (Local: All broker connections are down)").is_none());

        // As `client_config` registers a cluster (without starting a diagnosis).
        let bootstrap = "127.0.0.1:1,127.0.0.1:38771".to_string();
        CAUSES.lock().unwrap_or_else(|p| p.into_inner()).bootstraps.insert("diag".into(), bootstrap);
        note_client_log(line);
        let e = KafkaOpError::kafka("diag", "create topic t", KafkaError::Global(RDKafkaErrorCode::OperationTimedOut));
        assert!(e.to_string().contains("(last connection error: SASL authentication error"), "{e}");
    }

    #[test]
    fn a_problem_counts_for_a_connection_only_if_seen_after_it_opened() {
        let line = |reason: &str| {
            format!("FAIL [thrd:ssl://127.0.0.1:38772/bootstrap]: ssl://127.0.0.1:38772/bootstrap: {reason}")
        };
        CAUSES.lock().unwrap_or_else(|p| p.into_inner()).bootstraps.insert("since".into(), "127.0.0.1:38772".into());
        note_client_log(&line("SSL handshake failed: certificate verify failed (after 2ms in state SSL_HANDSHAKE)"));
        let opened = std::time::Instant::now();
        assert!(connection_problem("since").is_some_and(|p| p.contains("certificate verify failed")));
        assert_eq!(connection_problem_since("since", opened), None, "an older connection's problem");
        note_client_log(&line("SASL authentication error: Authentication failed (after 3ms in state AUTH_REQ)"));
        let now = connection_problem_since("since", opened);
        assert!(now.is_some_and(|p| p.starts_with("SASL authentication error")), "a problem of this connection");
        // A diagnosis that found the cluster answering before the connection opened does not hide it.
        let before = opened.checked_sub(Duration::from_secs(1)).unwrap_or(opened);
        CAUSES.lock().unwrap_or_else(|p| p.into_inner()).by_cluster.insert("since".into(), (before, None));
        assert!(connection_problem_since("since", opened).is_some());
        assert_eq!(connection_problem("since"), None, "the diagnosis wins for anyone who asks without a start");
    }
}
