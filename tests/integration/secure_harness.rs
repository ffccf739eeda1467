//! The secured test bed itself (tests/integration/support: `Cluster::start_secured`, `tls`, the client
//! registry): real brokers with SASL_SSL (SCRAM-SHA-512), mTLS and ACLs accept the clients they
//! should and refuse the others with the error librdkafka reports for that cause.
//!
//! At most two brokers at a time (`take_turn`): the tests take turns, on a small machine.

use crate::support;

use support::turn::take_turn;

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use support::{
    CONSUME_ALL_GROUP, Cluster, Ferry, Rec, Security, as_client, client_config, consume_all, create_topic,
    east_west_flow, flows_dir, list_topics, produce, try_connect, unique, wait_for,
};

/// How long a refused client may take to get its error.
const REFUSAL: Duration = Duration::from_secs(20);
const TIMEOUT: Duration = Duration::from_secs(30);

fn start(name: &str, security: Security) -> Cluster {
    let t0 = Instant::now();
    let cluster = Cluster::start_secured(name, security);
    eprintln!("[{name}] secured cluster {:?} ready in {:?}", cluster.security(), t0.elapsed());
    cluster
}

/// Records for partitions 0 and 1, and what `consume_all` returns for them.
fn records(ts: i64) -> (Vec<Rec>, Vec<Rec>) {
    let sent = vec![
        Rec::new(0, b"v0", ts).key(b"k0").header("h", Some(b"x")),
        Rec::new(1, b"v1", ts + 1),
        Rec::new(0, b"v2", ts + 2),
    ];
    let mut want = vec![sent[0].clone(), sent[2].clone(), sent[1].clone()];
    for (r, offset) in want.iter_mut().zip([0, 1, 0]) {
        r.offset = offset;
    }
    (sent, want)
}

fn with(props: &[(String, String)], key: &str, value: &str) -> Vec<(String, String)> {
    let mut props: Vec<(String, String)> = props.iter().filter(|(k, _)| k != key).cloned().collect();
    props.push((key.to_string(), value.to_string()));
    props
}

/// The error `props` gets from `cluster` (panics if it connects).
fn refused(cluster: &Cluster, what: &str, props: &[(String, String)]) -> support::ConnectError {
    let t0 = Instant::now();
    let err = match try_connect(&cluster.bootstrap, props, REFUSAL) {
        Ok(()) => panic!("[{}] {what}: connected, expected a refusal", cluster.name),
        Err(e) => e,
    };
    eprintln!("[{}] {what}: refused in {:?}: {err}", cluster.name, t0.elapsed());
    err
}

#[test]
fn sasl_ssl_scram_users_round_trip_and_bad_credentials_are_refused() {
    let _turn = take_turn("sasl");
    let c = start("sasl", Security::sasl_ssl(&["alice"]));
    let alice = c.client_props("alice");
    for key in ["security.protocol", "sasl.mechanism", "sasl.username", "sasl.password", "ssl.ca.location"] {
        assert!(alice.iter().any(|(k, _)| k == key), "client_props(alice) lacks {key}: {alice:?}");
    }

    // The helpers reach the cluster through the registry (as admin) ...
    let topic = unique("sasl");
    create_topic(&c.bootstrap, &topic, 2, &[]);
    assert!(list_topics(&c.bootstrap).contains(&topic));
    // ... and as alice, a SCRAM user created at format time.
    let (sent, want) = records(1_700_000_000_000);
    let got = as_client(&c.bootstrap, &alice, || {
        produce(&c.bootstrap, &topic, &sent);
        consume_all(&c.bootstrap, &topic, TIMEOUT)
    });
    assert_eq!(got, want);
    assert!(try_connect(&c.bootstrap, &alice, TIMEOUT).is_ok());

    let err = refused(&c, "wrong password", &with(&alice, "sasl.password", "not-the-password"));
    assert_eq!(err.code, RDKafkaErrorCode::Authentication, "{err}");
    assert!(err.message.contains("SASL authentication error"), "{err}");
    assert!(err.message.contains("invalid credentials"), "{err}");

    let err = refused(&c, "unknown user", &with(&alice, "sasl.username", "mallory"));
    assert_eq!(err.code, RDKafkaErrorCode::Authentication, "{err}");

    // The client does not trust the broker's certificate: refused by the client, before SASL.
    let untrusted_ca = c.tls().untrusted_ca();
    let err = refused(&c, "client trusts another CA", &with(&alice, "ssl.ca.location", untrusted_ca.to_str().unwrap()));
    assert_eq!(err.code, RDKafkaErrorCode::SSL, "{err}");
    assert!(err.message.contains("certificate verify failed"), "{err}");

    // A plaintext client on the SASL_SSL port: the broker drops the connection.
    let err = refused(&c, "plaintext client", &[]);
    assert!(matches!(err.code, RDKafkaErrorCode::AllBrokersDown | RDKafkaErrorCode::BrokerTransportFailure), "{err}");
}

