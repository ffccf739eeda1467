//! What the copier does with a record's schema IDs: nothing (`off`), make sure its schemas are on the
//! target (`sync`), or also replace each ID with the target's (`translate`).
//!
//! IDs already resolved are a map lookup per key and value; a new ID asks the registries once, on a
//! thread of its own that the copy loop waits for at most half a second (the answer is remembered for
//! the flow's life). An ID that cannot be resolved
//! holds its partition (the copier retries it with its backoff, and `/flows` names the error), unless
//! the flow says `on_unknown_schema = "pass"`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use prometheus::IntCounter;

use super::framing;
use super::sync::SchemaSync;
use super::{OnUnknownSchema, SchemaMode};
use crate::config::FlowPlan;
use crate::metrics::METRICS;

/// How long the copy loop waits for the registries' answer about a new ID before it holds the record's
/// partition (and takes the answer at the partition's retry).
const RESOLVE_WAIT: Duration = Duration::from_millis(500);
/// A failed resolution is answered from memory this long (every partition of a topic carries the same
/// IDs: one registry call per ID, not one per partition).
const FAILURE_MEMORY: Duration = Duration::from_millis(900);
/// At most this many IDs are resolved at once (a thread each); more are held until some answer.
const MAX_PENDING: usize = 64;
/// Remembered failures beyond this many are pruned of the expired ones.
const FAILED_PRUNE_AT: usize = 1_024;

/// A record's key and value after translation; `None`: unchanged.
#[derive(Debug, Default, PartialEq)]
pub struct Translated {
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
}

#[derive(Default)]
struct TopicIds {
    /// Source ID → target ID, for keys and for values.
    key: HashMap<u32, u32>,
    value: HashMap<u32, u32>,
    translated: Option<IntCounter>,
    unframed: Option<IntCounter>,
    passed: Option<IntCounter>,
    unresolved: Option<IntCounter>,
}

/// A source ID as a record part of a topic carries it: (ID, topic, key?).
type Memo = (u32, String, bool);

pub struct Translator {
    flow: String,
    mode: SchemaMode,
    on_unknown: OnUnknownSchema,
    /// `schemas_keys`: keys may be framed.
    keys: bool,
    /// The flow's plan: which topics are heartbeats (never framed: their keys and values are MM2's
    /// binary layouts, which start with a zero byte).
    plan: Arc<FlowPlan>,
    sync: Arc<Mutex<SchemaSync>>,
    topics: HashMap<String, TopicIds>,
    /// Recently failed (source ID, topic, key?) → when, and why.
    failed: HashMap<Memo, (Instant, String)>,
    /// Resolutions still waiting for the registries, by the same key.
    pending: HashMap<Memo, mpsc::Receiver<Result<Option<u32>, String>>>,
}

impl Translator {
    pub fn new(plan: Arc<FlowPlan>, sync: Arc<Mutex<SchemaSync>>) -> Self {
        let s = &plan.settings.schemas;
        Translator {
            flow: plan.id.to_string(),
            mode: s.mode,
            on_unknown: s.on_unknown,
            keys: s.keys,
            sync,
            topics: HashMap::new(),
            failed: HashMap::new(),
            pending: HashMap::new(),
            plan,
        }
    }

    /// A record of `topic` with this key and value: the bytes to send instead, or why it must wait.
    pub fn record(&mut self, topic: &str, key: Option<&[u8]>, value: Option<&[u8]>) -> Result<Translated, String> {
        if !self.topics.contains_key(topic) {
            let labels = [self.flow.as_str(), topic];
            let ids = TopicIds {
                translated: Some(METRICS.schema_ids_translated.with_label_values(&labels)),
                unframed: Some(METRICS.records_unframed.with_label_values(&labels)),
                passed: Some(METRICS.schema_ids_passed.with_label_values(&labels)),
                unresolved: Some(METRICS.schema_resolution_failures.with_label_values(&labels)),
                ..TopicIds::default()
            };
            self.topics.insert(topic.to_string(), ids);
        }
        if self.plan.policy.is_heartbeats_topic(topic) {
            return Ok(Translated::default());
        }
        // ID 0 is no registry's: bytes that start with five zero bytes (a small long key) are not framed.
        let framed = |b: &[u8]| framing::schema_id(b).filter(|id| *id != 0);
        let key_id = key.filter(|_| self.keys).and_then(framed);
        let value_id = value.and_then(framed);
        if key_id.is_none() && value_id.is_none() {
            inc(&self.topics[topic].unframed);
            return Ok(Translated::default());
        }
        let key = match (key, key_id) {
            (Some(bytes), Some(id)) => self.part(topic, true, bytes, id)?,
            _ => None,
        };
        let value = match (value, value_id) {
            (Some(bytes), Some(id)) => self.part(topic, false, bytes, id)?,
            _ => None,
        };
        Ok(Translated { key, value })
    }

