//! Real single-node Kafka clusters for tests (KRaft, broker and controller in one JVM).
//!
//! `scripts/kafka.sh` owns the definition of a test broker: it fetches the jars (once, into
//! `~/.cache/ferry` or `$FERRY_KAFKA_CACHE`), prints the java command line (`broker-cmd`) and writes
//! and formats a node's directory (`prepare`). This module only picks ports, runs the JVM, waits
//! until it is usable and makes sure it dies with the test process (see [`super::process`]).
//!
//! Every port a node listens on comes from [`super::ports`]: outside the kernel's ephemeral range and
//! reserved for the test process, so that [`Cluster::restart`] finds its ports free again even when
//! clients kept reconnecting to them while the node was down.
//!
//! Readiness means: the broker logged "Kafka Server started" (which KRaft brokers log only after
//! the controller unfenced them), serves metadata with one broker in it, and the controller
//! accepts a validate-only CreateTopics (nothing is created, so `list_topics` stays clean).
//!
//! Secured clusters ([`Cluster::start_secured`], see [`Security`]) offer clients one SASL_SSL
//! (SCRAM-SHA-512) or mTLS listener on `bootstrap`; the node's inter-broker and controller
//! listeners stay PLAINTEXT on other loopback ports. The super user [`ADMIN`] always exists; while
//! the cluster lives its properties are registered for `bootstrap` (see
//! [`super::client::register_security`]), so every client helper works against it unchanged.
//! [`Cluster::client_props`] gives any user's librdkafka properties (e.g. for a ferry flow file),
//! [`super::client::as_client`] runs helpers as that user, [`Cluster::allow`] adds ACLs.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::hash::{BuildHasher, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};

use super::client::{block_on, register_security, unregister_security};
use super::oidc::Idp;
use super::process::{kill_and_reap, spawn_watchdog, terminate};
use super::tls::{Tls, path_str, prop};
use super::tools::run_tool;
use super::{free_port, repo_root, tail};

/// How long `start`/`restart` wait for a usable broker before panicking with its log.
pub const READY_TIMEOUT: Duration = Duration::from_secs(90);
/// How long `stop` waits after SIGTERM before SIGKILL.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(20);
const STARTED_LINE: &str = "Kafka Server started";
/// The super user of every secured cluster (`super.users` when ACLs are on).
pub const ADMIN: &str = "admin";

/// How clients reach a secured cluster. `users` get credentials (besides [`ADMIN`], who always
/// has them); with `acls` the StandardAuthorizer is on, `allow.everyone.if.no.acl.found=false`,
/// and only [`ADMIN`] (and the node itself) may do anything until [`Cluster::allow`] says so.
#[derive(Clone, Debug)]
pub enum Security {
    /// A SASL_SSL listener with SCRAM-SHA-512; the SCRAM credentials are written when the storage
    /// is formatted (`kafka-storage format --add-scram`), with generated passwords.
    SaslSsl { users: Vec<String>, acls: bool },
    /// An SSL listener with `ssl.client.auth=required`; each user has a client certificate
    /// `CN=<user>` signed by the cluster's CA, and is principal `User:<user>`.
    Mtls { users: Vec<String>, acls: bool },
    /// A SASL_PLAINTEXT listener with GSSAPI against `kdc`: the broker is `kafka/localhost@REALM`, each
    /// user a principal `<user>@REALM` with a keytab in the cluster's dir ([`Cluster::keytab`]).
    /// [`ADMIN`]'s properties lead to the node's PLAINTEXT internal listener instead (as ANONYMOUS,
    /// a super user): the test process's helpers never need a Kerberos ticket.
    Gssapi { users: Vec<String>, kdc: std::sync::Arc<super::kdc::Kdc> },
    /// A SASL_SSL listener with OAUTHBEARER only: clients fetch signed tokens from the identity
    /// provider `idp` (client credentials: each user is an OAuth client of it, [`ADMIN`] included) and
    /// the broker validates them against its JWKS (signature, expiry, issuer, audience
    /// [`super::oidc::AUDIENCE`]) and re-authenticates every connection after `reauth`
    /// (`connections.max.reauth.ms`). The principal is `User:<client id>`.
    Oidc { idp: Idp, users: Vec<String>, acls: bool, reauth: Duration },
}

impl Security {
    pub fn sasl_ssl(users: &[&str]) -> Security {
        Security::SaslSsl { users: users.iter().map(|u| u.to_string()).collect(), acls: false }
    }

    pub fn mtls(users: &[&str]) -> Security {
        Security::Mtls { users: users.iter().map(|u| u.to_string()).collect(), acls: false }
    }

