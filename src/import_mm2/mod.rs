//! `ferry import-mm2 FILE`: an MM2 configuration (dedicated mode's `mm2.properties`, or a Strimzi
//! `KafkaMirrorMaker2` resource) turned into a flows directory: `clusters.toml` and one file per flow,
//! with every setting that has a ferry equivalent, secrets as `${VAR}` or `${file:PATH}` references, and a
//! report of every key not carried over and why.
//!
//! The result is validated in-process ([`crate::config::check_dir_offline`]: the secrets it references
//! need not exist here) before anything is moved into the output directory; an invalid result is not left
//! behind.

mod dedicated;
mod java_regex;
mod mapping;
mod model;
mod policy_class;
mod properties;
mod strimzi;
mod transforms;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

pub use java_regex::java_only;
pub use mapping::{env_var, jaas};
pub use model::Unmapped;
pub use policy_class::parse_flag as parse_policy_class;

/// What `ferry import-mm2` was asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    pub file: PathBuf,
    pub out: PathBuf,
    /// Overwrite files that already exist in `out`.
    pub force: bool,
    /// Where ferry's pod mounts the Kubernetes secrets a Strimzi resource names, one directory each.
    pub secrets_dir: PathBuf,
    /// `--policy-class CLASS=TEMPLATE`: the naming template (or `default`, `identity`) a custom
    /// `replication.policy.class` implements, which ferry cannot read from a Java class.
    pub policy_classes: BTreeMap<String, String>,
}

/// Default of `--secrets-dir`.
pub const DEFAULT_SECRETS_DIR: &str = "/etc/ferry/secrets";

/// What an import did.
#[derive(Debug, Serialize)]
pub struct Report {
    pub input: String,
    /// `mm2.properties` or `KafkaMirrorMaker2`.
    pub format: &'static str,
    pub written: Vec<String>,
    /// `MM2 key` → `ferry key`.
    pub mapped: Vec<Mapping>,
    pub unmapped: Vec<Unmapped>,
    /// Environment variables the written files reference: each must be set where ferry runs.
    pub env: Vec<EnvVar>,
}

#[derive(Debug, Serialize)]
pub struct Mapping {
    pub mm2: String,
    pub ferry: String,
}

#[derive(Debug, Serialize)]
pub struct EnvVar {
    pub name: String,
    pub holds: String,
}

/// Reads, maps, validates and writes; every error (named by key, never by a secret value) at once.
pub fn import(opts: &Options) -> Result<Report, Vec<String>> {
    let shown = opts.file.display().to_string();
    let text = std::fs::read_to_string(&opts.file).map_err(|e| vec![format!("{shown}: cannot read: {e}")])?;
    let yaml = strimzi::looks_like_yaml(&opts.file, &text);
    let cfg = if yaml { strimzi::read(&text, &opts.secrets_dir) } else { dedicated::read(&properties::parse(&text)) }
        .map_err(|errs| errs.into_iter().map(|e| format!("{shown}: {e}")).collect::<Vec<_>>())?;
    if cfg.flows.is_empty() {
        return Err(vec![format!("{shown}: no enabled flow (dedicated mode needs `SOURCE->TARGET.enabled = true`)")]);
    }
    let bad_classes: Vec<String> = opts
        .policy_classes
        .iter()
        .filter(|(_, naming)| !matches!(naming.as_str(), "default" | "identity"))
        .filter_map(|(class, template)| {
            let e = crate::policy::NameTemplate::parse(template).err()?;
            Some(format!("--policy-class {class}={template}: {e}"))
        })
        .collect();
    if !bad_classes.is_empty() {
        return Err(bad_classes);
    }
    let mapped = mapping::map(cfg, &opts.policy_classes);
    if !mapped.errors.is_empty() {
        return Err(mapped.errors.iter().map(|e| format!("{shown}: {e}")).collect());
    }
    let files = render(&mapped, &shown).map_err(|e| vec![e])?;
    let written = write_checked(&opts.out, &files, opts.force)?;
    let mut env: Vec<EnvVar> = mapped.env.iter().map(|(n, h)| EnvVar { name: n.clone(), holds: h.clone() }).collect();
    env.sort_by(|a, b| a.name.cmp(&b.name));
    env.dedup_by(|a, b| a.name == b.name);
    Ok(Report {
        input: shown,
        format: if yaml { "KafkaMirrorMaker2" } else { "mm2.properties" },
        written: written.iter().map(|p| p.display().to_string()).collect(),
        mapped: mapped.mapped.iter().map(|(m, f)| Mapping { mm2: m.clone(), ferry: f.clone() }).collect(),
        unmapped: mapped.unmapped,
        env,
    })
}