    fn part(&mut self, topic: &str, is_key: bool, bytes: &[u8], id: u32) -> Result<Option<Vec<u8>>, String> {
        let ids = &self.topics[topic];
        let known = if is_key { ids.key.get(&id) } else { ids.value.get(&id) };
        if let Some(target) = known {
            return Ok(self.rewrite(topic, bytes, id, *target));
        }
        let memo = (id, topic.to_string(), is_key);
        let remembered =
            self.failed.get(&memo).filter(|(at, _)| at.elapsed() < FAILURE_MEMORY).map(|(_, why)| why.clone());
        let from_memory = remembered.is_some();
        let resolved = match remembered {
            Some(why) => Err(why),
            None => self.resolve(&memo),
        };
        match resolved {
            Ok(Some(target)) => {
                self.failed.remove(&memo);
                let ids = self.topics.get_mut(topic).expect("added above");
                if is_key {
                    ids.key.insert(id, target)
                } else {
                    ids.value.insert(id, target)
                };
                Ok(self.rewrite(topic, bytes, id, target))
            }
            // Not this record's schema: bytes that only look framed, copied as they are (remembered
            // as mapping to themselves, never rewritten).
            Ok(None) => {
                self.failed.remove(&memo);
                let ids = self.topics.get_mut(topic).expect("added above");
                if is_key {
                    ids.key.insert(id, id)
                } else {
                    ids.value.insert(id, id)
                };
                Ok(None)
            }
            Err(why) => {
                // Remembered from the first failure: retried once the memory is older than FAILURE_MEMORY.
                if !from_memory {
                    if self.failed.len() >= FAILED_PRUNE_AT {
                        self.failed.retain(|_, (at, _)| at.elapsed() < FAILURE_MEMORY);
                    }
                    self.failed.insert(memo, (Instant::now(), why.clone()));
                }
                match (self.mode, self.on_unknown) {
                    // `sync` sends the record as it is anyway; the refresh tries again.
                    (SchemaMode::Sync, _) => Ok(None),
                    (_, OnUnknownSchema::Pass) => {
                        inc(&self.topics[topic].passed);
                        Ok(None)
                    }
                    _ => {
                        inc(&self.topics[topic].unresolved);
                        Err(why)
                    }
                }
            }
        }
    }

