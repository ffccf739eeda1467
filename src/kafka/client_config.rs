//! Client configuration: a cluster's properties with what ferry sets on top, librdkafka's own check of
//! them, and the small client contexts several actors use.

use super::diagnosis::{CAUSES, diagnose};
use super::*;

/// Why librdkafka refused property `key`, without its value. `desc` is librdkafka's text, which quotes
/// the value (`Invalid value "..." for configuration property "key": why`): only the part after the
/// property's name is kept, with `value` scrubbed from it should librdkafka repeat it there.
pub fn property_refusal(result: RDKafkaConfRes, key: &str, desc: &str, value: &str) -> String {
    let named = format!("for configuration property \"{key}\"");
    let why = desc
        .split_once(&named)
        .map(|(_, why)| why.trim_start_matches([':', ' ']).trim_end_matches(['.', ' ']))
        .filter(|why| !why.is_empty())
        .map(|why| if value.is_empty() { why.to_string() } else { why.replace(value, secrets::REDACTED) });
    if key.contains("jaas") {
        return format!(
            "`{key}` is a Java client setting librdkafka does not support: use `sasl.mechanism`, `sasl.username` \
             and `sasl.password` (or `sasl.oauthbearer.*`) instead"
        );
    }
    match (result, why) {
        (RDKafkaConfRes::RD_KAFKA_CONF_UNKNOWN, _) => {
            format!("librdkafka has no property `{key}` (or this build does not support it)")
        }
        (RDKafkaConfRes::RD_KAFKA_CONF_INVALID, Some(why)) => format!("invalid value for `{key}`: {why}"),
        (RDKafkaConfRes::RD_KAFKA_CONF_INVALID, None) => format!("invalid value for `{key}`"),
        (_, _) => format!("librdkafka refuses `{key}`"),
    }
}

/// The longest wait between a client's attempts to reach a broker (librdkafka's default: 10 s).
pub const RECONNECT_BACKOFF_MAX_MS: &str = "1000";

/// Base client configuration for `cluster`, with `role` in the client id. For a Kerberos cluster, its
/// principal is logged in first (see `kerberos`): a client is never built on another principal's ticket,
/// and a login that fails is this client's error.
///
/// OIDC (`sasl.oauthbearer.method = oidc`) needs nothing here, and none of ferry's client contexts sets
/// `ClientContext::ENABLE_REFRESH_OAUTH_TOKEN` (or implements `generate_oauth_token`), on purpose.
/// rdkafka's `BaseConsumer`/`BaseProducer` enable the `OAUTHBEARER_TOKEN_REFRESH` event on their
/// configs and drop that event unless the context opts in, which looks as if it would swallow
/// librdkafka's built-in OIDC refresh. It does not (librdkafka 2.12, read in its source and
/// measured by tests/integration/oidc.rs): with no application refresh callback set — rdkafka sets none —
/// librdkafka installs its own client-credentials callback, routes its refresh ops to a SASL queue
/// forwarded to its background thread (`rd_kafka_conf_finalize_oauthbearer_oidc`,
/// `rd_kafka_sasl_background_callbacks_enable`) and marks them `RD_KAFKA_OP_F_FORCE_CB`, so they
/// are never turned into events for the application's poll. Tokens are fetched at client creation
/// and refreshed at 80 % of their lifetime whether or not the client is polled (admin and metadata
/// clients are not). A context that opted in would never see an OIDC refresh event either; it only
/// matters for the application-driven (`method = default`) OAUTHBEARER, which ferry does not use.
pub fn client_config(
    cluster: &ClusterSpec,
    flow: &impl fmt::Display,
    role: &str,
) -> Result<ClientConfig, KafkaOpError> {
    {
        let mut causes = CAUSES.lock().unwrap_or_else(|p| p.into_inner());
        if causes.bootstraps.get(&cluster.alias) != Some(&cluster.bootstrap_servers) {
            causes.bootstraps.insert(cluster.alias.clone(), cluster.bootstrap_servers.clone());
            // Another address under the same alias (a reload): the old diagnosis is not about it.
            causes.by_cluster.remove(&cluster.alias);
        }
    }
    diagnose(cluster);
    let mut cfg = ClientConfig::new();
    // Back on a returning cluster within a second, as Java clients (and so MM2) are: librdkafka's
    // default doubles the wait between attempts up to 10 s, so a cluster back after an outage of some
    // seconds went unnoticed for up to 10 s more. A cluster's own setting wins.
    cfg.set("reconnect.backoff.max.ms", RECONNECT_BACKOFF_MAX_MS);
    for (k, v) in &cluster.client {
        cfg.set(k, v);
    }
    cfg.set("bootstrap.servers", &cluster.bootstrap_servers);
    cfg.set("client.id", format!("{flow}|ferry|{role}"));
    // librdkafka logs through its own callback; keep it to warnings and above.
    cfg.set_log_level(rdkafka::config::RDKafkaLogLevel::Warning);
    kerberos_login(cluster, &mut cfg)?;
    Ok(cfg)
}