/// A TOML table whose keys keep the order they were pushed in (`source` and `target` first).
struct Ordered<'a>(&'a [(String, toml::Value)]);

impl Serialize for Ordered<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// File names and contents: `clusters.toml`, then `<source>-to-<target>.toml` per flow.
fn render(m: &mapping::Mapped, input: &str) -> Result<Vec<(String, String)>, String> {
    #[derive(Serialize)]
    struct Clusters<'a> {
        clusters: Ordered<'a>,
    }
    #[derive(Serialize)]
    struct Flows<'a> {
        flows: Vec<Ordered<'a>>,
    }
    let header = format!("# Written by `ferry import-mm2` from {input}.\n");
    let err = |e: toml::ser::Error| format!("cannot write TOML: {e}");
    let mut files = vec![(
        "clusters.toml".to_string(),
        format!("{header}{}", toml::to_string(&Clusters { clusters: Ordered(&m.clusters) }).map_err(err)?),
    )];
    for (source, target, keys) in &m.flows {
        let text = toml::to_string(&Flows { flows: vec![Ordered(keys)] }).map_err(err)?;
        files.push((format!("{source}-to-{target}.toml"), format!("{header}{text}")));
    }
    Ok(files)
}

/// Writes `files` into a hidden staging directory of `out`, validates it there together with the other
/// flow files of `out`, then moves them into `out`. Existing files are refused unless `force`.
fn write_checked(out: &Path, files: &[(String, String)], force: bool) -> Result<Vec<PathBuf>, Vec<String>> {
    let existing: Vec<String> = files
        .iter()
        .map(|(name, _)| out.join(name))
        .filter(|p| p.exists())
        .map(|p| format!("{}: exists (--force overwrites it)", p.display()))
        .collect();
    if !existing.is_empty() && !force {
        return Err(existing);
    }
    let io = |what: &Path, e: std::io::Error| vec![format!("{}: {e}", what.display())];
    std::fs::create_dir_all(out).map_err(|e| io(out, e))?;
    let staging = out.join(format!(".ferry-import-mm2.{}", std::process::id()));
    std::fs::create_dir_all(&staging).map_err(|e| io(&staging, e))?;
    let result = (|| {
        for (name, text) in files {
            let path = staging.join(name);
            std::fs::write(&path, text).map_err(|e| io(&path, e))?;
        }
        // The directory as it will be: the flow files already there (a cluster defined twice is an error).
        for entry in std::fs::read_dir(out).map_err(|e| io(out, e))?.filter_map(Result::ok) {
            let (path, name) = (entry.path(), entry.file_name().to_string_lossy().to_string());
            if crate::config::is_flow_file(&path) && !files.iter().any(|(n, _)| *n == name) {
                std::fs::copy(&path, staging.join(&name)).map_err(|e| io(&path, e))?;
            }
        }
        crate::config::check_dir_offline(&staging, crate::kafka::check_client_properties).map_err(|errors| {
            let mut lines = vec!["the imported configuration does not validate, so nothing was written:".to_string()];
            lines.extend(errors.0.iter().map(|e| {
                let name = e.file.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
                format!(
                    "  {name}: {}{}",
                    if e.key.is_empty() { String::new() } else { format!("{}: ", e.key) },
                    // Reasons naming another file name the staging copy; the operator knows it in `out`.
                    e.reason.replace(&staging.display().to_string(), &out.display().to_string())
                )
            }));
            lines
        })?;
        let mut written = Vec::new();
        for (name, _) in files {
            let (from, to) = (staging.join(name), out.join(name));
            std::fs::rename(&from, &to).map_err(|e| io(&to, e))?;
            written.push(to);
        }
        Ok(written)
    })();
    let _ = std::fs::remove_dir_all(&staging);
    result
}

