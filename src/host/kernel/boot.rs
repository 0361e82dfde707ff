//! Kernels and the boot default: `kernel::running`, `installed`, `default`, `set_default`
//! and `boot_into`.
//!
//! # What grub boots next
//!
//! `GRUB_DEFAULT` is read from `/etc/default/grub` and then `/etc/default/grub.d/*.cfg` in
//! name order (the last assignment wins, as grub-mkconfig sources them), a shell word with
//! its quotes taken off; absent it is `0`. `saved` means the `saved_entry` of the grub
//! environment block (`/boot/grub/grubenv`, `/boot/grub2/grubenv` on grub2 hosts: 1024
//! bytes of `name=value` lines after `# GRUB Environment Block`, padded with `#`); no
//! `saved_entry` is entry `0`. An entry names a release by its last `>` part:
//!
//! | entry | release |
//! |---|---|
//! | `0`, `gnulinux-simple-<uuid>` | the newest installed |
//! | `Advanced options for Ubuntu>Ubuntu, with Linux 6.8.0-1015-aws` (also `(recovery mode)`) | `6.8.0-1015-aws` |
//! | `gnulinux-advanced-<uuid>>gnulinux-6.8.0-1015-aws-advanced-<uuid>` | `6.8.0-1015-aws` |
//! | `Amazon Linux (6.1.158-180.294.amzn2023.x86_64) 2023` | `6.1.158-180.294.amzn2023.x86_64` |
//! | `<32 hex machine id>-<release>` (a BootLoaderSpec entry id) | `<release>` |
//!
//! Any other entry (another index, a title of another form) gives `None`: the release
//! cannot be told without the generated menu.
//!
//! # Setting it
//!
//! [`set_default`] pins the release (a default that is it only as the newest kernel, entry
//! `0`, is a change: the next kernel installed would move it). It keeps `GRUB_DEFAULT=saved` in `/etc/default/grub` (a file change, undone
//! with the step; on hosts other than rhel and fedora a change schedules the one
//! `update-grub` at the end of the step, since the menu reads `saved_entry` only when
//! generated with it) and submits [`Effect::GrubDefault`]: `grub-set-default <entry>`
//! (`grub2-set-default` where the root has it and not `grub-set-default`, as on rhel),
//! where the entry is the BootLoaderSpec id when `/boot/loader/entries/<id>.conf` exists
//! for the release, else `Advanced options for <OS>><OS>, with Linux <release>` with `<OS>`
//! as grub's 10_linux names it (`GRUB_DISTRIBUTOR`: a literal value as it is, else the
//! first word of os-release `NAME`, or all of it when the value reads os-release). The
//! grubenv is the tool's to write (it is not journaled): a failed step leaves a
//! `not undone: grub default ...` line. The report's `grub default: <old> -> <release>`
//! names what grub booted before the kernels the session installs: in apply mode a kernel
//! package installed earlier in the step is already the newest kernel (entry `0`) when the
//! default is set, and would otherwise be named as its own old value.

use std::path::{Path, PathBuf};

use crate::host::Host;
use crate::host::effects::effect::Effect;
use crate::host::packages::version::{self, Scheme};
use crate::host::root::error::{HostError, Result};

