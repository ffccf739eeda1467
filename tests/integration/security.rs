//! ferry against secured brokers, and the security of its own HTTP listener.
//!
//! - Copying works over SASL_SSL (SCRAM, password from a `${file:}` secret) and mTLS, offset syncs,
//!   checkpoints and group offset sync included.
//! - A wrong password, a CA that does not sign the broker's certificate and a client certificate the
//!   broker refuses each leave their flow degraded with a reason that says so (and no secret), while
//!   another flow keeps copying and the node stays up; writing the right password into the secret file
//!   and reloading recovers the flow.
//! - A client certificate rotated mid-copy (new key and certificate over the old files, the old CA then
//!   revoked by the broker) is picked up by a reload of that flow only, with nothing lost or copied twice;
//!   a half-written rotation is refused and the old certificate copies on.
//! - The listener: mutating endpoints need the admin token (or a loopback listener), reads stay open,
//!   HTTPS works with `ferry health`, and a batch of bad requests gets 4xx without hurting the node.
//!
//! The Kafka tests share one test bed (the plaintext pair, a SASL_SSL cluster and two mTLS clusters,
//! started in parallel on first use) and take turns; the listener tests need no broker.

use crate::support;

use support::turn::take_turn;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use support::observe;
use support::scenario::{Stream, arrivals, assert_alive, total, values, wait_all_arrived, wait_showing};
use support::tls::Tls;
use support::{
    Cluster, Ferry, Rec, cluster_toml, commit_group_offsets, consume_all, create_topic, end_offsets, ferry_bin,
    free_port, group_offsets, produce, shared_pair, tail, unique, wait_for,
};

const ARRIVAL: Duration = Duration::from_secs(60);
const DEGRADED: Duration = Duration::from_secs(60);
const READ: Duration = Duration::from_secs(30);

/// Short intervals: checkpoints and group offset sync within seconds.
const FAST: &str = support::flows::FAST_SECURED;

/// The clusters every Kafka test of this file uses.
struct Bed {
    /// Plaintext `east` and `west` (the shared pair).
    east: &'static Cluster,
    west: &'static Cluster,
    /// SASL_SSL with SCRAM-SHA-512; user `alice`.
    sasl: Cluster,
    /// Two mTLS clusters, each with a client certificate for `alice`.
    mtls_a: Cluster,
    mtls_b: Cluster,
}

fn bed() -> &'static Bed {
    static BED: OnceLock<Bed> = OnceLock::new();
    BED.get_or_init(|| {
        let t0 = Instant::now();
        let bed = std::thread::scope(|s| {
            let pair = s.spawn(shared_pair);
            let sasl = s.spawn(|| Cluster::start_secured("sasl", support::Security::sasl_ssl(&["alice"])));
            let a = s.spawn(|| Cluster::start_secured("mtls-a", support::Security::mtls(&["alice"])));
            let b = s.spawn(|| Cluster::start_secured("mtls-b", support::Security::mtls(&["alice"])));
            let (east, west) = pair.join().expect("plaintext pair");
            Bed {
                east,
                west,
                sasl: sasl.join().expect("sasl cluster"),
                mtls_a: a.join().expect("mtls-a cluster"),
                mtls_b: b.join().expect("mtls-b cluster"),
            }
        });
        eprintln!("test bed ready in {:?}", t0.elapsed());
        bed
    })
}

fn with(props: &[(String, String)], key: &str, value: &str) -> Vec<(String, String)> {
    support::flows::with_prop(props, key, value)
}

fn path_str(p: &Path) -> String {
    p.to_str().expect("utf-8 path").to_string()
}

fn flow(source: &str, target: &str, topic: &str, group: &str) -> String {
    format!(
        "[[flows]]\nsource = \"{source}\"\ntarget = \"{target}\"\ntopics = [\"{topic}\"]\ngroups = [\"{group}\"]\n{FAST}\n"
    )
}

fn records(prefix: &str, n: usize) -> Vec<Rec> {
    support::scenario::keyed_records(prefix, 0..n)
}

fn sorted(recs: Vec<Rec>) -> Vec<Rec> {
    support::scenario::by_position(recs)
}

/// Every checkpoint of `group` in `<source_alias>.checkpoints.internal` on `target`.
fn checkpoints(target: &Cluster, source_alias: &str, group: &str) -> Vec<ferry::mm2::records::Checkpoint> {
    let topic = format!("{source_alias}.checkpoints.internal");
    if support::topic_partitions(&target.bootstrap, &topic).is_none() {
        return Vec::new();
    }
    consume_all(&target.bootstrap, &topic, READ)
        .into_iter()
        .filter_map(|r| {
            ferry::mm2::records::Checkpoint::decode(r.key.as_deref().unwrap_or_default(), r.value.as_deref()).ok()
        })
        .filter(|c| c.group == group)
        .collect()
}

