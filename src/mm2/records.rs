//! Binary codecs for the records MM2 keeps in its internal topics: offset syncs
//! (`mm2-offset-syncs.<T>.internal`), checkpoints (`<S>.checkpoints.internal`) and heartbeats
//! (`heartbeats`).
//!
//! The layout is Kafka's protocol `Schema`/`Struct` encoding: big-endian fixed-width integers,
//! strings as an INT16 byte length followed by UTF-8, fields simply concatenated. Checkpoint
//! and heartbeat values start with an INT16 version (always written as 0); offset syncs have
//! no version.
//!
//! Reading is as lenient as Java MM2 up to 4.x: any version >= 0 is read with the v0 layout
//! and trailing bytes are ignored, the only way a newer writer could extend the format. Two
//! deliberate differences from Java: a negative version and invalid UTF-8 are errors (Java
//! would accept the first and substitute U+FFFD for the second).
//!
//! Writing is strict, because a record Java cannot read stalls Java's readers: strings longer
//! than 32767 bytes cannot be encoded, so the encoders that write strings return a `Result`.

use std::fmt;

/// The value version ferry writes for checkpoints and heartbeats.
pub const VALUE_VERSION: i16 = 0;

/// Longest string the INT16 length prefix allows.
pub const MAX_STRING_BYTES: usize = i16::MAX as usize;

/// Which kind of MM2 record failed to encode or decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    OffsetSync,
    Checkpoint,
    Heartbeat,
}

impl fmt::Display for RecordKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::OffsetSync => "OffsetSync",
            Self::Checkpoint => "Checkpoint",
            Self::Heartbeat => "Heartbeat",
        })
    }
}

/// Key or value of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordPart {
    Key,
    Value,
}

impl fmt::Display for RecordPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Key => "key",
            Self::Value => "value",
        })
    }
}

/// Why a single field could not be read or written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FieldError {
    #[error("truncated: needs {needed} bytes at byte {offset}, only {available} available")]
    Truncated { offset: usize, needed: usize, available: usize },
    #[error("string length {0} cannot be negative")]
    NegativeStringLength(i16),
    #[error("invalid UTF-8: {0}")]
    InvalidUtf8(std::str::Utf8Error),
    #[error("version {0} cannot be negative")]
    NegativeVersion(i16),
    #[error("string is {0} bytes long, more than the 32767 a Kafka STRING can hold")]
    StringTooLong(usize),
}

/// A record that could not be encoded or decoded. Field names are Java's schema field names.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The record has no value. MM2 never writes tombstones to its internal topics, and Java's
    /// readers fail on them.
    #[error("{record} record has no value (tombstone)")]
    Tombstone { record: RecordKind },
    #[error("{record} {part} field `{field}`: {reason}")]
    Field { record: RecordKind, part: RecordPart, field: &'static str, reason: FieldError },
}

/// An offset sync: upstream offset `upstream_offset` of `topic`/`partition` on the source was
/// copied to `downstream_offset` on the target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetSync {
    /// The upstream (source) topic name, e.g. `orders`, not `A.orders`.
    pub topic: String,
    pub partition: i32,
    pub upstream_offset: i64,
    pub downstream_offset: i64,
}

/// An [`OffsetSync`] decoded without copying: the topic name borrows the record's key. What the
/// checkpoint computer reads its backlog of offset syncs with (no allocation per record).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffsetSyncRef<'a> {
    /// The upstream (source) topic name, e.g. `orders`, not `A.orders`.
    pub topic: &'a str,
    pub partition: i32,
    pub upstream_offset: i64,
    pub downstream_offset: i64,
}

impl OffsetSyncRef<'_> {
    #[must_use]
    pub fn to_owned(&self) -> OffsetSync {
        OffsetSync {
            topic: self.topic.to_owned(),
            partition: self.partition,
            upstream_offset: self.upstream_offset,
            downstream_offset: self.downstream_offset,
        }
    }
}

