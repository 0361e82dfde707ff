//! Plan and apply agree on the directories they create: missing parents get 0755 and only
//! the final directory the requested mode (`mkdir -p`), for `fs::mkdir` and for every
//! creator of parents (writes, copies, symlinks); and the directory of the path locks,
//! which apply mode creates on its first lock, is planned too, so a root without
//! `/var/lib` reports the same in both modes.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::host::effects::report::Report;
use crate::host::files::fs::{self, LineOptions, WriteOptions};
use crate::host::root::HostRoot;
use crate::host::tests::snapshot;
use crate::host::testutil::TestHost;
use crate::host::{ExecMode, Host};

/// Permission bits of host path `p` on disk.
fn disk_mode(t: &TestHost, p: &str) -> u32 {
    std::fs::metadata(t.p(p)).unwrap().mode() & 0o7777
}

/// Permission bits of host path `p` as the session sees it.
fn view_mode(h: &Host, p: &str) -> u32 {
    fs::stat(h, p).unwrap().mode
}

/// The (kind, summary, mkdir) of every change of a report.
fn changes(r: &Report) -> Vec<(String, String, Vec<String>)> {
    r.changes
        .iter()
        .map(|c| (c.kind.clone(), c.summary.clone(), c.mkdir.clone()))
        .collect()
}

/// Plan `f` (asserting the root is untouched and collecting the planned modes of `paths`),
/// then apply it; returns both reports and the planned modes.
fn plan_then_apply(
    t: &TestHost,
    paths: &[&str],
    f: impl Fn(&mut Host) -> std::result::Result<(), crate::host::api::CallError>,
) -> (Report, Report, Vec<u32>) {
    let before = snapshot(t);
    let mut h = t.host(ExecMode::Plan);
    f(&mut h).unwrap();
    let planned: Vec<u32> = paths.iter().map(|p| view_mode(&h, p)).collect();
    let plan = h.finish().unwrap();
    assert_eq!(snapshot(t), before, "a plan changed the root");
    let mut h = t.host(ExecMode::Apply);
    f(&mut h).unwrap();
    let applied = h.finish().unwrap();
    (plan, applied, planned)
}

#[test]
fn mkdir_parents_get_0755_only_the_final_directory_the_mode() {
    let t = TestHost::new();
    let paths = ["/a", "/a/b", "/a/b/c"];
    let (plan, apply, planned) = plan_then_apply(&t, &paths, |h| {
        assert!(fs::mkdir(h, "/a/b/c", Some(0o700))?);
        Ok(())
    });
    assert_eq!(planned, vec![0o755, 0o755, 0o700]);
    let on_disk: Vec<u32> = paths.iter().map(|p| disk_mode(&t, p)).collect();
    assert_eq!(
        on_disk, planned,
        "apply made other modes than the plan reported"
    );
    let expected = vec![(
        "mkdir".to_string(),
        "create directory /a/b/c (mode 0700)".to_string(),
        vec!["/a".to_string(), "/a/b".to_string()],
    )];
    assert_eq!(changes(&plan), expected);
    assert_eq!(changes(&apply), expected);
    // Idempotent, and an existing parent keeps its mode when a deeper directory is made.
    let mut h = t.host(ExecMode::Apply);
    assert!(!fs::mkdir(&mut h, "/a/b/c", Some(0o700)).unwrap());
    assert!(fs::mkdir(&mut h, "/a/b/c/d/e", Some(0o750)).unwrap());
    h.finish().unwrap();
    assert_eq!(disk_mode(&t, "/a/b/c"), 0o700);
    assert_eq!(disk_mode(&t, "/a/b/c/d"), 0o755);
    assert_eq!(disk_mode(&t, "/a/b/c/d/e"), 0o750);
}

#[test]
fn mkdir_mode_with_special_bits_is_set_exactly() {
    let t = TestHost::new();
    let (_, _, planned) = plan_then_apply(&t, &["/srv", "/srv/shared"], |h| {
        assert!(fs::mkdir(h, "/srv/shared", Some(0o2770))?);
        Ok(())
    });
    assert_eq!(planned, vec![0o755, 0o2770]);
    assert_eq!(disk_mode(&t, "/srv"), 0o755);
    assert_eq!(disk_mode(&t, "/srv/shared"), 0o2770);
}

/// Writes, copies and symlinks under missing directories create them 0755, as planned.
#[test]
fn other_creators_make_parents_0755_as_planned() {
    let t = TestHost::new();
    t.file("/etc/src.conf", "x\n");
    let paths = ["/w", "/w/x", "/c", "/c/d", "/l", "/l/m"];
    let (plan, apply, planned) = plan_then_apply(&t, &paths, |h| {
        let secret = WriteOptions {
            mode: Some(0o600),
            ..WriteOptions::default()
        };
        assert!(fs::write(h, "/w/x/f", "data\n", &secret)?);
        assert!(fs::copy(h, "/etc/src.conf", "/c/d/f", &secret)?);
        assert!(fs::symlink(h, "/etc/src.conf", "/l/m/link")?);
        Ok(())
    });
    assert_eq!(planned, vec![0o755; paths.len()]);
    let on_disk: Vec<u32> = paths.iter().map(|p| disk_mode(&t, p)).collect();
    assert_eq!(on_disk, planned);
    assert_eq!(disk_mode(&t, "/w/x/f"), 0o600);
    assert_eq!(changes(&plan), changes(&apply));
    assert_eq!(
        plan.changes
            .iter()
            .map(|c| c.mkdir.clone())
            .collect::<Vec<_>>(),
        vec![
            vec!["/w".to_string(), "/w/x".to_string()],
            vec!["/c".to_string(), "/c/d".to_string()],
            vec!["/l".to_string(), "/l/m".to_string()],
        ]
    );
}

