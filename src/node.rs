//! The node: one process running many flows. It owns the running set and changes it only by applying a
//! flow-set diff ([`crate::config::diff`]): startup is the diff from an empty set, a reload the diff
//! from the running set. Unchanged flows are never touched (same actors, same clients, no pause);
//! removed flows stop gracefully; a changed flow's new plan is checked first (its clusters must answer),
//! and if it cannot start the flow keeps its old plan and the reload reports `rolled_back`. A rolled-back
//! change is not taken as loaded: it is tried again by itself after a wait that doubles with each failed
//! attempt ([`reload::retry_delay`]), or at once on SIGHUP, `POST /reload` or an edit, until it applies.
//!
//! Reloads are serialised: while one runs (stopping and starting flows takes seconds), the next waits.
//! A dry run ([`PlanReload`]) is the same read and diff, answered without applying anything.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use actix::prelude::*;
use tokio::sync::oneshot;

use crate::clients::{Clients, FlowConnections};
use crate::config::{self, FlowId, FlowPlan, FlowSet};
use crate::control::{
    self, ControlWatch, Logged, PauseRecord, PauseSeen, Pauses, PausesRead, PromotionRead, Promotions,
};
use crate::flow::supervisor::{Recorded, SetPaused, SetPromoted};
use crate::flow::{FlowSupervisor, Identity, StopFlow};
use crate::kafka;
use crate::metrics::METRICS;
use crate::reload::{self, PlanReload, Reload, ReloadOutcome, ReloadPlan, ReloadResult, Trigger};
use crate::status::{StatusBoard, rfc3339};

/// How long a changed flow's clusters have to answer before its new plan counts as unable to start.
const PREFLIGHT_TIMEOUT: Duration = Duration::from_secs(10);

struct Running {
    plan: Arc<FlowPlan>,
    addr: Addr<FlowSupervisor>,
}

pub struct Node {
    flows_dir: PathBuf,
    status: StatusBoard,
    /// Deadline for stopping a flow that a reload removes or restarts.
    stop_timeout: Duration,
    running: BTreeMap<FlowId, Running>,
    /// Starts per flow id over the node's life: each (re)start is a new generation.
    generations: BTreeMap<FlowId, u64>,
    /// Content hash of the directory as last loaded (valid or not); `None` after a rollback: that content
    /// is not loaded (its retry, an edit or a reload that is asked for tries it again).
    loaded_hash: Option<u64>,
    /// A change that was rolled back, tried again by itself when its wait runs out.
    retrying: Option<Retrying>,
    /// The set to apply at start (validated by the caller).
    initial: Option<FlowSet>,
    stopping: bool,
    /// Who this node is among the nodes that share its flows.
    identity: Arc<Identity>,
    /// Each flow's pause, as the control topics (see `control`) and this node's own writes to them said
    /// it, in the topics' order; what a flow starts with while its target's control topic cannot be read.
    pauses: Pauses,
    /// Each flow's promoted topics, as the control topics said them (see `control::promote`).
    promotions: Promotions,
    /// One control-topic reader and writer per target cluster connection of the running flows, and
    /// whether it has read the topic to its end yet.
    controls: BTreeMap<String, (ControlWatch, bool)>,
    /// Records copied per flow at the last figures refresh, for rates.
    copied: BTreeMap<String, (f64, Instant)>,
    /// The Kafka clients of every cluster connection the running flows use (see `clients`).
    clients: Arc<Clients>,
    /// Reload by itself on a change in the directory (watch and rescan), or only when asked (SIGHUP,
    /// `POST /reload`): see [`Node::with_auto_reload`].
    auto_reload: bool,
    _watch: Option<reload::DirWatch>,
}

/// A rolled-back change: its content hash, how many reloads in a row tried it (the next outcome for
/// the same content is attempt + 1), and the timer that tries it again (none with `--reload manual`).
struct Retrying {
    hash: u64,
    attempt: u32,
    timer: Option<SpawnHandle>,
}

/// The default node id: `FERRY_NODE_ID`, else the host name (stable across restarts in a StatefulSet,
/// distinct per host).
pub fn default_node_id() -> String {
    if let Ok(id) = std::env::var("FERRY_NODE_ID")
        && !id.is_empty()
    {
        return id;
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "ferry".to_string())
}

