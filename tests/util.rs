//! Test harness for the `skyhook-agent` integration tests: throwaway host roots, the
//! standard environment of agent-contract.md section 15, fixture P, recording stubs, an agent
//! runner, and regex helpers.
//!
//! How a [`FakeRoot`] is made: once per test binary a *template* host root is built under
//! `CARGO_TARGET_TMPDIR` (the host's `/bin`, `/lib`, `/lib64`, `/sbin` symlinks reproduced as
//! they are on this Debian machine, `sh`, `bash` and a list of tools copied with every shared
//! library `ldd` reports, each path's symlink chain mirrored so the dynamic loader path
//! `/lib64/ld-linux-x86-64.so.2` resolves inside the root). Each case then gets a fresh
//! tempdir `R` whose files are hard links to the template's (directories and symlinks are
//! recreated, nothing is spawned), plus an empty `T` directory at host path [`T`] (on disk
//! `R/t`). Nothing under `usr/` is ever written by the agent or the tests, so sharing the
//! inodes with the template is safe.
#![allow(dead_code)]

pub mod bus;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Component, Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::Duration;

use regex::Regex;
use serde_json::{Value, json};

/// Host path of the per-case directory `T` (on disk `R/t`).
pub const T: &str = "/t";
/// The standard `SKYHOOK_RESOURCE_ID` of section 15.
pub const RID: &str = "sky-0000-1_demo_1.0.0";
/// Section 15 `TS`: a naive local timestamp as the relay and flags print it.
pub const TS: &str = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{6})?";
/// Section 15 `FTS`: the timestamp in log file names.
pub const FTS: &str = r"\d{4}-\d\d-\d\d-\d{6}";
/// Path of the agent binary under test.
pub const AGENT: &str = env!("CARGO_BIN_EXE_skyhook-agent");
/// How long one agent invocation may take before the test kills it and fails.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Tools copied into every fake root (besides `sh` and `bash`), looked up in `/usr/bin`
/// then `/bin`; missing ones are skipped.
pub const DEFAULT_TOOLS: &[&str] = &[
    "sh", "dash", "bash", "touch", "sleep", "cat", "env", "pwd", "printf", "echo", "mkdir", "rm",
    "cp", "mv", "ls", "chmod", "true", "false", "test", "head", "tr",
];

/// End the current test without running it: `skip!("why {}", x)` ([`skip`]), then `return`.
#[macro_export]
macro_rules! skip {
    ($($why:tt)*) => {{
        $crate::util::skip(&format!($($why)*));
        return;
    }};
}

/// Skip the current test loudly unless running as root (chroot, mounts and namespaces need it).
#[macro_export]
macro_rules! require_root {
    () => {
        if !$crate::util::is_root() {
            skip!("the skyhook-agent integration tests must run as root");
        }
    };
}

/// The current test did not run because `why` (a missing prerequisite).
///
/// Under `SKYHOOK_REQUIRE_ALL=1` (`.ci/run` sets it) that fails the test: a panic naming the
/// test and `why`. Otherwise the test passes, and the skip is recorded: `SKIPPED test: why` in
/// its captured output (shown with `--nocapture`), and in one summary line written to the
/// real stderr when the test binary exits, after libtest's result line:
/// `SKIPPED N tests, counted as passed without running (...): why: test, test; why: test`.
/// libtest captures only the `print!`/`eprint!` family; a write to `io::stderr()` itself goes
/// to fd 2, which `cargo test` shows.
pub fn skip(why: &str) {
    let test = std::thread::current().name().unwrap_or("?").to_string();
    if std::env::var_os("SKYHOOK_REQUIRE_ALL").is_some_and(|v| v == "1") {
        panic!(
            "{test} did not run: {why} (SKYHOOK_REQUIRE_ALL=1: a missing prerequisite fails the test)"
        );
    }
    eprintln!("SKIPPED {test}: {why}");
    let mut skipped = SKIPPED.lock().unwrap_or_else(|e| e.into_inner());
    if skipped.is_empty() {
        // SAFETY: registers a plain `extern "C"` function; libc runs it once at exit.
        let registered = unsafe { libc::atexit(print_skipped) };
        assert_eq!(registered, 0, "atexit");
    }
    skipped.push((why.to_string(), test));
}

/// The tests [`skip`] ended in this process: `(why, test)`.
static SKIPPED: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());