/// grub's defaults file (a host path).
pub const DEFAULT_GRUB: &str = "/etc/default/grub";
/// Its drop-in directory (a host path).
pub const DEFAULT_GRUB_D: &str = "/etc/default/grub.d";
/// The grub environment blocks, grub then grub2 (host paths).
pub const GRUBENV: [&str; 2] = ["/boot/grub/grubenv", "/boot/grub2/grubenv"];
/// The directories a kernel is found in (host paths): `/boot/vmlinuz-<release>`, and
/// `<dir>/<release>/vmlinuz` of the module trees (Fedora, Amazon Linux 2023).
const MODULE_DIRS: [&str; 2] = ["/lib/modules", "/usr/lib/modules"];
/// The directories a program of the host is looked up in, in order.
const PROGRAM_DIRS: [&str; 6] = [
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// `kernel::running()`: the running kernel's release ([`crate::host::system::os::kernel`]).
///
/// # Errors
/// Read failures.
pub fn running(h: &Host) -> Result<String> {
    crate::host::system::os::kernel(h)
}

host_fn! {
    /// The running kernel's release (as `os::kernel()`: `/proc/sys/kernel/osrelease` under the
    /// root, else `uname -r`).
    #[host(ns = "kernel", effects = ReadsHost)]
    fn running(h: &mut Host) -> String {
        Ok(super::running(h)?)
    }
}

/// The version scheme of the host's kernel releases: rpm on the rhel, fedora and suse
/// families, else dpkg.
fn scheme(h: &Host) -> Result<Scheme> {
    Ok(match crate::host::system::os::family(h)?.as_str() {
        "rhel" | "fedora" | "suse" => Scheme::Rpm,
        _ => Scheme::Dpkg,
    })
}

/// Whether `release` is a plausible kernel release (`6.8.0-1015-aws`,
/// `6.1.158-180.294.amzn2023.x86_64`): starts with a digit; letters, digits, `.`, `-`, `_`,
/// `+`, `~` only.
fn is_release(release: &str) -> bool {
    release.starts_with(|c: char| c.is_ascii_digit())
        && release
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-_+~".contains(c))
}

fn check_release(release: &str) -> Result<()> {
    if is_release(release) {
        Ok(())
    } else {
        Err(HostError::Invalid {
            what: "kernel release",
            message: format!(
                "{release:?} (a release as `uname -r` prints it, like \"6.8.0-1015-aws\")"
            ),
        })
    }
}

/// `kernel::installed()`: the releases that have a kernel image in the root,
/// `/boot/vmlinuz-<release>` or `/lib/modules/<release>/vmlinuz` (`/usr/lib/modules`), as
/// the session sees them (a planned `pkg::install` does not add one), oldest first by the
/// host's version order (dpkg, rpm on rpm hosts). A module tree without an image (modules
/// left after the kernel package was removed) is not a kernel, nor rhel's rescue image
/// `/boot/vmlinuz-0-rescue-<machine id>`.
///
/// # Errors
/// Read failures; a name the version order cannot parse.
pub fn installed(h: &Host) -> Result<Vec<String>> {
    let mut found: Vec<String> = Vec::new();
    if let Some(entries) = h.view_list(Path::new("/boot"))? {
        for (name, _) in entries {
            // `vmlinuz-0-rescue-<machine id>` (rhel's rescue image) boots a copy of
            // another kernel: it is no release of its own.
            if let Some(r) = name.strip_prefix("vmlinuz-")
                && is_release(r)
                && !r.starts_with("0-rescue-")
                && !found.iter().any(|f| f == r)
            {
                found.push(r.to_string());
            }
        }
    }
    for dir in MODULE_DIRS {
        let Some(entries) = h.view_list(Path::new(dir))? else {
            continue;
        };
        for (name, _) in entries {
            let image = Path::new(dir).join(&name).join("vmlinuz");
            if is_release(&name) && !found.contains(&name) && h.view_stat(&image, true)?.is_some() {
                found.push(name);
            }
        }
    }
    version::sort(found, scheme(h)?)
}

host_fn! {
    /// The releases with a kernel image, `/boot/vmlinuz-<release>` or
    /// `/lib/modules/<release>/vmlinuz` (`/usr/lib/modules`), oldest first (dpkg order; rpm order
    /// on rpm hosts). A module tree without an image is not a kernel.
    #[host(ns = "kernel", effects = ReadsHost)]
    fn installed(h: &mut Host) -> rhai::Array {
        Ok(convert::array(super::installed(h)?))
    }
}

/// One shell word of a `KEY=value` line: quotes taken off (`'...'` literal, `"..."` with
/// `\` escapes), a backquoted or `$` expansion kept as written.
fn shell_value(raw: &str) -> String {
    let raw = raw.trim();
    let mut out = String::new();
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => out.extend(chars.by_ref().take_while(|&c| c != '\'')),
            '"' => {
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => out.extend(chars.next()),
                        c => out.push(c),
                    }
                }
            }
            '\\' => out.extend(chars.next()),
            c if c.is_whitespace() => break,
            '#' if out.is_empty() => break,
            c => out.push(c),
        }
    }
    out
}

