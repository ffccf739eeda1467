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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::config::FlowPlan;
use crate::ticks;

pub use crate::config::schema_registry::{
    Auth, DEFAULT_REFRESH_INTERVAL, OnUnknownSchema, RegistrySpec, SchemaMode, SchemaSettings,
};
pub use registry::{Registry, RegistryError};
pub use sync::{SchemaSync, SyncError};
pub use translator::{Translated, Translator};

/// A running flow's schema work: the copier's translator and the periodic refresh (ends when dropped,
/// after at most the subject the refresh is on).
pub struct FlowSchemas {
    pub translator: Translator,
    cancel: Arc<AtomicBool>,
    _refresh: ticks::Job,
}

impl Drop for FlowSchemas {
    fn drop(&mut self) {
        // Before the job is dropped (which waits for a run in progress): the run stops at its next subject.
        self.cancel.store(true, Ordering::Release);
    }
}

/// The schema work of `plan`, if its `schemas` is not `off`.
pub fn start(plan: &Arc<FlowPlan>) -> Option<FlowSchemas> {
    let s = &plan.settings.schemas;
    if s.mode == SchemaMode::Off {
        return None;
    }
    let (source, target) = (s.source.clone()?, s.target.clone()?);
    let sync = Arc::new(Mutex::new(SchemaSync::new(plan.clone(), Registry::new(source), Registry::new(target))));
    let cancel = Arc::new(AtomicBool::new(false));
    let (refreshing, cancelled, flow) = (sync.clone(), cancel.clone(), plan.id.to_string());
    let mut last_error: Option<String> = None;
    let refresh = ticks::schemas().every(s.refresh_interval, move || match refresh(&refreshing, &cancelled) {
        Ok(n) => {
            if last_error.take().is_some() {
                tracing::info!(flow = %flow, subjects = n, "schema subjects in step again");
            }
        }
        Err(e) => {
            let why = e.to_string();
            if last_error.as_deref() != Some(why.as_str()) {
                tracing::warn!(flow = %flow, error = %why, "schema refresh failed; retried at the next refresh");
            }
            last_error = Some(why);
        }
    });
    let translator = Translator::new(plan.clone(), sync);
    Some(FlowSchemas { translator, cancel, _refresh: refresh })
}

/// One refresh: every subject of the flow's topics in step, the lock taken per subject (a record's new
/// ID waits for one subject at most, not for the whole refresh). Goes on past a subject that fails;
/// returns how many subjects there are, or the first error.
fn refresh(sync: &Mutex<SchemaSync>, cancel: &AtomicBool) -> Result<usize, SyncError> {
    let lock = || sync.lock().unwrap_or_else(|p| p.into_inner());
    let subjects = lock().flow_subjects()?;
    let mut first_error = None;
    for subject in &subjects {
        if cancel.load(Ordering::Acquire) {
            break;
        }
        if let Err(e) = lock().sync_subject(subject) {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(subjects.len()), Err)
}