/// A checkpoint: consumer group `group` committed `upstream_offset` on the source, which
/// translates to `downstream_offset` in the replicated topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    pub group: String,
    /// The downstream (renamed) topic, e.g. `A.orders`.
    pub topic: String,
    pub partition: i32,
    pub upstream_offset: i64,
    pub downstream_offset: i64,
    /// The group's commit metadata upstream, `""` when none.
    pub metadata: String,
}

/// A heartbeat emitted by the flow `source_alias -> target_alias` at `timestamp_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    pub source_alias: String,
    pub target_alias: String,
    /// Milliseconds since the epoch.
    pub timestamp_ms: i64,
}

impl OffsetSync {
    const KIND: RecordKind = RecordKind::OffsetSync;

    /// Key: `topic` STRING, `partition` INT32.
    ///
    /// # Errors
    ///
    /// [`FieldError::StringTooLong`] if the topic name exceeds 32767 bytes.
    pub fn encode_key(&self) -> Result<Vec<u8>, RecordError> {
        let mut w = Writer::new(Self::KIND, RecordPart::Key);
        w.string("topic", &self.topic)?;
        w.i32(self.partition);
        Ok(w.finish())
    }

    /// Value: `upstreamOffset` INT64, `offset` INT64 (no version header).
    #[must_use]
    pub fn encode_value(&self) -> Vec<u8> {
        let mut w = Writer::new(Self::KIND, RecordPart::Value);
        w.i64(self.upstream_offset);
        w.i64(self.downstream_offset);
        w.finish()
    }

    /// Key and value.
    ///
    /// # Errors
    ///
    /// As [`OffsetSync::encode_key`].
    pub fn encode(&self) -> Result<(Vec<u8>, Vec<u8>), RecordError> {
        Ok((self.encode_key()?, self.encode_value()))
    }

    /// Decodes a record read from an offset-syncs topic.
    ///
    /// # Errors
    ///
    /// [`RecordError::Tombstone`] without a value, [`RecordError::Field`] for malformed bytes.
    pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Self, RecordError> {
        Self::decode_ref(key, value).map(|s| s.to_owned())
    }

    /// [`OffsetSync::decode`] without copying the topic name out of `key`.
    ///
    /// # Errors
    ///
    /// As [`OffsetSync::decode`].
    pub fn decode_ref<'a>(key: &'a [u8], value: Option<&[u8]>) -> Result<OffsetSyncRef<'a>, RecordError> {
        let value = value.ok_or(RecordError::Tombstone { record: Self::KIND })?;
        let mut k = Reader::new(Self::KIND, RecordPart::Key, key);
        let topic = k.str("topic")?;
        let partition = k.i32("partition")?;
        let mut v = Reader::new(Self::KIND, RecordPart::Value, value);
        let upstream_offset = v.i64("upstreamOffset")?;
        let downstream_offset = v.i64("offset")?;
        Ok(OffsetSyncRef { topic, partition, upstream_offset, downstream_offset })
    }
}

impl Checkpoint {
    const KIND: RecordKind = RecordKind::Checkpoint;

    /// Key: `group` STRING, `topic` STRING, `partition` INT32.
    ///
    /// # Errors
    ///
    /// [`FieldError::StringTooLong`] if the group or topic exceeds 32767 bytes.
    pub fn encode_key(&self) -> Result<Vec<u8>, RecordError> {
        let mut w = Writer::new(Self::KIND, RecordPart::Key);
        w.string("group", &self.group)?;
        w.string("topic", &self.topic)?;
        w.i32(self.partition);
        Ok(w.finish())
    }

    /// Value: `version` INT16 (0), `upstreamOffset` INT64, `offset` INT64, `metadata` STRING.
    ///
    /// # Errors
    ///
    /// [`FieldError::StringTooLong`] if the metadata exceeds 32767 bytes.
    pub fn encode_value(&self) -> Result<Vec<u8>, RecordError> {
        let mut w = Writer::new(Self::KIND, RecordPart::Value);
        w.i16(VALUE_VERSION);
        w.i64(self.upstream_offset);
        w.i64(self.downstream_offset);
        w.string("metadata", &self.metadata)?;
        Ok(w.finish())
    }

