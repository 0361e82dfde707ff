//! Log retention (agent-contract 6.5): keep the newest step logs, delete the rest.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::host::root::{AgentFiles, run_dirs::RunDirs};
use crate::host::root::{EntryKind, HostRoot};

use super::error::LogError;

/// Number of `.log` files per step the agent keeps (Python's hard-coded 5).
pub const DEFAULT_KEEP: usize = 5;

/// True when `rest` (the part of a file name after `<basename>-`) is exactly a file-name
/// timestamp plus `.log`: `\d{4}-\d{2}-\d{2}-\d{6}\.log`.
fn is_ts_log(rest: &[u8]) -> bool {
    const SHAPE: &[u8] = b"dddd-dd-dd-dddddd.log";
    rest.len() == SHAPE.len()
        && rest.iter().zip(SHAPE).all(|(&c, &s)| match s {
            b'd' => c.is_ascii_digit(),
            _ => c == s,
        })
}

/// The `<basename>-<FTS>.log` files of step `base` under `log_dir`: `(timestamp, host path)`,
/// newest first by the timestamp in the name (names are unique within a directory, so this
/// order is total and no `stat` is needed). A missing directory lists nothing.
///
/// # Errors
/// [`LogError::List`] when the directory cannot be listed.
pub fn list(
    root: &HostRoot,
    log_dir: &Path,
    base: &str,
) -> Result<Vec<(String, PathBuf)>, LogError> {
    let full = log_dir.join(base.trim_start_matches('/'));
    let (Some(dir), Some(name)) = (full.parent(), full.file_name()) else {
        return Ok(Vec::new());
    };
    let entries = match root.read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.is_not_found() => return Ok(Vec::new()),
        Err(e) => return Err(LogError::List(e)),
    };
    let mut stem = name.as_encoded_bytes().to_vec();
    stem.push(b'-');
    let mut logs = Vec::new();
    for entry in entries {
        if entry.kind != EntryKind::File {
            continue;
        }
        let bytes = entry.name.as_encoded_bytes();
        let Some(rest) = bytes.strip_prefix(stem.as_slice()) else {
            continue;
        };
        if !is_ts_log(rest) {
            continue;
        }
        let ts = String::from_utf8_lossy(&rest[..rest.len() - ".log".len()]).into_owned();
        logs.push((ts, dir.join(&entry.name)));
    }
    logs.sort_by(|a, b| b.0.cmp(&a.0));
    Ok(logs)
}

/// The step logs of one directory: by base name, `(timestamp, host path)` newest first.
type DirLogs = HashMap<Vec<u8>, Vec<(String, PathBuf)>>;

/// Length of `-<FTS>.log` after the step's base name.
const TS_SUFFIX: usize = "-dddd-dd-dd-dddddd.log".len();

/// The step logs of the directories one run writes to, each listed once per run instead of
/// once per step: a run of N steps sharing a log directory (one package version) lists it
/// once, so retention costs O(N + directory size), not O(N × directory size). The index
/// then follows the logs the run creates and the ones its retention removes
/// ([`LogIndex::created`]). Logs another process adds to the directory during the run are
/// not seen until the next run (their retention is then one run late); logs it removes are
/// harmless (removing a missing file is not an error).
#[derive(Debug, Default)]
pub struct LogIndex {
    /// By directory (host path), by base name: `(timestamp, host path)`, newest first.
    dirs: std::sync::Mutex<HashMap<PathBuf, DirLogs>>,
}

impl LogIndex {
    /// An empty index (nothing listed yet).
    pub fn new() -> LogIndex {
        LogIndex::default()
    }

    /// What [`list`] returns for `base` under `log_dir`, from the index; the directory is
    /// listed on its first use.
    ///
    /// # Errors
    /// [`LogError::List`] when the directory cannot be listed.
    pub fn list(
        &self,
        root: &HostRoot,
        log_dir: &Path,
        base: &str,
    ) -> Result<Vec<(String, PathBuf)>, LogError> {
        let full = log_dir.join(base.trim_start_matches('/'));
        let (Some(dir), Some(name)) = (full.parent(), full.file_name()) else {
            return Ok(Vec::new());
        };
        let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        if !dirs.contains_key(dir) {
            dirs.insert(dir.to_path_buf(), list_dir(root, dir)?);
        }
        Ok(dirs[dir]
            .get(name.as_encoded_bytes())
            .cloned()
            .unwrap_or_default())
    }

