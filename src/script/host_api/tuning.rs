//! `sysctl::`, `grub::` and `ulimit::` (kernel parameters, command line, resource limits)
//! over [`crate::host::kernel::tuning`]: each function's reference row and binding, and their tests
//! through Rhai.

use crate::host::api::host_fn;
use rhai::{Array, Dynamic, ImmutableString as S, Map};

use crate::host::api::convert;
use crate::host::api::docs::EffectKind::*;
use crate::host::api::docs::Effects::*;
use crate::host::api::docs::FnDoc;
use crate::host::api::docs::NAME;
use crate::host::kernel::sysctl_record;
use crate::host::kernel::tuning::ulimit::LimitEntry;
use crate::host::kernel::tuning::{grub, sysctl, ulimit};

/// `ulimit::persist` entries: each a map `#{domain, type, item, value}` (`value` may be an
/// int) or a string `"domain type item value"` (exactly four whitespace-separated fields).
fn limit_entries(a: &Array) -> Result<Vec<LimitEntry>, String> {
    let mut out = Vec::new();
    for (i, d) in a.iter().enumerate() {
        if let Some(m) = d.read_lock::<Map>() {
            convert::check_keys(&m, &["domain", "type", "item", "value"])?;
            let field = |k: &str| match m.get(k) {
                Some(v) => convert::scalar(v, &format!("entries[{i}].{k}")),
                None => Err(format!("entries[{i}] has no {k}")),
            };
            out.push(LimitEntry {
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
            out.push(LimitEntry {
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
pub(super) const NAMESPACES: &[(&str, &str, &str)] = &[
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

/// The functions of this file's namespaces, in reference order: each one's reference row
/// and its registration.
pub(super) const FUNCTIONS: &[FnDoc] = &[
    host_fn!(
        "sysctl",
        "get",
        &[("key", "String")],
        "?",
        ReadsHost,
        "The live value of `/proc/sys/<key, dots as slashes>`, or `()` when there is no such entry.",
        |h, k: S| Ok(convert::opt(sysctl::get(h, &k)?))
    ),
    host_fn!(
        "sysctl",
        "set",
        &[("key", "String"), ("value", "?")],
        "bool",
        Submits(&[Sysctl]),
        "Write the live value when it differs (compared whitespace-normalised); an unknown key is an error. Never writes under /etc.",
        |h, k: S, v: Dynamic| {
            let v = convert::scalar(&v, "value")?;
            Ok(sysctl::set(h, &k, &v)?)
        }
    ),
    host_fn!(
        "sysctl",
        "set",
        &[("key", "String"), ("value", "?"), ("opts", "Map")],
        "bool",
        Submits(&[Sysctl, Write]),
        "As `set`; with `#{record: true}` the live value before the package's first change of `key` is kept in `<SKYHOOK_ROOT_DIR>/sysctl-restore/<package>.conf` in the root (`/etc/skyhook` by default; the package of `SKYHOOK_RESOURCE_ID`, `unnamed` without one), for `sysctl::restore`.",
        options = &["record"],
        |h, k: S, v: Dynamic, o: Map| {
            convert::check_keys(&o, &["record"])?;
            let record = convert::opt_bool(&o, "record", false)?;
            let v = convert::scalar(&v, "value")?;
            Ok(sysctl::set_with(h, &k, &v, record)?)
        }
    ),
    host_fn!(
        "sysctl",
        "restore",
        &[("key", "String")],
        "bool",
        Submits(&[Sysctl, Write, Remove]),
        "Set `key` back to the value recorded by `set(.., #{record: true})` and drop it from the package's record (the file when it was the last); false when nothing is recorded for it.",
        |h, k: S| Ok(sysctl_record::restore(h, &k)?)
    ),
    host_fn!(
        "sysctl",
        "restore_all",
        &[],
        "bool",
        Submits(&[Sysctl, Remove]),
        "`restore` every key in the package's record, then remove the record (an uninstall's one call); false when there is none.",
        |h| Ok(sysctl_record::restore_all(h)?)
    ),
    host_fn!(
        "sysctl",
        "reload",
        &[],
        "()",
        Submits(&[Command]),
        "`sysctl --system`: every sysctl.d file and `/etc/sysctl.conf` applied live again (an action, every time; planned in plan and check mode); a non-zero exit is an error.",
        |h| Ok(sysctl::reload(h)?)
    ),
    host_fn!(
        "sysctl",
        "persist",
        &[("file", "String"), ("values", "Map")],
        "bool",
        Submits(&[Write]),
        "Write `/etc/sysctl.d/<file>`: one `key = value` line per map entry, keys sorted.",
        |h, f: S, m: Map| {
            let entries = m
                .iter()
                .map(|(k, v)| Ok((k.to_string(), convert::scalar(v, &format!("value of {k}"))?)))
                .collect::<Result<Vec<_>, String>>()?;
            Ok(sysctl::persist(h, &f, &entries)?)
        }
    ),
    host_fn!(
        "grub",
        "set_cmdline",
        &[NAME, ("args", "?")],
        "bool",
        Submits(&[Write]),
        "`/etc/default/grub.d/<name>.cfg` appending `args` (array, or a string split at spaces) to `GRUB_CMDLINE_LINUX_DEFAULT`; a change runs `update-grub` (or `grubby` on rhel/fedora) once at the end of the step.",
        |h, n: S, a: Dynamic| {
            let a = kernel_args(&a)?;
            Ok(grub::set_cmdline(h, &n, &a)?)
        }
    ),
    host_fn!(
        "grub",
        "remove",
        &[NAME],
        "bool",
        Submits(&[Remove]),
        "Remove that drop-in and take its arguments back.",
        |h, n: S| Ok(grub::remove(h, &n)?)
    ),
    host_fn!(
        "ulimit",
        "persist",
        &[("file", "String"), ("entries", "Array")],
        "bool",
        Submits(&[Write]),
        "Write `/etc/security/limits.d/<file>`, one `domain type item value` line per entry; an entry is a map `#{domain, type, item, value}` or a string `\"* soft nofile 65536\"`.",
        |h, f: S, e: Array| {
            let e = limit_entries(&e)?;
            Ok(ulimit::persist(h, &f, &e)?)
        }
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
        r#"sysctl::get("vm.swappiness")"#,
        r#"sysctl::set("vm.swappiness", 10)"#,
        r#"sysctl::set("vm.swappiness", 10, #{record: true})"#,
        r#"sysctl::restore("vm.swappiness")"#,
        r#"sysctl::restore_all()"#,
        r#"sysctl::reload()"#,
        r#"sysctl::persist("90-x.conf", #{"vm.swappiness": 10})"#,
        r#"grub::set_cmdline("tuning", ["iommu=pt"])"#,
        r#"grub::remove("old")"#,
        r#"ulimit::persist("90-x.conf", ["* hard nofile 65536"])"#,
    ];

    #[test]
    fn sysctl_grub_ulimit_all_modes() {
        let t = TestHost::new();
        t.install_sh();
        t.stub("update-grub", ":");
        t.file("/etc/os-release", "ID=ubuntu\n");
        t.file("/proc/sys/vm/swappiness", "60\n");
        t.file("/proc/sys/net/ipv4/ip_local_port_range", "32768\t60999\n");
        t.file(
            "/etc/default/grub.d/old.cfg",
            "GRUB_CMDLINE_LINUX_DEFAULT=\"${GRUB_CMDLINE_LINUX_DEFAULT} quiet\"\n",
        );
        let plan = all_modes(
            &t,
            &[
                r#"sysctl::set("vm.swappiness", 10)"#,
                r#"sysctl::persist("90-x.conf", #{"vm.swappiness": 10, "net.core.somaxconn": "4096"})"#,
                r#"grub::set_cmdline("tuning", ["hugepages=16", "iommu=pt"])"#,
                r#"grub::remove("old")"#,
                r#"ulimit::persist("90-x.conf", [#{domain: "*", type: "soft", item: "nofile", value: 65536}, "* hard nofile 65536"])"#,
            ],
        );
        assert!(
            plan.actions
                .iter()
                .any(|a| a.summary.contains("update-grub")),
            "{:?}",
            plan.actions
        );
        assert_eq!(t.read("/proc/sys/vm/swappiness"), "10\n");
        assert_eq!(
            t.read("/etc/sysctl.d/90-x.conf"),
            "net.core.somaxconn = 4096\nvm.swappiness = 10\n"
        );
        assert_eq!(
            t.read("/etc/default/grub.d/tuning.cfg"),
            "GRUB_CMDLINE_LINUX_DEFAULT=\"${GRUB_CMDLINE_LINUX_DEFAULT} hugepages=16 iommu=pt\"\n"
        );
        assert_eq!(
            t.read("/etc/security/limits.d/90-x.conf"),
            "* soft nofile 65536\n* hard nofile 65536\n"
        );
        let r = run(
            &t,
            ExecMode::Apply,
            r#"print([sysctl::get("vm.swappiness"), sysctl::get("no.such"), sysctl::set("net.ipv4.ip_local_port_range", "32768 60999")]);"#,
        )
        .ok();
        assert_eq!(r.stdout(), "[\"10\", (), false]\n");
        let r = run(&t, ExecMode::Apply, "\nsysctl::set(\"no.such\", 1)");
        assert_eq!(
            r.error(),
            "main.rhai:2:9: sysctl::set: unknown sysctl key \"no.such\" (no /proc/sys/no/such)"
        );
        let r = run(
            &t,
            ExecMode::Apply,
            r#"ulimit::persist("x", ["* soft nofile"])"#,
        );
        assert!(r.error().contains("must have four fields"), "{}", r.error());
    }

    /// The value before the first recorded change is kept per package and put back by
    /// restore; the second change keeps the first record; restore_all empties the record.
    #[test]
    fn sysctl_values_recorded_at_first_change_are_restored() {
        let t = fakehost("ubuntu-24.04-eks-x86_64");
        t.file("/proc/sys/vm/swappiness", "60\n");
        t.file("/proc/sys/net/core/somaxconn", "4096\n");
        let mut o = opts_for(&t);
        o.resource_id = "gpu-init-x-3_nvidia-tuned_0.2.0".into();
        o.env
            .push(("SKYHOOK_ROOT_DIR".into(), "/etc/skyhook".into()));
        let record = "/etc/skyhook/sysctl-restore/nvidia-tuned.conf";
        let install = r#"
            print([sysctl::set("vm.swappiness", 10, #{record: true}),
                   sysctl::set("vm.swappiness", 1, #{record: true}),
                   sysctl::set("net.core.somaxconn", 65535, #{record: true})]);
        "#;
        let plan = run_with(&t, ExecMode::Plan, install, o.clone()).ok();
        assert_eq!(plan.stdout(), "[true, true, true]\n");
        let targets: Vec<String> = plan
            .report
            .changes
            .iter()
            .map(|c| format!("{} {}", c.kind, c.target))
            .collect();
        assert_eq!(
            targets,
            [
                format!("write {record}"),
                "sysctl vm.swappiness".into(),
                "sysctl vm.swappiness".into(),
                format!("write {record}"),
                "sysctl net.core.somaxconn".into(),
            ]
        );
        assert!(!t.p(record).exists(), "a plan wrote the record");
        run_with(&t, ExecMode::Apply, install, o.clone()).ok();
        assert_eq!(
            t.read(record),
            "net.core.somaxconn = 4096\nvm.swappiness = 60\n"
        );
        assert_eq!(t.read("/proc/sys/vm/swappiness"), "1\n");
        // Another package's record is its own.
        let mut other = o.clone();
        other.resource_id = "x_tuning_1.0.0".into();
        let r = run_with(
            &t,
            ExecMode::Apply,
            r#"print(sysctl::restore("vm.swappiness"));"#,
            other,
        )
        .ok();
        assert_eq!(r.stdout(), "false\n");
        assert_eq!(t.read("/proc/sys/vm/swappiness"), "1\n");

        let r = run_with(
            &t,
            ExecMode::Apply,
            r#"print(sysctl::restore("vm.swappiness"));"#,
            o.clone(),
        )
        .ok();
        assert_eq!(r.stdout(), "true\n");
        assert_eq!(t.read("/proc/sys/vm/swappiness"), "60\n");
        assert_eq!(t.read(record), "net.core.somaxconn = 4096\n");
        let uninstall = r#"print(sysctl::restore_all());"#;
        let check = run_with(&t, ExecMode::Check, uninstall, o.clone()).ok();
        assert_eq!(check.report.drift().len(), 2);
        let r = run_with(&t, ExecMode::Apply, uninstall, o.clone()).ok();
        assert_eq!(r.stdout(), "true\n");
        assert_eq!(t.read("/proc/sys/net/core/somaxconn"), "4096\n");
        assert!(!t.p(record).exists());
        let again = run_with(&t, ExecMode::Apply, uninstall, o.clone()).ok();
        assert_eq!(
            (again.stdout(), again.report.changes.len()),
            ("false\n".into(), 0)
        );
    }
}
