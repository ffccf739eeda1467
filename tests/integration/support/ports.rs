//! Loopback ports for everything the harness listens on or points at: brokers (client, controller and
//! inter-broker listeners), ferry's HTTP listener, Prometheus, and "nowhere" addresses nothing answers on.
//!
//! **Why not port 0.** The kernel hands out `bind(0)` ports from its ephemeral range
//! (`/proc/sys/net/ipv4/ip_local_port_range`, 32768-60999 by default), the same range it takes clients'
//! source ports from. While a test broker is stopped its port is free, and a client reconnecting to it can
//! be given that very port as its source port: the SYN meets itself and the connection is established (a
//! TCP self-connect), or another connection takes the port as its source. The restarted broker then fails
//! with "Address already in use". Outside the ephemeral range the kernel never picks a port on its own,
//! so only an explicit bind can take one: ports are drawn from `[PORT_FLOOR, ephemeral start)` (above the
//! range's end only if nothing is left below it), with the range read from the kernel at run time.
//!
//! **Why lock files.** Several test processes may run at once on one machine (test binaries of several
//! checkouts, `cargo test` in two terminals). Each port handed out is locked (`flock` of
//! `<tmp>/ferry-test-ports/<port>.lock`) for the rest of the process's life, including while its broker
//! is stopped, so no other process using this harness picks it meanwhile; the kernel drops the lock when
//! the process dies, however it dies. A bind probe skips ports that something else holds right now. The
//! lock files stay (one empty file per port ever used): deleting them would race with another process
//! opening them.

use std::fs::{File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::net::{Ipv4Addr, TcpListener};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

/// The lowest port handed out: below it live well-known services.
pub const PORT_FLOOR: u16 = 10_000;
/// Fixed ports of the shell test bed (`scripts/kafka.sh up`: east and west with their controllers),
/// never handed out even while those clusters are down.
const SHELL_BED: [u16; 4] = [19_092, 19_093, 29_092, 29_093];
/// The kernel's default range, for a system without `/proc/sys/net/ipv4/ip_local_port_range`.
const DEFAULT_EPHEMERAL: (u16, u16) = (32_768, 60_999);

/// Lock files of the ports this process holds, and the ports, in the order handed out.
static HELD: Mutex<Vec<(u16, File)>> = Mutex::new(Vec::new());

/// The kernel's ephemeral port range, inclusive (`ip_local_port_range`), read once per process.
pub fn ephemeral_range() -> (u16, u16) {
    static RANGE: OnceLock<(u16, u16)> = OnceLock::new();
    *RANGE.get_or_init(|| {
        let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
        let mut it = text.split_whitespace().map(str::parse::<u16>);
        match (it.next(), it.next()) {
            (Some(Ok(low)), Some(Ok(high))) if low <= high => (low, high),
            _ => DEFAULT_EPHEMERAL,
        }
    })
}

/// True when the kernel could pick `port` as a client's source port.
pub fn is_ephemeral(port: u16) -> bool {
    let (low, high) = ephemeral_range();
    (low..=high).contains(&port)
}

/// Where the ports are drawn from: below the ephemeral range, else above it.
fn candidates() -> Range<u32> {
    let (low, high) = ephemeral_range();
    let below = u32::from(PORT_FLOOR)..u32::from(low);
    let above = u32::from(high) + 1..u32::from(u16::MAX) + 1;
    if below.len() >= 1_000 {
        below
    } else if above.len() >= 1_000 {
        above
    } else {
        panic!(
            "the kernel's ephemeral port range ({low}-{high}, /proc/sys/net/ipv4/ip_local_port_range) leaves \
             fewer than 1000 ports outside it above {PORT_FLOOR}: test brokers could not be restarted safely"
        )
    }
}

/// The lock file of `port`.
pub fn lock_path(port: u16) -> PathBuf {
    std::env::temp_dir().join("ferry-test-ports").join(format!("{port}.lock"))
}

/// A loopback port outside the kernel's ephemeral range, free a moment ago and reserved for this
/// process until it exits (no other caller of this function, in this process or another, gets it).
pub fn free_port() -> u16 {
    let range = candidates();
    let dir = lock_path(0).parent().expect("lock dir").to_path_buf();
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    let n = range.len() as u64;
    // A random start (std's randomly keyed hasher as the random source), then every candidate in turn.
    let start = std::collections::hash_map::RandomState::new().build_hasher().finish() % n;
    for i in 0..n {
        let port = (u64::from(range.start) + (start + i) % n) as u16;
        if SHELL_BED.contains(&port) {
            continue;
        }
        if let Some(lock) = try_reserve(port) {
            HELD.lock().unwrap_or_else(|p| p.into_inner()).push((port, lock));
            return port;
        }
    }
    panic!("no free loopback port in {range:?} (every one locked by a test process or in use)")
}

/// Locks `port`'s file (`None` if another holder has it, in this process or another) and checks that
/// nothing listens on or holds the port now.
fn try_reserve(port: u16) -> Option<File> {
    let file = OpenOptions::new().create(true).truncate(false).write(true).open(lock_path(port)).ok()?;
    // flock locks belong to the open file: a second open in this very process is refused too.
    file.try_lock().ok()?;
    drop(TcpListener::bind((Ipv4Addr::LOCALHOST, port)).ok()?);
    Some(file)
}

/// Every port this process was handed, in order.
pub fn handed_out() -> Vec<u16> {
    HELD.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(p, _)| *p).collect()
}
