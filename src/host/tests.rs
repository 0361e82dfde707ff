//! Cross-module tests of the host API: every mutating function in apply, plan and check mode
//! (idempotence, byte-identical roots after a plan, drift), the read overlay, deferred work,
//! commands, and the confinement corpus.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::host::files::fs::{self, LineOptions, WriteOptions};
use crate::host::kernel::interrupt;
use crate::host::kernel::tuning::{grub, sysctl, ulimit};
use crate::host::packages::pkg;
use crate::host::root::error::{HostError, Result};
use crate::host::services::service;
use crate::host::system::cmd::{self, CommandOptions};
use crate::host::testutil::{TestHost, tree};
use crate::host::{ExecMode, Host};

pub(crate) fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

pub(crate) fn snapshot(t: &TestHost) -> std::collections::BTreeMap<PathBuf, String> {
    let mut m = tree(&t.root);
    m.remove(Path::new("stub.log"));
    m
}

/// Run `f` in plan, check, apply, apply again, check and plan again, asserting: a plan and
/// a check leave the root byte-identical and report what apply then does; the second apply
/// changes nothing; the check after apply finds no drift. `f` fails with the session's
/// error or an area's, as a binding does ([`CallError`](crate::host::api::CallError)).
pub(crate) fn all_modes(
    t: &TestHost,
    f: impl Fn(&mut Host) -> Result<Vec<bool>, crate::host::api::CallError>,
) -> Vec<bool> {
    let before = snapshot(t);
    let mut h = t.host(ExecMode::Plan);
    let planned = f(&mut h).unwrap();
    let plan = h.finish().unwrap();
    assert_eq!(snapshot(t), before, "a plan changed the root");
    assert!(planned.iter().any(|c| *c), "nothing to plan: {planned:?}");
    assert_eq!(plan.changes.len(), planned.iter().filter(|c| **c).count());

    let mut h = t.host(ExecMode::Check);
    let checked = f(&mut h).unwrap();
    let check = h.finish().unwrap();
    assert_eq!(snapshot(t), before, "a check changed the root");
    assert_eq!(checked, planned);
    assert_eq!(check.drift().len(), plan.changes.len());

    let mut h = t.host(ExecMode::Apply);
    let applied = f(&mut h).unwrap();
    h.finish().unwrap();
    assert_eq!(applied, planned, "apply and plan disagree");

    let mut h = t.host(ExecMode::Apply);
    let again = f(&mut h).unwrap();
    let rep = h.finish().unwrap();
    assert!(again.iter().all(|c| !c), "second apply changed: {again:?}");
    assert!(rep.changes.is_empty());

    let mut h = t.host(ExecMode::Check);
    f(&mut h).unwrap();
    assert!(h.finish().unwrap().drift().is_empty(), "drift after apply");
    applied
}

