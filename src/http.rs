//! The node's HTTP interface: `/health` (the node and every flow), `/flows` (the flows and the last
//! reload, JSON), `/flows/{id}` (one flow), `/metrics` (Prometheus text), `POST /reload` (`?dry_run=true`:
//! what it would do, changing nothing) and `POST /flows/{id}/pause|resume`; and the plain client the
//! `ferry` commands use to call them ([`request`]).
//!
//! What it owns besides the handlers is *admission* ([`admit`], in front of every route):
//! - Reads (`GET`, `HEAD`) are open, for scrapers and probes.
//! - Everything else mutates the node and needs authority: with `--admin-token-file`, a request must
//!   carry `Authorization: Bearer <token>` (compared in constant time); without a token file, mutating
//!   requests are accepted only on a loopback listener, where only local processes can send them.
//! - A request body larger than [`MAX_BODY`], or one without a length, and headers over [`MAX_HEADERS`]
//!   are refused before any handler.
//!
//! The guard keys on the method, not the path, so a new mutating endpoint (e.g. `POST /flows/{id}/pause`)
//! is guarded by being registered as a `web::post()` route: nothing to add. Its handler should parse the
//! id with [`flow_id`], which answers 400 for a malformed one.
//!
//! Nothing here prints configuration values. Unknown paths and wrong methods get a JSON error, never a
//! panic; a client that sends its request too slowly is cut off after [`REQUEST_TIMEOUT`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use actix::Addr;
use actix_web::body::BoxBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::{Method, StatusCode, header};
use actix_web::middleware::{Next, from_fn};
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};

use crate::config::FlowId;
pub use crate::http_client::{ClientOptions, ClientTls, get, probe, request};
use crate::metrics::METRICS;
use crate::node::{Node, Pause};
use crate::reload::{PlanReload, PlanResult, Reload, ReloadResult, Trigger};
use crate::status::{FlowState, StatusBoard};

/// The largest request body accepted (no endpoint reads one today).
pub const MAX_BODY: u64 = 64 * 1024;
/// The most header bytes (names and values) a request may carry; actix's own limit is far higher.
pub const MAX_HEADERS: usize = 16 * 1024;
/// How long a client may take to send its request head.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How the listener is set up, from `ferry run`'s flags.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    pub listen: SocketAddr,
    /// `--admin-token-file`: mutating requests need this bearer token.
    pub admin_token_file: Option<PathBuf>,
    /// `--tls-cert` and `--tls-key` (PEM): serve HTTPS instead of HTTP.
    pub tls: Option<TlsFiles>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// Certificate chain, leaf first.
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Who may send mutating requests; shared by every request.
#[derive(Clone, Debug)]
struct Admission {
    /// Re-read on every mutating request, so a rotated token applies without a restart.
    token_file: Option<PathBuf>,
    loopback: bool,
}

/// Reads an admin token file: its content without the trailing newline, which must not be empty. The
/// error names the file, never its content.
pub fn read_token(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the admin token file {}: {e}", path.display()))?;
    let token = text.trim_end_matches(['\n', '\r']);
    if token.trim().is_empty() {
        return Err(format!("the admin token file {} is empty", path.display()));
    }
    Ok(token.to_string())
}

/// Constant-time equality of two tokens of any length: their SHA-256 digests are compared with
/// OpenSSL's `CRYPTO_memcmp`, so neither the position of the first difference nor the length leaks.
pub fn tokens_match(given: &[u8], expected: &[u8]) -> bool {
    openssl::memcmp::eq(&openssl::sha::sha256(given), &openssl::sha::sha256(expected))
}

impl Admission {
    /// `None` if `req` may go on to its handler, or the refusal to send instead.
    fn check(&self, req: &HttpRequest) -> Option<HttpResponse> {
        if let Some(refusal) = size_refusal(req) {
            return Some(refusal);
        }
        if matches!(*req.method(), Method::GET | Method::HEAD) {
            return None;
        }
        let Some(file) = &self.token_file else {
            return (!self.loopback).then(|| {
                error(
                    StatusCode::FORBIDDEN,
                    "mutating endpoints are served on a non-loopback listener only with --admin-token-file",
                )
            });
        };
        let expected = match read_token(file) {
            Ok(t) => t,
            Err(e) => {
                tracing::error!(error = %e, "refusing a mutating request: the admin token cannot be read");
                return Some(error(StatusCode::SERVICE_UNAVAILABLE, "the admin token cannot be read; see the log"));
            }
        };
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(str::trim);
        match given {
            Some(token) if tokens_match(token.as_bytes(), expected.as_bytes()) => None,
            Some(_) => Some(unauthorized("the bearer token is not the admin token", true)),
            None => Some(unauthorized("this endpoint needs `Authorization: Bearer <admin token>`", false)),
        }
    }
}

