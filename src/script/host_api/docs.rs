//! The one table of host functions ([`FUNCTIONS`]) and the generators of the script authors'
//! reference (`docs/host-api.md`, [`render_markdown`]) and of the editor definitions file
//! (`docs/skyhook.d.rhai`, [`render_definitions`]).
//!
//! Tests check that every function registered in the engine has a row and every row a
//! function, and that both generated files are up to date. Regenerate them with
//! `SKYHOOK_UPDATE_DOCS=1 cargo test --lib script::host_api::tests::docs`.

use std::fmt::Write as _;

/// How a function behaves in the three execution modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Modes {
    /// Reads the host; runs in every mode and sees planned changes in plan and check mode.
    Query,
    /// Brings the host to a desired state: performed in apply, recorded (with a diff for
    /// files) in plan, reported as drift in check. Returns whether the state differed.
    Change,
    /// Done every time it is called: run in apply, recorded in plan and check, never drift.
    Action,
    /// A command: run in apply; in plan and check recorded as an action and not run, unless
    /// `read_only`; with a guard (`creates`, `removes`, `unless`, `onlyif`) a change.
    Command,
    /// A read-only command: run in every mode.
    ReadOnlyCommand,
    /// Recorded in the report in every mode, never run by the script; never drift.
    Interrupt,
    /// Reads agent-side data (configMaps, node metadata, secrets, counters); the same in
    /// every mode.
    Context,
}

impl Modes {
    /// The short text of the reference's "modes" column.
    pub fn text(self) -> &'static str {
        match self {
            Modes::Query => "query: runs in every mode; sees planned changes",
            Modes::Change => "change: apply performs; plan records (diff); check: drift",
            Modes::Action => "action: apply runs; plan/check record; never drift",
            Modes::Command => {
                "apply runs; plan/check record as action (unless `read_only`); guarded: a change (skipped when done, drift in check)"
            }
            Modes::ReadOnlyCommand => "query: runs in every mode",
            Modes::Interrupt => {
                "declared in every mode, never run by the step; judged against the Skyhook CR"
            }
            Modes::Context => "same in every mode",
        }
    }
}

/// One script function (one overload).
#[derive(Debug, Clone, Copy)]
pub struct FnDoc {
    /// Namespace (`fs`, `service`, ...); empty for a global function.
    pub ns: &'static str,
    /// Function name.
    pub name: &'static str,
    /// Parameters: `(name, type)` with Rhai definition types (`String`, `int`, `bool`,
    /// `Map`, `Array`, `?` for several accepted types).
    pub params: &'static [(&'static str, &'static str)],
    /// Return type (Rhai definition type; `?` for "a value or `()`", `()` for none).
    pub returns: &'static str,
    /// One line for script authors.
    pub doc: &'static str,
    /// Behaviour per mode.
    pub modes: Modes,
    /// Registered by the script layer itself (`changed()`), not by [`super::HostApi`].
    pub script_layer: bool,
    /// The keys the function accepts in its `opts` map (empty: it takes no options map).
    /// Checked against the binding's own list in tests; `skyhook-run check` reports any other
    /// key of a literal options map.
    pub options: &'static [&'static str],
}

impl FnDoc {
    /// `ns::name` or `name`.
    pub fn full_name(&self) -> String {
        super::fname(self.ns, self.name)
    }

    /// `fs::write(path, content, opts)`.
    pub fn call(&self) -> String {
        let names: Vec<&str> = self.params.iter().map(|(n, _)| *n).collect();
        format!("{}({})", self.full_name(), names.join(", "))
    }

    /// `fn write(path: String, content: String) -> bool;`
    pub fn definition(&self) -> String {
        let params: Vec<String> = self
            .params
            .iter()
            .map(|(n, t)| format!("{n}: {t}"))
            .collect();
        format!(
            "fn {}({}) -> {};",
            self.name,
            params.join(", "),
            self.returns
        )
    }
}

const fn f(
    ns: &'static str,
    name: &'static str,
    params: &'static [(&'static str, &'static str)],
    returns: &'static str,
    modes: Modes,
    doc: &'static str,
) -> FnDoc {
    FnDoc {
        ns,
        name,
        params,
        returns,
        doc,
        modes,
        script_layer: false,
        options: &[],
    }
}

/// `d` taking an options map with `keys`.
const fn with_opts(keys: &'static [&'static str], d: FnDoc) -> FnDoc {
    FnDoc { options: keys, ..d }
}

/// The option keys of `query` (and the unguarded part of `run`/`sh`); the binding checks
/// options against these lists, so the docs and the checker cannot drift from it.
pub(crate) const RUN_KEYS: &[&str] = &[
    "check",
    "input",
    "env",
    "cwd",
    "timeout",
    "read_only",
    "stream",
];
/// The option keys of `run`/`sh`: [`RUN_KEYS`] and the guards (`query` takes none).
pub(crate) const GUARDED_RUN_KEYS: &[&str] = &[
    "check",
    "input",
    "env",
    "cwd",
    "timeout",
    "read_only",
    "stream",
    "creates",
    "removes",
    "unless",
    "onlyif",
];
const WRITE_KEYS: &[&str] = &["mode", "owner", "group"];
/// The option keys of `mount::ensure` (checked by its binding).
pub(crate) const MOUNT_KEYS: &[&str] = &["source", "fstype", "options", "state", "dump", "pass"];
/// The option keys of `kmod::blacklist`.
pub(crate) const BLACKLIST_KEYS: &[&str] = &["file", "disable"];
/// The option keys of the other `kmod::` file functions.
pub(crate) const KMOD_FILE_KEYS: &[&str] = &["file"];
/// The option keys of `fs::fetch` (the binding checks against this list).
pub(crate) const FETCH_KEYS: &[&str] =
    &["sha256", "mode", "owner", "group", "timeout", "max_bytes"];
/// The option keys of `pkg::repo` (the binding checks against this list).
pub(crate) const REPO_KEYS: &[&str] = &[
    "url",
    "suites",
    "components",
    "arch",
    "key",
    "key_url",
    "key_sha256",
    "enabled",
];
/// The option keys of `user::ensure` (checked by the binding, [`super::users`]).
pub(crate) const USER_KEYS: &[&str] = &[
    "uid",
    "group",
    "groups",
    "home",
    "shell",
    "system",
    "create_home",
    "comment",
];
/// The option keys of `user::remove`.
pub(crate) const USER_REMOVE_KEYS: &[&str] = &["remove_home"];
/// The option keys of `group::ensure`.
pub(crate) const GROUP_KEYS: &[&str] = &["gid", "system"];

const P: (&str, &str) = ("path", "String");
const NAME: (&str, &str) = ("name", "String");
const OPTS: (&str, &str) = ("opts", "Map");
const ARGV: (&str, &str) = ("argv", "Array");
const KEY_PATH: (&str, &str) = ("key_path", "?");

use Modes::*;

