//! The followers of internal topics that a connection shares between flows (`ferry::clients::readers`):
//! each partition is read from its own position in its own queue, a partition followed twice gets a
//! second consumer, and a consumer goes with its last follower.

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ferry::clients::{Clients, PartitionReader};
use ferry::config::ClusterSpec;
use rdkafka::Offset;
use rdkafka::message::Message;
use support::scenario::records;
use support::{create_topic, produce, shared_pair, unique};

fn cluster(bootstrap: &str) -> ClusterSpec {
    ClusterSpec {
        alias: "east".into(),
        bootstrap_servers: bootstrap.into(),
        client: BTreeMap::new(),
        file_keys: Default::default(),
        secret_files: Vec::new(),
        client_files: Vec::new(),
        schema_registry: None,
        file: "clusters.toml".into(),
    }
}

/// The values `reader` returns until it has `n` of them (within 30 s).
fn read(reader: &PartitionReader, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut out = Vec::new();
    while out.len() < n {
        assert!(Instant::now() < deadline, "only {out:?} of {n} records within 30 s");
        match reader.poll(Duration::from_millis(200)) {
            Some(Ok(msg)) => out.push(String::from_utf8_lossy(msg.payload().unwrap_or_default()).into_owned()),
            Some(Err(e)) => panic!("read: {e}"),
            None => {}
        }
    }
    out
}

#[test]
fn followers_share_a_consumer_keep_their_own_positions_and_close_it_with_the_last() {
    let (east, _) = shared_pair();
    let (a, b) = (unique("readers-a"), unique("readers-b"));
    create_topic(&east.bootstrap, &a, 2, &[]);
    create_topic(&east.bootstrap, &b, 1, &[]);
    produce(&east.bootstrap, &a, &records("a", 0..20, 2));
    produce(&east.bootstrap, &b, &records("b", 0..10, 1));
    let clients = Clients::new();
    let conn = clients.connection(&cluster(&east.bootstrap));

    // Three partitions, three positions, one consumer.
    let a0 = conn.partition_reader(&a, 0, Offset::Beginning).expect("follow a-0");
    let a1 = conn.partition_reader(&a, 1, Offset::Offset(5)).expect("follow a-1");
    let b0 = conn.partition_reader(&b, 0, Offset::Offset(8)).expect("follow b-0");
    assert_eq!(conn.reader_consumers(), 1, "followers of distinct partitions share one consumer");
    let evens: Vec<String> = (0..20).step_by(2).map(|i| format!("a{i}")).collect();
    assert_eq!(read(&a0, 10), evens, "a-0 from its start, in order, only its own partition");
    let odds: Vec<String> = (11..20).step_by(2).map(|i| format!("a{i}")).collect();
    assert_eq!(read(&a1, 5), odds, "a-1 from offset 5");
    assert_eq!(read(&b0, 2), vec!["b8", "b9"], "b-0 from offset 8");
    assert!(a0.poll(Duration::from_millis(300)).is_none(), "nothing more on a-0");

    // A second follower of a-0 (an active-active pair's reverse reader) reads it again on a second consumer.
    let again = conn.partition_reader(&a, 0, Offset::Offset(6)).expect("follow a-0 twice");
    assert_eq!(conn.reader_consumers(), 2, "a partition is assigned once per consumer");
    assert_eq!(read(&again, 4), evens[6..].to_vec(), "a-0 again, from offset 6");
    assert_eq!(again.position().expect("position"), Some(10), "its own position: after a-0's last record");

    // New records reach every follower of their partition, each once.
    produce(&east.bootstrap, &a, &records("late", 0..2, 2));
    assert_eq!(read(&a0, 1), vec!["late0"]);
    assert_eq!(read(&again, 1), vec!["late0"]);
    assert_eq!(read(&a1, 1), vec!["late1"]);

    // A follower that goes unassigns its partition; the last one of a consumer closes it.
    drop(again);
    assert_eq!(conn.reader_consumers(), 1);
    drop((a0, a1));
    assert_eq!(conn.reader_consumers(), 1, "b-0 still follows");
    produce(&east.bootstrap, &b, &records("b-late", 0..1, 1));
    assert_eq!(read(&b0, 1), vec!["b-late0"], "the others' going leaves b-0 reading");
    drop(b0);
    assert_eq!(conn.reader_consumers(), 0, "the last follower closed the consumer");
}
