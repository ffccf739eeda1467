//! A real OpenID Connect provider for the OIDC tests: Keycloak, run by `scripts/oidc.sh` from a
//! cached, pre-built distribution (fetched from Maven Central once).
//!
//! Why Keycloak and not `no.nav.security:mock-oauth2-server` (the lighter choice: 1.5 s to ready,
//! 125 MiB): mock-oauth2-server never checks a client secret. Its client_credentials grant issues a
//! token for any Basic credentials, and its token callbacks match form parameters only, while
//! librdkafka sends `client_id:client_secret` in the Authorization header; so "a wrong client secret
//! is a named error" could not be tested against it. Keycloak answers a wrong secret with 401
//! `unauthorized_client`, as production providers do. Its cost, measured on the 2-core test machine:
//! ~18 s from spawn to a served discovery document (with the realm import), ~450-500 MiB RSS, about
//! 20 s of CPU to start; `scripts/oidc.sh fetch` (first use, or `.ci/run`) takes ~20 s more once. A
//! test binary starts one provider, in parallel with its plaintext cluster.
//!
//! [`Provider::start`] imports a realm `ferry` with one confidential client per name (random secrets,
//! service accounts on, the audience [`AUDIENCE`] added to their access tokens) and an access token
//! lifespan of the caller's choice. Every token grant and every refused client login is logged by
//! Keycloak's event logger; [`Provider::tokens_issued`] and [`Provider::login_errors`] count them.
//! Tokens carry `azp` = the client id, which the OIDC broker takes as the principal
//! (`sasl.oauthbearer.sub.claim.name=azp`; Keycloak's `sub` is the service account's UUID).

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::process::{kill_and_reap, spawn_watchdog};
use super::tls::prop;
use super::web::try_http_request;
use super::{free_port, repo_root, tail};

/// How long [`Provider::start`] waits for Keycloak to serve the realm.
pub const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// The audience every token carries (the broker's `sasl.oauthbearer.expected.audience`).
pub const AUDIENCE: &str = "kafka";
const REALM: &str = "ferry";

/// Where a broker and clients reach a provider, and the clients' secrets: plain data, cheap to clone
/// into a [`super::Security::Oidc`].
#[derive(Clone, Debug)]
pub struct Idp {
    pub token_url: String,
    pub jwks_url: String,
    pub issuer: String,
    /// client id -> client secret
    pub secrets: BTreeMap<String, String>,
}

impl Idp {
    /// The librdkafka properties with which `client` gets its tokens from the provider (client
    /// credentials grant); the cluster adds `security.protocol` and `ssl.*`. Panics for an unknown client.
    pub fn client_props(&self, client: &str) -> Vec<(String, String)> {
        let secret = self.secrets.get(client).unwrap_or_else(|| {
            panic!("no OIDC client {client:?} (clients: {:?})", self.secrets.keys().collect::<Vec<_>>())
        });
        vec![
            prop("sasl.mechanism", "OAUTHBEARER"),
            prop("sasl.oauthbearer.method", "oidc"),
            prop("sasl.oauthbearer.token.endpoint.url", &self.token_url),
            prop("sasl.oauthbearer.client.id", client),
            prop("sasl.oauthbearer.client.secret", secret),
        ]
    }
}

/// One running Keycloak. Dropping it kills the JVM and removes its home dir.
pub struct Provider {
    pub port: u16,
    idp: Idp,
    dir: tempfile::TempDir,
    java: Option<Child>,
    watchdog: Option<Child>,
}

impl Provider {
    /// Starts a provider on a free loopback port with a confidential client for each of `clients`
    /// and access tokens valid `token_lifespan` (whole seconds), and waits until its realm is served.
    /// Panics with the tail of its log if it is not ready within [`READY_TIMEOUT`].
    pub fn start(clients: &[&str], token_lifespan: Duration) -> Provider {
        let port = free_port();
        let dir = tempfile::Builder::new().prefix("ferry-oidc-").tempdir().expect("create provider temp dir");
        let secrets: BTreeMap<String, String> =
            clients.iter().map(|c| (c.to_string(), super::cluster::random_password(c))).collect();
        let base = format!("http://127.0.0.1:{port}/realms/{REALM}");
        let idp = Idp {
            token_url: format!("{base}/protocol/openid-connect/token"),
            jwks_url: format!("{base}/protocol/openid-connect/certs"),
            issuer: base,
            secrets,
        };
        let realm = dir.path().join("realm.json");
        std::fs::write(&realm, realm_json(&idp.secrets, token_lifespan)).expect("write realm.json");
        let home = dir.path().join("home");
        oidc_sh(&["prepare", path_str(&home), path_str(&realm)]);
        let mut provider = Provider { port, idp, dir, java: None, watchdog: None };
        provider.launch();
        provider
    }

