//! `fs::extract` checks each entry against the tree as extracted so far (the archive's own
//! symlinks and directories, and what is already at the destination), and writes only
//! through handles confined to the destination: an archive cannot write outside `dest`,
//! through its own links or through a link a racing user swaps in.

use crate::host::ExecMode;
use crate::host::files::archive::{ExtractOptions, Extracted, extract};
use crate::host::files::copy_tree::{TreeOptions, copy_tree};
use crate::host::files::fs_script_tests::tests::tar_of;
use crate::host::root::error::Result;
use crate::host::testutil::{TestHost, tree};

/// One entry: name, kind (`f` file, `d` directory, `l` symlink to body), mode, body.
type Entry<'a> = (&'a str, char, u32, &'a str);

/// A zip archive of `entries` (names as given), stored uncompressed.
pub(crate) fn zip_of(entries: &[Entry]) -> Vec<u8> {
    zip_with(entries, zip::CompressionMethod::Stored)
}

/// A zip archive of `entries` (names as given), each compressed by `method`.
pub(crate) fn zip_with(entries: &[Entry], method: zip::CompressionMethod) -> Vec<u8> {
    use std::io::Write;
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, kind, mode, body) in entries {
        let o = zip::write::SimpleFileOptions::default()
            .compression_method(method)
            .unix_permissions(*mode);
        match kind {
            'd' => w.add_directory(*name, o).unwrap(),
            'f' => {
                w.start_file(*name, o).unwrap();
                w.write_all(body.as_bytes()).unwrap();
            }
            'l' => w.add_symlink(*name, *body, o).unwrap(),
            _ => unreachable!(),
        }
    }
    w.finish().unwrap().into_inner()
}

