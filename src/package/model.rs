//! The config.json model (contract 5.1): modes, steps, return codes.
//!
//! Values are kept as written in config.json (arguments before `env:` substitution, return
//! codes with their JSON number kind) because the flag names of the Python agent (contract 6.2)
//! are computed from the step as configured.

use std::fmt;
use std::str::FromStr;

/// A mode of the agent (the first command-line argument), in the Python agent's spelling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// `uninstall`
    Uninstall,
    /// `uninstall-check`
    UninstallCheck,
    /// `upgrade`
    Upgrade,
    /// `upgrade-check`
    UpgradeCheck,
    /// `apply`
    Apply,
    /// `apply-check`
    ApplyCheck,
    /// `config`
    Config,
    /// `config-check`
    ConfigCheck,
    /// `interrupt` (its steps are loaded and must exist, but never run)
    Interrupt,
    /// `post-interrupt`
    PostInterrupt,
    /// `post-interrupt-check`
    PostInterruptCheck,
}

impl Mode {
    /// Every mode, in the Python agent's enum order (used in the unknown-mode warning).
    pub const ALL: [Mode; 11] = [
        Mode::Uninstall,
        Mode::UninstallCheck,
        Mode::Upgrade,
        Mode::UpgradeCheck,
        Mode::Apply,
        Mode::ApplyCheck,
        Mode::Config,
        Mode::ConfigCheck,
        Mode::Interrupt,
        Mode::PostInterrupt,
        Mode::PostInterruptCheck,
    ];

    /// The non-check modes that need a paired check mode, in the order contract 5.2 checks
    /// them (`uninstall`, `upgrade`, `apply`, `config`, `post-interrupt`).
    pub const RUN: [Mode; 5] = [
        Mode::Uninstall,
        Mode::Upgrade,
        Mode::Apply,
        Mode::Config,
        Mode::PostInterrupt,
    ];

    /// The mode's name as written on the command line and as a `modes` key
    /// (`post-interrupt-check`).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Uninstall => "uninstall",
            Mode::UninstallCheck => "uninstall-check",
            Mode::Upgrade => "upgrade",
            Mode::UpgradeCheck => "upgrade-check",
            Mode::Apply => "apply",
            Mode::ApplyCheck => "apply-check",
            Mode::Config => "config",
            Mode::ConfigCheck => "config-check",
            Mode::Interrupt => "interrupt",
            Mode::PostInterrupt => "post-interrupt",
            Mode::PostInterruptCheck => "post-interrupt-check",
        }
    }

    /// Parse a mode name (exact, case-sensitive); `None` for anything else.
    pub fn parse(s: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.as_str() == s)
    }

    /// True for the five `-check` modes.
    pub fn is_check(self) -> bool {
        matches!(
            self,
            Mode::UninstallCheck
                | Mode::UpgradeCheck
                | Mode::ApplyCheck
                | Mode::ConfigCheck
                | Mode::PostInterruptCheck
        )
    }

    /// The check mode paired with a run mode (`apply` → `apply-check`); `None` for check modes
    /// and `interrupt`.
    pub fn check_mode(self) -> Option<Mode> {
        match self {
            Mode::Uninstall => Some(Mode::UninstallCheck),
            Mode::Upgrade => Some(Mode::UpgradeCheck),
            Mode::Apply => Some(Mode::ApplyCheck),
            Mode::Config => Some(Mode::ConfigCheck),
            Mode::PostInterrupt => Some(Mode::PostInterruptCheck),
            _ => None,
        }
    }

    /// The run mode a check mode checks (`apply-check` → `apply`); other modes map to
    /// themselves.
    pub fn run_mode(self) -> Mode {
        match self {
            Mode::UninstallCheck => Mode::Uninstall,
            Mode::UpgradeCheck => Mode::Upgrade,
            Mode::ApplyCheck => Mode::Apply,
            Mode::ConfigCheck => Mode::Config,
            Mode::PostInterruptCheck => Mode::PostInterrupt,
            other => other,
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of [`Mode::from_str`]: the string is not a mode name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown mode '{0}'")]
pub struct UnknownMode(pub String);

impl FromStr for Mode {
    type Err = UnknownMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Mode::parse(s).ok_or_else(|| UnknownMode(s.to_string()))
    }
}

/// One entry of a step's `returncodes`.
///
/// The Python schema check accepts integral floats (`1.0`) as integers; Python then keeps
/// them as floats, which compare equal to the exit status but render as `1.0` in flag names
/// (contract 5.1, 6.2). `float` records that the JSON number was written as a float.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReturnCode {
    /// The numeric value.
    pub value: i64,
    /// True when config.json wrote it as a float (`1.0`, `1e0`).
    pub float: bool,
}

impl ReturnCode {
    /// An integer return code.
    pub fn int(value: i64) -> Self {
        ReturnCode {
            value,
            float: false,
        }
    }
}

impl fmt::Display for ReturnCode {
    /// Python's `repr`: `1` for an int, `1.0` for a float.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.float {
            f.write_str(&crate::pyfmt::float_repr(self.value as f64))
        } else {
            write!(f, "{}", self.value)
        }
    }
}

