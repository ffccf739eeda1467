//! Kafka client construction and the few admin operations ferry's actors share.
//!
//! Every client of a cluster starts from the cluster's `[clusters.X.client]` properties; ferry then
//! sets what correctness depends on (no auto commit, acks=all, idempotence). Client ids follow MM2's
//! `SOURCE->TARGET|ferry|role` shape so broker-side quotas and logs read the same.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::ClientContext;
use rdkafka::admin::{
    AdminClient, AdminOptions, ConfigSource, NewPartitions, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::metadata::Metadata;
use rdkafka::producer::{BaseProducer, DeliveryResult, ProducerContext};
use rdkafka::types::RDKafkaConfRes;
use rdkafka::{Offset, TopicPartitionList};

use crate::config::{ClusterSpec, secrets};
use crate::topic_configs::ConfigEntry;

/// How long one admin or metadata call may take before the caller treats the cluster as unreachable.
pub const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

/// A failed Kafka operation, naming the cluster and what was being done.
///
/// Its text never carries a configuration value: librdkafka quotes the value of a property it refuses
/// ("Invalid value \"...\" for configuration property ..."), so such errors are rebuilt from the
/// property's name ([`KafkaOpError::kafka`]), and everything else is scrubbed of known secrets when
/// shown. It deliberately reports no `source()`: an error chain printer would show librdkafka's raw text.
#[derive(Debug)]
pub enum KafkaOpError {
    Kafka {
        cluster: String,
        op: String,
        source: Box<KafkaError>,
        /// Why the cluster is not answering, when librdkafka said so recently (see [`note_client_log`]):
        /// a timeout alone does not tell an operator that the password is wrong.
        cause: Option<String>,
    },
    Other {
        cluster: String,
        op: String,
        reason: String,
    },
    /// The cluster refused this principal an operation on a resource: the text names both and the grant
    /// that fixes it ([`not_authorized`]).
    NotAuthorized(String),
}

impl std::fmt::Display for KafkaOpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Kafka { cluster, op, source, cause } => {
                write!(f, "cluster `{cluster}`: {op}: {}", secrets::scrub(&source.to_string()))?;
                match cause {
                    Some(cause) => write!(f, " (last connection error: {})", secrets::scrub(cause)),
                    None => Ok(()),
                }
            }
            Self::Other { cluster, op, reason } => write!(f, "cluster `{cluster}`: {op}: {}", secrets::scrub(reason)),
            Self::NotAuthorized(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for KafkaOpError {}

impl KafkaOpError {
    pub fn kafka(cluster: &str, op: impl Into<String>, source: KafkaError) -> Self {
        let (cluster, op) = (cluster.to_string(), op.into());
        match &source {
            // The one variant whose text is built around the value: keep only the property's name.
            KafkaError::ClientConfig(result, desc, key, value) => {
                Self::Other { cluster, op, reason: property_refusal(*result, key, desc, value) }
            }
            _ => {
                let cause = is_unanswered(&source).then(|| connection_problem(&cluster)).flatten();
                Self::Kafka { cluster, op, source: Box::new(source), cause }
            }
        }
    }
}

/// Errors that mean "the cluster did not answer", whose real cause librdkafka reports elsewhere.
fn is_unanswered(e: &KafkaError) -> bool {
    use RDKafkaErrorCode as C;
    let code = match e {
        KafkaError::Global(code) => Some(*code),
        other => other.rdkafka_error_code(),
    };
    matches!(
        code,
        Some(
            C::OperationTimedOut
                | C::RequestTimedOut
                | C::BrokerTransportFailure
                | C::AllBrokersDown
                | C::Authentication
                | C::SSL
                | C::MessageTimedOut
        )
    )
}

/// How long a connection problem librdkafka reported explains later failures of the same cluster.
const CAUSE_WINDOW: Duration = Duration::from_secs(300);

/// What librdkafka said recently about connections, by broker address (`host:port`), and the bootstrap
/// servers of each cluster alias, to attribute the former to a cluster.
#[derive(Default)]
struct Causes {
    by_address: HashMap<String, (std::time::Instant, String)>,
    bootstraps: HashMap<String, String>,
    /// What the last [`diagnose`] of each cluster alias found (`None`: it connected), and when.
    by_cluster: HashMap<String, (std::time::Instant, Option<String>)>,
    /// Aliases with a diagnosis running.
    diagnosing: std::collections::HashSet<String>,
}

/// At most one diagnosis per cluster this often.
const DIAGNOSE_EVERY: Duration = Duration::from_secs(30);

/// Connects to `cluster` once, on a thread of its own, and records why it refuses the connection, if
/// it does (see [`KafkaOpError`]'s `cause`). Clients of the actors cannot tell: librdkafka delivers
/// their connection errors only when they are polled, and admin and metadata clients are not. Runs
/// when a client of the cluster is built, at most every [`DIAGNOSE_EVERY`].
fn diagnose(cluster: &ClusterSpec) {
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
            return Some(secrets::scrub_with(&reason, &cluster.secret_values()));
        }
    }
    Some(format!("no answer within {deadline:?}"))
}

