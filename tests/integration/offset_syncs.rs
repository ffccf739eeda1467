//! Offset syncs and heartbeats end to end: what ferry writes to `mm2-offset-syncs.west.internal` on
//! east, `heartbeats` on west and `east.heartbeats` on west, checked record by record against the
//! data it describes, and read back with MM2's own console formatters.

use crate::support;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferry::mm2::records::{Heartbeat, OffsetSync};
use ferry::sync_rule::{SYNC_MARK_HEADER, SyncMark};
use support::{
    Cluster, Ferry, Rec, console_consume, consume_all, create_topic, produce, shared_pair, topic_partitions, unique,
    wait_for,
};

const ARRIVAL: Duration = Duration::from_secs(120);
/// The offset-syncs topic of flow east->west (default location: the source cluster).
const SYNCS_TOPIC: &str = "mm2-offset-syncs.west.internal";
const READ: Duration = Duration::from_secs(30);

use support::{east_west_flow as flow, flows_dir};

/// Records on `topic`, or 0 while ferry has not created it yet.
fn count(cluster: &Cluster, topic: &str) -> usize {
    if topic_partitions(&cluster.bootstrap, topic).is_none() {
        return 0;
    }
    consume_all(&cluster.bootstrap, topic, READ).len()
}

/// One record of the offset-syncs topic, decoded.
#[derive(Clone, Debug)]
struct SyncRecord {
    sync: OffsetSync,
    mark: SyncMark,
}

/// Every record of the offset-syncs topic on east for source topic `topic`, in topic order. Panics unless
/// the topic has the single partition MM2's readers read and each of those records carries exactly one
/// valid `ferry.sync` mark (ferry is their only writer; other tests on the shared pair write syncs of
/// their own topics there, some in MM2's format).
fn read_syncs(east: &Cluster, topic: &str) -> Vec<SyncRecord> {
    match topic_partitions(&east.bootstrap, SYNCS_TOPIC) {
        None => return Vec::new(),
        Some(n) => assert_eq!(n, 1, "{SYNCS_TOPIC} must have exactly one partition (MM2 reads partition 0)"),
    }
    consume_all(&east.bootstrap, SYNCS_TOPIC, READ)
        .into_iter()
        .filter(|r| {
            r.key
                .as_deref()
                .and_then(|k| OffsetSync::decode(k, r.value.as_deref()).ok())
                .is_some_and(|s| s.topic == topic)
        })
        .map(|r| decode_sync(&r))
        .collect()
}

fn decode_sync(r: &Rec) -> SyncRecord {
    let key = r.key.as_deref().unwrap_or_else(|| panic!("{SYNCS_TOPIC} offset {} has a null key", r.offset));
    let sync = OffsetSync::decode(key, r.value.as_deref())
        .unwrap_or_else(|e| panic!("{SYNCS_TOPIC} offset {} is not an OffsetSync: {e}", r.offset));
    let marks: Vec<_> = r.headers.iter().filter(|(k, _)| k == SYNC_MARK_HEADER).collect();
    assert_eq!(marks.len(), 1, "{SYNCS_TOPIC} offset {} ({sync:?}): headers {:?}", r.offset, r.headers);
    let bytes = marks[0].1.as_deref().unwrap_or_else(|| panic!("offset {}: null {SYNC_MARK_HEADER}", r.offset));
    let mark = SyncMark::decode(bytes)
        .unwrap_or_else(|| panic!("{SYNCS_TOPIC} offset {}: undecodable {SYNC_MARK_HEADER} {bytes:?}", r.offset));
    SyncRecord { sync, mark }
}

/// (partition, offset) -> record.
fn index(recs: Vec<Rec>) -> HashMap<(i32, i64), Rec> {
    recs.into_iter().map(|r| ((r.partition, r.offset), r)).collect()
}

/// The offset of the last record of each partition.
fn last_offsets(recs: &HashMap<(i32, i64), Rec>) -> BTreeMap<i32, i64> {
    let mut last = BTreeMap::new();
    for &(p, o) in recs.keys() {
        let e = last.entry(p).or_insert(o);
        *e = (*e).max(o);
    }
    last
}

/// Polls the offset-syncs topic until every partition of `topic` has a sync for its last record
/// (`last`: partition -> offset); returns the syncs of `topic`.
fn wait_for_final_syncs(east: &Cluster, topic: &str, last: &BTreeMap<i32, i64>) -> Vec<SyncRecord> {
    let mut mine = Vec::new();
    wait_for(Duration::from_secs(60), &format!("a sync for the last record of every partition of {topic}"), || {
        mine = read_syncs(east, topic);
        last.iter().all(|(&p, &o)| mine.iter().any(|s| s.sync.partition == p && s.sync.upstream_offset == o))
    });
    mine
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_millis() as i64
}

