//! The state dir (`--state-dir`): `<dir>/<id>.json` = `{"pid": N, "start": T, "cgroup": P}`
//! for every running sh execution, written once its process exists and removed when it
//! ended, so a server restarted on the same dir knows the id (a start with it is `409`) and
//! a cancel still reaches the execution. `start` is the process's start time in clock
//! ticks since boot (`/proc/PID/stat` field 22): a pid that was reused by another process
//! is never signalled. `cgroup` (absent without one) is the execution's cgroup directory:
//! then every member is signalled, `setsid` grandchildren included; without it, the
//! process group is. `engine` names the engine that started the execution: after a restart
//! the recovered execution is that engine's alone.
//!
//! A record is read only as what a server writes: a regular file (`fstat`ed on an `O_PATH |
//! O_NOFOLLOW` handle, only then reopened for reading) of at most [`MAX_RECORD_BYTES`]. A
//! FIFO, socket, device, symlink or larger file in the dir is never opened for reading (a
//! FIFO cannot block the start, a device node's open cannot act, a 3 GiB sparse file is not
//! read whole), nor is a record whose cgroup is not a server's (`check_cgroup`): each is
//! skipped and named in a warning ([`StateDir::all`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One record: the group leader's pid (== pgid), its start time, the execution's cgroup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcRecord {
    /// The main process's pid, also its process group id.
    pub pid: i32,
    /// Its start time, clock ticks since boot.
    pub start: u64,
    /// The execution's cgroup directory, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<PathBuf>,
    /// The engine that started it (empty in a record of a server before engines owned
    /// executions: no engine owns such a one).
    #[serde(default)]
    pub engine: String,
}

/// The live processes of the recorded execution: its cgroup's members when it has a cgroup
/// (that still exists), else its group's (see [`group_members`]).
pub fn members(rec: &ProcRecord) -> Vec<i32> {
    match &rec.cgroup {
        Some(dir) if dir.is_dir() => crate::process::cgroup::procs(dir),
        _ => group_members(rec),
    }
}

/// End the recorded execution: `SIGTERM` to every process of it, up to `grace` for them to
/// exit (their pidfds polled), then `SIGKILL` until none is left; its cgroup is removed.
pub fn terminate(rec: &ProcRecord, grace: Duration) {
    use crate::process::{cgroup, sweep};
    use nix::sys::signal::Signal;
    let Some(dir) = rec.cgroup.as_deref().filter(|d| d.is_dir()) else {
        let pids = signal_group(rec, Signal::SIGTERM);
        if !pids.is_empty() && !cgroup::wait_exited(&pids, std::time::Instant::now() + grace) {
            signal_group(rec, Signal::SIGKILL);
        }
        return;
    };
    let pids = cgroup::procs(dir);
    for &p in &pids {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), Signal::SIGTERM);
    }
    cgroup::wait_exited(&pids, std::time::Instant::now() + grace);
    sweep::kill_all(dir, Duration::from_secs(10));
    let _ = cgroup::remove(dir);
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
pub fn group_members(rec: &ProcRecord) -> Vec<i32> {
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

/// Signal every member of the recorded group (see [`group_members`]); returns their pids.
pub fn signal_group(rec: &ProcRecord, sig: nix::sys::signal::Signal) -> Vec<i32> {
    let members = group_members(rec);
    for &p in &members {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), sig);
    }
    members
}

/// A record's cgroup is one a server made: `<cgroup>/skyhook-serve/<name>` (absolute, no
/// `.` or `..`) and, while it exists, a directory (not a symlink) on a cgroup filesystem,
/// whose `cgroup.procs` the kernel writes. Anything else would have the server read a
/// file of anyone's making as the list of pids to signal (or block on a FIFO there).
///
/// # Errors
/// `its cgroup <dir> is not a server's (...)`, `... is not on a cgroup filesystem`.
fn check_cgroup(dir: &Path) -> Result<(), String> {
    use std::path::Component;
    let named = dir.is_absolute()
        && dir
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
        && dir.parent().and_then(Path::file_name) == Some("skyhook-serve".as_ref());
    if !named {
        return Err(format!(
            "its cgroup {} is not a server's (<cgroup>/skyhook-serve/<name>)",
            dir.display()
        ));
    }
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Ok(m) if m.is_dir() && crate::process::cgroup::is_cgroup_dir(dir) => Ok(()),
        _ => Err(format!(
            "its cgroup {} is not on a cgroup filesystem",
            dir.display()
        )),
    }
}

