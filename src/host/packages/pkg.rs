//! Packages: `pkg::manager()`, `installed`, `version`, `install`, `remove`, `update`,
//! `upgrade`.
//!
//! Queries (`dpkg-query`, `rpm`) run in every mode (read-only); in plan and check mode a
//! package planned for install or removal earlier in the session answers first. `install`
//! and `remove` submit one [`Effect::PackageInstall`]/[`Effect::PackageRemove`] listing only
//! the packages that need it; the apply executor runs the manager non-interactively and
//! waits (bounded) for its lock (`apt-get -o DPkg::Lock::Timeout=<secs>`,
//! `ZYPP_LOCK_TIMEOUT`; dnf and yum wait for their lock by themselves). A plan or check never
//! runs `apt-get update` or any other mutating command. [`update`] and [`upgrade`] are
//! actions ([`Effect::PackageUpgrade`]): run every time in apply, listed in a plan, never
//! drift; a failed step lists them as not undone.

use std::path::Path;

use crate::host::Host;
use crate::host::effects::effect::{Effect, PkgManager};
pub use crate::host::effects::effect::{PackageSpec, parse_spec};
use crate::host::effects::exec::CommandOptions;
use crate::host::effects::session::StateRead;
use crate::host::root::error::{HostError, Result};

/// A failure of a `pkg::` or package repository function of its own; everything else is the
/// session's [`HostError`].
#[derive(Debug, thiserror::Error)]
pub enum PkgError {
    /// What the session failed with.
    #[error(transparent)]
    Host(#[from] HostError),

    /// The package manager could not be determined from os-release.
    #[error("no supported package manager for this host (os-release ID {id:?})")]
    NoManager {
        /// The os-release ID (empty when unknown).
        id: String,
    },
}

impl crate::host::api::AreaError for PkgError {
    /// The host's os-release (and the manager's program) is its state: a command the plan
    /// did not run may install or change them.
    fn depends_on_host(&self) -> bool {
        match self {
            PkgError::Host(e) => e.depends_on_host(),
            PkgError::NoManager { .. } => true,
        }
    }
}
crate::host::api::area_error!(PkgError);

/// `pkg::manager()`: from the host's os-release family: debian → apt; rhel and fedora → dnf
/// when `/usr/bin/dnf` exists under the root, else yum when `/usr/bin/yum` exists, else dnf
/// (fedora, and rhel with VERSION_ID 8 or later) or yum; suse → zypper; otherwise `None`.
///
/// # Errors
/// os-release read failures.
pub fn manager(h: &Host) -> Result<Option<PkgManager>> {
    let rel = crate::host::system::os::release(h)?;
    let family = crate::host::system::os::family_from(&rel);
    Ok(match family.as_str() {
        "debian" => Some(PkgManager::Apt),
        "suse" => Some(PkgManager::Zypper),
        "rhel" | "fedora" => {
            let has = |p: &str| h.view_stat(Path::new(p), true).map(|s| s.is_some());
            if has("/usr/bin/dnf")? {
                Some(PkgManager::Dnf)
            } else if has("/usr/bin/yum")? {
                Some(PkgManager::Yum)
            } else {
                let major: u32 = rel
                    .get("VERSION_ID")
                    .and_then(|v| v.split('.').next())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                if family == "fedora" || major >= 8 {
                    Some(PkgManager::Dnf)
                } else {
                    Some(PkgManager::Yum)
                }
            }
        }
        _ => None,
    })
}

host_fn! {
    /// `"apt"`, `"dnf"`, `"yum"`, `"zypper"` or `()`, from the host's os-release.
    #[host(ns = "pkg", effects = ReadsHost)]
    fn manager(h: &mut Host) -> rhai::Dynamic {
        Ok(convert::opt(super::manager(h)?.map(|m| m.name().to_string())))
    }
}

/// The host's package manager ([`manager`]).
///
/// # Errors
/// [`PkgError::NoManager`] when os-release names none; os-release read failures.
pub(crate) fn need_manager(h: &Host) -> Result<PkgManager, PkgError> {
    manager(h)?.ok_or_else(|| PkgError::NoManager {
        id: crate::host::system::os::id(h).unwrap_or_default(),
    })
}

pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.starts_with('-') || name.chars().any(char::is_whitespace) {
        return Err(HostError::Invalid {
            what: "package name",
            message: format!("{name:?}"),
        });
    }
    Ok(())
}

/// A package state query (`dpkg-query -W`, `rpm -q`) whose answer is read for `read`, run
/// in every mode; it only reads the host, so a plan keeps what it read of the root across
/// it ([`Host::exec_state_query`]).
pub(crate) fn query(
    h: &Host,
    argv: &[&str],
    read: StateRead,
) -> Result<crate::host::system::cmd::CmdOutput> {
    let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
    h.exec_state_query(
        &argv,
        &CommandOptions {
            read_only: true,
            ..CommandOptions::default()
        },
        read,
    )
}

