//! The provenance header of identity replication: which clusters a record has been on, written by
//! ferry, and the rule that decides whether a record is copied or skipped.
//!
//! Under the identity policy a copy keeps its topic's name, so names cannot stop a record from
//! travelling round a cycle of flows. Flows that carry the header (`provenance_header = true`, the
//! default under the identity policy) write `ferry.path` on every copy:
//!
//! ```text
//! ferry.path: 1;<binding>;<cluster id>:<alias>,<cluster id>:<alias>,...
//! ```
//!
//! - the hops are every cluster the record has been on, its origin first, each named by its Kafka
//!   cluster id (intrinsic: two deployments may give one cluster different aliases) and, for people
//!   reading it, the alias of the flow that wrote it;
//! - the binding (16 hex digits) is a 64-bit hash of the record's key, value, topic, partition and the
//!   hops. A header is trusted only if its binding matches the record that carries it, so a pipeline
//!   that forwards input headers onto a new record (Kafka Streams, many Connect pipelines) does not make
//!   that record look like a copy: it counts as written on the cluster where it is, like any local
//!   record. The hash is not cryptographic: it tells ferry's copies from accidents, not from forgeries.
//!
//! The rule, for a flow `S->T` and a record read on `S` ([`Stamper::decide`]):
//!
//! 1. a trusted header whose hops include `T`: skipped (`been_on_target`);
//! 2. a trusted header whose origin's records reach `T` through another flow of this deployment (a
//!    mesh: `a`'s records reach `c` from `a` directly, not again through `b`; see
//!    `config/topology.rs`): skipped (`other_route`). Only for topics that keep their name; the
//!    origin is the first hop that this deployment knows and that reaches `T`;
//! 3. no `ferry.path` header at all but the old `ferry.origin` header (what ferry wrote before this
//!    header existed) naming `T`'s alias: skipped (`legacy_origin`), as before;
//! 4. anything else is copied, with the hops extended by `S` (if missing) and `T`; a record without a
//!    trusted header gets the hops `S,T`. The copy carries no other `ferry.path` or `ferry.origin`
//!    header: ferry's headers are replaced, never piled up.
//!
//! Flows without the header (the default policy, or `provenance_header = false`) neither read nor write
//! it and pay nothing. The cost for the others is one hash of key and value per record and the header
//! (measured in isolation: about 0.1 µs per record of 100 B, 0.2 µs of 512 B, 0.9 µs of 4 KiB, 0.2 µs more
//! for a record that already carries a header), and about 30 bytes of header per hop plus 30.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::ClientContext;
use rdkafka::client::Client;
use rdkafka::message::{BorrowedMessage, Headers, Message};

use crate::config::FlowPlan;
use crate::config::topology::Topology;
use crate::metrics::METRICS;

/// The header ferry writes on every copy of a flow that carries provenance.
pub const PATH_HEADER: &str = "ferry.path";
/// The header earlier versions wrote (the origin cluster's alias); read, never written.
pub const LEGACY_ORIGIN_HEADER: &str = "ferry.origin";
/// The format's version, the header's first field.
const VERSION: &[u8] = b"1;";
/// How long learning a cluster's id may wait for its metadata.
const ID_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a record was not copied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// Its header says it has been on the target already.
    BeenOnTarget,
    /// Its origin's records reach the target through another flow of this deployment.
    OtherRoute,
    /// Its old-form `ferry.origin` header names the target.
    LegacyOrigin,
}

impl SkipReason {
    /// The `reason` label of `ferry_records_skipped_total`.
    pub fn name(self) -> &'static str {
        match self {
            Self::BeenOnTarget => "been_on_target",
            Self::OtherRoute => "other_route",
            Self::LegacyOrigin => "legacy_origin",
        }
    }
}

/// Whether `key` is one of ferry's own headers (replaced on every copy by a flow that carries them).
pub fn is_ferry_header(key: &str) -> bool {
    key == PATH_HEADER || key == LEGACY_ORIGIN_HEADER
}

