//! What the admin calls answer with, as plain Rust values, and their errors.

use std::ffi::c_int;
use std::fmt;

// ---------------------------------------------------------------------------------------------
// Public types

/// A failed admin call, or a failed part of one (a topic, a group, a partition).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{op}: {name} ({code}): {message}")]
pub struct AdminError {
    /// The broker's error code (positive) or librdkafka's local one (negative, e.g. -185 `_TIMED_OUT`).
    pub code: i32,
    /// librdkafka's name for the code without its prefix: `UNKNOWN_MEMBER_ID`, `_TIMED_OUT`, or
    /// `ERR_<code>?` for a code librdkafka does not know.
    pub name: String,
    /// The human-readable message, prefixed with the subject (topic, group, partition) where known.
    pub message: String,
    /// The admin operation: `IncrementalAlterConfigs`, `ListConsumerGroups`, ...
    pub op: &'static str,
}

/// One change of [`incremental_alter_topic_configs`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigOp {
    /// Set the topic-level override to this value.
    Set(String),
    /// Remove the topic-level override (the topic falls back to the broker default).
    Delete,
}

/// A consumer group's state as librdkafka reports it.
///
/// librdkafka 2.12 knows only the classic states; a KIP-848 group in `Assigning` or `Reconciling`
/// comes back as `Unknown`. Those two variants exist for a later librdkafka.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupState {
    Unknown,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
    Empty,
    Assigning,
    Reconciling,
}

impl GroupState {
    /// librdkafka's `rd_kafka_consumer_group_state_t` value; anything it may add later is `Unknown`.
    pub(super) fn from_code(code: c_int) -> GroupState {
        match code {
            1 => GroupState::PreparingRebalance,
            2 => GroupState::CompletingRebalance,
            3 => GroupState::Stable,
            4 => GroupState::Dead,
            5 => GroupState::Empty,
            _ => GroupState::Unknown,
        }
    }

    /// The state's name as Kafka spells it (`Empty`, `PreparingRebalance`, ...).
    pub fn as_str(&self) -> &'static str {
        match self {
            GroupState::Unknown => "Unknown",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
            GroupState::Empty => "Empty",
            GroupState::Assigning => "Assigning",
            GroupState::Reconciling => "Reconciling",
        }
    }
}

impl fmt::Display for GroupState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One group of [`list_consumer_groups`].
#[derive(Clone, Debug)]
pub struct GroupListing {
    pub group_id: String,
    pub state: GroupState,
    /// No protocol type: a group that only ever had offsets committed to it (like MM2's synced
    /// groups before a consumer joins), never members.
    pub is_simple: bool,
}

/// One group of [`describe_consumer_groups`].
#[derive(Clone, Debug)]
pub struct GroupDescription {
    pub group_id: String,
    /// `Dead` for a group that does not exist.
    pub state: GroupState,
    pub members: usize,
    /// Why this group could not be described (coordinator unavailable, not authorised, ...). A group
    /// that does not exist is not an error here: it is `Dead` with no error.
    pub error: Option<AdminError>,
    /// What the caller's principal may do with the group (KIP-430), also for a group that does not
    /// exist; `None` with an error or when the broker did not say.
    pub authorized_operations: Option<Vec<AclOperation>>,
}

/// A committed offset of a group for one partition, with the commit's metadata string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommittedOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub metadata: String,
}

/// How a [`send_offsets_to_transaction`] failed, as librdkafka classes the error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{error}")]
pub struct TxnError {
    pub error: AdminError,
    /// The producer is unusable (e.g. fenced by a newer producer with its transactional id).
    pub fatal: bool,
    /// The transaction must be aborted before another one begins.
    pub requires_abort: bool,
}

impl TxnError {
    /// Another producer with the same transactional id fenced this one.
    pub fn is_fenced(&self) -> bool {
        matches!(self.error.name.as_str(), "PRODUCER_FENCED" | "INVALID_PRODUCER_EPOCH" | "_FENCED")
    }
}

/// One topic of [`describe_topics`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicDescription {
    pub name: String,
    /// Kafka's topic id in its usual text form (22 characters of base64url, as `kafka-topics`
    /// prints it); `None` with an error or from a broker that has no ids.
    pub id: Option<String>,
    pub partitions: i32,
    /// Why this topic could not be described (e.g. `UNKNOWN_TOPIC_OR_PART` for a topic that does not
    /// exist, `TOPIC_AUTHORIZATION_FAILED`).
    pub error: Option<AdminError>,
    /// What the caller's principal may do with the topic (KIP-430), as the broker computed it from its
    /// ACLs; `None` when the broker did not say.
    pub authorized_operations: Option<Vec<AclOperation>>,
}

/// An ACL operation, as in Kafka's `AclOperation` (what a principal may do with a resource).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AclOperation {
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
    /// A code this build does not know.
    Other(i32),
}

impl AclOperation {
    /// librdkafka's `rd_kafka_AclOperation_t` value.
    pub(super) fn from_code(code: c_int) -> AclOperation {
        match code {
            2 => AclOperation::All,
            3 => AclOperation::Read,
            4 => AclOperation::Write,
            5 => AclOperation::Create,
            6 => AclOperation::Delete,
            7 => AclOperation::Alter,
            8 => AclOperation::Describe,
            9 => AclOperation::ClusterAction,
            10 => AclOperation::DescribeConfigs,
            11 => AclOperation::AlterConfigs,
            12 => AclOperation::IdempotentWrite,
            other => AclOperation::Other(other),
        }
    }

    /// The inverse of [`AclOperation::from_code`].
    pub(super) fn code(self) -> c_int {
        match self {
            AclOperation::All => 2,
            AclOperation::Read => 3,
            AclOperation::Write => 4,
            AclOperation::Create => 5,
            AclOperation::Delete => 6,
            AclOperation::Alter => 7,
            AclOperation::Describe => 8,
            AclOperation::ClusterAction => 9,
            AclOperation::DescribeConfigs => 10,
            AclOperation::AlterConfigs => 11,
            AclOperation::IdempotentWrite => 12,
            AclOperation::Other(c) => c,
        }
    }

    /// The operation's name as `kafka-acls --operation` takes it (`Read`, `DescribeConfigs`, ...).
    pub fn as_str(&self) -> &'static str {
        match self {
            AclOperation::All => "All",
            AclOperation::Read => "Read",
            AclOperation::Write => "Write",
            AclOperation::Create => "Create",
            AclOperation::Delete => "Delete",
            AclOperation::Alter => "Alter",
            AclOperation::Describe => "Describe",
            AclOperation::ClusterAction => "ClusterAction",
            AclOperation::DescribeConfigs => "DescribeConfigs",
            AclOperation::AlterConfigs => "AlterConfigs",
            AclOperation::IdempotentWrite => "IdempotentWrite",
            AclOperation::Other(_) => "Unknown",
        }
    }
}

/// The cluster as [`describe_cluster`] shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterDescription {
    pub cluster_id: Option<String>,
    /// How many brokers the cluster reports.
    pub brokers: usize,
    /// What the caller's principal may do with the cluster resource (KIP-430); `None` when the broker
    /// did not say.
    pub authorized_operations: Option<Vec<AclOperation>>,
}
