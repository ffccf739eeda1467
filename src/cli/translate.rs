//! `ferry translate -o json`: a group's translated offsets on a flow's target, with the same facts as the
//! table of [`crate::translate::render`] (topic, partition, translated, current), and what `--apply`
//! committed.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::translate::TranslatedOffsets;

/// The document for `group` on `flow` (whose target is `target`); `committed` is what `--apply` wrote.
pub fn offsets_json(
    flow: &str,
    target: &str,
    group: &str,
    offsets: &TranslatedOffsets,
    current: &BTreeMap<(String, i32), i64>,
    committed: Option<usize>,
) -> Value {
    let rows: Vec<Value> = offsets
        .iter()
        .map(|((topic, partition), (offset, _))| {
            json!({
                "topic": topic,
                "partition": partition,
                "translated": offset,
                "current": current.get(&(topic.clone(), *partition)),
            })
        })
        .collect();
    json!({ "flow": flow, "target": target, "group": group, "offsets": rows, "committed": committed })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_match_the_table() {
        let offsets: TranslatedOffsets =
            [(("east.t".to_string(), 0), (40, String::new())), (("east.t".to_string(), 1), (7, String::new()))].into();
        let current = [(("east.t".to_string(), 0), 12)].into();
        let table = crate::translate::render(&offsets, &current);
        let v = offsets_json("east->west", "west", "g", &offsets, &current, None);
        for (line, row) in table.lines().skip(1).zip(v["offsets"].as_array().expect("rows")) {
            let cells: Vec<&str> = line.split('\t').collect();
            assert_eq!(cells[0], row["topic"]);
            assert_eq!(cells[1], row["partition"].to_string());
            assert_eq!(cells[2], row["translated"].to_string());
            assert_eq!(cells[3], if row["current"].is_null() { "-".to_string() } else { row["current"].to_string() });
        }
        assert_eq!(v["offsets"].as_array().map(Vec::len), Some(2));
    }
}
