//! The preflight of a mode (validate, then plan, then `START`): the mistakes authors make in
//! a realistic package (`tests/fixtures/gpu-node`: apt repository and key, containerd TOML
//! edit and restart, sysctl, limits, kubelet drop-in and restart, versions file, fstab) fail
//! both `skyhook-run --package DIR --apply` and the agent with exit 1, and the host tree
//! (content, mode, owner, mtime of every entry) is what it was, although the steps before
//! the mistake would have changed files and restarted services.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::util::{FakeRoot, T, tree};

/// The mistakes, each made in the fixture's last step or in a configMap it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mistake {
    /// `fs::ensure_blok` for `fs::ensure_block` (storage.rhai line 3).
    Typo,
    /// `mount::ensure("/data", "UUID=…")`: a string where the options map belongs (line 4).
    StringForOptions,
    /// The `versions` configMap is missing (not in `expected_config_files`).
    MissingConfigMap,
    /// `runtime.toml` does not parse (containerd.rhai, the second step).
    TomlSyntax,
    /// The last step requests a reboot the CR does not declare.
    UndeclaredReboot,
}

const ALL: [Mistake; 5] = [
    Mistake::Typo,
    Mistake::StringForOptions,
    Mistake::MissingConfigMap,
    Mistake::TomlSyntax,
    Mistake::UndeclaredReboot,
];

impl Mistake {
    /// What the error output must contain (`file` is the storage or containerd step as the
    /// run names it).
    fn expected(self, skyhook_dir: &str, cr_package: &str) -> String {
        match self {
            Mistake::Typo => format!(
                "{skyhook_dir}/storage.rhai:3:1: error: unknown function fs::ensure_blok (did you mean fs::ensure_block?)"
            ),
            Mistake::StringForOptions => format!(
                "{skyhook_dir}/storage.rhai:4:1: mount::ensure: the 2nd argument (opts) must be an options map #{{source, fstype, …}}, got a string"
            ),
            Mistake::MissingConfigMap => format!(
                "{skyhook_dir}/storage.rhai:2:17: config::kv: configMap \"versions\" does not exist"
            ),
            Mistake::TomlSyntax => format!(
                "{skyhook_dir}/containerd.rhai:2:21: toml::parse: <text>:1:15: invalid TOML"
            ),
            Mistake::UndeclaredReboot => format!(
                "{skyhook_dir}/storage.rhai:5: requested interrupt reboot is not declared for package {cr_package} in the Skyhook CR"
            ),
        }
    }
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gpu-node")
}

fn copy_tree(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let d = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &d);
        } else {
            std::fs::copy(e.path(), &d).unwrap();
        }
    }
}

fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{} lacks {from:?}", path.display());
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

/// The fixture package at `dir` with `mistake` made in it.
fn package(dir: &Path, mistake: Option<Mistake>) {
    copy_tree(&fixture(), dir);
    let storage = dir.join("skyhook_dir/storage.rhai");
    match mistake {
        None => {}
        Some(Mistake::Typo) => edit(&storage, "fs::ensure_block(", "fs::ensure_blok("),
        Some(Mistake::StringForOptions) => edit(
            &storage,
            r#"#{source: "UUID=0a1b2c3d", fstype: "ext4", state: "present"}"#,
            r#""UUID=0a1b2c3d""#,
        ),
        Some(Mistake::MissingConfigMap) => {
            std::fs::remove_file(dir.join("configmaps/versions")).unwrap()
        }
        Some(Mistake::TomlSyntax) => {
            std::fs::write(dir.join("configmaps/runtime.toml"), "name = \"nvidia\n").unwrap();
        }
        Some(Mistake::UndeclaredReboot) => {
            let text = std::fs::read_to_string(&storage).unwrap();
            std::fs::write(&storage, format!("{text}interrupt::reboot();\n")).unwrap();
        }
    }
}

/// A node for the fixture: the files its steps edit, and recording `systemctl` at
/// `$T/bin` (on `PATH`).
fn node() -> FakeRoot {
    let mut fr = FakeRoot::new();
    fr.interrupt_setup();
    fr.write("/etc/containerd/config.toml", "version = 2\n");
    for dir in [
        "/etc/apt/sources.list.d",
        "/etc/sysctl.d",
        "/etc/security/limits.d",
        "/etc/systemd/system",
        "/etc/gpu-node",
    ] {
        std::fs::create_dir_all(fr.host(dir)).unwrap();
    }
    fr.write("/etc/fstab", "UUID=root / ext4 defaults 0 1\n");
    fr
}