/// Copies plaintext `east` → SASL_SSL `west` (password from a secret file, as alice) and mTLS → mTLS,
/// with a consumer group on each source: records arrive byte for byte, offset syncs and checkpoints are
/// written, and the groups' translated offsets are committed on the targets.
#[test]
fn secured_clusters_copy_checkpoint_and_sync_group_offsets() {
    let bed = bed();
    let _turn = take_turn("secured copy");
    let (sasl, a, b) = (&bed.sasl, &bed.mtls_a, &bed.mtls_b);
    let secrets = tempfile::tempdir().expect("secrets dir");
    let password_file = secrets.path().join("west-password");
    std::fs::write(&password_file, format!("{}\n", sasl.password("alice"))).expect("write secret");

    let west_props =
        with(&sasl.client_props("alice"), "sasl.password", &format!("${{file:{}}}", path_str(&password_file)));
    let (t1, g1, t2, g2) = (unique("sasl-copy"), unique("sasl-group"), unique("mtls-copy"), unique("mtls-group"));
    let dir = tempfile::tempdir().expect("flows dir");
    let clusters = [
        cluster_toml("east", &bed.east.bootstrap, &[]),
        cluster_toml("west", &sasl.bootstrap, &west_props),
        cluster_toml("ma", &a.bootstrap, &a.client_props("alice")),
        cluster_toml("mb", &b.bootstrap, &b.client_props("alice")),
    ]
    .concat();
    std::fs::write(dir.path().join("clusters.toml"), clusters).expect("write clusters");
    std::fs::write(dir.path().join("flows.toml"), flow("east", "west", &t1, &g1) + &flow("ma", "mb", &t2, &g2))
        .expect("write flows");

    let sent1 = records("east", 40);
    let sent2 = records("ma", 40);
    create_topic(&bed.east.bootstrap, &t1, 2, &[]);
    create_topic(&a.bootstrap, &t2, 2, &[]);
    produce(&bed.east.bootstrap, &t1, &sent1);
    produce(&a.bootstrap, &t2, &sent2);
    // The groups consumed everything: committed at the end on the sources.
    let commit_at_end = |c: &Cluster, topic: &str, group: &str| -> Vec<i64> {
        let ends = end_offsets(&c.bootstrap, topic);
        let offsets: Vec<(&str, i32, i64)> = ends.iter().enumerate().map(|(p, e)| (topic, p as i32, *e)).collect();
        commit_group_offsets(&c.bootstrap, group, &offsets);
        ends
    };
    let ends1 = commit_at_end(bed.east, &t1, &g1);
    let ends2 = commit_at_end(a, &t2, &g2);

    let mut ferry = Ferry::start(dir.path(), &[]);
    for (target, source_alias, target_alias, topic, group, sent, source, ends) in
        [(sasl, "east", "west", &t1, &g1, &sent1, bed.east, &ends1), (b, "ma", "mb", &t2, &g2, &sent2, a, &ends2)]
    {
        let remote = format!("{source_alias}.{topic}");
        wait_for(ARRIVAL, &format!("{remote} complete on {}", target.name), || {
            assert_alive(&mut ferry);
            total(&target.bootstrap, &remote) >= sent.len() as i64
        });
        let want = sorted(consume_all(&source.bootstrap, topic, READ));
        assert_eq!(sorted(consume_all(&target.bootstrap, &remote, READ)), want, "{remote} differs from {topic}");

        // Offset syncs on the source (the default location), for both partitions.
        let syncs: Vec<_> = consume_all(&source.bootstrap, &format!("mm2-offset-syncs.{target_alias}.internal"), READ)
            .into_iter()
            .filter_map(|r| {
                ferry::mm2::records::OffsetSync::decode(r.key.as_deref().unwrap_or_default(), r.value.as_deref()).ok()
            })
            .filter(|s| &s.topic == topic)
            .collect();
        assert!(syncs.iter().any(|s| s.partition == 0) && syncs.iter().any(|s| s.partition == 1), "{syncs:?}");

        // Checkpoints for the group, at the end of both partitions (ferry's syncs translate exactly).
        wait_for(ARRIVAL, &format!("checkpoints of {group} at the end of {remote}"), || {
            assert_alive(&mut ferry);
            let cps = checkpoints(target, source_alias, group);
            (0..2).all(|p| {
                cps.iter().any(|c| c.topic == remote && c.partition == p && c.downstream_offset == ends[p as usize])
            })
        });
        // Group offset sync: the (absent) group on the target gets the translated offsets.
        let partitions = [(remote.as_str(), 0), (remote.as_str(), 1)];
        wait_for(ARRIVAL, &format!("{group}'s offsets committed on {}", target.name), || {
            group_offsets(&target.bootstrap, group, &partitions) == vec![Some(ends[0]), Some(ends[1])]
        });
    }
    let flows = observe::flows(ferry.listen_addr());
    for id in ["east->west", "ma->mb"] {
        assert_eq!(flows["flows"][id]["state"], "running", "{id}: {}", flows["flows"][id]);
    }
    let status = ferry.terminate(Duration::from_secs(30));
    assert!(status.success(), "ferry exited with {status}");
    assert!(!ferry.log().contains(sasl.password("alice")), "the password is in ferry's log");
}

