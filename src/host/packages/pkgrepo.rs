//! Package repositories and holds: `pkg::repo(name, opts)`, `pkg::remove_repo(name)`,
//! `pkg::hold(names)`, `pkg::unhold(names)`.
//!
//! A repository is two files written through the one write path of `fs::write` (atomic,
//! under the path lock, diffed in a plan, drift in a check), chosen by the host's package
//! manager ([`crate::host::packages::pkg::manager`]):
//!
//! - **apt** (debian family): a deb822 source `/etc/apt/sources.list.d/<name>.sources`
//!   (sources.list(5), "DEB822-STYLE FORMAT") whose `Signed-By:` names the key
//!   `/etc/apt/keyrings/<name>.asc` (ASCII-armored; `.gpg` for a binary key fetched from a
//!   `key_url` ending in `.gpg`), the location Debian and Ubuntu document for third-party
//!   keys;
//! - **dnf/yum** (rhel and fedora families): `/etc/yum.repos.d/<name>.repo`
//!   (dnf.conf(5), "REPO OPTIONS") with `gpgcheck=1` and
//!   `gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-<name>`, the key written there.
//!
//! The key is given as text (`key`) or downloaded (`key_url` with its required
//! `key_sha256`, through [`crate::host::fetch`]); it is written before the repository file,
//! so the package manager never sees a source whose key is missing. A changed repository
//! marks the package index stale ([`Host::mark_package_index_stale`]): the next
//! `pkg::install` of the step refreshes it first.
//!
//! Holds are changes: queried with `apt-mark showhold` / `dnf versionlock list` (read-only,
//! every mode) and changed with `apt-mark hold|unhold` / `dnf versionlock add|delete`
//! ([`Effect::PackageHold`]); dnf and yum need the versionlock plugin
//! (`python3-dnf-plugin-versionlock`, `yum-plugin-versionlock`). zypper hosts are not
//! supported by these functions.

use std::path::{Path, PathBuf};

use crate::host::Host;
use crate::host::effects::effect::{Effect, PkgManager};
use crate::host::effects::exec::CommandOptions;
use crate::host::fetch::{self, FetchOptions};
use crate::host::packages::pkg::{PkgError, check_name, need_manager};
use crate::host::root::error::{HostError, Result};

/// Options of `pkg::repo`.
#[derive(Debug, Clone)]
pub struct RepoOptions {
    /// The repository URL (`URIs:` / `baseurl=`). Required.
    pub url: Option<String>,
    /// apt suites (`Suites:`, e.g. `noble` or `/` for a flat repository). Required for apt;
    /// refused for dnf/yum.
    pub suites: Vec<String>,
    /// apt components (`Components:`, e.g. `main`); omitted when empty. Refused for dnf/yum.
    pub components: Vec<String>,
    /// apt architectures (`Architectures:`); omitted when empty. Refused for dnf/yum.
    pub arch: Vec<String>,
    /// The signing key as ASCII-armored text (`-----BEGIN PGP PUBLIC KEY BLOCK-----`).
    pub key: Option<String>,
    /// A URL to download the signing key from (with `key_sha256`).
    pub key_url: Option<String>,
    /// The SHA-256 digest of the key at `key_url` (64 hex digits).
    pub key_sha256: Option<String>,
    /// `Enabled: no` / `enabled=0` when false. Default true.
    pub enabled: bool,
}

impl Default for RepoOptions {
    fn default() -> Self {
        RepoOptions {
            url: None,
            suites: Vec::new(),
            components: Vec::new(),
            arch: Vec::new(),
            key: None,
            key_url: None,
            key_sha256: None,
            enabled: true,
        }
    }
}

/// [`HostError::Invalid`] naming `func`'s argument, as the caller's error.
fn invalid<E: From<HostError>>(func: &str, message: String) -> E {
    E::from(HostError::Invalid {
        what: match func {
            "repo" => "pkg::repo argument",
            "remove_repo" => "pkg::remove_repo argument",
            "hold" => "pkg::hold argument",
            _ => "pkg::unhold argument",
        },
        message,
    })
}

