//! ferry against a Kafka broker that authenticates clients with Kerberos (GSSAPI), with a real MIT KDC.
//!
//! - A flow from the Kerberos cluster copies byte for byte, writes checkpoints and syncs group offsets,
//!   while tickets that live 40 s are renewed by ferry at 80 % of their life (the KDC sees the logins
//!   32 s apart) and the broker makes every connection re-authenticate every 30 s: nothing is lost,
//!   nothing copied twice, copying never stalls, and a renewal keeps the service tickets the clients
//!   already hold.
//! - A keytab whose key was superseded fails its own flow with a reason naming the principal, the keytab
//!   and kinit's complaint, and that flow copies nothing, although another cluster definition of the
//!   same principal holds a valid ticket in the same process (what librdkafka's own kinit got wrong:
//!   the stale flow authenticated with the other flow's ticket). A fresh keytab written over the file
//!   recovers it (here with a reload; the flow's own retries log in from the file too). A superseded
//!   keytab written over a good one is refused by the reload, which names it (the keytab's content is
//!   part of the login), and the running flow goes on.
//! - With `FERRY_KRB5_CCACHE_DIR` set for the node and for a command run beside it (as in the Kubernetes
//!   example), the command leaves the node's tickets alone and removes its own; a reload that leaves no
//!   flow of the principal deletes its ticket at once; the node removes its directory at exit.
//! - The clients of a starting node share one login (one kinit at a time per login).
//! - A node whose first login failed records a pause on its Kerberos target (the control topic's
//!   producer is made when first needed).
//! - With a `krb5.conf` that tells no broker's realm, the node's single principal still serves (its cache
//!   is the collection's primary).
//!
//! One KDC, one GSSAPI cluster (principal `ferry`) and the shared plaintext pair serve all the tests,
//! which take turns.

use crate::support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use support::kdc::Kdc;
use support::observe;
use support::scenario::{arrivals, assert_alive, by_position, duplicates, keyed_records, total};
use support::turn::take_turn;
use support::web::http_post;
use support::{
    Cluster, Ferry, cluster_toml, commit_group_offsets, consume_all, create_topic, end_offsets, ferry_cli_env,
    group_offsets, produce, shared_pair, unique, wait_for,
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
    start_with_env(dir, &kdc.client_env())
}

fn start_with_env(dir: &Path, env: &[(String, String)]) -> Ferry {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Ferry::start_env(dir, &[], &env)
}

/// The clusters `krb` (logged in as `ferry`) and `west` of a flows file.
fn clusters_toml(bed: &Bed) -> String {
    [
        cluster_toml("krb", &bed.krb.bootstrap, &bed.krb.client_props("ferry")),
        cluster_toml("west", &bed.west.bootstrap, &[]),
    ]
    .concat()
}

/// A flow `source` -> `target` of `topic` that checkpoints and refreshes fast.
fn flow_toml(source: &str, target: &str, topic: &str) -> String {
    format!("[[flows]]\nsource = \"{source}\"\ntarget = \"{target}\"\ntopics = [\"{topic}\"]\n{FAST}")
}

/// A flows directory with `toml` as its flows file.
fn flows_dir_of(toml: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("flows dir");
    std::fs::write(dir.path().join("flows.toml"), toml).expect("write flows");
    dir
}

/// A node started with `env`, with one flow `source` -> `target` (`krb` or `west`) of a new topic, once
/// it copied the 20 records written to that topic first. Also its flows dir, the topic and its remote.
struct Copying {
    ferry: Ferry,
    flows: tempfile::TempDir,
    topic: String,
    remote: String,
}

