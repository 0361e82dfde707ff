//! Services (systemd): `service::` queries, state changes, actions and drop-ins.
//!
//! Queries (`is_active`, `is_enabled`) run `systemctl` in every mode; in plan and check mode
//! a state planned earlier in the session answers first. Every call first runs a
//! daemon-reload scheduled by a changed drop-in ([`Host::flush_daemon_reload`]).

use std::path::PathBuf;

use crate::host::Host;
use crate::host::effects::effect::{Effect, ServiceAction, ServiceOp};
use crate::host::effects::exec::CommandOptions;
use crate::host::effects::session::StateRead;
use crate::host::root::error::{HostError, Result};

/// Suffixes that make a name a full unit name (`x.socket`), so its drop-in directory is
/// `<name>.d` rather than `<name>.service.d`.
const UNIT_SUFFIXES: &[&str] = &[
    ".service", ".socket", ".timer", ".mount", ".path", ".target", ".slice", ".scope",
];

/// A function of a unit (`pub fn name(h, name) -> T body`, its docs first) and its host
/// function `service::name(name)` (its reference docs after, then its effects), which calls
/// it: the items of every `service::` call on one unit.
macro_rules! unit_fn {
    (
        $(#[doc = $pdoc:literal])*
        pub fn $name:ident($h:ident, $n:ident) -> $ret:ty $body:block
        $(#[doc = $doc:literal])*
        effects = $eff:tt;
    ) => {
        $(#[doc = $pdoc])*
        pub fn $name($h: &mut Host, $n: &str) -> Result<$ret> $body

        host_fn! {
            $(#[doc = $doc])*
            #[host(ns = "service", effects = $eff)]
            fn $name(h: &mut Host, name: S) -> $ret {
                Ok(super::$name(h, &name)?)
            }
        }
    };
}

fn check_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.starts_with('-')
        || name.contains(['/', '\0'])
        || name.chars().any(char::is_whitespace)
    {
        return Err(HostError::Invalid {
            what: "service name",
            message: format!("{name:?}"),
        });
    }
    Ok(())
}

/// `systemctl ARGS` (a state query: `is-active`, `is-enabled`) exits 0; a plan keeps what it
/// read of the root across it ([`Host::exec_state_query`]).
fn query_ok(h: &Host, args: &[&str]) -> Result<bool> {
    let argv: Vec<String> = std::iter::once("systemctl")
        .chain(args.iter().copied())
        .map(String::from)
        .collect();
    let opts = CommandOptions {
        read_only: true,
        ..CommandOptions::default()
    };
    Ok(h.exec_state_query(&argv, &opts, StateRead::State)?.ok)
}

unit_fn! {
    /// `service::is_active(name)`: `systemctl is-active <name>` exits 0.
    ///
    /// # Errors
    /// Invalid name; `systemctl` missing or failing to start.
    pub fn is_active(h, name) -> bool {
        check_name(name)?;
        h.flush_daemon_reload()?;
        if let (Some(a), _) = h.planned_service(name) {
            return Ok(a);
        }
        query_ok(h, &["is-active", name])
    }
    /// `systemctl is-active` succeeds.
    effects = ReadsHost;
}

unit_fn! {
    /// `service::is_enabled(name)`: `systemctl is-enabled <name>` exits 0.
    ///
    /// # Errors
    /// As [`is_active`].
    pub fn is_enabled(h, name) -> bool {
        check_name(name)?;
        h.flush_daemon_reload()?;
        if let (_, Some(e)) = h.planned_service(name) {
            return Ok(e);
        }
        query_ok(h, &["is-enabled", name])
    }
    /// `systemctl is-enabled` succeeds.
    effects = ReadsHost;
}

fn change(h: &mut Host, name: &str, op: ServiceOp) -> Result<bool> {
    let (current, want) = match op {
        ServiceOp::Start => (is_active(h, name)?, true),
        ServiceOp::Stop => (is_active(h, name)?, false),
        ServiceOp::Enable => (is_enabled(h, name)?, true),
        ServiceOp::Disable => (is_enabled(h, name)?, false),
    };
    if current == want {
        h.note_unchanged();
        return Ok(false);
    }
    h.submit(Effect::Service {
        name: name.to_string(),
        op,
    })?;
    Ok(true)
}

/// `service::show(name, props)`: the unit's properties `props` as `systemctl show <name>
/// --property=P ...` reports them, as a map from property to value (a property systemctl
/// does not print is absent). A query, run in every mode.
///
/// # Errors
/// Invalid name, a property name that is not letters and digits; `systemctl` missing,
/// failing to start or exiting non-zero (the command and its stderr named).
pub fn show(
    h: &mut Host,
    name: &str,
    props: &[String],
) -> Result<std::collections::BTreeMap<String, String>> {
    check_name(name)?;
    if let Some(p) = props
        .iter()
        .find(|p| p.is_empty() || !p.chars().all(|c| c.is_ascii_alphanumeric()))
    {
        return Err(HostError::Invalid {
            what: "unit property",
            message: format!("{p:?}"),
        });
    }
    h.flush_daemon_reload()?;
    let argv: Vec<String> = ["systemctl", "show", name]
        .into_iter()
        .map(String::from)
        .chain(props.iter().map(|p| format!("--property={p}")))
        .collect();
    let opts = CommandOptions {
        read_only: true,
        check: true,
        ..CommandOptions::default()
    };
    let out = h.exec_state_query(&argv, &opts, StateRead::State)?;
    Ok(out
        .stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| props.iter().any(|p| p == k))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect())
}

host_fn! {
    /// The unit's properties `props` (`["LimitSTACK", ...]`) as `systemctl show <name>
    /// --property=...` reports them: a map from property to value, a property it does not print
    /// absent; a failing `systemctl` is an error.
    #[host(ns = "service", effects = ReadsHost)]
    fn show(h: &mut Host, name: S, props: rhai::Array) -> rhai::Map {
        let props = props
            .iter()
            .map(|p| {
                p.clone().into_string().map_err(|t| {
                    format!("props: a property name must be a string, got {t}")
                })
            })
            .collect::<Result<Vec<String>, String>>()?;
        let map: rhai::Map = super::show(h, &name, &props)?
            .into_iter()
            .map(|(k, v)| (k.into(), rhai::Dynamic::from(v)))
            .collect();
        Ok(map)
    }
}

unit_fn! {
    /// `service::start(name)`: start when not active.
    ///
    /// # Errors
    /// Invalid name; `systemctl start` failing (apply).
    pub fn start(h, name) -> bool {
        change(h, name, ServiceOp::Start)
    }
    /// Start the unit when it is not active.
    effects = [Service];
}

unit_fn! {
    /// `service::stop(name)`: stop when active.
    ///
    /// # Errors
    /// As [`start`].
    pub fn stop(h, name) -> bool {
        change(h, name, ServiceOp::Stop)
    }
    /// Stop the unit when it is active.
    effects = [Service];
}

unit_fn! {
    /// `service::enable(name)`: enable when not enabled.
    ///
    /// # Errors
    /// As [`start`].
    pub fn enable(h, name) -> bool {
        change(h, name, ServiceOp::Enable)
    }
    /// Enable the unit when it is not enabled.
    effects = [Service];
}

unit_fn! {
    /// `service::disable(name)`: disable when enabled.
    ///
    /// # Errors
    /// As [`start`].
    pub fn disable(h, name) -> bool {
        change(h, name, ServiceOp::Disable)
    }
    /// Disable the unit when it is enabled.
    effects = [Service];
}

fn action(h: &mut Host, name: &str, action: ServiceAction) -> Result<()> {
    check_name(name)?;
    h.flush_daemon_reload()?;
    h.submit(Effect::ServiceAction {
        name: name.to_string(),
        action,
    })?;
    Ok(())
}

unit_fn! {
    /// `service::restart(name)`: an action (`systemctl restart`), every time.
    ///
    /// # Errors
    /// Invalid name; the command failing (apply).
    pub fn restart(h, name) -> () {
        action(h, name, ServiceAction::Restart)
    }
    /// `systemctl restart`, every time.
    effects = [ServiceAction];
}

unit_fn! {
    /// `service::reload(name)`: an action (`systemctl reload`), every time.
    ///
    /// # Errors
    /// As [`restart`].
    pub fn reload(h, name) -> () {
        action(h, name, ServiceAction::Reload)
    }
    /// `systemctl reload`, every time.
    effects = [ServiceAction];
}

/// `service::daemon_reload()`: an action (`systemctl daemon-reload`), every time; it also
/// satisfies a scheduled one.
///
/// # Errors
/// The command failing (apply).
pub fn daemon_reload(h: &mut Host) -> Result<()> {
    h.submit(Effect::DaemonReload)?;
    Ok(())
}

host_fn! {
    /// `systemctl daemon-reload`, every time (also satisfies a scheduled one).
    #[host(ns = "service", effects = [DaemonReload])]
    fn daemon_reload(h: &mut Host) -> () {
        Ok(super::daemon_reload(h)?)
    }
}

/// The drop-in path `/etc/systemd/system/<name>.service.d/<file>` (`<name>.d` when `name`
/// already has a unit suffix such as `.socket`).
///
/// # Errors
/// Invalid name, or `file` not a single path component.
pub fn drop_in_path(name: &str, file: &str) -> Result<PathBuf> {
    check_name(name)?;
    if file.is_empty() || file == "." || file == ".." || file.contains(['/', '\0']) {
        return Err(HostError::Invalid {
            what: "drop-in file name",
            message: format!("{file:?}"),
        });
    }
    let dir = if UNIT_SUFFIXES.iter().any(|s| name.ends_with(s)) {
        format!("{name}.d")
    } else {
        format!("{name}.service.d")
    };
    Ok(PathBuf::from("/etc/systemd/system").join(dir).join(file))
}

/// `service::drop_in(name, file, content)`: write the drop-in; when changed, schedule one
/// (coalesced) daemon-reload. In apply mode the daemon-reload record is made durable
/// *before* the drop-in is written and removed only after a reload succeeded
/// ([`crate::host::root::deferred`]), so a crash in between leaves the reload to the next session.
///
/// # Errors
/// As [`drop_in_path`]; writing the record (apply mode; the drop-in is then not written);
/// write failures.
pub fn drop_in(h: &mut Host, name: &str, file: &str, content: &str) -> Result<bool> {
    let path = drop_in_path(name, file)?;
    let changed = crate::host::files::fs::put_with(
        h,
        &path,
        content.as_bytes().to_vec(),
        (None, None, None),
        Host::write_ahead_daemon_reload,
    )?;
    if changed {
        h.schedule_daemon_reload();
    }
    Ok(changed)
}

host_fn! {
    /// Write `/etc/systemd/system/<name>.service.d/<file>`; a change schedules one daemon-reload,
    /// run before the next `service::` call or at the end of the step (not when the step fails: the
    /// drop-in is then put back).
    #[host(ns = "service", effects = [Write])]
    fn drop_in(h: &mut Host, name: S, file: S, content: S) -> bool {
        Ok(super::drop_in(h, &name, &file, &content)?)
    }
}

/// `service::remove_drop_in(name, file)`: remove the drop-in; when it existed, schedule one
/// (coalesced) daemon-reload, recorded ahead of the removal in apply mode as in
/// [`drop_in`].
///
/// # Errors
/// As [`drop_in_path`]; writing the record (apply mode); removal failures.
pub fn remove_drop_in(h: &mut Host, name: &str, file: &str) -> Result<bool> {
    let path = drop_in_path(name, file)?;
    let changed = crate::host::files::fs::remove_with(
        h,
        &path.to_string_lossy(),
        Host::write_ahead_daemon_reload,
    )?;
    if changed {
        h.schedule_daemon_reload();
    }
    Ok(changed)
}

host_fn! {
    /// Remove that drop-in; a change schedules one daemon-reload.
    #[host(ns = "service", effects = [Remove])]
    fn remove_drop_in(h: &mut Host, name: S, file: S) -> bool {
        Ok(super::remove_drop_in(h, &name, &file)?)
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use rhai::ImmutableString as S;
}
use prelude::*;

/// The reference sections of this file's namespaces: `(namespace, heading, introduction)`.
pub(crate) const NAMESPACES: &[(&str, &str, &str)] = &[
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

host_fns!(
    is_active,
    is_enabled,
    show,
    start,
    stop,
    enable,
    disable,
    restart,
    reload,
    daemon_reload,
    drop_in,
    remove_drop_in
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::ExecMode;
    use crate::host::testutil::TestHost;

    /// The exact effects `service::` submits, recorded in a plan (the host is not changed),
    /// and the planned unit state answering the later queries through the read view.
    #[test]
    fn submits_one_effect_per_state_change_and_reads_the_planned_state() {
        let t = TestHost::new();
        t.systemctl_stub();
        t.file("/state/nginx.enabled", "yes\n");
        let mut h = t.host(ExecMode::Plan);
        h.record_effects();
        assert!(start(&mut h, "nginx").unwrap());
        assert!(!enable(&mut h, "nginx").unwrap());
        assert!(is_active(&mut h, "nginx").unwrap());
        assert!(!start(&mut h, "nginx").unwrap());
        assert!(disable(&mut h, "nginx").unwrap());
        assert!(!is_enabled(&mut h, "nginx").unwrap());
        restart(&mut h, "nginx").unwrap();
        assert_eq!(
            format!("{:?}", h.recorded_effects()),
            "[Service { name: \"nginx\", op: Start }, Service { name: \"nginx\", op: Disable }, \
             ServiceAction { name: \"nginx\", action: Restart }]"
        );
        assert_eq!(
            t.calls(),
            [
                "systemctl is-active nginx",
                "systemctl is-enabled nginx",
                "systemctl is-enabled nginx"
            ]
        );
    }
}
