//! Keeping a flow's subjects in step on the target registry, and finding the target's ID of a source
//! schema.
//!
//! A source (subject, version) is *synced* once the target registry holds the same schema under the
//! renamed subject ([`super::subjects::renamed`]): found there by content, or registered. Versions are
//! brought over in the source's order (every earlier version of the subject first), references before
//! the schema that names them (with their subjects renamed and their versions as the target numbers
//! them). What is synced is remembered for the life of the flow, so the registries are asked once per
//! version. Registering an identical schema gives its existing ID: two nodes, or the two flows of an
//! active-active pair under the identity policy, never register a schema twice.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use prometheus::IntCounter;

use super::registry::{Registry, RegistryError};
use super::subjects;
use crate::config::FlowPlan;
use crate::metrics::METRICS;

/// How deep references may nest (a cycle of references is refused, not followed forever).
const MAX_DEPTH: u8 = 32;

/// Why a schema could not be synced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyncError {
    Source(RegistryError),
    Target(RegistryError),
    Other(String),
}

impl fmt::Display for SyncError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Source(e) | Self::Target(e) => e.fmt(f),
            Self::Other(why) => f.write_str(why),
        }
    }
}

/// One flow's view of its two registries.
pub struct SchemaSync {
    flow: String,
    source: Registry,
    target: Registry,
    plan: Arc<FlowPlan>,
    /// (source subject, source version) → (target ID, target version).
    synced: HashMap<(String, i32), (u32, i32)>,
    /// Source subject → its versions as last listed.
    versions: HashMap<String, Vec<i32>>,
    /// Source ID → the (subject, version)s it is registered as.
    id_subjects: HashMap<u32, Vec<(String, i32)>>,
    /// Source subjects with at least one version synced (and their compatibility level carried).
    subjects_synced: HashSet<String>,
    subjects_metric: IntCounter,
}

impl SchemaSync {
    pub fn new(plan: Arc<FlowPlan>, source: Registry, target: Registry) -> SchemaSync {
        let flow = plan.id.to_string();
        let subjects_metric = METRICS.schema_subjects_synced.with_label_values(&[&flow]);
        SchemaSync {
            flow,
            source,
            target,
            plan,
            synced: HashMap::new(),
            versions: HashMap::new(),
            id_subjects: HashMap::new(),
            subjects_synced: HashSet::new(),
            subjects_metric,
        }
    }

