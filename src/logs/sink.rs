//! The relay of a step's output (agent-contract 9.3) and the per-step log files (6.5).
//!
//! [`Relay`] is the Python agent's per-stream algorithm turned into a push state machine: the
//! caller reads a chunk (at most `SKYHOOK_AGENT_BUFFER_LIMIT` bytes), takes the local time
//! once, and [`Relay::feed`] appends the bytes to emit to a reused buffer. [`StreamSink`]
//! writes those bytes with one `write` to the console and one to the log file.
//! [`open_step_logs`] creates the two log files of a step without ever truncating one.
//!
//! The relay never allocates per line: the prefix (`label + timestamp + " "`) is formatted
//! once per chunk into a fixed array, newlines are found with `memchr`, and the output buffer
//! is the caller's (its capacity is kept from chunk to chunk).

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use chrono::{Datelike, NaiveDateTime, Timelike};

use crate::host::root::run_dirs::RunDirs;
use crate::host::root::{AgentFiles, HostRoot};

use super::error::LogError;

/// The replacement character U+FFFD, UTF-8 encoded.
const REPLACEMENT: &[u8] = "\u{FFFD}".as_bytes();

/// Longest prefix: 5 (label) + 26 (`YYYY-MM-DDTHH:MM:SS.ffffff`) + 1 (space), with room for a
/// five-digit year.
const PREFIX_CAP: usize = 40;

/// How many consecutive seconds [`open_step_logs`] tries before giving up.
const MAX_NAME_ATTEMPTS: u32 = 3600;

/// Mode of new log files (Python's `open(..., "w")` under the usual umask 022).
const LOG_FILE_MODE: u32 = 0o644;

/// Which stream a [`Relay`] labels: the step's stdout or stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Label {
    /// The step's stdout, labelled `[out]`.
    Out,
    /// The step's stderr, labelled `[err]`.
    Err,
}

impl Label {
    /// The label text the Python agent prints: `[out]` or `[err]`.
    pub fn as_str(self) -> &'static str {
        match self {
            Label::Out => "[out]",
            Label::Err => "[err]",
        }
    }
}

/// How a [`Relay`] writes a step's output (`SKYHOOK_AGENT_LOG_FORMAT`): the console and the
/// host log files get the same bytes either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Every line starts with the label and the chunk's local time,
    /// `[out]2025-01-02T13:45:01.123456 ` (the Python agent, v6; the default).
    #[default]
    Prefixed,
    /// The step's lines as it wrote them (invalid UTF-8 still replaced), with no label or
    /// time (the Go agent, v7).
    Plain,
}

impl LogFormat {
    /// The setting's values: `prefixed` or `plain`.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Prefixed => "prefixed",
            LogFormat::Plain => "plain",
        }
    }

    /// Parse a setting value (ASCII case ignored); `None` for anything but the two names.
    pub fn parse(value: &str) -> Option<LogFormat> {
        [LogFormat::Prefixed, LogFormat::Plain]
            .into_iter()
            .find(|f| value.eq_ignore_ascii_case(f.as_str()))
    }
}

/// Write `v` as exactly `width` decimal digits (zero padded; higher digits are dropped, which
/// only matters for years past 9999).
fn put_digits(buf: &mut [u8], v: u32, width: usize) {
    let mut v = v;
    for slot in buf[..width].iter_mut().rev() {
        *slot = b'0' + (v % 10) as u8;
        v /= 10;
    }
}

/// Format `t` as Python's `datetime.isoformat()` does for a naive time:
/// `YYYY-MM-DDTHH:MM:SS.ffffff`, the fraction omitted when the microseconds are 0. Returns the
/// number of bytes written into `buf` (19 or 26). Years outside 0..=9999 (which Python cannot
/// represent) are clamped.
pub fn format_timestamp(t: &NaiveDateTime, buf: &mut [u8; 26]) -> usize {
    let year = t.year().clamp(0, 9999) as u32;
    put_digits(&mut buf[0..], year, 4);
    buf[4] = b'-';
    put_digits(&mut buf[5..], t.month(), 2);
    buf[7] = b'-';
    put_digits(&mut buf[8..], t.day(), 2);
    buf[10] = b'T';
    put_digits(&mut buf[11..], t.hour(), 2);
    buf[13] = b':';
    put_digits(&mut buf[14..], t.minute(), 2);
    buf[16] = b':';
    // chrono encodes a leap second as nanosecond >= 1e9; Python has none, so clamp.
    put_digits(&mut buf[17..], t.second(), 2);
    let micros = (t.nanosecond() / 1_000).min(999_999);
    if micros == 0 {
        19
    } else {
        buf[19] = b'.';
        put_digits(&mut buf[20..], micros, 6);
        26
    }
}

