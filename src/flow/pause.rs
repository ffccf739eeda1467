//! An operator's pause of a flow on this node, and the confirmation that the copier applied it.
//!
//! The switch is owned by the flow's supervisor (a pause outlives copier restarts) and read by the copy
//! loop on every pass and every record. Whoever asks for a state gets a receiver that resolves only once
//! the copier has applied it: for a pause, the consumer stopped fetching, records polled but not sent
//! are held back (sought back to on resume), and what was in flight is settled (or a bound passed); for
//! a resume, fetching restarted. So a `200` to `POST /flows/{id}/pause` means nothing more reaches
//! the target from this node.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::oneshot;

#[derive(Debug, Default)]
pub struct PauseSwitch {
    /// The state the operator asked for.
    wanted: AtomicBool,
    /// Whether `wanted` is known: false while the deployment's recorded pause (the control topic) has
    /// not been read yet; the copier holds meanwhile, for a bounded time.
    known: AtomicBool,
    /// Askers waiting for the copier to apply the state they asked for.
    waiters: Mutex<Vec<(bool, oneshot::Sender<()>)>>,
}

impl PauseSwitch {
    /// `known`: whether `paused` is the deployment's recorded state (see [`PauseSwitch::known`]).
    pub fn new(paused: bool, known: bool) -> Self {
        Self { wanted: AtomicBool::new(paused), known: AtomicBool::new(known), waiters: Mutex::default() }
    }

    pub fn wanted(&self) -> bool {
        self.wanted.load(Ordering::Acquire)
    }

    pub fn known(&self) -> bool {
        self.known.load(Ordering::Acquire)
    }

    /// Ask for `paused`; the receiver resolves once the copier has applied it (or the state was asked
    /// for again the other way: the later ask wins, and the earlier one is answered then).
    pub fn set(&self, paused: bool) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        let mut waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        self.wanted.store(paused, Ordering::Release);
        self.known.store(true, Ordering::Release);
        waiters.push((paused, tx));
        rx
    }

    /// The copier applied `paused` (or there is no copier, which fetches nothing): answer those who
    /// asked for it, and those whose ask was overtaken by a later one.
    pub fn settle(&self, paused: bool) {
        let mut waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        if waiters.is_empty() || self.wanted() != paused {
            return;
        }
        for (_, tx) in waiters.drain(..) {
            let _ = tx.send(());
        }
    }

    /// Someone waits for the copier to apply the wanted state.
    pub fn awaited(&self) -> bool {
        !self.waiters.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ask_is_answered_only_once_the_copier_applied_it() {
        let switch = PauseSwitch::new(false, false);
        assert!(!switch.known());
        let mut pause = switch.set(true);
        assert!(switch.wanted() && switch.known());
        switch.settle(false);
        assert!(pause.try_recv().is_err(), "a resumed copier does not answer a pause");
        switch.settle(true);
        assert!(pause.try_recv().is_ok());
        assert!(!switch.awaited());
    }

    #[test]
    fn a_later_ask_answers_an_overtaken_one_when_it_is_applied() {
        let switch = PauseSwitch::new(false, true);
        let mut pause = switch.set(true);
        let mut resume = switch.set(false);
        switch.settle(true);
        assert!(pause.try_recv().is_err() && resume.try_recv().is_err(), "true is no longer wanted");
        switch.settle(false);
        assert!(pause.try_recv().is_ok() && resume.try_recv().is_ok());
    }
}
