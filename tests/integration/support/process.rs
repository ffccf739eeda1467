//! Child processes that must not outlive the test process.
//!
//! Statics are never dropped and a test binary can be killed with SIGKILL, so `Drop` alone cannot
//! guarantee that a broker dies with its test. Every long-lived child therefore gets a watchdog: a
//! small `bash` loop, itself a child of the test process, that checks every 0.5 s that both the
//! test process (not a zombie) and the child are alive. When the child is gone it exits quietly; when the test
//! process is gone it SIGKILLs the child and (optionally) removes the child's temp dir, which the
//! test process can no longer do. The watchdog ignores SIGINT/SIGTERM/SIGHUP so that a Ctrl-C on
//! `cargo test` still ends in cleanup.

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

// `alive` treats a zombie as dead: a test process killed by SIGKILL stays a zombie until its parent
// reaps it, and a lazy init (PID 1 of some containers) may take its time.
const WATCHDOG: &str = r#"
trap '' INT TERM HUP
t=$1 c=$2 d=$3
alive() {
  local k v
  while read -r k v _; do
    if [ "$k" = State: ]; then [ "$v" != Z ]; return; fi
  done 2>/dev/null </proc/"$1"/status
  return 1
}
while alive "$t"; do
  kill -0 "$c" 2>/dev/null || exit 0
  sleep 0.5
done
kill -9 "$c" 2>/dev/null
if [ -n "$d" ]; then
  i=0
  while alive "$c" && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
  rm -rf "$d"
fi
"#;

/// This test binary running its ignored test `name` alone (`--nocapture`): a test whose failure would be
/// a process abort runs its scenario there, so that an abort fails that test instead of ending the run.
pub fn child_test(name: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args(["--exact", name, "--ignored", "--nocapture"]);
    cmd
}

/// Starts a watchdog for `child_pid` (see the module doc). `cleanup_dir` is removed after the
/// child was killed because the test process died; never when the child exits on its own.
pub fn spawn_watchdog(child_pid: u32, cleanup_dir: Option<&Path>) -> Child {
    Command::new("bash")
        .arg("-c")
        .arg(WATCHDOG)
        .arg("ferry-test-watchdog")
        .arg(std::process::id().to_string())
        .arg(child_pid.to_string())
        .arg(cleanup_dir.map(|d| d.as_os_str()).unwrap_or_default())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn watchdog (bash)")
}

/// Sends `signal` (e.g. "TERM") to `pid` with the `kill` command (no libc in this crate).
pub fn signal(pid: u32, signal: &str) {
    // The process may already be gone; that is not an error here.
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Waits up to `timeout` for `child` to exit; `None` if it is still running.
pub fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if start.elapsed() >= timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGTERM, wait up to `grace`, then SIGKILL. Returns the exit status and whether SIGKILL was needed.
pub fn terminate(child: &mut Child, grace: Duration) -> (ExitStatus, bool) {
    if let Some(status) = child.try_wait().expect("try_wait") {
        return (status, false);
    }
    signal(child.id(), "TERM");
    if let Some(status) = wait_timeout(child, grace) {
        return (status, false);
    }
    let _ = child.kill();
    (child.wait().expect("wait after SIGKILL"), true)
}

/// SIGKILL and reap (no zombie left behind); fine if the child already exited.
pub fn kill_and_reap(child: &mut Child) -> ExitStatus {
    let _ = child.kill();
    child.wait().expect("wait after SIGKILL")
}
