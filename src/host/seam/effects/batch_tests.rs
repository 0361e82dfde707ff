//! Apply-mode batching of line and block edits (the session's batch, [`crate::host::effects::session`]): one write per
//! batch, every read path sees the pending edits, the lock is held across the batch, an
//! outside writer's change is kept and fails the step.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::host::effects::context::Context;
use crate::host::effects::effect::Effect;
use crate::host::effects::exec::CmdOutput;
use crate::host::effects::executors::Executor;
use crate::host::effects::executors::apply::Apply;
use crate::host::files::fs::{self, LineOptions, WriteOptions};
use crate::host::files::structured::KeyPath;
use crate::host::root::HostRoot;
use crate::host::root::digest::sha256_tag;
use crate::host::system::cmd::{self, CommandOptions};
use crate::host::testutil::TestHost;
use crate::host::users::user;
use crate::host::{ExecMode, Host, HostError, HostOptions};

fn o() -> LineOptions {
    LineOptions::default()
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// Whether the path lock of host path `key` is free (taken and released at once; no lock
/// file: nobody holds it, the holder unlinks it when done).
fn lock_free(t: &TestHost, key: &str) -> bool {
    use nix::fcntl::{Flock, FlockArg};
    let lock = crate::host::root::pathlock::lock_file(Path::new(key));
    let Ok(f) = std::fs::File::open(t.p(lock.to_str().unwrap())) else {
        return true;
    };
    Flock::lock(f, FlockArg::LockExclusiveNonblock).is_ok()
}

/// A root with `/etc/f` holding `a`, and an apply session that has batched the line `b`
/// into it (not written yet).
fn a_batched_edit() -> (TestHost, Host) {
    let t = TestHost::new();
    t.file("/etc/f", "a\n");
    let mut h = t.host(ExecMode::Apply);
    assert!(fs::ensure_line(&mut h, "/etc/f", "b", &o()).unwrap());
    (t, h)
}

/// What a command that prints `/etc/f`'s lines, run by `run` (chrooted) through `h`, prints.
fn print_f(
    h: &mut Host,
    run: fn(&mut Host, &[String], &CommandOptions) -> Result<CmdOutput, HostError>,
) -> String {
    let argv = s(&[
        "/bin/sh",
        "-c",
        "while read l; do printf %s $l; done < /etc/f",
    ]);
    run(h, &argv, &CommandOptions::default()).unwrap().stdout
}

fn ino(t: &TestHost, host: &str) -> u64 {
    std::fs::metadata(t.p(host)).unwrap().ino()
}

/// `(kind, target, summary, before, after, mkdir)` of every change.
type Row = (
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    Vec<String>,
);

fn rows(r: &crate::host::Report) -> Vec<Row> {
    r.changes
        .iter()
        .map(|c| {
            (
                c.kind.clone(),
                c.target.clone(),
                c.summary.clone(),
                c.before.clone(),
                c.after.clone(),
                c.mkdir.clone(),
            )
        })
        .collect()
}

#[test]
fn edits_of_one_file_are_written_once_when_the_session_ends() {
    let t = TestHost::new();
    t.file("/etc/f", "old\n");
    let before = ino(&t, "/etc/f");
    let mut h = t.host(ExecMode::Apply);
    for i in 0..100 {
        assert!(fs::ensure_line(&mut h, "/etc/f", &format!("line {i}"), &o()).unwrap());
    }
    assert!(!fs::ensure_line(&mut h, "/etc/f", "line 7", &o()).unwrap());
    assert!(fs::remove_line(&mut h, "/etc/f", "^line 9$").unwrap());
    assert!(fs::ensure_block(&mut h, "/etc/f", "b", "x=1").unwrap());
    assert!(!fs::ensure_block(&mut h, "/etc/f", "b", "x=1").unwrap());
    // Nothing written yet: same inode, same content.
    assert_eq!(t.read("/etc/f"), "old\n");
    assert_eq!(ino(&t, "/etc/f"), before);
    let r = h.finish().unwrap();
    let mut want = String::from("old\n");
    for i in (0..100).filter(|i| *i != 9) {
        want.push_str(&format!("line {i}\n"));
    }
    want.push_str("# BEGIN skyhook b\nx=1\n# END skyhook b\n");
    assert_eq!(t.read("/etc/f"), want);
    assert_ne!(ino(&t, "/etc/f"), before, "one atomic rename");
    assert_eq!((r.changes.len(), r.unchanged), (102, 2));
    let rows = rows(&r);
    let row = |before: Option<String>, after: Option<String>| {
        (
            "write".to_string(),
            "/etc/f".to_string(),
            "update /etc/f".to_string(),
            before,
            after,
            Vec::<String>::new(),
        )
    };
    assert_eq!(rows[0], row(Some(sha256_tag(b"old\n")), None));
    assert!(rows[1..101].iter().all(|x| *x == row(None, None)));
    assert_eq!(rows[101], row(None, Some(sha256_tag(want.as_bytes()))));
}

#[test]
fn batched_report_equals_the_unbatched_one() {
    // `diffs: true` (`--apply --diff`) writes every call at once, as before batching.
    let edit = |h: &mut Host| {
        assert!(fs::ensure_line(h, "/etc/new.d/n.conf", "a", &o()).unwrap());
        assert!(fs::ensure_line(h, "/etc/new.d/n.conf", "b", &o()).unwrap());
        assert!(fs::ensure_block(h, "/etc/g", "id", "1\n2").unwrap());
        assert!(fs::remove_line(h, "/etc/g", "^g$").unwrap());
        assert!(fs::ensure_line(h, "/etc/new.d/n.conf", "c", &o()).unwrap());
        assert!(!fs::ensure_line(h, "/etc/new.d/n.conf", "a", &o()).unwrap());
    };
    let mut got = Vec::new();
    for diffs in [false, true] {
        let t = TestHost::new();
        t.file("/etc/g", "g\nh\n");
        let mut h = t.host_with(ExecMode::Apply, |o| o.diffs = diffs);
        edit(&mut h);
        let r = h.finish().unwrap();
        assert_eq!(t.read("/etc/new.d/n.conf"), "a\nb\nc\n");
        assert_eq!(
            t.read("/etc/g"),
            "h\n# BEGIN skyhook id\n1\n2\n# END skyhook id\n"
        );
        got.push((rows(&r), r.unchanged));
    }
    assert_eq!(got[0], got[1]);
    assert_eq!(
        got[0].0[0].2, "create /etc/new.d/n.conf (mode 0644)",
        "the first write creates"
    );
    assert_eq!(got[0].0[0].5, ["/etc/new.d"]);
}

#[test]
fn every_read_path_sees_the_batched_edit() {
    let t = TestHost::new();
    t.install_sh();
    t.file("/etc/f", "a\n");
    t.file("/etc/passwd", "root:x:0:0:root:/root:/bin/sh\n");
    type Read = Box<dyn Fn(&mut Host)>;
    let reads: Vec<(&str, Read)> = vec![
        (
            "fs::read",
            Box::new(|h| assert_eq!(fs::read(h, "/etc/f").unwrap(), "a\nb\n")),
        ),
        (
            "fs::stat",
            Box::new(|h| assert_eq!(fs::stat(h, "/etc/f").unwrap().size, 4)),
        ),
        (
            "fs::exists of a new file",
            Box::new(|h| {
                assert!(fs::ensure_line(h, "/etc/n.conf", "n", &o()).unwrap());
                assert!(fs::exists(h, "/etc/n.conf").unwrap());
            }),
        ),
        (
            "fs::list",
            Box::new(|h| {
                assert!(fs::ensure_line(h, "/etc/n.conf", "n", &o()).unwrap());
                assert_eq!(fs::list(h, "/etc").unwrap(), ["f", "n.conf", "passwd"]);
            }),
        ),
        (
            "run (chrooted)",
            Box::new(|h| assert_eq!(print_f(h, cmd::run), "ab")),
        ),
        (
            "query (read-only command)",
            Box::new(|h| assert_eq!(print_f(h, cmd::query), "ab")),
        ),
        (
            "a second file's edit",
            Box::new(|h| {
                assert!(fs::ensure_line(h, "/etc/g", "g", &o()).unwrap());
            }),
        ),
        (
            "another function's write of the same file",
            Box::new(|h| {
                assert!(fs::append(h, "/etc/f", "c\n").unwrap());
                assert_eq!(fs::read(h, "/etc/f").unwrap(), "a\nb\nc\n");
            }),
        ),
        (
            "toml::get",
            Box::new(|h| {
                assert!(fs::ensure_line(h, "/etc/t.toml", "k = 1", &o()).unwrap());
                let k: KeyPath = (&["k"][..]).into();
                assert_eq!(
                    crate::host::files::toml::get(h, "/etc/t.toml", &k).unwrap(),
                    serde_json::json!(1)
                );
            }),
        ),
        (
            "user::info",
            Box::new(|h| {
                let line = "svc:x:990:990::/nonexistent:/sbin/nologin";
                assert!(fs::ensure_line(h, "/etc/passwd", line, &o()).unwrap());
                let info = user::info(h, "svc").unwrap().unwrap();
                assert_eq!(info.entry.uid, 990);
            }),
        ),
    ];
    for (what, read) in reads {
        t.file("/etc/f", "a\n");
        let _ = std::fs::remove_file(t.p("/etc/n.conf"));
        let mut h = t.host(ExecMode::Apply);
        assert!(
            fs::ensure_line(&mut h, "/etc/f", "b", &o()).unwrap(),
            "{what}"
        );
        read(&mut h);
        // Whatever read it, the batch was written and its lock released.
        assert!(t.read("/etc/f").starts_with("a\nb\n"), "{what}");
        assert!(lock_free(&t, "/etc/f"), "{what}");
        h.finish().unwrap();
    }
    assert_eq!(t.read("/etc/g"), "g\n");
}

#[test]
fn the_lock_is_held_across_the_batch_and_no_second_lock_is_taken() {
    let (t, mut h) = a_batched_edit();
    assert!(!lock_free(&t, "/etc/f"), "held after the first edit");
    assert!(fs::ensure_line(&mut h, "/etc/f", "c", &o()).unwrap());
    assert!(!lock_free(&t, "/etc/f"), "held across the batch");
    // Another path's write takes its own lock only after the batch let go of this one.
    assert!(fs::write(&mut h, "/etc/g", "g\n", &WriteOptions::default()).unwrap());
    assert!(lock_free(&t, "/etc/f"));
    assert_eq!(t.read("/etc/f"), "a\nb\nc\n");
    h.finish().unwrap();
}

#[test]
fn an_outside_write_during_the_batch_fails_the_step_and_is_kept() {
    let (t, mut h) = a_batched_edit();
    // A writer that does not take the path lock (an editor, `sed -i`): a new inode.
    std::fs::write(t.p("/etc/f.tmp"), "outside\n").unwrap();
    std::fs::rename(t.p("/etc/f.tmp"), t.p("/etc/f")).unwrap();
    assert!(fs::ensure_line(&mut h, "/etc/f", "c", &o()).unwrap());
    let (r, result) = h.finish_with_report();
    let e = result.unwrap_err();
    assert!(
        matches!(e, HostError::ChangedUnderStep { edits: 2, .. }),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "/etc/f changed under the step (by a writer that does not take skyhook's path lock) \
         after its line edits read it; its 2 pending line edit(s) were not written, the file \
         is left as the other writer made it"
    );
    assert_eq!(t.read("/etc/f"), "outside\n");
    // The last change has no `after`: nothing of it was written.
    assert_eq!(r.changes.len(), 2);
    assert_eq!(r.changes[1].after, None);
    assert!(lock_free(&t, "/etc/f"));

    // An in-place write with the same size is seen too (times), here by a read.
    let mut h = t.host(ExecMode::Apply);
    assert!(fs::ensure_line(&mut h, "/etc/f", "d", &o()).unwrap());
    std::fs::write(t.p("/etc/f"), "OUTSIDE\n").unwrap();
    let e = fs::read(&h, "/etc/f").unwrap_err();
    assert!(
        matches!(e, HostError::ChangedUnderStep { edits: 1, .. }),
        "{e:?}"
    );
    assert_eq!(t.read("/etc/f"), "OUTSIDE\n");
    // The error is returned once; the session goes on with the file as it is, and the
    // step still fails at its end (`batch_failure_tests`).
    assert_eq!(fs::read(&h, "/etc/f").unwrap(), "OUTSIDE\n");
    assert!(matches!(
        h.finish().unwrap_err(),
        HostError::EditsNotWritten { .. }
    ));
    assert_eq!(t.read("/etc/f"), "OUTSIDE\n");
}

#[test]
fn a_failing_call_after_edits_still_has_them_written() {
    let (t, mut h) = a_batched_edit();
    let e = fs::ensure_line(
        &mut h,
        "/etc/f",
        "c",
        &LineOptions {
            regex: Some("(".into()),
            create: true,
        },
    )
    .unwrap_err();
    assert!(matches!(e, HostError::Regex { .. }), "{e:?}");
    let e = fs::ensure_line(
        &mut h,
        "/etc/missing",
        "x",
        &LineOptions {
            regex: None,
            create: false,
        },
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "/etc/missing does not exist");
    // The script failed; its runner still ends the session.
    let r = h.finish().unwrap();
    assert_eq!(r.changes.len(), 1);
    assert_eq!(t.read("/etc/f"), "a\nb\n");

    // Dropped without `finish` (an early `?` return): written too.
    let mut h = t.host(ExecMode::Apply);
    assert!(fs::ensure_line(&mut h, "/etc/f", "c", &o()).unwrap());
    drop(h);
    assert_eq!(t.read("/etc/f"), "a\nb\nc\n");
    assert!(lock_free(&t, "/etc/f"));
}

#[test]
fn a_line_that_is_not_one_line_is_refused_and_leaves_the_batch() {
    let (t, mut h) = a_batched_edit();
    let e = fs::ensure_line(&mut h, "/etc/f", "m\nn", &o()).unwrap_err();
    assert!(e.to_string().contains("contains a line break"), "{e}");
    assert!(fs::ensure_line(&mut h, "/etc/f", "c", &o()).unwrap());
    let r = h.finish().unwrap();
    assert_eq!(t.read("/etc/f"), "a\nb\nc\n");
    assert!(lock_free(&t, "/etc/f"));
    assert_eq!(r.changes.len(), 2);
    assert_eq!(r.changes[1].after, Some(sha256_tag(b"a\nb\nc\n")));
}

#[test]
fn plan_and_check_do_not_batch_and_write_nothing() {
    for mode in [ExecMode::Plan, ExecMode::Check] {
        let t = TestHost::new();
        t.file("/etc/f", "a\n");
        let mut h = t.host(mode);
        assert!(fs::ensure_line(&mut h, "/etc/f", "b", &o()).unwrap());
        assert!(fs::ensure_line(&mut h, "/etc/f", "c", &o()).unwrap());
        assert_eq!(fs::read(&h, "/etc/f").unwrap(), "a\nb\nc\n");
        let r = h.finish().unwrap();
        assert_eq!(r.changes.len(), 2, "{mode:?}");
        assert_eq!(t.read("/etc/f"), "a\n", "{mode:?}");
        assert!(!t.p("/var/lib/skyhook/.locks").exists(), "{mode:?}");
    }
}

#[test]
fn a_command_outside_the_root_sees_the_batched_edit() {
    let t = TestHost::new();
    t.file("/etc/f", "a\n");
    let mut h = t.host_with(ExecMode::Apply, |o| o.commands_chrooted = false);
    assert!(fs::ensure_line(&mut h, "/etc/f", "b", &o()).unwrap());
    let agent_path = t.p("/etc/f").display().to_string();
    let out = cmd::query(
        &mut h,
        &s(&["cat", &agent_path]),
        &CommandOptions::default(),
    )
    .unwrap();
    assert_eq!(out.stdout, "a\nb\n");
    h.finish().unwrap();
}

/// An executor that applies as [`Apply`] does and logs each effect it is handed, with
/// whether it came as a batch's write ([`Executor::execute_batched`]).
#[derive(Debug)]
struct Logged {
    log: std::sync::Arc<std::sync::Mutex<Vec<(bool, Effect)>>>,
}

impl Executor for Logged {
    fn mode(&self) -> ExecMode {
        ExecMode::Apply
    }

    fn execute(
        &mut self,
        cx: &Context,
        effect: &Effect,
    ) -> crate::host::root::error::Result<Option<CmdOutput>> {
        self.log.lock().unwrap().push((false, effect.clone()));
        Apply::default().execute(cx, effect)
    }

    fn execute_batched(
        &self,
        cx: &Context,
        effect: &Effect,
    ) -> crate::host::root::error::Result<()> {
        self.log.lock().unwrap().push((true, effect.clone()));
        Apply::default().execute_batched(cx, effect)
    }

    fn changes_host(&self) -> bool {
        true
    }
}

#[test]
fn the_batched_write_is_one_write_file_through_the_executor() {
    let t = TestHost::new();
    t.file("/etc/f", "a\n");
    let log = std::sync::Arc::default();
    let executor = Box::new(Logged {
        log: std::sync::Arc::clone(&log),
    });
    let root = HostRoot::open(t.p("/")).unwrap();
    let mut h = Host::with_executor(root, executor, HostOptions::default());
    assert!(fs::ensure_line(&mut h, "/etc/f", "b", &o()).unwrap());
    assert!(fs::ensure_line(&mut h, "/etc/f", "c", &o()).unwrap());
    assert!(fs::remove_line(&mut h, "/etc/f", "^a$").unwrap());
    assert!(log.lock().unwrap().is_empty(), "held until the flush");
    // A read through `&Host` flushes the batch: one write, through the executor.
    assert_eq!(fs::read(&h, "/etc/f").unwrap(), "b\nc\n");
    let written: Vec<(bool, String, String)> = log
        .lock()
        .unwrap()
        .iter()
        .map(|(batched, e)| match e {
            Effect::WriteFile {
                path,
                content,
                mode: None,
                uid: None,
                gid: None,
            } => (
                *batched,
                path.display().to_string(),
                String::from_utf8_lossy(content).into_owned(),
            ),
            other => panic!("unexpected effect {other:?}"),
        })
        .collect();
    assert_eq!(written, [(true, "/etc/f".into(), "b\nc\n".into())]);
    assert_eq!(t.read("/etc/f"), "b\nc\n");
    // As every write of the apply executor: the directory is fsynced at the step's end.
    assert_eq!(h.dir_syncs().pending(), [std::path::PathBuf::from("/etc")]);
    let r = h.finish().unwrap();
    assert_eq!(r.changes.len(), 3);
    assert_eq!(log.lock().unwrap().len(), 1, "nothing more at the end");
}
