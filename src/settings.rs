//! `ferry run`'s own settings (the node's, not its flows'), from four layers, each overriding the one
//! below: built-in defaults, a node settings file (`--config FILE` or `FERRY_CONFIG`, TOML), `FERRY_*`
//! environment variables, and the command line. The `config` crate merges the layers; this module reads
//! the file strictly first (unknown keys and wrong types refused with line and key), checks every merged
//! value, and names in each error where the value came from: the file and key, the variable, or the flag.
//! Flow files are not read here (see [`crate::config`]).

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::config::NODE_ID_RESERVED;
use crate::config::locate::{key_at, line_at, line_of_key};
use crate::config::secrets::unquote_values;
use crate::http::TlsFiles;

/// Log format on stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// When the flows directory is read again (see `ferry run --reload`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReloadMode {
    Auto,
    Manual,
}

/// One setting under its three names.
struct Key {
    /// In the settings file (and the `config` crate's merged tree).
    name: &'static str,
    env: &'static str,
    flag: &'static str,
}

const fn key(name: &'static str, env: &'static str, flag: &'static str) -> Key {
    Key { name, env, flag }
}

const KEYS: [Key; 10] = [
    key("flows", "FERRY_FLOWS", "--flows"),
    key("listen", "FERRY_LISTEN", "--listen"),
    key("node_id", "FERRY_NODE_ID", "--node-id"),
    key("deployment", "FERRY_DEPLOYMENT", "--deployment"),
    key("shutdown_timeout_seconds", "FERRY_SHUTDOWN_TIMEOUT_SECONDS", "--shutdown-timeout"),
    key("log_format", "FERRY_LOG_FORMAT", "--log-format"),
    key("admin_token_file", "FERRY_ADMIN_TOKEN_FILE", "--admin-token-file"),
    key("tls_cert", "FERRY_TLS_CERT", "--tls-cert"),
    key("tls_key", "FERRY_TLS_KEY", "--tls-key"),
    key("reload", "FERRY_RELOAD", "--reload"),
];

/// The built-in defaults (settings without one are unset unless a layer sets them).
const DEFAULTS: [(&str, &str); 5] = [
    ("listen", "127.0.0.1:9464"),
    ("deployment", "ferry"),
    ("shutdown_timeout_seconds", "30"),
    ("log_format", "text"),
    ("reload", "auto"),
];

/// The command line's values: `None` for a flag not given.
#[derive(Clone, Debug, Default)]
pub struct Flags {
    pub flows: Option<PathBuf>,
    pub listen: Option<SocketAddr>,
    pub node_id: Option<String>,
    pub deployment: Option<String>,
    pub shutdown_timeout: Option<f64>,
    pub log_format: Option<LogFormat>,
    pub admin_token_file: Option<PathBuf>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub reload: Option<ReloadMode>,
}

impl Flags {
    /// Each flag given, as (key, text) for the `config` crate's top layer.
    fn given(&self) -> Result<Vec<(&'static str, String)>, SettingsError> {
        let path = |flag: &str, p: &Path| {
            p.to_str().map(str::to_string).ok_or_else(|| SettingsError::new(flag, "the path is not valid UTF-8"))
        };
        let mut out = Vec::new();
        let mut put = |name: &'static str, value: Option<String>| {
            if let Some(v) = value {
                out.push((name, v));
            }
        };
        put("flows", self.flows.as_deref().map(|p| path("--flows", p)).transpose()?);
        put("listen", self.listen.map(|a| a.to_string()));
        put("node_id", self.node_id.clone());
        put("deployment", self.deployment.clone());
        put("shutdown_timeout_seconds", self.shutdown_timeout.map(|s| s.to_string()));
        put("log_format", self.log_format.map(|f| format!("{f:?}").to_lowercase()));
        put("admin_token_file", self.admin_token_file.as_deref().map(|p| path("--admin-token-file", p)).transpose()?);
        put("tls_cert", self.tls_cert.as_deref().map(|p| path("--tls-cert", p)).transpose()?);
        put("tls_key", self.tls_key.as_deref().map(|p| path("--tls-key", p)).transpose()?);
        put("reload", self.reload.map(|r| format!("{r:?}").to_lowercase()));
        Ok(out)
    }
}

