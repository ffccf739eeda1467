//! Named failure points for fault tests. Built only with `--features failpoints` (release builds carry
//! none) and activated by the `FAILPOINTS` environment variable as the `fail` crate does, e.g.
//! `FAILPOINTS="copier-poll=1*panic;checkpoints-emit=2*return(broker away)"`.
//!
//! `panic` makes the actor panic (caught and restarted like an error); `return(msg)` makes the point
//! return an error naming itself.

pub const COPIER_POLL: &str = "copier-poll";
/// Before a record is handed to the producer (a `return` refuses it as the target would).
pub const COPIER_DELIVER: &str = "copier-deliver";
/// Right after a record was handed to the producer.
pub const COPIER_SENT: &str = "copier-sent";
/// In a copied record's delivery report, on the producer's thread, before anything is counted.
pub const COPIER_REPORT: &str = "copier-report";
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
/// `control-ack=return(MS)`: a node applies the acknowledgement of its own pause or resume MS milliseconds
/// late (as a loaded node may), by when its tail of the control topic may have read a later decision.
pub const CONTROL_ACK: &str = "control-ack";
/// `reload-preflight=return`: a reload's check that a changed flow's clusters answer fails at once, as if
/// they did not (the real check takes its full 10 s against a cluster that is away).
pub const RELOAD_PREFLIGHT: &str = "reload-preflight";
/// `kerberos-kinit=return(Cannot contact any KDC)` fails ferry's `kinit` runs as if the KDC did not
/// answer; `kerberos-kinit=sleep(MS)` makes each take that long first.
pub const KINIT: &str = "kerberos-kinit";

/// `copier-claim=1*return(MILLIS)`: the copier holds MILLIS between reading the progress of partitions
/// the group gave it and committing its claim of them (a test freezes the node there).
pub const COPIER_CLAIM: &str = "copier-claim";

/// `copier-commit=N*off->1*return(MILLIS)`: an exactly-once commit holds MILLIS between writing its
/// progress records and ending the transaction (a test freezes the node there).
pub const COPIER_COMMIT: &str = "copier-commit";

/// `copier-rebalance=1*return`: the copy loop fails as it applies a rebalance of the copier group (the
/// lifetime ends with the rebalance taken in and not applied).
pub const COPIER_REBALANCE: &str = "copier-rebalance";

/// `copier-quiet=return`: the copier publishes no quiet syncs (a partition's last position stays
/// unpublished, as when a node dies within the quiet interval).
pub const COPIER_QUIET: &str = "copier-quiet";

/// `copier-persist=return`: an at-least-once copier persists no position (its claims still go out).
pub const COPIER_PERSIST: &str = "copier-persist";

/// `flow-stop=1*return(MILLIS)`: a flow's supervisor, its actors all stopped, holds MILLIS before it
/// ends (as a stop stuck in a cluster's timeouts does), so a reload starts the new generation first.
pub const FLOW_STOP: &str = "flow-stop";

/// How long the point `name` holds when configured as `return(MILLIS)` (None when it is off); logs that
/// it holds. For callers that must not block their thread.
pub fn hold_for(name: &'static str) -> Option<std::time::Duration> {
    check(name).err().map(|e| holding(name, &e))
}

/// The MILLIS of a `return(MILLIS)` point's error, logged as the hold it starts.
fn holding(name: &'static str, e: &str) -> std::time::Duration {
    let millis: u64 = e.rsplit(": ").next().and_then(|m| m.parse().ok()).unwrap_or(0);
    tracing::warn!(failpoint = name, millis, "failpoint {name}: holding");
    std::time::Duration::from_millis(millis)
}

/// When the point `name` is configured as `return(MILLIS)`: logs that it holds, then sleeps MILLIS.
pub fn hold(name: &'static str) {
    hold_after(name, || {});
}

/// [`hold`], with `first` done before holding (e.g. flushing what the test wants on the wire).
pub fn hold_after(name: &'static str, first: impl FnOnce()) {
    if let Err(e) = check(name) {
        first();
        std::thread::sleep(holding(name, &e));
    }
}

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

/// How long the point `name` holds something up when configured as `return(MS)`; never in release builds.
#[inline]
pub fn delay(name: &'static str) -> Option<std::time::Duration> {
    #[cfg(feature = "failpoints")]
    if let Some(Some(ms)) = fail::eval(name, |arg: Option<String>| arg.and_then(|a| a.trim().parse::<u64>().ok())) {
        return Some(std::time::Duration::from_millis(ms));
    }
    let _ = name;
    None
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
