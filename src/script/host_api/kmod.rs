//! `kmod::` (kernel modules: modprobe.d and modules-load.d lines, loading) over
//! [`crate::host::kernel::kmod`]: each function's reference row and binding, and their tests
//! through Rhai.

use rhai::{Dynamic, ImmutableString as S, Map};

use super::convert::{self, check_keys, opt_bool, opt_string};
use super::docs::EffectKind::*;
use super::docs::Effects::*;
use super::docs::FnDoc;
use super::docs::{NAME, OPTS};
use crate::host::kernel::kmod::{self, BlacklistOptions, FileOptions};

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
pub(super) const NAMESPACES: &[(&str, &str, &str)] = &[(
    "kmod",
    "Kernel modules — `kmod::`",
    "Each function keeps only its own lines of its file (`/etc/modprobe.d/*.conf`, `/etc/modules-load.d/*.conf`), so comments and other modules' lines stay and a blacklist and options can share a file (`#{file}`); module names compare with `-` and `_` equivalent. A changed blacklist or options file schedules ONE initramfs regeneration at the end of the step: `update-initramfs -u`, or `dracut -f` on the rhel and fedora families; it is recorded ahead in `/var/lib/skyhook/.deferred/initramfs.json` and run by the next step when it failed or the agent died (a plan lists it as an action).",
)];

