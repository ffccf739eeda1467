//! One flow (`source->target`) at run time: its supervisor and the actors it supervises.

pub mod acks;
pub mod copier;
pub mod progress;
pub mod supervisor;
pub mod topics;

pub use supervisor::{FlowSupervisor, StopFlow};
