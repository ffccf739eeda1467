//! The topic synchroniser: finds the source topics a flow replicates, makes their remote topics exist
//! on the target with at least as many partitions, and tells the supervisor which source partitions are
//! ready to copy.
//!
//! Selection follows MM2 (mm2-reference.md §3.4): include/exclude patterns, internal topics never,
//! `heartbeats` always, and no topic that originated on the target (no replication loops). Remote topics
//! are created with the source topic's allowed overrides, and (with `sync_topic_configs_enabled`) kept in
//! line with them every `sync_topic_configs_interval_seconds` ([`crate::topic_configs`]). With
//! `sync_topic_acls_enabled` the leader also copies the topics' ACL bindings every
//! `sync_topic_acls_interval_seconds` ([`crate::acl_sync`]).
//!
//! With `refresh_topics_enabled = false` the topics selected at the flow's first refresh are all it
//! copies (MM2's semantics: no new topics). The refreshes still run over those topics: they retry a
//! topic that failed, grow a remote topic whose source grew (its new partitions' records would
//! otherwise never be copied) and notice a deleted one. `heartbeats` is always taken when it appears.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;

use super::messages::{
    ActorKind, ActorStatusChanged, Assignment, ChildExited, ItemErrorsChanged, Parent, TopicDeletionsPending,
    TopicsReady,
};
use super::topic_deletions;
use crate::acl_sync;
use crate::clients::{Admin, FlowConnections, Isolation, MetaConsumer};
use crate::config::{FlowPlan, GroupProtocol, TopicDeletions};
use crate::failpoints;
use crate::filter::ConfigPropertyFilter;
use crate::flow::writable::{self, Writable};
use crate::kafka::{self, KafkaOpError, TopicSpec};
use crate::metrics::METRICS;
use crate::protect;
use crate::raw_admin::{self, AclOperation};
use crate::status::{ActorState, ItemErrors};
use crate::topic_configs::{self, ConfigEntry};

/// While the source has no `heartbeats` topic yet and the flow's reverse heartbeats are on, look again
/// this soon (or at the regular interval if that is shorter): the flow's heartbeat emitter creates it at
/// start, usually just after the first refresh, and `<source>.heartbeats` should not wait a whole
/// refresh interval to appear. Without reverse heartbeats nothing of the flow's creates it.
const RECHECK_HEARTBEATS: Duration = Duration::from_secs(5);
/// While some topic fails, refresh at least this often (failed topics are retried at each refresh).
const RETRY_FAILED_TOPICS: Duration = Duration::from_secs(60);

/// The connections' shared clients a refresh uses, shared with the blocking metadata calls.
struct Clients {
    source_meta: MetaConsumer,
    target_meta: MetaConsumer,
    source_admin: Admin,
    target_admin: Admin,
    config_filter: ConfigPropertyFilter,
    /// The target connection (its internal-topics producer records created topics).
    target: Arc<crate::clients::Connection>,
    /// The deployment's name: created-topic records are the deployment's.
    deployment: String,
    /// When this node last saw each remote topic's source present (deletions that follow).
    last_present: std::sync::Mutex<BTreeMap<String, i64>>,
}

/// Partitions beyond which one flow's copier group on the classic protocol is unlikely to settle:
/// librdkafka's cooperative-sticky assignor needed ~34 s for 10,001 partitions here (session timeout
/// 10 s) and is reported to fail from about 6,000 (librdkafka #4629). Above it, a warning at each refresh.
const CLASSIC_GROUP_WIDTH: i64 = 5_000;

/// The topics a flow with `refresh_topics_enabled = false` copies: set by its first successful refresh
/// and kept by the supervisor across the synchroniser's restarts.
pub type KeptTopics = Arc<std::sync::OnceLock<BTreeSet<String>>>;

/// The source topics promoted at a failover (`ferry promote`): never selected, so never copied, and
/// ferry's DENY Write bindings lifted from their remote topics. Set by the supervisor (from the control
/// topic, through the node), read at every refresh.
pub type Promoted = Arc<std::sync::RwLock<BTreeSet<String>>>;

/// What the synchroniser follows of the deployment's control records.
pub struct ControlState {
    pub deployment: String,
    /// Source topics promoted at a failover.
    pub promoted: Promoted,
    /// Whether the control topic was read (its `known`): until then the promotions are not known, and
    /// nothing that could touch a promoted topic runs (protection, config sync).
    pub read: Arc<super::pause::PauseSwitch>,
}

