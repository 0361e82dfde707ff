//! One step of the mode resolved and run (agent-contract section 8): its header line, `env:`
//! substitution, the execute bits, its environment with the reserved variables, its one
//! [`StepSpec`], its log files, the [`StepInvocation`] handed to the runner, the result line
//! and log retention.

use crate::package::Step;
use crate::pyfmt;
use crate::redact::Redactor;
use crate::step::{StepInvocation, StepProgram, StepRunner, StepSpec};

use super::env::{EnvBuilder, lossy_env};
use super::error::ModeError;
use super::record::{Decision, StepRecord};
use super::run_loop::ModeLoop;
use super::step_logs;

impl<R: StepRunner> ModeLoop<'_, R> {
    /// Resolve and run one step (section 8): header, `env:` substitution, chmod, the
    /// environment and context, log files, the runner, the result line, log retention.
    pub(super) async fn execute(
        &self,
        index: usize,
        step: &Step,
        versions: Option<&(String, String)>,
    ) -> Result<StepRecord, ModeError> {
        let mut shown_args = step.arguments.clone();
        if let (true, Some((prev, cur))) = (step.upgrade_step, versions) {
            shown_args.push(prev.clone());
            shown_args.push(cur.clone());
        }
        self.console.say(&format!(
            "{} {} {} {} {} {}",
            self.mode.as_str(),
            step.path,
            pyfmt::repr_str_list(&shown_args),
            pyfmt::repr_codes(&step.returncodes),
            step.idempotence_label(),
            if step.on_host { "True" } else { "False" }
        ));

        // env: substitution from the run's environment (8.1)
        let mut args: Vec<String> = Vec::with_capacity(shown_args.len());
        let mut missing = Vec::new();
        for a in &step.arguments {
            match a.strip_prefix("env:") {
                Some(name) => match self.settings.var(name) {
                    Some(v) => args.push(v.to_string_lossy().into_owned()),
                    None => missing.push(name.to_string()),
                },
                None => args.push(a.clone()),
            }
        }
        if !missing.is_empty() {
            let lines: Vec<String> = missing
                .iter()
                .map(|name| {
                    format!(
                        "{}: Expected environment variable did not exist: {name}",
                        step.path
                    )
                })
                .collect();
            for l in &lines {
                self.console.say(l);
            }
            return Ok(StepRecord {
                index,
                args: step.arguments.clone(),
                decision: Decision::MissingEnv {
                    message: lines.join("; "),
                },
            });
        }
        if let (true, Some((prev, cur))) = (step.upgrade_step, versions) {
            args.push(prev.clone());
            args.push(cur.clone());
        }

        let program = match self.scripts.get(&index) {
            Some(script) => StepProgram::Script(script.clone()),
            None => {
                if self.state.writable {
                    self.site.make_executable(step)?;
                }
                self.site.process(step)
            }
        };

        let (step_root_v, skyhook_dir_v) = self.site.reserved_dirs(step.on_host);
        let mut env = EnvBuilder::from_agent(self.settings);
        for (k, v) in &step.env {
            env.set(k, v);
        }
        if let Some((prev, cur)) = versions {
            env.set("PREVIOUS_VERSION", prev);
            env.set("CURRENT_VERSION", cur);
        }
        env.set("STEP_ROOT", &step_root_v);
        env.set("SKYHOOK_DIR", &skyhook_dir_v);
        let env = env.into_vec();
        let text_env = lossy_env(&env);
        let redactor = Redactor::from_env(&text_env);
        let spec = StepSpec::builder(self.mode.as_str(), self.apply)
            .step(step.name.clone(), args.clone())
            .package(
                self.package.package_name.clone(),
                self.package.package_version.clone(),
                versions.map(|(p, _)| p.clone()),
            )
            .dirs(
                skyhook_dir_v.display().to_string(),
                step_root_v.display().to_string(),
            )
            .resource_id(self.resource_id)
            .env(text_env)
            .configmaps(Some(self.site.configmaps_dir_shown()))
            .node_metadata(self.node_metadata_dir.clone())
            .commands_chrooted(step.on_host)
            .deadline(std::time::Instant::now() + self.settings.script_timeout)
            .script_timeout(self.settings.script_timeout)
            .returncodes(
                step.returncodes
                    .iter()
                    .filter_map(|c| i32::try_from(c.value).ok())
                    .collect(),
            )
            .redactor(redactor)
            .cancel(self.cancel.child())
            .diffs(self.settings.diffs)
            .build();
        let log_dir = self
            .settings
            .log_root
            .join(&self.package.package_name)
            .join(&self.package.package_version);
        let (logs, previous_logs) = step_logs::open_indexed(
            self.state.root,
            &self.dirs,
            &self.logs,
            self.write_logs,
            &log_dir,
            &step.path,
        )?;
        let invocation = StepInvocation {
            path: step.path.clone(),
            program,
            args: args.clone(),
            env,
            spec,
            logs,
            preamble: None,
            keep_fds: self.keep_fds.clone(),
        };
        let kind = if matches!(invocation.program, StepProgram::Script(_)) {
            "rhai"
        } else {
            "process"
        };
        let span = tracing::info_span!("step", path = %step.path, index, kind);
        let mut result =
            tracing::Instrument::instrument(self.runner.run(invocation), span.clone()).await;
        // The step may have removed the flags or logs directory the run keeps open.
        self.dirs.step_ran();
        tracing::debug!(parent: &span, ok = result.ok, status = result.code, ran = result.ran, "step ended");
        if result.ran && result.ok && !result.interrupts.is_empty() {
            self.judge_interrupts(step, &mut result)?;
        }
        if result.ran {
            let joined = args.join(" ");
            if result.ok {
                self.console
                    .say(&format!("SUCEEDED: {} {joined}", step.path));
            } else {
                self.console
                    .say(&format!("FAILED: {} {joined} {}", step.path, result.code));
            }
        }
        if self.write_logs {
            step_logs::prune_in(
                self.state.root,
                &self.dirs,
                self.console,
                &step.path,
                &previous_logs,
            );
        }
        Ok(StepRecord {
            index,
            args,
            decision: Decision::Ran(result),
        })
    }
}
