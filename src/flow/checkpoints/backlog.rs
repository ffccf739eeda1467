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
use std::time::Duration;

use super::SharedCheckpointState;
use super::sync_reader::SyncReader;
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
    pub(super) fn start(plan: Arc<FlowPlan>, state: SharedCheckpointState) -> Result<Self, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let ready = Arc::new(AtomicBool::new(false));
        let (stopping, readied) = (stop.clone(), ready.clone());
        let handle = std::thread::Builder::new()
            .name(format!("offset syncs {}", plan.id))
            .spawn(move || read(&plan, &state, &stopping, &readied))
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

    /// Stops reading (within about [`POLL`]) and returns the reader, e.g. for a final catch-up; an
    /// error if it had not opened yet or failed.
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
fn read(
    plan: &FlowPlan,
    state: &SharedCheckpointState,
    stop: &Arc<AtomicBool>,
    ready: &AtomicBool,
) -> Result<SyncReader, String> {
    let mut syncs = SyncReader::new(plan, state)?.cancelled_by(stop.clone());
    let Some((mut early, mut backlog)) = syncs.read_early(plan, state)? else {
        syncs.read_to_end(state)?;
        ready.store(true, Ordering::Release);
        return Ok(syncs);
    };
    ready.store(true, Ordering::Release);
    while !stop.load(Ordering::Relaxed) {
        if failpoints::held(failpoints::CHECKPOINTS_BACKLOG) {
            std::thread::sleep(POLL);
            backlog.held();
        } else {
            syncs.poll(state, POLL)?;
        }
        early.poll(state, Duration::ZERO)?;
        if syncs.backlog_read(state, &mut backlog)? {
            break;
        }
    }
    Ok(syncs)
}