/// Width of the UTF-8 sequence introduced by lead byte `b` (1 for anything that is not a
/// multi-byte lead; only called on bytes `str::from_utf8` reported as an incomplete tail).
fn utf8_width(b: u8) -> usize {
    match b {
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF7 => 4,
        _ => 1,
    }
}

/// One stream's relay state: the algorithm of agent-contract 9.3 as a push state machine.
///
/// For each chunk (as read from the pipe, or as produced in-process, e.g. by a script's
/// `print`), [`Relay::feed`] appends to `out`:
///
/// 1. on the first non-empty chunk of the stream, `label + t + " "`;
/// 2. the chunk decoded as UTF-8, invalid sequences replaced by U+FFFD (maximal-subpart
///    replacement, as Python's `errors="replace"` and `String::from_utf8_lossy`);
/// 3. with every `\n` replaced by `\n + label + t + " "`,
///
/// where `t` is the chunk's time formatted by [`format_timestamp`]. In [`LogFormat::Plain`]
/// the prefix is empty, so only step 2 remains. Decoding is incremental
/// \[fix\]: a multi-byte sequence split across chunks is held back (at most 3 bytes) and emitted
/// whole with the next chunk; [`Relay::finish`] turns a sequence still incomplete at the end
/// of the stream into one U+FFFD.
#[derive(Debug, Clone)]
pub struct Relay {
    label: Label,
    format: LogFormat,
    started: bool,
    prefix: [u8; PREFIX_CAP],
    prefix_len: usize,
    pending: [u8; 4],
    pending_len: usize,
}

impl Relay {
    /// A relay for a stream that has produced nothing yet, in the prefixed (v6) format.
    pub fn new(label: Label) -> Self {
        Relay::with_format(label, LogFormat::Prefixed)
    }

    /// A relay for a stream that has produced nothing yet, writing `format`.
    pub fn with_format(label: Label, format: LogFormat) -> Self {
        Relay {
            label,
            format,
            started: false,
            prefix: [0; PREFIX_CAP],
            prefix_len: 0,
            pending: [0; 4],
            pending_len: 0,
        }
    }

    /// The label this relay writes.
    pub fn label(&self) -> Label {
        self.label
    }

    /// Relay one chunk read at local time `now`, appending the bytes to emit to `out` (which
    /// is not cleared). An empty chunk emits nothing (end of stream is [`Relay::finish`]).
    pub fn feed(&mut self, chunk: &[u8], now: NaiveDateTime, out: &mut Vec<u8>) {
        if chunk.is_empty() {
            return;
        }
        self.set_prefix(&now);
        if !self.started {
            self.started = true;
            out.extend_from_slice(&self.prefix[..self.prefix_len]);
        }
        let mut data = chunk;
        if self.pending_len > 0 {
            data = self.complete_pending(data, out);
        }
        loop {
            match std::str::from_utf8(data) {
                Ok(_) => {
                    self.emit(data, out);
                    return;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    self.emit(&data[..valid], out);
                    match e.error_len() {
                        Some(n) => {
                            out.extend_from_slice(REPLACEMENT);
                            data = &data[valid + n..];
                        }
                        None => {
                            // An incomplete but so far valid sequence ends the chunk.
                            let tail = &data[valid..];
                            self.pending[..tail.len()].copy_from_slice(tail);
                            self.pending_len = tail.len();
                            return;
                        }
                    }
                }
            }
        }
    }

