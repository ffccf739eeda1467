//! Kafka client construction and the few admin operations ferry's actors share.
//!
//! Every client of a cluster starts from the cluster's `[clusters.X.client]` properties; ferry then
//! sets what correctness depends on (no auto commit, acks=all, idempotence). Client ids follow MM2's
//! `SOURCE->TARGET|ferry|role` shape so broker-side quotas and logs read the same.

use std::collections::HashMap;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::metadata::Metadata;

use crate::config::{ClusterSpec, FlowId};

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
