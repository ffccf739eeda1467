//! A real schema registry for the schema tests: Apicurio Registry (its Confluent-compatible API), run
//! by `scripts/registry.sh` from the cached all-in-one build (fetched from Maven Central once, ~3 s
//! here). In-memory storage: each registry starts empty. Measured on the 2-core test machine: ready
//! 2-15 s after spawn, ~250 MiB RSS.
//!
//! The tests talk to it with their own plain HTTP client ([`super::web`]), not ferry's, so that a
//! mistake in ferry's client cannot hide on both sides of an assertion.

use std::fs::OpenOptions;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::process::{kill_and_reap, spawn_watchdog};
use super::web::try_http_request;
use super::{free_port, repo_root, tail};

/// How long [`SchemaRegistry::start`] waits for the API to answer.
pub const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// Where the Confluent-compatible API lives on an Apicurio registry.
pub const API: &str = "/apis/ccompat/v7";
const MEDIA_TYPE: &str = "application/vnd.schemaregistry.v1+json";

pub struct SchemaRegistry {
    pub port: u16,
    /// The `scripts/kafka.sh certs` directory of an HTTPS registry (its CA is `ca.pem`).
    tls: Option<std::path::PathBuf>,
    dir: tempfile::TempDir,
    java: Option<Child>,
    watchdog: Option<Child>,
}

impl SchemaRegistry {
    /// A registry on a port of its own.
    pub fn start() -> SchemaRegistry {
        SchemaRegistry::start_on(free_port())
    }

    /// A registry on `port` (e.g. one a flow has been pointed at before anything listened there).
    pub fn start_on(port: u16) -> SchemaRegistry {
        SchemaRegistry::launch(port, None)
    }

    /// A registry serving HTTPS only, with the server certificate of `tls` (a directory made by
    /// `scripts/kafka.sh certs`: `broker.pem` holds the key and the certificate for 127.0.0.1).
    pub fn start_tls(tls: &std::path::Path) -> SchemaRegistry {
        SchemaRegistry::launch(free_port(), Some(tls))
    }