fn skyhook_run(fr: &FakeRoot, pkg: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_skyhook-run"))
        .env_clear()
        .env("PATH", format!("{T}/bin:/usr/sbin:/usr/bin:/sbin:/bin"))
        .env("SKYHOOK_ROOT_DIR", format!("{T}/state"))
        .env("SKYHOOK_LOG_DIR", format!("{T}/log"))
        .arg("--package")
        .arg(pkg)
        .args(["--mode", "apply", "--apply", "--root"])
        .arg(fr.root())
        .args(extra)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Every mistake: `skyhook-run --package DIR --apply` exits 1 with the error at the
/// author's source (`DIR/skyhook_dir/…`), and the root is byte for byte as before.
#[test]
fn skyhook_run_apply_refuses_each_mistake_and_changes_nothing() {
    require_root!();
    for mistake in ALL {
        let fr = node();
        let pkg = tempfile::tempdir().unwrap();
        package(pkg.path(), Some(mistake));
        let cr = pkg.path().join("cr.yaml");
        std::fs::write(
            &cr,
            "kind: Skyhook\nspec:\n  packages:\n    gpu-node:\n      version: 1.0.0\n",
        )
        .unwrap();
        let before = tree(fr.root());
        let out = skyhook_run(&fr, pkg.path(), &["--skyhook-cr", cr.to_str().unwrap()]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{mistake:?}: {out:?}");
        let want = mistake.expected(&format!("{}/skyhook_dir", pkg.path().display()), "gpu-node");
        assert!(
            err.contains(&want),
            "{mistake:?}: wanted {want:?} in\n{err}"
        );
        assert!(
            err.contains("preflight of mode apply failed with 1 error: nothing was changed"),
            "{mistake:?}: {err}"
        );
        assert_eq!(tree(fr.root()), before, "{mistake:?}: the root changed");
        assert_eq!(fr.calls(), None, "{mistake:?}: a command ran");
    }
}

/// Every mistake: the agent exits 1 before `START` with the error at the copy dir's script,
/// and the root is byte for byte as before (no flag, no log, no history, no overlay).
#[test]
fn the_agent_refuses_each_mistake_before_start_and_changes_nothing() {
    require_root!();
    for mistake in ALL {
        let fr = node();
        package(&fr.t("pkg"), Some(mistake));
        let before = tree(fr.root());
        let run = fr.run("apply");
        assert_eq!(run.code, 1, "{mistake:?}: {run:?}");
        // The agent names the package as the CR does: the middle field of its resource id.
        let want = mistake.expected(&format!("{T}/pkg/skyhook_dir"), "demo");
        assert!(
            run.stderr.contains(&want),
            "{mistake:?}: wanted {want:?} in\n{}",
            run.stderr
        );
        assert!(
            run.stderr
                .contains("preflight of mode apply failed with 1 error: nothing was changed"),
            "{mistake:?}: {}",
            run.stderr
        );
        assert!(
            !run.stdout.contains("SUCEEDED"),
            "{mistake:?}: {}",
            run.stdout
        );
        assert_eq!(tree(fr.root()), before, "{mistake:?}: the root changed");
        assert_eq!(fr.calls(), None, "{mistake:?}: a command ran");
    }
}

/// The fixture without a mistake passes the preflight and applies: both front ends make
/// every change and restart both services.
#[test]
fn the_fixture_without_mistakes_applies_through_both_front_ends() {
    require_root!();
    let fr = node();
    let pkg = tempfile::tempdir().unwrap();
    package(pkg.path(), None);
    let out = skyhook_run(&fr, pkg.path(), &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_applied(&fr);

    let fr = node();
    package(&fr.t("pkg"), None);
    let run = fr.run("apply");
    assert_eq!(run.code, 0, "{run:?}");
    assert_applied(&fr);
}

fn assert_applied(fr: &FakeRoot) {
    assert!(
        fr.read("/etc/containerd/config.toml")
            .contains("default_runtime_name = \"nvidia\""),
        "{}",
        fr.read("/etc/containerd/config.toml")
    );
    assert!(fr.exists("/etc/apt/keyrings/nvidia.asc"));
    assert_eq!(
        fr.read("/etc/sysctl.d/90-gpu.conf"),
        "net.core.rmem_max = 16777216\nvm.max_map_count = 262144\n"
    );
    assert!(fr.exists("/etc/security/limits.d/90-gpu.conf"));
    assert!(fr.exists("/etc/systemd/system/kubelet.service.d/20-gpu.conf"));
    assert!(
        fr.read("/etc/gpu-node/versions.env")
            .contains("DRIVER=550.54.15\nTOOLKIT=1.15.0\n")
    );
    assert!(fr.read("/etc/fstab").contains("UUID=0a1b2c3d /data ext4"));
    let calls = fr.calls().unwrap_or_default();
    assert!(calls.contains("systemctl restart containerd"), "{calls}");
    assert!(calls.contains("systemctl restart kubelet"), "{calls}");
}

/// A bash step cannot be planned: the plan stops at it, so a `.rhai` step after it may read
/// what the bash step creates (the mode applies), while a static error in that later step
/// still refuses the mode before the bash step runs.
#[test]
fn the_plan_stops_at_the_first_bash_step() {
    require_root!();
    let fr = FakeRoot::new();
    let steps = serde_json::json!([
        crate::util::step("make", "make.sh", &[]),
        crate::util::step("copy", "copy.rhai", &[]),
    ]);
    fr.write_config(&crate::util::config(serde_json::json!({
        "apply": steps.clone(), "apply-check": steps,
    })));
    fr.write_step("make.sh", "#!/bin/sh\necho made > /etc/made.conf\n");
    fr.write_step(
        "copy.rhai",
        "fs::write(\"/etc/copy.conf\", fs::read(\"/etc/made.conf\"));\n",
    );
    let run = fr.run("apply");
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(fr.read("/etc/copy.conf"), "made\n");

    let fr = FakeRoot::new();
    fr.write_config(&crate::util::config(serde_json::json!({
        "apply": [crate::util::step("make", "make.sh", &[]), crate::util::step("copy", "copy.rhai", &[])],
        "apply-check": [crate::util::step("make", "make.sh", &[])],
    })));
    fr.write_step("make.sh", "#!/bin/sh\necho made > /etc/made.conf\n");
    fr.write_step(
        "copy.rhai",
        "fs::wrte(\"/etc/copy.conf\", fs::read(\"/etc/made.conf\"));\n",
    );
    let before = tree(fr.root());
    let run = fr.run("apply");
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains(
            "/t/pkg/skyhook_dir/copy.rhai:1:1: error: unknown function fs::wrte (did you mean fs::write?)"
        ),
        "{}",
        run.stderr
    );
    assert!(
        run.stdout.contains("FAILED: copy.rhai  1"),
        "{}",
        run.stdout
    );
    assert_eq!(tree(fr.root()), before);
}

/// `--apply --skyhook-cr CR` hands the CR's declarations to the agent flow as well: a
/// declared reboot passes the preflight and the step says the operator runs it.
#[test]
fn skyhook_run_apply_judges_interrupts_against_the_cr() {
    require_root!();
    let fr = node();
    let pkg = tempfile::tempdir().unwrap();
    package(pkg.path(), Some(Mistake::UndeclaredReboot));
    std::fs::remove_file(pkg.path().join("node-metadata/packages.json")).unwrap();
    let cr = pkg.path().join("cr.yaml");
    std::fs::write(
        &cr,
        "kind: Skyhook\nspec:\n  packages:\n    gpu-node:\n      version: 1.0.0\n      interrupt:\n        type: reboot\n",
    )
    .unwrap();
    let out = skyhook_run(&fr, pkg.path(), &["--skyhook-cr", cr.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("storage.rhai: requested interrupt reboot is declared in the Skyhook CR"),
        "{stdout}"
    );
    assert_applied(&fr);
}

/// The host tree by content, mode and owner (no times), without the agent's own state: `$T`
/// (state, logs, stubs, package) and `/var/lib/skyhook` (lock files, skyhook-run's copy of
/// the package).
fn host_files(fr: &FakeRoot) -> Vec<String> {
    tree(fr.root())
        .into_iter()
        .filter(|l| !(l.starts_with("t ") || l.starts_with("t/")))
        .filter(|l| !(l.starts_with("var/lib ") || l.starts_with("var/lib/")))
        .map(|l| l.rsplit_once(' ').expect("mtime field").0.to_string())
        .collect()
}

/// The mistake the preflight cannot see: a probe that exits 9 (`run(["nvidia-smi", "-L"])`
/// without `ok`) after the step wrote its files. Both front ends exit 1 with the command
/// named, and the step's files are put back: the host is as before (content, mode, owner).
#[test]
fn a_failing_command_fails_its_step_and_puts_its_files_back() {
    require_root!();
    let mistake = |dir: &Path| {
        let repo = dir.join("skyhook_dir/repo.rhai");
        let text = std::fs::read_to_string(&repo).unwrap();
        std::fs::write(&repo, format!("{text}run([\"nvidia-smi\", \"-L\"]);\n")).unwrap();
    };
    let failing_smi = |fr: &FakeRoot| {
        fr.write_mode(
            &format!("{T}/bin/nvidia-smi"),
            "#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n",
            0o755,
        );
    };
    let want = "run: command nvidia-smi -L failed with exit code 9";

    let fr = node();
    failing_smi(&fr);
    let pkg = tempfile::tempdir().unwrap();
    package(pkg.path(), None);
    mistake(pkg.path());
    let before = host_files(&fr);
    let out = skyhook_run(&fr, pkg.path(), &[]);
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(all.contains(want), "{all}");
    assert!(!all.contains("SUCEEDED"), "{all}");
    assert_eq!(host_files(&fr), before, "skyhook-run: the host changed");

    let fr = node();
    failing_smi(&fr);
    package(&fr.t("pkg"), None);
    mistake(&fr.t("pkg"));
    let before = host_files(&fr);
    let run = fr.run("apply");
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.all().contains(want), "{}", run.all());
    assert!(run.stdout.contains("FAILED: repo.rhai"), "{}", run.stdout);
    assert_eq!(host_files(&fr), before, "agent: the host changed");
}

/// A `.rhai` step runs a command and then edits the file the command made; a later step
/// reads it. The plan cannot run the command, so each first call after it that reads that
/// file is unknown (the dry run lists it and that step's plan ends there) instead of a
/// refusal; the agent applies both steps.
#[test]
fn an_edit_after_a_command_is_unknown_in_the_plan_not_refused() {
    // regression: the preflight planned the chmod against the host as it was (no
    // /etc/made.conf) and refused the mode with "fs::chmod: /etc/made.conf does not exist"
    require_root!();
    let fr = FakeRoot::new();
    let steps = serde_json::json!([
        crate::util::step("make", "make.rhai", &[]),
        crate::util::step("copy", "copy.rhai", &[]),
    ]);
    fr.write_config(&crate::util::config(serde_json::json!({
        "apply": steps.clone(), "apply-check": steps,
    })));
    fr.write_step(
        "make.rhai",
        "sh(\"echo a > /etc/made.conf\");\nfs::chmod(\"/etc/made.conf\", 0o600);\nfs::ensure_line(\"/etc/made.conf\", \"b\");\n",
    );
    fr.write_step(
        "copy.rhai",
        "fs::write(\"/etc/copy.conf\", fs::read(\"/etc/made.conf\"));\n",
    );
    let before = tree(fr.root());
    let dry = Command::new(env!("CARGO_BIN_EXE_skyhook-run"))
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .arg("--package")
        .arg(fr.t("pkg"))
        .args(["--mode", "apply", "--root"])
        .arg(fr.root())
        .output()
        .unwrap();
    let (out, err) = (text(&dry.stdout), text(&dry.stderr));
    assert_eq!(dry.status.code(), Some(0), "{out}{err}");
    let pkg = fr.t("pkg");
    let cmd = format!(
        "the command /bin/bash -c 'echo a > /etc/made.conf' (planned at {}/skyhook_dir/make.rhai:1) is only run by the apply and may change it; the rest of the step is checked statically only",
        pkg.display()
    );
    for (call, script) in [("fs::chmod", "make.rhai:2"), ("fs::read", "copy.rhai:1")] {
        let want = format!(
            "? unknown: {call}: /etc/made.conf is unknown in the plan: {cmd}  # {}/skyhook_dir/{script}",
            pkg.display()
        );
        assert!(out.lines().any(|l| l == want), "no {want:?} in\n{out}{err}");
    }
    assert!(!out.contains("fs::ensure_line"), "{out}");
    assert!(!out.contains("/etc/copy.conf"), "{out}");
    assert_eq!(tree(fr.root()), before, "the dry run changed the root");

    let run = fr.run("apply");
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(fr.read("/etc/made.conf"), "a\nb\n");
    assert_eq!(fr.mode("/etc/made.conf") & 0o7777, 0o600);
    assert_eq!(fr.read("/etc/copy.conf"), "a\nb\n");
}

/// Wait up to 30 s for a line of `rx` that `want` accepts.
fn wait_line(
    rx: &std::sync::mpsc::Receiver<String>,
    want: impl Fn(&str) -> bool,
    what: &str,
) -> Result<(), String> {
    loop {
        match rx.recv_timeout(std::time::Duration::from_secs(30)) {
            Ok(l) if want(&l) => return Ok(()),
            Ok(_) => {}
            Err(e) => return Err(format!("no {what} line ({e})")),
        }
    }
}

/// A SIGTERM while the preflight plans a step ends the run at once, before anything is
/// written: exit 1 with the agent's stop warning, no `START`, flag, history, log, lock or
/// host change, and the step never runs. The step's plan blocks in a query (queries run in
/// the plan) until the test has sent the signal: the query tells the test it started through
/// one FIFO and waits on another that nobody writes.
#[test]
fn sigterm_during_the_preflight_ends_the_run_before_anything_is_written() {
    // regression: the plan ran on the runtime's thread, so the SIGTERM was seen only after
    // it; then START was written and the step ran
    require_root!();
    use nix::sys::signal::{Signal, kill};
    let fr = FakeRoot::new();
    let steps = serde_json::json!([crate::util::step("s", "s.rhai", &[])]);
    fr.write_config(&crate::util::config(serde_json::json!({
        "apply": steps.clone(), "apply-check": steps,
    })));
    fr.write_step(
        "s.rhai",
        "if step.dry_run { query([\"/bin/sh\", \"-c\", \"echo up > /t/started; read x < /t/go\"]); }\nfs::write(\"/etc/ran.conf\", \"x\");\n",
    );
    let before = host_files(&fr);
    for fifo in ["/t/started", "/t/go"] {
        nix::unistd::mkfifo(
            &fr.host(fifo),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .expect("mkfifo");
    }
    let mut child = fr.spawn("apply");
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let (_, stdout) = crate::util::line_reader(child.stdout.take().expect("stdout"));
    let (err_lines, stderr) = crate::util::line_reader(child.stderr.take().expect("stderr"));
    // Blocks until the query opens the FIFO: the preflight is planning the step.
    let started = std::fs::read_to_string(fr.host("/t/started")).expect("read /t/started");
    assert_eq!(started, "up\n");
    kill(pid, Signal::SIGTERM).expect("SIGTERM");
    let seen = wait_line(
        &err_lines,
        |l| l.contains("received SIGTERM"),
        "SIGTERM notice",
    );
    if let Err(e) = seen {
        // Release the query so the agent can end, then fail with what it printed.
        std::fs::write(fr.host("/t/go"), "go\n").expect("release the query");
        let _ = child.wait();
        panic!(
            "{e}\nstdout:\n{}\nstderr:\n{}",
            stdout.join().unwrap(),
            stderr.join().unwrap()
        );
    }
    let status = child.wait().expect("wait");
    let (out, err) = (stdout.join().unwrap(), stderr.join().unwrap());
    assert_eq!(
        crate::util::exit_code(status),
        1,
        "stdout:\n{out}\nstderr:\n{err}"
    );
    assert!(
        err.contains(
            "WARNING: stopping before the first step: SIGTERM received during the preflight"
        ),
        "{err}"
    );
    assert!(!out.contains("apply s.rhai"), "{out}");
    assert!(!fr.exists("/etc/ran.conf"));
    assert!(
        !fr.exists("/t/state"),
        "state written: {:?}",
        fr.list("/t/state")
    );
    assert!(!fr.exists("/t/log"));
    // (`tree` would block opening a FIFO.)
    for fifo in ["/t/started", "/t/go"] {
        std::fs::remove_file(fr.host(fifo)).expect("remove the FIFO");
    }
    assert_eq!(host_files(&fr), before, "the host changed");
}

/// Run `cmd` (stdout to `out`, stderr piped) to its end; returns its exit code, stderr and
/// peak resident set in KiB (`ru_maxrss` of `wait4`, this child alone).
// `wait4` reaps the child (std's `wait` has no rusage).
#[allow(clippy::zombie_processes)]
fn run_measuring_peak(mut cmd: Command, out: &Path) -> (i32, String, u64) {
    use std::io::Read;
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(out).unwrap())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: all-zero is a valid `rusage`.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child with valid out-pointers.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "wait4: {}", std::io::Error::last_os_error());
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    (code, reader.join().unwrap(), usage.ru_maxrss as u64)
}

/// The plan's memory is bounded whatever the mode's length: a package of 12 steps each
/// writing a 16 MiB file (192 MiB planned in all) is planned by the dry run and by the
/// agent's preflight (then applied) with a peak resident set well below what holding every
/// planned file would take. Planned content past 64 MiB is spilled to a temporary file, a
/// diff over 1 MiB is kept as a one-line note, and the preflight keeps no diffs.
#[test]
fn planning_many_large_files_holds_bounded_memory() {
    // regression: the overlay held every planned file and each step's report its diff
    // (20 x 16 MiB: 1.4 GB peak for the dry run)
    require_root!();
    const STEPS: usize = 12;
    const BOUND_KIB: u64 = 320 << 10;
    let fr = FakeRoot::new();
    let steps: Vec<serde_json::Value> = (0..STEPS)
        .map(|i| crate::util::step(&format!("s{i}"), &format!("s{i}.rhai"), &[]))
        .collect();
    fr.write_config(&crate::util::config(serde_json::json!({
        "apply": steps.clone(), "apply-check": steps,
    })));
    for i in 0..STEPS {
        fr.write_step(
            &format!("s{i}.rhai"),
            &format!("fs::write(\"/opt/big/f{i}\", fs::read(\"/data/big\"));\n"),
        );
    }
    let big = "a".repeat(16 << 20);
    fr.write("/data/big", &big);

    let mut dry = Command::new(env!("CARGO_BIN_EXE_skyhook-run"));
    dry.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .arg("--package")
        .arg(fr.t("pkg"))
        .args(["--mode", "apply", "--root"])
        .arg(fr.root());
    let out = fr.t("dry.out");
    let (code, err, peak) = run_measuring_peak(dry, &out);
    eprintln!("dry run: peak {peak} KiB");
    assert_eq!(code, 0, "{err}");
    assert!(
        peak < BOUND_KIB,
        "the dry run peaked at {peak} KiB (bound {BOUND_KIB} KiB)"
    );
    let plan = std::fs::read_to_string(&out).unwrap();
    assert!(
        plan.lines().any(
            |l| l.starts_with("Files /dev/null and b/opt/big/f11 differ (a diff of ")
                && l.ends_with(" bytes, more than the 1 MiB a report keeps: not shown)")
        ),
        "{}",
        &plan[..plan.len().min(4096)]
    );

    let mut agent = Command::new(crate::util::AGENT);
    agent
        .env_clear()
        .envs([
            ("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            ("SKYHOOK_ROOT_DIR", "/t/state"),
            ("SKYHOOK_LOG_DIR", "/t/log"),
            ("SKYHOOK_AGENT_WRITE_LOGS", "false"),
            ("SKYHOOK_RESOURCE_ID", crate::util::RID),
            ("COPY_RESOLV", "false"),
        ])
        .args(["apply", &fr.root_str(), &format!("{T}/pkg")]);
    let (code, err, peak) = run_measuring_peak(agent, &fr.t("agent.out"));
    eprintln!("agent: peak {peak} KiB");
    assert_eq!(code, 0, "{err}");
    assert!(
        peak < BOUND_KIB,
        "the agent (preflight, then apply) peaked at {peak} KiB (bound {BOUND_KIB} KiB)"
    );
    assert_eq!(fr.read("/opt/big/f11").len(), 16 << 20);
}
