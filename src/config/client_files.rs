//! Files that client properties name (certificates, private keys, CA bundles, keytabs): read when a
//! flow set is validated, so that a rotated file is part of its cluster's definition.
//!
//! librdkafka reads these files only when it creates a client, and the property's value is a path,
//! which does not change when a certificate is rewritten in place. A cluster therefore carries each
//! file's SHA-256 ([`ClientFile`]): a reload whose files differ restarts exactly the flows of that
//! cluster on new clients (new connections), and everything else stays. The same reading checks what
//! a rotation half done would break (a certificate that does not match its key, a file cut short) and
//! keeps each certificate's expiry for `ferry_client_certificate_expiry_timestamp_seconds`. Contents
//! are never shown: errors name the property and the path.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use openssl::asn1::Asn1Time;
use openssl::pkey::{PKey, Private};
use openssl::x509::X509;

/// Client properties whose value is a file librdkafka reads (and re-reads only for a new client).
pub const FILE_KEYS: [&str; 6] = [
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.ca.location",
    "ssl.keystore.location",
    "ssl.crl.location",
    "sasl.kerberos.keytab",
];

/// A CA file with more certificates than this is a system bundle: its certificates' expiry is not
/// reported (a hundred roots would be a hundred series, and one of them expiring says nothing about
/// the brokers ferry talks to).
const CA_CERTIFICATES_REPORTED: usize = 16;

/// Whether client property `key` names a file ferry reads for the diff.
pub fn is_file_key(key: &str) -> bool {
    FILE_KEYS.contains(&key)
}

/// One file a cluster's client property names, as read at validation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientFile {
    /// The property (`ssl.certificate.location`, ...).
    pub key: String,
    pub path: PathBuf,
    /// SHA-256 of the content (of every file in it, for a CA directory): what the reload diff compares.
    pub digest: [u8; 32],
    /// The certificates of `ssl.certificate.location` and (unless a system bundle) `ssl.ca.location`.
    pub certificates: Vec<Certificate>,
}

impl ClientFile {
    /// `client` for the client's own certificate, `ca` for the CAs it trusts; `None` for other files.
    pub fn role(&self) -> Option<&'static str> {
        match self.key.as_str() {
            "ssl.certificate.location" => Some("client"),
            "ssl.ca.location" => Some("ca"),
            _ => None,
        }
    }
}

/// What the expiry metric shows of one certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Certificate {
    /// The subject, RFC 2253 style (`CN=ferry,OU=ops,O=example`), as brokers name principals.
    pub subject: String,
    /// notAfter, seconds since the epoch.
    pub not_after: i64,
}

/// Reads the files `client`'s properties name. Returns them, or every problem as `(property, reason)`:
/// a file that cannot be read, a certificate file without a PEM certificate, a private key that cannot
/// be read or does not belong to the certificate. No reason carries a file's content.
pub fn read(client: &BTreeMap<String, String>) -> Result<Vec<ClientFile>, Vec<(String, String)>> {
    let mut files = Vec::new();
    let mut problems = Vec::new();
    for key in FILE_KEYS {
        let Some(value) = client.get(key) else { continue };
        // librdkafka's "probe": the system's CA locations, found at run time.
        if key == "ssl.ca.location" && value == "probe" {
            continue;
        }
        match read_one(key, Path::new(value)) {
            Ok(f) => files.push(f),
            Err(reason) => problems.push((key.to_string(), reason)),
        }
    }
    if problems.is_empty()
        && let Err(reason) = key_matches_certificate(client)
    {
        problems.push(("ssl.key.location".to_string(), reason));
    }
    if problems.is_empty() { Ok(files) } else { Err(problems) }
}

/// The files in directory `dir` (a CA directory), sorted: what its digest and the reload's hash read.
pub fn files_of(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(dir)?.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.is_file()).collect();
    files.sort();
    Ok(files)
}

