//! The copier group's consumer: made for the flow's source, on the classic protocol (cooperative-sticky)
//! or the consumer protocol; its context reports cluster problems and keeps the group's rebalances for
//! the copy loop, which applies them right after `poll` returns (see `rebalance`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;

use crate::config::{Delivery, FlowPlan, GroupProtocol};
use crate::flow::Identity;
use crate::flow::acks::SourcePartition;
use crate::kafka::{self, ClusterWatch, KafkaOpError};

/// The copier group of a flow on its source: every node running the flow joins it, and the group's
/// cooperative-sticky assignment splits the source partitions among them.
pub fn copier_group(identity: &Identity, plan: &FlowPlan) -> String {
    format!("{}.{}", identity.deployment, plan.id)
}

/// A change of the copier group's assignment, kept by the consumer's context for the copy loop.
pub(super) enum Rebalanced {
    Assign(Vec<SourcePartition>),
    Revoke(Vec<SourcePartition>),
}

/// The copier consumer's context: reports cluster problems, and keeps rebalances for the copy loop,
/// which applies them right after `poll` returns (with access to the producer and the progress
/// writer, which the callback does not have): a revoked partition is drained and persisted before it
/// is let go.
pub(super) struct CopierContext {
    pub(super) watch: Arc<ClusterWatch>,
    /// The source refuses this principal the copier group: nothing is assigned while it lasts.
    pub(super) group_refused: Arc<kafka::Refusal>,
    /// `copier group <name> on `<source>``, for that refusal's text.
    pub(super) group: (String, String),
    pub(super) rebalances: Mutex<Vec<Rebalanced>>,
    /// A rebalance arrived during a poll: the copy loop applies it before it sends another record (a
    /// revoked partition's buffered records must not be sent after the group moved it on).
    pub(super) rebalance_pending: std::sync::atomic::AtomicBool,
    /// The copy loop ended: the consumer is closing and rebalances are applied at once (closing waits
    /// for its final revocation to be acknowledged).
    pub(super) closing: std::sync::atomic::AtomicBool,
}

impl CopierContext {
    /// If `error` is the source refusing the copier group, records it (logged once) and returns true.
    pub(super) fn group_refusal(&self, error: &KafkaError) -> bool {
        let Some(code @ "GROUP_AUTHORIZATION_FAILED") = kafka::authorization_error(error) else { return false };
        let (group, source) = &self.group;
        let reason = kafka::not_authorized(&format!("copier group {group}"), source, "Read", code);
        if self.group_refused.seen(reason.clone()) {
            tracing::warn!(reason, "the source refuses the copier group: nothing is copied until it is granted");
        }
        true
    }
}

impl rdkafka::ClientContext for CopierContext {
    fn error(&self, error: KafkaError, reason: &str) {
        if self.group_refusal(&error) {
            return;
        }
        self.watch.record(&error, reason);
        tracing::warn!(error = %error, reason, "source client error");
    }
}

impl rdkafka::consumer::ConsumerContext for CopierContext {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: rdkafka::types::RDKafkaRespErr,
        tpl: &mut rdkafka::TopicPartitionList,
    ) {
        use rdkafka::types::RDKafkaRespErr as E;
        if self.closing.load(std::sync::atomic::Ordering::Acquire) {
            let _ = match err {
                E::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => consumer.incremental_assign(tpl),
                _ => consumer.incremental_unassign(tpl),
            };
            return;
        }
        let tps: Vec<SourcePartition> = tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())).collect();
        // The group answered: whatever refused it before is granted now.
        if self.group_refused.clear() {
            tracing::info!("the source grants the copier group again");
        }
        let event = match err {
            E::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => Rebalanced::Assign(tps),
            E::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => Rebalanced::Revoke(tps),
            other => {
                tracing::warn!(error = ?other, "copier group rebalance error");
                return;
            }
        };
        self.rebalances.lock().unwrap_or_else(|p| p.into_inner()).push(event);
        self.rebalance_pending.store(true, std::sync::atomic::Ordering::Release);
    }
}