    pub fn idp(&self) -> &Idp {
        &self.idp
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("keycloak.log")
    }

    /// Everything Keycloak logged (INFO and above, and its events).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// How many access tokens the provider issued to `client` so far (client credentials grants).
    pub fn tokens_issued(&self, client: &str) -> usize {
        self.count_events("CLIENT_LOGIN", client)
    }

    /// How many token requests of `client` the provider refused (wrong secret, unknown client, ...).
    pub fn login_errors(&self, client: &str) -> usize {
        self.count_events("CLIENT_LOGIN_ERROR", client)
    }

    fn count_events(&self, kind: &str, client: &str) -> usize {
        let (kind, client) = (format!("type=\"{kind}\","), format!("clientId=\"{client}\","));
        self.log().lines().filter(|l| l.contains(&kind) && l.contains(&client)).count()
    }

    fn launch(&mut self) {
        let log = OpenOptions::new().create(true).append(true).open(self.log_path()).expect("open provider log");
        let java = Command::new("bash")
            .arg(repo_root().join("scripts/oidc.sh"))
            .args(["run", path_str(&self.dir.path().join("home")), &self.port.to_string()])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log fd"))
            .stderr(log)
            .spawn()
            .expect("spawn scripts/oidc.sh run");
        // `run` execs java: the pid is the JVM's.
        self.watchdog = Some(spawn_watchdog(java.id(), Some(self.dir.path())));
        self.java = Some(java);
        let start = Instant::now();
        let addr: SocketAddr = ([127, 0, 0, 1], self.port).into();
        let discovery = format!("/realms/{REALM}/.well-known/openid-configuration");
        loop {
            if let Some(status) = self.java.as_mut().and_then(|j| j.try_wait().expect("try_wait")) {
                panic!("OIDC provider exited during startup ({status}); log:\n{}", tail(&self.log(), 40));
            }
            if let Ok((200, _)) = try_http_request(addr, "GET", &discovery, &[], b"") {
                eprintln!("[oidc] Keycloak ready on port {} in {:?}", self.port, start.elapsed());
                return;
            }
            if start.elapsed() > READY_TIMEOUT {
                self.kill();
                panic!("OIDC provider not ready after {READY_TIMEOUT:?}; log:\n{}", tail(&self.log(), 40));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn kill(&mut self) {
        if let Some(mut java) = self.java.take() {
            kill_and_reap(&mut java);
        }
        if let Some(mut w) = self.watchdog.take() {
            kill_and_reap(&mut w);
        }
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The realm: one confidential client per entry of `secrets`, with a service account (the client
/// credentials grant) and an audience mapper adding [`AUDIENCE`]; tokens live `lifespan`. Events go
/// to Keycloak's log (jboss-logging listener), which is how tokens are counted.
fn realm_json(secrets: &BTreeMap<String, String>, lifespan: Duration) -> String {
    let clients: Vec<String> = secrets
        .iter()
        .map(|(id, secret)| {
            format!(
                r#"{{"clientId": "{id}", "enabled": true, "publicClient": false,
    "clientAuthenticatorType": "client-secret", "secret": "{secret}",
    "serviceAccountsEnabled": true, "standardFlowEnabled": false, "directAccessGrantsEnabled": false,
    "protocolMappers": [{{"name": "audience", "protocol": "openid-connect", "protocolMapper": "oidc-audience-mapper",
      "config": {{"included.custom.audience": "{AUDIENCE}", "access.token.claim": "true", "id.token.claim": "false"}}}}]}}"#
            )
        })
        .collect();
    format!(
        r#"{{"realm": "{REALM}", "enabled": true, "accessTokenLifespan": {},
  "eventsListeners": ["jboss-logging"],
  "clients": [{}]}}"#,
        lifespan.as_secs().max(1),
        clients.join(",\n")
    )
}

fn path_str(p: &std::path::Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Runs `scripts/oidc.sh ARGS` (the first call may fetch Keycloak: ~20 s on a cold cache).
fn oidc_sh(args: &[&str]) -> String {
    super::cluster::run_script("oidc.sh", args, &[])
}
