//! The node's Kafka clients, one set per cluster connection.
//!
//! Every librdkafka client brings a thread per broker plus two of its own, a metadata refresh timer and
//! its share of idle wake-ups; a flow that owned each of its clients (about a dozen) made a 50-flow node
//! run 2,700 threads and 1.8 cores while idle. Here the node owns them per *connection*: the same
//! bootstrap servers and client properties are one connection, whatever alias names them. Flows take
//! handles ([`Connection`]) and the clients go when the last handle does (a reload that changes a
//! cluster's properties gets a new connection; flows on other connections never notice).
//!
//! What a connection shares, because none of it carries per-flow state:
//! - an admin client (independent requests);
//! - a metadata consumer per isolation level (metadata and watermarks, never assigned);
//! - a producer for ferry's internal topics (offset syncs, progress, heartbeats), whose delivery
//!   reports go back to the lane that sent each record (see [`internal`]);
//! - followers of internal topics: each flow's partitions on shared consumers (see [`readers`]);
//! - the lease election: one member of the node's leaders group, one lease topic per flow (see
//!   [`leases`]);
//! - a producer of copied records per tuning (compression, linger, batch size), shared by the
//!   at-least-once flows that copy into the cluster, each flow within its own share of the queue
//!   (see [`records`]).
//!
//! What stays per flow, and why (see the modules that create them):
//! - the copier's consumer: its group is the flow's, and splits the flow's partitions between nodes;
//!   one consumer cannot be a member of several groups;
//! - the checkpoint computer's transactional producer, once the flow has a group to write for: its
//!   `transactional.id` fences an ex-leader of that flow, and one producer has one id;
//! - start-up reads of internal topics to their end (published checkpoints, progress): they come and go.
//!
//! This module sits below `flow`: it imports no flow code.

pub mod budget;
pub mod internal;
pub mod leases;
pub mod readers;
pub mod records;
pub mod stats;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use rdkafka::admin::AdminClient;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::BaseConsumer;

use crate::config::ClusterSpec;
use crate::kafka::{self, KafkaOpError};

pub use internal::{InternalProducer, Lane, Outgoing};
pub use readers::PartitionReader;
pub use records::{RecordLane, RecordSink, RecordTuning};
pub use stats::StatsContext;

/// A round trip this short is a near cluster: [`Connection::round_trip`] asks no further.
const SHORT_ROUND_TRIP: Duration = Duration::from_millis(10);
/// How long one call of [`Connection::round_trip`] waits.
const ROUND_TRIP_TIMEOUT: Duration = Duration::from_secs(10);

/// An admin client shared by every flow and actor of this node that talks to the same cluster.
pub type Admin = Arc<AdminClient<StatsContext>>;

/// A consumer that is never assigned: metadata and watermarks of one connection.
pub type MetaConsumer = Arc<BaseConsumer<StatsContext>>;

/// How a metadata consumer reads high watermarks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isolation {
    /// The cluster's client properties decide (librdkafka's default is `read_committed`).
    AsConfigured,
    /// `read_uncommitted`: end offsets count records of open transactions too.
    Uncommitted,
}

/// Which clients two cluster definitions may share: the same address and client properties, and the
/// same content in the files those name (a rotated certificate needs new clients: librdkafka reads it
/// only when it creates one).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ConnectionKey {
    bootstrap: String,
    client: Vec<(String, String)>,
    files: String,
}

impl ConnectionKey {
    fn of(cluster: &ClusterSpec) -> Self {
        Self {
            bootstrap: cluster.bootstrap_servers.clone(),
            client: cluster.client.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            files: cluster.files_fingerprint(),
        }
    }
    /// Eight hex digits that tell connections of one node apart and stay the same across restarts and
    /// rotations (FNV-1a: the same on every build, unlike std's hasher): the address and the client
    /// properties, but neither secrets (the digest shows in the group's member list) nor the content of
    /// files (a rotated certificate is the same member).
    fn digest(&self) -> String {
        let mut h: u32 = 0x811c_9dc5;
        let props = self.client.iter().filter(|(k, _)| !crate::config::is_secret_key(k));
        let parts = std::iter::once(self.bootstrap.as_str()).chain(props.flat_map(|(k, v)| [k.as_str(), v.as_str()]));
        for part in parts {
            for b in part.bytes().chain([0]) {
                h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
            }
        }
        format!("{h:08x}")
    }
}

/// The node's registry of live connections. Cheap to clone a handle to ([`Arc`]).
#[derive(Default)]
pub struct Clients {
    live: Mutex<HashMap<ConnectionKey, Weak<Connection>>>,
}

