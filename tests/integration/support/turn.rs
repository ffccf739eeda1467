//! One test at a time within a test binary, for tests that start their own brokers and a ferry node on
//! two cores: running them together would starve both.

use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

/// Held while a test runs; reports how long the test took when dropped.
pub struct Turn {
    _guard: MutexGuard<'static, ()>,
    test: &'static str,
    start: Instant,
}

/// Waits until no other test of this binary holds its turn.
pub fn take_turn(test: &'static str) -> Turn {
    static TURN: Mutex<()> = Mutex::new(());
    Turn { _guard: TURN.lock().unwrap_or_else(|p| p.into_inner()), test, start: Instant::now() }
}

impl Drop for Turn {
    fn drop(&mut self) {
        eprintln!("[{}] took {:?}", self.test, self.start.elapsed());
    }
}
