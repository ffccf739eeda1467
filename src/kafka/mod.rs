//! Kafka client construction and the few admin operations ferry's actors share.
//!
//! Every client of a cluster starts from the cluster's `[clusters.X.client]` properties; ferry then
//! sets what correctness depends on (no auto commit, acks=all, idempotence). Client ids follow MM2's
//! `SOURCE->TARGET|ferry|role` shape so broker-side quotas and logs read the same.
//!
//! - [`client_config`]: a cluster's properties plus ferry's, librdkafka's check of them, small contexts;
//! - [`diagnosis`]: why a cluster does not answer, from what librdkafka reported;
//! - [`errors`]: operation errors and refusals as operators read them;
//! - [`topics`]: topic admin operations; [`read`]: reading a topic to its end, watermarks.
//!
//! Which clients exist, and who shares them, is `clients`' business.

// The submodules share these imports (`use super::*`).
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

mod client_config;
mod diagnosis;
mod errors;
mod read;
mod topics;

pub use client_config::*;
pub use diagnosis::*;
pub use errors::*;
pub use read::*;
pub use topics::*;

/// How long one admin or metadata call may take before the caller treats the cluster as unreachable.
pub const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

/// `fut` given up after `deadline` whatever librdkafka does (`None`). librdkafka times admin requests
/// out itself, but a CreateTopics to a cluster that refused the connection was seen answering only
/// after twice its request timeout (on the node's second and third refusing cluster), so a caller
/// that blocks on the answer also keeps a deadline of its own.
pub async fn within<F: std::future::Future>(deadline: Duration, fut: F) -> Option<F::Output> {
    tokio::time::timeout(deadline, fut).await.ok()
}

/// The margin [`within`] gives librdkafka's own timeout before ferry's applies.
pub const ADMIN_GRACE: Duration = Duration::from_secs(2);

/// Run an admin future to completion from a worker thread (worker loops are blocking code).
pub fn block_on<F: std::future::Future>(cluster: &str, fut: F) -> Result<F::Output, KafkaOpError> {
    let rt = runtime().map_err(|reason| KafkaOpError::Other {
        cluster: cluster.to_string(),
        op: "start admin runtime".into(),
        reason,
    })?;
    Ok(rt.block_on(fut))
}

/// The node's runtime for admin calls (`raw_admin` waits for each on a blocking thread of the
/// runtime): one for the node, driven by whichever thread calls `block_on`. A runtime per flow kept a
/// blocking thread per flow alive between its calls (an idle 50-flow node ran 50 of them); the
/// shared pool holds as many as calls are waiting at once.
pub fn runtime() -> Result<&'static tokio::runtime::Runtime, String> {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("kafka-admin")
        // A blocking thread waits for one call's answer; an idle flow calls every few seconds, so
        // keeping one around in between would be a thread per flow again.
        .thread_keep_alive(std::time::Duration::from_millis(500))
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    // A second thread may have won meanwhile: its runtime is the node's, this one is dropped.
    Ok(RUNTIME.get_or_init(|| rt))
}
