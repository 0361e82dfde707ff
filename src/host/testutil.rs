//! Test helpers: a temp dir host root, stub programs inside it (with a real `/bin/sh` and its
//! libraries copied in, so chrooted commands run), and tree hashing.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::host::root::HostRoot;
use crate::host::{ExecMode, Host, HostOptions, PlanCarry};

pub(crate) struct TestHost {
    /// Holds `root/` (the host root) and anything outside it (configmaps, secrets).
    pub dir: tempfile::TempDir,
    pub root: PathBuf,
}

impl TestHost {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        TestHost { dir, root }
    }

    pub fn host(&self, mode: ExecMode) -> Host {
        self.host_with(mode, |_| {})
    }

    pub fn host_with(&self, mode: ExecMode, f: impl FnOnce(&mut HostOptions)) -> Host {
        let mut o = HostOptions::default();
        f(&mut o);
        Host::new(HostRoot::open(&self.root).unwrap(), mode, o)
    }

    /// A plan session held to a budget of `budget` bytes, as serve's `--plan-bytes` holds
    /// a package plan ([`PlanCarry::with_budget`]).
    pub fn budgeted_plan(&self, budget: u64) -> Host {
        Host::carried(
            HostRoot::open(&self.root).unwrap(),
            ExecMode::Plan,
            HostOptions::default(),
            PlanCarry::with_budget(budget),
        )
    }

    /// Agent-side path of a host path.
    pub fn p(&self, host: &str) -> PathBuf {
        self.root.join(host.trim_start_matches('/'))
    }

    pub fn file(&self, host: &str, content: &str) {
        let p = self.p(host);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    /// A block device node at `host`, `240:<minor>`: major 240 is for local/experimental
    /// use, so no driver answers it (opening it is `ENXIO`) and no real disk is touched.
    pub fn block_device(&self, host: &str, minor: u64) {
        let p = self.p(host);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        nix::sys::stat::mknod(
            &p,
            nix::sys::stat::SFlag::S_IFBLK,
            nix::sys::stat::Mode::from_bits_truncate(0o660),
            nix::sys::stat::makedev(240, minor),
        )
        .unwrap();
    }

    /// Copy the machine's `program` and the libraries it links into the root.
    pub fn install(&self, program: &str) {
        let mut files = vec![PathBuf::from(program)];
        let out = std::process::Command::new("ldd")
            .arg(program)
            .output()
            .unwrap();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            files.extend(
                line.split_whitespace()
                    .filter(|w| w.starts_with('/'))
                    .map(PathBuf::from),
            );
        }
        for f in files {
            let dst = self.root.join(f.strip_prefix("/").unwrap());
            std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
            std::fs::copy(std::fs::canonicalize(&f).unwrap(), &dst).unwrap();
        }
    }

    pub fn read(&self, host: &str) -> String {
        std::fs::read_to_string(self.p(host)).unwrap()
    }

    /// Copy the machine's `/bin/sh` and the libraries it needs into the root.
    pub fn install_sh(&self) {
        let sh = std::fs::canonicalize("/bin/sh").unwrap();
        let mut files = vec![sh.clone()];
        let out = std::process::Command::new("ldd").arg(&sh).output().unwrap();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            for word in line.split_whitespace() {
                if word.starts_with('/') {
                    files.push(PathBuf::from(word));
                }
            }
        }
        for f in files {
            let dst = self.root.join(f.strip_prefix("/").unwrap());
            std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
            std::fs::copy(&f, &dst).unwrap();
        }
        let dst = self.p("/bin/sh");
        if !dst.exists() {
            std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
            std::fs::copy(&sh, &dst).unwrap();
        }
        std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// A stub program `/usr/bin/<name>`: logs `name args...` to `/stub.log`, then runs
    /// `body` (sh).
    pub fn stub(&self, name: &str, body: &str) {
        let p = self.p(&format!("/usr/bin/{name}"));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(
            &p,
            format!("#!/bin/sh\necho \"{name} $*\" >> /stub.log\n{body}\n"),
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// The recorded stub calls.
    pub fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.p("/stub.log"))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    pub fn clear_calls(&self) {
        let _ = std::fs::remove_file(self.p("/stub.log"));
    }

    /// A systemctl stub whose unit states live in `/state/<unit>.active|enabled`.
    pub fn systemctl_stub(&self) {
        self.install_sh();
        std::fs::create_dir_all(self.p("/state")).unwrap();
        self.stub(
            "systemctl",
            r#"st() { [ -e "/state/$1" ] && read s < "/state/$1" && [ "$s" = yes ]; }
case "$1" in
  is-active) st "$2.active" ;;
  is-enabled) st "$2.enabled" ;;
  start) echo yes > "/state/$2.active" ;;
  stop) echo no > "/state/$2.active" ;;
  enable) echo yes > "/state/$2.enabled" ;;
  disable) echo no > "/state/$2.enabled" ;;
  show) shift 2; for p in "$@"; do p=${p#--property=}; [ "$p" = Missing ] || echo "$p=v-$p"; done ;;
  *) : ;;