    /// End of stream: a multi-byte sequence left incomplete becomes one U+FFFD (appended to
    /// `out`). Nothing else is emitted; in particular no newline is added, so output that ends
    /// with `\n` leaves the dangling prefix of 9.3.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if self.pending_len > 0 {
            self.pending_len = 0;
            out.extend_from_slice(REPLACEMENT);
        }
    }

    fn set_prefix(&mut self, now: &NaiveDateTime) {
        if self.format == LogFormat::Plain {
            self.prefix_len = 0;
            return;
        }
        let label = self.label.as_str().as_bytes();
        self.prefix[..label.len()].copy_from_slice(label);
        let mut ts = [0u8; 26];
        let n = format_timestamp(now, &mut ts);
        self.prefix[label.len()..label.len() + n].copy_from_slice(&ts[..n]);
        self.prefix[label.len() + n] = b' ';
        self.prefix_len = label.len() + n + 1;
    }

    /// Complete (or reject) the held-back sequence with the first bytes of `data`; returns
    /// the rest of `data` still to relay.
    fn complete_pending<'a>(&mut self, data: &'a [u8], out: &mut Vec<u8>) -> &'a [u8] {
        let have = self.pending_len;
        let need = utf8_width(self.pending[0]).saturating_sub(have);
        let take = need.min(data.len());
        let mut tmp = [0u8; 4];
        tmp[..have].copy_from_slice(&self.pending[..have]);
        tmp[have..have + take].copy_from_slice(&data[..take]);
        let seq = &tmp[..have + take];
        match std::str::from_utf8(seq) {
            Ok(_) => {
                // A multi-byte character never contains '\n'.
                out.extend_from_slice(seq);
                self.pending_len = 0;
                &data[take..]
            }
            Err(e) => match e.error_len() {
                None => {
                    // Still incomplete: `data` was shorter than the rest of the sequence.
                    self.pending[..seq.len()].copy_from_slice(seq);
                    self.pending_len = seq.len();
                    &data[take..]
                }
                Some(n) => {
                    // The held bytes are a valid prefix, so the invalid subpart covers them
                    // all plus `n - have` bytes of `data`.
                    out.extend_from_slice(REPLACEMENT);
                    self.pending_len = 0;
                    &data[n.saturating_sub(have).min(data.len())..]
                }
            },
        }
    }

    /// Append valid UTF-8 `data`, each `\n` followed by the current prefix.
    fn emit(&self, data: &[u8], out: &mut Vec<u8>) {
        let prefix = &self.prefix[..self.prefix_len];
        let mut rest = data;
        while let Some(i) = memchr::memchr(b'\n', rest) {
            out.extend_from_slice(&rest[..=i]);
            out.extend_from_slice(prefix);
            rest = &rest[i + 1..];
        }
        out.extend_from_slice(rest);
    }
}

/// One write target of a [`StreamSink`]: a writer and the name used in errors. After the
/// first failed write the target is disabled (the stream keeps being drained and written to
/// the other target).
struct Target {
    name: String,
    writer: Box<dyn Write + Send>,
    failed: bool,
}

impl Target {
    fn write(&mut self, bytes: &[u8]) -> Result<(), LogError> {
        if self.failed {
            return Ok(());
        }
        match self
            .writer
            .write_all(bytes)
            .and_then(|()| self.writer.flush())
        {
            Ok(()) => Ok(()),
            Err(source) => {
                self.failed = true;
                Err(LogError::Write {
                    target: self.name.clone(),
                    source,
                })
            }
        }
    }
}

/// Where one stream's relayed bytes go: a console stream (the agent's stdout for
/// [`Label::Out`], stderr for [`Label::Err`]) and optionally the step's log file.
///
/// Console and file receive identical bytes, each with one `write_all` per chunk and no
/// userspace buffering (so both are "flushed" per chunk, as 9.3 step 6 asks). A target whose
/// write fails is reported once and then skipped, so a closed console never stops the log
/// file (or the draining of the child's pipe).
pub struct StreamSink {
    console: Target,
    file: Option<Target>,
}