#[test]
fn mtls_trusted_client_certificates_round_trip_others_are_refused() {
    let _turn = take_turn("mtls");
    // With ACLs on, admin's and alice's rights prove that "CN=<name>,OU=...,O=..." maps to User:<name>.
    let c = start("mtls", Security::mtls(&["alice"]).with_acls());
    let alice = c.client_props("alice");
    assert!(alice.contains(&("security.protocol".into(), "SSL".into())), "{alice:?}");
    let topic = unique("mtls");
    create_topic(&c.bootstrap, &topic, 2, &[]); // as admin, a super user
    // Write first: the broker applies ACLs in commit order, so once it applied the Describe of the
    // second call (what the wait sees), it applied the first.
    c.allow("alice", "topic", &topic, "literal", &["Write"]);
    c.allow_all("alice", &[("topic", &topic), ("group", CONSUME_ALL_GROUP)], "literal", &["Read", "Describe"]);
    wait_for(TIMEOUT, "alice's ACLs to apply", || topic_error(&c, &alice, &topic).is_none());
    let (sent, want) = records(1_600_000_000_000);
    let got = as_client(&c.bootstrap, &alice, || {
        produce(&c.bootstrap, &topic, &sent);
        consume_all(&c.bootstrap, &topic, TIMEOUT)
    });
    assert_eq!(got, want);

    let tls = c.tls();
    let (cert, key) = tls.untrusted_client();
    let err = refused(&c, "certificate from an untrusted CA", &tls.ssl_props(Some((&cert, &key))));
    assert_refused_by_broker(&err);
    let err = refused(&c, "no client certificate", &tls.ssl_props(None));
    assert_refused_by_broker(&err);
}

/// TLS 1.3: the client's handshake is done before the broker checks the client's certificate, so
/// the broker's alert arrives with the first request (ApiVersions) as a transport failure:
/// "Receive failed: error:0A000412:SSL routines::sslv3 alert bad certificate: SSL alert number 42
/// (after 1ms in state APIVERSION_QUERY)", for an untrusted certificate and for none alike. Newer JDKs
/// (17.0.21) send TLS 1.3's `certificate_required` (116) instead: "tlsv13 alert certificate required".
fn assert_refused_by_broker(err: &support::ConnectError) {
    assert_eq!(err.code, RDKafkaErrorCode::BrokerTransportFailure, "{err}");
    assert!(
        err.message.contains("alert bad certificate") || err.message.contains("alert certificate required"),
        "{err}"
    );
}