/// Where a setting's value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    Default,
    /// The settings file, at this path.
    File(PathBuf),
    /// This environment variable.
    Env(&'static str),
    /// This command-line flag.
    Flag(&'static str),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Default => f.write_str("default"),
            Self::File(path) => write!(f, "{}", path.display()),
            Self::Env(name) | Self::Flag(name) => f.write_str(name),
        }
    }
}

/// The node's settings, every layer applied and checked.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSettings {
    /// The flows directory.
    pub flows: PathBuf,
    pub listen: SocketAddr,
    /// `None`: the host name (see [`crate::node::default_node_id`]).
    pub node_id: Option<String>,
    pub deployment: String,
    pub shutdown_timeout: Duration,
    pub log_format: LogFormat,
    pub admin_token_file: Option<PathBuf>,
    pub tls: Option<TlsFiles>,
    pub reload: ReloadMode,
    /// Where each setting came from, by settings-file key (unset settings are absent).
    pub origins: BTreeMap<&'static str, Origin>,
}

impl NodeSettings {
    /// "listen from FERRY_LISTEN, ..." for every setting not at its default: what the start log says.
    pub fn sources(&self) -> String {
        let given: Vec<String> = self
            .origins
            .iter()
            .filter(|(_, o)| **o != Origin::Default)
            .map(|(key, origin)| format!("{key} from {origin}"))
            .collect();
        if given.is_empty() { "all defaults".to_string() } else { given.join(", ") }
    }

    /// The settings as a settings file, each with where it came from (`ferry run --print-settings`).
    /// `node_id`: the id the node runs with (the host name when no layer set one).
    pub fn to_toml(&self, node_id: &str) -> String {
        let text = |v: &str| toml::Value::String(v.to_string()).to_string();
        let path = |p: &Path| text(&p.display().to_string());
        let lowercase = |v: &dyn fmt::Debug| text(&format!("{v:?}").to_lowercase());
        let (cert, key) = self.tls.as_ref().map(|t| (t.cert.as_path(), t.key.as_path())).unzip();
        let values: [(&str, Option<String>); 10] = [
            ("flows", Some(path(&self.flows))),
            ("listen", Some(text(&self.listen.to_string()))),
            ("node_id", Some(text(node_id))),
            ("deployment", Some(text(&self.deployment))),
            ("shutdown_timeout_seconds", Some(self.shutdown_timeout.as_secs_f64().to_string())),
            ("log_format", Some(lowercase(&self.log_format))),
            ("admin_token_file", self.admin_token_file.as_deref().map(path)),
            ("tls_cert", cert.map(path)),
            ("tls_key", key.map(path)),
            ("reload", Some(lowercase(&self.reload))),
        ];
        let mut out = String::new();
        for (key, value) in values {
            let from = match (self.origins.get(key), key) {
                (Some(origin), _) => origin.to_string(),
                (None, "node_id") => "default: the host name".to_string(),
                (None, _) => "unset".to_string(),
            };
            match value {
                Some(v) => out.push_str(&format!("{key} = {v}  # {from}\n")),
                None => out.push_str(&format!("# {key}: unset\n")),
            }
        }
        out
    }
}

/// A setting refused: where it came from (`FILE: line N: KEY`, `FERRY_LISTEN`, `--listen`) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingsError {
    pub at: String,
    pub reason: String,
}

impl SettingsError {
    fn new(at: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { at: at.into(), reason: reason.into() }
    }
}

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.at, self.reason)
    }
}

/// Every error of refused node settings.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct SettingsErrors(pub Vec<SettingsError>);

impl fmt::Display for SettingsErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} error(s) in the node settings:", self.0.len())?;
        for e in &self.0 {
            writeln!(f, "  {e}")?;
        }
        Ok(())
    }
}

