//! Execution kind `package_plan` (docs/fleet.md): a whole package planned read-only against
//! the server's `--root`, as `skyhook-run --package DIR --mode MODE --root ROOT` plans it
//! ([`crate::local::PackageRun::plan`], the same code path: flags honoured, so a package
//! applied at that version lists its steps as skipped).
//!
//! The request carries the package (config.json, `skyhook_dir/` and `root_dir/` files, its
//! configMaps; at most [`MAX_PACKAGE_BYTES`] in [`MAX_PACKAGE_FILES`] files, else `413`),
//! the modes, the package's environment and its entry of the Skyhook CR (the declared
//! interrupts). The package is unpacked into a private temporary directory of the server
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
//! `docs/plan.schema.json` package plan, or failure, per mode, in order) and `rendered`
//! (the text of each mode under a `--- mode MODE` line).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::event::{Body, Lines};
use super::plan_limits::{PlanLimits, PlanPermit};
use crate::host::secrets::Redactor;
use crate::local::PackageRun;
use crate::package::Mode;
use crate::process::{Cancel, sandbox};

/// The most bytes a package plan may carry: config.json, every file and configMap, decoded.
pub const MAX_PACKAGE_BYTES: usize = 3 << 20;
/// The most files (files plus configMaps) a package plan may carry.
pub const MAX_PACKAGE_FILES: usize = 2000;

/// The `kind` of a package plan.
pub const KIND: &str = "package_plan";

/// A file of the package: its text, or `{"text"|"base64", "mode"}` (mode: permission bits,
/// default 0644, 0755 for `skyhook_dir/` files).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum FileBody {
    /// UTF-8 content.
    Text(String),
    /// Content as text or base64, with permission bits.
    Full {
        /// UTF-8 content.
        #[serde(default)]
        text: Option<String>,
        /// Base64 content (standard alphabet, padded).
        #[serde(default)]
        base64: Option<String>,
        /// Permission bits (e.g. 493 for 0755).
        #[serde(default)]
        mode: Option<u32>,
    },
}

/// The package of a plan request.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackageBody {
    /// config.json (the object).
    pub config: Value,
    /// Files by package-relative path, each under `skyhook_dir/` or `root_dir/`.
    #[serde(default)]
    pub files: BTreeMap<String, FileBody>,
    /// configMaps: key (a file name) to content.
    #[serde(default)]
    pub configmaps: BTreeMap<String, String>,
}

/// The body of a `package_plan` start (unknown fields refused).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanRequest {
    /// `[A-Za-z0-9._-]{1,128}`.
    pub id: String,
    /// `package_plan`.
    pub kind: String,
    /// The package.
    pub package: PackageBody,
    /// The modes to plan, in order (default `["apply"]`; `interrupt` is the operator's).
    #[serde(default)]
    pub modes: Vec<String>,
    /// The package's environment (the agent's: `SKYHOOK_RESOURCE_ID`, the CR's `env`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The Skyhook CR, or just `{"spec": {"packages": {NAME: ENTRY}}}`: the declared
    /// interrupts the plan judges each step's requests against.
    #[serde(default)]
    pub skyhook_cr: Option<Value>,
    /// Wall-clock limit in seconds.
    #[serde(default)]
    pub timeout_s: Option<f64>,
}

/// A validated package plan, ready to run.
#[derive(Debug, Clone)]
pub struct PlanJob {
    modes: Vec<Mode>,
    env: Vec<(String, String)>,
    config: Vec<u8>,
    /// (package-relative path, content, permission bits)
    files: Vec<(PathBuf, Vec<u8>, u32)>,
    configmaps: Vec<(String, Vec<u8>)>,
    cr: Option<Vec<u8>>,
    /// Limits of each command the plan runs (its sandbox).
    sandbox: sandbox::Limits,
    /// Its place under `--max-plans`, given back when the last clone (the plan's thread's)
    /// is dropped.
    permit: Option<Arc<PlanPermit>>,
}

#[derive(Deserialize)]
struct KindOnly {
    #[serde(default)]
    kind: Option<String>,
}

/// True when `body` is a start of kind `package_plan` (what a `plan` token may start).
pub fn is_plan_request(body: &[u8]) -> bool {
    serde_json::from_slice::<KindOnly>(body).is_ok_and(|k| k.kind.as_deref() == Some(KIND))
}

