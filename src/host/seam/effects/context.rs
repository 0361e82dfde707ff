//! The lower context the executors and commands work on: the host root, the session's
//! [`HostOptions`], and the directories whose entries changed (fsynced when the step ends).
//! The session ([`crate::host::effects::session::Host`]) owns one and lends it to its
//! executor for each effect, so an executor never needs the session itself.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::host::root::HostRoot;
use crate::host::root::durability::DirSyncs;
use crate::redact::Redactor;

/// Settings of one session, filled by the agent or `skyhook-run` from the step's context.
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// The step's environment (later entries win). Commands get exactly this plus their own
    /// `env`; `PATH` defaults to `/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`.
    pub env: Vec<(String, String)>,
    /// Agent-side configMaps directory (`SKYHOOK_DIR/configmaps` or `--configmaps`); may lie
    /// outside the root. `None`: no configMaps.
    pub configmaps_dir: Option<PathBuf>,
    /// Agent-side node metadata directory (`SKYHOOK_DIR/node-metadata`). `None`: empty maps.
    pub node_metadata_dir: Option<PathBuf>,
    /// Run commands chrooted into the host root (the agent's `on_host`, and `skyhook-run`).
    /// When false they run in the agent's own filesystem.
    pub commands_chrooted: bool,
    /// The step's deadline: the default command timeout is what remains of it.
    pub deadline: Option<Instant>,
    /// Agent-side directory of mounted Secrets (`SKYHOOK_SECRETS_DIR`,
    /// default `/var/run/secrets/skyhook`).
    pub secrets_dir: PathBuf,
    /// Secret names that may be read (`SKYHOOK_ALLOWED_SECRETS`, parsed with
    /// [`crate::host::secrets::parse_allowlist`]).
    pub allowed_secrets: Vec<String>,
    /// Secrets resolved before the step started, as `(name, key, value)` (`skyhook-agent
    /// serve`: the request's `secrets`, through the server's confined resolver). When set,
    /// `secret(name, key)` answers only these coordinates and reads no file (`secrets_dir`
    /// and `allowed_secrets` are not used).
    pub declared_secrets: Option<Vec<(String, String, String)>>,
    /// `SKYHOOK_RESOURCE_ID` (for interrupts' once-per-resource markers, used by the agent).
    pub resource_id: String,
    /// How long package managers wait for their lock (apt's `DPkg::Lock::Timeout`, zypper's
    /// `ZYPP_LOCK_TIMEOUT`), capped by what remains of the deadline. Default 300 s.
    pub package_lock_timeout: Duration,
    /// The redactor to share with the log sink. `None`: a new one from `SKYHOOK_REDACT_ENV`
    /// in `env`. When given, the `SKYHOOK_REDACT_ENV` values are added to it.
    pub redactor: Option<Redactor>,
    /// The step's cancel token: once aborted, a running command is ended (`SIGTERM` to its
    /// group, a grace period, `SIGKILL`) and fails with [`crate::host::HostError::Cancelled`].
    /// Default: a fresh token nobody cancels.
    pub cancel: crate::process::Cancel,
    /// Render unified diffs of file contents in apply mode too (`skyhook-run --apply
    /// --diff`); plan and check mode always render them.
    pub diffs: bool,
    /// A cgroup directory every command joins before `exec` ([`crate::process::Spec::cgroup`]):
    /// a command's end then kills what is left in it. `skyhook-agent serve` gives each Rhai
    /// execution its own; `None` (default): the process group and subreaper sweep.
    pub cgroup: Option<PathBuf>,
    /// Apply mode: keep an undo journal of the step's files under this label
    /// (`<package>-<step>`), so a failed step's files are put back
    /// ([`crate::host::effects::journal`]). `None` (default): no journal.
    pub undo: Option<String>,
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            env: Vec::new(),
            configmaps_dir: None,
            node_metadata_dir: None,
            commands_chrooted: true,
            deadline: None,
            secrets_dir: PathBuf::from("/var/run/secrets/skyhook"),
            allowed_secrets: Vec::new(),
            declared_secrets: None,
            resource_id: String::new(),
            package_lock_timeout: Duration::from_secs(300),
            redactor: None,
            cancel: crate::process::Cancel::new(),
            diffs: false,
            cgroup: None,
            undo: None,
        }
    }
}

/// What an executor works on for one effect: the root, the options, and the directories to
/// fsync at the end of the step ([`crate::host::root::durability`]).
#[derive(Debug)]
pub struct Context {
    /// The host root every path is confined to.
    pub root: HostRoot,
    /// The session's options.
    pub opts: HostOptions,
    /// Directories whose entries the executor changed, fsynced once when the step ends.
    pub(crate) dir_syncs: DirSyncs,
}

impl Context {
    /// A context over `root` with `opts` and nothing to fsync yet.
    pub fn new(root: HostRoot, opts: HostOptions) -> Context {
        Context {
            root,
            opts,
            dir_syncs: DirSyncs::default(),
        }
    }

    /// What remains of the step's deadline; `None` without one.
    pub fn remaining(&self) -> Option<Duration> {
        self.opts
            .deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }
}
