//! [`Effect`]: the one currency of mutation in the host API.
//!
//! Every API function that could change the host first computes the current state (reading
//! through the session's view, which in plan and check mode includes planned writes), decides
//! whether a change is needed, and if so hands an `Effect` to the session
//! ([`crate::host::Host`]), whose executor either performs it (apply), records it over the
//! read overlay with a rendered diff (plan) or records it as drift (check). Nothing else in
//! `host` mutates the host, so there is no `if dry_run` outside the executors.
//!
//! Effects fall in three classes ([`EffectClass`]):
//! - *changes* bring the host to a desired state and are only submitted when the state
//!   differed (counted by `changed()`, drift in a check);
//!   Guarded commands (`run(argv, #{creates: path})`, [`Effect::GuardedCommand`]) are
//!   changes too: submitted only when their guard says the work is not done yet;
//! - *actions* are done every time they are asked for (unguarded commands, restarts,
//!   daemon-reload, grub and initramfs regeneration); never drift;
//! - *interrupts* are collected and handed to the agent after the step succeeded.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::host::effects::exec::CommandOptions;
pub use crate::host::effects::exec::quote_argv;
use crate::host::root::error::{HostError, Result};

/// A systemd unit state change (`systemctl <op> <name>`), submitted only when the state
/// differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ServiceOp {
    /// `systemctl start`.
    Start,
    /// `systemctl stop`.
    Stop,
    /// `systemctl enable`.
    Enable,
    /// `systemctl disable`.
    Disable,
}

impl ServiceOp {
    /// The `systemctl` verb.
    pub fn verb(self) -> &'static str {
        match self {
            ServiceOp::Start => "start",
            ServiceOp::Stop => "stop",
            ServiceOp::Enable => "enable",
            ServiceOp::Disable => "disable",
        }
    }
}

/// A systemd action done every time (`systemctl <verb> <name>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ServiceAction {
    /// `systemctl restart`.
    Restart,
    /// `systemctl reload`.
    Reload,
}

impl ServiceAction {
    /// The `systemctl` verb.
    pub fn verb(self) -> &'static str {
        match self {
            ServiceAction::Restart => "restart",
            ServiceAction::Reload => "reload",
        }
    }
}

/// A supported package manager (`pkg::manager()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PkgManager {
    /// Debian family: `apt-get` and `dpkg-query`.
    Apt,
    /// Fedora, RHEL 8+: `dnf` and `rpm`.
    Dnf,
    /// RHEL 7, Amazon Linux 2: `yum` and `rpm`.
    Yum,
    /// SUSE: `zypper` and `rpm`.
    Zypper,
}

impl PkgManager {
    /// The name scripts see: `apt`, `dnf`, `yum`, `zypper`.
    pub fn name(self) -> &'static str {
        match self {
            PkgManager::Apt => "apt",
            PkgManager::Dnf => "dnf",
            PkgManager::Yum => "yum",
            PkgManager::Zypper => "zypper",
        }
    }
}

/// A package argument of `pkg::install`: a name, or a name pinned to a version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageSpec {
    /// The package name.
    pub name: String,
    /// The version asked for: apt's `name=version` (compared with dpkg's `${Version}`
    /// exactly), or rpm's `name-version[-release]` (compared with `%{VERSION}-%{RELEASE}`,
    /// or with `%{VERSION}` alone when no release is given).
    pub version: Option<String>,
}

/// One rpm version or release word: starts with a digit, then `[0-9A-Za-z._+~^]`.
fn rpm_word(w: &str) -> bool {
    w.starts_with(|c: char| c.is_ascii_digit())
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._+~^".contains(c))
}

/// Parse an install argument for `manager`. apt: `name=version` (the first `=`). dnf, yum
/// and zypper: `name-version` or `name-version-release`, recognised only when the version
/// starts with a digit and contains a `.` and the release (when present) starts with a
/// digit, taking the first `-` where that holds (`cuda-drivers-550.90.07`,
/// `cuda-drivers-550.90.07-1.el9`); anything else is a plain name (`java-17-openjdk`,
/// `java-1.8.0-openjdk`). Epochs (`2:`) are not supported.
pub fn parse_spec(manager: PkgManager, spec: &str) -> PackageSpec {
    let plain = || PackageSpec {
        name: spec.to_string(),
        version: None,
    };
    match manager {
        PkgManager::Apt => match spec.split_once('=') {
            Some((n, v)) if !n.is_empty() && !v.is_empty() => PackageSpec {
                name: n.to_string(),
                version: Some(v.to_string()),
            },
            _ => plain(),
        },
        _ => {
            for (i, _) in spec.match_indices('-') {
                let (name, rest) = (&spec[..i], &spec[i + 1..]);
                if name.is_empty() {
                    continue;
                }
                let (v, r) = match rest.split_once('-') {
                    Some((v, r)) => (v, Some(r)),
                    None => (rest, None),
                };
                if rpm_word(v) && v.contains('.') && r.is_none_or(rpm_word) {
                    return PackageSpec {
                        name: name.to_string(),
                        version: Some(rest.to_string()),
                    };
                }
            }
            plain()
        }
    }
}

