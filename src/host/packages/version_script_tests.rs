//! The `version` rows' tests through Rhai.

pub(crate) mod tests {
    use crate::host::effects::report::ExecMode;
    use crate::host::testutil::TestHost;
    use crate::script::host_api::tests::*;

    /// One call of each function of this file, for
    /// [`crate::script::host_api::tests::declared_effects_are_the_submitted_ones`].
    pub(crate) const SAMPLES: &[&str] = &[
        r#"version::compare("1.0", "1.1", #{scheme: "dpkg"})"#,
        r#"version::at_least("6.8.0-1015-aws", "6.8", #{scheme: "dpkg"})"#,
        r#"version::sort(["2.0", "1.0"], #{scheme: "rpm"})"#,
    ];

    #[test]
    fn version_calls_in_every_mode() {
        let t = TestHost::new();
        t.file("/proc/sys/kernel/osrelease", "6.8.0-1015-aws\n");
        let src = r#"
            let d = #{scheme: "dpkg"};
            print([version::compare("1.0~rc1", "1.0", d), version::compare("1:0.1", "2.0", d),
                   version::compare("1.0", "0:1.0-0", d)]);
            print([version::compare("1.0.0-rc.1", "1.0.0", #{scheme: "semver"}),
                   version::compare("5.5p10", "5.5p2", #{scheme: "rpm"})]);
            print([version::at_least(os::kernel(), "6.8", d), version::at_least(os::kernel(), "6.9", d)]);
            print(version::sort(["6.8.0-1015-aws", "6.5.0-1024-aws", "6.8.0-1009-aws"], d));
        "#;
        let want = "[-1, 1, 0]\n[-1, 1]\n[true, false]\n\
                    [\"6.5.0-1024-aws\", \"6.8.0-1009-aws\", \"6.8.0-1015-aws\"]\n";
        for mode in [ExecMode::Plan, ExecMode::Check, ExecMode::Apply] {
            let r = run(&t, mode, src).ok();
            assert_eq!(r.stdout(), want, "{mode:?}");
            assert!(r.report.changes.is_empty());
        }
    }

    #[test]
    fn version_errors_name_the_value_and_the_option() {
        let t = TestHost::new();
        let cases = [
            (
                r#"version::compare("1.0", "1.1", #{})"#,
                "main.rhai:1:10: version::compare: option scheme is required: \"semver\", \"dpkg\" or \"rpm\"",
            ),
            (
                r#"version::compare("1.0", "1.1", #{scheme: "deb"})"#,
                "main.rhai:1:10: version::compare: invalid version scheme: \"deb\" (expected \"semver\", \"dpkg\" or \"rpm\")",
            ),
            (
                r#"version::at_least("1.2", "1.0.0", #{scheme: "semver"})"#,
                "main.rhai:1:10: version::at_least: invalid version: \"1.2\" is not a semver version: unexpected end of input while parsing minor version number",
            ),
            (
                r#"version::sort(["1.0", 2], #{scheme: "rpm"})"#,
                "main.rhai:1:10: version::sort: versions[1] must be a string, got i64",
            ),
            (
                r#"version::compare("1", "2", #{schema: "rpm"})"#,
                "main.rhai:1:10: version::compare: unknown option \"schema\" (expected one of: scheme)",
            ),
        ];
        for (src, want) in cases {
            assert_eq!(run(&t, ExecMode::Apply, src).error(), want, "{src}");
        }
    }
}
