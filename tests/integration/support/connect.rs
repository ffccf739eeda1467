//! MirrorMaker 2 run as connectors on a real Kafka Connect distributed worker
//! (`org.apache.kafka.connect.cli.ConnectDistributed`, what `bin/connect-distributed.sh` runs and what
//! Strimzi's `KafkaMirrorMaker2` deploys), from the jars the harness fetched (their classpath holds the
//! `connect-mirror` jars, so the worker finds the Mirror connectors without a plugin path).
//!
//! [`ConnectWorker::start`] writes a worker's properties (bootstrap = the target cluster, its own group and
//! internal topics, replication factor 1, byte-array converters, offsets flushed every second, its REST
//! listener on a free port) and waits until the REST API answers. [`mirror_connectors`] gives the three
//! connectors' configurations under names that are not MM2's defaults; [`ConnectWorker::put_connector`]
//! creates or updates one, [`ConnectWorker::stop_connector`] stops it the way the README's takeover steps
//! say (`PUT /connectors/NAME/stop`, KIP-875: its tasks stop and commit their offsets, its configuration
//! and offsets stay), [`ConnectWorker::resume_connector`] starts it again.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use super::cluster::Cluster;
use super::mm2::Mm2;
use super::web::try_http_request;
use super::{free_port, wait_for};

pub const CONNECT_DISTRIBUTED: &str = "org.apache.kafka.connect.cli.ConnectDistributed";
const BYTE_ARRAY: &str = "org.apache.kafka.connect.converters.ByteArrayConverter";
/// How long a worker may take to scan its classpath, join its group and answer.
const READY: Duration = Duration::from_secs(120);

/// A Connect worker's internal topics and group: its progress (`offsets`) is what a takeover reads.
#[derive(Clone, Debug)]
pub struct WorkerTopics {
    pub group: String,
    pub offsets: String,
    pub configs: String,
    pub status: String,
}

impl WorkerTopics {
    /// `<prefix>-offsets`, `<prefix>-configs`, `<prefix>-status` and group `<prefix>`: not the names a
    /// dedicated MM2 uses (`mm2-offsets.<source>.internal`), nor Connect's defaults.
    pub fn named(prefix: &str) -> WorkerTopics {
        WorkerTopics {
            group: prefix.to_string(),
            offsets: format!("{prefix}-offsets"),
            configs: format!("{prefix}-configs"),
            status: format!("{prefix}-status"),
        }
    }
}

/// A running Connect worker (its JVM: dropping it kills the worker).
pub struct ConnectWorker {
    pub jvm: Mm2,
    pub rest: SocketAddr,
}

/// The three MM2 connectors of `source->target`, named as Strimzi names them
/// (`<source>-><target>.MirrorSourceConnector`, ...), with every interval short enough for a test:
/// `(name, config)` for the source, checkpoint and heartbeat connector, in that order.
pub fn mirror_connectors(
    (source_alias, source): (&str, &Cluster),
    (target_alias, target): (&str, &Cluster),
    topics: &str,
    groups: &str,
) -> Vec<(String, serde_json::Value)> {
    let common = serde_json::json!({
        "source.cluster.alias": source_alias,
        "target.cluster.alias": target_alias,
        "source.cluster.bootstrap.servers": source.bootstrap,
        "target.cluster.bootstrap.servers": target.bootstrap,
        "key.converter": BYTE_ARRAY,
        "value.converter": BYTE_ARRAY,
        "tasks.max": "1",
        "replication.factor": "1",
        "offset-syncs.topic.replication.factor": "1",
        "checkpoints.topic.replication.factor": "1",
        "heartbeats.topic.replication.factor": "1",
    });
    let with = |class: &str, extra: serde_json::Value| {
        let mut config = common.clone();
        let map = config.as_object_mut().expect("an object");
        map.insert("connector.class".into(), format!("org.apache.kafka.connect.mirror.{class}").into());
        map.extend(extra.as_object().expect("an object").clone());
        (format!("{source_alias}->{target_alias}.{class}"), config)
    };
    vec![
        with(
            "MirrorSourceConnector",
            serde_json::json!({
                "topics": topics,
                "refresh.topics.interval.seconds": "1",
                "sync.topic.acls.enabled": "false",
                // Not the `x.heartbeats` topics other tests leave on the shared pair (see mm2::dedicated_properties).
                "heartbeats.replication.enabled": "false",
            }),
        ),
        with(
            "MirrorCheckpointConnector",
            serde_json::json!({
                "groups": groups,
                "emit.checkpoints.interval.seconds": "1",
                "refresh.groups.interval.seconds": "1",
                "sync.group.offsets.enabled": "false",
            }),
        ),
        with("MirrorHeartbeatConnector", serde_json::json!({ "emit.heartbeats.interval.seconds": "1" })),
    ]
}