impl Node {
    /// A node for `flows_dir`, starting with `initial` (already validated: `ferry run` refuses to start on
    /// an invalid directory).
    pub fn new(flows_dir: PathBuf, initial: FlowSet, status: StatusBoard, stop_timeout: Duration) -> Self {
        Self {
            loaded_hash: Some(reload::content_hash(&flows_dir)),
            retrying: None,
            flows_dir,
            status,
            stop_timeout,
            running: BTreeMap::new(),
            generations: BTreeMap::new(),
            initial: Some(initial),
            stopping: false,
            pauses: Pauses::default(),
            promotions: Promotions::default(),
            controls: BTreeMap::new(),
            copied: BTreeMap::new(),
            clients: Clients::new(),
            auto_reload: true,
            identity: Arc::new(Identity {
                node_id: default_node_id(),
                deployment: std::env::var("FERRY_DEPLOYMENT")
                    .ok()
                    .filter(|d| !d.is_empty())
                    .unwrap_or_else(|| "ferry".into()),
            }),
            _watch: None,
        }
    }

    /// This node's id (`--node-id`; default: `FERRY_NODE_ID`, else the host name).
    pub fn with_node_id(mut self, node_id: &str) -> Self {
        self.identity = Arc::new(Identity { node_id: node_id.to_string(), ..(*self.identity).clone() });
        self
    }

    /// The deployment this node belongs to (`--deployment`; default: `FERRY_DEPLOYMENT`, else `ferry`).
    pub fn with_deployment(mut self, deployment: &str) -> Self {
        self.identity = Arc::new(Identity { deployment: deployment.to_string(), ..(*self.identity).clone() });
        self
    }

    /// Whether the node reloads by itself when the directory changes (the default), or only on SIGHUP and
    /// `POST /reload` (`ferry run --reload manual`): then an edit can be reviewed with a dry run before
    /// anything applies it. Without the watcher and the rescan, a rolled-back change is not tried again
    /// by itself either.
    pub fn with_auto_reload(mut self, auto: bool) -> Self {
        self.auto_reload = auto;
        self
    }

    /// The control topic of `plan`'s target (its reader started if this node has none for that
    /// connection yet), and whether it has been read to its end.
    fn control_for(&mut self, plan: &FlowPlan, ctx: &mut Context<Self>) -> (&ControlWatch, bool) {
        let key = control::connection_key(&plan.target);
        let (watch, read) = self.controls.entry(key).or_insert_with(|| {
            let watch = ControlWatch::start(
                self.clients.connection(&plan.target),
                &plan.target,
                &self.identity.deployment,
                plan.settings.replication_factor,
                ctx.address().recipient(),
                ctx.address().recipient(),
                ctx.address().recipient(),
            );
            (watch, false)
        });
        (watch, *read)
    }

    /// Readers of clusters that no running flow targets any more are closed.
    fn prune_controls(&mut self) {
        let used: std::collections::BTreeSet<String> =
            self.running.values().map(|r| control::connection_key(&r.plan.target)).collect();
        self.controls.retain(|key, _| used.contains(key));
    }

    /// A pause record of `flow` from a control topic (read, or written here and acknowledged): applied
    /// if it is the newest this node has seen, in the topic's order.
    fn note_pause(&mut self, flow: &FlowId, logged: Logged) {
        self.pauses.apply(flow, logged);
        self.show_pause(flow);
    }

    /// `/flows` and the flow's topic synchroniser get `flow`'s promoted topics.
    fn show_promoted(&self, flow: &FlowId) {
        self.status.set_promoted(&flow.to_string(), self.promotions.records(flow));
        if let Some(r) = self.running.get(flow) {
            r.addr.do_send(SetPromoted(self.promotions.topics(flow)));
        }
    }

    /// `/flows` shows the decision in force for `flow`.
    fn show_pause(&self, flow: &FlowId) {
        self.status.set_pause_record(&flow.to_string(), self.pauses.record(flow).cloned());
    }

