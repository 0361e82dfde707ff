//! Tests of the undo journal: its records, log format, replay and recovery.
use std::collections::HashSet;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use crate::host::effects::effect::Effect;
use crate::host::root::HostRoot;

use super::*;

/// A recovery that starts while a step is between making its journal directory and
/// locking its log waits for the step, then leaves its journal alone. It used to take
/// the fresh directory for an abandoned one and remove it under the step, whose next
/// write then failed (`No such file`), seen with two agents at once.
#[test]
fn a_recovery_waits_for_a_journal_being_made_and_leaves_it() {
    let tmp = tempfile::tempdir().unwrap();
    let root = HostRoot::open(tmp.path()).unwrap();
    let (_, guard) = hold_dir_created(&root).unwrap();
    let jdir = Path::new(DIR).join("pkg-apply.1.0");
    root.create_dir_all(&jdir, 0o700).unwrap();
    let ino = root
        .symlink_metadata(Path::new(DIR))
        .unwrap()
        .unwrap()
        .ino();

    let recovering = {
        let root = root.try_clone().unwrap();
        std::thread::spawn(move || recover(&root).unwrap())
    };
    // Until the recovery waits on the directory's lock (a `->` waiter in /proc/locks),
    // at most 10 s; the assertions below fail if it never does.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let waiter = format!(":{ino} ");
    let mut waited = false;
    while !waited && std::time::Instant::now() < deadline && !recovering.is_finished() {
        let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
        waited = locks
            .lines()
            .any(|l| l.contains("-> FLOCK") && l.contains(&waiter));
        std::thread::yield_now();
    }
    assert!(
        root.symlink_metadata(&jdir).unwrap().is_some(),
        "the recovery removed the journal being made"
    );
    let log = root.create_new(&jdir.join(LOG), 0o600).unwrap();
    lock(&log, LockOp::Exclusive).unwrap();
    drop(guard);

    let lines = recovering.join().unwrap();
    assert!(
        waited,
        "the recovery did not wait for the step making its journal"
    );
    assert_eq!(lines, Vec::<String>::new());
    assert!(root.symlink_metadata(&jdir.join(LOG)).unwrap().is_some());
}

/// A recovery whose lock on the journals' directory was granted only after another
/// agent's cleanup removed that directory (empty), while a step made a new one and its
/// journal in it, waits for the new directory's lock and leaves the journal being made.
/// It used to scan the new directory holding the old one's lock, took the journal without
/// a log yet for one never linked and removed it under the step, whose next write then
/// failed (`No such file`).
#[test]
fn a_recovery_that_locked_a_removed_journal_directory_leaves_a_journal_being_made() {
    let tmp = tempfile::tempdir().unwrap();
    let root = HostRoot::open(tmp.path()).unwrap();
    root.create_dir_all(Path::new(DIR), 0o700).unwrap();
    let jdir = Path::new(DIR).join("pkg-made.1.0");
    let (tx, rx) = std::sync::mpsc::channel();
    let (other, made) = (root.try_clone().unwrap(), jdir.clone());
    fail_point::at("hold_dir_opened", move || {
        other.remove_dir(Path::new(DIR)).unwrap();
        let (_, guard) = hold_dir_created(&other).unwrap();
        other.create_dir_all(&made, 0o700).unwrap();
        // The step links its locked log 300 ms later, then lets go of the directory.
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            // (Its directory still there: `create_new` would make it again.)
            let linked = (other.symlink_metadata(&made).unwrap().is_some()).then(|| {
                let log = other.create_new(&made.join(LOG), 0o600).unwrap();
                lock(&log, LockOp::Exclusive).unwrap();
                log
            });
            drop(guard);
            let _ = tx.send(linked);
        });
    });
    assert_eq!(recover(&root).unwrap(), Vec::<String>::new());
    let log = rx.recv().unwrap();
    assert!(log.is_some(), "the recovery removed the journal being made");
    assert!(root.symlink_metadata(&jdir.join(LOG)).unwrap().is_some());
}

