//! `service::` (systemd units) over [`crate::host::service`]: each function's reference row
//! and binding, and their tests through Rhai.

use rhai::ImmutableString as S;

use super::docs::EffectKind::*;
use super::docs::Effects::*;
use super::docs::FnDoc;
use super::docs::NAME;
use crate::host::service;

/// The reference sections of this file's namespaces: `(namespace, heading, introduction)`.
pub(super) const NAMESPACES: &[(&str, &str, &str)] = &[(
    "service",
    "Services (systemd) — `service::`",
    "Every call first runs a daemon-reload scheduled by a changed drop-in.",
)];

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
        "Write `/etc/systemd/system/<name>.service.d/<file>`; a change schedules one daemon-reload, run before the next `service::` call or at the end of the step (also a failed one).",
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
];

#[cfg(test)]
pub(super) mod tests {
    /// One call of each function of this file, for
    /// [`super::super::tests::declared_effects_are_the_submitted_ones`]: in the root that test
    /// prepares, each call of a function that submits effects changes something.
    pub(in super::super) const SAMPLES: &[&str] = &[
        r#"service::is_active("old")"#,
        r#"service::is_enabled("old")"#,
        r#"service::start("nginx")"#,
        r#"service::stop("old")"#,
        r#"service::enable("nginx")"#,
        r#"service::disable("old")"#,
        r#"service::restart("nginx")"#,
        r#"service::reload("nginx")"#,
        r#"service::daemon_reload()"#,
        r#"service::drop_in("kubelet", "20-y.conf", "[Service]\n")"#,
        r#"service::remove_drop_in("kubelet", "10-x.conf")"#,
    ];
}
