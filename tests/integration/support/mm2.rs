//! A real Java MirrorMaker 2 in dedicated mode (`org.apache.kafka.connect.mirror.MirrorMaker`, what
//! `bin/connect-mirror-maker.sh` runs), from the jars the harness fetched, for takeover tests.
//!
//! [`Mm2::start`] writes the given `mm2.properties` and a log4j2 configuration that logs at INFO into a
//! temp dir, runs the driver with its output in `mm2.log` there, and gives it a watchdog so that it dies
//! with the test process. [`dedicated_properties`] builds a properties file for one flow between two
//! single-node test clusters, with every interval short enough for a test.

use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::cluster::{Cluster, kafka_java};
use super::process::{kill_and_reap, spawn_watchdog, terminate};
use super::tail;

/// MM2's driver class (dedicated mode).
pub const MIRROR_MAKER: &str = "org.apache.kafka.connect.mirror.MirrorMaker";

/// INFO for MM2 and Connect, WARN for the client libraries' config dumps and chatter.
const LOG4J2_YAML: &str = r#"
Configuration:
  name: ferry-test-mm2
  status: warn
  shutdownHook: disable
  Appenders:
    Console:
      name: STDOUT
      target: SYSTEM_OUT
      PatternLayout:
        pattern: "[%d{ISO8601}] %p %m (%c)%n"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        - ref: STDOUT
    Logger:
      - name: org.apache.kafka.common.config.AbstractConfig
        level: WARN
      - name: org.apache.kafka.clients
        level: WARN
      - name: org.apache.kafka.common.utils.AppInfoParser
        level: WARN
      - name: org.apache.kafka.common.metrics
        level: WARN
      - name: org.reflections
        level: ERROR
"#;

/// One flow `source->target` of a dedicated MM2 between two test clusters: replication factor 1
/// everywhere, Connect offsets flushed every second, checkpoints, group/topic refresh and heartbeats
/// every second, no group offset sync, no ACL sync, no herder for the reverse direction at all
/// (`target->source` is disabled and emits no heartbeats), and no replication of other heartbeats topics
/// (Kafka 4.0's `heartbeats.replication.enabled`): other tests leave hundreds of `x.heartbeats` topics on
/// the shared pair, which MM2 would create on the target and copy, minutes of a test about its own topic.
pub fn dedicated_properties(source: &Cluster, target: &Cluster, topics: &str, groups: &str) -> String {
    dedicated_properties_as(&source.name, source, &target.name, target, topics, groups)
}

/// [`dedicated_properties`] with the clusters under other aliases than their names, so that two MM2s can
/// share one pair of test clusters: the herder, its Connect group (`<source>-mm2`), its internal topics
/// (`mm2-offsets.<source>.internal`, ...) and the remote topics' prefix all follow the alias.
pub fn dedicated_properties_as(
    source_alias: &str,
    source: &Cluster,
    target_alias: &str,
    target: &Cluster,
    topics: &str,
    groups: &str,
) -> String {
    let (s, t) = (source_alias, target_alias);
    format!(
        "clusters = {s}, {t}
{s}.bootstrap.servers = {sb}
{t}.bootstrap.servers = {tb}
{s}->{t}.enabled = true
{t}->{s}.enabled = false
{t}->{s}.emit.heartbeats.enabled = false
topics = {topics}
groups = {groups}
tasks.max = 1
replication.factor = 1
offset-syncs.topic.replication.factor = 1
checkpoints.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
offset.storage.replication.factor = 1
status.storage.replication.factor = 1
config.storage.replication.factor = 1
{t}.offset.storage.replication.factor = 1
{t}.status.storage.replication.factor = 1
{t}.config.storage.replication.factor = 1
{t}.offset.flush.interval.ms = 1000
emit.checkpoints.interval.seconds = 1
emit.heartbeats.interval.seconds = 1
refresh.groups.interval.seconds = 1
refresh.topics.interval.seconds = 1
sync.group.offsets.enabled = false
sync.topic.acls.enabled = false
heartbeats.replication.enabled = false
",
        sb = source.bootstrap,
        tb = target.bootstrap,
    )
}