    fn launch(port: u16, tls: Option<&std::path::Path>) -> SchemaRegistry {
        super::timing::touch();
        super::cluster::run_script("registry.sh", &["fetch"], &[]);
        let dir = tempfile::tempdir().expect("registry dir");
        let log_path = dir.path().join("registry.log");
        let log = OpenOptions::new().create(true).append(true).open(&log_path).expect("open registry log");
        let mut command = Command::new("bash");
        if let Some(tls) = tls {
            // Quarkus wants the certificate and the key in files of their own.
            let pem = std::fs::read_to_string(tls.join("broker.pem")).expect("read broker.pem");
            let (key, cert) = pem.split_once("-----BEGIN CERTIFICATE-----").expect("a key, then a certificate");
            std::fs::write(dir.path().join("server.key"), key).expect("write the key");
            std::fs::write(dir.path().join("server.crt"), format!("-----BEGIN CERTIFICATE-----{cert}")).expect("write");
            command
                .env("FERRY_REGISTRY_TLS_CERT", dir.path().join("server.crt"))
                .env("FERRY_REGISTRY_TLS_KEY", dir.path().join("server.key"));
        }
        let java = command
            .arg(repo_root().join("scripts/registry.sh"))
            .args(["run", &port.to_string()])
            .env("TMPDIR", dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log fd"))
            .stderr(log)
            .spawn()
            .expect("spawn scripts/registry.sh run");
        // `run` execs java: the pid is the JVM's.
        let watchdog = spawn_watchdog(java.id(), Some(dir.path()));
        let mut r = SchemaRegistry { port, dir, java: Some(java), watchdog: Some(watchdog), tls: tls.map(Into::into) };
        let start = Instant::now();
        loop {
            if let Some(status) = r.java.as_mut().and_then(|j| j.try_wait().expect("try_wait")) {
                panic!("schema registry exited during startup ({status}); log:\n{}", tail(&r.log(), 40));
            }
            if r.answers() {
                eprintln!("[registry] ready on port {port} in {:?}", start.elapsed());
                return r;
            }
            assert!(
                start.elapsed() < READY_TIMEOUT,
                "schema registry not ready after {READY_TIMEOUT:?}; log:\n{}",
                tail(&r.log(), 40)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn addr(&self) -> SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    /// The base URL of the Confluent-compatible API (what `[clusters.X.schema_registry] url` names).
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}{API}", self.port)
    }

    /// Whether the API answers `GET /subjects` (over HTTPS with the test CA for a TLS registry: with
    /// ferry's client, the one plain client here that speaks TLS).
    fn answers(&self) -> bool {
        match &self.tls {
            None => matches!(try_http_request(self.addr(), "GET", &format!("{API}/subjects"), &[], b""), Ok((200, _))),
            Some(tls) => {
                let ca = tls.join("ca.pem");
                let url = format!("{}/subjects", self.url());
                let tls = ferry::http_client::ClientTls { ca: Some(&ca), ..Default::default() };
                let call = ferry::http_client::Call {
                    method: "GET",
                    url: &url,
                    headers: &[],
                    body: None,
                    tls,
                    timeout: Duration::from_secs(2),
                };
                matches!(ferry::http_client::call(&call), Ok((200, _)))
            }
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// `method API+path` with a JSON body: the status code and the answer as JSON (`Null` if none).
    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let body = body.map(Value::to_string).unwrap_or_default();
        let headers = [("Content-Type", MEDIA_TYPE), ("Accept", MEDIA_TYPE)];
        let (code, text) = try_http_request(self.addr(), method, &format!("{API}{path}"), &headers, body.as_bytes())
            .unwrap_or_else(|e| panic!("{method} {path} on the registry at {}: {e}", self.port));
        (code, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Registers `schema` (Avro unless `schema_type` says otherwise) under `subject`: its ID.
    pub fn register(&self, subject: &str, schema: &str, schema_type: Option<&str>, references: Value) -> u32 {
        let mut body = json!({ "schema": schema, "references": references });
        if let Some(t) = schema_type {
            body["schemaType"] = json!(t);
        }
        let (code, answer) = self.call("POST", &format!("/subjects/{subject}/versions"), Some(&body));
        assert_eq!(code, 200, "register under {subject}: {answer}");
        u32::try_from(answer["id"].as_u64().expect("an id")).expect("a 32-bit id")
    }

    /// `subject` at `version`: (ID, schema text, references), or `None` if absent.
    pub fn version(&self, subject: &str, version: i64) -> Option<(u32, String, Value)> {
        let (code, v) = self.call("GET", &format!("/subjects/{subject}/versions/{version}"), None);
        (code == 200).then(|| {
            let id = u32::try_from(v["id"].as_u64().expect("an id")).expect("a 32-bit id");
            (id, v["schema"].as_str().unwrap_or_default().to_string(), v["references"].clone())
        })
    }

    /// [`SchemaRegistry::version`] of an HTTPS registry (through ferry's client, trusting the test CA).
    pub fn version_tls(&self, subject: &str, version: i64) -> Option<(u32, String, Value)> {
        let tls = self.tls.as_ref().expect("an HTTPS registry");
        let ca = tls.join("ca.pem");
        let url = format!("{}/subjects/{subject}/versions/{version}", self.url());
        let call = ferry::http_client::Call {
            method: "GET",
            url: &url,
            headers: &[],
            body: None,
            tls: ferry::http_client::ClientTls { ca: Some(&ca), ..Default::default() },
            timeout: Duration::from_secs(10),
        };
        let (code, body) = ferry::http_client::call(&call).expect("the HTTPS registry answers");
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        (code == 200).then(|| {
            let id = u32::try_from(v["id"].as_u64().expect("an id")).expect("a 32-bit id");
            (id, v["schema"].as_str().unwrap_or_default().to_string(), v["references"].clone())
        })
    }

    /// The subject's versions (empty if it does not exist).
    pub fn versions(&self, subject: &str) -> Vec<i64> {
        let (code, v) = self.call("GET", &format!("/subjects/{subject}/versions"), None);
        if code != 200 {
            return Vec::new();
        }
        v.as_array().map(|a| a.iter().filter_map(Value::as_i64).collect()).unwrap_or_default()
    }

    /// The schema text of ID `id`.
    pub fn schema(&self, id: u32) -> Option<String> {
        let (code, v) = self.call("GET", &format!("/schemas/ids/{id}"), None);
        (code == 200).then(|| v["schema"].as_str().unwrap_or_default().to_string())
    }

    /// Stops the registry (its in-memory content is gone).
    pub fn stop(&mut self) {
        if let Some(mut java) = self.java.take() {
            kill_and_reap(&mut java);
        }
        if let Some(mut w) = self.watchdog.take() {
            kill_and_reap(&mut w);
        }
    }
}

impl Drop for SchemaRegistry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One registry per cluster of [`super::shared_pair`] (east's, west's), shared by the tests of the
/// binary and started in parallel on first use. Tests must use unique subject names.
pub fn shared_registries() -> &'static (SchemaRegistry, SchemaRegistry) {
    static PAIR: OnceLock<(SchemaRegistry, SchemaRegistry)> = OnceLock::new();
    PAIR.get_or_init(|| {
        std::thread::scope(|s| {
            let east = s.spawn(SchemaRegistry::start);
            let west = s.spawn(SchemaRegistry::start);
            (east.join().expect("east's registry"), west.join().expect("west's registry"))
        })
    })
}

/// `bytes` in the Confluent framing with schema ID `id`.
pub fn framed(id: u32, bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(bytes);
    out
}

/// The schema ID of framed bytes.
pub fn id_of(bytes: &[u8]) -> Option<u32> {
    match bytes {
        [0, a, b, c, d, ..] => Some(u32::from_be_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}
