//! The fence on group offset sync: a flow's translated offsets are committed to a target group inside a
//! transaction of the flow's checkpoint producer, so an ex-leader whose producer the new leader fenced
//! commits nothing. Against real brokers: the transactional commit itself (and what the broker checks of
//! it), then two ferry nodes sharing a flow with the leader SIGSTOPped past the lease's session timeout.

use crate::support;

use std::time::{Duration, Instant};

use ferry::raw_admin::{self, CommittedOffset};
use rdkafka::producer::{BaseProducer, Producer};
use support::observe::{self, metric_sum};
use support::scenario::*;
use support::{
    ActiveMember, Ferry, client_config, commit_group_offsets, create_topic, group_offsets, produce, shared_pair,
    unique, wait_for,
};

const TIMEOUT: Duration = Duration::from_secs(30);

fn transactional_producer(bootstrap: &str, id: &str) -> BaseProducer {
    let producer: BaseProducer =
        client_config(bootstrap, &[]).set("transactional.id", id).create().expect("transactional producer");
    producer.init_transactions(TIMEOUT).expect("init transactions");
    producer
}

fn at(topic: &str, offset: i64) -> Vec<CommittedOffset> {
    vec![CommittedOffset { topic: topic.into(), partition: 0, offset, metadata: String::new() }]
}

/// Commits `offsets` of `group` in one transaction of `producer`.
fn commit(producer: &BaseProducer, group: &str, offsets: &[CommittedOffset]) -> Result<(), raw_admin::TxnError> {
    producer.begin_transaction().expect("begin");
    raw_admin::send_offsets_to_transaction(producer, group, offsets, TIMEOUT)?;
    producer.commit_transaction(TIMEOUT).expect("commit");
    Ok(())
}

#[test]
fn a_fenced_producer_commits_no_group_offsets() {
    let (_, west) = shared_pair();
    let topic = unique("fence-txn");
    create_topic(&west.bootstrap, &topic, 1, &[]);
    let group = format!("{topic}-g");
    let offset = || group_offsets(&west.bootstrap, &group, &[(&topic, 0)])[0];
    let id = unique("fence-txn-id");
    let old = transactional_producer(&west.bootstrap, &id);
    commit(&old, &group, &at(&topic, 7)).expect("a transactional commit to an absent group");
    assert_eq!(offset(), Some(7), "committed with the transaction");

    // A new producer with the same transactional id fences the old one.
    let new = transactional_producer(&west.bootstrap, &id);
    old.begin_transaction().expect("begin is local");
    let e = raw_admin::send_offsets_to_transaction(&old, &group, &at(&topic, 9), TIMEOUT)
        .expect_err("the fenced producer's commit is refused");
    println!("fenced producer: {e} (fatal {}, fenced {})", e.fatal, e.is_fenced());
    assert!(e.is_fenced() && e.fatal, "a fencing error: {e:?}");
    assert_eq!(offset(), Some(7), "nothing of the fenced producer's commit");
    commit(&new, &group, &at(&topic, 11)).expect("the new producer commits");
    assert_eq!(offset(), Some(11));
}

/// What the broker checks of a transactional commit from outside a group (generation -1, no member id)
/// while the group has members: a plain commit like it is refused (what MM2 relies on); this one is not,
/// so ferry's own check that the group is Empty is what keeps group offset sync off active groups.
#[test]
fn the_broker_takes_a_transactional_commit_from_outside_a_group_that_has_members() {
    let (_, west) = shared_pair();
    let topic = unique("fence-member");
    create_topic(&west.bootstrap, &topic, 1, &[]);
    let group = format!("{topic}-g");
    let member = ActiveMember::join(&west.bootstrap, &group, &topic);
    let producer = transactional_producer(&west.bootstrap, &unique("fence-member-id"));
    let result = commit(&producer, &group, &at(&topic, 5));
    println!("transactional commit to a group with a member: {result:?}, committed {:?}", member.committed());
    assert!(result.is_ok(), "the broker accepts it: {result:?}");
    assert_eq!(member.committed(), Some(5));
}

