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
    use crate::host::root::error::{HostError, Result};

    pub use crate::host::effects::effect::sysctl_proc_path as proc_path;

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
    /// [`HostError::UnknownSysctl`] when the key has no `/proc/sys` entry; write failures.
    pub fn set(h: &mut Host, key: &str, value: &str) -> Result<bool> {
        set_with(h, key, value, false)
    }

    /// [`set`]; with `record`, the value before the package's first change of `key` is
    /// recorded for `sysctl::restore` ([`crate::host::kernel::sysctl_record`]).
    ///
    /// # Errors
    /// As [`set`]; reading or writing the record.
    pub fn set_with(h: &mut Host, key: &str, value: &str, record: bool) -> Result<bool> {
        let path = proc_path(key)?;
        let Some(cur) = get(h, key)? else {
            return Err(HostError::UnknownSysctl {
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
        let opts = crate::host::effects::exec::RunOptions {
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
        let mut p = h.pending_grub.clone();
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
