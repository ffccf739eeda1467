//! ferry against a Kafka cluster secured with OIDC: OAUTHBEARER tokens that librdkafka fetches from a
//! real identity provider (Keycloak, see tests/integration/support/oidc.rs) with the client credentials grant, and
//! that the broker validates against the provider's JWKS.
//!
//! - A flow copies from plaintext `east` into the OIDC cluster while tokens live 20 s and the broker
//!   re-authenticates every connection every 10 s: librdkafka's built-in OIDC refresh keeps fetching
//!   tokens (the provider counts them), the copy never pauses and every record arrives once, in order,
//!   byte for byte.
//! - A wrong client secret and an unreachable token endpoint each leave their flow degraded with a
//!   reason that names the OAUTHBEARER token failure, not the secret; a plaintext flow keeps copying.
//! - `ferry validate` and `ferry check` work with an OIDC cluster (the secret from a `${file:}`), and
//!   the client secret appears in none of ferry's outputs: its log, `/flows`, `/metrics`, `validate`,
//!   `check`.
//!
//! One provider and one OIDC broker (plus the plaintext pair) are shared by the tests of this file,
//! started in parallel on first use; each test uses its own OAuth client, so token counts stay apart.

use crate::support;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use support::observe::{self, flow_reasons};
use support::oidc::Provider;
use support::scenario::{Stream, Tail, assert_alive, total};
use support::{
    ADMIN, Cluster, Ferry, Security, cluster_toml, consume_all, create_topic, ferry_cli, free_port, http_request,
    produce, shared_pair, try_connect, unique, wait_for,
};

/// Access tokens live this long (librdkafka refreshes at 80 %: every 16 s).
const TOKEN_LIFESPAN: Duration = Duration::from_secs(20);
/// How long the copy runs under refreshes: three token lifetimes and a bit.
const WINDOW: Duration = Duration::from_secs(65);
/// The longest pause in arrivals that still counts as "copying on": the stream writes every ~0.1 s.
const MAX_GAP: Duration = Duration::from_secs(5);
const ARRIVAL: Duration = Duration::from_secs(90);
const DEGRADED: Duration = Duration::from_secs(60);
const READ: Duration = Duration::from_secs(30);

const FAST: &str = "refresh_topics_interval_seconds = 2\nrestart_backoff_initial_seconds = 0.2\n\
                    restart_backoff_max_seconds = 2\n";

/// The OAuth clients: the harness's super user, and one per test.
const COPY_CLIENT: &str = "ferry-copy";
const CHECK_CLIENT: &str = "ferry-check";
const WRONG_CLIENT: &str = "ferry-wrong";

struct Bed {
    east: &'static Cluster,
    west: &'static Cluster,
    idp: Provider,
    /// SASL_SSL with OAUTHBEARER validated against `idp`'s JWKS.
    oidc: Cluster,
}

fn bed() -> &'static Bed {
    static BED: OnceLock<Bed> = OnceLock::new();
    BED.get_or_init(|| {
        let t0 = Instant::now();
        let bed = std::thread::scope(|s| {
            let pair = s.spawn(shared_pair);
            let idp = Provider::start(&[ADMIN, COPY_CLIENT, CHECK_CLIENT, WRONG_CLIENT], TOKEN_LIFESPAN);
            // The broker fetches the provider's keys when it starts: after the provider.
            let oidc =
                Cluster::start_secured("oidc", Security::oidc(idp.idp(), &[COPY_CLIENT, CHECK_CLIENT, WRONG_CLIENT]));
            let (east, west) = pair.join().expect("plaintext pair");
            Bed { east, west, idp, oidc }
        });
        eprintln!("test bed ready in {:?}", t0.elapsed());
        bed
    })
}

fn path_str(p: &Path) -> String {
    p.to_str().expect("utf-8 path").to_string()
}

fn secret_of(bed: &Bed, client: &str) -> String {
    bed.idp.idp().secrets[client].clone()
}

/// `client`'s properties for the OIDC cluster, with the client secret replaced by `${file:<file>}`
/// (the file holds `secret`).
fn oidc_props_from_file(bed: &Bed, client: &str, file: &Path, secret: &str) -> Vec<(String, String)> {
    std::fs::write(file, format!("{secret}\n")).expect("write secret file");
    bed.oidc
        .client_props(client)
        .into_iter()
        .map(
            |(k, v)| {
                if k == "sasl.oauthbearer.client.secret" {
                    (k, format!("${{file:{}}}", path_str(file)))
                } else {
                    (k, v)
                }
            },
        )
        .collect()
}

