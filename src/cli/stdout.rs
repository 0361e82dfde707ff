//! The commands' results on stdout (plans, JSON documents, `OK FILE`, help): a write that
//! fails is not ignored. A reader that went away (EPIPE: `| head`) ends the output quietly
//! with the command's own status; any other failure (a full disk, `/dev/full`) is reported
//! and the command fails, so a result is never lost behind exit 0.

use std::io::{self, Write};
use std::sync::{Arc, Mutex};

use super::exit::ExitStatus;

/// Write `text` to stdout and flush it.
///
/// # Errors
/// The write's or the flush's error.
pub(crate) fn print(text: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// The status of a command whose result was written with `written`: `status` when the
/// write succeeded or the reader went away (EPIPE), else the error on stderr (`bin: error:
/// cannot write to stdout: ...`) and [`ExitStatus::Failure`] in place of a success.
pub(crate) fn status(bin: &str, written: io::Result<()>, status: ExitStatus) -> ExitStatus {
    match written {
        Ok(()) => status,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => status,
        Err(e) => {
            eprintln!("{bin}: error: cannot write to stdout: {e}");
            match status {
                ExitStatus::Done | ExitStatus::Changes => ExitStatus::Failure,
                other => other,
            }
        }
    }
}

/// Stdout for a [`crate::mode::Console`] that keeps the first write error, for
/// [`Watched::result`] after the run (the console itself drops write errors).
#[derive(Clone, Default)]
pub(crate) struct Watched(Arc<Mutex<Option<io::Error>>>);

impl Watched {
    /// The first write error, if any (taken).
    pub(crate) fn result(&self) -> io::Result<()> {
        match self.0.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn keep<T>(&self, r: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &r {
            let mut first = self.0.lock().unwrap_or_else(|p| p.into_inner());
            if first.is_none() {
                *first = Some(io::Error::new(e.kind(), e.to_string()));
            }
        }
        r
    }
}

impl Write for Watched {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let r = io::stdout().lock().write(b);
        self.keep(r)
    }
    fn flush(&mut self) -> io::Result<()> {
        let r = io::stdout().lock().flush();
        self.keep(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_fails_a_success_and_epipe_does_not() {
        let full = || Err(io::Error::from_raw_os_error(28));
        let pipe = || Err(io::Error::from(io::ErrorKind::BrokenPipe));
        assert_eq!(
            status("x", Ok(()), ExitStatus::Changes),
            ExitStatus::Changes
        );
        assert_eq!(status("x", full(), ExitStatus::Done), ExitStatus::Failure);
        assert_eq!(
            status("x", full(), ExitStatus::Changes),
            ExitStatus::Failure
        );
        assert_eq!(status("x", full(), ExitStatus::Usage), ExitStatus::Usage);
        assert_eq!(status("x", pipe(), ExitStatus::Done), ExitStatus::Done);
    }
}
