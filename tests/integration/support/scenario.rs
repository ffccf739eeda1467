//! Building blocks of end-to-end scenarios shared by the test files: flows directories, load that keeps
//! flowing, arrival counting, the internal topics as an operator would read them, and waits on what
//! `/health` shows.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use ferry::mm2::connect_offsets::{self, SOURCE_CONNECTOR};
use ferry::mm2::records::{Checkpoint, OffsetSync};

use super::observe::{self, flow_actors, health, unhealthy};
use super::{
    Cluster, Ferry, Rec, commit_group_offsets, consume_all, end_offsets, produce, tail, topic_partitions, wait_for,
};

pub const FLOW: &str = "east->west";
pub const ACTORS: [&str; 6] = ["copier", "offset_syncs", "checkpoints", "heartbeats", "topics", "lease"];
/// Short restart backoffs, so that restarts show within seconds.
pub const FAST_RESTARTS: &str = "restart_backoff_initial_seconds = 0.2\nrestart_backoff_max_seconds = 1\n";
pub const ARRIVAL: Duration = Duration::from_secs(120);
pub const READ: Duration = Duration::from_secs(60);
pub const STARTED: Duration = Duration::from_secs(30);

/// A flows directory defining `clusters` (alias, bootstrap) and `flows`.
pub fn flows_dir(clusters: &[(&str, &str)], flows: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("flows dir");
    let text: String = clusters
        .iter()
        .map(|(alias, bootstrap)| format!("[clusters.{alias}]\nbootstrap_servers = \"{bootstrap}\"\n"))
        .collect();
    std::fs::write(dir.path().join("clusters.toml"), text).expect("write clusters");
    std::fs::write(dir.path().join("flow.toml"), flows).expect("write flows");
    dir
}

/// One flow copying exactly `topics`, with short restart backoffs and `extra` keys.
pub fn flow(source: &str, target: &str, topics: &[&str], extra: &str) -> String {
    let topics: Vec<String> = topics.iter().map(|t| format!("\"{t}\"")).collect();
    format!(
        "[[flows]]\nsource = \"{source}\"\ntarget = \"{target}\"\ntopics = [{}]\n{FAST_RESTARTS}{extra}\n",
        topics.join(", ")
    )
}

/// The east/west clusters of the usual two-cluster test.
pub fn pair_dir(east: &Cluster, west: &Cluster, flows: &str) -> tempfile::TempDir {
    flows_dir(&[("east", &east.bootstrap), ("west", &west.bootstrap)], flows)
}

/// A dedicated east/west pair, started in parallel, for tests that stop brokers or write internal topics.
pub fn start_pair(tag: &str) -> (Cluster, Cluster) {
    std::thread::scope(|s| {
        let east = s.spawn(|| Cluster::start(&format!("{tag}-east")));
        let west = s.spawn(|| Cluster::start(&format!("{tag}-west")));
        (east.join().expect("east starts"), west.join().expect("west starts"))
    })
}

/// Panics with the log tail if ferry exited: no fault may take the node down.
pub fn assert_alive(ferry: &mut Ferry) {
    if let Some(status) = ferry.try_status() {
        panic!("the ferry node exited ({status}); log tail:\n{}", tail(&ferry.log(), 80));
    }
}

/// Records on `topic` (sum of its partitions' end offsets; duplicates included), 0 before it exists.
pub fn total(bootstrap: &str, topic: &str) -> i64 {
    end_offsets(bootstrap, topic).iter().sum()
}

/// The values `prefix0`, `prefix1`, ... for `range`: each produced record's identity.
pub fn values(prefix: &str, range: std::ops::Range<usize>) -> Vec<Vec<u8>> {
    range.map(|i| format!("{prefix}{i}").into_bytes()).collect()
}

pub fn records(prefix: &str, range: std::ops::Range<usize>, partitions: i32) -> Vec<Rec> {
    range.map(|i| Rec::new(i as i32 % partitions, format!("{prefix}{i}").as_bytes(), 1_000 + i as i64)).collect()
}

