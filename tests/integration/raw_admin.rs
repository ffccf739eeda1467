//! `ferry::raw_admin` against a real Kafka (the east cluster of the shared pair): incremental topic
//! config changes, listing and describing groups, reading and writing group offsets, and what the
//! broker answers when offsets of an active group (classic and KIP-848 `consumer` protocol) are
//! written by a non-member, as MM2's offset sync does.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use ferry::raw_admin::{
    AclOperation, AdminError, CommittedOffset, ConfigOp, GroupState, alter_consumer_group_offsets, describe_cluster,
    describe_consumer_groups, incremental_alter_topic_configs, list_consumer_group_offsets, list_consumer_groups,
};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, ConfigSource, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use support::{commit_group_offsets, create_topic, group_offsets, shared_pair, unique};

const TIMEOUT: Duration = Duration::from_secs(30);

fn admin(bootstrap: &str) -> AdminClient<DefaultClientContext> {
    ClientConfig::new().set("bootstrap.servers", bootstrap).create().expect("admin client")
}

fn offset(topic: &str, partition: i32, offset: i64, metadata: &str) -> CommittedOffset {
    CommittedOffset { topic: topic.into(), partition, offset, metadata: metadata.into() }
}

/// `retention.ms` of `topic` as (value, source) according to rdkafka's DescribeConfigs.
async fn retention(admin: &AdminClient<DefaultClientContext>, topic: &str) -> (Option<String>, String) {
    let opts = AdminOptions::new().request_timeout(Some(TIMEOUT));
    let mut results =
        admin.describe_configs(&[ResourceSpecifier::Topic(topic)], &opts).await.expect("describe configs");
    let resource = results.remove(0).expect("topic config");
    let entry = resource.get("retention.ms").expect("retention.ms entry");
    (entry.value.clone(), format!("{:?}", entry.source))
}

