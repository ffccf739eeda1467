//! The Confluent wire format of a key or value: magic byte 0, the schema's ID as 4 bytes big-endian,
//! then the serialized data (Avro, Protobuf with its message indexes, JSON). Only the ID means anything
//! to ferry; the bytes after it are never read or changed.

/// The magic byte of the framing.
pub const MAGIC: u8 = 0;
/// Magic byte and ID.
pub const HEADER_LEN: usize = 5;

/// The schema ID of `bytes` if they are framed: magic byte 0 and at least the 4 bytes of the ID.
pub fn schema_id(bytes: &[u8]) -> Option<u32> {
    match bytes {
        [MAGIC, a, b, c, d, ..] => Some(u32::from_be_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}

/// `bytes` (framed) with the ID replaced by `id`; the rest unchanged.
pub fn with_id(bytes: &[u8], id: u32) -> Vec<u8> {
    debug_assert!(schema_id(bytes).is_some(), "with_id on unframed bytes");
    let mut out = Vec::with_capacity(bytes.len());
    out.push(MAGIC);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&bytes[HEADER_LEN.min(bytes.len())..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framed_bytes_give_their_id_and_others_none() {
        assert_eq!(schema_id(&[0, 0, 0, 1, 2, 0xaa]), Some(258));
        assert_eq!(schema_id(&[0, 0xff, 0xff, 0xff, 0xff]), Some(u32::MAX));
        // Too short, another magic byte, nothing.
        assert_eq!(schema_id(&[0, 0, 0, 1]), None);
        assert_eq!(schema_id(&[1, 0, 0, 0, 1, 9]), None);
        assert_eq!(schema_id(b"{\"json\":true}"), None);
        assert_eq!(schema_id(&[]), None);
    }

    #[test]
    fn only_the_id_changes() {
        let framed = [0, 0, 0, 0, 7, 1, 2, 3];
        assert_eq!(with_id(&framed, 0x0102_0304), vec![0, 1, 2, 3, 4, 1, 2, 3]);
        assert_eq!(with_id(&[0, 0, 0, 0, 7], 9), vec![0, 0, 0, 0, 9]);
    }
}