/// A running (or stopped) dedicated MM2. Dropping it kills the JVM and removes its dir (printing the
/// log tail if the test is panicking).
pub struct Mm2 {
    child: Option<Child>,
    watchdog: Option<Child>,
    /// Holds mm2.properties, log4j2.yaml and mm2.log.
    dir: tempfile::TempDir,
    started: Instant,
}

impl Mm2 {
    /// Starts `MirrorMaker mm2.properties` with `properties` as the file's content. Returns at once.
    pub fn start(properties: &str) -> Mm2 {
        Mm2::start_main(MIRROR_MAKER, "mm2.properties", properties)
    }

    /// Starts `main_class FILE` (a Kafka main class that takes a properties file, e.g. Connect's
    /// `ConnectDistributed` with a worker's properties), with `properties` as FILE's content, logging
    /// into `mm2.log` like [`Mm2::start`]. Returns at once.
    pub fn start_main(main_class: &str, file: &str, properties: &str) -> Mm2 {
        let dir = tempfile::Builder::new().prefix("ferry-mm2-").tempdir().expect("mm2 temp dir");
        let props = dir.path().join(file);
        std::fs::write(&props, properties).unwrap_or_else(|e| panic!("write {file}: {e}"));
        let log4j = dir.path().join("log4j2.yaml");
        std::fs::write(&log4j, LOG4J2_YAML).expect("write log4j2.yaml");
        let log = File::create(dir.path().join("mm2.log")).expect("create mm2.log");
        let child = with_log4j_config(kafka_java(main_class), &log4j)
            .arg(&props)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log fd"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn java {main_class} (is a JDK on PATH?): {e}"));
        let watchdog = spawn_watchdog(child.id(), Some(dir.path()));
        Mm2 { child: Some(child), watchdog: Some(watchdog), dir, started: Instant::now() }
    }

    /// Time since [`Mm2::start`].
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("mm2.log")
    }

    /// Everything MM2 logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Panics with the log tail if the JVM exited (MM2 never exits on its own while healthy).
    pub fn assert_running(&mut self) {
        if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().expect("try_wait")) {
            panic!("MM2 exited on its own ({status}); log {}:\n{}", self.log_path().display(), tail(&self.log(), 60));
        }
    }

    /// Graceful stop: SIGTERM (MM2's shutdown hook stops the herders; source tasks commit their
    /// offsets), wait up to `grace`, then SIGKILL. Returns the exit status and whether SIGKILL was needed.
    pub fn stop(&mut self, grace: Duration) -> (ExitStatus, bool) {
        let mut child = self.child.take().expect("MM2 already stopped");
        let result = terminate(&mut child, grace);
        self.reap_watchdog();
        result
    }

    fn reap_watchdog(&mut self) {
        if let Some(mut w) = self.watchdog.take() {
            kill_and_reap(&mut w);
        }
    }
}

impl Drop for Mm2 {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child);
        }
        self.reap_watchdog();
        if std::thread::panicking() {
            eprintln!("MM2 log ({}):\n{}", self.log_path().display(), tail(&self.log(), 80));
        }
    }
}

/// `cmd` (from [`kafka_java`]) with its `-Dlog4j2.configurationFile` pointing at `config` instead of the
/// brokers' WARN-only configuration; everything else (JVM flags, classpath, main class) unchanged.
fn with_log4j_config(cmd: Command, config: &std::path::Path) -> Command {
    const PROP: &str = "-Dlog4j2.configurationFile=";
    let mut out = Command::new(cmd.get_program());
    let mut replaced = false;
    for arg in cmd.get_args() {
        if arg.to_str().is_some_and(|a| a.starts_with(PROP)) {
            out.arg(format!("{PROP}{}", config.display()));
            replaced = true;
        } else {
            out.arg(arg);
        }
    }
    assert!(replaced, "the java command of kafka_java has no {PROP} argument");
    out
}
