//! Smoke tests of the test bed itself (tests/support): real brokers start, keep data across a
//! crash, and the client helpers round-trip records exactly.

mod support;

use std::time::Duration;

use support::{Cluster, Rec, consume_all, create_topic, list_topics, produce, shared_pair, unique};

fn sample(ts: i64) -> Vec<Rec> {
    vec![
        Rec::new(0, b"v0", ts).key(b"k0").header("h1", Some(b"a")).header("h2", None).header("h1", Some(b"dup")),
        // null key
        Rec::new(1, b"v1", ts + 1),
        // tombstone
        Rec { value: None, ..Rec::new(0, b"", ts + 2).key(b"k0") },
    ]
}

/// What `consume_all` must return for `sample`: the same records in (partition, offset) order.
fn expected(ts: i64) -> Vec<Rec> {
    let s = sample(ts);
    let mut e = vec![s[0].clone(), s[2].clone(), s[1].clone()];
    for (r, offset) in e.iter_mut().zip([0, 1, 0]) {
        r.offset = offset;
    }
    e
}

#[test]
fn shared_pair_round_trips_records() {
    let (east, west) = shared_pair();
    assert_ne!(east.bootstrap, west.bootstrap);
    for cluster in [east, west] {
        let topic = unique("smoke");
        create_topic(&cluster.bootstrap, &topic, 2, &[("cleanup.policy", "delete")]);
        assert!(list_topics(&cluster.bootstrap).contains(&topic));
        assert_eq!(support::topic_partitions(&cluster.bootstrap, &topic), Some(2));
        let ts = 1_700_000_000_000;
        produce(&cluster.bootstrap, &topic, &sample(ts));
        let got = consume_all(&cluster.bootstrap, &topic, Duration::from_secs(30));
        assert_eq!(got, expected(ts), "on {}", cluster.name);
        support::delete_topic(&cluster.bootstrap, &topic);
        assert_eq!(support::topic_partitions(&cluster.bootstrap, &topic), None);
    }
    // The topics live on their own cluster only.
    let only_east = unique("only-east");
    create_topic(&east.bootstrap, &only_east, 1, &[]);
    assert_eq!(support::topic_partitions(&west.bootstrap, &only_east), None);
}

#[test]
fn group_offsets_round_trip() {
    let (east, _) = shared_pair();
    let topic = unique("offsets");
    let group = unique("group");
    create_topic(&east.bootstrap, &topic, 2, &[]);
    produce(&east.bootstrap, &topic, &sample(1_700_000_000_000));
    assert_eq!(support::group_offsets(&east.bootstrap, &group, &[(&topic, 0), (&topic, 1)]), vec![None, None]);
    support::commit_group_offsets(&east.bootstrap, &group, &[(&topic, 0, 2), (&topic, 1, 1)]);
    assert_eq!(support::group_offsets(&east.bootstrap, &group, &[(&topic, 0), (&topic, 1)]), vec![Some(2), Some(1)]);
}

#[test]
fn dedicated_cluster_survives_kill_and_restart() {
    let mut c = Cluster::start("crash");
    let topic = unique("durable");
    create_topic(&c.bootstrap, &topic, 2, &[]);
    let ts = 1_700_000_000_000;
    produce(&c.bootstrap, &topic, &sample(ts));
    let pid = c.pid().expect("running");

    c.kill();
    assert!(!c.is_running());
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "killed JVM is gone");

    c.restart();
    assert_eq!(support::topic_partitions(&c.bootstrap, &topic), Some(2));
    assert_eq!(consume_all(&c.bootstrap, &topic, Duration::from_secs(30)), expected(ts));
    // Still writable after recovery.
    produce(&c.bootstrap, &topic, &[Rec::new(1, b"after", ts + 10)]);
    assert_eq!(consume_all(&c.bootstrap, &topic, Duration::from_secs(30)).len(), 4);

    c.stop();
    assert!(!c.is_running());
    let dir = c.dir().to_path_buf();
    drop(c);
    assert!(!dir.exists(), "drop removes the cluster dir");
}
