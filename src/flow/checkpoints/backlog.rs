//! This flow's own offset syncs, from the computer's start until their history is complete, read by a
//! thread of its own. Reading starts at once: it does not wait for the checkpoint producer's
//! transactions, the checkpoints topic or the published checkpoints (all of which the computer sets up
//! meanwhile), and later neither for an emission round (group offsets, a transaction) nor a round for it.
//!
//! With a long backlog the thread first reads its newest syncs into the early store
//! ([`SyncReader::read_early`]), then the rest while following the newest; translations use the early
//! store until the whole history is in. The computer learns only once the published checkpoints are
//! loaded (or could not be) whether the backlog is to be read latest-only; switching the store to it
//! mid-way gives the same history ([`crate::sync_store::SyncStore::set_backlog_latest_only`]), and the
//! early store is never used in that mode ([`super::CheckpointState`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::sync_reader::{STOPPED, SyncReader};
use super::{SharedCheckpointState, lock};
use crate::clients::FlowConnections;
use crate::config::FlowPlan;
use crate::failpoints;

/// How long one read waits for records: also about how long [`BacklogThread::stop`] may take.
const POLL: Duration = Duration::from_millis(200);

/// The thread reading this flow's offset syncs; it hands its reader back, following the topic, once
/// the history is complete.
pub(super) struct BacklogThread {
    stop: Arc<AtomicBool>,
    ready: Arc<AtomicBool>,
    handle: Option<JoinHandle<Result<SyncReader, String>>>,
}

impl BacklogThread {
    pub(super) fn start(
        plan: Arc<FlowPlan>,
        conns: Arc<FlowConnections>,
        state: SharedCheckpointState,
    ) -> Result<Self, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let ready = Arc::new(AtomicBool::new(false));
        let (stopping, readied) = (stop.clone(), ready.clone());
        let handle = std::thread::Builder::new()
            .name(format!("offset syncs {}", plan.id))
            .spawn(move || read(&plan, &conns, &state, &stopping, &readied))
            .map_err(|e| format!("start the offset-sync reader: {e}"))?;
        Ok(Self { stop, ready, handle: Some(handle) })
    }

    /// Whether translations can start: the newest syncs of a long backlog are in, or the whole history.
    pub(super) fn ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The reader once the history is complete, `None` while it is being read; the reader's failure
    /// (the cluster refused it, or reading made no progress) is the computer's.
    pub(super) fn finished(&mut self) -> Result<Option<SyncReader>, String> {
        if !self.handle.as_ref().is_some_and(JoinHandle::is_finished) {
            return Ok(None);
        }
        self.join().map(Some)
    }

    /// Stops reading (within about [`POLL`]) and returns the reader if the history was complete, e.g.
    /// for a final catch-up; an error otherwise.
    pub(super) fn stop(mut self) -> Result<SyncReader, String> {
        self.stop.store(true, Ordering::Relaxed);
        self.join()
    }

    fn join(&mut self) -> Result<SyncReader, String> {
        match self.handle.take() {
            Some(h) => h.join().unwrap_or_else(|_| Err("the offset-sync reader panicked".to_string())),
            None => Err("the offset-sync reader was already joined".to_string()),
        }
    }
}

impl Drop for BacklogThread {
    /// A computer that fails stops its reader before the next computer starts one: two readers would
    /// both move the state's offset-sync position.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The thread: opens the reader, reads the newest syncs of a long backlog first, then the rest.
///
/// The history counts as complete only once the computer has loaded the published checkpoints (or
/// found it cannot): that decides whether the backlog is read latest-only, which must be known before
/// the store is marked read. Until then the reading goes on.
fn read(
    plan: &FlowPlan,
    conns: &FlowConnections,
    state: &SharedCheckpointState,
    stop: &Arc<AtomicBool>,
    ready: &AtomicBool,
) -> Result<SyncReader, String> {
    let started = Instant::now();
    let mut syncs = SyncReader::new(plan, conns, state)?.cancelled_by(stop.clone());
    let mut early = syncs.read_early(plan, state)?;
    if early.is_some() {
        ready.store(true, Ordering::Release);
    }
    // When the backlog was read to its end (its completion may wait for the published checkpoints).
    let mut at_end = None;
    loop {
        if stop.load(Ordering::Relaxed) {
            return Err(STOPPED.to_string());
        }
        match &mut early {
            Some((_, backlog)) if failpoints::held(failpoints::CHECKPOINTS_BACKLOG) => {
                std::thread::sleep(POLL);
                backlog.held();
            }
            _ => syncs.poll(state, POLL)?,
        }
        if let Some((tail, backlog)) = &mut early {
            tail.poll(state, Duration::ZERO)?;
            if at_end.is_none() && syncs.reached(state, backlog.end())? {
                at_end = Some(started.elapsed());
            }
        }
        if !lock(state).checkpoints_loaded {
            continue;
        }
        match &mut early {
            Some((_, backlog)) => {
                if syncs.backlog_read(state, backlog)? {
                    let read_s = at_end.unwrap_or_else(|| started.elapsed()).as_secs_f64();
                    tracing::info!(
                        flow = %plan.id, read_s, complete_s = started.elapsed().as_secs_f64(),
                        "offset-sync history complete: backlog read to its end after read_s, complete (published checkpoints loaded) after complete_s"
                    );
                    return Ok(syncs);
                }
            }
            None => {
                syncs.read_to_end(state)?;
                ready.store(true, Ordering::Release);
                return Ok(syncs);
            }
        }
    }
}