pub struct TopicSync {
    plan: Arc<FlowPlan>,
    /// Set once when topic refresh is off; never read when it is on.
    kept: KeptTopics,
    promoted: Promoted,
    /// Asked to refresh while a refresh ran: another one follows at once (promoted topics changed).
    again: bool,
    conns: Arc<FlowConnections>,
    supervisor: Parent,
    clients: Option<Arc<Clients>>,
    refreshing: bool,
    /// The timer of the next refresh, if one is scheduled.
    next_refresh: Option<SpawnHandle>,
    /// When topic configs were last brought in line (None: not yet).
    configs_synced: Option<Instant>,
    /// When topic ACL bindings were last synced without a failure (None: not yet, or the last failed).
    acls_synced: Option<Instant>,
    /// Why the last topic ACL sync could not run (reported as the actor's error, the flow degraded).
    acl_problem: Option<String>,
    /// A cluster without an authorizer was logged (once, as MM2 does).
    acl_unsecured_logged: bool,
    /// Why the last protection round (`protect_remote_topics`) could not run (the flow degraded).
    protect_problem: Option<String>,
    /// Remote topics no ACL binding matches, already warned about (see [`crate::protect`]).
    unbound_warned: BTreeSet<String>,
    /// The topics selected at the last refresh (a topic that disappears from the source was deleted).
    selected: BTreeSet<String>,
    /// Topics that failed, per topic, across refreshes.
    errors: ItemErrors,
    /// This node leads the flow: it creates, grows and configures remote topics. The others only watch
    /// which partitions are ready to copy.
    leading: bool,
    /// The supervisor was told how this actor ended (or asked for the stop). If the actor is dropped
    /// without that, a panic killed it: the drop guard reports it.
    exit_reported: bool,
    /// Which remote partitions take writes yet: the copier gets a partition only once they do.
    writable: Writable,
    /// A writability check is in flight.
    checking: bool,
    /// The timer of the next writability check.
    next_check: Option<SpawnHandle>,
    /// Since when some remote partitions have been waiting to take writes, and when that was last
    /// logged as a warning.
    waiting_since: Option<Instant>,
    waiting_warned: Option<Instant>,
    deployment: String,
    control_read: Arc<super::pause::PauseSwitch>,
    /// Promoted remote topics this node lifted ferry's bindings from as leader: lifted once, so an
    /// operator's own DENY made afterwards on the now-live topic stays.
    lifted: BTreeSet<String>,
    /// Remote topics waiting out `sync_topic_deletions`' grace period at the last refresh; `None` until
    /// this node's first deletion pass as leader (which reads the created-topic records whatever it finds).
    pending_deletions: Option<Vec<topic_deletions::PendingDeletion>>,
}

/// Remote partitions that have not taken writes for this long are warned about (again every as long).
const WRITABLE_WARN_AFTER: Duration = Duration::from_secs(60);

/// While remote partitions do not take writes yet, ask again this often.
const WRITABLE_RECHECK: Duration = Duration::from_secs(1);
/// How long one ListOffsets call of the writability check may take (librdkafka retries it meanwhile
/// while a partition in it has no leader).
const WRITABLE_TIMEOUT: Duration = Duration::from_secs(5);
/// Calls of the writability check at a time.
const WRITABLE_THREADS: usize = 4;

impl TopicSync {
    pub fn new(
        plan: Arc<FlowPlan>,
        conns: Arc<FlowConnections>,
        supervisor: Parent,
        leading: bool,
        kept: KeptTopics,
        control: ControlState,
    ) -> Self {
        let ControlState { deployment, promoted, read } = control;
        Self {
            control_read: read,
            lifted: BTreeSet::new(),
            deployment,
            pending_deletions: None,
            leading,
            kept,
            promoted,
            again: false,
            plan,
            conns,
            supervisor,
            clients: None,
            refreshing: false,
            next_refresh: None,
            configs_synced: None,
            acls_synced: None,
            acl_problem: None,
            acl_unsecured_logged: false,
            protect_problem: None,
            unbound_warned: BTreeSet::new(),
            selected: BTreeSet::new(),
            errors: ItemErrors::default(),
            exit_reported: false,
            writable: Writable::default(),
            checking: false,
            next_check: None,
            waiting_since: None,
            waiting_warned: None,
        }
    }

    fn clients(&mut self) -> Result<Arc<Clients>, KafkaOpError> {
        if let Some(c) = &self.clients {
            return Ok(c.clone());
        }
        let (source, target) = (&self.conns.source, &self.conns.target);
        let c = Arc::new(Clients {
            source_meta: source.meta(Isolation::AsConfigured)?,
            target_meta: target.meta(Isolation::AsConfigured)?,
            source_admin: source.admin()?,
            target_admin: target.admin()?,
            // Validation compiled these patterns already: a failure here cannot happen, but would not panic.
            config_filter: ConfigPropertyFilter::new(self.plan.settings.config_properties_exclude.as_deref())
                .unwrap_or_default(),
            target: target.clone(),
            deployment: self.deployment.clone(),
            last_present: std::sync::Mutex::default(),
        });
        self.clients = Some(c.clone());
        Ok(c)
    }

    fn exit(&mut self, result: Result<(), String>, ctx: &mut Context<Self>) {
        self.exit_reported = true;
        self.supervisor.exited.do_send(ChildExited { kind: ActorKind::Topics, result });
        ctx.stop();
    }

    /// The next refresh, replacing any pending one: a refresh started out of turn (leadership gained)
    /// must not leave a second timer chain behind, which doubled every refresh and its error reports.
    fn schedule(&mut self, ctx: &mut Context<Self>, after: Duration) {
        if let Some(pending) = self.next_refresh.take() {
            ctx.cancel_future(pending);
        }
        self.next_refresh = Some(ctx.run_later(after, |me, ctx| {
            me.next_refresh = None;
            me.refresh(ctx)
        }));
    }