/// The last `KEY=value` of `text` (lines starting with `KEY=`, after blanks), unquoted.
fn last_assignment(text: &str, key: &str) -> Option<String> {
    let prefix = format!("{key}=");
    text.lines()
        .rev()
        .find_map(|l| l.trim_start().strip_prefix(&prefix))
        .map(shell_value)
}

/// The grub defaults files in the order grub-mkconfig sources them, with their text (as the
/// session sees them).
fn grub_defaults(h: &Host) -> Result<Vec<(PathBuf, String)>> {
    let mut files = vec![PathBuf::from(DEFAULT_GRUB)];
    if let Some(entries) = h.view_list(Path::new(DEFAULT_GRUB_D))? {
        files.extend(
            entries
                .into_iter()
                .filter(|(n, _)| n.ends_with(".cfg"))
                .map(|(n, _)| Path::new(DEFAULT_GRUB_D).join(n)),
        );
    }
    let mut out = Vec::new();
    for f in files {
        if let Some(b) = h.view_read(&f)? {
            let text = String::from_utf8(b).map_err(|_| HostError::NotText { path: f.clone() })?;
            out.push((f, text));
        }
    }
    Ok(out)
}

/// The effective value of `key` across the grub defaults files, and the file that set it.
fn grub_setting(h: &Host, key: &str) -> Result<Option<(PathBuf, String)>> {
    Ok(grub_defaults(h)?
        .into_iter()
        .rev()
        .find_map(|(p, t)| last_assignment(&t, key).map(|v| (p, v))))
}

/// The variables of a grub environment block: `name=value` lines after the header, up to
/// the `#` padding.
///
/// # Errors
/// A block that does not start with `# GRUB Environment Block` (named by `path`).
pub fn parse_grubenv(path: &Path, bytes: &[u8]) -> Result<Vec<(String, String)>> {
    let text = String::from_utf8_lossy(bytes);
    let Some(body) = text.strip_prefix("# GRUB Environment Block\n") else {
        return Err(HostError::Invalid {
            what: "grub environment block",
            message: format!(
                "{} does not start with \"# GRUB Environment Block\"",
                path.display()
            ),
        });
    };
    Ok(body
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect())
}

/// The grubenv in use: the first of [`GRUBENV`] present (grub2 first on the rhel and fedora
/// families).
fn grubenv_path(h: &Host) -> Result<Option<PathBuf>> {
    let mut paths = GRUBENV;
    if matches!(
        crate::host::system::os::family(h)?.as_str(),
        "rhel" | "fedora"
    ) {
        paths.reverse();
    }
    for p in paths {
        if h.view_stat(Path::new(p), true)?.is_some() {
            return Ok(Some(PathBuf::from(p)));
        }
    }
    Ok(None)
}

fn saved_entry(h: &Host) -> Result<Option<String>> {
    let Some(path) = grubenv_path(h)? else {
        return Ok(None);
    };
    let Some(bytes) = h.view_read(&path)? else {
        return Ok(None);
    };
    Ok(parse_grubenv(&path, &bytes)?
        .into_iter()
        .find(|(k, _)| k == "saved_entry")
        .map(|(_, v)| v)
        .filter(|v| !v.is_empty()))
}