/// Every SASL mechanism librdkafka builds in, against the same real SASL_SSL broker: SCRAM-SHA-256,
/// PLAIN and OAUTHBEARER (Kafka's unsecured-JWT validator on the broker, librdkafka's unsecured token on
/// the client: the mechanism and its wire exchange, without an identity provider) each carry a flow
/// that copies its topic byte for byte (SCRAM-SHA-512 is the test above).
#[test]
fn scram_sha_256_plain_and_oauthbearer_each_copy_from_a_secured_broker() {
    let bed = bed();
    let _turn = take_turn("sasl mechanisms");
    let sasl = &bed.sasl;
    let base: Vec<(String, String)> =
        sasl.client_props("alice").into_iter().filter(|(k, _)| !k.starts_with("sasl.")).collect();
    let scram256 =
        [("sasl.mechanism", "SCRAM-SHA-256"), ("sasl.username", "alice"), ("sasl.password", sasl.password("alice"))];
    let plain = [("sasl.mechanism", "PLAIN"), ("sasl.username", "alice"), ("sasl.password", sasl.password("alice"))];
    let oauth = [
        ("sasl.mechanism", "OAUTHBEARER"),
        ("enable.sasl.oauthbearer.unsecure.jwt", "true"),
        ("sasl.oauthbearer.config", "principal=alice"),
    ];
    let mechanisms: [(&str, &[(&str, &str)]); 3] = [("s256", &scram256), ("plain", &plain), ("oauth", &oauth)];
    let dir = tempfile::tempdir().expect("flows dir");
    let mut clusters = cluster_toml("west", &bed.west.bootstrap, &[]);
    let mut flows = String::new();
    let mut topics = Vec::new();
    for (alias, props) in mechanisms {
        let mut client = base.clone();
        client.extend(props.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        clusters.push_str(&cluster_toml(alias, &sasl.bootstrap, &client));
        let topic = unique(&format!("mech-{alias}"));
        create_topic(&sasl.bootstrap, &topic, 2, &[]);
        produce(&sasl.bootstrap, &topic, &records(alias, 20));
        flows
            .push_str(&format!("[[flows]]\nsource = \"{alias}\"\ntarget = \"west\"\ntopics = [\"{topic}\"]\n{FAST}\n"));
        topics.push((alias, topic));
    }
    std::fs::write(dir.path().join("clusters.toml"), clusters).expect("write clusters");
    std::fs::write(dir.path().join("flows.toml"), flows).expect("write flows");
    let mut ferry = Ferry::start(dir.path(), &[]);
    for (alias, topic) in &topics {
        let remote = format!("{alias}.{topic}");
        wait_for(ARRIVAL, &format!("{remote} complete on west ({alias})"), || {
            assert_alive(&mut ferry);
            total(&bed.west.bootstrap, &remote) >= 20
        });
        let want = sorted(consume_all(&sasl.bootstrap, topic, READ));
        assert_eq!(sorted(consume_all(&bed.west.bootstrap, &remote, READ)), want, "{remote} differs from {topic}");
    }
    let flows = observe::flows(ferry.listen_addr());
    for (alias, _) in &topics {
        let id = format!("{alias}->west");
        assert_eq!(flows["flows"][&id]["state"], "running", "{id}: {}", flows["flows"][&id]);
    }
    assert!(ferry.terminate(Duration::from_secs(30)).success());
    assert!(!ferry.log().contains(sasl.password("alice")), "the password is in ferry's log");
}

/// A wrong password (from a secret file), a CA that did not sign the broker's certificate and a client
/// certificate the broker does not trust: each flow is degraded with a reason naming the cause, the
/// node stays up and a plaintext flow keeps copying. The right password in the file and a reload
/// recover the first flow.
#[test]
fn bad_credentials_degrade_their_flow_only_and_a_fixed_secret_file_recovers_it() {
    let bed = bed();
    let _turn = take_turn("bad credentials");
    let (sasl, b) = (&bed.sasl, &bed.mtls_b);
    let secrets = tempfile::tempdir().expect("secrets dir");
    let password_file = secrets.path().join("sasl-password");
    let wrong = format!("WRONG-{}", unique("pw"));
    std::fs::write(&password_file, format!("{wrong}\n")).expect("write secret");
    let alice = sasl.client_props("alice");
    let from_file = format!("${{file:{}}}", path_str(&password_file));
    let (untrusted_cert, untrusted_key) = b.tls().untrusted_client();

    let clusters = [
        cluster_toml("east", &bed.east.bootstrap, &[]),
        cluster_toml("west", &bed.west.bootstrap, &[]),
        cluster_toml("sasl", &sasl.bootstrap, &with(&alice, "sasl.password", &from_file)),
        // `localhost` (in the broker's certificate too): another address than `sasl`'s, so that ferry
        // cannot confuse the two clusters' connection errors.
        cluster_toml(
            "badca",
            &sasl.bootstrap.replace("127.0.0.1", "localhost"),
            &with(&alice, "ssl.ca.location", &path_str(&sasl.tls().untrusted_ca())),
        ),
        cluster_toml("badcert", &b.bootstrap, &b.tls().ssl_props(Some((&untrusted_cert, &untrusted_key)))),
    ]
    .concat();
    let topics: Vec<String> = ["plain", "pw", "ca", "cert"].iter().map(|t| unique(&format!("bad-{t}"))).collect();
    let flows = [("west", &topics[0]), ("sasl", &topics[1]), ("badca", &topics[2]), ("badcert", &topics[3])]
        .iter()
        .map(|(target, topic)| flow("east", target, topic, "none"))
        .collect::<String>();
    let dir = tempfile::tempdir().expect("flows dir");
    std::fs::write(dir.path().join("clusters.toml"), clusters).expect("write clusters");
    std::fs::write(dir.path().join("flows.toml"), flows).expect("write flows");
    for t in &topics {
        create_topic(&bed.east.bootstrap, t, 2, &[]);
        produce(&bed.east.bootstrap, t, &records(t, 10));
    }

    // Flows whose clusters refuse them take their admin timeout to stop: do not wait for them at the end.
    let mut ferry = Ferry::start(dir.path(), &["--shutdown-timeout", "5"]);
    wait_serving(&mut ferry);
    let addr = ferry.listen_addr();
    // Each broken flow: not running (its actors keep retrying), with a reason naming its cause.
    let causes = [
        ("east->sasl", vec!["SASL authentication error"]),
        ("east->badca", vec!["certificate verify failed"]),
        // The broker's TLS 1.3 alert: bad_certificate (42) from older JDKs, certificate_required (116)
        // from newer ones (17.0.21 sends it for an untrusted client certificate).
        ("east->badcert", vec!["alert bad certificate", "alert certificate required"]),
    ];
    for (id, words) in &causes {
        let t0 = Instant::now();
        let mut last = serde_json::Value::Null;
        let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_for(DEGRADED, &format!("{id} degraded with a reason naming {words:?}"), || {
                assert_alive(&mut ferry);
                last = observe::flows(addr)["flows"][id].clone();
                let not_running = matches!(last["state"].as_str(), Some("degraded" | "restarting" | "failed"));
                not_running && observe::flow_reasons(&last).iter().any(|r| words.iter().any(|w| r.contains(w)))
            })
        }));
        if let Err(e) = found {
            eprintln!("{id} last seen: {last:#}");
            std::panic::resume_unwind(e);
        }
        let why: Vec<String> =
            observe::flow_reasons(&last).into_iter().filter(|r| words.iter().any(|w| r.contains(w))).take(1).collect();
        eprintln!("[{id}] {} after {:?}: {why:?}", last["state"], t0.elapsed());
    }
    let health: serde_json::Value =
        serde_json::from_str(&request(addr, "GET", "/health", &[], b"").1).expect("/health is JSON");
    assert_eq!(health["status"], "degraded", "{health}");
    // Meanwhile the plaintext flow copies.
    let remote = format!("east.{}", topics[0]);
    wait_for(ARRIVAL, &format!("{remote} on the plaintext west"), || {
        assert_alive(&mut ferry);
        total(&bed.west.bootstrap, &remote) >= 10
    });
    let shown = format!("{}{}", request(addr, "GET", "/health", &[], b"").1, ferry.log());
    assert!(!shown.contains(&wrong), "the wrong password is shown");

    // The right password in the secret file, then a reload: the flow restarts with it and copies.
    std::fs::write(&password_file, format!("{}\n", sasl.password("alice"))).expect("fix secret");
    let (status, body) = request(addr, "POST", "/reload", &[], b"");
    assert_eq!(status, 200, "POST /reload: {body}");
    assert!(body.contains("east->sasl"), "the reload restarts the flow whose secret changed: {body}");
    let remote = format!("east.{}", topics[1]);
    wait_for(ARRIVAL, &format!("{remote} on the SASL_SSL cluster after the fix"), || {
        assert_alive(&mut ferry);
        total(&sasl.bootstrap, &remote) >= 10
    });
    wait_showing(DEGRADED, "east->sasl running after the fix", || {
        let flow = observe::flows(addr)["flows"]["east->sasl"].clone();
        (flow["state"] == "running", flow)
    });
    let log = ferry.log();
    assert!(!log.contains(sasl.password("alice")) && !log.contains(&wrong), "a password is in ferry's log");
    ferry.terminate(Duration::from_secs(30));
}

