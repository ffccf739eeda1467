//! Periodic duties of many flows on one node-level thread.
//!
//! Some duties of a flow are a look at shared state every so often: is a cluster away, did the
//! partitions' problems change (the copier's health, four times a second), who are the members of the
//! flow's groups (every ten seconds). A thread per flow for each made an idle node's threads and
//! wake-ups grow with its flows. Here each kind of duty is a [`Ticker`]: one thread that runs every
//! flow's job at the job's own period. The thread sleeps until the next job is due.
//!
//! Once a [`Job`] is dropped its closure never runs again (a stopped copier's health is never reported
//! after the copier). Jobs should be short: a job that blocks delays the other jobs of its ticker
//! (never the flows that add or drop jobs), so a ticker holds one kind of duty (the copier's health
//! never waits behind a slow cluster's DescribeGroups). A job that panics is dropped and logged; the
//! ticker goes on with the others.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

type Run = Box<dyn FnMut() + Send>;

/// A job's closure, locked while it runs; `None` once its [`Job`] was dropped.
type Slot = Arc<Mutex<Option<Run>>>;

struct Entry {
    period: Duration,
    due: Instant,
    run: Slot,
}

#[derive(Default)]
struct Jobs {
    entries: BTreeMap<u64, Entry>,
    next_id: u64,
    started: bool,
}

/// One thread running jobs at their periods.
pub struct Ticker {
    name: &'static str,
    shared: Arc<(Mutex<Jobs>, Condvar)>,
}

/// A job of a [`Ticker`]; dropping it ends the job (waiting for a run in progress).
#[must_use = "the job ends when this is dropped"]
pub struct Job {
    id: u64,
    run: Slot,
    shared: Arc<(Mutex<Jobs>, Condvar)>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Ticker {
    /// A ticker whose thread, started with its first job, is called `name`.
    pub fn new(name: &'static str) -> Ticker {
        Ticker { name, shared: Arc::new((Mutex::new(Jobs::default()), Condvar::new())) }
    }

    /// Runs `run` now and then every `period` until the returned [`Job`] is dropped.
    pub fn every(&self, period: Duration, run: impl FnMut() + Send + 'static) -> Job {
        let (m, wake) = &*self.shared;
        let mut jobs = lock(m);
        let id = jobs.next_id;
        jobs.next_id += 1;
        let slot: Slot = Arc::new(Mutex::new(Some(Box::new(run))));
        jobs.entries.insert(id, Entry { period, due: Instant::now(), run: slot.clone() });
        if !jobs.started {
            let shared = self.shared.clone();
            let spawned = std::thread::Builder::new().name(self.name.to_string()).spawn(move || serve(&shared));
            match spawned {
                Ok(_) => jobs.started = true,
                Err(e) => {
                    tracing::error!(ticker = self.name, error = %e, "cannot start a ticker thread; tried again with the next job")
                }
            }
        }
        wake.notify_all();
        Job { id, run: slot, shared: self.shared.clone() }
    }

    /// How many jobs the ticker runs (for tests).
    pub fn jobs(&self) -> usize {
        lock(&self.shared.0).entries.len()
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        lock(&self.shared.0).entries.remove(&self.id);
        // Taken under the job's own lock, which a run in progress holds: the closure never runs after
        // this (the ticker may have picked the job before it was removed, and finds it gone).
        let closure = lock(&self.run).take();
        drop(closure);
    }
}

fn serve(shared: &(Mutex<Jobs>, Condvar)) {
    let (m, wake) = shared;
    loop {
        // The due jobs are picked under the ticker's lock and run outside it: a slow job delays the
        // ticker's other jobs, never a flow that adds or drops one.
        let now = Instant::now();
        let due: Vec<(u64, Slot)> = {
            let mut jobs = lock(m);
            jobs.entries
                .iter_mut()
                .filter(|(_, e)| e.due <= now)
                .map(|(id, e)| {
                    e.due = now + e.period;
                    (*id, e.run.clone())
                })
                .collect()
        };
        for (id, slot) in due {
            let mut run = lock(&slot);
            let Some(f) = run.as_mut() else { continue };
            if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
                tracing::error!(panic = %crate::panics::panic_message(&panic), "a periodic job panicked; it is dropped");
                *run = None;
                lock(m).entries.remove(&id);
            }
        }
        let jobs = lock(m);
        match jobs.entries.values().map(|e| e.due).min() {
            Some(at) => drop(wake.wait_timeout(jobs, at.saturating_duration_since(Instant::now()))),
            None => drop(wake.wait(jobs)),
        }
    }
}