    /// Note that the step `base` created its log `path` and that retention keeps the
    /// `keep - 1` newest of `previous` (as returned by [`LogIndex::list`]) beside it.
    pub fn created(
        &self,
        log_dir: &Path,
        base: &str,
        path: &Path,
        previous: &[(String, PathBuf)],
        keep: usize,
    ) {
        let full = log_dir.join(base.trim_start_matches('/'));
        let (Some(dir), Some(name)) = (full.parent(), full.file_name()) else {
            return;
        };
        let Some(ts) = path
            .file_name()
            .map(|n| n.as_encoded_bytes())
            .filter(|n| n.len() >= TS_SUFFIX)
            .map(|n| {
                String::from_utf8_lossy(&n[n.len() - TS_SUFFIX + 1..n.len() - 4]).into_owned()
            })
        else {
            return;
        };
        let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(bases) = dirs.get_mut(dir) {
            let mut logs = vec![(ts, path.to_path_buf())];
            logs.extend(previous.iter().take(keep.saturating_sub(1)).cloned());
            logs.sort_by(|a, b| b.0.cmp(&a.0));
            bases.insert(name.as_encoded_bytes().to_vec(), logs);
        }
    }
}

/// Every step's `<basename>-<FTS>.log` files in `dir`, by base name, newest first (one
/// listing). A missing directory lists nothing.
fn list_dir(root: &HostRoot, dir: &Path) -> Result<DirLogs, LogError> {
    let entries = match root.read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.is_not_found() => return Ok(HashMap::new()),
        Err(e) => return Err(LogError::List(e)),
    };
    let mut out = DirLogs::new();
    for entry in entries {
        let bytes = entry.name.as_encoded_bytes();
        if entry.kind != EntryKind::File || bytes.len() < TS_SUFFIX {
            continue;
        }
        let (stem, rest) = bytes.split_at(bytes.len() - TS_SUFFIX);
        if rest[0] != b'-' || !is_ts_log(&rest[1..]) {
            continue;
        }
        let ts = String::from_utf8_lossy(&rest[1..rest.len() - ".log".len()]).into_owned();
        out.entry(stem.to_vec())
            .or_default()
            .push((ts, dir.join(&entry.name)));
    }
    for logs in out.values_mut() {
        logs.sort_by(|a, b| b.0.cmp(&a.0));
    }
    Ok(out)
}

/// Keep the `keep` newest `<basename>-<FTS>.log` files in the directory of `<log_dir>/<base>`
/// (host paths under `root`) and delete the others, each with its `<name>.log.err` \[fix\].
///
/// A file matches only when its name is `<basename>-` followed by exactly
/// `\d{4}-\d{2}-\d{2}-\d{6}\.log`, so `foo.sh-bar-2024-01-01-000000.log` (step `foo.sh-bar`)
/// is never pruned for step `foo.sh`, and glob metacharacters in names mean nothing. Files
/// are ordered newest first by the timestamp in the name \[fix: Python globs
/// `<basename>-*.log` and orders by mtime only, never deleting `.err` files\]. Used for
/// interrupt logs too, with `base` = `interrupts/<type>_<i>`.
///
/// Returns the host paths removed (`.log` and, where one existed, `.log.err`). A missing
/// directory removes nothing.
///
/// # Errors
/// [`LogError::List`] when the directory cannot be listed; [`LogError::Remove`] on the first
/// file that cannot be removed (files removed before it stay removed).
pub fn prune(
    root: &HostRoot,
    log_dir: &Path,
    base: &str,
    keep: usize,
) -> Result<Vec<PathBuf>, LogError> {
    let listed: Vec<PathBuf> = list(root, log_dir, base)?
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    prune_listed(root, &listed, keep)
}

/// [`prune`] over logs already listed (newest first, e.g. [`StepLogFiles::previous`] taken
/// when the step's own logs were created, with `keep` one less for the new log): keeps the
/// first `keep` and removes the rest with their `.log.err`, without listing the directory
/// again.
///
/// [`StepLogFiles::previous`]: super::sink::StepLogFiles::previous
///
/// # Errors
/// [`LogError::Remove`] on the first file that cannot be removed.
pub fn prune_listed(
    root: &HostRoot,
    listed: &[PathBuf],
    keep: usize,
) -> Result<Vec<PathBuf>, LogError> {
    prune_listed_in(None, root, listed, keep)
}

