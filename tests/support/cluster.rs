//! Real single-node Kafka clusters for tests (KRaft, broker and controller in one JVM).
//!
//! `scripts/kafka.sh` owns the definition of a test broker: it fetches the jars (once, into
//! `~/.cache/ferry` or `$FERRY_KAFKA_CACHE`), prints the java command line (`broker-cmd`) and writes
//! and formats a node's directory (`prepare`). This module only picks ports, runs the JVM, waits
//! until it is usable and makes sure it dies with the test process (see [`super::process`]).
//!
//! Readiness means: the broker logged "Kafka Server started" (which KRaft brokers log only after
//! the controller unfenced them), serves metadata with one broker in it, and the controller
//! accepts a validate-only CreateTopics (nothing is created, so `list_topics` stays clean).

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};

use super::client::block_on;
use super::process::{kill_and_reap, spawn_watchdog, terminate};
use super::{free_port, repo_root, tail};

/// How long `start`/`restart` wait for a usable broker before panicking with its log.
pub const READY_TIMEOUT: Duration = Duration::from_secs(90);
/// How long `stop` waits after SIGTERM before SIGKILL.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(20);
const STARTED_LINE: &str = "Kafka Server started";

/// One running (or stopped) single-node cluster. Dropping it kills the JVM and removes its dir.
pub struct Cluster {
    /// A label for messages ("east", "west", ...); also part of the temp dir name.
    pub name: String,
    /// `127.0.0.1:<port>`, for `bootstrap.servers`.
    pub bootstrap: String,
    pub port: u16,
    pub controller_port: u16,
    /// Holds server.properties, data/ and server.log; removed on drop.
    dir: tempfile::TempDir,
    /// The JVM, while running.
    java: Option<Child>,
    /// Kills the JVM if the test process dies (see `process`).
    watchdog: Option<Child>,
}

impl Cluster {
    /// Starts a dedicated cluster on free loopback ports and waits until it is usable; panics with
    /// the tail of the broker log if it is not within [`READY_TIMEOUT`].
    pub fn start(name: &str) -> Cluster {
        let port = free_port();
        let controller_port = loop {
            let p = free_port();
            if p != port {
                break p;
            }
        };
        let dir = tempfile::Builder::new()
            .prefix(&format!("ferry-kafka-{name}-"))
            .tempdir()
            .expect("create cluster temp dir");
        kafka_sh(&[
            "prepare",
            dir.path().to_str().expect("utf-8 temp dir"),
            &port.to_string(),
            &controller_port.to_string(),
        ]);
        let mut cluster = Cluster {
            name: name.to_string(),
            bootstrap: format!("127.0.0.1:{port}"),
            port,
            controller_port,
            dir,
            java: None,
            watchdog: None,
        };
        cluster.launch();
        cluster
    }

    /// Starts the JVM again with the same ports and data (stopping it first if it still runs) and
    /// waits until it is usable.
    pub fn restart(&mut self) {
        if self.is_running() {
            self.stop();
        }
        self.launch();
    }

    /// Graceful stop: SIGTERM, wait, SIGKILL after [`STOP_TIMEOUT`]. The data dir stays.
    pub fn stop(&mut self) {
        if let Some(mut java) = self.java.take() {
            let (_, killed) = terminate(&mut java, STOP_TIMEOUT);
            if killed {
                eprintln!("[{}] broker ignored SIGTERM for {STOP_TIMEOUT:?}, killed", self.name);
            }
        }
        self.reap_watchdog();
    }

    /// Crash: SIGKILL, no shutdown at all. The data dir stays.
    pub fn kill(&mut self) {
        if let Some(mut java) = self.java.take() {
            kill_and_reap(&mut java);
        }
        self.reap_watchdog();
    }

    /// True while the JVM runs (it may still be starting).
    pub fn is_running(&mut self) -> bool {
        match &mut self.java {
            Some(java) => java.try_wait().expect("try_wait").is_none(),
            None => false,
        }
    }

    /// The broker JVM's pid, while running.
    pub fn pid(&self) -> Option<u32> {
        self.java.as_ref().map(Child::id)
    }

