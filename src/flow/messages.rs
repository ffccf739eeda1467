//! What a flow's actors tell their supervisor: the message types, and [`Parent`], the recipients the
//! supervisor hands each actor at its start. The actors depend on this module, not on the supervisor,
//! so the arrows run one way: the supervisor knows its actors, an actor knows only whom to tell.

use std::collections::{BTreeMap, BTreeSet};

use actix::prelude::*;

use super::acks::SourcePartition;
use crate::config::FlowPlan;
use crate::status::{ActorState, ItemError, PartitionProblem};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActorKind {
    Copier,
    OffsetSyncs,
    Checkpoints,
    Heartbeats,
    Topics,
    Lease,
}

impl ActorKind {
    pub const ALL: [ActorKind; 6] =
        [Self::Lease, Self::Topics, Self::Copier, Self::OffsetSyncs, Self::Checkpoints, Self::Heartbeats];

    /// Actors every node runs; the others run on the node that holds the flow's lease.
    pub const EVERY_NODE: [ActorKind; 4] = [Self::Lease, Self::Topics, Self::Copier, Self::OffsetSyncs];

    /// The duties only the leader runs (metric `ferry_leader{duty}`); topic sync is split: every node
    /// watches topics, only the leader creates and changes them.
    pub const LEADER_DUTIES: [ActorKind; 3] = [Self::Topics, Self::Checkpoints, Self::Heartbeats];

    /// Whether `plan` runs this actor at all: the emitters whose switches are off are never started,
    /// listed or counted (MM2's `emit.*.enabled`).
    pub fn runs_in(self, plan: &FlowPlan) -> bool {
        let s = &plan.settings;
        match self {
            Self::OffsetSyncs => s.emit_offset_syncs_enabled,
            Self::Checkpoints => s.runs_checkpoints(),
            Self::Heartbeats => s.runs_heartbeats(),
            Self::Copier | Self::Topics | Self::Lease => true,
        }
    }

    /// The name used in logs, metrics and status output.
    pub fn name(self) -> &'static str {
        match self {
            Self::Copier => "copier",
            Self::OffsetSyncs => "offset_syncs",
            Self::Checkpoints => "checkpoints",
            Self::Heartbeats => "heartbeats",
            Self::Topics => "topics",
            Self::Lease => "lease",
        }
    }
}

/// A child actor ended, with its reason.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct ChildExited {
    pub kind: ActorKind,
    pub result: Result<(), String>,
}

/// A child reports a state change that is not an exit (e.g. degraded while a cluster is away).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct ActorStatusChanged {
    pub kind: ActorKind,
    pub state: ActorState,
    pub error: Option<String>,
}

/// This node gained or lost the flow's lease (see `lease`).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Leadership {
    pub leading: bool,
}

/// The flow's copier group members and lease holder as the clusters describe them (`None`: not known,
/// the cluster did not answer).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct GroupMembers {
    pub members: Option<Vec<crate::status::Member>>,
    pub leader: Option<String>,
}

/// What the copier should copy, from the topic synchroniser.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Assignment {
    /// Every source partition to copy (each one's remote partition exists on the target).
    pub partitions: BTreeSet<SourcePartition>,
    /// Topics that no longer exist on the source: everything kept for them is dropped.
    pub deleted: BTreeSet<String>,
}

/// The topic synchroniser found these source partitions ready to copy.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct TopicsReady(pub Assignment);

/// The copier's partitions that are not copying because of a failure (the complete list).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct PartitionProblems(pub Vec<PartitionProblem>);

/// Per-item errors of the topic synchroniser (topics) or the checkpoint computer (groups): the
/// complete current list.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub enum ItemErrorsChanged {
    Topics(BTreeMap<String, ItemError>),
    Groups(BTreeMap<String, ItemError>),
}

/// Remote topics waiting out `sync_topic_deletions`' grace period (the complete list; the leader's).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct TopicDeletionsPending(pub Vec<crate::flow::topic_deletions::PendingDeletion>);

/// The source partitions the copier group gives this node now (`topic-partition`, sorted).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct AssignedPartitions(pub Vec<String>);

/// Where an actor sends what it reports: one recipient per message type, all of them the flow's
/// supervisor (see `FlowSupervisor::parent`).
#[derive(Clone)]
pub struct Parent {
    pub exited: Recipient<ChildExited>,
    pub status: Recipient<ActorStatusChanged>,
    pub leadership: Recipient<Leadership>,
    pub members: Recipient<GroupMembers>,
    pub topics_ready: Recipient<TopicsReady>,
    pub assigned: Recipient<AssignedPartitions>,
    pub problems: Recipient<PartitionProblems>,
    pub item_errors: Recipient<ItemErrorsChanged>,
    pub deletions: Recipient<TopicDeletionsPending>,
}