/// A cluster as hops name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hop {
    pub id: String,
    pub alias: String,
}

/// What a record is, for the rule: its topic on the source, its topic on the target, partition, key and
/// value.
#[derive(Clone, Copy, Debug)]
pub struct Rec<'a> {
    pub topic: &'a str,
    pub remote: &'a str,
    pub partition: i32,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// The key and value the copy carries when they differ from the source's (schema IDs translated):
    /// the copy's binding is over what the target holds, or the next hop would not trust its header.
    pub sent: Option<KeyValue<'a>>,
}

/// A record's key and value.
pub type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// Ferry's headers found on a record.
#[derive(Clone, Copy, Debug, Default)]
pub struct Found<'a> {
    /// Values of the `ferry.path` headers: how many, and the first.
    paths: usize,
    path: Option<&'a [u8]>,
    /// The first `ferry.origin` header's value.
    legacy: Option<&'a [u8]>,
}

impl<'a> Found<'a> {
    /// Ferry's headers among `headers` (key, value).
    pub fn scan(headers: impl Iterator<Item = (&'a str, Option<&'a [u8]>)>) -> Self {
        let mut found = Found::default();
        for (key, value) in headers {
            if key == PATH_HEADER {
                found.paths += 1;
                if found.paths == 1 {
                    found.path = value;
                }
            } else if key == LEGACY_ORIGIN_HEADER && found.legacy.is_none() {
                found.legacy = value;
            }
        }
        found
    }

    fn of(msg: &'a BorrowedMessage<'_>) -> Self {
        match msg.headers() {
            Some(headers) => Found::scan(headers.iter().map(|h| (h.key, h.value))),
            None => Found::default(),
        }
    }

    /// The one `ferry.path` value (two headers are not a copy ferry wrote).
    fn path(&self) -> Option<&'a [u8]> {
        if self.paths == 1 { self.path } else { None }
    }
}

/// The outcome for one record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Copy it, with [`Stamper::header`] as its `ferry.path`.
    Copy,
    Skip(SkipReason),
}

/// The rule for one flow whose clusters' ids are known.
pub struct Stamper {
    source: Hop,
    target: Hop,
    topology: Arc<Topology>,
    /// Per topic: each known origin's last hop into the target (computed once per topic).
    routes: HashMap<String, BTreeMap<String, String>>,
    /// The hops of the copy being decided...
    hops: Vec<u8>,
    /// ...and where each hop's id and alias are in them: `(start, colon, end)`.
    index: Vec<(usize, usize, usize)>,
    /// The header value of the last [`Verdict::Copy`].
    out: Vec<u8>,
}

impl Stamper {
    pub fn new(source: Hop, target: Hop, topology: Arc<Topology>) -> Self {
        Self { source, target, topology, routes: HashMap::new(), hops: Vec::new(), index: Vec::new(), out: Vec::new() }
    }

    /// The `ferry.path` value for the copy the last [`Verdict::Copy`] was about.
    pub fn header(&self) -> &[u8] {
        &self.out
    }