/// Waits until `retention.ms` of `topic` reads `want`: an alteration is answered by the controller, and
/// the broker that answers DescribeConfigs applies it from the metadata log a moment later.
async fn settled(admin: &AdminClient<DefaultClientContext>, topic: &str, want: (Option<String>, String), what: &str) {
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let now = retention(admin, topic).await;
        if now == want {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: retention.ms of {topic} is {now:?}, not {want:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn incremental_alter_sets_and_deletes_a_topic_override() {
    let east = &shared_pair().0;
    let topic = unique("raw-iac");
    create_topic(&east.bootstrap, &topic, 1, &[("cleanup.policy", "delete")]);
    let admin = admin(&east.bootstrap);

    // Not a topic override: the broker's default, or the test brokers' static `log.retention.ms`.
    let (default, source) = retention(&admin, &topic).await;
    assert!(source == "Default" || source == "StaticBroker", "{source}");

    let set = [("retention.ms".to_string(), ConfigOp::Set("123456".into()))];
    incremental_alter_topic_configs(&admin, &topic, &set, TIMEOUT).await.expect("set retention.ms");
    settled(&admin, &topic, (Some("123456".into()), "DynamicTopic".into()), "the override is set").await;

    let delete = [("retention.ms".to_string(), ConfigOp::Delete)];
    incremental_alter_topic_configs(&admin, &topic, &delete, TIMEOUT).await.expect("delete retention.ms");
    settled(&admin, &topic, (default, source), "deleting the override restores what was before").await;

    // The other override is untouched (incremental, not a full replace).
    let opts = AdminOptions::new().request_timeout(Some(TIMEOUT));
    let results = admin.describe_configs(&[ResourceSpecifier::Topic(&topic)], &opts).await.expect("describe");
    let resource = results.into_iter().next().unwrap().expect("topic config");
    assert_eq!(resource.get("cleanup.policy").map(|e| &e.source), Some(&ConfigSource::DynamicTopic));

    // Errors of the topic itself come back as Err with the broker's code.
    let e = incremental_alter_topic_configs(&admin, &unique("raw-iac-missing"), &set, TIMEOUT)
        .await
        .expect_err("unknown topic");
    assert_eq!(e.name, "UNKNOWN_TOPIC_OR_PART", "{e}");
    let bad = [("retention.ms".to_string(), ConfigOp::Set("not-a-number".into()))];
    let e = incremental_alter_topic_configs(&admin, &topic, &bad, TIMEOUT).await.expect_err("bad value");
    assert_eq!(e.name, "INVALID_CONFIG", "{e}");
    assert_eq!(e.op, "IncrementalAlterConfigs");
}

#[tokio::test]
async fn idle_group_is_listed_described_read_and_written() {
    let east = &shared_pair().0;
    let topic = unique("raw-groups");
    create_topic(&east.bootstrap, &topic, 3, &[]);
    let group = unique("raw-idle");
    commit_group_offsets(&east.bootstrap, &group, &[(&topic, 0, 5), (&topic, 1, 7)]);
    let admin = admin(&east.bootstrap);

    let listed = list_consumer_groups(&admin, TIMEOUT).await.expect("list groups");
    let g = listed.iter().find(|g| g.group_id == group).unwrap_or_else(|| panic!("{group} not in {listed:?}"));
    assert_eq!(g.state, GroupState::Empty);
    assert!(g.is_simple, "a group that only had offsets committed is simple: {g:?}");

    let missing = unique("raw-missing");
    let described = describe_consumer_groups(&admin, &[group.clone(), missing.clone(), group.clone()], TIMEOUT)
        .await
        .expect("describe");
    assert_eq!(described.len(), 2, "duplicates are described once: {described:?}");
    assert_eq!(described[0].group_id, group);
    assert_eq!((&described[0].state, described[0].members, &described[0].error), (&GroupState::Empty, 0, &None));
    // Kafka 4.3 answers ConsumerGroupDescribe for an unknown group with GROUP_ID_NOT_FOUND; librdkafka
    // 2.12 then falls back to DescribeGroups, which says Dead without an error.
    assert_eq!(described[1].group_id, missing);
    assert_eq!((&described[1].state, described[1].members, &described[1].error), (&GroupState::Dead, 0, &None));
    assert!(describe_consumer_groups(&admin, &[], TIMEOUT).await.expect("describe nothing").is_empty());
    // Without an authorizer, every group operation is authorized, also on a group that does not exist.
    for d in &described {
        let ops = d.authorized_operations.as_deref().unwrap_or_default();
        assert!(ops.contains(&AclOperation::Read) && ops.contains(&AclOperation::Describe), "{d:?}");
    }

    let mut offsets = list_consumer_group_offsets(&admin, &group, TIMEOUT).await.expect("list offsets");
    offsets.sort_by_key(|o| o.partition);
    assert_eq!(offsets, vec![offset(&topic, 0, 5, ""), offset(&topic, 1, 7, "")]);
    assert!(list_consumer_group_offsets(&admin, &missing, TIMEOUT).await.expect("unknown group").is_empty());

    // Write with metadata (as MM2 does: the upstream metadata), read back both ways.
    let new = [offset(&topic, 0, 9, "upstream meta"), offset(&topic, 2, 3, "")];
    alter_consumer_group_offsets(&admin, &group, &new, TIMEOUT).await.expect("alter offsets");
    assert_eq!(
        group_offsets(&east.bootstrap, &group, &[(&topic, 0), (&topic, 1), (&topic, 2)]),
        [Some(9), Some(7), Some(3)]
    );
    let mut offsets = list_consumer_group_offsets(&admin, &group, TIMEOUT).await.expect("list offsets");
    offsets.sort_by_key(|o| o.partition);
    assert_eq!(
        offsets,
        vec![offset(&topic, 0, 9, "upstream meta"), offset(&topic, 1, 7, ""), offset(&topic, 2, 3, "")]
    );

    // Writing to a group that does not exist creates it (a "simple" group).
    let fresh = unique("raw-fresh");
    alter_consumer_group_offsets(&admin, &fresh, &[offset(&topic, 1, 4, "m")], TIMEOUT).await.expect("alter fresh");
    assert_eq!(group_offsets(&east.bootstrap, &fresh, &[(&topic, 1)]), [Some(4)]);

    // Local argument checks.
    let e = alter_consumer_group_offsets(&admin, &group, &[offset(&topic, 0, -1, "")], TIMEOUT).await.expect_err("-1");
    assert_eq!(e.name, "_INVALID_ARG", "{e}");
    alter_consumer_group_offsets(&admin, &group, &[], TIMEOUT).await.expect("nothing to write");
}

/// A consumer that is a member of `group` (subscribed to `topic`, polled on its own thread) until
/// dropped.
struct Member {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Member {
    /// Joins with `group.protocol` = `protocol` and returns once the member has an assignment.
    fn join(bootstrap: &str, group: &str, topic: &str, protocol: &str) -> Member {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", group)
            .set("group.protocol", protocol)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .create()
            .unwrap_or_else(|e| panic!("consumer ({protocol}) for {group}: {e}"));
        consumer.subscribe(&[topic]).expect("subscribe");
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::spawn({
            let stop = stop.clone();
            move || {
                let mut tx = Some(tx);
                while !stop.load(Ordering::Relaxed) {
                    if let Some(Err(e)) = consumer.poll(Duration::from_millis(100)) {
                        eprintln!("member poll: {e}");
                    }
                    if tx.is_some() && consumer.assignment().is_ok_and(|a| a.count() > 0) {
                        let _ = tx.take().unwrap().send(());
                    }
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("{protocol} member of {group} got no assignment within 60 s"));
        Member { stop, thread: Some(thread) }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Describes `group` (one member expected), then tries to overwrite its offset of partition 0 as a
/// non-member: the broker must refuse, and the committed offset must stay. Returns what describe
/// and alter said.
/// DescribeCluster: the cluster's id and one broker, and (no authorizer) every cluster operation for anyone;
/// an address nobody listens on is a `_TIMED_OUT` within the timeout.
#[tokio::test]
async fn the_cluster_is_described_with_what_the_caller_may_do() {
    let east = &shared_pair().0;
    let d = describe_cluster(&admin(&east.bootstrap), TIMEOUT).await.expect("describe cluster");
    assert_eq!(d.brokers, 1, "{d:?}");
    assert!(d.cluster_id.as_deref().is_some_and(|id| id.len() == 22), "{d:?}");
    let ops = d.authorized_operations.clone().unwrap_or_default();
    assert!(ferry::check::rights::unrestricted(&ops), "{d:?}");

    let nowhere = admin(&format!("127.0.0.1:{}", support::free_port()));
    let started = std::time::Instant::now();
    let e = describe_cluster(&nowhere, Duration::from_secs(2)).await.expect_err("nobody there");
    assert_eq!(e.name, "_TIMED_OUT", "{e}");
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
}

async fn alter_active_group(protocol: &str) -> (GroupState, usize, AdminError) {
    let east = &shared_pair().0;
    let topic = unique("raw-active");
    create_topic(&east.bootstrap, &topic, 2, &[]);
    let group = unique(&format!("raw-active-{protocol}"));
    commit_group_offsets(&east.bootstrap, &group, &[(&topic, 0, 2)]);
    let admin = admin(&east.bootstrap);

    let member = Member::join(&east.bootstrap, &group, &topic, protocol);
    let described = describe_consumer_groups(&admin, std::slice::from_ref(&group), TIMEOUT).await.expect("describe");
    let d = &described[0];
    assert_eq!(d.error, None, "{d:?}");
    let listed = list_consumer_groups(&admin, TIMEOUT).await.expect("list");
    let l = listed.iter().find(|g| g.group_id == group).unwrap_or_else(|| panic!("{group} not listed: {listed:?}"));
    let e = alter_consumer_group_offsets(&admin, &group, &[offset(&topic, 0, 10, "mm2")], TIMEOUT)
        .await
        .expect_err("the broker must refuse a non-member commit to an active group");
    eprintln!(
        "{protocol} active group: describe {:?} with {} member(s), list {:?}, alter: {e}",
        d.state, d.members, l.state
    );
    assert_eq!(e.op, "AlterConsumerGroupOffsets");
    assert!(e.message.contains(&format!("{topic}-0")), "the error names the partition: {e}");
    assert_eq!(group_offsets(&east.bootstrap, &group, &[(&topic, 0)]), [Some(2)], "offset unchanged");
    drop(member);
    (d.state.clone(), d.members, e)
}

#[tokio::test]
async fn alter_offsets_of_an_active_classic_group_is_refused() {
    let (state, members, e) = alter_active_group("classic").await;
    assert_eq!((state, members), (GroupState::Stable, 1));
    // Kafka 4.3 (classic group with a member, generation -1 commit): UNKNOWN_MEMBER_ID, as MM2 expects.
    assert_eq!((e.code, e.name.as_str()), (25, "UNKNOWN_MEMBER_ID"), "{e}");
}

#[tokio::test]
async fn alter_offsets_of_an_active_consumer_protocol_group_is_refused() {
    let (state, members, e) = alter_active_group("consumer").await;
    // A KIP-848 group with its one member reconciled is Stable (librdkafka 2.12 would say Unknown
    // while it is Assigning or Reconciling: it does not know those states).
    assert_eq!((state, members), (GroupState::Stable, 1));
    assert_eq!((e.code, e.name.as_str()), (25, "UNKNOWN_MEMBER_ID"), "{e}");
}

/// A group call (ListConsumerGroupOffsets) that times out while no broker answers, and the cluster
/// coming back afterwards: the process lives on. librdkafka 2.12.1 freed the call's bookkeeping when the
/// late coordinator lookup found the call gone, then read it again (librdkafka#4605): the process
/// aborted on `rd_kafka_enq_once_del_source_return: Assertion 'eonce->refcnt > 0'` as soon as the
/// coordinator answered, after any outage that outlasted a group call's timeout. The call runs in a
/// child process (this test binary, running the ignored test below) so that an abort fails this test
/// instead of ending the whole suite.
#[test]
fn a_group_call_that_timed_out_during_an_outage_does_not_abort_the_process_when_the_cluster_returns() {
    let east = &shared_pair().0;
    let out = support::process::child_test("raw_admin::child_group_call_timed_out_during_an_outage")
        .env(CHILD_BOOTSTRAP, &east.bootstrap)
        .output()
        .expect("run the child");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the child process ended with {}:\n{text}", out.status);
    assert!(text.contains("1 passed"), "the child ran no test:\n{text}");
}

const CHILD_BOOTSTRAP: &str = "FERRY_TEST_CHILD_BOOTSTRAP";

#[test]
#[ignore = "run in a child process by a_group_call_that_timed_out_during_an_outage_does_not_abort_..."]
fn child_group_call_timed_out_during_an_outage() {
    let Ok(cluster) = std::env::var(CHILD_BOOTSTRAP) else { return };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    // The admin client's only bootstrap address is a port where nothing listens yet: the outage.
    let port = support::free_port();
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", format!("127.0.0.1:{port}"))
        .set("reconnect.backoff.max.ms", "500")
        .create()
        .expect("admin client");
    let group = unique("outage-group");
    let e = rt.block_on(list_consumer_group_offsets(&admin, &group, Duration::from_secs(1))).expect_err("no broker");
    assert_eq!(e.name, "_TIMED_OUT", "{e}");
    // The cluster returns: the port now forwards to the real broker.
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind the outage port");
    std::thread::spawn(move || forward(listener, cluster));
    // Connections come up, the timed-out call's coordinator lookup goes on, and later calls succeed.
    rt.block_on(describe_cluster(&admin, TIMEOUT)).expect("the cluster answers again");
    // (A cluster fresh in this run may still be loading or moving its group coordinator: asked again
    // meanwhile, as ferry asks again next round. librdkafka 2.12.1 crashed (SIGSEGV) on NOT_COORDINATOR
    // here: an admin client has no consumer group to re-query; see vendor/README.md.)
    let deadline = std::time::Instant::now() + TIMEOUT;
    let mut answered = 0;
    while answered < 3 {
        match rt.block_on(list_consumer_group_offsets(&admin, &group, TIMEOUT)) {
            Ok(_) => answered += 1,
            Err(e)
                if (e.name.starts_with("COORDINATOR_") || e.name == "NOT_COORDINATOR")
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("group offsets after the outage: {e}"),
        }
    }
    rt.block_on(describe_consumer_groups(&admin, &[group], TIMEOUT)).expect("describe after the outage");
}

/// Forwards every connection accepted on `listener` to `to`, both ways, until either side closes.
fn forward(listener: std::net::TcpListener, to: String) {
    for client in listener.incoming().flatten() {
        let Ok(upstream) = std::net::TcpStream::connect(&to) else { continue };
        for (mut from, mut into) in
            [(client.try_clone().expect("dup"), upstream.try_clone().expect("dup")), (upstream, client)]
        {
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut from, &mut into);
                let _ = into.shutdown(std::net::Shutdown::Both);
            });
        }
    }
}
