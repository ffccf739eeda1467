//! A cluster's schema registry and the calls of the Confluent-compatible REST API ferry makes to it
//! (Confluent Schema Registry, Apicurio's `/apis/ccompat/v7`, Karapace, Redpanda's).
//!
//! Every call is one blocking HTTP/1.1 exchange with the registry's timeout ([`crate::http_client::call`]):
//! calls are rare (what they answer is cached per flow), so no connection is kept. Credentials are
//! never part of an error or of [`RegistrySpec`]'s `Debug`.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub use crate::config::schema_registry::{Auth, RegistrySpec};
use crate::http_client::{Call, ClientTls};

/// The registry's media type (the API answers JSON under it).
const MEDIA_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// A schema reference: `name` as the schema text uses it, resolved as `subject` at `version`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Reference {
    pub name: String,
    pub subject: String,
    pub version: i32,
}

/// A schema as registered: its text, its type (`None`: Avro, the API's default) and references.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schema {
    pub schema: String,
    pub schema_type: Option<String>,
    pub references: Vec<Reference>,
}

impl Schema {
    fn from_json(v: &Value) -> Result<Schema, String> {
        let schema = v.get("schema").and_then(Value::as_str).ok_or("an answer without `schema`")?.to_string();
        // Apicurio names Avro explicitly where Confluent leaves the type out: both mean Avro.
        let schema_type =
            v.get("schemaType").and_then(Value::as_str).filter(|t| !t.eq_ignore_ascii_case("AVRO")).map(str::to_string);
        let references = match v.get("references") {
            None | Some(Value::Null) => Vec::new(),
            Some(r) => serde_json::from_value(r.clone()).map_err(|e| format!("malformed `references`: {e}"))?,
        };
        Ok(Schema { schema, schema_type, references })
    }

    fn to_json(&self) -> Value {
        let mut v = json!({ "schema": self.schema });
        if let Some(t) = &self.schema_type {
            v["schemaType"] = json!(t);
        }
        if !self.references.is_empty() {
            v["references"] = json!(self.references);
        }
        v
    }
}

/// One version of a subject.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubjectVersion {
    pub subject: String,
    pub version: i32,
    pub id: u32,
    pub schema: Schema,
}

/// Why a call did not answer what was asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegistryError {
    /// 404: no such subject, version or schema (the API's `error_code` and message).
    NotFound { what: String, code: i64, message: String },
    /// Any other refusal: 401/403 (credentials, rights), 409 (incompatible), 422 (invalid), 5xx.
    Refused { what: String, status: u16, code: i64, message: String },
    /// No answer: resolving, connecting, TLS, a timeout, or not the API's JSON.
    Unreachable { what: String, why: String },
}

impl RegistryError {
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::NotFound { .. } => Some(404),
            Self::Refused { status, .. } => Some(*status),
            Self::Unreachable { .. } => None,
        }
    }
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotFound { what, code, message } => write!(f, "{what}: not found ({code}: {message})"),
            Self::Refused { what, status, code, message } => {
                let hint = match status {
                    401 => " (the registry's credentials were refused)",
                    403 => " (not allowed: check the registry's rights for ferry's user)",
                    409 => " (incompatible with the subject's earlier versions)",
                    _ => "",
                };
                write!(f, "{what}: HTTP {status}{hint} ({code}: {message})")
            }
            Self::Unreachable { what, why } => write!(f, "{what}: no answer ({why})"),
        }
    }
}

/// A client of one registry.
#[derive(Clone, Debug)]
pub struct Registry {
    spec: RegistrySpec,
}

/// A path segment with everything but unreserved characters percent-encoded (subjects may hold `/`,
/// `:` or spaces).
fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The schema ID an answer carries as `id`.
fn id_of(v: &Value) -> Option<u32> {
    v.get("id").and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok())
}

impl Registry {
    pub fn new(spec: RegistrySpec) -> Registry {
        Registry { spec }
    }

