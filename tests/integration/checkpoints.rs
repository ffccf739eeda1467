//! Checkpoints end to end: groups committed on east are translated to west's offsets, published to
//! `east.checkpoints.internal` in MM2's format, readable by MM2's own client, and (when enabled) committed
//! to idle groups on west.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use ferry::mm2::records::{Checkpoint, OffsetSync};
use ferry::sync_rule::{SYNC_MARK_HEADER, SyncMark};
use ferry::sync_store::{StoredSync, SyncStore};
use support::{
    Cluster, Ferry, Rec, commit_group_offsets, consume_all, create_topic, group_offsets, produce, shared_pair,
    topic_partitions, wait_for,
};

const FAST: &str = "emit_checkpoints_interval_seconds = 0.5\nrefresh_groups_interval_seconds = 0.5\n\
                    sync_group_offsets_interval_seconds = 0.5\nrefresh_topics_interval_seconds = 1";

use support::{assert_monotonic, flows_dir};

fn flow(topics: &str, groups: &str, extra: &str) -> String {
    format!(
        "[[flows]]\nsource = \"east\"\ntarget = \"west\"\ntopics = [{topics}]\ngroups = [{groups}]\n{FAST}\n{extra}\n"
    )
}

/// Every checkpoint on west for `group`, oldest first.
fn checkpoints(west: &Cluster, group: &str) -> Vec<Checkpoint> {
    if topic_partitions(&west.bootstrap, "east.checkpoints.internal").is_none() {
        return Vec::new();
    }
    consume_all(&west.bootstrap, "east.checkpoints.internal", Duration::from_secs(30))
        .into_iter()
        .filter_map(|r| Checkpoint::decode(r.key.as_deref().unwrap_or_default(), r.value.as_deref()).ok())
        .filter(|c| c.group == group)
        .collect()
}

/// The newest checkpoint per (topic, partition).
fn latest(cps: &[Checkpoint]) -> BTreeMap<(String, i32), Checkpoint> {
    cps.iter().map(|c| ((c.topic.clone(), c.partition), c.clone())).collect()
}

fn values(recs: &[Rec], partition: i32) -> Vec<Vec<u8>> {
    recs.iter().filter(|r| r.partition == partition).map(|r| r.value.clone().unwrap_or_default()).collect()
}

/// How many records a consumer starting at `downstream` on west re-reads (records the group had already
/// consumed upstream: those before `upstream`), or a negative number for records it would skip.
fn reread(source: &[Rec], target: &[Rec], partition: i32, upstream: i64, downstream: i64) -> i64 {
    let src = values(source, partition);
    let dst = values(target, partition);
    let consumed: std::collections::HashSet<&Vec<u8>> = src.iter().take(upstream as usize).collect();
    let from_here = &dst[downstream as usize..];
    let remaining: std::collections::HashSet<&Vec<u8>> = src.iter().skip(upstream as usize).collect();
    assert!(
        remaining.iter().all(|v| from_here.contains(v)),
        "a consumer starting at {downstream} would skip records the group has not consumed"
    );
    from_here.iter().filter(|v| consumed.contains(v)).count() as i64
}

/// The translation MM2's rule gives for the same syncs without ferry's marks.
fn mm2_translation(east: &Cluster, topic: &str, partition: i32, upstream: i64) -> Option<i64> {
    let mut store = SyncStore::new(64);
    for r in consume_all(&east.bootstrap, "mm2-offset-syncs.west.internal", Duration::from_secs(30)) {
        let Ok(s) = OffsetSync::decode(r.key.as_deref().unwrap_or_default(), r.value.as_deref()) else { continue };
        if s.topic == topic {
            let sync = StoredSync {
                upstream: s.upstream_offset,
                downstream: s.downstream_offset,
                mark: None,
                position: r.offset,
            };
            store.handle(&s.topic, s.partition, sync);
        }
    }
    store.set_read_to_end();
    store.translate(topic, partition, upstream).offset()
}

