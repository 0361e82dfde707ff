//! [`HostError`]: every failure of a host API call, naming the path, command or coordinate
//! involved. Messages are lowercase and read after "failed to" where they describe an
//! operation; the cause is kept in `#[source]`.
//!
//! An area's own failures are its own error, wrapped at the API (`crate::host::api::AreaError`):
//! `SecretError`, `ConfigError`, ... Messages never contain a secret's value (a secret's
//! error names the coordinate only). Command stderr tails may contain anything a command
//! printed, so the binding layer passes every message through
//! [`crate::host::secrets::Redactor::redact`].

use std::path::PathBuf;

use crate::host::root::RootError;

/// A host API failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// A file operation under the host root failed (the message names path and root).
    #[error(transparent)]
    Root(#[from] RootError),

    /// A path argument was relative.
    #[error("paths must be absolute: {path:?}")]
    RelativePath {
        /// The path as given.
        path: String,
    },

    /// A file that must exist does not (`fs::read`, `ensure_line` with `create: false`).
    #[error("{} does not exist", path.display())]
    NotFound {
        /// The host path.
        path: PathBuf,
    },

    /// The object at a path has the wrong type for the call (a directory given to `read`).
    #[error("{}: {what}", path.display())]
    WrongKind {
        /// The host path.
        path: PathBuf,
        /// What was wrong, e.g. "is a directory".
        what: &'static str,
    },

    /// A file the host API reads whole (`fs::read`, the text edits, `copy`, `os::`, configMaps,
    /// node metadata, secrets) is not a regular file: a FIFO, a device or a socket is refused
    /// before any byte is read, so it can neither block the step nor stream without end.
    #[error("{} is {what}, not a regular file (only regular files are read)", path.display())]
    NotRegular {
        /// The host path (an agent-side path for configMaps, node metadata and secrets).
        path: PathBuf,
        /// What it is: `a fifo`, `a character device`, `a block device`, `a socket`.
        what: &'static str,
    },

    /// A file the host API reads whole is larger than the read limit (`limit` bytes:
    /// [`crate::host::root::read::MAX_READ_BYTES`], 64 MiB).
    #[error(
        "{} is too large to read: {size} bytes, more than the limit of {limit} bytes ({} MiB)",
        path.display(),
        limit >> 20
    )]
    FileTooLarge {
        /// The host path (an agent-side path for configMaps, node metadata and secrets).
        path: PathBuf,
        /// Its size in bytes (as far as it was read, for a file that grew while being read).
        size: u64,
        /// The limit in bytes.
        limit: u64,
    },

    /// Nothing can be created at `path`: an ancestor (or, for a directory, `path` itself)
    /// exists and is not a directory, or is a dangling symlink. Raised in every mode.
    #[error("cannot create {}: {} {reason}", path.display(), ancestor.display())]
    BadAncestor {
        /// The path to create.
        path: PathBuf,
        /// The offending ancestor.
        ancestor: PathBuf,
        /// `exists and is not a directory`, `is a dangling symlink (its target X does not
        /// exist)`.
        reason: String,
    },

    /// A file's content is not UTF-8 where text is needed.
    #[error("{} is not valid UTF-8 text", path.display())]
    NotText {
        /// The host path.
        path: PathBuf,
    },

    /// A regular expression argument did not compile.
    #[error("invalid regex {pattern:?}")]
    Regex {
        /// The pattern as given.
        pattern: String,
        /// The compile error.
        #[source]
        source: regex::Error,
    },

    /// An argument was outside what the call accepts (a name with `/`, an empty argv, ...).
    #[error("invalid {what}: {message}")]
    Invalid {
        /// The argument ("service name", "sysctl key", "argv", ...).
        what: &'static str,
        /// Why, including the offending value (never a secret).
        message: String,
    },

    /// A write of the step's undo journal failed (a full disk): the step is poisoned, every
    /// later effect and its end fail with this ([`crate::host::effects::journal`]).
    #[error("the undo journal could not be written, so the step fails: {message}")]
    JournalFailed {
        /// The first failed journal write, rendered with its causes (and after the step's
        /// end, what could not be undone).
        message: String,
    },

    /// A command's program does not exist (inside the host root when chrooted).
    #[error("failed to run {command}: program not found")]
    ProgramNotFound {
        /// The command line, shell-quoted.
        command: String,
    },

    /// A command could not be started or waited for.
    #[error("failed to run {command}")]
    Spawn {
        /// The command line, shell-quoted.
        command: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// A checked command (a script's `run`/`sh`, `check: true`, an internal command) exited
    /// with a code it does not accept.
    #[error("command {command} failed with exit code {code}{}{}", expected(.ok), after_colon(.stderr_tail))]
    CommandFailed {
        /// The command line, shell-quoted.
        command: String,
        /// Its exit code (the negated signal number when killed by a signal).
        code: i32,
        /// The codes it accepts; empty: only 0.
        ok: Vec<i32>,
        /// The last lines of its stderr (at most 20 lines / 2000 bytes); empty when it wrote
        /// none (the message then ends at the code).
        stderr_tail: String,
    },

    /// A command ran past its timeout; its process group was killed.
    #[error("command {command} timed out after {secs:.1}s and was killed")]
    Timeout {
        /// The command line, shell-quoted.
        command: String,
        /// The timeout in seconds.
        secs: f64,
    },

    /// A command was ended because the step's cancel token
    /// ([`crate::host::HostOptions::cancel`]) was aborted; its process group got `SIGTERM`,
    /// a grace period, then `SIGKILL`.
    #[error("command {command} was cancelled: {reason}")]
    Cancelled {
        /// The command line, shell-quoted.
        command: String,
        /// Why the token was aborted (e.g. `SIGTERM received`).
        reason: String,
    },

    /// Plan mode: a read of `path`, which a command the plan did not run (`run`, `sh`) may
    /// have touched (it names the path, or the path does not exist). Not a failure (as
    /// [`HostError::PlanUnknownFailure`]): the call is reported as unknown and the rest of the step is checked statically only
    /// ([`crate::host::api::PlanUnknown`]).
    #[error(
        "{} is unknown in the plan: the command {command}{} is only run by the apply and may change it",
        path.display(), at_position(.position)
    )]
    PlanUnknown {
        /// The host path the call read.
        path: PathBuf,
        /// The planned command line, shell-quoted.
        command: String,
        /// Where the script planned the command (`file:line`), if known.
        position: Option<String>,
    },

    /// Plan mode: a query of package or service state that the plan's own model does not
    /// answer (nothing earlier in the session planned that package's or unit's state), made
    /// after a program the plan did not run that may change packages (a package install,
    /// removal or upgrade, `run`, `sh`): that program may change the answer (a package's
    /// maintainer scripts enable units and pull in other packages), so the query is not run
    /// and, as [`HostError::PlanUnknown`], the call is reported as unknown and the rest of
    /// the step is checked statically only.
    #[error(
        "the answer of {query} is unknown in the plan: {command}{} is only run by the apply and may change it",
        at_position(.position)
    )]
    PlanUnknownQuery {
        /// The query's command line, shell-quoted.
        query: String,
        /// The session's first program the plan did not run (a command line, shell-quoted,
        /// or the action's summary).
        command: String,
        /// Where the script planned that program (`file:line`), if known.
        position: Option<String>,
    },

    /// Plan mode: a call failed in a way that depends on the host (`failure`, with its
    /// causes) after a command the plan did not run ([`HostError::depends_on_host`]; `run`,
    /// `sh`, a package, service, mount, module, grub or tuned action): the apply may not
    /// fail there, so not a failure either: the call is reported as unknown and the rest of
    /// the step is checked statically only ([`crate::host::api::PlanUnknown`]).
    #[error(
        "unknown in the plan: {failure}, as the host is before {command}{}, which only the apply runs and which may change that",
        at_position(.position)
    )]
    PlanUnknownFailure {
        /// What the call failed with in the plan, with its causes.
        failure: String,
        /// The session's first command the plan did not run (a command line, shell-quoted,
        /// or the action's summary).
        command: String,
        /// Where the script planned the command (`file:line`), if known.
        position: Option<String>,
    },

    /// A command printed more than the capture limit on one stream (without `stream`) and
    /// was ended (`SIGTERM`, grace, `SIGKILL`).
    #[error(
        "command {command} printed more than {limit} bytes on {stream} (the capture limit) and was stopped; use the stream option for large output"
    )]
    OutputTooLarge {
        /// The command line, shell-quoted.
        command: String,
        /// `stdout` or `stderr`.
        stream: &'static str,
        /// The cap in bytes ([`crate::host::system::cmd::CAPTURE_LIMIT`]).
        limit: usize,
    },

    /// `fs::fetch` could not download `url`: connection, TLS, HTTP status, redirects, size
    /// limit, timeout or cancellation (the message says which). The destination is unchanged.
    #[error("failed to download {url}: {message}")]
    Fetch {
        /// The URL as given (or the redirect target that failed).
        url: String,
        /// What went wrong.
        message: String,
    },

    /// `fs::fetch` downloaded a URL but its SHA-256 digest is not the expected one; the
    /// download was discarded and the destination is unchanged.
    #[error("{0}")]
    ChecksumMismatch(Box<ChecksumMismatch>),

    /// The batched line and block edits of a file (the session's batch, `host::effects::session`) were not
    /// written: the file changed during the step, after the edits read it under its path
    /// lock, by a writer that does not take that lock. The other writer's content is left.
    #[error(
        "{} changed under the step (by a writer that does not take skyhook's path lock) after its line edits read it; its {edits} pending line edit(s) were not written, the file is left as the other writer made it",
        path.display()
    )]
    ChangedUnderStep {
        /// The file (host path as the first edit gave it).
        path: PathBuf,
        /// How many changing line or block calls the batch held.
        edits: usize,
    },

    /// The end of a step whose batched line and block edits of a file were not written
    /// ([`HostError::ChangedUnderStep`] or the write's failure) after the call that triggered
    /// the flush got that error and the script went on: the report lists the edits, so the
    /// step must fail.
    #[error("the line edits of {} were not written: {message}", path.display())]
    EditsNotWritten {
        /// The file (host path as the first edit gave it).
        path: PathBuf,
        /// The flush's error with its causes, as that call got it.
        message: String,
    },

    /// A plan's effect would take what the server keeps of the plan past its budget
    /// (serve's `--plan-bytes`, over every step, mode and package of the plan): `size` is
    /// what the server keeps of the effect (its planned content, and its record in the
    /// view, the report, the plan's events and its exit: `Host::charge_planned`); the
    /// effect is not planned. Raised in plan and check mode only.
    #[error(
        "planning {size} bytes for {target} ({kind}: its content, report and events) would take the plan's planned effects past its budget of {budget} bytes ({} MiB, serve --plan-bytes): {planned} bytes are planned already{}",
        budget >> 20,
        remembered_lookups(*remembered)
    )]
    PlanBudget {
        /// The effect's kind (`write`, `mkdir`, `symlink`, ...).
        kind: &'static str,
        /// What it applies to (a host path, unit, package names...).
        target: String,
        /// What the server keeps of it, in bytes.
        size: u64,
        /// Bytes the plan had planned before it.
        planned: u64,
        /// Bytes the plan's memo of real-root lookups held (`overlay::RootMemo`).
        remembered: u64,
        /// The budget in bytes.
        budget: u64,
    },

    /// Remembering the real root's answer about `path` (`overlay::RootMemo`: a plan
    /// remembers each path it looked up until it runs a command) would take what the
    /// server keeps of the plan past its budget (serve's `--plan-bytes`, shared with its
    /// planned effects): `size` is what the answer counts, `held` what the plan held
    /// before it (its planned effects and `entries` remembered answers). Raised in a plan
    /// held to a budget only.
    #[error(
        "remembering the real root's answer about {} ({size} bytes) would take the plan past its budget of {budget} bytes ({} MiB, serve --plan-bytes): it holds {held} bytes already, its planned effects and {entries} answers about the paths its steps looked up",
        path.display(),
        budget >> 20
    )]
    PlanLookupBudget {
        /// The host path looked up.
        path: PathBuf,
        /// What remembering the answer counts, in bytes.
        size: u64,
        /// Bytes the plan held: its planned effects and its remembered answers.
        held: u64,
        /// Answers the plan remembered.
        entries: usize,
        /// The budget in bytes.
        budget: u64,
    },
}

