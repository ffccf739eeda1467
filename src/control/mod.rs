//! The deployment's control records: operator decisions that every node of a deployment must follow
//! and that must outlive any one node, kept in Kafka like everything else ferry remembers.
//!
//! Today that is the pause of a flow. `POST /flows/{id}/pause` on any node writes a record to the
//! compacted topic [`CONTROL_TOPIC`] on the flow's target cluster (where every node of the flow already
//! connects), keyed `pause|<deployment>|<flow>`, with who paused it and when; every node of the
//! deployment tails that topic ([`ControlWatch`], one per target cluster connection of the node) and
//! pauses or resumes its share of the flow. A flow that starts before its target's control topic was
//! read holds its copier until it is (at most 10 s, so a missing right or an away cluster does not stop
//! it for good), so a pause survives restarts of every node. The newest record of a key wins, in the
//! topic's order (see [`order`]: a node's own write, acknowledged late, does not undo a later record it
//! has read already), so nodes that see the same log agree.
//!
//! Besides pauses it holds promotions ([`promote`]): topics `ferry promote` took out of their flow.
//!
//! What this does not do: it does not wait for the other nodes to apply a pause (each applies it
//! within a poll, about a second; `/flows` on each node shows whether it did).

use std::collections::BTreeMap;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use actix::{Message, Recipient};
use rdkafka::consumer::Consumer;
use rdkafka::message::Message as _;
use rdkafka::{Offset, TopicPartitionList};

use crate::clients::{Connection, Outgoing};
use crate::config::{ClusterSpec, FlowId};
use crate::kafka::{self, TopicSpec};

pub mod order;
pub mod promote;

pub use crate::status::PauseRecord;
pub use order::{Logged, Pauses};
pub use promote::{PromoteRecord, PromotionSeen, Promotions};

/// The control topic on each target cluster: one partition (its order is the order of decisions),
/// compacted (only the newest decision per key matters).
pub const CONTROL_TOPIC: &str = "ferry.control.internal";
/// How long a poll of the tail waits.
const POLL: Duration = Duration::from_millis(200);
/// Retry setting up the tail (topic, consumer) this often while the cluster refuses or is away.
const RETRY: Duration = Duration::from_secs(5);

pub fn pause_key(deployment: &str, flow: &FlowId) -> String {
    format!("pause|{deployment}|{flow}")
}

/// The flow a control record's key pauses: `Ok(None)` for another deployment's key or a key of another
/// kind; an error for a key that is no text, or a pause key of `deployment` that names no flow.
fn parse_pause_key(deployment: &str, key: Option<&[u8]>) -> Result<Option<FlowId>, String> {
    let key =
        std::str::from_utf8(key.ok_or("the record has no key")?).map_err(|e| format!("the key is not text: {e}"))?;
    let Some(rest) = key.strip_prefix("pause|").and_then(|r| r.strip_prefix(deployment)?.strip_prefix('|')) else {
        return Ok(None);
    };
    rest.parse().map(Some).map_err(|e| format!("pause key `{key}`: {e}"))
}

/// The control topic of a connection was read to its end: the last pause record of each flow there.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct PausesRead {
    /// The connection ([`connection_key`]).
    pub connection: String,
    pub records: BTreeMap<FlowId, Logged>,
    /// Every promotion record up to the end, in the topic's order.
    pub promotions: Vec<PromotionSeen>,
}

/// A promotion record read from the control topic after its end was reached.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct PromotionRead {
    pub connection: String,
    pub seen: PromotionSeen,
}

/// A flow's pause record, as read from the control topic after its end was reached.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct PauseSeen {
    pub flow: FlowId,
    pub logged: Logged,
}

/// Which connection a cluster definition is: the same bootstrap, client properties and files behind
/// them share one [`ControlWatch`].
pub fn connection_key(cluster: &ClusterSpec) -> String {
    let props: Vec<String> = cluster.client.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{}|{}|{}", cluster.bootstrap_servers, props.join(","), cluster.files_fingerprint())
}

/// Tails the control topic of one target cluster for one deployment, and writes its records.
/// Stops its thread when dropped.
pub struct ControlWatch {
    cluster: ClusterSpec,
    /// Pause records go through the connection's shared producer for internal topics, made when the
    /// first is written (making it may have to log in to Kerberos first: not on the node's thread, and
    /// a failure is that write's, tried again by the next).
    conn: Arc<Connection>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for ControlWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlWatch").field("cluster", &self.cluster.alias).finish()
    }
}

