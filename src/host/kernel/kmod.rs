//! Kernel modules: `kmod::` blacklists, options and boot-time loading (modprobe.d(5),
//! modules-load.d(5)), the live module table (`/proc/modules`), `modprobe`, and the
//! deferred initramfs regeneration.
//!
//! # Files
//!
//! | function | file (host path) | line(s) it keeps |
//! |---|---|---|
//! | [`blacklist`] | `/etc/modprobe.d/<file>.conf`, default `blacklist-<name>` | `blacklist <name>`; with `disable`, `install <name> /bin/false` |
//! | [`options`] | `/etc/modprobe.d/<file>.conf`, default `<name>` | `options <name> <opts>` (exactly one) |
//! | [`load_at_boot`] | `/etc/modules-load.d/<file>.conf`, default `<name>` | `<name>` |
//!
//! Each function edits only its own lines of the file: every other line (comments, other
//! modules' lines) is kept byte for byte, so a blacklist and options for one module can
//! share a file (`#{file: "nvidia"}`), as the NVIDIA installers' `blacklist nouveau` +
//! `options nouveau modeset=0` do. A line is recognised by its words, so `blacklist   x`
//! counts as `blacklist x`; module names compare with `-` and `_` equivalent, as the kernel
//! does. The removing functions ([`unblacklist`], [`remove_options`], [`unload_at_boot`])
//! take those lines out and remove a file left without lines. Writes are atomic and made
//! under the file's lock in apply mode ([`crate::host::root::pathlock`]).
//!
//! # Initramfs
//!
//! A changed blacklist or options file (`/etc/modprobe.d`, which the initramfs carries)
//! schedules ONE initramfs regeneration at the end of the step ([`crate::host::Host::finish`]):
//! `dracut -f` on the rhel and fedora families, `update-initramfs -u` elsewhere
//! ([`InitramfsTool::for_family`](crate::host::effects::effect::InitramfsTool::for_family)). In apply mode it is recorded write-ahead in
//! `/var/lib/skyhook/.deferred/initramfs.json` before the file changes and the record is
//! removed once the command succeeded; a failure or a crash leaves the record, and the next
//! session runs the regeneration ([`crate::host::root::deferred`]). In plan and check mode it is
//! listed as an action (never drift). `modules-load.d` changes schedule nothing.
//!
//! # Loading
//!
//! [`loaded`] reads `/proc/modules` under the host root (the host's module table: modules
//! are global to the kernel); built-in modules are not listed there. [`load`] runs
//! `modprobe <name>` chrooted: a change (drift in a check) when `/proc/modules` was read and
//! does not list the module; when the root has no `/proc/modules` the state cannot be told
//! and `modprobe` (itself idempotent) runs as an action every time.

use std::path::{Path, PathBuf};

use crate::host::Host;
use crate::host::effects::effect::Effect;
pub use crate::host::effects::effect::canonical_name;
use crate::host::root::error::{HostError, Result};

/// The live module table (a host path).
pub const PROC_MODULES: &str = "/proc/modules";
/// The modprobe configuration directory (a host path).
pub const MODPROBE_D: &str = "/etc/modprobe.d";
/// The boot-time module list directory (a host path).
pub const MODULES_LOAD_D: &str = "/etc/modules-load.d";

/// Options of the file-editing functions: the file name (without directory; `.conf` is
/// appended unless present). `None`: the function's default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileOptions {
    /// File name in the function's directory.
    pub file: Option<String>,
}

/// Options of [`blacklist`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlacklistOptions {
    /// File name (default `blacklist-<name>`).
    pub file: Option<String>,
    /// Also keep `install <name> /bin/false`, so that not even an explicit `modprobe` or a
    /// dependency loads it; `false` removes that exact line from the file.
    pub disable: bool,
}

fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(HostError::Invalid {
            what: "kernel module name",
            message: format!("{name:?} (letters, digits, `-` and `_` only)"),
        })
    }
}