/// At exit: the one summary line of [`SKIPPED`], grouped by reason, to the real stderr.
extern "C" fn print_skipped() {
    use std::io::Write as _;
    let skipped = SKIPPED.lock().unwrap_or_else(|e| e.into_inner());
    let mut by_why: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (why, test) in skipped.iter() {
        by_why.entry(why).or_default().push(test);
    }
    let groups: Vec<String> = by_why
        .iter_mut()
        .map(|(why, tests)| {
            tests.sort_unstable();
            format!("{why}: {}", tests.join(", "))
        })
        .collect();
    let n = skipped.len();
    let line = format!(
        "SKIPPED {n} test{}, counted as passed without running (SKYHOOK_REQUIRE_ALL=1 fails them): {}\n",
        if n == 1 { "" } else { "s" },
        groups.join("; ")
    );
    let _ = io::stderr().write_all(line.as_bytes());
}

/// Whether the test process runs as uid 0.
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Compile `pattern` in multi-line mode after replacing `{TS}` and `{FTS}` with [`TS`]/[`FTS`].
pub fn re(pattern: &str) -> Regex {
    let p = pattern.replace("{FTS}", FTS).replace("{TS}", TS);
    Regex::new(&format!("(?m){p}")).unwrap_or_else(|e| panic!("bad test regex {p}: {e}"))
}

/// Like [`re`] but anchored to the whole text (`\A...\z`) and not multi-line.
pub fn re_full(pattern: &str) -> Regex {
    let p = pattern.replace("{FTS}", FTS).replace("{TS}", TS);
    Regex::new(&format!(r"\A(?:{p})\z")).unwrap_or_else(|e| panic!("bad test regex {p}: {e}"))
}

/// Assert `text` matches the whole-text regex `pattern` (see [`re_full`]).
#[track_caller]
pub fn assert_full_match(text: &str, pattern: &str) {
    assert!(
        re_full(pattern).is_match(text),
        "text {text:?} does not fully match {pattern:?}"
    );
}

/// Standard base64 of `s`: a step flag marker for the rendered `repr(args)_repr(codes)`.
pub fn marker(rendered: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(rendered.as_bytes())
}

// ---------------------------------------------------------------------------------------
// Template root

/// Reproduce the real absolute path `p` under `root`: every symlink met on the way is
/// recreated with the same target and followed, directories are created, the final file is
/// copied with its mode.
fn mirror(root: &Path, p: &Path) -> io::Result<()> {
    let comps: Vec<Component> = p
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect();
    let mut cur = PathBuf::from("/");
    for (i, c) in comps.iter().enumerate() {
        cur.push(c);
        let meta = fs::symlink_metadata(&cur)?;
        let dst = root.join(cur.strip_prefix("/").expect("absolute"));
        if meta.file_type().is_symlink() {
            let target = fs::read_link(&cur)?;
            if fs::symlink_metadata(&dst).is_err() {
                symlink(&target, &dst)?;
            }
            let resolved = if target.is_absolute() {
                target
            } else {
                cur.parent().unwrap_or(Path::new("/")).join(target)
            };
            let rest: PathBuf = comps[i + 1..].iter().collect();
            return mirror(root, &skyhook::host::root::normalize(&resolved.join(rest)));
        } else if meta.is_dir() {
            if fs::symlink_metadata(&dst).is_err() {
                fs::create_dir(&dst)?;
                fs::set_permissions(&dst, fs::Permissions::from_mode(0o755))?;
            }
        } else if fs::symlink_metadata(&dst).is_err() {
            fs::copy(&cur, &dst)?;
        }
    }
    Ok(())
}

fn find_tool(name: &str) -> Option<PathBuf> {
    ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
}

/// Shared libraries of `bins` as `ldd` lists them (one `ldd` process for all).
fn shared_libs(bins: &[PathBuf]) -> Vec<PathBuf> {
    let out = Command::new("ldd").args(bins).output().expect("run ldd");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut libs = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if !line.contains(" (0x") {
            continue;
        }
        let path = if let Some((_, rhs)) = line.split_once("=> ") {
            rhs.split(" (").next().unwrap_or("")
        } else {
            line.split(" (").next().unwrap_or("")
        };
        if path.starts_with('/') && !libs.iter().any(|l: &PathBuf| l == Path::new(path)) {
            libs.push(PathBuf::from(path));
        }
    }
    libs
}