/// A repository name: `[A-Za-z0-9._-]`, not starting with `.` or `-` (it names files).
fn check_repo_name(func: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && !name.starts_with(['.', '-'])
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            func,
            format!("repository name {name:?} must be letters, digits, '.', '_' or '-'"),
        ))
    }
}

/// A value written into a repository file: one line, no surrounding space.
fn check_value(what: &str, v: &str) -> Result<()> {
    if v.is_empty()
        || v.contains(['\n', '\r'])
        || v.trim() != v
        || (what != "url" && v.contains(' '))
    {
        return Err(invalid(
            "repo",
            format!("{what} {v:?} must be one word on one line"),
        ));
    }
    Ok(())
}

/// The files of repository `name` for `manager`: (repository file, key files; the first is
/// the one written).
fn paths(manager: PkgManager, name: &str, binary_key: bool) -> Result<(PathBuf, Vec<PathBuf>)> {
    match manager {
        PkgManager::Apt => {
            let asc = PathBuf::from(format!("/etc/apt/keyrings/{name}.asc"));
            let gpg = PathBuf::from(format!("/etc/apt/keyrings/{name}.gpg"));
            Ok((
                PathBuf::from(format!("/etc/apt/sources.list.d/{name}.sources")),
                if binary_key {
                    vec![gpg, asc]
                } else {
                    vec![asc, gpg]
                },
            ))
        }
        PkgManager::Dnf | PkgManager::Yum => Ok((
            PathBuf::from(format!("/etc/yum.repos.d/{name}.repo")),
            vec![PathBuf::from(format!(
                "/etc/pki/rpm-gpg/RPM-GPG-KEY-{name}"
            ))],
        )),
        PkgManager::Zypper => Err(HostError::Invalid {
            what: "package manager",
            message: crate::host::effects::effect::REPOS_NOT_ON_ZYPPER.into(),
        }),
    }
}

/// The deb822 source of `name` (sources.list(5)).
pub fn deb822(name: &str, o: &RepoOptions, url: &str, key: &Path) -> String {
    let mut s = format!(
        "# Managed by skyhook (pkg::repo {name:?}).\nTypes: deb\nURIs: {url}\nSuites: {}\n",
        o.suites.join(" ")
    );
    if !o.components.is_empty() {
        s.push_str(&format!("Components: {}\n", o.components.join(" ")));
    }
    if !o.arch.is_empty() {
        s.push_str(&format!("Architectures: {}\n", o.arch.join(" ")));
    }
    if !o.enabled {
        s.push_str("Enabled: no\n");
    }
    s.push_str(&format!("Signed-By: {}\n", key.display()));
    s
}

/// The `.repo` file of `name` (dnf.conf(5)).
pub fn yum_repo(name: &str, o: &RepoOptions, url: &str, key: &Path) -> String {
    format!(
        "# Managed by skyhook (pkg::repo {name:?}).\n[{name}]\nname={name}\nbaseurl={url}\nenabled={}\ngpgcheck=1\ngpgkey=file://{}\n",
        u8::from(o.enabled),
        key.display()
    )
}