#[test]
fn a_committed_group_translates_exactly_and_mm2_reads_it() {
    let (east, west) = shared_pair();
    let topic = "cp-exact";
    create_topic(&east.bootstrap, topic, 2, &[]);
    let recs: Vec<Rec> =
        (0..2_000).map(|i| Rec::new(i % 2, format!("v{i}").as_bytes(), 1_700_000_000_000 + i as i64)).collect();
    produce(&east.bootstrap, topic, &recs);
    let dir = flows_dir(east, west, &flow("\"cp-exact\"", "\"cp-exact-.*\"", ""));
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_for(Duration::from_secs(60), "records copied", || {
        topic_partitions(&west.bootstrap, "east.cp-exact").is_some()
            && consume_all(&west.bootstrap, "east.cp-exact", Duration::from_secs(10)).len() == 2_000
    });
    // Offsets that do not sit on a sync: MM2's rule would re-read up to the gap to the previous sync.
    commit_group_offsets(&east.bootstrap, "cp-exact-g", &[(topic, 0, 437), (topic, 1, 873)]);
    wait_for(Duration::from_secs(30), "checkpoints for both partitions", || {
        let l = latest(&checkpoints(west, "cp-exact-g"));
        l.get(&("east.cp-exact".to_string(), 0)).is_some_and(|c| c.upstream_offset == 437)
            && l.get(&("east.cp-exact".to_string(), 1)).is_some_and(|c| c.upstream_offset == 873)
    });
    let source = consume_all(&east.bootstrap, topic, Duration::from_secs(30));
    let target = consume_all(&west.bootstrap, "east.cp-exact", Duration::from_secs(30));
    for (p, up) in [(0, 437), (1, 873)] {
        let cp = latest(&checkpoints(west, "cp-exact-g"))[&("east.cp-exact".to_string(), p)].clone();
        let ours = reread(&source, &target, p, up, cp.downstream_offset);
        let mm2_down = mm2_translation(east, topic, p, up).expect("MM2's rule translates too");
        let mm2 = reread(&source, &target, p, up, mm2_down);
        println!("partition {p}: group at {up}: ferry syncs re-read {ours}, MM2-format syncs re-read {mm2}");
        assert_eq!(ours, 0, "ferry's marked syncs translate exactly");
        assert!(mm2 > 0, "the MM2 rule re-reads here (otherwise this test proves nothing)");
        assert_eq!(cp.metadata, "", "metadata copied from the commit");
    }

    // MM2's own client reads the same offsets from ferry's checkpoints.
    let java = support::remote_cluster_utils_translate(&west.bootstrap, "east", "cp-exact-g");
    let ours: BTreeMap<(String, i32), i64> =
        latest(&checkpoints(west, "cp-exact-g")).into_iter().map(|(k, c)| (k, c.downstream_offset)).collect();
    assert_eq!(java, ours, "RemoteClusterUtils.translateOffsets agrees with ferry's checkpoints");
    ferry.terminate(Duration::from_secs(30));
}