/// For a Kerberos cluster: librdkafka's own kinit off, and the cluster's principal logged in.
pub fn kerberos_login(cluster: &ClusterSpec, cfg: &mut ClientConfig) -> Result<(), KafkaOpError> {
    crate::kerberos::configure(cfg, &cluster.client);
    match crate::kerberos::Login::of_cluster(cluster) {
        Ok(None) => Ok(()),
        Ok(Some(login)) => crate::kerberos::ensure(&login).map_err(|reason| KafkaOpError::Other {
            cluster: cluster.alias.clone(),
            op: "log in".into(),
            reason,
        }),
        Err((key, reason)) => Err(KafkaOpError::Other {
            cluster: cluster.alias.clone(),
            op: "log in".into(),
            reason: format!("`{key}`: {reason}"),
        }),
    }
}

/// A client context that says nothing: [`check_client_properties`] builds clients only to have
/// librdkafka check their configuration, and their warnings ("no bootstrap.servers") are noise.
struct Silent;

impl ClientContext for Silent {
    fn log(&self, _: RDKafkaLogLevel, _: &str, _: &str) {}
    fn error(&self, _: KafkaError, _: &str) {}
}

impl ConsumerContext for Silent {}

impl ProducerContext for Silent {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &DeliveryResult<'_>, _: ()) {}
}

/// The clients ferry creates for a cluster, with the properties ferry sets on top of the cluster's
/// (see the copier, the emitters and [`assign_only_consumer`]): librdkafka checks some combinations only
/// when a client of a given kind is created (e.g. `max.in.flight` with idempotence, for producers).
fn roles() -> [(&'static str, &'static [(&'static str, &'static str)]); 3] {
    [
        (
            "consumer",
            &[
                ("group.id", "ferry-validate-unused"),
                ("enable.auto.commit", "false"),
                ("enable.auto.offset.store", "false"),
                ("enable.partition.eof", "false"),
                ("auto.offset.reset", "error"),
                ("fetch.wait.max.ms", "500"),
                ("queued.max.messages.kbytes", "32768"),
            ],
        ),
        (
            "producer",
            &[
                ("acks", "all"),
                ("enable.idempotence", "true"),
                ("compression.type", "lz4"),
                ("linger.ms", "20"),
                ("batch.size", "1000000"),
                ("message.max.bytes", "1000000"),
                ("queue.buffering.max.kbytes", "32768"),
                ("message.timeout.ms", "300000"),
            ],
        ),
        ("admin", &[]),
    ]
}

/// What librdkafka refuses in `cluster`'s client properties, without connecting anywhere: each property
/// alone (unknown names, invalid values), then, if they all pass, a consumer, a producer and an admin
/// client built from them as ferry builds its own (files that must exist, combinations). Each problem is
/// `(property, reason)`, the property `None` when librdkafka's reason names none of the cluster's. No
/// reason carries a value: refusals of single properties are rebuilt from the name, the others are
/// scrubbed of the cluster's secret values.
pub fn check_client_properties(cluster: &ClusterSpec) -> Vec<(Option<String>, String)> {
    let mut problems = Vec::new();
    for (k, v) in &cluster.client {
        if let Err(KafkaError::ClientConfig(result, desc, key, value)) =
            ClientConfig::new().set(k, v).create_native_config()
        {
            problems.push((Some(k.clone()), property_refusal(result, &key, &desc, &value)));
        }
    }
    if !problems.is_empty() {
        return problems;
    }
    let secrets = cluster.secret_values();
    for (role, props) in roles() {
        let mut cfg = ClientConfig::new();
        for (k, v) in &cluster.client {
            cfg.set(k, v);
        }
        // No bootstrap servers: the client has nowhere to connect, so building it checks and does nothing.
        // Nor does it log in: librdkafka would run its own kinit at creation (ferry logs in itself).
        crate::kerberos::configure(&mut cfg, &cluster.client);
        cfg.set("client.id", format!("ferry-validate-{role}"));
        for (k, v) in props {
            cfg.set(*k, *v);
        }
        cfg.set_log_level(RDKafkaLogLevel::Emerg);
        let built = if role == "consumer" {
            cfg.create_with_context::<_, BaseConsumer<Silent>>(Silent).map(drop)
        } else {
            cfg.create_with_context::<_, BaseProducer<Silent>>(Silent).map(drop)
        };
        let problem = match built {
            Ok(()) => continue,
            Err(KafkaError::ClientConfig(result, desc, key, value)) => {
                (Some(key.clone()), property_refusal(result, &key, &desc, &value))
            }
            Err(KafkaError::ClientCreation(msg)) => {
                let msg = secrets::scrub_with(&msg, &secrets);
                // librdkafka's reasons usually start with the property they are about.
                let named = cluster.client.keys().filter(|k| msg.contains(k.as_str())).max_by_key(|k| k.len());
                (named.cloned(), format!("librdkafka refuses this configuration for a {role}: {msg}"))
            }
            Err(other) => {
                (None, format!("cannot build a {role}: {}", secrets::scrub_with(&other.to_string(), &secrets)))
            }
        };
        if !problems
            .iter()
            .any(|(k, r): &(Option<String>, String)| *k == problem.0 && r.ends_with(after_role(&problem.1)))
        {
            problems.push(problem);
        }
    }
    problems
}

