//! How long each test took, for the table of the slowest tests that `scripts/test.sh` prints.
//!
//! libtest runs each test on a thread named after it. The first call of a test into the harness (a
//! cluster, a ferry process, a topic, a wait) starts that thread's clock; the thread's end (when the test
//! returned or panicked) stops it and appends `seconds<TAB>test<TAB>start` to the file `FERRY_TEST_TIMES`
//! names, if any (`start`: seconds from the run's first timed test, to see how the run's slots were filled).
//! Helper threads a test spawns have no name and are not timed.

use std::cell::RefCell;
use std::io::Write;
use std::sync::OnceLock;
use std::time::Instant;

/// When the run's first test touched the harness.
static RUN_STARTED: OnceLock<Instant> = OnceLock::new();

struct Clock {
    test: String,
    started: Instant,
}

impl Drop for Clock {
    fn drop(&mut self) {
        if std::env::var_os("FERRY_TEST_TIMES").is_none() {
            return;
        }
        let run_started = *RUN_STARTED.get_or_init(|| self.started);
        let start = self.started.saturating_duration_since(run_started).as_secs_f64();
        let line = format!("{:.1}\t{}\t{start:.1}\n", self.started.elapsed().as_secs_f64(), self.test);
        append_line("FERRY_TEST_TIMES", &line);
    }
}

/// Appends `line` to the file the environment variable `var` names, if any. One short write with
/// O_APPEND: lines of tests ending together do not interleave.
fn append_line(var: &str, line: &str) {
    let Some(path) = std::env::var_os(var) else { return };
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = f.write_all(line.as_bytes());
    }
}

thread_local! {
    static CLOCK: RefCell<Option<Clock>> = const { RefCell::new(None) };
}

/// Starts the current test's clock unless it runs already (cheap: called from the harness's common
/// entry points).
pub fn touch() {
    let _ = CLOCK.try_with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none()
            && let Some(test) = std::thread::current().name().filter(|n| *n != "main")
        {
            let started = Instant::now();
            RUN_STARTED.get_or_init(|| started);
            *c = Some(Clock { test: test.to_string(), started });
        }
    });
}

/// Appends a note to the file `FERRY_TEST_NOTES` names (`scripts/test.sh` prints it after the run):
/// something a test got past that is worth knowing about, such as a broker that answered late.
pub fn note(text: &str) {
    let test = std::thread::current().name().unwrap_or("?").to_string();
    let since = RUN_STARTED.get().map(|s| s.elapsed().as_secs_f64()).unwrap_or(0.0);
    let line = format!("[{since:.0} s] {test}: {text}\n");
    eprint!("{line}");
    append_line("FERRY_TEST_NOTES", &line);
}
