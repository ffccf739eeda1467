//! ferry against a Kafka broker that authenticates clients with Kerberos (GSSAPI), with a real MIT KDC.
//!
//! - A flow from the Kerberos cluster copies byte for byte, writes checkpoints and syncs group offsets,
//!   while tickets that live 40 s are renewed by ferry every 10 s and the broker makes every connection
//!   re-authenticate every 30 s: nothing is lost, nothing copied twice, and copying never stalls.
//! - A keytab whose key was superseded fails its own flow with a reason naming the principal, the keytab
//!   and kinit's complaint, and that flow copies nothing, although another cluster definition of the
//!   same principal holds a valid ticket in the same process (what librdkafka's own kinit got wrong:
//!   the stale flow authenticated with the other flow's ticket). A fresh keytab written over the file
//!   recovers it (here with a reload; the flow's own retries log in from the file too).
//!
//! One KDC, one GSSAPI cluster (principal `ferry`) and the shared plaintext pair serve both tests,
//! which take turns.

mod support;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use support::kdc::Kdc;
use support::observe;
use support::scenario::{arrivals, assert_alive, by_position, duplicates, keyed_records, total};
use support::turn::take_turn;
use support::web::http_post;
use support::{
    Cluster, Ferry, cluster_toml, commit_group_offsets, consume_all, create_topic, end_offsets, group_offsets, produce,
    shared_pair, unique, wait_for,
};

const REALM: &str = "FERRY.TEST";
/// Shorter than the copy test, so that it lives through several.
const TICKET_LIFE: &str = "40s";
const ARRIVAL: Duration = Duration::from_secs(90);
const READ: Duration = Duration::from_secs(30);
const FAST: &str = support::flows::FAST_SECURED;

struct Bed {
    kdc: Arc<Kdc>,
    krb: Cluster,
    west: &'static Cluster,
}

fn bed() -> &'static Bed {
    static BED: OnceLock<Bed> = OnceLock::new();
    BED.get_or_init(|| {
        let kdc = Arc::new(Kdc::start(REALM, TICKET_LIFE));
        std::thread::scope(|s| {
            let pair = s.spawn(shared_pair);
            let krb = Cluster::start_secured("krb", support::Security::gssapi(&kdc, &["ferry"]));
            let (_, west) = pair.join().expect("plaintext pair");
            Bed { kdc: kdc.clone(), krb, west }
        })
    })
}

fn with(props: &[(String, String)], key: &str, value: &str) -> Vec<(String, String)> {
    support::flows::with_prop(props, key, value)
}

fn start_ferry(dir: &std::path::Path, kdc: &Kdc) -> Ferry {
    let env = kdc.client_env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Ferry::start_env(dir, &[], &env)
}