/// A refused plan start: the HTTP status and the JSON body (`{"error", ...}`), which the
/// service answers as its `Refusal`.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanRefusal {
    /// 400, 403 or 413.
    pub status: u16,
    /// `{"error": "...", ...}`.
    pub body: Value,
}

fn refusal(status: u16, body: Value) -> PlanRefusal {
    PlanRefusal { status, body }
}

/// A valid `package_plan` start: what the service registers (id, timeout) and the job.
#[derive(Debug, Clone)]
pub struct PlanStart {
    /// The execution id (checked by the service as any id).
    pub id: String,
    /// Wall-clock limit in seconds (checked by the service).
    pub timeout_s: Option<f64>,
    /// The validated package plan.
    pub job: PlanJob,
}

fn too_large(detail: String) -> PlanRefusal {
    refusal(
        413,
        json!({"error": "package too large", "detail": detail,
               "max_package_bytes": MAX_PACKAGE_BYTES, "max_package_files": MAX_PACKAGE_FILES}),
    )
}

fn env_name(k: &str) -> bool {
    let mut b = k.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// A package-relative file path: under `skyhook_dir/` or `root_dir/`, plain components only.
fn file_path(p: &str) -> Option<PathBuf> {
    let path = Path::new(p);
    if p.is_empty() || p.len() > 4096 || p.contains('\0') {
        return None;
    }
    let comps: Vec<Component<'_>> = path.components().collect();
    if comps.len() < 2
        || comps.len() > 64
        || !comps.iter().all(|c| matches!(c, Component::Normal(_)))
    {
        return None;
    }
    matches!(
        comps[0].as_os_str().to_str(),
        Some("skyhook_dir" | "root_dir")
    )
    .then(|| path.to_path_buf())
}

/// Parse a start body of kind `package_plan` (`None` for any other kind, which the service
/// parses itself).
///
/// # Errors
/// `400` for malformed JSON, unknown fields, a bad path, mode, env name or base64; `413`
/// over [`MAX_PACKAGE_BYTES`] or [`MAX_PACKAGE_FILES`].
pub fn parse_plan(body: &[u8]) -> Result<Option<PlanStart>, PlanRefusal> {
    if !is_plan_request(body) {
        return Ok(None);
    }
    let req: PlanRequest = serde_json::from_slice(body).map_err(bad)?;
    let job = validate(&req)?;
    Ok(Some(PlanStart {
        id: req.id,
        timeout_s: req.timeout_s,
        job,
    }))
}

fn bad(detail: impl std::fmt::Display) -> PlanRefusal {
    refusal(
        400,
        json!({"error": "bad request", "detail": detail.to_string()}),
    )
}

fn validate(req: &PlanRequest) -> Result<PlanJob, PlanRefusal> {
    use base64::Engine as _;
    let mut modes = Vec::new();
    let names: Vec<&str> = if req.modes.is_empty() {
        vec!["apply"]
    } else {
        req.modes.iter().map(String::as_str).collect()
    };
    for m in names {
        match Mode::parse(m) {
            Some(Mode::Interrupt) => {
                return Err(bad(
                    "mode interrupt is run by the operator: a plan reports the CR's declared interrupts instead",
                ));
            }
            Some(mode) => modes.push(mode),
            None => return Err(bad(format!("unknown mode {m:?}"))),
        }
    }
    let mut env = Vec::new();
    for (k, v) in &req.env {
        if !env_name(k) || v.contains('\0') {
            return Err(bad(format!("invalid env entry {k:?}")));
        }
        env.push((k.clone(), v.clone()));
    }
    if !req.package.config.is_object() {
        return Err(bad("package.config must be the config.json object"));
    }
    let config = serde_json::to_vec_pretty(&req.package.config).map_err(bad)?;
    let mut total = config.len();
    let count = req.package.files.len() + req.package.configmaps.len();
    if count > MAX_PACKAGE_FILES {
        return Err(too_large(format!("{count} files")));
    }
    let mut files = Vec::new();
    for (p, f) in &req.package.files {
        let path = file_path(p).ok_or_else(|| {
            bad(format!(
                "package file {p:?}: expected a relative path under skyhook_dir/ or root_dir/ of plain names"
            ))
        })?;
        let default_mode = if p.starts_with("skyhook_dir/") {
            0o755
        } else {
            0o644
        };
        let (bytes, mode) = match f {
            FileBody::Text(t) => (t.clone().into_bytes(), default_mode),
            FileBody::Full {
                text: Some(t),
                base64: None,
                mode,
            } => (t.clone().into_bytes(), mode.unwrap_or(default_mode)),
            FileBody::Full {
                text: None,
                base64: Some(b),
                mode,
            } => (
                base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .map_err(|e| bad(format!("package file {p:?}: base64: {e}")))?,
                mode.unwrap_or(default_mode),
            ),
            FileBody::Full { .. } => {
                return Err(bad(format!("package file {p:?}: give text or base64")));
            }
        };
        total += bytes.len();
        if total > MAX_PACKAGE_BYTES {
            return Err(too_large(format!(
                "more than {MAX_PACKAGE_BYTES} bytes at {p:?}"
            )));
        }
        files.push((path, bytes, mode & 0o777));
    }
    let mut configmaps = Vec::new();
    for (k, v) in &req.package.configmaps {
        if k.is_empty()
            || k.len() > 253
            || k.contains('/')
            || k.starts_with('.')
            || k.contains('\0')
        {
            return Err(bad(format!("configMap key {k:?} is not a plain file name")));
        }
        total += v.len();
        if total > MAX_PACKAGE_BYTES {
            return Err(too_large(format!(
                "more than {MAX_PACKAGE_BYTES} bytes at configMap {k:?}"
            )));
        }
        configmaps.push((k.clone(), v.clone().into_bytes()));
    }
    let cr = match &req.skyhook_cr {
        None => None,
        Some(v) if v.is_object() => Some(serde_json::to_vec(v).map_err(bad)?),
        Some(_) => return Err(bad("skyhook_cr must be an object")),
    };
    total += cr.as_ref().map_or(0, Vec::len);
    if total > MAX_PACKAGE_BYTES {
        return Err(too_large(format!(
            "more than {MAX_PACKAGE_BYTES} bytes with the CR"
        )));
    }
    Ok(PlanJob {
        modes,
        env,
        config,
        files,
        configmaps,
        cr,
        sandbox: sandbox::Limits::default(),
        permit: None,
    })
}

impl PlanJob {
    /// Hold the plan to the server's `limits` ([`PlanLimits`]): its commands' sandbox limits,
    /// its script steps' deadline, and `permit`, its place under `--max-plans`.
    pub fn bound(&mut self, limits: &PlanLimits, permit: PlanPermit) {
        self.sandbox = limits.sandbox.clone();
        limits.bound_env(&mut self.env);
        self.permit = Some(Arc::new(permit));
    }

    /// Write the package under `dir`: `config.json`, its files, `configmaps/`, `cr.json`.
    fn unpack(&self, dir: &Path) -> std::io::Result<Option<PathBuf>> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(dir.join("config.json"), &self.config)?;
        std::fs::create_dir_all(dir.join("skyhook_dir"))?;
        for (p, bytes, mode) in &self.files {
            let to = dir.join(p);
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&to, bytes)?;
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(*mode))?;
        }
        std::fs::create_dir_all(dir.join("configmaps"))?;
        for (k, v) in &self.configmaps {
            std::fs::write(dir.join("configmaps").join(k), v)?;
        }
        match &self.cr {
            Some(cr) => {
                let p = dir.join("cr.json");
                std::fs::write(&p, cr)?;
                Ok(Some(p))
            }
            None => Ok(None),
        }
    }
}

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