impl From<SettingsError> for SettingsErrors {
    fn from(e: SettingsError) -> Self {
        Self(vec![e])
    }
}

/// The settings file as written: every key optional, unknown keys refused, types strict (a number
/// where a string belongs is an error, not converted).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSettings {
    flows: Option<String>,
    listen: Option<String>,
    node_id: Option<String>,
    deployment: Option<String>,
    shutdown_timeout_seconds: Option<f64>,
    log_format: Option<String>,
    admin_token_file: Option<String>,
    tls_cert: Option<String>,
    tls_key: Option<String>,
    reload: Option<String>,
}

impl FileSettings {
    /// Whether the file sets `key`.
    fn sets(&self, key: &str) -> bool {
        match key {
            "flows" => self.flows.is_some(),
            "listen" => self.listen.is_some(),
            "node_id" => self.node_id.is_some(),
            "deployment" => self.deployment.is_some(),
            "shutdown_timeout_seconds" => self.shutdown_timeout_seconds.is_some(),
            "log_format" => self.log_format.is_some(),
            "admin_token_file" => self.admin_token_file.is_some(),
            "tls_cert" => self.tls_cert.is_some(),
            "tls_key" => self.tls_key.is_some(),
            "reload" => self.reload.is_some(),
            _ => false,
        }
    }
}

/// `ferry run`'s settings: the settings file at `file` (if any), the process's `FERRY_*` variables, then
/// `flags`.
pub fn load(file: Option<&Path>, flags: &Flags) -> Result<NodeSettings, SettingsErrors> {
    let text = match file {
        Some(path) => Some(std::fs::read_to_string(path).map_err(|e| {
            SettingsError::new(path.display().to_string(), format!("cannot read the settings file: {e}"))
        })?),
        None => None,
    };
    // vars_os: a variable that is not UTF-8 (none of ours) must not stop the node.
    let env: BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| k.starts_with("FERRY_"))
        .collect();
    resolve(file.zip(text.as_deref()), &env, flags)
}

/// The layering itself, pure: `file` as (path, text), `env` the environment (variables ferry does not
/// know are ignored, as are empty ones), `flags` the command line.
pub fn resolve(
    file: Option<(&Path, &str)>,
    env: &BTreeMap<String, String>,
    flags: &Flags,
) -> Result<NodeSettings, SettingsErrors> {
    let written = file.map(|(path, text)| parse_file(path, text)).transpose()?;
    let env: BTreeMap<&'static str, &str> =
        KEYS.iter().filter_map(|k| env.get(k.env).filter(|v| !v.is_empty()).map(|v| (k.env, v.as_str()))).collect();
    let given = flags.given()?;

    // The file was parsed strictly already: a merge error is not the operator's.
    let merged = merge(file.map(|(_, text)| text), &env, &given)
        .map_err(|e| SettingsError::new("node settings", format!("cannot merge the layers: {e}")))?;
    let origin = |k: &Key| {
        if given.iter().any(|(name, _)| *name == k.name) {
            Origin::Flag(k.flag)
        } else if env.contains_key(k.env) {
            Origin::Env(k.env)
        } else if let (Some(w), Some((path, _))) = (&written, file)
            && w.sets(k.name)
        {
            Origin::File(path.to_path_buf())
        } else {
            Origin::Default
        }
    };
    let mut origins = BTreeMap::new();
    let mut values = BTreeMap::new();
    for k in &KEYS {
        if let Ok(v) = merged.get_string(k.name) {
            origins.insert(k.name, origin(k));
            values.insert(k.name, v);
        }
    }
    let mut check = Checks { origins: &origins, file, errors: Vec::new() };
    let settings = check.settings(&values, origins.clone());
    match settings {
        Some(s) if check.errors.is_empty() => Ok(s),
        _ => Err(SettingsErrors(check.errors)),
    }
}