impl Clients {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The connection for `cluster`: the live one of the same address and properties, or a new one.
    /// Nothing is created or contacted until a client is asked for.
    pub fn connection(&self, cluster: &ClusterSpec) -> Arc<Connection> {
        let key = ConnectionKey::of(cluster);
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|_, w| w.strong_count() > 0);
        if let Some(c) = live.get(&key).and_then(Weak::upgrade) {
            return c;
        }
        let c = Arc::new(Connection::new(cluster.clone()));
        live.insert(key, Arc::downgrade(&c));
        c
    }

    /// The aliases of the connections some flow still holds, one per connection (for status and tests).
    pub fn live_connections(&self) -> Vec<String> {
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<String> = live.values().filter_map(Weak::upgrade).map(|c| c.alias().to_string()).collect();
        out.sort();
        out
    }
}

/// A flow's two connections. The flow's supervisor holds them for the flow's life, so restarted actors
/// find the same clients.
#[derive(Clone, Debug)]
pub struct FlowConnections {
    pub source: Arc<Connection>,
    pub target: Arc<Connection>,
    /// The flow's name of its source (a shared connection carries the alias of whoever opened it).
    source_alias: String,
}

impl FlowConnections {
    pub fn new(clients: &Clients, source: &ClusterSpec, target: &ClusterSpec) -> Arc<Self> {
        Arc::new(Self {
            source: clients.connection(source),
            target: clients.connection(target),
            source_alias: source.alias.clone(),
        })
    }

    /// The connection of `cluster`, which is the flow's source or its target (offset syncs live on
    /// either).
    pub fn on(&self, cluster: &ClusterSpec) -> &Arc<Connection> {
        if cluster.alias == self.source_alias { &self.source } else { &self.target }
    }
}

/// One lazily created client (creation can fail on bad properties: the caller's error, tried again
/// on the next call).
struct Slot<T>(Mutex<Option<T>>);

impl<T: Clone> Slot<T> {
    fn new() -> Self {
        Self(Mutex::new(None))
    }

    fn lock(&self) -> MutexGuard<'_, Option<T>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get_or_try(&self, make: impl FnOnce() -> Result<T, KafkaOpError>) -> Result<T, KafkaOpError> {
        let mut slot = self.lock();
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let c = make()?;
        *slot = Some(c.clone());
        Ok(c)
    }
}

/// The shared clients of one cluster connection. Dropped with the last flow that holds it, and its
/// clients with it.
pub struct Connection {
    /// The definition that opened the connection (its alias names the connection in logs and metrics).
    cluster: ClusterSpec,
    admin: Slot<Admin>,
    meta: Slot<MetaConsumer>,
    meta_uncommitted: Slot<MetaConsumer>,
    internal: Slot<Arc<InternalProducer>>,
    readers: readers::Readers,
    records: records::RecordProducers,
    /// The node's lease elections into this cluster (see [`leases`]).
    electors: leases::Electors,
    /// A Kerberos cluster's login, renewed while some flow holds the connection.
    _kerberos: Option<Arc<crate::kerberos::Hold>>,
    /// When the connection was opened: what librdkafka said of the cluster before is another
    /// connection's (an old password, an outage that ended), see [`Connection::problem`].
    opened: Instant,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection").field("cluster", &self.cluster.alias).finish_non_exhaustive()
    }
}

impl Connection {
    fn new(cluster: ClusterSpec) -> Self {
        let kerberos = crate::kerberos::Login::of_cluster(&cluster).ok().flatten().map(|l| crate::kerberos::hold(&l));
        Self { _kerberos: kerberos, ..Self::unheld(cluster) }
    }

    fn unheld(cluster: ClusterSpec) -> Self {
        Self {
            _kerberos: None,
            cluster,
            admin: Slot::new(),
            meta: Slot::new(),
            meta_uncommitted: Slot::new(),
            internal: Slot::new(),
            readers: readers::Readers::default(),
            records: records::RecordProducers::default(),
            electors: leases::Electors::default(),
            opened: Instant::now(),
        }
    }

    /// A connection of its own, outside any registry (one-shot commands such as `ferry translate`). It
    /// holds no Kerberos login: a held login is forgotten, and its ticket deleted, when its last holder
    /// goes, and a command's clients outlive the connection that made them. The command's tickets go
    /// when it exits.
    pub fn standalone(cluster: &ClusterSpec) -> Arc<Self> {
        Arc::new(Self::unheld(cluster.clone()))
    }

    pub fn alias(&self) -> &str {
        &self.cluster.alias
    }

