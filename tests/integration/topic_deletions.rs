//! Deletions that follow (`sync_topic_deletions`), with a 3 s grace period:
//!
//! - `"dry_run"`: a remote topic whose source topic was deleted is shown in `/flows` with when it would
//!   be deleted, logged once due, and kept;
//! - turned on (a reload), the remote topic is deleted (the grace period counted from when the dry run
//!   first saw the source gone, recorded in the control topic, not from the restart), with a log line
//!   before and after and `ferry_remote_topics_deleted_total`;
//! - a remote-looking topic ferry did not create (made by hand, its source never existed) is never
//!   deleted, nor is the remote topic of a source topic that still exists.

use crate::support;

use std::path::Path;
use std::time::Duration;

use support::observe::{self, metric_sum};
use support::scenario::*;
use support::{create_topic, delete_topic, produce, shared_pair, topic_partitions, unique, wait_for};

fn write(dir: &Path, file: &str, text: &str) {
    // Written aside and renamed, as editors do: the reload never sees half a file.
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, text).expect("write flow file");
    std::fs::rename(&tmp, dir.join(file)).expect("rename flow file");
}

#[test]
fn a_remote_topic_follows_its_source_topic_away_after_the_grace_period_and_only_ferrys_own() {
    let (east, west) = shared_pair();
    let gone = unique("deletions-gone");
    let kept = unique("deletions-kept");
    let by_hand = unique("deletions-by-hand");
    for t in [&gone, &kept] {
        create_topic(&east.bootstrap, t, 1, &[]);
        produce(&east.bootstrap, t, &records("d", 0..5, 1));
    }
    // Looks like the flow's remote topic of a source topic that is gone, but ferry did not create it.
    create_topic(&west.bootstrap, &format!("east.{by_hand}"), 1, &[]);
    let keys = |mode: &str| {
        format!(
            "sync_topic_deletions = {mode}\ntopic_deletion_grace_seconds = 3\nrefresh_topics_interval_seconds = 1\n"
        )
    };
    let topics = [gone.as_str(), kept.as_str(), by_hand.as_str()];
    let dir = pair_dir(east, west, &flow("east", "west", &topics, &keys("\"dry_run\"")));
    let mut ferry = support::Ferry::start(dir.path(), &[]);
    for t in [&gone, &kept] {
        wait_all_arrived(&mut ferry, &west.bootstrap, &format!("east.{t}"), &values("d", 0..5));
    }

    delete_topic(&east.bootstrap, &gone);
    let remote = format!("east.{gone}");
    let pending = wait_showing(Duration::from_secs(60), "the dry run's pending deletion in /flows", || {
        let d = observe::flows(ferry.listen_addr())["flows"][FLOW]["topic_deletions"].clone();
        let found = d.as_array().is_some_and(|a| a.len() == 1 && a[0]["topic"] == remote.as_str());
        (found, d)
    });
    assert_eq!(pending[0]["source_topic"], gone.as_str(), "{pending}");
    assert_eq!(pending[0]["dry_run"], true, "{pending}");
    assert!(pending[0]["deletes_at"].is_string() && pending[0]["source_gone_since"].is_string(), "{pending}");
    ferry.wait_log("dry run: would delete the remote topic now", Duration::from_secs(30));
    let text = observe::metrics(ferry.listen_addr());
    assert_eq!(metric_sum(&text, "ferry_remote_topics_pending_deletion", &[("flow", FLOW)]), 1.0);
    assert_eq!(metric_sum(&text, "ferry_remote_topics_deleted_total", &[("flow", FLOW)]), 0.0);
    assert!(topic_partitions(&west.bootstrap, &remote).is_some(), "a dry run deletes nothing");

    // On: the grace period is long over (counted from the dry run's record), so the first pass deletes.
    write(dir.path(), "flow.toml", &flow("east", "west", &topics, &keys("true")));
    wait_for(Duration::from_secs(60), "the remote topic of the deleted source topic to go", || {
        assert_alive(&mut ferry);
        topic_partitions(&west.bootstrap, &remote).is_none()
    });
    let log = ferry.log();
    let before = log.find("deleting the remote topic").expect("a line before the deletion");
    let after = log.find("deleted the remote topic").expect("a line after it");
    assert!(before < after && log[before..].contains(&remote), "{}", support::tail(&log, 20));
    wait_showing(Duration::from_secs(30), "the deletion counted and nothing pending", || {
        let text = observe::metrics(ferry.listen_addr());
        let deleted = metric_sum(&text, "ferry_remote_topics_deleted_total", &[("flow", FLOW)]);
        let pending = metric_sum(&text, "ferry_remote_topics_pending_deletion", &[("flow", FLOW)]);
        (deleted == 1.0 && pending == 0.0, (deleted, pending))
    });
    // Never what ferry did not create, nor what still has its source.
    assert!(topic_partitions(&west.bootstrap, &format!("east.{by_hand}")).is_some(), "not ferry's: kept");
    assert!(topic_partitions(&west.bootstrap, &format!("east.{kept}")).is_some(), "its source exists: kept");
    assert_alive(&mut ferry);
    let status = ferry.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status:?}");
}