/// Every host function scripts can call, in reference order (namespaces in the order of
/// [`NAMESPACES`]).
pub const FUNCTIONS: &[FnDoc] = &[
    // Commands and secrets (global).
    f(
        "",
        "run",
        &[ARGV],
        "Map",
        Command,
        "Run `argv` (no shell) chrooted in the host root with the step's environment: `#{code, stdout, stderr, ok, planned}` (`planned` is true when the command was recorded, not run). A missing program is an error.",
    ),
    with_opts(
        GUARDED_RUN_KEYS,
        f(
            "",
            "run",
            &[ARGV, OPTS],
            "Map",
            Command,
            "As `run(argv)` with `#{check, input, env, cwd, timeout, read_only, stream}`: `check` throws on a non-zero code (command and stderr tail), `timeout` in seconds kills the process group (default and cap: what remains of the step's deadline), `read_only` marks a query, `stream: true` writes the command's stdout and stderr to the step's as they arrive (the agent's logs timestamp each chunk; nothing when the command is only planned) and keeps only the last 64 KiB of each in the result. Guards make the command a change: `creates: path` (done when the path exists), `removes: path` (done when it does not), `unless: argv` (done when that command exits 0), `onlyif: argv` (done when it exits non-zero). Guards are queries, evaluated in every mode (chrooted like the command, with its `env`, `cwd`, `timeout`); when one says done the command is skipped, counted unchanged and returns `skipped: true`; otherwise it runs (apply), is planned as a change `run: useradd gpuops (unless id gpuops)` (plan) or is drift (check).",
        ),
    ),
    f(
        "",
        "query",
        &[ARGV],
        "Map",
        ReadOnlyCommand,
        "`run(argv)` with `read_only: true`: executed in plan and check mode too.",
    ),
    with_opts(
        RUN_KEYS,
        f(
            "",
            "query",
            &[ARGV, OPTS],
            "Map",
            ReadOnlyCommand,
            "`run(argv, opts)` with `read_only: true`.",
        ),
    ),
    f(
        "",
        "sh",
        &[("script", "String")],
        "Map",
        Command,
        "`run([\"/bin/bash\", \"-c\", script])`.",
    ),
    with_opts(
        GUARDED_RUN_KEYS,
        f(
            "",
            "sh",
            &[("script", "String"), OPTS],
            "Map",
            Command,
            "`run([\"/bin/bash\", \"-c\", script], opts)`, guards included (summary `sh: <script> (creates /path)`).",
        ),
    ),
    f(
        "",
        "secret",
        &[NAME, ("key", "String")],
        "String",
        Context,
        "`<SKYHOOK_SECRETS_DIR>/<name>/<key>`; `name` must be in `SKYHOOK_ALLOWED_SECRETS`. The key is opened confined to `<SKYHOOK_SECRETS_DIR>/<name>`: symlinks inside it (the kubelet's `..data`) are followed, one pointing out of it is not found. A regular file of at most 1 MiB. The value is redacted (`***`) from output, logs, plans and errors.",
    ),
    f(
        "",
        "secret_env",
        &[("var", "String")],
        "String",
        Context,
        "The step environment's variable `var` (error when unset), redacted like `secret`.",
    ),
    FnDoc {
        script_layer: true,
        ..f(
            "",
            "changed",
            &[],
            "int",
            Context,
            "How many changes this step has made (apply) or would make (plan, check) so far; actions are not counted.",
        )
    },
    // fs
    f(
        "fs",
        "exists",
        &[P],
        "bool",
        Query,
        "True when `path` exists (following symlinks).",
    ),
    f(
        "fs",
        "is_file",
        &[P],
        "bool",
        Query,
        "True when `path` is a regular file (following symlinks).",
    ),
    f(
        "fs",
        "is_dir",
        &[P],
        "bool",
        Query,
        "True when `path` is a directory (following symlinks).",
    ),
    f(
        "fs",
        "read",
        &[P],
        "String",
        Query,
        "The file's text; an error when it is missing, a directory, not a regular file (a FIFO, device or socket), larger than 64 MiB or not UTF-8 (and the string size limit, 32 MiB, applies to the text).",
    ),
    f(
        "fs",
        "read_or",
        &[P, ("default", "String")],
        "String",
        Query,
        "The file's text, or `default` when it does not exist.",
    ),
    f(
        "fs",
        "list",
        &[("dir", "String")],
        "Array",
        Query,
        "Entry names of a directory, sorted; an error when it is missing.",
    ),
    f(
        "fs",
        "glob",
        &[("pattern", "String")],
        "Array",
        Query,
        "Sorted host paths matching an absolute pattern (`*`, `?`, `[abc]`, `{a,b}`, `**`).",
    ),
    f(
        "fs",
        "stat",
        &[P],
        "Map",
        Query,
        "`#{kind, size, mode, uid, gid, mtime}` of `path` itself (`kind`: `file`, `dir`, `symlink`, `other`); an error when missing.",
    ),
    f(
        "fs",
        "write",
        &[P, ("content", "String")],
        "bool",
        Change,
        "Replace the file's content atomically; an existing file keeps its mode, owner and extended attributes; a symlink's target is written.",
    ),
    with_opts(
        WRITE_KEYS,
        f(
            "fs",
            "write",
            &[P, ("content", "String"), OPTS],
            "bool",
            Change,
            "As `write`, also setting `#{mode, owner, group}` (mode `0o644` or `\"0644\"`; owner and group names from the root's /etc/passwd and /etc/group, or numbers).",
        ),
    ),
    f(
        "fs",
        "append",
        &[P, ("content", "String")],
        "bool",
        Change,
        "Append to the file (created when missing); changed whenever `content` is not empty.",
    ),
    f(
        "fs",
        "ensure_line",
        &[P, ("line", "String")],
        "bool",
        Change,
        "Append `line` when no line equals it (the file is created when missing). `line` must be one line (no `\\n`, no final `\\r`).",
    ),
    with_opts(
        &["regex", "create"],
        f(
            "fs",
            "ensure_line",
            &[P, ("line", "String"), OPTS],
            "bool",
            Change,
            "With `#{regex, create}`: replace the last line matching `regex` (else append when absent); `create: false` makes a missing file an error.",
        ),
    ),
    f(
        "fs",
        "remove_line",
        &[P, ("regex", "String")],
        "bool",
        Change,
        "Remove every line matching `regex`; a missing file is unchanged.",
    ),
    f(
        "fs",
        "ensure_block",
        &[P, ("id", "String"), ("content", "String")],
        "bool",
        Change,
        "A managed block between `# BEGIN skyhook <id>` and `# END skyhook <id>`, replaced in place or appended.",
    ),
    f(
        "fs",
        "remove_block",
        &[P, ("id", "String")],
        "bool",
        Change,
        "Remove the managed block `id`, markers included.",
    ),
    f(
        "fs",
        "mkdir",
        &[P],
        "bool",
        Change,
        "Create a directory and its parents (mode 0755).",
    ),
    f(
        "fs",
        "mkdir",
        &[P, ("mode", "?")],
        "bool",
        Change,
        "Create a directory and its missing parents (those 0755) with `mode` (int or octal string); an existing one is chmod-ed when it differs.",
    ),
    f(
        "fs",
        "remove",
        &[P],
        "bool",
        Change,
        "Remove a file, a symlink (not its target) or an empty directory; absent is unchanged.",
    ),
    f(
        "fs",
        "remove_all",
        &[P],
        "bool",
        Change,
        "Remove a tree (a symlink itself, not its target); absent is unchanged. A mount point at or below the path fails in every mode, naming it, and nothing is removed.",
    ),
    f(
        "fs",
        "copy",
        &[("src", "String"), ("dst", "String")],
        "bool",
        Change,
        "Make `dst` a copy of file `src` (a new `dst` gets `src`'s mode).",
    ),
    with_opts(
        WRITE_KEYS,
        f(
            "fs",
            "copy",
            &[("src", "String"), ("dst", "String"), OPTS],
            "bool",
            Change,
            "As `copy`, also setting `#{mode, owner, group}`.",
        ),
    ),
    f(
        "fs",
        "chmod",
        &[P, ("mode", "?")],
        "bool",
        Change,
        "Set permission bits (`0o600` or `\"0600\"`), following symlinks.",
    ),
    f(
        "fs",
        "chown",
        &[P, ("owner", "?"), ("group", "?")],
        "bool",
        Change,
        "Set owner and group (names or numbers; `()` keeps), following symlinks.",
    ),
    f(
        "fs",
        "symlink",
        &[("target", "String"), ("link", "String")],
        "bool",
        Change,
        "Make `link` a symlink to `target` (stored as given, may be relative); another link there is replaced.",
    ),
    // service
    f(
        "service",
        "is_active",
        &[NAME],
        "bool",
        Query,
        "`systemctl is-active` succeeds.",
    ),
    f(
        "service",
        "is_enabled",
        &[NAME],
        "bool",
        Query,
        "`systemctl is-enabled` succeeds.",
    ),
    f(
        "service",
        "start",
        &[NAME],
        "bool",
        Change,
        "Start the unit when it is not active.",
    ),
    f(
        "service",
        "stop",
        &[NAME],
        "bool",
        Change,
        "Stop the unit when it is active.",
    ),
    f(
        "service",
        "enable",
        &[NAME],
        "bool",
        Change,
        "Enable the unit when it is not enabled.",
    ),
    f(
        "service",
        "disable",
        &[NAME],
        "bool",
        Change,
        "Disable the unit when it is enabled.",
    ),
    f(
        "service",
        "restart",
        &[NAME],
        "()",
        Action,
        "`systemctl restart`, every time.",
    ),
    f(
        "service",
        "reload",
        &[NAME],
        "()",
        Action,
        "`systemctl reload`, every time.",
    ),
    f(
        "service",
        "daemon_reload",
        &[],
        "()",
        Action,
        "`systemctl daemon-reload`, every time (also satisfies a scheduled one).",
    ),
    f(
        "service",
        "drop_in",
        &[NAME, ("file", "String"), ("content", "String")],
        "bool",
        Change,
        "Write `/etc/systemd/system/<name>.service.d/<file>`; a change schedules one daemon-reload, run before the next `service::` call or at the end of the step (also a failed one).",
    ),
    f(
        "service",
        "remove_drop_in",
        &[NAME, ("file", "String")],
        "bool",
        Change,
        "Remove that drop-in; a change schedules one daemon-reload.",
    ),
    // pkg
    f(
        "pkg",
        "manager",
        &[],
        "?",
        Query,
        "`\"apt\"`, `\"dnf\"`, `\"yum\"`, `\"zypper\"` or `()`, from the host's os-release.",
    ),
    f(
        "pkg",
        "installed",
        &[NAME],
        "bool",
        Query,
        "True when the package is installed; for a pinned name (`\"cuda-drivers=550.90.07-1\"`, `\"cuda-drivers-550.90.07\"`, as `install` takes them) installed in that version.",
    ),
    f(
        "pkg",
        "version",
        &[NAME],
        "?",
        Query,
        "The installed version, or `()`.",
    ),
    f(
        "pkg",
        "install",
        &[("names", "?")],
        "bool",
        Change,
        "Install what is missing of a name or an array of names, non-interactively, waiting (bounded) for the package manager's lock. A name may pin a version: `\"cuda-drivers=550.90.07-1\"` (apt, compared with dpkg's `${Version}`; installed with `--allow-downgrades`) or `\"cuda-drivers-550.90.07\"` / `\"cuda-drivers-550.90.07-1.el9\"` (dnf/yum: a version starting with a digit and containing a `.`, compared with `%{VERSION}-%{RELEASE}`): another installed version is a change. After a changed `pkg::repo` the index is refreshed first.",
    ),
    with_opts(
        &["update"],
        f(
            "pkg",
            "install",
            &[("names", "?"), OPTS],
            "bool",
            Change,
            "As `install`; `#{update: true}` refreshes the package index first (only when something is missing).",
        ),
    ),
    f(
        "pkg",
        "remove",
        &[("names", "?")],
        "bool",
        Change,
        "Remove what is installed of a name or an array of names.",
    ),
    // os
    f(
        "os",
        "release",
        &[],
        "Map",
        Query,
        "The host's os-release as a map (`ID`, `VERSION_ID`, `ID_LIKE`, ...).",
    ),
    f(
        "os",
        "id",
        &[],
        "String",
        Query,
        "os-release `ID` (empty when unknown).",
    ),
    f(
        "os",
        "version",
        &[],
        "String",
        Query,
        "os-release `VERSION_ID` (empty when unknown).",
    ),
    f(
        "os",
        "family",
        &[],
        "String",
        Query,
        "`debian`, `rhel`, `fedora`, `suse` (by `ID`, then `ID_LIKE`), else the `ID`.",
    ),
    f(
        "os",
        "kernel",
        &[],
        "String",
        Query,
        "The running kernel's release (`/proc/sys/kernel/osrelease` under the root).",
    ),
    f(
        "os",
        "arch",
        &[],
        "String",
        Query,
        "The machine architecture (`x86_64`, `aarch64`).",
    ),
    f(
        "os",
        "hostname",
        &[],
        "String",
        Query,
        "`/etc/hostname` under the root (else the kernel's).",
    ),
    f(
        "os",
        "cmdline",
        &[],
        "String",
        Query,
        "The running kernel's command line (`/proc/cmdline` under the root).",
    ),
    // sysctl, grub, ulimit
    f(
        "sysctl",
        "get",
        &[("key", "String")],
        "?",
        Query,
        "The live value of `/proc/sys/<key, dots as slashes>`, or `()` when there is no such entry.",
    ),
    f(
        "sysctl",
        "set",
        &[("key", "String"), ("value", "?")],
        "bool",
        Change,
        "Write the live value when it differs (compared whitespace-normalised); an unknown key is an error. Never writes under /etc.",
    ),
    f(
        "sysctl",
        "persist",
        &[("file", "String"), ("values", "Map")],
        "bool",
        Change,
        "Write `/etc/sysctl.d/<file>`: one `key = value` line per map entry, keys sorted.",
    ),
    f(
        "grub",
        "set_cmdline",
        &[NAME, ("args", "?")],
        "bool",
        Change,
        "`/etc/default/grub.d/<name>.cfg` appending `args` (array, or a string split at spaces) to `GRUB_CMDLINE_LINUX_DEFAULT`; a change runs `update-grub` (or `grubby` on rhel/fedora) once at the end of the step.",
    ),
    f(
        "grub",
        "remove",
        &[NAME],
        "bool",
        Change,
        "Remove that drop-in and take its arguments back.",
    ),
    f(
        "ulimit",
        "persist",
        &[("file", "String"), ("entries", "Array")],
        "bool",
        Change,
        "Write `/etc/security/limits.d/<file>`, one `domain type item value` line per entry; an entry is a map `#{domain, type, item, value}` or a string `\"* soft nofile 65536\"`.",
    ),
    // interrupt
    f(
        "interrupt",
        "reboot",
        &[],
        "()",
        Interrupt,
        "Declare that the step's changes need a reboot: the step fails unless the package's Skyhook CR declares a reboot (`interrupt` or `configInterrupts`), which the operator then runs in its interrupt stage; post-interrupt-check fails until the boot id changed.",
    ),
    f(
        "interrupt",
        "restart_services",
        &[("names", "?")],
        "()",
        Interrupt,
        "Declare that a service (or an array of services) must be restarted: the step fails unless the CR declares it (`type: service` with those units, `restartAllServices` or a reboot).",
    ),
    f(
        "interrupt",
        "restart_all_services",
        &[],
        "()",
        Interrupt,
        "Restart all services after the step succeeded.",
    ),
    // config, node
    f(
        "config",
        "has",
        &[NAME],
        "bool",
        Context,
        "True when the configMap exists.",
    ),
    f(
        "config",
        "get",
        &[NAME],
        "?",
        Context,
        "The configMap's text, or `()`; a configMap that is not UTF-8 text (binary) is an error naming it (`config::has` still sees it).",
    ),
    f(
        "config",
        "names",
        &[],
        "Array",
        Context,
        "Sorted configMap names.",
    ),
    f(
        "config",
        "lines",
        &[NAME],
        "Array",
        Context,
        "Lines, trimmed, without blank lines and `#` comments; an error when missing.",
    ),
    f(
        "config",
        "kv",
        &[NAME],
        "Map",
        Context,
        "A map from `key=value` lines; a malformed line is an error naming the configMap and line number.",
    ),
    f(
        "node",
        "labels",
        &[],
        "Map",
        Context,
        "The node's labels (empty when unknown).",
    ),
    f(
        "node",
        "annotations",
        &[],
        "Map",
        Context,
        "The node's annotations (empty when unknown).",
    ),
    f(
        "node",
        "packages",
        &[],
        "Map",
        Context,
        "The operator's packages map for the node (empty when unknown).",
    ),
    // mount
    with_opts(
        MOUNT_KEYS,
        f(
            "mount",
            "ensure",
            &[P, OPTS],
            "bool",
            Change,
            "Keep exactly one `/etc/fstab` line `<source> <path> <fstype> <options> <dump> <pass>` for mount point `path` (`#{source, fstype}` required; `options` a string or an array, default `defaults`; `dump`/`pass` default 0 0; `source` as given: `UUID=...`, `LABEL=...`, `/dev/...`), replacing another line for it in place and keeping every other line byte for byte; create the mount point (0755). With `state: \"mounted\"` (default) run `mount <path>` when the host's mount table (`/proc/1/mountinfo`) does not list it, or `mount -o remount <path>` when it is mounted and the fstab line changed; mounted from another source or fstype is an error (nothing changed). `state: \"present\"`: fstab and directory only. An unmounted filesystem is drift.",
        ),
    ),
    f(
        "mount",
        "remove",
        &[P],
        "bool",
        Change,
        "`umount <path>` when mounted, then remove the mount point's `/etc/fstab` lines (the directory stays).",
    ),
    f(
        "mount",
        "is_mounted",
        &[P],
        "bool",
        Query,
        "True when the host's mount table (`/proc/1/mountinfo` under the root; octal escapes such as `\\040` decoded) lists `path`; in a plan also after a planned `mount::ensure`.",
    ),
    f(
        "mount",
        "info",
        &[P],
        "?",
        Query,
        "`#{path, source, fstype, options, super_options, root}` of the filesystem mounted at `path` (topmost), or `()`; for a planned mount the fstab line's fields.",
    ),
    // kmod
    f(
        "kmod",
        "blacklist",
        &[NAME],
        "bool",
        Change,
        "Keep `blacklist <name>` in `/etc/modprobe.d/blacklist-<name>.conf`; a change regenerates the initramfs once at the end of the step.",
    ),
    with_opts(
        BLACKLIST_KEYS,
        f(
            "kmod",
            "blacklist",
            &[NAME, OPTS],
            "bool",
            Change,
            "As `blacklist(name)` in `/etc/modprobe.d/<file>.conf`; `disable: true` also keeps `install <name> /bin/false` (no explicit `modprobe` or dependency loads it either), `false` removes that line.",
        ),
    ),
    f(
        "kmod",
        "unblacklist",
        &[NAME],
        "bool",
        Change,
        "Take the `blacklist <name>` and `install <name> /bin/false` lines out of the blacklist file (removed when left empty); a change regenerates the initramfs.",
    ),
    with_opts(
        KMOD_FILE_KEYS,
        f(
            "kmod",
            "unblacklist",
            &[NAME, OPTS],
            "bool",
            Change,
            "As `unblacklist(name)` in `/etc/modprobe.d/<file>.conf`.",
        ),
    ),
    f(
        "kmod",
        "options",
        &[NAME, ("opts", "?")],
        "bool",
        Change,
        "Keep exactly one `options <name> <opts>` line in `/etc/modprobe.d/<name>.conf` (`opts` a string `\"modeset=0\"` or a map `#{modeset: 0}`, rendered `k=v` by key); another `options <name>` line is replaced, other lines stay; a change regenerates the initramfs. A hand-edited value is drift.",
    ),
    with_opts(
        KMOD_FILE_KEYS,
        f(
            "kmod",
            "options",
            &[NAME, ("opts", "?"), ("file_opts", "Map")],
            "bool",
            Change,
            "As `options(name, opts)` in `/etc/modprobe.d/<file>.conf` (`#{file}`), which may also hold the module's blacklist lines.",
        ),
    ),
    f(
        "kmod",
        "remove_options",
        &[NAME],
        "bool",
        Change,
        "Take the `options <name>` lines out of `/etc/modprobe.d/<name>.conf` (removed when left empty); a change regenerates the initramfs.",
    ),
    with_opts(
        KMOD_FILE_KEYS,
        f(
            "kmod",
            "remove_options",
            &[NAME, OPTS],
            "bool",
            Change,
            "As `remove_options(name)` in `/etc/modprobe.d/<file>.conf`.",
        ),
    ),
    f(
        "kmod",
        "load_at_boot",
        &[NAME],
        "bool",
        Change,
        "Keep the line `<name>` in `/etc/modules-load.d/<name>.conf` (read by systemd-modules-load at boot); no initramfs regeneration.",
    ),
    with_opts(
        KMOD_FILE_KEYS,
        f(
            "kmod",
            "load_at_boot",
            &[NAME, OPTS],
            "bool",
            Change,
            "As `load_at_boot(name)` in `/etc/modules-load.d/<file>.conf` (one file may list several modules).",
        ),
    ),
    f(
        "kmod",
        "unload_at_boot",
        &[NAME],
        "bool",
        Change,
        "Take the line `<name>` out of `/etc/modules-load.d/<name>.conf` (removed when left empty).",
    ),
    with_opts(
        KMOD_FILE_KEYS,
        f(
            "kmod",
            "unload_at_boot",
            &[NAME, OPTS],
            "bool",
            Change,
            "As `unload_at_boot(name)` in `/etc/modules-load.d/<file>.conf`.",
        ),
    ),
    f(
        "kmod",
        "loaded",
        &[NAME],
        "bool",
        Query,
        "True when `/proc/modules` under the root lists the module (`-` and `_` equivalent; built-in modules are not listed; `false` without `/proc/modules`); in a plan also after a planned `kmod::load`.",
    ),
    f(
        "kmod",
        "load",
        &[NAME],
        "bool",
        Change,
        "`modprobe <name>` unless loaded: a change (drift in a check) when `/proc/modules` does not list it; without `/proc/modules` an action, run every time.",
    ),
    with_opts(
        FETCH_KEYS,
        f(
            "fs",
            "fetch",
            &[("url", "String"), P, OPTS],
            "bool",
            Change,
            "Download `url` (`http://`, or `https://` trusting the host's CA bundle: the first of `/etc/ssl/certs/ca-certificates.crt`, `/etc/pki/tls/certs/ca-bundle.crt`, `/etc/ssl/ca-bundle.pem`, `/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem`, `/etc/ssl/cert.pem`; up to 5 redirects; no proxy; a URL with `user:password@` is an error, as credentials are not sent) to `path`, verified by `#{sha256}` (required, 64 hex digits), with `#{mode, owner, group}`. Unchanged when the file already has that digest (only `mode`/`owner`/`group` are then set when they differ); otherwise streamed to a temporary file beside it, checked, and renamed into place. A wrong digest, an HTTP error, a body over `max_bytes` (default 4 GiB), the `timeout` (seconds, default 300, capped by the step's deadline) or a cancel fail the call and leave `path` unchanged. A plan makes no request (`would download <url> (sha256 ...) to <path>`); later reads in it see the file, but `fs::read` of it fails (its content is unknown until applied). Check: drift when missing or of another digest.",
        ),
    ),
    with_opts(
        REPO_KEYS,
        f(
            "pkg",
            "repo",
            &[NAME, OPTS],
            "bool",
            Change,
            "Define repository `name` with its signing key, `key` (ASCII-armored text) or `key_url` with `key_sha256` (downloaded as `fs::fetch`). apt: `/etc/apt/sources.list.d/<name>.sources` (deb822: `Types: deb`, `URIs: <url>`, `Suites:` (required; `\"/\"` for a flat repository), `Components:`, `Architectures: <arch>`, `Enabled: no` when `enabled: false`, `Signed-By: /etc/apt/keyrings/<name>.asc`, `.gpg` for a `key_url` ending in `.gpg`); dnf/yum: `/etc/yum.repos.d/<name>.repo` (`[name]`, `name=`, `baseurl=`, `enabled=`, `gpgcheck=1`, `gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-<name>`) and the key there. Files 0644, key first. A change makes the step's next `pkg::install` refresh the package index. A `url` with `user:password@` is refused (credentials belong in `/etc/apt/auth.conf.d/` or the `.repo` file's `username=`/`password=`). zypper hosts: an error.",
        ),
    ),
    f(
        "pkg",
        "remove_repo",
        &[NAME],
        "bool",
        Change,
        "Remove repository `name`'s file and key (as `pkg::repo` wrote them); a change makes the next `pkg::install` refresh the index.",
    ),
    f(
        "pkg",
        "hold",
        &[("names", "?")],
        "bool",
        Change,
        "Hold a name or an array of names at the installed version: `apt-mark hold` (queried with `apt-mark showhold`), `dnf versionlock add` (queried with `dnf versionlock list`; needs the versionlock plugin). Unchanged for held ones.",
    ),
    f(
        "pkg",
        "unhold",
        &[("names", "?")],
        "bool",
        Change,
        "Release held packages: `apt-mark unhold`, `dnf versionlock delete`. Unchanged for ones not held.",
    ),
    // toml, json, ini (structured config), sha256, regex
    f(
        "toml",
        "get",
        &[P, KEY_PATH],
        "?",
        Query,
        "The value at `key_path` (a table as a map, an array of tables as an array of maps, dates as strings), or `()` when the file or key is missing; `[]` is the whole document. A parse error names `file:line:col`.",
    ),
    f(
        "toml",
        "set",
        &[P, KEY_PATH, ("value", "?")],
        "bool",
        Change,
        "Set the value (string, int, float, bool, array, map); missing tables are created (implicit: only the deepest gets a `[header]`); a map becomes a table, merged into an existing one (keys it does not name are kept); an equal value is unchanged. Only the changed or added lines differ; comments, order and layout stay. Creates a missing file.",
    ),
    f(
        "toml",
        "remove",
        &[P, KEY_PATH],
        "bool",
        Change,
        "Remove a key or a whole table (with its sub-tables); absent is unchanged.",
    ),
    f(
        "toml",
        "ensure_table",
        &[P, KEY_PATH],
        "bool",
        Change,
        "Make `key_path` a table, adding `[a.b]` when missing; an error when something else is there.",
    ),
    f(
        "toml",
        "parse",
        &[("text", "String")],
        "Map",
        Context,
        "A TOML text (e.g. the stdout of `containerd config dump`) as a map; a parse error names `<text>:line:col`.",
    ),
    f(
        "json",
        "get",
        &[P, KEY_PATH],
        "?",
        Query,
        "The value at `key_path` (an array of keys and indices, or a JSON Pointer `\"/a/0\"`), or `()` when the file or key is missing (JSON `null` reads as `()` too).",
    ),
    f(
        "json",
        "set",
        &[P, KEY_PATH, ("value", "?")],
        "bool",
        Change,
        "Set the value (`()` is `null`), creating missing objects; a map merges into an existing object. The file keeps its key order (new keys last), indentation unit (tab or N spaces, detected) and final newline. Creates a missing file.",
    ),
    f(
        "json",
        "remove",
        &[P, KEY_PATH],
        "bool",
        Change,
        "Remove an object key or an array element; absent is unchanged.",
    ),
    f(
        "ini",
        "get",
        &[P, ("section", "String"), ("key", "String")],
        "?",
        Query,
        "The value of `key` in `[section]` (`\"\"`: before any header), trimmed, the last one when repeated; `()` when missing. `#` and `;` start comments. A line starting with `[` without `]` is an error naming `file:line:col` (in `set` and `remove` too).",
    ),
    f(
        "ini",
        "set",
        &[P, ("section", "String"), ("key", "String"), ("value", "?")],
        "bool",
        Change,
        "Give `key` exactly `value` (string, number or bool): its first line is rewritten in place (spacing kept) and repeats removed; a new key goes after the section's last line, a new section at the end of the file. Creates a missing file. A value starting or ending with blanks is an error (`get` trims values).",
    ),
    f(
        "ini",
        "remove",
        &[P, ("section", "String"), ("key", "String")],
        "bool",
        Change,
        "Remove every line of `key` in `[section]` (the header stays); absent is unchanged.",
    ),
    f(
        "",
        "sha256",
        &[("text", "String")],
        "String",
        Context,
        "The SHA-256 of the text's UTF-8 bytes, 64 lowercase hex digits (as `sha256sum` prints).",
    ),
    f(
        "",
        "to_json",
        &[("value", "?")],
        "String",
        Context,
        "`value` (a map, array, string, number, bool or `()`) as pretty-printed JSON: two-space indent, map keys in the map's order (sorted: Rhai maps are ordered by key), `()` as `null`, no final newline. The inverse of Rhai's `parse_json(text)` (JSON `null` → `()`).",
    ),
    f(
        "",
        "to_json",
        &[("map", "Map")],
        "String",
        Context,
        "The same for a map; also called as a method, `m.to_json()` (which replaces Rhai's one-line form).",
    ),
    f(
        "regex",
        "is_match",
        &[("pattern", "String"), ("text", "String")],
        "bool",
        Context,
        "Whether `pattern` (Rust `regex` syntax) matches anywhere in `text`; an invalid pattern is an error naming it.",
    ),
    f(
        "regex",
        "captures",
        &[("pattern", "String"), ("text", "String")],
        "?",
        Context,
        "The first match as `[whole, group1, ...]` (`()` for a group that did not match), or `()` when nothing matches.",
    ),
    f(
        "regex",
        "named",
        &[("pattern", "String"), ("text", "String")],
        "?",
        Context,
        "The first match's named groups `(?P<name>...)` as a map (`()` for a group that did not match), or `()` when nothing matches.",
    ),
    f(
        "regex",
        "replace",
        &[
            ("pattern", "String"),
            ("text", "String"),
            ("replacement", "String"),
        ],
        "String",
        Context,
        "`text` with every match replaced; `$1` or `${name}` in `replacement` insert groups, `$$` a `$`.",
    ),
    // user, group
    f(
        "user",
        "exists",
        &[NAME],
        "bool",
        Query,
        "True when `/etc/passwd` has the user (planned users included).",
    ),
    f(
        "user",
        "info",
        &[NAME],
        "?",
        Query,
        "`#{name, uid, gid, group, groups, home, shell, comment}` (`group`: the primary group's name or `()`; `groups`: the groups listing the user as a member), or `()` when there is no such user.",
    ),
    f(
        "user",
        "ensure",
        &[NAME],
        "bool",
        Change,
        "`user::ensure(name, #{})`: create the user when missing with the defaults below.",
    ),
    with_opts(
        USER_KEYS,
        f(
            "user",
            "ensure",
            &[NAME, OPTS],
            "bool",
            Change,
            "Create or update a local user by editing `/etc/passwd`, `/etc/shadow`, `/etc/group`, `/etc/gshadow` (no `useradd`; a plan shows each file's diff, later calls such as `fs::chown(p, name)` see the planned user, a check reports a deleted user or a changed attribute as drift). A new user gets `uid` (else the next free one of login.defs' `UID_MIN..UID_MAX`, or for `system: true` the highest free of `SYS_UID_MIN..SYS_UID_MAX`), `group` (a name or gid that exists; else a group of its own name, created with gid = uid when free), `home` (default `/home/<name>`), `shell` (default `/bin/bash`, `/usr/sbin/nologin` for `system`), `comment`, a locked shadow entry (`!`), membership of each of `groups` (a name or an array; each must exist), and, when `create_home` (default: not `system`), the home directory (mode `HOME_MODE`/`UMASK` of login.defs, else 0750) owned by the user, with a copy of `/etc/skel`. An existing user is changed only in the attributes given (files are not re-owned, homes not moved); `groups` only adds memberships. A uid taken by another user, a bad name (`[a-z_][a-z0-9_-]*[$]?`, at most 32) or a field with `:` or a line break is an error.",
        ),
    ),
    f(
        "user",
        "remove",
        &[NAME],
        "bool",
        Change,
        "Remove the user's passwd and shadow entries and group memberships, and its own group when nothing else uses it (as userdel). False when there is no such user.",
    ),
    with_opts(
        USER_REMOVE_KEYS,
        f(
            "user",
            "remove",
            &[NAME, OPTS],
            "bool",
            Change,
            "As `remove(name)`; `#{remove_home: true}` also removes the home directory when it is a directory owned by the user.",
        ),
    ),
    f(
        "group",
        "exists",
        &[NAME],
        "bool",
        Query,
        "True when `/etc/group` has the group (planned groups included).",
    ),
    f(
        "group",
        "ensure",
        &[NAME],
        "bool",
        Change,
        "`group::ensure(name, #{})`: create the group when missing.",
    ),
    with_opts(
        GROUP_KEYS,
        f(
            "group",
            "ensure",
            &[NAME, OPTS],
            "bool",
            Change,
            "Create a group in `/etc/group` (and `/etc/gshadow` when present) with `gid` (else the next free one of login.defs' `GID_MIN..GID_MAX`, or for `system: true` the highest free of `SYS_GID_MIN..SYS_GID_MAX`); an existing group with another `gid` is changed to it, with its users' primary gid. A gid taken by another group is an error.",
        ),
    ),
    f(
        "group",
        "remove",
        &[NAME],
        "bool",
        Change,
        "Remove the group's `/etc/group` and `/etc/gshadow` entries; an error when it is a user's primary group. False when there is no such group.",
    ),
];