/// 431 for headers over [`MAX_HEADERS`], 413 for a declared body over [`MAX_BODY`], 411 for a body
/// without a declared length (chunked).
fn size_refusal(req: &HttpRequest) -> Option<HttpResponse> {
    let headers = req.headers();
    if headers.iter().map(|(k, v)| k.as_str().len() + v.len()).sum::<usize>() > MAX_HEADERS {
        return Some(error(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            format!("request headers are limited to {MAX_HEADERS} bytes"),
        ));
    }
    if headers.contains_key(header::TRANSFER_ENCODING) {
        return Some(error(StatusCode::LENGTH_REQUIRED, "send a Content-Length (no endpoint takes a streamed body)"));
    }
    let length = headers.get(header::CONTENT_LENGTH)?;
    match length.to_str().ok().and_then(|l| l.trim().parse::<u64>().ok()) {
        Some(n) if n <= MAX_BODY => None,
        Some(_) => {
            Some(error(StatusCode::PAYLOAD_TOO_LARGE, format!("request bodies are limited to {MAX_BODY} bytes")))
        }
        None => Some(error(StatusCode::BAD_REQUEST, "malformed Content-Length")),
    }
}

fn unauthorized(reason: &str, invalid: bool) -> HttpResponse {
    let challenge = if invalid { "Bearer realm=\"ferry\", error=\"invalid_token\"" } else { "Bearer realm=\"ferry\"" };
    let mut resp = error(StatusCode::UNAUTHORIZED, reason);
    resp.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static(challenge));
    resp
}

/// The middleware in front of every route (see the module doc).
async fn admit(req: ServiceRequest, next: Next<BoxBody>) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let refusal = req.app_data::<web::Data<Admission>>().and_then(|a| a.check(req.request()));
    match refusal {
        Some(resp) => Ok(req.into_response(resp)),
        None => next.call(req).await,
    }
}

/// A JSON error body: `{"error": reason}`.
pub fn error(status: StatusCode, reason: impl Into<String>) -> HttpResponse {
    HttpResponse::build(status).json(serde_json::json!({ "error": reason.into() }))
}

/// The flow id of a path segment (`east->west`, percent-decoded by actix), or why it is malformed. For
/// every `/flows/{id}...` handler, which answers `error(StatusCode::BAD_REQUEST, why)` on `Err(why)`.
pub fn flow_id(raw: &str) -> Result<FlowId, String> {
    let bad = |why: &str| format!("malformed flow id: {why}; expected SOURCE->TARGET");
    if raw.len() > 512 {
        return Err(bad("too long"));
    }
    let id: FlowId = raw.parse().map_err(|_| bad("no `->` between two cluster aliases"))?;
    for alias in [&id.source, &id.target] {
        if crate::config::valid_alias(alias).is_err() {
            return Err(bad("cluster aliases have letters, digits, `_` and `-` only"));
        }
    }
    Ok(id)
}

async fn health(status: web::Data<StatusBoard>) -> HttpResponse {
    let flows = status.snapshot();
    let healthy =
        flows.values().all(|f| matches!(f.state, FlowState::Running | FlowState::Starting | FlowState::Stopped));
    let body = serde_json::json!({
        "status": if healthy { "ok" } else { "degraded" },
        "flows": flows,
        "last_reload": status.last_reload(),
    });
    // Degraded flows are reported, not hidden, but the node itself is up: 200 either way.
    HttpResponse::Ok().json(body)
}

async fn flows(status: web::Data<StatusBoard>) -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({
        "flows": status.snapshot(),
        "last_reload": status.last_reload(),
    }))
}