    pub fn gssapi(kdc: &std::sync::Arc<super::kdc::Kdc>, users: &[&str]) -> Security {
        Security::Gssapi { users: users.iter().map(|u| u.to_string()).collect(), kdc: kdc.clone() }
    }

    /// OIDC through `idp`, whose clients must include [`ADMIN`] and every one of `users`; the
    /// broker forces re-authentication every 10 s.
    pub fn oidc(idp: &Idp, users: &[&str]) -> Security {
        for u in users.iter().copied().chain([ADMIN]) {
            assert!(idp.secrets.contains_key(u), "Security::oidc: {u:?} is no client of the provider");
        }
        Security::Oidc {
            idp: idp.clone(),
            users: users.iter().map(|u| u.to_string()).collect(),
            acls: false,
            reauth: Duration::from_secs(10),
        }
    }

    /// The same with the StandardAuthorizer on.
    pub fn with_acls(self) -> Security {
        match self {
            Security::SaslSsl { users, .. } => Security::SaslSsl { users, acls: true },
            Security::Mtls { users, .. } => Security::Mtls { users, acls: true },
            Security::Gssapi { .. } => panic!("GSSAPI test clusters have no authorizer"),
            Security::Oidc { idp, users, reauth, .. } => Security::Oidc { idp, users, acls: true, reauth },
        }
    }

    fn users(&self) -> Vec<String> {
        let (Security::SaslSsl { users, .. }
        | Security::Mtls { users, .. }
        | Security::Gssapi { users, .. }
        | Security::Oidc { users, .. }) = self;
        let mut all = vec![ADMIN.to_string()];
        all.extend(users.iter().filter(|u| *u != ADMIN).cloned());
        all
    }

    fn acls(&self) -> bool {
        matches!(
            self,
            Security::SaslSsl { acls: true, .. }
                | Security::Mtls { acls: true, .. }
                | Security::Oidc { acls: true, .. }
        )
    }

    /// The MODE argument of `kafka.sh prepare-secure`.
    fn mode(&self) -> String {
        let kind = match self {
            Security::SaslSsl { .. } => "sasl_ssl",
            Security::Mtls { .. } => "mtls",
            Security::Gssapi { .. } => "gssapi",
            Security::Oidc { .. } => "sasl_oidc",
        };
        if self.acls() { format!("{kind}+acl") } else { kind.to_string() }
    }
}

/// What a secured cluster knows about its clients.
struct Secured {
    security: Security,
    tls: Tls,
    /// SCRAM passwords (SASL_SSL only), user -> password.
    passwords: BTreeMap<String, String>,
    internal_port: u16,
    /// mTLS: where the users' client certificates come from when not from `tls` (see
    /// [`Cluster::use_client_certs`]).
    client_tls: Option<Tls>,
}

impl Secured {
    /// Where the users' client certificates come from.
    fn client_tls(&self) -> &Tls {
        self.client_tls.as_ref().unwrap_or(&self.tls)
    }
}

/// One running (or stopped) single-node cluster. Dropping it kills the JVM and removes its dir.
pub struct Cluster {
    /// A label for messages ("east", "west", ...); also part of the temp dir name.
    pub name: String,
    /// `127.0.0.1:<port>`, for `bootstrap.servers`.
    pub bootstrap: String,
    pub port: u16,
    pub controller_port: u16,
    /// Holds server.properties, data/ and server.log; removed on drop.
    dir: tempfile::TempDir,
    /// The JVM, while running.
    java: Option<Child>,
    /// Kills the JVM if the test process dies (see `process`).
    watchdog: Option<Child>,
    /// `None` for a plaintext cluster.
    secured: Option<Secured>,
    /// The long link in front of a cluster started by [`Cluster::start_linked`].
    link: Option<super::link::Link>,
}

impl Cluster {
    /// Starts a dedicated cluster on free loopback ports and waits until it is usable; panics with
    /// the tail of the broker log if it is not within [`READY_TIMEOUT`].
    pub fn start(name: &str) -> Cluster {
        Cluster::start_plain(name, None)
    }

    /// A dedicated plaintext cluster with a long link in front of it (see [`super::link`]): clients
    /// that bootstrap from [`Cluster::linked_bootstrap`] reach it only through the proxy, while
    /// `bootstrap` stays direct (for the test's own producers and checks).
    pub fn start_linked(name: &str) -> Cluster {
        let link = super::link::Link::start(free_port());
        Cluster::start_plain(name, Some(link))
    }

