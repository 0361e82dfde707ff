//! Tuning: `sysctl::`, `grub::`, `ulimit::`.

use crate::host::root::error::{HostError, Result};

fn check_file_name(what: &'static str, file: &str) -> Result<()> {
    if file.is_empty() || file == "." || file == ".." || file.contains(['/', '\0']) {
        return Err(HostError::Invalid {
            what,
            message: format!("{file:?} must be a single file name"),
        });
    }
    Ok(())
}

/// Runtime kernel parameters through `/proc/sys` under the root.
pub mod sysctl {
    use std::path::Path;

    use super::check_file_name;
    use crate::host::Host;
    use crate::host::effects::effect::Effect;
    use crate::host::root::error::Result;

    pub use crate::host::effects::effect::sysctl_proc_path as proc_path;

    /// The `sysctl::` functions' own failures (with the record's, in
    /// [`crate::host::kernel::sysctl_record`]).
    pub use crate::host::kernel::sysctl_record::SysctlError;

    fn normalize(v: &str) -> String {
        v.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    /// `sysctl::get(key)`: the live value (trimmed), `None` when the key has no entry.
    ///
    /// # Errors
    /// Invalid key; read failures.
    pub fn get(h: &Host, key: &str) -> Result<Option<String>> {
        let p = proc_path(key)?;
        Ok(h.view_read(&p)?
            .map(|b| String::from_utf8_lossy(&b).trim().to_string()))
    }

    /// `sysctl::set(key, value)`: write the runtime value when it differs from the live one
    /// (compared whitespace-normalised, so `32768 60999` equals `32768\t60999`). Never writes
    /// under `/etc`; see [`persist`].
    ///
    /// # Errors
    /// [`SysctlError::Unknown`] when the key has no `/proc/sys` entry; write failures.
    pub fn set(h: &mut Host, key: &str, value: &str) -> Result<bool, SysctlError> {
        set_with(h, key, value, false)
    }

    /// [`set`]; with `record`, the value before the package's first change of `key` is
    /// recorded for `sysctl::restore` ([`crate::host::kernel::sysctl_record`]).
    ///
    /// # Errors
    /// As [`set`]; reading or writing the record.
    pub fn set_with(
        h: &mut Host,
        key: &str,
        value: &str,
        record: bool,
    ) -> Result<bool, SysctlError> {
        let path = proc_path(key)?;
        let Some(cur) = get(h, key)? else {
            return Err(SysctlError::Unknown {
                key: key.into(),
                path,
            });
        };
        if normalize(&cur) == normalize(value) {
            h.note_unchanged();
            return Ok(false);
        }
        if record {
            crate::host::kernel::sysctl_record::note_first_change(h, key, &cur)?;
        }
        h.submit(Effect::Sysctl {
            key: key.into(),
            value: value.trim().into(),
        })?;
        Ok(true)
    }

    /// The content of a persisted sysctl file: one `key = value` line per entry, in the
    /// order given (the Rhai binding passes a map, whose keys iterate sorted).
    pub fn render(entries: &[(String, String)]) -> String {
        entries
            .iter()
            .map(|(k, v)| format!("{k} = {v}\n"))
            .collect()
    }

    /// `sysctl::reload()`: `sysctl --system` (chrooted, checked), an action every time: the
    /// values of every sysctl.d file and `/etc/sysctl.conf` set live again, as after a boot
    /// (an uninstall's step after removing its file). Planned, not run, in plan and check mode.
    ///
    /// # Errors
    /// `sysctl` missing, failing to start or exiting non-zero (apply).
    pub fn reload(h: &mut Host) -> Result<()> {
        let opts = crate::host::effects::exec::CommandOptions {
            check: true,
            ..Default::default()
        };
        h.submit(Effect::Command {
            argv: vec!["sysctl".into(), "--system".into()],
            opts,
        })?;
        Ok(())
    }

    /// `sysctl::persist(file, map)`: write `/etc/sysctl.d/<file>` ([`render`]).
    ///
    /// # Errors
    /// `file` not a single name; invalid key; write failures.
    pub fn persist(h: &mut Host, file: &str, entries: &[(String, String)]) -> Result<bool> {
        check_file_name("sysctl file name", file)?;
        for (k, _) in entries {
            proc_path(k)?;
        }
        let path = Path::new("/etc/sysctl.d").join(file);
        crate::host::files::fs::put(h, &path, render(entries).into_bytes(), None, None, None)
    }
}

/// Kernel command line drop-ins.
///
/// `set_cmdline(name, args)` writes `/etc/default/grub.d/<name>.cfg` containing
/// `GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT} a b"`, so drop-ins of several
/// packages compose. When it changed: on the rhel and fedora families (BootLoaderSpec
/// entries, which ignore grub.d) the new arguments are added and the dropped ones removed
/// with `grubby --update-kernel=ALL --args=... / --remove-args=...`, the drop-in kept as the
/// record; elsewhere `update-grub` is scheduled. Either runs once, at the end of the step.
/// In apply mode the work is recorded (write-ahead) before the drop-in is written or removed,
/// and the record is removed only once the work succeeded ([`crate::host::root::deferred`]).
pub mod grub {
    use std::path::PathBuf;

