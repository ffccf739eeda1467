//! Long links: the source cluster behind a real TCP proxy that adds latency (a link between regions),
//! cut for a while as links are. The bench's `wan` scenario measures the speed over such a link; this
//! checks what must hold whatever the speed: every record once, in order, nothing lost to a cut.

use crate::support;

use std::time::{Duration, Instant};

use support::observe::{health, unhealthy};
use support::scenario::*;
use support::{Cluster, Ferry, consume_all, create_topic, produce, shared_pair, unique, wait_for};

/// The link's round trip: an intercontinental one is 150-300 ms.
const ROUND_TRIP: Duration = Duration::from_millis(200);
/// How long the link stays cut: the scenario.
const CUT: Duration = Duration::from_secs(20);

#[test]
fn a_flow_over_a_long_link_copies_every_record_in_order_and_a_cut_of_20_s_loses_nothing() {
    let east = Cluster::start_linked("far-east");
    let (_, west) = shared_pair();
    east.link().round_trip(ROUND_TRIP);
    let topic = unique("far");
    let remote = format!("east.{topic}");
    create_topic(&east.bootstrap, &topic, 4, &[]);
    produce(&east.bootstrap, &topic, &records("a", 0..20_000, 4));
    // Every client of the flow's source (copier, offset syncs, checkpoints, admin) goes over the link.
    let dir = flows_dir(
        &[("east", &east.linked_bootstrap()), ("west", &west.bootstrap)],
        &flow("east", "west", &[&topic], ""),
    );
    let mut ferry = Ferry::start(dir.path(), &[]);
    let started = Instant::now();
    wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &values("a", 0..20_000));
    println!("20,000 records over a {ROUND_TRIP:?} link in {:?} from the start", started.elapsed());
    // The copier measured the link and fetches the long-link sizes (a near cluster gets librdkafka's).
    let log = ferry.log();
    let sizes =
        log.lines().find(|l| l.contains("fetch sizes for the source's round trip")).expect("fetch sizes logged");
    assert!(
        sizes.contains("partition_bytes=8388608") && sizes.contains("response_bytes=25165824"),
        "the long-link fetch sizes over a {ROUND_TRIP:?} link: {sizes}"
    );

    wait_healthy(&mut ferry, FLOW, Duration::from_secs(60));
    // Records keep coming on the source while the link is cut.
    let stream = Stream::start(&east.bootstrap, &topic, 4, "b", 200, Duration::from_millis(100));
    wait_for(ARRIVAL, "streamed records copied over the link", || total(&west.bootstrap, &remote) >= 21_000);
    east.link().cut();
    let cut = Instant::now();
    let mut seen = None;
    // Keeping the link cut is the scenario; meanwhile watch what an operator sees, and that nothing
    // copied arrives once the records in flight have landed.
    while cut.elapsed() < CUT {
        assert_alive(&mut ferry);
        if seen.is_none() && !unhealthy(&health(ferry.listen_addr()), FLOW).is_empty() {
            seen = Some(cut.elapsed());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let during = total(&west.bootstrap, &remote);
    let produced_during = stream.produced();
    east.link().restore();
    let restored = Instant::now();
    println!("link cut for {CUT:?}: /health showed the flow degraded after {seen:?}");
    assert!(seen.is_some_and(|s| s < CUT), "the cut source never showed on /health within {CUT:?}");
    assert!(
        during < 20_000 + produced_during as i64,
        "records produced during the cut arrived through a cut link ({during} on the target of {})",
        20_000 + produced_during
    );
    wait_for(ARRIVAL, "copying resumed after the link came back", || {
        assert_alive(&mut ferry);
        total(&west.bootstrap, &remote) > during
    });
    println!("copying again {:?} after the link came back", restored.elapsed());
    let produced = stream.finish();
    let mut expected = values("a", 0..20_000);
    expected.extend(values("b", 0..produced));
    let counts = wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &expected);
    println!(
        "{} records copied, {} duplicates; all there {:?} after the link came back",
        expected.len(),
        duplicates(&counts),
        restored.elapsed()
    );
    wait_healthy(&mut ferry, FLOW, Duration::from_secs(90));
    assert!(ferry.terminate(Duration::from_secs(30)).success());

    // Every record once, in its partition's order.
    let source = per_partition(consume_all(&east.bootstrap, &topic, READ));
    let copy = per_partition(consume_all(&west.bootstrap, &remote, READ));
    for (p, recs) in &source {
        let copied = copy.get(p).map(Vec::as_slice).unwrap_or_default();
        assert_eq!(
            copied.len(),
            recs.len(),
            "partition {p}: {} records on the source, {} on the target",
            recs.len(),
            copied.len()
        );
        if let Some(i) = recs.iter().zip(copied).position(|(a, b)| a != b) {
            panic!("partition {p}: record #{i} differs: source {:?}, target {:?}", recs[i], copied[i]);
        }
    }
}