    fn start_plain(name: &str, link: Option<super::link::Link>) -> Cluster {
        super::timing::touch();
        let [port, controller_port] = distinct_free_ports();
        let dir = cluster_dir(name);
        let link_ports = link.as_ref().map(|l| format!("{}:{}", l.upstream, l.port));
        let env: Vec<(&str, &str)> = link_ports.iter().map(|p| ("FERRY_KAFKA_LINK", p.as_str())).collect();
        kafka_sh_env(
            &["prepare", dir.path().to_str().expect("utf-8 temp dir"), &port.to_string(), &controller_port.to_string()],
            &env,
        );
        let mut cluster = Cluster {
            name: name.to_string(),
            bootstrap: format!("127.0.0.1:{port}"),
            port,
            controller_port,
            dir,
            java: None,
            watchdog: None,
            secured: None,
            link,
        };
        cluster.launch();
        cluster
    }

    /// The link in front of a cluster started by [`Cluster::start_linked`].
    pub fn link(&self) -> &super::link::Link {
        self.link.as_ref().unwrap_or_else(|| panic!("[{}] has no link (Cluster::start_linked)", self.name))
    }

    /// The bootstrap address through the link.
    pub fn linked_bootstrap(&self) -> String {
        self.link().bootstrap()
    }

    /// Starts a dedicated secured cluster (see [`Security`]) and waits until [`ADMIN`] can use it.
    /// `bootstrap` is its secured client listener; its CA and client certificates are made in its
    /// temp dir (`<dir>/tls`), SCRAM users are created when its storage is formatted.
    pub fn start_secured(name: &str, security: Security) -> Cluster {
        let [port, controller_port, internal_port] = distinct_free_ports();
        let dir = cluster_dir(name);
        let users = security.users();
        let cert_clients: Vec<&str> = match security {
            Security::Mtls { .. } => users.iter().map(String::as_str).collect(),
            Security::SaslSsl { .. } | Security::Gssapi { .. } | Security::Oidc { .. } => Vec::new(),
        };
        let tls = Tls::generate(&dir.path().join("tls"), &cert_clients);
        let passwords: BTreeMap<String, String> = match security {
            Security::SaslSsl { .. } => users.iter().map(|u| (u.clone(), random_password(u))).collect(),
            Security::Mtls { .. } | Security::Gssapi { .. } | Security::Oidc { .. } => BTreeMap::new(),
        };
        if let Security::Gssapi { kdc, .. } = &security {
            kdc.add_principal("kafka/localhost");
            kdc.keytab("kafka/localhost", &dir.path().join("kafka.keytab"), false);
            for user in users.iter().filter(|u| *u != ADMIN) {
                kdc.add_principal(user);
                kdc.keytab(user, &dir.path().join(format!("{user}.keytab")), false);
            }
        }
        let (dir_s, port_s, cport_s, iport_s, mode) = (
            dir.path().to_str().expect("utf-8 temp dir").to_string(),
            port.to_string(),
            controller_port.to_string(),
            internal_port.to_string(),
            security.mode(),
        );
        let mut scram: Vec<String> = passwords.iter().map(|(u, p)| format!("{u}={p}")).collect();
        if let Security::Gssapi { kdc, .. } = &security {
            scram = vec![kdc.realm.clone()];
        }
        let mut args = vec!["prepare-secure", &dir_s, &port_s, &cport_s, &iport_s, &mode];
        args.extend(scram.iter().map(String::as_str));
        // sasl_oidc: where the broker finds the provider's keys, whose tokens it takes
        let env: Vec<(&str, String)> = match &security {
            Security::Oidc { idp, reauth, .. } => vec![
                ("FERRY_OIDC_JWKS_URL", idp.jwks_url.clone()),
                ("FERRY_OIDC_ISSUER", idp.issuer.clone()),
                ("FERRY_OIDC_AUDIENCE", super::oidc::AUDIENCE.to_string()),
                ("FERRY_KAFKA_REAUTH_MS", reauth.as_millis().to_string()),
            ],
            _ => Vec::new(),
        };
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        kafka_sh_env(&args, &env);
        // Kerberos clients ask for a ticket to kafka/<host they connect to>: the broker is kafka/localhost.
        let host = if matches!(security, Security::Gssapi { .. }) { "localhost" } else { "127.0.0.1" };
        let mut cluster = Cluster {
            name: name.to_string(),
            bootstrap: format!("{host}:{port}"),
            port,
            controller_port,
            dir,
            java: None,
            watchdog: None,
            secured: Some(Secured { security, tls, passwords, internal_port, client_tls: None }),
            link: None,
        };
        register_security(&cluster.bootstrap, cluster.client_props(ADMIN));
        cluster.launch();
        cluster
    }

    /// The [`Security`] this cluster was started with; `None` for plaintext.
    pub fn security(&self) -> Option<&Security> {
        self.secured.as_ref().map(|s| &s.security)
    }

    /// The certificates of a secured cluster (e.g. the untrusted CA and its client certificate).
    pub fn tls(&self) -> &Tls {
        &self.secured().tls
    }

