//! Plan mode's commands it does not run (`run`, `sh`): the paths they may touch, and the
//! reads those make unknown ([`Host::check_known`]); and the state queries it runs that
//! leave what it remembered of the real root standing ([`Host::exec_state_query`]).

use super::Host;
use super::host::PlannedCommand;
use crate::host::effects::exec::{CmdOutput, CommandOptions};
use crate::host::effects::overlay::normalize;
use crate::host::effects::report::{ExecMode, Item};
use crate::host::root::error::{HostError, Result};
use std::path::{Path, PathBuf};

/// The absolute paths `words` name: each word split at whitespace and shell punctuation,
/// the pieces that start with `/`, normalised; a piece with a glob character stands for
/// the directory before it (`/etc/x.d/*.conf` names `/etc/x.d`).
fn named_paths<'a>(words: impl IntoIterator<Item = &'a str>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for w in words {
        for piece in w.split(|c: char| c.is_whitespace() || ";|&<>()'\"`=,".contains(c)) {
            if !piece.starts_with('/') {
                continue;
            }
            let piece = match piece.find(['*', '?', '[']) {
                Some(i) => piece[..i].rsplit_once('/').map_or("/", |(d, _)| d),
                None => piece,
            };
            let p = normalize(Path::new(if piece.is_empty() { "/" } else { piece }));
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// What the answer of a state query ([`Host::exec_state_query`]) is read for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StateRead {
    /// Whether a package is installed, a unit's state: what an install, a removal or a
    /// command changes.
    State,
    /// A package's version: what an upgrade changes too.
    Version,
}

impl Host {
    /// Run a query of package or service state that a host function composed itself, in
    /// every mode: `dpkg-query -W` and `rpm -q` (`pkg::`), `systemctl
    /// is-active|is-enabled|show` (`service::`). As [`Host::exec`], except that a plan keeps
    /// what it remembered of the real root across it (overlay, "Real-root lookups"): these
    /// programs only read the host, so the setup port's plan no longer reads
    /// `/etc/os-release` again after each `dpkg-query`. Any other command (a script's
    /// `cmd::query` included: "read-only" is the script's word) still makes the plan forget.
    ///
    /// The callers ask the plan's model first (what the session planned for that package or
    /// unit); a query it does not answer, after a program the plan did not run that may
    /// change its answer, is not run: the apply runs that program first, and its answer
    /// there may differ (an install enables units and pulls in dependencies). Such programs
    /// are a package install or removal, `run` and `sh`
    /// ([`crate::host::effects::effect::Effect::may_change_packages`]) for every query, and
    /// a package upgrade too for a query of a package's version (`read` [`StateRead::Version`]).
    ///
    /// # Errors
    /// [`HostError::PlanUnknownQuery`] as above; as [`Host::exec`].
    pub(crate) fn exec_state_query(
        &self,
        argv: &[String],
        opts: &CommandOptions,
        read: StateRead,
    ) -> Result<CmdOutput> {
        let upgrade = match read {
            StateRead::Version => self.unplanned.upgrade.as_ref(),
            StateRead::State => None,
        };
        if let Some(c) = self.unplanned.packages.as_ref().or(upgrade) {
            return Err(HostError::PlanUnknownQuery {
                query: crate::host::effects::exec::quote_argv(argv),
                command: c.command.clone(),
                position: c.position.as_ref().map(ToString::to_string),
            });
        }
        self.flush_batch()?;
        crate::host::effects::exec::exec(&self.cx, argv, opts)
    }

    /// Plan mode: `argv` was planned, not run (`run`, `sh`), with `guard_paths` (its
    /// `creates`/`removes` paths): what it changes is unknown, so later reads of what it
    /// may have touched fail with [`HostError::PlanUnknown`] ([`Host::check_known`]).
    /// Nothing in apply and check mode (a check judges the host as it is).
    pub(crate) fn note_planned_command(&mut self, argv: &[String], guard_paths: &[String]) {
        if self.mode() != ExecMode::Plan {
            return;
        }
        let words = argv.iter().chain(guard_paths).map(String::as_str);
        self.planned_commands.push(PlannedCommand {
            command: crate::host::effects::exec::quote_argv(argv),
            position: self.position.clone(),
            paths: named_paths(words),
        });
    }

    /// `Ok` unless a command the plan did not run may have touched `path`
    /// ([`Host::note_planned_command`]): a path at or under one the command names (in its
    /// arguments, a shell script's text included, or its guards); with `listing`, also a
    /// directory above one it names; and any path that does not exist as the session sees
    /// it (a command may have made it, whatever it names).
    ///
    /// # Errors
    /// [`HostError::PlanUnknown`] naming the command; resolution failures.
    pub(crate) fn check_known_as(&self, path: &Path, listing: bool) -> Result<()> {
        if self.planned_commands.is_empty() {
            return Ok(());
        }
        let p = normalize(path);
        let named = self.planned_commands.iter().find(|c| {
            c.paths
                .iter()
                .any(|t| p.starts_with(t) || (listing && t.starts_with(&p)))
        });
        let command = match named {
            Some(c) => c,
            None => {
                let exists = match self.executor.overlay() {
                    Some(o) => o.stat(&self.cx.root, path, true)?.is_some(),
                    None => true,
                };
                if exists {
                    return Ok(());
                }
                &self.planned_commands[0]
            }
        };
        Err(HostError::PlanUnknown {
            path: path.to_path_buf(),
            command: command.command.clone(),
            position: command.position.as_ref().map(ToString::to_string),
        })
    }

    /// Plan mode: the first command the session's plan recorded without running it (its
    /// command line or action summary, and where the script planned it as `file:line`), if
    /// any: a later call failing in a way that depends on the host
    /// ([`HostError::depends_on_host`]) is unknown ([`HostError::PlanUnknownFailure`], made
    /// by the binding layer), since the apply runs the command first.
    pub(crate) fn unplanned_command(&self) -> Option<(&str, Option<String>)> {
        self.unplanned.any.as_ref().map(|c| {
            (
                c.command.as_str(),
                c.position.as_ref().map(ToString::to_string),
            )
        })
    }

    /// [`Host::check_known_as`] for a read of `path` itself (not a listing).
    ///
    /// # Errors
    /// As [`Host::check_known_as`].
    pub(crate) fn check_known(&self, path: &Path) -> Result<()> {
        self.check_known_as(path, false)
    }

    /// List the call `fname` that failed with `e` ([`HostError::PlanUnknown`]) in the step's
    /// ordered list as unknown, at the call's position.
    pub(crate) fn note_unknown(&mut self, fname: &str, e: &HostError) {
        self.journal.push(Item::Unknown {
            summary: format!("{fname}: {e}; the rest of the step is checked statically only"),
            position: self.position.clone(),
        });
    }
}