/// The installed version of `name`, `None` when not installed; `read` says whether the
/// caller reads the version or only whether there is one.
fn real_version(h: &Host, m: PkgManager, name: &str, read: StateRead) -> Result<Option<String>> {
    let out = match m {
        PkgManager::Apt => {
            let out = query(
                h,
                &["dpkg-query", "-W", "-f=${Status}\t${Version}", name],
                read,
            )?;
            let text = out.stdout.trim();
            match text.split_once('\t') {
                Some((status, v)) if out.ok && status.ends_with(" installed") => {
                    Some(v.to_string())
                }
                _ => None,
            }
        }
        _ => {
            let out = query(
                h,
                &["rpm", "-q", "--qf", "%{VERSION}-%{RELEASE}", name],
                read,
            )?;
            out.ok.then(|| out.stdout.trim().to_string())
        }
    };
    Ok(out)
}

/// `pkg::installed(name)`: the package is installed; for a pinned `name` (see
/// [`parse_spec`]), installed in that version.
///
/// # Errors
/// Invalid name; no package manager; the query failing to start.
pub fn installed(h: &Host, name: &str) -> Result<bool, PkgError> {
    check_name(name)?;
    if let Some(p) = h.planned_package(name) {
        return Ok(p);
    }
    let m = need_manager(h)?;
    if parse_spec(m, name).version.is_some() {
        return satisfied(h, m, name);
    }
    Ok(real_version(h, m, name, StateRead::State)?.is_some())
}

host_fn! {
    /// True when the package is installed; for a pinned name (`"cuda-drivers=550.90.07-1"`,
    /// `"cuda-drivers-550.90.07"`, as `install` takes them) installed in that version.
    #[host(ns = "pkg", effects = ReadsHost)]
    fn installed(h: &mut Host, name: S) -> bool {
        Ok(super::installed(h, &name)?)
    }
}

/// `pkg::version(name)`: the installed version (`dpkg-query ${Version}`, rpm
/// `%{VERSION}-%{RELEASE}`), `None` when not installed (or only planned).
///
/// # Errors
/// As [`installed`].
pub fn version(h: &Host, name: &str) -> Result<Option<String>, PkgError> {
    check_name(name)?;
    if h.planned_package(name) == Some(false) {
        return Ok(None);
    }
    let m = need_manager(h)?;
    Ok(real_version(h, m, name, StateRead::Version)?)
}

host_fn! {
    /// The installed version, or `()`.
    #[host(ns = "pkg", effects = ReadsHost)]
    fn version(h: &mut Host, name: S) -> rhai::Dynamic {
        Ok(convert::opt(super::version(h, &name)?))
    }
}

/// Whether `installed` (dpkg `${Version}`, rpm `%{VERSION}-%{RELEASE}`) is the version asked
/// for.
fn version_matches(manager: PkgManager, installed: &str, wanted: &str) -> bool {
    match manager {
        PkgManager::Apt => installed == wanted,
        _ => installed == wanted || installed.starts_with(&format!("{wanted}-")),
    }
}

/// Whether `spec` is satisfied: installed, and in the version asked for (plan and check
/// mode: a planned install or removal answers first).
fn satisfied(h: &Host, m: PkgManager, raw: &str) -> Result<bool, PkgError> {
    let spec = parse_spec(m, raw);
    let Some(want) = &spec.version else {
        return installed(h, raw);
    };
    check_name(&spec.name)?;
    if let Some(p) = h.planned_package(raw) {
        return Ok(p);
    }
    if h.planned_package(&spec.name) == Some(false) {
        return Ok(false);
    }
    Ok(real_version(h, m, &spec.name, StateRead::Version)?
        .is_some_and(|v| version_matches(m, &v, want)))
}

/// `pkg::install(names, #{update})`: install the packages that are not installed, or not in
/// the version asked for (`name=version` with apt, `name-version[-release]` with dnf/yum,
/// see [`parse_spec`]); each name once. `update` refreshes the package index first (only
/// when something is missing), and so does a package index made stale by a changed
/// `pkg::repo` earlier in the session ([`Host::mark_package_index_stale`]).
///
/// # Errors
/// As [`installed`]; the package manager failing (apply).
pub fn install(h: &mut Host, names: &[String], update: bool) -> Result<bool, PkgError> {
    let m = need_manager(h)?;
    let mut missing: Vec<String> = Vec::new();
    for n in names {
        if !missing.contains(n) && !satisfied(h, m, n)? {
            missing.push(n.clone());
        }
    }
    if missing.is_empty() {
        h.note_unchanged();
        return Ok(false);
    }
    // A stale index (`pkg::repo`) turns `update` on in the session (`Host::submit`).
    h.submit(Effect::PackageInstall {
        manager: m,
        names: missing,
        update,
    })?;
    Ok(true)
}

