//! ferry's integration tests, in one binary: every file here is a module, and they share the test bed
//! [`support::shared_pair`] (one east/west pair of plain clusters for the whole run; unique topic and
//! group names keep the tests apart). Tests that stop brokers, write into internal topics or need
//! secured clusters (Kerberos, OIDC, ACLs) start their own.
//!
//! One binary instead of one per file: the binary links once, the shared pair starts once, and tests
//! that mostly wait run side by side (`scripts/test.sh` sets the number of threads). Run one module with
//! `scripts/test.sh copy::`, one test with `scripts/test.sh copy::its_name`.

mod support;

mod acls;
mod checkpoints;
mod copy;
mod exactly_once;
mod exactly_once_nodes;
mod failback;
mod faults;
mod handover;
mod hardening;
mod harness;
mod import_mm2;
mod kerberos;
mod leader_fence;
mod links;
mod many_flows;
mod observability;
mod offset_syncs;
mod oidc;
mod operations;
mod packaging;
mod protect;
mod provenance;
mod raw_admin;
mod readers;
mod record_rules;
mod reload;
mod runbook;
mod scaleout;
mod schemas;
mod secrets;
mod secure_harness;
mod security;
mod takeover;
mod topic_deletions;
mod topics;
mod topologies;
mod validate;
mod wide_clients;
