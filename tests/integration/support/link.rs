//! A long link between ferry and a cluster: a real TCP proxy (Toxiproxy, built by
//! `scripts/toxiproxy.sh` from the Go module proxy on first use, ~35 s once) that adds latency in each
//! direction, and can be cut and restored. The cluster advertises the proxy's port on a listener of its
//! own (`Cluster::start_linked`), so every connection a client opens through the link stays on it.

use std::fs::OpenOptions;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::cluster::run_script;
use super::ports::free_port;
use super::process::{kill_and_reap, spawn_watchdog};
use super::web::try_http_request;

const PROXY: &str = "link";
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// One proxy, `127.0.0.1:port` -> `127.0.0.1:upstream`, with its own Toxiproxy server.
pub struct Link {
    /// Where clients connect.
    pub port: u16,
    /// Where the proxy connects (the cluster's LINK listener).
    pub upstream: u16,
    api: SocketAddr,
    server: Option<Child>,
    watchdog: Option<Child>,
    log: tempfile::NamedTempFile,
}

impl Link {
    /// A proxy to `127.0.0.1:upstream` (which need not listen yet: the proxy connects per client
    /// connection), without latency until [`Link::round_trip`].
    pub fn start(upstream: u16) -> Link {
        let bin = run_script("toxiproxy.sh", &["path"], &[]).trim().to_string();
        let [port, api_port] = [free_port(), free_port()];
        let log = tempfile::Builder::new().prefix("ferry-link-").suffix(".log").tempfile().expect("link log");
        let out = OpenOptions::new().append(true).open(log.path()).expect("open link log");
        let server = Command::new(&bin)
            .args(["-host", "127.0.0.1", "-port", &api_port.to_string()])
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("dup log fd"))
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {bin}: {e}"));
        let watchdog = spawn_watchdog(server.id(), None);
        let link = Link {
            port,
            upstream,
            api: ([127, 0, 0, 1], api_port).into(),
            server: Some(server),
            watchdog: Some(watchdog),
            log,
        };
        let start = Instant::now();
        while !matches!(try_http_request(link.api, "GET", "/version", &[], b""), Ok((200, _))) {
            assert!(start.elapsed() < READY_TIMEOUT, "toxiproxy not ready after {READY_TIMEOUT:?}:\n{}", link.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        let proxy = format!(
            r#"{{"name":"{PROXY}","listen":"127.0.0.1:{port}","upstream":"127.0.0.1:{upstream}","enabled":true}}"#
        );
        link.call("POST", "/proxies", &proxy, 201);
        link
    }

    /// `127.0.0.1:<port>`, the cluster seen through the link.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Sets the link's round trip: half of it added to each direction (replacing what was set).
    pub fn round_trip(&self, rtt: Duration) {
        let half = rtt.as_millis() / 2;
        for stream in ["upstream", "downstream"] {
            let name = format!("latency_{stream}");
            let _ = self.request("DELETE", &format!("/proxies/{PROXY}/toxics/{name}"), "");
            if half > 0 {
                let toxic = format!(
                    r#"{{"name":"{name}","type":"latency","stream":"{stream}","attributes":{{"latency":{half},"jitter":0}}}}"#
                );
                self.call("POST", &format!("/proxies/{PROXY}/toxics"), &toxic, 200);
            }
        }
    }

    /// Cuts the link: every open connection is closed and new ones are refused.
    pub fn cut(&self) {
        self.call("POST", &format!("/proxies/{PROXY}"), r#"{"enabled":false}"#, 200);
    }

    /// Restores a cut link (its latency stays as it was).
    pub fn restore(&self) {
        self.call("POST", &format!("/proxies/{PROXY}"), r#"{"enabled":true}"#, 200);
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    fn call(&self, method: &str, path: &str, body: &str, want: u16) {
        match self.request(method, path, body) {
            Ok((status, _)) if status == want => {}
            Ok((status, answer)) => panic!("toxiproxy {method} {path} {body}: {status} {answer}"),
            Err(e) => panic!("toxiproxy {method} {path}: {e}"),
        }
    }

    fn request(&self, method: &str, path: &str, body: &str) -> std::io::Result<(u16, String)> {
        try_http_request(self.api, method, path, &[("Content-Type", "application/json")], body.as_bytes())
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        for mut child in [self.server.take(), self.watchdog.take()].into_iter().flatten() {
            kill_and_reap(&mut child);
        }
    }
}