#[test]
fn every_offset_sync_maps_an_upstream_record_to_its_copy() {
    let (east, west) = shared_pair();
    let topic = unique("osync");
    let remote = format!("east.{topic}");
    create_topic(&east.bootstrap, &topic, 3, &[]);
    let base_ts = 1_700_000_000_000_i64;
    let recs: Vec<Rec> = (0..10_000_i64)
        .map(|i| {
            let mut r = Rec::new((i % 3) as i32, format!("value-{i}").as_bytes(), base_ts + i);
            if i % 7 != 0 {
                r = r.key(format!("key-{}", i % 101).as_bytes());
            }
            if i % 5 == 0 {
                r = r.header("trace", Some(format!("t{i}").as_bytes())).header("empty", None);
            }
            r
        })
        .collect();
    produce(&east.bootstrap, &topic, &recs);

    let dir = flows_dir(east, west, &flow(&format!("\"{topic}\""), "")); // offset_lag_max = 100
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_for(ARRIVAL, &format!("10,000 records on west's {remote}"), || count(west, &remote) >= 10_000);
    let source = index(consume_all(&east.bootstrap, &topic, READ));
    let copied = index(consume_all(&west.bootstrap, &remote, READ));
    assert_eq!(copied.len(), 10_000, "no duplicates on west");
    let last = last_offsets(&source);
    assert_eq!(last.len(), 3);

    // After the topic went quiet, every partition's last record is synced (consumers at the end of the
    // topic translate exactly).
    let syncs = wait_for_final_syncs(east, &topic, &last);
    ferry.terminate(Duration::from_secs(30));

    // Each sync is true: the upstream record and the downstream record are the same record.
    for s in &syncs {
        let (p, up, down) = (s.sync.partition, s.sync.upstream_offset, s.sync.downstream_offset);
        let a = source.get(&(p, up)).unwrap_or_else(|| panic!("{s:?}: no record at {topic}-{p}@{up} on east"));
        let b = copied.get(&(p, down)).unwrap_or_else(|| panic!("{s:?}: no record at {remote}-{p}@{down} on west"));
        assert_eq!(
            (&a.key, &a.value, &a.headers, a.timestamp),
            (&b.key, &b.value, &b.headers, b.timestamp),
            "{s:?}: the record at upstream {up} differs from the one at downstream {down}"
        );
    }

    // Marks: per partition and copier lifetime, seq numbers 0, 1, 2, ... in topic order.
    let mut seqs: BTreeMap<(i32, u64), Vec<u64>> = BTreeMap::new();
    for s in &syncs {
        seqs.entry((s.sync.partition, s.mark.lifetime)).or_default().push(s.mark.seq);
    }
    for ((p, lifetime), got) in &seqs {
        let want: Vec<u64> = (0..got.len() as u64).collect();
        assert_eq!(got, &want, "seq numbers of partition {p}, lifetime {lifetime:#x}, in {SYNCS_TOPIC} order");
    }

    // MM2's cadence with offset.lag.max = 100 on a 1:1 copy: syncs at 0, 101, 202, ... (plus the
    // syncs of quiet partitions), not one per record.
    for (&p, &last) in &last {
        let ups: Vec<i64> = syncs.iter().filter(|s| s.sync.partition == p).map(|s| s.sync.upstream_offset).collect();
        let expected: Vec<i64> = (0..=last).step_by(101).collect();
        for e in &expected {
            assert!(ups.contains(e), "partition {p}: no sync at upstream {e} (syncs at {ups:?})");
        }
        assert!(
            ups.len() <= 2 * expected.len(),
            "partition {p}: {} syncs for {} records is far more than MM2's cadence: {ups:?}",
            ups.len(),
            last + 1
        );
    }
    println!("{} offset syncs for 10,000 records in 3 partitions", syncs.len());
}

/// `Heartbeat{...}` lines printed by MM2's HeartbeatFormatter for the newest `n` records of
/// `topic` on `cluster`, checked against ferry's own decoding of the same records.
fn formatted_heartbeats(cluster: &Cluster, topic: &str, n: usize) -> Vec<(Heartbeat, String)> {
    let recs = consume_all(&cluster.bootstrap, topic, READ);
    let newest = &recs[recs.len().saturating_sub(n)..];
    let from = newest[0].offset;
    let count = (newest[newest.len() - 1].offset - from + 1) as usize;
    let lines = console_consume(
        &cluster.bootstrap,
        topic,
        0,
        from,
        count,
        "org.apache.kafka.connect.mirror.formatters.HeartbeatFormatter",
        "Heartbeat{",
    );
    newest
        .iter()
        .zip(lines)
        .map(|(r, line)| {
            let hb = Heartbeat::decode(r.key.as_deref().unwrap_or_default(), r.value.as_deref())
                .unwrap_or_else(|e| panic!("{topic} offset {} on {}: {e}", r.offset, cluster.name));
            let want = format!(
                "Heartbeat{{sourceClusterAlias={}, targetClusterAlias={}, timestamp={}}}",
                hb.source_alias, hb.target_alias, hb.timestamp_ms
            );
            assert_eq!(line, want, "{topic} offset {} on {}", r.offset, cluster.name);
            (hb, line)
        })
        .collect()
}