/// `pkg::repo(name, opts)`: define package repository `name` with its signing key (module
/// docs). Returns whether the key or the repository file changed (then the package index is
/// marked stale).
///
/// # Errors
/// [`HostError::Invalid`]: a bad name; `url` missing; neither or both of `key` and
/// `key_url`; `key_url` without `key_sha256`; a key that is not ASCII-armored; apt without
/// `suites`; `suites`/`components`/`arch` on dnf/yum; a value with a newline or a space; a
/// `url` with `user:password@` (refused, shown as `***@`); a zypper host. As `fs::write` and `fs::fetch` for the files.
pub fn repo(h: &mut Host, name: &str, o: &RepoOptions) -> Result<bool, PkgError> {
    check_repo_name("repo", name)?;
    let m = need_manager(h)?;
    let url = o
        .url
        .as_deref()
        .ok_or_else(|| invalid::<PkgError>("repo", "url is required".into()))?;
    check_value("url", url)?;
    let shown = crate::host::effects::executors::download::redacted(url);
    if shown != url {
        return Err(invalid(
            "repo",
            format!(
                "url {shown:?} carries credentials: they would be written into a world-readable \
                 repository file and printed in plans; put them in /etc/apt/auth.conf.d/ (apt) \
                 or the .repo file's username=/password= (dnf/yum) instead"
            ),
        ));
    }
    for (what, list) in [
        ("suite", &o.suites),
        ("component", &o.components),
        ("arch", &o.arch),
    ] {
        for v in list {
            check_value(what, v)?;
        }
    }
    match (&o.key, &o.key_url) {
        (None, None) => {
            return Err(invalid(
                "repo",
                "a signing key is required: key (ASCII-armored text) or key_url with key_sha256"
                    .into(),
            ));
        }
        (Some(_), Some(_)) => {
            return Err(invalid("repo", "give key or key_url, not both".into()));
        }
        (None, Some(_)) if o.key_sha256.is_none() => {
            return Err(invalid(
                "repo",
                "key_url needs key_sha256 (the key's SHA-256 digest, 64 hex digits)".into(),
            ));
        }
        (Some(k), None)
            if !k
                .trim_start()
                .starts_with("-----BEGIN PGP PUBLIC KEY BLOCK-----") =>
        {
            return Err(invalid(
                "repo",
                "key must be an ASCII-armored public key (-----BEGIN PGP PUBLIC KEY BLOCK-----); use key_url for a binary key".into(),
            ));
        }
        _ => {}
    }
    let binary_key = o
        .key_url
        .as_deref()
        .is_some_and(|u| u.split(['?', '#']).next().unwrap_or(u).ends_with(".gpg"));
    let (repo_file, keys) = paths(m, name, binary_key)?;
    let content = match m {
        PkgManager::Apt => {
            if o.suites.is_empty() {
                return Err(invalid(
                    "repo",
                    "suites is required for apt repositories (e.g. \"noble\", or \"/\" for a flat repository)".into(),
                ));
            }
            deb822(name, o, url, &keys[0])
        }
        _ => {
            if !o.suites.is_empty() || !o.components.is_empty() || !o.arch.is_empty() {
                return Err(invalid(
                    "repo",
                    format!(
                        "suites, components and arch apply to apt repositories only ({} host)",
                        m.name()
                    ),
                ));
            }
            yum_repo(name, o, url, &keys[0])
        }
    };
    let mut changed = false;
    if let Some(k) = &o.key {
        let mut k = k.trim().to_string();
        k.push('\n');
        changed |=
            crate::host::files::fs::put(h, &keys[0], k.into_bytes(), Some(0o644), None, None)?;
    } else if let Some(u) = &o.key_url {
        let fo = FetchOptions {
            sha256: o.key_sha256.clone(),
            mode: Some(0o644),
            ..FetchOptions::default()
        };
        changed |= fetch::fetch_unowned(h, u, &keys[0].display().to_string(), &fo)?;
    }
    // A key of the other format left by an earlier definition would be ignored by apt.
    for other in &keys[1..] {
        changed |= crate::host::files::fs::remove(h, &other.display().to_string())?;
    }
    changed |=
        crate::host::files::fs::put(h, &repo_file, content.into_bytes(), Some(0o644), None, None)?;
    if changed {
        h.mark_package_index_stale();
    }
    Ok(changed)
}

host_fn! {
    /// Define repository `name` with its signing key, `key` (ASCII-armored text) or `key_url` with
    /// `key_sha256` (downloaded as `fs::fetch`). apt: `/etc/apt/sources.list.d/<name>.sources`
    /// (deb822: `Types: deb`, `URIs: <url>`, `Suites:` (required; `"/"` for a flat repository),
    /// `Components:`, `Architectures: <arch>`, `Enabled: no` when `enabled: false`, `Signed-By:
    /// /etc/apt/keyrings/<name>.asc`, `.gpg` for a `key_url` ending in `.gpg`); dnf/yum:
    /// `/etc/yum.repos.d/<name>.repo` (`[name]`, `name=`, `baseurl=`, `enabled=`, `gpgcheck=1`,
    /// `gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-<name>`) and the key there. Files 0644, key
    /// first. A change makes the step's next `pkg::install` refresh the package index. A `url` with
    /// `user:password@` is refused (credentials belong in `/etc/apt/auth.conf.d/` or the `.repo`
    /// file's `username=`/`password=`). zypper hosts: an error.
    #[host(ns = "pkg", effects = [Write, Remove], options = REPO_KEYS)]
    fn repo(h: &mut Host, name: S, opts: Map) -> bool {
        let opts = repo_opts(&opts)?;
        Ok(super::repo(h, &name, &opts)?)
    }
}

