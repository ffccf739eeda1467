//! Kafka Connect source offsets as a dedicated Java MM2 stores MirrorSourceConnector's copy
//! progress in `mm2-offsets.<S>.internal` on the target cluster.
//!
//! Only needed to take over from, or hand back to, a Java MM2 deployment. Connect looks offsets
//! up by the raw bytes of the serialized key, so keys must be byte-identical to what Connect's
//! `JsonConverter` (Jackson, `schemas.enable=false`) writes: the list
//! `["<connector>",{"cluster":…,"partition":…,"topic":…}]` without spaces, with the object
//! fields in the order Java's `HashMap` iterates them (`cluster`, `partition`, `topic`) and
//! Jackson's default string escaping. Decoding is tolerant instead, since any JSON a reader
//! meets there was written by someone else.

use serde_json::Value;

/// Connector name of the source connector in dedicated mode (the class's simple name).
pub const SOURCE_CONNECTOR: &str = "MirrorSourceConnector";

/// Partition count of the offsets topic MM2's dedicated mode creates (`offset.storage.partitions`).
pub const OFFSETS_TOPIC_PARTITIONS: i32 = 25;

/// The Connect offsets topic of the herder for flows from `source_alias`:
/// `mm2-offsets.<S>.internal`, with literal dots whatever the replication separator.
#[must_use]
pub fn offsets_topic(source_alias: &str) -> String {
    format!("mm2-offsets.{source_alias}.internal")
}

/// A decoded source-offset key: the copy position of `cluster`'s `topic`/`partition` as
/// tracked by connector `connector`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceOffsetKey {
    pub connector: String,
    pub cluster: String,
    pub topic: String,
    pub partition: i32,
}

/// A source-offset value that is not a JSON object with an integral `offset`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OffsetValueError {
    #[error("source offset value is not valid JSON: {0}")]
    Json(String),
    #[error("source offset value is not a JSON object: {0}")]
    NotAnObject(String),
    #[error("source offset `offset` is not a 64-bit integer: {0}")]
    NotAnInteger(String),
}

/// A key of the offsets topic that a reader of one connector's source positions cannot take for
/// someone else's: not Connect's key at all, or the connector's own key for the reader's cluster that
/// is not a source partition.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OffsetKeyError {
    #[error("the record has no key")]
    Missing,
    #[error("the key is not JSON ({0}): {1}")]
    Json(String, String),
    #[error("the key is not Connect's [\"<connector>\", {{<partition>}}]: {0}")]
    NotConnect(String),
    #[error("the key of connector `{0}` is not a source partition ({{\"cluster\", \"partition\", \"topic\"}}): {1}")]
    NotSourcePartition(String, String),
}

/// At most this much of an undecodable key is quoted in its error.
const QUOTED: usize = 120;

fn quoted(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    match text.char_indices().nth(QUOTED) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.into_owned(),
    }
}

/// Serialized key of the source offset for `cluster`'s `topic`/`partition`, e.g.
/// `["MirrorSourceConnector",{"cluster":"A","partition":0,"topic":"orders"}]`.
#[must_use]
pub fn encode_source_key(connector: &str, cluster: &str, topic: &str, partition: i32) -> Vec<u8> {
    let mut out = String::with_capacity(48 + connector.len() + cluster.len() + topic.len());
    out.push('[');
    push_json_string(&mut out, connector);
    out.push_str(",{\"cluster\":");
    push_json_string(&mut out, cluster);
    out.push_str(",\"partition\":");
    out.push_str(&partition.to_string());
    out.push_str(",\"topic\":");
    push_json_string(&mut out, topic);
    out.push_str("}]");
    out.into_bytes()
}

/// Serialized value `{"offset":<n>}`, where `n` is the offset of the last record copied (a
/// restarted task resumes at `n + 1`).
#[must_use]
pub fn encode_source_value(last_replicated_offset: i64) -> Vec<u8> {
    format!("{{\"offset\":{last_replicated_offset}}}").into_bytes()
}