/// A flow whose source has no group to checkpoint starts no checkpoint producer (issue 33): its computer
/// runs and the node leads its checkpoints duty, yet over many group refreshes no transactional id of the
/// flow's checkpoints exists on the target. The first group's first checkpoint still comes promptly and
/// exact, and then the id is there (so the observation above could have seen it).
#[test]
fn an_idle_flow_starts_no_checkpoint_producer_until_a_group_appears() {
    let (east, west) = shared_pair();
    let topic = support::unique("cp-lazy");
    let group = format!("{topic}-g");
    let remote = format!("east.{topic}");
    create_topic(&east.bootstrap, &topic, 2, &[]);
    let recs: Vec<Rec> =
        (0..1_000).map(|i| Rec::new(i % 2, format!("v{i}").as_bytes(), 1_700_000_000_000 + i as i64)).collect();
    produce(&east.bootstrap, &topic, &recs);
    let deployment = support::unique("cp-lazy-deploy");
    let txn = format!("{deployment}.east->west.checkpoints");
    let dir = flows_dir(
        east,
        west,
        &flow(&format!("\"{topic}\""), &format!("\"{topic}-g.*\""), "sync_group_offsets_enabled = true"),
    );
    let mut ferry = Ferry::start_env(dir.path(), &[], &[("FERRY_DEPLOYMENT", &deployment)]);
    let addr = ferry.listen_addr();
    wait_for(Duration::from_secs(60), "records copied", || {
        topic_partitions(&west.bootstrap, &remote).is_some()
            && consume_all(&west.bootstrap, &remote, Duration::from_secs(10)).len() == 1_000
    });
    let leading = || {
        let f = support::observe::flows(addr)["flows"]["east->west"].clone();
        let metric = support::observe::metric_sum(
            &support::observe::metrics(addr),
            "ferry_leader",
            &[("flow", "east->west"), ("duty", "checkpoints")],
        );
        f["leading"] == true && f["actors"]["checkpoints"]["state"] == "running" && metric == 1.0
    };
    wait_for(Duration::from_secs(60), "the checkpoint computer running on the leader", leading);
    // An observation window of at least ten group refreshes (0.5 s each) after the computer ran.
    let running = std::time::Instant::now();
    let mut looks = 0;
    while looks < 2 || running.elapsed() < Duration::from_secs(5) {
        let ids = support::transactional_ids(&west.bootstrap);
        assert!(!ids.contains(&txn), "{txn} on west while the flow has no group; ids: {ids:?}\n{}", ferry.log());
        looks += 1;
    }
    assert!(leading(), "still leading its checkpoints duty, without a producer");

    commit_group_offsets(&east.bootstrap, &group, &[(&topic, 0, 137), (&topic, 1, 273)]);
    let committed = std::time::Instant::now();
    wait_for(Duration::from_secs(30), "the new group's first checkpoints", || {
        let l = latest(&checkpoints(west, &group));
        l.get(&(remote.clone(), 0)).is_some_and(|c| c.upstream_offset == 137)
            && l.get(&(remote.clone(), 1)).is_some_and(|c| c.upstream_offset == 273)
    });
    let first = committed.elapsed();
    println!("first checkpoints of a group that appeared on an idle flow after {first:?} (group refresh 0.5 s)");
    assert!(first < Duration::from_secs(10), "the first group's checkpoint took {first:?}");
    let source = consume_all(&east.bootstrap, &topic, Duration::from_secs(30));
    let target = consume_all(&west.bootstrap, &remote, Duration::from_secs(30));
    let cps = latest(&checkpoints(west, &group));
    for (p, up) in [(0, 137), (1, 273)] {
        let cp = &cps[&(remote.clone(), p)];
        assert_eq!(reread(&source, &target, p, up, cp.downstream_offset), 0, "exact on partition {p}: {cp:?}");
    }
    // Group offset sync goes through the same producer: the idle group gets its offsets on west.
    wait_for(Duration::from_secs(30), "the group's translated offsets on west", || {
        let on_west = group_offsets(&west.bootstrap, &group, &[(&remote, 0), (&remote, 1)]);
        on_west
            == [Some(cps[&(remote.clone(), 0)].downstream_offset), Some(cps[&(remote.clone(), 1)].downstream_offset)]
    });
    let ids = support::transactional_ids(&west.bootstrap);
    assert!(ids.contains(&txn), "{txn} on west once the flow has a group; ids: {ids:?}");
    assert!(leading());
    ferry.terminate(Duration::from_secs(30));
}

#[test]
fn group_offset_sync_commits_idle_groups_and_leaves_active_ones_alone() {
    let (east, west) = shared_pair();
    let topic = "cp-sync";
    create_topic(&east.bootstrap, topic, 1, &[]);
    let recs: Vec<Rec> = (0..300).map(|i| Rec::new(0, format!("s{i}").as_bytes(), 1_000 + i as i64)).collect();
    produce(&east.bootstrap, topic, &recs);
    commit_group_offsets(&east.bootstrap, "cp-sync-idle", &[(topic, 0, 250)]);
    commit_group_offsets(&east.bootstrap, "cp-sync-active", &[(topic, 0, 250)]);
    // wait for the remote topic to exist before a consumer subscribes to it on west
    let dir = flows_dir(east, west, &flow("\"cp-sync\"", "\"cp-sync-.*\"", "sync_group_offsets_enabled = true"));
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_for(Duration::from_secs(60), "remote topic", || topic_partitions(&west.bootstrap, "east.cp-sync").is_some());
    let active = support::ActiveMember::join(&west.bootstrap, "cp-sync-active", "east.cp-sync");

    wait_for(Duration::from_secs(60), "idle group committed on west", || {
        group_offsets(&west.bootstrap, "cp-sync-idle", &[("east.cp-sync", 0)])[0] == Some(250)
    });
    let cps = latest(&checkpoints(west, "cp-sync-active"));
    assert!(cps.contains_key(&("east.cp-sync".to_string(), 0)), "the active group is checkpointed too");
    assert_eq!(active.committed(), None, "an active group's offsets are never written by ferry");
    let metrics = support::http_get(ferry.listen_addr(), "/metrics");
    assert!(
        metrics.contains("ferry_group_offset_syncs_total{flow=\"east->west\",result=\"skipped_active\"}"),
        "{metrics}"
    );
    drop(active);
    ferry.terminate(Duration::from_secs(30));
}

