//! The version history file `<state root>/history/<pkg>.json` (contract 6.3).
//!
//! Written in the Python agent's bytes (`json.dumps` defaults, no trailing newline, newest
//! entry first); read leniently (the Go rewrite writes indented JSON with `...Z` times).
//! Unknown keys and entry fields are kept in place.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::StateError;
use crate::host::root::{AgentFiles, HostRoot};
use crate::pyfmt;

/// `<state root>/history`.
pub fn history_dir(state_root: &Path) -> PathBuf {
    state_root.join("history")
}

/// `<state root>/history/<pkg>.json`.
pub fn history_path(state_root: &Path, pkg: &str) -> PathBuf {
    history_dir(state_root).join(format!("{pkg}.json"))
}

/// `<state root>/history/<pkg>.json.backup`, where a corrupt history is moved.
pub fn backup_path(state_root: &Path, pkg: &str) -> PathBuf {
    history_dir(state_root).join(format!("{pkg}.json.backup"))
}

/// The outcome of reading the history before a step (contract 6.3, 7.5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryRead {
    /// `current-version` of the file, or `unknown` when there is none (missing, corrupt or
    /// wrong-shaped file).
    pub previous: String,
    /// Lines for stdout, in order (the Python agent's messages).
    pub messages: Vec<String>,
}

/// What the file held.
enum Loaded {
    /// No file.
    Missing,
    /// Not parseable JSON (or not UTF-8): moved to `.backup`.
    Corrupt,
    /// Valid JSON, but not an object with a string `current-version` and an array `history`.
    WrongShape,
    /// A usable history object.
    Valid(Map<String, Value>),
}

fn missing_message(pkg: &str) -> String {
    format!("no existing history found for {pkg}, could be first installation...")
}

/// Read and classify the history file, moving a corrupt one to `.backup` when `write`
/// (else only saying the agent would). The messages the Python agent prints for a missing
/// or corrupt file are appended to `messages`.
fn load_with(
    root: &HostRoot,
    state_root: &Path,
    pkg: &str,
    messages: &mut Vec<String>,
    write: bool,
) -> Result<Loaded, StateError> {
    if write {
        AgentFiles::new(root).create_dir_all(&history_dir(state_root), 0o755)?;
    }
    let path = history_path(state_root, pkg);
    let Some(bytes) = root.read_opt(&path)? else {
        messages.push(missing_message(pkg));
        return Ok(Loaded::Missing);
    };
    let parsed = std::str::from_utf8(&bytes)
        .ok()
        .and_then(|s| serde_json::from_str::<Value>(s).ok());
    let Some(value) = parsed else {
        if !write {
            messages.push(format!(
                "existing history {} is corrupt: the agent would move it to {}.backup...",
                root.display_path(&path).display(),
                root.display_path(&path).display()
            ));
            return Ok(Loaded::Corrupt);
        }
        AgentFiles::new(root).rename(&path, &backup_path(state_root, pkg))?;
        messages.push(format!(
            "Failed to load existing history, corrupt history file moved to {}.backup...",
            root.display_path(&path).display()
        ));
        return Ok(Loaded::Corrupt);
    };
    match value {
        Value::Object(map)
            if map.get("current-version").is_some_and(Value::is_string)
                && map.get("history").is_some_and(Value::is_array) =>
        {
            Ok(Loaded::Valid(map))
        }
        _ => {
            messages.push(format!(
                "existing history {} has an unexpected shape, ignoring it...",
                root.display_path(&path).display()
            ));
            Ok(Loaded::WrongShape)
        }
    }
}

fn load(
    root: &HostRoot,
    state_root: &Path,
    pkg: &str,
    messages: &mut Vec<String>,
) -> Result<Loaded, StateError> {
    load_with(root, state_root, pkg, messages, true)
}

/// [`read_previous`] for a dry run: the same answer and messages, but nothing is created or
/// moved (a corrupt file is reported, not moved to `.backup`).
///
/// # Errors
/// Read failures.
pub fn peek_previous(
    root: &HostRoot,
    state_root: &Path,
    pkg: &str,
) -> Result<HistoryRead, StateError> {
    previous_with(root, state_root, pkg, false)
}

