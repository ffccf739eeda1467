//! Java `.properties` syntax, as `java.util.Properties.load` reads it: `#`/`!` comment lines, a key ended
//! by the first unescaped `=`, `:` or whitespace, a line ending in an odd number of `\` continued on the
//! next (whose leading whitespace is dropped), and the escapes `\t \n \r \f \uXXXX` (any other `\x` is
//! `x`). A key given twice keeps its last value, as in Java.

use std::collections::BTreeMap;

/// Every key and value of `text`, with the line each key was (last) defined on.
pub fn parse(text: &str) -> BTreeMap<String, (String, usize)> {
    let mut out = BTreeMap::new();
    let lines: Vec<&str> = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
    let mut i = 0;
    while i < lines.len() {
        let start = i;
        let first = lines[i].trim_start_matches([' ', '\t', '\x0c']);
        i += 1;
        if first.is_empty() || first.starts_with('#') || first.starts_with('!') {
            continue;
        }
        let mut logical = String::from(first);
        while ends_in_odd_backslashes(&logical) && i <= lines.len() {
            logical.pop();
            match lines.get(i) {
                Some(next) => logical.push_str(next.trim_start_matches([' ', '\t', '\x0c'])),
                None => break,
            }
            i += 1;
        }
        let (key, value) = split_key_value(&logical);
        out.insert(unescape(key), (unescape(value), start + 1));
    }
    out
}

fn ends_in_odd_backslashes(s: &str) -> bool {
    s.chars().rev().take_while(|&c| c == '\\').count() % 2 == 1
}

/// The raw (still escaped) key and value of a logical line.
fn split_key_value(line: &str) -> (&str, &str) {
    let bytes = line.as_bytes();
    let mut end = bytes.len();
    let mut j = 0;
    while j < bytes.len() {
        match bytes[j] {
            b'\\' => j += 2,
            b'=' | b':' | b' ' | b'\t' | b'\x0c' => {
                end = j;
                break;
            }
            _ => j += 1,
        }
    }
    let end = end.min(bytes.len());
    let key = &line[..end];
    let mut rest = line[end..].trim_start_matches([' ', '\t', '\x0c']);
    if let Some(r) = rest.strip_prefix(['=', ':']) {
        rest = r.trim_start_matches([' ', '\t', '\x0c']);
    }
    (key, rest)
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\x0c'),
            Some('u') => {
                let hex: String = chars.clone().take(4).collect();
                match u32::from_str_radix(&hex, 16).ok().filter(|_| hex.len() == 4).and_then(char::from_u32) {
                    Some(ch) => {
                        out.push(ch);
                        for _ in 0..4 {
                            chars.next();
                        }
                    }
                    None => out.push('u'),
                }
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(text: &str) -> Vec<(String, String)> {
        parse(text).into_iter().map(|(k, (v, _))| (k, v)).collect()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn separators_comments_and_blank_lines() {
        let text = "# comment\n! also a comment\n\n  a=1\nb: 2\nc 3\nd   =   4  \ne\nf=\n  # indented comment\n";
        assert_eq!(get(text), pairs(&[("a", "1"), ("b", "2"), ("c", "3"), ("d", "4  "), ("e", ""), ("f", "")]));
    }

    #[test]
    fn continuations_join_lines_and_drop_leading_whitespace() {
        let text = "topics = orders, \\\n    payments.*, \\\r\n\t# not a comment\nnext=x\n";
        assert_eq!(get(text), pairs(&[("next", "x"), ("topics", "orders, payments.*, # not a comment")]));
        // An even number of backslashes is an escaped backslash, not a continuation.
        assert_eq!(get("a=c:\\\\\nb=2\n"), pairs(&[("a", "c:\\"), ("b", "2")]));
        // A continuation on the last line ends the value.
        assert_eq!(get("a=1\\"), pairs(&[("a", "1")]));
    }

    #[test]
    fn escapes_in_keys_and_values() {
        let text = "key\\ with\\=odd\\:chars = v\\tx\\u0041\\\\d\\.e\nA->B.enabled=true\nregex=.*\\\\.internal\n";
        assert_eq!(
            get(text),
            pairs(&[("A->B.enabled", "true"), ("key with=odd:chars", "v\txA\\d.e"), ("regex", ".*\\.internal")])
        );
    }

    #[test]
    fn the_last_definition_wins_and_lines_are_counted() {
        let parsed = parse("a=1\n\na=2\n");
        assert_eq!(parsed["a"], ("2".to_string(), 3));
    }
}
