//! Named failure points for fault tests. Built only with `--features failpoints` (release builds carry
//! none) and activated by the `FAILPOINTS` environment variable as the `fail` crate does, e.g.
//! `FAILPOINTS="copier-poll=1*panic;checkpoints-emit=2*return(broker away)"`.
//!
//! `panic` makes the actor panic (caught and restarted like an error); `return(msg)` makes the point
//! return an error naming itself.

pub const COPIER_POLL: &str = "copier-poll";
pub const COPIER_DELIVER: &str = "copier-deliver";
pub const OFFSET_SYNCS_SEND: &str = "offset-syncs-send";
pub const CHECKPOINTS_EMIT: &str = "checkpoints-emit";
pub const HEARTBEATS_EMIT: &str = "heartbeats-emit";
pub const TOPICS_REFRESH: &str = "topics-refresh";
pub const LEASE_POLL: &str = "lease-poll";
/// `copier-seek=N*return` answers the copier's seeks as librdkafka does for a partition whose fetch has not
/// started yet (`__STATE`), the race right after the group assigned it.
pub const COPIER_SEEK: &str = "copier-seek";
/// `checkpoints-backlog=N*return`: the next N rounds of the checkpoint computer read nothing of a long
/// offset-sync backlog (each waits 200 ms instead), so a test sees what it does before the history is read.
pub const CHECKPOINTS_BACKLOG: &str = "checkpoints-backlog";
/// `copier-probe=N*return`: the copier probe's next N partition checks (at assignment, after an offset out
/// of range, of re-created topics) fail as if the source did not answer.
pub const COPIER_PROBE: &str = "copier-probe";
/// Per consumer group: `checkpoints-group-offsets=return(GROUP)` fails reading GROUP's offsets only.
pub const CHECKPOINTS_GROUP_OFFSETS: &str = "checkpoints-group-offsets";
/// `kerberos-kinit=return(Cannot contact any KDC)` fails ferry's `kinit` runs as if the KDC did not
/// answer; `kerberos-kinit=sleep(MS)` makes each take that long first.
pub const KINIT: &str = "kerberos-kinit";

/// `Err` when the point `name` is configured to return; panics when it is configured to panic.
#[inline]
pub fn check(name: &'static str) -> Result<(), String> {
    let _ = name;
    fail::fail_point!(name, |arg: Option<String>| Err(match arg {
        Some(a) => format!("failpoint {name}: {a}"),
        None => format!("failpoint {name}"),
    }));
    Ok(())
}

/// Whether the point `name` is configured to return (to hold something back); never in release builds.
#[inline]
pub fn held(name: &'static str) -> bool {
    let _ = name;
    fail::fail_point!(name, |_| true);
    false
}

/// `Err` when the point `name` is configured as `return(ITEM)` with this `item` (e.g. one consumer
/// group among many); every other item passes.
#[inline]
pub fn check_for(name: &'static str, item: &str) -> Result<(), String> {
    #[cfg(feature = "failpoints")]
    if let Some(Some(e)) = fail::eval(name, |arg: Option<String>| {
        (arg.as_deref() == Some(item)).then(|| format!("failpoint {name}: {item}"))
    }) {
        return Err(e);
    }
    let _ = (name, item);
    Ok(())
}
