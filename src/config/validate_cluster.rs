//! One `[clusters.X]` table → a [`ClusterSpec`]: `${VAR}` and `${file:PATH}` substituted (secret
//! values remembered for scrubbing), the files its properties name read, its Kerberos login and its
//! client properties checked.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::client_files::io_reason;
use super::fields::*;
use super::raw::{RawCluster, RawRegistry};
use super::schema_registry::{Auth, RegistrySpec};
use super::secrets;
use super::{ClientCheck, ClusterSpec};

pub(super) fn cluster(
    alias: &str,
    rc: RawCluster,
    file: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    check: ClientCheck,
    errs: &mut Errors<'_>,
) -> Option<ClusterSpec> {
    let base = format!("clusters.{alias}");
    let mut ok = true;
    if let Err(reason) = valid_alias(alias) {
        errs.push(&base, reason);
        ok = false;
    }
    let mut secret_files = Vec::new();
    let dir = file.parent().unwrap_or(Path::new("."));
    let bootstrap = match substitute(&rc.bootstrap_servers, env, dir, &mut secret_files) {
        Ok(b) if b.value.trim().is_empty() => {
            errs.push(format!("{base}.bootstrap_servers"), "must not be empty");
            ok = false;
            String::new()
        }
        Ok(b) => b.value,
        Err(reason) => {
            errs.push(format!("{base}.bootstrap_servers"), reason);
            ok = false;
            String::new()
        }
    };
    let mut client = BTreeMap::new();
    let mut file_keys = BTreeSet::new();
    for (k, v) in rc.client {
        let key = format!("{base}.client.\"{k}\"");
        if k == "bootstrap.servers" {
            errs.push(key, "set `bootstrap_servers` on the cluster instead");
            ok = false;
            continue;
        }
        match substitute(&v.into_string(), env, dir, &mut secret_files) {
            Ok(value) => {
                if value.from_file {
                    file_keys.insert(k.clone());
                }
                client.insert(k, value.value);
            }
            Err(reason) => {
                errs.push(key, reason);
                ok = false;
            }
        }
    }
    // A Kerberos cluster is logged in by ferry: it needs the principal (with its realm) and the keytab.
    if let Err((k, reason)) = super::login::Login::of(&client) {
        errs.push(format!("{base}.client.\"{k}\""), reason);
        ok = false;
    }
    // The files the properties name, read once here: their digests make a rewritten certificate a
    // changed cluster, and a rotation half written is refused before librdkafka would refuse it.
    let client_files = match super::client_files::read(&client) {
        Ok(files) => files,
        Err(problems) => {
            for (k, reason) in problems {
                errs.push(format!("{base}.client.\"{k}\""), reason);
            }
            ok = false;
            Vec::new()
        }
    };
    let schema_registry = match rc.schema_registry {
        None => None,
        Some(raw) => {
            let registry = registry(alias, raw, dir, env, &mut secret_files, &format!("{base}.schema_registry"), errs);
            ok &= registry.is_some();
            registry
        }
    };
    let spec = ClusterSpec {
        alias: alias.to_string(),
        bootstrap_servers: bootstrap,
        client,
        file_keys,
        secret_files,
        client_files,
        schema_registry,
        file: file.to_path_buf(),
    };
    // Remembered even if the set is refused: whatever librdkafka says about them later is scrubbed.
    secrets::remember(&spec.secret_values());
    if let Some(r) = &spec.schema_registry {
        secrets::remember(&r.secret_values());
    }
    if ok {
        // What `ferry run` would otherwise learn only when it creates its first client, on every restart.
        for (property, reason) in check(&spec) {
            let key = match property {
                Some(p) => format!("{base}.client.\"{p}\""),
                None => format!("{base}.client"),
            };
            errs.push(key, reason);
            ok = false;
        }
    }
    ok.then_some(spec)
}

