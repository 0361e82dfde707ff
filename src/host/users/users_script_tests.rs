//! The `users` rows' tests through Rhai.

pub(crate) mod tests {
    use crate::host::effects::report::ExecMode;
    use crate::host::testutil::TestHost;
    use crate::script::host_api::tests::*;

    /// One call of each function of this file, for
    /// [`crate::script::host_api::tests::declared_effects_are_the_submitted_ones`]: in the root that test
    /// prepares, each call of a function that submits effects changes something.
    pub(crate) const SAMPLES: &[&str] = &[
        r#"user::exists("ubuntu")"#,
        r#"user::info("ubuntu")"#,
        r#"user::ensure("alice")"#,
        r#"user::ensure("alice", #{uid: 2000})"#,
        r#"user::remove("ubuntu")"#,
        r#"user::remove("ubuntu", #{remove_home: true})"#,
        r#"group::exists("video")"#,
        r#"group::ensure("gpuops")"#,
        r#"group::ensure("gpuops", #{gid: 3000})"#,
        r#"group::remove("video")"#,
    ];

    /// `user::` and `group::` through Rhai: the issue's script (a system user, then `fs::chown`
    /// and `fs::write` with its name) in plan, check and apply mode; `user::info`; option and
    /// argument errors with the function name.
    #[test]
    fn users_and_groups_through_rhai() {
        let t = TestHost::new();
        t.file(
            "/etc/passwd",
            "root:x:0:0:root:/root:/bin/bash\nubuntu:x:1000:1000::/home/ubuntu:/bin/bash\n",
        );
        t.file("/etc/group", "root:x:0:\nvideo:x:44:\nubuntu:x:1000:\n");
        t.file("/srv/data/model.bin", "weights");
        std::fs::create_dir_all(t.p("/var/lib")).unwrap();
        let src = script(&[
            "group::ensure(\"gpuops\", #{system: true})",
            "user::ensure(\"gpuops\", #{system: true, group: \"gpuops\", groups: [\"video\"], home: \"/var/lib/gpuops\", create_home: true, comment: \"GPU ops\"})",
            "fs::chown(\"/srv/data\", \"gpuops\", \"gpuops\")",
            "user::ensure(\"alice\", #{uid: 2000, shell: \"/bin/sh\", create_home: false})",
        ]);
        let before = snapshot(&t);
        let report = run(&t, ExecMode::Plan, &src).ok().report;
        assert_eq!(snapshot(&t), before, "a plan changed the root");
        let check = run(&t, ExecMode::Check, &src).ok();
        assert_eq!(check.report.drift().len(), 8);
        assert_eq!(snapshot(&t), before, "a check changed the root");
        let apply = run(&t, ExecMode::Apply, &src).ok();
        assert_eq!(apply.stdout(), bools(true, 4));
        let again = run(&t, ExecMode::Apply, &src).ok();
        assert_eq!(again.stdout(), bools(false, 4));
        assert!(
            run(&t, ExecMode::Check, &src)
                .ok()
                .report
                .drift()
                .is_empty()
        );
        assert_eq!(
            report.change_summaries(),
            vec![
                "update /etc/group",
                "update /etc/passwd",
                "update /etc/group",
                "create directory /var/lib/gpuops (mode 0750)",
                "chown /var/lib/gpuops 0:0 -> 999:999",
                "chown /srv/data 0:0 -> 999:999",
                "update /etc/passwd",
                "update /etc/group",
            ]
        );
        assert_eq!(
            t.read("/etc/passwd"),
            "root:x:0:0:root:/root:/bin/bash\nubuntu:x:1000:1000::/home/ubuntu:/bin/bash\n\
             gpuops:!:999:999:GPU ops:/var/lib/gpuops:/usr/sbin/nologin\n\
             alice:!:2000:2000::/home/alice:/bin/sh\n"
        );
        assert_eq!(
            t.read("/etc/group"),
            "root:x:0:\nvideo:x:44:gpuops\nubuntu:x:1000:\ngpuops:!:999:\nalice:!:2000:\n"
        );
        let r = run(
            &t,
            ExecMode::Plan,
            "let i = user::info(\"gpuops\");\n\
             print(`${i.uid} ${i.gid} ${i.group} ${i.groups} ${i.home} ${i.shell} ${i.comment}`);\n\
             print(user::info(\"nobody\") == ());\n\
             print(user::exists(\"alice\"));\nprint(group::exists(\"gpuops\"));\n\
             print(user::remove(\"alice\"));\nprint(user::exists(\"alice\"));\n\
             print(group::remove(\"video\"));",
        )
        .ok();
        assert_eq!(
            r.stdout(),
            "999 999 gpuops [\"video\"] /var/lib/gpuops /usr/sbin/nologin GPU ops\ntrue\ntrue\ntrue\ntrue\nfalse\ntrue\n"
        );
        for (src, msg) in [
            (
                "user::ensure(\"gpuops\", #{system: \"yes\"})",
                "user::ensure: option system must be a bool, got string",
            ),
            (
                "user::ensure(\"gpuops\", #{uid: -1})",
                "user::ensure: option uid must be in 0..=4294967294, got -1",
            ),
            (
                "user::ensure(\"gpuops\", #{groups: [1]})",
                "user::ensure: option groups[0] must be a string, got i64",
            ),
            (
                "user::ensure(\"Gpu\")",
                "user::ensure: invalid user name: \"Gpu\" must match [a-z_][a-z0-9_-]*[$]? and have at most 32 characters",
            ),
            (
                "user::ensure(\"bob\", #{uid: 1000})",
                "user::ensure: invalid uid: 1000 is taken by user \"ubuntu\" (in /etc/passwd)",
            ),
            (
                "group::ensure(\"ops\", #{gid: 44})",
                "group::ensure: invalid gid: 44 is taken by group \"video\" (in /etc/group)",
            ),
            (
                "group::remove(\"gpuops\")",
                "group::remove: invalid group: cannot remove group \"gpuops\": it is the primary group of user \"gpuops\"",
            ),
            (
                "user::remove(\"gpuops\", #{home: true})",
                "user::remove: unknown option \"home\" (expected one of: remove_home)",
            ),
        ] {
            // Rhai puts a namespaced call at the function name, after `ns::`.
            let col = src.find("::").unwrap() + 3;
            let r = run(&t, ExecMode::Plan, src);
            assert_eq!(r.error(), format!("main.rhai:1:{col}: {msg}"), "{src}");
        }
    }