    /// Everything the broker logged (WARN and above plus the startup line), across restarts.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn launch(&mut self) {
        assert!(self.java.is_none(), "[{}] broker already running", self.name);
        let log_path = self.log_path();
        let log_start = std::fs::metadata(&log_path).map(|m| m.len()).unwrap_or(0) as usize;
        let log = OpenOptions::new().create(true).append(true).open(&log_path).expect("open broker log");
        let mut cmd = kafka_command(&broker_cmd());
        cmd.arg(self.dir.path().join("server.properties"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log fd"))
            .stderr(log);
        let java = cmd.spawn().expect("spawn java (is a JDK on PATH?)");
        self.watchdog = Some(spawn_watchdog(java.id(), Some(self.dir.path())));
        self.java = Some(java);
        self.wait_ready(log_start);
    }

    fn wait_ready(&mut self, log_start: usize) {
        let start = Instant::now();
        let mut last_err = String::from("no \"Kafka Server started\" line in the log yet");
        loop {
            if let Some(status) = self.java.as_mut().and_then(|j| j.try_wait().expect("try_wait")) {
                self.java = None;
                self.reap_watchdog();
                panic!(
                    "[{}] broker exited during startup ({status}); log {}:\n{}",
                    self.name,
                    self.log_path().display(),
                    tail(&self.log(), 40)
                );
            }
            // The log check keeps rdkafka away until the port is open: librdkafka's reconnect
            // backoff would otherwise grow to seconds while the JVM boots.
            let log = std::fs::read(self.log_path()).unwrap_or_default();
            let started = log.get(log_start..).is_some_and(|l| String::from_utf8_lossy(l).contains(STARTED_LINE));
            if started {
                match probe(&self.bootstrap) {
                    Ok(()) => return,
                    Err(e) => last_err = e,
                }
            }
            if start.elapsed() > READY_TIMEOUT {
                let pid = self.pid();
                self.kill();
                panic!(
                    "[{}] broker (pid {pid:?}) not ready after {READY_TIMEOUT:?}: {last_err}; log {}:\n{}",
                    self.name,
                    self.log_path().display(),
                    tail(&self.log(), 40)
                );
            }
            std::thread::sleep(Duration::from_millis(if started { 200 } else { 50 }));
        }
    }

    fn reap_watchdog(&mut self) {
        if let Some(mut w) = self.watchdog.take() {
            kill_and_reap(&mut w);
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill();
        // self.dir (TempDir) is dropped after this and removes the data.
    }
}

/// Metadata with exactly one broker, then a validate-only CreateTopics answered by the controller.
fn probe(bootstrap: &str) -> Result<(), String> {
    let timeout = Duration::from_secs(5);
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("reconnect.backoff.max.ms", "200")
        .create()
        .map_err(|e| format!("client: {e}"))?;
    let md = consumer.fetch_metadata(None, timeout).map_err(|e| format!("metadata: {e}"))?;
    if md.brokers().len() != 1 {
        return Err(format!("metadata lists {} brokers", md.brokers().len()));
    }
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", bootstrap).create().map_err(|e| format!("admin client: {e}"))?;
    let topic = NewTopic::new("ferry-ready-probe", 1, TopicReplication::Fixed(1));
    let opts = AdminOptions::new().validate_only(true).request_timeout(Some(timeout)).operation_timeout(Some(timeout));
    let results =
        block_on(admin.create_topics([&topic], &opts)).map_err(|e| format!("validate-only CreateTopics: {e}"))?;
    match results.into_iter().next() {
        Some(Ok(_)) => Ok(()),
        Some(Err((_, code))) => Err(format!("validate-only CreateTopics: {code}")),
        None => Err("validate-only CreateTopics: no result".into()),
    }
}

/// The east/west pair shared by every test of this test binary, started in parallel on first use.
/// Never dropped (statics are not); the watchdogs kill the JVMs and remove their dirs within
/// ~0.5 s of the test process exiting. Tests must use unique topic and group names.
pub fn shared_pair() -> &'static (Cluster, Cluster) {
    static PAIR: OnceLock<Result<(Cluster, Cluster), String>> = OnceLock::new();
    let pair = PAIR.get_or_init(|| {
        std::thread::scope(|s| {
            let east = s.spawn(|| Cluster::start("east"));
            let west = s.spawn(|| Cluster::start("west"));
            match (east.join(), west.join()) {
                (Ok(e), Ok(w)) => Ok((e, w)),
                (e, w) => Err(format!("east: {}; west: {}", panic_message(e.err()), panic_message(w.err()))),
            }
        })
    });
    match pair {
        Ok(pair) => pair,
        Err(e) => panic!("the shared east/west pair failed to start: {e}"),
    }
}

fn panic_message(p: Option<Box<dyn std::any::Any + Send>>) -> String {
    match p {
        None => "ok".into(),
        Some(p) => p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panicked".into()),
    }
}

/// The directory holding Kafka's jars (fetched on first use), e.g. to build a classpath.
pub fn kafka_libdir() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| PathBuf::from(kafka_sh(&["libdir"]).trim())).clone()
}

/// A `java` command with the test brokers' JVM flags, Kafka's classpath and log4j2 configuration,
/// ready for `main_class` (e.g. `org.apache.kafka.connect.mirror.MirrorMaker` or
/// `org.apache.kafka.tools.TopicCommand`) and its arguments. Spawned children do not get a
/// watchdog: give long-lived ones one with [`super::process::spawn_watchdog`].
pub fn kafka_java(main_class: &str) -> Command {
    let cmd = broker_cmd();
    let (last, prefix) = cmd.split_last().expect("broker-cmd printed nothing");
    assert_eq!(last, "kafka.Kafka", "broker-cmd must end with the main class");
    let mut command = kafka_command(prefix);
    command.arg(main_class);
    command
}

/// `scripts/kafka.sh broker-cmd`, once per process: java, flags, `-cp <lib>/*`, `kafka.Kafka`.
fn broker_cmd() -> Vec<String> {
    static CMD: OnceLock<Vec<String>> = OnceLock::new();
    CMD.get_or_init(|| kafka_sh(&["broker-cmd"]).lines().map(str::to_string).collect()).clone()
}

fn kafka_command(args: &[String]) -> Command {
    let (java, rest) = args.split_first().expect("empty java command");
    let mut cmd = Command::new(java);
    cmd.args(rest);
    cmd
}

/// Runs `scripts/kafka.sh ARGS` and returns its stdout; panics with its stderr on failure. Runs
/// serialised within the process: the first call may fetch the jars (the script also takes a file
/// lock against other test binaries).
fn kafka_sh(args: &[&str]) -> String {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let script = repo_root().join("scripts/kafka.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} {} failed ({}):\n{}",
        script.display(),
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output from kafka.sh")
}