    /// Asks the registries for the target's ID on a thread of its own, and waits for the answer at most
    /// [`RESOLVE_WAIT`]: a registry that does not answer (or a refresh holding the flow's registries)
    /// delays the copy loop that long, not its timeout. An answer that comes later is taken at the
    /// partition's retry.
    fn resolve(&mut self, memo: &Memo) -> Result<Option<u32>, String> {
        let (id, ref topic, is_key) = *memo;
        let part = if is_key { "key" } else { "value" };
        if let Some(rx) = self.pending.remove(memo) {
            // Asked before: take the answer if it came, never wait for it again.
            return match rx.try_recv() {
                Ok(answer) => answer.map_err(|e| format!("schema ID {id} of the {part} could not be resolved: {e}")),
                Err(mpsc::TryRecvError::Empty) => {
                    self.pending.insert(memo.clone(), rx);
                    Err(format!("schema ID {id} of the {part}: the schema registries have not answered yet"))
                }
                Err(mpsc::TryRecvError::Disconnected) => {
                    Err(format!("schema ID {id} of the {part}: its resolution ended without an answer"))
                }
            };
        }
        if self.pending.len() >= MAX_PENDING {
            return Err(format!(
                "schema ID {id} of the {part}: {MAX_PENDING} other IDs are being resolved (the schema registries are slow)"
            ));
        }
        let (tx, rx) = mpsc::channel();
        let sync = self.sync.clone();
        let resolving = topic.clone();
        let spawned = std::thread::Builder::new().name("schema-resolve".into()).spawn(move || {
            let answer = sync.lock().unwrap_or_else(|p| p.into_inner()).target_id(id, &resolving, is_key);
            let _ = tx.send(answer.map_err(|e| e.to_string()));
        });
        if let Err(e) = spawned {
            return Err(format!("schema ID {id} of the {part}: cannot start a thread to resolve it: {e}"));
        }
        match rx.recv_timeout(RESOLVE_WAIT) {
            Ok(answer) => answer.map_err(|e| format!("schema ID {id} of the {part} could not be resolved: {e}")),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                self.pending.insert(memo.clone(), rx);
                Err(format!("schema ID {id} of the {part}: the schema registries have not answered yet"))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Err(format!("schema ID {id} of the {part}: its resolution ended without an answer"))
            }
        }
    }

    fn rewrite(&self, topic: &str, bytes: &[u8], source: u32, target: u32) -> Option<Vec<u8>> {
        if self.mode != SchemaMode::Translate {
            return None;
        }
        inc(&self.topics[topic].translated);
        // The same number on both registries: nothing to copy.
        (source != target).then(|| framing::with_id(bytes, target))
    }
}

fn inc(counter: &Option<IntCounter>) {
    if let Some(c) = counter {
        c.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schemas::Registry;

    /// A translator of flow `east->west` (topic `orders`) whose registries nothing answers.
    fn translator(extra: &str) -> Translator {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(
            dir.path().join("f.toml"),
            format!(
                "[clusters.east]\nbootstrap_servers = \"e:1\"\n[clusters.east.schema_registry]\nurl = \"http://127.0.0.1:1\"\n\
                 [clusters.west]\nbootstrap_servers = \"w:1\"\n[clusters.west.schema_registry]\nurl = \"http://127.0.0.1:2\"\n\
                 [[flows]]\nsource = \"east\"\ntarget = \"west\"\ntopics = [\"orders\"]\nschemas = \"translate\"\n{extra}\n"
            ),
        )
        .expect("write");
        let set = crate::config::load_dir(dir.path(), crate::kafka::check_client_properties).expect("valid");
        let plan = Arc::new(set.flows.into_values().next().expect("a flow"));
        let s = &plan.settings.schemas;
        let (source, target) = (s.source.clone().expect("source"), s.target.clone().expect("target"));
        let sync = Arc::new(Mutex::new(SchemaSync::new(plan.clone(), Registry::new(source), Registry::new(target))));
        Translator::new(plan, sync)
    }

    #[test]
    fn heartbeats_and_id_zero_are_never_framed() {
        let mut t = translator("");
        // MM2's heartbeat: a version and a length-prefixed alias (key), a version and a timestamp (value).
        let key = [0u8, 0, 0, 4, b'e', b'a', b's', b't', 0, 4, b'w', b'e', b's', b't'];
        let value = [0u8, 0, 0, 0, 1, 0x94, 0x2b, 0x5c, 0x3d, 0x10];
        for topic in ["heartbeats", "west.heartbeats"] {
            assert_eq!(t.record(topic, Some(&key), Some(&value)), Ok(Translated::default()), "{topic}");
        }
        // A small long key: ID 0 is no registry's.
        assert_eq!(t.record("orders", Some(&7u64.to_be_bytes()), Some(b"plain")), Ok(Translated::default()));
    }

    #[test]
    fn keys_are_left_alone_when_the_flow_says_they_are_not_framed() {
        let mut t = translator("schemas_keys = false");
        let key = [0u8, 0, 0, 0, 9, 1, 2, 3];
        assert_eq!(t.record("orders", Some(&key), Some(b"plain")), Ok(Translated::default()));
        // With keys framed (the default), the same key asks the registries, which do not answer: held.
        let mut t = translator("");
        let held = t.record("orders", Some(&key), Some(b"plain")).expect_err("held");
        assert!(held.contains("schema ID 9 of the key"), "{held}");
    }
}
