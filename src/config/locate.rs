//! Where a `toml` deserialisation error sits in its text: the line, and the dotted path of the key
//! (`flows[0].enabled`, `clusters.east.client."sasl.password"`). `toml`'s serde errors carry a byte span
//! but no key; ferry's errors name both, so the key is found by walking the document's spanned parse.

use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// The 1-based line of byte `offset` of `text`.
pub(crate) fn line_at(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end].iter().filter(|&&b| b == b'\n').count() + 1
}

/// The dotted path of the deepest key or value of `text` that holds byte `offset`; empty when none does
/// (the error is about the whole document) or the text does not parse.
pub(crate) fn key_at(text: &str, offset: usize) -> String {
    let Ok(doc) = DeTable::parse(text) else { return String::new() };
    in_table(doc.get_ref(), offset, "").unwrap_or_default()
}

/// The line of top-level `key` in `text`, if it is there.
pub(crate) fn line_of_key(text: &str, key: &str) -> Option<usize> {
    let doc = DeTable::parse(text).ok()?;
    let (found, _) = doc.get_ref().iter().find(|(k, _)| k.get_ref() == key)?;
    Some(line_at(text, found.span().start))
}

fn in_table(table: &DeTable<'_>, at: usize, path: &str) -> Option<String> {
    table.iter().find_map(|(key, value)| {
        let here =
            if path.is_empty() { shown_key(key.get_ref()) } else { format!("{path}.{}", shown_key(key.get_ref())) };
        if holds(key.span(), at) { Some(here) } else { in_value(value, at, &here) }
    })
}

/// Children first: a table written with a `[header]` has the header's span, which says nothing about
/// where its keys are.
fn in_value(value: &Spanned<DeValue<'_>>, at: usize, path: &str) -> Option<String> {
    let inner = match value.get_ref() {
        DeValue::Table(t) => in_table(t, at, path),
        DeValue::Array(items) => {
            items.iter().enumerate().find_map(|(i, item)| in_value(item, at, &format!("{path}[{i}]")))
        }
        _ => None,
    };
    inner.or_else(|| holds(value.span(), at).then(|| path.to_string()))
}

fn holds(span: std::ops::Range<usize>, at: usize) -> bool {
    span.start <= at && (at < span.end || span.start == span.end)
}

/// A key as the flow files' errors write it: bare when TOML allows, else quoted (`"sasl.password"`).
fn shown_key(key: &str) -> String {
    let bare = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare { key.to_string() } else { format!("\"{key}\"") }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(text: &str, needle: &str) -> String {
        key_at(text, text.find(needle).expect("needle"))
    }

    #[test]
    fn keys_are_found_in_headers_arrays_of_tables_and_inline_values() {
        let text = "[clusters.east]\nbootstrap_servers = \"e:1\"\n[clusters.east.client]\n\"sasl.password\" = 5\n\
                    [[flows]]\nsource = \"a\"\n[[flows]]\nsource = \"b\"\ntopics = [\"x\", 7]\n";
        assert_eq!(key_of(text, "\"e:1\""), "clusters.east.bootstrap_servers");
        assert_eq!(key_of(text, "5\n"), "clusters.east.client.\"sasl.password\"");
        assert_eq!(key_of(text, "\"b\""), "flows[1].source");
        assert_eq!(key_of(text, "7]"), "flows[1].topics[1]");
        assert_eq!(key_of(text, "source = \"a\""), "flows[0].source");
        assert_eq!(line_at(text, text.find("7]").expect("7")), 9);
    }
}