#[test]
fn write_all_modes_and_attributes() {
    let t = TestHost::new();
    t.file(
        "/etc/passwd",
        "root:x:0:0::/root:/bin/sh\napp:x:1234:1234::/:/bin/sh\n",
    );
    t.file("/etc/group", "root:x:0:\ngrp:x:2345:\n");
    t.file("/etc/existing.conf", "old\n");
    let r = all_modes(&t, |h| {
        Ok(vec![
            fs::write(h, "/etc/new.conf", "a=1\n", &WriteOptions::default())?,
            fs::write(h, "/etc/existing.conf", "new\n", &WriteOptions::default())?,
            fs::write(
                h,
                "/etc/secret.conf",
                "s\n",
                &WriteOptions {
                    mode: Some(0o600),
                    owner: Some("app".into()),
                    group: Some("grp".into()),
                },
            )?,
        ])
    });
    assert_eq!(r, vec![true, true, true]);
    assert_eq!(t.read("/etc/new.conf"), "a=1\n");
    let m = std::fs::metadata(t.p("/etc/secret.conf")).unwrap();
    assert_eq!((m.mode() & 0o7777, m.uid(), m.gid()), (0o600, 1234, 2345));
    // Unknown names are errors naming the file looked in.
    let mut h = t.host(ExecMode::Apply);
    let e = fs::write(
        &mut h,
        "/x",
        "",
        &WriteOptions {
            owner: Some("nobody2".into()),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown user \"nobody2\" (not in the host's /etc/passwd)"
    );
}

#[test]
fn text_helpers_all_modes() {
    let t = TestHost::new();
    t.file("/etc/a.conf", "x=1\n#y=2\nz=3\n#y=9\n");
    t.file("/etc/b.conf", "keep\ndrop me\nkeep too\ndrop me too\n");
    t.file(
        "/etc/c.conf",
        "top\n# BEGIN skyhook old\nstale\n# END skyhook old\nbottom\n",
    );
    all_modes(&t, |h| {
        Ok(vec![
            fs::ensure_line(h, "/etc/a.conf", "w=0", &LineOptions::default())?,
            fs::ensure_line(
                h,
                "/etc/a.conf",
                "y=5",
                &LineOptions {
                    regex: Some("^#?y=".into()),
                    create: true,
                },
            )?,
            fs::ensure_line(h, "/etc/new.conf", "only", &LineOptions::default())?,
            fs::remove_line(h, "/etc/b.conf", "^drop")?,
            fs::ensure_block(h, "/etc/c.conf", "tuning", "a\nb")?,
            fs::remove_block(h, "/etc/c.conf", "old")?,
        ])
    });
    // The last matching line is replaced; the earlier one stays.
    assert_eq!(t.read("/etc/a.conf"), "x=1\n#y=2\nz=3\ny=5\nw=0\n");
    assert_eq!(t.read("/etc/new.conf"), "only\n");
    assert_eq!(t.read("/etc/b.conf"), "keep\nkeep too\n");
    assert_eq!(
        t.read("/etc/c.conf"),
        "top\nbottom\n# BEGIN skyhook tuning\na\nb\n# END skyhook tuning\n"
    );
    // create: false makes a missing file an error.
    let mut h = t.host(ExecMode::Apply);
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
    // Block replaced in place when present (written when the session ends: a batch).
    assert!(fs::ensure_block(&mut h, "/etc/c.conf", "tuning", "c").unwrap());
    h.finish().unwrap();
    assert_eq!(
        t.read("/etc/c.conf"),
        "top\nbottom\n# BEGIN skyhook tuning\nc\n# END skyhook tuning\n"
    );
}

#[test]
fn tree_ops_all_modes() {
    let t = TestHost::new();
    t.file("/srv/src.bin", "payload");
    std::fs::set_permissions(t.p("/srv/src.bin"), std::fs::Permissions::from_mode(0o750)).unwrap();
    t.file("/srv/old/a/b", "x");
    t.file("/srv/lone", "x");
    std::fs::create_dir_all(t.p("/srv/emptydir")).unwrap();
    t.file("/srv/perm", "x");
    all_modes(&t, |h| {
        Ok(vec![
            fs::mkdir(h, "/srv/new/deep", None)?,
            fs::mkdir(h, "/srv/emptydir", Some(0o700))?,
            fs::copy(h, "/srv/src.bin", "/srv/copy.bin", &WriteOptions::default())?,
            fs::remove(h, "/srv/lone")?,
            fs::remove_all(h, "/srv/old")?,
            fs::chmod(h, "/srv/perm", 0o640)?,
            fs::chown(h, "/srv/perm", Some("42"), Some("43"))?,
            fs::symlink(h, "../srv/perm", "/srv/link")?,
        ])
    });
    assert!(t.p("/srv/new/deep").is_dir());
    let mode = |p: &str| std::fs::symlink_metadata(t.p(p)).unwrap().mode() & 0o7777;
    assert_eq!(mode("/srv/emptydir"), 0o700);
    assert_eq!(mode("/srv/new/deep"), 0o755);
    assert_eq!(mode("/srv/copy.bin"), 0o750);
    assert_eq!(t.read("/srv/copy.bin"), "payload");
    assert!(!t.p("/srv/lone").exists() && !t.p("/srv/old").exists());
    assert_eq!(mode("/srv/perm"), 0o640);
    assert_eq!(std::fs::metadata(t.p("/srv/perm")).unwrap().uid(), 42);
    assert_eq!(
        std::fs::read_link(t.p("/srv/link")).unwrap(),
        PathBuf::from("../srv/perm")
    );
    // Retargeting a symlink replaces it; a non-empty directory is not `remove`d.
    let mut h = t.host(ExecMode::Apply);
    assert!(fs::symlink(&mut h, "/srv/copy.bin", "/srv/link").unwrap());
    assert_eq!(
        std::fs::read_link(t.p("/srv/link")).unwrap(),
        PathBuf::from("/srv/copy.bin")
    );
    assert!(matches!(
        fs::remove(&mut h, "/srv/new"),
        Err(HostError::WrongKind { .. })
    ));
}

#[test]
fn queries_and_glob() {
    let t = TestHost::new();
    t.file("/etc/sysctl.d/10-a.conf", "");
    t.file("/etc/sysctl.d/20-b.conf", "");
    t.file("/etc/sysctl.d/README", "");
    t.file("/etc/modprobe.d/x.conf", "");
    t.file("/etc/deep/a/b/c.conf", "");
    let h = t.host(ExecMode::Apply);
    assert_eq!(
        fs::glob(&h, "/etc/sysctl.d/*.conf").unwrap(),
        s(&["/etc/sysctl.d/10-a.conf", "/etc/sysctl.d/20-b.conf"])
    );
    assert_eq!(
        fs::glob(&h, "/etc/*/x.conf").unwrap(),
        s(&["/etc/modprobe.d/x.conf"])
    );
    assert_eq!(
        fs::glob(&h, "/etc/**/*.conf").unwrap(),
        s(&[
            "/etc/deep/a/b/c.conf",
            "/etc/modprobe.d/x.conf",
            "/etc/sysctl.d/10-a.conf",
            "/etc/sysctl.d/20-b.conf"
        ])
    );
    assert!(fs::glob(&h, "/nope/*").unwrap().is_empty());
    assert_eq!(
        fs::list(&h, "/etc/sysctl.d").unwrap(),
        s(&["10-a.conf", "20-b.conf", "README"])
    );
    let st = fs::stat(&h, "/etc/sysctl.d").unwrap();
    assert_eq!(st.kind, "dir");
    assert!(fs::is_dir(&h, "/etc").unwrap() && !fs::is_file(&h, "/etc").unwrap());
    assert_eq!(fs::read_or(&h, "/nope", "dflt").unwrap(), "dflt");
    assert!(matches!(
        fs::read(&h, "/nope"),
        Err(HostError::NotFound { .. })
    ));
    let e = fs::read(&h, "etc/passwd").unwrap_err();
    assert_eq!(e.to_string(), "paths must be absolute: \"etc/passwd\"");
}

#[test]
fn plan_reads_see_planned_effects() {
    let t = TestHost::new();
    t.file("/etc/x.conf", "a\nb\nc\n");
    t.file("/opt/tree/f", "x");
    t.file("/opt/tree/sub/g", "y");
    let before = snapshot(&t);
    let mut h = t.host(ExecMode::Plan);
    assert!(fs::write(&mut h, "/etc/x.conf", "a\nB\nc\n", &Default::default()).unwrap());
    assert_eq!(fs::read(&h, "/etc/x.conf").unwrap(), "a\nB\nc\n");
    assert!(fs::write(&mut h, "/new/dir/f", "n", &Default::default()).unwrap());
    assert!(fs::is_dir(&h, "/new/dir").unwrap());
    assert_eq!(fs::list(&h, "/new/dir").unwrap(), s(&["f"]));
    assert!(fs::remove_all(&mut h, "/opt/tree").unwrap());
    assert!(!fs::exists(&h, "/opt/tree/sub/g").unwrap());
    assert!(fs::list(&h, "/opt").unwrap().is_empty());
    // Recreating inside a removed tree does not resurrect the old content.
    assert!(fs::write(&mut h, "/opt/tree/h", "z", &Default::default()).unwrap());
    assert_eq!(fs::list(&h, "/opt/tree").unwrap(), s(&["h"]));
    assert!(!fs::exists(&h, "/opt/tree/f").unwrap());
    assert!(fs::chmod(&mut h, "/etc/x.conf", 0o600).unwrap());
    assert_eq!(fs::stat(&h, "/etc/x.conf").unwrap().mode, 0o600);
    assert!(!fs::chmod(&mut h, "/etc/x.conf", 0o600).unwrap());
    assert_eq!(fs::glob(&h, "/opt/*/*").unwrap(), s(&["/opt/tree/h"]));
    let rep = h.finish().unwrap();
    assert_eq!(snapshot(&t), before);
    // Exact diff for a small change.
    assert_eq!(rep.changes[0].summary, "update /etc/x.conf");
    assert_eq!(
        rep.changes[0].diff.as_deref(),
        Some("--- a/etc/x.conf\n+++ b/etc/x.conf\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n")
    );
    assert_eq!(rep.summary(), "Plan: 5 to change, 1 unchanged.");
}

#[test]
fn drop_ins_coalesce_one_daemon_reload() {
    let t = TestHost::new();
    t.systemctl_stub();
    let mut h = t.host(ExecMode::Apply);
    for f in ["a.conf", "b.conf", "c.conf"] {
        assert!(service::drop_in(&mut h, "kubelet", f, "[Service]\nX=1\n").unwrap());
    }
    assert!(
        t.calls().is_empty(),
        "reload must be deferred: {:?}",
        t.calls()
    );
    // Runs before the next service call.
    assert!(service::start(&mut h, "kubelet").unwrap());
    let rep = h.finish().unwrap();
    assert_eq!(
        t.calls(),
        s(&[
            "systemctl daemon-reload",
            "systemctl is-active kubelet",
            "systemctl start kubelet"
        ])
    );
    assert_eq!(
        t.read("/etc/systemd/system/kubelet.service.d/b.conf"),
        "[Service]\nX=1\n"
    );
    assert_eq!(rep.summary(), "Apply: 4 changed, 0 unchanged, 1 action.");

    // At the end of the step when no service call follows; none when nothing changed.
    t.clear_calls();
    let mut h = t.host(ExecMode::Apply);
    assert!(service::drop_in(&mut h, "kubelet", "a.conf", "other\n").unwrap());
    assert!(!service::drop_in(&mut h, "kubelet", "b.conf", "[Service]\nX=1\n").unwrap());
    h.finish().unwrap();
    assert_eq!(t.calls(), s(&["systemctl daemon-reload"]));
    t.clear_calls();
    let mut h = t.host(ExecMode::Apply);
    assert!(!service::drop_in(&mut h, "kubelet", "a.conf", "other\n").unwrap());
    assert!(service::remove_drop_in(&mut h, "kubelet", "c.conf").unwrap());
    assert!(!service::remove_drop_in(&mut h, "kubelet", "c.conf").unwrap());
    h.finish().unwrap();
    assert_eq!(t.calls(), s(&["systemctl daemon-reload"]));
}

#[test]
fn failing_step_still_runs_deferred_reload() {
    let t = TestHost::new();
    t.systemctl_stub();
    t.stub("fail", "echo boom >&2; exit 3");
    // Explicit finish on the error path.
    let mut h = t.host(ExecMode::Apply);
    let step = |h: &mut Host, content: &str| -> Result<()> {
        service::drop_in(h, "x", "a.conf", content)?;
        cmd::run(
            h,
            &s(&["fail"]),
            &CommandOptions {
                check: true,
                ..Default::default()
            },
        )?;
        Ok(())
    };
    let e = step(&mut h, "1").unwrap_err();
    assert_eq!(e.to_string(), "command fail failed with exit code 3: boom");
    h.finish().unwrap();
    assert_eq!(t.calls(), s(&["fail ", "systemctl daemon-reload"]));
    // Dropped without finish (an early `?` out of the step): the guard runs it.
    t.clear_calls();
    {
        let mut h = t.host(ExecMode::Apply);
        let _ = step(&mut h, "2");
    }
    assert_eq!(t.calls(), s(&["fail ", "systemctl daemon-reload"]));
}

#[test]
fn services_all_modes() {
    let t = TestHost::new();
    t.systemctl_stub();
    all_modes(&t, |h| {
        Ok(vec![
            service::start(h, "nginx")?,
            service::enable(h, "nginx")?,
            {
                // a planned start answers later queries (a query, not a change)
                assert!(service::is_active(h, "nginx")?);
                service::stop(h, "other")?
            },
        ])
    });
    // Actions are recorded in plan and check, never drift, run every time in apply.
    t.clear_calls();
    let mut h = t.host(ExecMode::Check);
    service::restart(&mut h, "nginx").unwrap();
    service::daemon_reload(&mut h).unwrap();
    let rep = h.finish().unwrap();
    assert!(rep.drift().is_empty());
    assert_eq!(rep.actions.len(), 2);
    assert!(t.calls().is_empty());
    let mut h = t.host(ExecMode::Apply);
    service::restart(&mut h, "nginx").unwrap();
    h.finish().unwrap();
    assert_eq!(t.calls(), s(&["systemctl restart nginx"]));
}

#[test]
fn packages_all_modes_and_plan_never_mutates() {
    let t = TestHost::new();
    t.install_sh();
    std::fs::create_dir_all(t.p("/state")).unwrap();
    t.file("/etc/os-release", "ID=ubuntu\nID_LIKE=debian\n");
    t.file("/state/pkg-curl", "");
    t.stub(
        "dpkg-query",
        r#"for last; do :; done
if [ -e "/state/pkg-$last" ]; then printf 'install ok installed\t1.2-3'; else echo "no packages found matching $last" >&2; exit 1; fi"#,
    );
    t.stub(
        "apt-get",
        r#"inst=0; for a; do if [ $inst = 1 ]; then : > "/state/pkg-$a"; fi; [ "$a" = install ] && inst=1; done; :"#,
    );
    let h = t.host(ExecMode::Apply);
    assert_eq!(pkg::manager(&h).unwrap().map(|m| m.name()), Some("apt"));
    assert_eq!(pkg::version(&h, "curl").unwrap().as_deref(), Some("1.2-3"));
    assert_eq!(pkg::version(&h, "jq").unwrap(), None);
    drop(h);
    t.clear_calls();
    let mut h = t.host(ExecMode::Plan);
    assert!(pkg::install(&mut h, &s(&["curl", "jq", "jq"]), true).unwrap());
    assert!(pkg::installed(&h, "jq").unwrap());
    assert!(
        t.calls().iter().all(|c| c.starts_with("dpkg-query")),
        "plan ran {:?}",
        t.calls()
    );
    let rep = h.finish().unwrap();
    assert_eq!(
        rep.changes[0].summary,
        "install packages jq (apt, after index update)"
    );
    all_modes(&t, |h| {
        Ok(vec![pkg::install(h, &s(&["curl", "jq"]), false)?])
    });
    assert!(
        t.calls()
            .iter()
            .any(|c| c == "apt-get -y -o DPkg::Lock::Timeout=300 install jq"),
        "{:?}",
        t.calls()
    );
}

#[test]
fn tuning_all_modes() {
    let t = TestHost::new();
    t.file("/etc/os-release", "ID=debian\n");
    t.file("/proc/sys/net/ipv4/ip_local_port_range", "32768\t60999\n");
    t.file("/proc/sys/vm/swappiness", "60\n");
    let h = t.host(ExecMode::Apply);
    assert_eq!(
        sysctl::get(&h, "net.ipv4.ip_local_port_range")
            .unwrap()
            .as_deref(),
        Some("32768\t60999")
    );
    assert_eq!(sysctl::get(&h, "no.such.key").unwrap(), None);
    drop(h);
    all_modes(&t, |h| {
        Ok(vec![
            sysctl::set(h, "net.ipv4.ip_local_port_range", "32768 60999")?,
            sysctl::set(h, "vm.swappiness", "10")?,
            sysctl::persist(
                h,
                "90-skyhook.conf",
                &[("vm.swappiness".into(), "10".into())],
            )?,
            ulimit::persist(
                h,
                "90-nofile.conf",
                &[ulimit::LimitEntry {
                    domain: "*".into(),
                    kind: "soft".into(),
                    item: "nofile".into(),
                    value: "65536".into(),
                }],
            )?,
        ])
    });
    assert_eq!(t.read("/proc/sys/vm/swappiness"), "10\n");
    assert_eq!(
        t.read("/etc/sysctl.d/90-skyhook.conf"),
        "vm.swappiness = 10\n"
    );
    assert_eq!(
        t.read("/etc/security/limits.d/90-nofile.conf"),
        "* soft nofile 65536\n"
    );
    let mut h = t.host(ExecMode::Apply);
    let e = sysctl::set(&mut h, "no.such.key", "1").unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown sysctl key \"no.such.key\" (no /proc/sys/no/such/key)"
    );
}

