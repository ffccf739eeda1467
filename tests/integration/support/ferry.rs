//! The `ferry` binary as a child process, for end-to-end tests.
//!
//! Runs `ferry run --flows DIR --listen 127.0.0.1:<free port> [extra args]` with stdout and stderr
//! in one log file in a temp dir, `RUST_LOG` passed through (default `info`), and a watchdog that
//! kills it if the test process dies.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use super::process::{kill_and_reap, spawn_watchdog, terminate};
use super::{free_port, tail, wait_for};

/// The `ferry` binary Cargo built for this integration test, or `FERRY_TEST_BIN` when set (e.g. to run a
/// test against an older build and see it fail).
pub fn ferry_bin() -> PathBuf {
    std::env::var_os("FERRY_TEST_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_ferry")), PathBuf::from)
}

/// `ferry ARGS` with `env` added and no admin token file from the test's own environment: the exit code,
/// stdout and stderr.
pub fn ferry_cli_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = std::process::Command::new(ferry_bin())
        .args(args)
        .env_remove("FERRY_ADMIN_TOKEN_FILE")
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("run ferry {args:?}: {e}"));
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// [`ferry_cli_env`] without extra environment.
pub fn ferry_cli(args: &[&str]) -> (i32, String, String) {
    ferry_cli_env(args, &[])
}

pub struct Ferry {
    child: Option<Child>,
    watchdog: Option<Child>,
    listen: SocketAddr,
    /// Holds ferry.log; removed on drop.
    dir: tempfile::TempDir,
}

impl Ferry {
    /// Starts [`ferry_bin`] on `flows_dir`; see [`Ferry::start_with`].
    pub fn start(flows_dir: &Path, extra_args: &[&str]) -> Ferry {
        Ferry::start_with(&ferry_bin(), flows_dir, extra_args)
    }

    /// Starts [`ferry_bin`] on `flows_dir` with extra environment variables, e.g.
    /// `[("FAILPOINTS", "copier-poll=1*panic")]` (the test build has failure points compiled in).
    pub fn start_env(flows_dir: &Path, extra_args: &[&str], env: &[(&str, &str)]) -> Ferry {
        Ferry::spawn(&ferry_bin(), flows_dir, extra_args, env)
    }

    /// Starts `bin run --flows <flows_dir> --listen 127.0.0.1:<free port> <extra_args>`. Returns at
    /// once; wait for readiness with [`Ferry::wait_log`] or the HTTP endpoint.
    pub fn start_with(bin: &Path, flows_dir: &Path, extra_args: &[&str]) -> Ferry {
        Ferry::spawn(bin, flows_dir, extra_args, &[])
    }

    fn spawn(bin: &Path, flows_dir: &Path, extra_args: &[&str], env: &[(&str, &str)]) -> Ferry {
        let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
        // Tests share clusters: each flows directory is its own deployment (its own copier and lease
        // groups), and a node restarted on the same directory keeps its id (static membership of the lease
        // group: it leads again at once). Tests that run several nodes of one deployment set FERRY_NODE_ID.
        let node_id = {
            use std::hash::{DefaultHasher, Hash, Hasher};
            let mut h = DefaultHasher::new();
            flows_dir.hash(&mut h);
            format!("test-{:016x}", h.finish())
        };
        let deployment = format!("ferry-{node_id}");
        let mut cmd = Command::new(bin);
        cmd.arg("run")
            .arg("--flows")
            .arg(flows_dir)
            .arg("--listen")
            .arg(listen.to_string())
            .args(extra_args)
            .env("FERRY_NODE_ID", node_id)
            .env("FERRY_DEPLOYMENT", deployment)
            .envs(env.iter().copied());
        Ferry::launch(cmd, listen)
    }

