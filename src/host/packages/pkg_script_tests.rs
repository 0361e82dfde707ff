//! The `pkg` rows' tests through Rhai.

pub(crate) mod tests {
    use crate::host::effects::report::ExecMode;
    use crate::host::testutil::TestHost;
    use crate::script::host_api::tests::*;

    /// One call of each function of this file, for
    /// [`crate::script::host_api::tests::declared_effects_are_the_submitted_ones`]: in the root that test
    /// prepares, each call of a function that submits effects changes something.
    pub(crate) const SAMPLES: &[&str] = &[
        r#"pkg::manager()"#,
        r#"pkg::installed("old")"#,
        r#"pkg::version("old")"#,
        r#"pkg::install("curl")"#,
        r#"pkg::install(["jq"], #{update: true})"#,
        r#"pkg::remove("old")"#,
        r#"pkg::update()"#,
        r#"pkg::upgrade()"#,
        r#"pkg::repo("r", #{url: "https://r.example/apt", suites: ["noble"], components: "main", key: "-----BEGIN PGP PUBLIC KEY BLOCK-----\nk\n-----END PGP PUBLIC KEY BLOCK-----"})"#,
        r#"pkg::remove_repo("gone")"#,
        r#"pkg::hold("old")"#,
        r#"pkg::unhold("held")"#,
    ];

    #[test]
    fn packages_all_modes() {
        let t = TestHost::new();
        apt_stubs(&t);
        std::fs::write(t.p("/state/pkg-old"), "i\n").unwrap();
        // One script each: after a planned install the plan cannot know what is installed
        // (service_script_tests: a_state_query_after_an_unrun_install_is_unknown_in_the_plan).
        for call in [
            r#"pkg::install("curl")"#,
            r#"pkg::install(["jq", "vim"], #{update: true})"#,
            r#"pkg::remove(["old", "never-installed"])"#,
        ] {
            all_modes(&t, &[call]);
        }
        let r = run(
            &t,
            ExecMode::Apply,
            r#"print([pkg::manager(), pkg::installed("jq"), pkg::installed("old"), pkg::version("curl"), pkg::version("old")]);"#,
        )
        .ok();
        assert_eq!(r.stdout(), "[\"apt\", true, false, \"1.2-3\", ()]\n");
        let r = run(&t, ExecMode::Apply, r#"pkg::install(#{})"#);
        assert_eq!(
            r.error(),
            "main.rhai:1:6: pkg::install: names must be a string or an array of strings, got map"
        );
        let r = run(
            &t,
            ExecMode::Apply,
            r#"pkg::install("x", #{upgrade: true})"#,
        );
        assert!(
            r.error().contains("unknown option \"upgrade\""),
            "{}",
            r.error()
        );
        t.file("/etc/os-release", "ID=arch\n");
        let r = run(&t, ExecMode::Apply, r#"print(type_of(pkg::manager()))"#).ok();
        assert_eq!(r.stdout(), "()\n");
    }

    #[test]
    fn pkg_repo_and_hold_from_scripts() {
        let t = TestHost::new();
        apt_stubs(&t);
        t.stub(
            "apt-mark",
            r#"case "$1" in
      showhold) if [ -e /state/held ]; then read v < /state/held; echo "$v"; fi ;;
      hold) echo "$2" > /state/held ;;
    esac"#,
        );
        let src = r#"print([
            pkg::repo("r", #{url: "https://r.example/apt", suites: ["noble"], components: "main",
                             key: "-----BEGIN PGP PUBLIC KEY BLOCK-----\nk\n-----END PGP PUBLIC KEY BLOCK-----"}),
            pkg::hold("jq"),
        ]);"#;
        let plan = run(&t, ExecMode::Plan, src).ok();
        assert_eq!(plan.stdout(), "[true, true]\n");
        let kinds: Vec<&str> = plan.report.change_kinds();
        assert_eq!(kinds, vec!["write", "write", "package_hold"]);
        assert_eq!(plan.report.changes[2].summary, "hold packages jq (apt)");
        assert_eq!(
            run(&t, ExecMode::Apply, src).ok().stdout(),
            "[true, true]\n"
        );
        assert_eq!(
            run(&t, ExecMode::Apply, src).ok().stdout(),
            "[false, false]\n"
        );
        assert_eq!(
            t.read("/etc/apt/sources.list.d/r.sources"),
            "# Managed by skyhook (pkg::repo \"r\").\nTypes: deb\nURIs: https://r.example/apt\nSuites: noble\nComponents: main\nSigned-By: /etc/apt/keyrings/r.asc\n"
        );
        assert_eq!(
            t.read("/etc/apt/keyrings/r.asc"),
            "-----BEGIN PGP PUBLIC KEY BLOCK-----\nk\n-----END PGP PUBLIC KEY BLOCK-----\n"
        );
        let r = run(
            &t,
            ExecMode::Plan,
            r#"pkg::repo("r", #{url: "u", suite: "noble"})"#,
        );
        assert_eq!(
            r.error(),
            "main.rhai:1:6: pkg::repo: unknown option \"suite\" (expected one of: url, suites, components, arch, key, key_url, key_sha256, enabled)"
        );
        let r = run(
            &t,
            ExecMode::Plan,
            r#"pkg::repo("r", #{url: "u", suites: 1})"#,
        );
        assert_eq!(
            r.error(),
            "main.rhai:1:6: pkg::repo: option suites must be a string or an array of strings, got i64"
        );
    }
}

