//! `ferry check`'s output: the report of [`crate::check::run`] as a table for people, or (`-o json`) the
//! same facts as one JSON document, with every problem listed once more at the end.

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::check::internal::State;
use crate::check::rights::Verdict;
use crate::check::{FlowReport, Report, RightCheck};

/// OK rows of one kind beyond this many (copied topics, remote topics, groups) are shown as a count.
const LISTED_OK: usize = 3;

/// The table.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "deployment `{}`: {} flow(s)", report.deployment, report.flows.len());
    if !report.disabled.is_empty() {
        let _ = writeln!(out, "disabled, not checked: {}", report.disabled.join(", "));
    }
    for c in &report.clusters {
        let state = match (&c.error, &c.cluster_id, c.brokers) {
            (Some(e), _, _) => format!("UNREACHABLE: {e}"),
            (None, id, brokers) => format!(
                "reachable (cluster id {}, {} broker(s))",
                id.as_deref().unwrap_or("-"),
                brokers.map_or("?".to_string(), |b| b.to_string())
            ),
        };
        let _ = writeln!(out, "cluster {} ({}): {state}", c.alias, c.bootstrap_servers);
    }
    for f in &report.flows {
        out.push('\n');
        flow(&mut out, f);
    }
    out.push('\n');
    let problems = report.problems();
    if problems.is_empty() {
        let _ = writeln!(out, "no problems: nothing checked would fail");
    } else {
        let _ = writeln!(out, "{} problem(s):", problems.len());
        for p in problems {
            let _ = writeln!(out, "  {p}");
        }
    }
    out
}

fn flow(out: &mut String, f: &FlowReport) {
    let _ = writeln!(out, "flow {} ({})", f.flow, f.file);
    let _ = writeln!(out, "  topics ({}):", f.topics.len());
    for t in &f.topics {
        let _ = writeln!(out, "    {} -> {} ({} partition(s))", t.topic, t.remote, t.partitions);
    }
    let groups = if f.groups.is_empty() { "-".to_string() } else { f.groups.join(", ") };
    let _ = writeln!(out, "  groups ({}): {groups}", f.groups.len());
    let _ = writeln!(out, "  rights:");
    let rows = right_rows(&f.rights);
    let width = |i: usize| rows.iter().map(|r: &[String; 4]| r[i].len()).max().unwrap_or(0);
    let (w0, w1, w2) = (width(0), width(1), width(2));
    for [word, cluster, resource, rest] in &rows {
        let _ = writeln!(out, "    {word:<w0$}  {cluster:<w1$}  {resource:<w2$}  {rest}");
    }
    let _ = writeln!(out, "  internal topics:");
    let rows: Vec<[String; 4]> = f
        .internal_topics
        .iter()
        .map(|t| {
            let detail = match &t.state {
                State::Ok { notes } => notes.join("; "),
                State::Absent => "does not exist yet: ferry creates it at start".into(),
                State::Wrong { reasons, notes } => reasons.iter().chain(notes).cloned().collect::<Vec<_>>().join("; "),
                State::Unknown { reason } => reason.clone(),
            };
            let detail = if detail.is_empty() { t.role.to_string() } else { format!("{}: {detail}", t.role) };
            [t.state.word().to_string(), t.cluster.clone(), t.topic.clone(), detail]
        })
        .collect();
    let width = |i: usize| rows.iter().map(|r| r[i].len()).max().unwrap_or(0);
    let (w0, w1, w2) = (width(0), width(1), width(2));
    for [word, cluster, topic, detail] in &rows {
        let _ = writeln!(out, "    {word:<w0$}  {cluster:<w1$}  {topic:<w2$}  {detail}");
    }
    if !f.registries.is_empty() {
        let _ = writeln!(out, "  schema registries:");
    }
    for r in &f.registries {
        let word = |o: &Option<Result<(), String>>| match o {
            None => "-".to_string(),
            Some(Ok(())) => "ok".to_string(),
            Some(Err(e)) => format!("FAILED ({e})"),
        };
        let subjects = r.subjects.map_or(String::new(), |n| format!(", {n} subject(s)"));
        let write = if r.role == "target" { format!(", write {}", word(&r.write)) } else { String::new() };
        let _ = writeln!(out, "    {} {} ({}): read {}{write}{subjects}", r.role, r.cluster, r.url, word(&r.read));
    }
    for n in &f.notes {
        let _ = writeln!(out, "  note: {n}");
    }
    for e in &f.errors {
        let _ = writeln!(out, "  error: {e}");
    }
}