/// The end of [`HostError::PlanBudget`]'s message: what the plan's memo of real-root
/// lookups holds, when it holds anything.
fn remembered_lookups(bytes: u64) -> String {
    if bytes == 0 {
        String::new()
    } else {
        format!(" and {bytes} bytes remember the real root's answers to its lookups")
    }
}

impl HostError {
    /// Whether this is the plan's unknown outcome ([`HostError::PlanUnknown`],
    /// [`HostError::PlanUnknownQuery`], [`HostError::PlanUnknownFailure`]): the end of the
    /// step's plan, not a failure.
    pub fn is_plan_unknown(&self) -> bool {
        matches!(
            self,
            HostError::PlanUnknown { .. }
                | HostError::PlanUnknownQuery { .. }
                | HostError::PlanUnknownFailure { .. }
        )
    }

    /// Whether this failure may depend on the host root's state, which a command the plan
    /// did not run may have changed: the files under the root (missing, of another kind,
    /// too large, not text, a bad ancestor), programs and what commands do. An area's own
    /// failures (an unknown user, group or sysctl key, no package manager, an unparsable
    /// structured config file) answer in `AreaError::depends_on_host`. Not: bad arguments (a
    /// relative path, a regex, an invalid value), agent-side inputs (configMaps, node
    /// metadata, secrets, environment), the undo journal, downloads, timeouts and
    /// cancellation, and the end of the plan itself.
    pub fn depends_on_host(&self) -> bool {
        match self {
            HostError::Root(_)
            | HostError::NotFound { .. }
            | HostError::WrongKind { .. }
            | HostError::NotRegular { .. }
            | HostError::FileTooLarge { .. }
            | HostError::BadAncestor { .. }
            | HostError::NotText { .. }
            | HostError::ProgramNotFound { .. }
            | HostError::Spawn { .. }
            | HostError::CommandFailed { .. } => true,
            HostError::RelativePath { .. }
            | HostError::Regex { .. }
            | HostError::Invalid { .. }
            | HostError::JournalFailed { .. }
            | HostError::Timeout { .. }
            | HostError::Cancelled { .. }
            | HostError::PlanUnknown { .. }
            | HostError::PlanUnknownQuery { .. }
            | HostError::PlanUnknownFailure { .. }
            | HostError::OutputTooLarge { .. }
            | HostError::Fetch { .. }
            | HostError::ChecksumMismatch(_)
            | HostError::ChangedUnderStep { .. }
            | HostError::EditsNotWritten { .. }
            | HostError::PlanBudget { .. }
            | HostError::PlanLookupBudget { .. } => false,
        }
    }
}