#[test]
fn acls_let_a_user_read_only_the_topics_it_was_allowed() {
    let _turn = take_turn("acl");
    let c = start("acl", Security::sasl_ssl(&["alice"]).with_acls());
    let alice = c.client_props("alice");
    let (a, b) = (unique("acl-a"), unique("acl-b"));
    let (sent, want) = records(1_500_000_000_000);
    for t in [&a, &b] {
        create_topic(&c.bootstrap, t, 2, &[]);
        produce(&c.bootstrap, t, &sent);
    }
    // Read on the groups: consume_all's (see CONSUME_ALL_GROUP) and one to subscribe with below
    let group = unique("acl-group");
    c.allow_all(
        "User:alice",
        &[("topic", &a), ("group", CONSUME_ALL_GROUP), ("group", &group)],
        "literal",
        &["Read", "Describe"],
    );
    wait_for(TIMEOUT, "alice's ACLs to apply", || topic_error(&c, &alice, &a).is_none());

    assert_eq!(as_client(&c.bootstrap, &alice, || consume_all(&c.bootstrap, &a, TIMEOUT)), want);

    assert_eq!(topic_error(&c, &alice, &b), Some(RDKafkaErrorCode::TopicAuthorizationFailed));
    // A consumer group member (alice may use the group) subscribed to b gets the broker's error
    // as a consumer error. (Assigned partitions get none: librdkafka just never fetches them, and
    // ListOffsets fails locally with "Unknown partition".)
    let consumer: BaseConsumer = client_config(&c.bootstrap, &alice)
        .set("group.id", &group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    consumer.subscribe(&[&b]).expect("subscribe");
    let start = Instant::now();
    let err = loop {
        assert!(start.elapsed() < REFUSAL, "alice, subscribed to {b}, got no error within {REFUSAL:?}");
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Ok(m)) => panic!("alice read {b}-{} at offset {}", m.partition(), m.offset()),
            Some(Err(e)) => break e,
        }
    };
    eprintln!("[acl] alice subscribed to {b}: {err}");
    assert!(matches!(err, KafkaError::MessageConsumption(RDKafkaErrorCode::TopicAuthorizationFailed)), "{err:?}");
}

/// The error of `topic` in a metadata answer to `props`, `None` if it is there without one.
fn topic_error(c: &Cluster, props: &[(String, String)], topic: &str) -> Option<RDKafkaErrorCode> {
    let client: BaseConsumer = client_config(&c.bootstrap, props).create().expect("metadata client");
    let md = client.fetch_metadata(Some(topic), TIMEOUT).expect("metadata");
    let t = md.topics().iter().find(|t| t.name() == topic).expect("topic in metadata answer");
    t.error().map(RDKafkaErrorCode::from)
}

/// The point of the test bed: ferry, configured with `Cluster::client_props` in its flow files
/// (`flows_dir` writes the admin's), copies from a SASL_SSL cluster to an mTLS cluster.
#[test]
fn ferry_copies_from_a_sasl_ssl_cluster_to_an_mtls_cluster() {
    let _turn = take_turn("ferry");
    let (east, west) = std::thread::scope(|s| {
        let east = s.spawn(|| start("east", Security::sasl_ssl(&[])));
        let west = s.spawn(|| start("west", Security::mtls(&[])));
        (east.join().expect("east"), west.join().expect("west"))
    });
    let topic = unique("secure-copy");
    create_topic(&east.bootstrap, &topic, 2, &[]);
    let (sent, want) = records(1_400_000_000_000);
    produce(&east.bootstrap, &topic, &sent);

    let dir = flows_dir(&east, &west, &east_west_flow(&format!("\"{topic}\""), ""));
    let clusters = std::fs::read_to_string(dir.path().join("clusters.toml")).unwrap();
    assert!(clusters.contains("[clusters.east.client]") && clusters.contains("\"sasl.username\" = \"admin\""));
    let mut ferry = Ferry::start(dir.path(), &[]);
    let remote = format!("east.{topic}");
    wait_for(Duration::from_secs(60), &format!("{remote} complete on west"), || {
        support::end_offsets(&west.bootstrap, &remote).iter().sum::<i64>() >= sent.len() as i64
    });
    let got = consume_all(&west.bootstrap, &remote, TIMEOUT);
    ferry.terminate(Duration::from_secs(30));
    let strip = |recs: Vec<Rec>| recs.into_iter().map(|r| Rec { offset: -1, ..r }).collect::<Vec<_>>();
    assert_eq!(strip(got), strip(want));
}
