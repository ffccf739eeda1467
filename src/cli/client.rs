//! The `ferry` commands' calls to a running node's HTTP endpoints (`ferry pause`, `resume`, `reload`,
//! `status`), and what each answer means for an operator: done (200), accepted but not complete yet
//! (202), or a failure said in words ([`NodeError`]) instead of a bare status code.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::FlowId;
use crate::http::{self, ClientOptions};

/// Where a node listens and how to reach it: `--url`, `--ca`, `--insecure`, `--token-file`.
#[derive(Clone, Debug)]
pub struct Node {
    /// The listener's base URL, e.g. `http://127.0.0.1:9464` (a trailing `/` is ignored).
    pub url: String,
    pub ca: Option<PathBuf>,
    pub insecure: bool,
    /// The admin token file (the node's `--admin-token-file`), read at every call.
    pub token_file: Option<PathBuf>,
    pub timeout: Duration,
}

/// Why a call did not do what was asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeError {
    /// No answer at all: resolving, connecting, TLS or the exchange failed.
    Unreachable { url: String, why: String },
    /// 401: no token, or not the node's admin token.
    Unauthorized { url: String, reason: String, sent_token: bool },
    /// 403: the node takes no mutating request at all (non-loopback listener without a token file).
    Forbidden { url: String, reason: String },
    /// 404 from a flow's endpoint: the node runs no such flow.
    UnknownFlow { url: String, flow: String, reason: String },
    /// The token file cannot be used.
    Token(String),
    /// Any other answer, with the node's reason.
    Refused { url: String, code: u16, reason: String },
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unreachable { url, why } => write!(f, "cannot reach the node at {url}: {why}"),
            Self::Unauthorized { url, reason, sent_token: false } => write!(
                f,
                "{url}: 401 Unauthorized ({reason}): the node has an admin token; pass its file with \
                 --token-file (or FERRY_ADMIN_TOKEN_FILE)"
            ),
            Self::Unauthorized { url, reason, sent_token: true } => {
                write!(f, "{url}: 401 Unauthorized ({reason}): the token in --token-file is not the node's admin token")
            }
            Self::Forbidden { url, reason } => write!(
                f,
                "{url}: 403 Forbidden ({reason}): this node takes no mutating request; run it with \
                 --admin-token-file, or call it on a loopback listener"
            ),
            Self::UnknownFlow { url, flow, reason } => {
                write!(f, "{url}: 404: the node runs no flow {flow} ({reason}); `ferry status` lists its flows")
            }
            Self::Token(why) => write!(f, "{why}"),
            Self::Refused { url, code, reason } => write!(f, "{url}: HTTP {code}: {reason}"),
        }
    }
}

impl std::error::Error for NodeError {}

/// The answer to a pause or resume the node took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PauseAnswer {
    pub flow: String,
    pub paused: bool,
    /// 200: recorded for the deployment and applied on this node. 202: one of the two is not done yet.
    pub complete: bool,
    /// Recorded in the control topic, which every node of the deployment follows.
    pub recorded: bool,
    /// This node's copier applied it (stopped fetching with its in-flight records settled, or resumed).
    pub applied: bool,
    /// A later decision the other way was recorded first and is in force (the detail names it).
    pub overtaken: bool,
    /// What is not done yet (202).
    pub detail: Option<String>,
}

impl fmt::Display for PauseAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = if self.paused { "paused" } else { "resumed" };
        if self.complete {
            write!(f, "{}: {verb}, recorded for the deployment and applied on this node", self.flow)
        } else {
            write!(
                f,
                "{}: {} accepted but not complete (202): recorded for the deployment: {}, applied on this node: {}",
                self.flow,
                if self.paused { "pause" } else { "resume" },
                if self.recorded { "yes" } else { "NO" },
                if self.applied {
                    "yes"
                } else if self.overtaken {
                    "no"
                } else {
                    "not yet"
                },
            )?;
            if let Some(d) = &self.detail {
                write!(f, "; {d}")?;
            }
            Ok(())
        }
    }
}

/// A reload's answer (200, or 422 for a refused directory): the node's JSON as it sent it.
#[derive(Clone, Debug, PartialEq)]
pub struct ReloadAnswer {
    pub code: u16,
    pub body: serde_json::Value,
}