/// notAfter of the first certificate in PEM file `path`, seconds since the epoch (read with OpenSSL,
/// not with ferry's code).
fn not_after(path: &Path) -> f64 {
    let cert =
        openssl::x509::X509::from_pem(&std::fs::read(path).expect("read certificate")).expect("a PEM certificate");
    let d = openssl::asn1::Asn1Time::from_unix(0).and_then(|epoch| epoch.diff(cert.not_after())).expect("a time");
    (i64::from(d.days) * 86_400 + i64::from(d.secs)) as f64
}

/// Copying under load from an mTLS broker while ferry's client certificate is rotated: the broker comes
/// to trust a second CA (restart), a new key and certificate from that CA are written over the files the
/// flow files name (the key first: that half-done rotation is refused with an error naming the cluster,
/// the property and the files, and the flow copies on with its old certificate), then the certificate
/// (the reload restarts that flow on new clients, and not a flow of other clusters), and the old CA is revoked (the broker restarted
/// trusting the new CA only). Every source record is on the target, none twice (a graceful restart
/// copies nothing twice), and the expiry metric follows the certificate.
#[test]
fn a_client_certificate_rotated_mid_copy_loses_and_duplicates_nothing() {
    let _turn = take_turn("certificate rotation");
    let (east, west) = shared_pair();
    // A broker of its own: it is restarted with other truststores.
    let mut rot = Cluster::start_secured("rotate", support::Security::mtls(&["ferry"]));
    let pki = tempfile::tempdir().expect("pki dir");
    // The new PKI's certificates live 60 days, the old ones 30: the metric tells them apart.
    let ca2 = Tls::generate_valid(&pki.path().join("ca2"), &[support::ADMIN, "ferry"], 60);
    // ferry's key and certificate, in files of their own that the rotation rewrites in place.
    let certs = tempfile::tempdir().expect("certs dir");
    let (cert, key) = (certs.path().join("ferry.pem"), certs.path().join("ferry.key"));
    let (old_cert, old_key) = rot.tls().client("ferry");
    std::fs::copy(&old_cert, &cert).expect("copy certificate");
    std::fs::copy(&old_key, &key).expect("copy key");
    let topic = unique("rotate");
    create_topic(&rot.bootstrap, &topic, 2, &[]);
    let dir = tempfile::tempdir().expect("flows dir");
    let clusters = cluster_toml("rot", &rot.bootstrap, &rot.tls().ssl_props(Some((&cert, &key))))
        + &cluster_toml("east", &east.bootstrap, &[])
        + &cluster_toml("west", &west.bootstrap, &[]);
    std::fs::write(dir.path().join("clusters.toml"), clusters).expect("write clusters");
    // A flow of other clusters, which the rotation must not touch.
    let plain = unique("rotate-plain");
    create_topic(&east.bootstrap, &plain, 1, &[]);
    let flows = flow("rot", "west", &topic, "none") + &flow("east", "west", &plain, "none");
    std::fs::write(dir.path().join("flows.toml"), flows).expect("write flows");

    let stream = Stream::start(&rot.bootstrap, &topic, 2, "r", 50, Duration::from_millis(20));
    let mut ferry = Ferry::start_env(dir.path(), &[], &[("FERRY_TEST_RESCAN_INTERVAL_MS", "300")]);
    wait_serving(&mut ferry);
    let addr = ferry.listen_addr();
    let remote = format!("rot.{topic}");
    let expiry = || {
        let text = observe::metrics(addr);
        let labels = [("cluster", "rot"), ("role", "client"), ("file", cert.to_str().expect("utf-8"))];
        observe::metric_sum(&text, "ferry_client_certificate_expiry_timestamp_seconds", &labels)
    };
    let arriving = |ferry: &mut Ferry, what: &str| {
        let at = total(&west.bootstrap, &remote);
        wait_for(ARRIVAL, what, || {
            assert_alive(ferry);
            total(&west.bootstrap, &remote) >= at + 200
        });
    };
    arriving(&mut ferry, "copying under way with the first certificate");
    assert_eq!(expiry(), not_after(&old_cert), "the expiry metric shows the first certificate");

    // The broker trusts the new CA besides the old one.
    rot.restart_trusting(&[&rot.tls().ca(), &ca2.ca()]);
    arriving(&mut ferry, "copying after the broker trusts both CAs");

    // Half a rotation: the new key is written, the certificate not yet.
    let generation_of = |id: &str| {
        observe::flows(addr)["flows"][id]["generation"].as_u64().unwrap_or_else(|| panic!("{id}'s generation"))
    };
    let generation = || generation_of("rot->west");
    let first = generation();
    let plain_generation = generation_of("east->west");
    let (new_cert, new_key) = ca2.client("ferry");
    std::fs::copy(&new_key, &key).expect("write the new key");
    let refused = wait_showing(DEGRADED, "the half-written rotation refused", || {
        let r = observe::flows(addr)["last_reload"].clone();
        (r["result"] == "rejected", r)
    });
    let error = refused["error"].as_str().unwrap_or_default();
    for part in
        ["clusters.rot.client.\"ssl.key.location\"", key.to_str().expect("utf-8"), cert.to_str().expect("utf-8")]
    {
        assert!(error.contains(part), "the refusal names {part}: {error}");
    }
    assert!(!error.contains("PRIVATE KEY") && !error.contains("CERTIFICATE-----"), "no file content: {error}");
    arriving(&mut ferry, "copying on with the old certificate while the rotation is half done");
    assert_eq!(generation(), first, "the refused reload left the flow running as it was");

    // The certificate follows: the reload restarts exactly that flow, on new clients.
    std::fs::copy(&new_cert, &cert).expect("write the new certificate");
    let applied = wait_showing(DEGRADED, "the rotation applied", || {
        let r = observe::flows(addr)["last_reload"].clone();
        (r["result"] == "applied" && r["restarted"] == serde_json::json!(["rot->west"]), r)
    });
    eprintln!("rotation applied: {applied}");
    // /flows shows the new generation once the restarted flow registered it, a moment after the reload.
    wait_for(DEGRADED, "the rotated flow's new generation", || generation() > first);
    assert_eq!(generation(), first + 1, "the rotation restarted the flow once");
    assert_eq!(expiry(), not_after(&new_cert), "the expiry metric shows the new certificate");
    assert_ne!(not_after(&new_cert), not_after(&old_cert));
    arriving(&mut ferry, "copying with the new certificate");

    // The old CA revoked: the broker trusts the new one only (the test's own clients move first).
    rot.use_client_certs(&ca2);
    // The stream's call in flight may still have the old certificate: one more whole call after it.
    let sent = stream.produced();
    wait_for(ARRIVAL, "the test's producer on its new certificate", || stream.produced() >= sent + 100);
    rot.restart_trusting(&[&ca2.ca()]);
    arriving(&mut ferry, "copying after the old CA was revoked");
    let produced = stream.finish();
    let counts = wait_all_arrived(&mut ferry, &west.bootstrap, &remote, &values("r", 0..produced));
    // A record the test's producer wrote twice (a retry across a broker restart) is on the source twice.
    let source = arrivals(&rot.bootstrap, &topic);
    let copied_twice: Vec<_> = counts
        .iter()
        .filter(|(v, n)| **n > source.get(*v).copied().unwrap_or(0))
        .map(|(v, n)| (String::from_utf8_lossy(v).to_string(), *n))
        .collect();
    println!("{produced} records, {} on the target, copied twice: {copied_twice:?}", counts.values().sum::<usize>());
    assert_eq!(counts.len(), produced, "only the produced records arrived");
    assert!(copied_twice.is_empty(), "a graceful restart copies nothing twice: {copied_twice:?}");
    wait_showing(DEGRADED, "rot->west running with the new certificate", || {
        let flow = observe::flows(addr)["flows"]["rot->west"].clone();
        (flow["state"] == "running", flow)
    });
    assert_eq!(generation(), first + 1, "revoking the old CA restarted nothing");
    assert_eq!(generation_of("east->west"), plain_generation, "the flow of other clusters was not restarted");
    assert!(ferry.terminate(Duration::from_secs(30)).success());
    let log = ferry.log();
    assert!(!log.contains("PRIVATE KEY") && !log.contains("BEGIN CERTIFICATE"), "file content in ferry's log");
}

