//! One flow (`source->target`) at run time: its supervisor and the actors it supervises.

pub mod acks;
pub mod checkpoints;
pub mod copier;
pub mod heartbeats;
pub mod offset_syncs;
pub mod progress;
pub mod supervisor;
pub mod topics;
pub mod worker;

pub use supervisor::{FlowSupervisor, StopFlow};
