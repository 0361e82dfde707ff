//! TuneD: the active profile (`tuned_adm::active`), activating one (`tuned_adm::profile`),
//! turning tuning off (`tuned_adm::off`) and `tuned-adm verify` (`tuned_adm::verify`).
//!
//! The active profile is what `/etc/tuned/active_profile` holds (tuned writes the names
//! given to `tuned-adm profile` there, space-separated), read through the session's view so
//! a profile planned earlier in the session answers. Activation and `off` are changes
//! ([`Effect::TunedProfile`]): submitted only when the active profile differs, drift in a
//! check, run as `tuned-adm profile <names>` / `tuned-adm off` (chrooted, checked) in apply.
//! A command, so never undone by a failed step's journal.

use std::path::{Path, PathBuf};

use crate::host::Host;
use crate::host::effects::effect::Effect;
use crate::host::effects::exec::CommandOptions;
use crate::host::root::error::{HostError, Result};

/// Where tuned keeps the active profile's names.
pub use crate::host::effects::effect::TUNED_ACTIVE_PROFILE as ACTIVE_PROFILE;

/// The directories a profile `<name>/tuned.conf` is looked up in, in tuned's order: the
/// user's (`/etc/tuned`, `/etc/tuned/profiles` since tuned 2.23), then the system's.
pub const PROFILE_DIRS: &[&str] = &[
    "/etc/tuned",
    "/etc/tuned/profiles",
    "/usr/lib/tuned",
    "/usr/lib/tuned/profiles",
];

fn check_name(name: &str) -> Result<()> {
    let bad = name.is_empty()
        || name == "."
        || name == ".."
        || name.starts_with('-')
        || name.contains(['/', '\0'])
        || name.chars().any(char::is_whitespace);
    if bad {
        return Err(HostError::Invalid {
            what: "tuned profile name",
            message: format!("{name:?} (a single name: no '/', no whitespace, no leading '-')"),
        });
    }
    Ok(())
}

/// `tuned_adm::active()`: the active profile's names as tuned records them (one name, or
/// several separated by one space), `None` when no profile is active (the file absent or
/// blank).
///
/// # Errors
/// Reading `/etc/tuned/active_profile` (not a regular file, unreadable).
pub fn active(h: &mut Host) -> Result<Option<String>> {
    let Some(bytes) = h.view_read(Path::new(ACTIVE_PROFILE))? else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&bytes);
    let names: Vec<&str> = text.split_whitespace().collect();
    Ok((!names.is_empty()).then(|| names.join(" ")))
}

host_fn! {
    /// The active profile's names (`"nvidia-h100-inference"`, several separated by one space), or
    /// `()` when none is active.
    #[host(ns = "tuned_adm", effects = ReadsHost)]
    fn active(h: &mut Host) -> rhai::Dynamic {
        Ok(convert::opt(super::active(h)?))
    }
}

/// The `tuned.conf` of profile `name` in the session's view: the first of [`PROFILE_DIRS`]
/// that has it; `None` when no directory does.
///
/// # Errors
/// An invalid name; stat failures.
pub fn profile_conf(h: &Host, name: &str) -> Result<Option<PathBuf>> {
    check_name(name)?;
    for dir in PROFILE_DIRS {
        let conf = Path::new(dir).join(name).join("tuned.conf");
        if h.view_stat(&conf, true)?.is_some_and(|s| s.kind == "file") {
            return Ok(Some(conf));
        }
    }
    Ok(None)
}