/// Marks must be present on ferry's syncs for the exactness above to be ferry's doing.
#[test]
fn ferry_syncs_carry_their_mark() {
    let (east, west) = shared_pair();
    create_topic(&east.bootstrap, "cp-mark", 1, &[]);
    produce(&east.bootstrap, "cp-mark", &[Rec::new(0, b"x", 1)]);
    let dir = flows_dir(east, west, &flow("\"cp-mark\"", "\"none\"", ""));
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_for(Duration::from_secs(60), "a marked sync for cp-mark", || {
        topic_partitions(&east.bootstrap, "mm2-offset-syncs.west.internal").is_some()
            && consume_all(&east.bootstrap, "mm2-offset-syncs.west.internal", Duration::from_secs(30)).iter().any(|r| {
                OffsetSync::decode(r.key.as_deref().unwrap_or_default(), r.value.as_deref())
                    .is_ok_and(|s| s.topic == "cp-mark")
                    && r.headers
                        .iter()
                        .any(|(k, v)| k == SYNC_MARK_HEADER && v.as_deref().and_then(SyncMark::decode).is_some())
            })
    });
    ferry.terminate(Duration::from_secs(30));
}

fn all_checkpoints(west: &Cluster, prefix: &str) -> Vec<Checkpoint> {
    consume_all(&west.bootstrap, "east.checkpoints.internal", Duration::from_secs(30))
        .into_iter()
        .filter_map(|r| Checkpoint::decode(r.key.as_deref().unwrap_or_default(), r.value.as_deref()).ok())
        .filter(|c| c.group.starts_with(prefix))
        .collect()
}

fn produce_range(east: &Cluster, topic: &str, range: std::ops::Range<usize>) {
    let recs: Vec<Rec> = range.map(|i| Rec::new(0, format!("r{i}").as_bytes(), 1_000 + i as i64)).collect();
    produce(&east.bootstrap, topic, &recs);
}

fn restart_keeps_checkpoints_monotonic(graceful: bool) {
    let (east, west) = shared_pair();
    let tag = if graceful { "graceful" } else { "kill9" };
    let topic = format!("cp-restart-{tag}");
    let (lead, lag, late) = (format!("{topic}-lead"), format!("{topic}-lag"), format!("{topic}-late"));
    create_topic(&east.bootstrap, &topic, 1, &[]);
    produce_range(east, &topic, 0..5_000);
    commit_group_offsets(&east.bootstrap, &lead, &[(&topic, 0, 4_000)]);
    commit_group_offsets(&east.bootstrap, &lag, &[(&topic, 0, 1_000)]);
    let interval = 2.0;
    let extra = format!("emit_checkpoints_interval_seconds = {interval}\nrefresh_groups_interval_seconds = 1");
    let dir =
        flows_dir(east, west, &flow(&format!("\"{topic}\""), &format!("\"{topic}-.*\""), "").replace(FAST, &extra));
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_for(Duration::from_secs(60), "checkpoints for lead and lag", || {
        let cps = all_checkpoints(west, &topic);
        cps.iter().any(|c| c.group == lead) && cps.iter().any(|c| c.group == lag)
    });
    if graceful {
        assert!(ferry.terminate(Duration::from_secs(60)).success(), "{}", ferry.log());
    } else {
        ferry.kill9();
    }

    // While ferry is down: more data, and a new group far behind the newest sync.
    produce_range(east, &topic, 5_000..7_000);
    commit_group_offsets(&east.bootstrap, &late, &[(&topic, 0, 1_500)]);
    let restarted = std::time::Instant::now();
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_for(Duration::from_secs(60), "a checkpoint for the lagging new group", || {
        all_checkpoints(west, &topic).iter().any(|c| c.group == late)
    });
    let first = restarted.elapsed();
    println!("{tag}: first checkpoint of a group far behind after {first:?} (emission interval {interval} s)");
    // Startup (client connections, reading both internal topics) plus two emission intervals.
    assert!(first < Duration::from_secs_f64(2.0 * interval + 8.0), "KAFKA-16622: took {first:?}");

    // A deliberate rewind upstream is followed, even though the downstream offset goes back.
    commit_group_offsets(&east.bootstrap, &lead, &[(&topic, 0, 2_000)]);
    wait_for(Duration::from_secs(30), "the rewind is checkpointed", || {
        latest(&checkpoints(west, &lead)).values().any(|c| c.upstream_offset == 2_000)
    });
    commit_group_offsets(&east.bootstrap, &lead, &[(&topic, 0, 6_500)]);
    wait_for(Duration::from_secs(30), "the lead group moves on", || {
        latest(&checkpoints(west, &lead)).values().any(|c| c.upstream_offset == 6_500)
    });
    ferry.terminate(Duration::from_secs(60));
    assert_monotonic(&all_checkpoints(west, &topic));
}

