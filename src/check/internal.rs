//! The internal topics a flow uses and what ferry requires of them: where each lives, whether it must
//! be compacted and how many partitions it should have, from the specs ferry creates them with; and the
//! judgement of what a cluster shows against that ([`judge`]).

use serde::Serialize;

use crate::config::FlowPlan;
use crate::kafka::TopicSpec;

/// What ferry requires of a topic's `cleanup.policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cleanup {
    /// `compact` and nothing else: with deletion, retention would drop records ferry still needs.
    Compact(&'static str),
    /// MM2 creates it compacted; anything else works.
    PreferCompact,
    /// The topic holds no records.
    Any,
}

/// What ferry requires of the partition count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Partitions {
    /// Exactly this many, or the flow misbehaves (the reason).
    Exactly(i32, &'static str),
    /// ferry creates it with this many and works with any other count.
    Usually(i32),
}

/// One internal topic of a flow.
#[derive(Clone, Debug)]
pub struct Internal {
    /// What the flow uses it for: `offset-syncs`, `checkpoints`, ...
    pub role: &'static str,
    /// The alias of the cluster that holds it.
    pub cluster: String,
    /// The topic as ferry would create it.
    pub spec: TopicSpec,
    pub cleanup: Cleanup,
    pub partitions: Partitions,
}

/// Every internal topic of `plan`, where ferry's actors look for it; none whose emitter is off.
pub fn topics(plan: &FlowPlan) -> Vec<Internal> {
    let s = &plan.settings;
    let source = plan.source.alias.as_str();
    all_topics(plan)
        .into_iter()
        .filter(|t| match t.role {
            "offset-syncs" => s.emit_offset_syncs_enabled,
            "checkpoints" => s.emit_checkpoints_enabled,
            "heartbeats" if t.cluster == source => s.emit_reverse_heartbeats_enabled,
            "heartbeats" => s.emit_heartbeats_enabled,
            _ => true,
        })
        .collect()
}

fn all_topics(plan: &FlowPlan) -> Vec<Internal> {
    let rf = plan.settings.replication_factor;
    let target = &plan.target.alias;
    let (syncs_cluster, syncs_topic) = crate::flow::offset_syncs::syncs_location(plan);
    let heartbeats = plan.policy.heartbeats_topic();
    let one = Partitions::Usually(1);
    let progress = crate::flow::progress::topic_spec(plan);
    let progress_partitions = Partitions::Usually(progress.partitions);
    vec![
        Internal {
            role: "offset-syncs",
            cluster: syncs_cluster.alias.clone(),
            spec: TopicSpec::compacted(syncs_topic, 1, plan.settings.offset_syncs_rf()),
            cleanup: Cleanup::Compact("the checkpoint computer reads every sync from the start"),
            partitions: one,
        },
        Internal {
            role: "checkpoints",
            cluster: target.clone(),
            spec: TopicSpec::compacted(
                plan.policy.checkpoints_topic(&plan.id.source),
                1,
                plan.settings.checkpoints_rf(),
            ),
            cleanup: Cleanup::Compact("a group's newest checkpoint must outlive retention for a failover"),
            partitions: one,
        },
        Internal {
            role: "copy progress",
            cluster: target.clone(),
            spec: progress,
            cleanup: Cleanup::Compact("the copier resumes from it; with deletion a restart copies again"),
            partitions: progress_partitions,
        },
        Internal {
            role: "heartbeats",
            cluster: plan.source.alias.clone(),
            spec: TopicSpec::compacted(heartbeats, 1, plan.settings.heartbeats_rf()),
            cleanup: Cleanup::PreferCompact,
            partitions: one,
        },
        Internal {
            role: "heartbeats",
            cluster: target.clone(),
            spec: TopicSpec::compacted(heartbeats, 1, plan.settings.heartbeats_rf()),
            cleanup: Cleanup::PreferCompact,
            partitions: one,
        },
        Internal {
            role: "lease",
            cluster: target.clone(),
            spec: TopicSpec {
                configs: Vec::new(),
                ..TopicSpec::compacted(crate::flow::lease::lease_topic(plan), 1, rf)
            },
            cleanup: Cleanup::Any,
            partitions: Partitions::Exactly(
                1,
                "the leaders group's member assigned its partition leads the flow: with more, several nodes would lead",
            ),
        },
        Internal {
            role: "control",
            cluster: target.clone(),
            spec: TopicSpec::compacted(crate::control::CONTROL_TOPIC, 1, rf),
            cleanup: Cleanup::Compact("a pause would expire with retention and the flow resume"),
            partitions: one,
        },
    ]
}

/// What the cluster shows of an internal topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observed {
    /// It exists: its partition count and `cleanup.policy` (`Err`: why the config is unknown).
    Exists { partitions: i32, cleanup_policy: Result<String, String> },
    /// It does not exist (ferry creates it at start, given Create: see the rights).
    Absent,
    /// Its state is unknown (not authorized to describe it, cluster not answering).
    Unknown(String),
}

/// The state of one internal topic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum State {
    Ok {
        notes: Vec<String>,
    },
    /// ferry creates it at start.
    Absent,
    /// The flow would misbehave on it.
    Wrong {
        reasons: Vec<String>,
        notes: Vec<String>,
    },
    Unknown {
        reason: String,
    },
}