/// The ticker of quick looks at shared state (the copier's health).
pub fn quick() -> &'static Ticker {
    static QUICK: OnceLock<Ticker> = OnceLock::new();
    QUICK.get_or_init(|| Ticker::new("ticks"))
}

/// The ticker of the flows' group descriptions (DescribeGroups for `/flows`): calls to the clusters,
/// which an unreachable one makes slow, so kept apart from [`quick`].
pub fn members() -> &'static Ticker {
    static MEMBERS: OnceLock<Ticker> = OnceLock::new();
    MEMBERS.get_or_init(|| Ticker::new("members"))
}

/// The ticker of the flows' schema refreshes (calls to schema registries, which a registry that does
/// not answer makes slow: kept apart from the others).
pub fn schemas() -> &'static Ticker {
    static SCHEMAS: OnceLock<Ticker> = OnceLock::new();
    SCHEMAS.get_or_init(|| Ticker::new("schemas"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn counter() -> (Arc<AtomicUsize>, impl FnMut() + Send + 'static) {
        let n = Arc::new(AtomicUsize::new(0));
        let m = n.clone();
        (n, move || {
            m.fetch_add(1, Ordering::SeqCst);
        })
    }

    fn wait_until(what: &str, f: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn jobs_run_at_their_own_periods_and_never_after_they_are_dropped() {
        let ticker = Ticker::new("test-ticks");
        let (fast, f) = counter();
        let (slow, s) = counter();
        let fast_job = ticker.every(Duration::from_millis(10), f);
        let slow_job = ticker.every(Duration::from_secs(3600), s);
        wait_until("the fast job ran five times", || fast.load(Ordering::SeqCst) >= 5);
        assert_eq!(slow.load(Ordering::SeqCst), 1, "the slow job ran once, at once, and is not due again");
        drop(fast_job);
        let after = fast.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(fast.load(Ordering::SeqCst), after, "a dropped job never runs again");
        assert_eq!(ticker.jobs(), 1);
        drop(slow_job);
        assert_eq!(ticker.jobs(), 0);
    }

    #[test]
    fn a_slow_job_never_holds_up_adding_or_dropping_another() {
        let ticker = Ticker::new("test-ticks");
        let (started, mark) = counter();
        let mut mark = mark;
        let _slow = ticker.every(Duration::from_millis(10), move || {
            mark();
            std::thread::sleep(Duration::from_millis(400));
        });
        wait_until("the slow job is running", || started.load(Ordering::SeqCst) >= 1);
        let t = Instant::now();
        let (n, f) = counter();
        let other = ticker.every(Duration::from_secs(3600), f);
        drop(other);
        assert!(t.elapsed() < Duration::from_millis(200), "adding and dropping took {:?}", t.elapsed());
        assert!(n.load(Ordering::SeqCst) <= 1);
    }

    #[test]
    fn a_panicking_job_is_dropped_and_the_others_go_on() {
        let ticker = Ticker::new("test-ticks");
        let _bad = ticker.every(Duration::from_millis(10), || panic!("a job's defect"));
        let (n, f) = counter();
        let _good = ticker.every(Duration::from_millis(10), f);
        wait_until("the good job keeps running", || n.load(Ordering::SeqCst) >= 5);
        assert_eq!(ticker.jobs(), 1, "the panicking job is gone");
    }
}
