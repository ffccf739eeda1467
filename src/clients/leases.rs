//! The node's lease elections on one target connection: one consumer in the group
//! `<deployment>.leaders`, subscribed to one single-partition lease topic per flow that this node runs
//! into the cluster. The group's assignor gives each lease topic's partition to one member among the
//! nodes subscribed to it; that node leads the flow. A flow pays a registration here, not a client:
//! before, each flow had a lease consumer of its own (four librdkafka threads, a group heartbeat a
//! second), which was a fifth of an idle flow's cost.
//!
//! Membership is static (`group.instance.id` = the node id and the connection's digest: two definitions
//! of one cluster with different client properties are two members): a restarted node takes its place back and
//! keeps its leases. A flow that stops on this node keeps its topic subscribed for [`LINGER`], so that a
//! flow restarted by a reload takes its lease back at once (as a static member of a group of its own did),
//! and hands it on after that if it does not come back. The elector runs on a thread of its own per
//! connection, gone with the last registration.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::types::{RDKafkaErrorCode, RDKafkaRespErr};
use rdkafka::{ClientContext, TopicPartitionList};

use super::Connection;
use crate::kafka;

/// Every flow's lease topic starts so: `ferry.leases.<source>.<target>` (aliases hold no dots).
pub const LEASE_TOPIC_PREFIX: &str = "ferry.leases.";

/// How long a dead leader holds its leases.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a flow that stopped on this node keeps its lease topic subscribed (a reload restarts it
/// well within this).
pub const LINGER: Duration = SESSION_TIMEOUT;
/// How long a refusal of the group or a lease topic is shown after librdkafka last reported it (it
/// retries every few seconds while refused).
const REFUSAL_WINDOW: Duration = Duration::from_secs(30);
/// The elector's poll: how soon a registration is subscribed and a rebalance answered.
const POLL: Duration = Duration::from_millis(200);

/// What a registered flow hears.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseEvent {
    /// Its lease topic exists and is subscribed: the flow takes part in the election.
    Joined,
    /// This node holds (true) or no longer holds (false) the flow's lease.
    Leading(bool),
    /// The target refuses the group or the lease topics: no node can lead until it is granted.
    Refused(String),
    /// A refusal ended.
    Granted,
    /// The election failed for this node (fenced, the topic cannot be made): the registration is void.
    Failed(String),
}

/// Who elects: the node's group and its static member id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Electorate {
    /// `<deployment>.leaders`.
    pub group: String,
    /// The node id.
    pub instance: String,
    /// The deployment, for the client id (`{deployment}|ferry|lease|{node}`).
    pub deployment: String,
}

type Notify = Arc<dyn Fn(LeaseEvent) + Send + Sync>;

struct Entry {
    id: u64,
    notify: Notify,
}

#[derive(Default)]
struct State {
    entries: HashMap<String, Entry>,
    /// Topics of flows that stopped here, subscribed until the instant.
    lingering: HashMap<String, Instant>,
    /// The lease topics whose partition the group gave this node.
    held: HashSet<String>,
    /// The refusal in force (the group or a topic), told to flows that join meanwhile.
    refused: Option<String>,
}

/// One elector's shared state: the thread's and the registrations'.
pub(super) struct Elector {
    electorate: Electorate,
    state: Mutex<State>,
}