    fn refresh(&mut self, ctx: &mut Context<Self>) {
        if self.refreshing {
            return;
        }
        let clients = match self.clients() {
            Ok(c) => c,
            Err(e) => {
                // Building clients fails only on bad client properties: an error for the supervisor.
                self.exit(Err(e.to_string()), ctx);
                return;
            }
        };
        self.refreshing = true;
        let plan = self.plan.clone();
        let s = &plan.settings;
        let sync_configs = s.sync_topic_configs_enabled
            && self.configs_synced.is_none_or(|t| t.elapsed() >= s.sync_topic_configs_interval);
        let sync_acls =
            s.sync_topic_acls_enabled && self.acls_synced.is_none_or(|t| t.elapsed() >= s.sync_topic_acls_interval);
        let previously = self.selected.clone();
        let leading = self.leading;
        // Until the control topic was read the promotions are unknown: nothing that could touch a promoted
        // topic (its configs, its bindings) runs.
        let known = self.control_read.known();
        let syncs = Syncs {
            configs: sync_configs && leading && known,
            acls: sync_acls && leading,
            protect: s.protect_remote_topics && known,
        };
        let kept = if s.refresh_topics_enabled { None } else { self.kept.get().cloned() };
        // A pass reads the created-topic records when something is (or was) pending, or as its first.
        let reconcile = self.pending_deletions.as_ref().is_none_or(|p| !p.is_empty());
        let promoted = self.promoted.read().unwrap_or_else(|p| p.into_inner()).clone();
        let lift: BTreeSet<String> = promoted.difference(&self.lifted).cloned().collect();
        // What this round lifts, if it protects as leader (see `refresh_once`).
        let lifting = if leading && syncs.protect { lift.clone() } else { BTreeSet::new() };
        let span = tracing::info_span!("actor", flow = %plan.id, actor = ActorKind::Topics.name());
        let fut = tracing::Instrument::instrument(
            async move {
                let round = Round {
                    syncs,
                    previously: &previously,
                    leading,
                    kept: kept.as_ref(),
                    reconcile,
                    promoted: &promoted,
                    lift: &lift,
                };
                refresh_once(&plan, &clients, round).await
            },
            span,
        );
        ctx.spawn(fut.into_actor(self).map(move |result, me, ctx| {
            me.refreshing = false;
            let s = &me.plan.settings;
            let mut interval = s.refresh_topics_interval;
            if s.sync_topic_configs_enabled {
                interval = interval.min(s.sync_topic_configs_interval);
            }
            if s.sync_topic_acls_enabled {
                interval = interval.min(s.sync_topic_acls_interval);
            }
            match result {
                Ok(mut refreshed) => {
                    if syncs.configs {
                        me.configs_synced = Some(Instant::now());
                    }
                    if !s.refresh_topics_enabled && me.kept.set(refreshed.outcomes.keys().cloned().collect()).is_ok() {
                        tracing::info!(flow = %me.plan.id, topics = refreshed.outcomes.len(), "refresh_topics_enabled = false: the topics found now are all the flow copies");
                    }
                    if let Some(acls) = refreshed.acls.take() {
                        me.acls_synced(acls, &mut refreshed.outcomes);
                    }
                    if let Some(pending) = refreshed.pending_deletions.take() {
                        me.supervisor.deletions.do_send(TopicDeletionsPending(pending.clone()));
                        me.pending_deletions = Some(pending);
                    }
                    if let Some(protected) = refreshed.protected.take() {
                        if protected.is_ok() {
                            me.lifted.extend(lifting);
                        }
                        me.protected(protected, &mut refreshed.outcomes);
                    }
                    let problem = me.acl_problem.clone().or_else(|| me.protect_problem.clone());
                    let failing = me.record_outcomes(&refreshed) || problem.is_some();
                    me.selected = refreshed.selected;
                    let plan = me.plan.clone();
                    let ready = me
                        .writable
                        .found(refreshed.assignment, |t| plan.policy.format_remote_topic(&plan.id.source, t));
                    me.supervisor.topics_ready.do_send(TopicsReady(ready));
                    me.check_writable(ctx);
                    me.supervisor.status.do_send(ActorStatusChanged {
                        kind: ActorKind::Topics,
                        state: if problem.is_some() { ActorState::Degraded } else { ActorState::Running },
                        error: problem,
                    });
                    let mut next = interval;
                    if !refreshed.source_has_heartbeats && me.plan.settings.emit_reverse_heartbeats_enabled {
                        next = next.min(RECHECK_HEARTBEATS);
                    }
                    if failing {
                        next = next.min(RETRY_FAILED_TOPICS);
                    }
                    if std::mem::take(&mut me.again) {
                        next = Duration::ZERO;
                    }
                    if refreshed.incomplete {
                        // Some selected topic has no (complete) remote yet: the leader is about to make it
                        // (or this node is the leader and it failed): look again soon.
                        next = next.min(RECHECK_HEARTBEATS);
                    }
                    me.schedule(ctx, next);
                }
                Err(e) => {
                    // Like every actor: an error ends it and the supervisor restarts it with backoff
                    // (reporting the flow degraded meanwhile).
                    me.exit(Err(e.to_string()), ctx);
                }
            }
        }));
    }
}

