//! This process's own directory of ticket caches, the `DIR:` collection that `KRB5CCNAME` names.
//!
//! Every ferry process has one, whichever command it runs (`ferry check` and `ferry translate` log in
//! too): `ferry-krb5cc-<pid>-<random>` under the temp dir, or under `FERRY_KRB5_CCACHE_DIR` when that is
//! set (a memory-backed volume; the Kubernetes example sets it for the container, so a command run there
//! by `kubectl exec` has it as well). So a command never touches another process's tickets.
//! - The directory is made fresh at the first login (it must not exist: nobody else can have prepared
//!   it), readable by this user only, and removed when the process exits ([`CachesGuard`]).
//! - A process that was killed cannot remove its directory: while a process lives it holds a lock on
//!   the file `lock` in it, which the system releases when the process ends however it ends. Each
//!   process, at its first login, removes the directories beside its own whose lock nobody holds.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

const PREFIX: &str = "ferry-krb5cc-";
/// Held (locked) by the process whose directory it is in. Not a cache: the collection reads only the
/// files named `tkt…`, and `primary`.
const LOCK: &str = "lock";

/// The collection of this process's ticket caches, chosen once.
static DIR: OnceLock<PathBuf> = OnceLock::new();
/// The lock file of the directory, once it is made.
static MADE: Mutex<Option<File>> = Mutex::new(None);

/// Points the Kerberos library at this process's own collection of ticket caches. Call it first thing
/// in `main`, before any thread exists (it sets an environment variable). The directory is made at the
/// first login.
// The one environment variable ferry sets: MIT Kerberos reads its default cache from it, in every
// thread librdkafka starts, and has no other process-wide switch.
#[allow(unsafe_code)]
#[must_use = "the caches are removed when the guard drops: hold it until the process ends"]
pub fn init_process() -> CachesGuard {
    // SAFETY: called from `main` before any other thread runs, as `set_var` requires.
    unsafe { std::env::set_var("KRB5CCNAME", format!("DIR:{}", path().display())) };
    CachesGuard
}

/// Removes this process's ticket caches when dropped, whichever command ran: tickets are credentials,
/// and must not outlive the process on disk.
pub struct CachesGuard;

impl Drop for CachesGuard {
    fn drop(&mut self) {
        let mut made = MADE.lock().unwrap_or_else(|p| p.into_inner());
        if made.take().is_some() {
            let _ = std::fs::remove_dir_all(path());
        }
    }
}

/// The directory of this process's caches (made or not yet).
pub fn path() -> PathBuf {
    DIR.get_or_init(|| {
        let parent = std::env::var_os("FERRY_KRB5_CCACHE_DIR").map_or_else(std::env::temp_dir, PathBuf::from);
        parent.join(unpredictable_name())
    })
    .clone()
}

/// `ferry-krb5cc-<pid>-<random>`: a name nobody can make beforehand (a pid is easy to guess).
fn unpredictable_name() -> String {
    let mut random = [0u8; 8];
    let _ = openssl::rand::rand_bytes(&mut random);
    format!("{PREFIX}{}-{}", std::process::id(), super::hex(&random))
}

/// The directory, made at the first call; then the directories of processes that ended without
/// removing theirs are removed.
pub fn prepared() -> std::io::Result<PathBuf> {
    let dir = path();
    let mut made = MADE.lock().unwrap_or_else(|p| p.into_inner());
    if made.is_none() {
        *made = Some(make(&dir)?);
        if let Some(parent) = dir.parent() {
            remove_abandoned(parent);
        }
    }
    Ok(dir)
}

/// Makes `dir` fresh, readable by this user only, and locked by the returned file. It is made under a
/// hidden name and renamed when locked, so that another process never finds it unlocked.
fn make(dir: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::DirBuilderExt;
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Err(std::io::Error::other("not a directory path"));
    };
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(parent)?;
    let hidden = parent.join(format!(".{}", name.to_string_lossy()));
    std::fs::DirBuilder::new().mode(0o700).create(&hidden)?;
    let lock = File::create_new(hidden.join(LOCK))?;
    lock.try_lock().map_err(std::io::Error::other)?;
    std::fs::rename(&hidden, dir)?;
    Ok(lock)
}

/// Removes the cache directories under `parent` whose process ended (nobody holds their lock). Others
/// are left alone: those of running processes, links, and what this user cannot open.
fn remove_abandoned(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let ours = entry.file_name().to_string_lossy().starts_with(PREFIX);
        if !ours || path == self::path() || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if let Ok(lock) = File::open(path.join(LOCK))
            && lock.try_lock().is_ok()
        {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_cache_dir_has_a_name_nobody_could_take_beforehand_and_is_private() {
        let parent = tempfile::tempdir().unwrap();
        // What another user could have made beforehand at the name the pid alone would give.
        let guessed = parent.path().join(format!("{PREFIX}{}", std::process::id()));
        std::fs::create_dir(&guessed).unwrap();
        let dir = parent.path().join(unpredictable_name());
        assert_ne!(dir, guessed);
        assert_ne!(unpredictable_name(), unpredictable_name());
        let _lock = make(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "only the lock in a fresh dir");
    }

    #[test]
    fn the_dirs_of_ended_processes_go_and_those_of_running_ones_stay() {
        let parent = tempfile::tempdir().unwrap();
        let running = parent.path().join(format!("{PREFIX}1-aa"));
        let _held = make(&running).unwrap();
        let ended = parent.path().join(format!("{PREFIX}2-bb"));
        drop(make(&ended).unwrap());
        std::fs::write(ended.join("tkt-ferry"), b"ticket").unwrap();
        let other = parent.path().join("keep-me");
        std::fs::create_dir(&other).unwrap();
        remove_abandoned(parent.path());
        assert!(running.exists() && other.exists());
        assert!(!ended.exists());
    }
}
