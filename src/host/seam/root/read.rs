//! Whole-file reads of the host API: a regular file under the root, checked before and after
//! it is opened, at most [`MAX_READ_BYTES`], so a FIFO cannot block a step and a device or a
//! runaway file cannot exhaust memory.

use std::path::Path;

use crate::host::root::error::{HostError, Result};
use crate::host::root::{HostRoot, kind_name};

/// The largest file the host API reads whole, in bytes (64 MiB): `fs::read`, `fs::read_or`,
/// the text edits (`ensure_line`, blocks, `append`), `copy`, the comparison before `write`,
/// `os::`, `sysctl::`/`grub::` files, configMaps, node metadata and secrets. Twice Rhai's
/// [`max_string_size`](crate::script::Limits::max_string_size) (32 MiB), so a text edit of
/// any file a script could have written works, while `/dev/zero`-like or runaway files cannot
/// exhaust the agent's memory. A larger file fails the call with
/// [`HostError::FileTooLarge`].
pub const MAX_READ_BYTES: u64 = 64 << 20;

/// The whole content of the regular file at `key` under `root` (`shown` is the path for
/// errors), `None` when absent; symlinks are followed inside the root.
///
/// The file is checked with `stat` before it is opened, then opened `O_NONBLOCK | O_NOCTTY`
/// and checked again with `fstat` ([`crate::host::root::HostRoot::read_regular`]), so a FIFO
/// never blocks the step (the deadline cannot interrupt a blocking read) and a device never
/// streams into memory.
///
/// # Errors
/// [`HostError::WrongKind`] for a directory; [`HostError::NotRegular`] for a FIFO, device or
/// socket; [`HostError::FileTooLarge`] above [`MAX_READ_BYTES`]; resolution and read
/// failures (a file swapped or grown between the checks fails with the root error naming
/// the limit).
pub(crate) fn read_whole(root: &HostRoot, key: &Path, shown: &Path) -> Result<Option<Vec<u8>>> {
    let Some(m) = root.metadata(key)? else {
        return Ok(None);
    };
    if m.is_dir() {
        return Err(HostError::WrongKind {
            path: shown.to_path_buf(),
            what: "is a directory",
        });
    }
    check_regular(shown, &m)?;
    Ok(Some(root.read_regular(key, MAX_READ_BYTES)?))
}

/// [`HostError::NotRegular`] / [`HostError::FileTooLarge`] for a file that may not be read.
pub(crate) fn check_regular(path: &Path, m: &std::fs::Metadata) -> Result<()> {
    if !m.is_file() {
        return Err(HostError::NotRegular {
            path: path.to_path_buf(),
            what: kind_name(m.file_type()),
        });
    }
    if m.len() > MAX_READ_BYTES {
        return Err(HostError::FileTooLarge {
            path: path.to_path_buf(),
            size: m.len(),
            limit: MAX_READ_BYTES,
        });
    }
    Ok(())
}

/// `bytes` as text: [`HostError::NotText`] naming `path` when they are not UTF-8.
pub(crate) fn text(path: &Path, bytes: Vec<u8>) -> Result<String> {
    String::from_utf8(bytes).map_err(|_| HostError::NotText {
        path: path.to_path_buf(),
    })
}
