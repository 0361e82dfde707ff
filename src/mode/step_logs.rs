//! The log files of one executed step or interrupt command (agent-contract.md 6.5) and
//! their retention.

use std::path::{Path, PathBuf};

use crate::host::root::HostRoot;
use crate::host::root::run_dirs::RunDirs;
use crate::logs::retention::{self, DEFAULT_KEEP, LogIndex};
use crate::logs::sink::{StepLogFiles, open_step_logs, open_step_logs_in};

use super::console::Console;
use super::error::ModeError;

/// Log files kept per step, the new one included (6.5).
pub const LOGS_KEPT: usize = DEFAULT_KEEP;

/// Create the log files of one step (`base`: its path, or `interrupts/<type>_<i>`) under
/// `log_dir` (a host path), or none when `write_logs` is false. Also returns the step's
/// older logs (newest first) for [`prune`] after the step, so retention does not list the
/// directory again.
///
/// # Errors
/// [`ModeError::Logs`]: the files cannot be created (the message names the path).
pub fn open(
    root: &HostRoot,
    write_logs: bool,
    log_dir: &Path,
    base: &str,
) -> Result<(Option<StepLogFiles>, Vec<PathBuf>), ModeError> {
    if !write_logs {
        return Ok((None, Vec::new()));
    }
    let mut logs = open_step_logs(root, log_dir, base, crate::clock::now_utc())?;
    let previous = std::mem::take(&mut logs.previous);
    Ok((Some(logs), previous))
}

/// [`open`] for a run of many steps: the step's older logs come from `index` (each log
/// directory is listed once per run, not once per step), the index notes the new log and
/// what [`prune`] will keep, and the files are created in the log directory's descriptor
/// that `dirs` keeps for the run (resolved once per run, not twice per step).
///
/// # Errors
/// As [`open`].
pub fn open_indexed(
    root: &HostRoot,
    dirs: &RunDirs,
    index: &LogIndex,
    write_logs: bool,
    log_dir: &Path,
    base: &str,
) -> Result<(Option<StepLogFiles>, Vec<PathBuf>), ModeError> {
    if !write_logs {
        return Ok((None, Vec::new()));
    }
    let listed = index.list(root, log_dir, base).map_err(ModeError::from)?;
    let mut logs = open_step_logs_in(
        dirs,
        root,
        log_dir,
        base,
        crate::clock::now_utc(),
        listed.clone(),
    )?;
    index.created(log_dir, base, &logs.out_path, &listed, LOGS_KEPT);
    let previous = std::mem::take(&mut logs.previous);
    Ok((Some(logs), previous))
}

/// Retention after a step ran: of the `previous` logs (newest first, from [`open`]) keep
/// [`LOGS_KEPT`]` - 1` beside the new one. A failure only warns.
pub fn prune(root: &HostRoot, console: &Console, base: &str, previous: &[PathBuf]) {
    if let Err(e) = retention::prune_listed(root, previous, LOGS_KEPT - 1) {
        console.warn(&format!(
            "log retention for {base}: {}",
            crate::chain::render(&e)
        ));
    }
}

/// [`prune`] removing the files in their directory's descriptor that `dirs` keeps for the
/// run (see [`open_indexed`]). A failure only warns.
pub fn prune_in(
    root: &HostRoot,
    dirs: &RunDirs,
    console: &Console,
    base: &str,
    previous: &[PathBuf],
) {
    if let Err(e) = retention::prune_listed_in(Some(dirs), root, previous, LOGS_KEPT - 1) {
        console.warn(&format!(
            "log retention for {base}: {}",
            crate::chain::render(&e)
        ));
    }
}
