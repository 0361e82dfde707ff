//! The command line of `skyhook-run`, the local tool for package authors: its clap
//! definitions, shared by the forms [`super::run`] dispatches to:
//!
//! - `skyhook-run SCRIPT --root DIR [...]`: one `.rhai` script against a host root, a dry
//!   run unless `--apply` ([`super::run_local`]); with `--remote URL`, on a node
//!   ([`super::run_remote`]).
//! - `skyhook-run --package DIR --mode MODE --root DIR [...]`: a whole package as the agent
//!   would run it.
//! - `skyhook-run check FILE...`: compile scripts without running them.
//! - `skyhook-run new NAME`: a new package ([`crate::local::scaffold`]).
//! - `skyhook-run completions SHELL`, `skyhook-run man DIR`: from these definitions.
//!
//! Exit statuses: the one table, [`super::exit`].

use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use crate::package::Mode;

const AFTER_HELP: &str = "\
Dry run (the default):
  The script runs for real, but every change goes to a plan instead of the host: reads see
  the planned writes, commands are recorded and not run (unless marked read_only, e.g.
  query()), step.dry_run is true. Nothing under --root changes. The plan lists, in the
  order they happened, each change (`~`, with a unified diff for file contents and
  mode/owner changes, after a `+ mkdir DIR` line for each directory it creates; guarded
  commands such as run(argv, #{creates: path}) are changes too), each action
  (`> would run:`: unguarded commands, service restarts, daemon-reload, update-grub), each
  interrupt (`!`) and the script's stdout (print, log::info); each change, action and
  interrupt ends with `  # file:line`, the script line that made it. The summary line ends it:
      Plan: 2 to change, 5 unchanged, 1 action.
  --apply makes the changes and prints what changed (`Apply: 2 changed, 5 unchanged.`);
  --apply --diff also shows the diffs of file contents, as the plan does (--diff is
  accepted in a dry run, which always shows them).
  SIGTERM or Ctrl-C during a script's --apply stops the script at its next operation and
  still writes what it changed so far (exit 1); a second signal exits at once (130, 143),
  as it does during a package's --apply (whose first signal lets the running step finish
  and starts no further step).
  A *-check mode (--mode apply-check) runs the script as a check: what it would change is
  drift, listed the same way, and the run fails (exit 1) when there is any.

Step context and environment:
  step.mode is --mode (default apply), step.args the --arg values, step.name the file stem.
  The step environment (env() in scripts, and commands' environment) is skyhook-run's own
  environment plus every --env K=V (later wins), as the agent passes its environment to
  steps. SKYHOOK_DIR and STEP_ROOT default to the configMaps folder's parent and the
  script's directory. Relative imports resolve in the script's directory; commands run
  chrooted into --root. configMaps come from --configmaps DIR (may lie outside the root), or,
  for a script in a package's skyhook_dir/, from the package's configmaps/ folder.

Output:
  Script output (print, debug, log::) goes to stdout and stderr with secrets redacted. In a
  dry run the stdout output is part of the plan, in order (and each package step's under its
  `==> step` header); stderr output is written as it happens. Errors are
  `file:line:col: message` on stderr. With --output json stdout holds exactly one JSON
  document, specified by docs/plan.schema.json: the report (mode, changes, actions,
  unchanged, interrupts, summary, counts, items: the ordered list with positions, content
  hashes, diffs and the script's output) plus ok, return_code, error, errors
  ([{file, line, column, message}]), drift and exit_code; script output then goes to
  stderr (and into the items). For --package: the sum of the steps' reports plus package,
  version, package_mode, ok, warnings, steps (each step's name, path, args, kind and, for a
  step that ran, its result: report and outcome) and exit_code; --apply adds apply and
  copy_dir, each .rhai step's result listing what it changed (the agent's output then goes
  to stderr).

Packages (--package DIR --mode MODE):
  DIR holds config.json, skyhook_dir/ and usually configmaps/ (--configmaps replaces it).
  config.json is validated and every .rhai step compiled first. A dry run runs the mode's
  steps in order in one host session (later steps see earlier planned writes): .rhai steps
  on the plan (or check) executor, any other step listed as `would run: <path> <args>`,
  steps the agent would skip for an existing flag listed as skipped. With --apply the agent
  itself runs: the package is copied into the root at
  /var/lib/skyhook/skyhook-run/<name>-<version> (configMaps in its configmaps/), then the
  mode runs as on a node (bash steps chrooted into the root; flags, history and check results
  under SKYHOOK_ROOT_DIR, default /etc/skyhook, logs under SKYHOOK_LOG_DIR, default
  /var/log/skyhook, both inside the root; resource id SKYHOOK_RESOURCE_ID, default
  skyhook-run_<name>_<version>). Flags make a second --apply of a step skip it, as on a node
  (OVERLAY_ALWAYS_RUN_STEP=true runs them anyway). After its own output each .rhai step
  that succeeds lists what it changed, as the agent does on a node: the plan's lines (`~` changes,
  `> ran:` actions, `!` interrupts, each with its `# file:line`; with --diff the unified
  diff of each file content change too) and an `Apply: ...` summary line; a step that
  changed nothing adds no line. With --output json the document has each step's result,
  its changes included.
  Interrupts a .rhai step requests (interrupt::reboot() ...) are never run by a step: the
  operator runs them in its interrupt stage when the package's Skyhook CR declares them.
  A dry run and --apply judge each request against --skyhook-cr FILE (or DIR/node-metadata/
  packages.json): a request the CR does not declare fails the step, as on a node.
  --apply first checks every .rhai step of the mode as `check` does and dry-runs the mode
  against the root; any error exits 1 before anything is copied or changed.

Exit status (the table of all three commands: README.md, \"Exit status\"):
  0 done; also --package with a mode that has no steps (it says so on stderr: the agent runs
    such a mode as a no-op);
  1 error (failed script or step, drift in a check, compile error, a SCRIPT that is not a
    .rhai file, a --configmaps folder that does not exist, NAME of `new` exists);
  2 malformed command line (a missing or conflicting option, an unknown mode);
  3 with --detailed-exitcode: a dry run that succeeded with changes pending (actions alone
    do not count);
  130, 143: a second SIGINT or SIGTERM during --apply.

Output never carries colour codes (plans and JSON are plain text, whatever the terminal);
only --help is coloured, on a terminal, and not when NO_COLOR is set. Diagnostics:
SKYHOOK_LOG=debug (stderr; SKYHOOK_LOG_FORMAT=json). Shell completions: `skyhook-run
completions bash|zsh|fish`; man pages: `skyhook-run man DIR`.

A new package (skyhook-run new NAME [--configmap KEY]...):
  Writes NAME/ with config.json (every mode and its check wired to a .rhai step in
  skyhook_dir/, expected_config_files from the --configmap keys), one small commented
  .rhai step per mode, configmaps/ with an empty file per key, skyhook.yaml (a Skyhook CR
  that deploys it) and a README.md. An existing NAME is never touched.

Checking scripts (skyhook-run check FILE...):
  Compiles each file with its imports and checks it without running anything: unknown
  functions and modules (with a did-you-mean), wrong argument counts, option keys a host
  function does not accept (literal #{...} maps), and warnings for known traps (a `\\n` in a
  backtick string, the () result of trim/replace/make_upper/... used as a value). Prints
  `OK FILE` on stdout per file without errors and `file:line:col: error: ...` or
  `file:line:col: warning: ...` on stderr. Exit 0: no errors (warnings allowed); 1: any
  error (a syntax or import error, a finding, a file that is not .rhai).

Examples:
  skyhook-run apply.rhai --root /mnt/node-copy
  skyhook-run apply.rhai --root /mnt/node-copy --apply
  skyhook-run apply.rhai --root /mnt/node-copy --mode apply-check
  skyhook-run tune.rhai --root /mnt/node-copy --configmaps ./cm --env NODE_NAME=n1 --arg fast
  skyhook-run apply.rhai --root /mnt/node-copy --output json --detailed-exitcode
  skyhook-run --package examples/tuning --mode config --root /mnt/node-copy
  skyhook-run --package examples/tuning --mode config --root /mnt/node-copy --apply
  skyhook-run check skyhook_dir/*.rhai
  skyhook-run new my-package --configmap settings.conf";

/// `--version`: the package version, the git revision and the build date (build.rs).
const VERSION: &str = super::agent::VERSION;

/// Run Skyhook Rhai step scripts and packages against a host root, as a dry run by default.
///
/// `skyhook-run SCRIPT --root DIR` runs one .rhai script and prints the plan: what it would
/// change (unified diffs), the commands and service/package actions it would run, and a
/// summary line. Nothing under DIR changes unless --apply is given. `--package DIR --mode
/// MODE` does the same for a whole package, the way the agent runs it; `check` checks
/// scripts without running them; `new` writes a new package.
#[derive(Debug, Parser)]
#[command(
    name = "skyhook-run",
    version = VERSION,
    after_help = AFTER_HELP,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Option<Command>,

    /// The .rhai script to run (relative imports resolve in its directory).
    #[arg(
        value_name = "SCRIPT",
        required_unless_present = "package",
        conflicts_with = "package"
    )]
    pub(crate) script: Option<PathBuf>,

    /// Plan or run a whole package directory (config.json, skyhook_dir/, configmaps/) the way
    /// the agent would; needs --mode.
    #[arg(long, value_name = "DIR", requires = "mode")]
    pub(crate) package: Option<PathBuf>,

    /// The host root: every path a script touches resolves inside it, commands run chrooted
    /// into it.
    #[arg(long, value_name = "DIR", required_unless_present = "remote")]
    pub(crate) root: Option<PathBuf>,

    /// Run SCRIPT on a node through its remote step API (`skyhook-agent serve`):
    /// http://HOST:PORT, https://HOST:PORT (--tls-ca) or unix:/PATH. Plan by default, --apply, --mode check; the node's
    /// root is used (no --root). Only --env values are sent.
    #[arg(
        long,
        value_name = "URL",
        conflicts_with_all = ["package", "root"],
        value_parser = parse_remote_url
    )]
    pub(crate) remote: Option<String>,

    /// The bearer token for --remote (a file holding it).
    #[arg(long, value_name = "FILE", requires = "remote")]
    pub(crate) token_file: Option<PathBuf>,

    /// CA certificates (PEM) to trust for an https:// --remote.
    #[arg(long, value_name = "FILE", requires = "remote")]
    pub(crate) tls_ca: Option<PathBuf>,

    /// Client certificate (PEM) for an https:// --remote that asks for one; needs --tls-key.
    #[arg(long, value_name = "FILE", requires_all = ["remote", "tls_key"])]
    pub(crate) tls_cert: Option<PathBuf>,

    /// Client private key (PEM) for --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,

    /// Make the changes (default: a dry run that changes nothing).
    #[arg(long)]
    pub(crate) apply: bool,

    /// With --apply: show the unified diff of each file content change, as a dry run does
    /// (a script's, or each .rhai step's of a package). A dry run always shows them.
    #[arg(long)]
    pub(crate) diff: bool,

    /// The step's mode (step.mode): apply, config, uninstall, upgrade, post-interrupt or a
    /// *-check mode, which checks (drift fails). Default for a script: apply.
    #[arg(long, value_name = "MODE", value_parser = ModeNames, hide_possible_values = true)]
    pub(crate) mode: Option<String>,

    /// The configMaps folder (config:: in scripts); may lie outside the root.
    #[arg(long, value_name = "DIR")]
    pub(crate) configmaps: Option<PathBuf>,

    /// The Skyhook CR (YAML or JSON) that deploys the package: a dry run and --apply judge
    /// the interrupts its steps request against the CR's `interrupt`/`configInterrupts`
    /// (default: DIR/node-metadata/packages.json when present). Packages only.
    #[arg(long = "skyhook-cr", value_name = "FILE")]
    pub(crate) skyhook_cr: Option<PathBuf>,

    /// Add K=V to the step environment (repeatable; later wins).
    #[arg(long = "env", value_name = "K=V", value_parser = parse_kv)]
    pub(crate) env: Vec<(String, String)>,

    /// A step argument (step.args; repeatable, in order). Scripts only.
    #[arg(
        long = "arg",
        value_name = "X",
        allow_hyphen_values = true,
        conflicts_with = "package"
    )]
    pub(crate) args: Vec<String>,

    /// Output format: text, or one JSON document on stdout (script output then goes to
    /// stderr).
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = Output::Text)]
    pub(crate) output: Output,

    /// Exit 3 (instead of 0) from a dry run that succeeded with changes pending.
    #[arg(long)]
    pub(crate) detailed_exitcode: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Output {
    /// Human-readable plan and summary line.
    Text,
    /// One JSON document.
    Json,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Compile scripts and their imports and check them without running them: unknown
    /// functions and modules (with a suggestion), wrong argument counts, option keys a host
    /// function does not accept, and known Rhai traps (warnings). Prints `OK FILE` for each
    /// file without errors, and `file:line:col: error: ...` / `warning: ...` on stderr.
    /// Relative imports resolve in each script's directory. Exit 0 when no file has an error
    /// (warnings allowed), 1 otherwise.
    Check {
        /// The .rhai files to check.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Write the man pages skyhook-run.1, skyhook-agent.1 and skyhook-agent-serve.1, generated
    /// from the command-line definitions, into DIR (created if missing), e.g. `skyhook-run man /usr/share/man/man1`.
    Man {
        /// The directory to write the pages into.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Write a new package NAME/: config.json with every mode and its check wired to a small
    /// .rhai step in skyhook_dir/, expected_config_files from the --configmap keys (an empty
    /// file for each in configmaps/), a Skyhook CR (skyhook.yaml) and a README.md. NAME must
    /// not exist.
    New {
        /// The package name (letters, digits, `-`, `_`, `.`); the directory written.
        #[arg(value_name = "NAME")]
        name: String,
        /// A configMap key (file name) the package expects (repeatable).
        #[arg(long = "configmap", value_name = "KEY")]
        configmaps: Vec<String>,
    },
    /// Preview a Skyhook CR on a fleet: plan its packages, read-only, on every node its
    /// nodeSelectors pick, through each node's `skyhook-agent serve`, and print the nodes
    /// grouped by plan with a summary line (`41 selected: 38 would change (2 plans), 2
    /// converged, 1 failed`). See docs/fleet.md.
    Plan(Box<PlanArgs>),
    /// Print a completion script for SHELL on stdout, generated from these definitions, e.g.
    /// `skyhook-run completions bash > /etc/bash_completion.d/skyhook-run`.
    Completions {
        /// bash, zsh, fish (also elvish, powershell).
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
}

pub(crate) fn parse_kv(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected K=V, got {s:?}")),
    }
}

/// `--remote`: `http://HOST:PORT`, `https://HOST:PORT` or `unix:/PATH`, as given.
///
/// # Errors
/// Another scheme, or no `HOST:PORT` (or a path after it).
pub(crate) fn parse_remote_url(s: &str) -> Result<String, String> {
    let host_port = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"));
    let ok = match host_port {
        Some(hp) => {
            let hp = hp.trim_end_matches('/');
            !hp.is_empty() && !hp.contains('/')
        }
        None => s.strip_prefix("unix:").is_some_and(|p| !p.is_empty()),
    };
    if ok {
        Ok(s.to_string())
    } else {
        Err("expected http://HOST:PORT, https://HOST:PORT or unix:/PATH".into())
    }
}

/// `--mode`: any string (a name that is not a mode is refused after parsing, with the list
/// of modes), offered to shell completion as the modes.
#[derive(Debug, Clone, Copy)]
struct ModeNames;

impl clap::builder::TypedValueParser for ModeNames {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<String, clap::Error> {
        clap::builder::StringValueParser::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            Mode::ALL
                .iter()
                .map(|m| clap::builder::PossibleValue::new(m.as_str())),
        ))
    }
}

/// The clap definition of `skyhook-run` (its `--help`, man page and completions).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--detailed-exitcode` names the status it exits with (its help said 2), and the
    /// `check` trap is shown as the two characters `\n` (a line break was printed).
    #[test]
    fn help_says_what_happens() {
        let help = command().render_long_help().to_string();
        assert!(
            help.contains("Exit 3 (instead of 0) from a dry run"),
            "{help}"
        );
        assert!(help.contains("known traps (a `\\n` in a\n"), "{help}");
    }
}

const PLAN_AFTER_HELP: &str = "\
What it does:
  Reads the Skyhook CR, picks the nodes of NODES its spec.nodeSelectors select (matchLabels,
  matchExpressions In/NotIn/Exists/DoesNotExist; none: every node), as the operator does, and
  on each selected node asks its `skyhook-agent serve` for a read-only plan of every package
  of the CR, in dependsOn order (execution kind package_plan; the node plans against its live
  host root exactly as `skyhook-run --package DIR --mode MODE` does, step flags honoured, and
  can write nothing: docs/fleet.md). A plan-scoped token (`NAME SHA256 plan` in the node's
  tokens file) is all it needs.

NODES:
  YAML or JSON: a list of {name, labels, address} (or {nodes: [...]}), or the output of
  `kubectl get nodes -o json`. A node without address gets --address-template, where {name},
  {InternalIP}, {ExternalIP} and {Hostname} are replaced (e.g. https://{InternalIP}:8443).

Packages:
  --package NAME=DIR gives a package's directory; otherwise it is found beside the CR:
  <CR dir>/NAME, the CR's own directory, or <CR dir>/../NAME (whichever config.json has that
  package_name). The CR's configMap and env of each package are sent with it.

Output:
  Nodes with the same plan form one group (node names, times and ids do not split groups):
      == would change on 3 nodes: gpu-01, gpu-02, gpu-07
      package containerd-nvidia 1.0.0
      --- mode apply
      ==> step ...   (the plan lines, as skyhook-run --package prints them)
  then `== converged on ...` groups, one `== failed on NODE: why` line per failed node, the
  nodes excluded by the selector, and one summary line:
      41 selected: 38 would change (2 plans), 2 converged, 1 failed
  --output json: one document, nodes (one record each), groups, excluded, summary
  (docs/plan.schema.json, fleetPlan). A progress line goes to stderr on a terminal.

Limits:
  At most --parallel nodes at once; each node must answer all its packages within
  --node-timeout, in at most --max-stream bytes per package; a node that is down, slow,
  dripping, flooding or presents a certificate the CA does not vouch for is reported failed
  and holds no other. Ctrl-C stops: what finished is printed, the rest listed (exit 130).

Exit status: 0 done; 1 a node failed to plan (each named) or bad input; 2 a malformed
command line; 3 with --detailed-exitcode, changes pending on some node; 130 Ctrl-C.

Examples:
  skyhook-run plan --skyhook-cr examples/containerd-nvidia/skyhook.yaml \\
      --nodes nodes.yaml --token-file plan.token --tls-ca ca.pem
  kubectl get nodes -o json > nodes.json
  skyhook-run plan --skyhook-cr cr.yaml --nodes nodes.json \\
      --address-template 'https://{InternalIP}:8443' --token-file plan.token --tls-ca ca.pem \\
      --output json --detailed-exitcode";

/// `skyhook-run plan` arguments.
#[derive(Debug, clap::Args)]
#[command(after_help = PLAN_AFTER_HELP)]
pub(crate) struct PlanArgs {
    /// The Skyhook CR (YAML or JSON) whose packages are planned.
    #[arg(long = "skyhook-cr", value_name = "FILE")]
    pub(crate) skyhook_cr: PathBuf,
    /// The nodes: a list of {name, labels, address}, or `kubectl get nodes -o json` output.
    #[arg(long, value_name = "FILE")]
    pub(crate) nodes: PathBuf,
    /// Address of a node's serve when NODES gives none: {name}, {InternalIP}, {ExternalIP},
    /// {Hostname} are replaced (e.g. https://{InternalIP}:8443).
    #[arg(long, value_name = "TEMPLATE")]
    pub(crate) address_template: Option<String>,
    /// A package's directory, NAME as in the CR's spec.packages (repeatable); default: beside
    /// the CR.
    #[arg(long = "package", value_name = "NAME=DIR", value_parser = parse_kv)]
    pub(crate) packages: Vec<(String, String)>,
    /// A mode to plan per package, in order (repeatable; default apply then config).
    #[arg(long = "mode", value_name = "MODE")]
    pub(crate) modes: Vec<String>,
    /// The bearer token (a file holding it); a plan-scoped one is enough.
    #[arg(long, value_name = "FILE")]
    pub(crate) token_file: Option<PathBuf>,
    /// CA certificates (PEM) of the nodes' https:// addresses.
    #[arg(long, value_name = "FILE")]
    pub(crate) tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for nodes that ask for one; needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// Client private key (PEM) for --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
    /// Nodes planned at once.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub(crate) parallel: usize,
    /// How long one node may take for all its packages (500ms, 30s, 2m).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = super::serve::parse_duration)]
    pub(crate) node_timeout: Duration,
    /// The most bytes of events read from one node for one package (then it is failed).
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = super::serve::parse_size)]
    pub(crate) max_stream: usize,
    /// text (grouped plans and a summary line) or json (one document).
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = Output::Text)]
    pub(crate) output: Output,
    /// Exit 3 when the preview succeeded and some node would change.
    #[arg(long)]
    pub(crate) detailed_exitcode: bool,
}
