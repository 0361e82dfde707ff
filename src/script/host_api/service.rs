//! `service::` (systemd units) over [`crate::host::services::service`] and `tuned_adm::` (the
//! TuneD profile) over [`crate::host::services::tuned`]: each function's reference row and
//! binding, and their tests through Rhai.

use crate::host::api::host_fn;
use rhai::Dynamic;
use rhai::ImmutableString as S;

use crate::host::api::convert;
use crate::host::api::docs::EffectKind::*;
use crate::host::api::docs::Effects::*;
use crate::host::api::docs::FnDoc;
use crate::host::api::docs::NAME;
use crate::host::services::{service, tuned};

/// The reference sections of this file's namespaces: `(namespace, heading, introduction)`.
pub(super) const NAMESPACES: &[(&str, &str, &str)] = &[
    (
        "service",
        "Services (systemd) — `service::`",
        "Every call first runs a daemon-reload scheduled by a changed drop-in.",
    ),
    (
        "tuned_adm",
        "TuneD profiles — `tuned_adm::`",
        "The active profile is what `/etc/tuned/active_profile` records (a profile planned earlier in the session answers in plan and check mode); a profile is `<name>/tuned.conf` in `/etc/tuned`, `/etc/tuned/profiles`, `/usr/lib/tuned` or `/usr/lib/tuned/profiles`. Not `tuned::`: a script importing `skyhook/tuned` as `tuned` would hide a namespace of that name, in its own code and in the module's.",
    ),
];

/// The functions of this file's namespaces, in reference order: each one's reference row
/// and its registration.
pub(super) const FUNCTIONS: &[FnDoc] = &[
    host_fn!(
        "service",
        "is_active",
        &[NAME],
        "bool",
        ReadsHost,
        "`systemctl is-active` succeeds.",
        |h, n: S| Ok(service::is_active(h, &n)?)
    ),
    host_fn!(
        "service",
        "is_enabled",
        &[NAME],
        "bool",
        ReadsHost,
        "`systemctl is-enabled` succeeds.",
        |h, n: S| Ok(service::is_enabled(h, &n)?)
    ),
    host_fn!(
        "service",
        "show",
        &[NAME, ("props", "Array")],
        "Map",
        ReadsHost,
        "The unit's properties `props` (`[\"LimitSTACK\", ...]`) as `systemctl show <name> --property=...` reports them: a map from property to value, a property it does not print absent; a failing `systemctl` is an error.",
        |h, n: S, props: rhai::Array| {
            let props = props
                .iter()
                .map(|p| {
                    p.clone()
                        .into_string()
                        .map_err(|t| format!("props: a property name must be a string, got {t}"))
                })
                .collect::<Result<Vec<String>, String>>()?;
            let map: rhai::Map = service::show(h, &n, &props)?
                .into_iter()
                .map(|(k, v)| (k.into(), rhai::Dynamic::from(v)))
                .collect();
            Ok(map)
        }
    ),
    host_fn!(
        "service",
        "start",
        &[NAME],
        "bool",
        Submits(&[Service]),
        "Start the unit when it is not active.",
        |h, n: S| Ok(service::start(h, &n)?)
    ),
    host_fn!(
        "service",
        "stop",
        &[NAME],
        "bool",
        Submits(&[Service]),
        "Stop the unit when it is active.",
        |h, n: S| Ok(service::stop(h, &n)?)
    ),
    host_fn!(
        "service",
        "enable",
        &[NAME],
        "bool",
        Submits(&[Service]),
        "Enable the unit when it is not enabled.",
        |h, n: S| Ok(service::enable(h, &n)?)
    ),
    host_fn!(
        "service",
        "disable",
        &[NAME],
        "bool",
        Submits(&[Service]),
        "Disable the unit when it is enabled.",
        |h, n: S| Ok(service::disable(h, &n)?)
    ),
    host_fn!(
        "service",
        "restart",
        &[NAME],
        "()",
        Submits(&[ServiceAction]),
        "`systemctl restart`, every time.",
        |h, n: S| Ok(service::restart(h, &n)?)
    ),
    host_fn!(
        "service",
        "reload",
        &[NAME],
        "()",
        Submits(&[ServiceAction]),
        "`systemctl reload`, every time.",
        |h, n: S| Ok(service::reload(h, &n)?)
    ),
    host_fn!(
        "service",
        "daemon_reload",
        &[],
        "()",
        Submits(&[DaemonReload]),
        "`systemctl daemon-reload`, every time (also satisfies a scheduled one).",
        |h| Ok(service::daemon_reload(h)?)
    ),
    host_fn!(
        "service",
        "drop_in",
        &[NAME, ("file", "String"), ("content", "String")],
        "bool",
        Submits(&[Write]),
        "Write `/etc/systemd/system/<name>.service.d/<file>`; a change schedules one daemon-reload, run before the next `service::` call or at the end of the step (not when the step fails: the drop-in is then put back).",
        |h, n: S, f: S, c: S| Ok(service::drop_in(h, &n, &f, &c)?)
    ),
    host_fn!(
        "service",
        "remove_drop_in",
        &[NAME, ("file", "String")],
        "bool",
        Submits(&[Remove]),
        "Remove that drop-in; a change schedules one daemon-reload.",
        |h, n: S, f: S| Ok(service::remove_drop_in(h, &n, &f)?)
    ),
    host_fn!(
        "tuned_adm",
        "active",
        &[],
        "?",
        ReadsHost,
        "The active profile's names (`\"nvidia-h100-inference\"`, several separated by one space), or `()` when none is active.",
        |h| Ok(convert::opt(tuned::active(h)?))
    ),
    host_fn!(
        "tuned_adm",
        "profile",
        &[("names", "?")],
        "bool",
        Submits(&[TunedProfile]),
        "Make a profile (a name; several in a string separated by spaces or in an array, merged by tuned in that order) the active one with `tuned-adm profile <names>`, unless it is already. A name without a `tuned.conf` is an error naming it.",
        |h, n: Dynamic| {
            let names: Vec<String> = if n.is_string() {
                convert::string(&n, "names")?
                    .split_whitespace()
                    .map(String::from)
                    .collect()
            } else {
                convert::string_or_array(&n, "names")?
            };
            Ok(tuned::profile(h, &names)?)
        }
    ),
    host_fn!(
        "tuned_adm",
        "off",
        &[],
        "bool",
        Submits(&[TunedProfile]),
        "`tuned-adm off` when a profile is active (tuned stops tuning; what it set is rolled back).",
        |h| Ok(tuned::off(h)?)
    ),
    host_fn!(
        "tuned_adm",
        "verify",
        &[],
        "bool",
        RunsReadOnly,
        "`tuned-adm verify` succeeds: the live settings match the active profile (false while a `[bootloader]` change waits for a reboot; the reasons are in `/var/log/tuned/tuned.log`).",
        |h| Ok(tuned::verify(h)?)
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