/// One flow's status; 400 for a malformed id, 404 for an unknown one.
async fn one_flow(status: web::Data<StatusBoard>, id: web::Path<String>) -> HttpResponse {
    let id = match flow_id(&id) {
        Ok(id) => id.to_string(),
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    match status.snapshot().get(&id) {
        Some(flow) => HttpResponse::Ok().json(flow),
        None => error(StatusCode::NOT_FOUND, format!("no flow {id}")),
    }
}

/// Readiness: the node serves its API and has loaded its flows directory (the startup reload is done).
/// A flow that cannot run (a cluster away, a missing right) does not make the node unready: restarting
/// or withholding the pod would not bring the cluster back, and with every pod unready a rollout or a
/// node drain could not proceed. Such flows are listed with their reasons (`flows`), as `/flows` and
/// `ferry_flow_state` show them degraded. 503 only before the flows are loaded.
async fn ready(status: web::Data<StatusBoard>) -> HttpResponse {
    let not_running: Vec<serde_json::Value> = status
        .snapshot()
        .values()
        .filter(|f| f.enabled && !matches!(f.state, FlowState::Running | FlowState::Paused))
        .map(|f| {
            let why: Vec<String> = f
                .actors
                .iter()
                .filter_map(|(a, s)| {
                    s.last_error
                        .as_ref()
                        .filter(|_| s.state != crate::status::ActorState::Running)
                        .map(|e| format!("{a}: {e}"))
                })
                .collect();
            serde_json::json!({ "flow": f.id, "state": f.state, "reasons": why })
        })
        .collect();
    if status.last_reload().is_some() {
        HttpResponse::Ok().json(serde_json::json!({ "ready": true, "flows": not_running }))
    } else {
        HttpResponse::ServiceUnavailable().json(serde_json::json!({
            "ready": false, "reason": "the flows directory is not loaded yet", "flows": not_running,
        }))
    }
}

async fn set_paused(node: web::Data<Addr<Node>>, id: web::Path<String>, paused: bool) -> HttpResponse {
    let flow = match flow_id(&id) {
        Ok(id) => id,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    match node.send(Pause { flow: flow.clone(), paused }).await {
        // 200: recorded for the deployment, and this node's copier stopped fetching (pause) with what it
        // had in flight settled. 202: one of the two is not done yet, or a later decision the other way
        // was recorded before this one took effect here (the detail says which).
        Ok(Ok(outcome)) => {
            let mut body = serde_json::json!({
                "flow": flow.to_string(), "paused": paused, "applied": outcome.applied,
                "recorded": outcome.recorded.is_ok(), "overtaken": outcome.overtaken.is_some(),
            });
            let mut detail = Vec::new();
            if let Err(e) = &outcome.recorded {
                detail.push(format!("not recorded for the deployment (this node only, until it restarts): {e}"));
            }
            if let Some(later) = &outcome.overtaken {
                detail.push(format!(
                    "overtaken by a later decision recorded in the control topic ({later}): every node follows that one"
                ));
            } else if !outcome.applied {
                detail.push("this node's copier has not confirmed it yet (see /flows)".to_string());
            }
            if detail.is_empty() {
                HttpResponse::Ok().json(body)
            } else {
                body["detail"] = serde_json::Value::String(detail.join("; "));
                HttpResponse::Accepted().json(body)
            }
        }
        Ok(Err(why)) => error(StatusCode::NOT_FOUND, why),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, format!("the node did not answer: {e}")),
    }
}

/// Stop fetching the flow's source (positions kept; it stays paused across reloads until resumed).
async fn pause(node: web::Data<Addr<Node>>, id: web::Path<String>) -> HttpResponse {
    set_paused(node, id, true).await
}

async fn resume(node: web::Data<Addr<Node>>, id: web::Path<String>) -> HttpResponse {
    set_paused(node, id, false).await
}

async fn metrics(status: web::Data<StatusBoard>) -> HttpResponse {
    // Flow states and heartbeat ages as of this scrape, not of the node's last one-second tick.
    METRICS.refresh(&status.snapshot());
    HttpResponse::Ok().content_type("text/plain; version=0.0.4; charset=utf-8").body(METRICS.render())
}

/// Whether `POST /reload`'s query asks for a dry run. Anything but `dry_run=true|false` (or `1|0`, or a
/// bare `dry_run`) is refused: a misspelt `dryrun=true` or `dry_run=yes` must not reload for real.
pub fn reload_dry_run(query: &str) -> Result<bool, String> {
    let pairs = web::Query::<Vec<(String, String)>>::from_query(query)
        .map_err(|e| format!("malformed query: {e}"))?
        .into_inner();
    let mut dry_run = false;
    for (key, value) in pairs {
        if key != "dry_run" {
            return Err(format!("unknown query parameter `{key}`: POST /reload takes only dry_run=true|false"));
        }
        dry_run = match value.as_str() {
            "true" | "1" | "" => true,
            "false" | "0" => false,
            _ => return Err(format!("dry_run must be true or false, not `{value}`")),
        };
    }
    Ok(dry_run)
}

/// Reload the flows directory now; answers with what the reload did (422 when the set was refused).
/// With `?dry_run=true`, answers what it would do and changes nothing (422 likewise).
async fn reload(node: web::Data<Addr<Node>>, req: HttpRequest) -> HttpResponse {
    let dry_run = match reload_dry_run(req.query_string()) {
        Ok(d) => d,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    if dry_run {
        return match node.send(PlanReload).await {
            Ok(plan) => {
                let status = match plan.result {
                    PlanResult::Rejected => StatusCode::UNPROCESSABLE_ENTITY,
                    PlanResult::WouldApply => StatusCode::OK,
                };
                HttpResponse::build(status).json(plan)
            }
            Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, format!("the node did not answer: {e}")),
        };
    }
    match node.send(Reload { trigger: Trigger::Http }).await {
        Ok(outcome) => {
            let status = match outcome.result {
                ReloadResult::Rejected => StatusCode::UNPROCESSABLE_ENTITY,
                _ => StatusCode::OK,
            };
            HttpResponse::build(status).json(outcome)
        }
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, format!("the node did not answer: {e}")),
    }
}