/// The rights rows: verdict, cluster, resource, rights and detail. Granted rows of one table row beyond
/// [`LISTED_OK`] resources are folded into one.
fn right_rows(checks: &[RightCheck]) -> Vec<[String; 4]> {
    let mut rows = Vec::new();
    let mut i = 0;
    while i < checks.len() {
        let c = &checks[i];
        let same =
            checks[i..].iter().take_while(|o| std::ptr::eq(o.row, c.row) && o.cluster == c.cluster).collect::<Vec<_>>();
        let granted: Vec<&&RightCheck> =
            same.iter().filter(|o| matches!(o.verdict, Verdict::Granted { note: None })).collect();
        let fold = granted.len() > LISTED_OK;
        if fold {
            let kind = c.resource.kind();
            rows.push(["OK".into(), c.cluster.clone(), format!("{} {kind}s", granted.len()), c.rights.join(", ")]);
        }
        for o in &same {
            if fold && matches!(o.verdict, Verdict::Granted { note: None }) {
                continue;
            }
            rows.push([o.verdict.word().into(), o.cluster.clone(), o.resource.to_string(), detail(o)]);
        }
        i += same.len();
    }
    rows
}

/// A right's row after its resource: the rights, and for anything but a plain grant what was found and
/// who needs them.
fn detail(c: &RightCheck) -> String {
    let rights = c.rights.join(", ");
    let found = match &c.verdict {
        Verdict::Granted { note: None } => return rights,
        Verdict::Granted { note: Some(n) } => n.clone(),
        Verdict::Creatable { later } if later.is_empty() => {
            return format!("{rights}: does not exist yet, may be created");
        }
        Verdict::Creatable { later } => {
            return format!(
                "{rights}: does not exist yet, may be created ({} checked once it exists)",
                later.join(", ")
            );
        }
        Verdict::Missing { reason, .. } | Verdict::Unknown { reason } | Verdict::Failed { reason } => reason.clone(),
        Verdict::NotCheckable { hint } => hint.clone(),
    };
    format!("{rights}: {found} [{}]", c.used_by)
}

