//! Kafka's Java `Utils.murmur2` hash and the default partitioner built on it.
//!
//! Kafka Connect writes its source offsets with a stock Java producer, whose default
//! partitioner places a keyed record on `toPositive(murmur2(key)) % numPartitions`. Taking over
//! from (or handing back to) a Java MM2 deployment means writing offsets to the partition Java
//! would pick, so this is a bit-exact port of the Java code, including its signed 32-bit
//! arithmetic: every multiplication wraps, and Java's unsigned shift `>>>` becomes a shift of
//! the value reinterpreted as `u32`.

/// Java's `Utils.murmur2(byte[])`: MurmurHash2 with Kafka's seed, returned as Java's signed `int`.
#[must_use]
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;

    // Java's `int length` is at most i32::MAX; truncating longer inputs the same way keeps the
    // hash defined for any slice without a panic.
    let length = data.len() as u32;
    let mut h = SEED ^ length;

    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }

    // Mirrors the Java switch that falls through from case 3 to case 1.
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }

    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;

    // Reinterpret the bits as Java's signed int.
    h as i32
}

/// Java's `Utils.toPositive`: clears the sign bit (not `abs`, so `i32::MIN` maps to 0).
#[must_use]
pub fn to_positive(number: i32) -> i32 {
    number & 0x7fff_ffff
}

/// The partition Kafka's Java default partitioner (`BuiltInPartitioner.partitionForKey`,
/// formerly `DefaultPartitioner`) picks for a record with serialized key `key`.
///
/// # Panics
///
/// If `num_partitions` is not positive; a topic always has at least one partition, and Java
/// would fail the same way (division by zero).
#[must_use]
pub fn java_partition(key: &[u8], num_partitions: i32) -> i32 {
    assert!(num_partitions > 0, "partition count must be positive, got {num_partitions}");
    to_positive(murmur2(key)) % num_partitions
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka's `UtilsTest.testMurmur2` vectors.
    const KAFKA_VECTORS: &[(&str, i32)] = &[
        ("21", -973_932_308),
        ("foobar", -790_332_482),
        ("a-little-bit-long-string", -985_981_536),
        ("a-little-bit-longer-string", -1_486_304_829),
        ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58_897_971),
        ("abc", 479_470_107),
    ];

    #[test]
    fn matches_kafka_utils_test_vectors() {
        for &(input, expected) in KAFKA_VECTORS {
            assert_eq!(murmur2(input.as_bytes()), expected, "murmur2({input:?})");
        }
    }

    #[test]
    fn covers_every_tail_length() {
        // The Kafka vectors cover `len % 4` of 0, 2 and 3; these pin 1 and the empty input
        // (values from an independent Python port of the Java code). `0x80` checks that bytes
        // are read unsigned, as Java's `& 0xff` does.
        assert_eq!(murmur2(b""), 275_646_681);
        assert_eq!(murmur2(b"a"), -1_563_381_124);
        assert_eq!(murmur2(&[0x80]), 857_690_492);
    }

    #[test]
    fn to_positive_clears_the_sign_bit() {
        assert_eq!(to_positive(5), 5);
        assert_eq!(to_positive(-1), i32::MAX);
        assert_eq!(to_positive(i32::MIN), 0);
        assert_eq!(to_positive(-973_932_308), -973_932_308 & 0x7fff_ffff);
    }

    #[test]
    fn java_partition_is_positive_hash_modulo_count() {
        for &(input, hash) in KAFKA_VECTORS {
            for n in [1, 3, 25, 50] {
                let p = java_partition(input.as_bytes(), n);
                assert_eq!(p, (hash & 0x7fff_ffff) % n);
                assert!((0..n).contains(&p));
            }
        }
        // -790332482 & 0x7fffffff = 1357151166, and 1357151166 % 50 = 16.
        assert_eq!(java_partition(b"foobar", 50), 16);
    }

    #[test]
    #[should_panic(expected = "partition count must be positive")]
    fn java_partition_rejects_zero_partitions() {
        let _ = java_partition(b"k", 0);
    }
}