    /// Copy or skip `rec`, which carries `found` (the rule in the module's documentation).
    pub fn decide(&mut self, rec: &Rec<'_>, found: &Found<'_>) -> Verdict {
        if self.source.id == self.target.id {
            // Two aliases of one cluster: every record has been on the target.
            return Verdict::Skip(SkipReason::BeenOnTarget);
        }
        let kv = record_hash(rec.key, rec.value);
        self.hops.clear();
        let trusted =
            found.path().and_then(parse).filter(|(bound, hops)| *bound == binding(kv, rec.topic, rec.partition, hops));
        match trusted {
            Some((_, hops)) => {
                index_hops(hops, &mut self.index);
                let has = |id: &str| self.index.iter().any(|&(from, colon, _)| &hops[from..colon] == id.as_bytes());
                if has(&self.target.id) {
                    return Verdict::Skip(SkipReason::BeenOnTarget);
                }
                let source_missing = !has(&self.source.id);
                self.hops.extend_from_slice(hops);
                if source_missing {
                    self.hops.push(b',');
                    let from = self.hops.len();
                    push_hop(&mut self.hops, &self.source);
                    self.index.push((from, from + self.source.id.len(), self.hops.len()));
                }
                if rec.topic == rec.remote && !self.routed_here(rec.topic) {
                    return Verdict::Skip(SkipReason::OtherRoute);
                }
            }
            None => {
                if found.paths == 0 && found.legacy == Some(self.target.alias.as_bytes()) {
                    return Verdict::Skip(SkipReason::LegacyOrigin);
                }
                push_hop(&mut self.hops, &self.source);
            }
        }
        self.hops.push(b',');
        push_hop(&mut self.hops, &self.target);
        let sent = rec.sent.map_or(kv, |(key, value)| record_hash(key, value));
        let bound = binding(sent, rec.remote, rec.partition, &self.hops);
        self.out.clear();
        self.out.extend_from_slice(VERSION);
        push_hex(&mut self.out, bound);
        self.out.push(b';');
        self.out.extend_from_slice(&self.hops);
        Verdict::Copy
    }

    /// Whether this flow is the last hop of the route from the record's origin (the first of its hops,
    /// up to and including the source, that this deployment knows and that reaches the target) into
    /// the target. A record whose hops this deployment does not know is copied.
    fn routed_here(&mut self, topic: &str) -> bool {
        if !self.routes.contains_key(topic) {
            let parents = self.topology.parents_into(&self.target.alias, topic);
            self.routes.insert(topic.to_string(), parents);
        }
        let parents = &self.routes[topic];
        for &(from, colon, to) in &self.index {
            let (id, alias) = (&self.hops[from..colon], &self.hops[(colon + 1).min(to)..to]);
            // Another deployment's cluster that happens to share one of this flow's aliases is unknown.
            let same_name_other_cluster = |c: &Hop| alias == c.alias.as_bytes() && id != c.id.as_bytes();
            if same_name_other_cluster(&self.source) || same_name_other_cluster(&self.target) {
                continue;
            }
            let Ok(alias) = std::str::from_utf8(alias) else { continue };
            if let Some(parent) = parents.get(alias) {
                return *parent == self.source.alias;
            }
        }
        true
    }
}

/// 16 lowercase hex digits.
fn push_hex(out: &mut Vec<u8>, v: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    out.extend((0..16).rev().map(|i| DIGITS[((v >> (i * 4)) & 0xf) as usize]));
}

/// `<id>:<alias>`.
fn push_hop(out: &mut Vec<u8>, hop: &Hop) {
    out.extend_from_slice(hop.id.as_bytes());
    out.push(b':');
    out.extend_from_slice(hop.alias.as_bytes());
}

/// `(binding, hops)` of a header value in ferry's format. The hops are not checked byte by byte: a
/// header is trusted only when its binding, which covers the hops, matches, and nothing but ferry writes
/// matching ones.
fn parse(value: &[u8]) -> Option<(u64, &[u8])> {
    let rest = value.strip_prefix(VERSION)?;
    let (hex, hops) = (rest.get(..16)?, rest.get(16..)?.strip_prefix(b";")?);
    let mut bound = 0u64;
    for b in hex {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => return None,
        };
        bound = (bound << 4) | u64::from(digit);
    }
    (!hops.is_empty()).then_some((bound, hops))
}

/// Cluster ids (base64url) and aliases: letters, digits, `-` and `_`, not empty (the header's
/// separators never occur in them).
fn is_name(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
}