async fn not_found() -> HttpResponse {
    error(StatusCode::NOT_FOUND, "no such endpoint")
}

/// The TLS acceptor for `files`; errors name the file, never its content.
fn tls_acceptor(files: &TlsFiles) -> std::io::Result<openssl::ssl::SslAcceptorBuilder> {
    use openssl::ssl::{SslAcceptor, SslFiletype, SslMethod};
    let fail = |what: &str, path: &Path, e: openssl::error::ErrorStack| {
        std::io::Error::other(format!("TLS {what} {}: {e}", path.display()))
    };
    let mut builder = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls()).map_err(std::io::Error::other)?;
    builder.set_certificate_chain_file(&files.cert).map_err(|e| fail("certificate", &files.cert, e))?;
    builder.set_private_key_file(&files.key, SslFiletype::PEM).map_err(|e| fail("key", &files.key, e))?;
    builder.check_private_key().map_err(|e| fail("key (does it match the certificate?)", &files.key, e))?;
    Ok(builder)
}

/// Checks that the token and TLS files of `opts` can be used, without binding anything.
pub fn check(opts: &HttpOptions) -> std::io::Result<()> {
    if let Some(file) = &opts.admin_token_file {
        read_token(file).map_err(std::io::Error::other)?;
    }
    if let Some(files) = &opts.tls {
        tls_acceptor(files)?;
    }
    Ok(())
}