    /// Key and value.
    ///
    /// # Errors
    ///
    /// As [`Checkpoint::encode_key`] and [`Checkpoint::encode_value`].
    pub fn encode(&self) -> Result<(Vec<u8>, Vec<u8>), RecordError> {
        Ok((self.encode_key()?, self.encode_value()?))
    }

    /// Decodes a record read from a checkpoints topic.
    ///
    /// # Errors
    ///
    /// [`RecordError::Tombstone`] without a value, [`RecordError::Field`] for malformed bytes
    /// or a negative version.
    pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Self, RecordError> {
        let value = value.ok_or(RecordError::Tombstone { record: Self::KIND })?;
        let mut k = Reader::new(Self::KIND, RecordPart::Key, key);
        let group = k.string("group")?;
        let topic = k.string("topic")?;
        let partition = k.i32("partition")?;
        let mut v = Reader::new(Self::KIND, RecordPart::Value, value);
        v.version()?;
        let upstream_offset = v.i64("upstreamOffset")?;
        let downstream_offset = v.i64("offset")?;
        let metadata = v.string("metadata")?;
        Ok(Self { group, topic, partition, upstream_offset, downstream_offset, metadata })
    }
}

impl Heartbeat {
    const KIND: RecordKind = RecordKind::Heartbeat;

    /// Key: `sourceClusterAlias` STRING, `targetClusterAlias` STRING.
    ///
    /// # Errors
    ///
    /// [`FieldError::StringTooLong`] if an alias exceeds 32767 bytes.
    pub fn encode_key(&self) -> Result<Vec<u8>, RecordError> {
        let mut w = Writer::new(Self::KIND, RecordPart::Key);
        w.string("sourceClusterAlias", &self.source_alias)?;
        w.string("targetClusterAlias", &self.target_alias)?;
        Ok(w.finish())
    }

    /// Value: `version` INT16 (0), `timestamp` INT64.
    #[must_use]
    pub fn encode_value(&self) -> Vec<u8> {
        let mut w = Writer::new(Self::KIND, RecordPart::Value);
        w.i16(VALUE_VERSION);
        w.i64(self.timestamp_ms);
        w.finish()
    }

    /// Key and value.
    ///
    /// # Errors
    ///
    /// As [`Heartbeat::encode_key`].
    pub fn encode(&self) -> Result<(Vec<u8>, Vec<u8>), RecordError> {
        Ok((self.encode_key()?, self.encode_value()))
    }

    /// Decodes a record read from a heartbeats topic.
    ///
    /// # Errors
    ///
    /// [`RecordError::Tombstone`] without a value, [`RecordError::Field`] for malformed bytes
    /// or a negative version.
    pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Self, RecordError> {
        let value = value.ok_or(RecordError::Tombstone { record: Self::KIND })?;
        let mut k = Reader::new(Self::KIND, RecordPart::Key, key);
        let source_alias = k.string("sourceClusterAlias")?;
        let target_alias = k.string("targetClusterAlias")?;
        let mut v = Reader::new(Self::KIND, RecordPart::Value, value);
        v.version()?;
        let timestamp_ms = v.i64("timestamp")?;
        Ok(Self { source_alias, target_alias, timestamp_ms })
    }
}

struct Writer {
    record: RecordKind,
    part: RecordPart,
    buf: Vec<u8>,
}

impl Writer {
    fn new(record: RecordKind, part: RecordPart) -> Self {
        Self { record, part, buf: Vec::new() }
    }

    fn i16(&mut self, n: i16) {
        self.buf.extend_from_slice(&n.to_be_bytes());
    }

    fn i32(&mut self, n: i32) {
        self.buf.extend_from_slice(&n.to_be_bytes());
    }

    fn i64(&mut self, n: i64) {
        self.buf.extend_from_slice(&n.to_be_bytes());
    }

    fn string(&mut self, field: &'static str, s: &str) -> Result<(), RecordError> {
        let Ok(len) = i16::try_from(s.len()) else {
            return Err(RecordError::Field {
                record: self.record,
                part: self.part,
                field,
                reason: FieldError::StringTooLong(s.len()),
            });
        };
        self.i16(len);
        self.buf.extend_from_slice(s.as_bytes());
        Ok(())
    }

