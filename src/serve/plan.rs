//! Execution kind `package_plan` (docs/fleet.md): a whole package planned read-only against
//! the server's `--root`, as `skyhook-run --package DIR --mode MODE --root ROOT` plans it
//! ([`crate::local::PackageRun::plan`], the same code path: flags honoured, so a package
//! applied at that version lists its steps as skipped).
//!
//! The request ([`PlanRequest`], parsed in `plan_request.rs`) carries the package
//! (config.json, `skyhook_dir/` and `root_dir/` files, its configMaps; at most
//! [`MAX_PACKAGE_BYTES`] in [`MAX_PACKAGE_FILES`] files, else `413`), the modes, the
//! package's environment and its entry of the Skyhook CR (the declared interrupts); or a
//! chain of such packages (`packages`, in `dependsOn` order). Every mode of every package
//! is planned in one plan session carried from one to the next ([`crate::host::PlanCarry`]),
//! so a later mode or package plans against the host as the earlier ones would leave it.
//! The package is unpacked into a private temporary directory of the server
//! (never under `--root`); then the plan runs on a thread of its own that has first left the
//! server's mount namespace and bound the host root read-only, `nodev` and `nosuid` at a
//! mount point of its own, with `CAP_SYS_ADMIN` and other capabilities dropped from its
//! bounding set ([`enter_read_only`]): every command the plan runs (queries and guards,
//! which the plan executor runs for real) is forked from that thread and inherits all of
//! it, so the kernel refuses any write to the host, a remount and a write through a device
//! node, whatever the package says. Before that, the thread starts the plan's sandbox
//! ([`crate::process::sandbox`]): every command is made in the plan's own PID namespace
//! (it cannot signal the server or a host process; the root's `/proc` is covered by the
//! plan's own), network namespace (loopback only) and IPC namespace, with the keyring calls
//! refused, under the rlimits of [`super::plan_limits::PlanLimits`], which also caps the plans
//! running at once and their deadlines. A server that cannot do this refuses to plan (the
//! exit names why).
//!
//! Events: the scripts' output as line events, one plan event per change and action of
//! each mode (with `package_mode`), then the exit `{"code": 0}` (every mode
//! planned and no step failed) or `{"code": 1, "error"}`, with `plans` (one
//! `docs/plan.schema.json` package plan, or failure, per mode, in order; a mode after a
//! failed one of its package is not planned, its failure saying so) and `rendered`
//! (the text of each mode under a `--- mode MODE` line). A chain's plan events also name
//! their `package`, and its exit has `packages` instead: per package `package`, `version`,
//! `exit`, `plans` and `rendered`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::event::{Body, Extra, Lines};
use crate::host::secrets::Redactor;
use crate::local::PackageRun;
use crate::package::Mode;
use crate::process::{Cancel, sandbox};

use super::plan_request::PackageJob;
pub use super::plan_request::{
    ChainEntry, FileBody, KIND, MAX_CHAIN_PACKAGES, MAX_PACKAGE_BYTES, MAX_PACKAGE_FILES,
    PackageBody, PlanJob, PlanRefusal, PlanRequest, PlanStart, is_plan_request, parse_plan,
    scope_check,
};

/// Character devices a plan's commands may still open inside the read-only root: the
/// server's own, bound over the root's, where writing changes nothing.
const HARMLESS_DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom"];