/// A module name as the kernel compares it: `-` read as `_`.
pub fn canonical_name(name: &str) -> String {
    name.replace('-', "_")
}

/// The `/proc/sys` path of `key`: dots become slashes, unless the key already uses
/// slashes (then dots are literal, as sysctl(8) does for interface names like
/// `eth0.100`).
///
/// # Errors
/// [`HostError::Invalid`] for an empty key, whitespace, or `.`/`..`/empty components.
pub fn sysctl_proc_path(key: &str) -> Result<PathBuf> {
    let rel = if key.contains('/') {
        key.to_string()
    } else {
        key.replace('.', "/")
    };
    let bad = rel.is_empty()
        || key.chars().any(|c| c.is_whitespace() || c == '\0')
        || rel
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..");
    if bad {
        return Err(HostError::Invalid {
            what: "sysctl key",
            message: format!("{key:?}"),
        });
    }
    Ok(Path::new("/proc/sys").join(rel))
}

/// The refusal of repositories and holds on a zypper host (`pkg::repo`, `pkg::remove_repo`,
/// `pkg::hold`, `pkg::unhold`).
pub(crate) const REPOS_NOT_ON_ZYPPER: &str = "pkg::repo, pkg::remove_repo, pkg::hold and pkg::unhold support apt, dnf and yum hosts, not zypper";

/// How grub configuration is regenerated at the end of a step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "tool", rename_all = "lowercase")]
pub enum GrubUpdate {
    /// Debian family (and anything not rhel/fedora): `update-grub`.
    UpdateGrub,
    /// rhel and fedora families (BootLoaderSpec entries):
    /// `grubby --update-kernel=ALL --args="<add>"` then `--remove-args="<remove>"`
    /// (each only when non-empty).
    Grubby {
        /// Arguments to add to every kernel entry.
        add: Vec<String>,
        /// Arguments to take away from every kernel entry.
        remove: Vec<String>,
    },
}

/// What a mount effect does to a mount point (`mount::ensure`, `mount::remove`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MountOp {
    /// `mount <path>`: mount as `/etc/fstab` says.
    Mount,
    /// `mount -o remount <path>`: apply changed `/etc/fstab` options to a mounted filesystem.
    Remount,
    /// `umount <path>`.
    Unmount,
}

impl MountOp {
    /// The command line for `path`.
    pub fn argv(self, path: &std::path::Path) -> Vec<String> {
        let p = path.display().to_string();
        match self {
            MountOp::Mount => vec!["mount".into(), p],
            MountOp::Remount => vec!["mount".into(), "-o".into(), "remount".into(), p],
            MountOp::Unmount => vec!["umount".into(), p],
        }
    }
}

/// How the initramfs is regenerated at the end of a step (`kmod::` blacklist or options
/// changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InitramfsTool {
    /// Debian family (and anything not rhel/fedora): `update-initramfs -u`.
    UpdateInitramfs,
    /// rhel and fedora families: `dracut -f`.
    Dracut,
}

impl InitramfsTool {
    /// The tool for an OS family ([`crate::host::system::os::family`]): `dracut -f`
    /// on the rhel and fedora families, else `update-initramfs -u`.
    pub fn for_family(family: &str) -> Self {
        match family {
            "rhel" | "fedora" => InitramfsTool::Dracut,
            _ => InitramfsTool::UpdateInitramfs,
        }
    }

    /// The command line.
    pub fn argv(self) -> Vec<String> {
        match self {
            InitramfsTool::UpdateInitramfs => vec!["update-initramfs".into(), "-u".into()],
            InitramfsTool::Dracut => vec!["dracut".into(), "-f".into()],
        }
    }
}

