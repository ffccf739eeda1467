//! What validation checks of single values: seconds, patterns, aliases and topic names, and the
//! error collector that names each one's file and key.

use std::path::Path;
use std::time::Duration;

use super::ConfigError;
use crate::filter::PatternList;

/// Collects errors for one file so each call site only names its key.
pub(super) struct Errors<'a> {
    pub(super) file: &'a Path,
    pub(super) out: &'a mut Vec<ConfigError>,
}

impl Errors<'_> {
    pub(super) fn push(&mut self, key: impl Into<String>, reason: impl Into<String>) {
        self.out.push(ConfigError {
            file: self.file.to_path_buf(),
            line: None,
            key: key.into(),
            reason: reason.into(),
        });
    }
}

/// Aliases become parts of topic names (`east.orders`, `east.checkpoints.internal`), so they must be
/// legal in a Kafka topic name and must not look like a flow id.
pub fn valid_alias(alias: &str) -> Result<(), String> {
    if alias.is_empty() {
        return Err("a cluster alias must not be empty".into());
    }
    if let Some(c) = alias.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))) {
        return Err(format!(
            "cluster alias `{alias}` contains `{c}`; use letters, digits, `_` and `-` (aliases become topic-name prefixes)"
        ));
    }
    Ok(())
}

/// Kafka's rule for a topic name: 1 to 249 of letters, digits, `.`, `_` and `-`, not `.` or `..`.
pub(super) fn kafka_topic_name(name: &str) -> Result<(), String> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name.len() > 249 || name == "." || name == ".." || !name.chars().all(legal) {
        return Err(format!("`{name}` is not a Kafka topic name (1 to 249 of letters, digits, `.`, `_` and `-`)"));
    }
    Ok(())
}

pub(super) fn seconds(key: &str, v: Option<f64>, default: f64, errs: &mut Errors<'_>) -> Duration {
    let s = v.unwrap_or(default);
    if !s.is_finite() || s <= 0.0 || s > 1e9 {
        errs.push(key, format!("must be a positive number of seconds, got {s}"));
        return Duration::from_secs_f64(default);
    }
    Duration::from_secs_f64(s)
}

pub(super) fn patterns(
    key: &str,
    v: Option<Vec<String>>,
    default: &[&str],
    errs: &mut Errors<'_>,
) -> (Vec<String>, Option<PatternList>) {
    let list: Vec<String> = v.unwrap_or_else(|| default.iter().map(|s| s.to_string()).collect());
    let mut ok = true;
    for (j, p) in list.iter().enumerate() {
        if let Err(e) = PatternList::new(std::slice::from_ref(p)) {
            errs.push(format!("{key}[{j}]"), e.to_string());
            ok = false;
        }
    }
    let compiled = if ok {
        match PatternList::new(&list) {
            Ok(c) => Some(c),
            Err(e) => {
                errs.push(key, e.to_string());
                None
            }
        }
    } else {
        None
    };
    (list, compiled)
}

pub(super) const COMPRESSIONS: &[&str] = &["none", "gzip", "snappy", "lz4", "zstd"];