fn flow(source: &str, target: &str, topic: &str) -> String {
    format!("[[flows]]\nsource = \"{source}\"\ntarget = \"{target}\"\ntopics = [\"{topic}\"]\n{FAST}\n")
}

fn get(addr: SocketAddr, path: &str) -> String {
    let (status, body) = http_request(addr, "GET", path, &[], b"");
    assert_eq!(status, 200, "GET {path}: {body}");
    body
}

fn sorted(mut recs: Vec<support::Rec>) -> Vec<support::Rec> {
    recs.sort_by_key(|r| (r.partition, r.offset));
    recs
}

/// A continuous copy east -> oidc over three token lifetimes: the provider issues fresh tokens to
/// ferry's client again and again, the broker re-authenticates ferry's connections with them every
/// 10 s, and arrivals never pause longer than [`MAX_GAP`]; in the end the target holds every record
/// exactly once, per partition in order, byte for byte.
#[test]
fn a_flow_copies_into_an_oidc_cluster_through_token_refreshes_without_a_pause() {
    let bed = bed();
    let secrets = tempfile::tempdir().expect("secrets dir");
    let secret = secret_of(bed, COPY_CLIENT);
    let props = oidc_props_from_file(bed, COPY_CLIENT, &secrets.path().join("client-secret"), &secret);
    let topic = unique("oidc-copy");
    let remote = format!("east.{topic}");
    create_topic(&bed.east.bootstrap, &topic, 2, &[]);
    let dir = tempfile::tempdir().expect("flows dir");
    let clusters = [cluster_toml("east", &bed.east.bootstrap, &[]), cluster_toml("idp", &bed.oidc.bootstrap, &props)];
    std::fs::write(dir.path().join("clusters.toml"), clusters.concat()).expect("write clusters");
    // Only the test's topic: the shared east holds the heartbeats topics of every other test, and each
    // new one would be a copier-group rebalance (its claim round under load paused this copy for 5.06 s
    // once, a pause that has nothing to do with tokens).
    let flows = format!("{}heartbeats_replication_enabled = false\n", flow("east", "idp", &topic));
    std::fs::write(dir.path().join("flows.toml"), flows).expect("write flows");

    let stream = Stream::start(&bed.east.bootstrap, &topic, 2, "r", 10, Duration::from_millis(100));
    let mut ferry = Ferry::start(dir.path(), &[]);
    wait_for(ARRIVAL, &format!("{remote} copying into the OIDC cluster"), || {
        assert_alive(&mut ferry);
        total(&bed.oidc.bootstrap, &remote) > 0
    });
    let tail = Tail::start(&bed.oidc.bootstrap, &remote);
    let start = Instant::now();
    let tokens_before = bed.idp.tokens_issued(COPY_CLIENT);
    // A measurement window, not a synchronisation: the copy must go on for three token lifetimes.
    wait_for(WINDOW + Duration::from_secs(30), "three token lifetimes of copying", || {
        assert_alive(&mut ferry);
        start.elapsed() >= WINDOW
    });
    let end = Instant::now();
    let tokens = bed.idp.tokens_issued(COPY_CLIENT) - tokens_before;
    let gap = tail.largest_gap(start, end);
    let arrived_in_window = tail.count();
    let produced = stream.finish();
    wait_for(ARRIVAL, &format!("all {produced} records on the OIDC cluster"), || {
        assert_alive(&mut ferry);
        total(&bed.oidc.bootstrap, &remote) >= produced as i64
    });
    eprintln!(
        "[oidc copy] {tokens} tokens issued to {COPY_CLIENT} in {:?} (lifespan {TOKEN_LIFESPAN:?}); largest arrival \
         gap {gap:?}; {arrived_in_window} records arrived in the window, {produced} produced",
        end - start
    );
    assert!(tokens >= 3, "only {tokens} tokens were issued to ferry's client in {:?}", end - start);
    assert!(gap < MAX_GAP, "copying paused for {gap:?} while tokens were refreshed");

    let want = sorted(consume_all(&bed.east.bootstrap, &topic, READ));
    let got = sorted(consume_all(&bed.oidc.bootstrap, &remote, READ));
    assert_eq!(want.len(), produced, "the source holds what the stream produced");
    assert_eq!(got.len(), produced, "records lost or copied twice");
    assert_eq!(got, want, "{remote} differs from {topic}");

    let flows = observe::flows(ferry.listen_addr());
    assert_eq!(flows["flows"]["east->idp"]["state"], "running", "{}", flows["flows"]["east->idp"]);
    let metrics = get(ferry.listen_addr(), "/metrics");
    assert!(ferry.terminate(Duration::from_secs(30)).success());
    for (what, text) in [("log", ferry.log()), ("/flows", flows.to_string()), ("/metrics", metrics)] {
        assert!(!text.contains(&secret), "the client secret is in ferry's {what}");
    }
}

