//! Failover tooling: the selected groups' translated target offsets, read from the checkpoints topic like
//! MM2's `RemoteClusterUtils.translateOffsets`, each group judged ([`select`]: a checkpoint too old to
//! trust, members on the target) and, with `--apply`, the others committed to their groups on the target.

pub mod select;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use rdkafka::Message as _;

use crate::clients::{Admin, Connection};
use crate::config::{FlowPlan, PolicyKind};
use crate::kafka;
use crate::mm2::records::Checkpoint;
use crate::raw_admin::{self, CommittedOffset, GroupState};
use select::{GroupCheckpoints, Refusal, Selection, SourceView};

/// Downstream (topic, partition) → (offset, commit metadata).
pub type TranslatedOffsets = BTreeMap<(String, i32), (i64, String)>;

/// How long `ferry translate` waits for the source to confirm an old checkpoint before counting it away.
const SOURCE_TIMEOUT: Duration = Duration::from_secs(10);

/// One group's outcome.
#[derive(Debug)]
pub struct GroupReport {
    pub group: String,
    pub offsets: TranslatedOffsets,
    /// The group's committed offsets on the target before anything was applied.
    pub current: BTreeMap<(String, i32), i64>,
    /// Record timestamp of the group's newest checkpoint (ms since the epoch), and its age.
    pub checkpoint_ms: i64,
    pub age: Duration,
    pub refused: Option<Refusal>,
    /// How many offsets `--apply` committed.
    pub committed: Option<usize>,
    /// Why `--apply` failed for this group.
    pub error: Option<String>,
}

/// Every selected group's outcome, by group name.
#[derive(Debug)]
pub struct Report {
    pub max_age: Duration,
    pub groups: Vec<GroupReport>,
}

/// Every record of the flow's checkpoints topic on the target, with its record timestamp (ms; 0 when
/// the record has none, which makes it older than any bound).
pub fn checkpoint_records(plan: &FlowPlan) -> Result<Vec<(Checkpoint, i64)>, String> {
    let topic = plan.policy.checkpoints_topic(&plan.id.source);
    let consumer = kafka::assign_only_consumer(&plan.target, &plan.id, "translate").map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let flow = plan.id.to_string();
    kafka::read_to_end(&consumer, &plan.target.alias, &topic, [0], |msg| {
        match Checkpoint::decode(msg.key().unwrap_or_default(), msg.payload()) {
            Ok(cp) => out.push((cp, msg.timestamp().to_millis().unwrap_or(0))),
            Err(e) => kafka::skip_internal_record(Some(&flow), &plan.target.alias, msg, "a checkpoint record", &e),
        }
    })
    .map_err(|e| e.to_string())?;
    Ok(out)
}

/// Target offsets of `group`: downstream (topic, partition) → (offset, metadata); the newest checkpoint wins.
pub fn translated_offsets(plan: &FlowPlan, group: &str) -> Result<TranslatedOffsets, String> {
    let records = checkpoint_records(plan)?;
    Ok(select::collect(records, |g| g == group).remove(group).map(|g| g.offsets).unwrap_or_default())
}

/// The upstream name of a checkpoint's downstream `topic` on flow `plan`: `east.orders` → `orders` on a
/// forward flow, `orders` → `east.orders` on the reverse flow of a fail-back (the group read the remote
/// topic on the flow's source), the same name under the identity policy. A naming template reads and
/// writes names the same way (`orders.east` → `orders`, `orders` → `orders.east` with `{topic}.{source}`).
pub fn upstream_topic(plan: &FlowPlan, topic: &str) -> String {
    if plan.settings.replication_policy == PolicyKind::Identity {
        return topic.to_string();
    }
    if plan.policy.topic_source(topic).as_deref() == Some(plan.id.source.as_str()) {
        plan.policy.upstream_topic(topic).unwrap_or_else(|| topic.to_string())
    } else {
        plan.policy.format_remote_topic(&plan.id.target, topic)
    }
}

/// Translate the selected groups, judge each, and with `apply` commit the offsets of every group not
/// refused. An `Err` is a failure before any group was judged (checkpoints or the target unreadable,
/// nothing selected); a failed commit is that group's `error`.
pub fn run(plan: &FlowPlan, selection: &Selection, max_age: Duration, apply: bool) -> Result<Report, String> {
    let records = checkpoint_records(plan)?;
    let groups = select::collect(records, |g| selection.picks(g, plan.group_filter.should_replicate_group(g)));
    if groups.is_empty() {
        let what = match selection {
            Selection::One(g) => format!("group `{g}`"),
            Selection::Matching(re) => format!("any group matching `{}` among the flow's groups", re.as_str()),
            Selection::All => "any of the flow's groups".to_string(),
        };
        return Err(format!(
            "no checkpoints for {what} on `{}` (flow {}, topic {})",
            plan.target.alias,
            plan.id,
            plan.policy.checkpoints_topic(&plan.id.source)
        ));
    }
    let target = &plan.target.alias;
    let admin = Connection::standalone(&plan.target).admin().map_err(|e| e.to_string())?;
    let names: Vec<String> = groups.keys().cloned().collect();
    let described = kafka::block_on(target, raw_admin::describe_consumer_groups(&admin, &names, kafka::ADMIN_TIMEOUT))
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("describe the groups on `{target}`: {e}"))?;
    let mut source = SourceAsker::new(plan);
    let now_ms = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    let mut out = Vec::new();
    for (group, GroupCheckpoints { offsets, upstream, newest_ms }) in groups {
        let current = committed_on(&admin, target, &group)?;
        let age = Duration::from_millis(now_ms.saturating_sub(newest_ms).max(0) as u64);
        let active = described.iter().find(|d| d.group_id == group).and_then(|d| {
            let idle = matches!(d.state, GroupState::Empty | GroupState::Dead) && d.members == 0;
            (!idle).then(|| Refusal::Active { state: d.state.to_string(), members: d.members, target: target.clone() })
        });
        let by_upstream: BTreeMap<(String, i32), i64> =
            upstream.iter().map(|((t, p), up)| ((upstream_topic(plan, t), *p), *up)).collect();
        let refused = active
            .or_else(|| select::stale(age, max_age, &by_upstream, &plan.source.alias, || source.committed(&group)));
        let (mut committed, mut error) = (None, None);
        if apply && refused.is_none() {
            match commit(&admin, target, &group, &offsets) {
                Ok(n) => committed = Some(n),
                Err(e) => error = Some(e),
            }
        }
        out.push(GroupReport { group, offsets, current, checkpoint_ms: newest_ms, age, refused, committed, error });
    }
    Ok(Report { max_age, groups: out })
}