impl Elector {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The electors of one connection, one per electorate (a node has one).
#[derive(Default)]
pub(super) struct Electors(Mutex<HashMap<Electorate, Weak<Elector>>>);

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A flow's place in the election; dropping it leaves (after [`LINGER`]).
pub struct LeaseRegistration {
    elector: Arc<Elector>,
    topic: String,
    id: u64,
}

impl Drop for LeaseRegistration {
    fn drop(&mut self) {
        let mut state = self.elector.lock();
        if state.entries.get(&self.topic).is_some_and(|e| e.id == self.id) {
            state.entries.remove(&self.topic);
            state.lingering.insert(self.topic.clone(), Instant::now() + LINGER);
        }
    }
}

impl Connection {
    /// Registers a flow in the node's lease election on this (target) connection with its lease topic
    /// `topic`, which exists (the caller made it: creating a topic blocks, and the elector's thread
    /// must keep polling); `notify` hears every [`LeaseEvent`] of it. Events are sent under the
    /// elector's lock, in the order of the changes they tell, so `notify` must not block (an actor's
    /// `do_send`). A second registration of the same topic replaces the first.
    pub fn lease(
        self: &Arc<Self>,
        electorate: &Electorate,
        topic: &str,
        notify: impl Fn(LeaseEvent) + Send + Sync + 'static,
    ) -> Result<LeaseRegistration, String> {
        let elector = {
            let mut live = self.electors.0.lock().unwrap_or_else(|p| p.into_inner());
            live.retain(|_, w| w.strong_count() > 0);
            match live.get(electorate).and_then(Weak::upgrade) {
                Some(e) => e,
                None => {
                    let e = Arc::new(Elector { electorate: electorate.clone(), state: Mutex::default() });
                    let (conn, run, alias) = (Arc::downgrade(self), e.clone(), self.alias().to_string());
                    std::thread::Builder::new()
                        .name(format!("leases {alias}"))
                        .spawn(move || run_elector(&conn, run, alias))
                        .map_err(|e| format!("cannot start the lease elector's thread: {e}"))?;
                    live.insert(electorate.clone(), Arc::downgrade(&e));
                    e
                }
            }
        };
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let notify: Notify = Arc::new(notify);
        let mut state = elector.lock();
        // Still subscribed from an earlier run of the flow: a lease still held is this node's again
        // at once. Otherwise the elector subscribes at its next turn.
        state.lingering.remove(topic);
        notify(LeaseEvent::Joined);
        if let Some(reason) = &state.refused {
            notify(LeaseEvent::Refused(reason.clone()));
        }
        if state.held.contains(topic) {
            notify(LeaseEvent::Leading(true));
        }
        state.entries.insert(topic.to_string(), Entry { id, notify });
        drop(state);
        Ok(LeaseRegistration { elector, topic: topic.to_string(), id })
    }
}

/// Keeps the group's assignment changes for the loop.
struct LeaseContext {
    changes: Mutex<Vec<(String, bool)>>,
    /// The last authentication failure librdkafka reported (wrong password, expired certificate): the
    /// flows say so at once, rather than when their first admin call times out.
    auth_failure: Mutex<Option<String>>,
}

impl ClientContext for LeaseContext {
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(error = %error, reason, "lease client error");
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::Authentication) {
            *self.auth_failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason.to_string());
        }
    }
}

impl ConsumerContext for LeaseContext {
    fn rebalance(&self, consumer: &BaseConsumer<Self>, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        let gained = err == RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS;
        let result = if gained { consumer.incremental_assign(tpl) } else { consumer.incremental_unassign(tpl) };
        if let Err(e) = result {
            tracing::warn!(error = %e, "lease rebalance");
        }
        // The lease topics hold no records: an assigned partition left fetching would send a fetch
        // request (and wake the broker thread) twice a second for nothing.
        if gained && let Err(e) = consumer.pause(tpl) {
            tracing::debug!(error = %e, "pause the lease partitions");
        }
        let mut changes = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        changes.extend(tpl.elements().iter().map(|e| (e.topic().to_string(), gained)));
    }
}

/// What the elector's thread owns.
struct Run {
    /// The connection's alias, for messages.
    alias: String,
    consumer: Option<BaseConsumer<LeaseContext>>,
    subscribed: BTreeSet<String>,
    refused: kafka::Refusal,
    /// When a failed consumer may be made again.
    retry_at: Option<Instant>,
}

