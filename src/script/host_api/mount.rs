//! `mount::` (filesystems: fstab, the live mount table, systemd mount units) over
//! [`crate::host::mounts::mount`] and [`crate::host::mounts::unit`]: each
//! function's reference row and binding, and their tests through Rhai.

use rhai::{Dynamic, ImmutableString as S, Map};

use super::convert::{self, check_keys, opt_string};
use super::docs::EffectKind::*;
use super::docs::Effects::*;
use super::docs::FnDoc;
use super::docs::{OPTS, P};
use crate::host::mounts::mount::{self, MountEntry, MountSpec, MountState};
use crate::host::mounts::unit::{self, UnitSpec};

/// The option keys of `mount::ensure`.
const MOUNT_KEYS: &[&str] = &["source", "fstype", "options", "state", "dump", "pass"];

/// A non-negative integer option (`()` or absent → `default`).
fn opt_u32(m: &Map, key: &str, default: u32) -> Result<u32, String> {
    match m.get(key) {
        None => Ok(default),
        Some(d) if d.is_unit() => Ok(default),
        Some(d) => {
            let v = d
                .as_int()
                .map_err(|t| format!("option {key} must be an int, got {t}"))?;
            u32::try_from(v).map_err(|_| format!("option {key} must be 0 or more, got {v}"))
        }
    }
}

/// `#{source, fstype, options, state, dump, pass}`: `source` and `fstype` required;
/// `options` a string or an array of strings (joined with `,`), default `defaults`; `state`
/// `mounted` (default) or `present`.
fn mount_spec(m: &Map) -> Result<MountSpec, String> {
    check_keys(m, MOUNT_KEYS)?;
    let required = |k: &str| {
        opt_string(m, k)?.ok_or_else(|| format!("option {k} is required (#{{source, fstype}})"))
    };
    let options = mount_options(m)?;
    let state = mount_state(m)?;
    Ok(MountSpec {
        source: required("source")?,
        fstype: required("fstype")?,
        options,
        dump: opt_u32(m, "dump", 0)?,
        pass: opt_u32(m, "pass", 0)?,
        state,
    })
}

/// The option keys of `mount::unit`.
const UNIT_KEYS: &[&str] = &[
    "what",
    "type",
    "options",
    "description",
    "requires",
    "after",
    "wanted_by",
    "state",
];

/// The option keys of `mount::bind`.
const BIND_KEYS: &[&str] = &[
    "unit",
    "options",
    "description",
    "requires",
    "after",
    "wanted_by",
    "state",
];

/// `options`: a string or an array of strings (joined with `,`), default `defaults`.
fn mount_options(m: &Map) -> Result<String, String> {
    Ok(match m.get("options") {
        None => "defaults".to_string(),
        Some(d) if d.is_unit() => "defaults".to_string(),
        Some(d) if d.is_array() => convert::string_or_array(d, "option options")?.join(","),
        Some(d) => convert::string(d, "option options")?,
    })
}

/// `state`: `mounted` (default) or `present`.
fn mount_state(m: &Map) -> Result<MountState, String> {
    match opt_string(m, "state")?.as_deref() {
        None | Some("mounted") => Ok(MountState::Mounted),
        Some("present") => Ok(MountState::Present),
        Some(other) => Err(format!(
            "option state must be \"mounted\" or \"present\", got {other:?}"
        )),
    }
}

/// A list of unit names option: a string or an array of strings; absent → `default`.
fn unit_list(m: &Map, key: &str, default: &[&str]) -> Result<Vec<String>, String> {
    match m.get(key) {
        None => Ok(default.iter().map(|s| s.to_string()).collect()),
        Some(d) if d.is_unit() => Ok(default.iter().map(|s| s.to_string()).collect()),
        Some(d) => convert::string_or_array(d, &format!("option {key}")),
    }
}