/// The other process of [`recoveries_in_another_process_never_undo_an_ended_step`]: runs
/// `recover` on the root named by `SKYHOOK_RECOVER_LOOP` until the file `stop` appears in
/// it (at most 60 s), and fails on a recovery error or a journal it undid (none of that
/// root's steps is abandoned).
#[test]
#[ignore = "run by recoveries_in_another_process_never_undo_an_ended_step"]
fn recover_loop_in_a_child_process() {
    let Some(dir) = std::env::var_os("SKYHOOK_RECOVER_LOOP") else {
        return;
    };
    let root = HostRoot::open(Path::new(&dir)).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut rounds = 0u32;
    while root.symlink_metadata(Path::new("/stop")).unwrap().is_none()
        && std::time::Instant::now() < deadline
    {
        let lines = recover(&root).unwrap();
        assert_eq!(lines, Vec::<String>::new(), "round {rounds}");
        rounds += 1;
        // Not a tight loop: a step's open retries when a cleanup removes the journals'
        // directory between its creation and its lock, 16 times at most.
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    eprintln!("recoveries: {rounds}");
}

/// Two processes (`flock`s belong to open file descriptions: threads of one process can
/// hide what another agent sees): this one commits and undoes steps writing `/etc/f`, the
/// other recovers in a loop. No step that ended is ever undone (again), and no recovery
/// fails.
#[test]
fn recoveries_in_another_process_never_undo_an_ended_step() {
    let tmp = tempfile::tempdir().unwrap();
    let root = HostRoot::open(tmp.path()).unwrap();
    root.create_dir_all(Path::new("/etc"), 0o755).unwrap();
    let f = Path::new("/etc/f");
    root.write_atomic(f, b"0\n", Some(0o644)).unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "host::seam::effects::journal::journal_tests::recover_loop_in_a_child_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SKYHOOK_RECOVER_LOOP", tmp.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The child stops when this test ends, passed or not.
    struct Stop<'a>(&'a HostRoot);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            let _ = self.0.write_atomic(Path::new("/stop"), b"", Some(0o644));
        }
    }
    let stop = Stop(&root);
    let mut current = "0\n".to_string();
    for round in 1..=200 {
        let content = format!("{round}\n");
        let mut j = StepJournal::new(&format!("pkg-{round}"));
        let effect = Effect::WriteFile {
            path: f.to_path_buf(),
            content: content.clone().into(),
            mode: None,
            uid: None,
            gid: None,
        };
        assert_eq!(j.before(&root, &effect, false).unwrap(), Before::Perform);
        root.write_atomic(f, content.as_bytes(), Some(0o644))
            .unwrap();
        if round % 3 == 0 {
            assert_eq!(j.undo(&root).unwrap(), Vec::<String>::new());
        } else {
            j.commit(&root).unwrap();
            current = content;
        }
        assert_eq!(
            String::from_utf8(root.read(f).unwrap()).unwrap(),
            current,
            "round {round}"
        );
    }
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(String::from_utf8(root.read(f).unwrap()).unwrap(), current);
    drop(stop);
    let status = child.wait().unwrap();
    assert!(status.success(), "the recovering process failed: {status}");
}

/// A root with `/etc/f` holding `new\n` over `old\n` (both mode 0644), written by a step
/// whose journal (`pkg-commit`) recorded the write and is not ended yet.
fn a_written_step() -> (tempfile::TempDir, HostRoot, StepJournal) {
    let tmp = tempfile::tempdir().unwrap();
    let root = HostRoot::open(tmp.path()).unwrap();
    root.create_dir_all(Path::new("/etc"), 0o755).unwrap();
    let f = Path::new("/etc/f");
    root.write_atomic(f, b"old\n", Some(0o644)).unwrap();
    let mut j = StepJournal::new("pkg-commit");
    let effect = Effect::WriteFile {
        path: f.to_path_buf(),
        content: "new\n".into(),
        mode: None,
        uid: None,
        gid: None,
    };
    assert_eq!(j.before(&root, &effect, false).unwrap(), Before::Perform);
    root.write_atomic(f, b"new\n", Some(0o644)).unwrap();
    (tmp, root, j)
}

/// A step that succeeded keeps its log locked until its journal is removed: a recovery
/// (another agent starting) that runs while the journal is being removed finds the log
/// locked and leaves it. The log used to be unlocked first, and a recovery in that window
/// took it for an abandoned step's and undid the step that had just succeeded (another
/// package's line lost, seen with two packages at once).
#[test]
fn a_recovery_while_a_step_commits_leaves_the_steps_write() {
    let (_tmp, root, mut j) = a_written_step();
    let found = std::rc::Rc::new(std::cell::RefCell::new(None));
    let (other, slot) = (root.try_clone().unwrap(), found.clone());
    fail_point::at("remove_journal", move || {
        let lines = std::thread::spawn(move || recover(&other).unwrap())
            .join()
            .unwrap();
        *slot.borrow_mut() = Some(lines);
    });
    j.commit(&root).unwrap();
    assert_eq!(*found.borrow(), Some(Vec::<String>::new()));
    assert_eq!(root.read(Path::new("/etc/f")).unwrap(), b"new\n");
    assert!(root.symlink_metadata(Path::new(DIR)).unwrap().is_none());
}

