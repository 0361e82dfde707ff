//! The apply executor: performs each [`Effect`] on the host.
//!
//! File effects go through [`crate::host::root::HostRoot`] (root-confined), their files
//! fsynced before the rename and their directories noted for the step's end; service, package
//! and grub effects run their commands through the same path as `run` (chrooted, own process
//! group, checked); `mount`/`umount` in the host's mount namespace when the agent is in
//! another one ([`crate::host::root::mount_ns`]).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{Deferred, Executor};
use crate::host::effects::context::Context;
use crate::host::effects::effect::{Effect, GrubUpdate, PkgManager};
use crate::host::effects::exec::{CmdOutput, CommandOptions, exec, exec_in};
use crate::host::effects::journal::{Before, StepJournal};
use crate::host::effects::report::ExecMode;
use crate::host::root::DirSync;
use crate::host::root::deferred;
use crate::host::root::error::{HostError, Result};

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|s| s.to_string()).collect()
}

/// The apply executor: changes the host, with an undo journal of the step's files when
/// built with [`Apply::journaled`].
#[derive(Debug, Default)]
pub struct Apply {
    /// The step's undo journal ([`crate::host::effects::journal`]); behind a mutex because
    /// batched writes reach the executor through `&self`.
    journal: Option<Mutex<StepJournal>>,
}

impl Apply {
    /// An apply executor that journals the before-state of every file it changes for the
    /// step labelled `label` (`<package>-<step>`).
    pub(crate) fn journaled(label: &str) -> Apply {
        Apply {
            journal: Some(Mutex::new(StepJournal::new(label))),
        }
    }

    fn journal(&self) -> Option<std::sync::MutexGuard<'_, StepJournal>> {
        self.journal
            .as_ref()
            .map(|j| j.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Journal `effect`'s before-state (a line edit's lines when `line_edit`), then perform
    /// it, unless the journal made the change itself (a removal moved aside, whose
    /// directory is then noted for the step's fsync).
    fn journaled_perform(
        &self,
        cx: &Context,
        effect: &Effect,
        line_edit: bool,
    ) -> Result<Option<CmdOutput>> {
        if let Some(mut j) = self.journal()
            && j.before(&cx.root, effect, line_edit)? == Before::Done
        {
            if let Effect::RemoveFile { path } | Effect::RemoveAll { path } = effect {
                cx.dir_syncs.add_parent_of(path);
            }
            return Ok(None);
        }
        perform(cx, effect)
    }
}

impl Executor for Apply {
    fn mode(&self) -> ExecMode {
        ExecMode::Apply
    }

    fn execute(&mut self, cx: &Context, effect: &Effect) -> Result<Option<CmdOutput>> {
        self.journaled_perform(cx, effect, false)
    }

    fn execute_line_edit(&mut self, cx: &Context, effect: &Effect) -> Result<Option<CmdOutput>> {
        self.journaled_perform(cx, effect, true)
    }

    fn execute_batched(&self, cx: &Context, effect: &Effect) -> Result<()> {
        // The session's batch holds line and block edits only.
        self.journaled_perform(cx, effect, true).map(drop)
    }

    fn journal_failure(&self) -> Option<String> {
        self.journal().and_then(|j| j.failure().map(str::to_string))
    }

    fn changes_host(&self) -> bool {
        true
    }

    fn journals(&self) -> bool {
        self.journal.is_some()
    }

    fn journal_ahead(&self, cx: &Context, effects: &[Effect]) -> Result<()> {
        match self.journal() {
            Some(mut j) => j.ahead(&cx.root, effects),
            None => Ok(()),
        }
    }

    fn journal_path(&self, cx: &Context, path: &Path) -> Result<()> {
        match self.journal() {
            Some(mut j) => j.before_path(&cx.root, path),
            None => Ok(()),
        }
    }

    fn record_deferred(&self, cx: &Context, record: Deferred<'_>, journal: bool) -> Result<bool> {
        if journal {
            self.journal_path(cx, &record.path())?;
        }
        match record {
            Deferred::DaemonReload => deferred::record_daemon_reload(&cx.root)?,
            Deferred::Grub(pending) => deferred::record_grub(&cx.root, pending)?,
            Deferred::Initramfs => deferred::record_initramfs(&cx.root)?,
        }
        Ok(true)
    }

    fn clear_deferred(&self, cx: &Context, path: &Path) -> Result<bool> {
        deferred::clear(&cx.root, path)?;
        Ok(true)
    }

    fn commit_step(&mut self, cx: &Context) -> Result<()> {
        match self.journal() {
            Some(mut j) => j.commit(&cx.root),
            None => Ok(()),
        }
    }

