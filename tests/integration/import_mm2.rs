//! `ferry import-mm2` as an operator moving from MM2 uses it: a realistic `mm2.properties` and a Strimzi
//! `KafkaMirrorMaker2` in the shape of Strimzi's published examples become a flows directory that
//! `ferry validate` accepts, with every mapped key's value, every other key reported, and no secret; and an
//! MM2 SMT chain, run by MM2 itself and by ferry from the imported rules, copies the same records.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

fn ferry(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ferry"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("ferry runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The flow table of `dir/name` (one flow per file).
fn flow(dir: &Path, name: &str) -> toml::Table {
    let file: toml::Table = std::fs::read_to_string(dir.join(name)).expect("read").parse().expect("TOML");
    file["flows"].as_array().expect("flows")[0].as_table().expect("table").clone()
}

fn strings(v: &toml::Value) -> Vec<String> {
    v.as_array().expect("array").iter().map(|s| s.as_str().expect("string").to_string()).collect()
}

const EAST_PW: &str = "East-Scram-Pass-31";
const WEST_PW: &str = "West-Scram-Pass-47";

fn mm2_properties() -> String {
    format!(
        r#"# Active-active between two data centres (connect-mirror-maker.properties style)
clusters = east, west
east.bootstrap.servers = east-kafka-1:9093, east-kafka-2:9093
west.bootstrap.servers = west-kafka-1:9093

security.protocol = SASL_SSL
sasl.mechanism = SCRAM-SHA-512
east.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required \
    username="mm2-east" \
    password="{EAST_PW}";
west.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required username="mm2-west" password="{WEST_PW}";
ssl.truststore.location = /etc/kafka/secrets/truststore.jks
ssl.truststore.password = changeit-truststore

east->west.enabled = true
west->east.enabled = true

topics = orders\\..*, payments, inventory-.*
topics.exclude = .*[\\-\\.]internal, .*\\.replica, __.*, orders\\.test
east->west.groups = billing-.*, shipping
groups.exclude = console-consumer-.*, connect-.*, __.*, tmp-.*

emit.checkpoints.interval.seconds = 20
emit.heartbeats.interval.seconds = 5
refresh.topics.interval.seconds = 300
east->west.sync.group.offsets.enabled = true
sync.group.offsets.interval.seconds = 30
offset-syncs.topic.location = target
replication.factor = 3
replication.policy.separator = .
tasks.max = 4
sync.topic.acls.enabled = false
checkpoints.topic.replication.factor = 3
west->east.transforms = dropTest, lineage, strip, cast
west->east.transforms.dropTest.type = org.apache.kafka.connect.transforms.Filter
west->east.transforms.dropTest.predicate = isTest
west->east.transforms.lineage.type = org.apache.kafka.connect.transforms.InsertHeader
west->east.transforms.lineage.header = x-origin
west->east.transforms.lineage.value.literal = west
west->east.transforms.strip.type = org.apache.kafka.connect.transforms.DropHeaders
west->east.transforms.strip.headers = x-secret
west->east.transforms.cast.type = org.apache.kafka.connect.transforms.Cast$Value
west->east.transforms.cast.spec = int64
west->east.predicates = isTest
west->east.predicates.isTest.type = org.apache.kafka.connect.transforms.predicates.TopicNameMatches
west->east.predicates.isTest.pattern = .*\\.test
"#
    )
}

#[test]
fn an_mm2_properties_file_becomes_a_valid_flows_directory_without_its_secrets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("mm2.properties");
    std::fs::write(&file, mm2_properties()).expect("write");
    let out = dir.path().join("flows");
    let started = std::time::Instant::now();
    let run = ferry(&["import-mm2", file.to_str().expect("path"), "--out", out.to_str().expect("path")], &[]);
    let (stdout, stderr) = (text(&run.stdout), text(&run.stderr));
    assert!(run.status.success(), "{stderr}");
    eprintln!("import-mm2 took {:?}", started.elapsed());

    // Every key without an equivalent is reported, with why.
    for (key, why) in [
        ("ssl.truststore.location", "Java key store"),
        ("ssl.truststore.password", "PEM CA files have none"),
        ("tasks.max", "no task count"),
        ("west->east.transforms.cast.type", "records are copied without this one"),
    ] {
        assert!(
            stdout.lines().any(|l| l.trim_start().starts_with(&format!("{key}: ")) && l.contains(why)),
            "{key}: {stdout}"
        );
    }
    assert!(stdout.contains("FERRY_EAST_SASL_PASSWORD") && stdout.contains("FERRY_WEST_SASL_PASSWORD"), "{stdout}");

    // Each mapped key has its value.
    let clusters: toml::Table =
        std::fs::read_to_string(out.join("clusters.toml")).expect("read").parse().expect("TOML");
    let east = &clusters["clusters"]["east"];
    assert_eq!(east["bootstrap_servers"].as_str(), Some("east-kafka-1:9093, east-kafka-2:9093"));
    let client = &east["client"];
    assert_eq!(client["security.protocol"].as_str(), Some("sasl_ssl"));
    assert_eq!(client["sasl.mechanism"].as_str(), Some("SCRAM-SHA-512"));
    assert_eq!(client["sasl.username"].as_str(), Some("mm2-east"));
    assert_eq!(client["sasl.password"].as_str(), Some("${FERRY_EAST_SASL_PASSWORD}"));
    assert_eq!(clusters["clusters"]["west"]["client"]["sasl.username"].as_str(), Some("mm2-west"));

    let ew = flow(&out, "east-to-west.toml");
    assert_eq!(strings(&ew["topics"]), ["orders\\..*", "payments", "inventory-.*"]);
    assert_eq!(strings(&ew["topics_exclude"]), [".*[\\-\\.]internal", ".*\\.replica", "__.*", "orders\\.test"]);
    assert_eq!(strings(&ew["groups"]), ["billing-.*", "shipping"]);
    assert_eq!(strings(&ew["groups_exclude"]), ["console-consumer-.*", "connect-.*", "__.*", "tmp-.*"]);
    for (key, value) in [
        ("emit_checkpoints_interval_seconds", "20"),
        ("emit_heartbeats_interval_seconds", "5"),
        ("refresh_topics_interval_seconds", "300"),
        ("sync_group_offsets_enabled", "true"),
        ("sync_group_offsets_interval_seconds", "30"),
        ("offset_syncs_topic_location", "\"target\""),
        ("replication_factor", "3"),
        ("sync_topic_acls_enabled", "false"),
        ("checkpoints_topic_replication_factor", "3"),
        ("replication_policy_separator", "\".\""),
        ("mm2_offsets_topic", "\"mm2-offsets.east.internal\""),
        ("mm2_source_connector", "\"MirrorSourceConnector\""),
    ] {
        assert_eq!(ew.get(key).map(|v| v.to_string()).as_deref(), Some(value), "{key}");
    }
    let we = flow(&out, "west-to-east.toml");
    assert!(we.get("groups").is_none() && we.get("sync_group_offsets_enabled").is_none(), "{we:?}");
    assert_eq!(we["mm2_offsets_topic"].as_str(), Some("mm2-offsets.west.internal"));
    assert_eq!(we.get("sync_topic_acls_enabled").and_then(|v| v.as_bool()), Some(false), "{we:?}");
    // The SMT chain: Filter + TopicNameMatches, InsertHeader and DropHeaders as record rules.
    let rule = &we["filter"][0];
    assert_eq!(rule["name"].as_str(), Some("dropTest"), "{we:?}");
    assert_eq!(strings(&rule["remote_topics"]), [".*\\.test"], "MM2's predicate sees the remote name");
    assert_eq!(we["headers"]["insert"]["x-origin"].as_str(), Some("west"));
    assert_eq!(strings(&we["headers"]["drop"]), ["x-secret"]);

    // No secret literal anywhere the operator (or a log) sees.
    for f in ["clusters.toml", "east-to-west.toml", "west-to-east.toml"] {
        let content = std::fs::read_to_string(out.join(f)).expect("read");
        for secret in [EAST_PW, WEST_PW, "changeit-truststore"] {
            assert!(!content.contains(secret), "{f} holds a secret");
        }
    }
    let json = ferry(
        &["import-mm2", file.to_str().expect("path"), "--out", out.to_str().expect("path"), "--force", "-o", "json"],
        &[],
    );
    assert!(json.status.success(), "{}", text(&json.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    let unmapped: Vec<&str> =
        doc["unmapped"].as_array().expect("list").iter().filter_map(|u| u["key"].as_str()).collect();
    assert!(unmapped.contains(&"tasks.max") && unmapped.contains(&"west->east.transforms.cast.type"), "{unmapped:?}");
    assert!(!unmapped.iter().any(|k| k.contains("dropTest") || k.contains("predicates")), "{unmapped:?}");
    for output in [&stdout, &stderr, &text(&json.stdout), &text(&json.stderr)] {
        for secret in [EAST_PW, WEST_PW, "changeit-truststore"] {
            assert!(!output.contains(secret), "output holds a secret: {output}");
        }
    }

    // `ferry validate` accepts the result once the variables it names are set.
    let env = [("FERRY_EAST_SASL_PASSWORD", EAST_PW), ("FERRY_WEST_SASL_PASSWORD", WEST_PW)];
    let valid = ferry(&["validate", "--flows", out.to_str().expect("path")], &env);
    assert!(valid.status.success(), "{}", text(&valid.stderr));
    assert!(text(&valid.stdout).contains("2 cluster(s), 2 flow(s): valid"), "{}", text(&valid.stdout));
    assert!(!text(&valid.stdout).contains(EAST_PW));
}

#[test]
fn a_java_only_pattern_is_refused_by_key_and_nothing_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("mm2.properties");
    std::fs::write(&file, format!("{}east->west.topics = orders(?!\\\\.test).*\n", mm2_properties())).expect("write");
    let out = dir.path().join("flows");
    let run = ferry(&["import-mm2", file.to_str().expect("path"), "--out", out.to_str().expect("path")], &[]);
    assert_eq!(run.status.code(), Some(1));
    let stderr = text(&run.stderr);
    assert!(stderr.contains("east->west.topics: pattern `orders(?!\\.test).*` uses negative lookahead"), "{stderr}");
    assert!(!out.join("clusters.toml").exists());
}

/// Strimzi's `kafka-mirror-maker-2-tls.yaml` example in its `v1beta2` shape, with SCRAM on the source and
/// mutual TLS on the target.
const STRIMZI: &str = r#"
apiVersion: kafka.strimzi.io/v1beta2
kind: KafkaMirrorMaker2
metadata:
  name: my-mirror-maker-2
spec:
  version: 3.9.0
  replicas: 1
  connectCluster: "cluster-b"
  clusters:
  - alias: "cluster-a"
    bootstrapServers: cluster-a-kafka-bootstrap:9093
    tls:
      trustedCertificates:
        - secretName: cluster-a-cluster-ca-cert
          certificate: ca.crt
    authentication:
      type: scram-sha-512
      username: mm2-user
      passwordSecret:
        secretName: mm2-user
        password: password
  - alias: "cluster-b"
    bootstrapServers: cluster-b-kafka-bootstrap:9093
    tls:
      trustedCertificates:
        - secretName: cluster-b-cluster-ca-cert
          pattern: "*.crt"
    authentication:
      type: tls
      certificateAndKey:
        secretName: mm2-tls-user
        certificate: user.crt
        key: user.key
    config:
      # -1 means it will use the default replication factor configured in the broker
      config.storage.replication.factor: -1
      offset.storage.replication.factor: -1
      status.storage.replication.factor: -1
  mirrors:
  - sourceCluster: "cluster-a"
    targetCluster: "cluster-b"
    sourceConnector:
      tasksMax: 1
      config:
        replication.factor: -1
        offset-syncs.topic.replication.factor: -1
        sync.topic.acls.enabled: "false"
        refresh.topics.interval.seconds: 600
    checkpointConnector:
      tasksMax: 1
      config:
        checkpoints.topic.replication.factor: -1
        sync.group.offsets.enabled: "false"
        refresh.groups.interval.seconds: 600
    topicsPattern: "orders.*|payments"
    groupsPattern: ".*"
"#;

#[test]
fn a_strimzi_resource_becomes_flows_that_take_over_from_its_connectors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("mm2.yaml");
    std::fs::write(&file, STRIMZI).expect("write");
    let (out, secrets) = (dir.path().join("flows"), dir.path().join("secrets"));
    let run = ferry(
        &[
            "import-mm2",
            file.to_str().expect("path"),
            "--out",
            out.to_str().expect("path"),
            "--secrets-dir",
            secrets.to_str().expect("path"),
        ],
        &[],
    );
    let stdout = text(&run.stdout);
    assert!(run.status.success(), "{}", text(&run.stderr));
    for key in [
        "spec.version",
        "spec.replicas",
        "spec.clusters[1].config.offset.storage.replication.factor",
        "spec.mirrors[0].sourceConnector.tasksMax",
    ] {
        assert!(stdout.lines().any(|l| l.trim_start().starts_with(&format!("{key}: "))), "{key}: {stdout}");
    }
    let f = flow(&out, "cluster-a-to-cluster-b.toml");
    assert_eq!(f["mm2_source_connector"].as_str(), Some("cluster-a->cluster-b.MirrorSourceConnector"));
    assert_eq!(f["mm2_offsets_topic"].as_str(), Some("mirrormaker2-cluster-offsets"));
    assert_eq!(strings(&f["topics"]), ["orders.*|payments"]);
    assert_eq!(f["replication_factor"].as_integer(), Some(-1));
    assert_eq!(f["sync_group_offsets_enabled"].as_bool(), Some(false));
    assert_eq!(f["sync_topic_acls_enabled"].as_bool(), Some(false));
    // No heartbeat connector in the resource, and Strimzi writes nothing into the source.
    assert_eq!(f["emit_heartbeats_enabled"].as_bool(), Some(false));
    assert_eq!(f["emit_reverse_heartbeats_enabled"].as_bool(), Some(false));
    assert_eq!(f["offset_syncs_topic_replication_factor"].as_integer(), Some(-1));
    let clusters = std::fs::read_to_string(out.join("clusters.toml")).expect("read");
    let at = |p: &str| secrets.join(p).display().to_string();
    for needle in [
        format!("\"sasl.password\" = \"${{file:{}}}\"", at("mm2-user/password")),
        format!("\"ssl.ca.location\" = \"{}\"", at("cluster-a-cluster-ca-cert/ca.crt")),
        format!("\"ssl.key.location\" = \"{}\"", at("mm2-tls-user/user.key")),
        "\"security.protocol\" = \"sasl_ssl\"".to_string(),
        "\"sasl.mechanism\" = \"SCRAM-SHA-512\"".to_string(),
    ] {
        assert!(clusters.contains(&needle), "{needle} not in {clusters}");
    }

    // Mount the secrets where the import said they would be, and `ferry validate` accepts the result.
    let tls = support::tls::Tls::generate(&dir.path().join("pki"), &["mm2-tls-user"]);
    let (cert, key) = tls.client("mm2-tls-user");
    for (from, to) in [
        (tls.ca(), "cluster-a-cluster-ca-cert/ca.crt"),
        (tls.ca(), "cluster-b-cluster-ca-cert/ca.crt"),
        (cert, "mm2-tls-user/user.crt"),
        (key, "mm2-tls-user/user.key"),
    ] {
        std::fs::create_dir_all(secrets.join(to).parent().expect("dir")).expect("mkdir");
        std::fs::copy(from, secrets.join(to)).expect("copy");
    }
    std::fs::create_dir_all(secrets.join("mm2-user")).expect("mkdir");
    std::fs::write(secrets.join("mm2-user/password"), "Scram-Pass-From-Secret\n").expect("write");
    let valid = ferry(&["validate", "--flows", out.to_str().expect("path")], &[]);
    assert!(valid.status.success(), "{}", text(&valid.stderr));
    assert!(!text(&valid.stdout).contains("Scram-Pass-From-Secret"));
}