    /// Whether `connection`'s control topic speaks for `flow`: that of its target while it runs. A
    /// reader pruned after the flow moved to another target may still deliver a record or two.
    fn speaks_for(&self, flow: &FlowId, connection: &str) -> bool {
        self.running.get(flow).is_none_or(|r| control::connection_key(&r.plan.target) == connection)
    }

    fn start_flow(&mut self, plan: Arc<FlowPlan>, ctx: &mut Context<Self>) {
        let (_, pause_known) = self.control_for(&plan, ctx);
        let id = plan.id.clone();
        let generation = {
            let g = self.generations.entry(id.clone()).or_default();
            *g += 1;
            *g
        };
        let paused = self.pauses.paused(&id);
        let promoted = self.promotions.topics(&id);
        self.status.set_promoted(&id.to_string(), self.promotions.records(&id));
        let conns = FlowConnections::new(&self.clients, &plan.source, &plan.target);
        let addr = FlowSupervisor::new(
            plan.clone(),
            conns,
            self.status.clone(),
            generation,
            self.identity.clone(),
            Recorded { paused, pause_known, promoted },
        )
        .start();
        self.running.insert(id, Running { plan, addr });
    }

    /// Ask `ids` to stop by `deadline`; the receivers fire when each has drained.
    fn stop_flows(&mut self, ids: &[FlowId], deadline: Instant) -> Vec<(FlowId, oneshot::Receiver<()>)> {
        ids.iter()
            .filter_map(|id| {
                let r = self.running.remove(id)?;
                let (done, wait) = oneshot::channel();
                r.addr.do_send(StopFlow { deadline, done });
                Some((id.clone(), wait))
            })
            .collect()
    }

    /// The plans of the flows that run now (a rolled-back flow: its old plan).
    fn running_plans(&self) -> BTreeMap<FlowId, FlowPlan> {
        self.running.iter().map(|(id, r)| (id.clone(), (*r.plan).clone())).collect()
    }

    /// Record a finished reload: log, metrics, `/flows`.
    fn report(&self, outcome: &ReloadOutcome) {
        if outcome.result == ReloadResult::Unchanged {
            return;
        }
        METRICS.config_reloads.with_label_values(&[outcome.result.name()]).inc();
        let ok = outcome.result == ReloadResult::Applied;
        METRICS.config_last_reload_successful.set(i64::from(ok));
        if ok {
            let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
            METRICS.config_last_reload_success_timestamp.set(now as i64);
        }
        match (outcome.result, &outcome.error) {
            (ReloadResult::Rejected, Some(e)) => {
                tracing::error!(trigger = ?outcome.trigger, "flows not reloaded, the running flows are untouched: {e}")
            }
            (ReloadResult::RolledBack, Some(e)) => tracing::error!(
                trigger = ?outcome.trigger, rolled_back = ?outcome.rolled_back, attempt = outcome.attempt,
                "flows reloaded, but changed flows kept their old plan: {e}; the change is tried again {}",
                outcome.retry.as_deref().unwrap_or("at the next reload")
            ),
            _ => tracing::info!(trigger = ?outcome.trigger, "flows reloaded: {outcome}"),
        }
        self.status.set_last_reload(outcome.clone());
    }

    /// A reload of content `hash` was rolled back at its `attempt`th try in a row: schedule the next try
    /// (on a node that reloads by itself) and say when in `o`.
    fn retry_later(&mut self, hash: Option<u64>, attempt: u32, o: &mut ReloadOutcome, ctx: &mut Context<Self>) {
        let Some(hash) = hash else { return };
        if !self.auto_reload {
            self.retrying = Some(Retrying { hash, attempt, timer: None });
            o.retry = Some("by SIGHUP or POST /reload (this node reloads only when asked)".into());
            return;
        }
        let wait = reload::retry_delay(attempt, reload::rescan_interval());
        let timer = ctx.run_later(wait, |_, ctx| ctx.notify(Reload { trigger: Trigger::Retry }));
        self.retrying = Some(Retrying { hash, attempt, timer: Some(timer) });
        let at = rfc3339(SystemTime::now() + wait);
        o.retry = Some(format!(
            "at {at} (in {wait:?}; the wait doubles after each failed attempt, up to {:?}), or at once by SIGHUP, \
             POST /reload or an edit",
            reload::RETRY_WAIT_MAX
        ));
        o.next_attempt_at = Some(at);
    }