/// The previous version and the messages of reading it (`write`: may create the history
/// directory and move a corrupt file aside).
fn previous_with(
    root: &HostRoot,
    state_root: &Path,
    pkg: &str,
    write: bool,
) -> Result<HistoryRead, StateError> {
    let mut messages = Vec::new();
    let previous = match load_with(root, state_root, pkg, &mut messages, write)? {
        Loaded::Valid(map) => map
            .get("current-version")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_string(),
        _ => "unknown".to_string(),
    };
    Ok(HistoryRead { previous, messages })
}

/// Read the previous version for an upgrade step (contract 6.3, 7.5).
///
/// Creates `<state root>/history` (as Python does on every read). Missing file: `unknown`
/// and `no existing history found for <pkg>, could be first installation...`. Corrupt file
/// (not JSON): moved to `<pkg>.json.backup` (replacing an older one), `unknown`, and
/// `Failed to load existing history, corrupt history file moved to <path>.backup...` with the
/// agent-side path. Valid JSON of the wrong shape (not an object, no string
/// `current-version`, no `history` array) \[fix\]: `unknown`, the file is left in place, and a
/// line saying so.
///
/// # Errors
/// Directory creation, read or rename failures.
pub fn read_previous(
    root: &HostRoot,
    state_root: &Path,
    pkg: &str,
) -> Result<HistoryRead, StateError> {
    previous_with(root, state_root, pkg, true)
}

/// The `time` of a new entry: UTC, `YYYY-MM-DDTHH:MM:SS.ffffff+00:00`, fraction omitted when
/// the microseconds are 0 (Python's `datetime.now(timezone.utc).isoformat()`).
pub fn entry_time(now_utc: DateTime<Utc>) -> String {
    format!("{}+00:00", pyfmt::isoformat(now_utc.naive_utc()))
}