/// A connector's name in a URL path (`->` and other reserved characters percent-encoded).
fn path_segment(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl ConnectWorker {
    /// Starts a worker against `cluster` (where its internal topics and the connectors' offsets live: the
    /// target of the mirror) and waits until its REST API answers.
    pub fn start(cluster: &Cluster, topics: &WorkerTopics) -> ConnectWorker {
        let port = free_port();
        let properties = format!(
            "bootstrap.servers={bootstrap}
group.id={group}
key.converter={BYTE_ARRAY}
value.converter={BYTE_ARRAY}
offset.storage.topic={offsets}
config.storage.topic={configs}
status.storage.topic={status}
offset.storage.replication.factor=1
config.storage.replication.factor=1
status.storage.replication.factor=1
offset.flush.interval.ms=1000
listeners=http://127.0.0.1:{port}
rest.advertised.host.name=127.0.0.1
rest.advertised.port={port}
",
            bootstrap = cluster.bootstrap,
            group = topics.group,
            offsets = topics.offsets,
            configs = topics.configs,
            status = topics.status,
        );
        let mut jvm = Mm2::start_main(CONNECT_DISTRIBUTED, "worker.properties", &properties);
        let rest = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        wait_for(READY, "the Connect worker's REST API", || {
            jvm.assert_running();
            matches!(try_http_request(rest, "GET", "/connectors", &[], b""), Ok((200, _)))
        });
        ConnectWorker { jvm, rest }
    }

    fn request(&mut self, method: &str, path: &str, body: &[u8]) -> (u16, String) {
        self.jvm.assert_running();
        try_http_request(self.rest, method, path, &[("Content-Type", "application/json")], body)
            .unwrap_or_else(|e| panic!("{method} {path} at the Connect worker {}: {e}", self.rest))
    }

    /// `method path` until the worker accepts it (2xx); a worker that just started answers 409 while
    /// its group rebalances and 404 for a connector whose configuration it has not read yet.
    fn until_accepted(&mut self, method: &str, path: &str, body: &[u8]) {
        let mut last = (0, String::new());
        wait_for(READY, &format!("the Connect worker to accept {method} {path}"), || {
            last = self.request(method, path, body);
            if !(200..300).contains(&last.0) {
                eprintln!("{method} {path}: {} {}", last.0, last.1);
            }
            (200..300).contains(&last.0)
        });
    }

    /// Creates the connector `name` with `config`, or updates it (`PUT /connectors/NAME/config`).
    pub fn put_connector(&mut self, name: &str, config: &serde_json::Value) {
        let body = serde_json::to_vec(config).expect("connector config as JSON");
        self.until_accepted("PUT", &format!("/connectors/{}/config", path_segment(name)), &body);
    }

    /// `GET /connectors/NAME/status`: the connector's state and its tasks' (empty before it has any).
    pub fn connector_state(&mut self, name: &str) -> (String, Vec<String>) {
        let (code, body) = self.request("GET", &format!("/connectors/{}/status", path_segment(name)), b"");
        if code != 200 {
            return (format!("HTTP {code}"), Vec::new());
        }
        let status: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let state = |v: &serde_json::Value| v["state"].as_str().unwrap_or_default().to_string();
        let tasks = status["tasks"].as_array().map(|t| t.iter().map(state).collect()).unwrap_or_default();
        (state(&status["connector"]), tasks)
    }

    /// Waits until the connector and all its tasks (at least one) run.
    pub fn wait_running(&mut self, name: &str) {
        wait_for(READY, &format!("connector {name} and its tasks running"), || {
            let (connector, tasks) = self.connector_state(name);
            connector == "RUNNING" && !tasks.is_empty() && tasks.iter().all(|t| t == "RUNNING")
        });
    }

    /// `PUT /connectors/NAME/stop` and waits until it is stopped (its tasks stopped and committed).
    pub fn stop_connector(&mut self, name: &str) {
        self.until_accepted("PUT", &format!("/connectors/{}/stop", path_segment(name)), b"");
        wait_for(READY, &format!("connector {name} stopped"), || {
            let (connector, tasks) = self.connector_state(name);
            connector == "STOPPED" && tasks.is_empty()
        });
    }

    /// `PUT /connectors/NAME/resume` (a stopped connector starts its tasks again).
    pub fn resume_connector(&mut self, name: &str) {
        self.until_accepted("PUT", &format!("/connectors/{}/resume", path_segment(name)), b"");
    }

    /// Graceful stop of the worker (SIGTERM, then SIGKILL after `grace`); returns whether SIGKILL was needed.
    pub fn stop(&mut self, grace: Duration) -> bool {
        self.jvm.stop(grace).1
    }
}