#[test]
fn grub_debian_update_grub_once() {
    let t = TestHost::new();
    t.install_sh();
    t.file("/etc/os-release", "ID=ubuntu\n");
    t.stub("update-grub", ":");
    all_modes(&t, |h| {
        Ok(vec![
            grub::set_cmdline(h, "tuning", &s(&["hugepages=16", "iommu=pt"]))?,
            grub::set_cmdline(h, "kdump", &s(&["crashkernel=512M"]))?,
        ])
    });
    assert_eq!(
        t.read("/etc/default/grub.d/tuning.cfg"),
        "GRUB_CMDLINE_LINUX_DEFAULT=\"${GRUB_CMDLINE_LINUX_DEFAULT} hugepages=16 iommu=pt\"\n"
    );
    // One update-grub for the apply that changed both (the second apply changed nothing).
    assert_eq!(t.calls(), s(&["update-grub "]));
}

#[test]
fn grub_rhel_grubby_args() {
    let t = TestHost::new();
    t.install_sh();
    t.file(
        "/etc/os-release",
        "ID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\n",
    );
    t.stub("grubby", ":");
    let mut h = t.host(ExecMode::Apply);
    assert!(grub::set_cmdline(&mut h, "tuning", &s(&["a=1", "b"])).unwrap());
    h.finish().unwrap();
    assert_eq!(t.calls(), s(&["grubby --update-kernel=ALL --args=a=1 b"]));
    t.clear_calls();
    let mut h = t.host(ExecMode::Apply);
    assert!(grub::set_cmdline(&mut h, "tuning", &s(&["a=2", "b"])).unwrap());
    h.finish().unwrap();
    assert_eq!(
        t.calls(),
        s(&[
            "grubby --update-kernel=ALL --args=a=2 b",
            "grubby --update-kernel=ALL --remove-args=a=1"
        ])
    );
    t.clear_calls();
    let mut h = t.host(ExecMode::Apply);
    assert!(grub::remove(&mut h, "tuning").unwrap());
    assert!(!grub::remove(&mut h, "tuning").unwrap());
    h.finish().unwrap();
    assert_eq!(
        t.calls(),
        s(&["grubby --update-kernel=ALL --remove-args=a=2 b"])
    );
}