/// The JSON document: the report's facts, `problems` (the lines the table ends with) and `ok`.
pub fn report_json(report: &Report) -> Value {
    let mut doc = serde_json::to_value(report).unwrap_or_else(|e| json!({ "error": e.to_string() }));
    let problems = report.problems();
    doc["ok"] = json!(problems.is_empty());
    doc["problems"] = json!(problems);
    doc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::rights::{RIGHTS, Resource, Subject};
    use crate::check::{ClusterReport, CopiedTopic, InternalCheck, RegistryCheck};

    fn right(subject: Subject, resource: Resource, verdict: Verdict) -> RightCheck {
        let row = RIGHTS.iter().find(|r| r.subject == subject).expect("row");
        RightCheck {
            row,
            cluster: "east".into(),
            resource,
            rights: row.rights.iter().map(|o| o.as_str()).collect(),
            used_by: row.used_by("east", "west"),
            verdict,
        }
    }

    fn report() -> Report {
        let ok = || Verdict::Granted { note: None };
        let mut rights: Vec<RightCheck> =
            (0..5).map(|i| right(Subject::CopiedTopics, Resource::Topic(format!("t{i}")), ok())).collect();
        rights.push(right(
            Subject::CopierGroup,
            Resource::Group("ferry.east->west".into()),
            Verdict::Missing { rights: vec!["Read"], reason: "not granted Read; grant Read on it".into() },
        ));
        Report {
            deployment: "ferry".into(),
            clusters: vec![ClusterReport {
                alias: "east".into(),
                bootstrap_servers: "e:1".into(),
                reachable: true,
                cluster_id: Some("id".into()),
                brokers: Some(3),
                error: None,
            }],
            flows: vec![FlowReport {
                flow: "east->west".into(),
                file: "flows/f.toml".into(),
                topics: vec![CopiedTopic { topic: "t0".into(), remote: "east.t0".into(), partitions: 2 }],
                groups: vec!["billing".into()],
                rights,
                internal_topics: vec![InternalCheck {
                    cluster: "west".into(),
                    role: "lease",
                    topic: "ferry.leases.internal".into(),
                    state: State::Wrong { reasons: vec!["3 partitions; ferry requires 1".into()], notes: vec![] },
                }],
                errors: vec![],
                notes: vec![],
                registries: vec![RegistryCheck {
                    cluster: "west".into(),
                    role: "target",
                    url: "http://registry-west:8081".into(),
                    read: Some(Ok(())),
                    write: Some(Err(
                        "schema registry of `west`: POST /subjects/ferry-check-write-probe/versions: HTTP 403".into(),
                    )),
                    subjects: Some(4),
                }],
            }],
            disabled: vec!["west->east".into()],
        }
    }

    #[test]
    fn the_table_folds_granted_rows_and_names_each_problem() {
        let text = render(&report());
        assert!(text.contains("t0 -> east.t0 (2 partition(s))"), "{text}");
        assert!(text.contains("groups (1): billing"), "{text}");
        assert!(text.contains("disabled, not checked: west->east"), "{text}");
        assert!(text.contains("5 topics") && !text.contains("topic t3"), "granted topics folded:\n{text}");
        let missing = text.lines().find(|l| l.trim_start().starts_with("MISSING")).expect("a MISSING row");
        assert!(missing.contains("group ferry.east->west") && missing.contains("Read: not granted Read"), "{text}");
        assert!(text.contains("WRONG") && text.contains("ferry.leases.internal"), "{text}");
        assert!(
            text.contains("target west (http://registry-west:8081): read ok, write FAILED (schema registry"),
            "{text}"
        );
        assert!(text.contains("3 problem(s):"), "{text}");
        assert!(
            text.contains("flow east->west: target registry of `west` (http://registry-west:8081), write: "),
            "{text}"
        );
        assert!(text.contains("flow east->west: MISSING Read on group ferry.east->west on `east`"), "{text}");
    }

    #[test]
    fn the_json_has_the_same_facts() {
        let doc = report_json(&report());
        assert_eq!(doc["ok"], false);
        assert_eq!(doc["problems"].as_array().map(Vec::len), Some(3));
        let f = &doc["flows"][0];
        let registry = &f["registries"][0];
        assert_eq!((registry["role"].as_str(), registry["read"].as_str()), (Some("target"), Some("ok")), "{registry}");
        assert!(registry["write"].as_str().is_some_and(|w| w.contains("HTTP 403")), "{registry}");
        assert_eq!(f["topics"][0]["remote"], "east.t0");
        assert_eq!(f["rights"].as_array().map(Vec::len), Some(6), "every right, none folded");
        let missing = &f["rights"][5];
        assert_eq!(missing["status"], "missing");
        assert_eq!(missing["resource"], serde_json::json!({ "type": "group", "name": "ferry.east->west" }));
        assert_eq!(missing["rights"], serde_json::json!(["Read"]));
        assert_eq!(f["internal_topics"][0]["status"], "wrong");
        assert_eq!(doc["clusters"][0]["reachable"], true);
    }
}