/// The `config` crate's merge of the layers, lowest first.
fn merge(
    file: Option<&str>,
    env: &BTreeMap<&'static str, &str>,
    given: &[(&'static str, String)],
) -> Result<::config::Config, ::config::ConfigError> {
    let mut builder = ::config::Config::builder();
    for (key, value) in DEFAULTS {
        builder = builder.set_default(key, value)?;
    }
    if let Some(text) = file {
        builder = builder.add_source(::config::File::from_str(text, ::config::FileFormat::Toml));
    }
    let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    builder = builder.add_source(::config::Environment::with_prefix("FERRY").source(Some(env)));
    for (key, value) in given {
        builder = builder.set_override(*key, value.as_str())?;
    }
    builder.build()
}

/// The file, strictly: a syntax error, an unknown key or a wrong type is refused with its line and key.
fn parse_file(path: &Path, text: &str) -> Result<FileSettings, SettingsError> {
    let shown = path.display();
    let de = toml::de::Deserializer::parse(text)
        .map_err(|e| SettingsError::new(shown.to_string(), crate::config::syntax_error(text, &e)))?;
    FileSettings::deserialize(de).map_err(|e| {
        let offset = e.span().map_or(0, |s| s.start);
        let key = key_at(text, offset);
        let at = format!("{shown}: line {}", line_at(text, offset));
        let at = if key.is_empty() { at } else { format!("{at}: {key}") };
        SettingsError::new(at, unquote_values(e.message()))
    })
}

/// Checks the merged values, collecting every error.
struct Checks<'a> {
    origins: &'a BTreeMap<&'static str, Origin>,
    file: Option<(&'a Path, &'a str)>,
    errors: Vec<SettingsError>,
}

impl Checks<'_> {
    /// Where `key`'s value came from, as an error names it.
    fn at(&self, key: &str) -> String {
        let k = KEYS.iter().find(|k| k.name == key).expect("a known key");
        match self.origins.get(key) {
            Some(Origin::Flag(flag)) => (*flag).to_string(),
            Some(Origin::Env(var)) => (*var).to_string(),
            Some(Origin::File(path)) => match self.file.and_then(|(_, text)| line_of_key(text, key)) {
                Some(line) => format!("{}: line {line}: {key}", path.display()),
                None => format!("{}: {key}", path.display()),
            },
            Some(Origin::Default) | None => format!("{} (default)", k.flag),
        }
    }

    /// Records that `key`'s value is refused; `None` to stand for the value.
    fn fail<T>(&mut self, key: &str, reason: impl Into<String>) -> Option<T> {
        let at = self.at(key);
        self.errors.push(SettingsError::new(at, reason));
        None
    }

    /// A path, relative to the settings file's directory when the file gave it.
    fn path(&self, key: &str, value: &str) -> PathBuf {
        match (self.origins.get(key), self.file) {
            (Some(Origin::File(_)), Some((file, _))) => {
                file.parent().map_or_else(|| PathBuf::from(value), |dir| dir.join(value))
            }
            _ => PathBuf::from(value),
        }
    }

    fn settings(
        &mut self,
        values: &BTreeMap<&'static str, String>,
        origins: BTreeMap<&'static str, Origin>,
    ) -> Option<NodeSettings> {
        let get = |key: &str| values.get(key).map(String::as_str).unwrap_or_default();
        let flows = match values.get("flows").map(String::as_str) {
            Some("") => self.fail("flows", "must name the flows directory"),
            Some(dir) => Some(self.path("flows", dir)),
            None => {
                let reason = "no flows directory: give --flows DIR, FERRY_FLOWS or `flows` in the settings file";
                self.errors.push(SettingsError::new("--flows", reason));
                None
            }
        };
        let raw = get("listen");
        let listen = raw.parse::<SocketAddr>().ok().or_else(|| {
            self.fail("listen", format!("`{raw}` is not an address to listen on (IP:PORT, e.g. 127.0.0.1:9464)"))
        });
        let node_id = Some(get("node_id")).filter(|id| !id.is_empty()).map(str::to_string);
        if node_id.as_ref().is_some_and(|id| id.contains(NODE_ID_RESERVED)) {
            self.fail::<()>(
                "node_id",
                format!("must not contain `{NODE_ID_RESERVED}` (ferry names a node's second producer `<id>{NODE_ID_RESERVED}1`)"),
            );
        }
        let deployment = get("deployment").to_string();
        if deployment.is_empty() {
            self.fail::<()>("deployment", "must not be empty (it prefixes the groups the node uses)");
        }
        let raw = get("shutdown_timeout_seconds");
        let shutdown_timeout = match raw.parse::<f64>() {
            Ok(s) if s.is_finite() && s >= 0.0 => Some(Duration::from_secs_f64(s)),
            _ => self.fail("shutdown_timeout_seconds", format!("`{raw}` is not a number of seconds (0 or more)")),
        };
        let log_format = match get("log_format") {
            "text" => Some(LogFormat::Text),
            "json" => Some(LogFormat::Json),
            other => self.fail("log_format", format!("`{other}` is not a log format: text or json")),
        };
        let reload = match get("reload") {
            "auto" => Some(ReloadMode::Auto),
            "manual" => Some(ReloadMode::Manual),
            other => self.fail("reload", format!("`{other}` is not a reload mode: auto or manual")),
        };
        let file = |key: &str| Some(get(key)).filter(|p| !p.is_empty()).map(|p| self.path(key, p));
        let admin_token_file = file("admin_token_file");
        let tls = match (file("tls_cert"), file("tls_key")) {
            (Some(cert), Some(key)) => Some(Some(TlsFiles { cert, key })),
            (None, None) => Some(None),
            (Some(_), None) => self.fail("tls_cert", "needs tls_key too (--tls-key, FERRY_TLS_KEY or `tls_key`)"),
            (None, Some(_)) => self.fail("tls_key", "needs tls_cert too (--tls-cert, FERRY_TLS_CERT or `tls_cert`)"),
        };
        Some(NodeSettings {
            flows: flows?,
            listen: listen?,
            node_id,
            deployment,
            shutdown_timeout: shutdown_timeout?,
            log_format: log_format?,
            admin_token_file,
            tls: tls?,
            reload: reload?,
            origins,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "flows = \"flows\"\nlisten = \"0.0.0.0:7000\"\nnode_id = \"file-node\"\n\
                        deployment = \"file-dep\"\nshutdown_timeout_seconds = 5\nlog_format = \"json\"\n";

    fn env(vars: &[(&str, &str)]) -> BTreeMap<String, String> {
        vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn resolve_in(file: Option<&str>, vars: &[(&str, &str)], flags: &Flags) -> Result<NodeSettings, SettingsErrors> {
        resolve(file.map(|text| (Path::new("/etc/ferry/node.toml"), text)), &env(vars), flags)
    }

    fn flows_flag() -> Flags {
        Flags { flows: Some("/srv/flows".into()), ..Flags::default() }
    }

    /// The five settings every layer test looks at.
    fn five(s: &NodeSettings) -> (String, Option<&str>, &str, f64, LogFormat) {
        (
            s.listen.to_string(),
            s.node_id.as_deref(),
            s.deployment.as_str(),
            s.shutdown_timeout.as_secs_f64(),
            s.log_format,
        )
    }

    #[test]
    fn defaults_then_file_then_env_then_flags() {
        let s = resolve_in(None, &[], &flows_flag()).expect("defaults");
        assert_eq!(five(&s), ("127.0.0.1:9464".into(), None, "ferry", 30.0, LogFormat::Text));
        assert_eq!((s.reload, s.tls.clone(), s.admin_token_file.clone()), (ReloadMode::Auto, None, None));
        assert_eq!(s.sources(), "flows from --flows");

        let s = resolve_in(Some(FILE), &[], &Flags::default()).expect("file");
        assert_eq!(five(&s), ("0.0.0.0:7000".into(), Some("file-node"), "file-dep", 5.0, LogFormat::Json));
        assert_eq!(s.flows, PathBuf::from("/etc/ferry/flows"), "relative to the settings file");
        assert_eq!(s.origins["listen"], Origin::File("/etc/ferry/node.toml".into()));

        let vars = [
            ("FERRY_LISTEN", "127.0.0.1:7001"),
            ("FERRY_NODE_ID", "env-node"),
            ("FERRY_DEPLOYMENT", "env-dep"),
            ("FERRY_SHUTDOWN_TIMEOUT_SECONDS", "7.5"),
            ("FERRY_LOG_FORMAT", "text"),
            ("FERRY_FLOWS", "env-flows"),
        ];
        let s = resolve_in(Some(FILE), &vars, &Flags::default()).expect("env");
        assert_eq!(five(&s), ("127.0.0.1:7001".into(), Some("env-node"), "env-dep", 7.5, LogFormat::Text));
        assert_eq!(s.flows, PathBuf::from("env-flows"), "relative to the working directory");
        assert_eq!(s.origins["listen"], Origin::Env("FERRY_LISTEN"));

        let flags = Flags {
            listen: Some("127.0.0.1:7002".parse().expect("addr")),
            node_id: Some("flag-node".into()),
            deployment: Some("flag-dep".into()),
            shutdown_timeout: Some(0.0),
            log_format: Some(LogFormat::Json),
            reload: Some(ReloadMode::Manual),
            ..flows_flag()
        };
        let s = resolve_in(Some(FILE), &vars, &flags).expect("flags");
        assert_eq!(five(&s), ("127.0.0.1:7002".into(), Some("flag-node"), "flag-dep", 0.0, LogFormat::Json));
        assert_eq!((s.flows.as_path(), s.reload), (Path::new("/srv/flows"), ReloadMode::Manual));
        assert_eq!(s.origins["listen"], Origin::Flag("--listen"));
        assert!(s.sources().contains("listen from --listen"), "{}", s.sources());
    }

    #[test]
    fn unknown_and_empty_variables_are_ignored() {
        let vars = [("FERRY_BIN", "x"), ("FERRY_TEST_KEEP_LOGS", "/tmp"), ("FERRY_NODE_ID", ""), ("FERRY_CONFIG", "x")];
        let s = resolve_in(None, &vars, &flows_flag()).expect("ignored");
        assert_eq!(five(&s), ("127.0.0.1:9464".into(), None, "ferry", 30.0, LogFormat::Text));
    }

    #[test]
    fn the_file_is_strict_and_its_errors_name_file_line_and_key() {
        let e = resolve_in(Some("listen = \"0.0.0.0:1\"\nlisen = \"x\"\n"), &[], &flows_flag()).expect_err("typo");
        assert_eq!(
            e.0[0].to_string(),
            "/etc/ferry/node.toml: line 2: lisen: unknown field `lisen`, expected one of \
             `flows`, `listen`, `node_id`, `deployment`, `shutdown_timeout_seconds`, `log_format`, \
             `admin_token_file`, `tls_cert`, `tls_key`, `reload`"
        );
        let e = resolve_in(Some("\nshutdown_timeout_seconds = \"30\"\n"), &[], &flows_flag()).expect_err("type");
        assert_eq!(e.0[0].at, "/etc/ferry/node.toml: line 2: shutdown_timeout_seconds");
        assert!(e.0[0].reason.starts_with("invalid type: string"), "{e}");
        let e = resolve_in(Some("listen = \"nowhere\"\n"), &[], &flows_flag()).expect_err("no address");
        assert_eq!(e.0[0].at, "/etc/ferry/node.toml: line 1: listen");
        let e = resolve_in(Some("listen = [\n"), &[], &flows_flag()).expect_err("syntax");
        assert!(e.0[0].to_string().starts_with("/etc/ferry/node.toml: invalid TOML at line 1"), "{e}");
    }

    #[test]
    fn every_refused_value_names_its_source() {
        let vars = [
            ("FERRY_LISTEN", "localhost"),
            ("FERRY_SHUTDOWN_TIMEOUT_SECONDS", "-1"),
            ("FERRY_LOG_FORMAT", "xml"),
            ("FERRY_RELOAD", "sometimes"),
            ("FERRY_TLS_CERT", "cert.pem"),
        ];
        let e = resolve_in(Some("deployment = \"\"\n"), &vars, &Flags::default()).expect_err("refused");
        let at: Vec<&str> = e.0.iter().map(|e| e.at.as_str()).collect();
        assert_eq!(
            at,
            [
                "--flows",
                "FERRY_LISTEN",
                "/etc/ferry/node.toml: line 1: deployment",
                "FERRY_SHUTDOWN_TIMEOUT_SECONDS",
                "FERRY_LOG_FORMAT",
                "FERRY_RELOAD",
                "FERRY_TLS_CERT",
            ]
        );
        assert!(e.to_string().contains("FERRY_LOG_FORMAT: `xml` is not a log format: text or json"), "{e}");
    }

    #[test]
    fn a_node_id_cannot_hold_the_character_that_names_a_second_producer() {
        let e = resolve_in(None, &[("FERRY_NODE_ID", "east~1")], &flows_flag()).expect_err("reserved");
        assert!(e.to_string().contains("FERRY_NODE_ID: must not contain `~`"), "{e}");
        assert!(resolve_in(None, &[("FERRY_NODE_ID", "east-1.example_2")], &flows_flag()).is_ok());
    }

    #[test]
    fn printed_settings_read_back_as_the_same_settings() {
        let vars = [("FERRY_NODE_ID", "env-node"), ("FERRY_ADMIN_TOKEN_FILE", "/run/token")];
        let s = resolve_in(Some(FILE), &vars, &Flags { reload: Some(ReloadMode::Manual), ..Flags::default() })
            .expect("settings");
        let printed = s.to_toml("env-node");
        assert!(printed.contains("listen = \"0.0.0.0:7000\"  # /etc/ferry/node.toml\n"), "{printed}");
        assert!(printed.contains("node_id = \"env-node\"  # FERRY_NODE_ID\n"), "{printed}");
        assert!(printed.contains("# tls_cert: unset\n"), "{printed}");
        let again = resolve_in(Some(&printed), &[], &Flags::default()).expect("reads back");
        assert_eq!(
            (five(&again), again.flows.as_path(), again.admin_token_file.as_deref(), again.reload),
            (five(&s), s.flows.as_path(), s.admin_token_file.as_deref(), s.reload)
        );
    }

    #[test]
    fn tls_files_may_come_from_different_layers() {
        let flags = Flags { tls_key: Some("/k.pem".into()), ..flows_flag() };
        let s = resolve_in(Some("tls_cert = \"cert.pem\"\n"), &[], &flags).expect("both");
        assert_eq!(s.tls, Some(TlsFiles { cert: "/etc/ferry/cert.pem".into(), key: "/k.pem".into() }));
    }

    #[test]
    fn every_setting_is_in_the_configuration_reference() {
        let text = crate::reference_docs::page("docs/configuration.md");
        let documented = crate::reference_docs::documented(&text);
        let rows = crate::reference_docs::table_rows(&text);
        let mut problems = Vec::new();
        for name in crate::reference_docs::serde_fields::<FileSettings>() {
            if !documented.contains(*name) {
                problems.push(format!("file key `{name}`: no table row names it in its first column"));
            }
        }
        for key in &KEYS {
            let named = |row: &&Vec<String>| row[0].split('`').skip(1).step_by(2).any(|s| s == key.name);
            match rows.iter().find(named) {
                None => problems.push(format!("setting `{}`: no table row names it in its first column", key.name)),
                Some(row) => {
                    for other in [key.env, key.flag] {
                        if !row.iter().any(|cell| cell.contains(&format!("`{other}`"))) {
                            problems.push(format!("setting `{}`: its row does not name `{other}`", key.name));
                        }
                    }
                }
            }
        }
        assert!(problems.is_empty(), "docs/configuration.md, node settings:\n{}", problems.join("\n"));
    }
}
