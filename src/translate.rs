//! Failover tooling: a group's translated target offsets, read from the checkpoints topic like MM2's
//! `RemoteClusterUtils.translateOffsets`, and optionally committed to the target group.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::clients::Connection;
use crate::config::FlowPlan;
use crate::flow::checkpoints::load_checkpoints;
use crate::kafka;
use crate::raw_admin::{self, CommittedOffset, GroupState};

/// Downstream (topic, partition) → (offset, commit metadata).
pub type TranslatedOffsets = BTreeMap<(String, i32), (i64, String)>;

/// Target offsets of `group`: downstream (topic, partition) → (offset, metadata); the newest checkpoint wins.
pub fn translated_offsets(plan: &FlowPlan, group: &str) -> Result<TranslatedOffsets, String> {
    let topic = plan.policy.checkpoints_topic(&plan.id.source);
    let mut out = BTreeMap::new();
    for cp in load_checkpoints(plan, &topic).map_err(|e| e.to_string())? {
        if cp.group == group {
            out.insert((cp.topic, cp.partition), (cp.downstream_offset, cp.metadata));
        }
    }
    Ok(out)
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

/// The group's committed offsets on the target.
pub fn current_offsets(plan: &FlowPlan, group: &str) -> Result<BTreeMap<(String, i32), i64>, String> {
    let admin = Connection::standalone(&plan.target).admin().map_err(|e| e.to_string())?;
    let offsets = kafka::block_on(
        &plan.target.alias,
        raw_admin::list_consumer_group_offsets(&admin, group, kafka::ADMIN_TIMEOUT),
    )
    .map_err(|e| e.to_string())?
    .map_err(|e| e.to_string())?;
    Ok(offsets.into_iter().map(|o| ((o.topic, o.partition), o.offset)).collect())
}

/// Commit `offsets` to `group` on the target; refused while the group has active members there.
pub fn apply(plan: &FlowPlan, group: &str, offsets: &TranslatedOffsets) -> Result<usize, String> {
    let admin = Connection::standalone(&plan.target).admin().map_err(|e| e.to_string())?;
    let target = &plan.target.alias;
    let described = kafka::block_on(
        target,
        raw_admin::describe_consumer_groups(&admin, &[group.to_string()], kafka::ADMIN_TIMEOUT),
    )
    .map_err(|e| e.to_string())?
    .map_err(|e| e.to_string())?;
    if let Some(d) = described.first() {
        let idle = matches!(d.state, GroupState::Empty | GroupState::Dead) && d.members == 0;
        if !idle {
            return Err(format!(
                "group `{group}` is {} with {} member(s) on `{target}`: stop its consumers first",
                d.state, d.members
            ));
        }
    }
    let commits: Vec<CommittedOffset> = offsets
        .iter()
        .map(|((topic, partition), (offset, metadata))| CommittedOffset {
            topic: topic.clone(),
            partition: *partition,
            offset: *offset,
            metadata: metadata.clone(),
        })
        .collect();
    kafka::block_on(target, raw_admin::alter_consumer_group_offsets(&admin, group, &commits, kafka::ADMIN_TIMEOUT))
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("commit offsets of `{group}` on `{target}`: {e}"))?;
    Ok(commits.len())
}