/// Bind and start the server inside the current actix System. Fails if the address cannot be bound,
/// the TLS files cannot be used, or the admin token file cannot be read.
pub fn serve(opts: &HttpOptions, status: StatusBoard, node: Addr<Node>) -> std::io::Result<actix_web::dev::Server> {
    check(opts)?;
    let admission = web::Data::new(Admission {
        token_file: opts.admin_token_file.clone(),
        loopback: opts.listen.ip().is_loopback(),
    });
    let status = web::Data::new(status);
    let node = web::Data::new(node);
    let server = HttpServer::new(move || {
        let only = |method: &'static str| {
            web::route().to(move || async move { error(StatusCode::METHOD_NOT_ALLOWED, format!("use {method}")) })
        };
        App::new()
            .app_data(admission.clone())
            .app_data(status.clone())
            .app_data(node.clone())
            .wrap(from_fn(admit))
            .service(web::resource("/health").route(web::get().to(health)).route(only("GET")))
            .service(web::resource("/flows").route(web::get().to(flows)).route(only("GET")))
            .service(web::resource("/flows/{id}").route(web::get().to(one_flow)).route(only("GET")))
            .service(web::resource("/metrics").route(web::get().to(metrics)).route(only("GET")))
            // Mutating routes: register them as `web::post()`; `admit` guards every non-GET request.
            .service(web::resource("/ready").route(web::get().to(ready)).route(only("GET")))
            .service(web::resource("/reload").route(web::post().to(reload)).route(only("POST")))
            .service(web::resource("/flows/{id}/pause").route(web::post().to(pause)).route(only("POST")))
            .service(web::resource("/flows/{id}/resume").route(web::post().to(resume)).route(only("POST")))
            .default_service(web::route().to(not_found))
    })
    .workers(1)
    .disable_signals()
    .client_request_timeout(REQUEST_TIMEOUT);
    let server = match &opts.tls {
        Some(files) => server.bind_openssl(opts.listen, tls_acceptor(files)?)?,
        None => server.bind(opts.listen)?,
    };
    Ok(server.run())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_by_content_only() {
        assert!(tokens_match(b"s3cret-token", b"s3cret-token"));
        assert!(!tokens_match(b"s3cret-token", b"s3cret-tokem"));
        assert!(!tokens_match(b"s3cret", b"s3cret-token"));
        assert!(!tokens_match(b"", b"x"));
    }

    #[test]
    fn flow_ids_are_checked() {
        assert_eq!(flow_id("east->west").map(|id| id.to_string()).ok().as_deref(), Some("east->west"));
        for bad in ["east", "->west", "east->", "ea st->west", "east->we.st", "%ZZ", &"a".repeat(600)] {
            assert!(flow_id(bad).expect_err(bad).starts_with("malformed flow id"), "{bad}");
        }
    }

    #[test]
    fn only_a_well_formed_dry_run_query_is_accepted() {
        assert_eq!(reload_dry_run(""), Ok(false));
        for yes in ["dry_run=true", "dry_run=1", "dry_run", "dry_run="] {
            assert_eq!(reload_dry_run(yes), Ok(true), "{yes}");
        }
        for no in ["dry_run=false", "dry_run=0"] {
            assert_eq!(reload_dry_run(no), Ok(false), "{no}");
        }
        // A typo must not turn a dry run into a real reload.
        let typo = reload_dry_run("dryrun=true").expect_err("unknown key");
        assert!(typo.contains("`dryrun`"), "{typo}");
        let bad = reload_dry_run("dry_run=yes").expect_err("bad value");
        assert!(bad.contains("`yes`"), "{bad}");
    }

    /// `/ready`'s status code and JSON for `board`.
    fn ready_answer(board: &StatusBoard) -> (u16, serde_json::Value) {
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        let resp = rt.block_on(ready(web::Data::new(board.clone())));
        let status = resp.status().as_u16();
        let body = rt.block_on(actix_web::body::to_bytes(resp.into_body())).expect("body");
        (status, serde_json::from_slice(&body).expect("JSON"))
    }

    #[test]
    fn ready_means_flows_loaded_not_every_cluster_answering() {
        let board = StatusBoard::default();
        board.flow_started("east->west", 1, crate::config::Delivery::AtLeastOnce);
        board.set("east->west", "copier", crate::status::ActorState::Starting, None);
        // Before the startup reload is recorded: not ready, whatever the flows do.
        let (code, body) = ready_answer(&board);
        assert_eq!(code, 503, "{body}");
        assert_eq!(body["ready"], false, "{body}");

        board.set_last_reload(crate::status::ReloadOutcome {
            trigger: Trigger::Startup,
            result: ReloadResult::Applied,
            at: "2026-12-01T00:00:00Z".into(),
            error: None,
            started: vec!["east->west".into()],
            stopped: Vec::new(),
            restarted: Vec::new(),
            rolled_back: Vec::new(),
            attempt: 1,
            retry: None,
            next_attempt_at: None,
        });
        // A cluster away: the flow is degraded, the node ready, the flow named with its reason.
        board.set("east->west", "copier", crate::status::ActorState::Degraded, Some("cluster `west`: down".into()));
        let (code, body) = ready_answer(&board);
        assert_eq!(code, 200, "{body}");
        assert_eq!(body["ready"], true, "{body}");
        assert_eq!(body["flows"][0]["flow"], "east->west", "{body}");
        assert_eq!(body["flows"][0]["reasons"][0], "copier: cluster `west`: down", "{body}");

        board.set("east->west", "copier", crate::status::ActorState::Running, None);
        let (code, body) = ready_answer(&board);
        assert_eq!((code, body["flows"].as_array().map(Vec::len)), (200, Some(0)), "{body}");
    }

    #[test]
    fn token_files_are_trimmed_and_must_not_be_empty() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("token");
        std::fs::write(&path, "abc\n").expect("write");
        assert_eq!(read_token(&path).as_deref(), Ok("abc"));
        std::fs::write(&path, "\n").expect("write");
        assert!(read_token(&path).expect_err("empty").contains("empty"));
        let missing = read_token(&dir.path().join("nope")).expect_err("missing");
        assert!(missing.contains("nope"), "{missing}");
    }
}