fn read_one(key: &str, path: &Path) -> Result<ClientFile, String> {
    let cannot = |e: std::io::Error| format!("cannot read the file of `{key}` ({}): {}", path.display(), io_reason(&e));
    let mut certificates = Vec::new();
    let digest = if path.is_dir() {
        // A CA directory (librdkafka takes one for ssl.ca.location): every file in it counts.
        let mut h = openssl::sha::Sha256::new();
        for entry in &files_of(path).map_err(cannot)? {
            h.update(entry.as_os_str().as_encoded_bytes());
            h.update(&std::fs::read(entry).map_err(cannot)?);
        }
        h.finish()
    } else {
        let bytes = std::fs::read(path).map_err(cannot)?;
        if matches!(key, "ssl.certificate.location" | "ssl.ca.location") {
            let certs = X509::stack_from_pem(&bytes).unwrap_or_default();
            if certs.is_empty() {
                return Err(format!(
                    "no PEM certificate in the file of `{key}` ({}): is it being written? The next reload reads it again",
                    path.display()
                ));
            }
            if key == "ssl.certificate.location" || certs.len() <= CA_CERTIFICATES_REPORTED {
                certificates = certs.iter().map(certificate).collect();
            }
        }
        openssl::sha::sha256(&bytes)
    };
    Ok(ClientFile { key: key.to_string(), path: path.to_path_buf(), digest, certificates })
}

fn certificate(c: &X509) -> Certificate {
    let mut subject: Vec<String> = c
        .subject_name()
        .entries()
        .map(|e| {
            let name = e.object().nid().short_name().unwrap_or("?");
            let value = e.data().to_string().unwrap_or_default();
            format!("{name}={value}")
        })
        .collect();
    subject.reverse();
    let not_after = Asn1Time::from_unix(0)
        .and_then(|epoch| epoch.diff(c.not_after()))
        .map_or(0, |d| i64::from(d.days) * 86_400 + i64::from(d.secs));
    Certificate { subject: subject.join(","), not_after }
}

/// A certificate written before its key (or the other way round) is a rotation half done: librdkafka
/// would refuse the pair when it creates a client, after the old flows were stopped. Checked here, the
/// reload is refused and the old flows keep running until both files are in place.
fn key_matches_certificate(client: &BTreeMap<String, String>) -> Result<(), String> {
    let (Some(cert_path), Some(key_path)) = (client.get("ssl.certificate.location"), client.get("ssl.key.location"))
    else {
        return Ok(());
    };
    let cert = std::fs::read(cert_path)
        .ok()
        .and_then(|b| X509::from_pem(&b).ok())
        .ok_or_else(|| format!("no PEM certificate in {cert_path}"))?;
    let bytes = std::fs::read(key_path).map_err(|e| format!("cannot read {key_path}: {}", io_reason(&e)))?;
    // Always with a passphrase (empty without `ssl.key.password`): without one, OpenSSL would prompt on
    // the terminal for an encrypted key and `ferry validate` or a reload would hang.
    let pass = client.get("ssl.key.password").map_or(&b""[..], |p| p.as_bytes());
    let key: PKey<Private> = PKey::private_key_from_pem_passphrase(&bytes, pass).map_err(|_| {
        format!(
            "no PEM private key in the file of `ssl.key.location` ({key_path}), or `ssl.key.password` does not decrypt it"
        )
    })?;
    let matches = cert.public_key().is_ok_and(|public| public.public_eq(&key));
    if matches {
        Ok(())
    } else {
        Err(format!(
            "the private key in {key_path} does not belong to the certificate in {cert_path} (`ssl.certificate.location`): \
             a rotation half written? The next reload reads both again"
        ))
    }
}

/// The paths that the client properties [`FILE_KEYS`] name in flow files `files`, whether the set is
/// valid or not: what the reload's content hash reads besides the flow files. Flow files that do not
/// parse name none (their own change is seen).
pub fn paths_in(files: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = std::collections::BTreeSet::new();
    for file in files {
        let Some(table) = std::fs::read_to_string(file).ok().and_then(|t| t.parse::<toml::Table>().ok()) else {
            continue;
        };
        let clusters = table.get("clusters").and_then(toml::Value::as_table);
        for cluster in clusters.into_iter().flat_map(|c| c.values()) {
            let client = cluster.get("client").and_then(toml::Value::as_table);
            for (k, v) in client.into_iter().flatten() {
                if let (true, Some(path)) = (is_file_key(k), v.as_str())
                    && !path.contains("${")
                    && path != "probe"
                {
                    out.insert(PathBuf::from(path));
                }
            }
        }
    }
    out.into_iter().collect()
}