/// A recovery replaying an abandoned journal's file waits for that file's path lock;
/// a step holding that lock (a read-compare-write in progress) that makes its journal
/// then meanwhile is not kept waiting for the recovery. The recovery used to hold the
/// journals' directory exclusively while it replayed, and the step's journal waits for
/// that directory (shared): each waited for the other, two agents hung for good.
#[test]
fn a_recovery_waiting_for_a_files_lock_lets_its_holder_make_its_journal() {
    let (_tmp, root, j) = a_written_step();
    // Abandoned: the recovery puts `old` back, under /etc/f's path lock.
    drop(j);
    let f = Path::new("/etc/f");
    let held = crate::host::root::pathlock::lock(&root, &lock_key(&root, f)).unwrap();
    let recovering = {
        let root = root.try_clone().unwrap();
        std::thread::spawn(move || recover(&root).unwrap())
    };
    // Until the recovery waits (a `->` waiter in /proc/locks), at most 10 s.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < deadline
        && !std::fs::read_to_string("/proc/locks")
            .unwrap_or_default()
            .contains("-> FLOCK")
    {
        std::thread::yield_now();
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let step_root = root.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut j = StepJournal::new("pkg-live");
        let effect = Effect::WriteFile {
            path: "/etc/f".into(),
            content: "live\n".into(),
            mode: None,
            uid: None,
            gid: None,
        };
        let before = j
            .before(&step_root, &effect, false)
            .map_err(|e| e.to_string());
        let _ = tx.send((before, j));
    });
    let made = rx.recv_timeout(std::time::Duration::from_secs(10));
    drop(held);
    let (before, mut j) = made.expect("the step's journal waited for the recovery");
    assert_eq!(before, Ok(Before::Perform));
    let lines = recovering.join().unwrap();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("undid 1 file change"), "{lines:?}");
    assert_eq!(root.read(f).unwrap(), b"old\n");
    j.commit(&root).unwrap();
}

/// A step killed while it removed its journal after succeeding (after the log's unlink,
/// or after the journal's directory went but before the journals' directory did) leaves
/// a root the next recovery converges: nothing undone, no error, nothing left.
#[test]
fn a_step_killed_while_removing_its_journal_leaves_nothing_to_undo() {
    for cut in ["log unlinked", "journal removed"] {
        let (_tmp, root, j) = a_written_step();
        root.remove_file(&j.dir().join(LOG)).unwrap();
        if cut == "journal removed" {
            root.remove_all(&j.dir()).unwrap();
        }
        // The process is gone: its descriptors (the log's lock) with it.
        drop(j);
        assert_eq!(recover(&root).unwrap(), Vec::<String>::new(), "{cut}");
        assert_eq!(root.read(Path::new("/etc/f")).unwrap(), b"new\n", "{cut}");
        assert!(
            root.symlink_metadata(Path::new(DIR)).unwrap().is_none(),
            "{cut}"
        );
        assert_eq!(recover(&root).unwrap(), Vec::<String>::new(), "{cut}");
    }
}

/// A recovery that opened a step's log while the step was live, and tries its lock only
/// after the step unlinked the log and let go of it, leaves the step's write: the lock
/// it gets is on a log no longer linked. It used to replay that log (and then fail to
/// open it again by name). (A committing step now waits for the recovery's hold of the
/// journal directory before it lets go, so the step here ends by hand.)
#[test]
fn a_recovery_that_opened_a_log_before_its_step_ended_leaves_it() {
    let (_tmp, root, j) = a_written_step();
    let other = root.try_clone().unwrap();
    fail_point::at("recover_opened", move || {
        other.remove_file(&j.dir().join(LOG)).unwrap();
        drop(j);
    });
    assert_eq!(recover(&root).unwrap(), Vec::<String>::new());
    assert_eq!(root.read(Path::new("/etc/f")).unwrap(), b"new\n");
}

/// Fault 4: a journal's name does not depend on the process id (two agents that are
/// pid 1 in their pods used to pick the same name): it carries the boot id and a
/// random part, so names never repeat.
#[test]
fn journal_names_are_unique_across_pid_namespaces() {
    let pid = std::process::id();
    let names: HashSet<String> = (0..1000).map(|_| dir_name("pkg-step")).collect();
    assert_eq!(names.len(), 1000);
    for n in names.iter().take(5) {
        assert!(!n.contains(&format!(".{pid}.")), "{n}");
        assert!(n.starts_with("pkg-step."), "{n}");
    }
}

