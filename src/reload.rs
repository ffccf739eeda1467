//! What makes a node reload its flows directory, and what a reload reports.
//!
//! Triggers: a change in the directory (watched with `notify`, debounced so that a burst of editor writes
//! or a Kubernetes ConfigMap symlink swap is one reload), SIGHUP, `POST /reload`, and a periodic rescan
//! that compares the directory's content hash, for filesystems without change events (and for the secret
//! files and certificates flow files reference, which may live outside the watched directory). Watch events and rescans
//! reload only when the content changed. A change that was rolled back (a changed flow's clusters did not
//! answer) is tried again by itself until it applies, after a wait that starts at the rescan interval and
//! doubles after each failed attempt ([`retry_delay`]: each attempt costs the node up to 10 s while the
//! cluster stays away); meanwhile the watcher and the rescan leave it alone. SIGHUP and `POST /reload` always reload; `POST /reload?dry_run=true` ([`PlanReload`]) answers
//! what a reload would do and does nothing. With `ferry run --reload manual` the node has no watcher and
//! no rescan: only SIGHUP and `POST /reload` reload, so that an edit can be reviewed before it applies.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::Duration;

use actix::Recipient;
use notify_debouncer_full::notify::event::{AccessKind, AccessMode};
use notify_debouncer_full::notify::{EventKind, RecommendedWatcher, RecursiveMode};
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};
use serde::Serialize;

pub use crate::status::{ReloadOutcome, ReloadResult, Trigger};

/// Quiet time after the last change event before a reload: editors save in bursts.
pub const DEBOUNCE: Duration = Duration::from_secs(1);
/// How often the directory's content hash is compared, whatever the watcher saw.
pub const RESCAN_INTERVAL: Duration = Duration::from_secs(30);
/// The longest wait before a rolled-back change is tried again by itself.
pub const RETRY_WAIT_MAX: Duration = Duration::from_secs(600);
/// Test knob, not a setting: milliseconds between rescans instead of [`RESCAN_INTERVAL`], so that
/// ferry's own tests of the rescan and of retried reloads take seconds, not minutes.
pub const RESCAN_INTERVAL_TEST_KNOB: &str = "FERRY_TEST_RESCAN_INTERVAL_MS";

/// [`RESCAN_INTERVAL`], or what [`RESCAN_INTERVAL_TEST_KNOB`] says (at least 100 ms).
pub fn rescan_interval() -> Duration {
    std::env::var(RESCAN_INTERVAL_TEST_KNOB)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(RESCAN_INTERVAL, |ms| Duration::from_millis(ms.max(100)))
}

/// How long after its `attempt`th failed attempt in a row a rolled-back change is tried again by itself:
/// `interval` (the rescan's), doubled after each further failure, up to [`RETRY_WAIT_MAX`].
pub fn retry_delay(attempt: u32, interval: Duration) -> Duration {
    let doublings = attempt.saturating_sub(1).min(30);
    interval.saturating_mul(1 << doublings).min(RETRY_WAIT_MAX.max(interval))
}

/// Load the flows directory and apply it if it changed (or `trigger` forces it). Handled by the node;
/// defined here so that the triggers (watch, rescan, SIGHUP, HTTP) need only a recipient of it.
#[derive(actix::Message, Debug)]
#[rtype(result = "ReloadOutcome")]
pub struct Reload {
    pub trigger: Trigger,
}

/// What a reload would do now, changing nothing (`POST /reload?dry_run=true`, `ferry reload --dry-run`):
/// the flows directory is read and validated and diffed against the running flows, exactly as `POST
/// /reload` would, and the answer stops there. Handled by the node, queued behind any reload in progress.
#[derive(actix::Message, Debug)]
#[rtype(result = "ReloadPlan")]
pub struct PlanReload;