/// A function of the script layer itself (see [`SCRIPT_FUNCTIONS`]).
const fn sl(
    ns: &'static str,
    name: &'static str,
    params: &'static [(&'static str, &'static str)],
    returns: &'static str,
    doc: &'static str,
) -> FnDoc {
    FnDoc {
        script_layer: true,
        ..f(ns, name, params, returns, Context, doc)
    }
}

/// The script layer's own functions besides `changed()` (which is in [`FUNCTIONS`]): the
/// step context, the environment, output and `fail`. Registered by the script runner, not
/// by [`super::HostApi`]; listed in the reference and the editor definitions, and known to
/// the static checker ([`crate::script::lint`]). Tests check each one is registered.
pub const SCRIPT_FUNCTIONS: &[FnDoc] = &[
    sl(
        "",
        "step",
        &[],
        "Map",
        "The step context, the same map as the `step` constant; callable from functions and modules, where the constant is not visible.",
    ),
    sl(
        "",
        "env",
        &[NAME],
        "?",
        "The step environment's variable `name` (a string), or `()` when it is unset.",
    ),
    sl(
        "",
        "env",
        &[NAME, ("default", "?")],
        "?",
        "The step environment's variable `name`, or `default` when it is unset.",
    ),
    sl(
        "",
        "fail",
        &[("msg", "?")],
        "()",
        "End the step as failed with `msg` at this position; it cannot be caught by `try`/`catch`.",
    ),
    sl(
        "",
        "print",
        &[("x", "?")],
        "()",
        "Write `x` (as `to_string` renders it) and a newline to the step's stdout.",
    ),
    sl(
        "",
        "debug",
        &[("x", "?")],
        "()",
        "Write `x` and a newline to the step's stderr: a string as it is, any other value in Rhai's debug form.",
    ),
    sl(
        "log",
        "info",
        &[("msg", "?")],
        "()",
        "`INFO: msg` to the step's stdout.",
    ),
    sl(
        "log",
        "warn",
        &[("msg", "?")],
        "()",
        "`WARN: msg` to the step's stderr.",
    ),
    sl(
        "log",
        "error",
        &[("msg", "?")],
        "()",
        "`ERROR: msg` to the step's stderr.",
    ),
];