#[test]
fn commands_run_chrooted_and_are_planned() {
    let t = TestHost::new();
    t.install_sh();
    t.file("/marker", "inside the root\n");
    let mut h = t.host_with(ExecMode::Apply, |o| {
        o.env.push(("STEP_VAR".into(), "v1".into()));
    });
    let out = cmd::run(
        &mut h,
        &s(&[
            "/bin/sh",
            "-c",
            "read l; echo \"$l $STEP_VAR $EXTRA $(pwd)\"; read m < /marker; echo \"$m\" >&2; exit 4",
        ]),
        &CommandOptions {
            input: Some(b"hello\n".to_vec()),
            env: vec![("EXTRA".into(), "e".into())],
            cwd: Some("/etc".into()),
            ..Default::default()
        },
    );
    // /etc does not exist in the root yet: chdir fails, the spawn reports it.
    assert!(out.is_err());
    std::fs::create_dir_all(t.p("/etc")).unwrap();
    let out = cmd::run(
        &mut h,
        &s(&["/bin/sh", "-c", "read l; echo \"$l $STEP_VAR $EXTRA $(pwd)\"; read m < /marker; echo \"$m\" >&2; exit 4"]),
        &CommandOptions {
            input: Some(b"hello\n".to_vec()),
            env: vec![("EXTRA".into(), "e".into())],
            cwd: Some("/etc".into()),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        (
            out.code,
            out.stdout.as_str(),
            out.stderr.as_str(),
            out.ok,
            out.planned
        ),
        (4, "hello v1 e /etc\n", "inside the root\n", false, false)
    );
    let e = cmd::run(&mut h, &s(&["no-such-program"]), &CommandOptions::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "failed to run no-such-program: program not found"
    );
    let e = cmd::sh(&mut h, "exit 1", &CommandOptions::default()).unwrap_err();
    assert!(matches!(e, HostError::ProgramNotFound { .. }), "{e}"); // no bash in the root
    let e = cmd::run(
        &mut h,
        &s(&["/bin/sh", "-c", "while :; do :; done"]),
        &CommandOptions {
            timeout: Some(std::time::Duration::from_millis(200)),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(matches!(e, HostError::Timeout { .. }), "{e}");
    h.finish().unwrap();

    // Plan: not executed, planned result, recorded as an action; read_only runs.
    let before = snapshot(&t);
    let mut h = t.host(ExecMode::Plan);
    let out = cmd::run(
        &mut h,
        &s(&["/bin/sh", "-c", "echo x > /created"]),
        &Default::default(),
    )
    .unwrap();
    assert_eq!(out, cmd::CmdOutput::planned());
    let q = cmd::query(
        &mut h,
        &s(&["/bin/sh", "-c", "echo q"]),
        &Default::default(),
    )
    .unwrap();
    assert_eq!(q.stdout, "q\n");
    let rep = h.finish().unwrap();
    assert_eq!(snapshot(&t), before);
    assert_eq!(rep.actions.len(), 1);
    assert_eq!(rep.actions[0].summary, "/bin/sh -c 'echo x > /created'");
    assert_eq!(rep.summary(), "Plan: 0 to change, 0 unchanged, 1 action.");
}

#[test]
fn interrupts_are_collected() {
    let t = TestHost::new();
    let mut h = t.host(ExecMode::Check);
    interrupt::reboot(&mut h).unwrap();
    interrupt::restart_services(&mut h, &s(&["containerd"])).unwrap();
    let rep = h.finish().unwrap();
    assert!(rep.drift().is_empty());
    assert_eq!(rep.interrupts.len(), 2);
    assert_eq!(
        rep.interrupts[1],
        crate::host::effects::effect::InterruptRequest::RestartServices {
            services: s(&["containerd"])
        }
    );
}

#[test]
fn write_preserves_xattrs() {
    let t = TestHost::new();
    t.file("/etc/labelled", "old");
    let p = std::ffi::CString::new(t.p("/etc/labelled").to_str().unwrap()).unwrap();
    let name = c"trusted.skyhook-test";
    // SAFETY: valid C strings and buffer.
    let r = unsafe { libc::setxattr(p.as_ptr(), name.as_ptr(), b"lbl".as_ptr().cast(), 3, 0) };
    if r != 0 {
        eprintln!(
            "SKIPPED write_preserves_xattrs: setxattr unsupported here: {}",
            std::io::Error::last_os_error()
        );
        return;
    }
    let mut h = t.host(ExecMode::Apply);
    assert!(fs::write(&mut h, "/etc/labelled", "new", &Default::default()).unwrap());
    let mut buf = [0u8; 16];
    // SAFETY: valid C strings and buffer.
    let n = unsafe { libc::getxattr(p.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), 16) };
    assert_eq!(n, 3, "xattr lost");
    assert_eq!(&buf[..3], b"lbl");
}

// ---- confinement corpus: a sentinel directory outside the root is never touched ----

struct Escape {
    t: TestHost,
    outside: tempfile::TempDir,
}

impl Escape {
    fn new() -> Self {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("victim"), "original").unwrap();
        Escape {
            t: TestHost::new(),
            outside,
        }
    }

    fn sentinel(&self) -> PathBuf {
        self.outside.path().to_path_buf()
    }

    fn assert_untouched(&self) {
        let names: Vec<_> = std::fs::read_dir(self.outside.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("victim")]);
        assert_eq!(
            std::fs::read_to_string(self.outside.path().join("victim")).unwrap(),
            "original"
        );
    }

    /// Every fs mutation through `path` (a host path whose resolution tries to escape).
    fn attack(&self, path: &str) {
        let mut h = self.t.host(ExecMode::Apply);
        let o = WriteOptions::default();
        let _ = fs::write(&mut h, path, "pwned", &o);
        let _ = fs::append(&mut h, path, "pwned");
        let _ = fs::ensure_line(&mut h, path, "pwned", &LineOptions::default());
        let _ = fs::ensure_block(&mut h, path, "x", "pwned");
        let _ = fs::chmod(&mut h, path, 0o777);
        let _ = fs::chown(&mut h, path, Some("4242"), None);
        let _ = fs::copy(&mut h, "/etc/hostname", path, &o);
        let _ = fs::mkdir(&mut h, &format!("{path}/sub"), None);
        let _ = fs::symlink(&mut h, "x", &format!("{path}/l"));
        let _ = fs::remove_line(&mut h, path, "original");
        self.assert_untouched();
        let victim = std::fs::metadata(self.outside.path().join("victim")).unwrap();
        assert_ne!(victim.mode() & 0o777, 0o777);
        assert_ne!(victim.uid(), 4242);
        let _ = fs::remove(&mut h, path);
        let _ = fs::remove_all(&mut h, path);
        self.assert_untouched();
        // Reads never see outside content either.
        assert_ne!(fs::read_or(&h, path, "").unwrap_or_default(), "original");
        drop(h);
    }
}

#[test]
fn confinement_corpus() {
    let e = Escape::new();
    e.t.file("/etc/hostname", "node\n");
    let out = e.sentinel();
    let victim = out.join("victim");
    let r = &e.t.root;
    std::fs::create_dir_all(r.join("etc")).unwrap();
    // absolute symlink to the victim
    std::os::unix::fs::symlink(&victim, r.join("etc/abs")).unwrap();
    // climbing relative symlink
    let depth = r.components().count() + 2;
    let climb = format!(
        "{}{}",
        "../".repeat(depth),
        victim.strip_prefix("/").unwrap().display()
    );
    std::os::unix::fs::symlink(&climb, r.join("etc/climb")).unwrap();
    // symlinked intermediate directory
    std::os::unix::fs::symlink(&out, r.join("etc/dirlink")).unwrap();
    // symlink to a file that does not exist yet (outside)
    std::os::unix::fs::symlink(out.join("future"), r.join("etc/future")).unwrap();
    // dangling symlink climbing out
    std::os::unix::fs::symlink(format!("{climb}-gone"), r.join("etc/dangling")).unwrap();
    // A write through the absolute link lands inside the root.
    let mut h = e.t.host(ExecMode::Apply);
    assert!(fs::write(&mut h, "/etc/abs", "inside", &Default::default()).unwrap());
    drop(h);
    let inside = r.join(victim.strip_prefix("/").unwrap());
    assert_eq!(std::fs::read_to_string(&inside).unwrap(), "inside");
    e.assert_untouched();
    for p in [
        "/etc/abs".to_string(),
        "/etc/climb".to_string(),
        "/etc/dirlink/victim".to_string(),
        "/etc/dirlink/newfile".to_string(),
        "/etc/future".to_string(),
        "/etc/dangling".to_string(),
        format!("/../../../../..{}", victim.display()),
        format!("/etc/../..{}", victim.display()),
    ] {
        e.attack(&p);
    }
}