/// Record `version` as installed at `now_utc` (end of a successful `apply-check`,
/// `upgrade-check` or `uninstall-check`; pass `uninstalled` for the latter).
///
/// Sets `current-version` (keeping its position among the keys) and inserts
/// `{"version": <version>, "time": <entry_time>}` at index 0 of `history`; other keys and
/// older entries are kept as loaded. A new file is
/// `{"current-version": <version>, "history": [<entry>]}`. A corrupt file is moved to
/// `.backup` first (with the Python message) and a wrong-shaped one too \[fix\]; both then start
/// a new history. Written atomically in `json.dumps` bytes, no trailing newline, mode 0644 for
/// a new file. Returns the stdout lines of the read (see [`read_previous`]).
///
/// # Errors
/// Directory creation, read, rename or write failures.
pub fn record(
    root: &HostRoot,
    state_root: &Path,
    pkg: &str,
    version: &str,
    now_utc: DateTime<Utc>,
) -> Result<Vec<String>, StateError> {
    let mut messages = Vec::new();
    let loaded = load(root, state_root, pkg, &mut messages)?;
    let path = history_path(state_root, pkg);
    let mut map = match loaded {
        Loaded::Valid(map) => map,
        Loaded::WrongShape => {
            let backup = backup_path(state_root, pkg);
            AgentFiles::new(root).rename(&path, &backup)?;
            messages.push(format!(
                "existing history moved to {}",
                root.display_path(&backup).display()
            ));
            Map::new()
        }
        Loaded::Missing | Loaded::Corrupt => Map::new(),
    };
    let mut entry = Map::new();
    entry.insert("version".into(), Value::String(version.to_string()));
    entry.insert("time".into(), Value::String(entry_time(now_utc)));
    map.insert("current-version".into(), Value::String(version.to_string()));
    match map.get_mut("history") {
        Some(Value::Array(list)) => list.insert(0, Value::Object(entry)),
        _ => {
            map.insert("history".into(), Value::Array(vec![Value::Object(entry)]));
        }
    }
    let text = pyfmt::json_dumps(&Value::Object(map));
    AgentFiles::new(root).write_atomic(&path, text.as_bytes(), None)?;
    Ok(messages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn root() -> (tempfile::TempDir, HostRoot) {
        let d = tempfile::tempdir().unwrap();
        let r = HostRoot::open(d.path()).unwrap();
        (d, r)
    }

    const ST: &str = "/var/lib/skyhook/sky";

    fn at(micros: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2024, 8, 28, 12, 0, 0).unwrap()
            + chrono::Duration::microseconds(i64::from(micros))
    }

    fn file(d: &tempfile::TempDir) -> PathBuf {
        d.path().join("var/lib/skyhook/sky/history/demo.json")
    }

    #[test]
    fn missing_history() {
        let (d, r) = root();
        let read = read_previous(&r, Path::new(ST), "demo").unwrap();
        assert_eq!(read.previous, "unknown");
        assert_eq!(
            read.messages,
            vec!["no existing history found for demo, could be first installation..."]
        );
        // the directory is created even though nothing is written
        assert!(d.path().join("var/lib/skyhook/sky/history").is_dir());
        assert!(!file(&d).exists());
    }

    #[test]
    fn new_file_bytes() {
        let (d, r) = root();
        let msgs = record(&r, Path::new(ST), "demo", "1.0.0", at(123456)).unwrap();
        assert_eq!(
            msgs,
            vec!["no existing history found for demo, could be first installation..."]
        );
        assert_eq!(
            std::fs::read_to_string(file(&d)).unwrap(),
            r#"{"current-version": "1.0.0", "history": [{"version": "1.0.0", "time": "2024-08-28T12:00:00.123456+00:00"}]}"#
        );
        let read = read_previous(&r, Path::new(ST), "demo").unwrap();
        assert_eq!(read.previous, "1.0.0");
        assert!(read.messages.is_empty());
    }

    #[test]
    fn prepend_keeps_old_entry_case_37() {
        let (d, r) = root();
        std::fs::create_dir_all(file(&d).parent().unwrap()).unwrap();
        std::fs::write(
            file(&d),
            r#"{"current-version": "0.0.9", "history": [{"version": "0.0.9", "time": "2024-08-28T14:33:20.123456+00:00"}]}"#,
        )
        .unwrap();
        let msgs = record(&r, Path::new(ST), "demo", "1.0.0", at(0)).unwrap();
        assert!(msgs.is_empty());
        assert_eq!(
            std::fs::read_to_string(file(&d)).unwrap(),
            r#"{"current-version": "1.0.0", "history": [{"version": "1.0.0", "time": "2024-08-28T12:00:00+00:00"}, {"version": "0.0.9", "time": "2024-08-28T14:33:20.123456+00:00"}]}"#
        );
    }

    #[test]
    fn unknown_keys_and_order_preserved() {
        let (d, r) = root();
        std::fs::create_dir_all(file(&d).parent().unwrap()).unwrap();
        std::fs::write(
            file(&d),
            r#"{"note": "é", "history": [{"time": "t0", "version": "0.1.0", "by": 7}], "current-version": "0.1.0", "n": 1.0}"#,
        )
        .unwrap();
        record(&r, Path::new(ST), "demo", "uninstalled", at(1)).unwrap();
        assert_eq!(
            std::fs::read_to_string(file(&d)).unwrap(),
            r#"{"note": "\u00e9", "history": [{"version": "uninstalled", "time": "2024-08-28T12:00:00.000001+00:00"}, {"time": "t0", "version": "0.1.0", "by": 7}], "current-version": "uninstalled", "n": 1.0}"#
        );
    }

    #[test]
    fn corrupt_history_case_38() {
        let (d, r) = root();
        std::fs::create_dir_all(file(&d).parent().unwrap()).unwrap();
        std::fs::write(file(&d), "{").unwrap();
        let msgs = record(&r, Path::new(ST), "demo", "1.0.0", at(0)).unwrap();
        let shown = d.path().join("var/lib/skyhook/sky/history/demo.json");
        assert_eq!(
            msgs,
            vec![format!(
                "Failed to load existing history, corrupt history file moved to {}.backup...",
                shown.display()
            )]
        );
        assert_eq!(
            std::fs::read_to_string(
                d.path()
                    .join("var/lib/skyhook/sky/history/demo.json.backup")
            )
            .unwrap(),
            "{"
        );
        assert_eq!(
            std::fs::read_to_string(file(&d)).unwrap(),
            r#"{"current-version": "1.0.0", "history": [{"version": "1.0.0", "time": "2024-08-28T12:00:00+00:00"}]}"#
        );
    }

    #[test]
    fn corrupt_history_on_read() {
        let (d, r) = root();
        std::fs::create_dir_all(file(&d).parent().unwrap()).unwrap();
        std::fs::write(file(&d), b"\xff\xfe").unwrap();
        std::fs::write(
            d.path()
                .join("var/lib/skyhook/sky/history/demo.json.backup"),
            "old",
        )
        .unwrap();
        let read = read_previous(&r, Path::new(ST), "demo").unwrap();
        assert_eq!(read.previous, "unknown");
        assert_eq!(read.messages.len(), 1);
        assert!(read.messages[0].starts_with("Failed to load existing history"));
        assert!(!file(&d).exists());
        assert_eq!(
            std::fs::read(
                d.path()
                    .join("var/lib/skyhook/sky/history/demo.json.backup")
            )
            .unwrap(),
            b"\xff\xfe"
        );
        // the file is gone now, so the next read says "no history"
        let again = read_previous(&r, Path::new(ST), "demo").unwrap();
        assert_eq!(again.previous, "unknown");
        assert!(again.messages[0].starts_with("no existing history found"));
    }

    #[test]
    fn wrong_shape_kept_on_read_backed_up_on_write() {
        let (d, r) = root();
        std::fs::create_dir_all(file(&d).parent().unwrap()).unwrap();
        std::fs::write(file(&d), "[1, 2]").unwrap();
        let read = read_previous(&r, Path::new(ST), "demo").unwrap();
        assert_eq!(read.previous, "unknown");
        assert_eq!(std::fs::read_to_string(file(&d)).unwrap(), "[1, 2]");
        let msgs = record(&r, Path::new(ST), "demo", "1.0.0", at(0)).unwrap();
        assert_eq!(msgs.len(), 2);
        assert_eq!(
            std::fs::read_to_string(
                d.path()
                    .join("var/lib/skyhook/sky/history/demo.json.backup")
            )
            .unwrap(),
            "[1, 2]"
        );
        assert_eq!(
            std::fs::read_to_string(file(&d)).unwrap(),
            r#"{"current-version": "1.0.0", "history": [{"version": "1.0.0", "time": "2024-08-28T12:00:00+00:00"}]}"#
        );
        // an object without current-version is wrong-shaped too
        std::fs::write(file(&d), r#"{"history": []}"#).unwrap();
        assert_eq!(
            read_previous(&r, Path::new(ST), "demo").unwrap().previous,
            "unknown"
        );
    }

    #[test]
    fn go_written_history_readable() {
        let (d, r) = root();
        std::fs::create_dir_all(file(&d).parent().unwrap()).unwrap();
        std::fs::write(
            file(&d),
            "{\n  \"current-version\": \"2.1.0\",\n  \"history\": [\n    {\n      \"version\": \"2.1.0\",\n      \"time\": \"2025-01-02T03:04:05Z\"\n    }\n  ]\n}\n",
        )
        .unwrap();
        let read = read_previous(&r, Path::new(ST), "demo").unwrap();
        assert_eq!(read.previous, "2.1.0");
        assert!(read.messages.is_empty());
        record(&r, Path::new(ST), "demo", "2.2.0", at(0)).unwrap();
        assert_eq!(
            std::fs::read_to_string(file(&d)).unwrap(),
            r#"{"current-version": "2.2.0", "history": [{"version": "2.2.0", "time": "2024-08-28T12:00:00+00:00"}, {"version": "2.1.0", "time": "2025-01-02T03:04:05Z"}]}"#
        );
    }
}