/// Parses a key from the offsets topic. `None` for anything that is not a source-connector
/// key: checkpoint and heartbeat connector keys, other connectors' shapes, invalid JSON.
///
/// Field order and whitespace do not matter, but the partition object must have exactly the
/// `cluster`, `partition` and `topic` fields, with an integral partition in `i32` range.
#[must_use]
pub fn decode_source_key(bytes: &[u8]) -> Option<SourceOffsetKey> {
    let value: Value = serde_json::from_slice(bytes).ok()?;
    let (connector, partition) = connect_key(&value)?;
    source_key(connector, partition)
}

/// The key of `connector`'s source position of `cluster`'s topic partition, read from a record of the
/// offsets topic: `Ok(None)` for a key that is legitimately someone else's (another connector's, or this
/// connector's for another source cluster: a Connect offsets topic is shared), an error for a key that
/// is neither Connect's `["<connector>", {<partition>}]` (as Connect's own reader checks it:
/// `OffsetUtils.processPartitionKey`) nor, for this connector and cluster, a source partition.
pub fn source_key_for(
    key: Option<&[u8]>,
    connector: &str,
    cluster: &str,
) -> Result<Option<SourceOffsetKey>, OffsetKeyError> {
    let bytes = key.ok_or(OffsetKeyError::Missing)?;
    let value: Value = serde_json::from_slice(bytes).map_err(|e| OffsetKeyError::Json(e.to_string(), quoted(bytes)))?;
    let (name, partition) = connect_key(&value).ok_or_else(|| OffsetKeyError::NotConnect(quoted(bytes)))?;
    let others = partition.get("cluster").and_then(Value::as_str).is_some_and(|c| c != cluster);
    if name != connector || others {
        return Ok(None);
    }
    source_key(name, partition).map(Some).ok_or_else(|| OffsetKeyError::NotSourcePartition(name.into(), quoted(bytes)))
}

/// A Connect offsets key: the connector's name and its partition (a JSON object, or `null`, which Connect
/// passes over).
fn connect_key(value: &Value) -> Option<(&str, &Value)> {
    let [connector, partition] = value.as_array()?.as_slice() else {
        return None;
    };
    let connector = connector.as_str()?;
    (partition.is_object() || partition.is_null()).then_some((connector, partition))
}

/// A MirrorSourceConnector partition: exactly `cluster`, `partition` (in `i32` range) and `topic`.
fn source_key(connector: &str, partition: &Value) -> Option<SourceOffsetKey> {
    let map = partition.as_object()?;
    if map.len() != 3 {
        return None;
    }
    let cluster = map.get("cluster")?.as_str()?;
    let topic = map.get("topic")?.as_str()?;
    let partition = i32::try_from(map.get("partition")?.as_i64()?).ok()?;
    Some(SourceOffsetKey {
        connector: connector.to_owned(),
        cluster: cluster.to_owned(),
        topic: topic.to_owned(),
        partition,
    })
}

/// Parses a value from the offsets topic into the last copied offset.
///
/// `Ok(None)` means "no position": a tombstone, JSON `null`, or an object without `offset` (or
/// with `"offset":null`), all of which Java's `MirrorUtils.unwrapOffset` maps to -1. A
/// negative offset is returned as is; like Java, callers should treat it as no position.
///
/// # Errors
///
/// [`OffsetValueError`] for invalid JSON, a non-object, or a non-integral `offset`.
pub fn decode_source_value(bytes: Option<&[u8]>) -> Result<Option<i64>, OffsetValueError> {
    let Some(bytes) = bytes else {
        return Ok(None);
    };
    let value: Value = serde_json::from_slice(bytes).map_err(|e| OffsetValueError::Json(e.to_string()))?;
    let map = match value {
        Value::Null => return Ok(None),
        Value::Object(map) => map,
        other => return Err(OffsetValueError::NotAnObject(other.to_string())),
    };
    match map.get("offset") {
        None | Some(Value::Null) => Ok(None),
        Some(offset) => offset.as_i64().map(Some).ok_or_else(|| OffsetValueError::NotAnInteger(offset.to_string())),
    }
}

/// The offsets-topic partition Connect writes `key` to.
///
/// Connect's offset producer is a plain Java producer, so the record goes where Java's
/// default partitioner puts it: `toPositive(murmur2(key)) % num_partitions`. Pass the
/// partition count the offsets topic actually has (normally [`OFFSETS_TOPIC_PARTITIONS`], but
/// `offset.storage.partitions` may have been changed before the topic was created).
///
/// # Panics
///
/// If `num_partitions` is not positive.
#[must_use]
pub fn partition_for_key(key: &[u8], num_partitions: i32) -> i32 {
    super::murmur2::java_partition(key, num_partitions)
}

