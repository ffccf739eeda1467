//! Kafka client construction and the few admin operations ferry's actors share.
//!
//! Every client of a cluster starts from the cluster's `[clusters.X.client]` properties; ferry then
//! sets what correctness depends on (no auto commit, acks=all, idempotence). Client ids follow MM2's
//! `SOURCE->TARGET|ferry|role` shape so broker-side quotas and logs read the same.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::ClientContext;
use rdkafka::admin::{
    AdminClient, AdminOptions, ConfigSource, NewPartitions, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::metadata::Metadata;
use rdkafka::producer::{DeliveryResult, ProducerContext};

use crate::config::{ClusterSpec, FlowId};
use crate::topic_configs::ConfigEntry;

/// How long one admin or metadata call may take before the caller treats the cluster as unreachable.
pub const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum KafkaOpError {
    #[error("cluster `{cluster}`: {op}: {source}")]
    Kafka {
        cluster: String,
        op: String,
        #[source]
        source: Box<KafkaError>,
    },
    #[error("cluster `{cluster}`: {op}: {reason}")]
    Other { cluster: String, op: String, reason: String },
}

impl KafkaOpError {
    pub fn kafka(cluster: &str, op: impl Into<String>, source: KafkaError) -> Self {
        Self::Kafka { cluster: cluster.to_string(), op: op.into(), source: Box::new(source) }
    }
}

/// Base client configuration for `cluster`, with `role` in the client id.
pub fn client_config(cluster: &ClusterSpec, flow: &FlowId, role: &str) -> ClientConfig {
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

/// A consumer that never joins a group: partitions are assigned explicitly, nothing is committed.
pub fn assign_only_consumer(cluster: &ClusterSpec, flow: &FlowId, role: &str) -> Result<BaseConsumer, KafkaOpError> {
    let mut cfg = client_config(cluster, flow, role);
    // librdkafka requires a group.id for some code paths even with assign(); it is never used to commit.
    cfg.set("group.id", format!("ferry-{flow}-{role}-unused"))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("auto.offset.reset", "earliest");
    cfg.create().map_err(|e| KafkaOpError::kafka(&cluster.alias, format!("create {role} consumer"), e))
}

pub fn admin_client(cluster: &ClusterSpec, flow: &FlowId) -> Result<AdminClient<DefaultClientContext>, KafkaOpError> {
    client_config(cluster, flow, "admin")
        .create()
        .map_err(|e| KafkaOpError::kafka(&cluster.alias, "create admin client", e))
}

/// Topic name → partition count, for every topic the cluster reports (blocking; call off the actor thread).
pub fn topic_partitions(consumer: &BaseConsumer, cluster: &str) -> Result<HashMap<String, i32>, KafkaOpError> {
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
    admin: &AdminClient<DefaultClientContext>,
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
        Some(Err((_, code))) => Err(KafkaOpError::Other {
            cluster: cluster.to_string(),
            op: format!("create topic {}", spec.name),
            reason: code.to_string(),
        }),
        None => Ok(false),
    }
}

/// Grow `topic` to `partitions` partitions. Never shrinks (Kafka cannot).
pub async fn grow_partitions(
    admin: &AdminClient<DefaultClientContext>,
    cluster: &str,
    topic: &str,
    partitions: i32,
) -> Result<(), KafkaOpError> {
    let np = NewPartitions::new(topic, partitions as usize);
    let opts = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT)).request_timeout(Some(ADMIN_TIMEOUT));
    let results = admin
        .create_partitions([&np], &opts)
        .await
        .map_err(|e| KafkaOpError::kafka(cluster, format!("add partitions to {topic}"), e))?;
    match results.into_iter().next() {
        Some(Err((_, code))) if code != RDKafkaErrorCode::InvalidPartitions => Err(KafkaOpError::Other {
            cluster: cluster.to_string(),
            op: format!("add partitions to {topic}"),
            reason: code.to_string(),
        }),
        _ => Ok(()),
    }
}

/// Producer context for small control producers (progress, offset syncs, heartbeats): remembers the
/// first delivery error until the caller, after a flush, takes it.
#[derive(Default)]
pub struct ErrorCapture {
    error: Mutex<Option<String>>,
}

impl ErrorCapture {
    pub fn take(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

impl ClientContext for ErrorCapture {}

impl ProducerContext for ErrorCapture {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
            slot.get_or_insert_with(|| e.to_string());
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
pub fn ensure_topic(cluster: &ClusterSpec, flow: &FlowId, spec: &TopicSpec) -> Result<i32, KafkaOpError> {
    let admin = admin_client(cluster, flow)?;
    if block_on(&cluster.alias, create_topic(&admin, &cluster.alias, spec))?? {
        tracing::info!(flow = %flow, cluster = %cluster.alias, topic = %spec.name, "created topic");
    }
    let probe = assign_only_consumer(cluster, flow, "topic-probe")?;
    let deadline = std::time::Instant::now() + ADMIN_TIMEOUT;
    loop {
        let md = probe
            .fetch_metadata(Some(&spec.name), ADMIN_TIMEOUT)
            .map_err(|e| KafkaOpError::kafka(&cluster.alias, format!("describe {}", spec.name), e))?;
        let partitions = md.topics().first().filter(|t| t.error().is_none()).map_or(0, |t| t.partitions().len());
        if partitions > 0 {
            return Ok(partitions as i32);
        }
        if std::time::Instant::now() > deadline {
            return Err(KafkaOpError::Other {
                cluster: cluster.alias.clone(),
                op: format!("create {}", spec.name),
                reason: "the topic did not appear in metadata".into(),
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The described configs of `topic`.
pub async fn describe_topic_configs(
    admin: &AdminClient<DefaultClientContext>,
    cluster: &str,
    topic: &str,
) -> Result<Vec<ConfigEntry>, KafkaOpError> {
    let opts = AdminOptions::new().request_timeout(Some(ADMIN_TIMEOUT));
    let results = admin
        .describe_configs([&ResourceSpecifier::Topic(topic)], &opts)
        .await
        .map_err(|e| KafkaOpError::kafka(cluster, format!("describe configs of {topic}"), e))?;
    match results.into_iter().next() {
        Some(Ok(resource)) => Ok(resource
            .entries
            .into_iter()
            .map(|e| ConfigEntry {
                topic_override: matches!(e.source, ConfigSource::DynamicTopic),
                name: e.name,
                value: e.value,
                read_only: e.is_read_only,
                sensitive: e.is_sensitive,
            })
            .collect()),
        Some(Err(code)) => Err(KafkaOpError::Other {
            cluster: cluster.to_string(),
            op: format!("describe configs of {topic}"),
            reason: code.to_string(),
        }),
        None => Ok(Vec::new()),
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
                Some((std::time::Instant::now(), reason.to_string()));
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
        tracing::warn!(error = %error, reason, "source client error");
    }
}

impl rdkafka::consumer::ConsumerContext for WatchedConsumer {}
