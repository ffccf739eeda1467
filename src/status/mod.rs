//! What each flow and actor is doing, for `/health` and `/flows`: a shared board that actors write
//! (through their flow supervisor) and the HTTP handlers read. It never holds configuration values, so
//! it cannot leak secrets.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use serde::Serialize;

use crate::config::Delivery;

mod pause_record;
mod types;

pub use pause_record::{PauseRecord, PromoteRecord};
pub use types::{Member, ReloadOutcome, ReloadResult, Trigger};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ActorState {
    Starting,
    Running,
    /// Running but a cluster it needs is not answering, or some of its items (partitions, topics,
    /// groups) are failing.
    Degraded,
    /// Stopped by an error; waiting for its restart.
    Restarting,
    /// Its restart budget is spent: still retrying, slowly, until an operator fixes the cause.
    Failed,
    Stopped,
    /// A leader duty on a node that does not hold the flow's lease: another node runs it.
    Standby,
}

/// A flow's state, derived from its actors' (the worst wins).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FlowState {
    Running,
    Starting,
    /// Paused by an operator (`POST /flows/{id}/pause`): not fetching, positions kept.
    Paused,
    Degraded,
    Restarting,
    Failed,
    Stopped,
}

impl FlowState {
    pub const ALL: [FlowState; 7] = [
        FlowState::Running,
        FlowState::Starting,
        FlowState::Paused,
        FlowState::Degraded,
        FlowState::Restarting,
        FlowState::Failed,
        FlowState::Stopped,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Starting => "starting",
            Self::Paused => "paused",
            Self::Degraded => "degraded",
            Self::Restarting => "restarting",
            Self::Failed => "failed",
            Self::Stopped => "stopped",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ActorStatus {
    pub state: ActorState,
    pub restarts: u64,
    pub last_error: Option<String>,
    /// Seconds since the Unix epoch at which `state` was entered.
    pub since: u64,
}

/// A source partition that is not copying because of a failure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PartitionProblem {
    pub topic: String,
    pub partition: i32,
    /// Upstream offset of the record concerned, when there is one.
    pub offset: Option<i64>,
    /// Size of that record (key + value bytes), when known.
    pub size: Option<usize>,
    pub reason: String,
    /// `retrying` (with backoff) or `stopped` (until the flow restarts).
    pub state: String,
    /// Failures since the partition last copied.
    pub failures: u32,
    /// Seconds since the Unix epoch.
    pub since: u64,
}

/// An error of one topic or group, retried at the next round.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ItemError {
    pub reason: String,
    /// Seconds since the Unix epoch when it first failed (in this run of failures).
    pub since: u64,
    /// Consecutive failed rounds.
    pub count: u64,
}

/// How many of a node's assigned partitions `/flows` lists (a wide flow's list would dwarf the rest).
pub const ASSIGNED_SHOWN: usize = 1_000;