/// The HostRoot primitive itself: what it creates, what it keeps, and its errors.
#[test]
fn create_dir_all_creates_parents_0755_and_names_a_non_directory() {
    let t = TestHost::new();
    let root = HostRoot::open(&t.root).unwrap();
    let r = crate::host::root::AgentFiles::new(&root);
    std::fs::create_dir(t.p("/keep")).unwrap();
    std::fs::set_permissions(t.p("/keep"), std::fs::Permissions::from_mode(0o711)).unwrap();
    let created = r
        .create_dir_all(Path::new("/keep/x/../y/z"), 0o700)
        .unwrap();
    assert_eq!(created, vec![Path::new("/keep/y"), Path::new("/keep/y/z")]);
    assert_eq!(disk_mode(&t, "/keep"), 0o711);
    assert_eq!(disk_mode(&t, "/keep/y"), 0o755);
    assert_eq!(disk_mode(&t, "/keep/y/z"), 0o700);
    assert!(!t.p("/keep/x").exists());
    // Existing: nothing created, mode kept.
    assert!(
        r.create_dir_all(Path::new("/keep/y/z"), 0o755)
            .unwrap()
            .is_empty()
    );
    assert_eq!(disk_mode(&t, "/keep/y/z"), 0o700);
    // A symlinked parent is followed inside the root.
    std::os::unix::fs::symlink("/keep", t.p("/ln")).unwrap();
    let created = r.create_dir_all(Path::new("/ln/q"), 0o750).unwrap();
    assert_eq!(created, vec![Path::new("/ln/q")]);
    assert_eq!(disk_mode(&t, "/keep/q"), 0o750);

    t.file("/etc/passwd", "root:x:0:0::/root:/bin/sh\n");
    let e = r
        .create_dir_all(Path::new("/etc/passwd/sub"), 0o755)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "failed to create directory /etc/passwd/sub under host root {}",
            t.root.display()
        )
    );
    assert_eq!(e.kind(), std::io::ErrorKind::NotADirectory);
    let e = r
        .create_dir_all(Path::new("/etc/passwd"), 0o755)
        .unwrap_err();
    assert_eq!(e.path, Path::new("/etc/passwd"));
    assert_eq!(e.kind(), std::io::ErrorKind::NotADirectory);
    assert_eq!(e.source.to_string(), "exists and is not a directory");
    let e = r.create_dir_all(Path::new("rel"), 0o755).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
}

/// A root without `/var/lib`: the apply creates the lock directory on its first lock, and
/// the plan plans it at the same point, so a later `fs::mkdir` under `/var/lib` reports the
/// same and returns the same in both modes.
#[test]
fn lock_directory_is_planned_where_apply_creates_it() {
    let t = TestHost::new();
    t.file("/etc/x.conf", "a\n");
    let seen = std::sync::Mutex::new(Vec::new());
    let (plan, apply, _) = plan_then_apply(&t, &[], |h| {
        assert!(fs::ensure_line(
            h,
            "/etc/x.conf",
            "b",
            &LineOptions::default()
        )?);
        let made_var_lib = fs::mkdir(h, "/var/lib", None)?;
        assert!(fs::mkdir(h, "/var/lib/x", Some(0o700))?);
        seen.lock().unwrap().push((
            made_var_lib,
            fs::list(h, "/var/lib/skyhook")?,
            view_mode(h, "/var/lib"),
            view_mode(h, crate::host::root::pathlock::DIR),
        ));
        Ok(())
    });
    let seen = seen.into_inner().unwrap();
    let expected = (false, vec![".locks".to_string()], 0o755, 0o755);
    assert_eq!(seen, vec![expected.clone(), expected], "plan, then apply");
    let summaries = vec![
        (
            "write".to_string(),
            "update /etc/x.conf".to_string(),
            Vec::new(),
        ),
        (
            "mkdir".to_string(),
            "create directory /var/lib/x (mode 0700)".to_string(),
            Vec::new(),
        ),
    ];
    assert_eq!(changes(&plan), summaries);
    assert_eq!(changes(&apply), summaries);
    assert_eq!(disk_mode(&t, "/var"), 0o755);
    assert_eq!(disk_mode(&t, "/var/lib"), 0o755);
    assert_eq!(disk_mode(&t, "/var/lib/skyhook"), 0o755);
    assert_eq!(disk_mode(&t, crate::host::root::pathlock::DIR), 0o755);
    assert_eq!(disk_mode(&t, "/var/lib/x"), 0o700);
}

/// A call that changes nothing takes no lock in apply mode, so the plan plans no lock
/// directory for it either; a change does in both.
#[test]
fn lock_directory_only_for_changes_in_both_modes() {
    let t = TestHost::new();
    t.file("/etc/x.conf", "a\n");
    let keep = WriteOptions::default();
    let mut seen = Vec::new();
    for mode in [ExecMode::Plan, ExecMode::Check, ExecMode::Apply] {
        let mut h = t.host(mode);
        assert!(!fs::ensure_line(&mut h, "/etc/x.conf", "a", &LineOptions::default()).unwrap());
        assert!(!fs::write(&mut h, "/etc/x.conf", "a\n", &keep).unwrap());
        let unchanged = fs::list(&h, "/var/lib").ok();
        assert!(fs::write(&mut h, "/etc/y.conf", "y\n", &keep).unwrap());
        let changed = fs::list(&h, "/var/lib").ok();
        h.finish().unwrap();
        seen.push((mode, unchanged, changed));
    }
    let after = Some(vec!["skyhook".to_string()]);
    assert_eq!(
        seen,
        vec![
            (ExecMode::Plan, None, after.clone()),
            (ExecMode::Check, None, after.clone()),
            (ExecMode::Apply, None, after),
        ]
    );
}