/// An interrupt requested by a step: run by the agent after the step succeeded and its flag
/// is written, with the same commands and once-per-SKYHOOK_RESOURCE_ID markers as its
/// `interrupt` mode. The host layer only collects them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum InterruptRequest {
    /// Reboot the node (`interrupt::reboot()`).
    Reboot,
    /// Restart the named services (`interrupt::restart_services(names)`).
    RestartServices {
        /// Unit names as given.
        services: Vec<String>,
    },
    /// Restart all services (`interrupt::restart_all_services()`).
    RestartAllServices,
}

/// The kind of one effect a host function submits to its session, named as the report names
/// it ([`Effect::kind`]; [`EffectKind::name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EffectKind {
    /// `write`: replace a file's content (given, or copied from another file).
    Write,
    /// `remove`: remove a file, symlink or empty directory.
    Remove,
    /// `mkdir`: create a directory.
    Mkdir,
    /// `remove_all`: remove a tree.
    RemoveAll,
    /// `chmod`: set permission bits.
    Chmod,
    /// `chown`: set owner and group.
    Chown,
    /// `mtime`: set a file's modification time (the `root_dir` overlay and the package copy
    /// keep their source's).
    Mtime,
    /// `symlink`: create or retarget a symlink.
    Symlink,
    /// `service`: start, stop, enable or disable a unit.
    Service,
    /// `service_action`: restart or reload a unit.
    ServiceAction,
    /// `daemon_reload`: `systemctl daemon-reload`.
    DaemonReload,
    /// `package_install`: install packages.
    PackageInstall,
    /// `package_remove`: remove packages.
    PackageRemove,
    /// `sysctl`: set a runtime kernel parameter.
    Sysctl,
    /// `command`: run a command (not read-only, no guard).
    Command,
    /// `guarded_command`: run a command whose guard says its work is not done.
    GuardedCommand,
    /// `grub_update`: regenerate the grub configuration.
    GrubUpdate,
    /// `interrupt`: an interrupt for the agent.
    Interrupt,
    /// `mount`: mount, remount or unmount.
    Mount,
    /// `module_load`: load a kernel module.
    ModuleLoad,
    /// `initramfs_update`: regenerate the initramfs.
    InitramfsUpdate,
    /// `fetch`: download a verified file.
    Fetch,
    /// `package_hold`: hold packages at their version.
    PackageHold,
    /// `package_unhold`: release held packages.
    PackageUnhold,
    /// `grub_default`: set the kernel grub boots next.
    GrubDefault,
    /// `package_update`: refresh the package index.
    PackageUpdate,
    /// `package_upgrade`: upgrade the installed packages.
    PackageUpgrade,
    /// `tuned_profile`: activate a tuned profile, or turn tuned's tuning off.
    TunedProfile,
}

impl std::fmt::Display for EffectKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl EffectKind {
    /// The kind's name in reports (`write`, `service_action`, ...).
    pub fn name(self) -> &'static str {
        use EffectKind::*;
        match self {
            Write => "write",
            Remove => "remove",
            Mkdir => "mkdir",
            RemoveAll => "remove_all",
            Chmod => "chmod",
            Chown => "chown",
            Mtime => "mtime",
            Symlink => "symlink",
            Service => "service",
            ServiceAction => "service_action",
            DaemonReload => "daemon_reload",
            PackageInstall => "package_install",
            PackageRemove => "package_remove",
            Sysctl => "sysctl",
            Command => "command",
            GuardedCommand => "guarded_command",
            GrubUpdate => "grub_update",
            Interrupt => "interrupt",
            Mount => "mount",
            ModuleLoad => "module_load",
            InitramfsUpdate => "initramfs_update",
            Fetch => "fetch",
            PackageHold => "package_hold",
            PackageUnhold => "package_unhold",
            GrubDefault => "grub_default",
            PackageUpdate => "package_update",
            PackageUpgrade => "package_upgrade",
            TunedProfile => "tuned_profile",
        }
    }
}