#[derive(Clone, Debug, Serialize)]
pub struct FlowStatus {
    /// `source->target`.
    pub id: String,
    pub state: FlowState,
    /// `enabled = false` in its file: defined, not running.
    pub enabled: bool,
    /// Bumped every time the flow is (re)started by the node.
    pub generation: u64,
    /// When this generation started, RFC 3339.
    pub started_at: String,
    pub actors: BTreeMap<String, ActorStatus>,
    pub partition_problems: Vec<PartitionProblem>,
    pub topic_errors: BTreeMap<String, ItemError>,
    pub group_errors: BTreeMap<String, ItemError>,
    /// Paused by an operator (`POST /flows/{id}/pause`) and applied on this node: not fetching.
    pub paused: bool,
    /// The last pause or resume recorded for the flow in its target's control topic, for every node of
    /// the deployment: who took it (`by`, a node id) and when (`at`, seconds since the epoch).
    pub pause: Option<PauseRecord>,
    /// Source topics promoted at a failover (`ferry promote`), for every node of the deployment: the
    /// flow copies them no more. By source topic: who promoted it and when.
    pub promoted: BTreeMap<String, PromoteRecord>,
    /// This node holds the flow's lease (runs topic sync, checkpoints, heartbeats).
    pub leading: bool,
    /// Source partitions this node copies (its share of the copier group).
    pub partitions: i64,
    /// Which ones (`topic-partition`, sorted; the first [`ASSIGNED_SHOWN`] of `assigned_total`), as the
    /// copier applied the group's assignment: observing them on every node shows each partition
    /// copied by one node at a time.
    pub assigned: Vec<String>,
    pub assigned_total: usize,
    /// Source records not copied yet (summed over the flow's topics), when measured.
    pub lag_records: Option<i64>,
    /// Records copied per second over the last few seconds.
    pub records_per_second: Option<f64>,
    /// When a consumer group of the flow was last checkpointed (RFC 3339).
    pub last_checkpoint_at: Option<String>,
    /// Source records the provenance rule did not copy (identity replication), since this node started.
    pub records_skipped: Skipped,
    /// Flows with `[[flows.filter]]` rules: the source records they dropped on this node, since it
    /// started (`ferry_records_filtered_total`); absent before the first record was looked at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub records_filtered: Option<Filtered>,
    /// `sync_topic_deletions`: remote topics whose source topic is gone, each with when it will be
    /// deleted (or would be, `dry_run`). Shown by the node that leads the flow.
    pub topic_deletions: Vec<PendingDeletion>,
    /// `at_least_once` or `exactly_once`: the flow's `delivery`, from its definition (whatever its
    /// copier does).
    pub delivery: &'static str,
    /// Exactly-once flows: the copier's transactions on this node.
    pub transactions: Option<TransactionFigures>,
    /// Flows with `schemas = "sync" | "translate"`: what this node did with their schemas. A partition
    /// held on a schema ID that does not resolve is in `partition_problems`.
    pub schemas: Option<SchemaFigures>,
    /// Records on the remote topics that this node's copier did not write, per source topic, since
    /// the node started (`ferry_remote_foreign_records_total`): another producer writes the DR copy.
    pub foreign_records: BTreeMap<String, u64>,
    /// The nodes in the flow's copier group and their partition counts (described every 10 s).
    pub nodes: Option<Vec<Member>>,
    /// The node holding the flow's lease, as the lease group says.
    pub leader_node: Option<String>,
}

/// Figures of a flow from its metrics, refreshed every second.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FlowFigures {
    pub leading: bool,
    pub partitions: i64,
    pub lag_records: Option<i64>,
    pub records_per_second: Option<f64>,
    pub last_checkpoint_at: Option<String>,
    pub records_skipped: Skipped,
    pub records_filtered: Option<Filtered>,
    pub transactions: Option<TransactionFigures>,
    pub schemas: Option<SchemaFigures>,
    pub foreign_records: BTreeMap<String, u64>,
}

/// A schema flow's work on this node since it started (the `ferry_schema_*` and
/// `ferry_records_unframed_total` series).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SchemaFigures {
    /// Source subjects brought to the target registry.
    pub subjects_synced: u64,
    /// Keys and values that got the target registry's ID.
    pub ids_translated: u64,
    /// Records with neither key nor value in the Confluent framing (copied unchanged).
    pub records_unframed: u64,
    /// Keys and values copied with an unresolved source ID (`on_unknown_schema = "pass"`).
    pub ids_passed: u64,
}

/// An exactly-once flow's transactions on this node, since it started (`ferry_transactions_total`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TransactionFigures {
    pub committed: u64,
    pub aborted: u64,
    /// When the copier last committed one (RFC 3339).
    pub last_commit_at: Option<String>,
}

/// A remote topic waiting out the grace period (`/flows` `topic_deletions`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PendingDeletion {
    pub topic: String,
    pub source_topic: String,
    /// RFC 3339.
    pub source_gone_since: String,
    pub deletes_at: String,
    /// `sync_topic_deletions = "dry_run"`: it will not be deleted.
    pub dry_run: bool,
}

