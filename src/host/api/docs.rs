//! One host function's reference row: [`FnDoc`] (its parameters, description and
//! registration) and [`Effects`] (what it reads or the [`EffectKind`]s it submits, from which
//! its behaviour per mode, [`Modes`], is derived). `host_fn!` items in the areas' files
//! make the rows; `crate::script::host_api` gathers and renders them.

use super::Registrar;

/// How a function behaves in the three execution modes: derived from its [`Effects`]
/// ([`Effects::modes`]), one text per behaviour ([`Modes::text`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Modes {
    /// Reads the host; runs in every mode and sees planned changes in plan and check mode.
    Query,
    /// Brings the host to a desired state: performed in apply, recorded (with a diff for
    /// files) in plan, reported as drift in check. Returns whether the state differed.
    Change,
    /// Done every time it is called: run in apply, recorded in plan and check, never drift.
    Action,
    /// A command: run in apply; in plan and check recorded as an action and not run, unless
    /// `read_only`; with a guard (`creates`, `removes`, `unless`, `onlyif`) a change.
    Command,
    /// A read-only command: run in every mode.
    ReadOnlyCommand,
    /// Recorded in the report in every mode, never run by the script; never drift.
    Interrupt,
    /// Reads agent-side data (configMaps, node metadata, secrets, counters) or computes a
    /// value; the same in every mode.
    Context,
}

impl Modes {
    /// The short text of the reference's "modes" column.
    pub fn text(self) -> &'static str {
        match self {
            Modes::Query => "query: runs in every mode; sees planned changes",
            Modes::Change => "change: apply performs; plan records (diff); check: drift",
            Modes::Action => "action: apply runs; plan/check record; never drift",
            Modes::Command => {
                "apply runs; plan/check record as action (unless `read_only`); guarded: a change (skipped when done, drift in check)"
            }
            Modes::ReadOnlyCommand => "query: runs in every mode",
            Modes::Interrupt => {
                "declared in every mode, never run by the step; judged against the Skyhook CR"
            }
            Modes::Context => "same in every mode",
        }
    }
}

pub use crate::host::effects::effect::EffectKind;

/// How an effect of this kind behaves in the modes: a desired state ([`Modes::Change`]),
/// done every time ([`Modes::Action`]), a command or an interrupt.
pub fn kind_modes(kind: EffectKind) -> Modes {
    use EffectKind::*;
    match kind {
        ServiceAction | DaemonReload | GrubUpdate | InitramfsUpdate | PackageUpdate
        | PackageUpgrade => Modes::Action,
        Command | GuardedCommand => Modes::Command,
        Interrupt => Modes::Interrupt,
        Write | Remove | Mkdir | RemoveAll | Chmod | Chown | Mtime | Symlink | Service
        | PackageInstall | PackageRemove | Sysctl | Mount | ModuleLoad | Fetch | PackageHold
        | PackageUnhold | GrubDefault | TunedProfile => Modes::Change,
    }
}

/// What a host function does to the host: reads only (and what), or submits effects of the
/// listed kinds to the session at the call's position (deferred work such as a
/// daemon-reload or a grub regeneration, submitted at the end of the step, is not listed).
/// Checked against what each function really submits in plan mode in tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effects {
    /// Submits nothing; reads the host root (through the plan's overlay).
    ReadsHost,
    /// Submits nothing; runs a read-only command, in every mode.
    RunsReadOnly,
    /// Submits nothing; reads agent-side data (configMaps, node metadata, secrets, counters).
    ReadsAgent,
    /// Submits nothing and reads nothing: computes a value from its arguments.
    Computes,
    /// Submits effects of these kinds (at least one).
    Submits(&'static [EffectKind]),
}

impl Effects {
    /// The behaviour per mode: a read by what it reads; effects by their kinds' behaviour
    /// (`kind_modes`), a command when any is a command, else a change when any is
    /// a change.
    pub fn modes(self) -> Modes {
        match self {
            Effects::ReadsHost => Modes::Query,
            Effects::RunsReadOnly => Modes::ReadOnlyCommand,
            Effects::ReadsAgent | Effects::Computes => Modes::Context,
            Effects::Submits(kinds) => {
                let all: Vec<Modes> = kinds.iter().map(|k| kind_modes(*k)).collect();
                if all.contains(&Modes::Command) {
                    Modes::Command
                } else if all.contains(&Modes::Change) {
                    Modes::Change
                } else if all.contains(&Modes::Action) {
                    Modes::Action
                } else {
                    Modes::Interrupt
                }
            }
        }
    }

    /// The kinds of effect the function may submit at its call (empty for a read).
    pub fn kinds(self) -> &'static [EffectKind] {
        match self {
            Effects::Submits(kinds) => kinds,
            _ => &[],
        }
    }
}

/// One script function (one overload): its reference row and its registration.
#[derive(Debug, Clone, Copy)]
pub struct FnDoc {
    /// Namespace (`fs`, `service`, ...); empty for a global function.
    pub ns: &'static str,
    /// Function name.
    pub name: &'static str,
    /// Parameters: `(name, type)` with Rhai definition types (`String`, `int`, `bool`,
    /// `Map`, `Array`, `?` for several accepted types).
    pub params: &'static [(&'static str, &'static str)],
    /// Return type (Rhai definition type; `?` for "a value or `()`", `()` for none).
    pub returns: &'static str,
    /// One line for script authors.
    pub doc: &'static str,
    /// What the function does to the host; its behaviour per mode follows
    /// ([`FnDoc::modes`]).
    pub effects: Effects,
    /// Registered by the script layer itself (`changed()`), not by [`super::HostApi`].
    pub script_layer: bool,
    /// The keys the function accepts in its `opts` map (empty: it takes no options map).
    /// Checked against the binding's own list in tests; `skyhook-run check` reports any other
    /// key of a literal options map.
    pub options: &'static [&'static str],
    /// Adds the function to the host modules (built once per process; a call serves the run
    /// bound to its thread, [`super::Api::call_current`]); a no-op for script-layer functions.
    pub(crate) register: fn(&mut Registrar),
}

impl FnDoc {
    /// `ns::name` or `name`.
    pub fn full_name(&self) -> String {
        super::fname(self.ns, self.name)
    }

    /// How the function behaves in the three modes, from its [`Effects`].
    pub fn modes(&self) -> Modes {
        self.effects.modes()
    }

    /// `fs::write(path, content, opts)`.
    pub fn call(&self) -> String {
        let names: Vec<&str> = self.params.iter().map(|(n, _)| *n).collect();
        format!("{}({})", self.full_name(), names.join(", "))
    }

    /// `fn write(path: String, content: String) -> bool;`
    pub fn definition(&self) -> String {
        let params: Vec<String> = self
            .params
            .iter()
            .map(|(n, t)| format!("{n}: {t}"))
            .collect();
        format!(
            "fn {}({}) -> {};",
            self.name,
            params.join(", "),
            self.returns
        )
    }
}