mod upgrade_tests {
    use crate::host::effects::report::ExecMode;
    use crate::host::testutil::TestHost;
    use crate::script::host_api::tests::*;

    /// `pkg::update()` and `pkg::upgrade()` are actions: listed in a plan, no drift in a
    /// check, run (non-interactively) in every apply.
    #[test]
    fn pkg_update_and_upgrade_are_actions() {
        let t = TestHost::new();
        apt_stubs(&t);
        t.stub(
            "apt-get",
            r#"echo "frontend=$DEBIAN_FRONTEND" >> /stub.log"#,
        );
        let src = r#"pkg::update(); print(pkg::upgrade());"#;
        let plan = run(&t, ExecMode::Plan, src).ok();
        assert_eq!(plan.stdout(), "true\n");
        let actions: Vec<&str> = plan.report.action_summaries();
        assert_eq!(actions, ["apt-get update", "apt-get upgrade -y"]);
        assert!(plan.report.changes.is_empty());
        let check = run(&t, ExecMode::Check, src).ok();
        assert!(check.report.drift().is_empty());
        assert!(t.calls().is_empty(), "a plan or check ran {:?}", t.calls());
        for _ in 0..2 {
            t.clear_calls();
            assert_eq!(run(&t, ExecMode::Apply, src).ok().stdout(), "true\n");
            assert_eq!(
                t.calls(),
                [
                    "apt-get -o DPkg::Lock::Timeout=300 update",
                    "frontend=noninteractive",
                    "apt-get -o DPkg::Lock::Timeout=300 upgrade -y",
                    "frontend=noninteractive",
                ]
            );
        }
        t.file(
            "/etc/os-release",
            "ID=\"amzn\"\nID_LIKE=\"fedora\"\nVERSION_ID=\"2023\"\n",
        );
        t.stub("dnf", ":");
        t.clear_calls();
        run(&t, ExecMode::Apply, src).ok();
        assert_eq!(t.calls(), ["dnf -y makecache", "dnf -y upgrade"]);
        t.file("/etc/os-release", "ID=arch\n");
        assert_eq!(
            run(&t, ExecMode::Plan, "pkg::upgrade()").error(),
            "main.rhai:1:6: pkg::upgrade: no supported package manager for this host (os-release ID \"arch\")"
        );
    }