/// Where each hop of `hops` is, `(start, colon, end)`, in one pass (the colon is `end` in a hop
/// without one).
fn index_hops(hops: &[u8], out: &mut Vec<(usize, usize, usize)>) {
    out.clear();
    let (mut from, mut colon) = (0, None);
    for (i, b) in hops.iter().enumerate() {
        match b {
            b':' if colon.is_none() => colon = Some(i),
            b',' => {
                out.push((from, colon.unwrap_or(i), i));
                (from, colon) = (i + 1, None);
            }
            _ => {}
        }
    }
    out.push((from, colon.unwrap_or(hops.len()), hops.len()));
}

/// The hash of a record's key and value (an absent key or value differs from an empty one).
fn record_hash(key: Option<&[u8]>, value: Option<&[u8]>) -> u64 {
    let k = hash(K2 ^ u64::from(key.is_some()), key.unwrap_or_default());
    hash(k ^ K3 ^ (u64::from(value.is_some()) << 1), value.unwrap_or_default())
}

/// What binds a header to the record that carries it: the record's hash, its topic and partition, and
/// the hops.
fn binding(record: u64, topic: &str, partition: i32, hops: &[u8]) -> u64 {
    let t = hash(record ^ K0, topic.as_bytes());
    hash(t ^ u64::from(partition as u32), hops)
}

const K0: u64 = 0xa076_1d64_78bd_642f;
const K1: u64 = 0xe703_7ed1_a0b4_28db;
const K2: u64 = 0x8ebc_6af0_9c88_c6e3;
const K3: u64 = 0x5899_65cc_7537_4cc3;

/// 64×64→128-bit multiply, folded.
fn mum(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    (r as u64) ^ ((r >> 64) as u64)
}