/// A long offset-sync backlog (MM2's format, as a takeover from MM2 finds it) is read in the background:
/// a group that the newest syncs cover gets its checkpoint at once, while the history is still being
/// read; a group older than that tail waits for the whole history, and no checkpoint moves backward
/// when translation switches to it.
#[test]
fn a_long_sync_backlog_does_not_delay_recent_groups() {
    let (east, west) = shared_pair();
    let topic = "cp-backlog";
    let syncs_topic = "mm2-offset-syncs.west.internal";
    create_topic(&east.bootstrap, topic, 4, &[]);
    // Other tests' flows east->west may be creating it now.
    support::ensure_topic_with(&east.bootstrap, syncs_topic, 1, &[("cleanup.policy", "compact")]);
    // 30,000 syncs per partition, upstream 10 i -> downstream 5 i, interleaved: 120,000 records, more
    // than twice the tail ferry reads first.
    let per_partition = 30_000i64;
    let mut recs = Vec::with_capacity(4 * per_partition as usize);
    for i in 0..per_partition {
        for p in 0..4 {
            let sync =
                OffsetSync { topic: topic.into(), partition: p, upstream_offset: 10 * i, downstream_offset: 5 * i };
            let (key, value) = sync.encode().unwrap();
            recs.push(Rec::new(0, &value, 1_700_000_000_000).key(&key));
        }
    }
    produce(&east.bootstrap, syncs_topic, &recs);
    // MM2's +1 rule between unmarked syncs: the sync at or below g, plus one.
    let (recent, deep) = ("cp-backlog-recent", "cp-backlog-deep");
    let at = |i: i64| (10 * i + 5, 5 * i + 1);
    let (recent_up, recent_down) = at(per_partition - 100);
    let (deep_up, deep_down) = at(100);
    let parts: Vec<(&str, i32, i64)> = (0..4).map(|p| (topic, p, recent_up)).collect();
    commit_group_offsets(&east.bootstrap, recent, &parts);
    let parts: Vec<(&str, i32, i64)> = (0..4).map(|p| (topic, p, deep_up)).collect();
    commit_group_offsets(&east.bootstrap, deep, &parts);

    let dir = flows_dir(east, west, &flow("\"cp-backlog\"", "\"cp-backlog-.*\"", ""));
    // The backlog is held back for 100 rounds (about 20 s): what ferry publishes then comes from the tail.
    let mut ferry = Ferry::start_env(dir.path(), &[], &[("FAILPOINTS", "checkpoints-backlog=100*return")]);
    let translated = |group: &str, up: i64, down: i64| {
        let l = latest(&checkpoints(west, group));
        (0..4).all(|p| {
            l.get(&("east.cp-backlog".to_string(), p))
                .is_some_and(|c| c.upstream_offset == up && c.downstream_offset == down)
        })
    };
    wait_for(Duration::from_secs(20), "checkpoints of the recent group from the newest syncs", || {
        translated(recent, recent_up, recent_down)
    });
    assert!(
        checkpoints(west, deep).is_empty(),
        "the deep group was translated before the history was read: {:?}\n{}",
        checkpoints(west, deep),
        ferry.log()
    );
    // The whole history is thinned to its budget per partition: the deep group's answer may sit at an
    // older sync than MM2's rule on every sync would use, never ahead of it.
    wait_for(Duration::from_secs(90), "checkpoints of the deep group once the history is read", || {
        let l = latest(&checkpoints(west, deep));
        (0..4).all(|p| {
            l.get(&("east.cp-backlog".to_string(), p))
                .is_some_and(|c| c.upstream_offset == deep_up && c.downstream_offset <= deep_down)
        })
    });
    ferry.terminate(Duration::from_secs(30));
    assert_monotonic(&all_checkpoints(west, "cp-backlog-"));
    assert!(translated(recent, recent_up, recent_down), "the recent group's checkpoint stands");
}