    fn undo(&mut self, cx: &Context) -> Result<Vec<String>> {
        match self.journal() {
            Some(mut j) => j.undo(&cx.root),
            None => Ok(Vec::new()),
        }
    }
}

/// Run an internal command (checked; `env` added to the step's environment).
fn internal(cx: &Context, words: Vec<String>, env: Vec<(String, String)>) -> Result<CmdOutput> {
    let opts = CommandOptions {
        check: true,
        env,
        ..CommandOptions::default()
    };
    exec(cx, &words, &opts)
}

/// The package managers' lock wait in seconds: the configured bound, capped by what remains
/// of the step's deadline, at least 1.
fn lock_secs(cx: &Context) -> u64 {
    let mut d = cx.opts.package_lock_timeout;
    if let Some(r) = cx.remaining() {
        d = d.min(r);
    }
    d.as_secs().max(1)
}

/// The command lines that install or remove `names` with `manager`, in order, with the extra
/// environment they need. Public within the crate so the tests can assert them.
pub(crate) fn package_commands(
    manager: PkgManager,
    install: bool,
    update: bool,
    names: &[String],
    lock_secs: u64,
) -> (Vec<Vec<String>>, Vec<(String, String)>) {
    let verb = if install { "install" } else { "remove" };
    let mut cmds = Vec::new();
    let env = match manager {
        PkgManager::Apt => {
            let lock = format!("DPkg::Lock::Timeout={lock_secs}");
            if update {
                cmds.push(argv(&["apt-get", "-o", &lock, "update"]));
            }
            let mut c = argv(&["apt-get", "-y", "-o", &lock, verb]);
            // A pinned version may be older than the installed one.
            if install && names.iter().any(|n| n.contains('=')) {
                c.push("--allow-downgrades".into());
            }
            c.extend(names.iter().cloned());
            cmds.push(c);
            vec![("DEBIAN_FRONTEND".into(), "noninteractive".into())]
        }
        PkgManager::Dnf | PkgManager::Yum => {
            let tool = manager.name();
            if update {
                cmds.push(argv(&[tool, "-y", "makecache"]));
            }
            let mut c = argv(&[tool, "-y", verb]);
            c.extend(names.iter().cloned());
            cmds.push(c);
            Vec::new()
        }
        PkgManager::Zypper => {
            if update {
                cmds.push(argv(&["zypper", "--non-interactive", "refresh"]));
            }
            let mut c = argv(&["zypper", "--non-interactive", verb]);
            c.extend(names.iter().cloned());
            cmds.push(c);
            vec![("ZYPP_LOCK_TIMEOUT".into(), lock_secs.to_string())]
        }
    };
    (cmds, env)
}

/// The command line that refreshes the package index (`upgrade` false) or upgrades every
/// installed package with `manager`, non-interactively; with `lock_secs` apt waits that long
/// for its lock (the plan's summary leaves it out). Run with [`package_commands`]'s
/// environment (`DEBIAN_FRONTEND=noninteractive` for apt).
pub(crate) fn upgrade_command(
    manager: PkgManager,
    upgrade: bool,
    lock_secs: Option<u64>,
) -> Vec<String> {
    match manager {
        PkgManager::Apt => {
            let mut c = argv(&["apt-get"]);
            if let Some(s) = lock_secs {
                c.extend(argv(&["-o", &format!("DPkg::Lock::Timeout={s}")]));
            }
            c.extend(if upgrade {
                argv(&["upgrade", "-y"])
            } else {
                argv(&["update"])
            });
            c
        }
        PkgManager::Dnf | PkgManager::Yum => {
            let verb = if upgrade { "upgrade" } else { "makecache" };
            argv(&[manager.name(), "-y", verb])
        }
        PkgManager::Zypper => {
            let verb = if upgrade { "update" } else { "refresh" };
            argv(&["zypper", "--non-interactive", verb])
        }
    }
}