/// Namespaces in reference order, with a heading and an introduction.
pub const NAMESPACES: &[(&str, &str, &str)] = &[
    (
        "",
        "Commands, secrets and counters (global functions)",
        "Commands run chrooted in the host root, in their own process group, with the step's environment only. Their result is a map `#{code, stdout, stderr, ok, planned}`: output is captured whole and returned when the command ends, unless `stream: true` relays it live (and keeps only the last 64 KiB of each stream in the result).",
    ),
    (
        "fs",
        "Files — `fs::`",
        "Every path is an absolute host path resolved inside the host root (`..` and symlinks never leave it); a relative path is an error (\"paths must be absolute\"). Writes are atomic (temp file, fsync, rename). A file is read whole only when it is a regular file of at most 64 MiB: a FIFO, device or socket, or a larger file, fails the call with an error naming the path (and the limit) before anything is read, so it can neither block the step nor fill the agent's memory. That applies to `read`, `read_or`, the line and block edits, `append`, `copy` and the comparison `write` makes before replacing a file.",
    ),
    (
        "service",
        "Services (systemd) — `service::`",
        "Every call first runs a daemon-reload scheduled by a changed drop-in.",
    ),
    (
        "pkg",
        "Packages — `pkg::`",
        "The package manager is chosen from the host's os-release. A plan or check never runs the package manager's mutating commands (not even `apt-get update`).",
    ),
    (
        "os",
        "OS facts — `os::`",
        "Read as files under the host root, so a test root can provide them.",
    ),
    (
        "sysctl",
        "Kernel parameters — `sysctl::`",
        "The live values under `/proc/sys` of the root; `persist` writes the boot-time file.",
    ),
    (
        "grub",
        "Kernel command line — `grub::`",
        "Drop-ins of several packages compose instead of overwriting each other and the distribution's defaults.",
    ),
    ("ulimit", "Resource limits — `ulimit::`", ""),
    (
        "interrupt",
        "Interrupts — `interrupt::`",
        "A step never interrupts the node itself: the operator cordons and drains a node only for packages whose Skyhook CR declares an `interrupt` (or `configInterrupts`). After the step succeeded, each request is compared with the package's entry in `SKYHOOK_DIR/node-metadata/packages.json` (`skyhook-run`: `--skyhook-cr FILE`): declared → one line saying the operator runs it; not declared → the step fails with the CR lines to add; no node metadata → a warning. Restarting a service as part of ordinary work is `service::restart`, an action.",
    ),
    (
        "config",
        "configMaps — `config::`",
        "Files under `SKYHOOK_DIR/configmaps/` (for `skyhook-run`, the `--configmaps` folder). Names starting with `.` are never listed. Like files under the host root, a configMap, node metadata file or secret is read only when it is a regular file of at most 64 MiB.",
    ),
    (
        "node",
        "Node metadata — `node::`",
        "From the operator's `SKYHOOK_DIR/node-metadata/` JSON files.",
    ),
    (
        "mount",
        "Filesystems — `mount::`",
        "`/etc/fstab` holds one line per mount point; the live state is the host's mount table, `/proc/1/mountinfo` under the root (the agent's own mount namespace is not the host's; a root without it reads as nothing mounted). `mount`, `mount -o remount` and `umount` run chrooted, so they read the host's fstab; the agent's root mount needs `mountPropagation: Bidirectional` for a mount to reach the host. In a plan, a later `is_mounted` sees an earlier planned mount or unmount.",
    ),
    (
        "kmod",
        "Kernel modules — `kmod::`",
        "Each function keeps only its own lines of its file (`/etc/modprobe.d/*.conf`, `/etc/modules-load.d/*.conf`), so comments and other modules' lines stay and a blacklist and options can share a file (`#{file}`); module names compare with `-` and `_` equivalent. A changed blacklist or options file schedules ONE initramfs regeneration at the end of the step: `update-initramfs -u`, or `dracut -f` on the rhel and fedora families; it is recorded ahead in `/var/lib/skyhook/.deferred/initramfs.json` and run by the next step when it failed or the agent died (a plan lists it as an action).",
    ),
    (
        "toml",
        "TOML files — `toml::`",
        "Edits keep comments and layout (over the `toml_edit` crate): a one-key change is a one-line diff, a new key is indented like its table's keys, a new table is placed after its last sibling table and formatted like it. `key_path` is an array of keys taken literally (`[\"plugins\", \"io.containerd.grpc.v1.cri\", \"containerd\"]`; integers index arrays, in `get` only) or one TOML dotted-key string (`plugins.\"io.containerd.grpc.v1.cri\".containerd`: keys with dots are quoted, so it is unambiguous). Every write is one atomic file write under the path's lock, a diff in a plan, drift in a check.",
    ),
    (
        "json",
        "JSON files — `json::`",
        "Key order, the indentation unit and the final newline are kept; the rest of the layout is normalised to that pretty-printed form on the first change (a one-line file stays on one line). `key_path` is an array of keys and integer indices, or a JSON Pointer (RFC 6901) string.",
    ),
    (
        "ini",
        "INI files — `ini::`",
        "systemd units and other INI-style files, edited line by line: every line but the changed ones stays byte for byte. Keys and sections are case-sensitive; sections of the same name count as one; lines without `=` are kept and are not keys.",
    ),
    (
        "regex",
        "Regular expressions — `regex::`",
        "Pure helpers, the same in every mode, with the Rust `regex` crate's syntax (no look-around or backreferences; matching is linear time). Rhai's own `parse_json(text)` reads JSON text into a map; `to_json(value)` (above, with the commands) writes one back, pretty-printed.",
    ),
    (
        "user",
        "Users — `user::`",
        "Local accounts, managed by editing `/etc/passwd`, `/etc/shadow`, `/etc/group` and `/etc/gshadow` under the host root (each written whole and atomically, keeping its mode and owner; other lines are kept byte for byte, new entries appended; a missing shadow file stays missing). In apply mode the edit holds the shadow-utils lock (`fcntl` on `/etc/.pwd.lock`, as `lckpwdf(3)`) besides the path locks, and rereads the files under it, so `useradd` on the node or another step cannot interleave. `lastchg` of a new shadow entry is the day of `SOURCE_DATE_EPOCH` of the step environment when set. Password hashes of the shadow files are redacted (`***`) from plans and errors. Replaces `useradd`, `usermod`, `userdel` (docs/from-bash-to-rhai.md).",
    ),
    (
        "group",
        "Groups — `group::`",
        "Local groups, edited in `/etc/group` and `/etc/gshadow` as `user::` does. Replaces `groupadd`, `groupmod -g`, `groupdel`.",
    ),
];

