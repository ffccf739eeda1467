//! The topic synchroniser: finds the source topics a flow replicates, makes their remote topics exist
//! on the target with at least as many partitions, and tells the supervisor which source partitions are
//! ready to copy.
//!
//! Selection follows MM2 (mm2-reference.md §3.4): include/exclude patterns, internal topics never,
//! `heartbeats` always, and no topic that originated on the target (no replication loops). Remote topics
//! are created with the source topic's allowed overrides, and (with `sync_topic_configs_enabled`) kept in
//! line with them every `sync_topic_configs_interval_seconds` ([`crate::topic_configs`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::BaseConsumer;

use super::acks::SourcePartition;
use super::supervisor::{ActorKind, ChildExited, FlowSupervisor, TopicsReady};
use crate::config::FlowPlan;
use crate::failpoints;
use crate::filter::{ConfigPropertyFilter, should_replicate_topic};
use crate::kafka::{self, KafkaOpError, TopicSpec};
use crate::metrics::METRICS;
use crate::raw_admin;
use crate::topic_configs;

/// While the source has no `heartbeats` topic yet, look again this soon (or at the regular interval if
/// that is shorter): the flow's heartbeat emitter creates it at start, usually just after the first
/// refresh, and `<source>.heartbeats` should not wait a whole refresh interval to appear.
const RECHECK_HEARTBEATS: Duration = Duration::from_secs(5);

/// Clients of one refresh, shared with the blocking metadata calls.
struct Clients {
    source_meta: BaseConsumer,
    target_meta: BaseConsumer,
    source_admin: AdminClient<DefaultClientContext>,
    target_admin: AdminClient<DefaultClientContext>,
    config_filter: ConfigPropertyFilter,
}

pub struct TopicSync {
    plan: Arc<FlowPlan>,
    supervisor: Addr<FlowSupervisor>,
    clients: Option<Arc<Clients>>,
    refreshing: bool,
    /// When topic configs were last brought in line (None: not yet).
    configs_synced: Option<Instant>,
    /// The supervisor was told how this actor ended (or asked for the stop). If the actor is dropped
    /// without that, a panic killed it: the drop guard reports it.
    exit_reported: bool,
}

impl TopicSync {
    pub fn new(plan: Arc<FlowPlan>, supervisor: Addr<FlowSupervisor>) -> Self {
        Self { plan, supervisor, clients: None, refreshing: false, configs_synced: None, exit_reported: false }
    }

    fn clients(&mut self) -> Result<Arc<Clients>, KafkaOpError> {
        if let Some(c) = &self.clients {
            return Ok(c.clone());
        }
        let p = &self.plan;
        let c = Arc::new(Clients {
            source_meta: kafka::assign_only_consumer(&p.source, &p.id, "topics-source")?,
            target_meta: kafka::assign_only_consumer(&p.target, &p.id, "topics-target")?,
            source_admin: kafka::admin_client(&p.source, &p.id)?,
            target_admin: kafka::admin_client(&p.target, &p.id)?,
            config_filter: ConfigPropertyFilter::default(),
        });
        self.clients = Some(c.clone());
        Ok(c)
    }

    fn exit(&mut self, result: Result<(), String>, ctx: &mut Context<Self>) {
        self.exit_reported = true;
        self.supervisor.do_send(ChildExited { kind: ActorKind::Topics, result });
        ctx.stop();
    }

