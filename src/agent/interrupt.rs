//! Interrupts (agent-contract.md section 10): the base64 JSON wire format, the commands of each
//! type, once-per-resource-id completion markers, and the boot-id scheme for reboots.

use std::path::{Path, PathBuf};

use base64::Engine as _;

use crate::host::root::{AgentFiles, HostRoot};
use crate::pyfmt;
use crate::state::interrupts as markers;
use crate::step::{ProcessRunner, StepInvocation, StepProgram, StepResult, StepSpec};

use super::error::{AgentError, InterruptError};
use super::prepare;
use crate::mode::console::Console;
use crate::mode::env::EnvBuilder;
use crate::mode::settings::{ResourceId, Settings};
use crate::mode::step_logs;
use crate::process::Cancel;

/// How long a successful `reboot` may take to bring the agent down before the run counts as
/// failed (10.4, step 5), in seconds.
pub const REBOOT_GRACE_SECS: u64 = 10;

/// A decoded interrupt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Interrupt {
    /// Nothing to run; `no_op.complete` is written.
    NoOp,
    /// `reboot`.
    NodeRestart,
    /// `systemctl daemon-reload`, then `systemctl restart <s>` per service.
    ServiceRestart(Vec<String>),
    /// `service procps force-reload`.
    RestartAllServices,
    /// The package's own steps do the work; nothing is run or written.
    ScriptInterrupt,
}

impl Interrupt {
    /// Decode a payload: standard base64 (padding required, ASCII whitespace ignored) of a JSON
    /// object with a string `type`; unknown fields are ignored \[fix\].
    ///
    /// # Errors
    /// [`InterruptError`] as described on each variant.
    pub fn decode(payload: &str) -> Result<Interrupt, InterruptError> {
        let cleaned: String = payload
            .chars()
            .filter(|c| !c.is_ascii_whitespace())
            .collect();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(cleaned.as_bytes())
            .map_err(|e| InterruptError::Malformed {
                detail: format!("not base64: {e}"),
            })?;
        let value: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| InterruptError::Malformed {
                detail: format!("not JSON: {e}"),
            })?;
        let obj = value.as_object().ok_or_else(|| InterruptError::Malformed {
            detail: "not a JSON object".into(),
        })?;
        let kind =
            obj.get("type")
                .and_then(|t| t.as_str())
                .ok_or_else(|| InterruptError::Malformed {
                    detail: "no string field \"type\"".into(),
                })?;
        Ok(match kind {
            "no_op" => Interrupt::NoOp,
            "node_restart" => Interrupt::NodeRestart,
            "restart_all_services" => Interrupt::RestartAllServices,
            "script_interrupt" => Interrupt::ScriptInterrupt,
            "service_restart" => {
                let services = match obj.get("services") {
                    None | Some(serde_json::Value::Null) => Vec::new(),
                    Some(serde_json::Value::Array(items)) => items
                        .iter()
                        .map(|s| {
                            s.as_str()
                                .map(String::from)
                                .ok_or(InterruptError::BadServices)
                        })
                        .collect::<Result<_, _>>()?,
                    Some(_) => return Err(InterruptError::BadServices),
                };
                Interrupt::ServiceRestart(services)
            }
            other => return Err(InterruptError::UnknownType(other.to_string())),
        })
    }

    /// The type name used in marker and log file names.
    pub fn type_name(&self) -> &'static str {
        match self {
            Interrupt::NoOp => "no_op",
            Interrupt::NodeRestart => "node_restart",
            Interrupt::ServiceRestart(_) => "service_restart",
            Interrupt::RestartAllServices => "restart_all_services",
            Interrupt::ScriptInterrupt => "script_interrupt",
        }
    }

    /// The commands, in order (10.2).
    pub fn commands(&self) -> Vec<Vec<String>> {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        match self {
            Interrupt::NodeRestart => vec![v(&["reboot"])],
            Interrupt::ServiceRestart(services) => {
                let mut cmds = vec![v(&["systemctl", "daemon-reload"])];
                cmds.extend(services.iter().map(|s| v(&["systemctl", "restart", s])));
                cmds
            }
            Interrupt::RestartAllServices => vec![v(&["service", "procps", "force-reload"])],
            Interrupt::NoOp | Interrupt::ScriptInterrupt => Vec::new(),
        }
    }
}

