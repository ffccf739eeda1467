//! `ferry check`'s output: the report of [`crate::check::run`] as a table for people, or (`-o json`) the
//! same facts as one JSON document, with every problem listed once more at the end.

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::check::rights::Verdict;
use crate::check::{FlowReport, Report, RightCheck};
use crate::check::internal::State;

/// OK rows of one kind beyond this many (copied topics, remote topics, groups) are shown as a count.
const LISTED_OK: usize = 3;

/// The table.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "deployment `{}`: {} flow(s)", report.deployment, report.flows.len());
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
        let same = checks[i..]
            .iter()
            .take_while(|o| std::ptr::eq(o.row, c.row) && o.cluster == c.cluster)
            .collect::<Vec<_>>();
        let granted: Vec<&&RightCheck> = same.iter().filter(|o| matches!(o.verdict, Verdict::Granted { note: None })).collect();
        let fold = granted.len() > LISTED_OK;
        if fold {
            let kind = c.resource.kind();
            rows.push([
                "OK".into(),
                c.cluster.clone(),
                format!("{} {kind}s", granted.len()),
                c.rights.join(", "),
            ]);
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
        Verdict::Creatable { later } if later.is_empty() => return format!("{rights}: does not exist yet, may be created"),
        Verdict::Creatable { later } => {
            return format!("{rights}: does not exist yet, may be created ({} checked once it exists)", later.join(", "));
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