    fn schedule(&mut self, ctx: &mut Context<Self>, after: Duration) {
        ctx.run_later(after, |me, ctx| me.refresh(ctx));
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
        let fut = async move { refresh_once(&plan, &clients, sync_configs).await };
        ctx.spawn(fut.into_actor(self).map(move |result, me, ctx| {
            me.refreshing = false;
            let s = &me.plan.settings;
            let interval = if s.sync_topic_configs_enabled {
                s.refresh_topics_interval.min(s.sync_topic_configs_interval)
            } else {
                s.refresh_topics_interval
            };
            match result {
                Ok(Refreshed { ready, source_has_heartbeats }) => {
                    if sync_configs {
                        me.configs_synced = Some(Instant::now());
                    }
                    me.supervisor.do_send(TopicsReady(ready));
                    let next = if source_has_heartbeats { interval } else { interval.min(RECHECK_HEARTBEATS) };
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
                Ok((
                    kafka::topic_partitions(&c.source_meta, &source)?,
                    kafka::topic_partitions(&c.target_meta, &target)?,
                ))
            })());
        })
        .map_err(|e| failed(e.to_string()))?;
    rx.await.map_err(|e| failed(e.to_string()))?
}

/// What one refresh found.
struct Refreshed {
    /// The source partitions ready to copy.
    ready: BTreeSet<SourcePartition>,
    /// Whether the source cluster has its `heartbeats` topic yet.
    source_has_heartbeats: bool,
}

/// One pass: select source topics, create or grow remote topics (and, when `sync_configs`, bring their
/// configs in line), return the partitions ready to copy.
async fn refresh_once(plan: &FlowPlan, clients: &Arc<Clients>, sync_configs: bool) -> Result<Refreshed, KafkaOpError> {
    failpoints::check(failpoints::TOPICS_REFRESH).map_err(|reason| KafkaOpError::Other {
        cluster: plan.source.alias.clone(),
        op: "refresh topics".into(),
        reason,
    })?;
    let (source_topics, mut target_topics) = metadata(clients, plan).await?;
    let source_has_heartbeats = source_topics.contains_key(plan.policy.heartbeats_topic());
    let selected: Vec<(&String, i32)> = source_topics
        .iter()
        .filter(|(t, _)| should_replicate_topic(&plan.topic_filter, &plan.policy, &plan.id.target, t))
        .map(|(t, n)| (t, *n))
        .collect();

    let target = &plan.target.alias;
    let mut changed = false;
    for (topic, partitions) in &selected {
        let remote = plan.policy.format_remote_topic(&plan.id.source, topic);
        match target_topics.get(&remote) {
            None => {
                let source_configs =
                    kafka::describe_topic_configs(&clients.source_admin, &plan.source.alias, topic).await?;
                let spec = TopicSpec {
                    name: remote.clone(),
                    partitions: *partitions,
                    replication_factor: plan.settings.replication_factor,
                    configs: topic_configs::desired(&source_configs, &clients.config_filter).into_iter().collect(),
                };
                if kafka::create_topic(&clients.target_admin, target, &spec).await? {
                    tracing::info!(flow = %plan.id, topic = %remote, partitions, "created remote topic");
                    METRICS.topics_created.with_label_values(&[&plan.id.to_string()]).inc();
                }
                changed = true;
            }
            Some(have) if have < partitions => {
                kafka::grow_partitions(&clients.target_admin, target, &remote, *partitions).await?;
                tracing::info!(flow = %plan.id, topic = %remote, from = have, to = partitions, "grew remote topic");
                changed = true;
            }
            Some(_) if sync_configs => sync_topic_configs(plan, clients, topic, &remote).await?,
            Some(_) => {}
        }
    }

    // Created topics take a moment to show up in metadata; copy only to partitions that exist.
    let deadline = Instant::now() + kafka::ADMIN_TIMEOUT;
    loop {
        let missing = selected.iter().any(|(topic, n)| {
            let remote = plan.policy.format_remote_topic(&plan.id.source, topic);
            target_topics.get(&remote).is_none_or(|have| have < n)
        });
        if !changed || !missing || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        target_topics = metadata(clients, plan).await?.1;
    }

    let mut ready = BTreeSet::new();
    for (topic, partitions) in selected {
        let remote = plan.policy.format_remote_topic(&plan.id.source, topic);
        let have = target_topics.get(&remote).copied().unwrap_or(0);
        for p in 0..partitions.min(have) {
            ready.insert((topic.clone(), p));
        }
    }
    Ok(Refreshed { ready, source_has_heartbeats })
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
                .do_send(ChildExited { kind: ActorKind::Topics, result: Err("topic synchroniser panicked".into()) });
        }
    }
}

/// Bring `remote`'s configs in line with `topic`'s allowed overrides.
async fn sync_topic_configs(plan: &FlowPlan, clients: &Clients, topic: &str, remote: &str) -> Result<(), KafkaOpError> {
    let source = kafka::describe_topic_configs(&clients.source_admin, &plan.source.alias, topic).await?;
    let target = kafka::describe_topic_configs(&clients.target_admin, &plan.target.alias, remote).await?;
    let ops = topic_configs::changes(&source, &target, &clients.config_filter);
    if ops.is_empty() {
        return Ok(());
    }
    raw_admin::incremental_alter_topic_configs(&clients.target_admin, remote, &ops, kafka::ADMIN_TIMEOUT)
        .await
        .map_err(|e| KafkaOpError::Other {
            cluster: plan.target.alias.clone(),
            op: format!("alter configs of {remote}"),
            reason: e.to_string(),
        })?;
    let names: Vec<&str> = ops.iter().map(|(n, _)| n.as_str()).collect();
    tracing::info!(flow = %plan.id, topic = %remote, changed = ?names, "synced topic configs");
    Ok(())
}