/// `<dir>/<file>.conf` (`.conf` not doubled).
///
/// # Errors
/// `file` empty, `.`/`..`, or with `/`, whitespace or NUL.
pub fn conf_path(dir: &str, file: &str) -> Result<PathBuf> {
    if file.is_empty()
        || file == "."
        || file == ".."
        || file.contains(['/', '\0'])
        || file.contains(char::is_whitespace)
    {
        return Err(HostError::Invalid {
            what: "kmod file name",
            message: format!("{file:?} must be a single file name"),
        });
    }
    let name = if file.ends_with(".conf") {
        file.to_string()
    } else {
        format!("{file}.conf")
    };
    Ok(Path::new(dir).join(name))
}

/// Words of a line: `blacklist  x` is `["blacklist", "x"]`.
fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// `line` is `<keyword> <module> ...` for module `name` (compared `-`/`_` equivalent).
fn is_for(line: &str, keyword: &str, name: &str) -> bool {
    let w = words(line);
    w.len() >= 2 && w[0] == keyword && canonical_name(w[1]) == canonical_name(name)
}

/// Keep exactly one line for which `matches` holds, equal to `wanted` (word-wise): the first
/// match is replaced unless it already has `wanted`'s words, the others are dropped; without
/// a match `wanted` is appended.
fn keep_one(lines: &mut Vec<String>, matches: impl Fn(&str) -> bool, wanted: &str) {
    let mut seen = false;
    lines.retain_mut(|l| {
        if !matches(l) {
            return true;
        }
        if seen {
            return false;
        }
        seen = true;
        if words(l) != words(wanted) {
            *l = wanted.to_string();
        }
        true
    });
    if !seen {
        lines.push(wanted.to_string());
    }
}

/// The file's lines as the session sees it (`None` when absent).
fn read_lines(h: &Host, path: &Path) -> Result<Option<Vec<String>>> {
    let Some(bytes) = h.view_read(path)? else {
        return Ok(None);
    };
    let text = String::from_utf8(bytes).map_err(|_| HostError::NotText {
        path: path.to_path_buf(),
    })?;
    Ok(Some(text.lines().map(String::from).collect()))
}

fn render(lines: &[String]) -> Vec<u8> {
    let mut s = String::new();
    for l in lines {
        s.push_str(l);
        s.push('\n');
    }
    s.into_bytes()
}

/// What editing `path` with `change` comes to, as the session sees it now.
enum Outcome {
    Unchanged,
    Write(Vec<u8>),
    Remove,
}

fn outcome(h: &Host, path: &Path, change: &impl Fn(&mut Vec<String>)) -> Result<Outcome> {
    let old = read_lines(h, path)?;
    let mut lines = old.clone().unwrap_or_default();
    change(&mut lines);
    Ok(match old {
        Some(o) if o == lines => Outcome::Unchanged,
        None if lines.is_empty() => Outcome::Unchanged,
        Some(_) if lines.is_empty() => Outcome::Remove,
        _ => Outcome::Write(render(&lines)),
    })
}

/// A line-wise edit of the configuration file at `path` (module docs): the file is written
/// when `change` changed its lines and removed when it left none. With `initramfs`, a change
/// schedules the initramfs regeneration, recorded ahead of the write in apply mode.
fn edit_conf(
    h: &mut Host,
    path: &Path,
    initramfs: bool,
    change: impl Fn(&mut Vec<String>),
) -> Result<bool> {
    let mut undo = None;
    let mut before = |h: &mut Host| -> Result<()> {
        if initramfs {
            undo = Some(h.schedule_initramfs_ahead()?);
        }
        Ok(())
    };
    let r = match outcome(h, path, &change)? {
        Outcome::Unchanged => {
            h.note_unchanged();
            return Ok(false);
        }
        Outcome::Remove => crate::host::files::fs::remove_with(h, &path.to_string_lossy(), |h| {
            // Decided again under the file's lock: lines another process added meanwhile
            // are not removed with the file.
            if !matches!(outcome(h, path, &change)?, Outcome::Remove) {
                return Err(HostError::Invalid {
                    what: "concurrent edit",
                    message: format!("{} changed while it was being removed", path.display()),
                });
            }
            before(h)
        }),
        Outcome::Write(_) => crate::host::files::fs::edit_with(
            h,
            path,
            |h| match outcome(h, path, &change)? {
                Outcome::Write(c) => Ok(Some(c)),
                // Emptied or already done under the lock: an empty file is still valid.
                Outcome::Remove => Ok(Some(Vec::new())),
                Outcome::Unchanged => Ok(None),
            },
            before,
        ),
    };
    if r.is_err()
        && let Some(u) = undo
    {
        h.restore_initramfs(u);
    }
    r
}