impl TopicSync {
    /// Ask the target whether the remote partitions that do not take writes yet do now, and hand the
    /// copier those that do; again every [`WRITABLE_RECHECK`] until all do (see [`crate::flow::writable`]).
    fn check_writable(&mut self, ctx: &mut Context<Self>) {
        if let Some(pending) = self.next_check.take() {
            ctx.cancel_future(pending);
        }
        if self.checking || self.writable.waiting() == 0 {
            return;
        }
        let Some(clients) = self.clients.clone() else { return };
        let tps = self.writable.to_check(writable::wave(WRITABLE_THREADS));
        self.checking = true;
        let (tx, rx) = tokio::sync::oneshot::channel();
        // A thread of its own, like the metadata calls: a check of partitions without a leader takes
        // WRITABLE_TIMEOUT, and must not hold the node's exit.
        let spawned = std::thread::Builder::new().name(format!("topics-writable {}", self.plan.id)).spawn(move || {
            let _ = tx.send(writable::check(&clients.target_meta, &tps, WRITABLE_TIMEOUT, WRITABLE_THREADS));
        });
        if let Err(e) = spawned {
            tracing::warn!(flow = %self.plan.id, error = %e, "cannot start the writability check; trying again");
        }
        ctx.spawn(async move { rx.await.ok() }.into_actor(self).map(|answers, me, ctx| {
            me.checking = false;
            if let Some(answers) = answers
                && let Some(ready) = me.writable.answered(&answers)
            {
                me.supervisor.topics_ready.do_send(TopicsReady(ready));
            }
            if me.writable.waiting() == 0 {
                me.waiting_warned = None;
                if let Some(since) = me.waiting_since.take() {
                    tracing::info!(flow = %me.plan.id, waited_s = since.elapsed().as_secs_f64(), "every remote partition takes writes");
                }
            } else {
                let since = *me.waiting_since.get_or_insert_with(|| {
                    tracing::info!(flow = %me.plan.id, partitions = me.writable.waiting(), last_answer = me.writable.reason().unwrap_or("none"), "remote partitions do not take writes yet (the target may still be creating them); each is copied once it does");
                    Instant::now()
                });
                if since.elapsed() >= WRITABLE_WARN_AFTER
                    && me.waiting_warned.is_none_or(|t| t.elapsed() >= WRITABLE_WARN_AFTER)
                {
                    me.waiting_warned = Some(Instant::now());
                    tracing::warn!(flow = %me.plan.id, partitions = me.writable.waiting(), waited_s = since.elapsed().as_secs(), last_answer = me.writable.reason().unwrap_or("none"), "remote partitions still do not take writes; they are not copied until they do");
                }
                me.next_check = Some(ctx.run_later(WRITABLE_RECHECK, |me, ctx| {
                    me.next_check = None;
                    me.check_writable(ctx);
                }));
            }
        }));
    }

    /// Take in a topic ACL sync's result: its topics' failures into `outcomes`, a failure of the whole
    /// sync as the actor's error. Synced again after the interval only once nothing failed.
    fn acls_synced(
        &mut self,
        result: Result<acl_sync::Synced, String>,
        outcomes: &mut BTreeMap<String, Option<String>>,
    ) {
        let flow = self.plan.id.to_string();
        let synced = match result {
            Ok(s) => s,
            Err(reason) => {
                tracing::warn!(flow = %flow, reason = %reason, "topic ACL bindings not synced; retried at the next refresh");
                self.acl_problem = Some(reason);
                return;
            }
        };
        self.acl_problem = None;
        if let Some(side) = synced.unsecured {
            if !std::mem::replace(&mut self.acl_unsecured_logged, true) {
                let cluster = match side {
                    acl_sync::Unsecured::Source => &self.plan.source.alias,
                    acl_sync::Unsecured::Target => &self.plan.target.alias,
                };
                tracing::info!(flow = %flow, cluster = %cluster, "the cluster has no ACL authorizer, so no topic ACL bindings are synced; consider sync_topic_acls_enabled = false");
            }
        } else if !synced.created.is_empty() {
            let created: Vec<String> = synced.created.iter().map(ToString::to_string).collect();
            tracing::info!(flow = %flow, count = created.len(), bindings = ?created, "synced topic ACL bindings");
            METRICS.acl_bindings_synced.with_label_values(&[&flow]).inc_by(created.len() as u64);
        }
        if synced.failed.is_empty() {
            self.acls_synced = Some(Instant::now());
        }
        for (topic, reason) in synced.failed {
            if let Some(o) = outcomes.get_mut(&topic) {
                o.get_or_insert(reason);
            }
        }
    }

    /// Take in a protection round's result (`protect_remote_topics`): its topics' failures into
    /// `outcomes` (keyed by source topic), a failure of the whole round as the actor's error.
    fn protected(
        &mut self,
        result: Result<protect::Protected, String>,
        outcomes: &mut BTreeMap<String, Option<String>>,
    ) {
        let flow = self.plan.id.to_string();
        let done = match result {
            Ok(d) => d,
            Err(reason) => {
                tracing::warn!(flow = %flow, reason = %reason, "remote topics not protected; retried at the next refresh");
                self.protect_problem = Some(reason);
                return;
            }
        };
        self.protect_problem = None;
        for b in &done.created {
            tracing::info!(flow = %flow, topic = %b.name, principal = %b.principal, "protect_remote_topics: denied Write on the remote topic");
        }
        for b in &done.lifted {
            tracing::info!(flow = %flow, topic = %b.name, principal = %b.principal, "promoted topic: lifted ferry's DENY Write");
        }
        for topic in done.unbound {
            if self.unbound_warned.insert(topic.clone()) {
                tracing::warn!(flow = %flow, topic = %topic, "protect_remote_topics: no ACL binding matches the remote topic, so ferry denies nobody; on a cluster with allow.everyone.if.no.acl.found=true anyone may write it (grant its readers by name, then ferry denies the writers)");
            }
        }
        let plan = self.plan.clone();
        for (remote, reason) in done.failed {
            let source =
                outcomes.keys().find(|t| plan.policy.format_remote_topic(&plan.id.source, t) == remote).cloned();
            if let Some(o) = source.and_then(|t| outcomes.get_mut(&t)) {
                o.get_or_insert(reason);
            }
        }
    }

