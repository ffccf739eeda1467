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

struct TopicIds {
    /// Source ID → the target's ID, for keys and for values; `None`: bytes that only look framed (the ID
    /// is registered for other topics' parts only), left as they are.
    key: HashMap<u32, Option<u32>>,
    value: HashMap<u32, Option<u32>>,
    translated: IntCounter,
    unframed: IntCounter,
    passed: IntCounter,
    unresolved: IntCounter,
}

impl TopicIds {
    fn new(flow: &str, topic: &str) -> TopicIds {
        let labels = [flow, topic];
        TopicIds {
            key: HashMap::new(),
            value: HashMap::new(),
            translated: METRICS.schema_ids_translated.with_label_values(&labels),
            unframed: METRICS.records_unframed.with_label_values(&labels),
            passed: METRICS.schema_ids_passed.with_label_values(&labels),
            unresolved: METRICS.schema_resolution_failures.with_label_values(&labels),
        }
    }

    fn ids(&mut self, is_key: bool) -> &mut HashMap<u32, Option<u32>> {
        if is_key { &mut self.key } else { &mut self.value }
    }
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
            self.topics.insert(topic.to_string(), TopicIds::new(&self.flow, topic));
        }
        if self.plan.policy.is_heartbeats_topic(topic) {
            return Ok(Translated::default());
        }
        // ID 0 is no registry's: bytes that start with five zero bytes (a small long key) are not framed.
        let framed = |b: &[u8]| framing::schema_id(b).filter(|id| *id != 0);
        let key_id = key.filter(|_| self.keys).and_then(framed);
        let value_id = value.and_then(framed);
        if key_id.is_none() && value_id.is_none() {
            self.topics[topic].unframed.inc();
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
        let topic_ids = self.topics.get_mut(topic).expect("added by record()");
        if let Some(known) = topic_ids.ids(is_key).get(&id).copied() {
            return Ok(known.and_then(|target| self.rewrite(topic, bytes, id, target)));
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
            Ok(found) => {
                self.failed.remove(&memo);
                self.topics.get_mut(topic).expect("added by record()").ids(is_key).insert(id, found);
                Ok(found.and_then(|target| self.rewrite(topic, bytes, id, target)))
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
                        self.topics[topic].passed.inc();
                        Ok(None)
                    }
                    _ => {
                        self.topics[topic].unresolved.inc();
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
        // An answer that came, or whether it may still come (`true`) or never will (`false`).
        let (rx, answer) = match self.pending.remove(memo) {
            // Asked before: take the answer if it came, never wait for it again.
            Some(rx) => {
                let answer = rx.try_recv().map_err(|e| e == mpsc::TryRecvError::Empty);
                (rx, answer)
            }
            None => {
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
                let answer = rx.recv_timeout(RESOLVE_WAIT).map_err(|e| e == mpsc::RecvTimeoutError::Timeout);
                (rx, answer)
            }
        };
        match answer {
            Ok(answer) => answer.map_err(|e| format!("schema ID {id} of the {part} could not be resolved: {e}")),
            Err(true) => {
                self.pending.insert(memo.clone(), rx);
                Err(format!("schema ID {id} of the {part}: the schema registries have not answered yet"))
            }
            Err(false) => Err(format!("schema ID {id} of the {part}: its resolution ended without an answer")),
        }
    }

    fn rewrite(&self, topic: &str, bytes: &[u8], source: u32, target: u32) -> Option<Vec<u8>> {
        if self.mode != SchemaMode::Translate {
            return None;
        }
        self.topics[topic].translated.inc();
        // The same number on both registries: nothing to copy.
        (source != target).then(|| framing::with_id(bytes, target))
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