static CAUSES: std::sync::LazyLock<Mutex<Causes>> = std::sync::LazyLock::new(Default::default);

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
fn connection_problem(cluster: &str) -> Option<String> {
    let causes = CAUSES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((at, found)) = causes.by_cluster.get(cluster)
        && at.elapsed() <= CAUSE_WINDOW
    {
        return found.clone();
    }
    let bootstrap = causes.bootstraps.get(cluster)?;
    bootstrap
        .split(',')
        .filter_map(|server| causes.by_address.get(server.trim()))
        .filter(|(at, _)| at.elapsed() <= CAUSE_WINDOW)
        .max_by_key(|(at, _)| *at)
        .map(|(_, reason)| reason.clone())
}

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

/// Base client configuration for `cluster`, with `role` in the client id.
pub fn client_config(cluster: &ClusterSpec, flow: &impl fmt::Display, role: &str) -> ClientConfig {
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
    for (k, v) in &cluster.client {
        cfg.set(k, v);
    }
    cfg.set("bootstrap.servers", &cluster.bootstrap_servers);
    cfg.set("client.id", format!("{flow}|ferry|{role}"));
    // librdkafka logs through its own callback; keep it to warnings and above.
    cfg.set_log_level(rdkafka::config::RDKafkaLogLevel::Warning);
    cfg
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
                ("fetch.wait.max.ms", "100"),
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
    let mut cfg = client_config(cluster, flow, role);
    // librdkafka requires a group.id for assign(); it is never joined or committed to, and needs no ACL.
    cfg.set("group.id", format!("ferry-{flow}-{role}-unused"))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("auto.offset.reset", "earliest");
    cfg.create_with_context(AssignOnly)
        .map_err(|e| KafkaOpError::kafka(&cluster.alias, format!("create {role} consumer"), e))
}

/// The broker's name of an authorization error (`TOPIC_AUTHORIZATION_FAILED`, ...), `None` for any
/// other error.
pub fn authorization_code(code: RDKafkaErrorCode) -> Option<&'static str> {
    use RDKafkaErrorCode as C;
    Some(match code {
        C::TopicAuthorizationFailed => "TOPIC_AUTHORIZATION_FAILED",
        C::GroupAuthorizationFailed => "GROUP_AUTHORIZATION_FAILED",
        C::ClusterAuthorizationFailed => "CLUSTER_AUTHORIZATION_FAILED",
        C::TransactionalIdAuthorizationFailed => "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        _ => return None,
    })
}

/// [`authorization_code`] of a client error.
pub fn authorization_error(e: &KafkaError) -> Option<&'static str> {
    let code = match e {
        KafkaError::Global(code) => Some(*code),
        other => other.rdkafka_error_code(),
    };
    code.and_then(authorization_code)
}

/// What an operator reads when `cluster` refuses this principal `operation` (`Read`, `Write`, ...) on
/// `resource` (e.g. "offset-syncs topic mm2-offset-syncs.west.internal"): the resource, the right it
/// lacks, the broker's code and the grant that fixes it (operations as `kafka-acls --operation` names
/// them).
pub fn not_authorized(resource: &str, cluster: &str, operation: &str, code: &str) -> String {
    format!("{resource} on `{cluster}`: {}", refusal(operation, code))
}

/// The part of [`not_authorized`] after the resource.
pub fn refusal(operation: &str, code: &str) -> String {
    format!("not authorized to {operation} ({code}); grant {operation} on it to this principal")
}