impl std::fmt::Debug for StreamSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamSink")
            .field("console", &self.console.name)
            .field("file", &self.file.as_ref().map(|t| &t.name))
            .finish()
    }
}

impl StreamSink {
    /// A sink writing to the agent's own console stream for `label` (fd 1 for `Out`, fd 2
    /// for `Err`, through a duplicate of the descriptor so no std buffer sits in between) and
    /// to `file` (named `file_name` in errors).
    ///
    /// Side effect: flushes `std::io::stdout()` first, so text the agent printed earlier is
    /// not overtaken by relayed output. The agent must not print on the same stream while the
    /// sink is in use.
    ///
    /// # Errors
    /// `LogError::Write` when the descriptor cannot be duplicated.
    pub fn console(label: Label, file: Option<(File, PathBuf)>) -> Result<Self, LogError> {
        let (name, dup) = match label {
            Label::Out => {
                let _ = io::stdout().flush();
                ("stdout", io::stdout().as_fd().try_clone_to_owned())
            }
            Label::Err => ("stderr", io::stderr().as_fd().try_clone_to_owned()),
        };
        let fd = dup.map_err(|source| LogError::Write {
            target: name.to_string(),
            source,
        })?;
        Ok(Self::new(
            name,
            Box::new(File::from(fd)),
            file.map(|(f, p)| (Box::new(f) as Box<dyn Write + Send>, p)),
        ))
    }

    /// A sink over any console writer (named `console_name` in errors) and an optional file
    /// writer with its path. The writers should not buffer (or must flush in `flush`).
    pub fn new(
        console_name: &str,
        console: Box<dyn Write + Send>,
        file: Option<(Box<dyn Write + Send>, PathBuf)>,
    ) -> Self {
        StreamSink {
            console: Target {
                name: console_name.to_string(),
                writer: console,
                failed: false,
            },
            file: file.map(|(writer, path)| Target {
                name: path.display().to_string(),
                writer,
                failed: false,
            }),
        }
    }

    /// Write `bytes` to the console and the file (nothing for an empty slice). Every failure
    /// is pushed to `errors` (at most one per target over the sink's life).
    pub fn write(&mut self, bytes: &[u8], errors: &mut Vec<LogError>) {
        if bytes.is_empty() {
            return;
        }
        if let Err(e) = self.console.write(bytes) {
            errors.push(e);
        }
        if let Some(file) = &mut self.file
            && let Err(e) = file.write(bytes)
        {
            errors.push(e);
        }
    }
}

/// The two log files of one executed step (agent-contract 6.5), freshly created and empty.
#[derive(Debug)]
pub struct StepLogFiles {
    /// Host path of the stdout log: `<log_dir>/<base>-<TS>.log`.
    pub out_path: PathBuf,
    /// Host path of the stderr log: `out_path` + `.err`.
    pub err_path: PathBuf,
    /// The stdout log, open for writing.
    pub out_file: File,
    /// The stderr log, open for writing.
    pub err_file: File,
    /// The step's logs that existed before these were created, newest first (host paths),
    /// for [`prune_listed`](super::retention::prune_listed) after the step.
    pub previous: Vec<PathBuf>,
}

/// The file-name timestamp of 6.5: UTC `%Y-%m-%d-%H%M%S` (e.g. `2025-01-02-134501`).
pub fn file_timestamp(t: &chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%d-%H%M%S").to_string()
}

/// Create the step's log files `<log_dir>/<base>-<TS>.log` and `<...>.log.err` (host paths
/// under `root`), `TS` = [`file_timestamp`] of `start_utc`.
///
/// `base` is the step path (`sub/x.sh`) or `interrupts/<type>_<i>`; its directories are kept
/// and missing parents created (0755). Both files are created with `O_EXCL` (mode 0644): when
/// either name is taken, the next second's `TS` is tried, and so on, so an existing log is
/// never truncated and names keep the shape retention matches \[fix: Python sleeps one second
/// per step instead\]. No sleeping happens. Leading `/` in `base` are ignored.
///
/// # Errors
/// [`LogError::Create`] for any creation failure other than a taken name;
/// [`LogError::NoFreeName`] after 3600 taken seconds.
pub fn open_step_logs(
    root: &HostRoot,
    log_dir: &Path,
    base: &str,
    start_utc: chrono::DateTime<chrono::Utc>,
) -> Result<StepLogFiles, LogError> {
    let previous = super::retention::list(root, log_dir, base)?;
    open_step_logs_after(root, log_dir, base, start_utc, previous)
}