/// `kmod::blacklist(name, #{file, disable})`: keep `blacklist <name>` (and with `disable`
/// `install <name> /bin/false`, replacing another `install <name> ...` line of the file) in
/// `/etc/modprobe.d/<file>.conf` (default `blacklist-<name>.conf`). Returns whether the file
/// changed; a change schedules the initramfs regeneration (module docs). Apply writes; plan
/// records the diff and the regeneration; check reports drift.
///
/// # Errors
/// Invalid module or file name; the file is not UTF-8 text; writing the initramfs record
/// (apply; the file is then left unwritten); write failures.
pub fn blacklist(h: &mut Host, name: &str, opts: &BlacklistOptions) -> Result<bool> {
    let path = blacklist_path(name, opts.file.as_deref())?;
    let disable = opts.disable;
    let false_line = format!("install {name} /bin/false");
    edit_conf(h, &path, true, |lines| {
        keep_one(
            lines,
            |l| is_for(l, "blacklist", name),
            &format!("blacklist {name}"),
        );
        if disable {
            keep_one(lines, |l| is_for(l, "install", name), &false_line);
        } else {
            lines.retain(|l| {
                !(is_for(l, "install", name) && words(l).get(2) == Some(&"/bin/false"))
            });
        }
    })
}

host_fn! {
    /// Keep `blacklist <name>` in `/etc/modprobe.d/blacklist-<name>.conf`; a change regenerates the
    /// initramfs once at the end of the step.
    #[host(ns = "kmod", effects = [Write, Remove])]
    fn blacklist(h: &mut Host, name: S) -> bool {
        Ok(super::blacklist(h, &name, &BlacklistOptions::default())?)
    }

    /// As `blacklist(name)` in `/etc/modprobe.d/<file>.conf`; `disable: true` also keeps `install
    /// <name> /bin/false` (no explicit `modprobe` or dependency loads it either), `false` removes
    /// that line.
    #[overload(options = BLACKLIST_KEYS)]
    fn blacklist_with_opts(h: &mut Host, name: S, opts: Map) -> bool {
        let opts = blacklist_opts(&opts)?;
        Ok(super::blacklist(h, &name, &opts)?)
    }
}

/// The blacklist file of module `name` (checked): `/etc/modprobe.d/<file>.conf`, by default
/// `blacklist-<name>.conf`; shared by [`blacklist`] and [`unblacklist`].
fn blacklist_path(name: &str, file: Option<&str>) -> Result<PathBuf> {
    check_name(name)?;
    let default = format!("blacklist-{name}");
    conf_path(MODPROBE_D, file.unwrap_or(&default))
}

/// `kmod::unblacklist(name, #{file})`: take the `blacklist <name>` and
/// `install <name> /bin/false` lines out of the [`blacklist`] file (removed when left
/// empty). A change schedules the initramfs regeneration.
///
/// # Errors
/// As [`blacklist`].
pub fn unblacklist(h: &mut Host, name: &str, opts: &FileOptions) -> Result<bool> {
    let path = blacklist_path(name, opts.file.as_deref())?;
    edit_conf(h, &path, true, |lines| {
        lines.retain(|l| {
            !(is_for(l, "blacklist", name)
                || (is_for(l, "install", name) && words(l).get(2) == Some(&"/bin/false")))
        });
    })
}