pub(super) fn source_consumer(
    plan: &FlowPlan,
    watch: Arc<ClusterWatch>,
    identity: &Identity,
    rtt: Option<Duration>,
) -> Result<BaseConsumer<CopierContext>, KafkaOpError> {
    let group = (copier_group(identity, plan), plan.source.alias.clone());
    let (partition_bytes, response_bytes) = fetch_sizes(rtt);
    let prefetch = prefetch_bytes(rtt);
    tracing::info!(flow = %plan.id, source_round_trip_ms = rtt.map(|r| r.as_secs_f64() * 1e3), partition_bytes, response_bytes, prefetch_bytes = prefetch, "fetch sizes for the source's round trip (unless its client properties set them)");
    let mut cfg = kafka::client_config(&plan.source, &plan.id, "replication-consumer")?;
    // Positions live in MM2's progress topic, never in the group: the group only splits the work.
    cfg.set("group.id", copier_group(identity, plan))
        // Dynamic membership, deliberately: a static member that rejoins after a restart gets its old
        // assignment back without a rebalance, even when its subscription changed meanwhile (a reloaded
        // flow with other topics would copy nothing). The client id names the node in the group listing.
        .set("client.id", format!("{}|ferry|replication-consumer|{}", plan.id, identity.node_id))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        // Never jump silently: a position that fell off the log is reported, and the probe decides
        // (records lost to retention, or a re-created topic to copy from its start).
        .set("auto.offset.reset", "error")
        // The group leader notices a grown source topic only at a metadata refresh (default every
        // 5 minutes): refresh often, it is one small request for the subscribed topics.
        .set("topic.metadata.refresh.interval.ms", "5000")
        // How long the broker holds a fetch that finds nothing: a record arriving meanwhile answers it
        // at once (fetch.min.bytes is 1), so this only paces an idle flow's fetches. librdkafka's and
        // Java's default; 100 ms made each idle flow send ten fetches a second.
        .set("fetch.wait.max.ms", "500")
        .set("queued.max.messages.kbytes", (prefetch / 1024).to_string());
    for (key, value) in link_fetch(&plan.source.client, rtt) {
        cfg.set(key, value);
    }
    if plan.settings.delivery == Delivery::ExactlyOnce {
        // Aborted source transactions are never copied, whatever the cluster's client properties say.
        cfg.set("isolation.level", "read_committed");
    }
    match plan.settings.group_protocol {
        GroupProtocol::Classic => {
            cfg.set("partition.assignment.strategy", "cooperative-sticky");
            if !plan.source.client.contains_key("session.timeout.ms") {
                // A node that dies (kill -9, lost host) gives its partitions up after this long; a
                // graceful stop leaves the group at once. Kafka's minimum is 6 s.
                cfg.set("session.timeout.ms", "10000");
            }
        }
        // The broker assigns and owns the session timeout (group.consumer.session.timeout.ms); the
        // client-side assignor and timeouts do not apply. Rebalances reach the copier as incremental
        // assign/revoke events, as with cooperative-sticky.
        GroupProtocol::Consumer => {
            cfg.set("group.protocol", "consumer");
            // librdkafka refuses to create a consumer-protocol client with the classic protocol's
            // timeouts and assignor set; the source cluster's client properties may hold them for the
            // classic flows and other clients of the cluster.
            for key in ["session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"] {
                if cfg.get(key).is_some() {
                    tracing::info!(flow = %plan.id, key, "ignored for the copier group on the consumer protocol (the broker owns it: group.consumer.*)");
                    cfg.remove(key);
                }
            }
        }
    }
    cfg.create_with_context(CopierContext {
        watch,
        group_refused: Arc::default(),
        group,
        rebalances: Mutex::new(Vec::new()),
        rebalance_pending: std::sync::atomic::AtomicBool::new(false),
        closing: std::sync::atomic::AtomicBool::new(false),
    })
    .map_err(|e| KafkaOpError::kafka(&plan.source.alias, "create replication consumer", e))
}

/// How much one source partition may return per fetch, and one fetch response in all, for a source
/// `rtt` away (`None`: not measured, the long-link sizes).
///
/// librdkafka keeps one fetch request in flight per broker, so a consumer moves at most one response
/// per round trip to each broker: with librdkafka's 1 MiB per partition, eight partitions of one broker
/// move 8 MiB per round trip, 27 MB/s over a 300 ms link, and a single partition 3.5 MB/s whatever the
/// link could carry (the classic "MM2 falls hours behind over a long link"). So the sizes follow the
/// bytes a round trip must carry: [`PARTITION_RATE`] per partition and [`RESPONSE_RATE`] per response,
/// between librdkafka's 1 MiB per partition (and an 8 MiB response) on a near cluster and 8 MiB (24 MiB)
/// from 84 ms on. Measured (`scripts/bench.sh wan` and `headline`, bench/results.md): 8 and
/// 24 MiB copy 77 MB/s at 300 ms, as fast as without latency, where 1 MiB copied 26.9 MB/s; on a near
/// cluster they cost a third more CPU and 50 MiB more memory than 1 and 8 MiB (the buffers of larger
/// responses), for nothing: the next fetch leaves at once.
pub(super) fn fetch_sizes(rtt: Option<Duration>) -> (usize, usize) {
    let Some(rtt) = rtt else { return (PARTITION_FETCH_MAX, RESPONSE_MAX) };
    let bytes = |rate: f64| (rate * rtt.as_secs_f64()) as usize;
    (
        bytes(PARTITION_RATE).clamp(PARTITION_FETCH_MIN, PARTITION_FETCH_MAX),
        bytes(RESPONSE_RATE).clamp(RESPONSE_MIN, RESPONSE_MAX),
    )
}

