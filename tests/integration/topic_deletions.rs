//! Deletions that follow (`sync_topic_deletions`), with a 3 s grace period:
//!
//! - `"dry_run"`: a remote topic whose source topic was deleted is shown in `/flows` with when it would
//!   be deleted, logged once due, and kept;
//! - turned on (a reload), the remote topic is deleted (the grace period counted from when the dry run
//!   first saw the source gone, recorded in the control topic, not from the restart), with a log line
//!   before and after and `ferry_remote_topics_deleted_total`;
//! - a remote-looking topic ferry did not create (made by hand, its source never existed) is never
//!   deleted, nor is the remote topic of a source topic that still exists, one whose source came back
//!   within the grace period, or one something else wrote after its source went.

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
    let [gone, kept, back, written] = ["gone", "kept", "back", "written"].map(|t| unique(&format!("deletions-{t}")));
    let by_hand = unique("deletions-by-hand");
    for t in [&gone, &kept, &back, &written] {
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
    let topics = [gone.as_str(), kept.as_str(), back.as_str(), written.as_str(), by_hand.as_str()];
    let dir = pair_dir(east, west, &flow("east", "west", &topics, &keys("\"dry_run\"")));
    let mut ferry = support::Ferry::start(dir.path(), &[]);
    for t in [&gone, &kept, &back, &written] {
        wait_all_arrived(&mut ferry, &west.bootstrap, &format!("east.{t}"), &values("d", 0..5));
    }
    let remote = |t: &str| format!("east.{t}");
    let pending_topics = |ferry: &support::Ferry| -> Vec<String> {
        let d = observe::flows(ferry.listen_addr())["flows"][FLOW]["topic_deletions"].clone();
        let mut names: Vec<String> =
            d.as_array().into_iter().flatten().filter_map(|p| p["topic"].as_str().map(str::to_string)).collect();
        names.sort();
        names
    };

    for t in [&gone, &back, &written] {
        delete_topic(&east.bootstrap, t);
    }
    let mut expected = vec![remote(&gone), remote(&back), remote(&written)];
    expected.sort();
    wait_showing(Duration::from_secs(60), "three pending deletions in /flows", || {
        let p = pending_topics(&ferry);
        (p == expected, p)
    });
    let pending = observe::flows(ferry.listen_addr())["flows"][FLOW]["topic_deletions"].clone();
    let first = &pending[0];
    assert_eq!(first["dry_run"], true, "{pending}");
    assert!(first["deletes_at"].is_string() && first["source_gone_since"].is_string(), "{pending}");

    // A source topic that comes back cancels its deletion; a remote topic written by someone else after its
    // source went is someone else's.
    create_topic(&east.bootstrap, &back, 1, &[]);
    produce(&west.bootstrap, &remote(&written), &records("foreign", 0..3, 1));
    ferry.wait_log("the source topic is back", Duration::from_secs(30));
    ferry.wait_log("dry run: would delete the remote topic now", Duration::from_secs(30));
    ferry.wait_log("written by something other than ferry", Duration::from_secs(30));
    wait_showing(Duration::from_secs(30), "only the deleted source's remote pending", || {
        let p = pending_topics(&ferry);
        (p == [remote(&gone)], p)
    });
    let text = observe::metrics(ferry.listen_addr());
    assert_eq!(metric_sum(&text, "ferry_remote_topics_pending_deletion", &[("flow", FLOW)]), 1.0);
    assert_eq!(metric_sum(&text, "ferry_remote_topics_deleted_total", &[("flow", FLOW)]), 0.0);
    assert!(topic_partitions(&west.bootstrap, &remote(&gone)).is_some(), "a dry run deletes nothing");

    // On: the grace period is long over (counted from the dry run's record), so the first pass deletes.
    write(dir.path(), "flow.toml", &flow("east", "west", &topics, &keys("true")));
    wait_for(Duration::from_secs(60), "the remote topic of the deleted source topic to go", || {
        assert_alive(&mut ferry);
        topic_partitions(&west.bootstrap, &remote(&gone)).is_none()
    });
    let log = ferry.log();
    let before = log.find("deleting the remote topic").expect("a line before the deletion");
    let after = log.find("deleted the remote topic").expect("a line after it");
    assert!(before < after && log[before..].contains(&remote(&gone)), "{}", support::tail(&log, 20));
    wait_showing(Duration::from_secs(30), "the deletion counted and nothing pending", || {
        let text = observe::metrics(ferry.listen_addr());
        let deleted = metric_sum(&text, "ferry_remote_topics_deleted_total", &[("flow", FLOW)]);
        let pending = metric_sum(&text, "ferry_remote_topics_pending_deletion", &[("flow", FLOW)]);
        (deleted == 1.0 && pending == 0.0, (deleted, pending))
    });
    // Never what ferry did not create, what still has its source, or what another writer uses.
    for (t, why) in [
        (&by_hand, "not ferry's"),
        (&kept, "its source exists"),
        (&back, "its source came back"),
        (&written, "written by another"),
    ] {
        assert!(topic_partitions(&west.bootstrap, &remote(t)).is_some(), "{}: {why}: kept", remote(t));
    }
    assert_alive(&mut ferry);
    let status = ferry.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status:?}");
}