    /// The users with credentials on a secured cluster, [`ADMIN`] first.
    pub fn users(&self) -> Vec<String> {
        self.secured().security.users()
    }

    /// The PLAINTEXT inter-broker listener's port of a secured cluster (not for clients).
    pub fn internal_port(&self) -> Option<u16> {
        self.secured.as_ref().map(|s| s.internal_port)
    }

    /// librdkafka properties with which `user` connects to `bootstrap` (empty for a plaintext
    /// cluster): `security.protocol`, `ssl.ca.location`, and `sasl.mechanism`/`sasl.username`/
    /// `sasl.password` (SASL_SSL) or `ssl.certificate.location`/`ssl.key.location` (mTLS). The
    /// same keys go into a ferry flow file under `[clusters.X.client]`. Panics for an unknown user.
    pub fn client_props(&self, user: &str) -> Vec<(String, String)> {
        let Some(s) = &self.secured else { return Vec::new() };
        match s.security {
            Security::SaslSsl { .. } => vec![
                prop("security.protocol", "SASL_SSL"),
                prop("ssl.ca.location", &path_str(&s.tls.ca())),
                prop("sasl.mechanism", "SCRAM-SHA-512"),
                prop("sasl.username", user),
                prop("sasl.password", self.password(user)),
            ],
            Security::Mtls { .. } => {
                let (cert, key) = s.client_tls().client(user);
                s.tls.ssl_props(Some((&cert, &key)))
            }
            Security::Gssapi { .. } if user == ADMIN => {
                vec![prop("bootstrap.servers", &format!("127.0.0.1:{}", s.internal_port))]
            }
            Security::Gssapi { ref kdc, ref users } => {
                assert!(users.iter().any(|u| u == user), "[{}] no Kerberos user {user:?}", self.name);
                vec![
                    prop("security.protocol", "SASL_PLAINTEXT"),
                    prop("sasl.mechanism", "GSSAPI"),
                    prop("sasl.kerberos.service.name", "kafka"),
                    prop("sasl.kerberos.principal", &kdc.principal(user)),
                    prop("sasl.kerberos.keytab", &path_str(&self.keytab(user))),
                ]
            }
            Security::Oidc { ref idp, .. } => {
                let mut props =
                    vec![prop("security.protocol", "SASL_SSL"), prop("ssl.ca.location", &path_str(&s.tls.ca()))];
                props.extend(idp.client_props(user));
                props
            }
        }
    }

    /// Where user `user`'s keytab lives (a GSSAPI cluster): `<dir>/<user>.keytab`.
    pub fn keytab(&self, user: &str) -> PathBuf {
        self.dir.path().join(format!("{user}.keytab"))
    }

    /// The SCRAM password of `user` on a SASL_SSL cluster.
    pub fn password(&self, user: &str) -> &str {
        let s = self.secured();
        s.passwords.get(user).unwrap_or_else(|| {
            panic!("[{}] no SCRAM user {user:?} (users: {:?})", self.name, s.passwords.keys().collect::<Vec<_>>())
        })
    }

    /// Java client properties with which `user` connects (for Kafka's tools and MirrorMaker 2):
    /// PEM truststore and SCRAM JAAS config, or PEM keystore.
    pub fn java_client_props(&self, user: &str) -> Vec<(String, String)> {
        let s = self.secured();
        let mut props =
            vec![prop("ssl.truststore.type", "PEM"), prop("ssl.truststore.location", &path_str(&s.tls.ca()))];
        match s.security {
            Security::SaslSsl { .. } => props.extend([
                prop("security.protocol", "SASL_SSL"),
                prop("sasl.mechanism", "SCRAM-SHA-512"),
                prop(
                    "sasl.jaas.config",
                    &format!(
                        "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"{user}\" \
                         password=\"{}\";",
                        self.password(user)
                    ),
                ),
            ]),
            Security::Gssapi { .. } => panic!("[{}] no Java client properties for a GSSAPI test cluster", self.name),
            Security::Mtls { .. } => {
                s.client_tls().client(user); // panics for an unknown user
                props.extend([
                    prop("security.protocol", "SSL"),
                    prop("ssl.keystore.type", "PEM"),
                    prop("ssl.keystore.location", &path_str(&s.client_tls().client_keystore(user))),
                ])
            }
            // Kafka's tools would log in with OAuthBearerLoginCallbackHandler, whose JVM must also
            // allow the token URL (-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls): not wired up, as
            // no OIDC test runs a Java client yet.
            Security::Oidc { .. } => panic!("[{}] java_client_props: not available for OIDC clusters", self.name),
        }
        props
    }