/// The functions of this file's namespaces, in reference order: each one's reference row
/// and its registration.
pub(super) const FUNCTIONS: &[FnDoc] = &[
    host_fn!(
        "kmod",
        "blacklist",
        &[NAME],
        "bool",
        Submits(&[Write, Remove]),
        "Keep `blacklist <name>` in `/etc/modprobe.d/blacklist-<name>.conf`; a change regenerates the initramfs once at the end of the step.",
        |h, n: S| Ok(kmod::blacklist(h, &n, &BlacklistOptions::default())?)
    ),
    host_fn!(
        "kmod",
        "blacklist",
        &[NAME, OPTS],
        "bool",
        Submits(&[Write, Remove]),
        "As `blacklist(name)` in `/etc/modprobe.d/<file>.conf`; `disable: true` also keeps `install <name> /bin/false` (no explicit `modprobe` or dependency loads it either), `false` removes that line.",
        options = BLACKLIST_KEYS,
        |h, n: S, o: Map| {
            let o = blacklist_opts(&o)?;
            Ok(kmod::blacklist(h, &n, &o)?)
        }
    ),
    host_fn!(
        "kmod",
        "unblacklist",
        &[NAME],
        "bool",
        Submits(&[Write, Remove]),
        "Take the `blacklist <name>` and `install <name> /bin/false` lines out of the blacklist file (removed when left empty); a change regenerates the initramfs.",
        |h, n: S| Ok(kmod::unblacklist(h, &n, &FileOptions::default())?)
    ),
    host_fn!(
        "kmod",
        "unblacklist",
        &[NAME, OPTS],
        "bool",
        Submits(&[Write, Remove]),
        "As `unblacklist(name)` in `/etc/modprobe.d/<file>.conf`.",
        options = KMOD_FILE_KEYS,
        |h, n: S, o: Map| {
            let o = file_opts(&o)?;
            Ok(kmod::unblacklist(h, &n, &o)?)
        }
    ),
    host_fn!(
        "kmod",
        "options",
        &[NAME, ("opts", "?")],
        "bool",
        Submits(&[Write, Remove]),
        "Keep exactly one `options <name> <opts>` line in `/etc/modprobe.d/<name>.conf` (`opts` a string `\"modeset=0\"` or a map `#{modeset: 0}`, rendered `k=v` by key); another `options <name>` line is replaced, other lines stay; a change regenerates the initramfs. A hand-edited value is drift.",
        |h, n: S, v: Dynamic| {
            let v = module_options(&v)?;
            Ok(kmod::options(h, &n, &v, &FileOptions::default())?)
        }
    ),
    host_fn!(
        "kmod",
        "options",
        &[NAME, ("opts", "?"), ("file_opts", "Map")],
        "bool",
        Submits(&[Write, Remove]),
        "As `options(name, opts)` in `/etc/modprobe.d/<file>.conf` (`#{file}`), which may also hold the module's blacklist lines.",
        options = KMOD_FILE_KEYS,
        |h, n: S, v: Dynamic, o: Map| {
            let o = file_opts(&o)?;
            let v = module_options(&v)?;
            Ok(kmod::options(h, &n, &v, &o)?)
        }
    ),
    host_fn!(
        "kmod",
        "remove_options",
        &[NAME],
        "bool",
        Submits(&[Write, Remove]),
        "Take the `options <name>` lines out of `/etc/modprobe.d/<name>.conf` (removed when left empty); a change regenerates the initramfs.",
        |h, n: S| Ok(kmod::remove_options(h, &n, &FileOptions::default())?)
    ),
    host_fn!(
        "kmod",
        "remove_options",
        &[NAME, OPTS],
        "bool",
        Submits(&[Write, Remove]),
        "As `remove_options(name)` in `/etc/modprobe.d/<file>.conf`.",
        options = KMOD_FILE_KEYS,
        |h, n: S, o: Map| {
            let o = file_opts(&o)?;
            Ok(kmod::remove_options(h, &n, &o)?)
        }
    ),
    host_fn!(
        "kmod",
        "load_at_boot",
        &[NAME],
        "bool",
        Submits(&[Write, Remove]),
        "Keep the line `<name>` in `/etc/modules-load.d/<name>.conf` (read by systemd-modules-load at boot); no initramfs regeneration.",
        |h, n: S| Ok(kmod::load_at_boot(h, &n, &FileOptions::default())?)
    ),
    host_fn!(
        "kmod",
        "load_at_boot",
        &[NAME, OPTS],
        "bool",
        Submits(&[Write, Remove]),
        "As `load_at_boot(name)` in `/etc/modules-load.d/<file>.conf` (one file may list several modules).",
        options = KMOD_FILE_KEYS,
        |h, n: S, o: Map| {
            let o = file_opts(&o)?;
            Ok(kmod::load_at_boot(h, &n, &o)?)
        }
    ),
    host_fn!(
        "kmod",
        "unload_at_boot",
        &[NAME],
        "bool",
        Submits(&[Write, Remove]),
        "Take the line `<name>` out of `/etc/modules-load.d/<name>.conf` (removed when left empty).",
        |h, n: S| Ok(kmod::unload_at_boot(h, &n, &FileOptions::default())?)
    ),
    host_fn!(
        "kmod",
        "unload_at_boot",
        &[NAME, OPTS],
        "bool",
        Submits(&[Write, Remove]),
        "As `unload_at_boot(name)` in `/etc/modules-load.d/<file>.conf`.",
        options = KMOD_FILE_KEYS,
        |h, n: S, o: Map| {
            let o = file_opts(&o)?;
            Ok(kmod::unload_at_boot(h, &n, &o)?)
        }
    ),
    host_fn!(
        "kmod",
        "loaded",
        &[NAME],
        "bool",
        ReadsHost,
        "True when `/proc/modules` under the root lists the module (`-` and `_` equivalent; built-in modules are not listed; `false` without `/proc/modules`); in a plan also after a planned `kmod::load`.",
        |h, n: S| Ok(kmod::loaded(h, &n)?)
    ),
    host_fn!(
        "kmod",
        "load",
        &[NAME],
        "bool",
        Submits(&[ModuleLoad]),
        "`modprobe <name>` unless loaded: a change (drift in a check) when `/proc/modules` does not list it; without `/proc/modules` an action, run every time.",
        |h, n: S| Ok(kmod::load(h, &n)?)
    ),
];

#[cfg(test)]
pub(super) mod tests {
    use super::super::tests::*;
    use crate::host::effects::report::ExecMode;
    use crate::host::testutil::TestHost;

