//! Reading a flows directory: every `*.toml` file, each parsed on its own (so errors name their file),
//! then validated together.

use std::path::{Path, PathBuf};

use serde::Deserialize as _;

use super::locate::{key_at, line_at};
use super::raw::{RawFile, RawValue};
use super::secrets::unquote_values;
use super::validate::validate;
use super::{ClientCheck, ConfigError, ConfigErrors, FlowSet};

/// Load and validate every `*.toml` file in `dir`. Either the whole set is valid, or every error found
/// is returned (a syntax error in one file does not hide problems in the others).
pub fn load_dir(dir: &Path, check: ClientCheck) -> Result<FlowSet, ConfigErrors> {
    let files = list_flow_files(dir).map_err(|e| ConfigErrors(vec![e]))?;
    let mut errors = Vec::new();
    let mut parsed = Vec::new();
    for file in files {
        match parse_file(&file) {
            Ok(raw) => parsed.push((file, raw)),
            Err(e) => errors.push(e),
        }
    }
    let env = |name: &str| std::env::var(name).ok();
    match validate(parsed, &env, check) {
        Ok(set) if errors.is_empty() => return Ok(set),
        Ok(_) => {}
        Err(ConfigErrors(more)) => errors.extend(more),
    }
    errors.sort_by(|a, b| a.file.cmp(&b.file));
    Err(ConfigErrors(errors))
}

/// Validate `dir` as [`load_dir`] does, without the secrets and files its clusters reference: how a
/// freshly generated directory (`ferry import-mm2`) is checked on a machine that has neither. Every
/// `${VAR}` and `${file:PATH}` stands for a placeholder, and the files of `*.location` properties
/// (certificates, keys) and keytabs are not opened; everything else is checked, librdkafka's property checks included.
pub fn check_dir_offline(dir: &Path, check: ClientCheck) -> Result<FlowSet, ConfigErrors> {
    let files = list_flow_files(dir).map_err(|e| ConfigErrors(vec![e]))?;
    let mut errors = Vec::new();
    let mut parsed = Vec::new();
    for file in files {
        match parse_file(&file) {
            Ok(mut raw) => {
                for cluster in raw.clusters.values_mut() {
                    cluster.client.retain(|k, _| !k.ends_with(".location") && !super::client_files::is_file_key(k));
                    for v in cluster.client.values_mut() {
                        if let RawValue::String(s) = v
                            && s.contains("${")
                        {
                            *s = "placeholder".to_string();
                        }
                    }
                }
                parsed.push((file, raw));
            }
            Err(e) => errors.push(e),
        }
    }
    match validate(parsed, &|_: &str| Some("placeholder".to_string()), check) {
        Ok(set) if errors.is_empty() => Ok(set),
        Ok(_) => Err(ConfigErrors(errors)),
        Err(ConfigErrors(more)) => {
            errors.extend(more);
            Err(ConfigErrors(errors))
        }
    }
}

/// The `*.toml` files of `dir`, sorted so that loading is deterministic.
fn list_flow_files(dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let read = std::fs::read_dir(dir).map_err(|e| ConfigError {
        file: dir.to_path_buf(),
        line: None,
        key: String::new(),
        reason: format!("cannot read the flows directory: {e}"),
    })?;
    let mut files: Vec<PathBuf> =
        read.filter_map(Result::ok).map(|entry| entry.path()).filter(|p| is_flow_file(p)).collect();
    files.sort();
    Ok(files)
}

/// A flow file: `*.toml`, not hidden (editors write `.name.toml.swp`-like temporaries).
pub fn is_flow_file(path: &Path) -> bool {
    let hidden = path.file_name().and_then(|n| n.to_str()).is_none_or(|n| n.starts_with('.'));
    !hidden && path.extension().is_some_and(|e| e == "toml") && path.is_file()
}

/// Parse one file into its raw form, strictly: serde through `toml` directly, so a value of the wrong
/// type is refused (`enabled = "off"` is no boolean) with its line and key, as is an unknown key.
fn parse_file(path: &Path) -> Result<RawFile, ConfigError> {
    let at = |reason: String| ConfigError { file: path.to_path_buf(), line: None, key: String::new(), reason };
    let text = std::fs::read_to_string(path).map_err(|e| at(format!("cannot read: {e}")))?;
    let de = toml::de::Deserializer::parse(&text).map_err(|e| at(syntax_error(&text, &e)))?;
    RawFile::deserialize(de).map_err(|e| {
        // `toml` names no key, only the span of the value (or key) it refused.
        let offset = e.span().map_or(0, |s| s.start);
        // Values are quoted in serde's messages (`invalid type: string "..."`); they may be secrets.
        let reason = unquote_values(e.message().trim_end());
        ConfigError { file: path.to_path_buf(), line: Some(line_at(&text, offset)), key: key_at(&text, offset), reason }
    })
}

/// "invalid TOML at line L, column C: reason". Never the offending line: `toml`'s own message quotes
/// it, and it may hold a literal secret (`"sasl.password" = "hunter2` with the quote unclosed).
pub(crate) fn syntax_error(text: &str, e: &toml::de::Error) -> String {
    let reason = e.message().trim_end().replace('\n', "; ");
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("invalid TOML at line {line}, column {column}: {reason}")
        }
        None => format!("invalid TOML: {reason}"),
    }
}