/// Standard base64 with padding, as Connect's `Values` writes bytes.
fn base64(bytes: &[u8]) -> Vec<u8> {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    for c in bytes.chunks(3) {
        let n =
            (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            out.push(if i <= c.len() { A[(n >> (18 - 6 * i) & 63) as usize] } else { b'=' });
        }
    }
    out
}

/// The SMT chain of an MM2 flow, scoped to `s->t`: only the test's topic kept, by its remote name (what
/// MM2's predicate sees), debug records and tombstones dropped, a lineage header inserted, a secret header
/// dropped.
fn smt_chain(s: &str, t: &str) -> String {
    format!(
        "{s}->{t}.transforms = onlyOurs, dropDebug, dropTombstones, lineage, strip
{s}->{t}.transforms.onlyOurs.type = org.apache.kafka.connect.transforms.Filter
{s}->{t}.transforms.onlyOurs.predicate = isOurs
{s}->{t}.transforms.onlyOurs.negate = true
{s}->{t}.transforms.dropDebug.type = org.apache.kafka.connect.transforms.Filter
{s}->{t}.transforms.dropDebug.predicate = isDebug
{s}->{t}.transforms.dropTombstones.type = org.apache.kafka.connect.transforms.Filter
{s}->{t}.transforms.dropTombstones.predicate = isTombstone
{s}->{t}.transforms.lineage.type = org.apache.kafka.connect.transforms.InsertHeader
{s}->{t}.transforms.lineage.header = x-origin
{s}->{t}.transforms.lineage.value.literal = dc-east
{s}->{t}.transforms.strip.type = org.apache.kafka.connect.transforms.DropHeaders
{s}->{t}.transforms.strip.headers = x-secret
{s}->{t}.header.converter = org.apache.kafka.connect.storage.SimpleHeaderConverter
{s}->{t}.predicates = isOurs, isDebug, isTombstone
{s}->{t}.predicates.isOurs.type = org.apache.kafka.connect.transforms.predicates.TopicNameMatches
{s}->{t}.predicates.isOurs.pattern = {s}[.]smt-chain-.*
{s}->{t}.predicates.isDebug.type = org.apache.kafka.connect.transforms.predicates.HasHeaderKey
{s}->{t}.predicates.isDebug.name = x-debug
{s}->{t}.predicates.isTombstone.type = org.apache.kafka.connect.transforms.predicates.RecordIsTombstone
"
    )
}

