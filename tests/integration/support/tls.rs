//! Throwaway certificates for secured test clusters, made by `scripts/kafka.sh certs` (openssl, EC
//! P-256, unencrypted PEM) inside the caller's temp dir: nothing secret is cached anywhere else.
//!
//! - a CA the broker and the clients trust (`ca.pem`);
//! - the broker's PEM keystore (`broker.pem`), for `IP:127.0.0.1` and `DNS:localhost`;
//! - one client certificate per name (`CN=<name>,OU=ferry-test,O=ferry`), signed by the CA;
//! - an untrusted CA and a client certificate signed by it (`CN=admin`: it claims to be the super
//!   user, only its issuer gives it away).

use std::path::{Path, PathBuf};

use super::cluster::kafka_sh_env;

/// The PEM files of one throwaway PKI (see the module doc).
#[derive(Clone, Debug)]
pub struct Tls {
    dir: PathBuf,
}

impl Tls {
    /// Makes a new CA, broker keystore, untrusted CA and a client certificate for each of
    /// `clients` in `dir` (created if missing; takes ~0.1 s per certificate).
    pub fn generate(dir: &Path, clients: &[&str]) -> Tls {
        Tls::generate_valid(dir, clients, 30)
    }

    /// [`Tls::generate`] with every certificate valid `days` (the CAs too): another PKI to rotate to,
    /// told apart from the first by its certificates' expiry.
    pub fn generate_valid(dir: &Path, clients: &[&str], days: u32) -> Tls {
        let mut args = vec!["certs", dir.to_str().expect("utf-8 tls dir")];
        args.extend_from_slice(clients);
        kafka_sh_env(&args, &[("FERRY_TLS_DAYS", &days.to_string())]);
        Tls { dir: dir.to_path_buf() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA that signed the broker's and the clients' certificates (`ssl.ca.location`).
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A CA that signed nothing the broker trusts, nor the broker's certificate.
    pub fn untrusted_ca(&self) -> PathBuf {
        self.dir.join("untrusted-ca.pem")
    }

    /// `(certificate, key)` of client `name` (`ssl.certificate.location`, `ssl.key.location`).
    pub fn client(&self, name: &str) -> (PathBuf, PathBuf) {
        let (cert, key) = (self.dir.join(format!("client-{name}.pem")), self.dir.join(format!("client-{name}.key")));
        assert!(cert.exists(), "no client certificate for {name:?} in {}", self.dir.display());
        (cert, key)
    }

    /// Key and certificate of client `name` in one file, a PEM keystore for Java clients.
    pub fn client_keystore(&self, name: &str) -> PathBuf {
        self.dir.join(format!("client-{name}.keystore.pem"))
    }

    /// `(certificate, key)` of a client certificate (`CN=admin`) signed by the untrusted CA.
    pub fn untrusted_client(&self) -> (PathBuf, PathBuf) {
        (self.dir.join("untrusted-client.pem"), self.dir.join("untrusted-client.key"))
    }

    /// librdkafka properties for an SSL connection that trusts the CA and presents `cert`/`key`
    /// (none if `None`).
    pub fn ssl_props(&self, cert: Option<(&Path, &Path)>) -> Vec<(String, String)> {
        let mut props = vec![prop("security.protocol", "SSL"), prop("ssl.ca.location", &path_str(&self.ca()))];
        if let Some((cert, key)) = cert {
            props.push(prop("ssl.certificate.location", &path_str(cert)));
            props.push(prop("ssl.key.location", &path_str(key)));
        }
        props
    }
}

pub(super) fn prop(k: &str, v: &str) -> (String, String) {
    (k.to_string(), v.to_string())
}

pub(super) fn path_str(p: &Path) -> String {
    p.to_str().expect("utf-8 path").to_string()
}