/// With MM2's default emission interval (60 s; here longer still), a group older than the newest syncs
/// gets its checkpoint as soon as the whole backlog is read, not an interval after the first emission
/// (which came from the newest syncs alone).
#[test]
fn a_deep_group_is_checkpointed_as_soon_as_the_backlog_is_read() {
    let (east, west) = shared_pair();
    let topic = "cp-deep";
    let syncs_topic = "mm2-offset-syncs.west.internal";
    create_topic(&east.bootstrap, topic, 2, &[]);
    // Other tests' flows east->west may be creating it now.
    support::ensure_topic_with(&east.bootstrap, syncs_topic, 1, &[("cleanup.policy", "compact")]);
    // 40,000 syncs per partition, upstream 10 i -> downstream 10 i: 80,000 records, more than the tail
    // ferry reads first, and the deep group far below that tail.
    let per_partition = 40_000i64;
    let mut recs = Vec::with_capacity(2 * per_partition as usize);
    for i in 0..per_partition {
        for p in 0..2 {
            let sync =
                OffsetSync { topic: topic.into(), partition: p, upstream_offset: 10 * i, downstream_offset: 10 * i };
            let (key, value) = sync.encode().unwrap();
            recs.push(Rec::new(0, &value, 1_700_000_000_000).key(&key));
        }
    }
    produce(&east.bootstrap, syncs_topic, &recs);
    let (recent, deep) = ("cp-deep-recent", "cp-deep-old");
    let (recent_up, deep_up) = (10 * (per_partition - 100) + 5, 10 * 100 + 5);
    for (group, up) in [(recent, recent_up), (deep, deep_up)] {
        let parts: Vec<(&str, i32, i64)> = (0..2).map(|p| (topic, p, up)).collect();
        commit_group_offsets(&east.bootstrap, group, &parts);
    }
    let flows = format!(
        "[[flows]]\nsource = \"east\"\ntarget = \"west\"\ntopics = [\"{topic}\"]\ngroups = [\"cp-deep-.*\"]\n\
         emit_checkpoints_interval_seconds = 600\nrefresh_groups_interval_seconds = 0.5\n"
    );
    let dir = flows_dir(east, west, &flows);
    // The backlog is held back for the first rounds (about 1 s), so the first emission certainly comes
    // before the history is read.
    let mut ferry = Ferry::start_env(dir.path(), &[], &[("FAILPOINTS", "checkpoints-backlog=5*return")]);
    let complete = |group: &str, up: i64| {
        let l = latest(&checkpoints(west, group));
        (0..2).all(|p| l.get(&("east.cp-deep".to_string(), p)).is_some_and(|c| c.upstream_offset == up))
    };
    wait_for(Duration::from_secs(60), "checkpoints of the recent group (first emission)", || {
        complete(recent, recent_up)
    });
    // The first emission did not translate the deep group (the newest syncs do not reach it); the next
    // one is 600 s away, so only the read backlog can have published it.
    wait_for(Duration::from_secs(90), "checkpoints of the deep group once the backlog is read", || {
        complete(deep, deep_up)
    });
    let l = latest(&checkpoints(west, deep));
    for p in 0..2 {
        let c = &l[&("east.cp-deep".to_string(), p)];
        assert!(c.downstream_offset <= deep_up, "never ahead of the group: {c:?}");
    }
    ferry.terminate(Duration::from_secs(30));
}

#[test]
fn kill_9_restart_never_moves_a_checkpoint_backward() {
    restart_keeps_checkpoints_monotonic(false);
}

#[test]
fn graceful_restart_never_moves_a_checkpoint_backward() {
    restart_keeps_checkpoints_monotonic(true);
}