    /// Why the cluster does not answer this connection, as librdkafka reported it (or a diagnosis
    /// found it) since the connection was opened; kept by the alias that opened it.
    pub fn problem(&self) -> Option<String> {
        kafka::connection_problem_since(self.alias(), self.opened)
    }

    pub fn cluster(&self) -> &ClusterSpec {
        &self.cluster
    }

    /// What tells this connection from another of the same node (see [`ConnectionKey::digest`]).
    pub fn key_digest(&self) -> String {
        ConnectionKey::of(&self.cluster).digest()
    }

    /// The connection's admin client.
    pub fn admin(&self) -> Result<Admin, KafkaOpError> {
        self.admin.get_or_try(|| {
            let mut cfg = kafka::client_config(&self.cluster, &"ferry", "admin")?;
            cfg.set("client.id", "ferry|admin");
            let admin = cfg
                .create_with_context(StatsContext::new(&self.cluster.alias, "admin"))
                .map_err(|e| KafkaOpError::kafka(&self.cluster.alias, "create admin client", e))?;
            Ok(Arc::new(admin))
        })
    }

    /// The round trip to the cluster: the quickest of up to three DescribeCluster calls on the
    /// connection's admin client (the first may include connecting and logging in). A first answer
    /// within [`SHORT_ROUND_TRIP`] is taken as it is, so a near cluster costs one small request. The
    /// calls do not ask what ferry may do, so the broker's authorizer is not consulted (a read-only
    /// principal leaves no denial in its log); an answer that refuses the call still took a round trip;
    /// `None` if the cluster did not answer at all (or the client cannot ask).
    pub fn round_trip(&self) -> Option<Duration> {
        let admin = self.admin().ok()?;
        let mut best: Option<Duration> = None;
        for _ in 0..3 {
            let start = Instant::now();
            let answer =
                kafka::block_on(self.alias(), crate::raw_admin::describe_cluster_plain(&admin, ROUND_TRIP_TIMEOUT));
            let took = start.elapsed();
            match answer {
                Ok(Err(e)) if e.code < 0 => break, // librdkafka's own: a timeout, no connection, too old a broker
                Err(_) => break,
                Ok(_) => best = Some(best.map_or(took, |b| b.min(took))),
            }
            if took < SHORT_ROUND_TRIP {
                break;
            }
        }
        best
    }

    /// The connection's metadata consumer (metadata, watermarks; never assigned).
    pub fn meta(&self, isolation: Isolation) -> Result<MetaConsumer, KafkaOpError> {
        let slot = match isolation {
            Isolation::AsConfigured => &self.meta,
            Isolation::Uncommitted => &self.meta_uncommitted,
        };
        slot.get_or_try(|| {
            let (role, cfg) = self.meta_config(isolation)?;
            let consumer = cfg
                .create_with_context(StatsContext::new(&self.cluster.alias, role))
                .map_err(|e| KafkaOpError::kafka(&self.cluster.alias, format!("create {role} consumer"), e))?;
            Ok(Arc::new(consumer))
        })
    }

    fn meta_config(&self, isolation: Isolation) -> Result<(&'static str, ClientConfig), KafkaOpError> {
        let role = match isolation {
            Isolation::AsConfigured => "metadata",
            Isolation::Uncommitted => "metadata-uncommitted",
        };
        let mut cfg = kafka::client_config(&self.cluster, &"ferry", role)?;
        cfg.set("group.id", format!("ferry-{role}-unused"))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false");
        if isolation == Isolation::Uncommitted {
            cfg.set("isolation.level", "read_uncommitted");
        }
        // No statistics here: a consumer with a group routes them to its consumer queue, and nobody
        // polls a metadata consumer, so every report would pile up in memory (10 KB and more each).
        Ok((role, cfg))
    }

    /// A lane of the connection's producer for internal topics. A producer that hit a fatal error
    /// (an idempotence failure) is replaced, here and by each lane at its next send.
    pub fn internal(self: &Arc<Self>) -> Result<Lane, KafkaOpError> {
        Ok(Lane::new(self.clone(), self.internal_producer()?))
    }

    /// The connection's live internal-topics producer, replaced first if it failed fatally.
    pub(super) fn internal_producer(&self) -> Result<Arc<InternalProducer>, KafkaOpError> {
        let mut slot = self.internal.lock();
        if slot.as_ref().is_some_and(|p| p.is_fatal()) {
            tracing::warn!(cluster = %self.cluster.alias, "the internal-topics producer failed fatally; replacing it");
            *slot = None;
        }
        let producer = match slot.as_ref() {
            Some(p) => p.clone(),
            None => {
                let p = Arc::new(InternalProducer::new(&self.cluster)?);
                *slot = Some(p.clone());
                p
            }
        };
        Ok(producer)
    }