esac"#,
        );
    }
}

/// Hash of a whole tree (paths, types, modes, contents, link targets).
pub(crate) fn tree(root: &Path) -> BTreeMap<PathBuf, String> {
    use std::os::unix::fs::MetadataExt;
    let mut out = BTreeMap::new();
    fn go(base: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(base).unwrap().to_path_buf();
            let desc = if m.file_type().is_symlink() {
                format!("link {}", std::fs::read_link(&p).unwrap().display())
            } else if m.is_dir() {
                go(base, &p, out);
                format!("dir {:o} {}:{}", m.mode(), m.uid(), m.gid())
            } else if !m.is_file() {
                // A device node or FIFO: its type and number, never its content.
                format!("node {:o} {}:{} {}", m.mode(), m.uid(), m.gid(), m.rdev())
            } else {
                format!(
                    "file {:o} {}:{} {:?}",
                    m.mode(),
                    m.uid(),
                    m.gid(),
                    std::fs::read(&p).unwrap()
                )
            };
            out.insert(rel, desc);
        }
    }
    go(root, root, &mut out);
    out
}

/// A unit test that cannot run here because `why` (a missing prerequisite), as the
/// integration tests' `util::skip`: under `SKYHOOK_REQUIRE_ALL=1` (`.ci/run`) a panic that
/// fails the test; otherwise a `SKIPPED test: why` line written to the real stderr, which
/// `cargo test` shows (libtest captures only the `print!`/`eprint!` family). The caller
/// returns.
pub(crate) fn skip(why: &str) {
    use std::io::Write as _;
    let test = std::thread::current().name().unwrap_or("?").to_string();
    assert!(
        std::env::var_os("SKYHOOK_REQUIRE_ALL").is_none_or(|v| v != "1"),
        "{test} did not run: {why} (SKYHOOK_REQUIRE_ALL=1: a missing prerequisite fails the test)"
    );
    let line = format!("SKIPPED {test}, counted as passed without running: {why}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// Run `f` on a thread of its own in a new, private mount namespace (the mounts it makes
/// never propagate to this machine's and go away with the thread); a panic in `f` is
/// raised again here, failing the test.
pub fn in_mount_namespace<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            crate::process::sandbox::tests::private_mounts();
            f()
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// A report's columns as tests compare them: the summaries, kinds or targets of its changes,
/// and the summaries of its actions, in order.
impl crate::host::Report {
    /// The summaries of the changes.
    pub(crate) fn change_summaries(&self) -> Vec<&str> {
        self.changes.iter().map(|c| c.summary.as_str()).collect()
    }
    /// The kinds of the changes.
    pub(crate) fn change_kinds(&self) -> Vec<&str> {
        self.changes.iter().map(|c| c.kind.as_str()).collect()
    }
    /// The kind and target of each change.
    pub(crate) fn change_kinds_and_targets(&self) -> Vec<(&str, &str)> {
        self.changes
            .iter()
            .map(|c| (c.kind.as_str(), c.target.as_str()))
            .collect()
    }
    /// The targets of the changes.
    pub(crate) fn change_targets(&self) -> Vec<&str> {
        self.changes.iter().map(|c| c.target.as_str()).collect()
    }
    /// The summaries of the actions.
    pub(crate) fn action_summaries(&self) -> Vec<&str> {
        self.actions.iter().map(|a| a.summary.as_str()).collect()
    }
}