/// Principle 2: a record is whole or not used. Three records; a byte of the second's
/// content flipped, then the log cut inside the third: the reader returns the first
/// only and says where it stopped, never reading the second's declared content as
/// anything else.
#[test]
fn the_reader_stops_at_the_first_record_that_is_not_whole() {
    let mut log = Vec::new();
    let recs = [
        Record::Absent { path: "/a".into() },
        Record::Sysctl {
            path: "/proc/sys/x".into(),
            value: "1".into(),
        },
        Record::Absent { path: "/c".into() },
    ];
    let mut ends = Vec::new();
    for r in &recs {
        write_record(&mut log, r, None).unwrap();
        ends.push(log.len() as u64);
    }
    let (ranges, damage) = parse_log(&log);
    assert_eq!(ranges, vec![0..ends[0], ends[0]..ends[1], ends[1]..ends[2]]);
    assert_eq!(damage, None);
    // A flipped byte in the second record's header.
    let mut bad = log.clone();
    bad[ends[0] as usize + HEAD + 3] ^= 1;
    let (ranges, damage) = parse_log(&bad);
    assert_eq!(ranges, vec![0..ends[0]]);
    assert_eq!(
        damage,
        Some(Damage {
            offset: ends[0],
            why: "checksum mismatch"
        })
    );
    // Cut inside the third.
    let (ranges, damage) = parse_log(&log[..log.len() - 5]);
    assert_eq!(ranges.len(), 2);
    assert_eq!(
        damage,
        Some(Damage {
            offset: ends[1],
            why: "cut short"
        })
    );
    // A length that points past the end is cut short, not read across.
    let mut long = log.clone();
    long[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert_eq!(parse_log(&long).0, Vec::<std::ops::Range<u64>>::new());
}

/// Principle 1 for line edits: the inverse of a step's edit takes out its lines and
/// puts back what it removed, on the file as another writer left it.
#[test]
fn a_line_edit_is_undone_alone_on_the_file_as_it_is_now() {
    let edit = line_edit(b"a=1\nold=1\nz=9\n", b"a=1\nnew=2\nz=9\nmine=1\n").unwrap();
    let mut now: Vec<String> = ["a=1", "new=2", "z=9", "mine=1", "theirs=1"]
        .map(String::from)
        .to_vec();
    invert(&mut now, &edit);
    assert_eq!(now, ["a=1", "old=1", "z=9", "theirs=1"]);
}

/// Attack on principle 1: the step appended a line the file held already (`x=1`);
/// another writer then removed the step's copy. The inverse must not take out the copy
/// that was there before the step: it used to remove the last occurrence whatever the
/// count, deleting a line the step never added.
#[test]
fn an_inverse_never_takes_out_a_line_that_was_there_before_the_step() {
    let edit = line_edit(b"x=1\nb=0\n", b"x=1\nb=0\nx=1\n").unwrap();
    let mut now: Vec<String> = ["x=1", "b=0", "theirs=1"].map(String::from).to_vec();
    invert(&mut now, &edit);
    assert_eq!(now, ["x=1", "b=0", "theirs=1"]);
    // Another writer added the same line too: one copy (theirs) stays besides the
    // one that was there before.
    let mut now: Vec<String> = ["x=1", "b=0", "x=1", "x=1"].map(String::from).to_vec();
    invert(&mut now, &edit);
    assert_eq!(now, ["x=1", "b=0", "x=1"]);
}

/// Attack on principle 2: a journal whose records are whole (valid length and
/// checksums) but whose `moved` record names a stash outside its directory
/// (`../../../../etc/shadow`). The recovery must not rename that path into place: a
/// stash is one plain name in the journal's directory.
#[test]
fn a_moved_record_whose_stash_leaves_the_journal_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let root = HostRoot::open(tmp.path()).unwrap();
    root.create_dir_all(Path::new("/etc"), 0o755).unwrap();
    root.write_atomic(Path::new("/etc/shadow"), b"root:*:1::::::\n", Some(0o600))
        .unwrap();
    let jdir = Path::new(DIR).join("pkg-step.1.0");
    root.create_dir_all(&jdir, 0o700).unwrap();
    let mut log = Vec::new();
    let recs = [
        Record::Start {
            boot_id: "x".into(),
            boot_ns: 1,
            wall_ns: 1,
            pid: 1,
        },
        Record::Moved {
            path: "/etc/stolen".into(),
            stash: "../../../../etc/shadow".into(),
        },
    ];
    for r in &recs {
        write_record(&mut log, r, None).unwrap();
    }
    root.write_atomic(&jdir.join(LOG), &log, Some(0o600))
        .unwrap();
    let lines = recover(&root).unwrap();
    assert!(
        root.exists(Path::new("/etc/shadow")).unwrap(),
        "the recovery moved /etc/shadow: {lines:?}"
    );
    assert!(!root.exists(Path::new("/etc/stolen")).unwrap());
    assert!(
        lines
            .iter()
            .any(|l| l.contains("/etc/stolen") && l.contains("stash")),
        "{lines:?}"
    );
}