/// Records `prefix-<i>` for `range` over two partitions, with keys, headers and timestamps (of 2023):
/// everything a byte-for-byte comparison looks at.
pub fn keyed_records(prefix: &str, range: std::ops::Range<usize>) -> Vec<Rec> {
    range
        .map(|i| {
            Rec::new((i % 2) as i32, format!("{prefix}-{i}").as_bytes(), 1_700_000_000_000 + i as i64)
                .key(format!("k{i}").as_bytes())
                .header("h", Some(format!("{i}").as_bytes()))
        })
        .collect()
}

/// The values `prefix-<i>` of [`keyed_records`] (and of other keyed streams) for `range`.
pub fn keyed_values(prefix: &str, range: std::ops::Range<usize>) -> Vec<Vec<u8>> {
    range.map(|i| format!("{prefix}-{i}").into_bytes()).collect()
}

/// What a byte-for-byte comparison of a copy looks at (key, value, headers, timestamp), per partition
/// in offset order.
pub type Copy = BTreeMap<i32, Vec<(Option<Vec<u8>>, Option<Vec<u8>>, Vec<(String, Option<Vec<u8>>)>, i64)>>;

/// `recs` as a [`Copy`].
pub fn per_partition(recs: Vec<Rec>) -> Copy {
    let mut out = Copy::new();
    for r in by_position(recs) {
        out.entry(r.partition).or_default().push((r.key, r.value, r.headers, r.timestamp));
    }
    out
}

/// Records in the order a consumer of a topic sees them per partition (partition, then offset), for
/// byte-for-byte comparison of a topic with its copy.
pub fn by_position(mut recs: Vec<Rec>) -> Vec<Rec> {
    recs.sort_by_key(|r| (r.partition, r.offset));
    recs
}

/// How often each value arrived on `topic`.
pub fn arrivals(bootstrap: &str, topic: &str) -> HashMap<Vec<u8>, usize> {
    let mut counts = HashMap::new();
    for r in consume_all(bootstrap, topic, READ) {
        *counts.entry(r.value.unwrap_or_default()).or_insert(0) += 1;
    }
    counts
}

pub fn duplicates(counts: &HashMap<Vec<u8>, usize>) -> usize {
    counts.values().map(|n| n - 1).sum()
}

/// Where the first `n` values found more than once on `remote` (on `target`) are, as `(partition,
/// offset)`s there and on `topic` (on `source`): two source offsets mean the source holds the record
/// twice; one source offset, a copy ferry wrote twice, and where.
pub fn where_twice(source: &str, topic: &str, target: &str, remote: &str, n: usize) -> String {
    let at = |bootstrap: &str, topic: &str| {
        let mut at: HashMap<Vec<u8>, Vec<(i32, i64)>> = HashMap::new();
        for r in consume_all(bootstrap, topic, READ) {
            at.entry(r.value.clone().unwrap_or_default()).or_default().push((r.partition, r.offset));
        }
        at
    };
    let (copies, origins) = (at(target, remote), at(source, topic));
    let mut twice: Vec<_> = copies.iter().filter(|(_, at)| at.len() > 1).collect();
    twice.sort_by_key(|(_, at)| at[0]);
    let text: Vec<String> = twice
        .iter()
        .take(n)
        .map(|(v, at)| {
            let from = origins.get(*v).cloned().unwrap_or_default();
            format!("{} on the source at {from:?}, on the target at {at:?}", String::from_utf8_lossy(v))
        })
        .collect();
    text.join("; ")
}

/// `recs` as runs of consecutive offsets per partition, each `p<partition> <first>..=<last>
/// (<first value>..<last value>)`: where a copy has holes, repeats or aborted stretches.
pub fn runs(mut recs: Vec<crate::support::client::Rec>) -> String {
    recs.sort_by_key(|r| (r.partition, r.offset));
    let value =
        |r: &crate::support::client::Rec| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).to_string();
    let mut runs: Vec<(i32, i64, i64, String, String)> = Vec::new();
    for r in &recs {
        match runs.last_mut() {
            Some(run) if run.0 == r.partition && run.2 + 1 == r.offset => {
                run.2 = r.offset;
                run.4 = value(r);
            }
            _ => runs.push((r.partition, r.offset, r.offset, value(r), value(r))),
        }
    }
    let text: Vec<String> = runs.iter().map(|(p, a, b, x, y)| format!("p{p} {a}..={b} ({x}..{y})")).collect();
    text.join(", ")
}