    /// Show flows that are defined but disabled (a running flow that gets disabled is shown so once it
    /// has stopped).
    fn show_disabled(&self, set: &FlowSet) {
        for (id, plan) in &set.flows {
            if !plan.settings.enabled && !self.running.contains_key(id) {
                self.status.flow_disabled(&id.to_string(), plan.settings.delivery);
            }
        }
    }
}

impl Actor for Node {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if self.auto_reload {
            match reload::watch(&self.flows_dir, ctx.address().recipient()) {
                Ok(w) => self._watch = Some(w),
                Err(e) => {
                    tracing::warn!(error = %e, "flow files are not watched; reload with SIGHUP or POST /reload (the directory is also rescanned every {:?})", reload::rescan_interval())
                }
            }
            ctx.run_interval(reload::rescan_interval(), |_, ctx| ctx.notify(Reload { trigger: Trigger::Rescan }));
        } else {
            tracing::info!("manual reload: the flows directory is read again only on SIGHUP or POST /reload");
        }
        // Metrics that depend on the time or on the status board (heartbeat ages, flow states), and the
        // flows' figures in /flows (lag, rate, last checkpoint).
        ctx.run_interval(Duration::from_secs(1), |node, _| {
            let ids: Vec<String> = node.running.keys().map(ToString::to_string).collect();
            for (id, figures, now) in METRICS.figures(&ids, &node.copied) {
                node.copied.insert(id.clone(), now);
                node.status.set_figures(&id, figures);
            }
            METRICS.refresh(&node.status.snapshot());
        });
        METRICS.refresh(&self.status.snapshot());
        for result in ["applied", "rejected", "rolled_back"] {
            METRICS.config_reloads.with_label_values(&[result]).inc_by(0);
        }
        if let Some(set) = self.initial.take() {
            let flows = set.flows.values().filter(|p| p.settings.enabled).count();
            ctx.notify(Apply { set, trigger: Trigger::Startup, hash: self.loaded_hash });
            tracing::info!(node = %self.identity.node_id, deployment = %self.identity.deployment, flows, "node started");
        }
    }
}

/// Apply an already validated flow set.
#[derive(Message)]
#[rtype(result = "ReloadOutcome")]
struct Apply {
    set: FlowSet,
    trigger: Trigger,
    hash: Option<u64>,
}

fn outcome(trigger: Trigger, result: ReloadResult, error: Option<String>) -> ReloadOutcome {
    ReloadOutcome {
        trigger,
        result,
        at: rfc3339(SystemTime::now()),
        error,
        started: Vec::new(),
        stopped: Vec::new(),
        restarted: Vec::new(),
        rolled_back: Vec::new(),
        attempt: 1,
        retry: None,
        next_attempt_at: None,
    }
}

impl Handler<Reload> for Node {
    type Result = ResponseActFuture<Self, ReloadOutcome>;

    fn handle(&mut self, msg: Reload, ctx: &mut Context<Self>) -> Self::Result {
        let trigger = msg.trigger;
        if self.stopping {
            return Box::pin(fut::ready(outcome(
                trigger,
                ReloadResult::Unchanged,
                Some("the node is stopping".into()),
            )));
        }
        let hash = reload::content_hash(&self.flows_dir);
        // A rolled-back change is left to its retry timer by the watcher and the rescan: they would try it
        // every 30 s, 10 s of node time each while its cluster stays away.
        let waiting = self.retrying.as_ref().is_some_and(|r| r.hash == hash);
        let unchanged = Some(hash) == self.loaded_hash || (waiting && trigger != Trigger::Retry);
        if !trigger.forces() && unchanged {
            return Box::pin(fut::ready(outcome(trigger, ReloadResult::Unchanged, None)));
        }
        self.loaded_hash = Some(hash);
        // Exactly the code `ferry validate` runs.
        match config::load_dir(&self.flows_dir, kafka::check_client_properties) {
            Err(errors) => {
                let o = outcome(trigger, ReloadResult::Rejected, Some(errors.to_string().trim_end().to_string()));
                self.report(&o);
                Box::pin(fut::ready(o))
            }
            // Queued behind any reload in progress, like every message.
            Ok(set) => Box::pin(ctx.address().send(Apply { set, trigger, hash: Some(hash) }).into_actor(self).map(
                move |r, _, _| {
                    r.unwrap_or_else(|e| outcome(trigger, ReloadResult::Unchanged, Some(format!("node gone: {e}"))))
                },
            )),
        }
    }
}