#[test]
fn confinement_race_dir_swapped_for_symlink() {
    let e = Escape::new();
    let r = e.t.root.clone();
    std::fs::create_dir_all(r.join("data")).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flipper = {
        let stop = stop.clone();
        let (r, out) = (r.clone(), e.sentinel());
        std::thread::spawn(move || {
            let mut flips = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // data: dir -> symlink to the sentinel -> dir
                let _ = std::fs::rename(r.join("data"), r.join("data.real"));
                let _ = std::os::unix::fs::symlink(&out, r.join("data"));
                let _ = std::fs::remove_file(r.join("data"));
                let _ = std::fs::rename(r.join("data.real"), r.join("data"));
                flips += 1;
            }
            flips
        })
    };
    let mut h = e.t.host(ExecMode::Apply);
    for i in 0..400 {
        let _ = fs::write(
            &mut h,
            "/data/victim",
            &format!("pwned {i}"),
            &Default::default(),
        );
        let _ = fs::write(
            &mut h,
            &format!("/data/n{}", i % 7),
            "pwned",
            &Default::default(),
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    assert!(flips > 0);
    e.assert_untouched();
}

#[test]
fn host_is_send_for_the_binding_layer() {
    fn send<T: Send + 'static>() {}
    send::<Host>();
    send::<crate::host::Report>();
    send::<crate::host::secrets::Redactor>();
}

/// The records of deferred work in `t`'s root: (daemon-reload record, grub record).
fn records(t: &TestHost) -> (Option<String>, Option<String>) {
    let r = |f: &str| std::fs::read_to_string(t.p(&format!("/var/lib/skyhook/.deferred/{f}"))).ok();
    (r("daemon-reload.json"), r("grub.json"))
}

#[test]
fn failed_update_grub_is_recorded_planned_and_rerun_once() {
    let t = TestHost::new();
    t.install_sh();
    t.file("/etc/os-release", "ID=ubuntu\n");
    let args = s(&["a=1"]);
    // No update-grub on the host: the drop-in is written, the regeneration fails.
    let mut h = t.host(ExecMode::Apply);
    assert!(grub::set_cmdline(&mut h, "99-x", &args).unwrap());
    let (rep, res) = h.finish_with_report();
    assert_eq!(
        res.unwrap_err().to_string(),
        "failed to run update-grub: program not found"
    );
    assert!(rep.actions.is_empty(), "{rep:?}");
    assert_eq!(
        records(&t),
        (
            None,
            Some(
                "{\"action\":\"grub_update\",\"regenerate\":true,\"add\":[],\"remove\":[]}\n"
                    .into()
            )
        )
    );
    // A plan and a check show the pending regeneration as an action, not as drift, and
    // leave the root (and the record) alone.
    let before = snapshot(&t);
    for mode in [ExecMode::Plan, ExecMode::Check] {
        let mut h = t.host(mode);
        assert!(!grub::set_cmdline(&mut h, "99-x", &args).unwrap());
        let rep = h.finish().unwrap();
        assert!(rep.changes.is_empty() && rep.drift().is_empty());
        let actions: Vec<&str> = rep.action_summaries();
        assert_eq!(actions, ["update-grub"]);
    }
    assert_eq!(snapshot(&t), before);
    // The next apply runs it exactly once, although nothing changed, and drops the record.
    t.stub("update-grub", ":");
    let mut h = t.host(ExecMode::Apply);
    assert!(!grub::set_cmdline(&mut h, "99-x", &args).unwrap());
    let rep = h.finish().unwrap();
    assert_eq!(t.calls(), s(&["update-grub "]));
    assert_eq!(rep.summary(), "Apply: 0 changed, 1 unchanged, 1 action.");
    assert_eq!(records(&t), (None, None));
    t.clear_calls();
    t.host(ExecMode::Apply).finish().unwrap();
    assert!(t.calls().is_empty());
}

#[test]
fn failed_grubby_args_are_recorded_and_merged() {
    let t = TestHost::new();
    t.install_sh();
    t.file("/etc/os-release", "ID=fedora\n");
    t.stub("grubby", "[ -e /grubby-ok ]");
    let mut h = t.host(ExecMode::Apply);
    assert!(grub::set_cmdline(&mut h, "x", &s(&["a=1", "b"])).unwrap());
    assert!(h.finish().is_err());
    assert_eq!(
        records(&t).1.as_deref(),
        Some(
            "{\"action\":\"grub_update\",\"regenerate\":false,\"add\":[\"a=1\",\"b\"],\"remove\":[]}\n"
        )
    );
    // Failing again with more work: the record holds the merged work.
    let mut h = t.host(ExecMode::Apply);
    assert!(grub::set_cmdline(&mut h, "x", &s(&["a=2", "b"])).unwrap());
    assert!(h.finish().is_err());
    assert_eq!(
        records(&t).1.as_deref(),
        Some(
            "{\"action\":\"grub_update\",\"regenerate\":false,\"add\":[\"b\",\"a=2\"],\"remove\":[\"a=1\"]}\n"
        )
    );
    t.clear_calls();
    t.file("/grubby-ok", "");
    t.host(ExecMode::Apply).finish().unwrap();
    assert_eq!(
        t.calls(),
        s(&[
            "grubby --update-kernel=ALL --args=b a=2",
            "grubby --update-kernel=ALL --remove-args=a=1"
        ])
    );
    assert_eq!(records(&t), (None, None));
}

#[test]
fn failed_daemon_reload_is_recorded_and_rerun_once() {
    let t = TestHost::new();
    t.install_sh();
    t.stub(
        "systemctl",
        r#"if [ "$1" = daemon-reload ] && [ -e /reload-fails ]; then echo nope >&2; exit 1; fi"#,
    );
    t.file("/reload-fails", "");
    let mut h = t.host(ExecMode::Apply);
    assert!(service::drop_in(&mut h, "x", "a.conf", "[Service]\n").unwrap());
    assert_eq!(
        h.finish().unwrap_err().to_string(),
        "command systemctl daemon-reload failed with exit code 1: nope"
    );
    assert_eq!(
        records(&t).0.as_deref(),
        Some("{\"action\":\"daemon_reload\"}\n")
    );
    // Still failing: still recorded (a recorded reload that fails again stays).
    let mut h = t.host(ExecMode::Apply);
    assert!(service::is_active(&mut h, "x").is_err());
    h.finish().unwrap();
    assert!(records(&t).0.is_some());
    std::fs::remove_file(t.p("/reload-fails")).unwrap();
    t.clear_calls();
    // Rerun: nothing changes, the reload runs once, before the first service call.
    let mut h = t.host(ExecMode::Apply);
    assert!(!service::drop_in(&mut h, "x", "a.conf", "[Service]\n").unwrap());
    service::is_active(&mut h, "x").unwrap();
    let rep = h.finish().unwrap();
    assert_eq!(
        t.calls(),
        s(&["systemctl daemon-reload", "systemctl is-active x"])
    );
    assert_eq!(rep.actions.len(), 1);
    assert_eq!(records(&t), (None, None));
}

#[test]
fn report_lists_deferred_actions_when_later_deferred_work_fails() {
    let t = TestHost::new();
    t.systemctl_stub();
    t.file("/etc/os-release", "ID=ubuntu\n");
    let mut h = t.host(ExecMode::Apply);
    assert!(service::drop_in(&mut h, "x", "a.conf", "1\n").unwrap());
    service::restart(&mut h, "x").unwrap();
    assert!(service::drop_in(&mut h, "x", "a.conf", "2\n").unwrap());
    assert!(grub::set_cmdline(&mut h, "g", &s(&["a=1"])).unwrap());
    let (rep, res) = h.finish_with_report();
    assert!(res.is_err());
    assert_eq!(
        t.calls(),
        s(&[
            "systemctl daemon-reload",
            "systemctl restart x",
            "systemctl daemon-reload"
        ])
    );
    let ran: Vec<&str> = rep.action_summaries();
    assert_eq!(
        ran,
        [
            "systemctl daemon-reload",
            "systemctl restart x",
            "systemctl daemon-reload"
        ]
    );
}

#[test]
fn plan_refuses_what_apply_refuses() {
    let t = TestHost::new();
    std::fs::create_dir_all(t.p("/etc")).unwrap();
    std::os::unix::fs::symlink("/srv/data", t.p("/etc/data")).unwrap();
    t.file("/etc/plain", "x\n");
    let before = snapshot(&t);
    for mode in [ExecMode::Plan, ExecMode::Check, ExecMode::Apply] {
        let mut h = t.host(mode);
        let e = fs::write(&mut h, "/etc/data/x.conf", "a\n", &WriteOptions::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot create /etc/data/x.conf: /etc/data is a dangling symlink (its target /srv/data does not exist)",
            "{mode:?}"
        );
        let e = fs::mkdir(&mut h, "/etc/data", None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot create /etc/data: /etc/data is a dangling symlink (its target /srv/data does not exist)"
        );
        let e = fs::mkdir(&mut h, "/etc/plain/d/e", None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot create /etc/plain/d/e: /etc/plain exists and is not a directory"
        );
        let e = fs::symlink(&mut h, "/x", "/etc/plain/l").unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot create /etc/plain/l: /etc/plain exists and is not a directory"
        );
        for p in ["/", "/etc/.."] {
            let e = fs::remove_all(&mut h, p).unwrap_err();
            assert_eq!(e.to_string(), "invalid path argument: remove all path is /");
        }
        let e = fs::remove(&mut h, "/").unwrap_err();
        assert!(e.to_string().contains("non-empty"), "{e}");
        // A file planned in the session blocks paths beneath it like a real one.
        fs::write(&mut h, "/etc/new", "x\n", &WriteOptions::default()).unwrap();
        let e = fs::write(&mut h, "/etc/new/y", "a\n", &WriteOptions::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot create /etc/new/y: /etc/new exists and is not a directory"
        );
        // A dangling symlink as the file itself is fine: its target is written.
        assert!(fs::write(&mut h, "/etc/data", "d\n", &WriteOptions::default()).unwrap());
        h.finish().unwrap();
        if mode != ExecMode::Apply {
            assert_eq!(snapshot(&t), before, "{mode:?} changed the root");
        }
    }
    assert_eq!(t.read("/srv/data"), "d\n");
}