impl ControlWatch {
    /// Starts tailing `cluster`'s control topic: `read` gets every pause recorded so far once the topic
    /// was read to its end, `seen` every change after that.
    pub fn start(
        conn: Arc<Connection>,
        cluster: &ClusterSpec,
        deployment: &str,
        replication_factor: Option<i32>,
        read: Recipient<PausesRead>,
        seen: Recipient<PauseSeen>,
        promoted: Recipient<PromotionRead>,
    ) -> Self {
        let (stop, stopped) = mpsc::channel::<()>();
        let (c, d, reader_conn) = (cluster.clone(), deployment.to_string(), conn.clone());
        let thread = std::thread::Builder::new()
            .name(format!("control {}", cluster.alias))
            .spawn(move || tail(&reader_conn, &c, &d, replication_factor, (&read, &seen, &promoted), &stopped))
            .map_err(
                |e| tracing::error!(cluster = %cluster.alias, error = %e, "cannot start the control topic's reader"),
            )
            .ok();
        Self { cluster: cluster.clone(), conn: conn.clone(), stop: Some(stop), thread }
    }

    /// Records a pause or resume of `flow`; done when the cluster acknowledged it, with the record's
    /// offset.
    pub fn write(
        &self,
        deployment: &str,
        flow: &FlowId,
        record: &PauseRecord,
    ) -> impl std::future::Future<Output = Result<i64, String>> + 'static + use<> {
        let conn = self.conn.clone();
        let alias = self.cluster.alias.clone();
        let key = pause_key(deployment, flow);
        let value = serde_json::to_vec(record).unwrap_or_default();
        async move { write_records(&conn, &alias, vec![(key, value)]).await.pop().unwrap_or(Err("nothing written".into())) }
    }
}

/// Writes `(key, value)` records to the control topic of `conn`'s cluster (`alias`), all in flight at
/// once; one outcome per record, in order: the record's offset once acknowledged (within 10 s).
pub async fn write_records(
    conn: &Arc<Connection>,
    alias: &str,
    records: Vec<(String, Vec<u8>)>,
) -> Vec<Result<i64, String>> {
    let c = conn.clone();
    let failed = |e: String| records.iter().map(|_| Err(e.clone())).collect();
    let lane = match tokio::task::spawn_blocking(move || c.internal()).await {
        Ok(Ok(lane)) => lane,
        Ok(Err(e)) => return failed(format!("record it in {CONTROL_TOPIC}: {e}")),
        Err(e) => return failed(format!("create the producer for `{alias}`: {e}")),
    };
    let waiting: Vec<_> = records
        .iter()
        .map(|(key, value)| {
            let (done, outcome) = tokio::sync::oneshot::channel();
            let record = Outgoing {
                topic: CONTROL_TOPIC,
                partition: 0,
                key: key.as_bytes(),
                payload: value,
                headers: None,
                timestamp: None,
            };
            lane.send(record, move |o| {
                let _ = done.send(o);
            })
            .map(|()| outcome)
            .map_err(|e| format!("record it in {CONTROL_TOPIC} on `{alias}`: {e}"))
        })
        .collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut out = Vec::with_capacity(waiting.len());
    for w in waiting {
        out.push(match w {
            Err(e) => Err(e),
            Ok(outcome) => match tokio::time::timeout_at(deadline, outcome).await {
                Ok(Ok(Ok(landed))) => Ok(landed.offset),
                Ok(Ok(Err(e))) => Err(format!("record it in {CONTROL_TOPIC} on `{alias}`: {e}")),
                Ok(Err(_)) | Err(_) => {
                    Err(format!("record it in {CONTROL_TOPIC} on `{alias}`: not acknowledged in 10 s"))
                }
            },
        });
    }
    out
}

impl Drop for ControlWatch {
    /// Tells the reader to stop without waiting for it: it may be inside a call to a cluster that does
    /// not answer (up to the admin timeout), and the node must not wait for that. It ends on its own.
    fn drop(&mut self) {
        drop(self.stop.take());
        drop(self.thread.take());
    }
}