fn run_elector(conn: &Weak<Connection>, elector: Arc<Elector>, alias: String) {
    let mut run =
        Run { alias, consumer: None, subscribed: BTreeSet::new(), refused: kafka::Refusal::default(), retry_at: None };
    loop {
        let Some(conn) = conn.upgrade() else { break };
        // Gone with the last registration and the last lingering topic; decided under the connection's
        // lock of its electors, which `Connection::lease` takes to find this one.
        {
            let mut live = conn.electors.0.lock().unwrap_or_else(|p| p.into_inner());
            let idle = {
                let mut state = elector.lock();
                let now = Instant::now();
                state.lingering.retain(|_, until| *until > now);
                state.entries.is_empty() && state.lingering.is_empty()
            };
            if idle && Arc::strong_count(&elector) == 1 {
                live.remove(&elector.electorate);
                break;
            }
        }
        let wanted = !elector.lock().entries.is_empty();
        if wanted && run.consumer.is_none() && run.retry_at.is_none_or(|t| Instant::now() >= t) {
            match make_consumer(&conn, &elector.electorate) {
                Ok(c) => {
                    run.consumer = Some(c);
                    run.subscribed.clear();
                }
                Err(reason) => fail_all(&elector, &mut run, &reason),
            }
        }
        drop(conn);
        if let Err(reason) = resubscribe(&elector, &mut run) {
            fail_all(&elector, &mut run, &reason);
        }
        match run.consumer.take() {
            Some(consumer) => match poll(&elector, &mut run, &consumer) {
                None => run.consumer = Some(consumer),
                Some(reason) => fail_all(&elector, &mut run, &reason),
            },
            None => std::thread::sleep(POLL),
        }
    }
    // Dropped without unsubscribing: a static member that closes does not leave the group, so the
    // leases stay this node's for a restart within the session timeout, and move on after it.
    drop(run.consumer.take());
}

fn make_consumer(conn: &Connection, electorate: &Electorate) -> Result<BaseConsumer<LeaseContext>, String> {
    let cluster = conn.cluster();
    let mut cfg = kafka::client_config(cluster, &"ferry", "lease").map_err(|e| e.to_string())?;
    // The node id and which connection: two cluster definitions of one cluster with different client
    // properties are two connections, two members, and must not fence each other as one static member.
    // Stable across restarts (the same definition gives the same id), so a restarted node takes its
    // places back.
    let instance = format!("{}.{}", electorate.instance, conn.key_digest());
    cfg.set("group.id", &electorate.group)
        .set("group.instance.id", instance)
        .set("client.id", format!("{}|ferry|lease|{}", electorate.deployment, electorate.instance))
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("session.timeout.ms", SESSION_TIMEOUT.as_millis().to_string())
        .set("heartbeat.interval.ms", "1000")
        // A flow's lease topic is created just before it is subscribed: librdkafka's default refresh
        // (5 minutes) could leave a member's metadata without it for that long.
        .set("topic.metadata.refresh.interval.ms", "10000")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "latest");
    cfg.create_with_context(LeaseContext { changes: Mutex::new(Vec::new()), auth_failure: Mutex::new(None) })
        .map_err(|e| format!("cluster `{}`: create the lease consumer: {e}", cluster.alias))
}

/// Subscribes to the joined and lingering topics when they changed.
fn resubscribe(elector: &Elector, run: &mut Run) -> Result<(), String> {
    let Some(consumer) = run.consumer.as_ref() else { return Ok(()) };
    let wanted: BTreeSet<String> = {
        let state = elector.lock();
        state.entries.keys().cloned().chain(state.lingering.keys().cloned()).collect()
    };
    if wanted == run.subscribed {
        return Ok(());
    }
    if wanted.is_empty() {
        consumer.unsubscribe();
    } else {
        let topics: Vec<&str> = wanted.iter().map(String::as_str).collect();
        consumer.subscribe(&topics).map_err(|e| format!("subscribe to the lease topics: {e}"))?;
    }
    run.subscribed = wanted;
    Ok(())
}