/// Capabilities a plan's commands keep in their bounding set: those a read of the host
/// needs (`CAP_DAC_OVERRIDE` reads every file by path) and harmless ones; every other
/// capability the kernel knows is dropped from the bounding set of the plan's thread, so no
/// command it runs has it. Among those dropped: `CAP_SYS_CHROOT` (a second `chroot` walks
/// out of the read-only root to the namespace's `/`), `CAP_SYS_ADMIN` (a remount),
/// `CAP_SYS_PTRACE` (`/proc/PID/root` of a process with more capabilities),
/// `CAP_SETUID`/`CAP_SETGID` (a switch to a service user's ids passes the ptrace check of
/// its processes; `su`/`runuser` fail in a plan), `CAP_DAC_READ_SEARCH` (`open_by_handle_at`
/// opens any file of a filesystem, beyond the root), modules, raw I/O, reboot, mknod,
/// network, clock, BPF, `CAP_SYSLOG` (`dmesg -C`), `CAP_SYS_PACCT`, `CAP_AUDIT_CONTROL`,
/// `CAP_SYS_NICE` and `CAP_SYS_RESOURCE` (renice, rlimits of host processes),
/// `CAP_IPC_OWNER` (other processes' shared memory).
const KEPT_CAPS: &[libc::c_int] = &[
    0,  // CAP_CHOWN
    1,  // CAP_DAC_OVERRIDE
    3,  // CAP_FOWNER
    4,  // CAP_FSETID
    5,  // CAP_KILL (root signals root processes without it anyway)
    29, // CAP_AUDIT_WRITE
];

/// Above any capability number a kernel has (`CAP_LAST_CAP` is 40 in 6.x); an unknown one
/// is `EINVAL` and skipped.
const MAX_CAP: libc::c_int = 63;

