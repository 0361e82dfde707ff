//! `kernel::` on the fake GPU-node hosts of `tests/fakehosts`: a second kernel installed
//! with the host's fake apt, made grub's default, and booted by the host's fake `reboot`
//! (which boots the grubenv's `saved_entry` kernel and switches what `uname -r` and
//! `/proc/sys/kernel/osrelease` say), through the library in process.

use std::fs;

use skyhook::host::kernel::boot;
use skyhook::host::packages::pkg;
use skyhook::host::root::HostRoot;
use skyhook::host::system::libs;
use skyhook::host::{ExecMode, Host, HostOptions};

use crate::nvidia_ports::fake_host;
use crate::util::FakeRoot;

const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Host layer `host` over a minimal root, as every test sees it ([`fake_host`]): the running
/// kernel (`/proc/sys/kernel/osrelease`) follows the fake boot's kernel release.
fn fake_node(host: &str) -> FakeRoot {
    fake_host(host)
}

fn session(fr: &FakeRoot, mode: ExecMode) -> Host {
    let o = HostOptions {
        env: vec![("PATH".into(), PATH.into())],
        ..HostOptions::default()
    };
    Host::new(HostRoot::open(fr.root()).unwrap(), mode, o)
}

/// Run the host's fake `reboot`, chrooted.
fn fake_reboot(fr: &FakeRoot) {
    let st = std::process::Command::new("chroot")
        .arg(fr.root())
        .arg("/usr/local/sbin/reboot")
        .env_clear()
        .env("PATH", PATH)
        .status()
        .unwrap();
    assert!(st.success(), "fake reboot failed");
}

#[test]
fn kernel_installed_set_default_and_fake_reboot_on_ubuntu() {
    require_root!();
    let fr = fake_node("ubuntu-24.04-eks-x86_64");
    let new = "6.14.0-1018-aws-64k";
    let old = "6.14.0-1018-aws";

    // A plan: the kernel package planned, the default planned after it, nothing changed.
    let mut h = session(&fr, ExecMode::Plan);
    assert_eq!(boot::running(&h).unwrap(), old);
    assert_eq!(boot::installed(&h).unwrap(), [old]);
    assert_eq!(boot::default(&h).unwrap().as_deref(), Some(old));
    assert!(pkg::install(&mut h, &[format!("linux-image-{new}")], false).unwrap());
    assert!(boot::set_default(&mut h, new).unwrap());
    assert_eq!(boot::default(&h).unwrap().as_deref(), Some(new));
    let report = h.finish().unwrap();
    let summaries: Vec<&str> = report.changes.iter().map(|c| c.summary.as_str()).collect();
    assert_eq!(
        summaries,
        [
            "install packages linux-image-6.14.0-1018-aws-64k (apt)",
            "update /etc/default/grub",
            "grub default: 6.14.0-1018-aws -> 6.14.0-1018-aws-64k",
        ]
    );
    assert!(!fr.host("/boot/vmlinuz-6.14.0-1018-aws-64k").exists());

    // Apply: installed, the default set, the menu regenerated once.
    let mut h = session(&fr, ExecMode::Apply);
    assert!(pkg::install(&mut h, &[format!("linux-image-{new}")], false).unwrap());
    assert_eq!(boot::installed(&h).unwrap(), [old, new]);
    assert!(boot::set_default(&mut h, new).unwrap());
    h.finish().unwrap();
    assert!(
        fr.read("/etc/default/grub")
            .contains("\nGRUB_DEFAULT=saved\n")
            || fr
                .read("/etc/default/grub")
                .starts_with("GRUB_DEFAULT=saved\n")
    );
    let calls = fr.read("/var/log/stub-calls.log");
    assert!(
        calls.contains(
            "grub-set-default 'Advanced options for Ubuntu>Ubuntu, with Linux 6.14.0-1018-aws-64k'\nupdate-grub\n"
        ),
        "{calls}"
    );
    let h = session(&fr, ExecMode::Apply);
    assert_eq!(boot::default(&h).unwrap().as_deref(), Some(new));
    assert_eq!(boot::running(&h).unwrap(), old);

    // The fake reboot boots grub's default: running is the new kernel.
    fake_reboot(&fr);
    let mut h = session(&fr, ExecMode::Check);
    assert_eq!(boot::running(&h).unwrap(), new);
    assert!(!boot::boot_into(&mut h, new).unwrap());
    let report = h.finish().unwrap();
    assert!(report.drift().is_empty());
    assert!(report.interrupts.is_empty());
}

