//! A real MIT Kerberos KDC for tests (Debian's `krb5-kdc`, `krb5-admin-server` for `kadmin.local`).
//!
//! [`Kdc::start`] writes a realm of its own into a temp dir (`krb5.conf` for clients, `kdc.conf` for
//! the KDC, a database made by `kdb5_util`), then runs `krb5kdc -n` on a free loopback port (TCP and
//! UDP; clients are told to use TCP). Principals and keytabs are made with `kadmin.local`, which works
//! on the database directly: no admin server runs. The KDC logs every ticket it issues to `kdc.log`;
//! [`Kdc::login_times`] dates the logins of a principal there (each `kinit` is one AS exchange).
//!
//! Clients find the realm through `KRB5_CONFIG` ([`Kdc::client_env`]); the Kafka broker's JVM through
//! `-Djava.security.krb5.conf` ([`Kdc::java_options`]). The test process itself never talks Kerberos.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::free_port;
use super::process::{kill_and_reap, spawn_watchdog};

/// A running KDC with its realm. Dropping it kills `krb5kdc` and removes its dir.
#[derive(Debug)]
pub struct Kdc {
    pub realm: String,
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    watchdog: Option<Child>,
}

impl Kdc {
    /// A KDC for `realm` whose tickets live at most `max_life` (kadmin's duration syntax, e.g.
    /// `"40s"`, `"2m"`: a form both MIT Kerberos and Java read); waits until it answers.
    pub fn start(realm: &str, max_life: &str) -> Kdc {
        let dir = tempfile::Builder::new().prefix("ferry-kdc-").tempdir().expect("kdc temp dir");
        let port = free_port();
        let d = dir.path().to_str().expect("utf-8 temp dir").to_string();
        std::fs::write(
            dir.path().join("krb5.conf"),
            format!(
                "[libdefaults]\n  default_realm = {realm}\n  dns_lookup_kdc = false\n  dns_lookup_realm = false\n  \
                 rdns = false\n  dns_canonicalize_hostname = false\n  udp_preference_limit = 1\n  \
                 ticket_lifetime = {max_life}\n\
                 [realms]\n  {realm} = {{\n    kdc = 127.0.0.1:{port}\n  }}\n\
                 [domain_realm]\n  localhost = {realm}\n"
            ),
        )
        .expect("write krb5.conf");
        std::fs::write(
            dir.path().join("kdc.conf"),
            format!(
                "[kdcdefaults]\n  kdc_ports = {port}\n  kdc_tcp_ports = {port}\n\
                 [realms]\n  {realm} = {{\n    database_name = {d}/principal\n    key_stash_file = {d}/stash\n    \
                 acl_file = {d}/kadm5.acl\n    max_life = {max_life}\n    max_renewable_life = 0\n    \
                 supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal\n  }}\n\
                 [logging]\n  kdc = FILE:{d}/kdc.log\n"
            ),
        )
        .expect("write kdc.conf");
        let mut kdc = Kdc { realm: realm.to_string(), port, dir, child: None, watchdog: None };
        kdc.run("kdb5_util", &["create", "-s", "-r", realm, "-P", "ferry-test-master-key"]);
        let child = Command::new("krb5kdc")
            .args(["-n", "-r", realm])
            .envs(kdc.admin_env())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn krb5kdc (Debian: krb5-kdc)");
        kdc.watchdog = Some(spawn_watchdog(child.id(), None));
        kdc.child = Some(child);
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(start.elapsed() < Duration::from_secs(20), "krb5kdc does not listen on {port}: {}", kdc.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        kdc
    }

    /// The client configuration of the realm.
    pub fn krb5_conf(&self) -> PathBuf {
        self.dir.path().join("krb5.conf")
    }

    /// What a Kerberos client process (ferry) needs in its environment to find the realm.
    pub fn client_env(&self) -> Vec<(String, String)> {
        vec![("KRB5_CONFIG".into(), self.krb5_conf().to_str().expect("utf-8").into())]
    }

    /// [`Kdc::client_env`] with a `krb5.conf` that names the realm's KDC but neither a default realm
    /// nor the realm of any host: the library cannot tell which realm a broker is in.
    pub fn client_env_without_realm_hints(&self) -> Vec<(String, String)> {
        let conf = self.dir.path().join("krb5-no-realm-hints.conf");
        let full = std::fs::read_to_string(self.krb5_conf()).expect("read krb5.conf");
        let kept: String = full
            .split_inclusive('\n')
            .take_while(|l| !l.starts_with("[domain_realm]"))
            .filter(|l| !l.trim_start().starts_with("default_realm"))
            .collect();
        std::fs::write(&conf, kept).expect("write krb5.conf");
        vec![("KRB5_CONFIG".into(), conf.to_str().expect("utf-8").into())]
    }

    /// JVM options for a Java client or broker of the realm.
    pub fn java_options(&self) -> String {
        format!("-Djava.security.krb5.conf={}", self.krb5_conf().display())
    }

    /// `name@REALM`.
    pub fn principal(&self, name: &str) -> String {
        format!("{name}@{}", self.realm)
    }

    /// Creates principal `name` with a random key (nothing happens if it exists). It needs
    /// pre-authentication, as in production realms: the KDC issues tickets only to a client that proved
    /// it holds the key, so the issued tickets it logs are logins. (MIT's GSS library, near a ticket's
    /// end, asks for one without proof, meaning to refresh it from a default client keytab that ferry's
    /// processes do not have.)
    pub fn add_principal(&self, name: &str) {
        let principal = self.principal(name);
        let out = self.kadmin(&format!("addprinc -randkey +requires_preauth {principal}"));
        assert!(!out.contains("rror") || out.contains("already exists"), "addprinc {principal}: {out}");
    }

    /// Writes principal `name`'s key to a new keytab at `path`. With `new_key`, the principal gets a new
    /// random key first (a higher key version): every keytab written before holds a superseded key.
    pub fn keytab(&self, name: &str, path: &Path, new_key: bool) {
        let principal = self.principal(name);
        let flag = if new_key { "" } else { "-norandkey " };
        let _ = std::fs::remove_file(path);
        let out = self.kadmin(&format!("ktadd -k {} {flag}{principal}", path.display()));
        assert!(path.exists(), "ktadd {principal} to {}: {out}", path.display());
    }

    /// When the KDC issued each of principal `name`'s initial tickets so far (their `authtime`, Unix
    /// seconds), oldest first: one per login.
    pub fn login_times(&self, name: &str) -> Vec<u64> {
        let issued = format!("{} for krbtgt/", self.principal(name));
        self.log()
            .lines()
            .filter(|l| l.contains("AS_REQ") && l.contains("ISSUE:") && l.contains(&issued))
            .filter_map(|l| l.split("authtime ").nth(1)?.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
            .collect()
    }

    /// `klist -A` of the ticket-cache collection `DIR:<dir>` (C locale): every cache's tickets, one line each.
    pub fn klist_collection(&self, dir: &Path) -> String {
        let out = Command::new("klist")
            .arg("-A")
            .envs(self.client_env())
            .env("KRB5CCNAME", format!("DIR:{}", dir.display()))
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .output()
            .expect("run klist (Debian: krb5-user)");
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// The KDC's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("kdc.log")).unwrap_or_default()
    }

    fn admin_env(&self) -> Vec<(String, String)> {
        let mut env = self.client_env();
        env.push(("KRB5_KDC_PROFILE".into(), self.dir.path().join("kdc.conf").to_str().expect("utf-8").into()));
        env
    }

    fn kadmin(&self, query: &str) -> String {
        self.run("kadmin.local", &["-r", &self.realm, "-q", query])
    }

    fn run(&self, program: &str, args: &[&str]) -> String {
        let out = Command::new(program)
            .args(args)
            .envs(self.admin_env())
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run {program} (Debian: krb5-kdc, krb5-admin-server): {e}"));
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{program} {args:?} failed ({}): {text}", out.status);
        text
    }
}

impl Drop for Kdc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill_and_reap(&mut c);
        }
        if let Some(mut w) = self.watchdog.take() {
            kill_and_reap(&mut w);
        }
    }
}