/// Leave the server's mount namespace on this thread (`unshare(CLONE_FS | CLONE_NEWNS)`,
/// mounts made private so nothing propagates back), bind `root` (recursively) at `at`, an
/// empty directory, and make that tree read-only, without devices and set-uid
/// (`mount_setattr(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID, AT_RECURSIVE)`:
/// a read-only mount alone still lets a process write to a disk through its device node);
/// with `sandbox` (the plan's), its own procfs is mounted over every procfs of the tree
/// first ([`sandbox::Started::mount_proc_under`]: no host process is found there);
/// then bind the server's harmless character devices (`HARMLESS_DEVICES`) over the tree's
/// and drop every capability but `KEPT_CAPS` from this thread's bounding set, so no
/// command can remount the tree writable or `chroot` out of it. Processes this thread (and the threads it starts) fork inherit all of it.
/// The plan then uses `at` as its host root.
///
/// # Errors
/// The step that failed and its errno (no `CAP_SYS_ADMIN`, a kernel before 5.12).
pub fn enter_read_only(
    root: &Path,
    at: &Path,
    sandbox: Option<&mut sandbox::Started>,
) -> Result<(), String> {
    use nix::mount::{MsFlags, mount};
    let root = std::fs::canonicalize(root).map_err(|e| format!("{}: {e}", root.display()))?;
    // SAFETY: unshare only changes this thread's own fs context and mount namespace.
    if unsafe { libc::unshare(libc::CLONE_FS | libc::CLONE_NEWNS) } != 0 {
        return Err(format!(
            "unshare(CLONE_NEWNS): {}",
            std::io::Error::last_os_error()
        ));
    }
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| format!("making the plan's mounts private: {e}"))?;
    mount(
        Some(&root),
        at,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| format!("bind {} at {}: {e}", root.display(), at.display()))?;
    if let Some(sandbox) = sandbox {
        sandbox
            .mount_proc_under(at)
            .map_err(|e| format!("mounting the plan's own /proc: {e}"))?;
    }
    let nodev = libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NODEV | libc::MOUNT_ATTR_NOSUID;
    set_attr_recursive(at, nodev)?;
    for d in HARMLESS_DEVICES {
        use std::os::unix::fs::FileTypeExt;
        let inside = at.join("dev").join(d);
        let host = Path::new("/dev").join(d);
        let is_char =
            |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_char_device());
        if is_char(&inside) && is_char(&host) {
            // Best effort: without it, opening that device fails inside the plan.
            let _ = mount(
                Some(&host),
                &inside,
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            );
        }
    }
    // Every other mount of this namespace too (the server's own `/`, its state and temporary
    // directories, `/proc`, `/sys`): read-only should a command ever reach them. Devices stay
    // (the harmless ones bound above live there).
    set_attr_recursive(
        Path::new("/"),
        libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOSUID,
    )?;
    for cap in (0..=MAX_CAP).filter(|c| !KEPT_CAPS.contains(c)) {
        // SAFETY: prctl with integer arguments; EINVAL for a capability this kernel lacks.
        let r = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if r != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
            return Err(format!(
                "dropping capability {cap} from the plan's bounding set: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

/// `mount_setattr(path, AT_RECURSIVE, attr_set: attr)`: every mount at and under `path`.
fn set_attr_recursive(path: &Path, attr_set: u64) -> Result<(), String> {
    let c =
        std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    let attr = libc::mount_attr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: a valid C path and a mount_attr of the size given.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::AT_RECURSIVE as libc::c_uint,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if r != 0 {
        return Err(format!(
            "mount_setattr({}, {attr_set:#x}, AT_RECURSIVE): {}",
            path.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Script output of a plan: redacted line events.
struct PlanSink {
    emit: Emit,
    redactor: Redactor,
    streams: Mutex<(Lines, Lines)>,
}

impl PlanSink {
    fn finish(&self) {
        let mut s = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        let (out, err) = &mut *s;
        for l in [out, err] {
            l.finish(&mut |b| (self.emit)(b));
        }
    }
}

impl crate::script::ScriptOutput for PlanSink {
    fn stdout(&self, bytes: &[u8]) {
        let mut s = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        s.0.push(&self.redactor, bytes, &mut |b| (self.emit)(b));
    }
    fn stderr(&self, bytes: &[u8]) {
        let mut s = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        s.1.push(&self.redactor, bytes, &mut |b| (self.emit)(b));
    }
}

/// Where a plan's events go (the execution's ring).
pub type Emit = Arc<dyn Fn(Body) + Send + Sync>;

/// What one plan produced: the exit object and the exit event's extra fields (rendered as
/// JSON text: [`Extra`]).
pub type Ended = (Value, Extra);

/// Plan every mode of `job` against `root` with `engine` (the service's plan engine, held to
/// `--plan-max-operations`) on a thread of its own, read-only ([`enter_read_only`]),
/// emitting events to `emit`. On `cancel` (or a timeout, or this future dropped) the exit is
/// `{"error": "cancelled"}` at once (the service makes a timeout's `{"error": "timeout"}`)
/// and no event of the plan follows it; every process of the plan's mount namespace is
/// killed, then again each `REAP_EVERY` until the thread ends. The thread plans with the
/// same token ([`crate::local::PackageRun::plan_carried`]): the running `.rhai` step ends at
/// its next operation, no further step, mode or package starts. When the plan ends, what its
/// commands left running is killed too.
pub async fn run(
    job: PlanJob,
    root: PathBuf,
    engine: Arc<crate::script::ScriptEngine>,
    emit: Emit,
    cancel: Cancel,
) -> Ended {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let procs = Arc::new(PlanNamespace::default());
    // Disconnected when the plan's thread ends: what a reaper waits for.
    let (running, ended) = std::sync::mpsc::channel::<()>();
    let procs2 = procs.clone();
    // Nothing of the plan is streamed once it is cancelled: its exit ends the stream.
    let (gate, stop) = (emit, cancel.clone());
    let emit: Emit = Arc::new(move |b| {
        if !stop.is_aborted() {
            gate(b);
        }
    });
    let cancel2 = cancel.clone();
    let spawned = std::thread::Builder::new()
        .name("package-plan".into())
        .spawn(move || {
            let _running = running;
            let ended = plan_blocking(&job, &root, &engine, &emit, &procs2, &cancel2);
            // Its place under --max-plans is free before its exit is reported.
            drop(job);
            let _ = tx.send(ended);
        });
    if let Err(e) = spawned {
        return (
            json!({"error": format!("cannot start the plan: {e}")}),
            Extra::default(),
        );
    }
    // Dropped on a cancel, a timeout, or when this future is dropped: the plan's commands
    // are killed until its thread ends.
    let reaper = Reaper(Some((procs, ended)));
    let r = tokio::select! {
        r = rx => r.unwrap_or_else(|_| (json!({"error": "the plan thread panicked"}), Extra::default())),
        () = cancel.aborted() => return (json!({"error": "cancelled"}), Extra::default()),
    };
    reaper.disarm();
    r
}

/// The plan's mount namespace, held open once its thread has entered it: every process in
/// it is the plan's (its commands and whatever they started), which a cancel kills; and
/// the plan's sandbox, whose init a cancel kills first (its whole PID namespace dies, and no
/// later command of the plan can start).
#[derive(Default)]
struct PlanNamespace(
    std::sync::OnceLock<std::fs::File>,
    std::sync::OnceLock<Arc<sandbox::Sandbox>>,
);

impl PlanNamespace {
    /// Record the calling thread's mount namespace (after [`enter_read_only`]).
    fn enter(&self) {
        if let Ok(f) = std::fs::File::open("/proc/thread-self/ns/mnt") {
            let _ = self.0.set(f);
        }
    }

    /// Record the plan's sandbox.
    fn sandbox(&self, s: Arc<sandbox::Sandbox>) {
        let _ = self.1.set(s);
    }

    /// SIGKILL every process of the namespace (through a pidfd, so a pid reused meanwhile
    /// is not hit; never this process), pass after pass until one finds none, at most
    /// [`REAP_PASSES`]. How many were killed.
    fn kill_all(&self) -> usize {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        use std::os::unix::fs::MetadataExt;
        if let Some(s) = self.1.get() {
            s.kill();
        }
        let Some(ns) = self.0.get().and_then(|f| f.metadata().ok()) else {
            return 0;
        };
        let me = std::process::id();
        let mut killed = 0;
        for _ in 0..REAP_PASSES {
            let Ok(dir) = std::fs::read_dir("/proc") else {
                return killed;
            };
            let mut found = 0;
            for pid in dir
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter(|&p| p != me)
            {
                // SAFETY: pidfd_open with a pid and no flags; a new fd or -1.
                let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
                let Ok(fd) = i32::try_from(fd) else { continue };
                if fd < 0 {
                    continue;
                }
                // SAFETY: fd was just returned by pidfd_open and is owned here only.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                let same = std::fs::metadata(format!("/proc/{pid}/ns/mnt"))
                    .is_ok_and(|m| m.dev() == ns.dev() && m.ino() == ns.ino());
                if same {
                    found += 1;
                    // SAFETY: a pidfd of ours, a signal number, no siginfo, no flags.
                    let r = unsafe {
                        libc::syscall(
                            libc::SYS_pidfd_send_signal,
                            fd.as_raw_fd(),
                            libc::SIGKILL,
                            std::ptr::null::<libc::siginfo_t>(),
                            0,
                        )
                    };
                    if r == 0 {
                        killed += 1;
                    }
                }
            }
            if found == 0 {
                break;
            }
        }
        killed
    }
}

/// Passes of [`PlanNamespace::kill_all`] over `/proc` before it gives up on a plan that
/// forks faster than it is killed (its next round, or the thread's end, continues).
const REAP_PASSES: usize = 64;

/// How often a cancelled plan's namespace is swept while its thread still runs (the
/// script may start a command after a sweep).
const REAP_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Armed while a plan runs; when dropped armed (a cancel, a timeout, the request gone), a
/// thread kills the plan's processes, sweep after sweep, until the plan's thread ends.
struct Reaper(Option<(Arc<PlanNamespace>, std::sync::mpsc::Receiver<()>)>);

impl Reaper {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        let Some((ns, ended)) = self.0.take() else {
            return;
        };
        // Once here, so the commands are killed before the exit is reported.
        ns.kill_all();
        let _ = std::thread::Builder::new()
            .name("package-plan-reaper".into())
            .spawn(move || {
                loop {
                    ns.kill_all();
                    match ended.recv_timeout(REAP_EVERY) {
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                        _ => break,
                    }
                }
                // what the last command left before the thread ended
                ns.kill_all();
            });
    }
}

/// Unpack the package into a private temporary directory, then plan it on a read-only
/// thread; the directory is removed after.
fn plan_blocking(
    job: &PlanJob,
    root: &Path,
    engine: &Arc<crate::script::ScriptEngine>,
    emit: &Emit,
    procs: &Arc<PlanNamespace>,
    cancel: &Cancel,
) -> Ended {
    let fail = |msg: String| (json!({"code": 1, "error": msg}), Extra::default());
    let tmp = match tempfile::Builder::new()
        .prefix("skyhook-package-plan-")
        .tempdir()
    {
        Ok(t) => t,
        Err(e) => return fail(format!("cannot make a directory for the package: {e}")),
    };
    let dirs = match job.unpack(tmp.path()) {
        Ok(d) => d,
        Err(e) => return fail(format!("cannot unpack the package: {e}")),
    };
    let at = tmp.path().join("host");
    if let Err(e) = std::fs::create_dir(&at) {
        return fail(format!("cannot make the plan's mount point: {e}"));
    }
    let (job2, root2, emit2) = (job.clone(), root.to_path_buf(), emit.clone());
    let engine = engine.clone();
    let procs2 = procs.clone();
    let cancel = cancel.clone();
    // Its own thread: the namespace is left on that thread only (and its children), and the
    // temporary directory is removed from this one, whose mounts are writable.
    let planned = std::thread::Builder::new()
        .name("package-plan-ro".into())
        .spawn(move || {
            // Its commands in their own PID, network and IPC namespaces, under the limits (the
            // init is started while /proc/sys is writable, to set the namespace's pid_max).
            let mut sandboxed = sandbox::start(&job2.sandbox).map_err(|e| {
                format!("cannot start the plan's sandbox (PID, network and IPC namespaces): {e}")
            })?;
            if let Err(e) = enter_read_only(&root2, &at, Some(&mut sandboxed)) {
                return Err(format!(
                    "cannot make the host root read-only for the plan: {e}"
                ));
            }
            procs2.enter();
            procs2.sandbox(sandboxed.sandbox());
            sandboxed
                .enter()
                .map_err(|e| format!("cannot enter the plan's sandbox: {e}"))?;
            let sb = sandboxed.sandbox();
            if let Some(line) = super::plan_limits::no_cgroup_line(&sb, &job2.sandbox) {
                emit2(Body::Line {
                    stream: "stderr",
                    line,
                    partial: false,
                    lossy: false,
                });
            }
            let planned = plan_packages(&job2, &dirs, &at, &engine, &emit2, &cancel);
            let planned = super::plan_limits::fail_on_oom(planned, &sb, &job2.sandbox);
            // The namespace's init killed: nothing the plan started outlives it.
            drop(sandboxed);
            Ok(planned)
        })
        .map_err(|e| e.to_string())
        .and_then(|h| h.join().map_err(|_| "the plan panicked".to_string()))
        .and_then(|r| r);
    // Nothing the plan started outlives it (a query's background child).
    procs.kill_all();
    drop(tmp);
    planned.unwrap_or_else(fail)
}

/// Plan every package of `job` (unpacked at `dirs`, with their CR files) against `root`,
/// each mode of each in order, in one plan session carried from mode to mode and package to
/// package ([`crate::host::PlanCarry`]): a later mode or package sees the files, directories,
/// removals and deferred work the earlier ones planned. The single form ends as one
/// package's plan ([`plan_modes`]); a chain's exit has `packages`, one `{package, version,
/// exit, plans, rendered}` each, and code 1 when any package's does (its error naming it).
/// A chain stops at its first failed package, as the operator would: each later one is
/// not planned, a line `package NAME VERSION: not planned: package X failed` on stderr and
/// its entry `{"exit": {"code": 1, "error": "not planned: package X failed"},
/// "not_planned": "package X failed", "plans": [], "rendered": ""}`. Once `cancel` is
/// stopped no further mode or package starts. The temporary directories and the root are
/// shown as `<package>` and `<host root>` in every event and the exit ([`Shown`]), so two
/// nodes' plans read the same and the server's paths are never streamed.
fn plan_packages(
    job: &PlanJob,
    dirs: &[(PathBuf, Option<PathBuf>)],
    root: &Path,
    engine: &crate::script::ScriptEngine,
    emit: &Emit,
    cancel: &Cancel,
) -> Ended {
    let shown = Arc::new(Shown::new(dirs, root));
    let emit: Emit = {
        let (emit, shown) = (emit.clone(), shown.clone());
        Arc::new(move |b| emit(shown.body(b)))
    };
    // One budget of planned content for the whole plan (`--plan-bytes`).
    let mut carry = Some(crate::host::PlanCarry::with_budget(job.planned_bytes));
    let (mut errors, mut results) = (Vec::new(), Extra::default());
    // A chain's `packages`, as JSON text.
    let mut packages = String::new();
    let mut failed: Option<String> = None;
    for (p, (dir, cr)) in job.packages.iter().zip(dirs) {
        let (name, version) = p.name();
        if let Some(first) = &failed {
            let why = format!("package {first} failed");
            emit(Body::Line {
                stream: "stderr",
                line: format!("package {name} {version}: not planned: {why}"),
                partial: false,
                lossy: false,
            });
            errors.push(format!("package {name}: not planned: {why}"));
            push_package(
                &mut packages,
                json!({"package": name, "version": version,
                "exit": {"code": 1, "error": format!("not planned: {why}")},
                "not_planned": why, "plans": [], "rendered": ""}),
                &Extra::default(),
            );
            continue;
        }
        if cancel.is_stopped() {
            break;
        }
        let label = job.chain.then_some(name.as_str());
        let (exit, extra) = plan_modes(
            &job.modes,
            p,
            (dir, cr.as_deref()),
            root,
            engine,
            &emit,
            &mut carry,
            label,
            cancel,
        );
        match exit.get("error").and_then(Value::as_str) {
            Some(e) if job.chain => {
                errors.push(format!("package {name}: {e}"));
                failed = Some(name.clone());
            }
            Some(e) => errors.push(e.to_string()),
            None => {}
        }
        let v = json!({"package": name, "version": version, "exit": exit});
        if job.chain {
            push_package(&mut packages, v, &extra);
        } else {
            results = extra;
        }
    }
    if job.chain {
        packages.insert(0, '[');
        packages.push(']');
        results = Extra::default();
        results.push_raw("packages", packages);
    }
    let mut exit = json!({"code": u8::from(!errors.is_empty())});
    if !errors.is_empty() {
        exit["error"] = errors.join("; ").into();
    }
    (shown.value(exit), results.map_raw(|t| shown.text_owned(t)))
}

/// Append one package's entry of a chain's `packages` to `out` (JSON text, entries
/// separated by commas): the object `v` with the fields `extra` rendered.
fn push_package(out: &mut String, v: Value, extra: &Extra) {
    if !out.is_empty() {
        out.push(',');
    }
    let v = v.to_string();
    match v.strip_suffix('}') {
        Some(head) => {
            out.push_str(head);
            extra.write_members(out);
            out.push('}');
        }
        None => out.push_str(&v),
    }
}

/// The server's paths of one plan as its events and exit show them: each package's
/// temporary directory as `<package>`, the plan's mount point of the host root as
/// `<host root>`. (A line longer than [`super::event::MAX_LINE`] is streamed in pieces, each
/// rewritten alone.)
struct Shown(Vec<(String, &'static str)>);

impl Shown {
    fn new(dirs: &[(PathBuf, Option<PathBuf>)], root: &Path) -> Shown {
        let mut paths: Vec<(String, &'static str)> = dirs
            .iter()
            .map(|(d, _)| (d.to_string_lossy().into_owned(), "<package>"))
            .collect();
        paths.push((root.to_string_lossy().into_owned(), "<host root>"));
        Shown(paths)
    }

    fn text(&self, text: &str) -> String {
        self.text_owned(text.to_string())
    }

    /// [`Shown::text`] of a text the caller gives up: copied only when a path is in it.
    fn text_owned(&self, text: String) -> String {
        self.0.iter().fold(text, |t, (p, to)| {
            if t.contains(p.as_str()) {
                t.replace(p.as_str(), to)
            } else {
                t
            }
        })
    }

    /// `v` with the paths replaced in every string (its JSON text rewritten, read back).
    fn value(&self, v: Value) -> Value {
        let text = v.to_string();
        if !self.0.iter().any(|(p, _)| text.contains(p.as_str())) {
            return v;
        }
        serde_json::from_str(&self.text(&text)).unwrap_or(Value::Null)
    }

    fn body(&self, b: Body) -> Body {
        match b {
            Body::Line {
                stream,
                line,
                partial,
                lossy,
            } => Body::Line {
                stream,
                line: self.text(&line),
                partial,
                lossy,
            },
            Body::Plan(p) => Body::Plan(self.value(p)),
            other => other,
        }
    }
}

/// Plan each of `modes` of one package (unpacked at `dir`, its CR file at `cr`) from
/// `carry`, leaving in it what they planned; once `cancel` is stopped no further mode
/// starts. After a mode fails (a step of it, or it could not be planned) no later mode of
/// the package is planned, as the agent runs none: each has a stderr line `package NAME
/// VERSION mode M: not planned: mode X failed`, its entry in `plans` `{"package_mode": M,
/// "ok": false, "error": "not planned: mode X failed", "errors", "not_planned": "mode X
/// failed", "exit_code": 1}`, `not planned: mode X failed` under its `--- mode M` line of
/// `rendered`, and `mode M: not planned: mode X failed` in the exit's error. Events: each
/// script's output, one plan event per change and action (with `package_mode`, and
/// `package` when `label` is given: a chain). The exit and its `plans` and `rendered`.
#[allow(clippy::too_many_arguments)]
fn plan_modes(
    modes: &[Mode],
    job: &PackageJob,
    (dir, cr): (&Path, Option<&Path>),
    root: &Path,
    engine: &crate::script::ScriptEngine,
    emit: &Emit,
    carry: &mut Option<crate::host::PlanCarry>,
    label: Option<&str>,
    cancel: &Cancel,
) -> Ended {
    let sink = Arc::new(PlanSink {
        emit: emit.clone(),
        redactor: Redactor::new(),
        streams: Mutex::new((Lines::new("stdout"), Lines::new("stderr"))),
    });
    let emit = |mut p: Value| {
        if let (Some(name), Value::Object(m)) = (label, &mut p) {
            m.insert("package".into(), name.into());
        }
        emit(Body::Plan(p));
    };
    // `plans` as JSON text: each mode's plan is written out as soon as it is made.
    let mut plans = String::from("[");
    let mut rendered = String::new();
    let mut errors = Vec::new();
    // The first mode that failed: the agent runs no later mode of the package after it.
    let mut failed: Option<Mode> = None;
    for &mode in modes {
        if let Some(first) = failed {
            let why = format!("mode {} failed", first.as_str());
            let (name, version) = job.name();
            (sink.emit)(Body::Line {
                stream: "stderr",
                line: format!(
                    "package {name} {version} mode {}: not planned: {why}",
                    mode.as_str()
                ),
                partial: false,
                lossy: false,
            });
            errors.push(format!("mode {}: not planned: {why}", mode.as_str()));
            let _ = std::fmt::Write::write_fmt(
                &mut rendered,
                format_args!("--- mode {}\nnot planned: {why}\n", mode.as_str()),
            );
            let error = format!("not planned: {why}");
            push_json(
                &mut plans,
                &json!({"package_mode": mode.as_str(), "ok": false,
                "errors": [crate::local::error_json(&error)], "error": error,
                "not_planned": why, "exit_code": 1}),
            );
            continue;
        }
        if cancel.is_stopped() {
            break;
        }
        let run = PackageRun {
            dir: dir.to_path_buf(),
            root: root.to_path_buf(),
            mode,
            configmaps: None,
            env: job.env.clone(),
            capture: Some(crate::script::host_api::Capture::Record),
            skyhook_cr: cr.map(Path::to_path_buf),
            diffs: true,
        };
        let _ =
            std::fmt::Write::write_fmt(&mut rendered, format_args!("--- mode {}\n", mode.as_str()));
        match run.plan_carried(engine, sink.clone(), carry, cancel) {
            Ok(plan) => {
                sink.finish();
                let total = plan.total();
                let r = &plan.redactor;
                for c in &total.changes {
                    let mut p = json!({
                        "package_mode": mode.as_str(),
                        "action": c.summary.split_whitespace().next().unwrap_or(&c.kind),
                        "kind": c.kind,
                        "path": r.redact(&c.target),
                        "summary": r.redact(&c.summary),
                    });
                    if let Some(d) = &c.diff {
                        p["diff"] = r.redact(d).into_owned().into();
                    }
                    emit(p);
                }
                for a in &total.actions {
                    emit(json!({"package_mode": mode.as_str(), "action": a.kind,
                        "path": r.redact(&a.target), "summary": r.redact(&a.summary)}));
                }
                drop(total);
                let ok = plan.ok();
                if !ok {
                    errors.push(format!("mode {}: a step failed", mode.as_str()));
                    failed = Some(mode);
                }
                rendered.push_str(&plan.render_text());
                push_plan(&mut plans, &plan, ok);
            }
            Err(e) => {
                sink.finish();
                let msg = crate::chain::render(&e);
                let _ = std::fmt::Write::write_fmt(&mut rendered, format_args!("error: {msg}\n"));
                errors.push(format!("mode {}: {msg}", mode.as_str()));
                failed = Some(mode);
                push_json(
                    &mut plans,
                    &json!({"package_mode": mode.as_str(), "ok": false, "error": msg,
                    "errors": [crate::local::error_json(&msg)], "exit_code": 1}),
                );
            }
        }
    }
    let mut exit = json!({"code": u8::from(!errors.is_empty())});
    if !errors.is_empty() {
        exit["error"] = errors.join("; ").into();
    }
    plans.push(']');
    plans.shrink_to_fit();
    let mut extra = Extra::default();
    extra.push_raw("plans", plans);
    extra.push("rendered", &Value::String(rendered));
    (exit, extra)
}

/// Append `v` to `out`, the JSON text of an array from its `[`, elements separated by
/// commas.
fn push_json(out: &mut String, v: &Value) {
    use std::fmt::Write as _;
    if !out.ends_with('[') {
        out.push(',');
    }
    let _ = write!(out, "{v}");
}

/// Append one mode's `plan` ([`crate::local::PackagePlan::to_json`] with `exit_code`: 0 when `ok`) to
/// `out` as [`push_json`] does, written one change at a time
/// ([`crate::local::PackagePlan::write_json_open`]).
fn push_plan(out: &mut String, plan: &crate::local::PackagePlan, ok: bool) {
    use std::fmt::Write as _;
    if !out.ends_with('[') {
        out.push(',');
    }
    plan.write_json_open(out);
    let _ = write!(out, ",\"exit_code\":{}}}", u8::from(!ok));
}

#[cfg(test)]
#[path = "tests/plan_tests.rs"]
mod tests;