/// One desired-state change, action or interrupt, as handed to the session's executor.
/// Paths are host paths (absolute, resolved under the host root by the executor).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Effect {
    /// Replace a file's content atomically; `None` attributes keep the existing file's (or
    /// the defaults 0644 / the agent's ids for a new file).
    WriteFile {
        /// Host path (a symlink's target is written, the link stays).
        path: PathBuf,
        /// The complete new content, shared: cloning it (the plan's overlay and the report's
        /// hashes keep it) counts a reference instead of copying the bytes. Build it with
        /// `.into()` from an owned `Vec<u8>` or `String` (no copy), or with
        /// [`bytes::Bytes::copy_from_slice`] from a borrowed slice; the line view hands out
        /// its kept rendering without a copy (`src/host/seam/effects/appendbuf.rs`).
        content: bytes::Bytes,
        /// Permission bits to set.
        mode: Option<u32>,
        /// Owner uid to set.
        uid: Option<u32>,
        /// Group gid to set.
        gid: Option<u32>,
    },
    /// Replace a file's content atomically with a copy of the regular file `src`, streamed
    /// (never held whole: `fs::copy_tree`, `fs::extract`); attributes as
    /// [`Effect::WriteFile`]'s. Reported as a `write`. When `sha256` is given and the source
    /// no longer has that digest as it is copied (it changed since the copy was decided),
    /// the copy fails and `path` is left as it was.
    CopyFile {
        /// Host path of the regular file copied (a FIFO or device is refused, not read).
        src: PathBuf,
        /// Host path written (a symlink's target is written, the link stays).
        path: PathBuf,
        /// The source's SHA-256 when the copy was decided, 64 lowercase hex digits; `None`:
        /// unknown (a download the plan only plans).
        sha256: Option<String>,
        /// Permission bits to set.
        mode: Option<u32>,
        /// Owner uid to set.
        uid: Option<u32>,
        /// Group gid to set.
        gid: Option<u32>,
    },
    /// Remove a file, symlink or empty directory.
    RemoveFile {
        /// Host path.
        path: PathBuf,
    },
    /// Create a directory and its missing parents; set `mode` on the final directory (the
    /// parents get 0755, [`crate::host::root::PARENT_DIR_MODE`]).
    Mkdir {
        /// Host path.
        path: PathBuf,
        /// Permission bits of the final directory.
        mode: u32,
    },
    /// Remove a tree (`rm -rf`).
    RemoveAll {
        /// Host path.
        path: PathBuf,
    },
    /// Set permission bits.
    Chmod {
        /// Host path.
        path: PathBuf,
        /// New permission bits.
        mode: u32,
    },
    /// Set a file's modification time (a symlink's target's).
    SetMtime {
        /// Host path.
        path: PathBuf,
        /// The new modification time.
        mtime: std::time::SystemTime,
    },
    /// Set owner and/or group.
    Chown {
        /// Host path.
        path: PathBuf,
        /// New uid, `None` to keep.
        uid: Option<u32>,
        /// New gid, `None` to keep.
        gid: Option<u32>,
    },
    /// Create (or retarget) a symlink.
    Symlink {
        /// The link's content, stored as given (may be relative).
        target: PathBuf,
        /// Host path of the link; an existing symlink there is replaced.
        link: PathBuf,
    },
    /// A service state change (`systemctl <op> <name>`).
    Service {
        /// Unit name.
        name: String,
        /// Which change.
        op: ServiceOp,
    },
    /// A service action (`systemctl restart|reload <name>`).
    ServiceAction {
        /// Unit name.
        name: String,
        /// Which action.
        action: ServiceAction,
    },
    /// `systemctl daemon-reload` (explicit, or the coalesced one scheduled by drop-ins).
    DaemonReload,
    /// Install packages (only the missing ones are listed).
    PackageInstall {
        /// The manager used.
        manager: PkgManager,
        /// Package names.
        names: Vec<String>,
        /// Refresh the package index first (`apt-get update`, `dnf makecache`, ...).
        update: bool,
    },
    /// Remove packages (only the installed ones are listed).
    PackageRemove {
        /// The manager used.
        manager: PkgManager,
        /// Package names.
        names: Vec<String>,
    },
    /// Set a runtime sysctl value by writing `/proc/sys/<key>`.
    Sysctl {
        /// The key in dotted form.
        key: String,
        /// The new value.
        value: String,
    },
    /// Run a command that is not read-only and has no guard (an action).
    Command {
        /// Program and arguments.
        argv: Vec<String>,
        /// Options as given.
        opts: CommandOptions,
    },
    /// Run a command whose guards ([`CommandOptions::guards`], not empty) said its work is not
    /// done yet (a change: drift in a check).
    GuardedCommand {
        /// Program and arguments.
        argv: Vec<String>,
        /// Options as given, guards included.
        opts: CommandOptions,
    },
    /// Regenerate grub configuration (deferred to the end of the step).
    GrubUpdate(GrubUpdate),
    /// An interrupt for the agent to run after the step.
    Interrupt(InterruptRequest),
    /// Mount, remount or unmount a mount point (`mount`/`umount`, chrooted); a change.
    Mount {
        /// Host path of the mount point.
        path: PathBuf,
        /// Which operation.
        op: MountOp,
    },
    /// Load a kernel module (`modprobe <name>`, chrooted). A change when `/proc/modules`
    /// said it is not loaded (`known: true`); an action when the module table could not be
    /// read (`known: false`).
    ModuleLoad {
        /// Module name as given.
        name: String,
        /// `/proc/modules` was read and does not list the module.
        known: bool,
    },
    /// Regenerate the initramfs (deferred to the end of the step); an action.
    InitramfsUpdate(InitramfsTool),
    /// Download a URL to a file, verified by its SHA-256 digest (`fs::fetch`).
    Fetch(Download),
    /// Hold packages at their installed version, or release them (`pkg::hold`/`unhold`:
    /// `apt-mark hold|unhold`, `dnf|yum versionlock add|delete`); only the packages whose
    /// state differs are listed.
    PackageHold {
        /// The manager used.
        manager: PkgManager,
        /// Package names.
        names: Vec<String>,
        /// True to hold, false to release.
        hold: bool,
    },
    /// Make grub boot kernel `release` next (`kernel::set_default`): `<tool> <entry>`
    /// (`grub-set-default`/`grub2-set-default`, which write `saved_entry` in the grubenv);
    /// a change.
    GrubDefault {
        /// The program: `grub-set-default` or `grub2-set-default`.
        tool: String,
        /// The menu entry as the tool takes it (`Advanced options for Ubuntu>Ubuntu, with
        /// Linux <release>`, or a BootLoaderSpec entry id).
        entry: String,
        /// The kernel release the entry boots.
        release: String,
        /// The release grub boots next before the change, when known.
        old: Option<String>,
    },
    /// Refresh the package index (`apt-get update`, `dnf makecache`, `zypper refresh`), or
    /// with `upgrade` upgrade every installed package (`apt-get upgrade -y`, `dnf upgrade
    /// -y`, `zypper update`); an action.
    PackageUpgrade {
        /// The manager used.
        manager: PkgManager,
        /// Upgrade the packages (else only refresh the index).
        upgrade: bool,
    },
    /// Make `names` tuned's active profile (`tuned-adm profile <names>`), or turn tuning
    /// off when empty (`tuned-adm off`); a change, submitted only when the active profile
    /// differs.
    TunedProfile {
        /// Profile names, merged by tuned in this order; empty: off.
        names: Vec<String>,
    },
}

