//! The heartbeat emitter: every `emit_heartbeats_interval_seconds`, a Heartbeat(source, target, now) to
//! partition 0 of `heartbeats` on the target, like MM2's heartbeat connector (mm2-reference.md §7.1).
//!
//! MM2 also runs a heartbeat-only herder for the reverse pair, which writes Heartbeat(target, source)
//! into the source's `heartbeats`; the copier then replicates that topic to `<source>.heartbeats` on the
//! target, whose name tells MirrorClient that `source` is upstream and whose timestamps measure the whole
//! pipeline. ferry's flow does both, so a single flow is discoverable on its own; each destination has
//! its switch (`emit_heartbeats_enabled`, `emit_reverse_heartbeats_enabled`), and a destination that is
//! off is never touched: no topic is created there (a read-only source stays unwritten).

//!
//! The emitter is an actor without a thread of its own: a heartbeat is one record queued on the
//! connection's shared producer, whose acknowledgement comes back as a message. A thread per flow that
//! slept between heartbeats was a twentieth of an idle flow's cost; only the setup (creating the topic
//! blocks) takes a short-lived thread.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use actix::prelude::*;

use super::messages::{ActorKind, ActorStatusChanged, ChildExited, Parent};
use super::worker::StopWorker;
use crate::clients::{FlowConnections, Lane, Outgoing};
use crate::config::FlowPlan;
use crate::failpoints;
use crate::kafka::{self, Captured, TopicSpec};
use crate::metrics::METRICS;
use crate::mm2::records::Heartbeat;
use crate::status::ActorState;

/// One destination: Heartbeat(`from`, `to`) into `heartbeats` on `cluster`, through the connection's
/// shared producer for internal topics (many flows' heartbeats into one cluster share it).
struct Beat {
    cluster: String,
    from: String,
    to: String,
    lane: Lane,
}

/// A round of heartbeats sent and not all acknowledged yet.
struct Round {
    id: u64,
    sent: Instant,
    /// The clusters whose heartbeat is not acknowledged yet.
    waiting: Vec<String>,
    failed: Option<(String, Captured)>,
}

/// The emitter as a supervised actor.
pub struct HeartbeatEmitter {
    plan: Arc<FlowPlan>,
    conns: Arc<FlowConnections>,
    supervisor: Parent,
    beats: Vec<Beat>,
    round: Option<Round>,
    rounds: u64,
    /// The supervisor was told how the emitter ended (else its `Drop` says it panicked).
    exit_reported: bool,
}

impl HeartbeatEmitter {
    pub fn new(plan: Arc<FlowPlan>, conns: Arc<FlowConnections>, supervisor: Parent) -> Self {
        Self { plan, conns, supervisor, beats: Vec::new(), round: None, rounds: 0, exit_reported: false }
    }

    fn exit(&mut self, result: Result<(), String>, ctx: &mut Context<Self>) {
        if !self.exit_reported {
            self.exit_reported = true;
            self.supervisor.exited.do_send(ChildExited { kind: ActorKind::Heartbeats, result });
        }
        ctx.stop();
    }

    /// The longest a round may wait for its acknowledgements.
    fn patience(&self) -> Duration {
        Duration::from_secs(30).max(self.plan.settings.emit_heartbeats_interval)
    }

    fn tick(&mut self, ctx: &mut Context<Self>) {
        // One round at a time: a slow cluster delays the next heartbeat, never bursts them.
        if let Some(r) = &self.round {
            if r.sent.elapsed() >= self.patience() {
                let cluster = r.waiting.join("`, `");
                let wait = self.patience();
                self.exit(
                    Err(format!("cluster `{cluster}`: publish heartbeat: not acknowledged within {wait:?}")),
                    ctx,
                );
            }
            return;
        }
        if let Err(e) = failpoints::check(failpoints::HEARTBEATS_EMIT) {
            return self.exit(Err(e), ctx);
        }
        let topic = self.plan.policy.heartbeats_topic();
        let now_ms = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        self.rounds += 1;
        let id = self.rounds;
        self.round = Some(Round {
            id,
            sent: Instant::now(),
            waiting: self.beats.iter().map(|b| b.cluster.clone()).collect(),
            failed: None,
        });
        for b in &self.beats {
            let hb = Heartbeat { source_alias: b.from.clone(), target_alias: b.to.clone(), timestamp_ms: now_ms };
            let key = match hb.encode_key() {
                Ok(k) => k,
                Err(e) => return self.exit(Err(format!("encode heartbeat: {e}")), ctx),
            };
            let value = hb.encode_value();
            let record =
                Outgoing { topic, partition: 0, key: &key, payload: &value, headers: None, timestamp: Some(now_ms) };
            let (me, cluster) = (ctx.address(), b.cluster.clone());
            let sent = b.lane.send(record, move |outcome| {
                me.do_send(Acked { round: id, cluster, failed: outcome.err() });
            });
            if let Err(e) = sent {
                let reason = format!("cluster `{}`: queue heartbeat: {e}", b.cluster);
                return self.exit(Err(reason), ctx);
            }
        }
    }
}