/// One step of a mode, as configured in config.json.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// Display name (`^[a-zA-Z0-9_\-.]+$`).
    pub name: String,
    /// Path of the step file relative to `skyhook_dir`; may contain `/`.
    pub path: String,
    /// Arguments as configured (before `env:` substitution and upgrade versions).
    pub arguments: Vec<String>,
    /// Exit statuses counted as success (at least one).
    pub returncodes: Vec<ReturnCode>,
    /// Run chrooted into the host root (contract 8.5).
    pub on_host: bool,
    /// `true` means the agent does NOT manage idempotence: the step runs every time.
    pub idempotence: bool,
    /// An UpgradeStep: receives previous and current version as extra arguments (7.5).
    pub upgrade_step: bool,
    /// Extra environment for the step, in file order.
    pub env: Vec<(String, String)>,
}

impl Step {
    /// True when the exit `status` is one of the step's return codes (numeric comparison, so
    /// `1.0` accepts 1).
    pub fn accepts(&self, status: i32) -> bool {
        self.returncodes
            .iter()
            .any(|c| c.value == i64::from(status))
    }

    /// The Python agent's name for the step's idempotence: `Idempotence.Auto` when
    /// `idempotence` is false (flag-managed), `Idempotence.Disabled` when true.
    pub fn idempotence_label(&self) -> &'static str {
        if self.idempotence {
            "Idempotence.Disabled"
        } else {
            "Idempotence.Auto"
        }
    }
}

/// A loaded, validated config.json.
#[derive(Clone, Debug, PartialEq)]
pub struct Package {
    /// `schema_version` (always `v1` once loaded).
    pub schema_version: String,
    /// `package_name`.
    pub package_name: String,
    /// `package_version` (semver-shaped).
    pub package_version: String,
    /// `expected_config_files`: names that must exist under the package's `configmaps`.
    pub expected_config_files: Vec<String>,
    /// The `modes` keys present in the file, in file order, with their steps.
    pub modes: Vec<(Mode, Vec<Step>)>,
}

impl Package {
    /// The steps of `mode`, empty when the key is absent.
    pub fn steps(&self, mode: Mode) -> &[Step] {
        self.modes
            .iter()
            .find(|(m, _)| *m == mode)
            .map_or(&[], |(_, s)| s.as_slice())
    }

    /// True when `mode` is present as a key in `modes` (even with an empty list).
    pub fn has_mode_key(&self, mode: Mode) -> bool {
        self.modes.iter().any(|(m, _)| *m == mode)
    }

    /// Every step of every mode, in file order, with its mode.
    pub fn all_steps(&self) -> impl Iterator<Item = (Mode, &Step)> {
        self.modes
            .iter()
            .flat_map(|(m, steps)| steps.iter().map(move |s| (*m, s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_names_round_trip() {
        let names: Vec<_> = Mode::ALL.iter().map(|m| m.as_str()).collect();
        assert_eq!(
            names.join(","),
            "uninstall,uninstall-check,upgrade,upgrade-check,apply,apply-check,config,\
             config-check,interrupt,post-interrupt,post-interrupt-check"
        );
        for m in Mode::ALL {
            assert_eq!(Mode::parse(m.as_str()), Some(m));
            assert_eq!(m.as_str().parse::<Mode>(), Ok(m));
            assert_eq!(m.to_string(), m.as_str());
        }
        assert_eq!(Mode::parse("Apply"), None);
        assert_eq!(
            "future-stage".parse::<Mode>().unwrap_err().to_string(),
            "unknown mode 'future-stage'"
        );
    }

    #[test]
    fn mode_pairs() {
        assert_eq!(Mode::Apply.check_mode(), Some(Mode::ApplyCheck));
        assert_eq!(
            Mode::PostInterrupt.check_mode(),
            Some(Mode::PostInterruptCheck)
        );
        assert_eq!(Mode::ApplyCheck.check_mode(), None);
        assert_eq!(Mode::Interrupt.check_mode(), None);
        assert_eq!(Mode::ApplyCheck.run_mode(), Mode::Apply);
        assert_eq!(Mode::UninstallCheck.run_mode(), Mode::Uninstall);
        assert_eq!(Mode::Config.run_mode(), Mode::Config);
        assert_eq!(Mode::Interrupt.run_mode(), Mode::Interrupt);
        let checks: Vec<_> = Mode::ALL.into_iter().filter(|m| m.is_check()).collect();
        assert_eq!(checks.len(), 5);
        assert!(!Mode::Interrupt.is_check());
    }

    #[test]
    fn return_codes_render_and_compare() {
        let float = ReturnCode {
            value: 1,
            float: true,
        };
        assert_eq!(float.to_string(), "1.0");
        assert_eq!(ReturnCode::int(-1).to_string(), "-1");
        let step = Step {
            name: "s".into(),
            path: "s.sh".into(),
            arguments: vec![],
            returncodes: vec![ReturnCode::int(0), float],
            on_host: true,
            idempotence: false,
            upgrade_step: false,
            env: vec![],
        };
        assert!(step.accepts(0));
        assert!(step.accepts(1));
        assert!(!step.accepts(2));
        assert_eq!(step.idempotence_label(), "Idempotence.Auto");
        let always = Step {
            idempotence: true,
            ..step
        };
        assert_eq!(always.idempotence_label(), "Idempotence.Disabled");
    }

    #[test]
    fn return_code_lists_render_as_python_repr() {
        assert_eq!(
            crate::pyfmt::repr_codes(&[
                ReturnCode::int(0),
                ReturnCode::int(1),
                ReturnCode::int(-1)
            ]),
            "[0, 1, -1]"
        );
        assert_eq!(
            crate::pyfmt::repr_codes(&[ReturnCode {
                value: 1,
                float: true
            }]),
            "[1.0]"
        );
    }
}