#[test]
fn mm2_console_formatters_read_ferrys_offset_syncs_and_heartbeats() {
    let (east, west) = shared_pair();
    let topic = unique("fmt");
    let remote = format!("east.{topic}");
    create_topic(&east.bootstrap, &topic, 2, &[]);
    let recs: Vec<Rec> = (0..250).map(|i| Rec::new(i % 2, format!("v{i}").as_bytes(), 1_000 + i as i64)).collect();
    produce(&east.bootstrap, &topic, &recs);

    // Default flow settings: the heartbeat topics must appear without any tuning.
    let dir = flows_dir(east, west, &flow(&format!("\"{topic}\""), ""));
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_for(ARRIVAL, &format!("250 records on west's {remote}"), || count(west, &remote) >= 250);
    let last = last_offsets(&index(consume_all(&east.bootstrap, &topic, READ)));
    let mine = wait_for_final_syncs(east, &topic, &last);

    // OffsetSyncFormatter over the whole offset-syncs topic prints what ferry's decoder reads, line for
    // line (a record MM2 could not parse would stop the tool with an error instead).
    // Other tests on the shared pair write syncs there too, some in MM2's format without ferry's mark:
    // every record is decoded as MM2 decodes it; the marks of this test's syncs were checked above.
    let raw = consume_all(&east.bootstrap, SYNCS_TOPIC, READ);
    let decoded: Vec<(i64, OffsetSync)> = raw
        .iter()
        .map(|r| {
            let key = r.key.as_deref().unwrap_or_else(|| panic!("{SYNCS_TOPIC} offset {} has a null key", r.offset));
            let sync = OffsetSync::decode(key, r.value.as_deref())
                .unwrap_or_else(|e| panic!("{SYNCS_TOPIC} offset {} is not an OffsetSync: {e}", r.offset));
            (r.offset, sync)
        })
        .collect();
    let first = decoded[0].0;
    for (i, (offset, _)) in decoded.iter().enumerate() {
        assert_eq!(*offset, first + i as i64, "{SYNCS_TOPIC} has no gaps (nothing compacted or transactional)");
    }
    let lines = console_consume(
        &east.bootstrap,
        SYNCS_TOPIC,
        0,
        first,
        decoded.len(),
        "org.apache.kafka.connect.mirror.formatters.OffsetSyncFormatter",
        "OffsetSync{",
    );
    let want: Vec<String> = decoded
        .iter()
        .map(|(_, s)| {
            format!(
                "OffsetSync{{topicPartition={}-{}, upstreamOffset={}, downstreamOffset={}}}",
                s.topic, s.partition, s.upstream_offset, s.downstream_offset
            )
        })
        .collect();
    assert_eq!(lines, want, "OffsetSyncFormatter output vs ferry's decoding of {SYNCS_TOPIC}");
    let prefix = format!("OffsetSync{{topicPartition={topic}-");
    let printed_mine = lines.iter().filter(|l| l.starts_with(&prefix)).count();
    assert!(printed_mine >= mine.len(), "MM2's formatter shows the syncs of {topic}: {printed_mine} < {}", mine.len());
    for (p, o) in &last {
        let line = format!("OffsetSync{{topicPartition={topic}-{p}, upstreamOffset={o}, downstreamOffset={o}}}");
        assert!(lines.contains(&line), "no {line:?} in the formatter's output");
    }

    // Heartbeats: Heartbeat(east, west) in west's `heartbeats`; Heartbeat(west, east) written to east's
    // `heartbeats` and replicated to west as `east.heartbeats`. Both recent. Other tests' flows into the
    // shared clusters (a Kerberos cluster `krb` into west, say) beat into the same topics: every newest
    // record must read alike through the formatter, and at least three must be this pair's.
    for (topic, source, target) in [("heartbeats", "east", "west"), ("east.heartbeats", "west", "east")] {
        wait_for(Duration::from_secs(60), &format!("heartbeats in west's {topic}"), || count(west, topic) >= 3);
        let beats = formatted_heartbeats(west, topic, 200);
        let now = now_ms();
        let recent_of_the_pair = beats
            .iter()
            .filter(|(hb, _)| (hb.source_alias.as_str(), hb.target_alias.as_str()) == (source, target))
            .filter(|(hb, _)| (now - hb.timestamp_ms).abs() < 60_000)
            .count();
        let lines: Vec<&String> = beats.iter().map(|(_, line)| line).collect();
        assert!(
            recent_of_the_pair >= 3,
            "west's {topic}: {recent_of_the_pair} recent heartbeats from {source} to {target} among the newest 200 (now {now}): {lines:#?}"
        );
    }
    ferry.terminate(Duration::from_secs(30));
}
