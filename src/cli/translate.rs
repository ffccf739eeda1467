//! `ferry translate -o json`: the selected groups' translated offsets on a flow's target, with the same
//! facts as the tables of [`crate::translate::render`] and [`crate::translate::render_groups`] (topic,
//! partition, translated, current), each group's checkpoint age, why `--apply` refused it, and what it
//! committed.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::translate::{GroupReport, Report, TranslatedOffsets};

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

/// One group's document (`--group G -o json`, and each entry of [`report_json`]'s `groups`): the
/// fields of [`offsets_json`] and `checkpoint_at` (ms since the epoch), `checkpoint_age_seconds`,
/// `refused` (`{kind, reason}` or null) and `error` (a failed commit, or null).
pub fn group_json(flow: &str, target: &str, g: &GroupReport) -> Value {
    let mut doc = offsets_json(flow, target, &g.group, &g.offsets, &g.current, g.committed);
    doc["checkpoint_at"] = json!(g.checkpoint_ms);
    doc["checkpoint_age_seconds"] = json!(g.age.as_secs_f64());
    doc["refused"] = g.refused.as_ref().map_or(Value::Null, |r| json!({ "kind": r.kind(), "reason": r.to_string() }));
    doc["error"] = json!(g.error);
    doc
}

/// The document of a bulk run (`--groups` / `--all-groups`): `{flow, target, apply, max_age_seconds,
/// groups: [group_json...], refused: [names], committed: [names]}`.
pub fn report_json(flow: &str, target: &str, report: &Report, apply: bool) -> Value {
    let names = |f: &dyn Fn(&GroupReport) -> bool| -> Vec<&str> {
        report.groups.iter().filter(|g| f(g)).map(|g| g.group.as_str()).collect()
    };
    json!({
        "flow": flow,
        "target": target,
        "apply": apply,
        "max_age_seconds": report.max_age.as_secs_f64(),
        "groups": report.groups.iter().map(|g| group_json(flow, target, g)).collect::<Vec<_>>(),
        "refused": names(&|g| g.refused.is_some()),
        "committed": names(&|g| g.committed.is_some()),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::translate::select::Refusal;

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

    #[test]
    fn a_bulk_report_names_the_refused_and_the_committed_groups_and_matches_the_table() {
        let g = |name: &str, refused: Option<Refusal>, committed: Option<usize>| GroupReport {
            group: name.into(),
            offsets: [(("east.t".to_string(), 0), (5, String::new()))].into(),
            current: BTreeMap::new(),
            checkpoint_ms: 1_000,
            age: Duration::from_secs(2),
            refused,
            committed,
            error: None,
        };
        let active = Refusal::Active { state: "Stable".into(), members: 1, target: "west".into() };
        let report =
            Report { max_age: Duration::from_secs(3), groups: vec![g("a", None, Some(1)), g("b", Some(active), None)] };
        let v = report_json("east->west", "west", &report, true);
        assert_eq!(v["refused"], json!(["b"]));
        assert_eq!(v["committed"], json!(["a"]));
        assert_eq!(v["groups"][1]["refused"]["kind"], "active_on_target");
        assert_eq!(v["max_age_seconds"], 3.0);
        let table = crate::translate::render_groups(&report);
        assert_eq!(table, "group\ttopic\tpartition\ttranslated\tcurrent\na\teast.t\t0\t5\t-\nb\teast.t\t0\t5\t-\n");
    }
}
