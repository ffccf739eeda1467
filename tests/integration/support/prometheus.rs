//! A real Prometheus server for tests, and ferry's Grafana dashboards read as lists of queries.
//!
//! - [`Prometheus`] runs Debian's `prometheus` binary (`apt-get install prometheus`; `.ci/run` installs
//!   it) on a free loopback port with a temp config that scrapes the given targets every second and
//!   loads the given rule files, its TSDB and log in a temp dir, and a watchdog that kills it with the
//!   test process. [`Prometheus::query`], [`Prometheus::series`] and [`Prometheus::get`] speak its HTTP
//!   API (`/api/v1/...`) over a plain HTTP/1.0 socket (no HTTP client crate).
//! - [`dashboards`], [`panel_queries`], [`variables`] and [`substitute`] turn the JSON under
//!   `dashboards/grafana/` into PromQL as Grafana would send it: every target of every panel (rows
//!   included), with `$var` / `${var}` replaced.
//!
//! It does not own what a test expects from the answers: tests decide which queries must return data.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::process::{kill_and_reap, spawn_watchdog};
use super::{free_port, repo_root, tail, wait_for};

/// How long [`Prometheus::start`] waits for `/-/ready`.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// One running Prometheus server. Dropping it kills the process and removes its temp dir.
pub struct Prometheus {
    child: Option<Child>,
    watchdog: Option<Child>,
    addr: SocketAddr,
    /// Holds prometheus.yml, data/ and prometheus.log.
    dir: tempfile::TempDir,
}

/// The `prometheus` binary: `$FERRY_PROMETHEUS` if set, else `prometheus` on the PATH.
pub fn prometheus_bin() -> PathBuf {
    std::env::var_os("FERRY_PROMETHEUS").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("prometheus"))
}

/// `dashboards/` of the repository.
pub fn dashboards_dir() -> PathBuf {
    repo_root().join("dashboards")
}

impl Prometheus {
    /// The `namespace` label every scraped series gets, as the Prometheus Operator adds it on Kubernetes
    /// (the dashboards' `$namespace` variable lists it).
    pub const NAMESPACE: &'static str = "ferry-test";