/// `pkg::remove_repo(name)`: remove repository `name`'s file and key (both key formats for
/// apt). Returns whether anything was removed (then the package index is marked stale).
///
/// # Errors
/// A bad name; a zypper host; as `fs::remove`.
pub fn remove_repo(h: &mut Host, name: &str) -> Result<bool, PkgError> {
    check_repo_name("remove_repo", name)?;
    let m = need_manager(h)?;
    let (repo_file, keys) = paths(m, name, false)?;
    let mut changed = false;
    for p in std::iter::once(&repo_file).chain(keys.iter()) {
        changed |= crate::host::files::fs::remove(h, &p.display().to_string())?;
    }
    if changed {
        h.mark_package_index_stale();
    }
    Ok(changed)
}

host_fn! {
    /// Remove repository `name`'s file and key (as `pkg::repo` wrote them); a change makes the next
    /// `pkg::install` refresh the index.
    #[host(ns = "pkg", effects = [Remove])]
    fn remove_repo(h: &mut Host, name: S) -> bool {
        Ok(super::remove_repo(h, &name)?)
    }
}

/// The package name of one line of `dnf versionlock list` / `yum versionlock list`:
/// dnf 4 `name-EPOCH:VERSION-RELEASE.*`, yum `EPOCH:name-VERSION-RELEASE.*`, dnf 5
/// `Package name: name`; `None` for other lines (comments, headers).
pub fn versionlock_name(line: &str) -> Option<String> {
    let line = line.trim();
    if let Some(n) = line.strip_prefix("Package name:") {
        return Some(n.trim().to_string());
    }
    if line.is_empty() || line.starts_with('#') || line.contains(' ') {
        return None;
    }
    let line = line.strip_suffix(".*").unwrap_or(line);
    // dnf 4: the epoch follows the name.
    let re = regex::Regex::new(r"^(.+?)-\d+:[^-]+-[^-]+$").ok()?;
    if let Some(c) = re.captures(line) {
        return Some(c[1].to_string());
    }
    // yum: the epoch leads; name-version-release.
    let rest = match line.split_once(':') {
        Some((e, r)) if e.bytes().all(|b| b.is_ascii_digit()) => r,
        _ => line,
    };
    let mut parts = rest.rsplitn(3, '-');
    let (_release, _version, name) = (parts.next()?, parts.next()?, parts.next()?);
    Some(name.to_string())
}

/// The held packages (real state, read-only query in every mode).
fn held(h: &Host, m: PkgManager) -> Result<Vec<String>> {
    let argv: Vec<String> = match m {
        PkgManager::Apt => vec!["apt-mark".into(), "showhold".into()],
        _ => vec![m.name().into(), "versionlock".into(), "list".into()],
    };
    let out = h.exec(
        &argv,
        &CommandOptions {
            read_only: true,
            check: true,
            ..CommandOptions::default()
        },
    )?;
    Ok(match m {
        PkgManager::Apt => out
            .stdout
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect(),
        _ => out.stdout.lines().filter_map(versionlock_name).collect(),
    })
}

fn set_hold(h: &mut Host, func: &str, names: &[String], hold: bool) -> Result<bool, PkgError> {
    let m = need_manager(h)?;
    paths(m, "x", false)?;
    if names.is_empty() {
        return Err(invalid(func, "no package names given".into()));
    }
    for n in names {
        check_name(n)?;
    }
    let held = held(h, m)?;
    let mut todo: Vec<String> = Vec::new();
    for n in names {
        let planned = h.planned_hold(n);
        let is_held = planned.unwrap_or_else(|| held.contains(n));
        if is_held != hold && !todo.contains(n) {
            todo.push(n.clone());
        }
    }
    if todo.is_empty() {
        h.note_unchanged();
        return Ok(false);
    }
    h.submit(Effect::PackageHold {
        manager: m,
        names: todo,
        hold,
    })?;
    Ok(true)
}