/// Copies from the Kerberos cluster for 90 s of continuous production (over two ticket lifetimes and
/// three forced re-authentications): every record arrives once, byte for byte, copying never stalls for
/// long, ferry logged in again and again (the KDC counts the logins), checkpoints and group offsets
/// follow.
#[test]
fn a_kerberos_cluster_copies_checkpoints_and_syncs_groups_across_ticket_renewals() {
    let bed = bed();
    let _turn = take_turn("kerberos copy");
    let (krb, west) = (&bed.krb, bed.west);
    let (topic, group) = (unique("krb-copy"), unique("krb-group"));
    let remote = format!("krb.{topic}");
    create_topic(&krb.bootstrap, &topic, 2, &[]);
    let props = with(&krb.client_props("ferry"), "sasl.kerberos.min.time.before.relogin", "10000");
    let dir = tempfile::tempdir().expect("flows dir");
    std::fs::write(
        dir.path().join("flows.toml"),
        [
            cluster_toml("krb", &krb.bootstrap, &props),
            cluster_toml("west", &west.bootstrap, &[]),
            format!(
                "[[flows]]\nsource = \"krb\"\ntarget = \"west\"\ntopics = [\"{topic}\"]\ngroups = [\"{group}\"]\n{FAST}"
            ),
        ]
        .concat(),
    )
    .expect("write flows");

    let logins_before = bed.kdc.initial_tickets("ferry");
    let mut ferry = start_ferry(dir.path(), &bed.kdc);
    const BATCH: usize = 20;
    const RUN: Duration = Duration::from_secs(90);
    let start = Instant::now();
    let (mut sent, mut last_seen, mut last_growth, mut longest_stall) = (0usize, 0i64, Instant::now(), Duration::ZERO);
    while start.elapsed() < RUN {
        produce(&krb.bootstrap, &topic, &keyed_records("krb", sent..sent + BATCH));
        sent += BATCH;
        std::thread::sleep(Duration::from_millis(500)); // the production rate, not a synchronisation
        assert_alive(&mut ferry);
        let seen = total(&west.bootstrap, &remote);
        if seen > last_seen || seen >= sent as i64 {
            last_seen = seen;
            last_growth = Instant::now();
        } else if seen > 0 {
            longest_stall = longest_stall.max(last_growth.elapsed());
        }
    }
    let want: Vec<Vec<u8>> = (0..sent).map(|i| format!("krb-{i}").into_bytes()).collect();
    wait_for(ARRIVAL, &format!("all {sent} records on {remote}"), || {
        assert_alive(&mut ferry);
        total(&west.bootstrap, &remote) >= sent as i64
    });
    let counts = arrivals(&west.bootstrap, &remote);
    assert!(want.iter().all(|v| counts.contains_key(v)), "records missing on {remote}");
    assert_eq!(duplicates(&counts), 0, "records copied twice on {remote}");
    assert_eq!(
        by_position(consume_all(&west.bootstrap, &remote, READ)),
        by_position(consume_all(&krb.bootstrap, &topic, READ))
    );
    let logins = bed.kdc.initial_tickets("ferry") - logins_before;
    eprintln!("{sent} records in {RUN:?}; ferry logged in {logins} times; longest stall {longest_stall:?}");
    // 90 s with a renewal every 10 s: about 9 logins; fewer than 5 means tickets were not renewed.
    assert!(logins >= 5, "ferry logged in {logins} times in {RUN:?} (renewal every 10 s)");
    assert!(longest_stall < Duration::from_secs(15), "copying stalled for {longest_stall:?}");

    // The group consumed everything on the source: checkpoints and the synced group on the target say so.
    let ends = end_offsets(&krb.bootstrap, &topic);
    let offsets: Vec<(&str, i32, i64)> = ends.iter().enumerate().map(|(p, e)| (topic.as_str(), p as i32, *e)).collect();
    commit_group_offsets(&krb.bootstrap, &group, &offsets);
    let partitions = [(remote.as_str(), 0), (remote.as_str(), 1)];
    wait_for(ARRIVAL, &format!("{group}'s offsets committed on west"), || {
        assert_alive(&mut ferry);
        group_offsets(&west.bootstrap, &group, &partitions) == vec![Some(ends[0]), Some(ends[1])]
    });
    let checkpoints: Vec<_> = consume_all(&west.bootstrap, "krb.checkpoints.internal", READ)
        .into_iter()
        .filter_map(|r| {
            ferry::mm2::records::Checkpoint::decode(r.key.as_deref().unwrap_or_default(), r.value.as_deref()).ok()
        })
        .filter(|c| c.group == group)
        .collect();
    for p in 0..2 {
        assert!(
            checkpoints.iter().any(|c| c.partition == p && c.downstream_offset == ends[p as usize]),
            "no checkpoint of {group} at the end of partition {p}: {checkpoints:?}"
        );
    }
    let flows = observe::flows(ferry.listen_addr());
    assert_eq!(flows["flows"]["krb->west"]["state"], "running", "{}", flows["flows"]["krb->west"]);
    // The tickets live in the node's own cache directory while it runs, and go with it.
    let pid = ferry.pid().expect("ferry's pid");
    let caches = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(std::env::temp_dir())
            .expect("temp dir")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&format!("ferry-krb5cc-{pid}-")))
            .map(|e| e.path())
            .collect()
    };
    assert_eq!(caches().len(), 1, "one ticket cache directory while ferry runs: {:?}", caches());
    assert!(ferry.terminate(Duration::from_secs(30)).success());
    assert!(caches().is_empty(), "ticket caches left behind: {:?}", caches());
}