impl Handler<PlanReload> for Node {
    type Result = MessageResult<PlanReload>;

    /// The first half of a reload (read, validate, diff against the running flows) without the second:
    /// no flow, hash, metric, status or `last_reload` changes, and nothing connects to a cluster. Reading
    /// the files is no change for the watcher either (see `reload::changes_content`).
    fn handle(&mut self, _: PlanReload, _: &mut Context<Self>) -> Self::Result {
        let plan = match config::load_dir(&self.flows_dir, kafka::check_client_properties) {
            Ok(set) => ReloadPlan::of_diff(&config::diff(&self.running_plans(), &set)),
            Err(errors) => ReloadPlan::rejected(&errors),
        };
        tracing::info!(result = ?plan.result, "reload dry run, nothing changed: {plan}");
        MessageResult(plan)
    }
}

impl Handler<Apply> for Node {
    type Result = AtomicResponse<Self, ReloadOutcome>;

    fn handle(&mut self, msg: Apply, ctx: &mut Context<Self>) -> Self::Result {
        let Apply { set, trigger, hash } = msg;
        if let Some(h) = hash {
            self.loaded_hash = Some(h);
        }
        let retried = self.retrying.take();
        if let Some(timer) = retried.as_ref().and_then(|r| r.timer) {
            ctx.cancel_future(timer);
        }
        let attempt = match (retried, hash) {
            (Some(r), Some(h)) if r.hash == h => r.attempt + 1,
            _ => 1,
        };
        let d = config::diff(&self.running_plans(), &set);
        // Copiers started by this reload are sized for the flows the node runs with it.
        crate::clients::budget::set_flows(set.flows.values().filter(|p| p.settings.enabled).count());
        self.show_disabled(&set);
        let mut o = outcome(trigger, ReloadResult::Applied, None);
        o.attempt = attempt;
        if d.is_empty() {
            METRICS.set_client_certificates(set.clusters.values());
            self.report(&o);
            return AtomicResponse::new(Box::pin(fut::ready(o)));
        }
        let new_plans: BTreeMap<FlowId, Arc<FlowPlan>> =
            d.added.iter().chain(&d.changed).map(|id| (id.clone(), Arc::new(set.flows[id].clone()))).collect();
        // A changed flow's new plan must reach its clusters before the old plan is stopped.
        let checks: Vec<(FlowId, Arc<FlowPlan>)> =
            d.changed.iter().map(|id| (id.clone(), new_plans[id].clone())).collect();
        let removed = d.removed.clone();
        let added = d.added.clone();
        let changed = d.changed.clone();
        let stop_removed = d.removed.clone();
        let stop_timeout = self.stop_timeout;
        AtomicResponse::new(Box::pin(
            async move { preflight(checks).await }
                .into_actor(self)
                .then(move |failed, node, _| {
                    let restart: Vec<FlowId> = changed.into_iter().filter(|id| !failed.contains_key(id)).collect();
                    let mut stop = stop_removed;
                    stop.extend(restart.iter().cloned());
                    let waits = node.stop_flows(&stop, Instant::now() + stop_timeout);
                    async move {
                        let until = tokio::time::Instant::now() + stop_timeout + Duration::from_secs(2);
                        for (id, wait) in waits {
                            if tokio::time::timeout_at(until, wait).await.is_err() {
                                tracing::warn!(flow = %id, "flow did not stop within the timeout; starting its new plan anyway");
                            }
                        }
                        (failed, restart)
                    }
                    .into_actor(node)
                })
                .map(move |(failed, restart), node, ctx| {
                    for id in &removed {
                        // Its series go with it; a disabled flow stays listed as stopped.
                        METRICS.remove_flow(&id.to_string());
                        if let Some(plan) = set.flows.get(id) {
                            node.status.flow_disabled(&id.to_string(), plan.settings.delivery);
                        } else {
                            node.status.remove_flow(&id.to_string());
                        }
                    }
                    for id in added.iter().chain(&restart) {
                        node.start_flow(new_plans[id].clone(), ctx);
                    }
                    o.started = added.iter().map(ToString::to_string).collect();
                    o.stopped = removed.iter().map(ToString::to_string).collect();
                    o.restarted = restart.iter().map(ToString::to_string).collect();
                    if !failed.is_empty() {
                        o.result = ReloadResult::RolledBack;
                        o.rolled_back = failed.keys().map(ToString::to_string).collect();
                        let reasons: Vec<String> = failed.iter().map(|(id, e)| format!("{id}: {e}")).collect();
                        o.error = Some(reasons.join("; "));
                        // Not loaded: the old plans run, not what the files say. A cluster that did not
                        // answer may answer at the next try (a secret rotated during a brief outage).
                        node.loaded_hash = None;
                        node.retry_later(hash, attempt, &mut o, ctx);
                    }
                    node.prune_controls();
                    // The files of the clusters the running flows use: a rolled-back flow still runs on
                    // clients built from its old files, and its certificates are the ones that expire.
                    let running = node.running_plans();
                    METRICS.set_client_certificates(running.values().flat_map(|p| [&p.source, &p.target]));
                    node.report(&o);
                    o
                }),
        ))
    }
}