/// A refusal of this principal that repeats while it lasts (librdkafka retries the request behind it, e.g.
/// joining a group it may not use): kept with when it was last seen, so that it is reported while it
/// lasts and logged once.
#[derive(Default)]
pub struct Refusal(Mutex<Option<(std::time::Instant, String)>>);

impl Refusal {
    /// Records `reason`; true when it is new (not the refusal already recorded).
    pub fn seen(&self, reason: String) -> bool {
        let mut slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let new = slot.as_ref().is_none_or(|(_, r)| *r != reason);
        *slot = Some((std::time::Instant::now(), reason));
        new
    }

    /// The refusal, if it was seen within `window`.
    pub fn current(&self, window: Duration) -> Option<String> {
        let slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        slot.as_ref().filter(|(at, _)| at.elapsed() <= window).map(|(_, r)| r.clone())
    }

    /// Forgets it (the refused request succeeded). True if there was one.
    pub fn clear(&self) -> bool {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take().is_some()
    }
}

/// A per-topic refusal of an admin call: [`refusal`] when the broker refused the principal `operation`,
/// else `what` and the code.
fn topic_refusal(code: RDKafkaErrorCode, operation: &str, what: &str) -> String {
    match authorization_code(code) {
        Some(name) => refusal(operation, name),
        None => format!("{what}: {code}"),
    }
}

/// Topic name → partition count, for every topic the cluster reports (blocking; call off the actor thread).
pub fn topic_partitions<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    cluster: &str,
) -> Result<HashMap<String, i32>, KafkaOpError> {
    let md: Metadata =
        consumer.fetch_metadata(None, ADMIN_TIMEOUT).map_err(|e| KafkaOpError::kafka(cluster, "fetch metadata", e))?;
    Ok(md
        .topics()
        .iter()
        .filter(|t| t.error().is_none())
        .map(|t| (t.name().to_string(), t.partitions().len() as i32))
        .collect())
}

/// What a topic should look like when ferry creates it.
#[derive(Clone, Debug)]
pub struct TopicSpec {
    pub name: String,
    pub partitions: i32,
    /// `None`: the cluster's default replication factor.
    pub replication_factor: Option<i32>,
    pub configs: Vec<(String, String)>,
}

impl TopicSpec {
    /// A compacted, single-partition topic as MM2 makes its internal topics.
    pub fn compacted(name: impl Into<String>, partitions: i32, replication_factor: Option<i32>) -> Self {
        Self {
            name: name.into(),
            partitions,
            replication_factor,
            configs: vec![("cleanup.policy".into(), "compact".into())],
        }
    }
}

/// Create `spec` unless it exists. Returns true when this call created it.
pub async fn create_topic(
    admin: &AdminClient<impl ClientContext + 'static>,
    cluster: &str,
    spec: &TopicSpec,
) -> Result<bool, KafkaOpError> {
    let mut topic =
        NewTopic::new(&spec.name, spec.partitions, TopicReplication::Fixed(spec.replication_factor.unwrap_or(-1)));
    for (k, v) in &spec.configs {
        topic = topic.set(k, v);
    }
    let opts = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT)).request_timeout(Some(ADMIN_TIMEOUT));
    let results = admin
        .create_topics([&topic], &opts)
        .await
        .map_err(|e| KafkaOpError::kafka(cluster, format!("create topic {}", spec.name), e))?;
    match results.into_iter().next() {
        Some(Ok(_)) => Ok(true),
        Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) => Ok(false),
        Some(Err((_, code))) if authorization_code(code).is_some() => Err(KafkaOpError::NotAuthorized(not_authorized(
            &format!("topic {}", spec.name),
            cluster,
            "Create",
            authorization_code(code).unwrap_or(""),
        ))),
        Some(Err((_, code))) => Err(KafkaOpError::Other {
            cluster: cluster.to_string(),
            op: format!("create topic {}", spec.name),
            reason: code.to_string(),
        }),
        None => Ok(false),
    }
}