    /// A lane of the connection's record producer for `tuning`, sending for `owner` (a flow), whose
    /// reports go to `sink`.
    pub fn record_lane(
        self: &Arc<Self>,
        owner: &str,
        tuning: RecordTuning,
        sink: Arc<dyn RecordSink>,
    ) -> Result<RecordLane, KafkaOpError> {
        RecordLane::new(self.clone(), owner, tuning, sink)
    }

    /// An exactly-once flow's lane: its own transactional producer (see [`RecordLane::transactional`]).
    pub fn transactional_lane(
        self: &Arc<Self>,
        owner: &str,
        tuning: RecordTuning,
        sink: Arc<dyn RecordSink>,
        transactional_id: &str,
    ) -> Result<RecordLane, KafkaOpError> {
        RecordLane::transactional(self.clone(), owner, tuning, sink, transactional_id)
    }

    /// Records that `owner`'s lanes sent on this connection's record producers and that are not
    /// reported yet (also those of lanes that ended: a flow's next copier waits for them).
    pub fn records_in_flight(&self, owner: &str) -> usize {
        self.records.in_flight_of(owner)
    }

    /// The live record producer of `tuning` (a new one if none, or if it failed fatally).
    pub(super) fn record_producer(&self, tuning: &RecordTuning) -> Result<Arc<records::RecordProducer>, KafkaOpError> {
        self.records.get(&self.cluster, tuning)
    }

    /// Create `spec` unless it exists; wait until it shows in metadata. Returns its partition count.
    pub fn ensure_topic(&self, flow: &impl fmt::Display, spec: &kafka::TopicSpec) -> Result<i32, KafkaOpError> {
        kafka::ensure_topic(&*self.admin()?, &self.cluster.alias, flow, spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(alias: &str, props: &[(&str, &str)]) -> ClusterSpec {
        ClusterSpec::for_test(alias, props)
    }

    #[test]
    fn connections_of_other_properties_have_other_digests_and_the_same_definition_the_same() {
        let clients = Clients::new();
        let a = clients.connection(&spec("a", &[]));
        let rack = clients.connection(&spec("a", &[("client.rack", "r2")]));
        assert_ne!(a.key_digest(), rack.key_digest());
        assert_eq!(a.key_digest(), Connection::standalone(&spec("b", &[])).key_digest(), "the alias does not count");
        assert_eq!(a.key_digest().len(), 8);
        let secret = clients.connection(&spec("a", &[("sasl.password", "other")]));
        assert_eq!(a.key_digest(), secret.key_digest(), "secrets do not count (they would show in the member list)");
    }

    #[test]
    fn same_address_and_properties_share_a_connection_whatever_the_alias() {
        let clients = Clients::new();
        let a = clients.connection(&spec("a", &[]));
        let b = clients.connection(&spec("b", &[]));
        assert!(Arc::ptr_eq(&a, &b), "aliases of one cluster share");
        let other = clients.connection(&spec("a", &[("socket.timeout.ms", "30001")]));
        assert!(!Arc::ptr_eq(&a, &other), "other properties are another connection");
        assert_eq!(clients.live_connections().len(), 2);
    }

    #[test]
    fn the_uncommitted_metadata_consumer_reads_uncommitted_whatever_the_cluster_says() {
        let clients = Clients::new();
        let c = clients.connection(&spec("east", &[("isolation.level", "read_committed"), ("client.rack", "r1")]));
        let (_, cfg) = c.meta_config(Isolation::Uncommitted).unwrap();
        assert_eq!(cfg.get("isolation.level"), Some("read_uncommitted"));
        assert_eq!(cfg.get("client.rack"), Some("r1"), "everything else kept");
        assert_eq!(c.meta_config(Isolation::AsConfigured).unwrap().1.get("isolation.level"), Some("read_committed"));
    }

    #[test]
    fn a_connection_goes_with_its_last_holder() {
        let clients = Clients::new();
        let a = clients.connection(&spec("a", &[]));
        let admin = a.admin().expect("admin");
        assert!(Arc::ptr_eq(&admin, &a.admin().expect("admin")), "one admin client per connection");
        drop(a);
        assert!(clients.live_connections().is_empty());
        let again = clients.connection(&spec("a", &[]));
        assert!(!Arc::ptr_eq(&admin, &again.admin().expect("admin")), "a new connection, new clients");
    }
}