/// Waits until every one of `expected` is on `topic` (while ferry stays up); returns the arrival counts.
pub fn wait_all_arrived(
    ferry: &mut Ferry,
    bootstrap: &str,
    topic: &str,
    expected: &[Vec<u8>],
) -> HashMap<Vec<u8>, usize> {
    let mut counts = HashMap::new();
    let mut missing = expected.len();
    let what = format!("all {} records on {topic}", expected.len());
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for(ARRIVAL, &what, || {
            assert_alive(ferry);
            if total(bootstrap, topic) < expected.len() as i64 {
                return false;
            }
            counts = arrivals(bootstrap, topic);
            missing = expected.iter().filter(|v| !counts.contains_key(*v)).count();
            missing == 0
        })
    }));
    if let Err(e) = result {
        let counts = arrivals(bootstrap, topic);
        let missing: Vec<String> =
            expected.iter().filter(|v| !counts.contains_key(*v)).map(|v| String::from_utf8_lossy(v).into()).collect();
        let first: Vec<&String> = missing.iter().take(20).collect();
        eprintln!("{} records still missing on {topic}, the first: {first:?}", missing.len());
        for isolation in ["read_committed", "read_uncommitted"] {
            let recs = crate::support::client::consume_all_as(bootstrap, topic, Duration::from_secs(10), isolation);
            eprintln!("{topic} read {isolation}, as runs of consecutive offsets: {}", runs(recs));
        }
        std::panic::resume_unwind(e);
    }
    counts
}

