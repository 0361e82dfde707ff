//! The `tuning` rows' tests through Rhai.

pub(crate) mod tests {
    use crate::host::effects::report::ExecMode;
    use crate::host::testutil::TestHost;
    use crate::script::host_api::tests::*;

    /// One call of each function of this file, for
    /// [`crate::script::host_api::tests::declared_effects_are_the_submitted_ones`]: in the root that test
    /// prepares, each call of a function that submits effects changes something.
    pub(crate) const SAMPLES: &[&str] = &[
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

    /// `sysctl::set` of a key with no `/proc/sys` entry after a command the plan did not run
    /// (`sysctl --system`, here through `sysctl::reload`; a module a command loads may create
    /// it): unknown in the plan, not a refusal; the apply,
    /// which runs it, still fails with the same message ([`super::super::tuning::sysctl::SysctlError`]
    /// keeps `depends_on_host` of the former `HostError::UnknownSysctl`).
    #[test]
    fn an_unknown_sysctl_key_after_an_unplanned_command_is_unknown_in_the_plan() {
        let t = TestHost::new();
        t.install_sh();
        t.stub("sysctl", ":");
        let step = "sysctl::reload();\nsysctl::set(\"no.such\", 1);\n";
        let plan = run(&t, ExecMode::Plan, step);
        let e = plan
            .outcome
            .error
            .as_ref()
            .expect("the plan ends at the set");
        assert_eq!(
            (&e.kind, e.message.as_str()),
            (
                &crate::script::errors::ScriptErrorKind::PlanUnknown,
                "sysctl::set: unknown in the plan: unknown sysctl key \"no.such\" (no /proc/sys/no/such), as the host is before sysctl --system (planned at main.rhai:1), which only the apply runs and which may change that"
            )
        );
        let apply = run(&t, ExecMode::Apply, step);
        assert_eq!(
            apply.error(),
            "main.rhai:2:9: sysctl::set: unknown sysctl key \"no.such\" (no /proc/sys/no/such)"
        );
    }
}
