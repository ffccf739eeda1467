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
