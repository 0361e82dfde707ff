//! The user database's files and the shadow-utils lock that guards them (`lckpwdf(3)`):
//! below the areas, because both the `user::`/`group::` edits and the undo journal's
//! replay of those files take it.

use std::fs::File;
use std::path::Path;

use crate::host::root::{HostRoot, RootError};

/// `/etc/passwd`.
pub const PASSWD: &str = "/etc/passwd";
/// `/etc/group`.
pub const GROUP: &str = "/etc/group";
/// `/etc/shadow`.
pub const SHADOW: &str = "/etc/shadow";
/// `/etc/gshadow`.
pub const GSHADOW: &str = "/etc/gshadow";
/// The shadow-utils lock file (`lckpwdf(3)`).
pub const PWD_LOCK: &str = "/etc/.pwd.lock";

/// Whether `path` (a host path) is one of the user database's four files, which `useradd`
/// and friends edit under [`PWD_LOCK`] only.
pub fn is_user_db(path: &Path) -> bool {
    [PASSWD, SHADOW, GROUP, GSHADOW]
        .iter()
        .any(|f| path == Path::new(f))
}

/// The shadow-utils lock (`lckpwdf(3)`): a POSIX write lock on `/etc/.pwd.lock`, released
/// when dropped (the file is closed). A lock file this lock created is unlinked first, while
/// still locked, so none is left behind on a host that had none (shadow-utils makes its own
/// when it needs one; a `useradd` that opened the new file while it was held, which is the
/// only one that could then lock the unlinked file, would have to start in that moment).
#[derive(Debug)]
pub(crate) struct PwdLock {
    /// The root (a duplicate handle) when this lock created the file.
    created: Option<HostRoot>,
    _file: File,
}

impl Drop for PwdLock {
    fn drop(&mut self) {
        if let Some(root) = self.created.take() {
            let path = Path::new(PWD_LOCK);
            // Only the file this lock made (not one that replaced it).
            if root.names(path, &self._file).unwrap_or(false) {
                let _ = root.remove_file(path);
            }
        }
    }
}

/// Open (creating it 0600 when missing) and lock `/etc/.pwd.lock` with `fcntl(F_SETLKW)`,
/// waiting while another process holds it (retried on `EINTR`).
///
/// # Errors
/// Opening or locking the file (the error names it).
pub(in crate::host::seam) fn lock_pwd(root: &HostRoot) -> Result<PwdLock, RootError> {
    let path = Path::new(PWD_LOCK);
    let err = |op: &'static str, source: std::io::Error| RootError {
        op,
        path: path.to_path_buf(),
        root: root.mount().to_path_buf(),
        source,
    };
    let mut last = None;
    let mut file = None;
    let mut created = None;
    for _ in 0..16 {
        match root.create_new(path, 0o600) {
            Ok(f) => {
                created = root.try_clone().ok();
                file = Some(f);
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        match root.open_write(path) {
            Ok(f) => {
                file = Some(f);
                break;
            }
            Err(e) if e.is_not_found() => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    let Some(file) = file else {
        return Err(last.unwrap_or_else(|| err("open", std::io::ErrorKind::NotFound.into())));
    };
    // SAFETY: `flock` is a plain C struct; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    loop {
        match nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_SETLKW(&fl)) {
            Ok(_) => {
                return Ok(PwdLock {
                    created,
                    _file: file,
                });
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(err("lock", std::io::Error::from(e))),
        }
    }
}