    /// Starts Prometheus scraping `targets` (job `ferry`, path `/metrics`, label `namespace`
    /// [`Prometheus::NAMESPACE`]) every `scrape_interval`
    /// (also its rule evaluation interval, e.g. "1s") with `rule_files` loaded, and waits until it
    /// is ready. Panics with its log if it does not start.
    pub fn start(targets: &[SocketAddr], rule_files: &[&Path], scrape_interval: &str) -> Prometheus {
        let dir = tempfile::Builder::new().prefix("ferry-prometheus-").tempdir().expect("prometheus temp dir");
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let targets: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
        let rules: Vec<String> = rule_files.iter().map(|r| format!("  - \"{}\"\n", r.display())).collect();
        let config = format!(
            "global:\n  scrape_interval: {scrape_interval}\n  scrape_timeout: {scrape_interval}\n  \
             evaluation_interval: {scrape_interval}\nrule_files:\n{}scrape_configs:\n  - job_name: ferry\n    \
             metrics_path: /metrics\n    static_configs:\n      - targets: [{}]\n        labels: {{namespace: {}}}\n",
            rules.concat(),
            targets.join(", "),
            Self::NAMESPACE
        );
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config).expect("write prometheus.yml");
        let log = File::create(dir.path().join("prometheus.log")).expect("create prometheus.log");
        let bin = prometheus_bin();
        let child = Command::new(&bin)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--storage.tsdb.retention.time=1h")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log fd"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("spawn {}: {e} (install it: apt-get install prometheus; .ci/run does)", bin.display())
            });
        let watchdog = spawn_watchdog(child.id(), Some(dir.path()));
        let mut prometheus = Prometheus { child: Some(child), watchdog: Some(watchdog), addr, dir };
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_for(READY_TIMEOUT, "prometheus /-/ready", || {
                if let Some(status) = prometheus.child.as_mut().and_then(|c| c.try_wait().expect("try_wait")) {
                    panic!("prometheus exited ({status})");
                }
                matches!(http(addr, "/-/ready"), Ok((200, _)))
            })
        }));
        if let Err(e) = result {
            eprintln!("prometheus log tail:\n{}", tail(&prometheus.log(), 40));
            std::panic::resume_unwind(e);
        }
        prometheus
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Everything Prometheus logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// `GET path_and_query` on the API; the `data` of a `"status": "success"` answer, or the error
    /// (HTTP status, errorType, error) as text.
    pub fn get(&self, path_and_query: &str) -> Result<Value, String> {
        let (status, body) = http(self.addr, path_and_query)?;
        let json: Value =
            serde_json::from_str(&body).map_err(|e| format!("HTTP {status}, not JSON ({e}): {}", tail(&body, 5)))?;
        if json["status"] == "success" {
            Ok(json["data"].clone())
        } else {
            Err(format!("HTTP {status}: {}: {}", json["errorType"].as_str().unwrap_or("?"), json["error"]))
        }
    }

    /// An instant query (`/api/v1/query`) now: the result series (vector or matrix), or a scalar
    /// or string result as one element.
    pub fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let data = self.get(&format!("/api/v1/query?query={}", encode(expr)))?;
        match data["resultType"].as_str() {
            Some("vector" | "matrix") => Ok(data["result"].as_array().cloned().unwrap_or_default()),
            Some(_) => Ok(vec![data["result"].clone()]),
            None => Err(format!("no resultType in {data}")),
        }
    }

    /// The first value of an instant query as a number (`None` when it returned nothing).
    pub fn value(&self, expr: &str) -> Option<f64> {
        let series = self.query(expr).ok()?;
        let v = series.first()?;
        let v = if v["value"].is_array() { &v["value"][1] } else { &v[1] };
        v.as_str().and_then(|s| s.parse().ok())
    }

    /// The label sets of the series matching `selector` over the last `lookback` (`/api/v1/series`).
    pub fn series(&self, selector: &str, lookback: Duration) -> Result<Vec<BTreeMap<String, String>>, String> {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs_f64();
        let data = self.get(&format!(
            "/api/v1/series?match[]={}&start={:.3}&end={now:.3}",
            encode(selector),
            now - lookback.as_secs_f64()
        ))?;
        let sets = data.as_array().cloned().unwrap_or_default();
        Ok(sets
            .iter()
            .map(|s| {
                s.as_object()
                    .map(|o| o.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
                    .unwrap_or_default()
            })
            .collect())
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child);
        }
        if let Some(mut w) = self.watchdog.take() {
            kill_and_reap(&mut w);
        }
        if std::thread::panicking() {
            eprintln!("prometheus log tail:\n{}", tail(&self.log(), 30));
        }
    }
}

/// `GET path` over HTTP/1.0 (the server closes the connection after the answer): status and body.
pub fn http(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let mut stream =
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| format!("connect {addr}: {e}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").map_err(|e| format!("send to {addr}: {e}"))?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).map_err(|e| format!("read from {addr}: {e}"))?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").ok_or_else(|| format!("no HTTP answer from {addr}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line: {head}"))?;
    Ok((status, body.to_string()))
}

