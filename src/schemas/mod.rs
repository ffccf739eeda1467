//! Schemas travel with the data (issue 34): records in the Confluent wire format carry a schema ID that
//! means something only in the registry of the cluster that wrote them. A flow with `schemas = "sync"`
//! keeps the subjects of its topics in step on the target's registry; with `schemas = "translate"` it
//! also rewrites each record's ID to the target registry's ID of the same schema.
//!
//! - [`framing`]: the wire format's five bytes;
//! - [`registry`]: a registry's definition and the REST calls made to it;
//! - [`subjects`]: which subjects are the flow's, and their names on the target;
//! - [`sync`]: bringing versions over in order, references first;
//! - [`translator`]: what the copier does per record.
//!
//! The periodic refresh of every flow runs on one node-level thread ([`crate::ticks`]), not one per flow.

pub mod framing;
pub mod registry;
pub mod subjects;
pub mod sync;
pub mod translator;

use std::sync::{Arc, Mutex};

use crate::config::FlowPlan;
use crate::ticks;

pub use crate::config::schema_registry::{
    Auth, DEFAULT_REFRESH_INTERVAL, OnUnknownSchema, RegistrySpec, SchemaMode, SchemaSettings,
};
pub use registry::{Registry, RegistryError};
pub use sync::SchemaSync;
pub use translator::{Translated, Translator};

/// A running flow's schema work: the copier's translator and the periodic refresh (ends when dropped).
pub struct FlowSchemas {
    pub translator: Translator,
    pub sync: Arc<Mutex<SchemaSync>>,
    _refresh: ticks::Job,
}

/// The schema work of `plan`, if its `schemas` is not `off`.
pub fn start(plan: &Arc<FlowPlan>) -> Option<FlowSchemas> {
    let s = &plan.settings.schemas;
    if s.mode == SchemaMode::Off {
        return None;
    }
    let (source, target) = (s.source.clone()?, s.target.clone()?);
    let sync = Arc::new(Mutex::new(SchemaSync::new(plan.clone(), Registry::new(source), Registry::new(target))));
    let flow = plan.id.to_string();
    let refreshing = sync.clone();
    let mut last_error: Option<String> = None;
    let refresh_flow = flow.clone();
    let refresh = ticks::schemas().every(s.refresh_interval, move || {
        let result = refreshing.lock().unwrap_or_else(|p| p.into_inner()).refresh();
        match result {
            Ok(n) => {
                if last_error.take().is_some() {
                    tracing::info!(flow = %refresh_flow, subjects = n, "schema subjects in step again");
                }
            }
            Err(e) => {
                let why = e.to_string();
                if last_error.as_deref() != Some(why.as_str()) {
                    tracing::warn!(flow = %refresh_flow, error = %why, "schema refresh failed; retried at the next refresh");
                }
                last_error = Some(why);
            }
        }
    });
    let translator = Translator::new(flow, s.mode, s.on_unknown, sync.clone());
    Some(FlowSchemas { translator, sync, _refresh: refresh })
}