impl Report {
    /// The report for a terminal: files written, variables to set, keys not carried over.
    pub fn table(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(s, "imported {} ({}):", self.input, self.format);
        for w in &self.written {
            let _ = writeln!(s, "  wrote {w}");
        }
        let _ = writeln!(s, "{} key(s) mapped:", self.mapped.len());
        for m in &self.mapped {
            let _ = writeln!(s, "  {} -> {}", m.mm2, m.ferry);
        }
        if !self.env.is_empty() {
            let _ = writeln!(s, "set these environment variables where ferry runs (the files reference them):");
            for e in &self.env {
                let _ = writeln!(s, "  {}: {}", e.name, e.holds);
            }
        }
        let _ = writeln!(s, "{} key(s) not mapped:", self.unmapped.len());
        for u in &self.unmapped {
            let _ = writeln!(s, "  {}: {}", u.key, u.reason);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "Very-Secret-PW-77";

    fn props(extra: &str) -> String {
        format!(
            "clusters = east, west\neast.bootstrap.servers = e:9092\nwest.bootstrap.servers = w:9092\n\
             security.protocol = SASL_PLAINTEXT\nsasl.mechanism = SCRAM-SHA-256\n\
             sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required username=\"mm2\" password=\"{SECRET}\";\n\
             east->west.enabled = true\n{extra}"
        )
    }

    fn run(text: &str, out: &Path, force: bool) -> Result<Report, Vec<String>> {
        let file = out.parent().expect("parent").join("mm2.properties");
        std::fs::write(&file, text).expect("write");
        import(&Options {
            file,
            out: out.to_path_buf(),
            force,
            secrets_dir: DEFAULT_SECRETS_DIR.into(),
            policy_classes: BTreeMap::new(),
        })
    }

    #[test]
    fn the_result_validates_and_holds_no_secret() {
        let dir = tempfile::tempdir().expect("dir");
        let out = dir.path().join("flows");
        let report = run(&props("topics = orders.*\n"), &out, false).expect("imported");
        assert_eq!(report.written.len(), 2);
        for f in &report.written {
            let text = std::fs::read_to_string(f).expect("read");
            assert!(!text.contains(SECRET), "{f}: {text}");
        }
        assert!(!report.table().contains(SECRET) && !crate::cli::pretty(&report).contains(SECRET));
        assert_eq!(report.env[0].name, "FERRY_EAST_SASL_PASSWORD");
        crate::config::check_dir_offline(&out, crate::kafka::check_client_properties).expect("valid");
        // No staging directory is left behind.
        assert_eq!(std::fs::read_dir(&out).expect("dir").count(), 2);

        let e = run(&props(""), &out, false).expect_err("exists");
        assert!(e[0].ends_with("clusters.toml: exists (--force overwrites it)"), "{e:?}");
        run(&props(""), &out, true).expect("--force overwrites");

        // Validated with what else is in the directory: a second definition of `east` is refused.
        std::fs::write(out.join("other.toml"), "[clusters.east]\nbootstrap_servers = \"x:1\"\n").expect("write");
        let e = run(&props(""), &out, true).expect_err("east twice");
        assert!(e.iter().any(|l| l.contains("cluster `east` is already defined")), "{e:?}");
    }

    #[test]
    fn an_invalid_result_is_not_left_behind() {
        let dir = tempfile::tempdir().expect("dir");
        let out = dir.path().join("flows");
        let e = run(&props("east->west.replication.factor = 0\n"), &out, false).expect_err("invalid");
        assert!(e[0].contains("does not validate"), "{e:?}");
        assert!(e.iter().any(|l| l.contains("flows[0].replication_factor")), "{e:?}");
        assert_eq!(std::fs::read_dir(&out).expect("dir").count(), 0);
    }
}
