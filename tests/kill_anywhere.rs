//! Kill anywhere: the agent is SIGKILLed at its K-th `fsync` or `rename` (per thread, as
//! strace counts; `strace -f -e inject=SYSCALL:signal=KILL:when=K`) while it runs a package
//! of a bash step, a `.rhai` step writing a systemd drop-in, a grub drop-in, a config line and
//! a modprobe.d options file (initramfs regeneration), and another bash step. Then the agent is rerun to completion, and the host must equal a
//! clean run's: no temporary file, no torn or empty state file, every deferred command ran
//! after the last change it covers (the stubs record what the drop-ins held when they were
//! called), and no deferred record is left behind.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::json;

use crate::util::*;

const DROP_IN: &str = "/etc/systemd/system/containerd.service.d/99-test.conf";
const GRUB: &str = "/etc/default/grub.d/99-test.cfg";
const MODPROBE: &str = "/etc/modprobe.d/nouveau.conf";

fn which(tool: &str) -> Option<std::path::PathBuf> {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.is_file())
}

fn package() -> FakeRoot {
    let mut fr = FakeRoot::new();
    fr.write_config(&config(json!({
        "apply": [
            step("one", "one.sh", &[]),
            step("tune", "tune.rhai", &["4"]),
            step("three", "three.sh", &[]),
        ],
        "apply-check": [step("c", "c.sh", &[])],
    })));
    fr.write_step("one.sh", "#!/bin/sh\necho one >> /t/one.log\n");
    fr.write_step("three.sh", "#!/bin/sh\necho three >> /t/three.log\n");
    fr.write_step("c.sh", "#!/bin/sh\nexit 0\n");
    fr.write_step(
        "tune.rhai",
        "let n = step.args[0];\n\
         service::drop_in(\"containerd\", \"99-test.conf\", \"[Service]\\nLimitNOFILE=\" + n + \"\\n\");\n\
         grub::set_cmdline(\"99-test\", [\"hugepages=\" + n]);\n\
         fs::ensure_line(\"/etc/test.conf\", \"hugepages=\" + n);\n\
         kmod::options(\"nouveau\", \"modeset=0 n=\" + n);\n",
    );
    fr.write(
        "/etc/os-release",
        "ID=ubuntu\nID_LIKE=debian\nVERSION_ID=\"22.04\"\n",
    );
    // Stubs record their call and what the file they act on holds at that moment.
    fr.write_mode(
        "/t/bin/systemctl",
        format!(
            "#!/bin/sh\necho \"systemctl $* | $(cat {DROP_IN} 2>&1 | tr '\\n' ' ')\" >> /t/calls\n"
        ),
        0o755,
    );
    fr.write_mode(
        "/t/bin/update-grub",
        format!(
            "#!/bin/sh\necho \"update-grub | $(cat {GRUB} 2>&1 | tr '\\n' ' ')\" >> /t/calls\n"
        ),
        0o755,
    );
    fr.write_mode(
        "/t/bin/update-initramfs",
        format!(
            "#!/bin/sh\necho \"update-initramfs $* | $(cat {MODPROBE} 2>&1 | tr '\\n' ' ')\" >> /t/calls\n"
        ),
        0o755,
    );
    fr.set_env("PATH", "/t/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    fr
}

/// What must hold after a complete run, killed or not: returns the host files' contents.
fn assert_complete(fr: &FakeRoot, ctx: &str) -> Vec<String> {
    let snapshot = fr.snapshot();
    let temps: Vec<&String> = snapshot
        .iter()
        .filter(|p| p.contains(".skyhook-tmp-"))
        .collect();
    assert!(temps.is_empty(), "{ctx}: temporaries left: {temps:?}");
    let flags = fr.list("/t/state/flags/demo/1.0.0");
    assert_eq!(flags.len(), 3, "{ctx}: flags {flags:?}");
    for f in &flags {
        let text = fr.read(&format!("/t/state/flags/demo/1.0.0/{f}"));
        assert!(
            text.starts_with("last_run: "),
            "{ctx}: torn flag {f}: {text:?}"
        );
    }
    assert!(
        !fr.exists("/var/lib/skyhook/.deferred/daemon-reload.json")
            && !fr.exists("/var/lib/skyhook/.deferred/grub.json")
            && !fr.exists("/var/lib/skyhook/.deferred/initramfs.json"),
        "{ctx}: a deferred record is left"
    );
    let calls = fr.read_opt("/t/calls").unwrap_or_default();
    let drop_in = fr.read(DROP_IN).replace('\n', " ");
    let grub = fr.read(GRUB).replace('\n', " ");
    let modprobe = fr.read(MODPROBE).replace('\n', " ");
    let last = |prefix: &str| {
        calls
            .lines()
            .rev()
            .find(|l| l.starts_with(prefix))
            .map(|l| l.split_once(" | ").map_or("", |(_, b)| b).to_string())
    };
    assert_eq!(
        last("systemctl daemon-reload").as_deref(),
        Some(drop_in.as_str()),
        "{ctx}: the daemon-reload after the last drop-in change is missing; calls:\n{calls}"
    );
    assert_eq!(
        last("update-grub").as_deref(),
        Some(grub.as_str()),
        "{ctx}: update-grub after the last grub change is missing; calls:\n{calls}"
    );
    assert_eq!(
        last("update-initramfs -u").as_deref(),
        Some(modprobe.as_str()),
        "{ctx}: update-initramfs after the last modprobe.d change is missing; calls:\n{calls}"
    );
    vec![
        fr.read(DROP_IN),
        fr.read(GRUB),
        fr.read("/etc/test.conf"),
        fr.read(MODPROBE),
        fr.read("/t/three.log"),
    ]
}

#[test]
fn sigkill_at_any_fsync_or_rename_then_rerun_equals_a_clean_run() {
    require_root!();
    let Some(strace) = which("strace") else {
        skip!("strace is not installed (.ci/run installs it)");
    };
    let clean = package();
    clean.run("apply").code(0);
    let want = assert_complete(&clean, "clean run");

    let mut kill_points = 0;
    for syscall in ["fsync", "renameat2", "rename", "renameat"] {
        for k in 1..=12 {
            let fr = package();
            let r = fr.root_str();
            let mut cmd = Command::new(&strace);
            cmd.args(["-f", "-qq", "-o", "/dev/null", "-e"])
                .arg(format!("trace={syscall}"))
                .arg("-e")
                .arg(format!("inject={syscall}:signal=KILL:when={k}"))
                .args([AGENT, "apply", &r, "/t/pkg"])
                .env_clear()
                .envs(fr.env_vars())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let killed = run_to_end(cmd.spawn().expect("spawn strace"));
            if killed.code == 0 {
                // Fewer than k such calls in a whole run: nothing more to kill at.
                break;
            }
            kill_points += 1;
            let ctx = format!("killed at {syscall} #{k} (status {})", killed.code);
            let rerun = fr.run("apply");
            assert_eq!(rerun.code, 0, "{ctx}: rerun failed: {}", rerun.stderr);
            let got = assert_complete(&fr, &ctx);
            assert_eq!(
                &got[..4],
                &want[..4],
                "{ctx}: host files differ from a clean run"
            );
            assert!(got[4].contains("three"), "{ctx}");
        }
    }
    assert!(
        kill_points >= 10,
        "only {kill_points} kill points were reached"
    );
    eprintln!("kill_anywhere: {kill_points} kill points");
}
