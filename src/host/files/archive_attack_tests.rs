//! Attacks on the confinement of `fs::extract` and `fs::copy_tree` (issue 28, principle 3):
//! the ones that broke it (with their fix) and the strongest of those that held, which pin
//! the guarantee.

use crate::host::ExecMode;
use crate::host::files::archive::{ExtractOptions, Extracted, extract, sweep_staging};
use crate::host::files::archive_tree_tests::{
    apply, assert_cron_d_empty, assert_stat_met_symlink, copy, cron_host, dest_host, extract_into,
    put, put_at, race, refused, symlink_below, zip_of,
};
use crate::host::files::fs_script_tests::tests::tar_of;
use crate::host::testutil::{TestHost, tree};

/// Fault: a `dest` that does not exist when the archive is checked is created by the call
/// and only then confined, by a path that follows symlinks: a racing user who creates
/// `dest` as a symlink to `/etc/cron.d` in between had every entry land there. A `dest`
/// this call creates is now confined by a handle that follows no final symlink: the call
/// fails, nothing lands outside `dest`.
#[test]
fn a_dest_the_call_creates_swapped_in_as_a_symlink_is_not_written_through() {
    let t = cron_host();
    std::fs::create_dir_all(t.p("/opt")).unwrap();
    put(&t, &tar_of(&[("evil", 'f', 0o644, "* * * * * root id\n")]));
    let dest = t.p("/opt/dest");
    race(move || std::os::unix::fs::symlink("/etc/cron.d", &dest).unwrap());
    let e = apply(&t);
    assert_cron_d_empty(&t, &format!("the archive landed in /etc/cron.d ({e})"));
    // `/opt`, the nearest existing ancestor, is confined until `dest` is made: the
    // symlink is seen there (a `dest` right below `/` is caught when it is confined: the
    // copy_tree test below).
    assert_stat_met_symlink(&e, "/opt/dest", "/opt", "extract");
}

/// `fs::copy_tree` the same: a `dst` the call creates, swapped in as a symlink between the
/// walk and the first write, is not written through.
#[test]
fn copy_tree_to_a_dst_the_call_creates_swapped_in_as_a_symlink_is_not_written_through() {
    let t = cron_host();
    t.file("/src/evil", "evil\n");
    let dst = t.p("/dst");
    race(move || std::os::unix::fs::symlink("/etc/cron.d", &dst).unwrap());
    let r = copy(&t, "/src", "/dst");
    assert_cron_d_empty(&t, &format!("copied into /etc/cron.d ({r:?})"));
    let e = crate::chain::render(&r.unwrap_err());
    assert!(
        e.starts_with("failed to confine /dst under host root ")
            && e.ends_with(
                ": is a symlink now, where this call created a directory (not followed)"
            ),
        "{e}"
    );
}

/// Held: a symlink the step itself made below `dest` (`fs::symlink` before `fs::extract`
/// in the same step) is seen by the check, and an entry below it is refused naming it.
#[test]
fn an_entry_below_a_symlink_the_step_made_in_dest_is_refused() {
    let t = dest_host();
    std::fs::create_dir_all(t.p("/etc")).unwrap();
    put(&t, &tar_of(&[("l/passwd", 'f', 0o644, "pwned\n")]));
    let mut h = t.host(ExecMode::Apply);
    crate::host::files::fs::symlink(&mut h, "/etc", "/opt/dest/l").unwrap();
    let r = extract(
        &mut h,
        "/tmp/x.archive",
        "/opt/dest",
        &ExtractOptions::default(),
    );
    let _ = h.finish();
    assert!(!t.p("/etc/passwd").exists(), "written through l ({r:?})");
    assert_eq!(
        crate::chain::render(&r.unwrap_err()),
        "invalid archive: /tmp/x.archive: entry \"l/passwd\": lies below /opt/dest/l, a symlink at the destination"
    );
}