/// Read `partitions` of `topic` from their start to their current end, calling `f` per record. The
/// end is where the consumer's *position* reaches the end offset: a topic written transactionally ends
/// with a commit marker, a control record that is never returned but that the position moves past.
/// Fails when the topic cannot be read (e.g. not authorised) or stops moving for [`ADMIN_TIMEOUT`].
pub fn read_to_end<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    cluster: &str,
    topic: &str,
    partitions: impl IntoIterator<Item = i32>,
    mut f: impl FnMut(&BorrowedMessage<'_>),
) -> Result<(), KafkaOpError> {
    let mut tpl = TopicPartitionList::new();
    let mut ends = HashMap::new();
    for p in partitions {
        let (low, high) = watermarks(consumer, topic, p)
            .map_err(|e| KafkaOpError::kafka(cluster, format!("read the end offsets of {topic}-{p}"), e))?;
        if high > low {
            tpl.add_partition_offset(topic, p, Offset::Offset(low))
                .map_err(|e| KafkaOpError::kafka(cluster, "assign", e))?;
            ends.insert(p, high);
        }
    }
    if ends.is_empty() {
        return Ok(());
    }
    consumer.assign(&tpl).map_err(|e| KafkaOpError::kafka(cluster, format!("assign {topic}"), e))?;
    let mut last_progress = std::time::Instant::now();
    while !ends.is_empty() {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(msg)) => {
                f(&msg);
                if ends.get(&msg.partition()).is_some_and(|end| msg.offset() + 1 >= *end) {
                    ends.remove(&msg.partition());
                }
                last_progress = std::time::Instant::now();
            }
            Some(Err(e)) if is_unused_group_refusal(&e) => {}
            Some(Err(e)) => return Err(KafkaOpError::kafka(cluster, format!("read {topic}"), e)),
            None => {
                let positions =
                    consumer.position().map_err(|e| KafkaOpError::kafka(cluster, format!("read {topic}"), e))?;
                for e in positions.elements_for_topic(topic) {
                    if let Offset::Offset(pos) = e.offset()
                        && ends.get(&e.partition()).is_some_and(|end| pos >= *end)
                    {
                        ends.remove(&e.partition());
                    }
                }
                if !ends.is_empty() && last_progress.elapsed() > ADMIN_TIMEOUT {
                    return Err(KafkaOpError::Other {
                        cluster: cluster.to_string(),
                        op: format!("read {topic}"),
                        reason: format!("no progress for {ADMIN_TIMEOUT:?} before the end of the topic"),
                    });
                }
            }
        }
    }
    let _ = consumer.unassign();
    Ok(())
}

/// Watermarks of one partition. A topic created moments ago answers "not leader" for a while; that
/// is retried until the admin timeout instead of failing.
pub fn watermarks<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    partition: i32,
) -> Result<(i64, i64), KafkaError> {
    let deadline = std::time::Instant::now() + ADMIN_TIMEOUT;
    loop {
        match consumer.fetch_watermarks(topic, partition, ADMIN_TIMEOUT) {
            Err(e) if std::time::Instant::now() < deadline && is_transient(&e) => {
                std::thread::sleep(Duration::from_millis(200))
            }
            other => return other,
        }
    }
}

/// Errors a freshly created or re-electing partition gives for a short while.
pub fn is_transient(e: &KafkaError) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        e.rdkafka_error_code(),
        Some(
            C::NotLeaderForPartition
                | C::LeaderNotAvailable
                | C::UnknownTopicOrPartition
                | C::UnknownPartition
                | C::OperationTimedOut
                | C::RequestTimedOut
        )
    )
}

/// Producer context for small control producers (checkpoints, heartbeats): remembers the first
/// delivery error until the caller, after a flush, takes it.
#[derive(Default)]
pub struct ErrorCapture {
    error: Mutex<Option<Captured>>,
}

/// A delivery error kept by [`ErrorCapture`].
#[derive(Debug)]
pub struct Captured {
    pub text: String,
    /// The broker's code when it refused this principal ([`authorization_code`]).
    pub refused: Option<&'static str>,
}

impl std::fmt::Display for Captured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl ErrorCapture {
    pub fn take(&self) -> Option<Captured> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

impl ClientContext for ErrorCapture {}

impl ProducerContext for ErrorCapture {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
            slot.get_or_insert_with(|| Captured { text: e.to_string(), refused: authorization_error(e) });
        }
    }
}

