//! What ferry reads in a ticket cache that `kinit` wrote: MIT Kerberos' credential cache file format
//! (`FILE:`, versions 3 and 4, big-endian; each cache of a `DIR:` collection is one such file).
//!
//! - [`tgt_life`]: how long the ticket-granting ticket of a fresh login lives, by the KDC's clock (its
//!   start to its end), so that ferry renews it at a fraction of its life.
//! - [`keep_service_tickets`]: `kinit` starts its cache afresh, with the new ticket-granting ticket only,
//!   which would drop the service tickets (one per broker) that librdkafka's GSSAPI clients obtained
//!   and keep using until they expire. A renewal appends those still valid to the fresh cache before it
//!   replaces the old one, as the JVM's relogin keeps them in its Subject.
//!
//! A file ferry cannot read (another version, cut short) is left as `kinit` wrote it.

use std::time::Duration;

/// A principal as the file stores it.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Principal<'a> {
    realm: &'a [u8],
    /// The components (`kafka`, `broker1.example`), each length-prefixed as stored.
    components: &'a [u8],
}

impl Principal<'_> {
    /// The local ticket-granting service of `realm`, `krbtgt/REALM@REALM`.
    fn is_tgs_of(&self, realm: &[u8]) -> bool {
        self.realm == realm && self.components == [&counted(b"krbtgt")[..], &counted(realm)].concat()
    }

    /// Cache configuration entries (`X-CACHECONF:` realm) are not tickets.
    fn is_config(&self) -> bool {
        self.realm == b"X-CACHECONF:"
    }
}

fn counted(data: &[u8]) -> Vec<u8> {
    let mut out = (data.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(data);
    out
}

/// One credential: its client, its service and when it is valid (Unix seconds, the KDC's clock).
struct Credential<'a> {
    /// The whole entry as stored.
    raw: &'a [u8],
    client: Principal<'a>,
    server: Principal<'a>,
    start: u64,
    end: u64,
}

/// A parsed cache: its bytes up to the first credential, its principal and the credentials that
/// could be read (a file being appended to may end in a partial one).
struct Cache<'a> {
    principal: Principal<'a>,
    credentials: Vec<Credential<'a>>,
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Option<u32> {
        self.take(4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn data(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()?;
        self.take(n as usize)
    }

    /// `count` items of a `u16` type and counted data each (addresses, authorization data).
    fn typed_list(&mut self) -> Option<()> {
        for _ in 0..self.u32()? {
            self.u16()?;
            self.data()?;
        }
        Some(())
    }

    fn principal(&mut self) -> Option<Principal<'a>> {
        self.u32()?; // name type
        let count = self.u32()?;
        let realm = self.data()?;
        let start = self.at;
        for _ in 0..count {
            self.data()?;
        }
        Some(Principal { realm, components: &self.bytes[start..self.at] })
    }

    fn credential(&mut self) -> Option<Credential<'a>> {
        let start = self.at;
        let client = self.principal()?;
        let server = self.principal()?;
        self.u16()?; // the session key's type
        self.data()?; // the session key
        let authtime = self.u32()?;
        let starttime = self.u32()?;
        let end = self.u32()?;
        self.u32()?; // renew till
        self.take(1)?; // is_skey
        self.u32()?; // flags
        self.typed_list()?; // addresses
        self.typed_list()?; // authorization data
        self.data()?; // the ticket
        self.data()?; // the second ticket
        let start_time = if starttime == 0 { authtime } else { starttime };
        Some(Credential { raw: &self.bytes[start..self.at], client, server, start: start_time.into(), end: end.into() })
    }
}

impl<'a> Cache<'a> {
    fn parse(bytes: &'a [u8]) -> Option<Cache<'a>> {
        let mut r = Reader { bytes, at: 0 };
        match r.u16()? {
            0x0504 => {
                let header = r.u16()?;
                r.take(header.into())?;
            }
            0x0503 => {}
            _ => return None,
        }
        let principal = r.principal()?;
        let mut credentials = Vec::new();
        while r.at < bytes.len() {
            match r.credential() {
                Some(c) => credentials.push(c),
                None => break,
            }
        }
        Some(Cache { principal, credentials })
    }

    /// The ticket-granting ticket of the cache's principal in its own realm.
    fn tgt(&self) -> Option<&Credential<'a>> {
        self.credentials.iter().find(|c| c.client == self.principal && c.server.is_tgs_of(self.principal.realm))
    }
}

/// How long the ticket-granting ticket in the cache `bytes` lives, start to end.
pub fn tgt_life(bytes: &[u8]) -> Option<Duration> {
    let cache = Cache::parse(bytes)?;
    let tgt = cache.tgt()?;
    Some(Duration::from_secs(tgt.end.checked_sub(tgt.start)?))
}