    /// Log, count and publish this refresh's per-topic errors. True if any topic failed.
    fn record_outcomes(&mut self, refreshed: &Refreshed) -> bool {
        let flow = self.plan.id.to_string();
        let mut changed = false;
        for (topic, outcome) in &refreshed.outcomes {
            match outcome {
                None => changed |= self.errors.cleared(topic),
                Some(reason) => {
                    tracing::warn!(flow = %flow, topic = %topic, reason = %reason, "topic sync failed for this topic (creating it, growing it, or syncing its configs or ACL bindings: the reason says which); retried at the next refresh");
                    METRICS.topic_errors.with_label_values(&[&flow, topic]).inc();
                    self.errors.failed(topic, reason.clone());
                    changed = true;
                }
            }
        }
        let before = self.errors.snapshot().len();
        self.errors.retain(|t| refreshed.outcomes.contains_key(t));
        changed |= self.errors.snapshot().len() != before;
        if changed {
            self.supervisor.item_errors.do_send(ItemErrorsChanged::Topics(self.errors.snapshot()));
        }
        refreshed.outcomes.values().any(Option::is_some)
    }
}

impl Actor for TopicSync {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.refresh(ctx);
    }
}

/// Metadata of both clusters, off the actor thread (rdkafka's metadata call blocks).
async fn metadata(
    clients: &Arc<Clients>,
    plan: &FlowPlan,
) -> Result<(HashMap<String, i32>, HashMap<String, i32>), KafkaOpError> {
    blocking_metadata(clients, plan, true).await
}

/// The target's metadata alone (waiting for created topics to show: the source's is not needed, and at
/// thousands of partitions each answer costs a parse).
async fn target_metadata(clients: &Arc<Clients>, plan: &FlowPlan) -> Result<HashMap<String, i32>, KafkaOpError> {
    Ok(blocking_metadata(clients, plan, false).await?.1)
}

/// Metadata of the target and, with `source`, of the source (else empty).
async fn blocking_metadata(
    clients: &Arc<Clients>,
    plan: &FlowPlan,
    source_too: bool,
) -> Result<(HashMap<String, i32>, HashMap<String, i32>), KafkaOpError> {
    let c = clients.clone();
    let (source, target) = (plan.source.alias.clone(), plan.target.alias.clone());
    let failed = |reason: String| KafkaOpError::Other {
        cluster: plan.source.alias.clone(),
        op: "fetch metadata".into(),
        reason,
    };
    // A thread of its own, not `spawn_blocking`: dropping the runtime when the node exits waits for the
    // blocking pool, and a metadata call to an unreachable cluster takes ADMIN_TIMEOUT (30 s); the node must
    // exit within its shutdown timeout.
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(format!("topics-metadata {}", plan.id))
        .spawn(move || {
            let _ = tx.send((|| {
                let source =
                    if source_too { kafka::topic_partitions(&c.source_meta, &source)? } else { HashMap::new() };
                Ok((source, kafka::topic_partitions(&c.target_meta, &target)?))
            })());
        })
        .map_err(|e| failed(e.to_string()))?;
    rx.await.map_err(|e| failed(e.to_string()))?
}

/// What one refresh found.
struct Refreshed {
    /// What the copier should copy.
    assignment: Assignment,
    /// Whether the source cluster has its `heartbeats` topic yet.
    source_has_heartbeats: bool,
    /// Per selected topic: `None` when all went well this round, else why not.
    outcomes: BTreeMap<String, Option<String>>,
    /// The topics selected this round.
    selected: BTreeSet<String>,
    /// Some selected topic's remote topic is missing or smaller than its source.
    incomplete: bool,
    /// The topic ACL sync's result, if it ran.
    acls: Option<Result<acl_sync::Synced, String>>,
    /// The leader's deletion pass ran (`sync_topic_deletions`): what waits out the grace period.
    pending_deletions: Option<Vec<topic_deletions::PendingDeletion>>,
    /// The protection round's result, if it ran (`protect_remote_topics`).
    protected: Option<Result<protect::Protected, String>>,
}

/// The leader's periodic syncs a refresh runs.
#[derive(Clone, Copy)]
struct Syncs {
    configs: bool,
    acls: bool,
    /// `protect_remote_topics`: run by the leader at every refresh, and by any node that created a
    /// remote topic (so a topic is protected before the leader's next refresh).
    protect: bool,
}

/// Kafka refuses a topic whose name differs from an existing one only by `.` versus `_` (both map to
/// the same metric names).
fn collides(a: &str, b: &str) -> bool {
    a != b
        && a.len() == b.len()
        && a.bytes().zip(b.bytes()).all(|(x, y)| x == y || matches!((x, y), (b'.', b'_') | (b'_', b'.')))
}

/// What one refresh is asked to do, from the synchroniser's state.
struct Round<'a> {
    syncs: Syncs,
    /// The topics selected at the last refresh.
    previously: &'a BTreeSet<String>,
    leading: bool,
    /// `refresh_topics_enabled = false`: the topics found first.
    kept: Option<&'a BTreeSet<String>>,
    /// Read the created-topic records whatever the pass finds (deletions that follow).
    reconcile: bool,
    /// Topics an operator promoted (`ferry promote`): no longer copied.
    promoted: &'a BTreeSet<String>,
    /// Promoted topics whose remote this leader has not lifted ferry's bindings from yet.
    lift: &'a BTreeSet<String>,
}