impl State {
    pub fn is_problem(&self) -> bool {
        matches!(self, State::Wrong { .. })
    }

    pub fn word(&self) -> &'static str {
        match self {
            State::Ok { .. } => "OK",
            State::Absent => "ABSENT",
            State::Wrong { .. } => "WRONG",
            State::Unknown { .. } => "UNKNOWN",
        }
    }
}

/// Judges what the cluster shows of `topic` against what ferry requires.
pub fn judge(topic: &Internal, observed: &Observed) -> State {
    let (partitions, cleanup_policy) = match observed {
        Observed::Absent => return State::Absent,
        Observed::Unknown(reason) => return State::Unknown { reason: reason.clone() },
        Observed::Exists { partitions, cleanup_policy } => (*partitions, cleanup_policy),
    };
    let (mut reasons, mut notes) = (Vec::new(), Vec::new());
    match topic.partitions {
        Partitions::Exactly(n, why) if partitions != n => {
            reasons.push(format!("{partitions} partitions; ferry requires {n}: {why}"));
        }
        Partitions::Usually(n) if partitions != n => {
            notes.push(format!("{partitions} partitions (ferry creates it with {n}; any count works)"));
        }
        _ => {}
    }
    match (topic.cleanup, cleanup_policy) {
        (Cleanup::Any, _) => {}
        (Cleanup::Compact(why), Ok(policy)) if policy.trim() != "compact" => {
            reasons.push(format!("cleanup.policy={policy}; ferry requires compact: {why}"));
        }
        (Cleanup::PreferCompact, Ok(policy)) if policy.trim() != "compact" => {
            notes.push(format!("cleanup.policy={policy} (MM2 creates it compacted; this works too)"));
        }
        (_, Err(why)) => notes.push(format!("cleanup.policy unknown: {why}")),
        _ => {}
    }
    if reasons.is_empty() { State::Ok { notes } } else { State::Wrong { reasons, notes } }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exists(partitions: i32, policy: &str) -> Observed {
        Observed::Exists { partitions, cleanup_policy: Ok(policy.into()) }
    }

    #[test]
    fn internal_topics_are_where_the_actors_look() {
        let plan = crate::check::rights::tests::plan("");
        let all = topics(&plan);
        let found: Vec<(&str, &str, &str, i32)> =
            all.iter().map(|t| (t.role, t.cluster.as_str(), t.spec.name.as_str(), t.spec.partitions)).collect();
        assert_eq!(
            found,
            [
                ("offset-syncs", "east", "mm2-offset-syncs.west.internal", 1),
                ("checkpoints", "west", "east.checkpoints.internal", 1),
                ("copy progress", "west", "mm2-offsets.east.internal", 25),
                ("heartbeats", "east", "heartbeats", 1),
                ("heartbeats", "west", "heartbeats", 1),
                ("lease", "west", "ferry.leases.east.west", 1),
                ("control", "west", "ferry.control.internal", 1),
            ]
        );
    }

    #[test]
    fn internal_topics_of_switched_off_emitters_are_not_listed() {
        let plan = crate::check::rights::tests::plan(
            "emit_checkpoints_enabled = false\nemit_offset_syncs_enabled = false\nemit_reverse_heartbeats_enabled = false",
        );
        let all = topics(&plan);
        let found: Vec<(&str, &str)> = all.iter().map(|t| (t.role, t.cluster.as_str())).collect();
        assert_eq!(found, [("copy progress", "west"), ("heartbeats", "west"), ("lease", "west"), ("control", "west")]);
    }

    #[test]
    fn wrong_internal_topics_say_why() {
        let plan = crate::check::rights::tests::plan("");
        let all = topics(&plan);
        let by_role = |role: &str| all.iter().find(|t| t.role == role).expect("role");
        let (checkpoints, progress, lease, heartbeats) =
            (by_role("checkpoints"), by_role("copy progress"), by_role("lease"), by_role("heartbeats"));

        assert_eq!(judge(checkpoints, &exists(1, "compact")), State::Ok { notes: vec![] });
        assert_eq!(judge(checkpoints, &Observed::Absent), State::Absent);
        let State::Wrong { reasons, .. } = judge(checkpoints, &exists(1, "compact,delete")) else { panic!("wrong") };
        assert!(reasons[0].starts_with("cleanup.policy=compact,delete; ferry requires compact"), "{reasons:?}");
        // Any partition count works where ferry uses partition 0 or hashes over what there is...
        let State::Ok { notes } = judge(progress, &exists(5, "compact")) else { panic!("ok") };
        assert!(notes[0].contains("5 partitions"), "{notes:?}");
        // ...but the lease must have one.
        let State::Wrong { reasons, .. } = judge(lease, &exists(3, "delete")) else { panic!("wrong") };
        assert_eq!(reasons.len(), 1, "the lease's cleanup policy does not matter: {reasons:?}");
        assert!(reasons[0].starts_with("3 partitions; ferry requires 1"), "{reasons:?}");
        // Heartbeats need no compaction; an unknown policy is a note.
        assert!(matches!(judge(heartbeats, &exists(1, "delete")), State::Ok { notes } if notes.len() == 1));
        let unknown = Observed::Exists { partitions: 1, cleanup_policy: Err("not authorized".into()) };
        assert!(!judge(checkpoints, &unknown).is_problem());
    }
}