#[test]
fn translate_prints_and_applies_offsets_but_refuses_active_groups() {
    let (east, west) = shared_pair();
    let topic = "cp-cli";
    create_topic(&east.bootstrap, topic, 1, &[]);
    produce_range(east, topic, 0..500);
    commit_group_offsets(&east.bootstrap, "cp-cli-g", &[(topic, 0, 321)]);
    let dir = flows_dir(east, west, &flow("\"cp-cli\"", "\"cp-cli-.*\"", ""));
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_for(Duration::from_secs(60), "a checkpoint for cp-cli-g", || {
        latest(&checkpoints(west, "cp-cli-g")).values().any(|c| c.upstream_offset == 321)
    });
    ferry.terminate(Duration::from_secs(30));
    let expected = latest(&checkpoints(west, "cp-cli-g"))[&("east.cp-cli".to_string(), 0)].downstream_offset;

    let translate = |group: &str, apply: bool| {
        let mut cmd = std::process::Command::new(support::ferry_bin());
        cmd.args(["translate", "--flows"]).arg(dir.path()).args(["--flow", "east->west", "--group", group]);
        if apply {
            cmd.arg("--apply");
        }
        cmd.output().expect("run ferry translate")
    };
    let out = translate("cp-cli-g", false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.lines().any(|l| l == format!("east.cp-cli\t0\t{expected}\t-")), "{stdout}");
    assert_eq!(group_offsets(&west.bootstrap, "cp-cli-g", &[("east.cp-cli", 0)])[0], None, "printing applies nothing");

    let member = support::ActiveMember::join(&west.bootstrap, "cp-cli-g", "east.cp-cli");
    let out = translate("cp-cli-g", true);
    assert!(!out.status.success(), "applying to an active group must be refused");
    assert!(String::from_utf8_lossy(&out.stderr).contains("stop its consumers first"));
    drop(member);

    wait_for(Duration::from_secs(60), "apply succeeds once the group is idle", || {
        translate("cp-cli-g", true).status.success()
    });
    assert_eq!(group_offsets(&west.bootstrap, "cp-cli-g", &[("east.cp-cli", 0)])[0], Some(expected));
}

/// A sync record as ferry's emitter writes it: MM2's key and value, with ferry's mark.
fn marked_sync(topic: &str, upstream: i64, downstream: i64, mark: SyncMark) -> Rec {
    let sync =
        OffsetSync { topic: topic.to_string(), partition: 0, upstream_offset: upstream, downstream_offset: downstream };
    let (key, value) = sync.encode().expect("encode sync");
    Rec::new(0, &value, -1).key(&key).header(SYNC_MARK_HEADER, Some(&mark.encode()))
}

/// The offset-syncs topic as the brokers hold it after the awkward cases of a real emitter: a batch
/// republished after a partial flush (a, b, c, then b, c again), a quiet sync landing after a newer one,
/// and late syncs of an owner that was replaced (a lower ownership epoch, for records that landed after
/// the new owner's). ferry reads them from the real topic and keeps the history: a group inside a proven
/// run is translated exactly, before and after the late records. (The source topic is empty, so ferry
/// writes no syncs of its own for it; the group's committed offsets only have to be translated.)
#[test]
fn republished_late_and_replaced_owners_syncs_on_the_topic_keep_the_history() {
    let (east, west) = shared_pair();
    let topic = "cp-history";
    create_topic(&east.bootstrap, topic, 1, &[]);
    let dir = flows_dir(east, west, &flow("\"cp-history\"", "\"cp-history-.*\"", ""));
    let mut ferry = Ferry::start(dir.path(), &[]);
    let syncs_topic = "mm2-offset-syncs.west.internal";
    wait_for(Duration::from_secs(60), "the offset-syncs topic", || {
        topic_partitions(&east.bootstrap, syncs_topic).is_some()
    });
    let (old, new) = (1_000, 2_000); // ownership epochs
    let m = |lifetime, seq, epoch| SyncMark { lifetime, seq, epoch, dense: false };
    produce(
        &east.bootstrap,
        syncs_topic,
        &[
            marked_sync(topic, 0, 10, m(7, 0, old)),
            marked_sync(topic, 100, 110, m(7, 1, old)),
            marked_sync(topic, 200, 210, m(7, 2, old)),
            // The batch b, c again after a partial flush, and a quiet sync of 150 overtaken by c.
            marked_sync(topic, 100, 110, m(7, 1, old)),
            marked_sync(topic, 200, 210, m(7, 2, old)),
            marked_sync(topic, 150, 160, m(7, 1, old)),
            // A new owner took over at 300; the old owner's queued 250.. landed after the new owner's
            // records, and its sync for them is late.
            marked_sync(topic, 300, 400, m(9, 0, new)),
            marked_sync(topic, 500, 600, m(9, 1, new)),
            marked_sync(topic, 250, 700, m(7, 3, old)),
        ],
    );
    let group = "cp-history-g";
    // 50: inside the run 0 -> 100, exact although b and c came twice and 150 came late. 250: past the
    // old owner's last proven sync, MM2's rule (211, never past a record); the late (250 -> 700), read as
    // news, would drop the new owner's syncs and send 450 to 701, past its copies at 550..600. 450: inside
    // the new owner's run 300 -> 500, exact.
    let cases = [(50, 60), (250, 211), (450, 550)];
    for (upstream, downstream) in cases {
        commit_group_offsets(&east.bootstrap, group, &[(topic, 0, upstream)]);
        wait_for(Duration::from_secs(60), &format!("the checkpoint of {upstream}"), || {
            assert!(ferry.try_status().is_none(), "ferry exited");
            latest(&checkpoints(west, group))
                .get(&("east.cp-history".to_string(), 0))
                .is_some_and(|c| c.upstream_offset == upstream)
        });
        let cp = latest(&checkpoints(west, group))[&("east.cp-history".to_string(), 0)].clone();
        println!("group at {upstream}: checkpoint downstream {}", cp.downstream_offset);
        assert_eq!(cp.downstream_offset, downstream, "group at {upstream}");
    }
    ferry.terminate(Duration::from_secs(30));
}

