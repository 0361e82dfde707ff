//! The `interrupt` rows' tests through Rhai.

pub(crate) mod tests {
    use crate::host::effects::report::ExecMode;
    use crate::host::testutil::TestHost;
    use crate::script::host_api::tests::*;

    /// One call of each function of this file, for
    /// [`crate::script::host_api::tests::declared_effects_are_the_submitted_ones`]: in the root that test
    /// prepares, each call of a function that submits effects changes something.
    pub(crate) const SAMPLES: &[&str] = &[
        r#"interrupt::reboot()"#,
        r#"interrupt::restart_services("kubelet")"#,
        r#"interrupt::restart_all_services()"#,
    ];

    #[test]
    fn interrupts_are_recorded_not_run() {
        let t = TestHost::new();
        t.install_sh();
        t.stub("reboot", ":");
        t.stub("systemctl", ":");
        let src = r#"interrupt::restart_services(["containerd", "kubelet"]); interrupt::restart_services("x"); interrupt::restart_all_services(); interrupt::reboot(); changed()"#;
        for mode in [ExecMode::Apply, ExecMode::Plan, ExecMode::Check] {
            let before = snapshot(&t);
            let r = run(&t, mode, src).ok();
            assert_eq!(r.outcome.code, 0);
            assert_eq!(snapshot(&t), before);
            assert!(t.calls().is_empty(), "{:?}", t.calls());
            assert!(r.report.drift().is_empty());
            let json = serde_json::to_value(&r.report.interrupts).unwrap();
            assert_eq!(
                json,
                serde_json::json!([
                    {"type": "restart_services", "services": ["containerd", "kubelet"]},
                    {"type": "restart_services", "services": ["x"]},
                    {"type": "restart_all_services"},
                    {"type": "reboot"}
                ])
            );
        }
    }
}
