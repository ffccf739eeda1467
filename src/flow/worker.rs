//! An actor whose work is a blocking loop on its own thread (the copier, the offset-sync emitter, the
//! heartbeat emitter): rdkafka's clients block, and records must not pass through a mailbox.
//!
//! The actor carries control to the loop over a channel ([`Signal`]) and reports how the loop ended to
//! the flow supervisor as [`ChildExited`]; a panic in the loop is caught and reported like an error.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use actix::prelude::*;

use super::messages::{ActorKind, ActorStatusChanged, ChildExited, Parent};
use crate::status::ActorState;

/// What a worker loop receives.
#[derive(Debug)]
pub enum Signal<M> {
    Msg(M),
    /// Finish by `deadline`: drain what is in flight, persist, exit.
    Stop {
        deadline: Instant,
    },
}

/// The loop's end of the control channel.
pub struct Control<M> {
    rx: Receiver<Signal<M>>,
    kind: ActorKind,
    supervisor: Parent,
}

impl<M> Control<M> {
    /// The loop finished its setup (the clusters it needs answered): report the actor running. Until then
    /// a started actor shows as starting, and a restarted one as restarting (or failed), so that an actor
    /// stuck on an unreachable cluster never looks healthy.
    pub fn running(&self) {
        self.supervisor.status.do_send(ActorStatusChanged { kind: self.kind, state: ActorState::Running, error: None });
    }

    /// The next signal if one is waiting. A vanished actor counts as a stop request.
    pub fn try_next(&self) -> Option<Signal<M>> {
        match self.rx.try_recv() {
            Ok(s) => Some(s),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => Some(Signal::Stop { deadline: Instant::now() + Duration::from_secs(5) }),
        }
    }

    /// Wait up to `timeout` for a signal.
    pub fn next_within(&self, timeout: Duration) -> Option<Signal<M>> {
        match self.rx.recv_timeout(timeout) {
            Ok(s) => Some(s),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                Some(Signal::Stop { deadline: Instant::now() + Duration::from_secs(5) })
            }
        }
    }
}

type LoopFn<M> = Box<dyn FnOnce(Control<M>) -> Result<(), String> + Send>;

pub struct Worker<M: Send + Unpin + 'static> {
    kind: ActorKind,
    /// The flow, for the span every log line of the loop carries.
    flow: String,
    name: String,
    supervisor: Parent,
    body: Option<LoopFn<M>>,
    initial: Vec<M>,
    tx: Option<Sender<Signal<M>>>,
    thread: Option<JoinHandle<()>>,
    /// Called after a stop is queued, for a loop that sleeps on something other than its signals.
    waker: Option<Box<dyn Fn() + Send>>,
}

impl<M: Send + Unpin + 'static> Worker<M> {
    /// A worker that runs `body` on a thread named `name` once started; `initial` messages are queued
    /// before the loop starts.
    pub fn new(
        kind: ActorKind,
        name: String,
        supervisor: Parent,
        initial: Vec<M>,
        body: impl FnOnce(Control<M>) -> Result<(), String> + Send + 'static,
    ) -> Self {
        // Thread names are `<actor> <flow>`.
        let flow = name.split_once(' ').map_or(String::new(), |(_, f)| f.to_string());
        Self { kind, flow, name, supervisor, body: Some(Box::new(body)), initial, tx: None, thread: None, waker: None }
    }

    /// `wake` is called after every stop request is queued: the loop sleeps on something else (a queue's
    /// condition) and looks at its signals when woken, so it need not wake often to see a stop.
    pub fn waking(mut self, wake: impl Fn() + Send + 'static) -> Self {
        self.waker = Some(Box::new(wake));
        self
    }
}

impl<M: Send + Unpin + 'static> Actor for Worker<M> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let (tx, rx) = mpsc::channel();
        for m in self.initial.drain(..) {
            let _ = tx.send(Signal::Msg(m));
        }
        let Some(body) = self.body.take() else { return };
        let me = ctx.address();
        let (kind, supervisor) = (self.kind, self.supervisor.clone());
        // Every line the loop logs carries its flow and actor (text: a prefix; JSON: span fields).
        let span = tracing::info_span!("actor", flow = %self.flow, actor = kind.name());
        let spawned = std::thread::Builder::new().name(self.name.clone()).spawn(move || {
            let control = Control { rx, kind, supervisor };
            let result = span
                .in_scope(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(control))))
                .unwrap_or_else(|panic| Err(format!("panicked: {}", panic_message(&panic))));
            me.do_send(LoopEnded(result));
        });
        match spawned {
            Ok(handle) => {
                self.thread = Some(handle);
                self.tx = Some(tx);
            }
            Err(e) => {
                self.supervisor
                    .exited
                    .do_send(ChildExited { kind: self.kind, result: Err(format!("cannot start a thread: {e}")) });
                ctx.stop();
            }
        }
    }
}

pub use crate::panics::panic_message;

/// Pass a message to the loop.
#[derive(Debug)]
pub struct Deliver<M>(pub M);

impl<M: Send + Unpin + 'static> Message for Deliver<M> {
    type Result = ();
}

impl<M: Send + Unpin + 'static> Handler<Deliver<M>> for Worker<M> {
    type Result = ();
    fn handle(&mut self, msg: Deliver<M>, _: &mut Context<Self>) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Signal::Msg(msg.0));
        }
    }
}

/// Ask the loop to finish by `deadline`.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct StopWorker {
    pub deadline: Instant,
}

impl<M: Send + Unpin + 'static> Handler<StopWorker> for Worker<M> {
    type Result = ();
    fn handle(&mut self, msg: StopWorker, _: &mut Context<Self>) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Signal::Stop { deadline: msg.deadline });
        }
        if let Some(wake) = &self.waker {
            wake();
        }
    }
}

/// Sent by the loop's thread to its own actor when the loop returned.
#[derive(Message, Debug)]
#[rtype(result = "()")]
struct LoopEnded(Result<(), String>);

impl<M: Send + Unpin + 'static> Handler<LoopEnded> for Worker<M> {
    type Result = ();
    fn handle(&mut self, msg: LoopEnded, ctx: &mut Context<Self>) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.supervisor.exited.do_send(ChildExited { kind: self.kind, result: msg.0 });
        ctx.stop();
    }
}