/// The part of a refusal after "for a ROLE:", to report one refusal once when every role gets it.
fn after_role(reason: &str) -> &str {
    reason.split_once(": ").map_or(reason, |(_, rest)| rest)
}

/// The context of [`assign_only_consumer`]s: their group exists only because librdkafka's `assign()`
/// needs one, so the broker refusing it (a principal without rights on groups it never uses) is not an
/// error. Everything else is logged as rdkafka's default context does.
pub struct AssignOnly;

impl ClientContext for AssignOnly {
    fn error(&self, error: KafkaError, reason: &str) {
        if is_unused_group_refusal(&error) {
            tracing::debug!(error = %error, reason, "the unused group of an assign-only consumer is refused (harmless)");
        } else {
            tracing::error!(target: "rdkafka::client", "librdkafka: {error}: {reason}");
        }
    }
}

impl ConsumerContext for AssignOnly {}

/// A consumer built by [`assign_only_consumer`].
pub type AssignOnlyConsumer = BaseConsumer<AssignOnly>;

/// librdkafka looks up the coordinator of a consumer's group even if it only assigns partitions, and
/// reports the broker's refusal (no DESCRIBE on the group) as a consumer error: for an assign-only
/// consumer that group is never used, so the refusal is ignored.
pub fn is_unused_group_refusal(e: &KafkaError) -> bool {
    let code = match e {
        KafkaError::Global(code) => Some(*code),
        other => other.rdkafka_error_code(),
    };
    code == Some(RDKafkaErrorCode::GroupAuthorizationFailed)
}

/// A consumer that never joins a group: partitions are assigned explicitly, nothing is committed.
pub fn assign_only_consumer(
    cluster: &ClusterSpec,
    flow: &impl fmt::Display,
    role: &str,
) -> Result<AssignOnlyConsumer, KafkaOpError> {
    assign_only_consumer_with(cluster, flow, role, &[])
}

/// [`assign_only_consumer`] with `extra` properties (e.g. `isolation.level`).
pub fn assign_only_consumer_with(
    cluster: &ClusterSpec,
    flow: &impl fmt::Display,
    role: &str,
    extra: &[(&str, &str)],
) -> Result<AssignOnlyConsumer, KafkaOpError> {
    let mut cfg = client_config(cluster, flow, role)?;
    for (k, v) in extra {
        cfg.set(*k, *v);
    }
    // librdkafka requires a group.id for assign(); it is never joined or committed to, and needs no ACL.
    cfg.set("group.id", format!("ferry-{flow}-{role}-unused"))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("auto.offset.reset", "earliest");
    cfg.create_with_context(AssignOnly)
        .map_err(|e| KafkaOpError::kafka(&cluster.alias, format!("create {role} consumer"), e))
}

/// Remembers when librdkafka last reported a cluster-level connection problem (all brokers down, a
/// transport failure, a name that does not resolve), so that a worker blocked on an absent cluster can
/// report itself degraded instead of looking healthy while it waits.
#[derive(Default)]
pub struct ClusterWatch {
    last: Mutex<Option<(std::time::Instant, String)>>,
}

impl ClusterWatch {
    pub fn record(&self, error: &KafkaError, reason: &str) {
        use RDKafkaErrorCode as C;
        let code = match error {
            KafkaError::Global(code) => Some(*code),
            other => other.rdkafka_error_code(),
        };
        if matches!(code, Some(C::AllBrokersDown | C::BrokerTransportFailure | C::Resolve | C::Authentication)) {
            *self.last.lock().unwrap_or_else(|p| p.into_inner()) =
                Some((std::time::Instant::now(), secrets::scrub(reason)));
        }
    }

    /// The last problem, if it was reported within `window`.
    pub fn recent(&self, window: Duration) -> Option<String> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.as_ref().filter(|(at, _)| at.elapsed() <= window).map(|(_, r)| r.clone())
    }
}

/// A consumer context that feeds a [`ClusterWatch`].
pub struct WatchedConsumer(pub std::sync::Arc<ClusterWatch>);

impl ClientContext for WatchedConsumer {
    fn error(&self, error: KafkaError, reason: &str) {
        self.0.record(&error, reason);
        let (error, reason) = (secrets::scrub(&error.to_string()), secrets::scrub(reason));
        tracing::warn!(error, reason, "source client error");
    }
}

impl rdkafka::consumer::ConsumerContext for WatchedConsumer {}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(props: &[(&str, &str)]) -> ClusterSpec {
        ClusterSpec::for_test("east", props)
    }

    #[test]
    fn clients_retry_a_broker_within_a_second_unless_the_cluster_says_otherwise() {
        let cfg = client_config(&cluster(&[]), &"east->west", "copier").expect("config");
        assert_eq!(cfg.get("reconnect.backoff.max.ms"), Some(RECONNECT_BACKOFF_MAX_MS));
        let cfg =
            client_config(&cluster(&[("reconnect.backoff.max.ms", "5000")]), &"east->west", "copier").expect("config");
        assert_eq!(cfg.get("reconnect.backoff.max.ms"), Some("5000"));
    }
}