/// Checks that each plan's clusters answer; returns the plans that cannot start, with the reason.
async fn preflight(plans: Vec<(FlowId, Arc<FlowPlan>)>) -> BTreeMap<FlowId, String> {
    let mut failed = BTreeMap::new();
    for (id, plan) in plans {
        if let Err(e) = crate::failpoints::check(crate::failpoints::RELOAD_PREFLIGHT) {
            failed.insert(id, e);
            continue;
        }
        let (tx, rx) = oneshot::channel();
        // A thread of its own (see `flow::topics::metadata`): an unreachable cluster blocks for the timeout.
        let spawned = std::thread::Builder::new().name(format!("preflight {id}")).spawn(move || {
            let check = |cluster: &config::ClusterSpec| -> Result<(), String> {
                let c = kafka::assign_only_consumer(cluster, &plan.id, "preflight").map_err(|e| e.to_string())?;
                rdkafka::consumer::Consumer::fetch_metadata(&c, None, PREFLIGHT_TIMEOUT)
                    .map(|_| ())
                    .map_err(|e| format!("cluster `{}` does not answer: {e}", cluster.alias))
            };
            let _ = tx.send(check(&plan.source).and_then(|()| check(&plan.target)));
        });
        let result = match spawned {
            Ok(_) => rx.await.unwrap_or_else(|_| Err("the check did not finish".into())),
            Err(e) => Err(format!("cannot start the check: {e}")),
        };
        if let Err(e) = result {
            failed.insert(id, e);
        }
    }
    failed
}

/// Pause (stop fetching, keep positions) or resume a flow. `Err` names why not (unknown flow).
#[derive(Message, Debug)]
#[rtype(result = "Result<PauseOutcome, String>")]
pub struct Pause {
    pub flow: FlowId,
    pub paused: bool,
}

/// What became of a pause or resume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PauseOutcome {
    /// This node's copier applied it (see `SetPaused`).
    pub applied: bool,
    /// Recorded in the control topic for the whole deployment, or why not (then it holds on this node
    /// only, until it restarts or a later decision is recorded).
    pub recorded: Result<(), String>,
    /// A later decision the other way, recorded after this one, is in force (every node follows the
    /// control topic's last record): who took it and when, in words.
    pub overtaken: Option<String>,
}

impl Handler<Pause> for Node {
    type Result = ResponseFuture<Result<PauseOutcome, String>>;