/// `pkg::hold(names)`: hold packages at their installed version (`apt-mark hold`,
/// `dnf versionlock add`); unchanged for the ones already held.
///
/// # Errors
/// Invalid names; no names; a zypper host; the query or the command failing (apply).
pub fn hold(h: &mut Host, names: &[String]) -> Result<bool, PkgError> {
    set_hold(h, "hold", names, true)
}

host_fn! {
    /// Hold a name or an array of names at the installed version: `apt-mark hold` (queried with
    /// `apt-mark showhold`), `dnf versionlock add` (queried with `dnf versionlock list`; needs the
    /// versionlock plugin). Unchanged for held ones.
    #[host(ns = "pkg", effects = [PackageHold])]
    fn hold(h: &mut Host, names: Dynamic) -> bool {
        let names = convert::string_or_array(&names, "names")?;
        Ok(super::hold(h, &names)?)
    }
}

/// `pkg::unhold(names)`: release held packages (`apt-mark unhold`,
/// `dnf versionlock delete`); unchanged for the ones not held.
///
/// # Errors
/// As [`hold`].
pub fn unhold(h: &mut Host, names: &[String]) -> Result<bool, PkgError> {
    set_hold(h, "unhold", names, false)
}

host_fn! {
    /// Release held packages: `apt-mark unhold`, `dnf versionlock delete`. Unchanged for ones not
    /// held.
    #[host(ns = "pkg", effects = [PackageUnhold])]
    fn unhold(h: &mut Host, names: Dynamic) -> bool {
        let names = convert::string_or_array(&names, "names")?;
        Ok(super::unhold(h, &names)?)
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::convert::{self, check_keys, opt_bool, opt_string};
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use rhai::{Dynamic, ImmutableString as S, Map};
}
use prelude::*;

/// The option keys of `pkg::repo`.
const REPO_KEYS: &[&str] = &[
    "url",
    "suites",
    "components",
    "arch",
    "key",
    "key_url",
    "key_sha256",
    "enabled",
];

/// A string or an array of strings of option `key` (absent or `()`: empty).
fn words(m: &Map, key: &str) -> Result<Vec<String>, String> {
    match m.get(key) {
        None => Ok(Vec::new()),
        Some(d) if d.is_unit() => Ok(Vec::new()),
        Some(d) => convert::string_or_array(d, &format!("option {key}")),
    }
}

/// `#{url, suites, components, arch, key, key_url, key_sha256, enabled}`.
fn repo_opts(m: &Map) -> Result<RepoOptions, String> {
    check_keys(m, REPO_KEYS)?;
    Ok(RepoOptions {
        url: opt_string(m, "url")?,
        suites: words(m, "suites")?,
        components: words(m, "components")?,
        arch: words(m, "arch")?,
        key: opt_string(m, "key")?,
        key_url: opt_string(m, "key_url")?,
        key_sha256: opt_string(m, "key_sha256")?,
        enabled: opt_bool(m, "enabled", true)?,
    })
}

host_fns!(repo, remove_repo, hold, unhold);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versionlock_lines() {
        assert_eq!(
            versionlock_name("cuda-drivers-3:550.90.07-1.el9.*").as_deref(),
            Some("cuda-drivers")
        );
        assert_eq!(
            versionlock_name("0:cuda-drivers-550.90.07-1.el7.*").as_deref(),
            Some("cuda-drivers")
        );
        assert_eq!(
            versionlock_name("Package name: nvidia-driver").as_deref(),
            Some("nvidia-driver")
        );
        assert_eq!(
            versionlock_name("# Added by 'versionlock add' command on x"),
            None
        );
        assert_eq!(
            versionlock_name("Last metadata expiration check: 0:01:02 ago"),
            None
        );
        assert_eq!(versionlock_name(""), None);
    }
}