/// Records a flow's filter rules dropped: in all, and per rule (the first that matched).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Filtered {
    pub total: u64,
    pub by_rule: BTreeMap<String, u64>,
}

/// Records not copied by the provenance rule: in all, and per reason (`ferry_records_skipped_total`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Skipped {
    pub total: u64,
    pub by_reason: BTreeMap<String, u64>,
}

impl FlowStatus {
    fn new(id: &str) -> Self {
        Self {
            id: id.to_string(),
            state: FlowState::Starting,
            enabled: true,
            generation: 0,
            started_at: rfc3339(SystemTime::now()),
            actors: BTreeMap::new(),
            partition_problems: Vec::new(),
            topic_errors: BTreeMap::new(),
            group_errors: BTreeMap::new(),
            paused: false,
            pause: None,
            promoted: BTreeMap::new(),
            leading: false,
            partitions: 0,
            assigned: Vec::new(),
            assigned_total: 0,
            lag_records: None,
            records_per_second: None,
            last_checkpoint_at: None,
            records_skipped: Skipped::default(),
            records_filtered: None,
            topic_deletions: Vec::new(),
            delivery: "at_least_once",
            transactions: None,
            schemas: None,
            foreign_records: BTreeMap::new(),
            nodes: None,
            leader_node: None,
        }
    }

    fn derive_state(&self) -> FlowState {
        if !self.enabled {
            return FlowState::Stopped;
        }
        if self.paused {
            return FlowState::Paused;
        }
        let states = || self.actors.values().map(|a| a.state);
        if self.actors.is_empty() {
            return FlowState::Starting;
        }
        if states().all(|s| s == ActorState::Stopped) {
            return FlowState::Stopped;
        }
        let worst = states()
            .map(|s| match s {
                ActorState::Running | ActorState::Standby => FlowState::Running,
                ActorState::Starting => FlowState::Starting,
                ActorState::Degraded => FlowState::Degraded,
                ActorState::Restarting => FlowState::Restarting,
                ActorState::Failed => FlowState::Failed,
                ActorState::Stopped => FlowState::Stopped,
            })
            .max()
            .unwrap_or(FlowState::Starting);
        let items_failing =
            !self.partition_problems.is_empty() || !self.topic_errors.is_empty() || !self.group_errors.is_empty();
        if items_failing { worst.max(FlowState::Degraded) } else { worst }
    }
}