/// Amazon Linux 2023: BootLoaderSpec entries, so the grubenv names an entry id; no
/// `update-grub` (the rhel family's menu reads `saved_entry` already).
#[test]
fn kernel_set_default_on_amazon_linux_names_the_bls_entry() {
    require_root!();
    let fr = fake_node("amazon-linux-2023");
    let running = "6.1.158-180.294.amzn2023.x86_64";
    let older = "6.1.112-122.189.amzn2023.x86_64";
    let id = "ec2a1b2c3d4e5f60718293a4b5c6d7e8";
    fr.write(&format!("/boot/vmlinuz-0-rescue-{id}"), "rescue kernel");
    for r in [running, older] {
        fr.write(&format!("/usr/lib/modules/{r}/vmlinuz"), "kernel");
        fr.write(
            &format!("/boot/loader/entries/{id}-{r}.conf"),
            format!("title Amazon Linux ({r}) 2023\nversion {r}\n"),
        );
    }
    let mut h = session(&fr, ExecMode::Apply);
    assert_eq!(boot::running(&h).unwrap(), running);
    // rpm order: 6.1.112 before 6.1.158.
    assert_eq!(boot::installed(&h).unwrap(), [older, running]);
    assert_eq!(boot::default(&h).unwrap().as_deref(), Some(running));
    assert!(boot::set_default(&mut h, older).unwrap());
    let report = h.finish().unwrap();
    assert!(report.actions.is_empty(), "{:?}", report.actions);
    let calls = fr.read("/var/log/stub-calls.log");
    assert!(
        calls.ends_with(&format!("grub-set-default {id}-{older}\n")),
        "{calls}"
    );
    let h = session(&fr, ExecMode::Plan);
    assert_eq!(boot::default(&h).unwrap().as_deref(), Some(older));
}

/// `lib::find` over the fake hosts' `ldconfig -p`: a library the fake EFA installer would
/// leave is found by its name.
#[test]
fn lib_find_on_the_fake_host_ldconfig() {
    require_root!();
    let fr = fake_node("ubuntu-24.04-eks-x86_64");
    let h = session(&fr, ExecMode::Plan);
    assert!(libs::find(&h, "libfabric").unwrap().is_empty());
    fr.write("/opt/amazon/efa/lib/libfabric.so.1", "elf");
    fr.write("/opt/amazon/efa/lib/libfabric.so", "elf");
    assert_eq!(
        libs::find(&h, "libfabric").unwrap(),
        [
            "/opt/amazon/efa/lib/libfabric.so",
            "/opt/amazon/efa/lib/libfabric.so.1"
        ]
    );
    assert_eq!(
        libs::find(&h, "libc.so.6").unwrap(),
        ["/lib/x86_64-linux-gnu/libc.so.6"]
    );
}