/// The answer to a dry run: which flows a reload would start, stop and restart, and which it would leave
/// alone; or why the directory would be refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReloadPlan {
    /// Always `true`: tells this answer from a real reload's in logs and scripts.
    pub dry_run: bool,
    pub result: PlanResult,
    /// RFC 3339.
    pub at: String,
    /// Every validation error (file and key) of a directory that would be refused.
    pub error: Option<String>,
    pub would_start: Vec<String>,
    pub would_stop: Vec<String>,
    /// Changed flows. A real reload first checks that their clusters answer (the dry run does not
    /// connect anywhere); one whose clusters do not would keep its old plan (`rolled_back`).
    pub would_restart: Vec<String>,
    pub unchanged: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanResult {
    /// The directory is valid: a reload would apply the lists (nothing at all if they are empty).
    WouldApply,
    /// The directory is invalid: a reload would change nothing and report `rejected`.
    Rejected,
}

impl ReloadPlan {
    /// The plan for going from `running` to `next` (a valid set).
    pub fn of_diff(d: &crate::config::FlowSetDiff) -> Self {
        let names = |ids: &[crate::config::FlowId]| ids.iter().map(ToString::to_string).collect();
        Self {
            dry_run: true,
            result: PlanResult::WouldApply,
            at: crate::status::rfc3339(std::time::SystemTime::now()),
            error: None,
            would_start: names(&d.added),
            would_stop: names(&d.removed),
            would_restart: names(&d.changed),
            unchanged: names(&d.unchanged),
        }
    }

    /// The plan for an invalid directory: nothing would change.
    pub fn rejected(errors: &crate::config::ConfigErrors) -> Self {
        Self {
            result: PlanResult::Rejected,
            error: Some(errors.to_string().trim_end().to_string()),
            ..Self::of_diff(&crate::config::FlowSetDiff::default())
        }
    }

    /// Whether the reload would change any flow.
    pub fn changes_anything(&self) -> bool {
        !(self.would_start.is_empty() && self.would_stop.is_empty() && self.would_restart.is_empty())
    }
}

impl std::fmt::Display for ReloadPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "would start {:?}, stop {:?}, restart {:?}; unchanged {:?}",
            self.would_start, self.would_stop, self.would_restart, self.unchanged
        )
    }
}

/// A hash of what a reload would read: the names and contents of the directory's flow files (following
/// symlinks, as a ConfigMap mount has them), of the secret files they reference and of the files their
/// clusters' client properties name (certificates, keys, CA files, keytabs). Unreadable entries hash as
/// their error, so that a change from unreadable to readable is a change too.
pub fn content_hash(dir: &Path) -> u64 {
    let mut h = DefaultHasher::new();
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.filter_map(Result::ok).map(|e| e.path()).filter(|p| crate::config::is_flow_file(p)).collect(),
        Err(e) => {
            e.kind().hash(&mut h);
            return h.finish();
        }
    };
    files.sort();
    // Secret files the flow files reference (`${file:...}`) count too: a rotated password is a change.
    // So do the files client properties name (certificates, keys, CAs, keytabs): a rotated certificate.
    let named = crate::config::client_files::paths_in(&files);
    files.extend(crate::config::secret_files_in(dir));
    files.extend(named);
    for f in files {
        hash_file(&f, &mut h);
    }
    h.finish()
}

/// The name and content of `path` into `h`; for a directory (a CA directory), of each file in it.
fn hash_file(path: &Path, h: &mut DefaultHasher) {
    path.hash(h);
    if path.is_dir() {
        let entries = match crate::config::client_files::files_of(path) {
            Ok(files) => files,
            Err(e) => return e.kind().hash(h),
        };
        for entry in entries {
            hash_file(&entry, h);
        }
        return;
    }
    match std::fs::read(path) {
        Ok(bytes) => bytes.hash(h),
        Err(e) => e.kind().hash(h),
    }
}

/// Keeps the directory watched while alive.
pub struct DirWatch {
    _debouncer: Debouncer<RecommendedWatcher, RecommendedCache>,
}