/// `entries` as a tar and as a zip archive, each with its format's name.
fn tar_and_zip(entries: &[Entry]) -> [(&'static str, Vec<u8>); 2] {
    [("tar", tar_of(entries)), ("zip", zip_of(entries))]
}

/// A host root with an empty `/opt/dest`, where [`apply`] extracts.
pub(super) fn dest_host() -> TestHost {
    let t = TestHost::new();
    std::fs::create_dir_all(t.p("/opt/dest")).unwrap();
    t
}

/// A host root with an empty `/etc/cron.d`, where the racing user's symlinks lead.
pub(super) fn cron_host() -> TestHost {
    let t = TestHost::new();
    std::fs::create_dir_all(t.p("/etc/cron.d")).unwrap();
    t
}

/// Write `bytes` as `/tmp/x.archive`.
pub(super) fn put(t: &TestHost, bytes: &[u8]) {
    put_at(t, "/tmp/x.archive", bytes);
}

/// Write `bytes` as the host file `path`, making its directories.
pub(super) fn put_at(t: &TestHost, path: &str, bytes: &[u8]) {
    t.file(path, "");
    std::fs::write(t.p(path), bytes).unwrap();
}

/// Extract `/tmp/x.archive` into `dest` in apply mode.
pub(super) fn extract_into(t: &TestHost, dest: &str) -> Result<Extracted> {
    let mut h = t.host(ExecMode::Apply);
    let r = extract(&mut h, "/tmp/x.archive", dest, &ExtractOptions::default());
    let _ = h.finish();
    r
}

/// `fs::copy_tree` of `src` to `dst` in apply mode, default options.
pub(super) fn copy(t: &TestHost, src: &str, dst: &str) -> Result<bool> {
    let mut h = t.host(ExecMode::Apply);
    let r = copy_tree(&mut h, src, dst, &TreeOptions::default());
    let _ = h.finish();
    r
}

/// Extract `/tmp/x.archive` into `/opt/dest` in apply mode: the error's text, or
/// "extracted".
pub(super) fn apply(t: &TestHost) -> String {
    match extract_into(t, "/opt/dest") {
        Ok(Extracted::Done(_)) => "extracted".into(),
        Ok(Extracted::Unknown) => "unknown".into(),
        Err(e) => crate::chain::render(&e),
    }
}

/// Put `bytes` as the archive and extract it into `/opt/dest`, asserting the root did not
/// change (`case` names the case); the error's text.
pub(super) fn refused(t: &TestHost, bytes: &[u8], case: &str) -> String {
    put(t, bytes);
    let before = tree(&t.root);
    let e = apply(t);
    assert_eq!(tree(&t.root), before, "{case}: the root changed ({e})");
    e
}

/// Assert `/etc/cron.d` holds no file; `what` says what was called and its result.
pub(super) fn assert_cron_d_empty(t: &TestHost, what: &str) {
    assert_eq!(
        files_below(&t.p("/etc/cron.d")),
        Vec::<String>::new(),
        "{what}"
    );
}

/// The end of the error of a lookup that met a symlink below `dir`.
pub(super) fn symlink_below(dir: &str) -> String {
    format!(
        ": a symlink on the way below {dir}, where no symlink is followed: Too many levels of symbolic links (os error 40)"
    )
}

/// Assert `e` is the failed stat of `path` that met a symlink below `dir` (`case` names
/// the case).
pub(super) fn assert_stat_met_symlink(e: &str, path: &str, dir: &str, case: &str) {
    assert!(
        e.starts_with(&format!("failed to stat {path} under host root "))
            && e.ends_with(&symlink_below(dir)),
        "{case}: {e}"
    );
}

/// The archive: a symlink `d/e/l -> ../..` (dest itself), then `esc ->
/// d/e/l/../../../etc/<victim>`, whose text never climbs above `dest` but which resolves
/// through `l` to the root's `/etc/<victim>`; then a file spelt `./esc`, written through it.
#[test]
fn a_symlink_through_the_archives_own_link_cannot_overwrite_etc_passwd_or_shadow() {
    for victim in ["passwd", "shadow"] {
        let target = format!("d/e/l/../../../etc/{victim}");
        let entries: Vec<Entry> = vec![
            ("d/", 'd', 0o755, ""),
            ("d/e/", 'd', 0o755, ""),
            ("d/e/l", 'l', 0o777, "../.."),
            ("esc", 'l', 0o777, &target),
            ("./esc", 'f', 0o644, "pwned::0:0::/:/bin/sh\n"),
        ];
        for (format, bytes) in tar_and_zip(&entries) {
            let t = dest_host();
            let original = format!("root:x:0:0::/root:/bin/sh\n{victim} of the host\n");
            t.file(&format!("/etc/{victim}"), &original);
            let e = refused(&t, &bytes, format);
            assert_eq!(
                std::fs::read(t.p(&format!("/etc/{victim}"))).unwrap(),
                original.as_bytes(),
                "{format}: /etc/{victim} was overwritten ({e})"
            );
            assert_eq!(
                e,
                format!(
                    "invalid archive: /tmp/x.archive: entry \"esc\": is a symlink to \"{target}\", which leaves the destination (through the archive's symlink d/e/l)"
                ),
                "{format}"
            );
        }
    }
}

/// Fault: `x/` then a file `x` created the directory and then failed copying the file onto
/// it, naming no entry. Entries of two kinds at one path are refused before anything is
/// written, naming both; so is a file where an entry below needs a directory, and an
/// entry below the archive's file or link.
#[test]
fn entries_of_two_kinds_at_one_path_are_refused_up_front_naming_both() {
    let cases: &[(&[Entry], &str)] = &[
        (
            &[("x/", 'd', 0o755, ""), ("x", 'f', 0o644, "x\n")],
            "entry \"x\": is a file where entry \"x/\" is a directory: the archive has both at the same path",
        ),
        (
            &[("x", 'f', 0o644, "x\n"), ("x/", 'd', 0o755, "")],
            "entry \"x/\": is a directory where entry \"x\" is a file: the archive has both at the same path",
        ),
        (
            &[("a/b/c", 'f', 0o644, "c\n"), ("a/b", 'l', 0o777, "c")],
            "entry \"a/b\": is a symlink where entry \"a/b/c\" lies below it, which needs a directory there: the archive has both",
        ),
        (
            &[("l", 'l', 0o777, "d"), ("./l", 'f', 0o644, "x\n")],
            "entry \"./l\": is a file where entry \"l\" is a symlink: the archive has both at the same path",
        ),
        (
            &[("f", 'f', 0o644, "f\n"), ("f/g", 'f', 0o644, "g\n")],
            "entry \"f/g\": lies below entry \"f\", a file of the archive",
        ),
    ];
    for (entries, want) in cases {
        for (format, bytes) in tar_and_zip(entries) {
            let e = refused(&dest_host(), &bytes, &format!("{format}: {want}"));
            assert_eq!(
                e,
                format!("invalid archive: /tmp/x.archive: {want}"),
                "{format}"
            );
        }
    }
}

/// A link checked when it is read can leave `dest` through an entry after it (`b -> .`
/// turns `a -> b/../x` into `../x`): the links are checked again against the whole tree.
#[test]
fn a_later_entry_that_makes_an_earlier_link_leave_dest_is_refused() {
    let t = dest_host();
    let e = refused(
        &t,
        &tar_of(&[("a", 'l', 0o777, "b/../x"), ("b", 'l', 0o777, ".")]),
        "a -> b/../x",
    );
    assert_eq!(
        e,
        "invalid archive: /tmp/x.archive: entry \"a\": is a symlink to \"b/../x\", which leaves the destination once the archive is extracted (through the archive's symlink b)"
    );
    // Links that stay inside, through each other and through a link at the destination,
    // are extracted.
    std::os::unix::fs::symlink("sub", t.p("/opt/dest/here")).unwrap();
    std::fs::create_dir_all(t.p("/opt/dest/sub")).unwrap();
    put(
        &t,
        &tar_of(&[
            ("d/e/", 'd', 0o755, ""),
            ("d/e/up", 'l', 0o777, ".."),
            ("d/e/f", 'l', 0o777, "up/../here/x"),
        ]),
    );
    assert_eq!(apply(&t), "extracted");
    assert_eq!(
        std::fs::read_link(t.p("/opt/dest/d/e/f")).unwrap(),
        std::path::Path::new("up/../here/x")
    );
}

/// Run `swap` between the check of the next `fs::extract` or `fs::copy_tree` on this
/// thread and its first write.
pub(super) fn race(swap: impl FnOnce() + 'static) {
    crate::host::files::copy_tree::BETWEEN_CHECK_AND_WRITE
        .with(|c| *c.borrow_mut() = Some(Box::new(swap)));
}

/// Every file below `dir` (agent-side), as paths relative to it.
pub(super) fn files_below(dir: &std::path::Path) -> Vec<String> {
    tree(dir)
        .into_iter()
        .filter(|(_, d)| d.starts_with("file"))
        .map(|(p, _)| p.display().to_string())
        .collect()
}

/// Fault: an unprivileged user who can write the destination replaces a directory inside
/// it with a symlink to `/etc/cron.d` after the check: the archive's file landed in
/// `/etc/cron.d`. Now the writes go through a handle on `dest` opened before the check,
/// resolving no symlink below it: the write fails, nothing lands outside `dest`.
#[test]
fn a_directory_inside_dest_swapped_for_a_symlink_after_the_check_is_not_written_through() {
    let entries: &[Entry] = &[
        ("jobs/", 'd', 0o755, ""),
        (
            "jobs/evil",
            'f',
            0o644,
            "* * * * * root sh -c 'id > /pwned'\n",
        ),
    ];
    for (format, bytes) in tar_and_zip(entries) {
        let t = cron_host();
        std::fs::create_dir_all(t.p("/opt/dest/jobs")).unwrap();
        put(&t, &bytes);
        let jobs = t.p("/opt/dest/jobs");
        race(move || {
            std::fs::remove_dir(&jobs).unwrap();
            std::os::unix::fs::symlink("/etc/cron.d", &jobs).unwrap();
        });
        let e = apply(&t);
        assert_cron_d_empty(
            &t,
            &format!("{format}: the archive landed in /etc/cron.d ({e})"),
        );
        assert_stat_met_symlink(&e, "/opt/dest/jobs", "/opt/dest", format);
    }
}

/// The same with `dest` itself renamed away and replaced by a symlink to `/etc/cron.d`:
/// the entries land in the directory that was checked (now `/opt/dest.old`), never in
/// `/etc/cron.d`.
#[test]
fn dest_itself_swapped_for_a_symlink_after_the_check_is_not_written_through() {
    let t = cron_host();
    std::fs::create_dir_all(t.p("/opt/dest")).unwrap();
    put(
        &t,
        &tar_of(&[
            ("sub/", 'd', 0o755, ""),
            ("sub/evil", 'f', 0o644, "evil\n"),
            ("top", 'f', 0o644, "top\n"),
        ]),
    );
    let (dest, old) = (t.p("/opt/dest"), t.p("/opt/dest.old"));
    race(move || {
        std::fs::rename(&dest, &old).unwrap();
        std::os::unix::fs::symlink("/etc/cron.d", &dest).unwrap();
    });
    let e = apply(&t);
    assert_cron_d_empty(&t, &format!("the archive landed in /etc/cron.d ({e})"));
    assert_eq!(e, "extracted");
    assert_eq!(files_below(&t.p("/opt/dest.old")), ["sub/evil", "top"]);
}

/// `fs::copy_tree` the same: a directory of the destination swapped for a symlink after
/// the walk is not written through.
#[test]
fn copy_tree_does_not_write_through_a_directory_swapped_for_a_symlink() {
    let t = cron_host();
    t.file("/src/jobs/evil", "evil\n");
    std::fs::create_dir_all(t.p("/dst/jobs")).unwrap();
    let jobs = t.p("/dst/jobs");
    race(move || {
        std::fs::remove_dir(&jobs).unwrap();
        std::os::unix::fs::symlink("/etc/cron.d", &jobs).unwrap();
    });
    let r = copy(&t, "/src", "/dst");
    assert_cron_d_empty(&t, &format!("copied into /etc/cron.d ({r:?})"));
    let e = crate::chain::render(&r.unwrap_err());
    assert_stat_met_symlink(&e, "/dst/jobs", "/dst", "copy_tree");
}

/// A hostile archive of many links with long targets cannot make the check run for long:
/// the components all its link checks walk are bounded (65536 and 64 per entry), past that
/// the call fails.
#[test]
fn the_symlink_checks_of_one_call_are_bounded() {
    let target = "x/../".repeat(800); // 4000 bytes, 1600 components
    let mut b = tar::Builder::new(Vec::new());
    for i in 0..1400 {
        let mut hd = tar::Header::new_gnu();
        hd.set_entry_type(tar::EntryType::Symlink);
        hd.set_mode(0o777);
        hd.set_size(0);
        b.append_link(&mut hd, format!("l{i}"), &target).unwrap();
    }
    let t = dest_host();
    put(&t, &b.into_inner().unwrap());
    let started = std::time::Instant::now();
    assert_eq!(
        apply(&t),
        "invalid archive: /tmp/x.archive: its symlinks take more than 68288 steps to check, 65536 and 64 per entry (a limit of fs::extract)"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert_eq!(files_below(&t.p("/opt/dest")), Vec::<String>::new());
}

/// Fuzz finding (target `archive`): a zip entry whose name held NUL bytes failed at the
/// destination with an error quoting the path over several lines. A name or link target
/// with a control character (NUL, newline) is refused up front, one line naming it, so no
/// such name reaches the plan, the errors or the logs.
#[test]
fn names_and_link_targets_with_control_characters_are_refused_up_front() {
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "tar",
            tar_of(&[("ok", 'f', 0o644, "ok\n"), ("a\nb", 'f', 0o644, "x")]),
            "entry \"a\\nb\": has a control character in its name, which is not extracted",
        ),
        (
            "zip",
            zip_of(&[("ok", 'f', 0o644, "ok\n"), ("ef\0\0!", 'f', 0o644, "x")]),
            "entry \"ef\\0\\0!\": has a control character in its name, which is not extracted",
        ),
        (
            "tar",
            tar_of(&[("l", 'l', 0o777, "x\ny")]),
            "entry \"l\": is a symlink to \"x\\ny\", a target with a control character, which is not extracted",
        ),
    ];
    for (format, bytes, want) in cases {
        assert_eq!(
            refused(&dest_host(), &bytes, format),
            format!("invalid archive: /tmp/x.archive: {want}"),
            "{format}"
        );
    }
}