// ---- The HTTP listener ----

/// One HTTP/1.0 exchange on a fresh connection: the status code and the body. Sends `body` after the
/// head as given (the head's Content-Length is the caller's business when `headers` sets one).
fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, String) {
    let mut head = format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\n");
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-length") || k.eq_ignore_ascii_case("transfer-encoding"))
    {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut raw = head.into_bytes();
    raw.extend_from_slice(body);
    raw_request(addr, &raw)
}

/// Sends `raw` bytes and reads the answer until the server closes (at most 90 s: a reload stops and
/// starts flows before it answers).
fn raw_request(addr: SocketAddr, raw: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream.set_read_timeout(Some(Duration::from_secs(90))).expect("timeout");
    // The server may answer and close before it read everything (a refused body): ignore write errors.
    let _ = stream.write_all(raw);
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// A flows directory with one (unreachable) cluster and no flow: a node with nothing to do but serve HTTP.
fn idle_flows_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("flows dir");
    let text = format!("[clusters.nowhere]\nbootstrap_servers = \"127.0.0.1:{}\"\n", free_port());
    std::fs::write(dir.path().join("clusters.toml"), text).expect("write");
    dir
}

/// Waits until the node at `addr` answers `/health`.
fn wait_serving(ferry: &mut Ferry) {
    let addr = ferry.listen_addr();
    wait_for(Duration::from_secs(20), "ferry to serve /health", || {
        assert_alive(ferry);
        TcpStream::connect(addr).is_ok()
    });
}

#[test]
fn mutating_endpoints_need_the_admin_token_reads_stay_open() {
    let dir = idle_flows_dir();
    let secrets = tempfile::tempdir().expect("dir");
    let token_file = secrets.path().join("token");
    let token = unique("token-s3cret");
    std::fs::write(&token_file, format!("{token}\n")).expect("write token");
    let mut ferry = Ferry::start(dir.path(), &["--admin-token-file", &path_str(&token_file)]);
    wait_serving(&mut ferry);
    let addr = ferry.listen_addr();
    for path in ["/health", "/flows", "/metrics"] {
        assert_eq!(request(addr, "GET", path, &[], b"").0, 200, "GET {path} needs no token");
    }
    let bearer = format!("Bearer {token}");
    let wrong = format!("Bearer {token}x");
    let cases: [(&[(&str, &str)], u16); 5] = [
        (&[], 401),
        (&[("Authorization", &wrong)], 401),
        (&[("Authorization", "Basic YWRtaW46YWRtaW4=")], 401),
        (&[("Authorization", "Bearer ")], 401),
        (&[("Authorization", &bearer)], 200),
    ];
    for (headers, want) in cases {
        let (status, body) = request(addr, "POST", "/reload", headers, b"");
        assert_eq!(status, want, "POST /reload with {headers:?}: {body}");
        assert!(!body.contains(&token), "the token is echoed: {body}");
    }
    // A rotated token applies at once (the file is read per request).
    let rotated = unique("rotated");
    std::fs::write(&token_file, &rotated).expect("rotate token");
    assert_eq!(request(addr, "POST", "/reload", &[("Authorization", &bearer)], b"").0, 401);
    assert_eq!(request(addr, "POST", "/reload", &[("Authorization", &format!("Bearer {rotated}"))], b"").0, 200);
    assert!(!ferry.log().contains(&token), "the token is in the log");
    ferry.terminate(Duration::from_secs(20));
}

/// A `ferry run` with exactly `args` (the helper `Ferry` always listens on loopback), killed on drop.
struct Node {
    child: std::process::Child,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Node {
    fn start(args: &[&str]) -> Node {
        let dir = tempfile::tempdir().expect("log dir");
        let log = dir.path().join("ferry.log");
        let file = std::fs::File::create(&log).expect("log");
        let child = Command::new(ferry_bin())
            .arg("run")
            .args(args)
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("dup"))
            .stderr(file)
            .spawn()
            .expect("spawn ferry");
        Node { child, log, _dir: dir }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_log(&mut self, needle: &str) {
        wait_for(Duration::from_secs(20), &format!("ferry log line with {needle:?}"), || {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!("ferry exited ({status}):\n{}", tail(&self.log(), 30));
            }
            self.log().contains(needle)
        });
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("ferry log:\n{}", tail(&self.log(), 40));
        }
    }
}

