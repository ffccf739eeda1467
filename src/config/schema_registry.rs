//! `[clusters.X.schema_registry]` and a flow's `schemas` settings as validated: plain data that the
//! flow plan carries (the work on them is [`crate::schemas`]'s).

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// How ferry authenticates to a registry.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    None,
    Basic { username: String, password: String },
    Bearer(String),
}

/// `[clusters.X.schema_registry]` as validated.
#[derive(Clone, PartialEq, Eq)]
pub struct RegistrySpec {
    /// The cluster whose registry it is (for errors and metrics).
    pub cluster: String,
    /// Base URL of the Confluent-compatible API, without a trailing `/`.
    pub url: String,
    pub auth: Auth,
    pub ca_file: Option<PathBuf>,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    pub timeout: Duration,
}

impl RegistrySpec {
    /// The values that must never be shown (scrubbed from any text that may quote them).
    pub fn secret_values(&self) -> Vec<String> {
        match &self.auth {
            Auth::None => Vec::new(),
            // The header's encoding of them too: a server that echoes the header must not leak it.
            Auth::Basic { password, .. } => vec![password.clone(), self.basic_credentials().unwrap_or_default()],
            Auth::Bearer(token) => vec![token.clone()],
        }
    }
}

impl RegistrySpec {
    /// The `Authorization` header's Basic credentials (base64 of `username:password`), if basic.
    pub fn basic_credentials(&self) -> Option<String> {
        match &self.auth {
            Auth::Basic { username, password } => Some(base64(format!("{username}:{password}").as_bytes())),
            _ => None,
        }
    }

    /// How ferry authenticates, as it may be shown (no password, no token).
    pub fn auth_shown(&self) -> String {
        match &self.auth {
            Auth::None => "no authentication".to_string(),
            Auth::Basic { username, .. } => format!("basic: {username}, password [redacted]"),
            Auth::Bearer(_) => "bearer token [redacted]".to_string(),
        }
    }
}

impl fmt::Debug for RegistrySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let auth = self.auth_shown();
        f.debug_struct("RegistrySpec")
            .field("cluster", &self.cluster)
            .field("url", &self.url)
            .field("auth", &auth)
            .field("ca_file", &self.ca_file)
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// `schemas` of a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemaMode {
    Off,
    Sync,
    Translate,
}

/// `on_unknown_schema` of a flow: what `translate` does with an ID it cannot resolve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnUnknownSchema {
    /// Hold the record's partition until the ID resolves (the default): never an untranslated ID.
    Hold,
    /// Copy the record unchanged and count it.
    Pass,
}

/// A flow's schema settings, with the two registries (part of the flow's plan, so that a changed
/// registry restarts the flows that use it and no other).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaSettings {
    pub mode: SchemaMode,
    pub on_unknown: OnUnknownSchema,
    pub refresh_interval: Duration,
    /// Keys may be in the framing too (`schemas_keys`, default true); `false` leaves them alone.
    pub keys: bool,
    /// Both set when `mode` is not `Off` (validation refuses it otherwise).
    pub source: Option<RegistrySpec>,
    pub target: Option<RegistrySpec>,
}

impl Default for SchemaSettings {
    fn default() -> Self {
        SchemaSettings {
            mode: SchemaMode::Off,
            on_unknown: OnUnknownSchema::Hold,
            refresh_interval: DEFAULT_REFRESH_INTERVAL,
            keys: true,
            source: None,
            target: None,
        }
    }
}

/// `schemas_refresh_interval_seconds` unless set.
pub const DEFAULT_REFRESH_INTERVAL: Duration = Duration::from_secs(30);

/// Standard base64 with padding (Basic authentication).
fn base64(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(TABLE[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_are_base64() {
        assert_eq!(base64(b"Aladdin:open sesame"), "QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"abc"), "YWJj");
        assert_eq!(base64(b""), "");
    }

    #[test]
    fn a_specs_debug_shows_no_credentials() {
        let spec = RegistrySpec {
            cluster: "east".into(),
            url: "https://r:8081".into(),
            auth: Auth::Basic { username: "ferry".into(), password: "hunter2-secret".into() },
            ca_file: None,
            cert_file: None,
            key_file: None,
            timeout: Duration::from_secs(5),
        };
        let shown = format!("{spec:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("ferry"), "{shown}");
        let bearer = RegistrySpec { auth: Auth::Bearer("tok-123456".into()), ..spec };
        assert!(!format!("{bearer:?}").contains("tok-123456"));
    }
}
