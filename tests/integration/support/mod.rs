//! Test support for ferry's integration tests: real Kafka clusters, blocking client helpers and the
//! `ferry` binary as a child process. Every module of the integration-test binary uses it
//! (`use crate::support;`).
//!
//! - [`cluster`]: [`Cluster`] is one single-node KRaft cluster (broker+controller in one JVM) on
//!   free loopback ports with its own temp dir; [`shared_pair`] is the east/west pair shared by all
//!   tests of one test binary. The JVM command line, `server.properties` and the storage format
//!   come from `scripts/kafka.sh` so that the shell test bed and the tests cannot drift apart.
//!   [`Cluster::start_secured`] starts one with a SASL_SSL (SCRAM) or mTLS client listener and
//!   optionally ACLs ([`Security`]); `client_props(user)` gives a user's librdkafka properties.
//! - [`client`]: blocking topic admin, produce, consume-everything and group-offset helpers on
//!   rdkafka, usable from sync and async tests alike (no runtime of their own). They connect with
//!   the properties a secured cluster registered for its bootstrap address (its super user), or
//!   another user's inside [`as_client`]; [`try_connect`] reports why a client is refused.
//! - [`ferry`]: [`Ferry`] runs the `ferry` binary with its output in a log file.
//! - [`mm2`]: [`Mm2`] runs a real Java MirrorMaker 2 in dedicated mode from the fetched jars.
//! - [`connect`]: [`connect::ConnectWorker`] runs a real Kafka Connect distributed worker from the same
//!   jars, with MM2's connectors created over its REST API.
//! - [`tools`]: Kafka's own command-line tools (e.g. the console consumer with MM2's formatters)
//!   run from the fetched jars, with a deadline.
//! - [`observe`]: what an operator reads: ferry's `/health` and `/metrics`, and checks over checkpoints.
//! - [`tls`]: throwaway CAs and certificates for secured clusters ([`Cluster::start_secured`]).
//! - [`ports`]: every port the harness hands out ([`free_port`]) lies outside the kernel's ephemeral
//!   range and is reserved for the test process (lock files), so a restarted broker gets its port back.
//! - [`process`]: the watchdog that kills a child (JVM or ferry) when the test process dies, even
//!   by SIGKILL, so that no broker outlives its test binary.
//!
//! Rules for tests: never sleep to synchronise, poll with [`wait_for`]; use [`unique`] topic and
//! group names, the shared pair is shared by every test of the binary running in parallel.
#![allow(dead_code, unused_imports)]

pub mod client;
pub mod cluster;
pub mod connect;
pub mod ferry;
pub mod flows;
pub mod group;
pub mod kdc;
pub mod link;
pub mod mm2;
pub mod mm2_client;
pub mod observe;
pub mod oidc;
pub mod ports;
pub mod process;
pub mod prometheus;
pub mod registry;
pub mod scenario;
pub mod timing;
pub mod tls;
pub mod tools;
pub mod turn;
pub mod web;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use client::{
    CONSUME_ALL_GROUP, ConnectError, Deliveries, Rec, as_client, client_config, commit_group_offsets, consume_all,
    consume_all_as, create_partitions, create_topic, delete_group, delete_records, delete_topic, end_offsets,
    ensure_topic_with, group_offsets, list_topics, produce, produce_transactional, set_topic_configs, topic_overrides,
    topic_partitions, try_connect,
};
pub use cluster::{ADMIN, Cluster, Security, kafka_java, kafka_libdir, shared_pair};
pub use ferry::{Ferry, ferry_bin, ferry_cli, ferry_cli_env};
pub use flows::{cluster_toml, east_west_flow, flows_dir};
pub use group::{ActiveMember, http_get};
pub use mm2::{Mm2, dedicated_properties};
pub use mm2_client::remote_cluster_utils_translate;
pub use observe::{assert_monotonic, strip_ansi};
pub use tools::{ToolOutput, console_consume, run_tool, transactional_ids};
pub use web::{http_post, http_request};

/// Polls `f` (every 50 ms at first, backing off to 250 ms) until it returns true; panics naming
/// `what` if that does not happen within `deadline`.
pub fn wait_for(deadline: Duration, what: &str, mut f: impl FnMut() -> bool) {
    timing::touch();
    let start = Instant::now();
    let mut pause = Duration::from_millis(50);
    loop {
        if f() {
            return;
        }
        if start.elapsed() >= deadline {
            panic!("timed out after {deadline:?} waiting for {what}");
        }
        std::thread::sleep(pause.min(deadline.saturating_sub(start.elapsed())));
        pause = (pause * 2).min(Duration::from_millis(250));
    }
}

/// A loopback port that was free a moment ago, outside the kernel's ephemeral range (so that no
/// client's source port can take it while its broker is down) and reserved for this process: see
/// [`ports`].
pub fn free_port() -> u16 {
    ports::free_port()
}

/// `prefix-<pid>-<n>-<millis>`: unique across the tests of a binary and across runs against the
/// same long-lived clusters (`scripts/kafka.sh up`). Valid as a topic or group name.
pub fn unique(prefix: &str) -> String {
    timing::touch();
    static N: AtomicU32 = AtomicU32::new(0);
    let millis = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() % 1_000_000).unwrap_or(0);
    format!("{prefix}-{}-{}-{millis}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// The repository root (where Cargo.toml is).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The last `n` lines of `text`, for panic messages.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