    /// [`Cluster::java_client_props`] of `user` written to `<dir>/client-<user>.properties`, for a
    /// Kafka tool's `--command-config` (or `--consumer.config`, ...). Returns its path.
    pub fn java_client_config(&self, user: &str) -> PathBuf {
        let path = self.dir.path().join(format!("client-{user}.properties"));
        let text: String = self.java_client_props(user).iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        path
    }

    /// Adds ALLOW ACLs through Kafka's `kafka-acls` tool (`org.apache.kafka.tools.AclCommand`) as
    /// [`ADMIN`]: `principal` (`alice` or `User:alice`) may do each of `operations` (`Read`,
    /// `Write`, `Describe`, `Create`, `All`, ...) on the resources `resource_type` (`topic`,
    /// `group`, `cluster`, `transactional-id`) named `name` (`*` for all; ignored for `cluster`),
    /// matched as `pattern_type` (`literal` or `prefixed`), from any host. Returns once the
    /// controller committed them; the broker applies them a moment later, so a test polls for the
    /// effect ([`super::wait_for`]). Panics if the tool fails. Costs a JVM start (~2-3 s): see
    /// [`Cluster::allow_all`] for several resources at once.
    pub fn allow(&self, principal: &str, resource_type: &str, name: &str, pattern_type: &str, operations: &[&str]) {
        self.allow_all(principal, &[(resource_type, name)], pattern_type, operations);
    }

    /// [`Cluster::allow`] for each `(resource_type, name)` of `resources` (every operation must
    /// apply to every resource type), in one run of the tool.
    pub fn allow_all(&self, principal: &str, resources: &[(&str, &str)], pattern_type: &str, operations: &[&str]) {
        self.add_acls("--allow-principal", principal, resources, pattern_type, operations);
    }

    /// Like [`Cluster::allow`], with DENY bindings.
    pub fn deny(&self, principal: &str, resource_type: &str, name: &str, pattern_type: &str, operations: &[&str]) {
        self.add_acls("--deny-principal", principal, &[(resource_type, name)], pattern_type, operations);
    }

    fn add_acls(
        &self,
        permission: &str,
        principal: &str,
        resources: &[(&str, &str)],
        pattern_type: &str,
        operations: &[&str],
    ) {
        assert!(self.security().is_some_and(Security::acls), "[{}] allow: the cluster has no authorizer", self.name);
        let principal = if principal.contains(':') { principal.to_string() } else { format!("User:{principal}") };
        let config = path_str(&self.java_client_config(ADMIN));
        let flags: Vec<String> = resources.iter().map(|(t, _)| format!("--{t}")).collect();
        let mut args = vec![
            "--bootstrap-server",
            &self.bootstrap,
            "--command-config",
            &config,
            "--add",
            permission,
            &principal,
            "--resource-pattern-type",
            pattern_type,
        ];
        for (flag, (_, name)) in flags.iter().zip(resources) {
            args.push(flag);
            if flag != "--cluster" {
                args.push(name);
            }
        }
        for op in operations {
            args.extend(["--operation", op]);
        }
        let out = run_tool("org.apache.kafka.tools.AclCommand", &args, Duration::from_secs(60));
        // Tests sharing a cluster may grant the same right (e.g. both ACL tests on `heartbeats`): the
        // second grant finds it in place, which is what the caller needs.
        assert!(
            out.status.success() && (out.stdout.contains("Adding ACLs") || out.stdout.contains("already exists")),
            "[{}] kafka-acls {} failed ({}); stdout:\n{}\nstderr:\n{}",
            self.name,
            args.join(" "),
            out.status,
            tail(&out.stdout, 20),
            tail(&out.stderr, 20)
        );
    }

    /// Every ACL binding of the cluster as `kafka-acls --list` prints it (run as [`ADMIN`]): one
    /// `(resource, entry)` per binding, e.g. `("ResourcePattern(resourceType=TOPIC, name=orders,
    /// patternType=LITERAL)", "(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)")`.
    pub fn acls(&self) -> Vec<(String, String)> {
        let config = path_str(&self.java_client_config(ADMIN));
        let args = ["--bootstrap-server", &self.bootstrap, "--command-config", &config, "--list"];
        let out = run_tool("org.apache.kafka.tools.AclCommand", &args, Duration::from_secs(60));
        assert!(out.status.success(), "[{}] kafka-acls --list failed; stderr:\n{}", self.name, tail(&out.stderr, 20));
        let mut resource = String::new();
        let mut all = Vec::new();
        for line in out.stdout.lines() {
            if let Some(rest) = line.strip_prefix("Current ACLs for resource `") {
                resource = rest.split('`').next().unwrap_or_default().to_string();
            } else if line.trim_start().starts_with("(principal=") {
                all.push((resource.clone(), line.trim().to_string()));
            }
        }
        all
    }