/// Appends `s` as a JSON string the way Jackson's default generator writes it: `"` and `\`
/// escaped, control characters as `\b \t \n \f \r` or `\u00XX` with upper-case hex, and
/// everything else (including `/`, DEL and non-ASCII) raw. serde_json's writer differs in the
/// hex case, hence this hand-written escaper.
fn push_json_string(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{08}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{0c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if u32::from(c) < 0x20 => {
                let b = u32::from(c) as usize;
                out.push_str("\\u00");
                out.push(char::from(HEX[b >> 4]));
                out.push(char::from(HEX[b & 0xf]));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_str(connector: &str, cluster: &str, topic: &str, partition: i32) -> String {
        String::from_utf8(encode_source_key(connector, cluster, topic, partition)).unwrap()
    }

    #[test]
    fn offsets_topic_name_and_constants() {
        assert_eq!(offsets_topic("A"), "mm2-offsets.A.internal");
        assert_eq!(offsets_topic("us-west"), "mm2-offsets.us-west.internal");
        assert_eq!(SOURCE_CONNECTOR, "MirrorSourceConnector");
        assert_eq!(OFFSETS_TOPIC_PARTITIONS, 25);
    }

    #[test]
    fn source_key_exact_bytes() {
        assert_eq!(
            encode_source_key(SOURCE_CONNECTOR, "A", "orders", 0),
            br#"["MirrorSourceConnector",{"cluster":"A","partition":0,"topic":"orders"}]"#
        );
        assert_eq!(
            key_str(SOURCE_CONNECTOR, "us-west", "B.orders", 2_147_483_647),
            r#"["MirrorSourceConnector",{"cluster":"us-west","partition":2147483647,"topic":"B.orders"}]"#
        );
        assert_eq!(key_str("c", "A", "t", -1), r#"["c",{"cluster":"A","partition":-1,"topic":"t"}]"#);
    }

    #[test]
    fn source_value_exact_bytes() {
        assert_eq!(encode_source_value(1234), br#"{"offset":1234}"#);
        assert_eq!(encode_source_value(0), br#"{"offset":0}"#);
        assert_eq!(encode_source_value(-1), br#"{"offset":-1}"#);
        assert_eq!(encode_source_value(i64::MAX), br#"{"offset":9223372036854775807}"#);
    }

    #[test]
    fn escapes_like_jackson() {
        // Legal Kafka topic names need no escaping; these cover what Jackson would do anyway.
        assert_eq!(
            key_str(SOURCE_CONNECTOR, "A", "my.topic_v-2", 1),
            r#"["MirrorSourceConnector",{"cluster":"A","partition":1,"topic":"my.topic_v-2"}]"#
        );
        assert_eq!(key_str("q\"b\\s/", "A", "t", 0), r#"["q\"b\\s/",{"cluster":"A","partition":0,"topic":"t"}]"#);
        assert_eq!(
            key_str("c", "\u{8}\u{c}\n\r\t", "\u{0}\u{1f}\u{7f}", 0),
            "[\"c\",{\"cluster\":\"\\b\\f\\n\\r\\t\",\"partition\":0,\"topic\":\"\\u0000\\u001F\u{7f}\"}]"
        );
        // Non-ASCII is written as raw UTF-8, not \u escapes.
        let key = encode_source_key("c", "zürich", "日本", 0);
        assert_eq!(key, "[\"c\",{\"cluster\":\"zürich\",\"partition\":0,\"topic\":\"日本\"}]".as_bytes());
    }

    #[test]
    fn special_characters_round_trip() {
        for (cluster, topic) in [
            ("A", "orders"),
            ("us-west-1", "a.b_c-d"),
            ("x\"y", "back\\slash"),
            ("ctl\u{1}", "tab\there"),
            ("ünï", "😀"),
        ] {
            let key = encode_source_key(SOURCE_CONNECTOR, cluster, topic, 7);
            assert_eq!(
                decode_source_key(&key),
                Some(SourceOffsetKey {
                    connector: SOURCE_CONNECTOR.to_owned(),
                    cluster: cluster.to_owned(),
                    topic: topic.to_owned(),
                    partition: 7,
                }),
                "{cluster:?} {topic:?}"
            );
        }
    }

    #[test]
    fn value_round_trip() {
        for offset in [0, 1234, i64::MAX, -1] {
            assert_eq!(decode_source_value(Some(&encode_source_value(offset))), Ok(Some(offset)));
        }
    }

    #[test]
    fn decoding_keys_is_tolerant_of_order_and_whitespace() {
        let expected = Some(SourceOffsetKey {
            connector: "MirrorSourceConnector".to_owned(),
            cluster: "A".to_owned(),
            topic: "orders".to_owned(),
            partition: 3,
        });
        assert_eq!(
            decode_source_key(
                br#" [ "MirrorSourceConnector" , { "topic" : "orders", "partition": 3, "cluster": "A" } ] "#
            ),
            expected
        );
        assert_eq!(
            decode_source_key(
                b"[\"MirrorSourceConnector\",\n{\"partition\":3,\"cluster\":\"A\",\"topic\":\"orders\"}]"
            ),
            expected
        );
        // Other connector names are returned for the caller to judge.
        assert_eq!(
            decode_source_key(br#"["my-mirror",{"cluster":"A","partition":0,"topic":"t"}]"#).map(|k| k.connector),
            Some("my-mirror".to_owned())
        );
    }

    #[test]
    fn decoding_rejects_other_shapes() {
        for key in [
            // Checkpoint and heartbeat connector keys.
            &br#"["MirrorCheckpointConnector",{"partition":0,"topic":"A.orders","group":"g1"}]"#[..],
            br#"["MirrorHeartbeatConnector",{"sourceClusterAlias":"A","targetClusterAlias":"B"}]"#,
            // Extra, missing or mistyped fields.
            br#"["MirrorSourceConnector",{"cluster":"A","partition":0,"topic":"t","x":1}]"#,
            br#"["MirrorSourceConnector",{"cluster":"A","partition":0}]"#,
            br#"["MirrorSourceConnector",{"cluster":"A","partition":"0","topic":"t"}]"#,
            br#"["MirrorSourceConnector",{"cluster":"A","partition":0.0,"topic":"t"}]"#,
            br#"["MirrorSourceConnector",{"cluster":"A","partition":2147483648,"topic":"t"}]"#,
            br#"["MirrorSourceConnector",{"cluster":null,"partition":0,"topic":"t"}]"#,
            br#"[1,{"cluster":"A","partition":0,"topic":"t"}]"#,
            // Wrong outer shape.
            br#"["MirrorSourceConnector"]"#,
            br#"["MirrorSourceConnector",{"cluster":"A","partition":0,"topic":"t"},1]"#,
            br#"{"cluster":"A","partition":0,"topic":"t"}"#,
            b"null",
            b"",
            b"not json",
            b"\xff\xfe",
        ] {
            assert_eq!(decode_source_key(key), None, "{}", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn a_reader_passes_over_others_keys_and_names_the_undecodable_ones() {
        let ours = |key: &[u8]| source_key_for(Some(key), SOURCE_CONNECTOR, "A");
        assert_eq!(
            ours(&encode_source_key(SOURCE_CONNECTOR, "A", "t", 2)).unwrap().map(|k| (k.topic, k.partition)),
            Some(("t".into(), 2))
        );
        // Someone else's, legitimately in a shared Connect offsets topic: passed over without a word.
        for key in [
            &encode_source_key(SOURCE_CONNECTOR, "B", "t", 0)[..],
            &encode_source_key("other-mirror", "A", "t", 0),
            br#"["MirrorCheckpointConnector",{"partition":0,"topic":"A.orders","group":"g1"}]"#,
            br#"["MirrorHeartbeatConnector",{"sourceClusterAlias":"A","targetClusterAlias":"B"}]"#,
            br#"["jdbc-source",{"table":"orders"}]"#,
            br#"["jdbc-source",null]"#,
            br#"["MirrorSourceConnector",{"cluster":"B","partition":"x"}]"#,
        ] {
            assert_eq!(ours(key), Ok(None), "{}", String::from_utf8_lossy(key));
        }
        // Not Connect's key at all, or this connector's for this cluster but not a source partition.
        assert_eq!(source_key_for(None, SOURCE_CONNECTOR, "A"), Err(OffsetKeyError::Missing));
        assert!(matches!(ours(b"not json"), Err(OffsetKeyError::Json(_, k)) if k == "not json"));
        assert!(matches!(ours(b"\xff\xfe"), Err(OffsetKeyError::Json(..))));
        for key in
            [&br#"{"cluster":"A","partition":0,"topic":"t"}"#[..], b"[1,{}]", br#"["c"]"#, br#"["c",1]"#, b"null"]
        {
            assert!(matches!(ours(key), Err(OffsetKeyError::NotConnect(_))), "{}", String::from_utf8_lossy(key));
        }
        for key in [
            &br#"["MirrorSourceConnector",{"cluster":"A","topic":"t"}]"#[..],
            br#"["MirrorSourceConnector",{"cluster":"A","partition":"0","topic":"t"}]"#,
            br#"["MirrorSourceConnector",{"partition":0,"topic":"t"}]"#,
            br#"["MirrorSourceConnector",null]"#,
        ] {
            let e = ours(key).unwrap_err();
            assert!(matches!(e, OffsetKeyError::NotSourcePartition(..)), "{}: {e}", String::from_utf8_lossy(key));
            assert!(e.to_string().contains("`MirrorSourceConnector` is not a source partition"), "{e}");
        }
        // A long key is quoted in part.
        let long = format!("[{}", "x".repeat(1_000));
        let e = ours(long.as_bytes()).unwrap_err().to_string();
        assert!(e.len() < 300 && e.ends_with("..."), "{e}");
    }

    #[test]
    fn decoding_values() {
        assert_eq!(decode_source_value(None), Ok(None));
        assert_eq!(decode_source_value(Some(b"null")), Ok(None));
        assert_eq!(decode_source_value(Some(b" { } ")), Ok(None));
        assert_eq!(decode_source_value(Some(br#"{"offset":null}"#)), Ok(None));
        assert_eq!(decode_source_value(Some(br#"{ "other": true, "offset" : 42 }"#)), Ok(Some(42)));
        assert_eq!(decode_source_value(Some(br#"{"offset":-5}"#)), Ok(Some(-5)));
    }

    #[test]
    fn garbage_values_are_errors() {
        assert!(matches!(decode_source_value(Some(b"")), Err(OffsetValueError::Json(_))));
        assert!(matches!(decode_source_value(Some(b"{\"offset\":")), Err(OffsetValueError::Json(_))));
        assert!(matches!(decode_source_value(Some(b"\x00\x01")), Err(OffsetValueError::Json(_))));
        assert_eq!(decode_source_value(Some(b"[1]")), Err(OffsetValueError::NotAnObject("[1]".to_owned())));
        assert!(matches!(decode_source_value(Some(b"1234")), Err(OffsetValueError::NotAnObject(_))));
        assert_eq!(
            decode_source_value(Some(br#"{"offset":"12"}"#)),
            Err(OffsetValueError::NotAnInteger("\"12\"".to_owned()))
        );
        assert!(matches!(decode_source_value(Some(br#"{"offset":1.5}"#)), Err(OffsetValueError::NotAnInteger(_))));
        assert!(matches!(
            decode_source_value(Some(br#"{"offset":9223372036854775808}"#)),
            Err(OffsetValueError::NotAnInteger(_))
        ));
    }

    #[test]
    fn partition_uses_java_murmur2() {
        let key = encode_source_key(SOURCE_CONNECTOR, "A", "orders", 0);
        // murmur2 of the key is -225638395 (independent Python port of Utils.murmur2);
        // toPositive gives 1921845253, and 1921845253 % 25 = 3.
        assert_eq!(crate::mm2::murmur2::murmur2(&key), -225_638_395);
        assert_eq!(partition_for_key(&key, OFFSETS_TOPIC_PARTITIONS), 3);
        assert_eq!(partition_for_key(&key, 1), 0);
        for n in [1, 5, 25, 50] {
            assert!((0..n).contains(&partition_for_key(&key, n)));
        }
    }
}