const MIB: usize = 1024 * 1024;
/// Bytes per second one partition should be able to move over a long link.
const PARTITION_RATE: f64 = 100e6;
/// Bytes per second one fetch response (a broker's partitions) should be able to move.
const RESPONSE_RATE: f64 = 300e6;
const PARTITION_FETCH_MIN: usize = MIB;
const PARTITION_FETCH_MAX: usize = 8 * MIB;
const RESPONSE_MIN: usize = 8 * MIB;
/// What the larger shares may add to the copier's memory, whatever the number of partitions (24 MiB
/// per round trip is 80 MB/s over 300 ms).
const RESPONSE_MAX: usize = 24 * MIB;

/// The consumer's prefetch (`queued.max.messages.kbytes`; librdkafka's 64 MiB would be the largest part
/// of the copier's memory): the flow's share of the node's budget ([`crate::clients::budget`]), and on a
/// long link at least a full response and [`PREFETCH_MARGIN`] more, so that a response arriving never
/// holds the next fetch back for a round trip. Measured (bench/results.md, 2026-12-05): a 16 MiB share
/// copied the headline as fast as 32 MiB on a near cluster, but over 300 ms 46 MB/s instead of 73.
pub(super) fn prefetch_bytes(rtt: Option<Duration>) -> usize {
    let (_, response) = fetch_sizes(rtt);
    let long = response > RESPONSE_MIN;
    let share = crate::clients::budget::flow_share();
    if long { share.max(response + PREFETCH_MARGIN) } else { share }
}

/// What a long link's prefetch holds beyond one full response.
const PREFETCH_MARGIN: usize = 8 * MIB;

/// How long a partition waits before its next fetch when the prefetch queue is full: librdkafka's
/// default of a second idles the link for a second each time one large response fills the queue,
/// which the copy loop drains in a fraction of that.
pub(super) const FETCH_QUEUE_BACKOFF_MS: u32 = 200;

/// The fetch settings for a source `rtt` away ([`fetch_sizes`]): an operator should not have to know
/// how long the link is. Each gives way to the source cluster's own client property (and the response
/// bound to a share per partition the cluster sets: librdkafka refuses a `fetch.max.bytes` below
/// `max.partition.fetch.bytes`).
pub(super) fn link_fetch(
    client: &std::collections::BTreeMap<String, String>,
    rtt: Option<Duration>,
) -> Vec<(&'static str, String)> {
    let own_share = client.contains_key("max.partition.fetch.bytes");
    let (partition, response) = fetch_sizes(rtt);
    [
        ("max.partition.fetch.bytes", partition.to_string()),
        ("fetch.max.bytes", response.to_string()),
        ("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS.to_string()),
    ]
    .into_iter()
    .filter(|(key, _)| {
        let bounds_own_share = own_share && *key == "fetch.max.bytes";
        !client.contains_key(*key) && !bounds_own_share
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_fetch_settings_apply_unless_the_cluster_sets_its_own() {
        let none = std::collections::BTreeMap::new();
        let set: Vec<&str> = link_fetch(&none, None).into_iter().map(|(k, _)| k).collect();
        assert_eq!(set, ["max.partition.fetch.bytes", "fetch.max.bytes", "fetch.queue.backoff.ms"]);
        let own = std::collections::BTreeMap::from([("max.partition.fetch.bytes".to_string(), "1048576".to_string())]);
        let kept: Vec<&str> = link_fetch(&own, Some(Duration::from_millis(300))).into_iter().map(|(k, _)| k).collect();
        assert_eq!(kept, ["fetch.queue.backoff.ms"], "a share of the cluster's own leaves librdkafka's response bound");
    }

    #[test]
    fn fetch_sizes_follow_the_round_trip_between_librdkafkas_and_the_long_link_sizes() {
        let ms = |m| Some(Duration::from_millis(m));
        assert_eq!(fetch_sizes(ms(1)), (MIB, 8 * MIB), "a near cluster: librdkafka's share, a small response");
        assert_eq!(fetch_sizes(ms(10)), (MIB, 8 * MIB));
        assert_eq!(fetch_sizes(ms(40)), (4_000_000, 12_000_000), "100 and 300 MB/s over 40 ms");
        assert_eq!(fetch_sizes(ms(100)), (8 * MIB, 24 * MIB), "a link between regions: the largest");
        assert_eq!(fetch_sizes(ms(300)), (8 * MIB, 24 * MIB));
        assert_eq!(fetch_sizes(ms(3000)), (8 * MIB, 24 * MIB), "bounded");
        assert_eq!(fetch_sizes(None), (8 * MIB, 24 * MIB), "not measured: sizes that serve every link");
        assert_eq!(prefetch_bytes(ms(1)), crate::clients::budget::flow_share(), "a near cluster: the flow's share");
        assert_eq!(prefetch_bytes(ms(300)), 32 * MIB, "a long link: a full response and the margin");
        for m in 0..2000 {
            let (p, r) = fetch_sizes(ms(m));
            assert!(p <= r, "librdkafka refuses a response bound below the share per partition ({m} ms)");
        }
    }
}