/// What one plan produced: the exit object and the exit event's extra fields.
pub type Ended = (Value, Map<String, Value>);

/// Plan every mode of `job` against `root` with the service's `engine` on a thread of its
/// own, read-only ([`enter_read_only`]), emitting events to `emit`. On `cancel` (or a
/// timeout, or this future dropped) the exit is `{"error": "cancelled"}` at once and every
/// process of the plan's mount namespace is killed, then again each `REAP_EVERY` until
/// the thread (whose script can start a command after a sweep) ends; when the plan ends, what
/// its commands left running is killed too.
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
    let spawned = std::thread::Builder::new()
        .name("package-plan".into())
        .spawn(move || {
            let _running = running;
            let ended = plan_blocking(&job, &root, &engine, &emit, &procs2);
            // Its place under --max-plans is free before its exit is reported.
            drop(job);
            let _ = tx.send(ended);
        });
    if let Err(e) = spawned {
        return (
            json!({"error": format!("cannot start the plan: {e}")}),
            Map::new(),
        );
    }
    // Dropped on a cancel, a timeout, or when this future is dropped: the plan's commands
    // are killed until its thread ends.
    let reaper = Reaper(Some((procs, ended)));
    let r = tokio::select! {
        r = rx => r.unwrap_or_else(|_| (json!({"error": "the plan thread panicked"}), Map::new())),
        () = cancel.aborted() => return (json!({"error": "cancelled"}), Map::new()),
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
) -> Ended {
    let fail = |msg: String| (json!({"code": 1, "error": msg}), Map::new());
    let tmp = match tempfile::Builder::new()
        .prefix("skyhook-package-plan-")
        .tempdir()
    {
        Ok(t) => t,
        Err(e) => return fail(format!("cannot make a directory for the package: {e}")),
    };
    if let Err(e) = std::fs::create_dir(tmp.path().join("package")) {
        return fail(format!("cannot make a directory for the package: {e}"));
    }
    let cr = match job.unpack(&tmp.path().join("package")) {
        Ok(cr) => cr,
        Err(e) => return fail(format!("cannot unpack the package: {e}")),
    };
    let dir = tmp.path().join("package");
    let at = tmp.path().join("host");
    if let Err(e) = std::fs::create_dir(&at) {
        return fail(format!("cannot make the plan's mount point: {e}"));
    }
    let (job2, root2, emit2) = (job.clone(), root.to_path_buf(), emit.clone());
    let engine = engine.clone();
    let procs2 = procs.clone();
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
            let planned = plan_modes(&job2, &dir, &at, &engine, cr.as_deref(), &emit2);
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

fn plan_modes(
    job: &PlanJob,
    dir: &Path,
    root: &Path,
    engine: &crate::script::ScriptEngine,
    cr: Option<&Path>,
    emit: &Emit,
) -> Ended {
    let sink = Arc::new(PlanSink {
        emit: emit.clone(),
        redactor: Redactor::new(),
        streams: Mutex::new((Lines::new("stdout"), Lines::new("stderr"))),
    });
    let mut plans = Vec::new();
    let mut rendered = String::new();
    let mut errors = Vec::new();
    for &mode in &job.modes {
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
        match run.plan(engine, sink.clone()) {
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
                    emit(Body::Plan(p));
                }
                for a in &total.actions {
                    emit(Body::Plan(
                        json!({"package_mode": mode.as_str(), "action": a.kind,
                        "path": r.redact(&a.target), "summary": r.redact(&a.summary)}),
                    ));
                }
                let mut v = plan.to_json();
                let ok = plan.ok();
                if let Value::Object(m) = &mut v {
                    m.insert("exit_code".into(), u8::from(!ok).into());
                }
                if !ok {
                    errors.push(format!("mode {}: a step failed", mode.as_str()));
                }
                rendered.push_str(&plan.render_text());
                plans.push(v);
            }
            Err(e) => {
                sink.finish();
                let msg = crate::chain::render(&e);
                let _ = std::fmt::Write::write_fmt(&mut rendered, format_args!("error: {msg}\n"));
                errors.push(format!("mode {}: {msg}", mode.as_str()));
                plans.push(json!({"ok": false, "error": msg,
                    "errors": [crate::local::error_json(&msg)], "exit_code": 1}));
            }
        }
    }
    // The temporary directory's name differs per plan: shown as `<package>`, so two nodes'
    // plans of one package read the same.
    let tmp = dir.to_string_lossy().into_owned();
    let host = root.to_string_lossy().into_owned();
    let unname = |s: &str| s.replace(&tmp, "<package>").replace(&host, "<host root>");
    let exit = if errors.is_empty() {
        json!({"code": 0})
    } else {
        json!({"code": 1, "error": unname(&errors.join("; "))})
    };
    let plans =
        serde_json::from_str(&unname(&Value::Array(plans).to_string())).unwrap_or(Value::Null);
    let mut extra = Map::new();
    extra.insert("plans".into(), plans);
    extra.insert("rendered".into(), unname(&rendered).into());
    (exit, extra)
}

/// `403` when a `plan`-scoped token starts anything but a `package_plan`.
///
/// # Errors
/// The refusal, naming the scope.
pub fn scope_check(plan_only: bool, body: &[u8]) -> Result<(), PlanRefusal> {
    if plan_only && !is_plan_request(body) {
        return Err(refusal(
            403,
            json!({"error": "forbidden",
                   "detail": "a plan-scoped token can start only kind package_plan"}),
        ));
    }
    Ok(())
}

#[cfg(test)]
#[path = "tests/plan_tests.rs"]
mod tests;