/// Produces `prefix<i>` records to `topic` in paced batches on a thread until finished: load that keeps
/// flowing while the test injects its fault.
pub struct Stream {
    stop: Arc<AtomicBool>,
    produced: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl Stream {
    pub fn start(bootstrap: &str, topic: &str, partitions: i32, prefix: &str, batch: usize, pause: Duration) -> Stream {
        let stop = Arc::new(AtomicBool::new(false));
        let produced = Arc::new(AtomicUsize::new(0));
        let (b, t, p, s, n) =
            (bootstrap.to_string(), topic.to_string(), prefix.to_string(), stop.clone(), produced.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let from = n.load(Ordering::SeqCst);
                produce(&b, &t, &records(&p, from..from + batch, partitions));
                n.store(from + batch, Ordering::SeqCst);
                std::thread::sleep(pause); // pacing, not synchronisation
            }
        });
        Stream { stop, produced, thread: Some(thread) }
    }

    pub fn produced(&self) -> usize {
        self.produced.load(Ordering::SeqCst)
    }

    /// Stops producing; returns how many records were produced (all acknowledged by the source).
    pub fn finish(mut self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take()
            && let Err(e) = t.join()
        {
            std::panic::resume_unwind(e);
        }
        self.produced()
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Every checkpoint on `west` for `group`, in topic order.
pub fn checkpoints(west: &Cluster, group: &str) -> Vec<Checkpoint> {
    if topic_partitions(&west.bootstrap, "east.checkpoints.internal").is_none() {
        return Vec::new();
    }
    consume_all(&west.bootstrap, "east.checkpoints.internal", READ)
        .into_iter()
        .filter_map(|r| Checkpoint::decode(r.key.as_deref().unwrap_or_default(), r.value.as_deref()).ok())
        .filter(|c| c.group == group)
        .collect()
}

/// Every checkpoint of `group` in `<source>.checkpoints.internal` on `on`, newest per (topic, partition):
/// (upstream, downstream).
pub fn newest_checkpoints(on: &Cluster, source: &str, group: &str) -> BTreeMap<(String, i32), (i64, i64)> {
    let topic = format!("{source}.checkpoints.internal");
    if topic_partitions(&on.bootstrap, &topic).is_none() {
        return BTreeMap::new();
    }
    consume_all(&on.bootstrap, &topic, READ)
        .into_iter()
        .filter_map(|r| Checkpoint::decode(r.key.as_deref().unwrap_or_default(), r.value.as_deref()).ok())
        .filter(|c| c.group == group)
        .map(|c| ((c.topic, c.partition), (c.upstream_offset, c.downstream_offset)))
        .collect()
}

/// The newest checkpoint per partition of `group` on `remote`.
pub fn latest(cps: &[Checkpoint], remote: &str) -> BTreeMap<i32, Checkpoint> {
    cps.iter().filter(|c| c.topic == remote).map(|c| (c.partition, c.clone())).collect()
}

/// Every offset sync for `topic` in `mm2-offset-syncs.west.internal` on `east`, in topic order.
pub fn offset_syncs(east: &Cluster, topic: &str) -> Vec<OffsetSync> {
    consume_all(&east.bootstrap, "mm2-offset-syncs.west.internal", READ)
        .into_iter()
        .filter_map(|r| OffsetSync::decode(r.key.as_deref().unwrap_or_default(), r.value.as_deref()).ok())
        .filter(|s| s.topic == topic)
        .collect()
}

/// The copy progress ferry persisted for `topic` (partition → offset of the last copied record).
pub fn stored_progress(west: &Cluster, topic: &str) -> BTreeMap<i32, i64> {
    let mut out = BTreeMap::new();
    for r in consume_all(&west.bootstrap, &connect_offsets::offsets_topic("east"), READ) {
        let Some(key) = r.key.as_deref().and_then(connect_offsets::decode_source_key) else { continue };
        if key.connector != SOURCE_CONNECTOR || key.cluster != "east" || key.topic != topic {
            continue;
        }
        // -1 is a position only with ferry's `ferry.next` header (offset 0); without it, "none" (e.g. a
        // node's claim of a partition whose start is not known yet).
        let at_zero = r.headers.iter().any(|(k, v)| k == "ferry.next" && v.as_deref() == Some(b"0"));
        match connect_offsets::decode_source_value(r.value.as_deref()) {
            Ok(Some(last)) if last >= 0 || at_zero => out.insert(key.partition, last),
            _ => out.remove(&key.partition),
        };
    }
    out
}

/// After a `kill -9`: how many records the target holds beyond the persisted copy progress of `topic`
/// (summed over partitions), i.e. what a restarted node may copy a second time. The README promises that
/// a `kill -9` duplicates only records acknowledged after the last persist; this is their upper bound.
/// Waits until the remote topic's end offsets are stable (requests in flight at the kill may still land).
pub fn copied_beyond_persisted(west: &Cluster, topic: &str, remote: &str) -> i64 {
    let mut ends = end_offsets(&west.bootstrap, remote);
    wait_for(Duration::from_secs(30), &format!("{remote}'s end offsets to settle after the kill"), || {
        std::thread::sleep(Duration::from_millis(500)); // the settling period itself
        let now = end_offsets(&west.bootstrap, remote);
        std::mem::replace(&mut ends, now.clone()) == now
    });
    let stored = stored_progress(west, topic);
    ends.iter().enumerate().map(|(p, end)| end - stored.get(&(p as i32)).map_or(0, |last| last + 1)).sum()
}

/// Commits `group` on `east` at the current end of every partition of `topic` (a consumer keeping up).
pub fn commit_at_end(east: &Cluster, group: &str, topic: &str) -> Vec<i64> {
    let ends = end_offsets(&east.bootstrap, topic);
    let offsets: Vec<(&str, i32, i64)> = ends.iter().enumerate().map(|(p, e)| (topic, p as i32, *e)).collect();
    commit_group_offsets(&east.bootstrap, group, &offsets);
    ends
}

/// A uniformly random duration in `[lo, hi)` seconds (std's random hasher keys; no rand crate).
pub fn random_secs(lo: f64, hi: f64) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    let x = (h.finish() >> 11) as f64 / (1u64 << 53) as f64;
    Duration::from_secs_f64(lo + (hi - lo) * x)
}

/// [`wait_for`] on `f`, which returns whether the condition holds and what it saw; on timeout the panic
/// message shows the last thing seen.
pub fn wait_showing<T: std::fmt::Debug>(deadline: Duration, what: &str, mut f: impl FnMut() -> (bool, T)) -> T {
    let mut last = None;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for(deadline, what, || {
            let (ok, seen) = f();
            last = Some(seen);
            ok
        })
    }));
    match result {
        Ok(()) => last.expect("polled at least once"),
        Err(e) => {
            eprintln!("waiting for {what}: last seen {last:#?}");
            std::panic::resume_unwind(e)
        }
    }
}