/// Asks the flow's source for groups' committed offsets; after one failure (a source that is gone
/// would make every group wait for the timeout) it answers that failure for every later group.
struct SourceAsker<'a> {
    plan: &'a FlowPlan,
    admin: Option<Result<Admin, String>>,
}

impl<'a> SourceAsker<'a> {
    fn new(plan: &'a FlowPlan) -> Self {
        SourceAsker { plan, admin: None }
    }

    fn committed(&mut self, group: &str) -> SourceView {
        let alias = &self.plan.source.alias;
        let plan = self.plan;
        let admin =
            self.admin.get_or_insert_with(|| Connection::standalone(&plan.source).admin().map_err(|e| e.to_string()));
        let result = match admin {
            Err(e) => return SourceView::Unavailable(e.clone()),
            Ok(a) => kafka::block_on(alias, raw_admin::list_consumer_group_offsets(a, group, SOURCE_TIMEOUT))
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string())),
        };
        match result {
            Ok(offsets) => {
                SourceView::Committed(offsets.into_iter().map(|o| ((o.topic, o.partition), o.offset)).collect())
            }
            Err(e) => {
                self.admin = Some(Err(e.clone()));
                SourceView::Unavailable(e)
            }
        }
    }
}

fn committed_on(admin: &Admin, target: &str, group: &str) -> Result<BTreeMap<(String, i32), i64>, String> {
    let offsets = kafka::block_on(target, raw_admin::list_consumer_group_offsets(admin, group, kafka::ADMIN_TIMEOUT))
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("read the offsets of `{group}` on `{target}`: {e}"))?;
    Ok(offsets.into_iter().map(|o| ((o.topic, o.partition), o.offset)).collect())
}

/// Commit `offsets` to `group` on the target (whose members were checked just before).
fn commit(admin: &Admin, target: &str, group: &str, offsets: &TranslatedOffsets) -> Result<usize, String> {
    let commits: Vec<CommittedOffset> = offsets
        .iter()
        .map(|((topic, partition), (offset, metadata))| CommittedOffset {
            topic: topic.clone(),
            partition: *partition,
            offset: *offset,
            metadata: metadata.clone(),
        })
        .collect();
    kafka::block_on(target, raw_admin::alter_consumer_group_offsets(admin, group, &commits, kafka::ADMIN_TIMEOUT))
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("commit offsets of `{group}` on `{target}`: {e}"))?;
    Ok(commits.len())
}

/// A printable table of `offsets`, with the group's current target offsets beside them when known.
pub fn render(offsets: &TranslatedOffsets, current: &BTreeMap<(String, i32), i64>) -> String {
    let mut out = String::from("topic\tpartition\ttranslated\tcurrent\n");
    for ((topic, partition), (offset, _)) in offsets {
        let cur = current.get(&(topic.clone(), *partition)).map_or("-".to_string(), |c| c.to_string());
        let _ = writeln!(out, "{topic}\t{partition}\t{offset}\t{cur}");
    }
    out
}

/// The table of several groups: the columns of [`render`] after a `group` column.
pub fn render_groups(report: &Report) -> String {
    let mut out = String::from("group\ttopic\tpartition\ttranslated\tcurrent\n");
    for g in &report.groups {
        for line in render(&g.offsets, &g.current).lines().skip(1) {
            let _ = writeln!(out, "{}\t{line}", g.group);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::upstream_topic;
    use crate::check::rights::tests::plan;

    #[test]
    fn upstream_names_under_a_template_both_ways() {
        let east_west = plan("remote_topic = \"{topic}.{source}\"");
        // A forward checkpoint: the group reads `orders.east` on west, `orders` on east.
        assert_eq!(upstream_topic(&east_west, "orders.east"), "orders");
        // A fail-back checkpoint of this flow as the reverse one: the group read west's copy of `orders`.
        assert_eq!(upstream_topic(&east_west, "orders"), "orders.west");
        let default = plan("");
        assert_eq!(upstream_topic(&default, "east.orders"), "orders");
        assert_eq!(upstream_topic(&default, "orders"), "west.orders");
    }
}
