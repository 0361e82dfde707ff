//! The `service` rows' tests through Rhai.

pub(crate) mod tests {
    use crate::host::effects::report::ExecMode;
    use crate::host::testutil::TestHost;
    use crate::script::host_api::tests::*;

    /// One call of each function of this file, for
    /// [`crate::script::host_api::tests::declared_effects_are_the_submitted_ones`]: in the root that test
    /// prepares, each call of a function that submits effects changes something.
    pub(crate) const SAMPLES: &[&str] = &[
        r#"service::is_active("old")"#,
        r#"service::is_enabled("old")"#,
        r#"service::show("old", ["ActiveState"])"#,
        r#"service::start("nginx")"#,
        r#"service::stop("old")"#,
        r#"service::enable("nginx")"#,
        r#"service::disable("old")"#,
        r#"service::restart("nginx")"#,
        r#"service::reload("nginx")"#,
        r#"service::daemon_reload()"#,
        r#"service::drop_in("kubelet", "20-y.conf", "[Service]\n")"#,
        r#"service::remove_drop_in("kubelet", "10-x.conf")"#,
        r#"tuned_adm::active()"#,
        r#"tuned_adm::profile("balanced")"#,
        r#"tuned_adm::off()"#,
        r#"tuned_adm::verify()"#,
    ];