/// Attack on principle 1 with `useradd` on the node: it takes only the shadow-utils
/// lock (`fcntl` on `/etc/.pwd.lock`), not the agent's path locks. A step's undo of its
/// `/etc/passwd` edit must wait for that lock as the edit did, else `useradd`'s write
/// can land between the undo's digest and its rename and be lost. A forked child holds
/// the lock, the undo starts, the child appends its user and releases: the child's user
/// survives, the step's is gone.
#[test]
fn the_undo_of_the_user_database_waits_for_the_shadow_utils_lock() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let root = HostRoot::open(tmp.path()).unwrap();
    root.create_dir_all(Path::new("/etc"), 0o755).unwrap();
    let passwd = Path::new(crate::host::root::pwdlock::PASSWD);
    root.write_atomic(passwd, b"root:x:0:0::/root:/bin/sh\n", Some(0o644))
        .unwrap();
    root.write_atomic(Path::new("/etc/.pwd.lock"), b"", Some(0o600))
        .unwrap();
    let content: bytes::Bytes = "root:x:0:0::/root:/bin/sh\nstep:x:999:999::/:/bin/false\n".into();
    let mut j = StepJournal::new("pkg-user");
    let effect = Effect::WriteFile {
        path: passwd.to_path_buf(),
        content: content.clone(),
        mode: None,
        uid: None,
        gid: None,
    };
    assert_eq!(j.before(&root, &effect, true).unwrap(), Before::Perform);
    root.write_atomic(passwd, &content, Some(0o644)).unwrap();

    let lock_path = tmp.path().join("etc/.pwd.lock");
    let ino = std::fs::metadata(&lock_path).unwrap().ino();
    let cpath = std::ffi::CString::new(lock_path.as_os_str().as_bytes()).unwrap();
    let cpasswd =
        std::ffi::CString::new(tmp.path().join("etc/passwd").as_os_str().as_bytes()).unwrap();
    let line = b"useradd:x:1001:1001::/:/bin/sh\n";
    let (locked_r, locked_w) = nix::unistd::pipe().unwrap();
    let (go_r, go_w) = nix::unistd::pipe().unwrap();
    // SAFETY: the child calls only async-signal-safe functions, then `_exit`.
    let child = match unsafe { nix::unistd::fork() }.unwrap() {
        nix::unistd::ForkResult::Child => unsafe {
            let fd = libc::open(cpath.as_ptr(), libc::O_RDWR);
            let mut fl: libc::flock = std::mem::zeroed();
            fl.l_type = libc::F_WRLCK as libc::c_short;
            fl.l_whence = libc::SEEK_SET as libc::c_short;
            let ok = fd >= 0 && libc::fcntl(fd, libc::F_SETLKW, &fl) == 0;
            libc::write(locked_w.as_raw_fd(), b"1".as_ptr().cast(), 1);
            let mut b = 0u8;
            libc::read(go_r.as_raw_fd(), (&raw mut b).cast(), 1);
            let p = libc::open(cpasswd.as_ptr(), libc::O_WRONLY | libc::O_APPEND);
            let w = libc::write(p, line.as_ptr().cast(), line.len());
            libc::_exit(if ok && w == line.len() as isize { 0 } else { 1 })
        },
        nix::unistd::ForkResult::Parent { child } => child,
    };
    let mut b = [0u8; 1];
    assert_eq!(nix::unistd::read(&locked_r, &mut b).unwrap(), 1);
    let undoing = {
        let root = root.try_clone().unwrap();
        std::thread::spawn(move || j.undo(&root).unwrap())
    };
    // Until the undo waits on the lock (a POSIX `->` waiter in /proc/locks), at most
    // 10 s, or until it ended without waiting.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let waiter = format!(":{ino} ");
    let mut waited = false;
    while !waited && std::time::Instant::now() < deadline && !undoing.is_finished() {
        let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
        waited = locks
            .lines()
            .any(|l| l.contains("-> POSIX") && l.contains(&waiter));
        std::thread::yield_now();
    }
    nix::unistd::write(&go_w, b"1").unwrap();
    let status = nix::sys::wait::waitpid(child, None).unwrap();
    let lines = undoing.join().unwrap();
    assert_eq!(status, nix::sys::wait::WaitStatus::Exited(child, 0));
    assert!(
        waited,
        "the undo of /etc/passwd did not wait for /etc/.pwd.lock held by another process"
    );
    assert_eq!(lines, Vec::<String>::new());
    assert_eq!(
        root.read(passwd).unwrap(),
        b"root:x:0:0::/root:/bin/sh\nuseradd:x:1001:1001::/:/bin/sh\n"
    );
}

/// Attack on principle 1: the step writes a file whole; another writer then changes
/// only its mode (the content is still what the step wrote). The digest compares the
/// content only, so the undo puts back the old file with the old mode: the other
/// writer's `chmod` is lost, and nothing says so.
#[test]
fn an_undo_keeps_a_mode_another_writer_set_on_the_steps_content() {
    use std::os::unix::fs::PermissionsExt;
    let (tmp, root, mut j) = a_written_step();
    let f = Path::new("/etc/f");
    std::fs::set_permissions(
        tmp.path().join("etc/f"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let lines = j.undo(&root).unwrap();
    let mode = std::fs::metadata(tmp.path().join("etc/f"))
        .unwrap()
        .permissions()
        .mode()
        & 0o7777;
    assert_eq!(
        mode, 0o600,
        "the other writer's chmod was undone: {lines:?}"
    );
    assert_eq!(root.read(f).unwrap(), b"new\n");
    assert_eq!(
        lines,
        ["/etc/f changed by another writer since this step wrote it"]
    );
}

/// A line edit's undo on content whose mode another writer changed since: the edit's
/// inverse is applied to the content, and the mode is left as the other writer set it.
#[test]
fn a_line_edits_undo_keeps_a_mode_another_writer_set() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let root = HostRoot::open(tmp.path()).unwrap();
    root.create_dir_all(Path::new("/etc"), 0o755).unwrap();
    let f = Path::new("/etc/f");
    root.write_atomic(f, b"a\n", Some(0o644)).unwrap();
    let mut j = StepJournal::new("pkg-mode-lines");
    let effect = Effect::WriteFile {
        path: f.to_path_buf(),
        content: "a\nmine\n".into(),
        mode: None,
        uid: None,
        gid: None,
    };
    assert_eq!(j.before(&root, &effect, true).unwrap(), Before::Perform);
    root.write_atomic(f, b"a\nmine\n", None).unwrap();
    let real = tmp.path().join("etc/f");
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o640)).unwrap();
    let lines = j.undo(&root).unwrap();
    assert!(lines.is_empty(), "{lines:?}");
    assert_eq!(root.read(f).unwrap(), b"a\n");
    let mode = std::fs::metadata(&real).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o640);
}