/// Build a host root at `dir` holding `tools` (plus `sh`, `bash`) and their libraries.
pub fn build_root(dir: &Path, tools: &[&str]) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    // The merged-/usr layout: reproduce top-level symlinks (bin -> usr/bin, ...) first.
    for top in ["bin", "sbin", "lib", "lib64", "lib32", "libx32"] {
        let p = Path::new("/").join(top);
        if fs::symlink_metadata(&p)
            .map(|m| m.file_type().is_symlink())
            .unwrap_or(false)
        {
            mirror(dir, &p)?;
        }
    }
    let mut bins: Vec<PathBuf> = Vec::new();
    for t in ["sh", "bash"].iter().chain(tools) {
        match find_tool(t) {
            Some(p) if !bins.contains(&p) => bins.push(p),
            Some(_) => {}
            None if *t == "sh" || *t == "bash" => {
                return Err(io::Error::other(format!("{t} not found on this machine")));
            }
            None => {}
        }
    }
    for p in bins.iter().cloned().chain(shared_libs(&bins)) {
        mirror(dir, &p).map_err(|e| io::Error::other(format!("mirror {}: {e}", p.display())))?;
    }
    for d in ["etc", "tmp", "var/log", "usr/local/bin"] {
        fs::create_dir_all(dir.join(d))?;
    }
    fs::set_permissions(dir.join("tmp"), fs::Permissions::from_mode(0o1777))?;
    Ok(())
}

fn template() -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let dir = base.join(format!("fakeroot-template-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        // Remove templates left by earlier test processes that are gone.
        if let Ok(rd) = fs::read_dir(base) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(pid) = name.strip_prefix("fakeroot-template-")
                    && !Path::new("/proc").join(pid).exists()
                {
                    let _ = fs::remove_dir_all(e.path());
                }
            }
        }
        build_root(&dir, DEFAULT_TOOLS).expect("build the template host root");
        dir
    })
}

/// Recreate `src` at `dst`: directories and symlinks anew, regular files as hard links.
fn link_tree(src: &Path, dst: &Path) -> io::Result<()> {
    for e in fs::read_dir(src)? {
        let e = e?;
        let from = e.path();
        let to = dst.join(e.file_name());
        let ft = e.file_type()?;
        if ft.is_symlink() {
            symlink(fs::read_link(&from)?, &to)?;
        } else if ft.is_dir() {
            fs::create_dir(&to)?;
            fs::set_permissions(&to, fs::metadata(&from)?.permissions())?;
            link_tree(&from, &to)?;
        } else if fs::hard_link(&from, &to).is_err() {
            fs::copy(&from, &to)?;
        }
    }
    Ok(())
}