host_fn! {
    /// Take the `blacklist <name>` and `install <name> /bin/false` lines out of the blacklist file
    /// (removed when left empty); a change regenerates the initramfs.
    #[host(ns = "kmod", effects = [Write, Remove])]
    fn unblacklist(h: &mut Host, name: S) -> bool {
        Ok(super::unblacklist(h, &name, &FileOptions::default())?)
    }

    /// As `unblacklist(name)` in `/etc/modprobe.d/<file>.conf`.
    #[overload(options = KMOD_FILE_KEYS)]
    fn unblacklist_with_opts(h: &mut Host, name: S, opts: Map) -> bool {
        let opts = file_opts(&opts)?;
        Ok(super::unblacklist(h, &name, &opts)?)
    }
}

/// The `options` line's value: words normalised to single spaces.
///
/// # Errors
/// Empty, or with a line break or NUL.
fn check_opts(opts: &str) -> Result<String> {
    let norm = words(opts).join(" ");
    if norm.is_empty() || opts.contains(['\n', '\r', '\0']) {
        return Err(HostError::Invalid {
            what: "module options",
            message: format!("{opts:?} (one or more `key=value` words on one line)"),
        });
    }
    Ok(norm)
}

/// `kmod::options(name, opts, #{file})`: keep exactly one `options <name> <opts>` line in
/// `/etc/modprobe.d/<file>.conf` (default `<name>.conf`); `opts` is `key=value` words (the
/// Rhai binding also takes a map, rendered `k=v` sorted by key). A different `options <name>`
/// line is replaced in place; other lines stay. A change schedules the initramfs
/// regeneration; check reports a hand-edited value as drift.
///
/// # Errors
/// Invalid module or file name; empty options or a line break in them; as [`blacklist`].
pub fn options(h: &mut Host, name: &str, opts: &str, file: &FileOptions) -> Result<bool> {
    check_name(name)?;
    let value = check_opts(opts)?;
    let path = conf_path(MODPROBE_D, file.file.as_deref().unwrap_or(name))?;
    let line = format!("options {name} {value}");
    edit_conf(h, &path, true, |lines| {
        keep_one(lines, |l| is_for(l, "options", name), &line);
    })
}

host_fn! {
    /// Keep exactly one `options <name> <opts>` line in `/etc/modprobe.d/<name>.conf` (`opts` a
    /// string `"modeset=0"` or a map `#{modeset: 0}`, rendered `k=v` by key); another `options
    /// <name>` line is replaced, other lines stay; a change regenerates the initramfs. A
    /// hand-edited value is drift.
    #[host(ns = "kmod", effects = [Write, Remove])]
    fn options(h: &mut Host, name: S, opts: Dynamic) -> bool {
        let opts = module_options(&opts)?;
        Ok(super::options(h, &name, &opts, &FileOptions::default())?)
    }

    /// As `options(name, opts)` in `/etc/modprobe.d/<file>.conf` (`#{file}`), which may also hold
    /// the module's blacklist lines.
    #[overload(options = KMOD_FILE_KEYS)]
    fn options_with_file_opts(h: &mut Host, name: S, opts: Dynamic, file_opts: Map) -> bool {
        let file_opts = super::file_opts(&file_opts)?;
        let opts = module_options(&opts)?;
        Ok(super::options(h, &name, &opts, &file_opts)?)
    }
}

/// `kmod::remove_options(name, #{file})`: take the `options <name>` lines out of the
/// [`options`] file (removed when left empty). A change schedules the initramfs
/// regeneration.
///
/// # Errors
/// As [`blacklist`].
pub fn remove_options(h: &mut Host, name: &str, file: &FileOptions) -> Result<bool> {
    check_name(name)?;
    let path = conf_path(MODPROBE_D, file.file.as_deref().unwrap_or(name))?;
    edit_conf(h, &path, true, |lines| {
        lines.retain(|l| !is_for(l, "options", name));
    })
}