fn read8(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

fn read4(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u64::from(u32::from_le_bytes(w))
}

/// A fast 64-bit hash of `data` (wyhash's construction, 16 bytes per multiply). Its values are part of
/// the header format: they must never change (see the test of known values).
fn hash(seed: u64, data: &[u8]) -> u64 {
    let len = data.len();
    let mut s = seed ^ mum(seed ^ K0, K1);
    let (a, b) = if len <= 16 {
        if len >= 4 {
            let q = (len >> 3) << 2;
            ((read4(data, 0) << 32) | read4(data, q), (read4(data, len - 4) << 32) | read4(data, len - 4 - q))
        } else if len > 0 {
            ((u64::from(data[0]) << 16) | (u64::from(data[len >> 1]) << 8) | u64::from(data[len - 1]), 0)
        } else {
            (0, 0)
        }
    } else {
        let mut i = 0;
        while len - i > 16 {
            s = mum(read8(data, i) ^ K1, read8(data, i + 8) ^ s);
            i += 16;
        }
        (read8(data, len - 16), read8(data, len - 8))
    };
    let r = u128::from(a ^ K1) * u128::from(b ^ s);
    mum((r as u64) ^ K0 ^ len as u64, ((r >> 64) as u64) ^ K1)
}

/// The copier's side: learns the clusters' ids once, then decides each record and counts each skip
/// (`ferry_records_skipped_total`).
pub struct Provenance {
    flow: String,
    source: String,
    target: String,
    topology: Arc<Topology>,
    /// Set once both clusters' ids are known (at the first record).
    stamper: Option<Stamper>,
}

impl Provenance {
    /// `None` for a flow that does not carry the header.
    pub fn for_plan(plan: &FlowPlan) -> Option<Self> {
        plan.settings.provenance().then(|| Self {
            flow: plan.id.to_string(),
            source: plan.id.source.clone(),
            target: plan.id.target.clone(),
            topology: plan.topology.clone(),
            stamper: None,
        })
    }

    /// Copy `msg` to `remote` with `Some(header)`, or skip it (`None`, counted). The first call learns
    /// the clusters' ids from the copier's clients; an error means they cannot be learnt now.
    pub fn decide<C: ClientContext, D: ClientContext>(
        &mut self,
        msg: &BorrowedMessage<'_>,
        sent: Option<KeyValue<'_>>,
        remote: &str,
        source: &Client<C>,
        target: &Client<D>,
    ) -> Result<Option<&[u8]>, String> {
        if self.stamper.is_none() {
            let source_id = cluster_id(source, msg.topic(), &self.source)?;
            let target_id = cluster_id(target, remote, &self.target)?;
            tracing::info!(flow = %self.flow, source = %source_id, target = %target_id, "provenance header: cluster ids learnt");
            self.stamper = Some(Stamper::new(
                Hop { id: source_id, alias: self.source.clone() },
                Hop { id: target_id, alias: self.target.clone() },
                self.topology.clone(),
            ));
        }
        let stamper = self.stamper.as_mut().expect("set above");
        let rec =
            Rec { topic: msg.topic(), remote, partition: msg.partition(), key: msg.key(), value: msg.payload(), sent };
        match stamper.decide(&rec, &Found::of(msg)) {
            Verdict::Copy => Ok(Some(stamper.header())),
            Verdict::Skip(reason) => {
                METRICS.records_skipped.with_label_values(&[&self.flow, msg.topic(), reason.name()]).inc();
                Ok(None)
            }
        }
    }
}

/// The Kafka cluster id of the cluster `client` talks to: from its metadata, fetched for `topic` if the
/// client has none yet.
fn cluster_id<C: ClientContext>(client: &Client<C>, topic: &str, alias: &str) -> Result<String, String> {
    let id = client.fetch_cluster_id(Duration::ZERO).or_else(|| {
        let _ = client.fetch_metadata(Some(topic), ID_TIMEOUT);
        client.fetch_cluster_id(Duration::ZERO)
    });
    match id {
        Some(id) if is_name(id.as_bytes()) => Ok(id),
        Some(id) => Err(format!(
            "cluster `{alias}` reports the cluster id {id:?}, which the provenance header cannot name (letters, digits, `-`, `_`)"
        )),
        None => Err(format!(
            "cannot learn the cluster id of `{alias}` within {ID_TIMEOUT:?} (the provenance header names clusters by id)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::topology::Edge;
    use crate::filter::TopicFilter;
    use crate::policy::ReplicationPolicy;

    const A: &str = "AAAAAAAAAAAAAAAAAAAAAA";
    const B: &str = "BBBBBBBBBBBBBBBBBBBBBB";
    const C: &str = "CCCCCCCCCCCCCCCCCCCCCC";

    fn hop(id: &str, alias: &str) -> Hop {
        Hop { id: id.into(), alias: alias.into() }
    }

    fn topology(flows: &[(&str, &str)]) -> Arc<Topology> {
        let all = vec![".*".to_string()];
        let edges = flows
            .iter()
            .map(|(s, t)| {
                let filter = Arc::new(TopicFilter::from_patterns(&all, &[] as &[String]).expect("patterns"));
                Edge::new(s, t, filter, ReplicationPolicy::identity(".", Some(s)), &all, &[])
            })
            .collect();
        Arc::new(Topology::new(edges))
    }

    fn stamper(source: Hop, target: Hop, flows: &[(&str, &str)]) -> Stamper {
        Stamper::new(source, target, topology(flows))
    }

    fn rec<'a>(value: &'a [u8]) -> Rec<'a> {
        Rec { topic: "orders", remote: "orders", partition: 1, key: Some(b"k"), value: Some(value), sent: None }
    }

    fn with_path(value: &[u8]) -> Found<'_> {
        Found::scan([("x", Some(&b"user"[..])), (PATH_HEADER, Some(value))].into_iter())
    }

    /// The header `s` writes for `r` (which must be copied).
    fn copy(s: &mut Stamper, r: &Rec<'_>, found: &Found<'_>) -> Vec<u8> {
        assert_eq!(s.decide(r, found), Verdict::Copy);
        s.header().to_vec()
    }

    /// Schema IDs translated on the way: the copy's header binds the bytes the target holds, so the
    /// flow back trusts it and sees that the record has been on its target (without `sent`, the copy
    /// would be untrusted on the other side and copied back, forever).
    #[test]
    fn a_copy_with_translated_bytes_is_bound_to_those_bytes() {
        let mut ab = stamper(hop(A, "a"), hop(B, "b"), &[("a", "b"), ("b", "a")]);
        let source = [0u8, 0, 0, 0, 7, 42];
        let translated = [0u8, 0, 0, 0, 9, 42];
        let sent = Rec { sent: Some((Some(b"k"), Some(&translated))), ..rec(&source) };
        let header = copy(&mut ab, &sent, &Found::default());
        // On b the record holds the translated bytes; the flow b->a finds a's id in a trusted header.
        let mut ba = stamper(hop(B, "b"), hop(A, "a"), &[("a", "b"), ("b", "a")]);
        assert_eq!(ba.decide(&rec(&translated), &with_path(&header)), Verdict::Skip(SkipReason::BeenOnTarget));
        // Bound to the source's bytes instead, the header would not be trusted there.
        let unbound = copy(&mut ab, &rec(&source), &Found::default());
        assert_eq!(ba.decide(&rec(&translated), &with_path(&unbound)), Verdict::Copy);
    }

    #[test]
    fn hops_are_indexed_in_one_pass() {
        let mut index = Vec::new();
        index_hops(b"ab:x,c:y", &mut index);
        assert_eq!(index, vec![(0, 2, 4), (5, 6, 8)]);
        index_hops(b"odd,", &mut index);
        assert_eq!(index, vec![(0, 3, 3), (4, 4, 4)]);
    }

    fn hops_of(header: &[u8]) -> String {
        String::from_utf8(parse(header).expect("well formed").1.to_vec()).expect("ascii")
    }

    #[test]
    fn the_hash_keeps_its_values() {
        // Part of the header format: headers written by one version are checked by the next.
        let known: Vec<u64> = [&b""[..], b"a", b"abc", b"abcd", b"0123456789abcdef", b"0123456789abcdefg", &[7u8; 100]]
            .iter()
            .map(|d| hash(0, d))
            .collect();
        let expected: Vec<u64> = vec![
            0x0409_638e_e2bd_e459,
            0x28d2_0533_09d2_8531,
            0x02a4_f1d7_cb51_6c72,
            0x48df_e2b0_9ab5_2113,
            0xc304_e72c_387c_d229,
            0xb496_f8f3_0660_0195,
            0x873c_e944_58a4_c455,
        ];
        assert_eq!(known, expected);
        // And the whole header of one record.
        let mut ab = stamper(hop(A, "a"), hop(B, "b"), &[]);
        let header = copy(&mut ab, &rec(b"v1"), &Found::default());
        assert_eq!(String::from_utf8_lossy(&header), format!("1;1437f0971a8ccb8a;{A}:a,{B}:b"));
    }

    #[test]
    fn the_hash_sees_every_bit_and_every_length() {
        let mut seen = std::collections::HashSet::new();
        for len in 0..70 {
            let data: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
            assert!(seen.insert(hash(1, &data)), "length {len}");
            for bit in 0..len * 8 {
                let mut flipped = data.clone();
                flipped[bit / 8] ^= 1 << (bit % 8);
                assert!(seen.insert(hash(1, &flipped)), "length {len}, bit {bit}");
            }
        }
        assert_ne!(record_hash(None, Some(b"v")), record_hash(Some(b""), Some(b"v")));
        assert_ne!(record_hash(Some(b"k"), None), record_hash(Some(b"k"), Some(b"")));
        assert_ne!(record_hash(Some(b"ab"), Some(b"c")), record_hash(Some(b"a"), Some(b"bc")));
    }

    #[test]
    fn a_local_record_gets_its_source_and_target_and_the_next_hop_extends_them() {
        let mut ab = stamper(hop(A, "a"), hop(B, "b"), &[("a", "b"), ("b", "c")]);
        let r = rec(b"v1");
        let header = copy(&mut ab, &r, &Found::default());
        assert_eq!(hops_of(&header), format!("{A}:a,{B}:b"));
        assert!(header.starts_with(b"1;") && header[18] == b';', "{}", String::from_utf8_lossy(&header));
        // On b, b->c trusts it and adds c.
        let mut bc = stamper(hop(B, "b"), hop(C, "c"), &[("a", "b"), ("b", "c")]);
        let next = copy(&mut bc, &r, &with_path(&header));
        assert_eq!(hops_of(&next), format!("{A}:a,{B}:b,{C}:c"));
        // ...and a flow back to a or b never copies it.
        let mut ca = stamper(hop(C, "c"), hop(A, "a"), &[("c", "a")]);
        assert_eq!(ca.decide(&r, &with_path(&next)), Verdict::Skip(SkipReason::BeenOnTarget));
        let mut ba = stamper(hop(B, "b"), hop(A, "a"), &[]);
        assert_eq!(ba.decide(&r, &with_path(&header)), Verdict::Skip(SkipReason::BeenOnTarget));
    }

    #[test]
    fn clusters_are_known_by_id_whatever_their_alias() {
        // Another deployment calls cluster A `east`: its copy of an `a` record still never returns to A.
        let mut ab = stamper(hop(A, "a"), hop(B, "b"), &[]);
        let r = rec(b"v");
        let header = copy(&mut ab, &r, &Found::default());
        let mut b_east = stamper(hop(B, "west"), hop(A, "east"), &[]);
        assert_eq!(b_east.decide(&r, &with_path(&header)), Verdict::Skip(SkipReason::BeenOnTarget));
        // Two aliases of one cluster make a flow that copies nothing.
        let mut same = stamper(hop(A, "a"), hop(A, "a2"), &[]);
        assert_eq!(same.decide(&r, &Found::default()), Verdict::Skip(SkipReason::BeenOnTarget));
    }

    #[test]
    fn a_forwarded_header_on_a_new_record_is_not_trusted() {
        let mut ab = stamper(hop(A, "a"), hop(B, "b"), &[]);
        let original = rec(b"order-1");
        let header = copy(&mut ab, &original, &Found::default());
        let mut ba = stamper(hop(B, "b"), hop(A, "a"), &[]);
        // A pipeline on b derives new records and forwards the header: each is b's own record.
        let derived_value = rec(b"order-1 enriched");
        let derived_topic = Rec { topic: "orders-copy", remote: "orders-copy", ..original };
        let derived_partition = Rec { partition: 0, ..original };
        let derived_key = Rec { key: Some(b"k2"), ..original };
        for derived in [derived_value, derived_topic, derived_partition, derived_key] {
            let fresh = copy(&mut ba, &derived, &with_path(&header));
            assert_eq!(hops_of(&fresh), format!("{B}:b,{A}:a"), "{derived:?}");
        }
        // An edited or malformed header is not trusted either.
        let mut edited = header.clone();
        let last = edited.len() - 1;
        edited[last] = b'x';
        for bad in [
            &edited[..],
            b"1;zz;A:a",
            b"2;0000000000000000;A:a",
            b"",
            b"1;0000000000000000;",
            b"1;0000000000000000;A:a:b",
        ] {
            assert_eq!(hops_of(&copy(&mut ba, &original, &with_path(bad))), format!("{B}:b,{A}:a"));
        }
        // Two path headers are not a copy ferry wrote.
        let twice = Found::scan([(PATH_HEADER, Some(&header[..])), (PATH_HEADER, Some(&header[..]))].into_iter());
        assert_eq!(hops_of(&copy(&mut ba, &original, &twice)), format!("{B}:b,{A}:a"));
    }

    #[test]
    fn the_old_origin_header_is_honoured_only_without_a_path_header() {
        let mut ba = stamper(hop(B, "b"), hop(A, "a"), &[]);
        let r = rec(b"v");
        let legacy = |origin: &'static [u8]| Found::scan([(LEGACY_ORIGIN_HEADER, Some(origin))].into_iter());
        assert_eq!(ba.decide(&r, &legacy(b"a")), Verdict::Skip(SkipReason::LegacyOrigin));
        // Naming another cluster: copied as a record of b.
        assert_eq!(hops_of(&copy(&mut ba, &r, &legacy(b"c"))), format!("{B}:b,{A}:a"));
        // With a path header (even one not trusted) the old one means nothing.
        let both =
            Found::scan([(LEGACY_ORIGIN_HEADER, Some(&b"a"[..])), (PATH_HEADER, Some(&b"junk"[..]))].into_iter());
        assert_eq!(ba.decide(&r, &both), Verdict::Copy);
    }

    const MESH: [(&str, &str); 6] = [("a", "b"), ("a", "c"), ("b", "a"), ("b", "c"), ("c", "a"), ("c", "b")];

    #[test]
    fn in_a_mesh_a_record_takes_the_direct_route_only() {
        let r = rec(b"v");
        let on_b = copy(&mut stamper(hop(A, "a"), hop(B, "b"), &MESH), &r, &Found::default());
        let mut bc = stamper(hop(B, "b"), hop(C, "c"), &MESH);
        assert_eq!(bc.decide(&r, &with_path(&on_b)), Verdict::Skip(SkipReason::OtherRoute));
        // A topic renamed on the way (heartbeats) is not routed: only the hops decide.
        let renamed = Rec { remote: "b.orders", ..r };
        assert_eq!(bc.decide(&renamed, &with_path(&on_b)), Verdict::Copy);
        // b's own records go everywhere.
        assert_eq!(hops_of(&copy(&mut bc, &r, &Found::default())), format!("{B}:b,{C}:c"));
    }

    #[test]
    fn a_feeder_into_a_pair_is_forwarded_across_it() {
        let flows = [("a", "b"), ("b", "c"), ("c", "b")];
        let r = rec(b"v");
        let on_b = copy(&mut stamper(hop(A, "a"), hop(B, "b"), &flows), &r, &Found::default());
        let on_c = copy(&mut stamper(hop(B, "b"), hop(C, "c"), &flows), &r, &with_path(&on_b));
        assert_eq!(hops_of(&on_c), format!("{A}:a,{B}:b,{C}:c"));
        let mut cb = stamper(hop(C, "c"), hop(B, "b"), &flows);
        assert_eq!(cb.decide(&r, &with_path(&on_c)), Verdict::Skip(SkipReason::BeenOnTarget));
    }

    #[test]
    fn origins_this_deployment_does_not_know_are_routed_from_where_they_entered() {
        const X: &str = "XXXXXXXXXXXXXXXXXXXXXX";
        let r = rec(b"v");
        // x is another deployment's cluster: its record entered the mesh at a.
        let on_a = copy(&mut stamper(hop(X, "x"), hop(A, "a"), &[]), &r, &Found::default());
        let on_b = copy(&mut stamper(hop(A, "a"), hop(B, "b"), &MESH), &r, &with_path(&on_a));
        assert_eq!(hops_of(&on_b), format!("{X}:x,{A}:a,{B}:b"));
        let mut bc = stamper(hop(B, "b"), hop(C, "c"), &MESH);
        assert_eq!(bc.decide(&r, &with_path(&on_b)), Verdict::Skip(SkipReason::OtherRoute));
        // A foreign cluster that is also called `c` is not this deployment's c: b's route counts.
        let on_b2 = copy(&mut stamper(hop(X, "c"), hop(B, "b"), &[]), &r, &Found::default());
        assert_eq!(bc.decide(&r, &with_path(&on_b2)), Verdict::Copy);
    }
}