/// One pass: select source topics, create or grow remote topics (and, as `syncs` says, bring their
/// configs in line and copy their ACL bindings), return the partitions ready to copy. A problem with one topic is that topic's
/// (in `outcomes`); only a cluster that cannot be asked at all fails the pass.
async fn refresh_once(plan: &FlowPlan, clients: &Arc<Clients>, round: Round<'_>) -> Result<Refreshed, KafkaOpError> {
    let Round { syncs, previously, leading, kept, reconcile, promoted, lift: to_lift } = round;
    failpoints::check(failpoints::TOPICS_REFRESH).map_err(|reason| KafkaOpError::Other {
        cluster: plan.source.alias.clone(),
        op: "refresh topics".into(),
        reason,
    })?;
    let (source_topics, mut target_topics) = metadata(clients, plan).await?;
    let source_has_heartbeats = source_topics.contains_key(plan.policy.heartbeats_topic());
    let mut selected: BTreeMap<String, i32> =
        source_topics.iter().filter(|(t, _)| plan.copies_topic(t)).map(|(t, n)| (t.clone(), *n)).collect();
    if let Some(kept) = kept {
        keep_only(&mut selected, kept, plan.policy.heartbeats_topic());
    }
    // Promoted topics are the applications' now: not copied, not created, synced or protected.
    selected.retain(|t, _| !promoted.contains(t));
    let selected_names: BTreeSet<String> = selected.keys().cloned().collect();
    let width: i64 = selected.values().map(|&n| i64::from(n)).sum();
    if plan.settings.group_protocol == GroupProtocol::Classic && width > CLASSIC_GROUP_WIDTH {
        tracing::warn!(
            flow = %plan.id, partitions = width,
            "the flow copies more partitions than the classic group protocol settles with (librdkafka's assignor outlasts the session timeout); set group_protocol = \"consumer\" (Kafka 4.0+)"
        );
    }
    let remote = |t: &str| plan.policy.format_remote_topic(&plan.id.source, t);
    let mut outcomes: BTreeMap<String, Option<String>> = selected.keys().map(|t| (t.clone(), None)).collect();

    // Topics this principal may see but not read are reported and left out (the copier would only get
    // fetch errors without their names); so are topics the flow names literally that the source hides.
    for (topic, reason) in refused_topics(plan, clients, &source_topics, &selected_names, kept).await {
        selected.remove(&topic);
        outcomes.insert(topic, Some(reason));
    }
    let mut fail = |topic: &str, reason: String| {
        if let Some(o) = outcomes.get_mut(topic) {
            o.get_or_insert(reason);
        }
    };

    // Source configs of every selected topic: what a created remote topic carries and what config sync
    // compares.
    let names: Vec<String> = selected.keys().cloned().collect();
    let source_configs = kafka::describe_topics_configs(&clients.source_admin, &plan.source.alias, &names).await?;
    for (topic, configs) in &source_configs {
        if let Err(e) = configs {
            fail(topic, format!("source topic configs: {e}"));
        }
    }

    let target = &plan.target.alias;
    let mut creates = Vec::new();
    let mut grows = Vec::new();
    let mut existing = Vec::new();
    // Any node creates a missing remote topic (a creation that races another node's is "already exists",
    // which is success), so a new flow copies without waiting for its lease. Growing partitions and syncing
    // configs are the leader's alone: they are not idempotent between nodes with different views.
    for (topic, partitions) in &selected {
        let name = remote(topic);
        match target_topics.get(&name) {
            None => {
                if let Some(other) = target_topics.keys().find(|t| collides(t, &name)) {
                    fail(
                        topic,
                        format!(
                            "remote topic {name} collides with the existing topic {other} on `{target}` (Kafka treats `.` and `_` alike)"
                        ),
                    );
                    continue;
                }
                let Some(Ok(configs)) = source_configs.get(topic) else { continue };
                creates.push(TopicSpec {
                    name,
                    partitions: *partitions,
                    replication_factor: plan.settings.replication_factor,
                    configs: topic_configs::desired(configs, &clients.config_filter).into_iter().collect(),
                });
            }
            Some(have) if have < partitions && leading => grows.push((name, *partitions)),
            Some(_) if leading => existing.push(topic.clone()),
            Some(_) => {}
        }
    }
    let mut changed = BTreeSet::new();
    let by_remote: HashMap<String, &String> = selected.keys().map(|t| (remote(t), t)).collect();
    let mut created_now = Vec::new();
    for (name, outcome) in kafka::create_topics(&clients.target_admin, target, &creates).await? {
        let Some(topic) = by_remote.get(&name) else { continue };
        match outcome {
            Ok(created) => {
                if created {
                    let partitions = selected[*topic];
                    tracing::info!(flow = %plan.id, topic = %name, partitions, "created remote topic");
                    METRICS.topics_created.with_label_values(&[&plan.id.to_string()]).inc();
                    created_now.push((name.clone(), (*topic).clone()));
                }
                changed.insert(name);
            }
            Err(e) => fail(topic, format!("remote topic {name} on `{target}`: {e}")),
        }
    }
    topic_deletions::record_created(&clients.target, &clients.deployment, plan, &created_now).await;
    for (name, outcome) in kafka::grow_topics(&clients.target_admin, target, &grows).await? {
        let Some(topic) = by_remote.get(&name) else { continue };
        match outcome {
            Ok(()) => {
                tracing::info!(flow = %plan.id, topic = %name, to = selected[*topic], "grew remote topic");
                changed.insert(name);
            }
            Err(e) => fail(topic, format!("remote topic {name} on `{target}`: {e}")),
        }
    }
    if syncs.configs {
        let remotes: Vec<String> = existing.iter().map(|t| remote(t)).collect();
        let target_configs = kafka::describe_topics_configs(&clients.target_admin, target, &remotes).await?;
        for topic in &existing {
            let name = remote(topic);
            let (Some(Ok(source)), Some(Ok(have))) = (source_configs.get(topic), target_configs.get(&name)) else {
                if let Some(Err(e)) = target_configs.get(&name) {
                    fail(topic, format!("remote topic {name} configs: {e}"));
                }
                continue;
            };
            if let Err(e) = sync_topic_configs(plan, clients, source, have, &name).await {
                fail(topic, e);
            }
        }
    }

    let acls = if syncs.acls {
        let (source, target) =
            ((plan.source.alias.as_str(), &clients.source_admin), (target.as_str(), &clients.target_admin));
        Some(acl_sync::sync(source, target, |t| selected_names.contains(t), remote).await)
    } else {
        None
    };
    let protected = if syncs.protect && (leading || !changed.is_empty()) {
        let remotes: Vec<String> = selected
            .keys()
            .map(|t| remote(t))
            .filter(|r| target_topics.contains_key(r) || changed.contains(r))
            .collect();
        // The leader also lifts ferry's bindings from promoted topics (`ferry promote` lifted them
        // already, but a node that had not read the promotion yet may have made them again).
        // Once per promotion and leader: an operator's own DENY made later on the live topic stays.
        let lift: BTreeSet<String> =
            if leading { to_lift.iter().map(|t| remote(t)).collect() } else { BTreeSet::new() };
        Some(match protect::own_principal(&plan.target) {
            Ok(own) => protect::protect(target, &clients.target_admin, &own, &remotes, &lift).await,
            Err(e) => Err(format!("protect_remote_topics: {e}")),
        })
    } else {
        None
    };

    // Created topics take a moment to show up in metadata; copy only to partitions that exist.
    let deadline = Instant::now() + kafka::ADMIN_TIMEOUT;
    loop {
        let missing = changed.iter().any(|name| {
            by_remote.get(name).is_some_and(|t| target_topics.get(name).is_none_or(|have| *have < selected[*t]))
        });
        if !missing || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        target_topics = target_metadata(clients, plan).await?;
    }

    let mut partitions = BTreeSet::new();
    let mut incomplete = false;
    for (topic, n) in &selected {
        let have = target_topics.get(&remote(topic)).copied().unwrap_or(0);
        incomplete |= have < *n;
        for p in 0..(*n).min(have) {
            partitions.insert((topic.clone(), p));
        }
    }
    let deleted = previously.iter().filter(|t| !source_topics.contains_key(*t)).cloned().collect();
    let pending_deletions = if leading && plan.settings.topic_deletions != TopicDeletions::Off {
        let pass = topic_deletions::DeletionPass {
            plan,
            source_meta: &clients.source_meta,
            target_meta: &clients.target_meta,
            last_present: &clients.last_present,
            deployment: &clients.deployment,
            conn: &clients.target,
            admin: &clients.target_admin,
            source_topics: &source_topics,
            promoted,
            target_topics: &target_topics,
            reconcile,
        };
        Some(pass.run().await)
    } else {
        None
    };
    Ok(Refreshed {
        pending_deletions,
        assignment: Assignment { partitions, deleted },
        source_has_heartbeats,
        selected: selected_names,
        outcomes,
        incomplete,
        acls,
        protected,
    })
}

