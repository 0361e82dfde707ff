//! `interrupt::` (requests for the agent, run after the step) over
//! [`crate::host::kernel::interrupt`]: each function's reference row and binding, and their tests
//! through Rhai.

use crate::host::api::host_fn;
use rhai::Dynamic;

use crate::host::api::convert;
use crate::host::api::docs::EffectKind::*;
use crate::host::api::docs::Effects::*;
use crate::host::api::docs::FnDoc;
use crate::host::kernel::interrupt;

/// The reference sections of this file's namespaces: `(namespace, heading, introduction)`.
pub(super) const NAMESPACES: &[(&str, &str, &str)] = &[(
    "interrupt",
    "Interrupts — `interrupt::`",
    "A step never interrupts the node itself: the operator cordons and drains a node only for packages whose Skyhook CR declares an `interrupt` (or `configInterrupts`). After the step succeeded, each request is compared with the package's entry in `SKYHOOK_DIR/node-metadata/packages.json` (`skyhook-run`: `--skyhook-cr FILE`): declared → one line saying the operator runs it; not declared → the step fails with the CR lines to add; no node metadata → a warning. Restarting a service as part of ordinary work is `service::restart`, an action.",
)];

/// The functions of this file's namespaces, in reference order: each one's reference row
/// and its registration.
pub(super) const FUNCTIONS: &[FnDoc] = &[
    host_fn!(
        "interrupt",
        "reboot",
        &[],
        "()",
        Submits(&[Interrupt]),
        "Declare that the step's changes need a reboot: the step fails unless the package's Skyhook CR declares a reboot (`interrupt` or `configInterrupts`), which the operator then runs in its interrupt stage; post-interrupt-check fails until the boot id changed.",
        |h| Ok(interrupt::reboot(h)?)
    ),
    host_fn!(
        "interrupt",
        "restart_services",
        &[("names", "?")],
        "()",
        Submits(&[Interrupt]),
        "Declare that a service (or an array of services) must be restarted: the step fails unless the CR declares it (`type: service` with those units, `restartAllServices` or a reboot).",
        |h, n: Dynamic| {
            let n = convert::string_or_array(&n, "names")?;
            Ok(interrupt::restart_services(h, &n)?)
        }
    ),
    host_fn!(
        "interrupt",
        "restart_all_services",
        &[],
        "()",
        Submits(&[Interrupt]),
        "Restart all services after the step succeeded.",
        |h| Ok(interrupt::restart_all_services(h)?)
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