/// Whether `tuned-adm` is on the host (in `/usr/sbin`, `/usr/bin`, `/sbin` or `/bin`).
fn installed(h: &Host) -> Result<bool> {
    for dir in ["/usr/sbin", "/usr/bin", "/sbin", "/bin"] {
        if h.view_stat(&Path::new(dir).join("tuned-adm"), true)?
            .is_some()
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `tuned_adm::profile(names)`: make `names` (one or more profiles, merged by tuned in
/// that order) the active profile with `tuned-adm profile <names>` unless it is already.
/// Returns true when changed.
///
/// # Errors
/// No name, an invalid name, a profile with no `tuned.conf` in [`PROFILE_DIRS`] (named,
/// with the directories looked in) while `tuned-adm` is installed (before, as in a dry run
/// that only plans tuned's install, its system profiles cannot be known); `tuned-adm`
/// missing or failing (apply).
pub fn profile(h: &mut Host, names: &[String]) -> Result<bool> {
    if names.is_empty() {
        return Err(HostError::Invalid {
            what: "tuned profile",
            message: "no profile name given".into(),
        });
    }
    let installed = installed(h)?;
    for n in names {
        if profile_conf(h, n)?.is_none() && installed {
            return Err(HostError::Invalid {
                what: "tuned profile",
                message: format!("{n:?} has no tuned.conf in {}", PROFILE_DIRS.join(", ")),
            });
        }
    }
    if active(h)?.as_deref() == Some(names.join(" ").as_str()) {
        h.note_unchanged();
        return Ok(false);
    }
    h.submit(Effect::TunedProfile {
        names: names.to_vec(),
    })?;
    Ok(true)
}

host_fn! {
    /// Make a profile (a name; several in a string separated by spaces or in an array, merged by
    /// tuned in that order) the active one with `tuned-adm profile <names>`, unless it is already.
    /// A name without a `tuned.conf` is an error naming it.
    #[host(ns = "tuned_adm", effects = [TunedProfile])]
    fn profile(h: &mut Host, names: Dynamic) -> bool {
        let names: Vec<String> = if names.is_string() {
            convert::string(&names, "names")?
                .split_whitespace()
                .map(String::from)
                .collect()
        } else {
            convert::string_or_array(&names, "names")?
        };
        Ok(super::profile(h, &names)?)
    }
}

/// `tuned_adm::off()`: `tuned-adm off` when a profile is active. Returns true when changed.
///
/// # Errors
/// As [`active`]; `tuned-adm` missing or failing (apply).
pub fn off(h: &mut Host) -> Result<bool> {
    if active(h)?.is_none() {
        h.note_unchanged();
        return Ok(false);
    }
    h.submit(Effect::TunedProfile { names: Vec::new() })?;
    Ok(true)
}

host_fn! {
    /// `tuned-adm off` when a profile is active (tuned stops tuning; what it set is rolled back).
    #[host(ns = "tuned_adm", effects = [TunedProfile])]
    fn off(h: &mut Host) -> bool {
        Ok(super::off(h)?)
    }
}

/// `tuned_adm::verify()`: `tuned-adm verify` exits 0 (the live settings match the active
/// profile; it fails while a `[bootloader]` change waits for a reboot). A query, run in
/// every mode; its reasons are in tuned's log (`/var/log/tuned/tuned.log`).
///
/// # Errors
/// `tuned-adm` missing or failing to start.
pub fn verify(h: &mut Host) -> Result<bool> {
    let argv = vec!["tuned-adm".to_string(), "verify".to_string()];
    let opts = CommandOptions {
        read_only: true,
        ..CommandOptions::default()
    };
    Ok(h.exec(&argv, &opts)?.ok)
}

host_fn! {
    /// `tuned-adm verify` succeeds: the live settings match the active profile (false while a
    /// `[bootloader]` change waits for a reboot; the reasons are in `/var/log/tuned/tuned.log`).
    #[host(ns = "tuned_adm", effects = RunsReadOnly)]
    fn verify(h: &mut Host) -> bool {
        Ok(super::verify(h)?)
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::convert;
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use rhai::Dynamic;
}
use prelude::*;

host_fns!(active, profile, off, verify);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::ExecMode;
    use crate::host::testutil::TestHost;

    /// A tuned-adm (shell builtins only) that keeps the active profile as tuned does;
    /// `verify` fails while /state/tuned.pending exists.
    const TUNED_ADM: &str = r#"case "$1" in
  profile) shift; echo "$*" > /etc/tuned/active_profile ;;
  off) : > /etc/tuned/active_profile ;;
  verify) [ -s /etc/tuned/active_profile ] && [ ! -e /state/tuned.pending ] ;;
esac"#;

    fn host_with_tuned() -> TestHost {
        let t = TestHost::new();
        t.install_sh();
        t.stub("tuned-adm", TUNED_ADM);
        t.file("/usr/lib/tuned/balanced/tuned.conf", "[main]\n");
        t.file("/etc/tuned/mine/tuned.conf", "[main]\ninclude=balanced\n");
        std::fs::create_dir_all(t.p("/state")).unwrap();
        t
    }

    /// A change only when the active profile differs; the plan's view answers later
    /// queries; apply runs tuned-adm once.
    #[test]
    fn profile_is_a_change_only_when_the_active_profile_differs() {
        let t = host_with_tuned();
        let names = vec!["mine".to_string(), "balanced".to_string()];
        let mut h = t.host(ExecMode::Plan);
        h.record_effects();
        assert_eq!(active(&mut h).unwrap(), None);
        assert!(profile(&mut h, &names).unwrap());
        assert_eq!(active(&mut h).unwrap().as_deref(), Some("mine balanced"));
        assert!(!profile(&mut h, &names).unwrap());
        assert!(off(&mut h).unwrap());
        assert_eq!(active(&mut h).unwrap(), None);
        assert!(!off(&mut h).unwrap());
        assert_eq!(
            format!("{:?}", h.recorded_effects()),
            "[TunedProfile { names: [\"mine\", \"balanced\"] }, TunedProfile { names: [] }]"
        );
        assert!(!t.p(ACTIVE_PROFILE).exists(), "a plan changed the host");
        assert_eq!(t.calls(), Vec::<String>::new());

        let mut h = t.host(ExecMode::Apply);
        assert!(profile(&mut h, &names).unwrap());
        assert!(!profile(&mut h, &names).unwrap());
        assert!(verify(&mut h).unwrap());
        t.file("/state/tuned.pending", "");
        assert!(!verify(&mut h).unwrap());
        assert!(off(&mut h).unwrap());
        assert_eq!(
            t.calls(),
            [
                "tuned-adm profile mine balanced",
                "tuned-adm verify",
                "tuned-adm verify",
                "tuned-adm off"
            ]
        );
    }

    /// An unknown profile or a bad name fails before anything is submitted, naming it.
    #[test]
    fn unknown_or_invalid_profile_names_fail_clearly() {
        let t = host_with_tuned();
        let mut h = t.host(ExecMode::Apply);
        let err = profile(&mut h, &["nope".to_string()])
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "invalid tuned profile: \"nope\" has no tuned.conf in /etc/tuned, \
             /etc/tuned/profiles, /usr/lib/tuned, /usr/lib/tuned/profiles"
        );
        let err = profile(&mut h, &["../x".to_string()])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("invalid tuned profile name: \"../x\""),
            "{err}"
        );
        let err = profile(&mut h, &[]).unwrap_err().to_string();
        assert_eq!(err, "invalid tuned profile: no profile name given");
        assert_eq!(t.calls(), Vec::<String>::new());
        assert!(!t.p(ACTIVE_PROFILE).exists());
    }

    /// The plan's JSON names the change `tuned_profile`, holds to `docs/plan.schema.json`,
    /// and its summary says what is active now.
    #[test]
    fn the_change_holds_to_the_plan_schema() {
        let t = host_with_tuned();
        t.file(ACTIVE_PROFILE, "balanced\n");
        let mut h = t.host(ExecMode::Plan);
        assert!(profile(&mut h, &["mine".to_string()]).unwrap());
        let rep = h.finish().unwrap();
        let json = rep.to_json(&crate::host::secrets::Redactor::default());
        assert_eq!(json["changes"][0]["kind"], "tuned_profile");
        assert_eq!(json["changes"][0]["target"], "tuned");
        assert_eq!(
            json["changes"][0]["summary"],
            "tuned-adm profile mine (active: balanced)"
        );
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/plan.schema.json"),
        )
        .unwrap();
        let mut schema: serde_json::Value = serde_json::from_str(&text).unwrap();
        schema["oneOf"] = serde_json::json!([{ "$ref": "#/$defs/report" }]);
        let v = jsonschema::draft202012::options().build(&schema).unwrap();
        let errors: Vec<String> = v.iter_errors(&json).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{errors:#?}\n{json:#}");
    }
}