    /// `service::show` returns the properties systemctl prints (one it does not print is
    /// absent) in every mode, and refuses a property name that is not a word.
    #[test]
    fn show_returns_the_printed_properties_in_every_mode() {
        let t = TestHost::new();
        t.systemctl_stub();
        for mode in [ExecMode::Plan, ExecMode::Check, ExecMode::Apply] {
            let r = run(
                &t,
                mode,
                r#"let m = service::show("containerd.service", ["LimitSTACK", "Missing"]);
                   print(`${m.keys().len()} ${m.LimitSTACK} ${"Missing" in m}`);"#,
            );
            let r = r.ok();
            assert_eq!(r.stdout(), "1 v-LimitSTACK false\n", "{mode:?}");
        }
        let bad = run(&t, ExecMode::Plan, r#"service::show("x", ["a=b"])"#);
        assert!(
            bad.error().contains("invalid unit property: \"a=b\""),
            "{}",
            bad.error()
        );
    }

    /// A failed step's planned install leaves the view with the step (the agent undoes the
    /// step whole): a later step's state queries run again, as before it.
    #[test]
    fn a_failed_steps_unrun_install_leaves_later_queries_answered() {
        use crate::host::HostError;
        use crate::host::services::service::is_enabled;
        let t = TestHost::new();
        apt_stubs(&t);
        t.systemctl_stub();
        let mut h = t.host(ExecMode::Plan);
        let mark = h.view_mark().expect("a plan has a view");
        crate::host::packages::pkg::install(&mut h, &["tuned".to_string()], false).unwrap();
        assert!(matches!(
            is_enabled(&mut h, "tuned"),
            Err(HostError::PlanUnknownQuery { .. })
        ));
        h.restore_view(mark);
        assert!(!is_enabled(&mut h, "tuned").unwrap());
        // A step that keeps its install keeps the query unknown.
        let mark = h.view_mark().expect("a plan has a view");
        crate::host::packages::pkg::install(&mut h, &["tuned".to_string()], false).unwrap();
        h.keep_view();
        drop(mark);
        assert!(matches!(
            is_enabled(&mut h, "tuned"),
            Err(HostError::PlanUnknownQuery { .. })
        ));
    }

    /// A step installs a package whose maintainer script enables its unit, then verifies
    /// the unit is enabled. The apply passes. The plan cannot run the install, so the
    /// unit's state after it is unknown (the plan's model only knows what it planned
    /// itself): the step's plan ends there, without running `systemctl`.
    #[test]
    fn a_state_query_after_an_unrun_install_is_unknown_in_the_plan() {
        // regression: the plan asked systemctl about the host before the install, followed
        // the "not enabled" branch the apply never takes, and its fail() refused the mode
        let t = TestHost::new();
        apt_stubs(&t);
        t.systemctl_stub();
        t.stub(
            "apt-get",
            r#"for a; do [ "$a" = tuned ] && echo i > /state/pkg-tuned && echo yes > /state/tuned.enabled; done; :"#,
        );
        let step = "pkg::install(\"tuned\");\nif !service::is_enabled(\"tuned\") { fail(\"tuned.service is not enabled after its install\") }\nif !pkg::installed(\"tuned\") { fail(\"not installed\") }\n";
        let plan = run(&t, ExecMode::Plan, step);
        let e = plan
            .outcome
            .error
            .as_ref()
            .expect("the plan ends at the query");
        assert_eq!(
            (&e.kind, e.message.as_str()),
            (
                &crate::script::errors::ScriptErrorKind::PlanUnknown,
                "service::is_enabled: the answer of systemctl is-enabled tuned is unknown in the plan: install packages tuned (apt) (planned at main.rhai:1) is only run by the apply and may change it"
            )
        );
        assert!(!t.p("/state/pkg-tuned").exists(), "the plan installed");
        run(&t, ExecMode::Apply, step).ok();
        assert!(t.p("/state/tuned.enabled").exists());
        // What the plan planned itself still answers after the install (the plan's model);
        // a unit it planned nothing for does not.
        let planned = run(
            &t,
            ExecMode::Plan,
            "pkg::install(\"nginx\");\nif !pkg::installed(\"nginx\") { fail(\"x\") }\nprint(\"modelled\");\nservice::enable(\"nginx\");\n",
        );
        assert_eq!(planned.stdout(), "modelled\n");
        assert_eq!(
            planned.outcome.error.as_ref().map(|e| e.message.as_str()),
            Some(
                "service::enable: the answer of systemctl is-enabled nginx is unknown in the plan: install packages nginx (apt) (planned at main.rhai:1) is only run by the apply and may change it"
            )
        );
    }

    #[test]
    fn services_all_modes_and_actions() {
        let t = TestHost::new();
        t.systemctl_stub();
        std::fs::write(t.p("/state/old.active"), "yes\n").unwrap();
        std::fs::write(t.p("/state/old.enabled"), "yes\n").unwrap();
        let plan = all_modes(
            &t,
            &[
                r#"service::start("nginx")"#,
                r#"service::enable("nginx")"#,
                r#"service::stop("old")"#,
                r#"service::disable("old")"#,
                r#"service::drop_in("kubelet", "10-x.conf", "[Service]\nX=1\n")"#,
            ],
        );
        // The drop-in's daemon-reload is an action in the plan, not a change.
        assert!(
            plan.actions
                .iter()
                .any(|a| a.summary.contains("daemon-reload")),
            "{:?}",
            plan.actions
        );
        let r = run(
            &t,
            ExecMode::Apply,
            r#"print([service::is_active("nginx"), service::is_enabled("old")]);"#,
        )
        .ok();
        assert_eq!(r.stdout(), "[true, false]\n");
        // Actions run every time in apply, are recorded in plan, never drift in check.
        let src = r#"service::restart("nginx"); service::reload("nginx"); service::daemon_reload(); changed()"#;
        t.clear_calls();
        let p = run(&t, ExecMode::Plan, src).ok();
        assert_eq!(p.report.actions.len(), 3);
        assert!(t.calls().is_empty());
        let c = run(&t, ExecMode::Check, src).ok();
        assert!(c.report.drift().is_empty());
        let a = run(&t, ExecMode::Apply, src).ok();
        assert_eq!(a.outcome.code, 0, "actions are not counted by changed()");
        assert_eq!(
            t.calls(),
            vec![
                "systemctl restart nginx",
                "systemctl reload nginx",
                "systemctl daemon-reload"
            ]
        );
        // Removing the drop-in: a change, plus one deferred reload run at finish even when the
        // script then fails.
        t.clear_calls();
        let r = run(
            &t,
            ExecMode::Apply,
            r#"service::remove_drop_in("kubelet", "10-x.conf"); throw "boom";"#,
        );
        assert!(r.error().ends_with("boom"));
        assert_eq!(t.calls(), vec!["systemctl daemon-reload"]);
        assert!(
            !t.p("/etc/systemd/system/kubelet.service.d/10-x.conf")
                .exists()
        );
    }
}