/// A wrong client secret (from a secret file) and a token endpoint nobody listens on: each flow is
/// degraded with a reason that names the OAUTHBEARER token failure and the token endpoint, never the
/// secret; the node stays up and a plaintext flow keeps copying.
#[test]
fn a_wrong_client_secret_or_an_unreachable_token_endpoint_degrades_its_flow_with_a_named_reason() {
    let bed = bed();
    let secrets = tempfile::tempdir().expect("secrets dir");
    let right = secret_of(bed, WRONG_CLIENT);
    let wrong = format!("WRONG-{}", unique("secret"));
    let bad = oidc_props_from_file(bed, WRONG_CLIENT, &secrets.path().join("wrong-secret"), &wrong);
    let down_url = format!("http://127.0.0.1:{}/realms/ferry/protocol/openid-connect/token", free_port());
    let down: Vec<(String, String)> = oidc_props_from_file(bed, WRONG_CLIENT, &secrets.path().join("secret"), &right)
        .into_iter()
        .map(|(k, v)| if k == "sasl.oauthbearer.token.endpoint.url" { (k, down_url.clone()) } else { (k, v) })
        .collect();
    let topics: Vec<String> =
        ["plain", "secret", "endpoint"].iter().map(|t| unique(&format!("oidc-bad-{t}"))).collect();
    let clusters = [
        cluster_toml("east", &bed.east.bootstrap, &[]),
        cluster_toml("west", &bed.west.bootstrap, &[]),
        cluster_toml("badsecret", &bed.oidc.bootstrap, &bad),
        // `localhost` (in the broker's certificate too): another address than `badsecret`'s, so that
        // ferry cannot confuse the two clusters' connection errors.
        cluster_toml("noidp", &bed.oidc.bootstrap.replace("127.0.0.1", "localhost"), &down),
    ]
    .concat();
    let flows: String = [("west", &topics[0]), ("badsecret", &topics[1]), ("noidp", &topics[2])]
        .iter()
        .map(|(target, topic)| flow("east", target, topic))
        .collect();
    let dir = tempfile::tempdir().expect("flows dir");
    std::fs::write(dir.path().join("clusters.toml"), clusters).expect("write clusters");
    std::fs::write(dir.path().join("flows.toml"), flows).expect("write flows");
    for t in &topics {
        create_topic(&bed.east.bootstrap, t, 2, &[]);
        produce(&bed.east.bootstrap, t, &support::scenario::records(t, 0..10, 2));
    }

    let mut ferry = Ferry::start(dir.path(), &["--shutdown-timeout", "5"]);
    let addr = ferry.listen_addr();
    wait_for(Duration::from_secs(20), "ferry to serve /flows", || {
        assert_alive(&mut ferry);
        std::net::TcpStream::connect(addr).is_ok()
    });
    // librdkafka's error, the provider's answer (or curl's), and the endpoint, which ferry adds.
    let token_url = bed.idp.idp().token_url.clone();
    let causes = [
        ("east->badsecret", ["Failed to acquire SASL OAUTHBEARER token", "unauthorized_client", token_url.as_str()]),
        // curl says "Couldn't connect to server" before 8.x and "Could not connect to server" since.
        ("east->noidp", ["Failed to acquire SASL OAUTHBEARER token", "connect to server", down_url.as_str()]),
    ];
    for (id, words) in &causes {
        let t0 = Instant::now();
        let mut last = serde_json::Value::Null;
        let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_for(DEGRADED, &format!("{id} degraded with a reason naming {words:?}"), || {
                assert_alive(&mut ferry);
                last = observe::flows(addr)["flows"][id].clone();
                let not_running = matches!(last["state"].as_str(), Some("degraded" | "restarting" | "failed"));
                not_running && flow_reasons(&last).iter().any(|r| words.iter().all(|w| r.contains(w)))
            })
        }));
        if let Err(e) = found {
            eprintln!("{id} last seen: {last:#}");
            std::panic::resume_unwind(e);
        }
        let why: Vec<String> =
            flow_reasons(&last).into_iter().filter(|r| words.iter().all(|w| r.contains(w))).take(1).collect();
        eprintln!("[{id}] {} after {:?}: {why:?}", last["state"], t0.elapsed());
    }
    // Meanwhile the plaintext flow copies.
    let remote = format!("east.{}", topics[0]);
    wait_for(ARRIVAL, &format!("{remote} on the plaintext west"), || {
        assert_alive(&mut ferry);
        total(&bed.west.bootstrap, &remote) >= 10
    });
    let shown = [get(addr, "/flows"), get(addr, "/health"), get(addr, "/metrics"), ferry.log()].concat();
    assert!(bed.idp.login_errors(WRONG_CLIENT) > 0, "the provider refused no login of {WRONG_CLIENT}");
    assert!(!shown.contains(&wrong), "the wrong secret is shown");
    assert!(!shown.contains(&right), "the client secret is shown");
}