/// The replay follows no symlink (principle 3), yet a step that wrote through a host
/// symlink that was already there (`/var/run -> ../run`, `/lib -> usr/lib`) is undone:
/// its records hold the canonical path.
#[test]
fn a_write_through_a_host_symlink_that_was_there_is_undone() {
    let tmp = tempfile::tempdir().unwrap();
    let root = HostRoot::open(tmp.path()).unwrap();
    root.create_dir_all(Path::new("/run"), 0o755).unwrap();
    root.create_dir_all(Path::new("/var"), 0o755).unwrap();
    root.create_dir_all(Path::new("/usr/lib"), 0o755).unwrap();
    root.symlink(Path::new("../run"), Path::new("/var/run"))
        .unwrap();
    root.symlink(Path::new("usr/lib"), Path::new("/lib"))
        .unwrap();
    root.write_atomic(Path::new("/lib/old.conf"), b"old\n", Some(0o644))
        .unwrap();
    let mut j = StepJournal::new("pkg-links");
    for (p, c) in [("/var/run/x.pid", "1\n"), ("/lib/old.conf", "new\n")] {
        let effect = Effect::WriteFile {
            path: p.into(),
            content: c.into(),
            mode: None,
            uid: None,
            gid: None,
        };
        assert_eq!(j.before(&root, &effect, false).unwrap(), Before::Perform);
        root.write_atomic(Path::new(p), c.as_bytes(), Some(0o644))
            .unwrap();
    }
    let lines = j.undo(&root).unwrap();
    assert!(lines.is_empty(), "{lines:?}");
    assert!(!root.exists(Path::new("/run/x.pid")).unwrap());
    assert_eq!(root.read(Path::new("/usr/lib/old.conf")).unwrap(), b"old\n");
}

/// Attack on principle 1 with a symlink: the step makes `/etc/l` a link (replacing
/// one) and `/etc/m` (new); another writer then replaces each with a regular file of
/// its own. The undo used to put the old link back (and remove the new one) whatever
/// was there now, deleting the other writer's files: a symlink's undo is now checked
/// against the link the step made, like a file's.
#[test]
fn a_symlinks_undo_keeps_a_file_another_writer_put_there() {
    let tmp = tempfile::tempdir().unwrap();
    let root = HostRoot::open(tmp.path()).unwrap();
    root.create_dir_all(Path::new("/etc"), 0o755).unwrap();
    let (l, m) = (Path::new("/etc/l"), Path::new("/etc/m"));
    root.symlink(Path::new("a"), l).unwrap();
    let mut j = StepJournal::new("pkg-link");
    for link in [l, m] {
        let effect = Effect::Symlink {
            target: "b".into(),
            link: link.to_path_buf(),
        };
        assert_eq!(j.before(&root, &effect, false).unwrap(), Before::Perform);
        let _ = root.remove_file(link);
        root.symlink(Path::new("b"), link).unwrap();
    }
    // The other writer (the step's links are gone, files in their place).
    for link in [l, m] {
        root.remove_file(link).unwrap();
        root.write_atomic(link, b"theirs\n", Some(0o644)).unwrap();
    }
    let lines = j.undo(&root).unwrap();
    assert_eq!(root.read(l).unwrap(), b"theirs\n", "{lines:?}");
    assert_eq!(root.read(m).unwrap(), b"theirs\n", "{lines:?}");
    assert_eq!(
        lines,
        [
            "/etc/m changed by another writer since this step wrote it",
            "/etc/l changed by another writer since this step wrote it"
        ]
    );
    // Nobody else changed them: the undo puts the old link back and removes the new.
    let mut j = StepJournal::new("pkg-link");
    root.remove_file(l).unwrap();
    root.remove_file(m).unwrap();
    root.symlink(Path::new("a"), l).unwrap();
    for link in [l, m] {
        let effect = Effect::Symlink {
            target: "b".into(),
            link: link.to_path_buf(),
        };
        j.before(&root, &effect, false).unwrap();
        let _ = root.remove_file(link);
        root.symlink(Path::new("b"), link).unwrap();
    }
    assert_eq!(j.undo(&root).unwrap(), Vec::<String>::new());
    assert_eq!(root.read_link(l).unwrap(), Path::new("a"));
    assert!(root.symlink_metadata(m).unwrap().is_none());
}