    fn finish(self) -> Vec<u8> {
        self.buf
    }
}

struct Reader<'a> {
    record: RecordKind,
    part: RecordPart,
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(record: RecordKind, part: RecordPart, bytes: &'a [u8]) -> Self {
        Self { record, part, bytes, pos: 0 }
    }

    fn error(&self, field: &'static str, reason: FieldError) -> RecordError {
        RecordError::Field { record: self.record, part: self.part, field, reason }
    }

    fn take<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], RecordError> {
        let bytes = self.slice(field, N)?;
        let mut out = [0; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    fn slice(&mut self, field: &'static str, len: usize) -> Result<&'a [u8], RecordError> {
        let available = self.bytes.len() - self.pos;
        if len > available {
            return Err(self.error(field, FieldError::Truncated { offset: self.pos, needed: len, available }));
        }
        let bytes = &self.bytes[self.pos..self.pos + len];
        self.pos += len;
        Ok(bytes)
    }

    fn i16(&mut self, field: &'static str) -> Result<i16, RecordError> {
        self.take(field).map(i16::from_be_bytes)
    }

    fn i32(&mut self, field: &'static str) -> Result<i32, RecordError> {
        self.take(field).map(i32::from_be_bytes)
    }

    fn i64(&mut self, field: &'static str) -> Result<i64, RecordError> {
        self.take(field).map(i64::from_be_bytes)
    }

    fn string(&mut self, field: &'static str) -> Result<String, RecordError> {
        self.str(field).map(str::to_owned)
    }

    fn str(&mut self, field: &'static str) -> Result<&'a str, RecordError> {
        let len = self.i16(field)?;
        let Ok(len) = usize::try_from(len) else {
            return Err(self.error(field, FieldError::NegativeStringLength(len)));
        };
        let bytes = self.slice(field, len)?;
        std::str::from_utf8(bytes).map_err(|e| self.error(field, FieldError::InvalidUtf8(e)))
    }

    /// Reads the value header; every version >= 0 is read with the v0 layout (Java only
    /// `assert`s the version, and assertions are off in production).
    fn version(&mut self) -> Result<i16, RecordError> {
        let version = self.i16("version")?;
        if version < 0 {
            return Err(self.error("version", FieldError::NegativeVersion(version)));
        }
        Ok(version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint(metadata: &str) -> Checkpoint {
        Checkpoint {
            group: "g1".to_owned(),
            topic: "A.orders".to_owned(),
            partition: 3,
            upstream_offset: 1000,
            downstream_offset: 990,
            metadata: metadata.to_owned(),
        }
    }

    fn offset_sync() -> OffsetSync {
        OffsetSync { topic: "orders".to_owned(), partition: 3, upstream_offset: 1000, downstream_offset: 990 }
    }

    fn heartbeat() -> Heartbeat {
        Heartbeat { source_alias: "B".to_owned(), target_alias: "A".to_owned(), timestamp_ms: 1_700_000_000_000 }
    }

    const CHECKPOINT_KEY: [u8; 18] = [
        0x00, 0x02, b'g', b'1', // group
        0x00, 0x08, b'A', b'.', b'o', b'r', b'd', b'e', b'r', b's', // topic
        0x00, 0x00, 0x00, 0x03, // partition
    ];
    const CHECKPOINT_VALUE: [u8; 20] = [
        0x00, 0x00, // version
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xe8, // upstreamOffset 1000
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xde, // offset 990
        0x00, 0x00, // metadata ""
    ];
    const OFFSET_SYNC_KEY: [u8; 12] = [
        0x00, 0x06, b'o', b'r', b'd', b'e', b'r', b's', // topic
        0x00, 0x00, 0x00, 0x03, // partition
    ];
    const OFFSET_SYNC_VALUE: [u8; 16] = [
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xe8, // upstreamOffset 1000
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xde, // offset 990
    ];
    const HEARTBEAT_KEY: [u8; 6] = [0x00, 0x01, b'B', 0x00, 0x01, b'A'];
    const HEARTBEAT_VALUE: [u8; 10] = [
        0x00, 0x00, // version
        0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00, // 1700000000000
    ];

    // --- Golden bytes (§1.2–§1.4) ---------------------------------------------------------

    #[test]
    fn checkpoint_golden_bytes() {
        let (key, value) = checkpoint("").encode().unwrap();
        assert_eq!(key, CHECKPOINT_KEY);
        assert_eq!(value, CHECKPOINT_VALUE);
    }

    #[test]
    fn checkpoint_with_metadata_golden_bytes() {
        let value = checkpoint("meta").encode_value().unwrap();
        assert_eq!(value.len(), 24);
        assert_eq!(value[..18], CHECKPOINT_VALUE[..18]);
        assert_eq!(value[18..], [0x00, 0x04, b'm', b'e', b't', b'a']);
    }

    #[test]
    fn offset_sync_golden_bytes() {
        let (key, value) = offset_sync().encode().unwrap();
        assert_eq!(key, OFFSET_SYNC_KEY);
        assert_eq!(value, OFFSET_SYNC_VALUE);
    }

    #[test]
    fn heartbeat_golden_bytes() {
        let (key, value) = heartbeat().encode().unwrap();
        assert_eq!(key, HEARTBEAT_KEY);
        assert_eq!(value, HEARTBEAT_VALUE);
    }

    // --- Decoding and round trips ---------------------------------------------------------

    #[test]
    fn golden_bytes_decode() {
        assert_eq!(Checkpoint::decode(&CHECKPOINT_KEY, Some(&CHECKPOINT_VALUE)).unwrap(), checkpoint(""));
        assert_eq!(OffsetSync::decode(&OFFSET_SYNC_KEY, Some(&OFFSET_SYNC_VALUE)).unwrap(), offset_sync());
        assert_eq!(Heartbeat::decode(&HEARTBEAT_KEY, Some(&HEARTBEAT_VALUE)).unwrap(), heartbeat());
    }

    #[test]
    fn borrowed_offset_sync_decode_reads_the_same_and_fails_the_same() {
        let sync = OffsetSync::decode_ref(&OFFSET_SYNC_KEY, Some(&OFFSET_SYNC_VALUE)).unwrap();
        assert_eq!(sync.to_owned(), offset_sync());
        let key: &[u8] = &OFFSET_SYNC_KEY;
        assert!(std::ptr::eq(sync.topic.as_ptr(), key[2..].as_ptr()), "the topic borrows the key");
        for (key, value) in [(&OFFSET_SYNC_KEY[..10], Some(&OFFSET_SYNC_VALUE[..])), (&OFFSET_SYNC_KEY[..], None)] {
            assert_eq!(OffsetSync::decode_ref(key, value).unwrap_err(), OffsetSync::decode(key, value).unwrap_err());
        }
    }

    #[test]
    fn round_trips_including_extremes() {
        let checkpoints = [
            checkpoint("meta"),
            Checkpoint {
                group: "grüppe-✓".to_owned(),
                topic: "B.A.orders".to_owned(),
                partition: i32::MAX,
                upstream_offset: i64::MAX,
                downstream_offset: -1,
                metadata: "x".repeat(MAX_STRING_BYTES),
            },
        ];
        for c in checkpoints {
            let (key, value) = c.encode().unwrap();
            assert_eq!(Checkpoint::decode(&key, Some(&value)).unwrap(), c);
        }

        let sync = OffsetSync { topic: String::new(), partition: 0, upstream_offset: 0, downstream_offset: i64::MIN };
        let (key, value) = sync.encode().unwrap();
        assert_eq!(OffsetSync::decode(&key, Some(&value)).unwrap(), sync);

        let beat =
            Heartbeat { source_alias: "us-west".to_owned(), target_alias: "eu-central".to_owned(), timestamp_ms: -5 };
        let (key, value) = beat.encode().unwrap();
        assert_eq!(Heartbeat::decode(&key, Some(&value)).unwrap(), beat);
    }

    #[test]
    fn future_versions_and_trailing_bytes_are_read_as_v0() {
        let mut value = CHECKPOINT_VALUE.to_vec();
        value[1] = 7;
        value.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        let mut key = CHECKPOINT_KEY.to_vec();
        key.push(0xff);
        assert_eq!(Checkpoint::decode(&key, Some(&value)).unwrap(), checkpoint(""));

        let mut value = HEARTBEAT_VALUE.to_vec();
        value[0] = 0x7f;
        value.push(1);
        assert_eq!(Heartbeat::decode(&HEARTBEAT_KEY, Some(&value)).unwrap(), heartbeat());

        let mut value = OFFSET_SYNC_VALUE.to_vec();
        value.push(0);
        assert_eq!(OffsetSync::decode(&OFFSET_SYNC_KEY, Some(&value)).unwrap(), offset_sync());
    }

    // --- Errors ---------------------------------------------------------------------------

    #[test]
    fn tombstones_are_errors() {
        for (kind, result) in [
            (RecordKind::Checkpoint, Checkpoint::decode(&CHECKPOINT_KEY, None).map(drop)),
            (RecordKind::OffsetSync, OffsetSync::decode(&OFFSET_SYNC_KEY, None).map(drop)),
            (RecordKind::Heartbeat, Heartbeat::decode(&HEARTBEAT_KEY, None).map(drop)),
        ] {
            assert_eq!(result, Err(RecordError::Tombstone { record: kind }));
        }
        assert_eq!(
            Checkpoint::decode(&CHECKPOINT_KEY, None).unwrap_err().to_string(),
            "Checkpoint record has no value (tombstone)"
        );
    }

    #[test]
    fn negative_version_is_an_error() {
        let mut value = CHECKPOINT_VALUE.to_vec();
        value[0] = 0xff;
        value[1] = 0xff;
        let error = Checkpoint::decode(&CHECKPOINT_KEY, Some(&value)).unwrap_err();
        assert_eq!(error.to_string(), "Checkpoint value field `version`: version -1 cannot be negative");
        let mut value = HEARTBEAT_VALUE.to_vec();
        value[0] = 0x80;
        assert!(matches!(
            Heartbeat::decode(&HEARTBEAT_KEY, Some(&value)),
            Err(RecordError::Field { reason: FieldError::NegativeVersion(i16::MIN), .. })
        ));
    }

    #[test]
    fn truncated_fields_are_named() {
        let error = OffsetSync::decode(&OFFSET_SYNC_KEY[..10], Some(&OFFSET_SYNC_VALUE)).unwrap_err();
        assert_eq!(
            error,
            RecordError::Field {
                record: RecordKind::OffsetSync,
                part: RecordPart::Key,
                field: "partition",
                reason: FieldError::Truncated { offset: 8, needed: 4, available: 2 },
            }
        );
        assert_eq!(
            error.to_string(),
            "OffsetSync key field `partition`: truncated: needs 4 bytes at byte 8, only 2 available"
        );

        // A string whose length runs past the end.
        let error = Checkpoint::decode(&CHECKPOINT_KEY[..5], Some(&CHECKPOINT_VALUE)).unwrap_err();
        assert!(matches!(
            error,
            RecordError::Field { part: RecordPart::Key, field: "topic", reason: FieldError::Truncated { .. }, .. }
        ));
        // Missing metadata entirely.
        let error = Checkpoint::decode(&CHECKPOINT_KEY, Some(&CHECKPOINT_VALUE[..18])).unwrap_err();
        assert!(matches!(error, RecordError::Field { part: RecordPart::Value, field: "metadata", .. }));
        // Empty key and value.
        assert!(matches!(
            Heartbeat::decode(&[], Some(&HEARTBEAT_VALUE)),
            Err(RecordError::Field { field: "sourceClusterAlias", .. })
        ));
        assert!(matches!(
            Heartbeat::decode(&HEARTBEAT_KEY, Some(&[])),
            Err(RecordError::Field { field: "version", .. })
        ));
    }

    #[test]
    fn negative_string_length_is_an_error() {
        let key = [0xff, 0xff, 0x00, 0x00, 0x00, 0x01];
        let error = OffsetSync::decode(&key, Some(&OFFSET_SYNC_VALUE)).unwrap_err();
        assert_eq!(error.to_string(), "OffsetSync key field `topic`: string length -1 cannot be negative");
    }

    #[test]
    fn invalid_utf8_is_an_error() {
        let key = [0x00, 0x01, 0xff, 0x00, 0x01, b'A'];
        let error = Heartbeat::decode(&key, Some(&HEARTBEAT_VALUE)).unwrap_err();
        assert!(matches!(
            error,
            RecordError::Field {
                record: RecordKind::Heartbeat,
                part: RecordPart::Key,
                field: "sourceClusterAlias",
                reason: FieldError::InvalidUtf8(_),
            }
        ));
        assert!(error.to_string().contains("invalid UTF-8"), "{error}");
    }

    #[test]
    fn garbage_is_rejected_without_panicking() {
        let garbage: &[&[u8]] = &[b"", b"\x00", b"\x7f\xff", b"\x00\x05ab", b"hello world"];
        for key in garbage {
            for value in garbage {
                let _ = Checkpoint::decode(key, Some(value));
                let _ = OffsetSync::decode(key, Some(value));
                let _ = Heartbeat::decode(key, Some(value));
            }
        }
        assert!(Checkpoint::decode(b"hello world", Some(b"hello world")).is_err());
    }

    #[test]
    fn strings_over_32767_bytes_cannot_be_written() {
        let mut c = checkpoint("");
        c.metadata = "x".repeat(MAX_STRING_BYTES + 1);
        assert_eq!(
            c.encode_value(),
            Err(RecordError::Field {
                record: RecordKind::Checkpoint,
                part: RecordPart::Value,
                field: "metadata",
                reason: FieldError::StringTooLong(32_768),
            })
        );
        assert!(c.encode().is_err());
        // Bytes, not chars, count: 16384 two-byte chars are 32768 bytes.
        c.metadata = "é".repeat(16_384);
        assert!(c.encode_value().is_err());

        let sync = OffsetSync { topic: "t".repeat(40_000), ..offset_sync() };
        let error = sync.encode_key().unwrap_err();
        assert_eq!(
            error.to_string(),
            "OffsetSync key field `topic`: string is 40000 bytes long, more than the 32767 a Kafka STRING can hold"
        );
        let beat = Heartbeat { target_alias: "a".repeat(32_768), ..heartbeat() };
        assert!(matches!(beat.encode_key(), Err(RecordError::Field { field: "targetClusterAlias", .. })));
    }

    // --- §1.3 pitfall ---------------------------------------------------------------------

    #[test]
    fn checkpoint_value_read_as_offset_sync_is_shifted_nonsense() {
        // The 2-byte version header shifts every field: upstream reads the header plus the top
        // six bytes of upstreamOffset (all zero here), downstream reads 0x03e8 followed by six
        // zero bytes. Nothing in the bytes lets a reader notice.
        let sync = OffsetSync::decode(&OFFSET_SYNC_KEY, Some(&CHECKPOINT_VALUE)).unwrap();
        assert_eq!(sync.upstream_offset, 0);
        assert_eq!(sync.downstream_offset, 0x03e8_0000_0000_0000);
        assert_eq!(sync.downstream_offset, 281_474_976_710_656_000);
        assert_ne!(sync, offset_sync());

        // The key shapes differ too: a checkpoint key read as an offset sync key takes the
        // group as the topic and the topic's length prefix and first bytes as the partition.
        let wrong = OffsetSync::decode(&CHECKPOINT_KEY, Some(&OFFSET_SYNC_VALUE)).unwrap();
        assert_eq!(wrong.topic, "g1");
        assert_eq!(wrong.partition, 0x0008_412e);

        // The other way round, an offset sync value is too short to be a checkpoint.
        let error = Checkpoint::decode(&CHECKPOINT_KEY, Some(&OFFSET_SYNC_VALUE)).unwrap_err();
        assert!(matches!(error, RecordError::Field { field: "offset", reason: FieldError::Truncated { .. }, .. }));
    }
}
