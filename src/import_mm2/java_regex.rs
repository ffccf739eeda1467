//! Java regex features Rust's `regex` crate lacks: MM2's patterns that use them cannot be carried over.

/// The Java regex feature in `pattern` that Rust's `regex` lacks, if any.
pub fn java_only(pattern: &str) -> Option<&'static str> {
    const FEATURES: &[(&str, &str)] = &[
        ("(?=", "lookahead"),
        ("(?!", "negative lookahead"),
        ("(?<=", "lookbehind"),
        ("(?<!", "negative lookbehind"),
        ("(?>", "an atomic group"),
        ("\\Q", "`\\Q...\\E` quoting"),
    ];
    if let Some((_, f)) = FEATURES.iter().find(|(s, _)| pattern.contains(s)) {
        return Some(f);
    }
    let b = pattern.as_bytes();
    let possessive = b
        .windows(2)
        .enumerate()
        .any(|(i, w)| matches!(w[0], b'*' | b'+' | b'?' | b'}') && w[1] == b'+' && (i == 0 || b[i - 1] != b'\\'));
    if possessive {
        return Some("a possessive quantifier");
    }
    let backreference = b
        .windows(2)
        .enumerate()
        .any(|(i, w)| w[0] == b'\\' && w[1].is_ascii_digit() && w[1] != b'0' && (i == 0 || b[i - 1] != b'\\'));
    backreference.then_some("a backreference")
}