/// Two cluster definitions of the same principal: one with the current keytab, one with a keytab whose
/// key was superseded. The stale one's flow is degraded with a reason naming the principal, the keytab and
/// kinit's complaint, and copies nothing, while the other flow copies; a fresh keytab over the stale file
/// (and a reload) brings it back.
#[test]
fn a_superseded_keytab_fails_its_own_flow_and_never_borrows_another_ticket() {
    let bed = bed();
    let _turn = take_turn("kerberos stale keytab");
    let (krb, west, kdc) = (&bed.krb, bed.west, &bed.kdc);
    let keys = tempfile::tempdir().expect("keytab dir");
    let stale = keys.path().join("stale.keytab");
    let current = keys.path().join("current.keytab");
    // The principal's key as it is now, then a new key: the first file is superseded.
    kdc.keytab("ferry", &stale, false);
    kdc.keytab("ferry", &current, true);
    // The cluster's own keytab file gets the current key too (other tests of this file use it).
    std::fs::copy(&current, krb.keytab("ferry")).expect("refresh the cluster's keytab");

    let (good, bad) = (unique("krb-good"), unique("krb-stale"));
    for t in [&good, &bad] {
        create_topic(&krb.bootstrap, t, 2, &[]);
    }
    produce(&krb.bootstrap, &good, &keyed_records("good", 0..40));
    produce(&krb.bootstrap, &bad, &keyed_records("bad", 0..40));
    let base = krb.client_props("ferry");
    let path = |p: &std::path::Path| p.to_str().expect("utf-8").to_string();
    let dir = tempfile::tempdir().expect("flows dir");
    std::fs::write(
        dir.path().join("flows.toml"),
        [
            cluster_toml("krb", &krb.bootstrap, &with(&base, "sasl.kerberos.keytab", &path(&current))),
            cluster_toml("krbold", &krb.bootstrap, &with(&base, "sasl.kerberos.keytab", &path(&stale))),
            cluster_toml("west", &west.bootstrap, &[]),
            format!("[[flows]]\nsource = \"krb\"\ntarget = \"west\"\ntopics = [\"{good}\"]\n{FAST}"),
            format!("[[flows]]\nsource = \"krbold\"\ntarget = \"west\"\ntopics = [\"{bad}\"]\n{FAST}"),
        ]
        .concat(),
    )
    .expect("write flows");
    let mut ferry = start_ferry(dir.path(), kdc);
    wait_for(ARRIVAL, "the good flow's 40 records", || {
        assert_alive(&mut ferry);
        total(&west.bootstrap, &format!("krb.{good}")) >= 40
    });
    let mut shown = String::new();
    wait_for(ARRIVAL, "krbold->west degraded with the login's reason", || {
        let flows = observe::flows(ferry.listen_addr());
        let flow = &flows["flows"]["krbold->west"];
        shown = flow.to_string();
        observe::flow_reasons(flow).iter().any(|r| {
            r.contains("Kerberos login as `ferry@FERRY.TEST`")
                && r.contains(&path(&stale))
                && r.contains("export a new keytab")
        }) && flow["state"] != "running"
    });
    eprintln!("krbold->west: {shown}");
    let flows = observe::flows(ferry.listen_addr());
    assert_eq!(flows["flows"]["krb->west"]["state"], "running", "{}", flows["flows"]["krb->west"]);
    // Well after the good flow copied: the stale one never authenticated, with any ticket.
    assert_eq!(total(&west.bootstrap, &format!("krbold.{bad}")), 0, "the stale keytab's flow copied records");

    // The fix an operator makes: a fresh keytab over the file, then a reload.
    std::fs::copy(&current, &stale).expect("write the fresh keytab");
    let (status, body) = http_post(ferry.listen_addr(), "/reload");
    assert!(status < 300, "POST /reload: {status} {body}");
    wait_for(ARRIVAL, "krbold->west copies after the fresh keytab", || {
        assert_alive(&mut ferry);
        total(&west.bootstrap, &format!("krbold.{bad}")) >= 40
    });
    let counts = arrivals(&west.bootstrap, &format!("krbold.{bad}"));
    assert_eq!(duplicates(&counts), 0);
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}