/// `raw` percent-encoded for a URL path segment: every byte but RFC 3986's unreserved characters, so
/// `east->west` is `east-%3Ewest`.
pub fn percent_encode(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for b in raw.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Whether the URL's host is this machine (a token sent in clear there stays on it).
fn is_loopback_url(url: &str) -> bool {
    let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://")).unwrap_or(url);
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

impl Node {
    fn base(&self) -> &str {
        self.url.trim_end_matches('/')
    }

    /// The token to send, if a token file was given.
    fn token(&self) -> Result<Option<String>, NodeError> {
        let Some(file) = &self.token_file else { return Ok(None) };
        let token = http::read_token(file).map_err(NodeError::Token)?;
        if self.url.starts_with("http://") && !is_loopback_url(&self.url) {
            eprintln!(
                "warning: sending the admin token over plain http to {}; serve the node with --tls-cert",
                self.url
            );
        }
        Ok(Some(token))
    }

    /// `method path`; the status code and the body as JSON (`null` if there was none).
    fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
    ) -> Result<(String, u16, serde_json::Value), NodeError> {
        let url = format!("{}{path}", self.base());
        let opts =
            ClientOptions { ca: self.ca.as_deref(), insecure: self.insecure, bearer: token, timeout: self.timeout };
        let (code, body) =
            http::request(method, &url, &opts).map_err(|why| NodeError::Unreachable { url: url.clone(), why })?;
        let json = if body.iter().all(u8::is_ascii_whitespace) {
            serde_json::Value::Null
        } else {
            serde_json::from_slice(&body).map_err(|e| NodeError::Refused {
                url: url.clone(),
                code,
                reason: format!("the answer is not JSON ({e}): is this a ferry node?"),
            })?
        };
        Ok((url, code, json))
    }

    /// A mutating call: the token is sent, and 401/403 become their errors.
    fn post(&self, path: &str) -> Result<(String, u16, serde_json::Value), NodeError> {
        let token = self.token()?;
        let (url, code, body) = self.call("POST", path, token.as_deref())?;
        let reason = reason(&body);
        match code {
            401 => Err(NodeError::Unauthorized { url, reason, sent_token: token.is_some() }),
            403 => Err(NodeError::Forbidden { url, reason }),
            _ => Ok((url, code, body)),
        }
    }

    /// `POST /flows/{flow}/pause` (or `/resume`).
    pub fn set_paused(&self, flow: &FlowId, paused: bool) -> Result<PauseAnswer, NodeError> {
        let action = if paused { "pause" } else { "resume" };
        let (url, code, body) = self.post(&format!("/flows/{}/{action}", percent_encode(&flow.to_string())))?;
        match code {
            200 | 202 => Ok(PauseAnswer {
                flow: flow.to_string(),
                paused,
                complete: code == 200,
                recorded: body["recorded"].as_bool().unwrap_or(code == 200),
                applied: body["applied"].as_bool().unwrap_or(code == 200),
                overtaken: body["overtaken"].as_bool().unwrap_or(false),
                detail: body["detail"].as_str().map(str::to_string),
            }),
            404 => Err(NodeError::UnknownFlow { url, flow: flow.to_string(), reason: reason(&body) }),
            _ => Err(NodeError::Refused { url, code, reason: reason(&body) }),
        }
    }

    /// `POST /reload`, or `POST /reload?dry_run=true`: the node's answer, 200 or 422.
    pub fn reload(&self, dry_run: bool) -> Result<ReloadAnswer, NodeError> {
        let (url, code, body) = self.post(if dry_run { "/reload?dry_run=true" } else { "/reload" })?;
        match code {
            // A node from before dry runs ignores the query and reloads for real: its answer has no
            // `dry_run`, which the caller must not take for a plan.
            200 | 422 if dry_run && body["dry_run"] != true => Err(NodeError::Refused {
                url,
                code,
                reason: "the node does not know dry runs (it predates them) and may have reloaded for real".into(),
            }),
            200 | 422 => Ok(ReloadAnswer { code, body }),
            _ => Err(NodeError::Refused { url, code, reason: reason(&body) }),
        }
    }

    /// `GET /flows`.
    pub fn flows(&self) -> Result<serde_json::Value, NodeError> {
        let (url, code, body) = self.call("GET", "/flows", None)?;
        match code {
            200 => Ok(body),
            _ => Err(NodeError::Refused { url, code, reason: reason(&body) }),
        }
    }
}

/// The node's `{"error": reason}`, or a placeholder.
fn reason(body: &serde_json::Value) -> String {
    body["error"].as_str().map_or_else(|| "no reason given".to_string(), str::to_string)
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;

    use super::*;

    #[test]
    fn flow_ids_are_percent_encoded() {
        assert_eq!(percent_encode("east->west"), "east-%3Ewest");
        assert_eq!(percent_encode("a_b->c-d"), "a_b-%3Ec-d");
        assert_eq!(percent_encode("a b/c"), "a%20b%2Fc");
    }

    #[test]
    fn loopback_urls_are_recognised() {
        for url in ["http://127.0.0.1:9464", "http://localhost:9464/", "http://[::1]:9464", "http://127.0.0.2"] {
            assert!(is_loopback_url(url), "{url}");
        }
        for url in ["http://10.0.0.1:9464", "http://ferry.example:9464", "http://[fe80::1]:1"] {
            assert!(!is_loopback_url(url), "{url}");
        }
    }

    /// A node that answers one request with `code` and `body`; returns its URL and the request it got.
    fn fake_node(code: u16, body: &'static str) -> (String, std::thread::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let handle = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept");
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).expect("read");
            let head = format!(
                "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            s.write_all(head.as_bytes()).expect("write");
            String::from_utf8_lossy(&buf[..n]).to_string()
        });
        (url, handle)
    }

    fn node(url: &str, token_file: Option<PathBuf>) -> Node {
        Node { url: url.to_string(), ca: None, insecure: false, token_file, timeout: Duration::from_secs(5) }
    }

    fn flow() -> FlowId {
        "east->west".parse().expect("flow id")
    }

    #[test]
    fn a_complete_pause_and_an_accepted_one_are_told_apart() {
        let (url, req) = fake_node(200, r#"{"flow":"east->west","paused":true,"applied":true,"recorded":true}"#);
        let done = node(&url, None).set_paused(&flow(), true).expect("200");
        let request = req.join().expect("request");
        assert!(request.starts_with("POST /flows/east-%3Ewest/pause HTTP/1.1\r\n"), "{request}");
        assert!(request.contains("Content-Length: 0\r\n") && !request.contains("Authorization"), "{request}");
        assert!(done.complete && done.applied && done.recorded, "{done:?}");
        assert_eq!(done.to_string(), "east->west: paused, recorded for the deployment and applied on this node");

        let (url, _req) = fake_node(
            202,
            r#"{"flow":"east->west","paused":true,"applied":true,"recorded":false,"detail":"not recorded for the deployment (this node only, until it restarts): timed out"}"#,
        );
        let partial = node(&url, None).set_paused(&flow(), true).expect("202");
        assert!(!partial.complete && partial.applied && !partial.recorded, "{partial:?}");
        let text = partial.to_string();
        assert!(text.contains("202") && text.contains("recorded for the deployment: NO"), "{text}");
        assert!(text.contains("this node only, until it restarts"), "{text}");

        let (url, _req) = fake_node(
            202,
            r#"{"flow":"east->west","paused":false,"applied":false,"recorded":true,"overtaken":true,"detail":"overtaken by a later decision recorded in the control topic (paused by n2 at 2026-11-30T17:40:30Z): every node follows that one"}"#,
        );
        let overtaken = node(&url, None).set_paused(&flow(), false).expect("202");
        assert!(!overtaken.complete && overtaken.recorded && overtaken.overtaken, "{overtaken:?}");
        let text = overtaken.to_string();
        assert!(text.contains("resume accepted but not complete (202)"), "{text}");
        assert!(text.contains("applied on this node: no;") && text.contains("paused by n2"), "{text}");
    }

    #[test]
    fn refusals_are_said_in_words() {
        let dir = tempfile::tempdir().expect("dir");
        let token = dir.path().join("token");
        std::fs::write(&token, "s3cret\n").expect("write");

        let (url, req) = fake_node(401, r#"{"error":"the bearer token is not the admin token"}"#);
        let e = node(&url, Some(token.clone())).set_paused(&flow(), false).expect_err("401");
        assert!(req.join().expect("request").contains("Authorization: Bearer s3cret\r\n"));
        assert!(matches!(e, NodeError::Unauthorized { sent_token: true, .. }), "{e:?}");
        assert!(e.to_string().contains("is not the node's admin token") && !e.to_string().contains("s3cret"));

        let (url, _) = fake_node(401, r#"{"error":"this endpoint needs `Authorization: Bearer <admin token>`"}"#);
        let e = node(&url, None).reload(false).expect_err("401");
        assert!(e.to_string().contains("--token-file (or FERRY_ADMIN_TOKEN_FILE)"), "{e}");

        let (url, _) = fake_node(
            403,
            r#"{"error":"mutating endpoints are served on a non-loopback listener only with --admin-token-file"}"#,
        );
        let e = node(&url, None).reload(true).expect_err("403");
        assert!(matches!(e, NodeError::Forbidden { .. }) && e.to_string().contains("403"), "{e}");

        let (url, _) = fake_node(404, r#"{"error":"no running flow east->west"}"#);
        let e = node(&url, None).set_paused(&flow(), true).expect_err("404");
        assert!(e.to_string().contains("runs no flow east->west"), "{e}");

        let missing = node("http://127.0.0.1:9", Some(dir.path().join("nope"))).reload(false).expect_err("no file");
        assert!(matches!(missing, NodeError::Token(_)) && missing.to_string().contains("nope"), "{missing}");

        // A port nobody listens on: bind one, learn its number, close it.
        let port = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
        let e = node(&format!("http://127.0.0.1:{port}"), None).flows().expect_err("unreachable");
        assert!(e.to_string().starts_with("cannot reach the node at http://127.0.0.1:"), "{e}");
    }

    #[test]
    fn a_dry_run_answered_by_a_real_reload_is_not_taken_for_a_plan() {
        let (url, _) = fake_node(200, r#"{"trigger":"http","result":"applied","started":[]}"#);
        let e = node(&url, None).reload(true).expect_err("not a plan");
        assert!(e.to_string().contains("does not know dry runs"), "{e}");
        let (url, req) = fake_node(200, r#"{"dry_run":true,"result":"would_apply","would_restart":["east->west"]}"#);
        let plan = node(&url, None).reload(true).expect("plan");
        assert!(req.join().expect("request").starts_with("POST /reload?dry_run=true HTTP/1.1"));
        assert_eq!(plan.body["would_restart"][0], "east->west");
    }
}
