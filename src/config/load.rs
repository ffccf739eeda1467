//! Reading a flows directory: every `*.toml` file, each parsed on its own (so errors name their file),
//! then validated together.

use std::path::{Path, PathBuf};

use super::raw::RawFile;
use super::secrets::unquote_values;
use super::validate::validate;
use super::{ConfigError, ConfigErrors, FlowSet};

/// Load and validate every `*.toml` file in `dir`. Either the whole set is valid, or every error found
/// is returned (a syntax error in one file does not hide problems in the others).
pub fn load_dir(dir: &Path) -> Result<FlowSet, ConfigErrors> {
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
    match validate(parsed, &env) {
        Ok(set) if errors.is_empty() => return Ok(set),
        Ok(_) => {}
        Err(ConfigErrors(more)) => errors.extend(more),
    }
    errors.sort_by(|a, b| a.file.cmp(&b.file));
    Err(ConfigErrors(errors))
}

/// The `*.toml` files of `dir`, sorted so that loading is deterministic.
fn list_flow_files(dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let read = std::fs::read_dir(dir).map_err(|e| ConfigError {
        file: dir.to_path_buf(),
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

/// Parse one file into its raw form. The `config` crate reads the TOML; serde rejects unknown keys.
fn parse_file(path: &Path) -> Result<RawFile, ConfigError> {
    let at = |reason: String| ConfigError { file: path.to_path_buf(), key: String::new(), reason };
    let text = std::fs::read_to_string(path).map_err(|e| at(format!("cannot read: {e}")))?;
    // Parse with `toml` first: its errors carry line and column, which `config` drops.
    if let Err(e) = text.parse::<toml::Table>() {
        return Err(at(syntax_error(&text, &e)));
    }
    // Values are quoted in serde's messages (`invalid type: string "..."`); they may be secrets.
    let built = config::Config::builder()
        .add_source(config::File::from_str(&text, config::FileFormat::Toml))
        .build()
        .map_err(|e| at(format!("invalid TOML: {}", unquote_values(&e.to_string()))))?;
    built.try_deserialize::<RawFile>().map_err(|e| {
        let (key, reason) = split_config_error(&unquote_values(&e.to_string()));
        ConfigError { file: path.to_path_buf(), key, reason }
    })
}

/// "invalid TOML at line L, column C: reason". Never the offending line: `toml`'s own message quotes
/// it, and it may hold a literal secret (`"sasl.password" = "hunter2` with the quote unclosed).
fn syntax_error(text: &str, e: &toml::de::Error) -> String {
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

/// `config` reports deserialisation errors as "REASON for key `PATH`"; split them so our message
/// reads "file: key: reason" like every other error.
fn split_config_error(msg: &str) -> (String, String) {
    let (mut key, reason) = match msg.rsplit_once(" for key `") {
        Some((reason, rest)) => (rest.trim_end_matches('`').to_string(), reason.to_string()),
        None => (String::new(), msg.to_string()),
    };
    // Name the unknown key itself, not just the table that holds it.
    if let Some(field) = reason.strip_prefix("unknown field `").and_then(|r| r.split('`').next()) {
        key = if key.is_empty() { field.to_string() } else { format!("{key}.{field}") };
    }
    (key, reason)
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

    #[test]
    fn secret_file_references_are_listed_even_in_broken_files() {
        let dir = tempfile::tempdir().expect("dir");
        let text = "[clusters.a\nx = \"${file:/run/secrets/a}\"\ny = \"${file:rel/b} ${file:/run/secrets/a}\"\n";
        std::fs::write(dir.path().join("a.toml"), text).expect("write");
        assert_eq!(secret_files_in(dir.path()), vec![PathBuf::from("/run/secrets/a"), dir.path().join("rel/b")]);
    }

    #[test]
    fn config_error_is_split_into_key_and_reason() {
        let (k, r) = split_config_error("invalid type: string \"x\", expected f64 for key `flows[0].offset_lag_max`");
        assert_eq!(k, "flows[0].offset_lag_max");
        assert!(r.starts_with("invalid type"));
        let (k, _) = split_config_error("unknown field `colour`, expected one of `source` for key `flows[0]`");
        assert_eq!(k, "flows[0].colour");
    }
}