/// Run an admin future to completion from a worker thread (worker loops are blocking code).
pub fn block_on<F: std::future::Future>(cluster: &str, fut: F) -> Result<F::Output, KafkaOpError> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| KafkaOpError::Other {
        cluster: cluster.to_string(),
        op: "start admin runtime".into(),
        reason: e.to_string(),
    })?;
    Ok(rt.block_on(fut))
}

/// Create `spec` on `cluster` unless it exists, and wait until it shows in metadata. Returns the topic's
/// actual partition count. Blocking: for worker threads.
pub fn ensure_topic<A: ClientContext + 'static>(
    admin: &AdminClient<A>,
    cluster: &str,
    flow: &impl fmt::Display,
    spec: &TopicSpec,
) -> Result<i32, KafkaOpError> {
    // A principal without CREATE can use a topic an operator created beforehand: the refusal counts
    // only if the topic does not show up below.
    let mut refused = None;
    match block_on(cluster, create_topic(admin, cluster, spec))? {
        Ok(true) => tracing::info!(flow = %flow, cluster = %cluster, topic = %spec.name, "created topic"),
        Ok(false) => {}
        Err(e @ KafkaOpError::NotAuthorized(_)) => refused = Some(e),
        Err(e) => return Err(e),
    }
    // Asked with DescribeTopics, not metadata: a long-lived client's metadata request for one topic
    // kept answering "unknown" for a topic created meanwhile (seen for 30 s on a shared client).
    let deadline = std::time::Instant::now() + ADMIN_TIMEOUT;
    let names = [spec.name.clone()];
    loop {
        let described =
            block_on(cluster, crate::raw_admin::describe_topics(admin, &names, ADMIN_TIMEOUT))?.map_err(|e| {
                KafkaOpError::Other {
                    cluster: cluster.to_string(),
                    op: format!("describe {}", spec.name),
                    reason: e.to_string(),
                }
            })?;
        let partitions = described.first().filter(|t| t.error.is_none()).map_or(0, |t| t.partitions);
        if partitions > 0 {
            return Ok(partitions);
        }
        if let Some(e) = refused {
            return Err(e);
        }
        if std::time::Instant::now() > deadline {
            return Err(KafkaOpError::Other {
                cluster: cluster.to_string(),
                op: format!("create {}", spec.name),
                reason: "the topic did not appear in metadata".into(),
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The outcome of one topic in a batched admin call: `Err` carries the reason.
pub type PerTopic<T> = Result<T, String>;

/// Metadata records a KRaft controller accepts in one user operation (`MAX_RECORDS_PER_USER_OP`): a
/// CreateTopics or CreatePartitions request beyond it is refused for every topic in it ("Excessively
/// large number of partitions per request"). Requests are cut well below it.
const RECORDS_PER_REQUEST: usize = 8_000;

/// `items` cut into consecutive runs whose weights add up to at most `limit` (an item heavier than the
/// limit goes alone: the cluster decides about it).
fn chunks<T>(items: &[T], limit: usize, weight: impl Fn(&T) -> usize) -> Vec<&[T]> {
    let mut out = Vec::new();
    let (mut start, mut sum) = (0, 0);
    for (i, item) in items.iter().enumerate() {
        let w = weight(item);
        if i > start && sum + w > limit {
            out.push(&items[start..i]);
            (start, sum) = (i, 0);
        }
        sum += w;
    }
    if start < items.len() {
        out.push(&items[start..]);
    }
    out
}

/// Create every spec that does not exist yet, in as few requests as the controller accepts. Per topic:
/// `Ok(true)` created, `Ok(false)` already there, `Err(reason)`. Only a failure of a whole call is an
/// `Err`.
pub async fn create_topics(
    admin: &AdminClient<impl ClientContext + 'static>,
    cluster: &str,
    specs: &[TopicSpec],
) -> Result<HashMap<String, PerTopic<bool>>, KafkaOpError> {
    let mut out = HashMap::new();
    // A topic costs a record, one per partition and one per config.
    let weight = |s: &TopicSpec| 1 + s.partitions.max(0) as usize + s.configs.len();
    for chunk in chunks(specs, RECORDS_PER_REQUEST, weight) {
        let topics: Vec<NewTopic<'_>> = chunk
            .iter()
            .map(|spec| {
                let mut t = NewTopic::new(
                    &spec.name,
                    spec.partitions,
                    TopicReplication::Fixed(spec.replication_factor.unwrap_or(-1)),
                );
                for (k, v) in &spec.configs {
                    t = t.set(k, v);
                }
                t
            })
            .collect();
        let opts = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT)).request_timeout(Some(ADMIN_TIMEOUT));
        let results =
            admin.create_topics(&topics, &opts).await.map_err(|e| KafkaOpError::kafka(cluster, "create topics", e))?;
        out.extend(results.into_iter().map(|r| match r {
            Ok(name) => (name, Ok(true)),
            Err((name, RDKafkaErrorCode::TopicAlreadyExists)) => (name, Ok(false)),
            Err((name, code)) => (name, Err(topic_refusal(code, "Create", "create refused"))),
        }));
    }
    Ok(out)
}

/// Grow each `(topic, partitions)`, in as few requests as the controller accepts; per-topic outcomes (never shrinks: Kafka cannot).
pub async fn grow_topics(
    admin: &AdminClient<impl ClientContext + 'static>,
    cluster: &str,
    grow: &[(String, i32)],
) -> Result<HashMap<String, PerTopic<()>>, KafkaOpError> {
    let mut out = HashMap::new();
    // At most one record per partition added; the new total bounds it.
    for chunk in chunks(grow, RECORDS_PER_REQUEST, |(_, n)| (*n).max(0) as usize) {
        let parts: Vec<NewPartitions<'_>> = chunk.iter().map(|(t, n)| NewPartitions::new(t, *n as usize)).collect();
        let opts = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT)).request_timeout(Some(ADMIN_TIMEOUT));
        let results = admin
            .create_partitions(&parts, &opts)
            .await
            .map_err(|e| KafkaOpError::kafka(cluster, "add partitions", e))?;
        out.extend(results.into_iter().map(|r| match r {
            Ok(name) | Err((name, RDKafkaErrorCode::InvalidPartitions)) => (name, Ok(())),
            Err((name, code)) => (name, Err(topic_refusal(code, "Alter", "adding partitions refused"))),
        }));
    }
    Ok(out)
}

/// The described configs of each of `topics`, in one request; per-topic outcomes.
pub async fn describe_topics_configs(
    admin: &AdminClient<impl ClientContext + 'static>,
    cluster: &str,
    topics: &[String],
) -> Result<HashMap<String, PerTopic<Vec<ConfigEntry>>>, KafkaOpError> {
    if topics.is_empty() {
        return Ok(HashMap::new());
    }
    let specs: Vec<ResourceSpecifier<'_>> = topics.iter().map(|t| ResourceSpecifier::Topic(t)).collect();
    let opts = AdminOptions::new().request_timeout(Some(ADMIN_TIMEOUT));
    let results = admin
        .describe_configs(&specs, &opts)
        .await
        .map_err(|e| KafkaOpError::kafka(cluster, "describe topic configs", e))?;
    // Results come in request order.
    Ok(topics
        .iter()
        .zip(results)
        .map(|(t, r)| {
            let r = r
                .map(|resource| resource.entries.into_iter().map(config_entry).collect())
                .map_err(|code| topic_refusal(code, "DescribeConfigs", "describe configs refused"));
            (t.clone(), r)
        })
        .collect())
}

fn config_entry(e: rdkafka::admin::ConfigEntry) -> ConfigEntry {
    ConfigEntry {
        topic_override: matches!(e.source, ConfigSource::DynamicTopic),
        name: e.name,
        value: e.value,
        read_only: e.is_read_only,
        sensitive: e.is_sensitive,
    }
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

    #[test]
    fn requests_are_cut_below_the_controller_limit() {
        let weights = [3_000usize, 3_000, 3_000, 9_000, 1, 1];
        let cut: Vec<Vec<usize>> = chunks(&weights, 8_000, |w| *w).into_iter().map(<[usize]>::to_vec).collect();
        // In order, nothing lost; an item over the limit goes alone.
        assert_eq!(cut, vec![vec![3_000, 3_000], vec![3_000], vec![9_000], vec![1, 1]]);
        assert!(chunks(&[] as &[usize], 8_000, |w| *w).is_empty());
        // Ten topics of 1,000 partitions (the bench's 10,000): two requests.
        assert_eq!(chunks(&[1_001usize; 10], RECORDS_PER_REQUEST, |w| *w).len(), 2);
    }

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
}