/// A node is killed (-9) after it persisted its progress and before it published its last position as a
/// sync (here held back by the `copier-quiet` failpoint: quiet syncs never go out). The next owner
/// publishes that position for it, as the dead lifetime's next sync, so a group committed between the
/// dead owner's last sync and the new owner's first fails over with nothing re-read.
#[test]
fn a_group_between_two_owners_syncs_fails_over_exactly_after_a_kill_9() {
    let (east, west) = shared_pair();
    let topic = support::unique("cp-handover");
    let remote = format!("east.{topic}");
    let group = format!("{topic}-g");
    create_topic(&east.bootstrap, &topic, 1, &[]);
    let recs: Vec<Rec> = (0..1_000).map(|i| Rec::new(0, format!("v{i}").as_bytes(), 1_700_000_000_000 + i)).collect();
    produce(&east.bootstrap, &topic, &recs);
    // Only the first record of a lifetime publishes a sync: no lag syncs, no quiet syncs.
    let flows = flow(&format!("\"{topic}\""), &format!("\"{group}\""), "offset_lag_max = 1000000");
    let dir = flows_dir(east, west, &flows);
    let mut ferry = Ferry::start_env(dir.path(), &[], &[("FAILPOINTS", "copier-quiet=return")]);
    wait_for(Duration::from_secs(60), "every record copied and its position persisted", || {
        topic_partitions(&west.bootstrap, &remote).is_some()
            && support::end_offsets(&west.bootstrap, &remote) == [1_000]
            && support::scenario::stored_progress(west, &topic).get(&0) == Some(&999)
    });
    ferry.kill9();
    let syncs: Vec<(i64, i64)> = support::scenario::offset_syncs(east, &topic)
        .iter()
        .map(|s| (s.upstream_offset, s.downstream_offset))
        .collect();
    assert_eq!(syncs, [(0, 0)], "the dead owner published only its first sync");
    commit_group_offsets(&east.bootstrap, &group, &[(&topic, 0, 500)]);
    let more: Vec<Rec> =
        (1_000..1_010).map(|i| Rec::new(0, format!("v{i}").as_bytes(), 1_700_000_000_000 + i)).collect();
    produce(&east.bootstrap, &topic, &more);
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_for(Duration::from_secs(60), "the group's checkpoint after the new owner copied", || {
        support::end_offsets(&west.bootstrap, &remote) == [1_010]
            && latest(&checkpoints(west, &group)).get(&(remote.clone(), 0)).is_some_and(|c| c.upstream_offset == 500)
    });
    let cp = latest(&checkpoints(west, &group))[&(remote.clone(), 0)].clone();
    let source = consume_all(&east.bootstrap, &topic, Duration::from_secs(30));
    let target = consume_all(&west.bootstrap, &remote, Duration::from_secs(30));
    let re_read = reread(&source, &target, 0, 500, cp.downstream_offset);
    let syncs: Vec<(i64, i64)> = support::scenario::offset_syncs(east, &topic)
        .iter()
        .map(|s| (s.upstream_offset, s.downstream_offset))
        .collect();
    println!(
        "group at 500: checkpoint {} downstream, {re_read} records re-read; syncs {syncs:?}",
        cp.downstream_offset
    );
    assert_eq!(re_read, 0, "a group between the two owners' syncs fails over re-reading nothing");
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}