    /// Records the decision in the flow's target control topic (so that every node of the deployment
    /// follows it, now and after restarts), then applies it here, unless a later record was read
    /// meanwhile, and answers once the copier did.
    fn handle(&mut self, msg: Pause, ctx: &mut Context<Self>) -> Self::Result {
        let Some(plan) = self.running.get(&msg.flow).map(|r| r.plan.clone()) else {
            let why = format!("no running flow {}", msg.flow);
            return Box::pin(async move { Err(why) });
        };
        let record = PauseRecord::now(msg.paused, &self.identity.node_id);
        let identity = self.identity.clone();
        let connection = control::connection_key(&plan.target);
        let written = self.control_for(&plan, ctx).0.write(&identity.deployment, &msg.flow, &record);
        tracing::info!(flow = %msg.flow, paused = msg.paused, "flow {} by an operator", if msg.paused { "pausing" } else { "resuming" });
        let me = ctx.address();
        Box::pin(async move {
            let written = written.await;
            if let Some(late) = crate::failpoints::delay(crate::failpoints::CONTROL_ACK) {
                tokio::time::sleep(late).await;
            }
            let recorded = written.as_ref().map(|_| ()).map_err(Clone::clone);
            if let Err(e) = &recorded {
                // Applied here all the same: during an incident a pause of this node beats none.
                tracing::warn!(flow = %msg.flow, error = %e, "cannot record the pause for the deployment; applied on this node only");
            }
            let at = written.ok().map(|offset| (connection, offset));
            let apply = ApplyPause { flow: msg.flow.clone(), record: record.clone(), at };
            let applied = match me.send(apply).await.map_err(|e| format!("node gone: {e}"))?? {
                PauseApplied::Confirmed(applied) => applied,
                PauseApplied::Overtaken(later) => {
                    tracing::info!(flow = %msg.flow, paused = msg.paused, overtaken_by = %later, "flow not {} by an operator: a later decision in the control topic is in force", if msg.paused { "paused" } else { "resumed" });
                    return Ok(PauseOutcome { applied: false, recorded, overtaken: Some(later) });
                }
            };
            tracing::info!(flow = %msg.flow, paused = msg.paused, applied, recorded = recorded.is_ok(), "flow {} by an operator", if msg.paused { "paused" } else { "resumed" });
            Ok(PauseOutcome { applied, recorded, overtaken: None })
        })
    }
}

/// Apply an operator's pause record to a flow on this node: `at` is where it was recorded (connection,
/// offset), `None` if it could not be.
#[derive(Message)]
#[rtype(result = "Result<PauseApplied, String>")]
struct ApplyPause {
    flow: FlowId,
    record: PauseRecord,
    at: Option<(String, i64)>,
}

/// What became of an [`ApplyPause`] on this node.
enum PauseApplied {
    /// In force here; whether its copier applied it within the supervisor's bound.
    Confirmed(bool),
    /// A later record the other way was read first and stays in force: it, in words.
    Overtaken(String),
}

impl Handler<ApplyPause> for Node {
    type Result = ResponseFuture<Result<PauseApplied, String>>;

    fn handle(&mut self, msg: ApplyPause, _: &mut Context<Self>) -> Self::Result {
        let ApplyPause { flow, record, at } = msg;
        let asked = record.paused;
        match at {
            Some((connection, offset)) => {
                self.note_pause(&flow, Logged { connection, offset, record: Some(record) });
            }
            None => {
                self.pauses.apply_unrecorded(&flow, record);
                self.show_pause(&flow);
            }
        }
        // Not newer than what this node read already: the state stays that of the later record, which
        // may be this one (read before its acknowledgement came) or one the other way.
        let paused = self.pauses.paused(&flow);
        if paused != asked {
            let later = match self.pauses.record(&flow) {
                Some(r) => format!(
                    "{} by {} at {}",
                    if r.paused { "paused" } else { "resumed" },
                    r.by,
                    rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(r.at))
                ),
                None => "the pause record was deleted".into(),
            };
            return Box::pin(async move { Ok(PauseApplied::Overtaken(later)) });
        }
        let Some(addr) = self.running.get(&flow).map(|r| r.addr.clone()) else {
            return Box::pin(async { Ok(PauseApplied::Confirmed(true)) }); // stopped meanwhile: it copies nothing
        };
        let applied = addr.send(SetPaused(paused));
        Box::pin(async move {
            applied.await.map(PauseApplied::Confirmed).map_err(|e| format!("flow {flow} did not answer: {e}"))
        })
    }
}