    /// Restarts an mTLS broker trusting client certificates signed by `cas` only (PEM files, written
    /// together as `<dir>/truststore.pem`): how a test revokes a CA, or adds one. Its own certificate
    /// stays. Waits until the cluster is usable as [`ADMIN`] (whose certificate `cas` must trust:
    /// see [`Cluster::use_client_certs`]).
    pub fn restart_trusting(&mut self, cas: &[&Path]) {
        assert!(matches!(self.security(), Some(Security::Mtls { .. })), "[{}] restart_trusting: not mTLS", self.name);
        let truststore = self.dir.path().join("truststore.pem");
        let pems: Vec<String> = cas
            .iter()
            .map(|ca| std::fs::read_to_string(ca).unwrap_or_else(|e| panic!("read {}: {e}", ca.display())))
            .collect();
        std::fs::write(&truststore, pems.concat()).expect("write truststore");
        let config = self.dir.path().join("server.properties");
        let text = std::fs::read_to_string(&config).expect("read server.properties");
        let text: String = text
            .lines()
            .map(|l| {
                if l.starts_with("ssl.truststore.location=") {
                    format!("ssl.truststore.location={}\n", path_str(&truststore))
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        std::fs::write(&config, text).expect("write server.properties");
        self.restart();
    }

    /// From now on the users of an mTLS cluster (the helpers' [`ADMIN`] included) connect with their
    /// certificates of `tls`, another PKI made for the same users ([`Tls::generate_valid`]); they still
    /// verify the broker with the cluster's own CA. The broker must trust `tls`'s CA
    /// ([`Cluster::restart_trusting`]).
    pub fn use_client_certs(&mut self, tls: &Tls) {
        let s = self.secured.as_mut().unwrap_or_else(|| panic!("plaintext cluster"));
        s.client_tls = Some(tls.clone());
        register_security(&self.bootstrap, self.client_props(ADMIN));
    }

    fn secured(&self) -> &Secured {
        self.secured.as_ref().unwrap_or_else(|| panic!("[{}] is a plaintext cluster", self.name))
    }

    /// Starts the JVM again with the same ports and data (stopping it first if it still runs) and
    /// waits until it is usable.
    pub fn restart(&mut self) {
        if self.is_running() {
            self.stop();
        }
        self.launch();
    }

    /// Graceful stop: SIGTERM, wait, SIGKILL after [`STOP_TIMEOUT`]. The data dir stays.
    pub fn stop(&mut self) {
        if let Some(mut java) = self.java.take() {
            let (_, killed) = terminate(&mut java, STOP_TIMEOUT);
            if killed {
                eprintln!("[{}] broker ignored SIGTERM for {STOP_TIMEOUT:?}, killed", self.name);
            }
        }
        self.reap_watchdog();
    }

    /// Crash: SIGKILL, no shutdown at all. The data dir stays.
    pub fn kill(&mut self) {
        if let Some(mut java) = self.java.take() {
            kill_and_reap(&mut java);
        }
        self.reap_watchdog();
    }

    /// True while the JVM runs (it may still be starting).
    pub fn is_running(&mut self) -> bool {
        match &mut self.java {
            Some(java) => java.try_wait().expect("try_wait").is_none(),
            None => false,
        }
    }

    /// The broker JVM's pid, while running.
    pub fn pid(&self) -> Option<u32> {
        self.java.as_ref().map(Child::id)
    }

    /// Everything the broker logged (WARN and above, the startup line, and the authorizer's denials),
    /// across restarts.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn launch(&mut self) {
        assert!(self.java.is_none(), "[{}] broker already running", self.name);
        let log_path = self.log_path();
        let log_start = std::fs::metadata(&log_path).map(|m| m.len()).unwrap_or(0) as usize;
        let log = OpenOptions::new().create(true).append(true).open(&log_path).expect("open broker log");
        let mut cmd = kafka_command(&self.broker_cmd());
        if let Some(Security::Gssapi { kdc, .. }) = self.security() {
            // The JVM's Kerberos configuration; the launcher reads this variable (kafka.sh prints a
            // shared command line, so per-cluster JVM options cannot go there).
            cmd.env("JDK_JAVA_OPTIONS", kdc.java_options());
        }
        cmd.arg(self.dir.path().join("server.properties"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log fd"))
            .stderr(log);
        let java = cmd.spawn().expect("spawn java (is a JDK on PATH?)");
        self.watchdog = Some(spawn_watchdog(java.id(), Some(self.dir.path())));
        register_broker(&self.bootstrap, java.id(), log_path);
        self.java = Some(java);
        self.wait_ready(log_start);
    }

    fn wait_ready(&mut self, log_start: usize) {
        let start = Instant::now();
        let mut last_err = String::from("no \"Kafka Server started\" line in the log yet");
        loop {
            if let Some(status) = self.java.as_mut().and_then(|j| j.try_wait().expect("try_wait")) {
                self.java = None;
                self.reap_watchdog();
                panic!(
                    "[{}] broker exited during startup ({status}); log {}:\n{}",
                    self.name,
                    self.log_path().display(),
                    tail(&self.log(), 40)
                );
            }
            // The log check keeps rdkafka away until the port is open: librdkafka's reconnect
            // backoff would otherwise grow to seconds while the JVM boots.
            let log = std::fs::read(self.log_path()).unwrap_or_default();
            let started = log.get(log_start..).is_some_and(|l| String::from_utf8_lossy(l).contains(STARTED_LINE));
            if started {
                let props = self.client_props(ADMIN);
                match probe(&self.bootstrap, &props) {
                    Ok(()) => return,
                    Err(e) => last_err = e,
                }
            }
            if start.elapsed() > READY_TIMEOUT {
                let pid = self.pid();
                self.kill();
                panic!(
                    "[{}] broker (pid {pid:?}) not ready after {READY_TIMEOUT:?}: {last_err}; log {}:\n{}",
                    self.name,
                    self.log_path().display(),
                    tail(&self.log(), 40)
                );
            }
            std::thread::sleep(Duration::from_millis(if started { 200 } else { 50 }));
        }
    }

    /// The broker's java command: [`broker_cmd`], with the KAFKA_OPTS `kafka.sh prepare-secure` wrote
    /// for an OIDC broker (the JVM property that allows its JWKS URL).
    fn broker_cmd(&self) -> Vec<String> {
        match std::fs::read_to_string(self.dir.path().join("kafka_opts")) {
            Ok(opts) => {
                kafka_sh_env(&["broker-cmd"], &[("KAFKA_OPTS", opts.trim())]).lines().map(str::to_string).collect()
            }
            Err(_) => broker_cmd(),
        }
    }

    fn reap_watchdog(&mut self) {
        if let Some(mut w) = self.watchdog.take() {
            kill_and_reap(&mut w);
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill();
        if self.secured.is_some() {
            unregister_security(&self.bootstrap);
        }
        unregister_broker(&self.bootstrap);
        // self.dir (TempDir) is dropped after this and removes the data.
    }
}

/// `N` ports for one node's listeners (client, controller, inter-broker), all outside the kernel's
/// ephemeral range and reserved for this process while it lives (see [`super::ports`]): distinct by
/// construction, and still the node's when it is restarted.
fn distinct_free_ports<const N: usize>() -> [u16; N] {
    std::array::from_fn(|_| free_port())
}

fn cluster_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("ferry-kafka-{name}-")).tempdir().expect("create cluster temp dir")
}

/// `<user>-<16 random hex digits>` (std's randomly keyed hasher as the random source).
pub(super) fn random_password(user: &str) -> String {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write(user.as_bytes());
    format!("{user}-{:016x}", h.finish())
}

/// Metadata with exactly one broker, then a validate-only CreateTopics answered by the controller.
/// `props`: the client's security properties (empty for plaintext).
fn probe(bootstrap: &str, props: &[(String, String)]) -> Result<(), String> {
    let timeout = Duration::from_secs(5);
    let config = |backoff: bool| {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", bootstrap);
        if backoff {
            c.set("reconnect.backoff.max.ms", "200");
        }
        for (k, v) in props {
            c.set(k, v);
        }
        c
    };
    let consumer: BaseConsumer = config(true).create().map_err(|e| format!("client: {e}"))?;
    let md = consumer.fetch_metadata(None, timeout).map_err(|e| format!("metadata: {e}"))?;
    if md.brokers().len() != 1 {
        return Err(format!("metadata lists {} brokers", md.brokers().len()));
    }
    let admin: AdminClient<DefaultClientContext> = config(false).create().map_err(|e| format!("admin client: {e}"))?;
    let topic = NewTopic::new("ferry-ready-probe", 1, TopicReplication::Fixed(1));
    let opts = AdminOptions::new().validate_only(true).request_timeout(Some(timeout)).operation_timeout(Some(timeout));
    let results =
        block_on(admin.create_topics([&topic], &opts)).map_err(|e| format!("validate-only CreateTopics: {e}"))?;
    match results.into_iter().next() {
        Some(Ok(_)) => Ok(()),
        Some(Err((_, code))) => Err(format!("validate-only CreateTopics: {code}")),
        None => Err("validate-only CreateTopics: no result".into()),
    }
}

/// Each started broker by bootstrap address: its JVM and log, for [`broker_state`].
static BROKERS: Mutex<BTreeMap<String, (u32, PathBuf)>> = Mutex::new(BTreeMap::new());

fn register_broker(bootstrap: &str, pid: u32, log: PathBuf) {
    BROKERS.lock().unwrap_or_else(|e| e.into_inner()).insert(bootstrap.to_string(), (pid, log));
}

fn unregister_broker(bootstrap: &str) {
    BROKERS.lock().unwrap_or_else(|e| e.into_inner()).remove(bootstrap);
}

/// What the broker at `bootstrap` is doing, for a note about a slow answer: its JVM's state and CPU
/// (from `ps`), the machine's load, and the last lines of its log (WARN and above).
pub fn broker_state(bootstrap: &str) -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let Some((pid, log)) = BROKERS.lock().unwrap_or_else(|e| e.into_inner()).get(bootstrap).cloned() else {
        return format!("load {}; no broker of this harness at {bootstrap}", load.trim());
    };
    let ps = Command::new("ps")
        .args(["-o", "stat=,pcpu=,rss=,etime=", "-p", &pid.to_string()])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    format!(
        "load {}; broker JVM {pid}: stat,%cpu,rss,etime {ps}; its log's last lines:\n{}",
        load.trim(),
        tail(&log, 15)
    )
}

/// The east/west pair shared by every test of this test binary, started in parallel on first use.
/// Never dropped (statics are not); the watchdogs kill the JVMs and remove their dirs within
/// ~0.5 s of the test process exiting. Tests must use unique topic and group names.
pub fn shared_pair() -> &'static (Cluster, Cluster) {
    super::timing::touch();
    static PAIR: OnceLock<Result<(Cluster, Cluster), String>> = OnceLock::new();
    let pair = PAIR.get_or_init(|| {
        std::thread::scope(|s| {
            let east = s.spawn(|| Cluster::start("east"));
            let west = s.spawn(|| Cluster::start("west"));
            match (east.join(), west.join()) {
                (Ok(e), Ok(w)) => Ok((e, w)),
                (e, w) => Err(format!("east: {}; west: {}", panic_message(e.err()), panic_message(w.err()))),
            }
        })
    });
    match pair {
        Ok(pair) => pair,
        Err(e) => panic!("the shared east/west pair failed to start: {e}"),
    }
}

fn panic_message(p: Option<Box<dyn std::any::Any + Send>>) -> String {
    match p {
        None => "ok".into(),
        Some(p) => p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panicked".into()),
    }
}

/// The directory holding Kafka's jars (fetched on first use), e.g. to build a classpath.
pub fn kafka_libdir() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| PathBuf::from(kafka_sh(&["libdir"]).trim())).clone()
}