host_fn! {
    /// Take the `options <name>` lines out of `/etc/modprobe.d/<name>.conf` (removed when left
    /// empty); a change regenerates the initramfs.
    #[host(ns = "kmod", effects = [Write, Remove])]
    fn remove_options(h: &mut Host, name: S) -> bool {
        Ok(super::remove_options(h, &name, &FileOptions::default())?)
    }

    /// As `remove_options(name)` in `/etc/modprobe.d/<file>.conf`.
    #[overload(options = KMOD_FILE_KEYS)]
    fn remove_options_with_opts(h: &mut Host, name: S, opts: Map) -> bool {
        let opts = file_opts(&opts)?;
        Ok(super::remove_options(h, &name, &opts)?)
    }
}

fn is_module_line(line: &str, name: &str) -> bool {
    let w = words(line);
    w.len() == 1 && canonical_name(w[0]) == canonical_name(name)
}

/// `kmod::load_at_boot(name, #{file})`: keep the line `<name>` in
/// `/etc/modules-load.d/<file>.conf` (default `<name>.conf`), which systemd-modules-load
/// reads at boot. No initramfs regeneration.
///
/// # Errors
/// Invalid module or file name; the file is not UTF-8 text; write failures.
pub fn load_at_boot(h: &mut Host, name: &str, file: &FileOptions) -> Result<bool> {
    check_name(name)?;
    let path = conf_path(MODULES_LOAD_D, file.file.as_deref().unwrap_or(name))?;
    edit_conf(h, &path, false, |lines| {
        if !lines.iter().any(|l| is_module_line(l, name)) {
            lines.push(name.to_string());
        }
    })
}

host_fn! {
    /// Keep the line `<name>` in `/etc/modules-load.d/<name>.conf` (read by systemd-modules-load at
    /// boot); no initramfs regeneration.
    #[host(ns = "kmod", effects = [Write, Remove])]
    fn load_at_boot(h: &mut Host, name: S) -> bool {
        Ok(super::load_at_boot(h, &name, &FileOptions::default())?)
    }

    /// As `load_at_boot(name)` in `/etc/modules-load.d/<file>.conf` (one file may list several
    /// modules).
    #[overload(options = KMOD_FILE_KEYS)]
    fn load_at_boot_with_opts(h: &mut Host, name: S, opts: Map) -> bool {
        let opts = file_opts(&opts)?;
        Ok(super::load_at_boot(h, &name, &opts)?)
    }
}

/// `kmod::unload_at_boot(name, #{file})`: take the line `<name>` out of the
/// [`load_at_boot`] file (removed when left empty).
///
/// # Errors
/// As [`load_at_boot`].
pub fn unload_at_boot(h: &mut Host, name: &str, file: &FileOptions) -> Result<bool> {
    check_name(name)?;
    let path = conf_path(MODULES_LOAD_D, file.file.as_deref().unwrap_or(name))?;
    edit_conf(h, &path, false, |lines| {
        lines.retain(|l| !is_module_line(l, name));
    })
}

host_fn! {
    /// Take the line `<name>` out of `/etc/modules-load.d/<name>.conf` (removed when left empty).
    #[host(ns = "kmod", effects = [Write, Remove])]
    fn unload_at_boot(h: &mut Host, name: S) -> bool {
        Ok(super::unload_at_boot(h, &name, &FileOptions::default())?)
    }

    /// As `unload_at_boot(name)` in `/etc/modules-load.d/<file>.conf`.
    #[overload(options = KMOD_FILE_KEYS)]
    fn unload_at_boot_with_opts(h: &mut Host, name: S, opts: Map) -> bool {
        let opts = file_opts(&opts)?;
        Ok(super::unload_at_boot(h, &name, &opts)?)
    }
}