const INTRO: &str = "\
<!-- Generated from src/script/host_api/docs.rs by
     `SKYHOOK_UPDATE_DOCS=1 cargo test --lib script::host_api::tests::docs`. Do not edit. -->

# Host API reference for step scripts

Lifecycle steps written in Rhai (`.rhai`) reach the host only through the functions below.
The same script runs in three modes: **apply** (the agent's normal modes and
`skyhook-run --apply`), **plan** (`skyhook-run` without `--apply`: nothing on the host
changes, the report shows what would) and **check** (an agent `*-check` mode running an
apply script: what would change is drift, and the check fails).

## Rules every function follows

- **Paths are host paths.** `/etc/sysctl.d/x.conf` means that file on the node, resolved
  inside the host root as if chrooted: neither `..` nor a symlink can lead outside it. A
  relative path is an error (`paths must be absolute`).
- **Mutations report whether they changed something.** `true` means the host was not yet
  in the desired state and now is (or, in plan mode, would be); `false` means nothing had to
  be done. Running a script twice changes nothing the second time, and `changed()` counts
  the changes of the step so far.
- **Changes and actions.** A *change* brings the host to a desired state and happens only
  when the state differs. An *action* (`service::restart`, `run`, `sh`, ...) happens every
  time it is called; it is never drift. Make an action depend on a change:
  `if fs::write(p, text) { service::restart(\"x\"); }`. A command with a guard is a change:
  `run([\"useradd\", \"gpuops\"], #{unless: [\"id\", \"gpuops\"]})` runs only while
  `id gpuops` fails, and a check reports it as drift until then.