/// A `java` command with the test brokers' JVM flags, Kafka's classpath and log4j2 configuration,
/// ready for `main_class` (e.g. `org.apache.kafka.connect.mirror.MirrorMaker` or
/// `org.apache.kafka.tools.TopicCommand`) and its arguments. Spawned children do not get a
/// watchdog: give long-lived ones one with [`super::process::spawn_watchdog`].
pub fn kafka_java(main_class: &str) -> Command {
    let cmd = broker_cmd();
    let (last, prefix) = cmd.split_last().expect("broker-cmd printed nothing");
    assert_eq!(last, "kafka.Kafka", "broker-cmd must end with the main class");
    let mut command = kafka_command(prefix);
    command.arg(main_class);
    command
}

/// `scripts/kafka.sh broker-cmd`, once per process: java, flags, `-cp <lib>/*`, `kafka.Kafka`.
fn broker_cmd() -> Vec<String> {
    static CMD: OnceLock<Vec<String>> = OnceLock::new();
    CMD.get_or_init(|| kafka_sh(&["broker-cmd"]).lines().map(str::to_string).collect()).clone()
}

fn kafka_command(args: &[String]) -> Command {
    let (java, rest) = args.split_first().expect("empty java command");
    let mut cmd = Command::new(java);
    cmd.args(rest);
    cmd
}

/// Runs `scripts/kafka.sh ARGS` and returns its stdout; panics with its stderr on failure. Runs
/// serialised within the process: the first call may fetch the jars (the script also takes a file
/// lock against other test binaries).
pub(super) fn kafka_sh(args: &[&str]) -> String {
    kafka_sh_env(args, &[])
}

/// [`kafka_sh`] with `env` set for the script (e.g. `FERRY_TLS_DAYS`).
pub(super) fn kafka_sh_env(args: &[&str], env: &[(&str, &str)]) -> String {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    run_script("kafka.sh", args, env)
}

/// Runs `scripts/<name> ARGS` with `env` and returns its stdout; panics with its stderr on failure.
pub(super) fn run_script(name: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let script = repo_root().join("scripts").join(name);
    let out = Command::new("bash")
        .arg(&script)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} {} failed ({}):\n{}",
        script.display(),
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap_or_else(|_| panic!("{name} printed non-UTF-8"))
}