/// The module names of `/proc/modules` (first word of each line, `-` as `_`), `None` when
/// the root has no such file.
///
/// # Errors
/// Read failures other than "not found".
fn module_table(h: &Host) -> Result<Option<std::collections::HashSet<String>>> {
    Ok(h.view_read(Path::new(PROC_MODULES))?.map(|b| {
        String::from_utf8_lossy(&b)
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .map(canonical_name)
            .collect()
    }))
}

/// `kmod::loaded(name)`: the module is listed in `/proc/modules` under the root (`-`/`_`
/// equivalent); in plan and check mode also when an earlier [`load`] of the session planned
/// it. `false` when the root has no `/proc/modules`. Built-in modules are not listed.
///
/// # Errors
/// Invalid name; read failures.
pub fn loaded(h: &Host, name: &str) -> Result<bool> {
    check_name(name)?;
    if h.planned_module_load(&canonical_name(name)) {
        return Ok(true);
    }
    Ok(module_table(h)?.is_some_and(|t| t.contains(&canonical_name(name))))
}

host_fn! {
    /// True when `/proc/modules` under the root lists the module (`-` and `_` equivalent; built-in
    /// modules are not listed; `false` without `/proc/modules`); in a plan also after a planned
    /// `kmod::load`.
    #[host(ns = "kmod", effects = ReadsHost)]
    fn loaded(h: &mut Host, name: S) -> bool {
        Ok(super::loaded(h, &name)?)
    }
}

/// `kmod::load(name)`: `modprobe <name>` (chrooted) unless [`loaded`]. A change when
/// `/proc/modules` was read and does not list it (drift in a check); an action every time
/// when the root has no `/proc/modules` (module docs). Returns whether it ran (apply) or
/// would run (plan, check).
///
/// # Errors
/// Invalid name; `modprobe` missing or failing (apply).
pub fn load(h: &mut Host, name: &str) -> Result<bool> {
    if loaded(h, name)? {
        h.note_unchanged();
        return Ok(false);
    }
    let known = module_table(h)?.is_some();
    h.submit(Effect::ModuleLoad {
        name: name.to_string(),
        known,
    })?;
    Ok(true)
}

