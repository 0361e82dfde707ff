//! The sealed seam: an area's reads go through the session's view, so a plan's later call
//! sees what an earlier call of the same plan changed; and the plan's overlay
//! (`overlay.rs`): its memory bound and what it remembers of the real root.

use crate::host::ExecMode;
use crate::host::effects::overlay::HELD_LIMIT;
use crate::host::files::fs;
use crate::host::mounts::disk;
use crate::host::mounts::mount_script_tests::tests::block_root;
use crate::host::testutil::TestHost;
use std::path::Path;

/// `disk::info` of a by-label link an earlier call of the plan makes resolves through the
/// planned link to the device it names, as the apply will.
#[test]
fn a_plan_resolves_a_device_through_a_link_it_planned() {
    let t = block_root();
    let mut h = t.host(ExecMode::Plan);
    assert!(fs::symlink(&mut h, "/dev/nvme1n1", "/dev/disk/by-label/data").unwrap());
    let info = disk::info(&mut h, "/dev/disk/by-label/data").unwrap();
    assert_eq!(
        info.map(|d| d.path),
        Some("/dev/nvme1n1".to_string()),
        "the plan's read skipped its own planned link"
    );
}

/// Five planned files of 20 MiB: the overlay holds at most 64 MiB of them in memory,
/// the rest is spilled, and every later read (a chmod's included) sees each file's
/// planned content.
#[test]
fn planned_content_past_the_limit_is_spilled_and_read_back() {
    let t = TestHost::new();
    let mut h = t.host(ExecMode::Plan);
    let big = |c: char| c.to_string().repeat(20 << 20);
    let files = ['a', 'b', 'c', 'd', 'e'];
    for c in files {
        fs::write(&mut h, &format!("/big/{c}"), &big(c), &Default::default()).unwrap();
    }
    let held = h.overlay().unwrap().held();
    assert!((40 << 20..=HELD_LIMIT).contains(&held), "{held}");
    fs::chmod(&mut h, "/big/e", 0o600).unwrap();
    assert_eq!(h.overlay().unwrap().held(), held);
    for c in files {
        let p = format!("/big/{c}");
        let read = h.view_read(Path::new(&p)).unwrap().unwrap();
        assert!(read == big(c).as_bytes(), "{p}");
    }
    assert_eq!(
        h.view_stat(Path::new("/big/e"), true)
            .unwrap()
            .unwrap()
            .mode,
        0o600
    );
    // Removing a held file frees its share.
    fs::remove(&mut h, "/big/a").unwrap();
    assert_eq!(h.overlay().unwrap().held(), held - (20 << 20));
}

/// Issue 31: 50 planned writes into one directory ask the real root about each path
/// once (the directory's ancestors, then each new file), not once per change and check.
#[test]
fn a_plan_asks_the_real_root_once_per_path() {
    let t = TestHost::new();
    t.file("/etc/pf/old.conf", "x\n");
    let mut h = t.host(ExecMode::Plan);
    for i in 0..50 {
        let p = format!("/etc/pf/f{i}.conf");
        fs::write(&mut h, &p, "k = v\n", &Default::default()).unwrap();
        fs::ensure_line(&mut h, &p, "k2 = v2", &Default::default()).unwrap();
    }
    let asked = h.overlay().unwrap().root_lookups();
    assert!(asked <= 2 * 50 + 20, "{asked} lookups of the real root");
    let r = h.finish().unwrap();
    assert_eq!(r.changes.len(), 100);
    assert!(r.changes.iter().all(|c| c.diff.is_some()));
}