/// Waits until `/health` shows some actor of `flow` degraded, restarting or failed; returns those actors.
pub fn wait_unhealthy(ferry: &mut Ferry, flow: &str, deadline: Duration) -> BTreeMap<String, observe::ActorHealth> {
    let addr = ferry.listen_addr();
    let mut seen = BTreeMap::new();
    wait_for(deadline, &format!("/health to show {flow} not running"), || {
        assert_alive(ferry);
        let h = health(addr);
        seen = unhealthy(&h, flow);
        if !seen.is_empty() {
            assert_eq!(h["status"], "degraded", "a flow that is not running makes the node degraded: {h}");
        }
        !seen.is_empty()
    });
    seen
}

/// Waits until `/health` says ok with every actor of `flow` running.
pub fn wait_healthy(ferry: &mut Ferry, flow: &str, deadline: Duration) {
    wait_running(ferry, flow, &ACTORS, deadline);
}

/// Waits until `/health` says ok with exactly `actors` of `flow` listed, all running (a flow whose
/// emitters are switched off lists fewer).
pub fn wait_running(ferry: &mut Ferry, flow: &str, actors: &[&str], deadline: Duration) {
    let addr = ferry.listen_addr();
    let mut last = serde_json::Value::Null;
    let what = format!("/health ok with the actors {actors:?} of {flow} running, and no other");
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for(deadline, &what, || {
            assert_alive(ferry);
            last = health(addr);
            let listed = flow_actors(&last, flow);
            last["status"] == "ok"
                && listed.keys().map(String::as_str).eq(sorted(actors))
                && listed.values().all(|a| a.state == "running")
        })
    }));
    if let Err(e) = result {
        eprintln!("last /health: {last}");
        std::panic::resume_unwind(e);
    }
}

fn sorted<'a>(names: &[&'a str]) -> Vec<&'a str> {
    let mut names = names.to_vec();
    names.sort_unstable();
    names
}

/// Records the local arrival time of every record of a topic, from a consumer tailing it on a thread:
/// the largest gap between arrivals shows whether copying paused.
pub struct Tail {
    stop: Arc<AtomicBool>,
    arrivals: Arc<std::sync::Mutex<Vec<std::time::Instant>>>,
    thread: Option<JoinHandle<()>>,
}

impl Tail {
    /// Tails `topic` on `bootstrap` from its current end (waits up to a minute for it to exist), as the
    /// cluster's registered user (its super user if it is secured, see [`super::client::register_security`]).
    pub fn start(bootstrap: &str, topic: &str) -> Tail {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let partitions = {
            let mut n = None;
            wait_for(Duration::from_secs(60), &format!("{topic} to exist"), || {
                n = topic_partitions(bootstrap, topic);
                n.is_some()
            });
            n.unwrap_or(0)
        };
        let consumer: BaseConsumer = super::client_config(bootstrap, &super::client::security_props(bootstrap))
            .set("group.id", "ferry-test-tail")
            .set("enable.auto.commit", "false")
            .create()
            .expect("tail consumer");
        let mut tpl = rdkafka::TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition_offset(topic, p, rdkafka::Offset::End).expect("add partition");
        }
        consumer.assign(&tpl).expect("assign");
        let stop = Arc::new(AtomicBool::new(false));
        let arrivals = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (s, a) = (stop.clone(), arrivals.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                if let Some(Ok(_)) = consumer.poll(Duration::from_millis(50)) {
                    a.lock().expect("arrivals").push(std::time::Instant::now());
                }
            }
        });
        Tail { stop, arrivals, thread: Some(thread) }
    }

    /// The longest time without an arrival between `from` and `to` (the window's edges count as arrivals).
    pub fn largest_gap(&self, from: std::time::Instant, to: std::time::Instant) -> Duration {
        let arrivals = self.arrivals.lock().expect("arrivals");
        let mut last = from;
        let mut gap = Duration::ZERO;
        for t in arrivals.iter().filter(|t| **t >= from && **t <= to) {
            gap = gap.max(t.duration_since(last));
            last = *t;
        }
        gap.max(to.saturating_duration_since(last))
    }

    pub fn count(&self) -> usize {
        self.arrivals.lock().expect("arrivals").len()
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