/// An I/O error's reason without its OS error number, e.g. "No such file or directory"; invalid UTF-8
/// is named as such (the bytes are not shown).
pub(super) fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::InvalidData => "not UTF-8 text".into(),
        _ => e.to_string().split(" (os error").next().unwrap_or_default().to_string(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A self-signed EC certificate and its key, valid `days`, as PEM.
    pub(crate) fn self_signed(cn: &str, days: u32) -> (Vec<u8>, Vec<u8>) {
        use openssl::ec::{EcGroup, EcKey};
        use openssl::nid::Nid;
        use openssl::x509::X509NameBuilder;
        let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).expect("curve");
        let key = PKey::from_ec_key(EcKey::generate(&group).expect("key")).expect("pkey");
        let mut name = X509NameBuilder::new().expect("name");
        name.append_entry_by_text("O", "ferry").expect("O");
        name.append_entry_by_text("CN", cn).expect("CN");
        let name = name.build();
        let mut b = X509::builder().expect("builder");
        b.set_version(2).expect("version");
        b.set_subject_name(&name).expect("subject");
        b.set_issuer_name(&name).expect("issuer");
        b.set_pubkey(&key).expect("pubkey");
        b.set_not_before(&Asn1Time::days_from_now(0).expect("now")).expect("not before");
        b.set_not_after(&Asn1Time::days_from_now(days).expect("then")).expect("not after");
        b.sign(&key, openssl::hash::MessageDigest::sha256()).expect("sign");
        (b.build().to_pem().expect("pem"), key.private_key_to_pem_pkcs8().expect("key pem"))
    }

    fn props(pairs: &[(&str, &Path)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, p)| (k.to_string(), p.to_str().expect("utf-8").to_string())).collect()
    }

    #[test]
    fn files_are_digested_and_certificates_expire_when_they_say() {
        let dir = tempfile::tempdir().expect("dir");
        let (cert, key) = self_signed("ferry", 10);
        let (ca, _) = self_signed("ferry test CA", 20);
        let (c, k, a) = (dir.path().join("c.pem"), dir.path().join("c.key"), dir.path().join("ca.pem"));
        std::fs::write(&c, &cert).expect("write");
        std::fs::write(&k, &key).expect("write");
        std::fs::write(&a, &ca).expect("write");
        let client = props(&[("ssl.certificate.location", &c), ("ssl.key.location", &k), ("ssl.ca.location", &a)]);
        let files = read(&client).expect("readable");
        assert_eq!(files.iter().map(|f| f.key.as_str()).collect::<Vec<_>>(), FILE_KEYS[..3]);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("time").as_secs() as i64;
        let client_cert = &files[0].certificates[0];
        assert_eq!(client_cert.subject, "CN=ferry,O=ferry");
        assert!((client_cert.not_after - (now + 10 * 86_400)).abs() < 60, "{client_cert:?}");
        assert_eq!((files[0].role(), files[1].role(), files[2].role()), (Some("client"), None, Some("ca")));
        assert!(files[1].certificates.is_empty(), "a key has no certificate");
        // Rewritten in place: same path, another digest.
        let (cert2, key2) = self_signed("ferry", 30);
        std::fs::write(&k, &key2).expect("write");
        std::fs::write(&c, &cert2).expect("write");
        let again = read(&client).expect("readable");
        assert_eq!(again[0].path, files[0].path);
        assert_ne!(again[0].digest, files[0].digest);
        assert_eq!(again[2], files[2], "an untouched file is the same");
    }

    #[test]
    fn a_half_written_rotation_is_refused_naming_key_and_files_never_contents() {
        let dir = tempfile::tempdir().expect("dir");
        let (cert, _) = self_signed("ferry", 10);
        let (_, other_key) = self_signed("ferry", 10);
        let (c, k) = (dir.path().join("c.pem"), dir.path().join("c.key"));
        std::fs::write(&c, &cert).expect("write");
        std::fs::write(&k, &other_key).expect("write");
        let client = props(&[("ssl.certificate.location", &c), ("ssl.key.location", &k)]);
        let problems = read(&client).expect_err("mismatch");
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].0, "ssl.key.location");
        assert!(problems[0].1.contains("does not belong to the certificate"), "{problems:?}");
        assert!(problems[0].1.contains(&c.display().to_string()) && problems[0].1.contains(&k.display().to_string()));
        let key_text = String::from_utf8_lossy(&other_key);
        let body = key_text.lines().nth(1).expect("a base64 line");
        assert!(!problems[0].1.contains(body));

        // A certificate cut short, a missing key.
        std::fs::write(&c, &cert[..cert.len() / 2]).expect("write");
        let problems = read(&client).expect_err("truncated");
        assert_eq!(problems[0].0, "ssl.certificate.location");
        assert!(problems[0].1.contains("no PEM certificate"), "{problems:?}");
        std::fs::write(&c, &cert).expect("write");
        std::fs::remove_file(&k).expect("rm");
        let problems = read(&client).expect_err("missing");
        assert_eq!(problems[0].0, "ssl.key.location");
        assert!(problems[0].1.contains("cannot read the file of `ssl.key.location`"), "{problems:?}");
        // An encrypted key with the wrong password.
        let (cert, _) = self_signed("ferry", 10);
        std::fs::write(&c, &cert).expect("write");
        std::fs::write(&k, b"-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n")
            .expect("write");
        let mut client = client;
        client.insert("ssl.key.password".into(), "SECRET-pw".into());
        let problems = read(&client).expect_err("undecryptable");
        assert!(problems[0].1.contains("does not decrypt it") && !problems[0].1.contains("SECRET-pw"), "{problems:?}");
    }

    #[test]
    fn a_ca_directory_counts_every_file_and_probe_is_not_a_file() {
        let dir = tempfile::tempdir().expect("dir");
        let cas = dir.path().join("cas");
        std::fs::create_dir(&cas).expect("mkdir");
        std::fs::write(cas.join("a.pem"), self_signed("a", 5).0).expect("write");
        let client = props(&[("ssl.ca.location", &cas)]);
        let before = read(&client).expect("readable");
        std::fs::write(cas.join("b.pem"), self_signed("b", 5).0).expect("write");
        assert_ne!(read(&client).expect("readable")[0].digest, before[0].digest);
        let probe: BTreeMap<String, String> = [("ssl.ca.location".to_string(), "probe".to_string())].into();
        assert_eq!(read(&probe), Ok(Vec::new()));
    }

    #[test]
    fn paths_are_found_in_flow_files() {
        let dir = tempfile::tempdir().expect("dir");
        let f = dir.path().join("c.toml");
        std::fs::write(
            &f,
            "[clusters.a]\nbootstrap_servers = \"x:1\"\n[clusters.a.client]\n\"ssl.certificate.location\" = \"/certs/a.pem\"\n\
             \"sasl.kerberos.keytab\" = \"/k/tab\"\n\"ssl.ca.location\" = \"probe\"\n\"linger.ms\" = 5\n\
             [clusters.b.client]\n\"ssl.key.location\" = \"/certs/b.key\"\n",
        )
        .expect("write");
        std::fs::write(dir.path().join("broken.toml"), "[clusters.c\n\"ssl.key.location\" = \"/x\"").expect("write");
        let found = paths_in(&[f, dir.path().join("broken.toml")]);
        let want: Vec<PathBuf> = ["/certs/a.pem", "/certs/b.key", "/k/tab"].iter().map(PathBuf::from).collect();
        assert_eq!(found, want);
    }
}