/// Whether an event of this kind can mean changed content. `notify` also reports files being opened
/// and read (inotify `IN_OPEN`): every reload and rescan reads the flow files, so those would make each
/// read look like a change a second later (a watch-triggered reload that finds nothing, or that takes the
/// credit for a change only the rescan could see, such as a secret file outside the directory). A
/// file closed after writing is a change.
pub fn changes_content(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// Watch `dir` (not recursively: flow files live at its top, and a ConfigMap swap renames `..data`
/// there) and ask `node` to reload after each debounced burst of changes.
pub fn watch(dir: &Path, node: Recipient<Reload>) -> Result<DirWatch, String> {
    let mut debouncer = new_debouncer(DEBOUNCE, None, move |result: DebounceEventResult| match result {
        Ok(events) if events.iter().any(|e| changes_content(&e.kind)) => {
            node.do_send(Reload { trigger: Trigger::Watch })
        }
        Ok(_) => {}
        Err(errors) => {
            for e in errors {
                tracing::warn!(error = %e, "watching the flows directory");
            }
        }
    })
    .map_err(|e| format!("cannot watch {}: {e}", dir.display()))?;
    debouncer.watch(dir, RecursiveMode::NonRecursive).map_err(|e| format!("cannot watch {}: {e}", dir.display()))?;
    Ok(DirWatch { _debouncer: debouncer })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_a_file_is_not_a_change_writing_one_is() {
        use notify_debouncer_full::notify::event::{CreateKind, ModifyKind, RemoveKind, RenameMode};
        for read in [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Read),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
            EventKind::Access(AccessKind::Any),
        ] {
            assert!(!changes_content(&read), "{read:?}");
        }
        for change in [
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Name(RenameMode::Both)),
            EventKind::Modify(ModifyKind::Any),
            EventKind::Remove(RemoveKind::File),
            EventKind::Any,
        ] {
            assert!(changes_content(&change), "{change:?}");
        }
    }

    #[test]
    fn a_change_that_keeps_failing_is_tried_again_less_and_less_often() {
        let waits: Vec<u64> = (1..=8).map(|n| retry_delay(n, RESCAN_INTERVAL).as_secs()).collect();
        assert_eq!(waits, [30, 60, 120, 240, 480, 600, 600, 600]);
        assert_eq!(retry_delay(u32::MAX, RESCAN_INTERVAL), RETRY_WAIT_MAX);
        assert_eq!(retry_delay(0, RESCAN_INTERVAL), RESCAN_INTERVAL);
        let fast: Vec<u128> = (1..=4).map(|n| retry_delay(n, Duration::from_millis(500)).as_millis()).collect();
        assert_eq!(fast, [500, 1_000, 2_000, 4_000], "from the test knob's interval");
    }

    #[test]
    fn the_hash_follows_flow_files_only() {
        let dir = tempfile::tempdir().expect("dir");
        let h0 = content_hash(dir.path());
        std::fs::write(dir.path().join("a.toml"), "x = 1").expect("write");
        let h1 = content_hash(dir.path());
        assert_ne!(h0, h1);
        std::fs::write(dir.path().join(".a.toml.swp"), "junk").expect("write");
        std::fs::write(dir.path().join("notes.txt"), "junk").expect("write");
        assert_eq!(content_hash(dir.path()), h1, "hidden and non-TOML files do not count");
        std::fs::write(dir.path().join("a.toml"), "x = 2").expect("write");
        assert_ne!(content_hash(dir.path()), h1);
    }

    #[test]
    fn a_certificate_rewritten_outside_the_directory_is_a_change() {
        let dir = tempfile::tempdir().expect("dir");
        let certs = tempfile::tempdir().expect("certs");
        let (cert, cas) = (certs.path().join("client.pem"), certs.path().join("cas"));
        std::fs::write(&cert, "old").expect("write");
        std::fs::create_dir(&cas).expect("mkdir");
        let flows = format!(
            "[clusters.a]\nbootstrap_servers = \"x:1\"\n[clusters.a.client]\n\"ssl.certificate.location\" = {:?}\n\
             \"ssl.ca.location\" = {:?}\n",
            cert.display().to_string(),
            cas.display().to_string()
        );
        std::fs::write(dir.path().join("c.toml"), flows).expect("write");
        let h0 = content_hash(dir.path());
        assert_eq!(content_hash(dir.path()), h0, "stable");
        std::fs::write(&cert, "new").expect("write");
        let h1 = content_hash(dir.path());
        assert_ne!(h1, h0, "rewritten in place");
        std::fs::write(cas.join("ca2.pem"), "another CA").expect("write");
        assert_ne!(content_hash(dir.path()), h1, "a file added to a CA directory");
    }
}
