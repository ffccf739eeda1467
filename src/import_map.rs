//! The import map of `src/`, checked: files are rooms, paths through `crate::`, `super::` and `self::`
//! (in `use` lines and in code, not in comments or unit tests) are arrows, and no arrows may run in a
//! circle, between files or between the top-level modules. A file's arrows to its own ancestors do not
//! count: a child module is part of its parent's room (an `impl` split over files, a directory's
//! private helpers). Types several layers share live in small modules at the bottom (`config::login`,
//! `status::PauseRecord`, `flow::messages`); see docs/architecture.md, "Which module may use which".

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path (`flow::copier::rebalance`; the crate root is `""`) of each `.rs` file under `src/`,
/// with its code: comments and the unit-test module cut off. `main.rs` is left out (a binary of its own).
fn files(src: &Path) -> BTreeMap<String, String> {
    fn walk(dir: &Path, src: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).expect("read src") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                walk(&path, src, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(src).expect("under src").with_extension("");
                let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
                if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
                    parts.pop();
                }
                if parts == ["main"] {
                    continue;
                }
                let text = std::fs::read_to_string(&path).expect("read file");
                out.insert(parts.join("::"), code_of(&text));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(src, src, &mut out);
    out
}

/// `text` without its unit-test module and without comment lines.
fn code_of(text: &str) -> String {
    let code = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    code.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// Every path starting with `crate`, `super` or `self` in `code`, as its segments (a `{...}` group
/// yields one path per member, a `*` one path to the module).
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < bytes.len() {
        if !code.is_char_boundary(i) {
            i += 1;
            continue;
        }
        let at_word = i == 0 || !ident(bytes[i - 1]);
        let rest = &code[i..];
        let root = ["crate::", "super::", "self::"].into_iter().find(|r| rest.starts_with(r));
        let (true, Some(_)) = (at_word, root) else {
            i += 1;
            continue;
        };
        let mut segs = Vec::new();
        let mut j = i;
        loop {
            let start = j;
            while j < bytes.len() && ident(bytes[j]) {
                j += 1;
            }
            if start == j {
                break;
            }
            segs.push(code[start..j].to_string());
            if !code[j..].starts_with("::") {
                break;
            }
            j += 2;
            if code[j..].starts_with('{') {
                let end = code[j..].find('}').map_or(code.len(), |e| j + e);
                for member in code[j + 1..end].split(',') {
                    let first = member.trim().split(|c: char| !c.is_alphanumeric() && c != '_').next().unwrap_or("");
                    if !first.is_empty() && first != "self" {
                        let mut p = segs.clone();
                        p.push(first.to_string());
                        out.push(p);
                    }
                }
                segs.clear();
                j = end;
                break;
            }
        }
        if !segs.is_empty() {
            out.push(segs);
        }
        i = j.max(i + 1);
    }
    out
}

/// The file a path written in module `from` reaches: the longest prefix of it that is a file.
fn target(path: &[String], from: &str, files: &BTreeMap<String, String>) -> Option<String> {
    let mut base: Vec<&str> = if from.is_empty() { Vec::new() } else { from.split("::").collect() };
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => base.clear(),
        Some("self") => {}
        Some("super") => {
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
            return longest(&base, rest, files);
        }
        _ => return None,
    }
    longest(&base, &rest[1..], files)
}

fn longest(base: &[&str], rest: &[String], files: &BTreeMap<String, String>) -> Option<String> {
    (0..=rest.len()).rev().find_map(|n| {
        let mut parts: Vec<&str> = base.to_vec();
        parts.extend(rest[..n].iter().map(String::as_str));
        let name = parts.join("::");
        files.contains_key(&name).then_some(name)
    })
}

/// File → the files it uses, without arrows to itself, to the crate root, or to its own ancestors.
fn arrows(files: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    files
        .iter()
        .map(|(from, code)| {
            let to = paths(code)
                .iter()
                .filter_map(|p| target(p, from, files))
                .filter(|t| !t.is_empty() && t != from && !from.starts_with(&format!("{t}::")))
                .collect();
            (from.clone(), to)
        })
        .collect()
}

/// The strongly connected components of more than one node (Tarjan).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            if !s.index.contains_key(w.as_str()) {
                visit(s, w);
                let lw = s.low[w.as_str()];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w.as_str()) {
                let iw = s.index[w.as_str()];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[test]
fn no_circles_between_files_or_top_level_modules() {
    let files = files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let arrows = arrows(&files);
    let by_file = circles(&arrows);
    assert!(by_file.is_empty(), "files that use each other in a circle: {by_file:?}");
    let mut modules: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, to) in &arrows {
        let top = |m: &str| m.split("::").next().unwrap_or_default().to_string();
        let entry = modules.entry(top(from)).or_default();
        entry.extend(to.iter().map(|t| top(t)).filter(|t| *t != top(from)));
    }
    let by_module = circles(&modules);
    assert!(by_module.is_empty(), "top-level modules that use each other in a circle: {by_module:?}");
}

#[test]
fn a_circle_is_found() {
    let code = |s: &str| s.to_string();
    let files: BTreeMap<String, String> = [
        ("a".to_string(), code("use crate::b::X;")),
        ("b".to_string(), code("fn f() { super::a::g(); }")),
        ("c".to_string(), code("use crate::{a, b};")),
        ("c::d".to_string(), code("use super::*; use crate::c::e;")),
        ("c::e".to_string(), code("use super::d;")),
    ]
    .into_iter()
    .collect();
    let arrows = arrows(&files);
    assert_eq!(arrows["c"], ["a", "b"].iter().map(|s| s.to_string()).collect());
    assert!(arrows["c::d"].contains("c::e") && !arrows["c::d"].contains("c"), "{arrows:?}");
    assert_eq!(circles(&arrows), vec![vec!["a".to_string(), "b".to_string()], vec!["c::d".into(), "c::e".into()]]);
}