    fn copied(&self) -> impl Fn(&str) -> bool + '_ {
        |t: &str| self.plan.copies_topic(t)
    }

    /// The subject's name on the target.
    fn renamed(&self, subject: &str) -> String {
        let plan = &self.plan;
        subjects::renamed(subject, &|t| plan.copies_topic(t), &|t| plan.policy.format_remote_topic(&plan.id.source, t))
    }

    /// The target's ID of the schema a record of `topic` carries as `source_id` in its key or value,
    /// syncing its subject (up to that version) first when needed. `None`: the ID is registered only
    /// for other topics' parts, so these bytes merely look framed (see [`subjects::subject_for`]).
    pub fn target_id(&mut self, source_id: u32, topic: &str, is_key: bool) -> Result<Option<u32>, SyncError> {
        if !self.id_subjects.contains_key(&source_id) {
            let found = self.source.id_versions(source_id).map_err(SyncError::Source)?;
            if found.is_empty() {
                return Err(SyncError::Other(format!(
                    "schema ID {source_id} is registered under no subject on the registry of `{}` (deleted?)",
                    self.source.cluster()
                )));
            }
            self.id_subjects.insert(source_id, found);
        }
        let Some((subject, version)) = subjects::subject_for(&self.id_subjects[&source_id], topic, is_key).cloned()
        else {
            return Ok(None);
        };
        self.ensure(&subject, version, 0).map(|(id, _)| Some(id))
    }

    /// The source subjects of the flow's topics (a refresh syncs each with [`SchemaSync::sync_subject`],
    /// taking the lock once per subject so that records' new IDs are resolved in between).
    pub fn flow_subjects(&self) -> Result<Vec<String>, SyncError> {
        let all = self.source.subjects().map_err(SyncError::Source)?;
        let copied = self.copied();
        Ok(all.into_iter().filter(|s| subjects::topic_of(s, &copied).is_some()).collect())
    }

    /// Every version of `subject` in step on the target.
    pub fn sync_subject(&mut self, subject: &str) -> Result<(), SyncError> {
        let listed = self.source.versions(subject).map_err(SyncError::Source)?;
        let latest = listed.last().copied();
        self.versions.insert(subject.to_string(), listed);
        match latest {
            Some(latest) => self.ensure(subject, latest, 0).map(|_| ()),
            None => Ok(()),
        }
    }

    /// The target's (ID, version) of the source's `subject` at `version`: synced before, or now (with
    /// every earlier version of the subject and every schema it references).
    fn ensure(&mut self, subject: &str, version: i32, depth: u8) -> Result<(u32, i32), SyncError> {
        if let Some(hit) = self.synced.get(&(subject.to_string(), version)) {
            return Ok(*hit);
        }
        if depth > MAX_DEPTH {
            return Err(SyncError::Other(format!(
                "subject `{subject}` version {version}: references nested deeper than {MAX_DEPTH} (a cycle?)"
            )));
        }
        if !self.versions.get(subject).is_some_and(|v| v.contains(&version)) {
            let listed = self.source.versions(subject).map_err(SyncError::Source)?;
            self.versions.insert(subject.to_string(), listed);
        }
        // The target numbers versions in the order they come: earlier ones first.
        let earlier: Vec<i32> = self.versions[subject]
            .iter()
            .copied()
            .filter(|v| *v < version && !self.synced.contains_key(&(subject.to_string(), *v)))
            .collect();
        for v in earlier {
            match self.import(subject, v, depth) {
                // Deleted on the source since it was listed: the target numbers what is left.
                Err(SyncError::Source(RegistryError::NotFound { .. })) => {
                    let listed = self.source.versions(subject).map_err(SyncError::Source)?;
                    let gone = !listed.contains(&v);
                    self.versions.insert(subject.to_string(), listed);
                    if !gone {
                        return Err(SyncError::Other(format!(
                            "subject `{subject}` version {v}: listed, then not found"
                        )));
                    }
                }
                other => {
                    other?;
                }
            }
        }
        self.import(subject, version, depth)
    }

    fn import(&mut self, subject: &str, version: i32, depth: u8) -> Result<(u32, i32), SyncError> {
        let found = self.source.version(subject, version).map_err(SyncError::Source)?;
        let mut schema = found.schema;
        for r in &mut schema.references {
            let (_, target_version) = self.ensure(&r.subject, r.version, depth + 1)?;
            r.subject = self.renamed(&r.subject);
            r.version = target_version;
        }
        let target_subject = self.renamed(subject);
        let hit = match self.target.lookup(&target_subject, &schema).map_err(SyncError::Target)? {
            Some(hit) => hit,
            None => {
                match self.target.register(&target_subject, &schema) {
                    Ok(_) => {}
                    // The target's level refuses what the source took: a copy takes every version. Only on
                    // a subject of ferry's own naming (a remote topic's): a subject of the same name on both
                    // sides (record-named, or the identity policy) belongs to the target's users too.
                    Err(e) if e.status() == Some(409) && target_subject != subject => {
                        tracing::warn!(flow = %self.flow, subject = %target_subject, error = %e, "the target registry refused a version as incompatible; setting the subject's compatibility to NONE there");
                        self.target.set_compatibility(&target_subject, "NONE").map_err(SyncError::Target)?;
                        self.target.register(&target_subject, &schema).map_err(SyncError::Target)?;
                    }
                    Err(e) => return Err(SyncError::Target(e)),
                }
                tracing::info!(flow = %self.flow, subject, version, target_subject = %target_subject, "schema registered on the target");
                self.target.lookup(&target_subject, &schema).map_err(SyncError::Target)?.ok_or_else(|| {
                    SyncError::Other(format!(
                        "`{target_subject}` on the registry of `{}`: registered, then not found",
                        self.target.cluster()
                    ))
                })?
            }
        };
        self.synced.insert((subject.to_string(), version), hit);
        if self.subjects_synced.insert(subject.to_string()) {
            self.subjects_metric.inc();
            self.carry_level(subject, &target_subject);
        }
        Ok(hit)
    }

    /// A subject's own compatibility level on the source, carried to its target subject (when its first
    /// version is synced). Best effort: a registry that does not let ferry read or set levels costs a
    /// warning, not the copy.
    fn carry_level(&self, subject: &str, target_subject: &str) {
        let own = self.source.compatibility(Some(subject));
        let global = self.source.compatibility(None);
        let carried = match (own, global) {
            // Some registries answer a subject without a level of its own with the global one.
            (Ok(Some(level)), Ok(global)) if Some(&level) != global.as_ref() => {
                self.target.set_compatibility(target_subject, &level)
            }
            (Ok(_), Ok(_)) => Ok(()),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        if let Err(e) = carried {
            tracing::warn!(flow = %self.flow, subject, target_subject, error = %e, "the subject's compatibility level was not carried to the target");
        }
    }
}