/// The release a grub menu entry boots (module docs), `newest` for entry `0`.
pub fn entry_release(entry: &str, newest: Option<&str>) -> Option<String> {
    let last = entry.rsplit('>').next().unwrap_or(entry).trim();
    if last == "0" || last.starts_with("gnulinux-simple-") {
        return newest.map(String::from);
    }
    if let Some((_, r)) = last.rsplit_once("with Linux ") {
        let r = r.trim_end_matches(" (recovery mode)").trim();
        return is_release(r).then(|| r.to_string());
    }
    if let Some(rest) = last.strip_prefix("gnulinux-") {
        for mark in ["-advanced-", "-recovery-"] {
            if let Some((r, _)) = rest.rsplit_once(mark) {
                return is_release(r).then(|| r.to_string());
            }
        }
    }
    if let Some((id, r)) = last.split_once('-')
        && id.len() == 32
        && id.chars().all(|c| c.is_ascii_hexdigit())
        && is_release(r)
        && !r.starts_with("0-rescue")
    {
        return Some(r.to_string());
    }
    let mut rest = last;
    while let Some(open) = rest.find('(') {
        let after = &rest[open + 1..];
        let Some(close) = after.find(')') else { break };
        if is_release(&after[..close]) {
            return Some(after[..close].to_string());
        }
        rest = &after[close + 1..];
    }
    None
}

/// `kernel::default_release()`: the release grub boots next (module docs), in plan and check mode
/// also after a planned [`set_default`]; `None` when it cannot be told.
///
/// # Errors
/// Read failures; a defaults file that is not UTF-8 text; a grubenv without its header.
pub fn default(h: &Host) -> Result<Option<String>> {
    if let Some(r) = h.planned_grub_default() {
        return Ok(Some(r));
    }
    let kernels = installed(h)?;
    Ok(entry_release(
        &default_entry(h)?,
        kernels.last().map(String::as_str),
    ))
}

host_fn! {
    /// The release grub boots next, or `()` when the entry does not tell (see the section); in a
    /// plan also after a planned `set_default`. (`default` is a Rhai keyword, hence the name.)
    #[host(ns = "kernel", effects = ReadsHost)]
    fn default_release(h: &mut Host) -> rhai::Dynamic {
        Ok(convert::opt(super::default(h)?))
    }
}

/// The release grub booted before this session's kernels came: [`default`], with the newest
/// kernel (entry `0`) taken among the kernels installed before the session, leaving out
/// those of packages the session installed (apply) or planned to install ([`brings_kernel`]).
/// The `old` of a [`set_default`] report, so that apply names what the plan named: an
/// install has already put its kernel in place (and had grub's menu regenerated) when the
/// default is set after it in apply mode, while a plan only planned it.
///
/// # Errors
/// As [`default`].
fn default_before_session(h: &Host) -> Result<Option<String>> {
    if let Some(r) = h.planned_grub_default() {
        return Ok(Some(r));
    }
    let session = h.session_installs();
    let kernels: Vec<String> = installed(h)?
        .into_iter()
        .filter(|k| !session.iter().any(|n| brings_kernel(n, k)))
        .collect();
    Ok(entry_release(
        &default_entry(h)?,
        kernels.last().map(String::as_str),
    ))
}

/// Whether package `name` carries kernel `release` itself: a name ending with `-<release>`
/// (`linux-image-<release>`, `kernel-<release>`, ...) that is not one of its companions
/// (headers, modules, tools), which an install may add to a kernel already there.
fn brings_kernel(name: &str, release: &str) -> bool {
    const COMPANIONS: [&str; 8] = [
        "linux-headers-",
        "linux-modules-",
        "linux-tools-",
        "linux-cloud-tools-",
        "kernel-devel-",
        "kernel-headers-",
        "kernel-modules-",
        "kernel-tools-",
    ];
    name.ends_with(&format!("-{release}")) && !COMPANIONS.iter().any(|c| name.starts_with(c))
}

/// The entry grub boots next: `GRUB_DEFAULT`, or for `saved` the grubenv's `saved_entry`
/// (`0` when there is none).
fn default_entry(h: &Host) -> Result<String> {
    let value = grub_setting(h, "GRUB_DEFAULT")?.map_or_else(|| "0".to_string(), |(_, v)| v);
    Ok(if value == "saved" {
        saved_entry(h)?.unwrap_or_else(|| "0".into())
    } else {
        value
    })
}

/// The release grub's default entry names itself (not by being the newest kernel), as the
/// session sees it.
fn pinned(h: &Host) -> Result<Option<String>> {
    if let Some(r) = h.planned_grub_default() {
        return Ok(Some(r));
    }
    Ok(entry_release(&default_entry(h)?, None))
}