/// Percent-encodes everything but RFC 3986's unreserved characters (for a query-string value).
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Every dashboard under `dashboards/grafana/` as (file name, parsed JSON), sorted by name.
pub fn dashboards() -> Vec<(String, Value)> {
    let dir = dashboards_dir().join("grafana");
    let mut out: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
            let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", p.display()));
            (p.file_name().expect("file name").to_string_lossy().into_owned(), json)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Every panel of a dashboard, rows' nested panels included, rows themselves excluded.
pub fn panels(dashboard: &Value) -> Vec<&Value> {
    fn walk<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for p in list.as_array().into_iter().flatten() {
            if p["type"] == "row" {
                walk(&p["panels"], out);
            } else {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// One query of one panel.
#[derive(Clone, Debug)]
pub struct PanelQuery {
    pub panel_id: i64,
    pub panel: String,
    pub ref_id: String,
    /// The PromQL as written in the dashboard (with `$variables`).
    pub expr: String,
}

/// Every target of every panel of `dashboard` (a target without `expr` is reported with an empty one).
pub fn panel_queries(dashboard: &Value) -> Vec<PanelQuery> {
    panels(dashboard)
        .into_iter()
        .flat_map(|p| {
            p["targets"].as_array().into_iter().flatten().map(move |t| PanelQuery {
                panel_id: p["id"].as_i64().unwrap_or(-1),
                panel: p["title"].as_str().unwrap_or_default().to_string(),
                ref_id: t["refId"].as_str().unwrap_or_default().to_string(),
                expr: t["expr"].as_str().unwrap_or_default().to_string(),
            })
        })
        .collect()
}

/// A template variable: its name, type and, for a query variable, its PromQL-ish query (e.g.
/// `label_values(ferry_flow_state, flow)`).
#[derive(Clone, Debug)]
pub struct Variable {
    pub name: String,
    pub kind: String,
    pub query: Option<String>,
}

pub fn variables(dashboard: &Value) -> Vec<Variable> {
    dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| {
            let query = match &v["query"] {
                Value::String(s) if v["type"] == "query" => Some(s.clone()),
                Value::Object(o) => o.get("query").and_then(Value::as_str).map(str::to_string),
                _ => None,
            };
            Variable {
                name: v["name"].as_str().unwrap_or_default().to_string(),
                kind: v["type"].as_str().unwrap_or_default().to_string(),
                query,
            }
        })
        .collect()
}

/// `label_values(SELECTOR, LABEL)` split into its selector and label.
pub fn label_values(query: &str) -> Option<(String, String)> {
    let inner = query.trim().strip_prefix("label_values(")?.strip_suffix(')')?;
    let (selector, label) = inner.rsplit_once(',')?;
    Some((selector.trim().to_string(), label.trim().to_string()))
}

/// `expr` with every `$name`, `${name}` and `[[name]]` replaced from `values`; the names that
/// `values` lacks are an error (all of them listed).
pub fn substitute(expr: &str, values: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::with_capacity(expr.len());
    let mut unknown = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find(['$', '[']) {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        let (name, len) = if let Some(body) = after.strip_prefix("${") {
            match body.find('}') {
                Some(end) => (body[..end].split(':').next().unwrap_or_default(), end + 3),
                None => ("", 0),
            }
        } else if let Some(body) = after.strip_prefix("[[") {
            match body.find("]]") {
                Some(end) => (&body[..end], end + 4),
                None => ("", 0),
            }
        } else if let Some(body) = after.strip_prefix('$') {
            let end = body.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(body.len());
            (&body[..end], end + 1)
        } else {
            ("", 0)
        };
        if name.is_empty() {
            let c = after.chars().next().expect("non-empty");
            out.push(c);
            rest = &after[c.len_utf8()..];
            continue;
        }
        match values.get(name) {
            Some(v) => out.push_str(v),
            None => unknown.push(name.to_string()),
        }
        rest = &after[len..];
    }
    out.push_str(rest);
    if unknown.is_empty() { Ok(out) } else { Err(format!("unknown variables {unknown:?} in {expr}")) }
}

/// The metric names an expression reads (`ferry_*` and `process_*` identifiers; a histogram's
/// `_bucket` kept, since that is the series name).
pub fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let start_ok = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if start_ok && (expr[i..].starts_with("ferry_") || expr[i..].starts_with("process_")) {
            let end = expr[i..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(expr.len(), |e| i + e);
            let name = expr[i..end].to_string();
            if !names.contains(&name) {
                names.push(name);
            }
            i = end;
        } else {
            i += 1;
        }
    }
    names
}

/// Escapes a literal for use inside a PromQL regex matcher (`=~"..."`), as Grafana does.
pub fn regex_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if r"\.+*?()|[]{}^$".contains(c) {
            out.push_str(r"\\");
        }
        out.push(c);
    }
    out
}