/// [`prune_listed`], removing through the directory descriptors `dirs` keeps for the run
/// when given ([`RunDirs::remove_file`]: one `unlinkat`, no resolution), else through
/// `root`.
///
/// # Errors
/// As [`prune_listed`].
pub fn prune_listed_in(
    dirs: Option<&RunDirs>,
    root: &HostRoot,
    listed: &[PathBuf],
    keep: usize,
) -> Result<Vec<PathBuf>, LogError> {
    let remove = |p: &Path| match dirs {
        Some(d) => d.remove_file(&AgentFiles::new(root), p),
        None => AgentFiles::new(root).remove_file(p),
    };
    let mut removed = Vec::new();
    for path in listed.iter().skip(keep) {
        if remove(path).map_err(LogError::Remove)? {
            removed.push(path.clone());
        }
        let mut err = path.clone().into_os_string();
        err.push(".err");
        let err = PathBuf::from(err);
        if remove(&err).map_err(LogError::Remove)? {
            removed.push(err);
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_is_exact() {
        assert!(is_ts_log(b"2025-01-02-134501.log"));
        assert!(!is_ts_log(b"2025-01-02-134501.log.err"));
        assert!(!is_ts_log(b"bar-2025-01-02-134501.log"));
        assert!(!is_ts_log(b"2025-01-02-13450.log"));
        assert!(!is_ts_log(b"2025-01-02T134501.log"));
    }

    #[test]
    fn keeps_five_newest_by_name_and_removes_err_pairs() {
        let d = tempfile::tempdir().unwrap();
        let root = HostRoot::open(d.path()).unwrap();
        let dir = d.path().join("log/sub");
        std::fs::create_dir_all(&dir).unwrap();
        // written newest first, so mtime order is the reverse of name order
        for s in (0..7).rev() {
            std::fs::write(dir.join(format!("x.sh-2025-01-02-00000{s}.log")), "o").unwrap();
            std::fs::write(dir.join(format!("x.sh-2025-01-02-00000{s}.log.err")), "e").unwrap();
        }
        let other = [
            "x.sh-bar-2024-01-01-000000.log",
            "x.sh-2024-01-01-000000.log.bak",
            "y.sh-2020-01-01-000000.log",
            "x.sh-2020-1-01-000000.log",
        ];
        for o in other {
            std::fs::write(dir.join(o), "").unwrap();
        }
        let removed = prune(&root, Path::new("/log"), "sub/x.sh", 5).unwrap();
        assert_eq!(
            removed,
            vec![
                PathBuf::from("/log/sub/x.sh-2025-01-02-000001.log"),
                PathBuf::from("/log/sub/x.sh-2025-01-02-000001.log.err"),
                PathBuf::from("/log/sub/x.sh-2025-01-02-000000.log"),
                PathBuf::from("/log/sub/x.sh-2025-01-02-000000.log.err"),
            ]
        );
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        let mut expected: Vec<String> = other.iter().map(|s| s.to_string()).collect();
        for s in 2..7 {
            expected.push(format!("x.sh-2025-01-02-00000{s}.log"));
            expected.push(format!("x.sh-2025-01-02-00000{s}.log.err"));
        }
        expected.sort();
        assert_eq!(left, expected);
    }

    #[test]
    fn same_name_timestamp_orders_by_mtime_and_missing_dir_is_empty() {
        let d = tempfile::tempdir().unwrap();
        let root = HostRoot::open(d.path()).unwrap();
        assert!(
            prune(&root, Path::new("/log"), "x.sh", 5)
                .unwrap()
                .is_empty()
        );
        // keep 0: everything matching goes, without an .err when there is none
        std::fs::create_dir_all(d.path().join("log")).unwrap();
        std::fs::write(d.path().join("log/x.sh-2025-01-02-000000.log"), "").unwrap();
        let removed = prune(&root, Path::new("/log"), "x.sh", 0).unwrap();
        assert_eq!(
            removed,
            vec![PathBuf::from("/log/x.sh-2025-01-02-000000.log")]
        );
    }

    #[test]
    fn index_lists_once_and_follows_created_logs() {
        let d = tempfile::tempdir().unwrap();
        let root = HostRoot::open(d.path()).unwrap();
        let dir = d.path().join("log/sub");
        std::fs::create_dir_all(&dir).unwrap();
        for s in 0..3 {
            std::fs::write(dir.join(format!("x.sh-2025-01-02-00000{s}.log")), "").unwrap();
        }
        std::fs::write(dir.join("x.sh-bar-2024-01-01-000000.log"), "").unwrap();
        std::fs::write(dir.join("y.sh-2020-01-01-000000.log.err"), "").unwrap();
        let index = LogIndex::new();
        for base in [
            "sub/x.sh",
            "sub/x.sh-bar",
            "sub/y.sh",
            "sub/z.sh",
            "other/x.sh",
        ] {
            assert_eq!(
                index.list(&root, Path::new("/log"), base).unwrap(),
                list(&root, Path::new("/log"), base).unwrap(),
                "{base}"
            );
        }
        // Listed once: a file added behind the index's back is not seen ...
        std::fs::write(dir.join("x.sh-2025-01-02-000009.log"), "").unwrap();
        let prev = index.list(&root, Path::new("/log"), "sub/x.sh").unwrap();
        assert_eq!(prev.len(), 3);
        // ... but what the run creates is, with what retention keeps.
        let new = PathBuf::from("/log/sub/x.sh-2025-01-02-000005.log");
        index.created(Path::new("/log"), "sub/x.sh", &new, &prev, 3);
        let now = index.list(&root, Path::new("/log"), "sub/x.sh").unwrap();
        assert_eq!(
            now,
            vec![
                ("2025-01-02-000005".into(), new),
                (
                    "2025-01-02-000002".into(),
                    PathBuf::from("/log/sub/x.sh-2025-01-02-000002.log")
                ),
                (
                    "2025-01-02-000001".into(),
                    PathBuf::from("/log/sub/x.sh-2025-01-02-000001.log")
                ),
            ]
        );
    }
}