    /// The cluster whose registry this is.
    pub fn cluster(&self) -> &str {
        &self.spec.cluster
    }

    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, RegistryError> {
        let what = format!("schema registry of `{}`: {method} {path}", self.spec.cluster);
        let url = format!("{}{path}", self.spec.url);
        let authorization = match &self.spec.auth {
            Auth::None => None,
            Auth::Basic { .. } => self.spec.basic_credentials().map(|c| format!("Basic {c}")),
            Auth::Bearer(token) => Some(format!("Bearer {token}")),
        };
        let mut headers = vec![("Accept", MEDIA_TYPE), ("User-Agent", "ferry")];
        if body.is_some() {
            headers.push(("Content-Type", MEDIA_TYPE));
        }
        if let Some(a) = &authorization {
            headers.push(("Authorization", a));
        }
        let body = body.map(|b| b.to_string().into_bytes());
        let tls = ClientTls {
            ca: self.spec.ca_file.as_deref(),
            cert: self.spec.cert_file.as_deref(),
            key: self.spec.key_file.as_deref(),
            insecure: false,
        };
        let call =
            Call { method, url: &url, headers: &headers, body: body.as_deref(), tls, timeout: self.spec.timeout };
        let errors = || crate::metrics::METRICS.schema_registry_errors.with_label_values(&[&self.spec.cluster]).inc();
        let (status, answer) = crate::http_client::call(&call).map_err(|why| {
            errors();
            RegistryError::Unreachable { what: what.clone(), why: crate::config::secrets::scrub(&why) }
        })?;
        let parsed: Option<Value> = serde_json::from_slice(&answer).ok();
        // 404 is an answer (no such subject, version or level), not a failing registry.
        if status != 404 && (!(200..300).contains(&status) || parsed.is_none()) {
            errors();
        }
        if (200..300).contains(&status) {
            return parsed.ok_or_else(|| RegistryError::Unreachable {
                what,
                why: format!("HTTP {status} without the API's JSON (is the URL the API's base?)"),
            });
        }
        let code = parsed.as_ref().and_then(|v| v.get("error_code")).and_then(Value::as_i64).unwrap_or(0);
        let message = parsed
            .as_ref()
            .and_then(|v| v.get("message"))
            .and_then(Value::as_str)
            .map_or_else(|| String::from_utf8_lossy(&answer[..answer.len().min(200)]).to_string(), str::to_string);
        let message = crate::config::secrets::scrub(&message);
        if status == 404 {
            Err(RegistryError::NotFound { what, code, message })
        } else {
            Err(RegistryError::Refused { what, status, code, message })
        }
    }

    /// The (subject, version)s this schema ID is registered as.
    pub fn id_versions(&self, id: u32) -> Result<Vec<(String, i32)>, RegistryError> {
        let v = self.call("GET", &format!("/schemas/ids/{id}/versions"), None)?;
        let list = v.as_array().cloned().unwrap_or_default();
        Ok(list
            .iter()
            .filter_map(|e| {
                let subject = e.get("subject")?.as_str()?.to_string();
                let version = i32::try_from(e.get("version")?.as_i64()?).ok()?;
                Some((subject, version))
            })
            .collect())
    }