/// Runs one decoded interrupt for one resource id.
pub struct InterruptRun<'a> {
    /// The host root.
    pub root: &'a HostRoot,
    /// Agent settings.
    pub settings: &'a Settings,
    /// The resource id (keys the marker directory; package/version name the log directory).
    pub id: &'a ResourceId,
    /// The copy dir (working directory of the commands).
    pub copy_dir: &'a Path,
    /// Stop requests (SIGTERM while a reboot is pending).
    pub cancel: &'a Cancel,
    /// The agent's console.
    pub console: &'a Console,
}

fn now_epoch() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl InterruptRun<'_> {
    /// The `interrupt` mode: the legacy copy, then [`InterruptRun::run`] under the package
    /// lock (kept alive while it runs). `Ok(false)` when the lock was not taken (stopped while
    /// waiting for it).
    ///
    /// # Errors
    /// The legacy copy, the lock and the interrupt's own errors.
    pub async fn run_mode(&self, interrupt: &Interrupt) -> Result<bool, AgentError> {
        // Upstream (NodeWright 0d61d428): interrupt pods have no init container, so the
        // legacy copy runs here too; without a data dir either, the commands run from
        // `/` as documented (the interrupt itself needs no package files).
        match prepare::legacy_copy(self.root, self.copy_dir, &self.settings.data_dir) {
            Ok(_) | Err(prepare::PrepareError::MissingDataDir { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        let Some(lock) = prepare::package_lock(
            self.root,
            &self.settings.state_root,
            &self.id.package,
            self.cancel,
            self.console,
        )
        .await?
        else {
            return Ok(false);
        };
        let keeper = crate::state::lock::LockKeeper::start(self.root, &lock)?;
        keeper.arm()?;
        let ok = self.run(interrupt).await?;
        keeper.stop()?;
        drop(lock);
        Ok(ok)
    }

    /// Run the interrupt (10.3 with the 10.4 fixes). Returns true for exit 0. The caller
    /// holds the package lock ([`crate::state::lock::lock_package`]): the `interrupt` mode takes it first,
    /// a script step's requested interrupt runs under its mode's lock.
    ///
    /// # Errors
    /// State write failures.
    pub async fn run(&self, interrupt: &Interrupt) -> Result<bool, AgentError> {
        let dir = markers::interrupt_dir(&self.settings.state_root, &self.id.raw);
        AgentFiles::new(self.root).create_dir_all(&dir, 0o755)?;
        match interrupt {
            Interrupt::NoOp => {
                markers::mark_complete(self.root, &dir, "no_op", now_epoch())?;
                Ok(true)
            }
            Interrupt::ScriptInterrupt => Ok(true),
            Interrupt::NodeRestart => self.node_restart(&dir).await,
            other => {
                let kind = other.type_name();
                for (i, cmd) in other.commands().iter().enumerate() {
                    let name = format!("{kind}_{i}");
                    if markers::is_complete(self.root, &dir, &name)? {
                        self.console.say(&format!(
                            "Skipping interrupt {name} because it was already run for {}",
                            self.id.raw
                        ));
                        continue;
                    }
                    let result = self.command(&name, cmd).await?;
                    if !result.ok {
                        self.report_failure(cmd, &result);
                        return Ok(false);
                    }
                    markers::mark_complete(self.root, &dir, &name, now_epoch())?;
                }
                Ok(true)
            }
        }
    }

    /// The `INTERRUPT FAILED:` line of a failed command (the runner has printed why a
    /// command could not start).
    fn report_failure(&self, cmd: &[String], result: &StepResult) {
        self.console.say(&format!(
            "INTERRUPT FAILED: {} return_code: {}",
            pyfmt::repr_str_list(cmd),
            result.code
        ));
    }

    async fn node_restart(&self, dir: &Path) -> Result<bool, AgentError> {
        const NAME: &str = "node_restart_0";
        if markers::is_complete(self.root, dir, NAME)? {
            self.console.say(&format!(
                "Skipping interrupt {NAME} because it was already run for {}",
                self.id.raw
            ));
            return Ok(true);
        }
        // A stop that came before `reboot` was issued is not the node's shutdown: nothing
        // will reboot it, so the interrupt fails and writes nothing (the operator retries).
        if self.cancel.is_stopped() {
            let why = self
                .cancel
                .reason()
                .map_or_else(|| "stopped".to_string(), |r| r.to_string());
            self.console.warn(&format!(
                "{why} before the reboot was issued: not rebooting, {NAME} is not done"
            ));
            return Ok(false);
        }
        let cmd = vec!["reboot".to_string()];
        let boot_id = self
            .root
            .read_opt(Path::new("/proc/sys/kernel/random/boot_id"))
            .ok()
            .flatten()
            .map(|b| String::from_utf8_lossy(&b).trim().to_string())
            .filter(|s| !s.is_empty());
        let Some(boot_id) = boot_id else {
            // No procfs under the root: Python's algorithm (marker first, then reboot).
            self.console.warn(
                "cannot read /proc/sys/kernel/random/boot_id under the root mount; marking node_restart_0 complete before rebooting",
            );
            markers::mark_complete(self.root, dir, NAME, now_epoch())?;
            let result = self.command(NAME, &cmd).await?;
            return Ok(match result.code {
                _ if result.ok => true,
                KILLED_BY_SIGTERM => false,
                _ => {
                    markers::remove_complete(self.root, dir, NAME)?;
                    self.report_failure(&cmd, &result);
                    false
                }
            });
        };
        if let Some(pending) = markers::read_pending(self.root, dir)? {
            match pending.trim_end().strip_prefix("boot-id:") {
                Some(prev) if !prev.is_empty() && prev != boot_id => {
                    markers::pending_to_complete(self.root, dir)?;
                    self.console.say(&format!(
                        "node_restart_0 completed: the node rebooted (boot id {prev} -> {boot_id})"
                    ));
                    return Ok(true);
                }
                _ => {
                    markers::remove_pending(self.root, dir)?;
                }
            }
        }
        markers::write_pending(self.root, dir, &boot_id)?;
        let result = tokio::select! {
            o = self.command(NAME, &cmd) => o?,
            _ = self.cancel.stopped() => {
                self.console.warn("SIGTERM while rebooting: leaving node_restart_0.pending for the next boot");
                return Ok(true);
            }
        };
        match result.code {
            KILLED_BY_SIGTERM => Ok(true),
            _ if result.ok => {
                let waited = tokio::time::timeout(
                    std::time::Duration::from_secs(REBOOT_GRACE_SECS),
                    self.cancel.stopped(),
                )
                .await;
                if waited.is_ok() {
                    Ok(true)
                } else {
                    self.console.warn(&format!(
                        "reboot returned 0 but the node did not shut down within {REBOOT_GRACE_SECS} s; the next run will reboot again"
                    ));
                    Ok(false)
                }
            }
            _ => {
                markers::remove_pending(self.root, dir)?;
                self.report_failure(&cmd, &result);
                Ok(false)
            }
        }
    }

    /// Run one interrupt command as a process step (through [`ProcessRunner::run_step`]),
    /// chrooted into the host, its command line as the preamble of its output, with logs
    /// `<log root>/<pkg>/<ver>/interrupts/<name>-<TS>.log`. The result is ok when the
    /// command exited 0; its `code` is the status of the `INTERRUPT FAILED:` line
    /// ([`KILLED_BY_SIGTERM`] when `reboot` was ended by the node's shutdown).
    async fn command(&self, name: &str, cmd: &[String]) -> Result<StepResult, AgentError> {
        let cwd: PathBuf = if self.root.exists(self.copy_dir).unwrap_or(false) {
            self.copy_dir.to_path_buf()
        } else {
            self.console.warn(&format!(
                "copy dir {} does not exist on the host; running {} in /",
                self.copy_dir.display(),
                cmd.join(" ")
            ));
            PathBuf::from("/")
        };
        let args = cmd[1..].to_vec();
        let log_dir = self
            .settings
            .log_root
            .join(&self.id.package)
            .join(&self.id.version);
        let base = format!("interrupts/{name}");
        let (logs, previous_logs) =
            step_logs::open(self.root, self.settings.write_logs, &log_dir, &base)?;
        let invocation = StepInvocation {
            path: base.clone(),
            program: StepProgram::Process {
                program: PathBuf::from(&cmd[0]),
                cwd,
                chroot: Some(self.root.mount().to_path_buf()),
                shown: PathBuf::from(&cmd[0]),
            },
            args: args.clone(),
            env: EnvBuilder::from_agent(self.settings).into_vec(),
            // Never cancelled: a SIGTERM lets the command end (the node's shutdown).
            spec: StepSpec::builder("interrupt", true)
                .step(name, args)
                .package(self.id.package.clone(), self.id.version.clone(), None)
                .resource_id(self.id.raw.clone())
                .build(),
            logs,
            preamble: Some(format!("{}\n", cmd.join(" ")).into_bytes()),
            keep_fds: Vec::new(),
        };
        let runner = ProcessRunner::new(self.settings.buffer_limit)
            .with_log_format(self.settings.log_format);
        let result = runner.run_step(invocation, self.console).await;
        if self.settings.write_logs {
            step_logs::prune(self.root, self.console, &base, &previous_logs);
        }
        Ok(result)
    }
}

/// The status of a command killed by `SIGTERM` (`-15`, Python's convention): `reboot` ended
/// by the node's shutdown.
const KILLED_BY_SIGTERM: i32 = -15;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::error::BAD_PAYLOAD;

    #[test]
    fn decode_types() {
        assert_eq!(
            Interrupt::decode("eyJ0eXBlIjoibm9fb3AifQ==").unwrap(),
            Interrupt::NoOp
        );
        assert_eq!(
            Interrupt::decode("eyJ0eXBlIjoic2VydmljZV9yZXN0YXJ0Iiwic2VydmljZXMiOlsiY29udGFpbmVyZCIsImt1YmVsZXQiXX0=").unwrap(),
            Interrupt::ServiceRestart(vec!["containerd".into(), "kubelet".into()])
        );
        assert_eq!(
            Interrupt::decode("eyJ0eXBlIjoicmVzdGFydF9hbGxfc2VydmljZXMifQ==").unwrap(),
            Interrupt::RestartAllServices
        );
        assert_eq!(
            Interrupt::decode("eyJ0eXBlIjoic2NyaXB0X2ludGVycnVwdCJ9").unwrap(),
            Interrupt::ScriptInterrupt
        );
        assert_eq!(
            Interrupt::decode("eyJ0eXBlIjoibm9kZV9yZXN0YXJ0In0=").unwrap(),
            Interrupt::NodeRestart
        );
        // unknown fields ignored [fix]; services absent -> empty
        let b = base64::engine::general_purpose::STANDARD;
        assert_eq!(
            Interrupt::decode(&b.encode(r#"{"type":"node_restart","services":[]}"#)).unwrap(),
            Interrupt::NodeRestart
        );
        assert_eq!(
            Interrupt::decode(&b.encode(r#"{"type":"service_restart"}"#)).unwrap(),
            Interrupt::ServiceRestart(vec![])
        );
    }

    #[test]
    fn decode_errors() {
        assert!(matches!(
            Interrupt::decode("not base64!"),
            Err(InterruptError::Malformed { .. })
        ));
        let e = Interrupt::decode("eyJ0eXBlIjoicmVib290In0=").unwrap_err();
        assert_eq!(
            e.to_string(),
            "Unknown interrupt reboot must be one of: no_op, node_restart, restart_all_services, script_interrupt, service_restart"
        );
        let e = Interrupt::decode("eyJub3BlIjoxfQ==").unwrap_err();
        assert!(e.to_string().starts_with(BAD_PAYLOAD), "{e}");
        assert!(Interrupt::decode("bm90LWpzb24=").is_err());
    }

    /// A host with a `/usr/bin/reboot` stub (logging to `/stub.log`), a boot id and the
    /// agent's settings; `run` drives one node_restart with `cancel`, returning (ok, stderr).
    struct RebootHost {
        t: crate::host::testutil::TestHost,
        settings: Settings,
    }

    const BOOT_ID: &str = "11111111-2222-3333-4444-555555555555";
    const MARKERS: &str = "/state/interrupts/flags/sky-1_demo_1.0.0";

    impl RebootHost {
        fn new() -> Self {
            let t = crate::host::testutil::TestHost::new();
            t.install_sh();
            // `/rebooted` is made after the stub's line is in `/stub.log` (the `>>` creates the log
            // before it writes: a stop at its creation could kill the stub before the line).
            t.stub("reboot", ": > /rebooted; exit 0");
            t.file("/proc/sys/kernel/random/boot_id", &format!("{BOOT_ID}\n"));
            std::fs::create_dir_all(t.p("/pkg")).unwrap();
            let settings = Settings::from_env(
                [
                    ("SKYHOOK_ROOT_DIR", "/state"),
                    ("SKYHOOK_LOG_DIR", "/log"),
                    ("PATH", "/usr/bin:/bin"),
                ]
                .map(|(k, v)| (k.into(), v.into())),
            )
            .unwrap();
            RebootHost { t, settings }
        }

        fn run(&self, cancel: &Cancel) -> (bool, String) {
            let err = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
            let console =
                Console::with_writers(Box::new(std::io::sink()), Box::new(SharedBuf(err.clone())));
            let root = HostRoot::open(&self.t.root).unwrap();
            let id = ResourceId::parse("sky-1_demo_1.0.0").unwrap();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let ok = rt
                .block_on(
                    InterruptRun {
                        root: &root,
                        settings: &self.settings,
                        id: &id,
                        copy_dir: Path::new("/pkg"),
                        cancel,
                        console: &console,
                    }
                    .run(&Interrupt::NodeRestart),
                )
                .unwrap();
            let text = String::from_utf8_lossy(&err.lock().unwrap()).into_owned();
            (ok, text)
        }
    }

    struct SharedBuf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for SharedBuf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A SIGTERM that arrived before `reboot` was issued (the pod was deleted while the
    /// agent started) is not the node's shutdown: the interrupt fails (exit 1), `reboot` is
    /// not run, and neither a pending nor a complete marker is left.
    #[test]
    fn sigterm_before_the_reboot_is_issued_fails_and_writes_nothing() {
        let h = RebootHost::new();
        let cancel = Cancel::new();
        cancel.stop(crate::process::CancelReason::Signal("SIGTERM"));
        let (ok, err) = h.run(&cancel);
        assert!(!ok, "stderr: {err}");
        assert_eq!(h.t.calls(), Vec::<String>::new(), "reboot was run");
        assert!(!h.t.p(&format!("{MARKERS}/node_restart_0.pending")).exists());
        assert!(
            !h.t.p(&format!("{MARKERS}/node_restart_0.complete"))
                .exists()
        );
        assert_eq!(
            err,
            "WARNING: SIGTERM received before the reboot was issued: not rebooting, node_restart_0 is not done\n"
        );
    }

    /// Without a stop, the same host reboots: `reboot` runs once and the pending marker holds
    /// this boot's id (the run then waits for the shutdown, here cut short by a stop once
    /// `reboot` has been recorded).
    #[test]
    fn reboot_writes_the_pending_marker_with_the_boot_id() {
        let h = RebootHost::new();
        let cancel = Cancel::new();
        let stopper = cancel.clone();
        let log = h.t.p("/rebooted");
        let watcher = std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while !log.exists() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            stopper.stop(crate::process::CancelReason::Signal("SIGTERM"));
        });
        let (ok, err) = h.run(&cancel);
        watcher.join().unwrap();
        assert!(ok, "stderr: {err}");
        assert_eq!(h.t.calls(), vec!["reboot ".to_string()]);
        assert_eq!(
            h.t.read(&format!("{MARKERS}/node_restart_0.pending")),
            format!("boot-id:{BOOT_ID}\n")
        );
        assert!(
            !h.t.p(&format!("{MARKERS}/node_restart_0.complete"))
                .exists()
        );
    }

    #[test]
    fn commands() {
        let i = Interrupt::ServiceRestart(vec!["a".into(), "b".into()]);
        assert_eq!(
            i.commands(),
            vec![
                vec!["systemctl".to_string(), "daemon-reload".into()],
                vec!["systemctl".to_string(), "restart".into(), "a".into()],
                vec!["systemctl".to_string(), "restart".into(), "b".into()],
            ]
        );
    }
}
