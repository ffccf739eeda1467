//! `ferry status`: a node's `/flows` as one row per flow, printed as a table for people at a terminal or
//! as JSON for scripts (`-o json`). Both come from the same [`StatusView`], so they carry the same facts.

use std::fmt::Write as _;
use std::time::SystemTime;

use serde::Serialize;

use crate::status::parse_rfc3339;

/// What `ferry status` shows of a node.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StatusView {
    /// The node asked.
    pub url: String,
    pub flows: Vec<StatusRow>,
    pub last_reload: Option<LastReload>,
}

/// One flow's row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StatusRow {
    pub flow: String,
    pub state: String,
    pub generation: Option<u64>,
    /// This node's share of the source partitions.
    pub partitions: Option<i64>,
    pub lag_records: Option<i64>,
    pub records_per_second: Option<f64>,
    /// RFC 3339.
    pub last_checkpoint_at: Option<String>,
    /// Seconds from `last_checkpoint_at` to when the view was taken.
    pub last_checkpoint_age_seconds: Option<u64>,
    /// Source topics promoted at a failover (`ferry promote`): no longer copied.
    pub promoted: Vec<String>,
    /// Records on the remote topics that the flow did not write, per source topic (this node's count).
    pub foreign_records: std::collections::BTreeMap<String, u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LastReload {
    pub result: String,
    pub trigger: String,
    pub at: String,
}

impl StatusView {
    /// The view of `flows` (the JSON of a node's `/flows`) as of `now`.
    pub fn of_flows(url: &str, flows: &serde_json::Value, now: SystemTime) -> Self {
        let now = now.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let rows = flows["flows"]
            .as_object()
            .map(|map| {
                map.iter()
                    .map(|(id, f)| {
                        let last_checkpoint_at = f["last_checkpoint_at"].as_str().map(str::to_string);
                        StatusRow {
                            flow: id.clone(),
                            state: f["state"].as_str().unwrap_or("?").to_string(),
                            generation: f["generation"].as_u64(),
                            partitions: f["partitions"].as_i64(),
                            lag_records: f["lag_records"].as_i64(),
                            records_per_second: f["records_per_second"].as_f64(),
                            last_checkpoint_age_seconds: last_checkpoint_at
                                .as_deref()
                                .and_then(parse_rfc3339)
                                .map(|t| now.saturating_sub(t)),
                            last_checkpoint_at,
                            promoted: f["promoted"]
                                .as_object()
                                .map(|p| p.keys().cloned().collect())
                                .unwrap_or_default(),
                            foreign_records: f["foreign_records"]
                                .as_object()
                                .map(|m| m.iter().filter_map(|(t, n)| Some((t.clone(), n.as_u64()?))).collect())
                                .unwrap_or_default(),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        let last_reload = flows["last_reload"].as_object().map(|r| LastReload {
            result: r.get("result").and_then(|v| v.as_str()).unwrap_or("?").to_string(),
            trigger: r.get("trigger").and_then(|v| v.as_str()).unwrap_or("?").to_string(),
            at: r.get("at").and_then(|v| v.as_str()).unwrap_or("?").to_string(),
        });
        Self { url: url.to_string(), flows: rows, last_reload }
    }

    /// One row per flow, then the last reload.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<28} {:<11} {:>4} {:>6} {:>12} {:>12} {:>12}",
            "FLOW", "STATE", "GEN", "PARTS", "LAG", "RECORDS/S", "CHECKPOINT"
        );
        let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".to_string());
        for r in &self.flows {
            let _ = writeln!(
                out,
                "{:<28} {:<11} {:>4} {:>6} {:>12} {:>12} {:>12}",
                r.flow,
                r.state,
                or_dash(r.generation.map(|v| v.to_string())),
                or_dash(r.partitions.map(|v| v.to_string())),
                or_dash(r.lag_records.map(|v| v.to_string())),
                or_dash(r.records_per_second.map(|v| v.to_string())),
                or_dash(r.last_checkpoint_age_seconds.map(|s| format!("{s}s ago"))),
            );
            // Below the row: what an operator must see at a failover.
            if !r.promoted.is_empty() {
                let _ = writeln!(out, "  promoted, not copied: {}", r.promoted.join(", "));
            }
            let foreign: Vec<String> =
                r.foreign_records.iter().filter(|(_, n)| **n > 0).map(|(t, n)| format!("{t} {n}")).collect();
            if !foreign.is_empty() {
                let _ = writeln!(out, "  records ferry did not write on remote topics: {}", foreign.join(", "));
            }
        }
        if let Some(r) = &self.last_reload {
            let _ = writeln!(out, "last reload: {} ({}) at {}", r.result, r.trigger, r.at);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::status::rfc3339;

    #[test]
    fn the_table_and_the_json_carry_the_same_facts() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_052_345);
        let checkpoint = rfc3339(now - Duration::from_secs(12));
        let flows = serde_json::json!({
            "flows": {
                "a->b": {"state": "running", "generation": 2, "partitions": 6, "lag_records": 15,
                         "records_per_second": 1234.5, "last_checkpoint_at": checkpoint},
                "b->a": {"state": "paused", "generation": 1, "partitions": 0, "lag_records": null,
                         "records_per_second": null, "last_checkpoint_at": null},
            },
            "last_reload": {"result": "applied", "trigger": "watch", "at": "2026-11-30T17:40:30Z"},
        });
        let view = StatusView::of_flows("http://n:1", &flows, now);
        let table = view.table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4, "{table}");
        let cells: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(cells, ["a->b", "running", "2", "6", "15", "1234.5", "12s", "ago"], "{table}");
        let cells: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(cells, ["b->a", "paused", "1", "0", "-", "-", "-"], "{table}");
        assert_eq!(lines[3], "last reload: applied (watch) at 2026-11-30T17:40:30Z");

        let json = serde_json::to_value(&view).expect("json");
        assert_eq!(json["flows"][0]["flow"], "a->b");
        assert_eq!(json["flows"][0]["records_per_second"], 1234.5);
        assert_eq!(json["flows"][0]["last_checkpoint_age_seconds"], 12);

        // A failover's facts come below the flow's row.
        let flows = serde_json::json!({"flows": {"a->b": {"state": "running",
            "promoted": {"orders": {"by": "ops", "at": 1}}, "foreign_records": {"pay": 3, "orders": 0}}}});
        let table = StatusView::of_flows("http://n:1", &flows, now).table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[2], "  promoted, not copied: orders", "{table}");
        assert_eq!(lines[3], "  records ferry did not write on remote topics: pay 3", "{table}");
        assert_eq!(json["flows"][1]["lag_records"], serde_json::Value::Null);
        assert_eq!(json["last_reload"]["trigger"], "watch");
    }

    #[test]
    fn a_node_without_flows_has_only_the_header() {
        let view = StatusView::of_flows("u", &serde_json::json!({"flows": {}, "last_reload": null}), SystemTime::now());
        assert_eq!(view.table().lines().count(), 1);
        assert!(view.last_reload.is_none());
    }
}