/// Issue 31: a real-root file a plan reads again (a sysctl's value: `sysctl::get`, then
/// `sysctl::set`'s own read and its change's summary) is read once (a change on disk
/// meanwhile is not seen); a command the session runs forgets it, and the next read sees
/// what the command wrote.
#[test]
fn a_plan_reads_a_real_root_file_once_until_a_command() {
    use crate::host::kernel::tuning::sysctl;
    let t = TestHost::new();
    t.install_sh();
    t.file("/proc/sys/vm/max_map_count", "65530\n");
    t.file("/proc/sys/vm/swappiness", "60\n");
    let mut h = t.host(ExecMode::Plan);
    let get = |h: &crate::host::Host| sysctl::get(h, "vm.max_map_count").unwrap();
    assert_eq!(get(&h).as_deref(), Some("65530"));
    assert_eq!(
        sysctl::get(&h, "vm.swappiness").unwrap().as_deref(),
        Some("60")
    );
    let asked = h.overlay().unwrap().root_lookups();
    // Changed on disk behind the plan's back (no command of the session): the plan
    // keeps the content it read, as it keeps the file's metadata.
    t.file("/proc/sys/vm/max_map_count", "1\n");
    for _ in 0..3 {
        assert_eq!(get(&h).as_deref(), Some("65530"));
    }
    assert_eq!(h.overlay().unwrap().root_lookups(), asked);
    // No lookup more: the planned change's stat of the file came with the read's
    // resolution of it.
    assert!(sysctl::set(&mut h, "vm.swappiness", "10").unwrap());
    assert_eq!(h.overlay().unwrap().root_lookups(), asked);
    assert_eq!(
        sysctl::get(&h, "vm.swappiness").unwrap().as_deref(),
        Some("10")
    );
    let argv = ["sh", "-c", "echo 262144 > /proc/sys/vm/max_map_count"].map(String::from);
    h.exec(&argv, &Default::default()).unwrap();
    assert_eq!(get(&h).as_deref(), Some("262144"));
    let r = h.finish().unwrap();
    assert_eq!(r.changes.len(), 1);
    assert_eq!(r.changes[0].summary, "sysctl vm.swappiness = 10 (was 60)");
}

/// What the plan remembered of the real root is forgotten when the session runs a
/// command (a query may change the host): a file it made is seen.
#[test]
fn a_plan_sees_what_a_command_it_ran_made() {
    let t = TestHost::new();
    t.install_sh();
    t.file("/etc/keep", "x\n");
    let h = t.host(ExecMode::Plan);
    let new = Path::new("/etc/new");
    assert!(h.view_stat(new, true).unwrap().is_none());
    let argv = ["sh", "-c", ": > /etc/new"].map(String::from);
    h.exec(&argv, &Default::default()).unwrap();
    assert_eq!(h.view_stat(new, true).unwrap().unwrap().kind, "file");
}

/// The lock directory a plan planned once is planned again after a planned removal
/// took it, as the apply creates it again at its next lock.
#[test]
fn the_lock_directory_is_planned_again_after_a_removal() {
    let t = TestHost::new();
    let mut h = t.host(ExecMode::Plan);
    let dir = Path::new(crate::host::root::pathlock::DIR);
    fs::ensure_line(&mut h, "/etc/a.conf", "a", &Default::default()).unwrap();
    assert_eq!(h.view_stat(dir, true).unwrap().unwrap().kind, "dir");
    fs::remove_all(&mut h, "/var/lib").unwrap();
    assert!(h.view_stat(dir, true).unwrap().is_none());
    fs::ensure_line(&mut h, "/etc/a.conf", "b", &Default::default()).unwrap();
    assert_eq!(h.view_stat(dir, true).unwrap().unwrap().kind, "dir");
}