    /// An owner or group the account files lack, after a command the plan did not run
    /// (which may add it, as `useradd` does): `fs::chown`, `fs::write` with an owner,
    /// `fs::fetch` with a group and `user::ensure` with `groups` are unknown in the plan, not
    /// refusals; the apply still fails with the same message (`FsError`, `FetchError` and
    /// `UserError` keep `depends_on_host` of the former `HostError::UnknownId`).
    #[test]
    fn unknown_owner_after_an_unplanned_command_is_unknown_in_the_plan() {
        let t = TestHost::new();
        t.install_sh();
        t.stub("setup", ":");
        t.file("/etc/passwd", "root:x:0:0:root:/root:/bin/bash\n");
        t.file("/etc/group", "root:x:0:\n");
        // Present, so the plan reads them rather than stopping at a file the command may make.
        t.file("/etc/shadow", "root:*:19000:0:99999:7:::\n");
        t.file("/etc/gshadow", "root:*::\n");
        t.file("/etc/login.defs", "");
        t.file("/srv/data", "x");
        for (call, fname, col, message) in [
            (
                "fs::chown(\"/srv/data\", \"gpuops\", ())",
                "fs::chown",
                5,
                "unknown user \"gpuops\" (not in the host's /etc/passwd)",
            ),
            (
                "fs::write(\"/srv/new\", \"x\", #{owner: \"gpuops\"})",
                "fs::write",
                5,
                "unknown user \"gpuops\" (not in the host's /etc/passwd)",
            ),
            (
                "fs::fetch(\"http://127.0.0.1:9/x\", \"/srv/x\", #{group: \"gpuops\"})",
                "fs::fetch",
                5,
                "unknown group \"gpuops\" (not in the host's /etc/group)",
            ),
            (
                "user::ensure(\"alice\", #{groups: [\"gpuops\"]})",
                "user::ensure",
                7,
                "unknown group \"gpuops\" (not in the host's /etc/group)",
            ),
        ] {
            let step = format!("run([\"setup\"]);\n{call};\n");
            let plan = run(&t, ExecMode::Plan, &step);
            let e = plan
                .outcome
                .error
                .as_ref()
                .expect("the plan ends at the call");
            assert_eq!(
                (&e.kind, e.message.as_str()),
                (
                    &crate::script::errors::ScriptErrorKind::PlanUnknown,
                    format!("{fname}: unknown in the plan: {message}, as the host is before setup (planned at main.rhai:1), which only the apply runs and which may change that").as_str()
                ),
                "{call}"
            );
            assert_eq!(
                run(&t, ExecMode::Apply, &step).error(),
                format!("main.rhai:2:{col}: {fname}: {message}"),
                "{call}"
            );
        }
    }
}
