//! Crash safety (issue 8): faults injected into real `skyhook-run --apply` and
//! `skyhook-agent` processes.
//!
//! - deferred work is recorded ahead of the drop-in write: an agent SIGKILLed between the
//!   drop-in and its daemon-reload or grub regeneration leaves the record, and the rerun runs
//!   the work exactly once and removes it;
//! - concurrent read-modify-writes of one host file by two processes lose no update;
//! - an agent waiting for the package lock ends on SIGTERM, with exit 1 and no `START`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::util::run_to_end;

const SKYHOOK_RUN: &str = env!("CARGO_BIN_EXE_skyhook-run");

/// `skyhook-run SCRIPT --root ROOT --apply --env K=V...` with a known environment.
fn skyhook_run(script: &Path, root: &Path, env: &[&str]) -> Command {
    let mut c = Command::new(SKYHOOK_RUN);
    c.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .arg(script)
        .arg("--root")
        .arg(root)
        .arg("--apply")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for e in env {
        c.arg("--env").arg(e);
    }
    c
}

/// A directory on a tmpfs when `/dev/shm` is one (thousands of fsyncs stay cheap), else in
/// the target dir.
fn fast_tempdir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let base: PathBuf = if shm.is_dir() {
        shm.into()
    } else {
        env!("CARGO_TARGET_TMPDIR").into()
    };
    tempfile::Builder::new()
        .prefix("skyhook-crash-")
        .tempdir_in(base)
        .expect("tempdir")
}

/// Two `skyhook-run --apply` processes at once, each adding 200 blocks and 200 lines of its
/// own to the same file, 20 rounds on a fresh file: every block and line of both is there
/// at the end of every round (without the path lock, a round loses dozens).
#[test]
fn concurrent_ensure_block_and_line_lose_no_update() {
    let dir = fast_tempdir();
    let script = dir.path().join("edit.rhai");
    std::fs::write(
        &script,
        "let who = env(\"WHO\");\n\
         for i in 0..200 {\n\
           fs::ensure_block(\"/etc/shared.conf\", `${who}-${i}`, `${who}=${i}`);\n\
           fs::ensure_line(\"/etc/shared.conf\", `${who} line ${i}`);\n\
         }\n",
    )
    .unwrap();
    for round in 0..20 {
        let root = dir.path().join(format!("root{round}"));
        std::fs::create_dir_all(root.join("etc")).unwrap();
        let a = skyhook_run(&script, &root, &["WHO=a"]).spawn().unwrap();
        let b = skyhook_run(&script, &root, &["WHO=b"]).spawn().unwrap();
        for (who, child) in [("a", a), ("b", b)] {
            let run = run_to_end(child);
            assert_eq!(run.code, 0, "round {round} {who}: {}", run.stderr);
            assert!(
                run.stdout.ends_with("Apply: 400 changed, 0 unchanged.\n"),
                "round {round} {who}: {}",
                run.stdout
            );
        }
        let text = std::fs::read_to_string(root.join("etc/shared.conf")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2 * 200 * 4, "round {round}");
        for who in ["a", "b"] {
            for i in 0..200 {
                let begin = format!("# BEGIN skyhook {who}-{i}");
                let at = lines.iter().position(|l| *l == begin);
                let at = at.unwrap_or_else(|| panic!("round {round}: block {who}-{i} lost"));
                assert_eq!(
                    lines[at + 1..at + 3],
                    [format!("{who}={i}"), format!("# END skyhook {who}-{i}")],
                    "round {round}"
                );
                let line = format!("{who} line {i}");
                assert!(
                    lines.contains(&line.as_str()),
                    "round {round}: {line:?} lost"
                );
            }
        }
        std::fs::remove_dir_all(&root).unwrap();
    }
}