/// The keys `mount::unit` and `mount::bind` share: `options`, `description`, `requires`,
/// `after`, `wanted_by` (default `multi-user.target`), `state`.
fn unit_spec_common(m: &Map, what: String, fstype: String) -> Result<UnitSpec, String> {
    Ok(UnitSpec {
        what,
        fstype,
        options: mount_options(m)?,
        description: opt_string(m, "description")?,
        requires: unit_list(m, "requires", &[])?,
        after: unit_list(m, "after", &[])?,
        wanted_by: unit_list(m, "wanted_by", &["multi-user.target"])?,
        state: mount_state(m)?,
    })
}

/// `#{what, type, ...}` of `mount::unit`: `what` and `type` required.
fn unit_spec(m: &Map) -> Result<UnitSpec, String> {
    check_keys(m, UNIT_KEYS)?;
    let required = |k: &str| {
        opt_string(m, k)?.ok_or_else(|| format!("option {k} is required (#{{what, type}})"))
    };
    unit_spec_common(m, required("what")?, required("type")?)
}

/// `#{unit, ...}` of `mount::bind`: `unit` must be true (the default).
fn bind_spec(m: &Map) -> Result<UnitSpec, String> {
    check_keys(m, BIND_KEYS)?;
    if !convert::opt_bool(m, "unit", true)? {
        return Err(
            "option unit: false is not supported (a bind mount is kept as a systemd mount unit)"
                .into(),
        );
    }
    unit_spec_common(m, String::new(), String::new())
}

fn entry_map(e: MountEntry) -> Map {
    let mut m = Map::new();
    m.insert(
        "path".into(),
        convert::s(e.mount_point.to_string_lossy().into_owned()),
    );
    m.insert("source".into(), convert::s(e.source));
    m.insert("fstype".into(), convert::s(e.fstype));
    m.insert("options".into(), convert::s(e.options));
    m.insert("super_options".into(), convert::s(e.super_options));
    m.insert("root".into(), convert::s(e.root));
    m
}

/// The reference sections of this file's namespaces: `(namespace, heading, introduction)`.
pub(super) const NAMESPACES: &[(&str, &str, &str)] = &[(
    "mount",
    "Filesystems — `mount::`",
    "`/etc/fstab` holds one line per mount point; the live state is the host's mount table, `/proc/1/mountinfo` under the root (the agent's own mount namespace is not the host's; a root without it reads as nothing mounted). `mount`, `mount -o remount` and `umount` run in the host's mount namespace: when `<root>/proc/1/ns/mnt` is another mount namespace than the agent's (a pod with `hostPID`), after entering it (as `nsenter -m -t 1`, not chrooted: its `/` is the host's), else chrooted into the root; either way they read the host's fstab and the mount reaches the host, whatever the propagation of the agent's root mount. In a plan, a later `is_mounted` sees an earlier planned mount or unmount. `mount::unit` and `mount::bind` keep systemd mount units instead (`/etc/systemd/system/<name>.mount`, mounted by systemd in the host's mount namespace).",
)];