    /// A failed upgrade fails the step at the call; the step's earlier commands are "not
    /// undone" lines.
    #[test]
    fn pkg_upgrade_failure_is_the_steps_and_not_undone() {
        use crate::host::ExecMode as M;
        let t = TestHost::new();
        apt_stubs(&t);
        t.stub(
            "apt-get",
            r#"[ "$1 $2 $3" = "-o DPkg::Lock::Timeout=300 upgrade" ] && exit 100; :"#,
        );
        let r = run(&t, ExecMode::Apply, "pkg::update();\npkg::upgrade()");
        assert_eq!(
            r.error(),
            "main.rhai:2:6: pkg::upgrade: command apt-get -o DPkg::Lock::Timeout=300 upgrade -y failed with exit code 100"
        );
        let mut h = t.host_with(M::Apply, |o| o.undo = Some("step".into()));
        crate::host::packages::pkg::update(&mut h).unwrap();
        let (_, undone, _) = h.fail_with_report();
        assert_eq!(undone.not_undone, ["apt-get update"]);
    }

    /// An index refresh and an upgrade that the plan did not run change no package's
    /// presence: the plan still asks whether a package is installed and plans an install
    /// after them. An upgrade changes versions, so a version read after it is unknown.
    #[test]
    fn after_an_unrun_upgrade_presence_is_read_and_versions_are_unknown() {
        let t = TestHost::new();
        apt_stubs(&t);
        std::fs::write(t.p("/state/pkg-jq"), "i\n").unwrap();
        let plan = run(
            &t,
            ExecMode::Plan,
            "pkg::update();\npkg::upgrade();\nprint(pkg::installed(\"jq\"));\nprint(pkg::install(\"curl\"));\n",
        )
        .ok();
        assert_eq!(plan.stdout(), "true\ntrue\n");
        assert_eq!(
            plan.report.change_summaries(),
            ["install packages curl (apt)"]
        );
        let plan = run(
            &t,
            ExecMode::Plan,
            "pkg::upgrade();\nprint(pkg::installed(\"jq\"));\npkg::version(\"jq\")\n",
        );
        assert_eq!(plan.stdout(), "true\n");
        assert_eq!(
            plan.outcome.error.as_ref().map(|e| e.message.as_str()),
            Some(
                "pkg::version: the answer of dpkg-query -W '-f=${Status}\t${Version}' jq is unknown in the plan: apt-get upgrade -y (planned at main.rhai:1) is only run by the apply and may change it"
            )
        );
    }

    /// A host whose os-release names no supported package manager, after a command the plan
    /// did not run (which may install one, or rewrite os-release): `pkg::install` is unknown
    /// in the plan, not a refusal; the apply still fails with the same message
    /// ([`crate::host::packages::pkg::PkgError`] keeps `depends_on_host` of the former
    /// `HostError::NoPackageManager`).
    #[test]
    fn no_package_manager_after_an_unplanned_command_is_unknown_in_the_plan() {
        let t = TestHost::new();
        t.install_sh();
        t.stub("setup", ":");
        t.file("/etc/os-release", "ID=arch\n");
        let step = "run([\"setup\"]);\npkg::install(\"nginx\");\n";
        let plan = run(&t, ExecMode::Plan, step);
        let e = plan
            .outcome
            .error
            .as_ref()
            .expect("the plan ends at the install");
        assert_eq!(
            (&e.kind, e.message.as_str()),
            (
                &crate::script::errors::ScriptErrorKind::PlanUnknown,
                "pkg::install: unknown in the plan: no supported package manager for this host (os-release ID \"arch\"), as the host is before setup (planned at main.rhai:1), which only the apply runs and which may change that"
            )
        );
        assert_eq!(
            run(&t, ExecMode::Apply, step).error(),
            "main.rhai:2:6: pkg::install: no supported package manager for this host (os-release ID \"arch\")"
        );
    }
}