/// The rights on a source topic the copy needs besides DESCRIBE: READ to copy it, DESCRIBE_CONFIGS to
/// create its remote topic like it.
const NEEDED: [AclOperation; 2] = [AclOperation::Read, AclOperation::DescribeConfigs];

/// Why each topic this principal may not copy is refused, from the rights the source grants it
/// (DescribeTopics with authorized operations, KIP-430): selected topics it may not read, and topics
/// named literally in `topics` that the source hides from it (no DESCRIBE, so it cannot tell whether
/// they exist). If the source does not say, nothing is refused here and the copy finds out.
async fn refused_topics(
    plan: &FlowPlan,
    clients: &Clients,
    source_topics: &HashMap<String, i32>,
    selected: &BTreeSet<String>,
    kept: Option<&BTreeSet<String>>,
) -> Vec<(String, String)> {
    let source = &plan.source.alias;
    let hidden: BTreeSet<String> = plan
        .topic_filter
        .include
        .patterns()
        .iter()
        .filter(|p| is_literal(p) && !source_topics.contains_key(p.as_str()))
        .filter(|t| plan.copies_topic(t))
        .filter(|t| kept.is_none_or(|k| k.contains(*t)))
        .cloned()
        .collect();
    let asked: Vec<String> = selected.iter().chain(&hidden).cloned().collect();
    let described = match raw_admin::describe_topics(&clients.source_admin, &asked, kafka::ADMIN_TIMEOUT).await {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(flow = %plan.id, error = %e, "cannot ask `{source}` what this principal may do with its topics; copying them regardless");
            return Vec::new();
        }
    };
    let mut refused = Vec::new();
    for d in described {
        if hidden.contains(&d.name) {
            if let Some(e) = d.error.filter(|e| e.name == "TOPIC_AUTHORIZATION_FAILED") {
                let reason = format!(
                    "source topic {} on `{source}`: not authorized to Describe ({}), so ferry cannot tell whether it \
                     exists; grant Describe and Read on it to this principal",
                    d.name, e.name
                );
                refused.push((d.name, reason));
            }
            continue;
        }
        let Some(ops) = d.authorized_operations.filter(|ops| !ops.is_empty() && !ops.contains(&AclOperation::All))
        else {
            continue;
        };
        let missing: Vec<&str> = NEEDED.iter().filter(|op| !ops.contains(op)).map(AclOperation::as_str).collect();
        if !missing.is_empty() {
            let reason = kafka::not_authorized(
                &format!("source topic {}", d.name),
                source,
                &missing.join(" and "),
                "TOPIC_AUTHORIZATION_FAILED",
            );
            refused.push((d.name, reason));
        }
    }
    refused
}