/// `ferry validate` and `ferry check` with an OIDC cluster whose client secret comes from a file: both
/// succeed (check connects, i.e. gets a token and is accepted by the broker), and neither prints the
/// secret.
#[test]
fn validate_and_check_work_with_an_oidc_cluster_and_print_no_secret() {
    let bed = bed();
    let secrets = tempfile::tempdir().expect("secrets dir");
    let secret = secret_of(bed, CHECK_CLIENT);
    let props = oidc_props_from_file(bed, CHECK_CLIENT, &secrets.path().join("client-secret"), &secret);
    let topic = unique("oidc-check");
    create_topic(&bed.oidc.bootstrap, &topic, 1, &[]);
    let dir = tempfile::tempdir().expect("flows dir");
    let clusters = [cluster_toml("idp", &bed.oidc.bootstrap, &props), cluster_toml("west", &bed.west.bootstrap, &[])];
    std::fs::write(dir.path().join("clusters.toml"), clusters.concat()).expect("write clusters");
    std::fs::write(dir.path().join("flows.toml"), flow("idp", "west", &topic)).expect("write flows");
    let flows = path_str(dir.path());

    let tokens_before = bed.idp.tokens_issued(CHECK_CLIENT);
    let (code, out, err) = ferry_cli(&["validate", "--flows", &flows]);
    assert_eq!(code, 0, "ferry validate failed:\n{out}\n{err}");
    assert!(!format!("{out}{err}").contains(&secret), "ferry validate prints the secret:\n{out}\n{err}");
    let (code, out, err) = ferry_cli(&["check", "--flows", &flows]);
    eprintln!("[check] exit {code}:\n{out}\n{err}");
    assert!(!format!("{out}{err}").contains(&secret), "ferry check prints the secret");
    assert_eq!(code, 0, "ferry check failed:\n{out}\n{err}");
    assert!(bed.idp.tokens_issued(CHECK_CLIENT) > tokens_before, "ferry check fetched no token");

    // A token the provider did not sign (librdkafka's unsecured JWT; a wrong audience or issuer takes
    // the same path in the broker's validator): the broker refuses the client.
    let unsigned: Vec<(String, String)> = bed
        .oidc
        .client_props(CHECK_CLIENT)
        .into_iter()
        .filter(|(k, _)| !k.starts_with("sasl.oauthbearer."))
        .chain([
            ("enable.sasl.oauthbearer.unsecure.jwt".to_string(), "true".to_string()),
            ("sasl.oauthbearer.config".to_string(), format!("principal={CHECK_CLIENT}")),
        ])
        .collect();
    let refused = try_connect(&bed.oidc.bootstrap, &unsigned, Duration::from_secs(20))
        .expect_err("the broker accepted a token its provider did not sign");
    eprintln!("[unsigned token] {}", refused.message);
    assert!(refused.message.contains("SASL authentication error"), "{}", refused.message);
}