/// Perform `effect`. Returns the output of [`Effect::Command`] and
/// [`Effect::GuardedCommand`]. An [`Effect::Interrupt`] is the session's to record: nothing
/// is performed for it.
fn perform(cx: &Context, effect: &Effect) -> Result<Option<CmdOutput>> {
    let root = &cx.root;
    match effect {
        Effect::WriteFile {
            path,
            content,
            mode,
            uid,
            gid,
        } => {
            // The directory's fsync is the session's, at the end of the step
            // ([`crate::host::root::durability`]); the file's own comes before the rename.
            let defer = |dir: &Path| cx.dir_syncs.add(dir);
            let dirs = DirSync::Defer(&defer);
            root.write_atomic_synced(path, *mode, *uid, *gid, dirs, |f| {
                crate::host::root::reserve(f, content.len() as u64)?;
                f.write_all(content)
            })?;
        }
        Effect::CopyFile {
            src,
            path,
            sha256,
            mode,
            uid,
            gid,
        } => {
            let mut from = root.open_regular(src)?;
            let defer = |dir: &Path| cx.dir_syncs.add(dir);
            let dirs = DirSync::Defer(&defer);
            root.write_atomic_synced(path, *mode, *uid, *gid, dirs, |f| {
                crate::host::root::reserve(f, from.metadata()?.len())?;
                let (_, got) = crate::host::root::digest::copy_hashed(&mut from, f)?;
                match sha256 {
                    Some(want) if *want != got => Err(std::io::Error::other(format!(
                        "the source {} changed since the copy was decided (sha256 {want}, now {got}): nothing written",
                        src.display()
                    ))),
                    _ => Ok(()),
                }
            })?;
        }
        Effect::RemoveFile { path } => {
            let is_dir = root
                .symlink_metadata(path)?
                .is_some_and(|m| m.file_type().is_dir());
            if is_dir {
                root.remove_dir(path)?;
            } else {
                root.remove_file(path)?;
            }
            cx.dir_syncs.add_parent_of(path);
        }
        Effect::Mkdir { path, mode } => {
            // Missing parents 0755 and a new `path` `mode`, exactly (as planned); an
            // existing `path` is chmod-ed.
            let created = root.create_dir_all(path, *mode)?;
            if created.is_empty() {
                root.set_mode(path, *mode)?;
            }
            for dir in &created {
                cx.dir_syncs.add_parent_of(dir);
            }
        }
        Effect::RemoveAll { path } => {
            root.remove_all(path)?;
            cx.dir_syncs.add_parent_of(path);
        }
        Effect::Chmod { path, mode } => root.set_mode(path, *mode)?,
        Effect::Chown { path, uid, gid } => root.set_owner(path, *uid, *gid)?,
        Effect::SetMtime { path, mtime } => root.set_mtime(path, *mtime)?,
        Effect::Symlink { target, link } => {
            if let Some(parent) = link.parent() {
                for dir in root.create_dir_all(parent, crate::host::root::PARENT_DIR_MODE)? {
                    cx.dir_syncs.add_parent_of(&dir);
                }
            }
            let exists = root.symlink_metadata(link)?.is_some();
            if exists {
                // Replace atomically: a new link beside it, renamed over the old one.
                let tmp = tmp_beside(link);
                root.symlink(target, &tmp)?;
                if let Err(e) = root.rename(&tmp, link) {
                    let _ = root.remove_file(&tmp);
                    return Err(e.into());
                }
            } else {
                root.symlink(target, link)?;
            }
            cx.dir_syncs.add_parent_of(link);
        }
        Effect::Service { name, op } => {
            internal(cx, argv(&["systemctl", op.verb(), name]), Vec::new())?;
        }
        Effect::ServiceAction { name, action } => {
            internal(cx, argv(&["systemctl", action.verb(), name]), Vec::new())?;
        }
        Effect::DaemonReload => {
            internal(cx, argv(&["systemctl", "daemon-reload"]), Vec::new())?;
        }
        Effect::PackageInstall {
            manager,
            names,
            update,
        } => {
            let (cmds, env) = package_commands(*manager, true, *update, names, lock_secs(cx));
            for c in cmds {
                internal(cx, c, env.clone())?;
            }
        }
        Effect::PackageRemove { manager, names } => {
            let (cmds, env) = package_commands(*manager, false, false, names, lock_secs(cx));
            for c in cmds {
                internal(cx, c, env.clone())?;
            }
        }
        Effect::Sysctl { key, value } => {
            let path = crate::host::effects::effect::sysctl_proc_path(key)?;
            root.write_in_place(&path, format!("{value}\n").as_bytes())?;
        }
        Effect::Command { argv, opts } | Effect::GuardedCommand { argv, opts } => {
            return Ok(Some(exec(cx, argv, opts)?));
        }
        Effect::GrubUpdate(GrubUpdate::UpdateGrub) => {
            internal(cx, argv(&["update-grub"]), Vec::new())?;
        }
        Effect::GrubUpdate(GrubUpdate::Grubby { add, remove }) => {
            if !add.is_empty() {
                let a = format!("--args={}", add.join(" "));
                internal(cx, argv(&["grubby", "--update-kernel=ALL", &a]), Vec::new())?;
            }
            if !remove.is_empty() {
                let r = format!("--remove-args={}", remove.join(" "));
                internal(cx, argv(&["grubby", "--update-kernel=ALL", &r]), Vec::new())?;
            }
        }
        Effect::Interrupt(_) => {}
        Effect::Mount { path, op } => {
            // In the host's mount namespace when the agent is in another one (a pod), so the
            // mount reaches the host; else chrooted as every other command.
            let ns = match cx.opts.commands_chrooted {
                true => crate::host::root::mount_ns::host_mount_ns(root)?,
                false => None,
            };
            let opts = CommandOptions {
                check: true,
                ..CommandOptions::default()
            };
            exec_in(cx, &op.argv(path), &opts, ns.map(std::sync::Arc::new))?;
        }
        Effect::ModuleLoad { name, .. } => {
            internal(cx, argv(&["modprobe", name]), Vec::new())?;
        }
        Effect::InitramfsUpdate(tool) => {
            internal(cx, tool.argv(), Vec::new())?;
        }
        Effect::Fetch(d) => super::download::perform(cx, d)?,
        Effect::PackageUpgrade { manager, upgrade } => {
            let (_, env) = package_commands(*manager, true, false, &[], lock_secs(cx));
            let c = upgrade_command(*manager, *upgrade, Some(lock_secs(cx)));
            internal(cx, c, env)?;
        }
        Effect::GrubDefault { tool, entry, .. } => {
            internal(cx, vec![tool.clone(), entry.clone()], Vec::new())?;
        }
        Effect::PackageHold {
            manager,
            names,
            hold,
        } => {
            for c in hold_commands(*manager, *hold, names)? {
                internal(cx, c, Vec::new())?;
            }
        }
        Effect::TunedProfile { names } => {
            internal(
                cx,
                crate::host::effects::effect::tuned_argv(names),
                Vec::new(),
            )?;
        }
    }
    Ok(None)
}

