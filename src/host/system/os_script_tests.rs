//! The `os` rows' tests through Rhai.

pub(crate) mod tests {
    use crate::host::effects::report::ExecMode;
    use crate::host::testutil::TestHost;
    use crate::script::host_api::tests::*;

    /// One call of each function of this file, for
    /// [`crate::script::host_api::tests::declared_effects_are_the_submitted_ones`]: in the root that test
    /// prepares, each call of a function that submits effects changes something.
    pub(crate) const SAMPLES: &[&str] = &[
        r#"os::release()"#,
        r#"os::id()"#,
        r#"os::version()"#,
        r#"os::family()"#,
        r#"os::kernel()"#,
        r#"os::arch()"#,
        r#"os::dpkg_arch()"#,
        r#"os::rpm_arch()"#,
        r#"os::hostname()"#,
        r#"os::cmdline()"#,
        r#"lib::find("libc")"#,
        r#"lib::refresh()"#,
    ];

    #[test]
    fn os_facts() {
        let t = TestHost::new();
        t.file(
            "/etc/os-release",
            "ID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\nVERSION_ID=\"9.3\"\n",
        );
        t.file("/proc/sys/kernel/osrelease", "6.1.0-test\n");
        t.file("/proc/cmdline", "ro quiet\n");
        t.file("/etc/hostname", "node-7\n");
        let r = run(
            &t,
            ExecMode::Plan,
            r#"print([os::id(), os::version(), os::family(), os::kernel(), os::hostname(), os::cmdline(), os::release().ID_LIKE, os::arch() != ""]);"#,
        )
        .ok();
        assert_eq!(
            r.stdout(),
            "[\"rocky\", \"9.3\", \"rhel\", \"6.1.0-test\", \"node-7\", \"ro quiet\", \"rhel centos fedora\", true]\n"
        );
    }

    #[test]
    fn arch_names_on_fake_hosts() {
        let src = r#"print([os::arch(), os::dpkg_arch(), os::rpm_arch()]);"#;
        for (host, want) in [
            (
                "ubuntu-24.04-eks-arm64",
                r#"["aarch64", "arm64", "aarch64"]"#,
            ),
            (
                "ubuntu-24.04-eks-x86_64",
                r#"["x86_64", "amd64", "x86_64"]"#,
            ),
            ("amazon-linux-2023", r#"["x86_64", "amd64", "x86_64"]"#),
        ] {
            let t = fakehost(host);
            for mode in [ExecMode::Plan, ExecMode::Check, ExecMode::Apply] {
                assert_eq!(
                    run(&t, mode, src).ok().stdout(),
                    format!("{want}\n"),
                    "{host}"
                );
            }
        }
        let t = TestHost::new();
        t.file("/proc/sys/kernel/arch", "m68k\n");
        assert_eq!(
            run(&t, ExecMode::Plan, "os::dpkg_arch()").error(),
            "main.rhai:1:5: os::dpkg_arch: invalid machine architecture: \"m68k\" has no known dpkg or rpm name (known: x86_64, aarch64, i686, i586, i386, armv7l, ppc64le, s390x, riscv64, loongarch64)"
        );
    }

    /// `lib::find` over a recording `ldconfig` stub: every mode runs it (a query), matches
    /// by name, and a missing `ldconfig` is a clear error.
    #[test]
    fn lib_find_from_ldconfig() {
        let t = TestHost::new();
        t.install_sh();
        t.stub(
            "ldconfig",
            r#"[ "$1" = -p ] || exit 2
printf '3 libs found in cache `/etc/ld.so.cache'"'"'\n'
printf '\tlibfabric.so.1 (libc6,x86-64) => /opt/amazon/efa/lib/libfabric.so.1\n'
printf '\tlibfabric.so (libc6,x86-64) => /opt/amazon/efa/lib/libfabric.so\n'
printf '\tlibnccl-net.so (libc6,x86-64) => /opt/aws-ofi-nccl/lib/libnccl-net.so\n'"#,
        );
        let src = r#"print([lib::find("libfabric"), lib::find("libnccl-net.so"), lib::find("libcuda")]);"#;
        for mode in [ExecMode::Plan, ExecMode::Check, ExecMode::Apply] {
            let r = run(&t, mode, src).ok();
            assert_eq!(
                r.stdout(),
                "[[\"/opt/amazon/efa/lib/libfabric.so.1\", \"/opt/amazon/efa/lib/libfabric.so\"], [\"/opt/aws-ofi-nccl/lib/libnccl-net.so\"], []]\n"
            );
        }
        assert_eq!(t.calls().len(), 9);
        assert_eq!(
            run(&t, ExecMode::Plan, r#"lib::find("a/b")"#).error(),
            "main.rhai:1:6: lib::find: invalid library name: \"a/b\" (a name like \"libfabric\" or \"libnvidia-ml.so.1\")"
        );
        std::fs::remove_file(t.p("/usr/bin/ldconfig")).unwrap();
        assert_eq!(
            run(&t, ExecMode::Plan, r#"lib::find("libfabric")"#).error(),
            "main.rhai:1:6: lib::find: failed to run ldconfig -p: program not found"
        );
    }

    /// `lib::refresh()` runs `ldconfig` in an apply only, is an action in every mode's
    /// report, and fails the step when `ldconfig` does.
    #[test]
    fn lib_refresh_runs_ldconfig_as_an_action() {
        let t = TestHost::new();
        t.install_sh();
        t.stub("ldconfig", "exit 0");
        for mode in [ExecMode::Plan, ExecMode::Check] {
            let r = run(&t, mode, "lib::refresh();").ok();
            assert_eq!(r.report.actions.len(), 1, "{mode:?}");
            assert_eq!(r.report.actions[0].kind, "command");
        }
        assert!(t.calls().is_empty(), "a plan or check ran ldconfig");
        let r = run(&t, ExecMode::Apply, "lib::refresh();").ok();
        assert_eq!(r.report.actions.len(), 1);
        assert_eq!(t.calls(), vec!["ldconfig "]);
        t.stub("ldconfig", "exit 1");
        assert!(
            run(&t, ExecMode::Apply, "lib::refresh();")
                .error()
                .contains("ldconfig"),
        );
    }
}