fn node_that_copied(bed: &Bed, source: &str, target: &str, env: &[(String, String)]) -> Copying {
    let bootstrap = |alias: &str| if alias == "krb" { bed.krb.bootstrap.clone() } else { bed.west.bootstrap.clone() };
    let topic = unique(&format!("krb-{source}"));
    let remote = format!("{source}.{topic}");
    create_topic(&bootstrap(source), &topic, 2, &[]);
    produce(&bootstrap(source), &topic, &keyed_records("k", 0..20));
    let flows = flows_dir_of(&(clusters_toml(bed) + &flow_toml(source, target, &topic)));
    let mut ferry = start_with_env(flows.path(), env);
    let start = Instant::now();
    while total(&bootstrap(target), &remote) < 20 {
        assert_alive(&mut ferry);
        if start.elapsed() > ARRIVAL {
            let flows = observe::flows(ferry.listen_addr());
            panic!(
                "no 20 records on {remote} within {ARRIVAL:?}; the flow: {}",
                flows["flows"][format!("{source}->{target}")]
            );
        }
        std::thread::sleep(Duration::from_millis(250)); // the polling interval
    }
    Copying { ferry, flows, topic, remote }
}

/// Copies from the Kerberos cluster for 90 s of continuous production (over two ticket lifetimes and
/// three forced re-authentications): every record arrives once, byte for byte, copying never stalls for
/// long, ferry renewed its ticket at 80 % of the ticket's life (the KDC's record of its logins), the
/// first renewal kept the service tickets in the cache, checkpoints and group offsets follow.
#[test]
fn a_kerberos_cluster_copies_checkpoints_and_syncs_groups_across_ticket_renewals() {
    let bed = bed();
    let _turn = take_turn("kerberos copy");
    let (krb, west) = (&bed.krb, bed.west);
    let (topic, group) = (unique("krb-copy"), unique("krb-group"));
    let remote = format!("krb.{topic}");
    create_topic(&krb.bootstrap, &topic, 2, &[]);
    // A minimum below the 32 s at which the ticket is due: the ticket's life decides.
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

    let logins_before = bed.kdc.login_times("ferry").len();
    let mut ferry = start_ferry(dir.path(), &bed.kdc);
    let pid = ferry.pid().expect("ferry's pid");
    const BATCH: usize = 20;
    const RUN: Duration = Duration::from_secs(90);
    let start = Instant::now();
    let (mut sent, mut last_seen, mut last_growth, mut longest_stall) = (0usize, 0i64, Instant::now(), Duration::ZERO);
    let mut renewal = ServiceTicketsAcrossRenewal::default();
    while start.elapsed() < RUN {
        produce(&krb.bootstrap, &topic, &keyed_records("krb", sent..sent + BATCH));
        sent += BATCH;
        std::thread::sleep(Duration::from_millis(500)); // the production rate, not a synchronisation
        assert_alive(&mut ferry);
        if let [node] = cache_dirs(&std::env::temp_dir(), pid).as_slice() {
            renewal.look(&bed.kdc.klist_collection(node));
        }
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
    let logins = bed.kdc.login_times("ferry").split_off(logins_before);
    let gaps: Vec<u64> = logins.windows(2).map(|w| w[1] - w[0]).collect();
    eprintln!(
        "{sent} records in {RUN:?}; ferry's logins at {logins:?} ({gaps:?} s apart); longest stall {longest_stall:?}"
    );
    renewal.assert_kept();
    // 40 s tickets, renewed at 80 % of their life: logins 32 s apart (the renewer looks every second).
    assert!(
        gaps.len() >= 2 && gaps.iter().all(|g| (30..=36).contains(g)),
        "ferry's logins of 40 s tickets came {gaps:?} s apart in {RUN:?}, not at 80 % of the ticket's life (32 s)"
    );
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
    assert_eq!(flows["flows"]["krb->west"]["state"], "running", "the flow kept: {}", flows["flows"]["krb->west"]);
    // The tickets live in the node's own cache directory while it runs, and go with it.
    let caches = || cache_dirs(&std::env::temp_dir(), pid);
    assert_eq!(caches().len(), 1, "one ticket cache directory while ferry runs: {:?}", caches());
    assert!(ferry.terminate(Duration::from_secs(30)).success());
    assert!(caches().is_empty(), "ticket caches left behind: {:?}", caches());
}

/// The ticket-cache directories of ferry process `pid` under `parent`.
fn cache_dirs(parent: &Path, pid: u32) -> Vec<PathBuf> {
    std::fs::read_dir(parent)
        .map(|dir| {
            dir.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&format!("ferry-krb5cc-{pid}-")))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Watches a node's tickets (`klist -A` of its collection) across its first renewal: every service
/// ticket the node held with its first ticket-granting ticket (all valid until that ticket's end, after
/// the renewal at 80 % of its life) is still in the cache with the new one.
#[derive(Default)]
struct ServiceTicketsAcrossRenewal {
    /// The first ticket-granting ticket and the service tickets seen with it.
    first: Option<(String, BTreeSet<String>)>,
    /// After the renewal: the new ticket-granting ticket and the service tickets then.
    renewed: Option<(String, BTreeSet<String>)>,
}

impl ServiceTicketsAcrossRenewal {
    fn look(&mut self, klist: &str) {
        let lines = || klist.lines().map(str::trim);
        let Some(tgt) = lines().find(|l| l.contains("krbtgt/")).map(str::to_string) else { return };
        let services: BTreeSet<String> = lines().filter(|l| l.contains("kafka/")).map(str::to_string).collect();
        match &mut self.first {
            _ if self.renewed.is_some() => {}
            None => self.first = Some((tgt, services)),
            Some((first, seen)) if *first == tgt => seen.extend(services),
            Some(_) => self.renewed = Some((tgt, services)),
        }
    }

    fn assert_kept(&self) {
        let (Some((_, before)), Some((tgt, after))) = (&self.first, &self.renewed) else {
            panic!("no renewal of the node's ticket seen in its cache: {:?}", self.first)
        };
        assert!(!before.is_empty(), "the node held no service ticket before its first renewal");
        assert!(
            before.is_subset(after),
            "the renewal ({tgt}) dropped the service tickets the node held: before it {before:?}, after it {after:?}"
        );
    }
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
    wait_for(ARRIVAL, "krb->west running", || {
        observe::flows(ferry.listen_addr())["flows"]["krb->west"]["state"] == "running"
    });
    // Well after the good flow copied: the stale one never authenticated, with any ticket.
    assert_eq!(total(&west.bootstrap, &format!("krbold.{bad}")), 0, "the stale keytab's flow copied records");

    // The fix an operator makes: a fresh keytab over the file, then a reload.
    let superseded = std::fs::read(&stale).expect("read the stale keytab");
    std::fs::copy(&current, &stale).expect("write the fresh keytab");
    let (status, body) = http_post(ferry.listen_addr(), "/reload");
    assert!(status < 300, "POST /reload: {status} {body}");
    wait_for(ARRIVAL, "krbold->west copies after the fresh keytab", || {
        assert_alive(&mut ferry);
        total(&west.bootstrap, &format!("krbold.{bad}")) >= 40
    });
    let counts = arrivals(&west.bootstrap, &format!("krbold.{bad}"));
    assert_eq!(duplicates(&counts), 0);

    // The other way round: a superseded key written over the good file. The keytab's content is part of
    // the login, so the reload logs in from the new content at once and, as that fails, keeps the
    // cluster's flow as it was, naming why (the ticket from the file's earlier content does not pass
    // for the new content's login).
    std::fs::write(&current, superseded).expect("write the superseded keytab");
    let (status, body) = http_post(ferry.listen_addr(), "/reload");
    assert!(status < 300, "POST /reload: {status} {body}");
    let reload: serde_json::Value = serde_json::from_str(&body).expect("the reload's answer");
    let error = reload["error"].as_str().unwrap_or_default();
    assert!(
        reload["result"] == "rolled_back" && error.contains(&path(&current)) && error.contains("export a new keytab"),
        "the reload took a superseded keytab: {body}"
    );
    let flows = observe::flows(ferry.listen_addr());
    assert_eq!(flows["flows"]["krb->west"]["state"], "running", "{}", flows["flows"]["krb->west"]);
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

/// `FERRY_KRB5_CCACHE_DIR` names where the ferry processes of a pod keep their tickets: the Kubernetes
/// example sets it for the container, so the `ferry translate` that the failover runbook runs there
/// (`kubectl exec`) has it too. That command logs in as well; it leaves the node's tickets as they were
/// and takes its own with it. A reload that leaves no flow of the node's principal deletes that
/// principal's ticket, and the node takes its directory with it when it exits.
#[test]
fn a_command_run_beside_the_node_leaves_the_nodes_tickets_alone() {
    let bed = bed();
    let _turn = take_turn("kerberos cache dir");
    let (krb, west, kdc) = (&bed.krb, bed.west, &bed.kdc);
    let volume = tempfile::tempdir().expect("the pod's ticket volume");
    let mut env = kdc.client_env();
    env.push(("FERRY_KRB5_CCACHE_DIR".into(), volume.path().to_str().expect("utf-8").into()));
    let Copying { mut ferry, flows: node_flows, topic, remote } = node_that_copied(bed, "krb", "west", &env);
    let node = tickets(volume.path());
    assert!(!node.is_empty(), "no ticket of the node under {}", volume.path().display());

    // The runbook's command with the pod's environment, on a flow whose target is the Kerberos cluster:
    // it logs in to read the checkpoints there (none of the group: it fails after logging in).
    support::client::ensure_topic(&krb.bootstrap, "west.checkpoints.internal", 1);
    let command_flows = flows_dir_of(&(clusters_toml(bed) + &flow_toml("west", "krb", &unique("krb-none"))));
    let logins_before = kdc.login_times("ferry").len();
    let flows_arg = command_flows.path().to_str().expect("utf-8");
    let group = unique("krb-group");
    let args = ["translate", "--flows", flows_arg, "--flow", "west->krb", "--group", &group];
    let ran = Instant::now();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (code, out, err) = ferry_cli_env(&args, &env);
    let (ran, logins) = (ran.elapsed(), kdc.login_times("ferry").len() - logins_before);
    let ran =
        format!("ferry logged in {logins} times during the {ran:?} of `ferry translate` (exit {code}: {out}{err})");
    assert!(logins >= 1, "`ferry translate` did not log in: {ran}");
    let after = tickets(volume.path());
    let touched: Vec<String> = node
        .iter()
        .filter(|(path, bytes)| after.get(*path) != Some(bytes))
        .map(|(path, _)| format!("{} {}", if after.contains_key(path) { "rewrote" } else { "deleted" }, path.display()))
        .collect();
    assert!(touched.is_empty(), "`ferry translate` {touched:?} of the node's tickets; {ran}");
    let left: Vec<&PathBuf> = after.keys().filter(|p| !node.contains_key(*p)).collect();
    assert!(left.is_empty(), "`ferry translate` left tickets behind: {left:?}");
    produce(&krb.bootstrap, &topic, &keyed_records("k", 20..40));
    wait_for(ARRIVAL, &format!("40 records on {remote}"), || {
        assert_alive(&mut ferry);
        total(&west.bootstrap, &remote) >= 40
    });

    // No flow of the node uses the principal any more: its ticket goes at once, not when the node exits.
    std::fs::write(node_flows.path().join("flows.toml"), cluster_toml("west", &west.bootstrap, &[])).expect("write");
    let (status, body) = http_post(ferry.listen_addr(), "/reload");
    assert!(status < 300, "POST /reload: {status} {body}");
    wait_for(Duration::from_secs(30), "the node's ticket deleted after its last Kerberos cluster went", || {
        tickets(volume.path()).keys().all(|p| p.file_name().is_some_and(|n| n == "primary"))
    });
    assert!(ferry.terminate(Duration::from_secs(30)).success());
    let remains: Vec<PathBuf> =
        std::fs::read_dir(volume.path()).expect("the volume").flatten().map(|e| e.path()).collect();
    assert!(remains.is_empty(), "left in {} after the node exited: {remains:?}", volume.path().display());
}

/// Every ticket cache (and collection's primary) under `dir` and one level below, with its bytes.
fn tickets(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let entries = |d: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(d).map(|r| r.flatten().map(|e| e.path()).collect()).unwrap_or_default()
    };
    let mut files = entries(dir);
    files.extend(entries(dir).iter().filter(|p| p.is_dir()).flat_map(|d| entries(d)));
    files
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("tkt") || n == "primary"))
        .filter_map(|p| Some((p.clone(), std::fs::read(&p).ok()?)))
        .collect()
}