impl Actor for HeartbeatEmitter {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let (plan, conns, me) = (self.plan.clone(), self.conns.clone(), ctx.address());
        // Creating the topic blocks (and may wait for a cluster that is away): a short-lived thread.
        let spawned = std::thread::Builder::new().name(format!("heartbeats-setup {}", plan.id)).spawn(move || {
            me.do_send(Ready(setup(&plan, &conns)));
        });
        if let Err(e) = spawned {
            self.exit(Err(format!("cannot start a thread: {e}")), ctx);
        }
    }
}

impl Drop for HeartbeatEmitter {
    fn drop(&mut self) {
        if !self.exit_reported {
            let result = Err("heartbeat emitter panicked".into());
            self.supervisor.exited.do_send(ChildExited { kind: ActorKind::Heartbeats, result });
        }
    }
}

/// Both destinations made ready: their topic exists, their lane is open.
fn setup(plan: &FlowPlan, conns: &FlowConnections) -> Result<Vec<Beat>, String> {
    let topic = plan.policy.heartbeats_topic();
    let s = &plan.settings;
    let mut beats = Vec::new();
    for (on, conn, cluster, from, to) in [
        (s.emit_heartbeats_enabled, &conns.target, &plan.target.alias, &plan.id.source, &plan.id.target),
        (s.emit_reverse_heartbeats_enabled, &conns.source, &plan.source.alias, &plan.id.target, &plan.id.source),
    ] {
        if !on {
            continue;
        }
        let spec = TopicSpec::compacted(topic, 1, plan.settings.heartbeats_rf());
        conn.ensure_topic(&plan.id, &spec).map_err(|e| e.to_string())?;
        let lane = conn.internal().map_err(|e| e.to_string())?;
        beats.push(Beat { cluster: cluster.clone(), from: from.clone(), to: to.clone(), lane });
    }
    Ok(beats)
}

#[derive(Message)]
#[rtype(result = "()")]
struct Ready(Result<Vec<Beat>, String>);

impl Handler<Ready> for HeartbeatEmitter {
    type Result = ();
    fn handle(&mut self, Ready(ready): Ready, ctx: &mut Context<Self>) {
        if self.exit_reported {
            return;
        }
        match ready {
            Err(e) => self.exit(Err(e), ctx),
            Ok(beats) => {
                self.beats = beats;
                let status =
                    ActorStatusChanged { kind: ActorKind::Heartbeats, state: ActorState::Running, error: None };
                self.supervisor.status.do_send(status);
                if self.beats.is_empty() {
                    return; // both destinations off: nothing to do, and nothing to fail
                }
                self.tick(ctx);
                ctx.run_interval(self.plan.settings.emit_heartbeats_interval, |me, ctx| me.tick(ctx));
            }
        }
    }
}

/// A heartbeat's acknowledgement (or failure), from the producer's thread.
#[derive(Message)]
#[rtype(result = "()")]
struct Acked {
    round: u64,
    cluster: String,
    failed: Option<Captured>,
}

impl Handler<Acked> for HeartbeatEmitter {
    type Result = ();
    fn handle(&mut self, msg: Acked, ctx: &mut Context<Self>) {
        let Some(round) = self.round.as_mut().filter(|r| r.id == msg.round) else { return };
        if let Some(i) = round.waiting.iter().position(|c| *c == msg.cluster) {
            round.waiting.swap_remove(i);
        }
        if let Some(e) = msg.failed {
            round.failed.get_or_insert((msg.cluster, e));
        }
        if !round.waiting.is_empty() {
            return;
        }
        let Some(round) = self.round.take() else { return };
        if let Some((cluster, e)) = round.failed {
            let topic = self.plan.policy.heartbeats_topic();
            let reason = match e.refused {
                Some(code) => kafka::not_authorized(&format!("heartbeats topic {topic}"), &cluster, "Write", code),
                None => format!("cluster `{cluster}`: publish heartbeat: {e}"),
            };
            return self.exit(Err(reason), ctx);
        }
        METRICS.heartbeats_emitted.with_label_values(&[&self.plan.id.to_string()]).inc();
    }
}

impl Handler<StopWorker> for HeartbeatEmitter {
    type Result = ();
    fn handle(&mut self, _: StopWorker, ctx: &mut Context<Self>) {
        // A heartbeat in flight needs no flush: the next emitter sends a fresh one.
        self.exit(Ok(()), ctx);
    }
}