/// Every file that a `${file:PATH}` in the flow files of `dir` references (relative paths from `dir`),
/// sorted, whether the files are valid or not: what a change detector must watch besides the flow files
/// themselves, so that a rotated secret is noticed even while the set that references it is refused.
pub fn secret_files_in(dir: &Path) -> Vec<PathBuf> {
    let mut out = std::collections::BTreeSet::new();
    for file in list_flow_files(dir).unwrap_or_default() {
        let Ok(text) = std::fs::read_to_string(&file) else { continue };
        let mut rest = text.as_str();
        while let Some(start) = rest.find("${file:") {
            let after = &rest[start + "${file:".len()..];
            let Some(end) = after.find('}') else { break };
            if end > 0 {
                out.insert(file.parent().unwrap_or(dir).join(&after[..end]));
            }
            rest = &after[end..];
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syntax_errors_name_line_and_column_but_never_the_line() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, "[clusters.a]\nbootstrap_servers = \"x:1\"\n\"sasl.password\" = \"SECRET-1234\n")
            .expect("write");
        let e = parse_file(&path).expect_err("syntax error");
        assert!(e.reason.starts_with("invalid TOML at line 3, column"), "{}", e.reason);
        assert!(!e.reason.contains("SECRET-1234"), "{}", e.reason);
        std::fs::write(&path, "[[flows]\nsource = \"east\"\n").expect("write");
        let e = parse_file(&path).expect_err("syntax error");
        assert!(e.reason.contains("line 1, column 9"), "{}", e.reason);
    }

    #[test]
    fn values_in_type_errors_are_not_shown() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, "[clusters.a]\nbootstrap_servers = \"x:1\"\nclient = \"SECRET-5678\"\n").expect("write");
        let e = parse_file(&path).expect_err("type error");
        assert!(!e.reason.contains("SECRET-5678"), "{e}");
    }

    /// `text` as the file `flows.toml`, parsed.
    fn parse_text(text: &str) -> Result<RawFile, ConfigError> {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("flows.toml");
        std::fs::write(&path, text).expect("write");
        parse_file(&path)
    }

    const FLOW: &str = "[clusters.a]\nbootstrap_servers = \"x:1\"\n[[flows]]\nsource = \"a\"\ntarget = \"b\"\n";

    #[test]
    fn a_wrong_type_is_refused_with_line_and_key_not_converted() {
        let e = parse_text(&format!("{FLOW}enabled = \"off\"\n")).expect_err("a string is no boolean");
        assert_eq!((e.line, e.key.as_str()), (Some(6), "flows[0].enabled"), "{e}");
        let shown = e.to_string();
        assert!(shown.contains("flows.toml: line 6: flows[0].enabled: invalid type: string"), "{shown}");
        assert!(shown.contains("expected a boolean") && !shown.contains("off"), "{shown}");

        let e = parse_text(&format!("{FLOW}topics = [\"t\"]\nreplication_factor = \"3\"\n")).expect_err("no number");
        assert_eq!((e.line, e.key.as_str()), (Some(7), "flows[0].replication_factor"), "{e}");
        let e = parse_text(&format!("{FLOW}[[flows]]\nsource = \"b\"\ntarget = \"a\"\ntopics = [\"t\", 5]\n"))
            .expect_err("no string");
        assert_eq!((e.line, e.key.as_str()), (Some(9), "flows[1].topics[1]"), "{e}");
        let e = parse_text("[clusters.a]\nbootstrap_servers = \"x:1\"\nclient = { \"linger.ms\" = [5] }\n")
            .expect_err("no property value");
        assert_eq!((e.line, e.key.as_str()), (Some(3), "clusters.a.client.\"linger.ms\""), "{e}");
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = parse_text(&format!("{FLOW}colour = \"blue\"\n")).expect_err("unknown key");
        assert_eq!((e.line, e.key.as_str()), (Some(6), "flows[0].colour"), "{e}");
        assert!(e.reason.starts_with("unknown field `colour`"), "{e}");
        let e = parse_text("[cluster.a]\nbootstrap_servers = \"x:1\"\n").expect_err("unknown key");
        assert_eq!(e.key, "cluster", "{e}");
    }

    #[test]
    fn integers_stand_for_floats_and_properties_take_any_scalar() {
        let raw = parse_text(&format!(
            "{FLOW}linger_ms = 5\nemit_checkpoints_interval_seconds = 1\noffset_lag_max = 10\n\
             [clusters.b]\nbootstrap_servers = \"y:1\"\n\
             [clusters.b.client]\n\"linger.ms\" = 5\n\"batch.size\" = 1.5\n\"enable.idempotence\" = true\n\"acks\" = \"all\"\n"
        ))
        .expect("valid");
        let flow = &raw.flows[0];
        assert_eq!((flow.linger_ms, flow.emit_checkpoints_interval_seconds), (Some(5.0), Some(1.0)));
        let client: Vec<String> = raw.clusters["b"].client.values().map(|v| format!("{v:?}")).collect();
        assert_eq!(client, ["String(\"all\")", "Float(1.5)", "Bool(true)", "Int(5)"]);
    }

    #[test]
    fn secret_file_references_are_listed_even_in_broken_files() {
        let dir = tempfile::tempdir().expect("dir");
        let text = "[clusters.a\nx = \"${file:/run/secrets/a}\"\ny = \"${file:rel/b} ${file:/run/secrets/a}\"\n";
        std::fs::write(dir.path().join("a.toml"), text).expect("write");
        assert_eq!(secret_files_in(dir.path()), vec![PathBuf::from("/run/secrets/a"), dir.path().join("rel/b")]);
    }
}