    /// One call of each function of this file, for
    /// [`super::super::tests::declared_effects_are_the_submitted_ones`]: in the root that test
    /// prepares, each call of a function that submits effects changes something.
    pub(in super::super) const SAMPLES: &[&str] = &[
        r#"kmod::blacklist("nouveau")"#,
        r#"kmod::blacklist("nouveau", #{disable: true})"#,
        r#"kmod::unblacklist("floppy")"#,
        r#"kmod::unblacklist("floppy", #{file: "floppy"})"#,
        r#"kmod::options("nvidia", "a=1")"#,
        r#"kmod::options("nvidia", #{a: 1}, #{file: "nv"})"#,
        r#"kmod::remove_options("old")"#,
        r#"kmod::remove_options("old", #{file: "old"})"#,
        r#"kmod::load_at_boot("nvidia_uvm")"#,
        r#"kmod::load_at_boot("nvidia_uvm", #{file: "nvidia"})"#,
        r#"kmod::unload_at_boot("old")"#,
        r#"kmod::unload_at_boot("old", #{file: "old"})"#,
        r#"kmod::loaded("nvidia")"#,
        r#"kmod::load("nvidia")"#,
    ];

    #[test]
    fn kmod_functions_all_modes_from_rhai() {
        let t = TestHost::new();
        t.install_sh();
        t.file("/etc/os-release", "ID=ubuntu\n");
        t.file("/proc/modules", "");
        t.stub("update-initramfs", ":");
        t.stub("modprobe", r#"echo "$1 1 0 - Live 0x0" >> /proc/modules"#);
        let plan = all_modes(
            &t,
            &[
                r#"kmod::blacklist("nouveau", #{disable: true})"#,
                r#"kmod::options("nouveau", #{modeset: 0})"#,
                r#"kmod::options("nvidia", "NVreg_PreserveVideoMemoryAllocations=1", #{file: "nvidia-pm"})"#,
                r#"kmod::load_at_boot("nvidia_uvm", #{file: "nvidia"})"#,
                r#"kmod::load("nvidia_uvm")"#,
            ],
        );
        let actions: Vec<&str> = plan.actions.iter().map(|a| a.summary.as_str()).collect();
        assert_eq!(actions, ["update-initramfs -u"]);
        assert_eq!(
            t.read("/etc/modprobe.d/nouveau.conf"),
            "options nouveau modeset=0\n"
        );
        assert_eq!(
            t.read("/etc/modprobe.d/nvidia-pm.conf"),
            "options nvidia NVreg_PreserveVideoMemoryAllocations=1\n"
        );
        assert_eq!(t.read("/etc/modules-load.d/nvidia.conf"), "nvidia_uvm\n");
        assert_eq!(t.calls(), ["modprobe nvidia_uvm", "update-initramfs -u"]);
    }

    /// A map of module options must render `key=value` words modprobe reads back as written: a
    /// key that is empty or has `=` or blanks, or a value with blanks, is an error naming the
    /// option (they became `options nouveau =1` or `options nouveau a=x y`, which modprobe
    /// parses as other parameters). Nothing is written.
    #[test]
    fn kmod_options_map_rejects_keys_and_values_that_are_not_one_word() {
        let t = TestHost::new();
        for (src, want) in [
            (
                r#"kmod::options("nouveau", #{"": 1})"#,
                "main.rhai:1:7: kmod::options: option key \"\" must be a non-empty word without `=` or blanks",
            ),
            (
                r#"kmod::options("nouveau", #{"a b": 1})"#,
                "main.rhai:1:7: kmod::options: option key \"a b\" must be a non-empty word without `=` or blanks",
            ),
            (
                r#"kmod::options("nouveau", #{a: "x y"})"#,
                "main.rhai:1:7: kmod::options: option a: value \"x y\" must be one word without blanks",
            ),
        ] {
            let r = run(&t, ExecMode::Apply, src);
            assert_eq!(r.error(), want, "{src}");
        }
        assert!(!t.p("/etc/modprobe.d").exists());
    }
}