/// Held: a staging sweep that runs while an extract is between its staging and its copies
/// (another agent starting) leaves the live staging, which the extract holds locked, and
/// the extract completes.
#[test]
fn a_sweep_during_a_live_extract_leaves_its_staging() {
    let t = dest_host();
    put(
        &t,
        &tar_of(&[("a", 'f', 0o644, "a\n"), ("b", 'f', 0o644, "b\n")]),
    );
    let root = crate::host::root::HostRoot::open(&t.root).unwrap();
    let swept = std::rc::Rc::new(std::cell::RefCell::new(None));
    let s = swept.clone();
    race(move || *s.borrow_mut() = Some(sweep_staging(&root).unwrap()));
    assert_eq!(apply(&t), "extracted");
    assert_eq!(swept.borrow().as_deref(), Some(&[][..]));
    assert_eq!(std::fs::read(t.p("/opt/dest/a")).unwrap(), b"a\n");
    assert_eq!(std::fs::read(t.p("/opt/dest/b")).unwrap(), b"b\n");
}

/// Held: `dst` reached through a symlink into `src` (so inside it) is refused before
/// anything is copied (no recursion).
#[test]
fn copy_tree_into_src_through_a_symlink_is_refused() {
    let t = TestHost::new();
    t.file("/src/sub/f", "f\n");
    std::os::unix::fs::symlink("/src/sub", t.p("/dstlink")).unwrap();
    let before = tree(&t.root);
    let r = copy(&t, "/src", "/dstlink/new");
    assert_eq!(
        crate::chain::render(&r.unwrap_err()),
        "/dstlink/new: is the source directory or inside it"
    );
    assert_eq!(tree(&t.root), before);
}

/// Held: symlink loops and chains of the archive are refused before anything is written
/// (`a -> b`, `b -> a`, then a file below `a`; a chain of links each one `..` further).
#[test]
fn symlink_loops_and_climbing_chains_are_refused_up_front() {
    let cases: &[&[(&str, char, u32, &str)]] = &[
        &[("a", 'l', 0o777, "b"), ("b", 'l', 0o777, "a/x")],
        &[
            ("d/", 'd', 0o755, ""),
            ("d/u1", 'l', 0o777, ".."),
            ("u2", 'l', 0o777, "d/u1/d/u1/.."),
        ],
    ];
    for entries in cases {
        let e = refused(&dest_host(), &tar_of(entries), &format!("{entries:?}"));
        assert!(
            e.starts_with("invalid archive: /tmp/x.archive: entry "),
            "{e}"
        );
    }
    let _ = Extracted::Unknown;
}

/// As a journaled step, extract `jobs/passwd` (new) and `jobs/cfg` into `/opt/dest` of
/// `t`; then, as a racing user, move `jobs` to `/opt/jobs.old` and make it a symlink to
/// `target`; then fail the step. What its undo lists as not undone.
fn undo_with_jobs_swapped_for(t: &TestHost, target: &str) -> Vec<String> {
    std::fs::create_dir_all(t.p("/var/lib/skyhook")).unwrap();
    put(
        t,
        &tar_of(&[
            ("jobs/", 'd', 0o755, ""),
            ("jobs/passwd", 'f', 0o644, "new\n"),
            ("jobs/cfg", 'f', 0o644, "new cfg\n"),
        ]),
    );
    let mut h = t.host_with(ExecMode::Apply, |o| o.undo = Some("pkg-apply".into()));
    let r = extract(
        &mut h,
        "/tmp/x.archive",
        "/opt/dest",
        &ExtractOptions::default(),
    );
    assert_eq!(r.unwrap(), Extracted::Done(true));
    std::fs::rename(t.p("/opt/dest/jobs"), t.p("/opt/jobs.old")).unwrap();
    std::os::unix::fs::symlink(target, t.p("/opt/dest/jobs")).unwrap();
    let (_, undone, _) = h.fail_with_report();
    undone.not_undone
}

