//! ferry: a Kafka replication node, wire-compatible with MirrorMaker 2.
//!
//! The crate is split into a pure core that does no I/O (naming [`policy`], topic and group
//! [`filter`]s, MM2 record formats in [`mm2`], flow [`config`], the node's own [`settings`]) and a thin
//! shell of actors that move data between Kafka and that core ([`node`], [`flow`]), with [`http`] serving
//! health and metrics.

pub mod acl_sync;
pub mod check;
pub mod checkpoint_store;
pub mod cli;
pub mod clients;
pub mod config;
pub mod control;
pub mod failpoints;
pub mod filter;
pub mod flow;
pub mod http;
pub mod http_client;
#[cfg(test)]
mod import_map;
pub mod import_mm2;
pub mod kafka;
pub mod kerberos;
pub mod metrics;
pub mod mm2;
pub mod node;
pub mod panics;
pub mod policy;
pub mod protect;
#[allow(unsafe_code)] // the one module that calls librdkafka directly; see its docs
pub mod raw_admin;
pub mod record_rules;
#[cfg(test)]
mod reference_docs;
pub mod reload;
pub mod restart_policy;
pub mod schemas;
pub mod settings;
pub mod status;
pub mod sync_rule;
pub mod sync_store;
#[cfg(test)]
mod test_rng;
pub mod ticks;
pub mod topic_configs;
pub mod translate;