/// Where tuned records the active profile's names (space-separated; empty or absent: no
/// profile active).
pub const TUNED_ACTIVE_PROFILE: &str = "/etc/tuned/active_profile";

/// The command line of [`Effect::TunedProfile`]: `tuned-adm profile <names>`, or
/// `tuned-adm off` when `names` is empty.
pub fn tuned_argv(names: &[String]) -> Vec<String> {
    if names.is_empty() {
        return vec!["tuned-adm".into(), "off".into()];
    }
    ["tuned-adm", "profile"]
        .into_iter()
        .map(String::from)
        .chain(names.iter().cloned())
        .collect()
}

/// The class of an [`Effect`]: see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EffectClass {
    /// Brings the host to a desired state; drift in a check.
    Change,
    /// Done every time; never drift.
    Action,
    /// Collected for the agent.
    Interrupt,
}

impl Effect {
    /// This effect's class.
    pub fn class(&self) -> EffectClass {
        match self {
            Effect::ServiceAction { .. }
            | Effect::DaemonReload
            | Effect::Command { .. }
            | Effect::GrubUpdate(_)
            | Effect::InitramfsUpdate(_)
            | Effect::PackageUpgrade { .. }
            | Effect::ModuleLoad { known: false, .. } => EffectClass::Action,
            Effect::Interrupt(_) => EffectClass::Interrupt,
            _ => EffectClass::Change,
        }
    }