/// A control topic was read to its end: every flow that targets it learns its recorded pause (and its
/// copier stops holding for it).
impl Handler<PausesRead> for Node {
    type Result = ();

    fn handle(&mut self, msg: PausesRead, _: &mut Context<Self>) {
        let Some((_, read)) = self.controls.get_mut(&msg.connection) else { return };
        *read = true;
        let flows: Vec<FlowId> = self
            .running
            .iter()
            .filter(|(_, r)| control::connection_key(&r.plan.target) == msg.connection)
            .map(|(id, _)| id.clone())
            .collect();
        for (flow, logged) in msg.records {
            if self.speaks_for(&flow, &msg.connection) {
                self.note_pause(&flow, logged);
            }
        }
        for seen in msg.promotions {
            if self.speaks_for(&seen.flow, &msg.connection) {
                self.promotions.apply(seen);
            }
        }
        for flow in flows {
            // Promotions first: a copier held until the control topic is read must not copy a promoted
            // topic in the moment between its release and the promotion.
            self.show_promoted(&flow);
            let paused = self.pauses.paused(&flow);
            if paused {
                tracing::info!(flow = %flow, "flow paused for the deployment (recorded in the control topic)");
            }
            if let Some(r) = self.running.get(&flow) {
                r.addr.do_send(SetPaused(paused));
            }
        }
    }
}

/// A promotion read from the control topic (`ferry promote`): the flow stops copying the topic.
impl Handler<PromotionRead> for Node {
    type Result = ();

    fn handle(&mut self, msg: PromotionRead, _: &mut Context<Self>) {
        let flow = msg.seen.flow.clone();
        if !self.speaks_for(&flow, &msg.connection) {
            return;
        }
        let (topic, promoted) = (msg.seen.topic.clone(), msg.seen.record.is_some());
        if self.promotions.apply(msg.seen) {
            tracing::info!(flow = %flow, topic = %topic, promoted, "topic {} for the deployment (control topic)", if promoted { "promoted: no longer copied" } else { "no longer promoted: copied again" });
            self.show_promoted(&flow);
        }
    }
}

/// A pause record read from the control topic: written by this node or another of the deployment.
impl Handler<PauseSeen> for Node {
    type Result = ();

    fn handle(&mut self, msg: PauseSeen, _: &mut Context<Self>) {
        if !self.speaks_for(&msg.flow, &msg.logged.connection) {
            return;
        }
        let before = self.pauses.paused(&msg.flow);
        self.note_pause(&msg.flow, msg.logged);
        let after = self.pauses.paused(&msg.flow);
        if before != after
            && let Some(r) = self.running.get(&msg.flow)
        {
            tracing::info!(flow = %msg.flow, paused = after, "flow {} for the deployment (control topic)", if after { "paused" } else { "resumed" });
            r.addr.do_send(SetPaused(after));
        }
    }
}

/// Stop every flow gracefully; resolves when all have drained (true) or `timeout` passed (false).
#[derive(Message, Debug)]
#[rtype(result = "bool")]
pub struct Shutdown {
    pub timeout: Duration,
}

impl Handler<Shutdown> for Node {
    type Result = ResponseFuture<bool>;

    fn handle(&mut self, msg: Shutdown, _: &mut Context<Self>) -> Self::Result {
        self.stopping = true;
        // Leave a margin after the flows' own deadline for the final acknowledgements to land.
        let ids: Vec<FlowId> = self.running.keys().cloned().collect();
        let waits = self.stop_flows(&ids, Instant::now() + msg.timeout.mul_f64(0.9));
        // One deadline for all flows: they drain in parallel, so N stuck flows cost one timeout, not N.
        let until = tokio::time::Instant::now() + msg.timeout;
        Box::pin(async move {
            let mut all = true;
            for (id, wait) in waits {
                if tokio::time::timeout_at(until, wait).await.is_err() {
                    tracing::warn!(flow = %id, "flow did not stop within the shutdown timeout");
                    all = false;
                }
            }
            all
        })
    }
}