/// MM2 with an SMT chain, and ferry with what `import-mm2` made of the same file, copy the same source
/// topic: the two copies hold the same records with the same headers.
#[test]
fn an_imported_smt_chain_copies_what_mm2_copies() {
    use std::time::Duration;
    use support::mm2::{Mm2, dedicated_properties_as};
    use support::{Rec, consume_all, create_topic, produce, shared_pair, unique, wait_for};

    let (east, west) = shared_pair();
    let topic = unique("smt-chain");
    create_topic(&east.bootstrap, &topic, 1, &[]);
    let recs: Vec<Rec> = (0..60)
        .map(|i| {
            let mut r =
                Rec::new(0, format!("v-{i}").as_bytes(), 1_700_000_000_000 + i).key(format!("k-{i}").as_bytes());
            if i % 5 == 0 {
                r = r.header("x-debug", Some(b"1"));
            }
            if i % 7 == 3 {
                r.value = None;
            }
            r.header("x-secret", Some(b"s3cret")).header("trace", Some(&[0xff, 0x00, i as u8]))
        })
        .collect();
    produce(&east.bootstrap, &topic, &recs);
    let kept = recs.iter().enumerate().filter(|(i, _)| i % 5 != 0 && i % 7 != 3).count();

    // MM2 under aliases of its own; ferry imports the same file under others (its own remote topic).
    let props = |s: &str, t: &str| {
        format!("{}{}", dedicated_properties_as(s, east, t, west, &topic, "none-such"), smt_chain(s, t))
    };
    let mut mm2 = Mm2::start(&props("smtm", "smtn"));
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("mm2.properties");
    std::fs::write(&file, props("smtf", "smtg")).expect("write");
    let out = dir.path().join("flows");
    let run = ferry(&["import-mm2", file.to_str().expect("path"), "--out", out.to_str().expect("path")], &[]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    let imported = flow(&out, "smtf-to-smtg.toml");
    assert!(imported.get("filter").is_some() && imported.get("headers").is_some(), "{imported:?}");
    let report = text(&run.stdout);
    assert!(report.contains("smtf->smtg.header.converter: header converter") && report.contains("base64"), "{report}");
    let mut ferry = support::Ferry::start(&out, &[]);

    let (by_mm2, by_ferry) = (format!("smtm.{topic}"), format!("smtf.{topic}"));
    for remote in [&by_mm2, &by_ferry] {
        wait_for(Duration::from_secs(120), &format!("{kept} records on {remote}"), || {
            mm2.assert_running();
            support::scenario::assert_alive(&mut ferry);
            support::topic_partitions(&west.bootstrap, remote).is_some()
                && consume_all(&west.bootstrap, remote, Duration::from_secs(10)).len() >= kept
        });
    }
    let read = |remote: &str| -> Vec<_> {
        consume_all(&west.bootstrap, remote, Duration::from_secs(30))
            .into_iter()
            .map(|r| (r.key, r.value, r.headers, r.timestamp))
            .collect()
    };
    let (m, f) = (read(&by_mm2), read(&by_ferry));
    assert_eq!(m.len(), kept, "MM2 copied the records its chain keeps");
    // The same records, keys, values, timestamps and header names; MM2's header converter (which its
    // InsertHeader needs: with the default ByteArrayConverter the task dies on the STRING header) wrote
    // the binary `trace` values as base64 text. ferry copies them as they were.
    assert_eq!(f.len(), m.len());
    for ((fk, fv, fh, ft), (mk, mv, mh, mt)) in f.iter().zip(&m) {
        assert_eq!((fk, fv, ft), (mk, mv, mt), "same record");
        let names = |h: &Vec<(String, Option<Vec<u8>>)>| h.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
        assert_eq!(names(fh), ["trace", "x-origin"], "x-secret dropped, x-origin inserted");
        assert_eq!(names(fh), names(mh));
        assert_eq!(fh[1], mh[1], "the inserted header");
        let (ours, theirs) = (fh[0].1.clone().unwrap_or_default(), mh[0].1.clone().unwrap_or_default());
        assert_eq!(theirs, base64(&ours), "MM2 base64-encodes a binary header; ferry keeps its bytes");
    }
    mm2.stop(Duration::from_secs(30));
    let status = ferry.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status:?}");
}