    /// Whether the apply performs this effect by running a program whose writes the plan
    /// cannot foresee (a package manager and its maintainer scripts, `systemctl`, `mount`,
    /// `modprobe`, grub and initramfs tools, `tuned-adm`, a script's command): the plan only
    /// records it, so a later failure of the step's plan that depends on the host is unknown
    /// ([`crate::host::HostError::PlanUnknownFailure`]). Not file edits, sysctl writes,
    /// downloads or interrupts (the plan models them).
    pub fn runs_program(&self) -> bool {
        match self {
            Effect::Service { .. }
            | Effect::ServiceAction { .. }
            | Effect::DaemonReload
            | Effect::PackageInstall { .. }
            | Effect::PackageRemove { .. }
            | Effect::Command { .. }
            | Effect::GuardedCommand { .. }
            | Effect::GrubUpdate(_)
            | Effect::Mount { .. }
            | Effect::ModuleLoad { .. }
            | Effect::InitramfsUpdate(_)
            | Effect::PackageHold { .. }
            | Effect::GrubDefault { .. }
            | Effect::PackageUpgrade { .. }
            | Effect::TunedProfile { .. } => true,
            Effect::WriteFile { .. }
            | Effect::CopyFile { .. }
            | Effect::RemoveFile { .. }
            | Effect::Mkdir { .. }
            | Effect::RemoveAll { .. }
            | Effect::Chmod { .. }
            | Effect::Chown { .. }
            | Effect::SetMtime { .. }
            | Effect::Symlink { .. }
            | Effect::Sysctl { .. }
            | Effect::Interrupt(_)
            | Effect::Fetch(_) => false,
        }
    }

    /// Whether this effect's program may install or remove packages (a package install or
    /// removal, a script's command), and with them enable, start or stop units: what a plan
    /// that does not run it cannot answer of package and service state afterwards
    /// ([`crate::host::HostError::PlanUnknownQuery`]). A service, mount, module, grub or
    /// tuned action changes only what the plan models of it, if anything; an index refresh
    /// changes nothing installed; an upgrade ([`Effect::upgrades_packages`]) changes
    /// versions only.
    pub fn may_change_packages(&self) -> bool {
        matches!(
            self,
            Effect::PackageInstall { .. }
                | Effect::PackageRemove { .. }
                | Effect::Command { .. }
                | Effect::GuardedCommand { .. }
        )
    }

    /// Whether this effect upgrades the installed packages (`pkg::upgrade`): the versions a
    /// plan that does not run it reads afterwards are unknown, not what is installed.
    pub fn upgrades_packages(&self) -> bool {
        matches!(self, Effect::PackageUpgrade { upgrade: true, .. })
    }

    /// A short machine-readable kind for reports: `write`, `remove`, `mkdir`, `remove_all`,
    /// `chmod`, `chown`, `symlink`, `service`, `service_action`, `daemon_reload`,
    /// `package_install`, `package_remove`, `sysctl`, `command`, `guarded_command`,
    /// `grub_update`, `interrupt`, `mount`, `module_load`, `initramfs_update`, `fetch`,
    /// `package_hold`, `package_unhold`, `grub_default`, `package_update`, `package_upgrade`.
    /// `package_hold`, `package_unhold`, `tuned_profile`.
    pub fn kind(&self) -> EffectKind {
        match self {
            Effect::WriteFile { .. } | Effect::CopyFile { .. } => EffectKind::Write,
            Effect::RemoveFile { .. } => EffectKind::Remove,
            Effect::Mkdir { .. } => EffectKind::Mkdir,
            Effect::RemoveAll { .. } => EffectKind::RemoveAll,
            Effect::Chmod { .. } => EffectKind::Chmod,
            Effect::Chown { .. } => EffectKind::Chown,
            Effect::SetMtime { .. } => EffectKind::Mtime,
            Effect::Symlink { .. } => EffectKind::Symlink,
            Effect::Service { .. } => EffectKind::Service,
            Effect::ServiceAction { .. } => EffectKind::ServiceAction,
            Effect::DaemonReload => EffectKind::DaemonReload,
            Effect::PackageInstall { .. } => EffectKind::PackageInstall,
            Effect::PackageRemove { .. } => EffectKind::PackageRemove,
            Effect::Sysctl { .. } => EffectKind::Sysctl,
            Effect::Command { .. } => EffectKind::Command,
            Effect::GuardedCommand { .. } => EffectKind::GuardedCommand,
            Effect::GrubUpdate(_) => EffectKind::GrubUpdate,
            Effect::Interrupt(_) => EffectKind::Interrupt,
            Effect::Mount { .. } => EffectKind::Mount,
            Effect::ModuleLoad { .. } => EffectKind::ModuleLoad,
            Effect::InitramfsUpdate(_) => EffectKind::InitramfsUpdate,
            Effect::Fetch(_) => EffectKind::Fetch,
            Effect::PackageHold { hold: true, .. } => EffectKind::PackageHold,
            Effect::PackageHold { hold: false, .. } => EffectKind::PackageUnhold,
            Effect::GrubDefault { .. } => EffectKind::GrubDefault,
            Effect::PackageUpgrade { upgrade: false, .. } => EffectKind::PackageUpdate,
            Effect::PackageUpgrade { upgrade: true, .. } => EffectKind::PackageUpgrade,
            Effect::TunedProfile { .. } => EffectKind::TunedProfile,
        }
    }