/// A cooperative consumer that lost its assignment (its session timed out while its cluster was away) and
/// whose subscription grows while it joins again, before it has a member id (a state librdkafka 2.12.1
/// does not count as rebalancing), with a topic it has no metadata for: the process lives on and the
/// group assigns the new topic's partitions. librdkafka asserted (`rd_kafka_cgrp_modify_subscription:
/// Assertion 'rkcg_join_state == ...INIT || ...STEADY'`) and aborted the process; ferry's copier hit it
/// when its source came back after a cut and the topic synchroniser added a topic during the copier
/// group's rejoin (vendor/README.md). The link's round trip holds the join open; the consumer runs in a
/// child process (this binary, the ignored test below) so an abort fails this test instead of ending the
/// suite.
#[test]
fn a_subscription_that_grows_while_a_consumer_rejoins_does_not_abort_the_process() {
    let far = Cluster::start_linked("join-race");
    far.link().round_trip(Duration::from_millis(600));
    let (a, b) = (unique("join-a"), unique("join-b"));
    create_topic(&far.bootstrap, &a, 2, &[]);
    create_topic(&far.bootstrap, &b, 2, &[]);
    let mut child = support::process::child_test("links::child_subscription_grows_while_rejoining")
        .env(CHILD_ENV, format!("{}|{a}|{b}", far.linked_bootstrap()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the child");
    // The child says when it holds its assignment; the link is then cut past its session timeout.
    let stdout = child.stdout.take().expect("child stdout");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
    let mut text = String::new();
    for line in lines.by_ref() {
        let line = line.expect("child output");
        text.push_str(&line);
        text.push('\n');
        if line.contains("CHILD ASSIGNED") {
            far.link().cut();
            std::thread::sleep(Duration::from_secs(9)); // the scenario: away longer than the 6 s session
            far.link().restore();
            break;
        }
    }
    for line in lines {
        text.push_str(&line.expect("child output"));
        text.push('\n');
    }
    let out = child.wait_with_output().expect("child ends");
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the child process ended with {}:\n{text}", out.status);
    assert!(text.contains("CHILD REJOINED") && text.contains("1 passed"), "the child did not get through:\n{text}");
}

const CHILD_ENV: &str = "FERRY_TEST_CHILD_JOIN_RACE";

/// Sees librdkafka's group debug lines: when a join is sent, and when the session timed out.
#[derive(Default)]
struct JoinWatch {
    joining: std::sync::atomic::AtomicBool,
    timed_out: std::sync::atomic::AtomicBool,
}

impl rdkafka::ClientContext for JoinWatch {
    fn log(&self, _: rdkafka::config::RDKafkaLogLevel, _: &str, message: &str) {
        use std::sync::atomic::Ordering::SeqCst;
        if message.contains("changed join state init -> wait-join") {
            self.joining.store(true, SeqCst);
        }
        if message.contains("session timed out") {
            self.timed_out.store(true, SeqCst);
        }
    }
}

impl rdkafka::consumer::ConsumerContext for JoinWatch {}

#[test]
#[ignore = "run in a child process by a_subscription_that_grows_while_a_consumer_rejoins_does_not_abort_the_process"]
fn child_subscription_grows_while_rejoining() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use std::sync::atomic::Ordering::SeqCst;
    let Ok(args) = std::env::var(CHILD_ENV) else { return };
    let [bootstrap, a, b] = args.split('|').collect::<Vec<_>>()[..] else { panic!("{args}") };
    let consumer: BaseConsumer<JoinWatch> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", unique("join-race"))
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "1000")
        .set("reconnect.backoff.max.ms", "500")
        .set("debug", "cgrp")
        .set_log_level(rdkafka::config::RDKafkaLogLevel::Debug)
        .create_with_context(JoinWatch::default())
        .expect("consumer");
    let watch = consumer.context();
    let holds = |c: &BaseConsumer<JoinWatch>, t: &str| {
        c.assignment().is_ok_and(|l| l.elements().iter().any(|e| e.topic() == t))
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    consumer.subscribe(&[a]).expect("subscribe");
    while !holds(&consumer, a) {
        assert!(Instant::now() < deadline, "never assigned");
        consumer.poll(Duration::from_millis(50));
    }
    println!("CHILD ASSIGNED");
    // The parent cuts the link: the session times out, the assignment is lost, and the member joins
    // again without a member id once the link is back.
    while !watch.timed_out.load(SeqCst) {
        assert!(Instant::now() < deadline, "the session never timed out");
        consumer.poll(Duration::from_millis(20));
    }
    watch.joining.store(false, SeqCst);
    while !watch.joining.load(SeqCst) {
        assert!(Instant::now() < deadline, "never joined again");
        consumer.poll(Duration::from_millis(5));
    }
    // The JoinGroup is on its way over the slow link: grow the subscription now.
    consumer.subscribe(&[a, b]).expect("subscribe again");
    println!("CHILD REJOINED");
    while !holds(&consumer, b) {
        assert!(Instant::now() < deadline, "the grown subscription was never assigned");
        consumer.poll(Duration::from_millis(50));
    }
}