/// An active-active MM2 with a hand-written suffix policy: told which template the class implements, the
/// import writes `remote_topic` on both flows and `ferry validate` accepts them; not told, it reports the
/// class and says how to name it.
#[test]
fn a_custom_policy_class_named_by_the_operator_becomes_a_template() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("mm2.properties");
    std::fs::write(
        &file,
        "clusters = east, west\neast.bootstrap.servers = east:9092\nwest.bootstrap.servers = west:9092\n\
         east->west.enabled = true\nwest->east.enabled = true\n\
         replication.policy.class = com.acme.kafka.SuffixReplicationPolicy\n",
    )
    .expect("write");
    let out = dir.path().join("flows");
    let (file, out_dir) = (file.to_str().expect("path"), out.to_str().expect("path"));
    let class = "com.acme.kafka.SuffixReplicationPolicy={topic}.{source}";
    let run = ferry(&["import-mm2", file, "--out", out_dir, "--policy-class", class], &[]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    for name in ["east-to-west.toml", "west-to-east.toml"] {
        let f = flow(&out, name);
        assert_eq!(f["remote_topic"].as_str(), Some("{topic}.{source}"), "{name}");
        assert!(!f.contains_key("replication_policy"), "{name}");
    }
    let validate = ferry(&["validate", "--flows", out_dir], &[]);
    assert!(validate.status.success(), "{}{}", text(&validate.stdout), text(&validate.stderr));
    assert!(text(&validate.stdout).contains("remote_topic=\"{topic}.{source}\""), "{}", text(&validate.stdout));

    let out = dir.path().join("unnamed");
    let run = ferry(&["import-mm2", file, "--out", out.to_str().expect("path")], &[]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    let stdout = text(&run.stdout);
    assert!(
        stdout.contains("custom policy class `com.acme.kafka.SuffixReplicationPolicy`")
            && stdout.contains("--policy-class 'com.acme.kafka.SuffixReplicationPolicy={topic}.{source}'"),
        "{stdout}"
    );

    // A template that cannot be read back is refused before anything is written.
    let out = dir.path().join("refused");
    let bad = "com.acme.kafka.SuffixReplicationPolicy={source}{topic}";
    let run = ferry(&["import-mm2", file, "--out", out.to_str().expect("path"), "--policy-class", bad], &[]);
    assert!(!run.status.success());
    assert!(text(&run.stderr).contains("--policy-class com.acme.kafka.SuffixReplicationPolicy={source}{topic}: {source} and {topic} need literal text"), "{}", text(&run.stderr));
    assert!(!out.exists(), "nothing written");
}