/// Journal side (principle 3): a step extracts `jobs/passwd` (a new file) and `jobs/cfg` (over an old one) into `dest`, a
/// racing user who can write `dest` swaps `jobs` for a symlink to `/etc` after the
/// extract, and the step fails: the undo replayed by path text, through the symlink, and
/// removed the host's `/etc/passwd` and wrote the old `cfg` into `/etc/cfg`. The replay
/// now follows no symlink below the root and says what it left.
#[test]
fn the_undo_of_an_extract_does_not_act_through_a_symlink_swapped_in_after_it() {
    let t = TestHost::new();
    t.file("/etc/passwd", "root:x:0:0::/root:/bin/sh\n");
    t.file("/opt/dest/jobs/cfg", "old cfg, the racing user's\n");
    let not_undone = undo_with_jobs_swapped_for(&t, "/etc");
    assert_eq!(
        std::fs::read_to_string(t.p("/etc/passwd")).ok().as_deref(),
        Some("root:x:0:0::/root:/bin/sh\n"),
        "the undo acted through the swapped symlink ({not_undone:?})"
    );
    assert!(!t.p("/etc/cfg").exists(), "the undo wrote /etc/cfg");
    for p in ["/opt/dest/jobs/passwd", "/opt/dest/jobs/cfg"] {
        let want = format!("{p}: a symlink on the way since this step wrote it");
        assert!(
            not_undone.iter().any(|l| l.ends_with(&want)),
            "{want} in {not_undone:?}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(t.p("/opt/jobs.old/cfg")).unwrap(),
        "new cfg\n"
    );
}

/// As above, with the files the symlink now leads to holding exactly what the step
/// wrote (so no digest check stands in the way): the undo removed `/srv/v/passwd` and
/// wrote the old `cfg` over `/srv/v/cfg`, through the symlink swapped in.
#[test]
fn the_undo_does_not_act_through_a_swapped_symlink_onto_identical_files() {
    let t = TestHost::new();
    t.file("/srv/v/passwd", "new\n");
    t.file("/srv/v/cfg", "new cfg\n");
    t.file("/opt/dest/jobs/cfg", "old cfg\n");
    let not_undone = undo_with_jobs_swapped_for(&t, "/srv/v");
    assert_eq!(
        std::fs::read_to_string(t.p("/srv/v/passwd"))
            .ok()
            .as_deref(),
        Some("new\n"),
        "the undo acted through the swapped symlink ({not_undone:?})"
    );
    assert_eq!(
        std::fs::read_to_string(t.p("/srv/v/cfg")).unwrap(),
        "new cfg\n",
        "{not_undone:?}"
    );
    assert_eq!(not_undone.len(), 2, "{not_undone:?}");
}

/// Fault: two extracts into one `dest` at once (two sessions: two agents, or a
/// `skyhook-run --apply` beside one), each archive checked against the destination as it
/// was before either wrote. Each archive alone stays inside `dest`: A's `d/e/r -> ../..`
/// is `dest`, B's `d/e/q -> r/../..` (no `r` in B) is `d`. Together `q` resolves
/// through A's `r` to `dest/..`: a symlink that leaves `dest` is left there, which every
/// check of `fs::extract` exists to refuse. The extracts of one host root are now
/// serialized, from before the check to the last write, by a cross-process lock.
#[test]
fn two_extracts_into_one_dest_at_once_cannot_leave_a_link_out_of_it() {
    let t = dest_host();
    std::fs::create_dir_all(t.p("/var/lib/skyhook")).unwrap();
    put(
        &t,
        &tar_of(&[("d/e/", 'd', 0o755, ""), ("d/e/r", 'l', 0o777, "../..")]),
    );
    put_at(
        &t,
        "/tmp/b.archive",
        &tar_of(&[("d/e/", 'd', 0o755, ""), ("d/e/q", 'l', 0o777, "r/../..")]),
    );
    // B runs in another thread (another session) while A is between its check and its
    // writes; A goes on once B has ended, or after 2 s (B blocked: it cannot be awaited,
    // as it waits for A's lock).
    let root = t.root.clone();
    let (b_done_tx, b_done_rx) = std::sync::mpsc::channel::<String>();
    let b_rx = std::sync::Arc::new(std::sync::Mutex::new(b_done_rx));
    let b_rx2 = b_rx.clone();
    let b_thread = std::rc::Rc::new(std::cell::RefCell::new(None));
    let b_thread2 = b_thread.clone();
    race(move || {
        *b_thread2.borrow_mut() = Some(std::thread::spawn(move || {
            let mut h = crate::host::Host::new(
                crate::host::root::HostRoot::open(&root).unwrap(),
                ExecMode::Apply,
                Default::default(),
            );
            let r = extract(
                &mut h,
                "/tmp/b.archive",
                "/opt/dest",
                &ExtractOptions::default(),
            );
            let _ = h.finish();
            let _ = b_done_tx.send(match r {
                Ok(_) => "extracted".to_string(),
                Err(e) => crate::chain::render(&e),
            });
        }));
        let got = b_rx2
            .lock()
            .unwrap()
            .recv_timeout(std::time::Duration::from_secs(2));
        assert!(
            got.is_err(),
            "B ran while A was between its check and writes: {got:?}"
        );
    });
    let a = apply(&t);
    assert_eq!(a, "extracted");
    let q = t.p("/opt/dest/d/e/q");
    let leaves = std::fs::canonicalize(&q)
        .map(|p| !p.starts_with(t.p("/opt/dest")))
        .unwrap_or(false);
    assert!(
        !leaves,
        "dest/d/e/q resolves outside dest: {:?}",
        std::fs::canonicalize(&q)
    );
    // B, run after A, sees A's link at the destination and is refused.
    b_thread.borrow_mut().take().unwrap().join().unwrap();
    let b = b_rx.lock().unwrap().recv().unwrap();
    assert_eq!(
        b,
        "invalid archive: /tmp/b.archive: entry \"d/e/q\": is a symlink to \"r/../..\", which leaves the destination (through /opt/dest/d/e/r, a symlink at the destination)"
    );
    assert!(!t.p("/opt/dest/d/e/q").exists());
}

/// Held: a zip entry whose unix mode says FIFO or device is written as a regular file in
/// `dest` (no special file is made); an absolute zip symlink target is refused; a tar
/// hard link to `/etc/shadow` is refused; two file entries at one path: the last wins.
#[test]
fn zip_special_modes_absolute_links_hard_links_and_duplicates() {
    // A zip entry with a FIFO's mode bits.
    let t = dest_host();
    put(&t, &zip_of(&[("fifo", 'f', 0o010644, "data\n")]));
    assert_eq!(apply(&t), "extracted");
    let m = std::fs::symlink_metadata(t.p("/opt/dest/fifo")).unwrap();
    assert!(m.file_type().is_file(), "{m:?}");

    let abs = zip_of(&[("l", 'l', 0o777, "/etc")]);
    let mut b = tar::Builder::new(Vec::new());
    let mut hd = tar::Header::new_gnu();
    hd.set_entry_type(tar::EntryType::Link);
    hd.set_size(0);
    hd.set_mode(0o644);
    b.append_link(&mut hd, "shadow", "/etc/shadow").unwrap();
    let hard = b.into_inner().unwrap();
    for (bytes, want) in [
        (
            abs,
            "invalid archive: /tmp/x.archive: entry \"l\": is a symlink to \"/etc\": only relative targets inside the destination are extracted",
        ),
        (
            hard,
            "invalid archive: /tmp/x.archive: entry \"shadow\": is a hard link, which is not extracted",
        ),
    ] {
        let t = dest_host();
        t.file("/etc/shadow", "root:!:1::::::\n");
        assert_eq!(refused(&t, &bytes, want), want);
    }

    let t = dest_host();
    put(
        &t,
        &tar_of(&[
            ("f", 'f', 0o644, "first\n"),
            ("./f", 'f', 0o600, "second\n"),
        ]),
    );
    assert_eq!(apply(&t), "extracted");
    assert_eq!(std::fs::read(t.p("/opt/dest/f")).unwrap(), b"second\n");
}

/// Fault: a `dest` whose parent is missing at the check (`/opt/new/cron.d`, made with its
/// parents by the call) and a racing user who can write `/opt` makes `/opt/new` a symlink
/// to `/etc` before the mkdir: the directory the call then confined was the host's
/// `/etc/cron.d`, and the archive landed there. The nearest existing ancestor of a `dest`
/// the call creates is now confined from before the check until `dest` is made.
#[test]
fn a_parent_of_dest_the_call_creates_swapped_in_as_a_symlink_is_not_written_through() {
    let t = cron_host();
    std::fs::create_dir_all(t.p("/opt")).unwrap();
    put(&t, &tar_of(&[("evil", 'f', 0o644, "* * * * * root id\n")]));
    let new = t.p("/opt/new");
    race(move || std::os::unix::fs::symlink("/etc", &new).unwrap());
    let r = extract_into(&t, "/opt/new/cron.d");
    assert_cron_d_empty(&t, &format!("the archive landed in /etc/cron.d ({r:?})"));
    let e = crate::chain::render(&r.unwrap_err());
    assert!(e.ends_with(&symlink_below("/opt")), "{e}");
}