#[test]
fn a_non_loopback_listener_is_logged_and_refuses_mutations_without_a_token() {
    let dir = idle_flows_dir();
    let port = free_port();
    let listen = format!("0.0.0.0:{port}");
    let mut node = Node::start(&["--flows", &path_str(dir.path()), "--listen", &listen]);
    node.wait_log("serving /health");
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    assert_eq!(request(addr, "GET", "/health", &[], b"").0, 200);
    let (status, body) = request(addr, "POST", "/reload", &[], b"");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("--admin-token-file"), "{body}");
    assert!(node.log().contains("reachable from other hosts"), "{}", node.log());
}

#[test]
fn the_listener_serves_https_and_ferry_health_checks_it() {
    let dir = idle_flows_dir();
    let certs = tempfile::tempdir().expect("certs");
    let tls = Tls::generate(certs.path(), &[]);
    // The broker's PEM keystore: key and certificate (for IP:127.0.0.1) in one file, signed by ca.pem.
    let pem = path_str(&tls.dir().join("broker.pem"));
    let mut ferry = Ferry::start(dir.path(), &["--tls-cert", &pem, "--tls-key", &pem]);
    wait_serving(&mut ferry);
    let url = format!("https://{}/health", ferry.listen_addr());
    let health = |extra: &[&str]| {
        let out = Command::new(ferry_bin()).args(["health", "--url", &url]).args(extra).output().expect("ferry health");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    };
    let (ok, text) = health(&["--ca", &path_str(&tls.ca())]);
    assert!(ok, "ferry health with the CA: {text}");
    let (ok, text) = health(&["--insecure"]);
    assert!(ok, "ferry health --insecure: {text}");
    let (ok, text) = health(&[]);
    assert!(!ok, "ferry health must not trust an unknown CA: {text}");
    assert!(text.contains("certificate verify failed"), "{text}");
    let (ok, text) = health(&["--ca", &path_str(&tls.untrusted_ca())]);
    assert!(!ok, "ferry health with another CA: {text}");
    // Plain HTTP to the TLS port is no answer either.
    let out = Command::new(ferry_bin())
        .args(["health", "--url", &format!("http://{}/health", ferry.listen_addr())])
        .output()
        .expect("ferry health");
    assert!(!out.status.success());
    ferry.terminate(Duration::from_secs(20));
}