/// A change report names the state before the change: the node runs 6.8.0-1021-aws (its
/// only kernel, grub's entry `0`), the step installs 6.14.0-1018-aws and makes it the
/// default. The plan said `6.8.0-1021-aws -> 6.14.0-1018-aws`; the apply said
/// `6.14.0-1018-aws -> 6.14.0-1018-aws`, reading grub's newest kernel after the install had
/// put the new one in place.
#[test]
fn kernel_set_default_after_an_install_reports_the_default_before_it() {
    require_root!();
    let fr = fake_node("ubuntu-24.04-eks-x86_64");
    let (old, new) = ("6.8.0-1021-aws", "6.14.0-1018-aws");
    for e in fs::read_dir(fr.host("/boot")).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with("vmlinuz-") {
            fs::remove_file(e.path()).unwrap();
        }
    }
    fr.write(&format!("/boot/vmlinuz-{old}"), "fake kernel\n");
    fr.write("/usr/share/fakehost/kernel-release", format!("{old}\n"));
    let base = fr.read("/usr/share/fakehost/dpkg-base");
    let kept: String = base
        .lines()
        .filter(|l| !l.starts_with("linux-"))
        .map(|l| format!("{l}\n"))
        .collect();
    fr.write("/usr/share/fakehost/dpkg-base", kept);

    let step = |mode| {
        let mut h = session(&fr, mode);
        assert_eq!(boot::default(&h).unwrap().as_deref(), Some(old));
        assert!(pkg::install(&mut h, &[format!("linux-image-{new}")], false).unwrap());
        assert!(boot::set_default(&mut h, new).unwrap());
        let report = h.finish().unwrap();
        report
            .changes
            .iter()
            .map(|c| c.summary.clone())
            .filter(|s| s.starts_with("grub default"))
            .collect::<Vec<_>>()
    };
    let want = [format!("grub default: {old} -> {new}")];
    assert_eq!(step(ExecMode::Plan), want, "plan");
    assert_eq!(step(ExecMode::Apply), want, "apply");
    assert!(fr.exists(&format!("/boot/vmlinuz-{new}")), "installed");
}

/// Every change report that names an old value (`grub default: A -> B`, `sysctl k = v (was
/// x)`, `chmod p A -> B`, `(mode A -> B)`, `chown p A -> B`, a drop-in's diff) names in
/// apply what the plan of the same step named: the state before the change, not after an
/// earlier call of the step had already changed it. One step over the areas, planned on
/// one copy of the node and applied (`--diff`) on another by `skyhook-run`; summaries,
/// diffs and `before` hashes compared change by change.
#[test]
fn change_reports_name_the_same_old_values_in_apply_as_in_plan() {
    require_root!();
    let new = "6.14.0-1018-aws-64k";
    let script = format!(
        r#"pkg::install(["linux-image-{new}"]);
kernel::set_default("{new}");
sysctl::set("vm.swappiness", "11");
sysctl::set("vm.swappiness", "12");
fs::write("/etc/a.conf", "a\n");
fs::chmod("/etc/a.conf", 0o600);
fs::write("/etc/a.conf", "b\n", #{{mode: 0o640}});
grub::set_cmdline("50-x", ["a=1"]);
grub::set_cmdline("50-x", ["a=2"]);
user::ensure("gpuops", #{{home: "/home/gpuops", create_home: true}});
"#
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("step.rhai");
    fs::write(&file, script).unwrap();
    let run = |apply: bool| {
        let fr = fake_node("ubuntu-24.04-eks-x86_64");
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_skyhook-run"));
        cmd.arg(&file).arg("--root").arg(fr.root());
        if apply {
            cmd.args(["--apply", "--diff"]);
        }
        let out = cmd
            .args(["--output", "json"])
            .env_clear()
            .env("PATH", PATH)
            .output()
            .unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(doc["ok"], true, "apply: {apply}: {doc:#}");
        doc["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                format!(
                    "{} | diff: {} | before: {}",
                    c["summary"].as_str().unwrap(),
                    c["diff"].as_str().unwrap_or("-"),
                    c["before"].as_str().unwrap_or("-")
                )
            })
            .collect::<Vec<_>>()
    };
    let plan = run(false);
    assert!(
        plan.iter()
            .any(|c| c.starts_with(&format!("grub default: 6.14.0-1018-aws -> {new} |"))),
        "{plan:#?}"
    );
    assert_eq!(plan.len(), 14, "{plan:#?}");
    assert_eq!(run(true), plan);
}