/// Attack on principle 2: a journal's `log` that is a FIFO or a symlink (to a file of
/// JSON lines another user wrote) when the recovery runs. The recovery used to open it
/// blocking and following the link: a FIFO hung the agent's start, a link was replayed.
/// Now a log that is not a regular file is left, named, and the other journals are
/// recovered.
#[test]
fn a_journal_log_that_is_a_fifo_or_a_symlink_is_left_and_named() {
    let tmp = tempfile::tempdir().unwrap();
    let root = HostRoot::open(tmp.path()).unwrap();
    root.create_dir_all(Path::new("/etc"), 0o755).unwrap();
    root.create_dir_all(Path::new("/tmp"), 0o1777).unwrap();
    // A legacy journal another user could write, which would remove /etc/victim.
    root.write_atomic(Path::new("/etc/victim"), b"keep\n", Some(0o644))
        .unwrap();
    root.write_atomic(
        Path::new("/tmp/evil"),
        b"{\"kind\":\"absent\",\"path\":\"/etc/victim\"}\n",
        Some(0o666),
    )
    .unwrap();
    let fifo_dir = Path::new(DIR).join("a-fifo.1.0");
    let link_dir = Path::new(DIR).join("b-link.1.0");
    root.create_dir_all(&fifo_dir, 0o700).unwrap();
    root.create_dir_all(&link_dir, 0o700).unwrap();
    let fifo = tmp
        .path()
        .join(fifo_dir.strip_prefix("/").unwrap())
        .join(LOG);
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    root.symlink(Path::new("/tmp/evil"), &link_dir.join(LOG))
        .unwrap();
    let recovering = {
        let root = root.try_clone().unwrap();
        std::thread::spawn(move || recover(&root))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !recovering.is_finished() && std::time::Instant::now() < deadline {
        std::thread::yield_now();
    }
    let hung = !recovering.is_finished();
    if hung {
        // Unblock the reader: a writer opens and closes the FIFO.
        drop(std::fs::OpenOptions::new().write(true).open(&fifo));
    }
    let lines = recovering.join().unwrap();
    assert!(!hung, "the recovery hung on a FIFO as a journal's log");
    let lines = lines.unwrap();
    assert_eq!(
        root.read(Path::new("/etc/victim")).unwrap(),
        b"keep\n",
        "{lines:?}"
    );
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines.iter().all(|l| l.contains("not a regular file")),
        "{lines:?}"
    );
}

/// A journal an agent before issue 28 left (JSON lines, a file's content after its
/// line) is still undone by the recovery: the file put back, the created one removed.
#[test]
fn a_journal_of_the_previous_format_is_recovered() {
    let tmp = tempfile::tempdir().unwrap();
    let root = HostRoot::open(tmp.path()).unwrap();
    root.create_dir_all(Path::new("/etc"), 0o755).unwrap();
    root.write_atomic(Path::new("/etc/f"), b"new\n", Some(0o644))
        .unwrap();
    root.write_atomic(Path::new("/etc/made"), b"x\n", Some(0o644))
        .unwrap();
    let jdir = Path::new(DIR).join("pkg-step.1.0");
    root.create_dir_all(&jdir, 0o700).unwrap();
    let log = concat!(
        "{\"kind\":\"file\",\"path\":\"/etc/f\",\"mode\":420,\"uid\":0,\"gid\":0,\"xattrs\":[],\"len\":4}\n",
        "old\n",
        "{\"kind\":\"absent\",\"path\":\"/etc/made\"}\n",
    );
    root.write_atomic(&jdir.join(LOG), log.as_bytes(), Some(0o600))
        .unwrap();
    let lines = recover(&root).unwrap();
    assert_eq!(
        lines,
        ["undid 2 file change record(s) of pkg-step.1.0, left by a step that did not end"]
    );
    assert_eq!(root.read(Path::new("/etc/f")).unwrap(), b"old\n");
    assert!(!root.exists(Path::new("/etc/made")).unwrap());
}