host_fn! {
    /// `modprobe <name>` unless loaded: a change (drift in a check) when `/proc/modules` does not
    /// list it; without `/proc/modules` an action, run every time.
    #[host(ns = "kmod", effects = [ModuleLoad])]
    fn load(h: &mut Host, name: S) -> bool {
        Ok(super::load(h, &name)?)
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::convert::{self, check_keys, opt_bool, opt_string};
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use rhai::{Dynamic, ImmutableString as S, Map};
}
use prelude::*;

/// The option keys of `kmod::blacklist`.
const BLACKLIST_KEYS: &[&str] = &["file", "disable"];

/// The option keys of the other `kmod::` file functions.
const KMOD_FILE_KEYS: &[&str] = &["file"];

fn file_opts(m: &Map) -> Result<FileOptions, String> {
    check_keys(m, KMOD_FILE_KEYS)?;
    Ok(FileOptions {
        file: opt_string(m, "file")?,
    })
}

fn blacklist_opts(m: &Map) -> Result<BlacklistOptions, String> {
    check_keys(m, BLACKLIST_KEYS)?;
    Ok(BlacklistOptions {
        file: opt_string(m, "file")?,
        disable: opt_bool(m, "disable", false)?,
    })
}

/// Module options: a string of `key=value` words, or a map rendered `k=v` in key order
/// (each key a word without `=` or blanks, each value a non-empty word without blanks).
fn module_options(d: &Dynamic) -> Result<String, String> {
    if let Some(m) = d.read_lock::<Map>() {
        return m
            .iter()
            .map(|(k, v)| {
                if k.is_empty() || k.contains(|c: char| c == '=' || c.is_whitespace()) {
                    return Err(format!(
                        "option key {:?} must be a non-empty word without `=` or blanks",
                        k.as_str()
                    ));
                }
                let v = convert::scalar(v, &format!("option {k}"))?;
                if v.is_empty() || v.contains(char::is_whitespace) {
                    return Err(format!(
                        "option {k}: value {v:?} must be one word without blanks"
                    ));
                }
                Ok(format!("{k}={v}"))
            })
            .collect::<Result<Vec<_>, String>>()
            .map(|w| w.join(" "));
    }
    convert::string(d, "opts").map_err(|e| format!("{e} (or a map)"))
}

/// The reference sections of this file's namespaces: `(namespace, heading, introduction)`.
pub(crate) const NAMESPACES: &[(&str, &str, &str)] = &[
    (
        "kmod",
        "Kernel modules — `kmod::`",
        "Each function keeps only its own lines of its file (`/etc/modprobe.d/*.conf`, `/etc/modules-load.d/*.conf`), so comments and other modules' lines stay and a blacklist and options can share a file (`#{file}`); module names compare with `-` and `_` equivalent. A changed blacklist or options file schedules ONE initramfs regeneration at the end of the step: `update-initramfs -u`, or `dracut -f` on the rhel and fedora families; it is recorded ahead in `/var/lib/skyhook/.deferred/initramfs.json` and run by the next step when it failed or the agent died (a plan lists it as an action).",
    ),
    (
        "kernel",
        "Kernels and the boot default — `kernel::`",
        "Releases as `uname -r` prints them. What grub boots next is read from `GRUB_DEFAULT` (`/etc/default/grub`, then `/etc/default/grub.d/*.cfg`; absent: `0`) and, for `saved`, the `saved_entry` of `/boot/grub/grubenv` (`/boot/grub2/grubenv` on grub2 hosts). An entry names its release by its last `>` part: `0` and `gnulinux-simple-<uuid>` the newest installed kernel, `...>Ubuntu, with Linux 6.8.0-1015-aws`, `gnulinux-6.8.0-1015-aws-advanced-<uuid>`, a title with `(<release>)`, a BootLoaderSpec id `<machine-id>-<release>`; any other entry cannot be told (`()`).",
    ),
    (
        "gpu",
        "NVIDIA GPUs — `gpu::`",
        "Queries, in every mode. With `nvidia-smi` in the root: `nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,driver_version,memory.total,mig.mode.current --format=csv,noheader,nounits`; without it, or when it fails, the driver's `/proc/driver/nvidia/gpus/<bus>/information` (`Model`, `GPU UUID`, `Bus Location`; indexed in bus order) and `/proc/driver/nvidia/version`; no driver: none. A value nvidia-smi cannot give (`[N/A]`, `[Not Supported]`) is `()`; PCI bus ids in the sysfs form `0000:18:00.0`.",
    ),
    (
        "dkms",
        "DKMS modules — `dkms::`",
        "Read from the root's `/var/lib/dkms` tree (no `dkms` command): `<module>/<version>/` is added, `<module>/<version>/<kernel>/<arch>/` built, and the `<module>/kernel-<kernel>-<arch>` link to it installed.",
    ),
];

host_fns!(
    blacklist,
    unblacklist,
    options,
    remove_options,
    load_at_boot,
    unload_at_boot,
    loaded,
    load
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::ExecMode;
    use crate::host::testutil::TestHost;

    /// The exact effects `kmod::load` submits, recorded in a plan: one load for a module the
    /// module table does not list (by its kernel name), none for a listed one or a planned one.
    #[test]
    fn load_submits_one_effect_and_reads_the_planned_module() {
        let t = TestHost::new();
        t.file(
            "/proc/modules",
            "nvidia_uvm 1904640 0 - Live 0x0000000000000000\n",
        );
        let mut h = t.host(ExecMode::Plan);
        h.record_effects();
        assert!(!load(&mut h, "nvidia-uvm").unwrap());
        assert!(load(&mut h, "nvidia-drm").unwrap());
        assert!(loaded(&h, "nvidia_drm").unwrap());
        assert!(!load(&mut h, "nvidia_drm").unwrap());
        assert_eq!(
            format!("{:?}", h.recorded_effects()),
            "[ModuleLoad { name: \"nvidia-drm\", known: true }]"
        );
    }
}