/// The reader's thread: set up (retrying), read to the end once (the initial state), then follow.
fn tail(
    conn: &Connection,
    cluster: &ClusterSpec,
    deployment: &str,
    replication_factor: Option<i32>,
    (read, seen, promoted): (&Recipient<PausesRead>, &Recipient<PauseSeen>, &Recipient<PromotionRead>),
    stopped: &mpsc::Receiver<()>,
) {
    let stopping = || !matches!(stopped.try_recv(), Err(mpsc::TryRecvError::Empty));
    let mut last_error: Option<Instant> = None;
    let consumer = loop {
        let set_up = conn
            .ensure_topic(&"node", &TopicSpec::compacted(CONTROL_TOPIC, 1, replication_factor))
            .and_then(|_| kafka::assign_only_consumer(cluster, &"node", "control-reader"))
            .map_err(|e| e.to_string())
            .and_then(|c| {
                let mut tpl = TopicPartitionList::new();
                tpl.add_partition_offset(CONTROL_TOPIC, 0, Offset::Beginning).map_err(|e| e.to_string())?;
                c.assign(&tpl).map_err(|e| e.to_string())?;
                Ok(c)
            });
        match set_up {
            Ok(c) => break c,
            Err(e) => {
                if last_error.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                    tracing::warn!(cluster = %cluster.alias, topic = CONTROL_TOPIC, error = %e, "cannot read the control topic yet; retrying");
                    last_error = Some(Instant::now());
                }
                if !matches!(stopped.recv_timeout(RETRY), Err(mpsc::RecvTimeoutError::Timeout)) {
                    return;
                }
            }
        }
    };
    // The initial state: everything up to the end as of now, then handed over at once.
    let connection = connection_key(cluster);
    let mut state = BTreeMap::new();
    let mut promotions = Vec::new();
    let mut initial = Some(read);
    let mut end = None;
    loop {
        if stopping() {
            return;
        }
        if initial.is_some() && end.is_none() {
            end = consumer.fetch_watermarks(CONTROL_TOPIC, 0, kafka::ADMIN_TIMEOUT).ok().map(|(_, high)| high);
        }
        if let Some(msg) = consumer.poll(POLL) {
            match msg {
                Ok(m) => match parse_pause_key(deployment, m.key()) {
                    Err(why) => kafka::skip_internal_record(None, &cluster.alias, &m, "a control record", &why),
                    Ok(None) => match promote::parse_promote_key(deployment, m.key()) {
                        Err(why) => kafka::skip_internal_record(None, &cluster.alias, &m, "a control record", &why),
                        Ok(None) => {} // another deployment's
                        Ok(Some((flow, topic))) => {
                            // An undecodable value counts as a tombstone, like a pause's: every node alike.
                            let record = m.payload().and_then(|v| {
                                serde_json::from_slice::<PromoteRecord>(v)
                                    .map_err(|e| {
                                        let why = format!("{e}; topic {topic} of flow {flow} counts as not promoted");
                                        kafka::skip_internal_record(None, &cluster.alias, &m, "a control record", &why);
                                    })
                                    .ok()
                            });
                            let seen = PromotionSeen { flow, topic, record };
                            if initial.is_some() {
                                promotions.push(seen);
                            } else {
                                promoted.do_send(PromotionRead { connection: connection.clone(), seen });
                            }
                        }
                    },
                    Ok(Some(flow)) => {
                        // Like a tombstone: the newest record of a key is the decision, even after compaction,
                        // so an undecodable one counts as "not paused" on every node alike (named, counted).
                        let record = m.payload().and_then(|v| match serde_json::from_slice::<PauseRecord>(v) {
                            Ok(r) => Some(r),
                            Err(e) => {
                                let why = format!("{e}; flow {flow} counts as not paused");
                                kafka::skip_internal_record(None, &cluster.alias, &m, "a control record", &why);
                                None
                            }
                        });
                        let logged = Logged { connection: connection.clone(), offset: m.offset(), record };
                        if initial.is_some() {
                            state.insert(flow, logged);
                        } else {
                            seen.do_send(PauseSeen { flow, logged });
                        }
                    }
                },
                Err(e) => tracing::debug!(cluster = %cluster.alias, error = %e, "control topic read error"),
            }
        }
        if initial.is_some()
            && let Some(end) = end
        {
            let position = consumer
                .position()
                .ok()
                .and_then(|p| p.find_partition(CONTROL_TOPIC, 0).map(|e| e.offset()))
                .and_then(|o| if let Offset::Offset(o) = o { Some(o) } else { None })
                .unwrap_or(0);
            if position >= end
                && let Some(read) = initial.take()
            {
                let records = std::mem::take(&mut state);
                let promotions = std::mem::take(&mut promotions);
                read.do_send(PausesRead { connection: connection.clone(), records, promotions });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_keys_name_their_deployment_and_flow() {
        let flow: FlowId = "east->west".parse().expect("flow id");
        let key = pause_key("prod", &flow);
        assert_eq!(key, "pause|prod|east->west");
        let parse = |deployment, key: &str| parse_pause_key(deployment, Some(key.as_bytes()));
        assert_eq!(parse("prod", &key), Ok(Some(flow)));
        assert_eq!(parse("staging", &key), Ok(None), "another deployment's pause");
        assert_eq!(parse("pro", &key), Ok(None));
        assert_eq!(parse("prod", "other|prod|east->west"), Ok(None), "another kind of record");
        let e = parse("prod", "pause|prod|nonsense").unwrap_err();
        assert!(e.contains("pause|prod|nonsense") && e.contains("not a flow id"), "{e}");
        assert!(parse_pause_key("prod", Some(b"pause|prod|\xff")).unwrap_err().contains("not text"));
        assert_eq!(parse_pause_key("prod", None), Err("the record has no key".to_string()));
    }

    #[test]
    fn a_record_reads_as_json_for_operators() {
        let r = PauseRecord { paused: true, by: "n1".into(), at: 1_764_000_000 };
        let text = serde_json::to_string(&r).expect("json");
        assert_eq!(text, r#"{"paused":true,"by":"n1","at":1764000000}"#);
        assert_eq!(serde_json::from_str::<PauseRecord>(&text).expect("back"), r);
    }
}