/// The details of [`HostError::ChecksumMismatch`] (boxed: the error stays small).
#[derive(Debug, thiserror::Error)]
#[error(
    "checksum mismatch for {url}: expected sha256 {expected}, got sha256 {actual} ({} left unchanged)",
    path.display()
)]
pub struct ChecksumMismatch {
    /// The URL as given.
    pub url: String,
    /// The destination host path.
    pub path: PathBuf,
    /// The expected digest (64 lowercase hex digits).
    pub expected: String,
    /// The digest of what was downloaded.
    pub actual: String,
}

/// Result alias for host API calls.
pub type Result<T, E = HostError> = std::result::Result<T, E>;

/// ` (accepted: 0, 1)` for [`HostError::CommandFailed`] when the command accepts more than 0.
fn expected(ok: &[i32]) -> String {
    if ok.is_empty() || ok == [0] {
        return String::new();
    }
    let codes: Vec<String> = ok.iter().map(i32::to_string).collect();
    format!(" (accepted: {})", codes.join(", "))
}

/// ` (planned at file:line)` for [`HostError::PlanUnknown`], or nothing.
fn at_position(p: &Option<String>) -> String {
    p.as_ref()
        .map_or_else(String::new, |p| format!(" (planned at {p})"))
}

/// `: text` after a message, or nothing when `text` is empty.
fn after_colon(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
    }
}