/// The fresh cache `fresh` with the service tickets of `old` appended: those of the same principal,
/// valid at `now` (Unix seconds), for a service that `fresh` holds no ticket for. With how many.
pub fn keep_service_tickets(fresh: &[u8], old: &[u8], now: u64) -> (Vec<u8>, usize) {
    let (Some(new), Some(old)) = (Cache::parse(fresh), Cache::parse(old)) else { return (fresh.to_vec(), 0) };
    let mut out = fresh.to_vec();
    let mut kept = 0;
    if old.principal != new.principal {
        return (out, 0);
    }
    for c in &old.credentials {
        let held = new.credentials.iter().any(|n| n.server == c.server);
        if c.client == new.principal && !c.server.is_config() && !held && c.end > now {
            out.extend_from_slice(c.raw);
            kept += 1;
        }
    }
    (out, kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REALM: &str = "EXAMPLE.COM";

    fn principal(components: &[&str], realm: &str) -> Vec<u8> {
        let mut out = 1u32.to_be_bytes().to_vec();
        out.extend((components.len() as u32).to_be_bytes());
        out.extend(counted(realm.as_bytes()));
        for c in components {
            out.extend(counted(c.as_bytes()));
        }
        out
    }

    fn credential(server: &[&str], server_realm: &str, start: u32, end: u32) -> Vec<u8> {
        let mut out = principal(&["ferry"], REALM);
        out.extend(principal(server, server_realm));
        out.extend(18u16.to_be_bytes());
        out.extend(counted(&[7; 32]));
        for t in [start, start, end, 0] {
            out.extend(t.to_be_bytes());
        }
        out.push(0);
        out.extend(0x40e1_0000u32.to_be_bytes());
        out.extend(0u32.to_be_bytes()); // no addresses
        out.extend(1u32.to_be_bytes()); // one authorization data element
        out.extend(1u16.to_be_bytes());
        out.extend(counted(b"ad"));
        out.extend(counted(&[start as u8; 40]));
        out.extend(counted(b""));
        out
    }

    /// A version 4 cache as `kinit` writes it: a header (the KDC time offset), `ferry@EXAMPLE.COM`,
    /// then the credentials.
    fn cache(credentials: &[Vec<u8>]) -> Vec<u8> {
        let mut out = vec![0x05, 0x04, 0, 12, 0, 1, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0];
        out.extend(principal(&["ferry"], REALM));
        for c in credentials {
            out.extend(c);
        }
        out
    }

    fn tgt(start: u32, end: u32) -> Vec<u8> {
        credential(&["krbtgt", REALM], REALM, start, end)
    }

    fn config() -> Vec<u8> {
        credential(&["krb5_ccache_conf_data", "fast_avail", "krbtgt/EXAMPLE.COM@EXAMPLE.COM"], "X-CACHECONF:", 0, 0)
    }

    #[test]
    fn the_life_of_a_fresh_login_is_its_tickets_start_to_end() {
        assert_eq!(tgt_life(&cache(&[config(), tgt(1_000, 37_000)])), Some(Duration::from_secs(36_000)));
        // A service ticket alone is no login; another version or a file cut short is not read.
        assert_eq!(tgt_life(&cache(&[credential(&["kafka", "b1"], REALM, 1_000, 2_000)])), None);
        let mut v3 = cache(&[tgt(0, 40)]);
        v3.drain(2..16); // no header
        v3[1] = 0x03;
        assert_eq!(tgt_life(&v3), Some(Duration::from_secs(40)));
        assert_eq!(tgt_life(&[0x05, 0x02, 0, 0]), None);
        let cut = cache(&[tgt(0, 40)]);
        assert_eq!(tgt_life(&cut[..cut.len() - 3]), None);
    }

    #[test]
    fn a_renewal_keeps_the_valid_service_tickets_of_the_cache_it_replaces() {
        let broker1 = credential(&["kafka", "b1.example.com"], REALM, 100, 1_000);
        let broker2 = credential(&["kafka", "b2.example.com"], REALM, 100, 1_000);
        let expired = credential(&["kafka", "b3.example.com"], REALM, 100, 400);
        let old = cache(&[config(), tgt(100, 1_000), broker1.clone(), expired, broker2.clone()]);
        let fresh = cache(&[config(), tgt(800, 1_700)]);

        let (merged, kept) = keep_service_tickets(&fresh, &old, 800);
        assert_eq!(kept, 2);
        // The fresh cache first (its ticket-granting ticket is the one found first), then the two.
        assert_eq!(merged, [fresh.clone(), broker1, broker2].concat());
        assert_eq!(tgt_life(&merged), Some(Duration::from_secs(900)));

        // Another principal's cache, or one that cannot be read, gives nothing.
        let mut other = old.clone();
        let at = other.windows(5).position(|w| w == b"ferry").expect("the principal");
        other[at] = b'g';
        assert_eq!(keep_service_tickets(&fresh, &other, 800), (fresh.clone(), 0));
        assert_eq!(keep_service_tickets(&fresh, b"junk", 800), (fresh.clone(), 0));
        // A cache being appended to: what was written whole is kept.
        assert_eq!(keep_service_tickets(&fresh, &old[..old.len() - 5], 800).1, 1);
    }
}
