//! Full disks, made with a small tmpfs in a private mount namespace and filled before the
//! agent runs: the state dir (a flag, the check results), and an `/etc` target of a `.rhai`
//! step. Each run exits 1 with an error that names the file and `No space left on device`,
//! leaves no temporary file, no torn file and no success marker (no flag, no
//! `*_ALL_CHECKED`).

use std::fs;

use serde_json::json;

use crate::util::*;

/// `mount` a tmpfs of `kib` KiB at disk path `dir` and fill its blocks (files of size 0 still
/// fit: they need an inode, no block).
fn full_tmpfs(dir: &std::path::Path, kib: u32) -> String {
    format!(
        "mount -t tmpfs -o size={kib}k skyhook-full '{d}' && \
         (dd if=/dev/zero of='{d}/.fill' bs=1024 count={kib} 2>/dev/null; true)",
        d = dir.display()
    )
}

/// Run the agent with `args` in a private mount namespace: `setup` first, then the agent,
/// then `after` (shell, e.g. listing the full mount into `T` before the namespace is gone).
fn run_in_ns(fr: &FakeRoot, setup: &str, args: &[&str], after: &str) -> Run {
    let script = format!(
        "{{ {setup} ; }} || exit 97\nagent=$1; shift\n\"$agent\" \"$@\"; rc=$?\n{after}\nexit $rc"
    );
    let mut cmd = std::process::Command::new("unshare");
    cmd.args(["-m", "sh", "-c", &script, "sh", AGENT])
        .args(args)
        .env_clear()
        .envs(fr.env_vars())
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let run = run_to_end(cmd.spawn().expect("spawn unshare"));
    assert_ne!(run.code, 97, "setup failed: {}", run.stderr);
    run
}

fn leftovers(fr: &FakeRoot) -> Vec<String> {
    fr.snapshot()
        .into_iter()
        .filter(|p| p.contains(".skyhook-tmp-"))
        .collect()
}

#[test]
fn full_state_dir_fails_the_flag_write_cleanly() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    let state = fr.t("state");
    fs::create_dir_all(&state).unwrap();
    let r = fr.root_str();
    let after = format!("find '{}' > '{}'", state.display(), fr.t("after").display());
    let run = run_in_ns(
        &fr,
        &full_tmpfs(&state, 16),
        &["apply", &r, "/t/pkg"],
        &after,
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stdout.contains("SUCEEDED: foo.sh a b"),
        "{}",
        run.stdout
    );
    let inside = fr.read("/t/after");
    assert!(!inside.contains(".skyhook-tmp-"), "{inside}");
    assert!(!inside.contains("foo.sh_"), "no flag: {inside}");
    assert!(
        run.stderr.contains("No space left on device"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("/t/state/flags/demo/1.0.0/"),
        "{}",
        run.stderr
    );
    // The namespace is gone: what the agent wrote went to the tmpfs, nothing below it.
    assert!(leftovers(&fr).is_empty(), "{:?}", leftovers(&fr));
    assert!(
        !fr.exists("/t/state/flags"),
        "nothing escaped the full mount"
    );
}

#[test]
fn full_state_dir_leaves_no_success_marker_in_a_check() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    let state = fr.t("state");
    fs::create_dir_all(&state).unwrap();
    let r = fr.root_str();
    // A stale success marker from an earlier run must not survive the failed check.
    let setup = format!(
        "{} && mkdir -p '{s}/flags' && : > '{s}/flags/apply-check_ALL_CHECKED'",
        full_tmpfs(&state, 16),
        s = state.display()
    );
    let after = format!("find '{}' > '{}'", state.display(), fr.t("after").display());
    let run = run_in_ns(&fr, &setup, &["apply-check", &r, "/t/pkg"], &after);
    let inside = fr.read("/t/after");
    assert!(!inside.contains("ALL_CHECKED"), "{inside}");
    assert!(!inside.contains(".skyhook-tmp-"), "{inside}");
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("No space left on device"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("panicked"));
    assert!(leftovers(&fr).is_empty());
}

