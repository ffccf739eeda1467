//! `ferry reload [--dry-run]`: the node's answer in words, and whether it is a success. `-o json` prints
//! the answer itself (the JSON of [`crate::reload::ReloadOutcome`] or [`crate::reload::ReloadPlan`]).

use std::fmt::Write as _;

use serde_json::Value;

/// What an operator reads: one line per list that is not empty, then any error and retry.
pub fn render(answer: &Value) -> String {
    let mut out = String::new();
    let list = |key: &str| -> Vec<String> {
        answer[key]
            .as_array()
            .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    };
    let result = answer["result"].as_str().unwrap_or("?");
    let dry_run = answer["dry_run"] == true;
    let rows: &[(&str, &str)] = if dry_run {
        &[
            ("would start", "would_start"),
            ("would stop", "would_stop"),
            ("would restart", "would_restart"),
            ("unchanged", "unchanged"),
        ]
    } else {
        &[("started", "started"), ("stopped", "stopped"), ("restarted", "restarted"), ("rolled back", "rolled_back")]
    };
    let _ = writeln!(
        out,
        "{}: {result}{}",
        if dry_run { "reload dry run (nothing changed)" } else { "reload" },
        answer["trigger"].as_str().map_or(String::new(), |t| format!(" ({t})"))
    );
    let mut changes = 0;
    for (label, key) in rows {
        let flows = list(key);
        if !flows.is_empty() {
            if *key != "unchanged" {
                changes += flows.len();
            }
            let _ = writeln!(out, "  {label:<13} {}", flows.join(", "));
        }
    }
    if changes == 0 && result != "rejected" {
        let _ = writeln!(out, "  {}", if dry_run { "no flow would change" } else { "no flow changed" });
    }
    if dry_run && !list("would_restart").is_empty() {
        let _ = writeln!(
            out,
            "  (a restart first checks that the flow's clusters answer; one that does not keeps its old plan)"
        );
    }
    if let Some(e) = answer["error"].as_str() {
        for line in e.lines() {
            let _ = writeln!(out, "  {line}");
        }
    }
    if let Some(r) = answer["retry"].as_str() {
        let _ = writeln!(out, "  tried again {r}");
    }
    out
}

/// Whether the answer is a success for the exit code: applied, or (dry run) a valid directory.
pub fn succeeded(answer: &Value) -> bool {
    matches!(answer["result"].as_str(), Some("applied" | "would_apply"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_and_outcomes_read_as_words() {
        let plan = serde_json::json!({"dry_run": true, "result": "would_apply", "error": null,
            "would_start": ["a->c"], "would_stop": [], "would_restart": ["a->b"], "unchanged": ["b->a"]});
        let text = render(&plan);
        assert!(text.starts_with("reload dry run (nothing changed): would_apply\n"), "{text}");
        assert!(text.contains("  would restart a->b\n") && text.contains("  would start   a->c\n"), "{text}");
        assert!(text.contains("  unchanged     b->a\n") && !text.contains("would stop"), "{text}");
        assert!(succeeded(&plan));

        let rejected = serde_json::json!({"dry_run": true, "result": "rejected",
            "error": "1 error(s) in the flow files:\n  f.toml: flows[0].target: unknown cluster",
            "would_start": [], "would_stop": [], "would_restart": [], "unchanged": []});
        let text = render(&rejected);
        assert!(text.contains("f.toml: flows[0].target: unknown cluster") && !succeeded(&rejected), "{text}");

        let rolled = serde_json::json!({"trigger": "http", "result": "rolled_back", "started": [], "stopped": [],
            "restarted": [], "rolled_back": ["a->b"], "error": "a->b: cluster `b` does not answer",
            "retry": "at 2026-12-01T00:01:00Z (in 60s; the wait doubles after each failed attempt, up to 600s), or at once by SIGHUP, POST /reload or an edit",
            "next_attempt_at": "2026-12-01T00:01:00Z"});
        let text = render(&rolled);
        assert!(text.starts_with("reload: rolled_back (http)\n") && text.contains("  rolled back   a->b\n"), "{text}");
        assert!(text.contains("tried again at 2026-12-01T00:01:00Z (in 60s;") && !succeeded(&rolled), "{text}");

        let nothing = serde_json::json!({"trigger": "http", "result": "applied", "started": [], "stopped": [],
            "restarted": [], "rolled_back": []});
        assert!(render(&nothing).contains("no flow changed") && succeeded(&nothing));
    }
}