/// The clients of a starting node (consumers, producers, admin clients of several threads) all ask for
/// the login at once: one `kinit` runs, the others wait for its result, and the KDC issues one ticket
/// (a failure point makes each kinit take 1.5 s).
#[test]
fn the_clients_of_a_starting_node_share_one_login() {
    let bed = bed();
    let _turn = take_turn("kerberos one login at start");
    let kdc = &bed.kdc;
    let mut env = kdc.client_env();
    env.push(("FAILPOINTS".into(), "kerberos-kinit=sleep(1500)".into()));
    let logins_before = kdc.login_times("ferry").len();
    let Copying { mut ferry, .. } = node_that_copied(bed, "krb", "west", &env);
    // The logins of the start only: the ticket is renewed 32 s after it.
    let logins = kdc.login_times("ferry").split_off(logins_before);
    let at_start: Vec<u64> =
        logins.iter().copied().filter(|t| logins.first().is_some_and(|first| *t < first + 20)).collect();
    assert_eq!(at_start.len(), 1, "the node's clients logged in at {at_start:?}: one login serves them all");
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

/// A node whose first login fails (the KDC does not answer: a failure point in ferry's kinit) starts
/// anyway, its flow's clients retrying. A pause of the flow is then recorded on its target, the Kerberos
/// cluster: the producer of the control topic is made when the first pause is written, not at the
/// node's start, when the login failed.
#[test]
fn a_node_whose_first_login_failed_records_a_pause_on_a_kerberos_target() {
    let bed = bed();
    let _turn = take_turn("kerberos first login fails");
    let mut env = bed.kdc.client_env();
    env.push(("FAILPOINTS".into(), "kerberos-kinit=1*return(Cannot contact any KDC for realm FERRY.TEST)".into()));
    let Copying { mut ferry, .. } = node_that_copied(bed, "west", "krb", &env);
    let text = observe::metrics(ferry.listen_addr());
    let failed = observe::metric_sum(&text, "ferry_kerberos_logins_total", &[("result", "failed")]);
    assert!(failed >= 1.0, "the first login did not fail: {failed} failed logins");

    let (status, body) = http_post(ferry.listen_addr(), "/flows/west-%3Ekrb/pause");
    assert_eq!(status, 200, "pause: {body}");
    wait_for(Duration::from_secs(10), "west->krb paused in /flows", || {
        observe::flows(ferry.listen_addr())["flows"]["west->krb"]["state"] == "paused"
    });
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}

/// A `krb5.conf` that names no realm for the brokers (no `[domain_realm]` entry, no default realm: the
/// library cannot pick a cache by realm): the node's one principal has the collection's primary cache,
/// which the library uses then, and the flow copies.
#[test]
fn a_single_principal_serves_brokers_whose_realm_the_node_cannot_tell() {
    let bed = bed();
    let _turn = take_turn("kerberos primary cache");
    let Copying { mut ferry, .. } = node_that_copied(bed, "krb", "west", &bed.kdc.client_env_without_realm_hints());
    assert!(ferry.terminate(Duration::from_secs(30)).success());
}