host_fn! {
    /// Install what is missing of a name or an array of names, non-interactively, waiting (bounded)
    /// for the package manager's lock. A name may pin a version: `"cuda-drivers=550.90.07-1"` (apt,
    /// compared with dpkg's `${Version}`; installed with `--allow-downgrades`) or
    /// `"cuda-drivers-550.90.07"` / `"cuda-drivers-550.90.07-1.el9"` (dnf/yum: a version starting
    /// with a digit and containing a `.`, compared with `%{VERSION}-%{RELEASE}`): another installed
    /// version is a change. After a changed `pkg::repo` the index is refreshed first.
    #[host(ns = "pkg", effects = [PackageInstall])]
    fn install(h: &mut Host, names: Dynamic) -> bool {
        let names = convert::string_or_array(&names, "names")?;
        Ok(super::install(h, &names, false)?)
    }

    /// As `install`; `#{update: true}` refreshes the package index first (only when something is
    /// missing).
    #[overload(options = &["update"])]
    fn install_with_opts(h: &mut Host, names: Dynamic, opts: Map) -> bool {
        let names = convert::string_or_array(&names, "names")?;
        check_keys(&opts, &["update"])?;
        let update = opt_bool(&opts, "update", false)?;
        Ok(super::install(h, &names, update)?)
    }
}

/// `pkg::remove(names)`: remove the packages that are installed.
///
/// # Errors
/// As [`install`].
pub fn remove(h: &mut Host, names: &[String]) -> Result<bool, PkgError> {
    let m = need_manager(h)?;
    let mut present: Vec<String> = Vec::new();
    for n in names {
        if !present.contains(n) && installed(h, n)? {
            present.push(n.clone());
        }
    }
    if present.is_empty() {
        h.note_unchanged();
        return Ok(false);
    }
    h.submit(Effect::PackageRemove {
        manager: m,
        names: present,
    })?;
    Ok(true)
}

host_fn! {
    /// Remove what is installed of a name or an array of names.
    #[host(ns = "pkg", effects = [PackageRemove])]
    fn remove(h: &mut Host, names: Dynamic) -> bool {
        let names = convert::string_or_array(&names, "names")?;
        Ok(super::remove(h, &names)?)
    }
}

/// `pkg::update()`: refresh the package index (`apt-get update`, `dnf|yum -y makecache`,
/// `zypper --non-interactive refresh`); an action. The session's stale index (a changed
/// `pkg::repo`) counts as refreshed after it.
///
/// # Errors
/// No package manager; the command failing (apply).
pub fn update(h: &mut Host) -> Result<(), PkgError> {
    let manager = need_manager(h)?;
    h.submit(Effect::PackageUpgrade {
        manager,
        upgrade: false,
    })?;
    Ok(())
}

host_fn! {
    /// Refresh the package index: `apt-get update`, `dnf makecache` (`yum`), `zypper refresh`. An
    /// action: run every time in apply, listed in a plan, never drift.
    #[host(ns = "pkg", effects = [PackageUpdate])]
    fn update(h: &mut Host) -> () {
        Ok(super::update(h)?)
    }
}

/// `pkg::upgrade()`: upgrade every installed package, non-interactively (`apt-get upgrade
/// -y` with `DEBIAN_FRONTEND=noninteractive`, waiting for the dpkg lock as `install` does;
/// `dnf|yum -y upgrade`; `zypper --non-interactive update`); an action, so it returns true
/// (it ran, or a plan would run it): what it upgrades is the repositories' to say.
///
/// # Errors
/// As [`update`].
pub fn upgrade(h: &mut Host) -> Result<bool, PkgError> {
    let manager = need_manager(h)?;
    h.submit(Effect::PackageUpgrade {
        manager,
        upgrade: true,
    })?;
    Ok(true)
}

host_fn! {
    /// Upgrade every installed package non-interactively: `apt-get upgrade -y`
    /// (`DEBIAN_FRONTEND=noninteractive`, waiting for the dpkg lock as `install` does), `dnf
    /// upgrade -y` (`yum`), `zypper update`. An action (true: it ran, or a plan would run it);
    /// never drift; a failed step lists it as not undone.
    #[host(ns = "pkg", effects = [PackageUpgrade])]
    fn upgrade(h: &mut Host) -> bool {
        Ok(super::upgrade(h)?)
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::convert::{self, check_keys, opt_bool};
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use rhai::{Dynamic, ImmutableString as S, Map};
}
use prelude::*;

/// The reference sections of this file's namespaces: `(namespace, heading, introduction)`.
pub(crate) const NAMESPACES: &[(&str, &str, &str)] = &[(
    "pkg",
    "Packages — `pkg::`",
    "The package manager is chosen from the host's os-release. A plan or check never runs the package manager's mutating commands (not even `apt-get update`).",
)];

host_fns!(
    manager, installed, version, install, remove, update, upgrade
);