#[test]
fn bad_requests_get_4xx_and_the_node_keeps_serving() {
    let dir = idle_flows_dir();
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_serving(&mut ferry);
    let addr = ferry.listen_addr();
    let big = vec![b'x'; 200 * 1024];
    let huge_header = "y".repeat(64 * 1024);
    let cases: Vec<(&str, (u16, String))> = vec![
        ("unknown path", request(addr, "GET", "/nope", &[], b"")),
        ("unknown nested path", request(addr, "GET", "/flows/a->b/x/y", &[], b"")),
        ("DELETE /health", request(addr, "DELETE", "/health", &[], b"")),
        ("PUT /metrics", request(addr, "PUT", "/metrics", &[], b"")),
        ("GET /reload", request(addr, "GET", "/reload", &[], b"")),
        ("POST /flows", request(addr, "POST", "/flows", &[], b"")),
        ("oversized body", request(addr, "POST", "/reload", &[], &big)),
        ("oversized declared body", request(addr, "POST", "/reload", &[("Content-Length", "10000000000")], b"")),
        ("malformed Content-Length", request(addr, "POST", "/reload", &[("Content-Length", "12x")], b"")),
        (
            "chunked body",
            request(addr, "POST", "/reload", &[("Transfer-Encoding", "chunked")], b"5\r\nhello\r\n0\r\n\r\n"),
        ),
        ("malformed id", request(addr, "GET", "/flows/%ZZ", &[], b"")),
        ("id without arrow", request(addr, "GET", "/flows/eastwest", &[], b"")),
        ("id with a dot", request(addr, "GET", "/flows/ea.st-%3Ewest", &[], b"")),
        ("unknown flow", request(addr, "GET", "/flows/east-%3Ewest", &[], b"")),
        ("overlong id", request(addr, "GET", &format!("/flows/{}-%3Eb", "a".repeat(4000)), &[], b"")),
        ("header too large", request(addr, "GET", "/health", &[("X-Big", &huge_header)], b"")),
        ("garbage request line", raw_request(addr, b"BLAH BLAH BLAH\r\n\r\n")),
        ("binary garbage", raw_request(addr, &[0u8, 159, 146, 150, 13, 10, 13, 10])),
        ("no version", raw_request(addr, b"GET /health\r\n\r\n")),
    ];
    let mut problems = Vec::new();
    for (what, (status, body)) in &cases {
        eprintln!("{what}: {status} {}", body.chars().take(100).collect::<String>());
        if !(400..500).contains(status) {
            problems.push(format!("{what}: {status} {body}"));
        }
    }
    assert!(problems.is_empty(), "not a 4xx:\n{}", problems.join("\n"));

    // A client that never finishes its request head is cut off (408), and does not stall the others.
    let mut slow = TcpStream::connect(addr).expect("connect");
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n").expect("partial head");
    let t0 = Instant::now();
    assert_eq!(request(addr, "GET", "/health", &[], b"").0, 200, "served while a client dawdles");
    slow.set_read_timeout(Some(Duration::from_secs(15))).expect("timeout");
    let mut answer = Vec::new();
    let _ = slow.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(t0.elapsed() < Duration::from_secs(12), "the slow client held its connection {:?}", t0.elapsed());
    assert!(answer.is_empty() || answer.contains(" 408 "), "{answer}");

    assert_alive(&mut ferry);
    assert_eq!(request(addr, "GET", "/health", &[], b"").0, 200);
    assert!(!ferry.log().contains("panicked"), "{}", tail(&ferry.log(), 40));
    ferry.terminate(Duration::from_secs(20));
}