- **A plan is the same code path.** In plan and check mode mutations are recorded instead of
  performed, and later reads see them, so a script that writes and then reads behaves the
  same. Commands are recorded, not run, unless marked `read_only` (or run with `query`).
  A plan lists, per step and in the order they happened, the changes (with the directories
  a write creates, `+ mkdir /etc/motd.d`), actions, interrupts and the script's output, each
  change and action with the `file:line` of the call that made it; `--output json` follows
  `docs/plan.schema.json`.
- **Errors are script errors** at the call's `file:line:col`, naming the path or command,
  and they can be caught with `try`/`catch`. An uncaught one fails the step.
- **Deferred work is never lost.** A changed `service::drop_in` schedules one
  `systemctl daemon-reload` (run before the step's next `service::` call, else at its end), a
  changed `grub::` drop-in one grub regeneration at the end of the step (a changed `kmod::`
  blacklist or options file one initramfs regeneration, `initramfs.json`); all run also when
  the step fails. In apply mode it is recorded on the host in `/var/lib/skyhook/.deferred/`
  (`daemon-reload.json`, `grub.json` with the pending grubby arguments) *before* the drop-in
  is written, and the record is removed only once the work succeeded; when the work fails or
  the agent dies in between, the next script step on the node runs it (a plan or check lists
  it as an action, never drift), then removes the record.
- **Concurrent edits are not lost.** In apply mode a call that rewrites a file
  (`fs::ensure_line`, `fs::ensure_block`, `fs::append`, `fs::write`, ...) reads, compares
  and writes it holding an exclusive lock (`flock` on
  `/var/lib/skyhook/.locks/<hash of the path>.lock`), so two agents or scripts editing the
  same file keep each other's lines.
- **Line edits of one file are written once.** In apply mode, consecutive `fs::ensure_line`,
  `fs::remove_line`, `fs::ensure_block` and `fs::remove_block` calls on one file write it
  once (atomically), when anything else happens: another file's line edit, any other write
  or command, any read (`fs::read`, `fs::exists`, `fs::list`, `fs::stat`, `toml::get`, ...)
  or the end of the step, also a failed one. Every call still counts and reports its own
  change, and reads always see the edits made before them. The file's lock is held until
  then; if another writer that does not take it changes the file meanwhile, the step fails
  naming the file and that writer's content is kept.
- **Secrets are redacted.** Values read with `secret()` or `secret_env()` (and variables
  named in `SKYHOOK_REDACT_ENV`) are replaced by `***` wherever they appear verbatim in
  output, logs, plans and error messages, also when a step's output splits them across
  reads. A value the script transforms (a substring, upper-cased, split into characters) is no
  longer that value and is not recognised: do not print derived forms of a secret.
- **Unset is `()`.** Functions documented to return a value or `()` return `()` when there is
  nothing (`config::get` of a missing configMap, `pkg::version` of a missing package).

## Context, output and modules

- `step` (a constant map) and `step()` (the same map from anywhere, functions and modules
  included): `mode`, `is_check`, `name`, `args`, `package_name`, `package_version`,
  `previous_version`, `skyhook_dir`, `step_root`, `resource_id`, `node_order`, `dry_run`.
  `env(name)` / `env(name, default)` read the step's environment.
- `print(x)` and `log::info(msg)` write to the step's stdout, `debug(x)`, `log::warn(msg)` and
  `log::error(msg)` to its stderr: the same log files, labels and timestamps as a bash step.
  `fail(msg)` ends the step as failed (it cannot be caught). The script's value, when it is an
  integer, is the step's return code (checked against `returncodes`).
- `import \"skyhook/<name>\" as m;` loads a shipped module (below); `import \"lib/util\" as u;`
  a file of the package's `skyhook_dir` (never outside it); `import \"configmap/<name>\" as c;`
  evaluates configMap `<name>.rhai` (confined to the configMaps folder).
- Limits: operations (5,000,000 per run: well under a second of script work; the shipped
  modules need under 20,000), call depth (64), expression depth, string size (32 MiB), array
  size (50,000 elements), map size (100,000 properties), modules and variables are bounded;
  so are the memory a run holds, all values together (256 MiB as the allocator counts it: a
  string stored in many places counts once; map keys, variables and host call results count
  too), and what it writes with `print`, `debug` and `log::` (64 MiB, both streams together;
  the output of a `stream: true` command is not counted); and a step has a wall-clock
  deadline (`SKYHOOK_SCRIPT_TIMEOUT`, default 600 s). Hitting one fails the step with a
  message naming the limit (`memory limit exceeded: the script holds more than 256 MiB
  (max_memory)`). Rhai checks a map's size when it is built or merged, not when `m[k] = v`
  adds a key, so a map grown key by key in a loop is stopped by the operations limit (at
  about 450,000 keys) or the memory limit, whichever comes first. Growing an array by `push`
  in a loop gets slower as it grows (Rhai re-measures it on every push); build large lists
  with `split` or `map` instead. `eval` does not exist.

Types below are Rhai's: `String`, `int`, `bool`, `Map` (`#{...}`), `Array` (`[...]`), `()`;
`?` means several types are accepted (see the description). Editor completion:
`docs/skyhook.d.rhai`.
";

fn md_cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// The reference for script authors (`docs/host-api.md`).
pub fn render_markdown() -> String {
    let mut out = String::from(INTRO);
    out.push_str(
        "\n## Script functions\n\n\
         Registered by the script runner itself, the same in every mode (`changed()` is listed \
         with the commands below).\n\n\
         | function | returns | description |\n|---|---|---|\n",
    );
    for d in SCRIPT_FUNCTIONS {
        let _ = writeln!(
            out,
            "| `{}` | `{}` | {} |",
            d.call(),
            d.returns,
            md_cell(d.doc)
        );
    }
    for (ns, title, intro) in NAMESPACES {
        let _ = write!(out, "\n## {title}\n\n");
        if !intro.is_empty() {
            let _ = write!(out, "{intro}\n\n");
        }
        out.push_str("| function | returns | modes | description |\n|---|---|---|---|\n");
        for d in FUNCTIONS.iter().filter(|d| d.ns == *ns) {
            let _ = writeln!(
                out,
                "| `{}` | `{}` | {} | {} |",
                d.call(),
                d.returns,
                md_cell(d.modes.text()),
                md_cell(d.doc)
            );
        }
    }
    out.push_str(&render_stdlib());
    out.push_str(GUIDE);
    out
}

/// The "Shipped modules" section: for each module of the embedded standard library
/// ([`STDLIB`](crate::script::resolver::STDLIB)), its opening comment block (what it reads,
/// what it writes, which interrupts it needs) and its functions, taken from the module source
/// itself so the list cannot drift from what ships.
fn render_stdlib() -> String {
    let mut out = String::from(
        "\n## Shipped modules: `import \"skyhook/<name>\" as m;`\n\n\
         Rhai modules embedded in the binary (`stdlib/`). Each stage function is named after \
         the mode with `_` (`config()`, `config_check()`, `uninstall()`, ...); the smaller \
         functions they are made of can be called one by one. More in `docs/stdlib.md`.\n",
    );
    for (name, source) in crate::script::resolver::STDLIB {
        let header: Vec<&str> = source
            .lines()
            .take_while(|l| l.starts_with("//") && !l.starts_with("///"))
            .map(|l| l.strip_prefix("// ").unwrap_or(l.trim_start_matches('/')))
            .collect();
        let functions: Vec<String> = source
            .lines()
            .filter_map(|l| l.strip_prefix("fn "))
            .filter_map(|l| l.split_once(')').map(|(sig, _)| format!("`{sig})`")))
            .collect();
        let _ = write!(
            out,
            "\n### `skyhook/{name}`\n\n```text\n{}\n```\n\nFunctions: {}\n",
            header.join("\n").trim_end(),
            functions.join(", ")
        );
    }
    out
}

/// The closing sections of the reference: checking scripts, Rhai pitfalls, editor use.
const GUIDE: &str = r#"
## Checking scripts: `skyhook-run check`

`skyhook-run check FILE...` compiles each script with its imports and checks it without
running anything; `skyhook-agent validate CONFIG_JSON` runs the same check over every `.rhai`
step of a package. It reports, at `file:line:col`:

- errors: an unknown function or module, with the closest name (`t.rhai:1:1: error: unknown
  function fs::wrte (did you mean fs::write?)`, `unknown module servcie (did you mean
  service?)`); a function called with an argument count it does not take (`fs::write expects
  2 or 3 arguments, got 1`); a function of an imported module (`import "skyhook/tuning" as
  t; t::confg()`) that the module does not export; a key of a literal options map the
  function does not accept (`fs::write: unknown option mod (did you mean mode? accepted:
  mode, owner, group)`);
- warnings: the traps below, and a method name no function has (it may still be a function
  stored in a map).

The package modules a script imports (`import "lib/util" as u;`) are checked too, each in its
own file. `check` prints `OK FILE` for each file without errors and exits 0 when no file has an error
(warnings allowed), 1 otherwise. Not checked: argument types, calls through function pointers
(`Fn("name")`, `f.call(..)`), modules imported by a computed path or from `configmap/`,
options maps built at run time.

## Rhai pitfalls

- **A missing map property is an error.** `s.hugepages` (or `s["hugepages"]`) on a map
  without that key fails the step at its position (`Property not found: hugepages (the map
  has no such key: ...)`), so a typo never plans an empty file. Test first with `"hugepages" in s`, or read an optional
  key with `s.get("hugepages") ?? "default"` (`get` returns `()` for a missing key).
- **Backtick strings have no escapes.** In `` `a\nb` `` the `\n` stays a backslash and an
  `n`. Break the line inside the backtick string itself, or use `"a\nb"` (double quotes
  know escapes) and `+`. `check` warns about it.
- **In-place methods return `()`.** `trim`, `replace`, `make_upper`, `make_lower`, `pad`,
  `truncate`, `crop`, `clear`, `sort` and `reverse` change the variable they are called on:
  `let t = s.trim();` makes `t` equal to `()`. Write `s.trim();` and use `s`. `check` warns
  when such a result is assigned, passed, returned or compared.
- **`()` is not `false`.** `if config::get("x") { .. }` is a type error when the configMap is
  missing (`()` is not a bool); test with `config::has("x")` or `!= ()`.
- **Functions do not see the script's variables.** A `fn` sees its parameters and, through
  `step()`, the step context; the top-level `step` constant and `let` variables are not
  visible inside it. Pass what it needs as arguments.

## Using the definitions in an editor

`docs/skyhook.d.rhai` declares everything a script can call: the `step` constant, the script
functions (`step`, `env`, `fail`, `print`, `debug`), `log::`, every host namespace, and one
module per shipped module, named after the last part of its import path (`import
"skyhook/tuning" as tuning;` then `tuning::config()`). It is written in the syntax of Rhai's
definition files (`module static;`, `module name { fn f(a: T) -> R; }`, the format of Rhai's
`Engine::definitions()`), which the Rhai language server (`rhaiscript/lsp`, experimental,
with a VS Code extension) reads from the workspace:

1. install the Rhai language server or its editor extension;
2. copy `docs/skyhook.d.rhai` into the folder you open in the editor (the package directory,
   next to `skyhook_dir/`), so the server loads it with the scripts;
3. completion, signatures and hover text then cover `fs::`, `service::`, ... and the shipped
   modules.

Without a language server the file is still a one-page index of every signature and its
modes. Either way, `skyhook-run check` is the authority on what resolves.
"#;

/// The Rhai definitions file for editors (`docs/skyhook.d.rhai`), in the layout of Rhai's
/// `Engine::definitions().single_file()`: the `step` constant and the global functions
/// (script functions and host API) after `module static;`, then one `module <ns> { ... }`
/// block per namespace (`log` and the host API), each function with its description as a doc
/// comment, then one module per shipped module of the stdlib, named after its import path's
/// last part, with its exported functions and their own doc comments.
pub fn render_definitions() -> String {
    let mut out = String::from(
        "// Generated from src/script/host_api/docs.rs; do not edit.\n\
         // Rhai definitions of everything a skyhook step script can call, for editor\n\
         // completion (see \"Using the definitions in an editor\" in docs/host-api.md).\n\
         \nmodule static;\n\
         \n/// The step context: mode, is_check, name, args, package_name, package_version,\n\
         /// previous_version, skyhook_dir, step_root, resource_id, node_order, dry_run.\n\
         const step: Map;\n",
    );
    let all: Vec<&FnDoc> = SCRIPT_FUNCTIONS.iter().chain(FUNCTIONS).collect();
    let mut namespaces: Vec<&str> = vec![""];
    for d in &all {
        if !namespaces.contains(&d.ns) {
            namespaces.push(d.ns);
        }
    }
    for ns in namespaces {
        let indent = if ns.is_empty() { "" } else { "    " };
        if !ns.is_empty() {
            let _ = write!(out, "\nmodule {ns} {{\n");
        }
        for d in all.iter().filter(|d| d.ns == ns) {
            let _ = write!(
                out,
                "\n{indent}/// {}\n{indent}/// Modes: {}\n{indent}{}\n",
                d.doc,
                d.modes.text(),
                d.definition()
            );
        }
        if !ns.is_empty() {
            out.push_str("}\n");
        }
    }
    for (name, source) in crate::script::resolver::STDLIB {
        let _ = write!(
            out,
            "\n/// Shipped module: `import \"skyhook/{name}\" as {name};`\nmodule {name} {{\n"
        );
        let mut doc: Vec<&str> = Vec::new();
        for line in source.lines() {
            if let Some(d) = line.strip_prefix("///") {
                doc.push(d.strip_prefix(' ').unwrap_or(d));
                continue;
            }
            if let Some(sig) = line.strip_prefix("fn ")
                && let Some((head, _)) = sig.split_once(')')
                && let Some((fname, params)) = head.split_once('(')
            {
                let params: Vec<String> = params
                    .split(',')
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(|p| format!("{p}: ?"))
                    .collect();
                out.push('\n');
                for d in &doc {
                    let _ = writeln!(out, "    /// {d}");
                }
                let _ = writeln!(out, "    fn {fname}({}) -> ?;", params.join(", "));
            }
            doc.clear();
        }
        out.push_str("}\n");
    }
    out
}