/// `<OS>` of grub's menu titles (module docs).
fn grub_os(h: &Host) -> Result<String> {
    let name = crate::host::system::os::release(h)?
        .remove("NAME")
        .unwrap_or_else(|| "GNU/Linux".into());
    Ok(match grub_setting(h, "GRUB_DISTRIBUTOR")? {
        Some((_, v)) if !v.is_empty() && !v.contains(['`', '$']) => v,
        Some((_, v)) if v.contains("os-release") => name,
        _ => name
            .split_whitespace()
            .next()
            .unwrap_or("GNU/Linux")
            .to_string(),
    })
}

/// The program among `names` found first in the root's [`PROGRAM_DIRS`] (each name tried in
/// every directory before the next name).
pub(crate) fn find_program<'a>(h: &Host, names: &[&'a str]) -> Result<Option<&'a str>> {
    for n in names {
        for d in PROGRAM_DIRS {
            if h.view_stat(&Path::new(d).join(n), true)?.is_some() {
                return Ok(Some(n));
            }
        }
    }
    Ok(None)
}

/// The BootLoaderSpec entry id of `release` (`/boot/loader/entries/<id>.conf` whose name
/// ends with `-<release>`), if any.
fn bls_entry(h: &Host, release: &str) -> Result<Option<String>> {
    let suffix = format!("-{release}.conf");
    Ok(h.view_list(Path::new("/boot/loader/entries"))?
        .unwrap_or_default()
        .into_iter()
        .find(|(n, _)| n.ends_with(&suffix))
        .map(|(n, _)| n.trim_end_matches(".conf").to_string()))
}

/// Whether a package planned for install in this session carries kernel `release`
/// (`linux-image-<release>`, `kernel-<release>`, ...: a name ending with `-<release>`).
fn planned_kernel(h: &Host, release: &str) -> bool {
    let suffix = format!("-{release}");
    h.planned_installs().any(|n| n.ends_with(&suffix))
}

