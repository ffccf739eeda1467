//! The reference pages checked against the code, in the way vector generates its reference from its
//! config types: every key `ferry validate` accepts is in `docs/configuration.md` (the flow files here,
//! the node settings in `settings.rs`), every metric the node registers is in `docs/metrics.md` (in
//! `metrics.rs`), every relative link of the docs resolves, and every repository path they name exists.
//!
//! The pages are read when the tests run, so a docs edit needs no rebuild.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// The repository's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A page of the repository (`docs/metrics.md`).
pub fn page(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The field names of a struct as serde's derive reads them: exactly the keys it accepts (its
/// `deserialize_struct` call carries them; with `deny_unknown_fields`, no others).
pub fn serde_fields<T: for<'de> Deserialize<'de>>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(FieldNames(&mut fields));
    assert!(!fields.is_empty(), "{} is not a struct with named fields", std::any::type_name::<T>());
    fields
}

/// A deserializer that only notes the fields a struct asks for, and fails.
struct FieldNames<'a>(&'a mut &'static [&'static str]);

impl<'de> Deserializer<'de> for FieldNames<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = fields;
        Err(de::Error::custom("fields noted"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

/// The table rows of a page (outside code blocks), each as its cells, separator rows left out.
pub fn table_rows(text: &str) -> Vec<Vec<String>> {
    prose_lines(text)
        .filter(|l| l.starts_with('|'))
        .map(|l| l.trim().trim_matches('|').split(" | ").map(|c| c.trim().to_string()).collect::<Vec<_>>())
        .filter(|cells| !cells.iter().all(|c| c.chars().all(|ch| ch == '-' || ch == ':')))
        .collect()
}

/// The names the first cells of a page's tables give in backticks: each word of a span, so that
/// `` `a`, `b` / `c` `` names a, b and c, and `` `[clusters.<alias>]` `` names clusters.
pub fn documented(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for row in table_rows(text) {
        for span in row[0].split('`').skip(1).step_by(2) {
            for word in span.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '*')) {
                if !word.is_empty() {
                    names.insert(word.to_string());
                }
            }
        }
    }
    names
}

/// Whether `name` is among the documented names, directly or by a pattern such as `process_*`.
pub fn is_documented(documented: &BTreeSet<String>, name: &str) -> bool {
    documented.contains(name)
        || documented.iter().any(|d| d.strip_suffix('*').is_some_and(|prefix| name.starts_with(prefix)))
}

/// The lines of a page outside fenced code blocks.
fn prose_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    text.lines().filter(move |l| {
        if l.starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// A line without its inline code spans (a link inside one is an example, not a link).
fn without_code(line: &str) -> String {
    line.split('`').step_by(2).collect::<Vec<_>>().join("")
}

/// GitHub's anchor of a heading: lowercase, punctuation dropped (but `-` and `_`), spaces to `-`.
pub fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings (a repeated heading gets `-1`, `-2`, ... as on GitHub).
pub fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for line in prose_lines(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        let Some(heading) = line.get(hashes..).and_then(|h| h.strip_prefix(' ')) else { continue };
        if hashes == 0 || hashes > 6 {
            continue;
        }
        let base = anchor(heading);
        let mut candidate = base.clone();
        let mut n = 0;
        while seen.contains(&candidate) {
            n += 1;
            candidate = format!("{base}-{n}");
        }
        seen.insert(candidate);
    }
    seen
}

/// The targets of a page's markdown links, `[text](target)`, outside code.
pub fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in prose_lines(text) {
        let line = without_code(line);
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            found.push(rest[..end].trim().to_string());
            rest = &rest[end..];
        }
    }
    found
}

/// The markdown pages whose links are checked: the README, `docs/`, and the other directories' pages.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    for dir in ["docs", "dashboards", "docker", "bench"] {
        let mut in_dir: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        in_dir.sort();
        pages.extend(in_dir);
    }
    pages
}

/// What is wrong with one relative link of `page`, if anything.
fn broken(page: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, fragment) = match target.split_once('#') {
        Some((path, fragment)) => (path, Some(fragment)),
        None => (target, None),
    };
    let file = if path.is_empty() { page.to_path_buf() } else { page.parent().expect("dir").join(path) };
    if !file.exists() {
        return Some(format!("{} does not exist", file.display()));
    }
    let fragment = fragment.filter(|_| file.extension().is_some_and(|x| x == "md"))?;
    let text = std::fs::read_to_string(&file).expect("page");
    (!anchors(&text).contains(fragment))
        .then(|| format!("{} has no heading with the anchor #{fragment}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::raw::{RawCluster, RawFile, RawFlow};

    #[test]
    fn every_flow_file_key_is_in_the_configuration_reference() {
        let documented = documented(&page("docs/configuration.md"));
        let keys = [serde_fields::<RawFile>(), serde_fields::<RawCluster>(), serde_fields::<RawFlow>()].concat();
        assert!(keys.contains(&"bootstrap_servers") && keys.contains(&"delivery"), "{keys:?}");
        let missing: Vec<_> = keys.iter().filter(|k| !is_documented(&documented, k)).collect();
        assert!(
            missing.is_empty(),
            "keys `ferry validate` accepts that no table of docs/configuration.md names in its first column: {missing:?}"
        );
    }

    #[test]
    fn every_relative_link_resolves() {
        let mut problems = Vec::new();
        let mut checked = 0;
        for page in pages() {
            let text = std::fs::read_to_string(&page).expect("page");
            for target in links(&text) {
                checked += 1;
                if let Some(problem) = broken(&page, &target) {
                    problems.push(format!("{}: ({target}): {problem}", page.display()));
                }
            }
        }
        assert!(checked > 100, "only {checked} links found");
        assert!(problems.is_empty(), "broken links:\n{}", problems.join("\n"));
    }

    #[test]
    fn every_repository_path_the_docs_name_exists() {
        let roots = ["src/", "tests/", "scripts/", "dashboards/", "docker/", "bench/", "examples/", "flows/"];
        let mut missing = Vec::new();
        for page in pages().iter().filter(|p| p.ends_with("README.md") || p.parent() == Some(&root().join("docs"))) {
            let text = std::fs::read_to_string(page).expect("page");
            for line in prose_lines(&text) {
                for span in line.split('`').skip(1).step_by(2) {
                    let is_path = roots.iter().any(|r| span.starts_with(r))
                        && span.chars().all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c));
                    if is_path && !root().join(span).exists() {
                        missing.push(format!("{}: `{span}`", page.display()));
                    }
                }
            }
        }
        assert!(missing.is_empty(), "paths named in the docs that do not exist:\n{}", missing.join("\n"));
    }

    #[test]
    fn anchors_follow_github() {
        assert_eq!(anchor("Node settings (`ferry run`)"), "node-settings-ferry-run");
        assert_eq!(anchor("Preflight: ferry check"), "preflight-ferry-check");
        assert_eq!(anchor("From MM2's metrics to ferry's"), "from-mm2s-metrics-to-ferrys");
        let text = "# A\n```\n# not a heading\n```\n## A\n#4629) no heading\n";
        assert_eq!(anchors(text), BTreeSet::from(["a".to_string(), "a-1".to_string()]));
        assert_eq!(links("[x](a.md#b) `[y](c.md)` [z](d.md)"), vec!["a.md#b", "d.md"]);
    }
}
