//! The host root's temporary names (`.skyhook-tmp-<pid>-<start>-<n>`) and the sweep of
//! those a dead process left, once per directory and process.

use super::entry::EntryKind;
use super::host_root::HostRoot;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Directories (agent-side, canonical root + host path) whose stale temporaries this process
/// already removed: each is swept once per process, however many sessions open the root.
pub(super) static SWEPT: std::sync::Mutex<Option<std::collections::HashSet<PathBuf>>> =
    std::sync::Mutex::new(None);

pub(super) static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The prefix of the agent's temporary files (`write_atomic`).
pub const TMP_PREFIX: &str = ".skyhook-tmp-";

/// The start time of process `pid` (clock ticks since boot, `/proc/<pid>/stat` field 22),
/// `None` when it does not exist.
pub(super) fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces: count after it.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// This process's start time, once.
pub(super) fn own_start() -> u64 {
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *START.get_or_init(|| process_start(std::process::id()).unwrap_or(0))
}

/// A temporary name that no other writer can hold: `<TMP_PREFIX><pid>-<start>-<n>-<random>`
/// (pid and start time tell whether its writer still lives; the counter and 64 random bits
/// make it unique).
pub(crate) fn tmp_name() -> String {
    use std::hash::{BuildHasher, Hasher};
    let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(n);
    format!(
        "{TMP_PREFIX}{}-{}-{n}-{:016x}",
        std::process::id(),
        own_start(),
        h.finish()
    )
}

/// True when the temporary `name` (ours by its prefix) was left by a writer that is gone:
/// its pid is not running, or runs with another start time (a reused pid), or it has the
/// old `<pid>-<n>` shape of a process that is not this one.
pub(crate) fn is_stale_tmp(name: &str) -> bool {
    let Some(rest) = name.strip_prefix(TMP_PREFIX) else {
        return false;
    };
    let mut parts = rest.split('-');
    let Some(Ok(pid)) = parts.next().map(str::parse::<u32>) else {
        return false;
    };
    let fields: Vec<&str> = parts.collect();
    let alive_start = process_start(pid);
    match (fields.len(), alive_start) {
        (_, None) => true,
        // old shape: `<pid>-<n>`; stale unless a live other process wrote it just now
        (1, Some(_)) => pid == std::process::id(),
        (3, Some(start)) => fields[0].parse::<u64>().ok() != Some(start),
        _ => false,
    }
}

impl HostRoot {
    /// Remove the temporaries that dead writers left in `dir` ([`is_stale_tmp`]), the first
    /// time this process writes there. Best effort: a failure is ignored.
    pub(super) fn sweep_stale_tmps(&self, dir: &Path) {
        {
            let mut swept = SWEPT.lock().unwrap_or_else(|p| p.into_inner());
            let key = self.canonical.join(dir.strip_prefix("/").unwrap_or(dir));
            if !swept.get_or_insert_with(Default::default).insert(key) {
                return;
            }
        }
        let Ok(entries) = self.read_dir(dir) else {
            return;
        };
        for e in entries {
            if let Some(name) = e.name.to_str()
                && e.kind == EntryKind::File
                && is_stale_tmp(name)
            {
                let _ = self.remove_file(&dir.join(name));
            }
        }
    }
}