/// One poll of the group; the reason if the consumer failed (fenced, a failure injected).
fn poll(elector: &Elector, run: &mut Run, consumer: &BaseConsumer<LeaseContext>) -> Option<String> {
    let group = &elector.electorate.group;
    let mut failed = crate::failpoints::check(crate::failpoints::LEASE_POLL).err();
    match consumer.poll(POLL) {
        // librdkafka reports a fenced static member as a fatal error: the consumer is unusable.
        Some(Err(e))
            if matches!(e.rdkafka_error_code(), Some(RDKafkaErrorCode::FencedInstanceId | RDKafkaErrorCode::Fatal)) =>
        {
            failed = Some(format!(
                "lease group {group}: {e} (another node may be running with this node's id `{}`: give every node its own --node-id)",
                elector.electorate.instance
            ));
        }
        // The target refuses this principal the group or a lease topic: no node can lead (no topic
        // config sync, checkpoints or heartbeats) until it is granted. Degraded, and said once.
        Some(Err(e)) if kafka::authorization_error(&e).is_some() => {
            let code = kafka::authorization_error(&e).unwrap_or_default();
            let resource = if code == "GROUP_AUTHORIZATION_FAILED" {
                format!("lease group {group}")
            } else {
                format!("lease topics {LEASE_TOPIC_PREFIX}*")
            };
            // A topic's refusal names the topic (librdkafka: "Subscribed topic not available: T: ..."):
            // only that flow is told; the group's concerns every flow of the deployment here.
            let text = e.to_string();
            let topic = elector.lock().entries.keys().find(|t| text.contains(t.as_str())).cloned();
            let resource = match (&topic, code) {
                (Some(t), "TOPIC_AUTHORIZATION_FAILED") => format!("lease topic {t}"),
                _ => resource,
            };
            let reason = kafka::not_authorized(&resource, &run.alias, "Read", code);
            let only = topic.filter(|_| code == "TOPIC_AUTHORIZATION_FAILED");
            refuse(elector, run, reason, only.as_deref(), "no node can lead these flows until this is granted");
        }
        Some(Err(e)) => tracing::debug!(error = %e, "lease consumer"),
        _ => {}
    }
    let auth = consumer.context().auth_failure.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(reason) = auth {
        let reason = format!("cluster `{}`: {}", run.alias, crate::config::scrub(&reason));
        refuse(elector, run, reason, None, "the target refuses this node's credentials: no node with them can lead");
    }
    let changes = std::mem::take(&mut *consumer.context().changes.lock().unwrap_or_else(|p| p.into_inner()));
    // The group answered (or stopped refusing for a while): granted.
    if (!changes.is_empty() || run.refused.current(REFUSAL_WINDOW).is_none()) && run.refused.clear() {
        tracing::info!(group = %group, "the lease group is granted again");
        let mut state = elector.lock();
        state.refused = None;
        broadcast(&state, &LeaseEvent::Granted);
    }
    for (topic, gained) in changes {
        let mut state = elector.lock();
        let changed = if gained { state.held.insert(topic.clone()) } else { state.held.remove(&topic) };
        if let Some(e) = state.entries.get(&topic).filter(|_| changed) {
            (e.notify)(LeaseEvent::Leading(gained));
        }
    }
    failed
}

/// A refusal, said once while it lasts: to the flow of `only` (a lease topic's), else to every flow of
/// the connection, and kept for flows that register later.
fn refuse(elector: &Elector, run: &mut Run, reason: String, only: Option<&str>, why: &str) {
    if !run.refused.seen(reason.clone()) {
        return;
    }
    tracing::warn!(reason, "{why}");
    let mut state = elector.lock();
    match only.and_then(|t| state.entries.get(t)) {
        Some(entry) => (entry.notify)(LeaseEvent::Refused(reason)),
        None => {
            state.refused = Some(reason.clone());
            broadcast(&state, &LeaseEvent::Refused(reason));
        }
    }
}

/// Tells every registration, under the lock (see [`Connection::lease`]).
fn broadcast(state: &State, event: &LeaseEvent) {
    for e in state.entries.values() {
        (e.notify)(event.clone());
    }
}

/// The consumer failed (fenced, a failure injected): every registration is void (their flows restart
/// the lease with backoff and register again), and the consumer is made again after a pause.
fn fail_all(elector: &Elector, run: &mut Run, reason: &str) {
    tracing::warn!(group = %elector.electorate.group, reason, "lease election failed on this node");
    let mut state = elector.lock();
    let held = std::mem::take(&mut state.held);
    for (topic, e) in state.entries.drain() {
        if held.contains(&topic) {
            (e.notify)(LeaseEvent::Leading(false));
        }
        (e.notify)(LeaseEvent::Failed(reason.to_string()));
    }
    state.lingering.clear();
    state.refused = None;
    drop(state);
    run.consumer = None;
    run.subscribed.clear();
    run.retry_at = Some(Instant::now() + Duration::from_secs(1));
}
