//! One flow (`source->target`) at run time: its supervisor and the actors it supervises.

pub mod acks;
pub mod checkpoints;
pub mod copier;
pub mod heartbeats;
pub mod lease;
pub mod list_offsets;
pub mod members;
pub mod messages;
pub mod offset_syncs;
pub mod pause;
pub mod progress;
pub mod supervisor;
pub mod topic_deletions;
pub mod topics;
pub mod worker;
pub mod writable;

pub use supervisor::{FlowSupervisor, StopFlow};

/// Who this node is among the nodes that share its flows.
#[derive(Clone, Debug)]
pub struct Identity {
    /// This node (static membership in each flow's copier group; the default is the host name).
    pub node_id: String,
    /// The nodes that share flows: every node of one deployment uses the same name, two independent
    /// deployments replicating the same clusters use different ones. It prefixes the copier and lease
    /// groups and the checkpoint producer's transactional id (default `ferry`).
    pub deployment: String,
}