fn node_dir(east: &str, west: &str, topic: &str, group: &str, sync_interval: u64) -> tempfile::TempDir {
    let extra = format!(
        "groups = [\"{group}\"]\nemit_checkpoints_interval_seconds = 1\nrefresh_groups_interval_seconds = 1\n\
         sync_group_offsets_enabled = true\nsync_group_offsets_interval_seconds = {sync_interval}\n"
    );
    flows_dir(&[("east", east), ("west", west)], &flow("east", "west", &[topic], &extra))
}

fn leads(node: &Ferry) -> bool {
    metric_sum(&observe::metrics(node.listen_addr()), "ferry_leader", &[("flow", FLOW), ("duty", "checkpoints")]) == 1.0
}

#[test]
fn a_paused_ex_leader_commits_no_group_offsets_after_the_new_leader_started() {
    let (east, west) = shared_pair();
    let topic = unique("fence-sync");
    let group = format!("{topic}-g");
    create_topic(&east.bootstrap, &topic, 1, &[]);
    produce(&east.bootstrap, &topic, &records("r", 0..100, 1));
    // n1 syncs the group every second; n2, the next leader, not within the test (its first sync is an
    // hour after it starts): what the group holds on west after n1's pause is the operator's doing.
    let deployment = unique("fence-deploy");
    let start = |node: &str, dir: &tempfile::TempDir| {
        let env = [("FERRY_NODE_ID", node), ("FERRY_DEPLOYMENT", deployment.as_str())];
        let mut ferry = Ferry::start_env(dir.path(), &[], &env);
        ferry.wait_log("node started", STARTED);
        ferry
    };
    let (dir1, dir2) = (
        node_dir(&east.bootstrap, &west.bootstrap, &topic, &group, 1),
        node_dir(&east.bootstrap, &west.bootstrap, &topic, &group, 3600),
    );
    let mut n1 = start("n1", &dir1);
    wait_for(ARRIVAL, "n1 leads", || {
        assert_alive(&mut n1);
        leads(&n1)
    });
    let remote = format!("east.{topic}");
    let on_west = || group_offsets(&west.bootstrap, &group, &[(&remote, 0)])[0];
    commit_group_offsets(&east.bootstrap, &group, &[(&topic, 0, 60)]);
    wait_for(ARRIVAL, "n1 syncs the idle group to 60 on west", || on_west() == Some(60));
    let mut n2 = start("n2", &dir2);

    // n1 pauses past the lease's session timeout; n2 takes the lease and its checkpoint producer
    // starts, fencing n1's.
    let pid = n1.pid().expect("pid");
    support::process::signal(pid, "STOP");
    wait_for(Duration::from_secs(60), "n2 leads while n1 is paused", || {
        assert_alive(&mut n2);
        leads(&n2)
    });
    // The producer starts with the first group (the group is there): its fence is logged.
    n2.wait_log("checkpoint producer started", ARRIVAL);
    // Meanwhile an operator moves the idle group back on west.
    commit_group_offsets(&west.bootstrap, &group, &[(&remote, 0, 20)]);
    assert_eq!(on_west(), Some(20));
    support::process::signal(pid, "CONT");
    // n1 resumes believing for a moment that it still leads, with a group sync overdue.
    let resumed = Instant::now();
    let mut seen = Vec::new();
    while resumed.elapsed() < Duration::from_secs(20) {
        let o = on_west();
        if seen.last() != Some(&o) {
            seen.push(o);
        }
        assert_eq!(o, Some(20), "the group's offset on west after n1 resumed (values seen {seen:?})");
        std::thread::sleep(Duration::from_millis(200)); // the observation window's polling pace
    }
    let tried = n1.log().contains("group offset sync refused: another node leads the flow now");
    println!("after SIGCONT: offsets seen on west {seen:?}; n1 tried and was fenced: {tried}");
    assert!(tried, "n1 tried its overdue group sync and was refused (else this test proves nothing)");
    assert!(leads(&n2) && !leads(&n1), "n2 leads, n1 gave the lease up");
    for mut f in [n1, n2] {
        assert!(f.terminate(Duration::from_secs(30)).success());
    }
}