    /// What the effect applies to: a host path, unit, package list, key or command line.
    pub fn target(&self) -> String {
        match self {
            Effect::WriteFile { path, .. }
            | Effect::CopyFile { path, .. }
            | Effect::RemoveFile { path }
            | Effect::Mkdir { path, .. }
            | Effect::RemoveAll { path }
            | Effect::Chmod { path, .. }
            | Effect::Chown { path, .. }
            | Effect::SetMtime { path, .. } => path.display().to_string(),
            Effect::Symlink { link, .. } => link.display().to_string(),
            Effect::Service { name, .. } | Effect::ServiceAction { name, .. } => name.clone(),
            Effect::DaemonReload => "systemd".into(),
            Effect::PackageInstall { names, .. } | Effect::PackageRemove { names, .. } => {
                names.join(" ")
            }
            Effect::Sysctl { key, .. } => key.clone(),
            Effect::Command { argv, .. } | Effect::GuardedCommand { argv, .. } => quote_argv(argv),
            Effect::GrubUpdate(_) => "grub".into(),
            Effect::Interrupt(_) => "node".into(),
            Effect::Mount { path, .. } => path.display().to_string(),
            Effect::ModuleLoad { name, .. } => name.clone(),
            Effect::InitramfsUpdate(_) => "initramfs".into(),
            Effect::Fetch(d) => d.path.display().to_string(),
            Effect::PackageHold { names, .. } => names.join(" "),
            Effect::GrubDefault { .. } => "grub".into(),
            Effect::PackageUpgrade { manager, .. } => manager.name().into(),
            Effect::TunedProfile { .. } => "tuned".into(),
        }
    }
}

/// One download, as [`Effect::Fetch`] carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Download {
    /// The URL as given (`http://` or `https://`).
    pub url: String,
    /// The destination host path.
    pub path: PathBuf,
    /// The expected digest, 64 lowercase hex digits; `None`: not verified (an existing
    /// file is taken as downloaded).
    pub sha256: Option<String>,
    /// Permission bits to set (`None`: an existing file's, else 0644).
    pub mode: Option<u32>,
    /// Owner uid to set.
    pub uid: Option<u32>,
    /// Group gid to set.
    pub gid: Option<u32>,
    /// Limit of the whole download.
    pub timeout: Duration,
    /// Largest body accepted, in bytes.
    pub max_bytes: u64,
}

impl Download {
    /// The report line: `download <url> (sha256 <hex>) to <path>` (`(not verified: no
    /// sha256)` without a digest), `would download ...` when `planned` (plan and check
    /// mode), with ` (mode 0755)` when a mode is set.
    pub fn summary(&self, planned: bool) -> String {
        let would = if planned { "would " } else { "" };
        let m = self
            .mode
            .map_or(String::new(), |m| format!(" (mode {m:04o})"));
        format!(
            "{would}download {} ({}) to {}{m}",
            self.url,
            self.sha256.as_ref().map_or_else(
                || "not verified: no sha256".to_string(),
                |s| format!("sha256 {s}")
            ),
            self.path.display()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        let argv: Vec<String> = ["echo", "a b", "it's", ""]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(quote_argv(&argv), r#"echo 'a b' 'it'\''s' ''"#);
    }

    #[test]
    fn classes() {
        assert_eq!(Effect::DaemonReload.class(), EffectClass::Action);
        assert_eq!(
            Effect::Sysctl {
                key: "a.b".into(),
                value: "1".into()
            }
            .class(),
            EffectClass::Change
        );
        assert_eq!(
            Effect::Interrupt(InterruptRequest::Reboot).class(),
            EffectClass::Interrupt
        );
    }
}
