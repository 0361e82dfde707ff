//! The session's durability policy (`fsync1`, `src/host/durability.rs`), seen from outside:
//! `strace -f -y` of an agent apply of a Rhai step that writes two files into one directory.
//! Each file is fsynced before its rename, the directory once after both renames, and the
//! step's flag (with its own fsync and directory fsync) only after that.

use serde_json::json;

use crate::util::*;

/// The `fsync`/`rename*` calls of `strace -f -qq -y` output with the root's prefix cut from
/// the fd paths and temporary names shown as `<tmp>`: `fsync(/etc/demo/<tmp>)`,
/// `rename(/etc/demo/<tmp> -> /etc/demo/a.conf)`, `fsync(/etc/demo)`. Failed calls and
/// signal lines are dropped; a call strace split between threads is not expected here
/// (the script runs on one thread).
fn durability_calls(text: &str, root: &str) -> Vec<String> {
    let tmp = regex::Regex::new(r"\.skyhook-tmp-[^/>\x22]*").unwrap();
    let fd = regex::Regex::new(r"^\d+<([^>]*)>$").unwrap();
    let path_of = |arg: &str| -> String {
        let arg = arg.trim();
        let p = match fd.captures(arg) {
            Some(c) => c[1].to_string(),
            None => arg.trim_matches('"').to_string(),
        };
        let p = p.strip_prefix(root).unwrap_or(&p).to_string();
        tmp.replace_all(&p, "<tmp>").into_owned()
    };
    let join = |dir: &str, name: &str| {
        let name = path_of(name);
        if name.starts_with('/') {
            name
        } else {
            format!("{}/{name}", path_of(dir))
        }
    };
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((_pid, call)) = line.split_once(' ') else {
            continue;
        };
        let call = call.trim_start();
        let Some((head, ret)) = call.rsplit_once(") = ") else {
            continue;
        };
        if !ret.starts_with('0') {
            continue;
        }
        let Some((name, args)) = head.split_once('(') else {
            continue;
        };
        let args: Vec<&str> = args.split(", ").collect();
        match (name, args.as_slice()) {
            ("fsync" | "fdatasync", [f]) => out.push(format!("{name}({})", path_of(f))),
            ("rename", [from, to]) => {
                out.push(format!("rename({} -> {})", path_of(from), path_of(to)))
            }
            ("renameat" | "renameat2", [d1, from, d2, to, ..]) => {
                out.push(format!("rename({} -> {})", join(d1, from), join(d2, to)))
            }
            _ => {}
        }
    }
    out
}

#[test]
fn strace_lines_become_calls() {
    let log = "10 fsync(5</r/etc/demo/.skyhook-tmp-1-2-3>) = 0\n\
               10 renameat2(6</r/etc/demo>, \".skyhook-tmp-1-2-3\", 6</r/etc/demo>, \"a.conf\", 0) = 0\n\
               10 fsync(7</r/etc/demo>) = 0\n\
               11 rename(\"/x\", \"/y\") = -1 ENOENT (No such file or directory)\n\
               11 --- SIGCHLD {si_signo=SIGCHLD} ---\n";
    assert_eq!(
        durability_calls(log, "/r"),
        [
            "fsync(/etc/demo/<tmp>)",
            "rename(/etc/demo/<tmp> -> /etc/demo/a.conf)",
            "fsync(/etc/demo)",
        ]
    );
}

#[test]
fn a_step_syncs_its_directory_once_after_its_renames_and_before_its_flag() {
    require_root!();
    let Some(strace) = std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|d| std::path::Path::new(d).join("strace"))
        .find(|p| p.is_file())
    else {
        skip!("strace is not installed (.ci/run installs it)");
    };
    let fr = FakeRoot::new();
    fr.write_config(&config(json!({
        "apply": [step("two", "two.rhai", &[])],
        "apply-check": [step("c", "c.sh", &[])],
    })));
    fr.write_step(
        "two.rhai",
        "fs::write(\"/etc/demo/a.conf\", \"a\\n\");\nfs::write(\"/etc/demo/b.conf\", \"b\\n\");\n",
    );
    fr.write_step("c.sh", "#!/bin/sh\nexit 0\n");
    fr.write("/etc/demo/keep", "k\n");
    let out = format!("{}/strace.out", fr.root_str());
    let mut cmd = std::process::Command::new(strace);
    cmd.args(["-f", "-qq", "-y", "-s", "256", "-o", &out])
        .args(["-e", "trace=fsync,fdatasync,rename,renameat,renameat2"])
        .args([AGENT, "apply", &fr.root_str(), "/t/pkg"])
        .env_clear()
        .envs(fr.env_vars())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let r = run_to_end(cmd.spawn().expect("spawn strace"));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(fr.read("/etc/demo/a.conf"), "a\n");
    assert_eq!(fr.read("/etc/demo/b.conf"), "b\n");
    let text = std::fs::read_to_string(&out).unwrap();
    // The step's undo journal is named by the boot id and a random part: `<journal>` here.
    // Its log is made unnamed (`O_TMPFILE`) and linked once locked, so strace shows the
    // descriptor as the unnamed file (`<dir>/#<inode> (deleted)`): that is `<journal>/log`.
    let journal = regex::Regex::new(r"\.undo/demo-two\.[0-9a-f]+-[0-9a-f]+").unwrap();
    let unnamed =
        regex::Regex::new(r"\d+<[^>]*(/var/lib/skyhook/\.undo/<journal>)/#\d+>\(deleted\)")
            .unwrap();
    let calls: Vec<String> = durability_calls(&text, &fr.root_str())
        .iter()
        .map(|c| {
            let c = journal.replace_all(c, ".undo/<journal>");
            unnamed.replace_all(&c, "${1}/log").into_owned()
        })
        .collect();
    let flags = fr.list("/t/state/flags/demo/1.0.0");
    assert_eq!(flags.len(), 1, "{flags:?}");
    let (dir, flag) = ("/t/state/flags/demo/1.0.0", &flags[0]);
    assert!(flag.starts_with("two.rhai_"), "{flag}");
    assert_eq!(
        calls,
        [
            // The run's START marker: agent state, both fsyncs at once.
            "fsync(/t/state/flags/<tmp>)".to_string(),
            "rename(/t/state/flags/<tmp> -> /t/state/flags/START)".into(),
            "fsync(/t/state/flags)".into(),
            // The step's undo journal: its directories, made durable once.
            "fsync(/var/lib/skyhook/.undo/<journal>)".into(),
            "fsync(/var/lib/skyhook)".into(),
            "fsync(/var/lib/skyhook/.undo)".into(),
            // The step's writes: each file's before-state journaled and the file fsynced
            // before its rename, the directory once.
            "fdatasync(/var/lib/skyhook/.undo/<journal>/log)".into(),
            "fsync(/etc/demo/<tmp>)".into(),
            "rename(/etc/demo/<tmp> -> /etc/demo/a.conf)".into(),
            "fdatasync(/var/lib/skyhook/.undo/<journal>/log)".into(),
            "fsync(/etc/demo/<tmp>)".into(),
            "rename(/etc/demo/<tmp> -> /etc/demo/b.conf)".into(),
            "fsync(/etc/demo)".into(),
            // The writes durable, the journal is deleted.
            "fsync(/var/lib/skyhook)".into(),
            // Then the step's flag, with both of its fsyncs.
            format!("fsync({dir}/<tmp>)"),
            format!("rename({dir}/<tmp> -> {dir}/{flag})"),
            format!("fsync({dir})"),
        ],
    );
}