// ---- streamed commands ----

/// Records the chunks of a streamed command. When `release` is set, the first stdout chunk
/// equal to its trigger makes a helper thread open its fifo (inside the root) for writing and
/// write `go\n`: the command under test waits for that, so it can only finish when its output
/// reached the sink while it was still running.
#[derive(Default)]
struct Recorder {
    out: std::sync::Mutex<Vec<Vec<u8>>>,
    err: std::sync::Mutex<Vec<Vec<u8>>>,
    release: Option<(&'static [u8], PathBuf)>,
}

impl Recorder {
    fn stream(self: &std::sync::Arc<Self>) -> Option<cmd::StreamTo> {
        Some(cmd::StreamTo(self.clone()))
    }
    fn out(&self) -> Vec<Vec<u8>> {
        self.out.lock().unwrap().clone()
    }
    fn err(&self) -> Vec<Vec<u8>> {
        self.err.lock().unwrap().clone()
    }
}

impl cmd::OutputSink for Recorder {
    fn stdout(&self, bytes: &[u8]) {
        if let Some((trigger, fifo)) = &self.release
            && bytes == *trigger
        {
            let fifo = fifo.clone();
            // Not joined: when streaming is broken the command is gone by now and the open
            // would block for ever; the test fails on the command's timeout instead.
            std::thread::spawn(move || {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
                f.write_all(b"go\n").unwrap();
            });
        }
        self.out.lock().unwrap().push(bytes.to_vec());
    }
    fn stderr(&self, bytes: &[u8]) {
        self.err.lock().unwrap().push(bytes.to_vec());
    }
}

fn chunks(v: &[&str]) -> Vec<Vec<u8>> {
    v.iter().map(|x| x.as_bytes().to_vec()).collect()
}

#[test]
fn streamed_command_output_reaches_the_sink_while_it_runs() {
    let t = TestHost::new();
    t.install_sh();
    nix::unistd::mkfifo(
        &t.p("/fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let rec = std::sync::Arc::new(Recorder {
        release: Some((b"one\n", t.p("/fifo"))),
        ..Default::default()
    });
    let mut h = t.host(ExecMode::Apply);
    let out = cmd::run(
        &mut h,
        &s(&[
            "/bin/sh",
            "-c",
            "echo one; echo err >&2; read l < /fifo; echo \"two $l\"",
        ]),
        &CommandOptions {
            stream: rec.stream(),
            // Bounds the test: without live streaming the command waits on the fifo until
            // this kills it.
            timeout: Some(std::time::Duration::from_secs(20)),
            ..Default::default()
        },
    )
    .expect("the command finishes only if `one` was streamed while it ran");
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (0, "one\ntwo go\n", "err\n")
    );
    // The command blocked after `one`, so that chunk came alone.
    assert_eq!(rec.out(), chunks(&["one\n", "two go\n"]));
    assert_eq!(rec.err(), chunks(&["err\n"]));
    h.finish().unwrap();
}

