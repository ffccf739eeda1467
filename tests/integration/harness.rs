//! Smoke tests of the test bed itself (tests/integration/support): real brokers start, keep data across a
//! crash, and the client helpers round-trip records exactly; ports stay outside the kernel's ephemeral
//! range, so that a broker restarted while clients keep reconnecting gets its ports back.

use crate::support;

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

#[test]
fn every_port_the_harness_hands_out_is_outside_the_ephemeral_range_and_reserved() {
    let (low, high) = support::ports::ephemeral_range();
    let ports: Vec<u16> = (0..50).map(|_| support::free_port()).collect();
    let inside: Vec<&u16> = ports.iter().filter(|p| support::ports::is_ephemeral(**p)).collect();
    assert!(inside.is_empty(), "ports inside the ephemeral range {low}-{high}: {inside:?}");
    let distinct: std::collections::BTreeSet<&u16> = ports.iter().collect();
    assert_eq!(distinct.len(), ports.len(), "no port handed out twice: {ports:?}");
    // Reserved: the lock cannot be taken again, not even through another open file of this process
    // (what another test process would try).
    for p in &ports[..5] {
        let f = std::fs::File::open(support::ports::lock_path(*p)).expect("lock file exists");
        assert!(f.try_lock().is_err(), "port {p} is locked while this process lives");
    }
    // And every port handed out in this process so far (brokers of the other tests included).
    let all = support::ports::handed_out();
    assert!(all.iter().all(|p| !support::ports::is_ephemeral(*p)), "{all:?} vs {low}-{high}");
}

/// Connects to `port` again and again until `stop` (as a client with no backoff would while its broker
/// is down); returns (attempts, self-connects: connections whose source port was `port` itself).
fn hammer(port: u16, stop: &std::sync::atomic::AtomicBool) -> (u64, u64) {
    use std::net::{SocketAddr, TcpStream};
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let (mut attempts, mut selfs) = (0, 0);
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        attempts += 1;
        if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            if s.local_addr().is_ok_and(|l| l.port() == port) {
                // Held for a moment, as a client does while it waits for an answer to its first request.
                selfs += 1;
                std::thread::sleep(Duration::from_secs(1));
            } else {
                // The broker answers: no need to load it with a connection storm.
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    (attempts, selfs)
}

#[test]
fn a_restarted_broker_gets_its_ports_back_while_clients_keep_reconnecting() {
    let mut c = Cluster::start("rebind");
    for p in [c.port, c.controller_port] {
        assert!(
            !support::ports::is_ephemeral(p),
            "port {p} inside the ephemeral range {:?}",
            support::ports::ephemeral_range()
        );
    }
    let topic = unique("rebind");
    create_topic(&c.bootstrap, &topic, 1, &[]);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (port, controller) = (c.port, c.controller_port);
    let (attempts, selfs) = std::thread::scope(|s| {
        let clients = [s.spawn(|| hammer(port, &stop)), s.spawn(|| hammer(controller, &stop))];
        for round in 0..3 {
            if round == 1 {
                c.kill()
            } else {
                c.stop()
            }
            // A moment down, clients hammering the free ports.
            std::thread::sleep(Duration::from_millis(500));
            c.restart(); // panics with the broker log if a port was taken ("Address already in use")
            produce(&c.bootstrap, &topic, &[Rec::new(0, format!("r{round}").as_bytes(), 1_700_000_000_000)]);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        clients.map(|h| h.join().expect("client thread")).into_iter().fold((0, 0), |(a, s), (x, y)| (a + x, s + y))
    });
    println!("3 restarts; {attempts} connection attempts meanwhile, {selfs} self-connects");
    assert_eq!(selfs, 0, "no client connected to itself on a broker's port");
    assert_eq!(consume_all(&c.bootstrap, &topic, Duration::from_secs(30)).len(), 3, "a record per round");
}