    use super::check_file_name;
    use crate::host::Host;
    use crate::host::root::deferred::GrubPending;
    use crate::host::root::error::{HostError, Result};

    const PREFIX: &str = "GRUB_CMDLINE_LINUX_DEFAULT=\"${GRUB_CMDLINE_LINUX_DEFAULT}";

    /// `/etc/default/grub.d/<name>.cfg`.
    ///
    /// # Errors
    /// `name` not a single file name.
    pub fn drop_in_path(name: &str) -> Result<PathBuf> {
        check_file_name("grub drop-in name", name)?;
        Ok(PathBuf::from(format!("/etc/default/grub.d/{name}.cfg")))
    }

    /// The drop-in's content for `args`.
    pub fn render(args: &[String]) -> String {
        let mut s = String::from(PREFIX);
        for a in args {
            s.push(' ');
            s.push_str(a);
        }
        s.push_str("\"\n");
        s
    }

    /// The arguments recorded in a drop-in written by [`render`] (empty for anything else).
    pub fn parse(content: &str) -> Vec<String> {
        content
            .lines()
            .find_map(|l| l.trim().strip_prefix(PREFIX))
            .map(|rest| {
                rest.trim_end()
                    .trim_end_matches('"')
                    .split_whitespace()
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    }

    fn check_args(args: &[String]) -> Result<()> {
        for a in args {
            if a.is_empty()
                || a.contains(['"', '\\', '$', '`', '\n'])
                || a.contains(char::is_whitespace)
            {
                return Err(HostError::Invalid {
                    what: "kernel argument",
                    message: format!("{a:?}"),
                });
            }
        }
        Ok(())
    }

    fn uses_grubby(h: &Host) -> Result<bool> {
        Ok(matches!(
            crate::host::system::os::family(h)?.as_str(),
            "rhel" | "fedora"
        ))
    }

    /// The session's pending grub work with `add` and `remove` merged in.
    fn merged(h: &Host, add: &[String], remove: &[String]) -> Result<GrubPending> {
        let mut p = h.pending_grub();
        if uses_grubby(h)? {
            for a in remove {
                p.add.retain(|x| x != a);
                if !p.remove.contains(a) {
                    p.remove.push(a.clone());
                }
            }
            for a in add {
                p.remove.retain(|x| x != a);
                if !p.add.contains(a) {
                    p.add.push(a.clone());
                }
            }
        } else {
            p.regenerate = true;
        }
        Ok(p)
    }

    /// The arguments the drop-in at `path` holds now (as the session sees it).
    fn current_args(h: &Host, path: &std::path::Path) -> Result<Vec<String>> {
        Ok(h.view_read(path)?
            .map(|b| parse(&String::from_utf8_lossy(&b)))
            .unwrap_or_default())
    }

    /// `grub::set_cmdline(name, args)`: see the module docs.
    ///
    /// # Errors
    /// Invalid name or argument (empty, whitespace, quotes, `\`, `$`, backquote); writing the
    /// grub record (apply mode; the drop-in is then not written); write failures.
    pub fn set_cmdline(h: &mut Host, name: &str, args: &[String]) -> Result<bool> {
        let path = drop_in_path(name)?;
        check_args(args)?;
        let mut undo = None;
        // `before` runs under the drop-in's lock right before the write: the old arguments
        // are read there, and the work is recorded ahead of the write.
        let r = crate::host::files::fs::put_with(
            h,
            &path,
            render(args).into_bytes(),
            (None, None, None),
            |h| {
                let removed: Vec<String> = current_args(h, &path)?
                    .into_iter()
                    .filter(|a| !args.contains(a))
                    .collect();
                let pending = merged(h, args, &removed)?;
                undo = Some(h.schedule_grub_ahead(pending)?);
                Ok(())
            },
        );
        if r.is_err()
            && let Some(u) = undo
        {
            h.restore_grub(u);
        }
        r
    }

    /// `grub::remove(name)`: remove the drop-in and take exactly its arguments back
    /// (`grubby --remove-args` on rhel/fedora, `update-grub` elsewhere). In apply mode the
    /// work is recorded before the removal, as for [`set_cmdline`].
    ///
    /// # Errors
    /// Invalid name; writing the record (apply mode); removal failures.
    pub fn remove(h: &mut Host, name: &str) -> Result<bool> {
        let path = drop_in_path(name)?;
        let mut undo = None;
        let r = crate::host::files::fs::remove_with(h, &path.to_string_lossy(), |h| {
            let old = current_args(h, &path)?;
            let pending = merged(h, &[], &old)?;
            undo = Some(h.schedule_grub_ahead(pending)?);
            Ok(())
        });
        if r.is_err()
            && let Some(u) = undo
        {
            h.restore_grub(u);
        }
        r
    }
}

/// Persisted resource limits.
pub mod ulimit {
    use std::path::Path;

    use super::check_file_name;
    use crate::host::Host;
    use crate::host::root::error::{HostError, Result};

    /// One limits.conf(5) entry: `<domain> <type> <item> <value>`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct LimitEntry {
        /// User, `@group`, `*`, ...
        pub domain: String,
        /// `soft`, `hard` or `-`.
        pub kind: String,
        /// `nofile`, `memlock`, ...
        pub item: String,
        /// The limit (`unlimited`, a number).
        pub value: String,
    }

    /// The file content: one `domain type item value` line per entry, in the order given.
    pub fn render(entries: &[LimitEntry]) -> String {
        entries
            .iter()
            .map(|e| format!("{} {} {} {}\n", e.domain, e.kind, e.item, e.value))
            .collect()
    }

    /// `ulimit::persist(file, entries)`: write `/etc/security/limits.d/<file>`.
    ///
    /// # Errors
    /// `file` not a single name; an empty field or one with whitespace; write failures.
    pub fn persist(h: &mut Host, file: &str, entries: &[LimitEntry]) -> Result<bool> {
        check_file_name("limits file name", file)?;
        for e in entries {
            for f in [&e.domain, &e.kind, &e.item, &e.value] {
                if f.is_empty() || f.contains(char::is_whitespace) {
                    return Err(HostError::Invalid {
                        what: "limits entry",
                        message: format!("field {f:?} of {e:?}"),
                    });
                }
            }
        }
        let path = Path::new("/etc/security/limits.d").join(file);
        crate::host::files::fs::put(h, &path, render(entries).into_bytes(), None, None, None)
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::convert;
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use rhai::{Array, Dynamic, ImmutableString as S, Map};
}
use prelude::*;

/// `ulimit::persist` entries: each a map `#{domain, type, item, value}` (`value` may be an
/// int) or a string `"domain type item value"` (exactly four whitespace-separated fields).
fn limit_entries(a: &Array) -> Result<Vec<ulimit::LimitEntry>, String> {
    let mut out = Vec::new();
    for (i, d) in a.iter().enumerate() {
        if let Some(m) = d.read_lock::<Map>() {
            convert::check_keys(&m, &["domain", "type", "item", "value"])?;
            let field = |k: &str| match m.get(k) {
                Some(v) => convert::scalar(v, &format!("entries[{i}].{k}")),
                None => Err(format!("entries[{i}] has no {k}")),
            };
            out.push(ulimit::LimitEntry {
                domain: field("domain")?,
                kind: field("type")?,
                item: field("item")?,
                value: field("value")?,
            });
        } else if d.is_string() {
            let text = d.to_string();
            let f: Vec<&str> = text.split_whitespace().collect();
            let [domain, kind, item, value] = f[..] else {
                return Err(format!(
                    "entries[{i}] {text:?} must have four fields: domain type item value"
                ));
            };
            out.push(ulimit::LimitEntry {
                domain: domain.into(),
                kind: kind.into(),
                item: item.into(),
                value: value.into(),
            });
        } else {
            return Err(format!(
                "entries[{i}] must be a map #{{domain, type, item, value}} or a string, got {}",
                d.type_name()
            ));
        }
    }
    Ok(out)
}

/// Kernel arguments: an array of strings, or one string split at whitespace.
fn kernel_args(d: &Dynamic) -> Result<Vec<String>, String> {
    if d.is_string() {
        return Ok(d.to_string().split_whitespace().map(String::from).collect());
    }
    convert::string_or_array(d, "args")
}

/// The reference sections of this file's namespaces: `(namespace, heading, introduction)`.
pub(crate) const NAMESPACES: &[(&str, &str, &str)] = &[
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
];

host_fn! {
    /// The live value of `/proc/sys/<key, dots as slashes>`, or `()` when there is no such entry.
    #[host(ns = "sysctl", effects = ReadsHost)]
    fn get(h: &mut Host, key: S) -> rhai::Dynamic {
        Ok(convert::opt(sysctl::get(h, &key)?))
    }
}

host_fn! {
    /// Write the live value when it differs (compared whitespace-normalised); an unknown key is an
    /// error. Never writes under /etc.
    #[host(ns = "sysctl", effects = [Sysctl])]
    fn set(h: &mut Host, key: S, value: Dynamic) -> bool {
        let value = convert::scalar(&value, "value")?;
        Ok(sysctl::set(h, &key, &value)?)
    }

    /// As `set`; with `#{record: true}` the live value before the package's first change of `key`
    /// is kept in `<SKYHOOK_ROOT_DIR>/sysctl-restore/<package>.conf` in the root (`/etc/skyhook` by
    /// default; the package of `SKYHOOK_RESOURCE_ID`, `unnamed` without one), for
    /// `sysctl::restore`.
    #[overload(effects = [Sysctl, Write], options = &["record"])]
    fn set_with_opts(h: &mut Host, key: S, value: Dynamic, opts: Map) -> bool {
        convert::check_keys(&opts, &["record"])?;
        let record = convert::opt_bool(&opts, "record", false)?;
        let value = convert::scalar(&value, "value")?;
        Ok(sysctl::set_with(h, &key, &value, record)?)
    }
}

host_fn! {
    /// `sysctl --system`: every sysctl.d file and `/etc/sysctl.conf` applied live again (an action,
    /// every time; planned in plan and check mode); a non-zero exit is an error.
    #[host(ns = "sysctl", effects = [Command])]
    fn reload(h: &mut Host) -> () {
        Ok(sysctl::reload(h)?)
    }
}

host_fn! {
    /// Write `/etc/sysctl.d/<file>`: one `key = value` line per map entry, keys sorted.
    #[host(ns = "sysctl", name = "persist", effects = [Write])]
    fn sysctl_persist(h: &mut Host, file: S, values: Map) -> bool {
        let entries = values
            .iter()
            .map(|(k, v)| {
                Ok((k.to_string(), convert::scalar(v, &format!("value of {k}"))?))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(sysctl::persist(h, &file, &entries)?)
    }
}

host_fn! {
    /// `/etc/default/grub.d/<name>.cfg` appending `args` (array, or a string split at spaces) to
    /// `GRUB_CMDLINE_LINUX_DEFAULT`; a change runs `update-grub` (or `grubby` on rhel/fedora) once
    /// at the end of the step.
    #[host(ns = "grub", effects = [Write])]
    fn set_cmdline(h: &mut Host, name: S, args: Dynamic) -> bool {
        let args = kernel_args(&args)?;
        Ok(grub::set_cmdline(h, &name, &args)?)
    }
}

host_fn! {
    /// Remove that drop-in and take its arguments back.
    #[host(ns = "grub", effects = [Remove])]
    fn remove(h: &mut Host, name: S) -> bool {
        Ok(grub::remove(h, &name)?)
    }
}

host_fn! {
    /// Write `/etc/security/limits.d/<file>`, one `domain type item value` line per entry; an entry
    /// is a map `#{domain, type, item, value}` or a string `"* soft nofile 65536"`.
    #[host(ns = "ulimit", name = "persist", effects = [Write])]
    fn ulimit_persist(h: &mut Host, file: S, entries: Array) -> bool {
        let entries = limit_entries(&entries)?;
        Ok(ulimit::persist(h, &file, &entries)?)
    }
}

host_fns!(
    get,
    set,
    reload,
    sysctl_persist,
    set_cmdline,
    remove,
    ulimit_persist
);