/// A package whose one apply step is the Rhai script `w_rhai`, applied with `/etc/big.d` a
/// full 16 KiB tmpfs holding `x.conf` = `old`: the run, `x.conf` after it, and the
/// directory's listing after it.
fn apply_on_full_etc(w_rhai: &str, old: &str) -> (FakeRoot, Run, String, String) {
    let fr = FakeRoot::new();
    let mut d = p_config();
    d["modes"]["apply"] = json!([step("w", "w.rhai", &[])]);
    fr.write_config(&d);
    fr.write_step("foo_check.sh", "#!/bin/sh\nexit 0\n");
    fr.write_step("w.rhai", w_rhai);
    let etc = fr.host("/etc/big.d");
    fs::create_dir_all(&etc).unwrap();
    fs::write(fr.t("old"), old).unwrap();
    let r = fr.root_str();
    let setup = format!(
        "mount -t tmpfs -o size=16k skyhook-full '{e}' && cat '{t}/old' > '{e}/x.conf' && \
         (dd if=/dev/zero of='{e}/.fill' bs=1024 count=16 2>/dev/null; true)",
        e = etc.display(),
        t = fr.t("").display()
    );
    let after = format!(
        "cat '{e}/x.conf' > '{t}/x.after'; ls -a '{e}' > '{t}/ls.after'",
        e = etc.display(),
        t = fr.t("").display()
    );
    let run = run_in_ns(&fr, &setup, &["apply", &r, "/t/pkg"], &after);
    let (content, listing) = (fr.read("/t/x.after"), fr.read("/t/ls.after"));
    (fr, run, content, listing)
}

#[test]
fn full_etc_target_fails_the_step_and_keeps_the_old_file() {
    require_root!();
    let (fr, run, content, listing) = apply_on_full_etc(
        "let s = \"y\";\ns.pad(100000, 'y');\nfs::write(\"/etc/big.d/x.conf\", s);\n",
        "old",
    );
    assert_eq!(content, "old", "the old file is intact");
    assert!(!listing.contains(".skyhook-tmp-"), "{listing}");
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stdout.contains("FAILED: w.rhai  1"),
        "{}\n{}",
        run.stdout,
        run.stderr
    );
    assert!(
        run.stderr.contains("/etc/big.d/x.conf") && run.stderr.contains("No space left on device"),
        "{}",
        run.stderr
    );
    assert!(!fr.exists("/t/state/flags/demo/1.0.0/w.rhai_W11fWzBd"));
    assert!(leftovers(&fr).is_empty());
}

/// The history write fails (its directory is a file) after every check passed: exit 1, the
/// error names the history path, and no `apply-check_ALL_CHECKED` is left (history is written
/// before the success marker).
#[test]
fn failed_history_write_leaves_no_success_marker() {
    require_root!();
    let fr = FakeRoot::new();
    fr.write_p();
    fr.write("/t/state/history", "not a directory");
    let run = fr.run("apply-check");
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("/t/state/history"), "{}", run.stderr);
    assert!(
        fr.exists("/t/state/flags/check_results"),
        "the results were written"
    );
    assert!(
        !fr.exists("/t/state/flags/apply-check_ALL_CHECKED"),
        "no success marker after a failed history write"
    );
}

/// Batched line edits (src/host/batch.rs) are written when the step ends: on a full disk
/// that write fails, the step fails naming the file and `No space left on device`, the old
/// file is intact, and there is no temporary file and no flag.
#[test]
fn full_disk_at_the_flush_of_line_edits_fails_the_step_and_keeps_the_old_file() {
    require_root!();
    let (fr, run, content, listing) = apply_on_full_etc(
        "for i in 0..2000 { fs::ensure_line(\"/etc/big.d/x.conf\", `line ${i} of the batch`); }\n",
        "old\n",
    );
    assert_eq!(content, "old\n", "the old file is intact");
    assert!(!listing.contains(".skyhook-tmp-"), "{listing}");
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stdout.contains("FAILED: w.rhai  1"),
        "{}\n{}",
        run.stdout,
        run.stderr
    );
    assert!(
        run.stderr.contains(
            "w.rhai: the work pending at the end of the step failed: \
             failed to write /etc/big.d/x.conf under host root"
        ) && run.stderr.contains("No space left on device"),
        "{}",
        run.stderr
    );
    assert!(!fr.exists("/t/state/flags/demo/1.0.0/w.rhai_W11fWzBd"));
    assert!(leftovers(&fr).is_empty());
}