/// Copy a tree, keeping symlinks as symlinks and file modes (used for the package fixtures).
pub fn copy_tree(src: &Path, dst: &Path) -> io::Result<()> {
    fs::create_dir_all(dst)?;
    for e in fs::read_dir(src)? {
        let e = e?;
        let from = e.path();
        let to = dst.join(e.file_name());
        let ft = e.file_type()?;
        if ft.is_symlink() {
            symlink(fs::read_link(&from)?, &to)?;
        } else if ft.is_dir() {
            copy_tree(&from, &to)?;
        } else {
            fs::copy(&from, &to)?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// FakeRoot

/// One exit-status rule of a recording stub: exit `code` when argument `arg` (1-based, as
/// `$1`, `$2`) equals `value`.
#[derive(Clone, Copy, Debug)]
pub struct ExitRule<'a> {
    /// 1-based argument position.
    pub arg: usize,
    /// Value that triggers the rule.
    pub value: &'a str,
    /// Exit status of the stub when triggered.
    pub code: i32,
}

/// Result of one agent invocation.
#[derive(Debug)]
pub struct Run {
    /// Exit status (`-signal` when killed by a signal).
    pub code: i32,
    /// Captured stdout (lossy UTF-8).
    pub stdout: String,
    /// Captured stderr (lossy UTF-8).
    pub stderr: String,
}

impl Run {
    /// Assert the exit status, printing stdout/stderr on mismatch.
    #[track_caller]
    pub fn code(&self, expected: i32) -> &Self {
        assert_eq!(
            self.code, expected,
            "exit status\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.stdout, self.stderr
        );
        self
    }

    /// Stdout lines.
    pub fn lines(&self) -> Vec<&str> {
        self.stdout.lines().collect()
    }

    /// Index of the first stdout line equal to `line`.
    pub fn line_index(&self, line: &str) -> Option<usize> {
        self.stdout.lines().position(|l| l == line)
    }

    /// Assert stdout has a line exactly equal to `line`.
    #[track_caller]
    pub fn has_line(&self, line: &str) -> &Self {
        assert!(
            self.line_index(line).is_some(),
            "stdout has no line {line:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    /// Assert stdout has a line ending with `suffix`.
    #[track_caller]
    pub fn has_line_ending(&self, suffix: &str) -> &Self {
        assert!(
            self.stdout.lines().any(|l| l.ends_with(suffix)),
            "stdout has no line ending with {suffix:?}\n--- stdout ---\n{}",
            self.stdout
        );
        self
    }

    /// Assert stdout has a line starting with `prefix` and ending with `suffix`.
    #[track_caller]
    pub fn has_line_between(&self, prefix: &str, suffix: &str) -> &Self {
        assert!(
            self.stdout
                .lines()
                .any(|l| l.starts_with(prefix) && l.ends_with(suffix)),
            "stdout has no line {prefix:?}...{suffix:?}\n--- stdout ---\n{}",
            self.stdout
        );
        self
    }

    /// Assert stdout matches the multi-line regex `pattern` (see [`re`]).
    #[track_caller]
    pub fn matches(&self, pattern: &str) -> &Self {
        assert!(
            re(pattern).is_match(&self.stdout),
            "stdout does not match {pattern:?}\n--- stdout ---\n{}",
            self.stdout
        );
        self
    }

    /// Stdout plus stderr, for "the error names X" checks.
    pub fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
}

/// A throwaway host root `R` with a per-case directory `T` inside it.
pub struct FakeRoot {
    _dir: tempfile::TempDir,
    root: PathBuf,
    env: BTreeMap<String, String>,
    path: String,
}

impl Default for FakeRoot {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeRoot {
    /// A fresh root from the template, an empty `T`, and the standard environment.
    pub fn new() -> FakeRoot {
        let tmpl = template();
        let dir = tempfile::Builder::new()
            .prefix("fakeroot-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("create the case root");
        let root = dir.path().to_path_buf();
        link_tree(tmpl, &root).expect("populate the case root");
        fs::create_dir(root.join("t")).expect("create T");
        let mut env = BTreeMap::new();
        env.insert("SKYHOOK_ROOT_DIR".into(), format!("{T}/state"));
        env.insert("SKYHOOK_LOG_DIR".into(), format!("{T}/log"));
        env.insert("SKYHOOK_RESOURCE_ID".into(), RID.into());
        env.insert("COPY_RESOLV".into(), "false".into());
        let path = std::env::var("PATH").unwrap_or_else(|_| {
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()
        });
        env.insert("PATH".into(), path.clone());
        FakeRoot {
            _dir: dir,
            root,
            env,
            path,
        }
    }

    /// A fresh root with additional tools copied from this machine (with their libraries).
    pub fn with_tools(tools: &[&str]) -> FakeRoot {
        let fr = FakeRoot::new();
        build_root(&fr.root, tools).expect("add tools to the case root");
        fr
    }

    /// `R` on disk.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `R` as a string (the agent's ROOT argument).
    pub fn root_str(&self) -> String {
        self.root.to_str().expect("utf-8 root").to_string()
    }

    /// Disk path of host path `host` (absolute, e.g. `/t/state`).
    pub fn host(&self, host: &str) -> PathBuf {
        self.root.join(host.trim_start_matches('/'))
    }

    /// Disk path of `$T/rel`.
    pub fn t(&self, rel: &str) -> PathBuf {
        self.host(&format!("{T}/{rel}"))
    }

    /// Disk path of `F/rel` (`$T/state/flags/rel`).
    pub fn flag(&self, rel: &str) -> PathBuf {
        self.t(&format!("state/flags/{rel}"))
    }

    /// Disk path of `L` (`$T/log/demo/1.0.0`).
    pub fn l(&self) -> PathBuf {
        self.t("log/demo/1.0.0")
    }

    /// Set an environment variable for the agent.
    pub fn set_env(&mut self, k: &str, v: &str) {
        self.env.insert(k.into(), v.into());
    }

    /// Remove an environment variable for the agent.
    pub fn unset_env(&mut self, k: &str) {
        self.env.remove(k);
    }

    /// Write `content` to host path `host` (parents created), mode 0644.
    pub fn write(&self, host: &str, content: impl AsRef<[u8]>) -> PathBuf {
        self.write_mode(host, content, 0o644)
    }

    /// Write `content` to host path `host` (parents created) with `mode`.
    pub fn write_mode(&self, host: &str, content: impl AsRef<[u8]>, mode: u32) -> PathBuf {
        let p = self.host(host);
        fs::create_dir_all(p.parent().expect("parent")).expect("create parents");
        fs::write(&p, content).expect("write file");
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).expect("chmod");
        p
    }

    /// Content of host path `host` (panics when missing).
    #[track_caller]
    pub fn read(&self, host: &str) -> String {
        let p = self.host(host);
        fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
    }

    /// Content of host path `host`, `None` when missing.
    pub fn read_opt(&self, host: &str) -> Option<String> {
        fs::read_to_string(self.host(host)).ok()
    }

    /// Whether host path `host` exists (a dangling symlink counts).
    pub fn exists(&self, host: &str) -> bool {
        fs::symlink_metadata(self.host(host)).is_ok()
    }

    /// Permission bits (0o7777) of host path `host`.
    pub fn mode(&self, host: &str) -> u32 {
        fs::metadata(self.host(host)).expect("stat").mode() & 0o7777
    }

    /// Write `$T/pkg/config.json`.
    pub fn write_config(&self, config: &Value) {
        self.write(
            &format!("{T}/pkg/config.json"),
            serde_json::to_vec_pretty(config).expect("json"),
        );
    }

    /// Write an executable (0755) step file `$T/pkg/skyhook_dir/<path>`.
    pub fn write_step(&self, path: &str, body: &str) -> PathBuf {
        self.write_mode(&format!("{T}/pkg/skyhook_dir/{path}"), body, 0o755)
    }

    /// Fixture P of section 15.
    pub fn write_p(&self) {
        self.write_config(&p_config());
        self.write_step("foo.sh", "#!/bin/sh\necho \"foo $1 $2\"\n");
        self.write_step("foo_check.sh", "#!/bin/sh\nexit 0\n");
    }

    /// A recording stub at host path `<dir>/<name>`: appends `<name> $*` to host path `calls`
    /// and exits with the first matching rule's code (0 otherwise).
    pub fn stub(&self, dir: &str, name: &str, calls: &str, rules: &[ExitRule]) {
        let mut body = format!("#!/bin/sh\necho \"{name} $*\" >> {calls}\n");
        for r in rules {
            body.push_str(&format!(
                "if [ \"${{{}}}\" = '{}' ]; then exit {}; fi\n",
                r.arg, r.value, r.code
            ));
        }
        body.push_str("exit 0\n");
        self.write_mode(&format!("{dir}/{name}"), body, 0o755);
    }

    /// The section 15 interrupt setup: `$T/bin/{systemctl,service,reboot}` recording to
    /// `$T/calls` (systemctl exits 5 when `$2` is `bad`), `PATH=$T/bin:/usr/sbin:/usr/bin:/sbin:/bin`,
    /// and an existing `$T/pkg`.
    pub fn interrupt_setup(&mut self) {
        let bin = format!("{T}/bin");
        let calls = format!("{T}/calls");
        self.stub(
            &bin,
            "systemctl",
            &calls,
            &[ExitRule {
                arg: 2,
                value: "bad",
                code: 5,
            }],
        );
        self.stub(&bin, "service", &calls, &[]);
        self.stub(&bin, "reboot", &calls, &[]);
        self.set_env("PATH", &format!("{T}/bin:/usr/sbin:/usr/bin:/sbin:/bin"));
        fs::create_dir_all(self.t("pkg")).expect("create $T/pkg");
    }

    fn command(&self, program: &str, args: &[OsString]) -> Command {
        let mut c = Command::new(program);
        c.args(args)
            .env_clear()
            .envs(&self.env)
            .current_dir(&self.root)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Run the agent with exactly `args`.
    pub fn run_args(&self, args: &[&str]) -> Run {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        run_to_end(self.command(AGENT, &args).spawn().expect("spawn the agent"))
    }

    /// Run `MODE R $T/pkg`.
    pub fn run(&self, mode: &str) -> Run {
        let r = self.root_str();
        let pkg = format!("{T}/pkg");
        self.run_args(&[mode, &r, &pkg])
    }

    /// Run `interrupt R $T/pkg PAYLOAD`.
    pub fn interrupt(&self, payload: &str) -> Run {
        let r = self.root_str();
        let pkg = format!("{T}/pkg");
        self.run_args(&["interrupt", &r, &pkg, payload])
    }

    /// Spawn the agent with exactly `args` without waiting (stdout/stderr piped).
    pub fn spawn_args(&self, args: &[&str]) -> Child {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        self.command(AGENT, &args).spawn().expect("spawn the agent")
    }

    /// Spawn `MODE R $T/pkg` without waiting (stdout/stderr piped).
    pub fn spawn(&self, mode: &str) -> Child {
        let args: Vec<OsString> = vec![
            mode.into(),
            self.root_str().into(),
            format!("{T}/pkg").into(),
        ];
        self.command(AGENT, &args).spawn().expect("spawn the agent")
    }

    /// Run the agent with `args` in a private mount namespace with a fresh tmpfs over
    /// `/root` (for the legacy forms whose root mount is `/root`). After the agent exits,
    /// reports whether `/root<check>` existed inside the namespace (the tmpfs vanishes with
    /// the namespace). The machine's real `/root` is never touched.
    pub fn run_legacy(&self, args: &[&str], check: &str) -> (Run, bool) {
        let report = self.root.join("legacy-check");
        let script = r#"mount -t tmpfs skyhook-test /root || exit 97
check=$1; report=$2; shift 2
"$@"; rc=$?
if [ -e "/root$check" ] || [ -L "/root$check" ]; then echo present > "$report"; else echo absent > "$report"; fi
exit $rc"#;
        let mut full: Vec<OsString> = vec![
            "-m".into(),
            "sh".into(),
            "-c".into(),
            script.into(),
            "sh".into(),
        ];
        full.push(check.into());
        full.push(report.clone().into());
        full.push(AGENT.into());
        full.extend(args.iter().map(OsString::from));
        let mut cmd = self.command("unshare", &full);
        // unshare and sh come from the machine; the agent keeps the standard environment.
        cmd.env("PATH", &self.path);
        let run = run_to_end(cmd.spawn().expect("spawn unshare"));
        assert_ne!(
            run.code, 97,
            "could not mount a tmpfs over /root: {}",
            run.stderr
        );
        let state = fs::read_to_string(&report)
            .unwrap_or_else(|_| panic!("namespace wrapper did not report; stderr: {}", run.stderr));
        (run, state.trim() == "present")
    }

    /// Content of `$T/calls`, `None` when the file does not exist.
    pub fn calls(&self) -> Option<String> {
        self.read_opt(&format!("{T}/calls"))
    }

    /// Names of the entries of host directory `host` (sorted; empty when missing).
    pub fn list(&self, host: &str) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(self.host(host))
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Names in `L` matching the whole-name regex `pattern` (see [`re_full`]).
    pub fn logs_matching(&self, pattern: &str) -> Vec<String> {
        let r = re_full(pattern);
        self.list(&format!("{T}/log/demo/1.0.0"))
            .into_iter()
            .filter(|n| r.is_match(n))
            .collect()
    }

    /// Every path under `R` relative to it (sorted), for "nothing created" checks.
    pub fn snapshot(&self) -> Vec<String> {
        fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
            if let Ok(rd) = fs::read_dir(dir) {
                for e in rd.flatten() {
                    let p = e.path();
                    out.push(
                        p.strip_prefix(base)
                            .expect("under base")
                            .to_string_lossy()
                            .into_owned(),
                    );
                    if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                        walk(base, &p, out);
                    }
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.root, &self.root, &mut out);
        out.sort();
        out
    }
}

/// Wait for `child` to end (at most [`RUN_TIMEOUT`], then kill it and fail) and collect its
/// output.
pub fn run_to_end(child: Child) -> Run {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(RUN_TIMEOUT) {
        Ok(r) => r.expect("wait for the agent"),
        Err(_) => {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let out = rx.recv().expect("collect killed agent").expect("wait");
            panic!(
                "agent did not finish within {RUN_TIMEOUT:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    };
    Run {
        code: exit_code(out.status),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Exit status as an integer, `-signal` for a signal death.
pub fn exit_code(st: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code().unwrap_or_else(|| -st.signal().unwrap_or(0))
}

/// Read `reader` line by line on a thread; returns a channel of lines and a handle yielding
/// everything read.
pub fn line_reader<R: Read + Send + 'static>(
    reader: R,
) -> (mpsc::Receiver<String>, std::thread::JoinHandle<String>) {
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        let mut all = String::new();
        let mut br = BufReader::new(reader);
        let mut line = String::new();
        loop {
            line.clear();
            match br.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    all.push_str(&line);
                    let _ = tx.send(line.trim_end_matches('\n').to_string());
                }
            }
        }
        all
    });
    (rx, h)
}

/// Wait up to 30 s for the line `want` on `lines` (a [`line_reader`] channel of `child`'s
/// output). On a timeout or the stream's end, `child` is SIGKILLed and reaped, and the error
/// says which line was missing and why.
pub fn await_line(
    child: &mut std::process::Child,
    lines: &mpsc::Receiver<String>,
    want: &str,
) -> Result<(), String> {
    loop {
        match lines.recv_timeout(std::time::Duration::from_secs(30)) {
            Ok(l) if l == want => return Ok(()),
            Ok(_) => {}
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no {want:?} line ({e})"));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Config builders

/// A step object with section 15's defaults (`on_host: true`, idempotence and upgrade_step
/// false, return codes `[0]`).
pub fn step(name: &str, path: &str, args: &[&str]) -> Value {
    json!({"name": name, "path": path, "arguments": args, "returncodes": [0],
           "on_host": true, "idempotence": false, "upgrade_step": false})
}

/// A config.json for package `demo` 1.0.0 with the given `modes` object.
pub fn config(modes: Value) -> Value {
    json!({"schema_version": "v1", "root_dir": "/", "expected_config_files": [],
           "package_name": "demo", "package_version": "1.0.0", "modes": modes})
}

/// Fixture P's config.json.
pub fn p_config() -> Value {
    config(json!({
        "apply": [step("foo", "foo.sh", &["a", "b"])],
        "apply-check": [step("foo_check", "foo_check.sh", &[])],
    }))
}

/// Fixture P's `apply-check` step (for variants that keep P's check).
pub fn p_check_step() -> Value {
    step("foo_check", "foo_check.sh", &[])
}

// ---------------------------------------------------------------------------------------
// Self-tests of the harness (they do not involve the agent).

/// Run `argv` chrooted into `fr` with `fr`'s environment; returns (status, stdout).
fn chroot_run(fr: &FakeRoot, argv: &[&str]) -> (i32, String) {
    let mut args: Vec<OsString> = vec![fr.root().into()];
    args.extend(argv.iter().map(OsString::from));
    let run = run_to_end(
        fr.command("chroot", &args)
            .env("PATH", &fr.path)
            .spawn()
            .expect("chroot"),
    );
    (run.code, run.stdout)
}

#[test]
fn harness_fake_root_layout_and_shells() {
    require_root!();
    let fr = FakeRoot::new();
    for (link, target) in [
        ("bin", "usr/bin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
    ] {
        if let Ok(real) = fs::read_link(Path::new("/").join(link)) {
            assert_eq!(fs::read_link(fr.root().join(link)).expect(link), real);
            assert_eq!(real, Path::new(target), "this machine's /{link}");
        }
    }
    assert_eq!(fr.list("/t"), Vec::<String>::new(), "T starts empty");
    let (code, out) = chroot_run(
        &fr,
        &[
            "/bin/sh",
            "-c",
            "echo sh; /bin/bash -c 'echo bash'; touch /t/x; cat /t/x",
        ],
    );
    assert_eq!((code, out.as_str()), (0, "sh\nbash\n"));
    assert!(fr.exists("/t/x"));
}

#[test]
fn harness_stub_records_calls_and_exit_rules() {
    require_root!();
    let mut fr = FakeRoot::new();
    fr.interrupt_setup();
    let (c1, _) = chroot_run(&fr, &["/t/bin/systemctl", "restart", "containerd"]);
    let (c2, _) = chroot_run(&fr, &["/t/bin/systemctl", "restart", "bad"]);
    let (c3, _) = chroot_run(&fr, &["/t/bin/reboot"]);
    assert_eq!((c1, c2, c3), (0, 5, 0));
    assert_eq!(
        fr.calls().as_deref(),
        Some("systemctl restart containerd\nsystemctl restart bad\nreboot \n")
    );
}

/// Runs only inside [`harness_a_skip_is_seen_and_fails_where_required`]'s child test run
/// (`SKYHOOK_SKIP_PROBE=1`): a test whose prerequisite is missing.
#[test]
fn harness_skip_probe() {
    if std::env::var_os("SKYHOOK_SKIP_PROBE").is_some() {
        skip!("the probe's prerequisite is missing");
    }
}

/// A skipped test passes locally but says so in one line `cargo test` shows (stderr, outside
/// the captured output), and fails under `SKYHOOK_REQUIRE_ALL=1` (`.ci/run`): this test
/// binary run again on [`harness_skip_probe`] alone.
#[test]
fn harness_a_skip_is_seen_and_fails_where_required() {
    let probe = |require_all: bool| {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["util::harness_skip_probe", "--exact", "--test-threads=1"])
            .env("SKYHOOK_SKIP_PROBE", "1")
            .env_remove("SKYHOOK_REQUIRE_ALL");
        if require_all {
            cmd.env("SKYHOOK_REQUIRE_ALL", "1");
        }
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = probe(false);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("test util::harness_skip_probe ... ok"),
        "{out}"
    );
    let summary: Vec<&str> = err.lines().filter(|l| l.starts_with("SKIPPED")).collect();
    assert_eq!(
        summary,
        [
            "SKIPPED 1 test, counted as passed without running (SKYHOOK_REQUIRE_ALL=1 fails them): \
          the probe's prerequisite is missing: util::harness_skip_probe"
        ],
        "stdout:\n{out}\nstderr:\n{err}"
    );
    let (code, out, err) = probe(true);
    assert_eq!(code, Some(101), "{out}{err}");
    assert!(
        out.contains(
            "util::harness_skip_probe did not run: the probe's prerequisite is missing \
             (SKYHOOK_REQUIRE_ALL=1: a missing prerequisite fails the test)"
        ),
        "stdout:\n{out}\nstderr:\n{err}"
    );
    assert!(!err.contains("SKIPPED"), "{err}");
}

#[test]
fn harness_regexes() {
    assert_full_match("2025-01-02T13:45:01.123456", "{TS}");
    assert_full_match("2025-01-02T13:45:01", "{TS}");
    assert!(!re_full("{TS}").is_match("2025-01-02T13:45:01.123"));
    assert_full_match("foo.sh-2025-01-02-134501.log", r"foo\.sh-{FTS}\.log");
    assert_eq!(marker("['a', 'b']_[0]"), "WydhJywgJ2InXV9bMF0=");
    assert_eq!(marker("['?']_[0]"), "Wyc/J11fWzBd");
}

// ---------------------------------------------------------------------------------------
// Helpers for `engine_parity`

impl FakeRoot {
    /// The environment the agent is run with (the standard one plus `set_env`).
    pub fn env_vars(&self) -> &BTreeMap<String, String> {
        &self.env
    }

    /// Run the agent with `args` in a private mount namespace (`unshare -m`) after the shell
    /// snippet `setup` (e.g. a `mount`); a failing `setup` exits 97 and fails the test.
    pub fn run_unshared(&self, setup: &str, args: &[&str]) -> Run {
        let script = format!("{{ {setup} ; }} || exit 97\nPATH=$1; shift\nexec \"$@\"");
        let mut full: Vec<OsString> = vec!["-m".into(), "sh".into(), "-c".into(), script.into()];
        full.push("sh".into());
        full.push(self.env.get("PATH").cloned().unwrap_or_default().into());
        full.push(AGENT.into());
        full.extend(args.iter().map(OsString::from));
        let mut cmd = self.command("unshare", &full);
        // unshare, sh and mount come from the machine; the agent gets its own PATH back.
        cmd.env("PATH", &self.path);
        let run = run_to_end(cmd.spawn().expect("spawn unshare"));
        assert_ne!(
            run.code, 97,
            "namespace setup {setup:?} failed: {}",
            run.stderr
        );
        run
    }
}

/// Every entry under `root`, sorted: relative path, kind (`dir`, `link <target>`, or
/// `file <sha256 of the content>`), mode, uid:gid and mtime (ns). Equal before and after
/// means nothing under `root` was created, removed, rewritten, chmodded, chowned or touched.
pub fn tree(root: &Path) -> Vec<String> {
    use sha2::{Digest, Sha256};
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let mut entries: Vec<_> = fs::read_dir(dir).expect("list").flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            let m = fs::symlink_metadata(&p).expect("lstat");
            let rel = p
                .strip_prefix(base)
                .expect("under base")
                .display()
                .to_string();
            let what = if m.file_type().is_symlink() {
                format!("link {}", fs::read_link(&p).expect("readlink").display())
            } else if m.is_dir() {
                "dir".to_string()
            } else {
                format!("file {:x}", Sha256::digest(fs::read(&p).expect("read")))
            };
            out.push(format!(
                "{rel} {what} {:o} {}:{} {}.{}",
                m.mode(),
                m.uid(),
                m.gid(),
                m.mtime(),
                m.mtime_nsec()
            ));
            if m.is_dir() {
                walk(base, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out
}