#[derive(Clone, Debug, Default)]
pub struct StatusBoard {
    inner: Arc<RwLock<BTreeMap<String, FlowStatus>>>,
    last_reload: Arc<RwLock<Option<ReloadOutcome>>>,
    /// A flow generation's view ([`StatusBoard::scoped`]): its writes reach only that generation's entry.
    generation: Option<u64>,
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl StatusBoard {
    /// The board as generation `generation` of a flow sees it: what it writes about the flow is dropped
    /// once another generation started (or the flow left the board). A restarted flow's old generation
    /// may end after the new one began (a stop that outlasts its timeout): its last "stopped" must not
    /// cover the new generation's running actors, nor bring a removed flow back.
    pub fn scoped(&self, generation: u64) -> StatusBoard {
        StatusBoard { generation: Some(generation), ..self.clone() }
    }

    /// `f` on the flow's entry, made if missing, except in a generation's view ([`StatusBoard::with_existing`]).
    fn with_flow(&self, flow: &str, f: impl FnOnce(&mut FlowStatus)) {
        if self.generation.is_some() {
            return self.with_existing(flow, f);
        }
        let mut board = self.inner.write().unwrap_or_else(|p| p.into_inner());
        f(board.entry(flow.to_string()).or_insert_with(|| FlowStatus::new(flow)));
    }

    /// `f` on the flow's entry if it is on the board (and, in a generation's view, of that generation):
    /// a late report never re-adds a removed flow.
    fn with_existing(&self, flow: &str, f: impl FnOnce(&mut FlowStatus)) {
        let mut board = self.inner.write().unwrap_or_else(|p| p.into_inner());
        if let Some(status) = board.get_mut(flow).filter(|s| self.generation.is_none_or(|g| s.generation == g)) {
            f(status)
        }
    }

    /// A new generation of `flow` starts: its actors and problems start over (a pause stands).
    pub fn flow_started(&self, flow: &str, generation: u64, delivery: Delivery) {
        let mut board = self.inner.write().unwrap_or_else(|p| p.into_inner());
        if board.get(flow).is_some_and(|f| f.generation > generation) {
            return; // a later generation started already
        }
        let mut status = FlowStatus::new(flow);
        status.generation = generation;
        status.delivery = delivery.name();
        status.paused = board.get(flow).is_some_and(|f| f.paused);
        status.pause = board.get(flow).and_then(|f| f.pause.clone());
        status.promoted = board.get(flow).map(|f| f.promoted.clone()).unwrap_or_default();
        board.insert(flow.to_string(), status);
    }

    pub fn set_paused(&self, flow: &str, paused: bool) {
        self.with_flow(flow, |f| f.paused = paused);
    }

    /// The deployment-wide pause record of `flow` (who paused or resumed it, and when).
    pub fn set_pause_record(&self, flow: &str, record: Option<PauseRecord>) {
        self.with_flow(flow, |f| f.pause = record);
    }

    /// The deployment-wide promotions of `flow` (see `control::promote`).
    pub fn set_promoted(&self, flow: &str, promoted: BTreeMap<String, PromoteRecord>) {
        self.with_flow(flow, |f| f.promoted = promoted);
    }

    /// The flow's figures from its metrics (only for flows on the board).
    pub fn set_figures(&self, flow: &str, figures: FlowFigures) {
        self.with_existing(flow, |f| {
            f.leading = figures.leading;
            f.partitions = figures.partitions;
            f.lag_records = figures.lag_records;
            f.records_per_second = figures.records_per_second;
            f.last_checkpoint_at = figures.last_checkpoint_at;
            f.records_skipped = figures.records_skipped;
            f.records_filtered = figures.records_filtered;
            f.transactions = figures.transactions;
            f.schemas = figures.schemas;
            f.foreign_records = figures.foreign_records;
        });
    }

    pub fn set_members(&self, flow: &str, nodes: Option<Vec<Member>>, leader: Option<String>) {
        self.with_existing(flow, |f| {
            if nodes.is_some() {
                f.nodes = nodes;
            }
            f.leader_node = leader;
        });
    }

    /// Record that `actor` of `flow` entered `state`; `error` replaces the last error when given.
    pub fn set(&self, flow: &str, actor: &str, state: ActorState, error: Option<String>) {
        self.with_flow(flow, |f| {
            let entry = f.actors.entry(actor.to_string()).or_insert(ActorStatus {
                state,
                restarts: 0,
                last_error: None,
                since: now_secs(),
            });
            if entry.state != state {
                entry.state = state;
                entry.since = now_secs();
            }
            if matches!(state, ActorState::Restarting | ActorState::Failed) {
                entry.restarts += 1;
            }
            if error.is_some() {
                entry.last_error = error;
            }
        });
    }

    /// Count a restart of `actor` reported under another state than restarting (e.g. degraded).
    pub fn count_restart(&self, flow: &str, actor: &str) {
        self.with_flow(flow, |f| {
            if let Some(a) = f.actors.get_mut(actor) {
                a.restarts += 1;
            }
        });
    }

    /// The partitions the copier group gives this node (shown up to [`ASSIGNED_SHOWN`]).
    pub fn set_assigned(&self, flow: &str, mut assigned: Vec<String>) {
        self.with_flow(flow, |f| {
            f.assigned_total = assigned.len();
            assigned.truncate(ASSIGNED_SHOWN);
            f.assigned = assigned;
        });
    }

    pub fn set_partition_problems(&self, flow: &str, problems: Vec<PartitionProblem>) {
        self.with_flow(flow, |f| f.partition_problems = problems);
    }

    /// The leader's pending `sync_topic_deletions` (its dry-run view).
    pub fn set_topic_deletions(&self, flow: &str, pending: Vec<PendingDeletion>) {
        self.with_flow(flow, |f| f.topic_deletions = pending);
    }

    pub fn set_topic_errors(&self, flow: &str, errors: BTreeMap<String, ItemError>) {
        self.with_flow(flow, |f| f.topic_errors = errors);
    }

    pub fn set_group_errors(&self, flow: &str, errors: BTreeMap<String, ItemError>) {
        self.with_flow(flow, |f| f.group_errors = errors);
    }

    /// `flow` is defined but disabled: listed as stopped, keeping its last generation.
    pub fn flow_disabled(&self, flow: &str, delivery: Delivery) {
        self.with_flow(flow, |f| {
            f.enabled = false;
            f.delivery = delivery.name();
            f.actors.clear();
            f.partition_problems.clear();
            f.topic_errors.clear();
            f.group_errors.clear();
        });
    }

    pub fn set_last_reload(&self, outcome: ReloadOutcome) {
        *self.last_reload.write().unwrap_or_else(|p| p.into_inner()) = Some(outcome);
    }

    pub fn last_reload(&self) -> Option<ReloadOutcome> {
        self.last_reload.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn remove_flow(&self, flow: &str) {
        self.inner.write().unwrap_or_else(|p| p.into_inner()).remove(flow);
    }

    /// Every flow, with its state derived from its actors and items.
    pub fn snapshot(&self) -> BTreeMap<String, FlowStatus> {
        let mut flows = self.inner.read().unwrap_or_else(|p| p.into_inner()).clone();
        for f in flows.values_mut() {
            f.state = f.derive_state();
        }
        flows
    }
}

/// Seconds since the epoch of an RFC 3339 time as [`rfc3339`] writes it (`ferry status` shows ages).
pub fn parse_rfc3339(s: &str) -> Option<u64> {
    let (date, time) = s.trim_end_matches('Z').split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut t = time.split(':').map(|x| x.parse::<i64>());
    let (h, mi, sec) = (t.next()?.ok()?, t.next()?.ok()?, t.next()?.ok()?);
    // Howard Hinnant's days_from_civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + h * 3600 + mi * 60 + sec).ok()
}

/// Tracks per-item errors across rounds (topics of the topic synchroniser, groups of the checkpoint
/// computer): when each started failing and how many rounds in a row.
#[derive(Debug, Default)]
pub struct ItemErrors {
    errors: BTreeMap<String, ItemError>,
}

impl ItemErrors {
    /// `item` failed this round.
    pub fn failed(&mut self, item: &str, reason: String) {
        let e = self.errors.entry(item.to_string()).or_insert(ItemError {
            reason: String::new(),
            since: now_secs(),
            count: 0,
        });
        e.reason = reason;
        e.count += 1;
    }

    /// `item` succeeded (or is gone): forget its error. True if it had one.
    pub fn cleared(&mut self, item: &str) -> bool {
        self.errors.remove(item).is_some()
    }

    /// Keep only the items `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.errors.retain(|k, _| keep(k));
    }

    pub fn snapshot(&self) -> BTreeMap<String, ItemError> {
        self.errors.clone()
    }
}

/// `t` as RFC 3339 in UTC with second precision, e.g. `2026-11-30T15:25:45Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn rfc3339_parses_back() {
        for s in [0u64, 951_782_400, 1_796_052_345] {
            assert_eq!(parse_rfc3339(&rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(s))), Some(s));
        }
    }

    #[test]
    fn rfc3339_formats_utc_dates() {
        let at = |s: u64| rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_796_052_345), "2026-11-30T15:25:45Z");
    }

    #[test]
    fn a_flow_is_as_healthy_as_its_worst_actor_and_degraded_by_failing_items() {
        let b = StatusBoard::default();
        b.flow_started("a->b", 1, Delivery::AtLeastOnce);
        b.set("a->b", "copier", ActorState::Running, None);
        b.set("a->b", "topics", ActorState::Running, None);
        assert_eq!(b.snapshot()["a->b"].state, FlowState::Running);
        let mut errs = ItemErrors::default();
        errs.failed("orders", "collides".into());
        b.set_topic_errors("a->b", errs.snapshot());
        assert_eq!(b.snapshot()["a->b"].state, FlowState::Degraded);
        b.set("a->b", "copier", ActorState::Restarting, Some("boom".into()));
        assert_eq!(b.snapshot()["a->b"].state, FlowState::Restarting);
        b.flow_started("a->b", 2, Delivery::AtLeastOnce);
        let s = &b.snapshot()["a->b"];
        assert_eq!((s.generation, s.state, s.actors.len()), (2, FlowState::Starting, 0));
    }

    #[test]
    fn an_old_generation_s_late_writes_touch_neither_the_new_generation_nor_a_removed_flow() {
        let b = StatusBoard::default();
        let (old, new) = (b.scoped(1), b.scoped(2));
        old.flow_started("a->b", 1, Delivery::AtLeastOnce);
        old.set("a->b", "copier", ActorState::Running, None);
        new.flow_started("a->b", 2, Delivery::AtLeastOnce);
        new.set("a->b", "copier", ActorState::Running, None);
        new.set("a->b", "topics", ActorState::Running, None);
        // The old generation ends after the new one began.
        old.set("a->b", "copier", ActorState::Stopped, None);
        old.set("a->b", "topics", ActorState::Stopped, None);
        old.set_members("a->b", Some(Vec::new()), Some("old".into()));
        old.flow_started("a->b", 1, Delivery::ExactlyOnce);
        let s = &b.snapshot()["a->b"];
        assert_eq!((s.generation, s.state, s.leader_node.as_deref()), (2, FlowState::Running, None));
        assert_eq!(s.delivery, "at_least_once");
        // Removed from the board (the flow left the files): a late write does not bring it back.
        b.remove_flow("a->b");
        new.set("a->b", "copier", ActorState::Stopped, None);
        assert!(!b.snapshot().contains_key("a->b"));
    }

    #[test]
    fn the_delivery_mode_comes_from_the_definition_not_from_the_copier_s_figures() {
        let b = StatusBoard::default();
        b.flow_started("a->b", 1, Delivery::ExactlyOnce);
        assert_eq!(b.snapshot()["a->b"].delivery, "exactly_once", "from the start");
        // A copier that cannot start has no transaction figures.
        b.set_figures("a->b", FlowFigures::default());
        b.set("a->b", "copier", ActorState::Failed, Some("transactional id refused".into()));
        assert_eq!(b.snapshot()["a->b"].delivery, "exactly_once", "whatever the copier does");
        b.flow_disabled("a->b", Delivery::ExactlyOnce);
        b.flow_disabled("c->d", Delivery::ExactlyOnce);
        assert_eq!(b.snapshot()["c->d"].delivery, "exactly_once", "a flow that never started");
        b.flow_started("a->b", 2, Delivery::AtLeastOnce);
        assert_eq!(b.snapshot()["a->b"].delivery, "at_least_once", "a reload changed it");
    }

    #[test]
    fn item_errors_count_rounds_and_clear() {
        let mut e = ItemErrors::default();
        e.failed("g", "x".into());
        e.failed("g", "y".into());
        assert_eq!(e.snapshot()["g"].count, 2);
        assert_eq!(e.snapshot()["g"].reason, "y");
        assert!(e.cleared("g"));
        assert!(e.snapshot().is_empty());
    }
}