    /// Starts `ferry run ARGS` with `env` and nothing from the harness (no --flows, --listen, node id or
    /// deployment, and none of the test's own FERRY_* settings variables): for tests of where the
    /// settings come from. `listen` is where the test expects the node to listen.
    pub fn start_run(args: &[&str], env: &[(&str, &str)], listen: SocketAddr) -> Ferry {
        let mut cmd = Command::new(ferry_bin());
        cmd.arg("run").args(args);
        for (name, _) in std::env::vars_os() {
            if name.to_str().is_some_and(|n| n.starts_with("FERRY_") && !n.starts_with("FERRY_TEST_")) {
                cmd.env_remove(name);
            }
        }
        cmd.envs(env.iter().copied());
        Ferry::launch(cmd, listen)
    }

    /// Runs `cmd` with stdout and stderr in ferry.log, `RUST_LOG` passed through unless `cmd` sets it
    /// (default `info`), and a watchdog.
    fn launch(mut cmd: Command, listen: SocketAddr) -> Ferry {
        super::timing::touch();
        let dir = tempfile::Builder::new().prefix("ferry-run-").tempdir().expect("ferry temp dir");
        let log = File::create(dir.path().join("ferry.log")).expect("create ferry.log");
        if !cmd.get_envs().any(|(k, _)| k == "RUST_LOG") {
            cmd.env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()));
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log fd"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", cmd.get_program().to_string_lossy()));
        let watchdog = spawn_watchdog(child.id(), None);
        Ferry { child: Some(child), watchdog: Some(watchdog), listen, dir }
    }

    pub fn listen_addr(&self) -> SocketAddr {
        self.listen
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Everything ferry wrote to stdout and stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("ferry.log")
    }

    /// Waits until the log contains `needle`; panics with the log tail otherwise (or if ferry
    /// exits meanwhile).
    pub fn wait_log(&mut self, needle: &str, timeout: Duration) {
        let what = format!("ferry log line containing {needle:?}");
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_for(timeout, &what, || {
                if let Some(status) = self.try_status() {
                    panic!("ferry exited ({status}) while waiting for {needle:?}");
                }
                self.log().contains(needle)
            })
        }));
        if let Err(e) = result {
            eprintln!("ferry log tail:\n{}", tail(&self.log(), 60));
            std::panic::resume_unwind(e);
        }
    }

    /// The exit status if ferry has exited (reaps it).
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        self.child.as_mut()?.try_wait().expect("try_wait")
    }

    /// SIGTERM and wait up to `timeout` for a graceful exit; panics (after SIGKILL) with the log
    /// tail if ferry does not exit in time.
    pub fn terminate(&mut self, timeout: Duration) -> ExitStatus {
        let mut child = self.child.take().expect("ferry already stopped");
        let (status, killed) = terminate(&mut child, timeout);
        self.reap_watchdog();
        assert!(!killed, "ferry did not exit within {timeout:?} of SIGTERM; log tail:\n{}", tail(&self.log(), 60));
        status
    }

    /// SIGKILL: a crash, nothing flushed.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child);
        }
        self.reap_watchdog();
    }

    fn reap_watchdog(&mut self) {
        if let Some(mut w) = self.watchdog.take() {
            kill_and_reap(&mut w);
        }
    }
}

impl Drop for Ferry {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            // ferry's own lines first: librdkafka's connection noise (a burst per unreachable broker)
            // would push them out of a plain tail.
            let log = self.log();
            let own: Vec<&str> = log.lines().filter(|l| !l.contains("librdkafka")).collect();
            let noise = log.lines().count() - own.len();
            let from = own.len().saturating_sub(150);
            eprintln!(
                "ferry log ({}), its last {} own lines ({noise} librdkafka lines left out):\n{}",
                self.log_path().display(),
                own.len() - from,
                own[from..].join("\n")
            );
        }
        // For debugging: FERRY_TEST_KEEP_LOGS=<dir> keeps every ferry.log (the temp dir goes with self).
        if let Some(keep) = std::env::var_os("FERRY_TEST_KEEP_LOGS") {
            let name = format!("ferry-{}-{}.log", std::process::id(), self.listen.port());
            let _ = std::fs::create_dir_all(&keep);
            let _ = std::fs::copy(self.log_path(), Path::new(&keep).join(name));
        }
    }
}
