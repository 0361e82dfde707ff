//! The state dir (`--state-dir`): `<dir>/<id>.json` = `{"pid": N, "start": T}` for every
//! running sh execution, written once its process exists and removed when it ended, so a
//! cancel still reaches the process group after a server restart. `start` is the process's
//! start time in clock ticks since boot (`/proc/PID/stat` field 22): a pid that was reused
//! by another process is never signalled. `engine` names the engine that started the
//! execution: after a restart only that engine may cancel it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One record: the group leader's pid (== pgid) and its start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcRecord {
    /// The main process's pid, also its process group id.
    pub pid: i32,
    /// Its start time, clock ticks since boot.
    pub start: u64,
}

/// `(pgrp, starttime)` of a live process from `/proc/PID/stat`; `None` when it is gone.
pub fn proc_stat(pid: i32) -> Option<(i32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // comm may contain spaces and parentheses: fields start after the last ')'.
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); pgrp is field 5, starttime field 22.
    let pgrp = f.get(2)?.parse().ok()?;
    let start = f.get(19)?.parse().ok()?;
    Some((pgrp, start))
}

/// The live members of the group `rec` recorded, when it is still that group: the leader
/// alive with the recorded start time, or the leader gone (a pgid is not reused while any
/// member lives) and members started no earlier than it. Empty when the group is gone or
/// its id now belongs to someone else.
pub fn group_members(rec: ProcRecord) -> Vec<i32> {
    if let Some((_, start)) = proc_stat(rec.pid)
        && start != rec.start
    {
        return Vec::new(); // the pid was reused
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&p| matches!(proc_stat(p), Some((g, s)) if g == rec.pid && s >= rec.start))
        .collect()
}

/// Signal every member of the recorded group (see [`group_members`]); returns how many.
pub fn signal_group(rec: ProcRecord, sig: nix::sys::signal::Signal) -> usize {
    let members = group_members(rec);
    for &p in &members {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), sig);
    }
    members.len()
}

/// TERM the recorded group, wait up to `grace` for it to go (checked every 50 ms, as
/// processes that are not our children cannot be waited for), then KILL what is left.
pub async fn terminate_group(rec: ProcRecord, grace: Duration) {
    use nix::sys::signal::Signal;
    if signal_group(rec, Signal::SIGTERM) == 0 {
        return;
    }
    let until = tokio::time::Instant::now() + grace;
    while tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if group_members(rec).is_empty() {
            return;
        }
    }
    signal_group(rec, Signal::SIGKILL);
}

/// The state dir.
#[derive(Debug, Clone)]
pub struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    /// Use (and create) `dir`.
    ///
    /// # Errors
    /// It cannot be created.
    pub fn open(dir: &Path) -> std::io::Result<StateDir> {
        std::fs::create_dir_all(dir)?;
        Ok(StateDir {
            dir: dir.to_path_buf(),
        })
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Record `id`, started by `engine` (atomically: temp file, rename).
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn record(&self, id: &str, rec: ProcRecord, engine: &str) -> std::io::Result<()> {
        let tmp = self.dir.join(format!(".{id}.tmp"));
        let doc = serde_json::json!({"pid": rec.pid, "start": rec.start, "engine": engine});
        std::fs::write(&tmp, doc.to_string())?;
        std::fs::rename(&tmp, self.path(id))
    }

    /// The engine that started `id`, when recorded.
    pub fn owner(&self, id: &str) -> Option<String> {
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(self.path(id)).ok()?).ok()?;
        v.get("engine")?.as_str().map(String::from)
    }

    /// Forget `id`.
    pub fn remove(&self, id: &str) {
        let _ = std::fs::remove_file(self.path(id));
    }

    /// The record of `id`, if any.
    pub fn get(&self, id: &str) -> Option<ProcRecord> {
        serde_json::from_slice(&std::fs::read(self.path(id)).ok()?).ok()
    }

    /// Every record left by an earlier server, by id.
    pub fn all(&self) -> Vec<(String, ProcRecord)> {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        dir.filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let id = name.strip_suffix(".json")?.to_string();
            let rec = self.get(&id)?;
            Some((id, rec))
        })
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_stat_and_records() {
        let me = std::process::id() as i32;
        let (pgrp, start) = proc_stat(me).unwrap();
        assert!(pgrp > 0 && start > 0);
        // a wrong start time is a reused pid: nothing to signal
        let rec = ProcRecord {
            pid: pgrp,
            start: start + 1_000_000_000,
        };
        if proc_stat(pgrp).is_some() {
            assert!(group_members(rec).is_empty());
        }
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::open(&d.path().join("st")).unwrap();
        let r = ProcRecord { pid: 42, start: 7 };
        s.record("a-1", r, "ci").unwrap();
        assert_eq!(s.get("a-1"), Some(r));
        assert_eq!(s.owner("a-1").as_deref(), Some("ci"));
        assert_eq!(s.all(), vec![("a-1".to_string(), r)]);
        s.remove("a-1");
        assert!(s.all().is_empty());
    }
}
