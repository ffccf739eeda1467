//! Kafka's own command-line tools, run from the jars the harness fetched (see
//! [`super::cluster::kafka_java`]): what an operator would type, e.g. the console consumer with
//! MM2's formatters to read ferry's internal topics.
//!
//! The tools get the test brokers' log4j2 configuration, which prints WARN and above to stdout:
//! callers pick their lines by prefix (formatted records never start with `[`).

use std::fs::File;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use super::cluster::kafka_java;
use super::process::{kill_and_reap, spawn_watchdog, wait_timeout};
use super::tail;

/// What a tool printed, and how it exited.
#[derive(Debug)]
pub struct ToolOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl ToolOutput {
    /// The stdout lines starting with `prefix`, in order.
    pub fn lines_starting_with(&self, prefix: &str) -> Vec<String> {
        self.stdout.lines().filter(|l| l.starts_with(prefix)).map(str::to_string).collect()
    }
}

/// Runs `java ... <main_class> <args>` and waits for it to exit; panics (after SIGKILL) with its
/// output if it runs longer than `timeout`. Output goes to files, so a chatty tool cannot block on a
/// full pipe. The exit status is returned, not checked.
pub fn run_tool(main_class: &str, args: &[&str], timeout: Duration) -> ToolOutput {
    let dir = tempfile::Builder::new().prefix("ferry-tool-").tempdir().expect("tool temp dir");
    let (out_path, err_path) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let mut child = kafka_java(main_class)
        .args(args)
        .stdin(Stdio::null())
        .stdout(File::create(&out_path).expect("create tool stdout"))
        .stderr(File::create(&err_path).expect("create tool stderr"))
        .spawn()
        .unwrap_or_else(|e| panic!("spawn java {main_class}: {e}"));
    let mut watchdog = spawn_watchdog(child.id(), None);
    let status = wait_timeout(&mut child, timeout);
    let status = status.unwrap_or_else(|| kill_and_reap(&mut child));
    kill_and_reap(&mut watchdog);
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let out = ToolOutput { status, stdout, stderr };
    if status.code().is_none() {
        panic!(
            "{main_class} {} did not exit within {timeout:?}; stdout:\n{}\nstderr:\n{}",
            args.join(" "),
            tail(&out.stdout, 40),
            tail(&out.stderr, 40)
        );
    }
    out
}

/// `kafka-console-consumer` (`org.apache.kafka.tools.consumer.ConsoleConsumer`) reading exactly
/// `max_messages` records of `topic`-`partition` from `offset` (no consumer group), formatted by
/// `formatter` (a class name, e.g. MM2's `org.apache.kafka.connect.mirror.formatters.OffsetSyncFormatter`).
/// Returns the printed lines that start with `prefix`; panics with the tool's output unless it exited
/// 0 with exactly `max_messages` such lines.
pub fn console_consume(
    bootstrap: &str,
    topic: &str,
    partition: i32,
    offset: i64,
    max_messages: usize,
    formatter: &str,
    prefix: &str,
) -> Vec<String> {
    let (partition, offset, max) = (partition.to_string(), offset.to_string(), max_messages.to_string());
    let args = [
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--partition",
        &partition,
        "--offset",
        &offset,
        "--max-messages",
        &max,
        "--timeout-ms",
        "60000",
        "--formatter",
        formatter,
    ];
    let out = run_tool("org.apache.kafka.tools.consumer.ConsoleConsumer", &args, Duration::from_secs(120));
    let lines = out.lines_starting_with(prefix);
    assert!(
        out.status.success() && lines.len() == max_messages,
        "console consumer on {topic}-{partition} from {offset} ({formatter}): exit {}, {} of {max_messages} \
         lines start with {prefix:?}; stdout:\n{}\nstderr:\n{}",
        out.status,
        lines.len(),
        tail(&out.stdout, 40),
        tail(&out.stderr, 40)
    );
    lines
}

/// The transactional ids the cluster at `bootstrap` knows (`kafka-transactions.sh list`, Admin
/// `ListTransactions`): an id appears once a producer initialised its transactions with it.
pub fn transactional_ids(bootstrap: &str) -> Vec<String> {
    let args = ["--bootstrap-server", bootstrap, "list"];
    let out = run_tool("org.apache.kafka.tools.TransactionsCommand", &args, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "kafka-transactions list on {bootstrap}: exit {}; stdout:\n{}\nstderr:\n{}",
        out.status,
        tail(&out.stdout, 40),
        tail(&out.stderr, 40)
    );
    // A header line (TransactionalId Coordinator ProducerId TransactionState), then one line per id.
    out.stdout
        .lines()
        .filter(|l| !l.starts_with('[') && !l.starts_with("TransactionalId"))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}