fn tmp_beside(p: &Path) -> PathBuf {
    let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = format!(
        ".{}.skyhook-link-{}",
        name.unwrap_or_default(),
        std::process::id()
    );
    p.with_file_name(tmp)
}

/// The commands that hold (or release) `names` with `manager`.
///
/// # Errors
/// zypper (refused earlier by the area).
fn hold_commands(manager: PkgManager, hold: bool, names: &[String]) -> Result<Vec<Vec<String>>> {
    let mut c: Vec<String> = match manager {
        PkgManager::Apt => vec![
            "apt-mark".into(),
            if hold { "hold" } else { "unhold" }.into(),
        ],
        PkgManager::Dnf | PkgManager::Yum => vec![
            manager.name().into(),
            "versionlock".into(),
            if hold { "add" } else { "delete" }.into(),
        ],
        PkgManager::Zypper => {
            return Err(HostError::Invalid {
                what: "package manager",
                message: crate::host::effects::effect::REPOS_NOT_ON_ZYPPER.into(),
            });
        }
    };
    c.extend(names.iter().cloned());
    Ok(vec![c])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        argv(v)
    }

    #[test]
    fn apt_commands_wait_for_the_lock() {
        let (cmds, env) = package_commands(PkgManager::Apt, true, true, &s(&["jq", "curl"]), 120);
        assert_eq!(
            cmds,
            vec![
                s(&["apt-get", "-o", "DPkg::Lock::Timeout=120", "update"]),
                s(&[
                    "apt-get",
                    "-y",
                    "-o",
                    "DPkg::Lock::Timeout=120",
                    "install",
                    "jq",
                    "curl"
                ]),
            ]
        );
        assert_eq!(
            env,
            vec![("DEBIAN_FRONTEND".to_string(), "noninteractive".to_string())]
        );
    }

    #[test]
    fn rpm_family_commands() {
        let (cmds, _) = package_commands(PkgManager::Dnf, false, false, &s(&["jq"]), 5);
        assert_eq!(cmds, vec![s(&["dnf", "-y", "remove", "jq"])]);
        let (cmds, _) = package_commands(PkgManager::Yum, true, false, &s(&["jq"]), 5);
        assert_eq!(cmds, vec![s(&["yum", "-y", "install", "jq"])]);
        let (cmds, env) = package_commands(PkgManager::Zypper, true, true, &s(&["jq"]), 5);
        assert_eq!(
            cmds,
            vec![
                s(&["zypper", "--non-interactive", "refresh"]),
                s(&["zypper", "--non-interactive", "install", "jq"])
            ]
        );
        assert_eq!(
            env,
            vec![("ZYPP_LOCK_TIMEOUT".to_string(), "5".to_string())]
        );
    }
}