/// [`open_step_logs`] given the step's existing logs, newest first, as
/// [`super::retention::list`] (or a [`super::retention::LogIndex`]) returns them: the
/// directory is not listed again.
///
/// # Errors
/// As [`open_step_logs`].
pub fn open_step_logs_after(
    root: &HostRoot,
    log_dir: &Path,
    base: &str,
    start_utc: chrono::DateTime<chrono::Utc>,
    previous: Vec<(String, PathBuf)>,
) -> Result<StepLogFiles, LogError> {
    open_logs(None, root, log_dir, base, start_utc, previous)
}

/// [`open_step_logs_after`] creating the files in the log directory's descriptor that
/// `dirs` keeps for the run ([`RunDirs::create_new`]: one `openat`, no resolution, once the
/// directory was opened by the run's first step there).
///
/// # Errors
/// As [`open_step_logs`].
pub fn open_step_logs_in(
    dirs: &RunDirs,
    root: &HostRoot,
    log_dir: &Path,
    base: &str,
    start_utc: chrono::DateTime<chrono::Utc>,
    previous: Vec<(String, PathBuf)>,
) -> Result<StepLogFiles, LogError> {
    open_logs(Some(dirs), root, log_dir, base, start_utc, previous)
}

fn open_logs(
    dirs: Option<&RunDirs>,
    root: &HostRoot,
    log_dir: &Path,
    base: &str,
    start_utc: chrono::DateTime<chrono::Utc>,
    previous: Vec<(String, PathBuf)>,
) -> Result<StepLogFiles, LogError> {
    let create = |p: &Path| match dirs {
        Some(d) => d.create_new(&AgentFiles::new(root), p, LOG_FILE_MODE),
        None => AgentFiles::new(root).create_new(p, LOG_FILE_MODE),
    };
    let remove = |p: &Path| match dirs {
        Some(d) => d.remove_file(&AgentFiles::new(root), p),
        None => AgentFiles::new(root).remove_file(p),
    };
    let base = base.trim_start_matches('/');
    // Never reuse a name retention may have deleted: start after the newest existing log.
    let mut start_utc = start_utc;
    if let Some((newest, _)) = previous.first()
        && let Ok(t) = chrono::NaiveDateTime::parse_from_str(newest, "%Y-%m-%d-%H%M%S")
    {
        let after = t
            .and_utc()
            .checked_add_signed(chrono::TimeDelta::seconds(1));
        start_utc = start_utc.max(after.unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC));
    }
    let mut first = None;
    for attempt in 0..MAX_NAME_ATTEMPTS {
        let Some(at) = start_utc.checked_add_signed(chrono::TimeDelta::seconds(i64::from(attempt)))
        else {
            break;
        };
        let ts = file_timestamp(&at);
        let out_path = log_dir.join(format!("{base}-{ts}.log"));
        let err_path = log_dir.join(format!("{base}-{ts}.log.err"));
        first.get_or_insert_with(|| out_path.clone());
        let out_file = match create(&out_path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(LogError::Create(e)),
        };
        match create(&err_path) {
            Ok(err_file) => {
                return Ok(StepLogFiles {
                    out_path,
                    err_path,
                    out_file,
                    err_file,
                    previous: previous.into_iter().map(|(_, p)| p).collect(),
                });
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                // A stray `.log.err` (Python never pruned them): give the name up entirely.
                drop(out_file);
                remove(&out_path).map_err(LogError::Create)?;
            }
            Err(e) => {
                drop(out_file);
                let _ = remove(&out_path);
                return Err(LogError::Create(e));
            }
        }
    }
    Err(LogError::NoFreeName {
        path: first.unwrap_or_default(),
        attempts: MAX_NAME_ATTEMPTS,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    fn t(h: u32, m: u32, s: u32, micro: u32) -> NaiveDateTime {
        NaiveDate::from_ymd_opt(2025, 1, 2)
            .unwrap()
            .and_hms_micro_opt(h, m, s, micro)
            .unwrap()
    }

    /// What `r` writes for `chunks` (each read at its time), then the end of the stream.
    fn relay<'a>(
        mut r: Relay,
        chunks: impl IntoIterator<Item = (&'a [u8], NaiveDateTime)>,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        for (c, now) in chunks {
            r.feed(c, now, &mut out);
        }
        r.finish(&mut out);
        out
    }

    /// [`relay`] of a prefixed relay labelled `label`.
    fn relay_all(label: Label, chunks: &[(&[u8], NaiveDateTime)]) -> Vec<u8> {
        relay(Relay::new(label), chunks.iter().copied())
    }

    /// `bytes` read `n` at a time, the i-th read (from 0) at `01:00:00` plus i+1 µs.
    fn reads_of(bytes: &[u8], n: usize) -> impl Iterator<Item = (&[u8], NaiveDateTime)> {
        bytes
            .chunks(n)
            .enumerate()
            .map(|(i, c)| (c, t(1, 0, 0, i as u32 + 1)))
    }

    /// A host root in a temp dir (kept alive by the first value) with a directory `/log`
    /// (its agent-side path last).
    fn log_root() -> (tempfile::TempDir, HostRoot, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let root = HostRoot::open(d.path()).unwrap();
        let dir = d.path().join("log");
        std::fs::create_dir_all(&dir).unwrap();
        (d, root, dir)
    }

    /// The stdout log path [`open_step_logs`] gives step `base` in `/log` at UTC `when`.
    fn out_path(root: &HostRoot, base: &str, when: &str) -> PathBuf {
        open_step_logs(root, Path::new("/log"), base, utc(when))
            .unwrap()
            .out_path
    }

    #[test]
    fn timestamp_shapes() {
        let mut b = [0u8; 26];
        let n = format_timestamp(&t(13, 45, 1, 123_456), &mut b);
        assert_eq!(&b[..n], b"2025-01-02T13:45:01.123456");
        let n = format_timestamp(&t(3, 4, 5, 0), &mut b);
        assert_eq!(&b[..n], b"2025-01-02T03:04:05");
        let n = format_timestamp(&t(3, 4, 5, 7), &mut b);
        assert_eq!(&b[..n], b"2025-01-02T03:04:05.000007");
    }

    #[test]
    fn single_line_without_newline() {
        let out = relay_all(Label::Out, &[(b"hello", t(13, 45, 1, 123_456))]);
        assert_eq!(out, b"[out]2025-01-02T13:45:01.123456 hello");
    }

    #[test]
    fn two_lines_one_chunk_and_dangling_prefix() {
        let out = relay_all(Label::Out, &[(b"one\ntwo\n", t(13, 45, 1, 5))]);
        assert_eq!(
            out,
            b"[out]2025-01-02T13:45:01.000005 one\n[out]2025-01-02T13:45:01.000005 two\n[out]2025-01-02T13:45:01.000005 "
        );
    }

    #[test]
    fn line_timestamp_is_that_of_preceding_newline_chunk() {
        let out = relay_all(
            Label::Err,
            &[(b"a\nb", t(1, 0, 0, 0)), (b"c\nd", t(2, 0, 0, 0))],
        );
        assert_eq!(
            out,
            b"[err]2025-01-02T01:00:00 a\n[err]2025-01-02T01:00:00 bc\n[err]2025-01-02T02:00:00 d"
        );
    }

    #[test]
    fn empty_stream_emits_nothing() {
        let out = relay_all(Label::Out, &[(b"", t(1, 0, 0, 0))]);
        assert_eq!(out, b"");
    }

    #[test]
    fn limit_four_long_line_has_one_prefix() {
        // Case 33: a 1000-character line read 4 bytes at a time.
        let line = format!("{}\n", "a".repeat(1000));
        let out = relay(Relay::new(Label::Out), reads_of(line.as_bytes(), 4));
        // the first chunk's time opens the line; the chunk holding '\n' is the 251st
        let expected = format!(
            "[out]2025-01-02T01:00:00.000001 {}\n[out]2025-01-02T01:00:00.000251 ",
            "a".repeat(1000)
        );
        assert_eq!(String::from_utf8(out).unwrap(), expected);
    }

    #[test]
    fn plain_format_relays_the_lines_without_label_or_time() {
        // Two lines, a split 3-byte character, an invalid byte, read 3 bytes at a time.
        let input = "one\ntwo \u{20AC}\n".as_bytes().to_vec();
        let mut input = input;
        input.extend_from_slice(b"bad \xFF end");
        for label in [Label::Out, Label::Err] {
            let out = relay(
                Relay::with_format(label, LogFormat::Plain),
                reads_of(&input, 3),
            );
            assert_eq!(out, "one\ntwo \u{20AC}\nbad \u{FFFD} end".as_bytes());
        }
        assert_eq!(LogFormat::parse("PLAIN"), Some(LogFormat::Plain));
        assert_eq!(LogFormat::parse("prefixed"), Some(LogFormat::Prefixed));
        assert_eq!(LogFormat::parse("v7"), None);
    }

    #[test]
    fn split_utf8_sequence_is_kept() {
        let e = "é€😀".as_bytes(); // 2 + 3 + 4 bytes
        let chunks: Vec<(&[u8], NaiveDateTime)> = e.chunks(1).map(|c| (c, t(1, 0, 0, 0))).collect();
        let out = relay_all(Label::Out, &chunks);
        assert_eq!(out, "[out]2025-01-02T01:00:00 é€😀".as_bytes());
        // split 2|7
        let out = relay_all(
            Label::Out,
            &[(&e[..2], t(1, 0, 0, 0)), (&e[2..], t(1, 0, 0, 0))],
        );
        assert_eq!(out, "[out]2025-01-02T01:00:00 é€😀".as_bytes());
        // split in the middle of the 4-byte sequence, followed by a newline
        let mut second = e[7..].to_vec();
        second.extend_from_slice(b"\nx");
        let out = relay_all(
            Label::Out,
            &[(&e[..7], t(1, 0, 0, 0)), (&second, t(2, 0, 0, 0))],
        );
        assert_eq!(
            out,
            "[out]2025-01-02T01:00:00 é€😀\n[out]2025-01-02T02:00:00 x".as_bytes()
        );
    }

    #[test]
    fn invalid_bytes_become_replacement() {
        let out = relay_all(Label::Out, &[(b"a\xffb\n", t(1, 0, 0, 0))]);
        assert_eq!(
            out,
            "[out]2025-01-02T01:00:00 a\u{FFFD}b\n[out]2025-01-02T01:00:00 ".as_bytes()
        );
        // a truncated sequence followed by ASCII in the next chunk: one U+FFFD, ASCII kept
        let out = relay_all(
            Label::Out,
            &[(b"x\xe2\x82", t(1, 0, 0, 0)), (b"\ny", t(1, 0, 0, 0))],
        );
        assert_eq!(
            out,
            "[out]2025-01-02T01:00:00 x\u{FFFD}\n[out]2025-01-02T01:00:00 y".as_bytes()
        );
        // dangling at end of stream
        let out = relay_all(Label::Out, &[(b"z\xf0\x9f", t(1, 0, 0, 0))]);
        assert_eq!(out, "[out]2025-01-02T01:00:00 z\u{FFFD}".as_bytes());
        // the incremental result equals whole-stream lossy decoding, for every split point
        let data: &[u8] = b"a\xc3\xa9\xff\xe2\x82\xac\xe2\x82b\xf0\x9f\x98\x80\xf4\x90\x80\x80\n";
        let whole = String::from_utf8_lossy(data).into_owned();
        for split in 0..=data.len() {
            let out = relay_all(
                Label::Out,
                &[
                    (&data[..split], t(1, 0, 0, 0)),
                    (&data[split..], t(1, 0, 0, 0)),
                ],
            );
            let expected =
                format!("[out]2025-01-02T01:00:00 {}", whole) + "[out]2025-01-02T01:00:00 ";
            assert_eq!(
                String::from_utf8(out).unwrap(),
                expected,
                "split at {split}"
            );
        }
    }

    #[test]
    fn sink_writes_identical_bytes_and_reports_once() {
        struct Broken;
        impl Write for Broken {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::from_raw_os_error(libc::EPIPE))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        let f = File::create(&p).unwrap();
        let mut sink = StreamSink::new("stdout", Box::new(Broken), Some((Box::new(f), p.clone())));
        let mut errors = Vec::new();
        sink.write(b"ab", &mut errors);
        sink.write(b"cd", &mut errors);
        assert_eq!(errors.len(), 1);
        assert_eq!(
            errors[0].to_string(),
            "failed to write step output to stdout"
        );
        assert_eq!(std::fs::read(&p).unwrap(), b"abcd");
    }

    fn utc(s: &str) -> chrono::DateTime<chrono::Utc> {
        chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S")
            .unwrap()
            .and_utc()
    }

    #[test]
    fn step_logs_named_and_created_with_parents() {
        let d = tempfile::tempdir().unwrap();
        let root = HostRoot::open(d.path()).unwrap();
        let logs = open_step_logs(
            &root,
            Path::new("/log/demo/1.0.0"),
            "sub/x.sh",
            utc("2025-01-02 13:45:01"),
        )
        .unwrap();
        assert_eq!(
            logs.out_path,
            Path::new("/log/demo/1.0.0/sub/x.sh-2025-01-02-134501.log")
        );
        assert_eq!(
            logs.err_path,
            Path::new("/log/demo/1.0.0/sub/x.sh-2025-01-02-134501.log.err")
        );
        let real = d.path().join("log/demo/1.0.0/sub");
        assert_eq!(
            std::fs::read(real.join("x.sh-2025-01-02-134501.log")).unwrap(),
            b""
        );
        assert_eq!(
            std::fs::read(real.join("x.sh-2025-01-02-134501.log.err")).unwrap(),
            b""
        );
    }

    #[test]
    fn step_logs_collision_takes_next_second_without_truncating() {
        let (_d, root, dir) = log_root();
        std::fs::write(dir.join("foo.sh-2025-01-02-235959.log"), "old run").unwrap();
        // a stray .err for the next second (Python never pruned them)
        std::fs::write(dir.join("foo.sh-2025-01-03-000000.log.err"), "old err").unwrap();
        assert_eq!(
            out_path(&root, "foo.sh", "2025-01-02 23:59:59"),
            Path::new("/log/foo.sh-2025-01-03-000001.log")
        );
        assert_eq!(
            std::fs::read(dir.join("foo.sh-2025-01-02-235959.log")).unwrap(),
            b"old run"
        );
        assert_eq!(
            std::fs::read(dir.join("foo.sh-2025-01-03-000000.log.err")).unwrap(),
            b"old err"
        );
        // the name given up for its stray .err was not left behind
        assert!(!dir.join("foo.sh-2025-01-03-000000.log").exists());
        // a second step in the same second gets the second after
        assert_eq!(
            out_path(&root, "foo.sh", "2025-01-02 23:59:59"),
            Path::new("/log/foo.sh-2025-01-03-000002.log")
        );
    }

    #[test]
    fn step_logs_never_reuse_a_pruned_name() {
        // regression (case 32): 7 runs within one second; retention deleted the oldest name,
        // which must not be handed out again.
        let (_d, root, dir) = log_root();
        for s in 31..=35 {
            std::fs::write(dir.join(format!("foo.sh-2025-01-02-0000{s}.log")), "").unwrap();
        }
        assert_eq!(
            out_path(&root, "foo.sh", "2025-01-02 00:00:30"),
            Path::new("/log/foo.sh-2025-01-02-000036.log")
        );
        // an older newest log does not push a fresh run's name
        assert_eq!(
            out_path(&root, "bar.sh", "2025-01-02 00:00:30"),
            Path::new("/log/bar.sh-2025-01-02-000030.log")
        );
    }
}