/// `[clusters.X.schema_registry]` → a [`RegistrySpec`]: values substituted (the password and token
/// remembered as secrets), the URL and the authentication checked, the TLS files readable.
fn registry(
    alias: &str,
    raw: RawRegistry,
    dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    secret_files: &mut Vec<PathBuf>,
    base: &str,
    errs: &mut Errors<'_>,
) -> Option<RegistrySpec> {
    let before = errs.out.len();
    let mut value = |key: &str, v: Option<String>, errs: &mut Errors<'_>| -> Option<String> {
        match substitute(&v?, env, dir, secret_files) {
            Ok(s) => Some(s.value),
            Err(reason) => {
                errs.push(format!("{base}.{key}"), reason);
                None
            }
        }
    };
    let url = value("url", Some(raw.url), errs).unwrap_or_default();
    let url = url.trim().trim_end_matches('/').to_string();
    let host = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
    if host.is_none_or(|h| h.is_empty() || h.starts_with('/')) {
        errs.push(format!("{base}.url"), "must be an http:// or https:// URL (the base of the registry's API)");
    } else if host.is_some_and(|h| h.split('/').next().unwrap_or("").contains('@')) {
        // Never echo the value: it holds a credential.
        errs.push(format!("{base}.url"), "must not hold credentials (user:password@): set username and password");
    }
    let username = value("username", raw.username, errs);
    let password = value("password", raw.password, errs);
    let bearer = value("bearer_token", raw.bearer_token, errs);
    let auth = match (username, password, bearer) {
        (None, None, None) => Auth::None,
        (Some(username), Some(password), None) => Auth::Basic { username, password },
        (None, None, Some(token)) => Auth::Bearer(token),
        (_, _, Some(_)) => {
            errs.push(format!("{base}.bearer_token"), "set either username and password or bearer_token, not both");
            Auth::None
        }
        (Some(_), None, None) => {
            errs.push(
                format!("{base}.password"),
                "username is set: set password too (e.g. \"${file:/run/secrets/registry}\")",
            );
            Auth::None
        }
        (None, Some(_), None) => {
            errs.push(format!("{base}.username"), "password is set: set username too");
            Auth::None
        }
    };
    let mut path = |key: &str, v: Option<String>, errs: &mut Errors<'_>| -> Option<PathBuf> {
        let p = value(key, v, errs)?;
        let p = dir.join(p);
        if let Err(e) = std::fs::metadata(&p) {
            errs.push(format!("{base}.{key}"), format!("cannot read {}: {}", p.display(), io_reason(&e)));
        }
        Some(p)
    };
    let ca_file = path("ca_file", raw.ca_file, errs);
    let cert_file = path("cert_file", raw.cert_file, errs);
    let key_file = path("key_file", raw.key_file, errs);
    if cert_file.is_some() != key_file.is_some() {
        errs.push(format!("{base}.cert_file"), "a client certificate needs both cert_file and key_file");
    }
    let timeout = raw.timeout_seconds.unwrap_or(10.0);
    if !(0.1..=300.0).contains(&timeout) {
        errs.push(format!("{base}.timeout_seconds"), format!("must be between 0.1 and 300, got {timeout}"));
    }
    (errs.out.len() == before).then(|| RegistrySpec {
        cluster: alias.to_string(),
        url,
        auth,
        ca_file,
        cert_file,
        key_file,
        timeout: std::time::Duration::from_secs_f64(timeout.clamp(0.1, 300.0)),
    })
}

/// A value after substitution, and whether any of it was read from a secret file.
#[derive(Debug, PartialEq)]
pub struct Substituted {
    pub value: String,
    pub from_file: bool,
}

/// Replace every `${NAME}` with the environment variable NAME and every `${file:PATH}` with the content
/// of file PATH (relative paths from `dir`, the flow file's directory), its trailing newline trimmed.
/// Every file referenced is added to `files`, readable or not, so that a reload notices it change. A
/// missing variable or unreadable file is an error that names the variable or the path, never the
/// surrounding value or the file's content (either may be a secret).
pub fn substitute(
    s: &str,
    env: &dyn Fn(&str) -> Option<String>,
    dir: &Path,
    files: &mut Vec<PathBuf>,
) -> Result<Substituted, String> {
    let mut out = String::with_capacity(s.len());
    let mut from_file = false;
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err("unterminated `${` (expected `${NAME}` or `${file:PATH}`)".into());
        };
        let name = &after[..end];
        if let Some(path) = name.strip_prefix("file:") {
            if path.is_empty() {
                return Err("`${file:}` needs a path, e.g. `${file:/run/secrets/kafka-password}`".into());
            }
            let path = dir.join(path);
            if !files.contains(&path) {
                files.push(path.clone());
            }
            let content = std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read secret file {}: {}", path.display(), io_reason(&e)))?;
            out.push_str(content.trim_end_matches(['\n', '\r']));
            from_file = true;
        } else {
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!("`${{{name}}}` is not a valid reference; use `${{NAME}}` or `${{file:PATH}}`"));
            }
            match env(name) {
                Some(v) => out.push_str(&v),
                None => return Err(format!("environment variable {name} is not set")),
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(Substituted { value: out, from_file })
}

/// [`substitute`] without files to track.
#[cfg(test)]
pub fn substitute_env(s: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    substitute(s, env, Path::new("."), &mut Vec::new()).map(|v| v.value)
}