/// Largest state-dir record read, in bytes (64 KiB; a record is a pid, a start time, a
/// cgroup path of at most `PATH_MAX` and an engine name: well under 8 KiB).
pub const MAX_RECORD_BYTES: u64 = 64 << 10;

/// The state dir.
#[derive(Debug, Clone)]
pub struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    /// Use (and create) `dir`, which must be the server's own: owned by its effective uid and
    /// not writable by group or others, since its records name the processes a cancel
    /// signals (a dir another user can write would let them name any).
    ///
    /// # Errors
    /// It cannot be created or `stat`ed; `<dir> is writable by others (mode 0777): ...`;
    /// `<dir> is owned by uid N, not this server's uid M: ...`.
    pub fn open(dir: &Path) -> std::io::Result<StateDir> {
        use std::os::unix::fs::MetadataExt;
        std::fs::create_dir_all(dir)?;
        let m = std::fs::metadata(dir)?;
        let refuse = |why: String| {
            std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "{} {why}: its records name the processes a cancel signals",
                    dir.display()
                ),
            )
        };
        if m.mode() & 0o022 != 0 {
            return Err(refuse(format!(
                "is writable by others (mode {:04o})",
                m.mode() & 0o7777
            )));
        }
        let me = nix::unistd::geteuid().as_raw();
        if m.uid() != me {
            return Err(refuse(format!(
                "is owned by uid {}, not this server's uid {me}",
                m.uid()
            )));
        }
        Ok(StateDir {
            dir: dir.to_path_buf(),
        })
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Record `id` (atomically: temp file, rename). The temp file is created new
    /// (`O_CREAT | O_EXCL`, after removing whatever had its name), so a FIFO or symlink
    /// left at its name can neither block the write nor redirect it.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn record(&self, id: &str, rec: &ProcRecord) -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let tmp = self.dir.join(format!(".{id}.tmp"));
        let _ = std::fs::remove_file(&tmp);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?
            .write_all(&serde_json::to_vec(rec).unwrap_or_default())?;
        std::fs::rename(&tmp, self.path(id))
    }

    /// Forget `id`.
    pub fn remove(&self, id: &str) {
        let _ = std::fs::remove_file(self.path(id));
    }

    /// The record of `id`, if any (see [`StateDir::read`]; what cannot be read is none).
    pub fn get(&self, id: &str) -> Option<ProcRecord> {
        self.read(id).ok().flatten()
    }

    /// The record of `id`: `None` when there is no such file; read only when it is a
    /// regular file (`fstat` of an `O_PATH | O_NOFOLLOW` handle, then reopened for reading)
    /// of at most [`MAX_RECORD_BYTES`], whose cgroup, if any, passes `check_cgroup`.
    ///
    /// # Errors
    /// What is wrong with the file, naming it: `state dir record <path>: not a regular file
    /// (a fifo)`, `a symlink`, `N bytes, more than the limit of M bytes`, not a record (JSON), its cgroup not a server's,
    /// a read failure.
    pub fn read(&self, id: &str) -> Result<Option<ProcRecord>, String> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.path(id);
        let fail = |what: String| format!("state dir record {}: {what}", path.display());
        // O_PATH: what the name is (a device, a FIFO) is only fstat'ed, never opened.
        let f = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(fail(e.to_string())),
        };
        let f = crate::host::root::reopen_regular(f).map_err(|e| match e.kind() {
            std::io::ErrorKind::IsADirectory => fail("not a regular file (a directory)".into()),
            _ if e.to_string() == "not a regular file (a symlink)" => fail("a symlink".into()),
            _ => fail(e.to_string()),
        })?;
        // fstat on the open file, then at most the cap read (read_bounded checks both).
        let bytes = crate::host::root::read_bounded(f, MAX_RECORD_BYTES)
            .map_err(|e| fail(e.to_string()))?;
        let rec: ProcRecord =
            serde_json::from_slice(&bytes).map_err(|e| fail(format!("not a record: {e}")))?;
        if let Some(dir) = &rec.cgroup {
            check_cgroup(dir).map_err(fail)?;
        }
        Ok(Some(rec))
    }

    /// Every record left by an earlier server, by id, and a warning naming each
    /// `<id>.json` that could not be read as a record ([`StateDir::read`]; it is skipped).
    pub fn all(&self) -> (Vec<(String, ProcRecord)>, Vec<String>) {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return (Vec::new(), Vec::new());
        };
        let (mut records, mut warnings) = (Vec::new(), Vec::new());
        for e in dir.flatten() {
            let Some(id) = e
                .file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".json"))
                .map(String::from)
            else {
                continue;
            };
            match self.read(&id) {
                Ok(Some(rec)) => records.push((id, rec)),
                Ok(None) => {}
                Err(w) => warnings.push(format!("{w}: skipped")),
            }
        }
        (records, warnings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state dir another user could write (group- or world-writable, or not the server's
    /// own) is refused naming it and why: its records, which name the processes a cancel
    /// signals, could be anyone's. The server's own 0755 or 0700 dir is used.
    #[test]
    fn a_state_dir_others_can_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let st = d.path().join("st");
        std::fs::create_dir(&st).unwrap();
        for mode in [0o777, 0o775, 0o1777] {
            std::fs::set_permissions(&st, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(
                StateDir::open(&st).map(|_| ()).map_err(|e| e.to_string()),
                Err(format!(
                    "{} is writable by others (mode {:04o}): its records name the processes a cancel signals",
                    st.display(),
                    mode & 0o7777
                ))
            );
        }
        std::os::unix::fs::chown(&st, Some(65534), None).unwrap();
        std::fs::set_permissions(&st, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            StateDir::open(&st).map(|_| ()).map_err(|e| e.to_string()),
            Err(format!(
                "{} is owned by uid 65534, not this server's uid {}: its records name the processes a cancel signals",
                st.display(),
                nix::unistd::geteuid()
            ))
        );
        std::os::unix::fs::chown(&st, Some(nix::unistd::geteuid().as_raw()), None).unwrap();
        for mode in [0o755, 0o700] {
            std::fs::set_permissions(&st, std::fs::Permissions::from_mode(mode)).unwrap();
            assert!(StateDir::open(&st).is_ok());
        }
    }

    #[test]
    fn own_stat_and_records() {
        let me = std::process::id() as i32;
        let (pgrp, start) = proc_stat(me).unwrap();
        assert!(pgrp > 0 && start > 0);
        // a wrong start time is a reused pid: nothing to signal
        let rec = ProcRecord {
            pid: pgrp,
            start: start + 1_000_000_000,
            cgroup: None,
            engine: String::new(),
        };
        if proc_stat(pgrp).is_some() {
            assert!(group_members(&rec).is_empty());
        }
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::open(&d.path().join("st")).unwrap();
        let r = ProcRecord {
            pid: 42,
            start: 7,
            cgroup: None,
            engine: "ci".into(),
        };
        // A FIFO at the temp file's name neither blocks the record nor receives it (on a
        // thread, bounded: a record that blocks fails the test).
        nix::unistd::mkfifo(&d.path().join("st/.a-1.tmp"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let (s2, r2) = (s.clone(), r.clone());
        std::thread::spawn(move || tx.send(s2.record("a-1", &r2).map_err(|e| e.to_string())));
        rx.recv_timeout(Duration::from_secs(60))
            .expect("the record was written (a FIFO at its temp name must not block it)")
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(d.path().join("st/a-1.json")).unwrap(),
            r#"{"pid":42,"start":7,"engine":"ci"}"#
        );
        assert_eq!(s.get("a-1"), Some(r.clone()));
        assert_eq!(s.all(), (vec![("a-1".to_string(), r)], Vec::new()));
        let c = ProcRecord {
            pid: 43,
            start: 8,
            cgroup: Some(PathBuf::from("/sys/fs/cgroup/skyhook-serve/b.1.0")),
            engine: "ci".into(),
        };
        s.record("b", &c).unwrap();
        assert_eq!(s.get("b"), Some(c));
        s.remove("b");
        s.remove("a-1");
        assert_eq!(s.all(), (Vec::new(), Vec::new()));
    }
}
