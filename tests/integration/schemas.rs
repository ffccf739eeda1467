//! Schemas travel with the data (`schemas = "sync" | "translate"`), against real registries: one
//! Apicurio Registry per cluster of the shared pair ([`support::registry::shared_registries`]), and
//! records in the Confluent framing copied between real brokers.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use support::observe::{self, health, metric_sum};
use support::registry::{SchemaRegistry, framed, id_of, shared_registries};
use support::{Ferry, Rec, cluster_toml, consume_all, create_topic, produce, shared_pair, unique, wait_for};

const ARRIVAL: Duration = Duration::from_secs(120);
const FLOW: &str = "east->west";

fn avro(name: &str, fields: &[(&str, &str)]) -> String {
    let fields: Vec<String> = fields.iter().map(|(n, t)| format!(r#"{{"name":"{n}","type":{t}}}"#)).collect();
    format!(r#"{{"type":"record","name":"{name}","namespace":"com.example","fields":[{}]}}"#, fields.join(","))
}

/// A flows directory for the shared pair with each cluster's registry URL (`None`: no registry).
fn flows_dir(east_registry: Option<&str>, west_registry: Option<&str>, flow: &str) -> tempfile::TempDir {
    flows_dir_timeout(east_registry, west_registry, flow, 2)
}

/// [`flows_dir`] with the registries' `timeout_seconds`.
fn flows_dir_timeout(
    east_registry: Option<&str>,
    west_registry: Option<&str>,
    flow: &str,
    timeout_seconds: u32,
) -> tempfile::TempDir {
    let (east, west) = shared_pair();
    let dir = tempfile::tempdir().expect("flows dir");
    let mut clusters = String::new();
    for (alias, cluster, registry) in [("east", east, east_registry), ("west", west, west_registry)] {
        clusters.push_str(&cluster_toml(alias, &cluster.bootstrap, &[]));
        if let Some(url) = registry {
            clusters.push_str(&format!(
                "[clusters.{alias}.schema_registry]\nurl = \"{url}\"\ntimeout_seconds = {timeout_seconds}\n"
            ));
        }
    }
    std::fs::write(dir.path().join("clusters.toml"), clusters).expect("write clusters");
    std::fs::write(dir.path().join("flow.toml"), flow).expect("write flow");
    dir
}

fn flow(topic: &str, extra: &str) -> String {
    format!("[[flows]]\nsource = \"east\"\ntarget = \"west\"\ntopics = [\"{topic}\"]\n{extra}\n")
}

/// The records of `topic` on `cluster` once at least `n` are there.
fn wait_records(bootstrap: &str, topic: &str, n: usize, what: &str) -> Vec<Rec> {
    let mut got = Vec::new();
    wait_for(ARRIVAL, what, || {
        got = if support::topic_partitions(bootstrap, topic).is_some() {
            consume_all(bootstrap, topic, Duration::from_secs(20))
        } else {
            Vec::new()
        };
        got.len() >= n
    });
    got
}

/// `translate`: every framed key and value arrives with the target registry's ID of the same schema
/// (its bytes after the ID untouched), subjects renamed with their topic, versions in the source's order,
/// references first; unframed records, tombstones and short values pass unchanged and are counted; a
/// version registered while the flow runs is picked up from the first record that carries it.
#[test]
fn translate_gives_each_record_the_target_registrys_id_of_the_same_schema() {
    let (east, west) = shared_pair();
    let (east_reg, west_reg) = shared_registries();
    let topic = unique("schemas-tr");
    create_topic(&east.bootstrap, &topic, 2, &[]);
    let subject = format!("{topic}-value");
    let key_subject = format!("{topic}-key");
    // Filler schemas on the source only, so that the two registries number differently: 40, more than
    // every other test of the binary registers on west's shared registry, so west's counter cannot
    // catch up with east's whatever runs beside this test.
    for i in 0..40 {
        east_reg.register(
            &format!("filler{i}-{topic}"),
            &avro(&format!("Filler{i}"), &[("f", "\"int\"")]),
            None,
            json!([]),
        );
    }
    // A record-named subject (kept as it is) referenced by version 2 of the value subject.
    let money_subject = format!("com.example.Money{}", topic.replace('-', "_"));
    let money_name = money_subject.trim_start_matches("com.example.");
    let money_id = east_reg.register(&money_subject, &avro(money_name, &[("cents", "\"long\"")]), None, json!([]));
    let v1 = east_reg.register(&subject, &avro("Order", &[("id", "\"long\"")]), None, json!([]));
    let v2_schema = avro(
        "Order",
        &[("id", "\"long\""), ("total", &format!(r#"["null","com.example.{money_name}"],"default":null"#))],
    );
    let v2 = east_reg.register(
        &subject,
        &v2_schema,
        None,
        json!([{"name": format!("com.example.{money_name}"), "subject": money_subject, "version": 1}]),
    );
    let key_id = east_reg.register(&key_subject, "\"string\"", None, json!([]));
    // The key subject has a compatibility level of its own: it goes with the subject. (Not the value
    // subject: Apicurio 3.0 cannot run a rule over a version with references.)
    let (code, level) =
        east_reg.call("PUT", &format!("/config/{key_subject}"), Some(&json!({"compatibility": "FORWARD_TRANSITIVE"})));
    assert_eq!(code, 200, "{level}");
    println!("source IDs: money {money_id}, v1 {v1}, v2 {v2}, key {key_id}");

    let mut recs = Vec::new();
    for i in 0..40u8 {
        let id = if i % 2 == 0 { v1 } else { v2 };
        recs.push(
            Rec::new(i32::from(i % 2), &framed(id, &[i, 0xfe, 0xed]), 1_700_000_000_000 + i64::from(i))
                .key(&framed(key_id, &[b'k', i])),
        );
    }
    recs.push(Rec::new(0, b"{\"plain\": \"json\"}", 1_700_000_001_000)); // unframed
    recs.push(Rec::new(0, &[0, 0, 1], 1_700_000_001_001)); // magic byte, too short for an ID
    let mut tombstone = Rec::new(1, b"", 1_700_000_001_002).key(&framed(key_id, b"gone"));
    tombstone.value = None;
    recs.push(tombstone);
    produce(&east.bootstrap, &topic, &recs);

    let dir = flows_dir(
        Some(&east_reg.url()),
        Some(&west_reg.url()),
        &flow(&topic, "schemas = \"translate\"\nschemas_refresh_interval_seconds = 2"),
    );
    let mut ferry = Ferry::start(dir.path(), &[]);
    let remote = format!("east.{topic}");
    let got = wait_records(&west.bootstrap, &remote, recs.len(), "every record on west");
    assert_eq!(got.len(), recs.len(), "every record once");

    // The target's subjects: renamed with the topic, the record-named one as it is, versions in order.
    let target_subject = format!("east.{subject}");
    assert_eq!(west_reg.versions(&target_subject), vec![1, 2], "both versions, in order");
    let (t1, s1, _) = west_reg.version(&target_subject, 1).expect("version 1 on west");
    let (t2, s2, refs2) = west_reg.version(&target_subject, 2).expect("version 2 on west");
    let (tk, _, _) = west_reg.version(&format!("east.{key_subject}"), 1).expect("the key subject on west");
    assert_eq!(s1, east_reg.schema(v1).expect("v1"), "the same schema text");
    assert_eq!(s2, v2_schema);
    assert_eq!(refs2[0]["subject"], money_subject.as_str(), "the reference keeps its record-named subject: {refs2}");
    assert!(west_reg.version(&money_subject, 1).is_some(), "the referenced schema is on west");
    assert!(
        west_reg.versions(&format!("filler0-{topic}")).is_empty()
            && west_reg.versions(&format!("east.filler0-{topic}")).is_empty(),
        "subjects of no copied topic stay home"
    );
    assert_ne!((t1, t2), (v1, v2), "the registries number differently (else the test proves nothing)");
    let (_, level) = west_reg.call("GET", &format!("/config/east.{key_subject}"), None);
    assert_eq!(level["compatibilityLevel"], "FORWARD_TRANSITIVE", "the subject's own level on west: {level}");

    // Every framed record: the target's ID, the bytes after it unchanged.
    let source_by_bytes: BTreeMap<(i32, Vec<u8>), &Rec> = recs
        .iter()
        .filter_map(|r| r.value.as_ref().map(|v| ((r.partition, v[v.len().min(5)..].to_vec()), r)))
        .collect();
    let mut translated = 0;
    for r in &got {
        let Some(value) = &r.value else {
            assert_eq!(r.key.as_deref().map(id_of), Some(Some(tk)), "the tombstone's key is translated");
            continue;
        };
        match id_of(value) {
            Some(id) => {
                let source =
                    source_by_bytes.get(&(r.partition, value[5..].to_vec())).expect("a source record with these bytes");
                let want = if id_of(source.value.as_ref().expect("value")) == Some(v1) { t1 } else { t2 };
                assert_eq!(id, want, "partition {} record {:?}", r.partition, &value[5..]);
                assert_eq!(&value[5..], &source.value.as_ref().expect("value")[5..], "bytes after the ID unchanged");
                assert_eq!(r.key.as_deref().and_then(id_of), Some(tk), "the key's ID too");
                translated += 1;
            }
            None => assert!(
                value.as_slice() == b"{\"plain\": \"json\"}" || value.as_slice() == [0, 0, 1],
                "unframed unchanged: {value:?}"
            ),
        }
    }
    assert_eq!(translated, 40);

    // A new version while the flow runs: its first record brings it over.
    let v3 = east_reg.register(
        &subject,
        &avro("Order", &[("id", "\"long\""), ("note", r#""string","default":"""#)]),
        None,
        json!([]),
    );
    produce(&east.bootstrap, &topic, &[Rec::new(0, &framed(v3, b"v3"), 1_700_000_002_000)]);
    let got = wait_records(&west.bootstrap, &remote, recs.len() + 1, "the version 3 record on west");
    let (t3, _, _) = west_reg.version(&target_subject, 3).expect("version 3 on west");
    let last = got.iter().find(|r| r.value.as_deref().is_some_and(|v| v.ends_with(b"v3"))).expect("the v3 record");
    assert_eq!(last.value.as_deref().and_then(id_of), Some(t3));

    let text = observe::metrics(ferry.listen_addr());
    let labels = [("flow", FLOW), ("topic", topic.as_str())];
    assert!(metric_sum(&text, "ferry_schema_ids_translated_total", &labels) >= 82.0, "{text}");
    assert_eq!(metric_sum(&text, "ferry_records_unframed_total", &labels), 2.0, "the JSON and the short value");
    assert!(metric_sum(&text, "ferry_schema_subjects_synced_total", &[("flow", FLOW)]) >= 3.0);
    let addr = ferry.listen_addr();
    wait_for(Duration::from_secs(10), "/flows shows the schema figures", || {
        let figures = &health(addr)["flows"][FLOW]["schemas"];
        figures["ids_translated"].as_u64() >= Some(82) && figures["records_unframed"] == 2
    });
    ferry.terminate(Duration::from_secs(30));
}

/// A record whose schema cannot be resolved (the target's registry does not answer) holds its partition,
/// named in `/health`, while the flow's other partitions copy on, without waiting for the registry's
/// timeout; once the registry answers, the held records arrive in order with the target's IDs: never
/// one with an untranslated ID.
#[test]
fn an_unresolvable_schema_holds_its_partition_until_the_registry_answers() {
    let (east, west) = shared_pair();
    let (east_reg, _) = shared_registries();
    let topic = unique("schemas-hold");
    create_topic(&east.bootstrap, &topic, 2, &[]);
    let id = east_reg.register(&format!("{topic}-value"), &avro("Held", &[("n", "\"int\"")]), None, json!([]));
    let mut recs: Vec<Rec> =
        (0..10u8).map(|i| Rec::new(0, &framed(id, &[i]), 1_700_000_000_000 + i64::from(i))).collect();
    recs.push(Rec::new(1, b"not framed", 1_700_000_000_100));
    produce(&east.bootstrap, &topic, &recs);

    // West's registry: nothing listens on its port yet, then a socket that takes connections and never
    // answers (a registry hung or behind a black hole), with a registry timeout of 60 s.
    let port = support::free_port();
    let west_url = format!("http://127.0.0.1:{port}{}", support::registry::API);
    let extra = "schemas = \"translate\"\nrestart_backoff_initial_seconds = 0.2\nrestart_backoff_max_seconds = 2";
    let dir = flows_dir_timeout(Some(&east_reg.url()), Some(&west_url), &flow(&topic, extra), 60);
    let (code, out, err) =
        support::ferry_cli(&["check", "--flows", dir.path().to_str().expect("path"), "--flow", FLOW]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains(&format!("target registry of `west` ({west_url}), read: ")) && out.contains("no answer"),
        "{out}"
    );
    let black_hole = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind the registry's port");
    let mut ferry = Ferry::start(dir.path(), &[]);
    let remote = format!("east.{topic}");
    ferry.wait_log("node started", Duration::from_secs(60));
    let addr = ferry.listen_addr();
    let mut problem = serde_json::Value::Null;
    // Well inside the registry's timeout: the copy loop does not wait for it.
    wait_for(Duration::from_secs(25), "partition 0 held with a named schema error, partition 1 copied", || {
        let h = health(addr);
        problem = h["flows"][FLOW]["partition_problems"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["topic"] == topic.as_str() && p["partition"] == 0).cloned())
            .unwrap_or_default();
        problem["reason"].as_str().is_some_and(|r| r.contains(&format!("schema ID {id}")))
            && support::topic_partitions(&west.bootstrap, &remote).is_some()
            && consume_all(&west.bootstrap, &remote, Duration::from_secs(10)).iter().any(|r| r.partition == 1)
    });
    println!("held: {problem}");
    assert_eq!(problem["offset"], 0, "held at the first record: {problem}");
    // While the partition is retried, the other partition's new records keep coming.
    produce(&east.bootstrap, &topic, &[Rec::new(1, b"later", 1_700_000_000_200)]);
    wait_for(Duration::from_secs(15), "a later record of partition 1 on west", || {
        consume_all(&west.bootstrap, &remote, Duration::from_secs(5))
            .iter()
            .any(|r| r.value.as_deref() == Some(b"later"))
    });
    let copied = consume_all(&west.bootstrap, &remote, Duration::from_secs(10));
    assert!(copied.iter().all(|r| r.partition == 1), "nothing of the held partition was written: {copied:?}");
    recs.push(Rec::new(1, b"later", 1_700_000_000_200));
    drop(black_hole);

    // The registry comes: the held records follow, in order, translated.
    let west_reg = SchemaRegistry::start_on(port);
    let got = wait_records(&west.bootstrap, &remote, recs.len(), "the held records on west");
    assert_eq!(got.len(), recs.len(), "every record once");
    let (target_id, _, _) = west_reg.version(&format!("east.{topic}-value"), 1).expect("the subject on west");
    let held: Vec<&Rec> = got.iter().filter(|r| r.partition == 0).collect();
    for (i, r) in held.iter().enumerate() {
        let v = r.value.as_deref().expect("value");
        assert_eq!((id_of(v), &v[5..]), (Some(target_id), &[i as u8][..]), "record {i} of partition 0");
    }
    let text = observe::metrics(addr);
    assert!(metric_sum(&text, "ferry_schema_registry_errors_total", &[("registry", "west")]) >= 1.0, "{text}");
    wait_for(Duration::from_secs(30), "the problem cleared", || {
        health(addr)["flows"][FLOW]["partition_problems"]
            .as_array()
            .is_none_or(|ps| ps.iter().all(|p| p["topic"] != topic.as_str()))
    });
    ferry.terminate(Duration::from_secs(30));
}

/// Active-active with `translate` both ways: each flow brings its own topics' subjects over and never
/// the other's copies back, so no schema ping-pongs; records written on each side arrive on the other
/// with that side's IDs.
#[test]
fn an_active_active_pair_translates_both_ways_without_registering_back() {
    let (east, west) = shared_pair();
    let (east_reg, west_reg) = shared_registries();
    let topic = unique("schemas-aa");
    create_topic(&east.bootstrap, &topic, 1, &[]);
    create_topic(&west.bootstrap, &topic, 1, &[]);
    let subject = format!("{topic}-value");
    let on_east = east_reg.register(&subject, &avro("FromEast", &[("e", "\"int\"")]), None, json!([]));
    let on_west = west_reg.register(&subject, &avro("FromWest", &[("w", "\"int\"")]), None, json!([]));
    produce(&east.bootstrap, &topic, &[Rec::new(0, &framed(on_east, b"east"), 1_700_000_000_000)]);
    produce(&west.bootstrap, &topic, &[Rec::new(0, &framed(on_west, b"west"), 1_700_000_000_000)]);
    // `.*<topic>` also matches the other side's copy (`east.<topic>` on west): only the policy's cycle
    // rule keeps it, and its subject, from going back.
    let flows = ["east", "west"]
        .iter()
        .map(|source| {
            let target = if *source == "east" { "west" } else { "east" };
            format!("[[flows]]\nsource = \"{source}\"\ntarget = \"{target}\"\ntopics = [\".*{topic}\"]\nschemas = \"translate\"\nrefresh_topics_interval_seconds = 2\nschemas_refresh_interval_seconds = 2\n")
        })
        .collect::<String>();
    let dir = flows_dir(Some(&east_reg.url()), Some(&west_reg.url()), &flows);
    let mut ferry = Ferry::start(dir.path(), &[]);
    let on_west_copy = wait_records(&west.bootstrap, &format!("east.{topic}"), 1, "east's record on west");
    let on_east_copy = wait_records(&east.bootstrap, &format!("west.{topic}"), 1, "west's record on east");
    let (west_id, west_text, _) = west_reg.version(&format!("east.{subject}"), 1).expect("east's subject on west");
    let (east_id, east_text, _) = east_reg.version(&format!("west.{subject}"), 1).expect("west's subject on east");
    assert!(west_text.contains("FromEast") && east_text.contains("FromWest"));
    assert_eq!(on_west_copy[0].value.as_deref().and_then(id_of), Some(west_id));
    assert_eq!(on_east_copy[0].value.as_deref().and_then(id_of), Some(east_id));
    // A version no record carries yet, on each side, after both copies exist: it crosses only by a
    // refresh, so once both have crossed, each flow has refreshed with the other's copy in its registry.
    east_reg.register(
        &subject,
        &avro("FromEast", &[("e", "\"int\""), ("e2", r#""int","default":0"#)]),
        None,
        json!([]),
    );
    west_reg.register(
        &subject,
        &avro("FromWest", &[("w", "\"int\""), ("w2", r#""int","default":0"#)]),
        None,
        json!([]),
    );
    wait_for(Duration::from_secs(60), "version 2 of each side's subject on the other side", || {
        west_reg.versions(&format!("east.{subject}")) == [1, 2]
            && east_reg.versions(&format!("west.{subject}")) == [1, 2]
    });
    for (registry, name) in [(east_reg, "east"), (west_reg, "west")] {
        let (code, all) = registry.call("GET", "/subjects", None);
        assert_eq!(code, 200);
        let ours: Vec<&str> = all
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str())
            .filter(|s| s.contains(topic.as_str()))
            .collect();
        let other = if name == "east" { "west" } else { "east" };
        assert_eq!(ours.len(), 2, "{name}: its own subject and the other side's copy, nothing else: {ours:?}");
        assert!(ours.contains(&subject.as_str()) && ours.contains(&format!("{other}.{subject}").as_str()), "{ours:?}");
        assert_eq!(registry.versions(&subject), vec![1, 2], "{name}'s own subject got no version from the other side");
    }
    ferry.terminate(Duration::from_secs(30));
}

/// `sync` brings the subjects over and leaves the records as they are (their IDs stay the source's).
#[test]
fn sync_brings_the_subjects_over_and_copies_records_byte_for_byte() {
    let (east, west) = shared_pair();
    let (east_reg, west_reg) = shared_registries();
    let topic = unique("schemas-sync");
    create_topic(&east.bootstrap, &topic, 1, &[]);
    let subject = format!("{topic}-value");
    let id = east_reg.register(&subject, &avro("Synced", &[("s", "\"string\"")]), None, json!([]));
    let recs: Vec<Rec> = (0..5u8).map(|i| Rec::new(0, &framed(id, &[i]), 1_700_000_000_000 + i64::from(i))).collect();
    produce(&east.bootstrap, &topic, &recs);
    let dir = flows_dir(Some(&east_reg.url()), Some(&west_reg.url()), &flow(&topic, "schemas = \"sync\""));
    let mut ferry = Ferry::start(dir.path(), &[]);
    let got = wait_records(&west.bootstrap, &format!("east.{topic}"), recs.len(), "every record on west");
    let values: Vec<_> = got.iter().map(|r| r.value.clone()).collect();
    assert_eq!(values, recs.iter().map(|r| r.value.clone()).collect::<Vec<_>>(), "byte for byte, source IDs kept");
    let (_, text, _) = west_reg.version(&format!("east.{subject}"), 1).expect("the subject on west");
    assert_eq!(Some(text), east_reg.schema(id));
    let metrics = observe::metrics(ferry.listen_addr());
    let labels = [("flow", FLOW), ("topic", topic.as_str())];
    assert_eq!(metric_sum(&metrics, "ferry_schema_ids_translated_total", &labels), 0.0, "nothing rewritten");
    ferry.terminate(Duration::from_secs(30));
}

/// An exactly-once flow translates inside its transactions: a `read_committed` reader of the target
/// sees every record once, each with the target's ID.
#[test]
fn an_exactly_once_flow_translates_ids_inside_its_transactions() {
    let (east, west) = shared_pair();
    let (east_reg, west_reg) = shared_registries();
    let topic = unique("schemas-eos");
    create_topic(&east.bootstrap, &topic, 2, &[]);
    let subject = format!("{topic}-value");
    let v1 = east_reg.register(&subject, &avro("Once", &[("a", "\"int\"")]), None, json!([]));
    let v2 =
        east_reg.register(&subject, &avro("Once", &[("a", "\"int\""), ("b", r#""int","default":0"#)]), None, json!([]));
    let recs: Vec<Rec> = (0..200u16)
        .map(|i| {
            let id = if i % 3 == 0 { v1 } else { v2 };
            Rec::new(i32::from(i % 2), &framed(id, &i.to_be_bytes()), 1_700_000_000_000 + i64::from(i))
        })
        .collect();
    produce(&east.bootstrap, &topic, &recs);
    let extra = "schemas = \"translate\"\ndelivery = \"exactly_once\"";
    let dir = flows_dir(Some(&east_reg.url()), Some(&west_reg.url()), &flow(&topic, extra));
    let mut ferry = Ferry::start(dir.path(), &[]);
    let got = wait_records(&west.bootstrap, &format!("east.{topic}"), recs.len(), "every record on west, committed");
    assert_eq!(got.len(), recs.len(), "each once");
    let target = |v: i64| west_reg.version(&format!("east.{subject}"), v).expect("version on west").0;
    let (t1, t2) = (target(1), target(2));
    for r in &got {
        let value = r.value.as_deref().expect("value");
        let i = u16::from_be_bytes([value[5], value[6]]);
        assert_eq!(id_of(value), Some(if i % 3 == 0 { t1 } else { t2 }), "record {i}");
    }
    ferry.terminate(Duration::from_secs(30));
}

/// `on_unknown_schema = "pass"`: a record whose ID cannot be resolved is copied as it is, and counted.
#[test]
fn pass_copies_an_unresolvable_record_unchanged_and_counts_it() {
    let (east, west) = shared_pair();
    let (east_reg, _) = shared_registries();
    let topic = unique("schemas-pass");
    create_topic(&east.bootstrap, &topic, 1, &[]);
    let id = east_reg.register(&format!("{topic}-value"), &avro("Passed", &[("p", "\"int\"")]), None, json!([]));
    let recs: Vec<Rec> = (0..3u8).map(|i| Rec::new(0, &framed(id, &[i]), 1_700_000_000_000 + i64::from(i))).collect();
    produce(&east.bootstrap, &topic, &recs);
    // The target's registry: nothing listens there.
    let west_url = format!("http://127.0.0.1:{}{}", support::free_port(), support::registry::API);
    let extra = "schemas = \"translate\"\non_unknown_schema = \"pass\"";
    let dir = flows_dir(Some(&east_reg.url()), Some(&west_url), &flow(&topic, extra));
    let mut ferry = Ferry::start(dir.path(), &[]);
    let got = wait_records(&west.bootstrap, &format!("east.{topic}"), recs.len(), "every record on west");
    let values: Vec<_> = got.iter().map(|r| r.value.clone()).collect();
    assert_eq!(values, recs.iter().map(|r| r.value.clone()).collect::<Vec<_>>(), "copied unchanged");
    let metrics = observe::metrics(ferry.listen_addr());
    let labels = [("flow", FLOW), ("topic", topic.as_str())];
    assert_eq!(metric_sum(&metrics, "ferry_schema_ids_passed_total", &labels), 3.0, "{metrics}");
    assert_eq!(metric_sum(&metrics, "ferry_schema_ids_translated_total", &labels), 0.0);
    ferry.terminate(Duration::from_secs(30));
}

/// A target registry behind HTTPS: trusted through `ca_file`, it is asked and written like any other;
/// with a CA that did not sign it, `ferry check` names the failed handshake.
#[test]
fn a_registry_behind_tls_is_trusted_through_its_ca_file() {
    let (east, west) = shared_pair();
    let (east_reg, _) = shared_registries();
    let certs = tempfile::tempdir().expect("certs dir");
    let tls = support::tls::Tls::generate(certs.path(), &[]);
    let west_reg = SchemaRegistry::start_tls(tls.dir());
    let topic = unique("schemas-tls");
    create_topic(&east.bootstrap, &topic, 1, &[]);
    let id = east_reg.register(&format!("{topic}-value"), &avro("Secure", &[("s", "\"int\"")]), None, json!([]));
    produce(&east.bootstrap, &topic, &[Rec::new(0, &framed(id, b"tls"), 1_700_000_000_000)]);

    let dir = tempfile::tempdir().expect("flows dir");
    let clusters = |ca: &std::path::Path| {
        format!(
            "{}[clusters.east.schema_registry]\nurl = \"{}\"\n{}[clusters.west.schema_registry]\nurl = \"{}\"\nca_file = \"{}\"\n",
            cluster_toml("east", &east.bootstrap, &[]),
            east_reg.url(),
            cluster_toml("west", &west.bootstrap, &[]),
            west_reg.url(),
            ca.display()
        )
    };
    std::fs::write(dir.path().join("flow.toml"), flow(&topic, "schemas = \"translate\"")).expect("write flow");
    let check =
        |dir: &std::path::Path| support::ferry_cli(&["check", "--flows", dir.to_str().expect("path"), "--flow", FLOW]);
    std::fs::write(dir.path().join("clusters.toml"), clusters(&tls.untrusted_ca())).expect("write clusters");
    let (code, out, err) = check(dir.path());
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("target registry of `west`") && out.contains("TLS handshake"), "{out}");

    std::fs::write(dir.path().join("clusters.toml"), clusters(&tls.ca())).expect("write clusters");
    let (code, out, err) = check(dir.path());
    assert!(out.contains(&format!("target west ({}): read ok, write ok", west_reg.url())), "{code}: {out}{err}");
    let mut ferry = Ferry::start(dir.path(), &[]);
    let got = wait_records(&west.bootstrap, &format!("east.{topic}"), 1, "the record on west");
    let (target_id, _, _) = west_reg.version_tls(&format!("east.{topic}-value"), 1).expect("the subject on west");
    assert_eq!(got[0].value.as_deref().and_then(id_of), Some(target_id));
    ferry.terminate(Duration::from_secs(30));
}

/// Protobuf imports and JSON Schema `$ref`s: the referenced schema goes first, under its own subject,
/// and the referencing one is registered with the target's reference.
#[test]
fn protobuf_and_json_schema_references_go_first() {
    let (east, west) = shared_pair();
    let (east_reg, west_reg) = shared_registries();
    let topic = unique("schemas-refs");
    create_topic(&east.bootstrap, &topic, 1, &[]);
    let suffix = topic.replace('-', "_");
    let common = format!("acme.common.{suffix}");
    east_reg.register(
        &common,
        &format!("syntax = \"proto3\";\npackage acme{suffix};\nmessage Money {{ int64 cents = 1; }}\n"),
        Some("PROTOBUF"),
        json!([]),
    );
    let order = east_reg.register(
        &format!("{topic}-value"),
        &format!("syntax = \"proto3\";\npackage acme{suffix};\nimport \"acme/common.proto\";\nmessage Order {{ acme{suffix}.Money total = 1; }}\n"),
        Some("PROTOBUF"),
        json!([{"name": "acme/common.proto", "subject": common, "version": 1}]),
    );
    let json_common = format!("acme.json.{suffix}");
    let json_ref = format!("https://acme.example/{suffix}/money.json");
    east_reg.register(
        &json_common,
        &format!(r#"{{"$id":"{json_ref}","type":"object","properties":{{"cents":{{"type":"integer"}}}}}}"#),
        Some("JSON"),
        json!([]),
    );
    let key = east_reg.register(
        &format!("{topic}-key"),
        &format!(r#"{{"type":"object","properties":{{"total":{{"$ref":"{json_ref}"}}}}}}"#),
        Some("JSON"),
        json!([{"name": json_ref, "subject": json_common, "version": 1}]),
    );
    // A Protobuf value starts with its message indexes after the ID: copied untouched like any payload.
    produce(
        &east.bootstrap,
        &topic,
        &[Rec::new(0, &framed(order, &[0, 8, 42]), 1_700_000_000_000).key(&framed(key, b"{}"))],
    );
    let dir = flows_dir(Some(&east_reg.url()), Some(&west_reg.url()), &flow(&topic, "schemas = \"translate\""));
    let mut ferry = Ferry::start(dir.path(), &[]);
    let got = wait_records(&west.bootstrap, &format!("east.{topic}"), 1, "the record on west");
    let (value_id, _, refs) = west_reg.version(&format!("east.{topic}-value"), 1).expect("the value subject on west");
    let (key_id, _, key_refs) = west_reg.version(&format!("east.{topic}-key"), 1).expect("the key subject on west");
    assert_eq!(refs, json!([{"name": "acme/common.proto", "subject": common, "version": 1}]), "record-named: kept");
    assert_eq!(key_refs[0]["subject"], json_common.as_str());
    assert!(west_reg.version(&common, 1).is_some() && west_reg.version(&json_common, 1).is_some());
    let value = got[0].value.as_deref().expect("value");
    assert_eq!((id_of(value), &value[5..]), (Some(value_id), &[0u8, 8, 42][..]), "the ID replaced, the indexes kept");
    assert_eq!(got[0].key.as_deref().and_then(id_of), Some(key_id));
    ferry.terminate(Duration::from_secs(30));
}

/// Identity policy both ways with `translate`: a record's copy carries the other registry's ID, and the
/// provenance header binds those bytes, so the flow back trusts it and never copies it back.
#[test]
fn an_identity_pair_translating_both_ways_copies_each_record_once() {
    let (east, west) = shared_pair();
    let (east_reg, west_reg) = shared_registries();
    // The same schema under the same subject on both registries, with different IDs (else the test
    // proves nothing). The registries are shared with other tests, whose registrations move their
    // counters: a topic whose IDs happen to be equal is left and another one tried, after a schema
    // registered on east alone has moved east's counter on (tests that register on both keep the two
    // in step, and a CI run once found them equal in all ten tries). West's is registered first, so
    // the flow finds it by content there.
    // A record name of its own per try: a registry gives identical content its earlier ID.
    let (topic, subject, name, on_east, west_id) = (0..10)
        .map(|i| {
            let (topic, name) = (unique("schemas-id"), format!("Both{i}"));
            let (subject, schema) = (format!("{topic}-value"), avro(&name, &[("b", "\"int\"")]));
            let west_id = west_reg.register(&subject, &schema, None, json!([]));
            let on_east = east_reg.register(&subject, &schema, None, json!([]));
            if on_east == west_id {
                let filler = avro(&format!("Filler{i}"), &[("f", "\"int\"")]);
                east_reg.register(&format!("{topic}-filler-value"), &filler, None, json!([]));
            }
            (topic, subject, name, on_east, west_id)
        })
        .find(|(_, _, _, on_east, west_id)| on_east != west_id)
        .expect("registries that number apart within 10 tries");
    create_topic(&east.bootstrap, &topic, 1, &[]);
    create_topic(&west.bootstrap, &topic, 1, &[]);
    produce(&east.bootstrap, &topic, &[Rec::new(0, &framed(on_east, b"from-east"), 1_700_000_000_000)]);
    let flows = ["east", "west"]
        .iter()
        .map(|source| {
            let target = if *source == "east" { "west" } else { "east" };
            format!(
                "[[flows]]\nsource = \"{source}\"\ntarget = \"{target}\"\ntopics = [\"{topic}\"]\nreplication_policy = \"identity\"\nschemas = \"translate\"\n"
            )
        })
        .collect::<String>();
    let dir = flows_dir(Some(&east_reg.url()), Some(&west_reg.url()), &flows);
    let mut ferry = Ferry::start(dir.path(), &[]);
    let on_west = wait_records(&west.bootstrap, &topic, 1, "east's record on west");
    assert_eq!(west_reg.version(&subject, 1).map(|(id, _, _)| id), Some(west_id), "the subject on west, same name");
    assert_eq!(on_west[0].value.as_deref().and_then(id_of), Some(west_id));
    // A record written on west after it: once it is on east, the flow west->east has passed east's copy.
    let west_own =
        west_reg.register(&subject, &avro(&name, &[("b", "\"int\""), ("c", r#""int","default":0"#)]), None, json!([]));
    produce(&west.bootstrap, &topic, &[Rec::new(0, &framed(west_own, b"from-west"), 1_700_000_000_001)]);
    let on_east_now = wait_records(&east.bootstrap, &topic, 2, "west's record on east");
    let values = |recs: &[Rec]| recs.iter().map(|r| r.value.as_deref().map(|v| v[5..].to_vec())).collect::<Vec<_>>();
    let expected = vec![Some(b"from-east".to_vec()), Some(b"from-west".to_vec())];
    assert_eq!(values(&on_east_now), expected, "east: its own record once, west's once, nothing back");
    let on_west_now = wait_records(&west.bootstrap, &topic, 2, "both on west");
    assert_eq!(values(&on_west_now), expected, "west: the same, nothing back");
    ferry.terminate(Duration::from_secs(30));
}