/// [`crate::host::Host::plan_without_diffs`]: the same changes and summaries, no diffs.
#[test]
fn a_plan_without_diffs_renders_none() {
    let t = TestHost::new();
    t.file("/etc/a.conf", "a = 1\n");
    let plan = |quiet: bool| {
        let mut h = t.host(ExecMode::Plan);
        if quiet {
            h.plan_without_diffs();
        }
        fs::write(&mut h, "/etc/a.conf", "a = 2\n", &Default::default()).unwrap();
        fs::ensure_line(&mut h, "/etc/b.conf", "b = 1", &Default::default()).unwrap();
        fs::remove(&mut h, "/etc/a.conf").unwrap();
        h.finish().unwrap()
    };
    let (loud, quiet) = (plan(false), plan(true));
    let summaries = |r: &crate::host::Report| -> Vec<String> {
        r.changes.iter().map(|c| c.summary.clone()).collect()
    };
    assert_eq!(summaries(&loud), summaries(&quiet));
    assert_eq!(summaries(&quiet).len(), 3);
    assert!(loud.changes.iter().all(|c| c.diff.is_some()));
    assert!(quiet.changes.iter().all(|c| c.diff.is_none()));
    assert_eq!(
        loud.changes.iter().map(|c| &c.before).collect::<Vec<_>>(),
        quiet.changes.iter().map(|c| &c.before).collect::<Vec<_>>()
    );
}

/// Issue 31: a package or service state query a host function composes (`dpkg-query -W`,
/// `systemctl is-active`) only reads the host, so the plan keeps what it read of the real
/// root across it: `/etc/os-release`, which `pkg::` reads before each query, is read once
/// (the setup port's plan read it again after each of its four `dpkg-query`). Every query
/// still runs; a script's own command still makes the plan forget
/// (`a_plan_sees_what_a_command_it_ran_made`).
#[test]
fn a_plan_keeps_what_it_read_across_a_state_query() {
    use crate::host::packages::pkg;
    use crate::host::services::service;
    let t = TestHost::new();
    t.systemctl_stub();
    t.file("/etc/os-release", "ID=ubuntu\nID_LIKE=debian\n");
    t.stub(
        "dpkg-query",
        r#"echo "no packages found matching $3" >&2; exit 1"#,
    );
    let mut h = t.host(ExecMode::Plan);
    assert!(!pkg::installed(&h, "curl").unwrap());
    let asked = h.overlay().unwrap().root_lookups();
    assert!(!pkg::installed(&h, "wget").unwrap());
    assert!(!service::is_active(&mut h, "chrony").unwrap());
    assert!(!pkg::installed(&h, "gpg").unwrap());
    assert_eq!(
        h.overlay().unwrap().root_lookups(),
        asked,
        "the plan asked the real root again after a state query"
    );
    assert_eq!(
        t.calls(),
        [
            "dpkg-query -W -f=${Status}\t${Version} curl",
            "dpkg-query -W -f=${Status}\t${Version} wget",
            "systemctl is-active chrony",
            "dpkg-query -W -f=${Status}\t${Version} gpg",
        ]
    );
}

/// Issue 31: one lookup of a path in the real root gives the plan both its resolution and
/// its metadata. A file's first `stat` asks the real root once (it asked twice: the
/// canonical path, then the metadata); a missing file's asks twice (its own resolution,
/// then its parent's, which also gives the parent's metadata), not three times; the
/// parent's `stat` then asks nothing.
#[test]
fn one_real_root_lookup_gives_a_plan_a_paths_resolution_and_metadata() {
    let t = TestHost::new();
    t.file("/etc/a.conf", "a\n");
    std::os::unix::fs::symlink("a.conf", t.p("/etc/link.conf")).unwrap();
    let h = t.host(ExecMode::Plan);
    let asked = || h.overlay().unwrap().root_lookups();
    let stat = |p: &str, follow: bool| h.view_stat(Path::new(p), follow).unwrap();
    assert_eq!(stat("/etc/a.conf", true).unwrap().kind, "file");
    assert_eq!(asked(), 1);
    assert!(stat("/etc/new.conf", true).is_none());
    assert_eq!(asked(), 3);
    assert_eq!(stat("/etc", true).unwrap().kind, "dir");
    assert_eq!(asked(), 3);
    // A link: followed, its target's metadata (one lookup); not followed, its own.
    assert_eq!(stat("/etc/link.conf", true).unwrap().kind, "file");
    assert_eq!(asked(), 4);
    assert_eq!(stat("/etc/link.conf", false).unwrap().kind, "symlink");
    assert!(stat("/etc/new.conf", false).is_none());
}