/// The functions of this file's namespaces, in reference order: each one's reference row
/// and its registration.
pub(super) const FUNCTIONS: &[FnDoc] = &[
    host_fn!(
        "mount",
        "ensure",
        &[P, OPTS],
        "bool",
        Submits(&[Write, Mkdir, Mount]),
        "Keep exactly one `/etc/fstab` line `<source> <path> <fstype> <options> <dump> <pass>` for mount point `path` (`#{source, fstype}` required; `options` a string or an array, default `defaults`; `dump`/`pass` default 0 0; `source` as given: `UUID=...`, `LABEL=...`, `/dev/...`), replacing another line for it in place and keeping every other line byte for byte; create the mount point (0755). With `state: \"mounted\"` (default) run `mount <path>` when the host's mount table (`/proc/1/mountinfo`) does not list it, or `mount -o remount <path>` when it is mounted and the fstab line changed; mounted from another source or fstype is an error (nothing changed). `state: \"present\"`: fstab and directory only. An unmounted filesystem is drift.",
        options = MOUNT_KEYS,
        |h, p: S, o: Map| {
            let spec = mount_spec(&o)?;
            Ok(mount::ensure(h, &p, &spec)?)
        }
    ),
    host_fn!(
        "mount",
        "remove",
        &[P],
        "bool",
        Submits(&[Write, Mount]),
        "`umount <path>` when mounted, then remove the mount point's `/etc/fstab` lines (the directory stays).",
        |h, p: S| Ok(mount::remove(h, &p)?)
    ),
    host_fn!(
        "mount",
        "is_mounted",
        &[P],
        "bool",
        ReadsHost,
        "True when the host's mount table (`/proc/1/mountinfo` under the root; octal escapes such as `\\040` decoded) lists `path`; in a plan also after a planned `mount::ensure`.",
        |h, p: S| Ok(mount::is_mounted(h, &p)?)
    ),
    host_fn!(
        "mount",
        "info",
        &[P],
        "?",
        ReadsHost,
        "`#{path, source, fstype, options, super_options, root}` of the filesystem mounted at `path` (topmost), or `()`; for a planned mount the fstab line's fields.",
        |h, p: S| Ok(mount::info(h, &p)?.map_or(Dynamic::UNIT, |e| Dynamic::from_map(entry_map(e))))
    ),
    host_fn!(
        "mount",
        "unit",
        &[P, OPTS],
        "bool",
        Submits(&[Write, Mkdir, DaemonReload, Service]),
        "Keep the systemd mount unit of mount point `path`, `/etc/systemd/system/<mount::unit_name(path)>` (mode 0644), with exactly `[Unit]` `Description=` `Requires=` `After=` (each only when given), `[Mount]` `What=` `Where=<path>` `Type=` `Options=`, `[Install]` `WantedBy=` (`#{what, type}` required; `options` a string or an array, default `defaults`; `requires`/`after`/`wanted_by` a unit name or an array, `wanted_by` default `multi-user.target`; `%` written `%%`); create the mount point (0755); a changed file schedules one daemon-reload (before the next `service::` call or at the end of the step). With `state: \"mounted\"` (default) `systemctl enable` and `systemctl start` the unit when it is not enabled / not active; `state: \"present\"`: file and directory only. systemd mounts it in the host's mount namespace. A file that differs or a unit not active is drift; a changed file of an active unit takes effect at its next start.",
        options = UNIT_KEYS,
        |h, p: S, o: Map| {
            let spec = unit_spec(&o)?;
            Ok(unit::unit(h, &p, &spec)?)
        }
    ),
    host_fn!(
        "mount",
        "bind",
        &[("src", "String"), P],
        "bool",
        Submits(&[Write, Mkdir, DaemonReload, Service]),
        "Bind-mount directory `src` at `path` as a systemd mount unit: `mount::unit(path, #{what: src, type: \"none\", options: \"bind\"})` (`src` is not created).",
        |h, s: S, p: S| Ok(unit::bind(h, &s, &p, &UnitSpec::new("", ""))?)
    ),
    host_fn!(
        "mount",
        "bind",
        &[("src", "String"), P, OPTS],
        "bool",
        Submits(&[Write, Mkdir, DaemonReload, Service]),
        "As `bind`, with `#{unit: true}` (the only kind supported) and `mount::unit`'s `description`, `requires`, `after`, `wanted_by`, `state`; `options` are added after `bind` (`\"ro\"` → `Options=bind,ro`).",
        options = BIND_KEYS,
        |h, s: S, p: S, o: Map| {
            let spec = bind_spec(&o)?;
            Ok(unit::bind(h, &s, &p, &spec)?)
        }
    ),
    host_fn!(
        "mount",
        "remove_unit",
        &[P],
        "bool",
        Submits(&[Service, Remove, DaemonReload]),
        "`systemctl stop` the mount unit of `path` when active, `systemctl disable` it when enabled, remove its file from `/etc/systemd/system` and schedule one daemon-reload (the mount point directory stays).",
        |h, p: S| Ok(unit::remove_unit(h, &p)?)
    ),
    host_fn!(
        "mount",
        "unit_name",
        &[P],
        "String",
        Computes,
        "The unit name of mount point `path`, as `systemd-escape --path --suffix=mount` prints it (systemd.unit(5) path escaping: slashes collapsed and stripped, `.` components dropped, `/` → `-`, a leading `.` and every byte but ASCII letters, digits, `:`, `_`, `.` → `\\xNN`): `/mnt/k8s-disks/0` → `mnt-k8s\\x2ddisks-0.mount`, `/` → `-.mount`. A relative path or a `..` component is an error.",
        |_h, p: S| Ok(unit::unit_name(&p)?)
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
        r#"mount::ensure("/data", #{source: "/dev/sdb1", fstype: "ext4"})"#,
        r#"mount::remove("/old")"#,
        r#"mount::is_mounted("/old")"#,
        r#"mount::info("/old")"#,
        r#"mount::unit("/mnt/k8s-disks", #{what: "UUID=1b2c", type: "xfs"})"#,
        r#"mount::bind("/mnt/k8s-disks/kubelet", "/var/lib/kubelet")"#,
        r#"mount::bind("/mnt/k8s-disks/pods", "/var/log/pods", #{options: ["ro"]})"#,
        r#"mount::remove_unit("/mnt/old")"#,
        r#"mount::unit_name("/mnt/k8s-disks/0")"#,
    ];

    #[test]
    fn mount_functions_from_rhai_plan_and_errors() {
        let t = TestHost::new();
        t.file("/etc/fstab", "# empty\n");
        t.file("/proc/1/mountinfo", "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n");
        let r = run(
            &t,
            ExecMode::Plan,
            r#"let c = mount::ensure("/data", #{source: "/dev/sdb1", fstype: "ext4", options: ["noatime", "nofail"], pass: 2});
    print(c);
    print(mount::is_mounted("/data"));
    let i = mount::info("/data");
    print(`${i.source} ${i.fstype} ${i.options}`);
    print(mount::info("/nothing"));
    print(mount::info("/").source);"#,
        )
        .ok();
        assert_eq!(
            r.stdout(),
            "true\ntrue\n/dev/sdb1 ext4 noatime,nofail\n\n/dev/sda1\n"
        );
        assert_eq!(
            r.report.changes[0].diff.as_deref(),
            Some(
                "--- a/etc/fstab\n+++ b/etc/fstab\n@@ -1 +1,2 @@\n # empty\n+/dev/sdb1 /data ext4 noatime,nofail 0 2\n"
            )
        );
        let r = run(
            &t,
            ExecMode::Plan,
            r#"mount::ensure("/data", #{source: "/dev/sdb1", fstype: "ext4", state: "gone"})"#,
        );
        assert!(
            r.error().ends_with(
                "mount::ensure: option state must be \"mounted\" or \"present\", got \"gone\""
            ),
            "{}",
            r.error()
        );
        let r = run(
            &t,
            ExecMode::Plan,
            r#"mount::ensure("/data", #{fstype: "ext4"})"#,
        );
        assert!(
            r.error()
                .ends_with("mount::ensure: option source is required (#{source, fstype})"),
            "{}",
            r.error()
        );
        let r = run(&t, ExecMode::Plan, r#"kmod::options("nouveau", 1)"#);
        assert!(
            r.error()
                .ends_with("kmod::options: opts must be a string, got i64 (or a map)"),
            "{}",
            r.error()
        );
    }
    /// The mount-unit calls from Rhai: options as strings or arrays, the unit written as
    /// given, the unit name, and clear errors for a missing or wrong option.
    #[test]
    fn mount_unit_functions_from_rhai() {
        let t = TestHost::new();
        t.systemctl_stub();
        let r = run(
            &t,
            ExecMode::Apply,
            r#"print(mount::unit_name("/mnt/k8s-disks/0"));
    print(mount::unit("/mnt/k8s-disks", #{what: "UUID=1b2c", type: "xfs", options: ["defaults", "noatime"],
        description: "RAID0", requires: "dev-md-kubernetes.device", after: ["dev-md-kubernetes.device"]}));
    print(mount::bind("/mnt/k8s-disks/kubelet", "/var/lib/kubelet", #{unit: true, state: "present"}));
    print(mount::unit("/mnt/k8s-disks", #{what: "UUID=1b2c", type: "xfs", options: "defaults,noatime",
        description: "RAID0", requires: ["dev-md-kubernetes.device"], after: "dev-md-kubernetes.device"}));"#,
        )
        .ok();
        assert_eq!(r.stdout(), "mnt-k8s\\x2ddisks-0.mount\ntrue\ntrue\nfalse\n");
        assert_eq!(
            t.read("/etc/systemd/system/mnt-k8s\\x2ddisks.mount"),
            "[Unit]\nDescription=RAID0\nRequires=dev-md-kubernetes.device\nAfter=dev-md-kubernetes.device\n\n\
             [Mount]\nWhat=UUID=1b2c\nWhere=/mnt/k8s-disks\nType=xfs\nOptions=defaults,noatime\n\n\
             [Install]\nWantedBy=multi-user.target\n"
        );
        assert!(
            t.read("/etc/systemd/system/var-lib-kubelet.mount")
                .contains("\nWhat=/mnt/k8s-disks/kubelet\nWhere=/var/lib/kubelet\nType=none\nOptions=bind\n")
        );
        // state "present": not enabled, not started.
        assert!(!t.p("/state/var-lib-kubelet.mount.active").exists());
        for (call, want) in [
            (
                r#"mount::unit("/x", #{type: "xfs"})"#,
                "mount::unit: option what is required (#{what, type})",
            ),
            (
                r#"mount::bind("/a", "/x", #{unit: false})"#,
                "mount::bind: option unit: false is not supported (a bind mount is kept as a systemd mount unit)",
            ),
            (
                r#"mount::unit("/x", #{what: "/a", type: "none", wanted_by: 1})"#,
                "mount::unit: option wanted_by must be a string or an array of strings, got i64",
            ),
            (
                r#"mount::unit_name("x")"#,
                "mount::unit_name: paths must be absolute: \"x\"",
            ),
        ] {
            let r = run(&t, ExecMode::Plan, call);
            assert!(r.error().ends_with(want), "{call}: {}", r.error());
        }
    }

    /// A call no overload takes names the function, the parameter and the type it wants,
    /// at the call's position, instead of Rhai's `Function not found: ... (&str | ...)`.
    #[test]
    fn wrong_argument_type_names_the_parameter_and_type() {
        let t = TestHost::new();
        t.file("/etc/fstab", "# empty\n");
        let r = run(
            &t,
            ExecMode::Plan,
            "let x = 1;\nmount::ensure(\"/data\", \"UUID=1234\")",
        );
        assert_eq!(
            r.error(),
            "main.rhai:2:1: mount::ensure: the 2nd argument (opts) must be an options map #{source, fstype, …}, got a string"
        );
        let r = run(&t, ExecMode::Plan, "fs::write(1, \"x\")");
        assert!(
            r.error()
                .ends_with("fs::write: the 1st argument (path) must be a string, got an int"),
            "{}",
            r.error()
        );
        let r = run(&t, ExecMode::Plan, "mount::remove()");
        assert!(
            r.error()
                .ends_with("mount::remove expects 1 argument, got 0"),
            "{}",
            r.error()
        );
    }
}