/// Issue 31: the records of a batch of effects are synced once before the batch, not once
/// each. `fs::copy_tree` of 10 files over 10 existing ones, and `fs::extract` of 10 files
/// over 10 existing ones: one `fdatasync` of the log each (it was one per file); the
/// undo still puts every file back.
#[test]
fn a_batch_of_writes_syncs_the_journal_once() {
    use crate::host::ExecMode;
    use crate::host::testutil::TestHost;
    let t = TestHost::new();
    std::fs::create_dir_all(t.p("/var/lib/skyhook")).unwrap();
    let mut tar = ::tar::Builder::new(Vec::new());
    for i in 0..10 {
        t.file(&format!("/src/f{i}"), &format!("new {i}\n"));
        t.file(&format!("/dst/f{i}"), &format!("old {i}\n"));
        t.file(&format!("/opt/x/f{i}"), &format!("old {i}\n"));
        let body = format!("new {i}\n");
        let mut hd = ::tar::Header::new_gnu();
        hd.set_path(format!("f{i}")).unwrap();
        hd.set_mode(0o644);
        hd.set_size(body.len() as u64);
        hd.set_cksum();
        tar.append(&hd, body.as_bytes()).unwrap();
    }
    std::fs::create_dir_all(t.p("/tmp")).unwrap();
    std::fs::write(t.p("/tmp/a.tar"), tar.into_inner().unwrap()).unwrap();
    let mut h = t.host_with(ExecMode::Apply, |o| o.undo = Some("pkg-apply".into()));
    fail_point::take_syncs();
    let tree = crate::host::files::copy_tree::TreeOptions::default();
    assert!(crate::host::files::copy_tree::copy_tree(&mut h, "/src", "/dst", &tree).unwrap());
    assert_eq!(
        fail_point::take_syncs(),
        1,
        "journal syncs of fs::copy_tree of 10 files"
    );
    let opts = crate::host::files::archive::ExtractOptions::default();
    crate::host::files::archive::extract(&mut h, "/tmp/a.tar", "/opt/x", &opts).unwrap();
    assert_eq!(
        fail_point::take_syncs(),
        1,
        "journal syncs of fs::extract of 10 files"
    );
    assert_eq!(t.read("/dst/f3"), "new 3\n");
    assert_eq!(t.read("/opt/x/f3"), "new 3\n");
    let (_, undone, result) = h.fail_with_report();
    result.unwrap();
    assert!(undone.not_undone.is_empty(), "{:?}", undone.not_undone);
    for i in 0..10 {
        assert_eq!(t.read(&format!("/dst/f{i}")), format!("old {i}\n"));
        assert_eq!(t.read(&format!("/opt/x/f{i}")), format!("old {i}\n"));
    }
}

/// The bytes of the live journals' logs under `root`.
fn log_bytes(root: &Path) -> u64 {
    let dir = root.join(DIR.trim_start_matches('/'));
    let mut n = 0;
    for j in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        n += std::fs::metadata(j.path().join(LOG)).map_or(0, |m| m.len());
    }
    n
}

/// Issue 31: a removal moved aside copies no content into the journal: a file, a tree, a
/// symlink, a FIFO, and a tree the step recorded before (its mode changed: it used to be
/// recorded entry by entry, every file's content copied into the log). The undo puts each
/// back as it was.
#[test]
fn removals_move_aside_without_copying_content() {
    use crate::host::ExecMode;
    use crate::host::files::fs;
    use crate::host::testutil::TestHost;
    use std::os::unix::fs::PermissionsExt;
    let t = TestHost::new();
    std::fs::create_dir_all(t.p("/var/lib/skyhook")).unwrap();
    let big = "x".repeat(1 << 20);
    t.file("/opt/file", &big);
    t.file("/opt/tree/big", &big);
    t.file("/opt/recorded/big", &big);
    t.file("/opt/recorded/sub/small", "small\n");
    std::fs::set_permissions(t.p("/opt/recorded"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::symlink("/opt/file", t.p("/opt/link")).unwrap();
    nix::unistd::mkfifo(
        &t.p("/opt/fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o640),
    )
    .unwrap();
    let mut h = t.host_with(ExecMode::Apply, |o| o.undo = Some("pkg-apply".into()));
    assert!(fs::chmod(&mut h, "/opt/recorded", 0o750).unwrap());
    for p in ["/opt/file", "/opt/link", "/opt/fifo"] {
        assert!(fs::remove(&mut h, p).unwrap(), "{p}");
    }
    for p in ["/opt/tree", "/opt/recorded"] {
        assert!(fs::remove_all(&mut h, p).unwrap(), "{p}");
    }
    let n = log_bytes(&t.root);
    assert!(
        n < 64 << 10,
        "the journal holds {n} bytes after the removals"
    );
    assert!(!t.p("/opt/recorded").exists());
    let (_, undone, result) = h.fail_with_report();
    result.unwrap();
    assert!(undone.not_undone.is_empty(), "{:?}", undone.not_undone);
    assert_eq!(t.read("/opt/file"), big);
    assert_eq!(t.read("/opt/tree/big"), big);
    assert_eq!(t.read("/opt/recorded/big"), big);
    assert_eq!(t.read("/opt/recorded/sub/small"), "small\n");
    let mode = |p: &str| std::fs::symlink_metadata(t.p(p)).unwrap().mode() & 0o7777;
    assert_eq!(mode("/opt/recorded"), 0o700);
    assert_eq!(
        std::fs::read_link(t.p("/opt/link")).unwrap(),
        Path::new("/opt/file")
    );
    assert!(
        std::fs::symlink_metadata(t.p("/opt/fifo"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
}