/// `GRUB_DEFAULT=saved` in the text of `/etc/default/grub`: the first `GRUB_DEFAULT=` line
/// replaced (later ones dropped), else appended; `None` when already so.
fn with_saved(text: &str) -> Option<String> {
    let mut out = String::new();
    let mut seen = false;
    let mut changed = false;
    for line in text.lines() {
        if line.trim_start().starts_with("GRUB_DEFAULT=") {
            if seen {
                changed = true;
                continue;
            }
            seen = true;
            if line.trim() != "GRUB_DEFAULT=saved" {
                changed = true;
                out.push_str("GRUB_DEFAULT=saved\n");
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    if !seen {
        changed = true;
        out.push_str("GRUB_DEFAULT=saved\n");
    }
    changed.then_some(out)
}

/// `kernel::set_default(release)`: make grub boot `release` next (module docs). Unchanged
/// when grub's default entry names `release` itself; a default that is `release` only as
/// the newest kernel (entry `0`) is pinned, since the next kernel installed would move it. Plan: `~ grub default: <old> -> <release>` (and
/// the `/etc/default/grub` diff when `GRUB_DEFAULT` was not `saved`), `<old>` what grub
/// booted before the kernels this session installs (`default_before_session`), in apply
/// as in plan; check: drift.
///
/// # Errors
/// An invalid release; a release not installed (nor planned by a `pkg::install` of this
/// session); a `GRUB_DEFAULT` other than `saved` set in a `/etc/default/grub.d` file (named);
/// no `grub-set-default`/`grub2-set-default` in the root; read and write failures; the tool
/// failing (apply).
pub fn set_default(h: &mut Host, release: &str) -> Result<bool> {
    check_release(release)?;
    let kernels = installed(h)?;
    if !kernels.iter().any(|k| k == release) && !planned_kernel(h, release) {
        return Err(HostError::Invalid {
            what: "kernel release",
            message: format!(
                "{release:?} is not installed (installed: {})",
                if kernels.is_empty() {
                    "none".to_string()
                } else {
                    kernels.join(", ")
                }
            ),
        });
    }
    if pinned(h)?.as_deref() == Some(release) {
        h.note_unchanged();
        return Ok(false);
    }
    if let Some((path, v)) = grub_setting(h, "GRUB_DEFAULT")?
        && path != Path::new(DEFAULT_GRUB)
        && v != "saved"
    {
        return Err(HostError::Invalid {
            what: "grub default",
            message: format!(
                "{} sets GRUB_DEFAULT={v}, which overrides GRUB_DEFAULT=saved in {DEFAULT_GRUB}: remove it there first",
                path.display()
            ),
        });
    }
    let old = default_before_session(h)?;
    let family = crate::host::system::os::family(h)?;
    let rpm = matches!(family.as_str(), "rhel" | "fedora");
    let tools: &[&str] = if rpm {
        &["grub2-set-default", "grub-set-default"]
    } else {
        &["grub-set-default", "grub2-set-default"]
    };
    let tool = find_program(h, tools)?.ok_or_else(|| HostError::ProgramNotFound {
        command: tools[0].to_string(),
    })?;
    let entry = match bls_entry(h, release)? {
        Some(id) => id,
        None => {
            let os = grub_os(h)?;
            format!("Advanced options for {os}>{os}, with Linux {release}")
        }
    };
    let path = Path::new(DEFAULT_GRUB);
    let mut undo = None;
    let r = crate::host::files::fs::edit_with::<HostError>(
        h,
        path,
        |h| {
            let text = match h.view_read(path)? {
                Some(b) => String::from_utf8(b).map_err(|_| HostError::NotText {
                    path: path.to_path_buf(),
                })?,
                None => String::new(),
            };
            Ok(with_saved(&text).map(String::into_bytes))
        },
        |h| {
            if !rpm {
                let mut pending = h.pending_grub();
                pending.regenerate = true;
                undo = Some(h.schedule_grub_ahead(pending)?);
            }
            Ok(())
        },
    );
    if r.is_err()
        && let Some(u) = undo
    {
        h.restore_grub(u);
    }
    r?;
    h.submit(Effect::GrubDefault {
        tool: tool.to_string(),
        entry,
        release: release.to_string(),
        old,
    })?;
    Ok(true)
}

host_fn! {
    /// Make grub boot `release` next: `GRUB_DEFAULT=saved` in `/etc/default/grub` (a file change;
    /// `update-grub` once at the end of the step, except on rhel and fedora) and `grub-set-default
    /// "Advanced options for <OS>><OS>, with Linux <release>"` (`grub2-set-default` where only it
    /// exists; a BootLoaderSpec id when `/boot/loader/entries/<id>.conf` is there). Unchanged when
    /// grub's default entry names the release (a default that is it only as the newest kernel,
    /// entry `0`, is pinned); a plan shows `~ grub default: <old> -> <release>` (`<old>`: what grub
    /// booted before the kernels the step installs, in plan and apply alike); check: drift. An
    /// error when the release is not installed (nor planned by a `pkg::install` of the step), or a
    /// `grub.d` file sets another `GRUB_DEFAULT`.
    #[host(ns = "kernel", effects = [Write, GrubDefault])]
    fn set_default(h: &mut Host, release: S) -> bool {
        Ok(super::set_default(h, &release)?)
    }
}

/// `kernel::boot_into(release)`: [`set_default`], then `interrupt::reboot()` when the
/// running kernel is not `release`. Returns whether anything was changed or requested.
///
/// # Errors
/// As [`set_default`].
pub fn boot_into(h: &mut Host, release: &str) -> Result<bool> {
    let changed = set_default(h, release)?;
    if running(h)? == release {
        return Ok(changed);
    }
    crate::host::kernel::interrupt::reboot(h)?;
    Ok(true)
}

host_fn! {
    /// `set_default(release)`, then `interrupt::reboot()` when the running kernel is another; true
    /// when anything was changed or requested.
    #[host(ns = "kernel", effects = [Write, GrubDefault, Interrupt])]
    fn boot_into(h: &mut Host, release: S) -> bool {
        Ok(super::boot_into(h, &release)?)
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::convert;
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use rhai::ImmutableString as S;
}
use prelude::*;

host_fns!(running, installed, default_release, set_default, boot_into);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_name_their_release() {
        for (entry, want) in [
            ("0", Some("9.9.9-new")),
            (
                "Advanced options for Ubuntu>Ubuntu, with Linux 6.8.0-1015-aws",
                Some("6.8.0-1015-aws"),
            ),
            (
                "Advanced options for Ubuntu>Ubuntu, with Linux 6.8.0-1015-aws (recovery mode)",
                Some("6.8.0-1015-aws"),
            ),
            (
                "gnulinux-advanced-0e1f2a3b-aaaa-bbbb-cccc-0123456789ab>gnulinux-6.8.0-1015-aws-advanced-0e1f2a3b-aaaa-bbbb-cccc-0123456789ab",
                Some("6.8.0-1015-aws"),
            ),
            (
                "gnulinux-simple-0e1f2a3b-aaaa-bbbb-cccc-0123456789ab",
                Some("9.9.9-new"),
            ),
            (
                "Amazon Linux (6.1.158-180.294.amzn2023.x86_64) 2023",
                Some("6.1.158-180.294.amzn2023.x86_64"),
            ),
            (
                "ec2a1b2c3d4e5f60718293a4b5c6d7e8-5.14.0-362.el9.x86_64",
                Some("5.14.0-362.el9.x86_64"),
            ),
            ("ec2a1b2c3d4e5f60718293a4b5c6d7e8-0-rescue", None),
            ("2", None),
            ("Windows Boot Manager (on /dev/nvme0n1p1)", None),
        ] {
            assert_eq!(
                entry_release(entry, Some("9.9.9-new")).as_deref(),
                want,
                "{entry}"
            );
        }
    }

    #[test]
    fn grub_default_values_and_grubenv() {
        assert_eq!(shell_value("\"saved\""), "saved");
        assert_eq!(
            shell_value("'Advanced options for Ubuntu>Ubuntu, with Linux 6.8.0-1015-aws'"),
            "Advanced options for Ubuntu>Ubuntu, with Linux 6.8.0-1015-aws"
        );
        assert_eq!(shell_value("0 # first"), "0");
        assert_eq!(
            last_assignment(
                "GRUB_DEFAULT=0\n#GRUB_DEFAULT=2\n GRUB_DEFAULT=saved\n",
                "GRUB_DEFAULT"
            )
            .as_deref(),
            Some("saved")
        );
        let mut block = b"# GRUB Environment Block\nsaved_entry=gnulinux-6.8.0-1015-aws-advanced-x\nnext_entry=\n".to_vec();
        block.resize(1024, b'#');
        assert_eq!(
            parse_grubenv(Path::new("/boot/grub/grubenv"), &block).unwrap(),
            vec![
                (
                    "saved_entry".to_string(),
                    "gnulinux-6.8.0-1015-aws-advanced-x".to_string()
                ),
                ("next_entry".to_string(), String::new())
            ]
        );
        assert_eq!(
            parse_grubenv(Path::new("/boot/grub/grubenv"), b"saved_entry=0\n")
                .unwrap_err()
                .to_string(),
            "invalid grub environment block: /boot/grub/grubenv does not start with \"# GRUB Environment Block\""
        );
        assert_eq!(
            with_saved("GRUB_DEFAULT=0\nGRUB_TIMEOUT=0\nGRUB_DEFAULT=1\n").as_deref(),
            Some("GRUB_DEFAULT=saved\nGRUB_TIMEOUT=0\n")
        );
        assert_eq!(with_saved("GRUB_DEFAULT=saved\n"), None);
        assert_eq!(
            with_saved("GRUB_TIMEOUT=0").as_deref(),
            Some("GRUB_TIMEOUT=0\nGRUB_DEFAULT=saved\n")
        );
    }
}