/// Topic refresh is off: of the topics selected now, only those `kept` from the first refresh, and
/// `heartbeats` (MM2 always copies it; a reverse heartbeat emitter may create it after the start).
fn keep_only(selected: &mut BTreeMap<String, i32>, kept: &BTreeSet<String>, heartbeats: &str) {
    selected.retain(|t, _| kept.contains(t) || t == heartbeats);
}

/// A `topics` pattern that names one topic: only characters of topic names (a `.` in it is meant
/// literally, though as a pattern it matches any character).
pub(crate) fn is_literal(pattern: &str) -> bool {
    !pattern.is_empty() && pattern.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// This node gained or lost the flow's lease.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct SetLeading(pub bool);

/// Refresh now (promoted topics changed): at once, or right after the refresh that runs.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct RefreshNow;

impl Handler<RefreshNow> for TopicSync {
    type Result = ();
    fn handle(&mut self, _: RefreshNow, ctx: &mut Context<Self>) {
        if self.refreshing {
            self.again = true;
        } else {
            self.refresh(ctx);
        }
    }
}

impl Handler<SetLeading> for TopicSync {
    type Result = ();
    fn handle(&mut self, msg: SetLeading, ctx: &mut Context<Self>) {
        let gained = msg.0 && !self.leading;
        self.leading = msg.0;
        if !self.leading {
            self.acl_problem = None; // the leader's duty, reported by the leader
            if self.pending_deletions.take().is_some_and(|p| !p.is_empty()) {
                self.supervisor.deletions.do_send(TopicDeletionsPending(Vec::new()));
                METRICS.remote_topics_pending_deletion.with_label_values(&[&self.plan.id.to_string()]).set(0);
            }
            self.protect_problem = None;
        }
        if gained {
            self.configs_synced = None;
            self.acls_synced = None;
            self.refresh(ctx); // create what is missing now, not at the next interval
        }
    }
}

/// Stop the synchroniser (it holds nothing that needs flushing).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct StopTopics;

impl Handler<StopTopics> for TopicSync {
    type Result = ();
    fn handle(&mut self, _: StopTopics, ctx: &mut Context<Self>) {
        self.exit_reported = true;
        ctx.stop();
    }
}

impl Drop for TopicSync {
    fn drop(&mut self) {
        if !self.exit_reported {
            self.supervisor
                .exited
                .do_send(ChildExited { kind: ActorKind::Topics, result: Err("topic synchroniser panicked".into()) });
        }
    }
}

/// Bring `remote`'s configs (`have`) in line with its source topic's allowed overrides.
async fn sync_topic_configs(
    plan: &FlowPlan,
    clients: &Clients,
    source: &[ConfigEntry],
    have: &[ConfigEntry],
    remote: &str,
) -> Result<(), String> {
    let ops = topic_configs::changes(source, have, &clients.config_filter);
    if ops.is_empty() {
        return Ok(());
    }
    raw_admin::incremental_alter_topic_configs(&clients.target_admin, remote, &ops, kafka::ADMIN_TIMEOUT)
        .await
        .map_err(|e| format!("alter configs of {remote} on `{}`: {e}", plan.target.alias))?;
    let names: Vec<&str> = ops.iter().map(|(n, _)| n.as_str()).collect();
    tracing::info!(flow = %plan.id, topic = %remote, changed = ?names, "synced topic configs");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dots_and_underscores_collide() {
        assert!(collides("a.x_y", "a.x.y"));
        assert!(collides("a_x", "a.x"));
        assert!(!collides("a.x.y", "a.x.y"));
        assert!(!collides("a.x", "a.y"));
        assert!(!collides("a.x", "a.xx"));
    }

    #[test]
    fn without_topic_refresh_only_the_topics_found_first_and_heartbeats_are_selected() {
        let kept: BTreeSet<String> = ["orders".to_string(), "gone".to_string()].into();
        let mut selected: BTreeMap<String, i32> =
            [("orders", 6), ("payments", 1), ("heartbeats", 1)].into_iter().map(|(t, n)| (t.to_string(), n)).collect();
        keep_only(&mut selected, &kept, "heartbeats");
        let names: Vec<(&str, i32)> = selected.iter().map(|(t, n)| (t.as_str(), *n)).collect();
        // A kept topic's partitions follow the source (6 now); `payments` came after the start.
        assert_eq!(names, [("heartbeats", 1), ("orders", 6)]);
    }

    #[test]
    fn literal_topic_patterns() {
        assert!(is_literal("orders"));
        assert!(is_literal("orders.v1_eu-west"));
        assert!(!is_literal("orders.*"));
        assert!(!is_literal("(a|b)"));
        assert!(!is_literal("pay\\.x"));
        assert!(!is_literal(""));
    }
}