#[test]
fn streamed_command_keeps_the_last_64k_and_relays_everything() {
    let t = TestHost::new();
    t.install_sh();
    // Both pipes well beyond a pipe buffer (64 KiB) and twice the capture limit.
    let script = "i=0; while [ $i -lt 12000 ]; do echo \"out line $i\"; \
                  echo \"err line $i\" >&2; i=$((i+1)); done";
    let full =
        |prefix: &str| -> String { (0..12000).map(|i| format!("{prefix} line {i}\n")).collect() };
    let (full_out, full_err) = (full("out"), full("err"));
    assert!(full_out.len() > 2 * cmd::STREAM_CAPTURE_LIMIT);
    let last = |s: &str| s[s.len() - cmd::STREAM_CAPTURE_LIMIT..].to_string();
    let argv = s(&["/bin/sh", "-c", script]);
    let mut h = t.host(ExecMode::Apply);

    let rec = std::sync::Arc::new(Recorder::default());
    let out = cmd::run(
        &mut h,
        &argv,
        &CommandOptions {
            stream: rec.stream(),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(out.code, 0);
    assert_eq!(out.stdout.len(), 65536);
    assert_eq!(out.stdout, last(&full_out));
    assert_eq!(out.stderr, last(&full_err));
    assert_eq!(rec.out().concat(), full_out.as_bytes());
    assert_eq!(rec.err().concat(), full_err.as_bytes());

    // Without `stream`, everything is captured.
    let out = cmd::run(&mut h, &argv, &CommandOptions::default()).unwrap();
    assert_eq!((out.stdout, out.stderr), (full_out, full_err));
    h.finish().unwrap();
}

#[test]
fn streamed_command_timeout_kills_the_group_after_relaying() {
    let t = TestHost::new();
    t.install_sh();
    let rec = std::sync::Arc::new(Recorder::default());
    let mut h = t.host(ExecMode::Apply);
    let e = cmd::run(
        &mut h,
        &s(&[
            "/bin/sh",
            "-c",
            "echo start; /bin/sh -c 'while :; do :; done'",
        ]),
        &CommandOptions {
            stream: rec.stream(),
            timeout: Some(std::time::Duration::from_millis(200)),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(matches!(e, HostError::Timeout { .. }), "{e}");
    assert_eq!(rec.out(), chunks(&["start\n"]));
    h.finish().unwrap();
}

#[test]
fn streamed_command_in_plan_and_check_is_not_run_and_streams_nothing() {
    let t = TestHost::new();
    t.install_sh();
    for mode in [ExecMode::Plan, ExecMode::Check] {
        let rec = std::sync::Arc::new(Recorder::default());
        let mut h = t.host(mode);
        let opts = CommandOptions {
            stream: rec.stream(),
            ..Default::default()
        };
        // Not run, so the missing /bin/bash does not matter.
        let out = cmd::sh(&mut h, "echo x; echo x > /created", &opts).unwrap();
        assert_eq!(out, cmd::CmdOutput::planned());
        let out = cmd::run(
            &mut h,
            &s(&["/bin/sh", "-c", "echo x; echo y >&2; echo x > /created"]),
            &opts,
        )
        .unwrap();
        assert_eq!(out, cmd::CmdOutput::planned());
        assert!(rec.out().is_empty() && rec.err().is_empty());
        assert!(!t.p("/created").exists());
        // A query runs, and streams, in every mode.
        let q = cmd::query(&mut h, &s(&["/bin/sh", "-c", "echo q"]), &opts).unwrap();
        assert_eq!(q.stdout, "q\n");
        assert_eq!(rec.out(), chunks(&["q\n"]));
        h.finish().unwrap();
    }
}

/// Package files are read without blocking and with a size cap: a FIFO, a character device
/// and a 2 GiB sparse file in place of config.json are each a prompt, named error.
#[test]
fn read_regular_refuses_fifos_devices_and_huge_files() {
    use crate::host::root::{HostRoot, MAX_PACKAGE_FILE_BYTES};
    let d = tempfile::tempdir().unwrap();
    let root = HostRoot::open(d.path()).unwrap();
    std::fs::write(d.path().join("ok.json"), b"{}").unwrap();
    assert_eq!(
        root.read_regular(Path::new("/ok.json"), MAX_PACKAGE_FILE_BYTES)
            .unwrap(),
        b"{}"
    );
    nix::unistd::mkfifo(
        &d.path().join("fifo.json"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let e = root
        .read_regular(Path::new("/fifo.json"), MAX_PACKAGE_FILE_BYTES)
        .unwrap_err();
    assert_eq!(
        crate::chain::render(&e),
        format!(
            "failed to read /fifo.json under host root {}: not a regular file (a fifo)",
            d.path().display()
        )
    );
    // A character device like /dev/zero (made inside the root: paths resolve in it).
    if nix::sys::stat::mknod(
        &d.path().join("zero"),
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(1, 5),
    )
    .is_ok()
    {
        let e = root
            .read_regular(Path::new("/zero"), MAX_PACKAGE_FILE_BYTES)
            .unwrap_err();
        assert!(
            crate::chain::render(&e).ends_with("not a regular file (a character device)"),
            "{e}"
        );
    }
    let big = std::fs::File::create(d.path().join("big.json")).unwrap();
    big.set_len(2 << 30).unwrap();
    let e = root
        .read_regular(Path::new("/big.json"), MAX_PACKAGE_FILE_BYTES)
        .unwrap_err();
    assert!(
        crate::chain::render(&e)
            .ends_with("2147483648 bytes, more than the limit of 16777216 bytes"),
        "{e}"
    );
}

/// Temporaries left by a dead writer never block a write (not even one named as ours would
/// be, by a dead process that had our pid: no `File exists`) and are removed the first time
/// the directory is written; a live writer's temporary is left alone.
#[test]
fn stale_temporaries_are_removed_and_never_collide() {
    use crate::host::root::{HostRoot, TMP_PREFIX};
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("flags");
    std::fs::create_dir_all(&dir).unwrap();
    let me = std::process::id();
    let old_shape_ours = format!("{TMP_PREFIX}{me}-0");
    let dead = format!("{TMP_PREFIX}4000000-77-0-00000000000000ff");
    // PID 1 is alive; its real start time is what /proc says.
    let stat = std::fs::read_to_string("/proc/1/stat").unwrap();
    let start = stat[stat.rfind(')').unwrap() + 2..]
        .split(' ')
        .nth(19)
        .unwrap()
        .to_string();
    let live = format!("{TMP_PREFIX}1-{start}-3-00000000000000aa");
    let reused_pid = format!(
        "{TMP_PREFIX}1-{}-3-00000000000000bb",
        start.parse::<u64>().unwrap() + 1
    );
    for n in [&old_shape_ours, &dead, &live, &reused_pid] {
        std::fs::write(dir.join(n), b"partial").unwrap();
    }
    let opened = HostRoot::open(d.path()).unwrap();
    let root = crate::host::root::AgentFiles::new(&opened);
    root.write_atomic(Path::new("/flags/step_flag"), b"ok", None)
        .unwrap();
    assert_eq!(std::fs::read(dir.join("step_flag")).unwrap(), b"ok");
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, [live.clone(), "step_flag".to_string()]);
    // Many writes in a row leave no temporary behind.
    for i in 0..50 {
        root.write_atomic(
            Path::new("/flags/step_flag"),
            format!("{i}").as_bytes(),
            None,
        )
        .unwrap();
    }
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
}

/// A session that dies without running its deferred work (SIGKILL, OOM, power loss): no
/// `finish`, no `Drop`.
fn crash(h: Host) {
    std::mem::forget(h);
}

#[test]
fn daemon_reload_is_recorded_before_the_drop_in_and_survives_a_crash() {
    let t = TestHost::new();
    t.systemctl_stub();
    let mut h = t.host(ExecMode::Apply);
    assert!(service::drop_in(&mut h, "x", "a.conf", "[Service]\n").unwrap());
    // Written ahead: the record is there before any reload ran.
    assert!(t.calls().is_empty());
    assert_eq!(
        records(&t).0.as_deref(),
        Some("{\"action\":\"daemon_reload\"}\n")
    );
    // A second drop-in of the same session (the record is rewritten, the reload coalesced).
    assert!(service::drop_in(&mut h, "x", "b.conf", "[Service]\n").unwrap());
    crash(h);
    assert!(t.calls().is_empty());
    // Plan and check after the crash: an action, never drift; nothing written.
    let before = snapshot(&t);
    for mode in [ExecMode::Plan, ExecMode::Check] {
        let mut h = t.host(mode);
        assert!(!service::drop_in(&mut h, "x", "a.conf", "[Service]\n").unwrap());
        let rep = h.finish().unwrap();
        assert!(rep.changes.is_empty() && rep.drift().is_empty(), "{rep:?}");
        let actions: Vec<&str> = rep.action_summaries();
        assert_eq!(actions, ["systemctl daemon-reload"]);
    }
    assert_eq!(snapshot(&t), before);
    // The rerun changes nothing, runs the reload exactly once and removes the record.
    let mut h = t.host(ExecMode::Apply);
    assert!(!service::drop_in(&mut h, "x", "a.conf", "[Service]\n").unwrap());
    let rep = h.finish().unwrap();
    assert_eq!(t.calls(), s(&["systemctl daemon-reload"]));
    assert_eq!(rep.summary(), "Apply: 0 changed, 1 unchanged, 1 action.");
    assert_eq!(records(&t), (None, None));
    t.clear_calls();
    t.host(ExecMode::Apply).finish().unwrap();
    assert!(t.calls().is_empty());

    // A reload that succeeded removes the record; a later drop-in writes it again.
    let mut h = t.host(ExecMode::Apply);
    assert!(service::remove_drop_in(&mut h, "x", "b.conf").unwrap());
    assert!(records(&t).0.is_some(), "recorded before the removal");
    service::daemon_reload(&mut h).unwrap();
    assert_eq!(records(&t), (None, None));
    assert!(service::drop_in(&mut h, "x", "a.conf", "changed\n").unwrap());
    assert!(records(&t).0.is_some());
    h.finish().unwrap();
    assert_eq!(records(&t), (None, None));
}

#[test]
fn a_drop_in_is_not_written_when_its_record_cannot_be() {
    let t = TestHost::new();
    t.systemctl_stub();
    t.file("/etc/os-release", "ID=ubuntu\n");
    // The records' directory is a file: the record cannot be written, so neither is the
    // drop-in (the write-ahead order), and no work is pending.
    t.file("/var/lib/skyhook/.deferred", "not a directory");
    let mut h = t.host(ExecMode::Apply);
    assert!(service::drop_in(&mut h, "x", "a.conf", "[Service]\n").is_err());
    assert!(grub::set_cmdline(&mut h, "g", &s(&["a=1"])).is_err());
    h.finish().unwrap();
    assert!(!t.p("/etc/systemd/system/x.service.d/a.conf").exists());
    assert!(!t.p("/etc/default/grub.d/g.cfg").exists());
    assert!(t.calls().is_empty(), "{:?}", t.calls());
}

#[test]
fn grub_work_is_recorded_before_the_drop_in_and_survives_a_crash() {
    let t = TestHost::new();
    t.install_sh();
    t.file("/etc/os-release", "ID=ubuntu\n");
    t.stub("update-grub", ":");
    let mut h = t.host(ExecMode::Apply);
    assert!(grub::set_cmdline(&mut h, "99-x", &s(&["a=1"])).unwrap());
    assert_eq!(
        records(&t).1.as_deref(),
        Some("{\"action\":\"grub_update\",\"regenerate\":true,\"add\":[],\"remove\":[]}\n")
    );
    crash(h);
    assert!(t.calls().is_empty());
    let mut h = t.host(ExecMode::Apply);
    assert!(!grub::set_cmdline(&mut h, "99-x", &s(&["a=1"])).unwrap());
    h.finish().unwrap();
    assert_eq!(t.calls(), s(&["update-grub "]));
    assert_eq!(records(&t), (None, None));

    // grubby: the record holds the merged work of the session, including the arguments a
    // replaced drop-in takes back.
    let t = TestHost::new();
    t.install_sh();
    t.file("/etc/os-release", "ID=fedora\n");
    t.stub("grubby", ":");
    let mut h = t.host(ExecMode::Apply);
    assert!(grub::set_cmdline(&mut h, "x", &s(&["a=1", "b"])).unwrap());
    h.finish().unwrap();
    t.clear_calls();
    let mut h = t.host(ExecMode::Apply);
    assert!(grub::set_cmdline(&mut h, "x", &s(&["a=2", "b"])).unwrap());
    assert!(grub::set_cmdline(&mut h, "y", &s(&["c"])).unwrap());
    assert_eq!(
        records(&t).1.as_deref(),
        Some(
            "{\"action\":\"grub_update\",\"regenerate\":false,\"add\":[\"a=2\",\"b\",\"c\"],\"remove\":[\"a=1\"]}\n"
        )
    );
    crash(h);
    t.host(ExecMode::Apply).finish().unwrap();
    assert_eq!(
        t.calls(),
        s(&[
            "grubby --update-kernel=ALL --args=a=2 b c",
            "grubby --update-kernel=ALL --remove-args=a=1"
        ])
    );
    assert_eq!(records(&t), (None, None));
    // grub::remove records what it takes back before removing the drop-in.
    t.clear_calls();
    let mut h = t.host(ExecMode::Apply);
    assert!(grub::remove(&mut h, "y").unwrap());
    assert_eq!(
        records(&t).1.as_deref(),
        Some("{\"action\":\"grub_update\",\"regenerate\":false,\"add\":[],\"remove\":[\"c\"]}\n")
    );
    crash(h);
    t.host(ExecMode::Apply).finish().unwrap();
    assert_eq!(
        t.calls(),
        s(&["grubby --update-kernel=ALL --remove-args=c"])
    );
    assert_eq!(records(&t), (None, None));
}

#[test]
fn line_view_is_kept_per_session_and_sees_other_writers() {
    let t = TestHost::new();
    t.file("/etc/v.conf", "a\n");
    let o = LineOptions::default();
    let mut h = t.host(ExecMode::Apply);
    assert!(fs::ensure_line(&mut h, "/etc/v.conf", "b", &o).unwrap());
    assert!(!fs::ensure_line(&mut h, "/etc/v.conf", "b", &o).unwrap());
    // A read of the host writes the batched edits (the session's batch, [`crate::host::effects::session`]).
    assert_eq!(fs::read(&h, "/etc/v.conf").unwrap(), "a\nb\n");
    // Another process replaces the file (new inode), then edits it in place with the same
    // size: each time the session's view is dropped and the file read again.
    std::fs::write(t.p("/etc/v.tmp"), "a\nb\nc\n").unwrap();
    std::fs::rename(t.p("/etc/v.tmp"), t.p("/etc/v.conf")).unwrap();
    assert!(fs::ensure_line(&mut h, "/etc/v.conf", "d", &o).unwrap());
    assert_eq!(fs::read(&h, "/etc/v.conf").unwrap(), "a\nb\nc\nd\n");
    assert_eq!(t.read("/etc/v.conf"), "a\nb\nc\nd\n");
    std::fs::write(t.p("/etc/v.conf"), "a\nb\nx\nd\n").unwrap();
    assert!(fs::ensure_line(&mut h, "/etc/v.conf", "c", &o).unwrap());
    assert_eq!(fs::read(&h, "/etc/v.conf").unwrap(), "a\nb\nx\nd\nc\n");
    assert_eq!(t.read("/etc/v.conf"), "a\nb\nx\nd\nc\n");
    // A write through the session (any effect) invalidates the view.
    fs::write(&mut h, "/etc/v.conf", "q\n", &WriteOptions::default()).unwrap();
    assert!(fs::ensure_line(&mut h, "/etc/v.conf", "c", &o).unwrap());
    assert!(fs::ensure_block(&mut h, "/etc/v.conf", "id", "1\n2").unwrap());
    assert!(!fs::ensure_block(&mut h, "/etc/v.conf", "id", "1\n2").unwrap());
    assert!(fs::remove_line(&mut h, "/etc/v.conf", "^c$").unwrap());
    assert!(fs::remove_block(&mut h, "/etc/v.conf", "id").unwrap());
    h.finish().unwrap();
    assert_eq!(t.read("/etc/v.conf"), "q\n");

    // Plan: the view follows the session's own planned writes and any other effect.
    let mut p = t.host(ExecMode::Plan);
    for i in 0..50 {
        assert!(fs::ensure_line(&mut p, "/etc/v.conf", &format!("l{i}"), &o).unwrap());
    }
    assert!(!fs::ensure_line(&mut p, "/etc/v.conf", "l7", &o).unwrap());
    fs::write(&mut p, "/etc/v.conf", "l7\n", &WriteOptions::default()).unwrap();
    assert!(!fs::ensure_line(&mut p, "/etc/v.conf", "l7", &o).unwrap());
    assert!(fs::ensure_line(&mut p, "/etc/v.conf", "l8", &o).unwrap());
    assert_eq!(fs::read(&p, "/etc/v.conf").unwrap(), "l7\nl8\n");
    assert_eq!(t.read("/etc/v.conf"), "q\n");
    // A line that is not one line is refused in every mode, nothing written: it would never
    // read back as itself, so each run appended it again (`d\r` grew the file by a line per
    // apply, `m\nn` by two).
    for mode in [ExecMode::Apply, ExecMode::Plan] {
        let mut h = t.host(mode);
        for bad in ["m\nn", "d\r", "\n"] {
            let e = fs::ensure_line(&mut h, "/etc/v.conf", bad, &o).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with(&format!("invalid line: {bad:?} ")),
                "{e}"
            );
        }
        assert!(h.finish().unwrap().changes.is_empty());
    }
    assert_eq!(t.read("/etc/v.conf"), "q\n");
    // A carriage return inside a line is kept, and the line reads back as itself.
    let mut h = t.host(ExecMode::Apply);
    assert!(fs::ensure_line(&mut h, "/etc/v.conf", "a\rb", &o).unwrap());
    h.finish().unwrap();
    assert_eq!(t.read("/etc/v.conf"), "q\na\rb\n");
    let mut h = t.host(ExecMode::Apply);
    assert!(!fs::ensure_line(&mut h, "/etc/v.conf", "a\rb", &o).unwrap());
}

#[test]
fn line_views_read_as_bounded_reads_do() {
    // A FIFO is refused without blocking, in apply mode (the view's own read) as in plan.
    let t = TestHost::new();
    std::fs::create_dir_all(t.p("/etc")).unwrap();
    nix::unistd::mkfifo(
        &t.p("/etc/pipe"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    for mode in [ExecMode::Apply, ExecMode::Plan] {
        let mut h = t.host(mode);
        let e = fs::ensure_line(&mut h, "/etc/pipe", "x", &LineOptions::default()).unwrap_err();
        assert!(matches!(e, HostError::NotRegular { .. }), "{mode:?}: {e}");
        h.finish().unwrap();
    }
}
