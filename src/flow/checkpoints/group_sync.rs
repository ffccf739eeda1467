//! Group offset sync: translated offsets committed to target groups that have no active members.

use super::*;

impl Computer<'_> {
    /// Commit translated offsets to target groups that have no active members, never moving one
    /// backwards. Failures are counted and logged; they do not stop checkpointing.
    pub(super) fn sync_group_offsets(&self) {
        let plan = self.plan;
        let flow = plan.id.to_string();
        // Only groups the source still has: a group gone there is not re-created on the target.
        let groups: Vec<String> = {
            let st = lock(&self.state);
            st.groups.iter().filter(|g| st.checkpoints.group(g).next().is_some()).cloned().collect()
        };
        if groups.is_empty() {
            return;
        }
        // Still the leader? An empty transaction fails once another node's producer fenced this one.
        if let Err(e) = self.in_transaction(kafka::ADMIN_TIMEOUT, |_| Ok(())) {
            tracing::warn!(flow = %flow, error = %e, "group offset sync skipped: this node no longer leads the flow");
            return;
        }
        let described = match self.rt.block_on(raw_admin::describe_consumer_groups(
            &self.target_admin,
            &groups,
            kafka::ADMIN_TIMEOUT,
        )) {
            Ok(d) => d,
            Err(e) => {
                METRICS.group_offset_syncs.with_label_values(&[&flow, "failed"]).inc();
                tracing::warn!(flow = %flow, error = %e, "cannot describe target groups; group offset sync skipped");
                return;
            }
        };
        for d in described {
            let idle = matches!(d.state, GroupState::Empty | GroupState::Dead) && d.members == 0 && d.error.is_none();
            if !idle {
                METRICS.group_offset_syncs.with_label_values(&[&flow, "skipped_active"]).inc();
                continue;
            }
            match self.sync_group(&d.group_id) {
                Ok(0) => {}
                Ok(n) => {
                    METRICS.group_offset_syncs.with_label_values(&[&flow, "ok"]).inc();
                    tracing::info!(flow = %flow, group = %d.group_id, partitions = n, "committed translated offsets to the target group");
                }
                Err(e) => {
                    METRICS.group_offset_syncs.with_label_values(&[&flow, "failed"]).inc();
                    tracing::warn!(flow = %flow, group = %d.group_id, error = %e, "group offset sync failed");
                }
            }
        }
    }

    pub(super) fn sync_group(&self, group: &str) -> Result<usize, String> {
        let current: HashMap<(String, i32), i64> = self
            .rt
            .block_on(raw_admin::list_consumer_group_offsets(&self.target_admin, group, kafka::ADMIN_TIMEOUT))
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|o| ((o.topic, o.partition), o.offset))
            .collect();
        let wanted: Vec<CommittedOffset> = lock(&self.state)
            .checkpoints
            .group(group)
            .filter(|cp| current.get(&(cp.topic.clone(), cp.partition)).is_none_or(|t| *t < cp.downstream_offset))
            .map(|cp| CommittedOffset {
                topic: cp.topic.clone(),
                partition: cp.partition,
                offset: cp.downstream_offset,
                metadata: cp.metadata.clone(),
            })
            .collect();
        if wanted.is_empty() {
            return Ok(0);
        }
        self.rt
            .block_on(raw_admin::alter_consumer_group_offsets(&self.target_admin, group, &wanted, kafka::ADMIN_TIMEOUT))
            .map_err(|e| e.to_string())?;
        Ok(wanted.len())
    }
}