    pub fn subjects(&self) -> Result<Vec<String>, RegistryError> {
        let v = self.call("GET", "/subjects", None)?;
        Ok(v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_string)).collect())
    }

    /// The subject's versions, oldest first.
    pub fn versions(&self, subject: &str) -> Result<Vec<i32>, RegistryError> {
        let v = self.call("GET", &format!("/subjects/{}/versions", segment(subject)), None)?;
        let mut versions: Vec<i32> =
            v.as_array().into_iter().flatten().filter_map(|n| n.as_i64().and_then(|n| i32::try_from(n).ok())).collect();
        versions.sort_unstable();
        Ok(versions)
    }

    pub fn version(&self, subject: &str, version: i32) -> Result<SubjectVersion, RegistryError> {
        let what = format!("subject `{subject}` version {version}");
        let v = self.call("GET", &format!("/subjects/{}/versions/{version}", segment(subject)), None)?;
        let bad = |why: String| RegistryError::Unreachable { what: what.clone(), why };
        let id = id_of(&v).ok_or_else(|| bad("no `id`".into()))?;
        Ok(SubjectVersion { subject: subject.to_string(), version, id, schema: Schema::from_json(&v).map_err(bad)? })
    }

    /// The ID and version `schema` has under `subject`, if it is registered there.
    pub fn lookup(&self, subject: &str, schema: &Schema) -> Result<Option<(u32, i32)>, RegistryError> {
        match self.call("POST", &format!("/subjects/{}", segment(subject)), Some(&schema.to_json())) {
            Ok(v) => {
                let id = id_of(&v);
                let version = v.get("version").and_then(Value::as_i64).and_then(|n| i32::try_from(n).ok());
                Ok(id.zip(version))
            }
            // 40401: no such subject; 40403: not registered under it.
            Err(RegistryError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Registers `schema` under `subject` (idempotent: an identical schema gets its existing ID).
    pub fn register(&self, subject: &str, schema: &Schema) -> Result<u32, RegistryError> {
        let v = self.call("POST", &format!("/subjects/{}/versions", segment(subject)), Some(&schema.to_json()))?;
        id_of(&v).ok_or_else(|| RegistryError::Unreachable {
            what: format!("register under `{subject}`"),
            why: "an answer without `id`".into(),
        })
    }

    /// Whether this client may register schemas, found without registering one: a schema that is none is
    /// sent, which a registry refuses as invalid (422, 400) when writing is allowed, as forbidden (401,
    /// 403) when not. `ferry check`'s probe.
    pub fn probe_write(&self) -> Result<(), RegistryError> {
        let probe = Schema {
            schema: "{\"type\": \"ferry-check: not a schema\"}".into(),
            schema_type: None,
            references: Vec::new(),
        };
        match self.call("POST", "/subjects/ferry-check-write-probe/versions", Some(&probe.to_json())) {
            // 42201: an invalid schema. Not 42205 (operation not permitted: a registry in READONLY or
            // IMPORT mode), which refuses every registration as 422 too.
            Err(
                RegistryError::Refused { status: 400, .. } | RegistryError::Refused { status: 422, code: 42201, .. },
            ) => Ok(()),
            Ok(_) => Ok(()), // took it (a registry that does not validate): writing is allowed
            Err(e) => Err(e),
        }
    }

    /// The compatibility level of `subject` (`None`: the registry's global level).
    pub fn compatibility(&self, subject: Option<&str>) -> Result<Option<String>, RegistryError> {
        let path = subject.map_or_else(|| "/config".to_string(), |s| format!("/config/{}", segment(s)));
        match self.call("GET", &path, None) {
            Ok(v) => Ok(v
                .get("compatibilityLevel")
                .or_else(|| v.get("compatibility"))
                .and_then(Value::as_str)
                .map(str::to_string)),
            // 40408: the subject has no level of its own (Confluent).
            Err(RegistryError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub fn set_compatibility(&self, subject: &str, level: &str) -> Result<(), RegistryError> {
        self.call("PUT", &format!("/config/{}", segment(subject)), Some(&json!({ "compatibility": level }))).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that answers one request with `status` and `body`; the request it got, as text.
    fn answer_once(status: &str, body: &'static str) -> (String, std::thread::JoinHandle<String>) {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let status = status.to_string();
        let handle = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().expect("accept");
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            // Headers, then the body its Content-Length announces.
            loop {
                let n = conn.read(&mut buf).expect("read");
                request.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&request).to_string();
                if let Some((head, rest)) = text.split_once("\r\n\r\n") {
                    let length = head
                        .lines()
                        .find_map(|l| l.strip_prefix("Content-Length: "))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if rest.len() >= length || n == 0 {
                        break;
                    }
                }
            }
            let answer = format!(
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            conn.write_all(answer.as_bytes()).expect("write");
            String::from_utf8_lossy(&request).to_string()
        });
        (url, handle)
    }

    fn spec(url: String, auth: Auth) -> RegistrySpec {
        RegistrySpec {
            cluster: "east".into(),
            url,
            auth,
            ca_file: None,
            cert_file: None,
            key_file: None,
            timeout: std::time::Duration::from_secs(5),
        }
    }

    #[test]
    fn credentials_go_in_the_authorization_header_and_never_in_an_error() {
        let (url, server) = answer_once("200 OK", r#"["orders-value"]"#);
        let basic = Registry::new(spec(url, Auth::Basic { username: "ferry".into(), password: "hunter2".into() }));
        assert_eq!(basic.subjects(), Ok(vec!["orders-value".to_string()]));
        let request = server.join().expect("server");
        assert!(request.starts_with("GET /subjects HTTP/1.1\r\n"), "{request}");
        assert!(request.contains("\r\nAuthorization: Basic ZmVycnk6aHVudGVyMg==\r\n"), "{request}");
        assert!(request.contains("Accept: application/vnd.schemaregistry.v1+json"), "{request}");

        // A refusal that quotes the token: named as a credentials problem, the token scrubbed.
        crate::config::secrets::remember(["tok-7f3a9c2e51".to_string()].iter());
        let (url, server) =
            answer_once("401 Unauthorized", r#"{"error_code":40101,"message":"bad token tok-7f3a9c2e51"}"#);
        let bearer = Registry::new(spec(url, Auth::Bearer("tok-7f3a9c2e51".into())));
        let schema = Schema { schema: "\"string\"".into(), schema_type: None, references: Vec::new() };
        let err = bearer.register("orders value/x", &schema).expect_err("refused").to_string();
        let request = server.join().expect("server");
        assert!(request.starts_with("POST /subjects/orders%20value%2Fx/versions HTTP/1.1\r\n"), "{request}");
        assert!(request.contains("\r\nAuthorization: Bearer tok-7f3a9c2e51\r\n"), "{request}");
        assert!(request.ends_with(r#"{"schema":"\"string\""}"#), "{request}");
        assert!(err.contains("HTTP 401") && err.contains("credentials were refused"), "{err}");
        assert!(!err.contains("tok-7f3a9c2e51"), "{err}");
    }

    #[test]
    fn a_write_probe_refused_as_invalid_means_allowed() {
        let (url, server) =
            answer_once("422 Unprocessable Entity", r#"{"error_code":42201,"message":"invalid schema"}"#);
        assert_eq!(Registry::new(spec(url, Auth::None)).probe_write(), Ok(()));
        assert!(server.join().expect("server").contains("ferry-check-write-probe"));
        // A registry in READONLY or IMPORT mode refuses every registration with 422 too, as 42205.
        let (url, server) =
            answer_once("422 Unprocessable Entity", r#"{"error_code":42205,"message":"Subject is in read-only mode"}"#);
        let refused = Registry::new(spec(url, Auth::None)).probe_write().expect_err("read-only");
        server.join().expect("server");
        assert!(refused.to_string().contains("read-only"), "{refused}");
        let (url, server) = answer_once("403 Forbidden", r#"{"error_code":40301,"message":"not allowed"}"#);
        let refused = Registry::new(spec(url, Auth::None)).probe_write().expect_err("forbidden");
        server.join().expect("server");
        assert_eq!(refused.status(), Some(403));
    }

    #[test]
    fn subjects_are_one_path_segment() {
        assert_eq!(segment("east.orders-value"), "east.orders-value");
        assert_eq!(segment("a/b c:d"), "a%2Fb%20c%3Ad");
    }

    #[test]
    fn avro_is_the_default_type_both_ways() {
        let apicurio = json!({"schema": "\"string\"", "schemaType": "AVRO", "references": []});
        let confluent = json!({"schema": "\"string\""});
        assert_eq!(Schema::from_json(&apicurio), Schema::from_json(&confluent));
        assert_eq!(Schema::from_json(&confluent).map(|s| s.to_json()), Ok(confluent));
        let proto = json!({"schema": "syntax = \"proto3\";", "schemaType": "PROTOBUF",
            "references": [{"name": "a.proto", "subject": "a", "version": 2}]});
        let parsed = Schema::from_json(&proto).expect("protobuf");
        assert_eq!(parsed.references, vec![Reference { name: "a.proto".into(), subject: "a".into(), version: 2 }]);
        assert_eq!(parsed.to_json(), proto);
    }
}
