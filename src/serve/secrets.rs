//! Secret coordinates of a start request resolved on the host: `<secrets-dir>/<name>/<key>`,
//! the layout in which the kubelet mounts a Secret volume (`<key>` a symlink to
//! `..data/<key>`, `..data` a symlink to a timestamped directory) and Docker mounts one.
//! Only names in the host's allowlist are read, and a file must resolve inside its
//! `<secrets-dir>/<name>` directory (symlinks followed, but not out of it): the open itself
//! is confined ([`crate::host::secrets::read_key`], shared with the agent's `secret()`).

use std::path::PathBuf;

use serde::Deserialize;

/// Largest secret value read, in bytes.
pub const MAX_SECRET: u64 = crate::host::secrets::MAX_SECRET_BYTES;

/// One coordinate of a start request: put the value of `name`/`key` into `env`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct SecretRef {
    /// The environment variable (sh) or `secret_env()` name (rhai) that gets the value.
    pub env: String,
    /// The Secret's name (a directory under the secrets dir).
    pub name: String,
    /// The key (a file in it).
    pub key: String,
}

/// Why a coordinate was refused. None of them carries a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// `name` is not in the allowlist (`403`).
    #[error("secret not allowed")]
    NotAllowed {
        /// The coordinate's name.
        name: String,
        /// The coordinate's key.
        key: String,
    },
    /// No such file, not a regular file, too large, or resolving outside its directory
    /// (`422`).
    #[error("secret not found")]
    Missing {
        /// The coordinate's name.
        name: String,
        /// The coordinate's key.
        key: String,
    },
    /// `name` or `key` is not a plain path component, or `env` is not a variable name
    /// (`422`).
    #[error("invalid secret coordinate")]
    Invalid {
        /// The coordinate's name.
        name: String,
        /// The coordinate's key.
        key: String,
    },
}

impl SecretError {
    /// The coordinate the error names.
    pub fn coordinate(&self) -> (&str, &str) {
        match self {
            SecretError::NotAllowed { name, key }
            | SecretError::Missing { name, key }
            | SecretError::Invalid { name, key } => (name, key),
        }
    }
}

/// A plain component: not empty, no `/` or NUL, and not starting with `.` (no `..data`,
/// no `..`, no hidden kubelet bookkeeping).
fn component(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && !s.starts_with('.') && !s.contains(['/', '\0'])
}

/// A portable environment variable name.
pub fn env_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch == '_' || ch.is_ascii_alphabetic())
        && c.all(|ch| ch == '_' || ch.is_ascii_alphanumeric())
}

/// Resolves coordinates under a host-owned allowlist.
#[derive(Debug, Clone)]
pub struct Secrets {
    /// The secrets directory (`--secrets-dir`).
    pub dir: PathBuf,
    /// Secret names that may be read (`--allow-secret`, repeatable).
    pub allow: Vec<String>,
}

impl Secrets {
    /// The value of one coordinate (bytes as read, lossy UTF-8).
    ///
    /// # Errors
    /// [`SecretError`] naming the coordinate; the file is not opened unless the name is
    /// allowed.
    pub fn resolve(&self, r: &SecretRef) -> Result<String, SecretError> {
        let (name, key) = (r.name.clone(), r.key.clone());
        if !component(&r.name) || !component(&r.key) || !env_name(&r.env) {
            return Err(SecretError::Invalid { name, key });
        }
        if !self.allow.iter().any(|a| a == &r.name) {
            return Err(SecretError::NotAllowed { name, key });
        }
        let missing = || SecretError::Missing {
            name: r.name.clone(),
            key: r.key.clone(),
        };
        let bytes =
            crate::host::secrets::read_key(&self.dir, &r.name, &r.key).map_err(|_| missing())?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Resolve every coordinate, in order.
    ///
    /// # Errors
    /// The first refused one.
    pub fn resolve_all(&self, refs: &[SecretRef]) -> Result<Vec<(String, String)>, SecretError> {
        refs.iter()
            .map(|r| Ok((r.env.clone(), self.resolve(r)?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn r(name: &str, key: &str) -> SecretRef {
        SecretRef {
            env: "V".into(),
            name: name.into(),
            key: key.into(),
        }
    }

    #[test]
    fn kubelet_layout_allowlist_and_escapes() {
        let d = tempfile::tempdir().unwrap();
        // kubelet: db/..2026_01_01/password, db/..data -> ..2026_01_01, db/password -> ..data/password
        let db = d.path().join("db");
        std::fs::create_dir_all(db.join("..2026_01_01")).unwrap();
        std::fs::write(db.join("..2026_01_01/password"), "s3cr3t").unwrap();
        symlink("..2026_01_01", db.join("..data")).unwrap();
        symlink("..data/password", db.join("password")).unwrap();
        // docker: flat file
        std::fs::create_dir_all(d.path().join("registry")).unwrap();
        std::fs::write(d.path().join("registry/token"), "tok\n").unwrap();
        // an escape: a key that links out of its directory
        std::fs::create_dir_all(d.path().join("other")).unwrap();
        std::fs::write(d.path().join("other/k"), "nope").unwrap();
        symlink("../other/k", db.join("escape")).unwrap();
        let s = Secrets {
            dir: d.path().to_path_buf(),
            allow: vec!["db".into(), "registry".into()],
        };
        assert_eq!(s.resolve(&r("db", "password")).unwrap(), "s3cr3t");
        assert_eq!(s.resolve(&r("registry", "token")).unwrap(), "tok\n");
        assert!(matches!(
            s.resolve(&r("other", "k")),
            Err(SecretError::NotAllowed { .. })
        ));
        assert!(matches!(
            s.resolve(&r("db", "escape")),
            Err(SecretError::Missing { .. })
        ));
        assert!(matches!(
            s.resolve(&r("db", "nope")),
            Err(SecretError::Missing { .. })
        ));
        for (n, k) in [
            ("db", "..data"),
            ("db", "../other"),
            ("..", "x"),
            ("db", ""),
        ] {
            assert!(
                matches!(s.resolve(&r(n, k)), Err(SecretError::Invalid { .. })),
                "{n}/{k}"
            );
        }
        let mut bad = r("db", "password");
        bad.env = "1X".into();
        assert!(matches!(s.resolve(&bad), Err(SecretError::Invalid { .. })));
        let e = s.resolve(&r("other", "k")).unwrap_err();
        assert_eq!(e.coordinate(), ("other", "k"));
        assert!(!format!("{e:?}{e}").contains("nope"));
    }

    /// A FIFO key is refused without blocking (the read runs on a thread and must answer
    /// within a bounded time), an oversized key is refused, and a name or key linking out of
    /// `<secrets-dir>/<name>` (by absolute path too) never yields the outside content.
    #[test]
    fn fifo_oversized_and_links_out_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let db = d.path().join("s/db");
        std::fs::create_dir_all(&db).unwrap();
        std::fs::create_dir_all(d.path().join("outside")).unwrap();
        std::fs::write(d.path().join("outside/file"), "outside-content").unwrap();
        nix::unistd::mkfifo(
            &db.join("fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let big = std::fs::File::create(db.join("big")).unwrap();
        big.set_len(MAX_SECRET + 1).unwrap();
        std::fs::write(db.join("max"), vec![b'x'; MAX_SECRET as usize]).unwrap();
        symlink(d.path().join("outside/file"), db.join("abs")).unwrap();
        symlink(d.path().join("outside"), d.path().join("s/linked")).unwrap();
        let s = Secrets {
            dir: d.path().join("s"),
            allow: vec!["db".into(), "linked".into()],
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let s2 = s.clone();
        std::thread::spawn(move || tx.send(s2.resolve(&r("db", "fifo"))).unwrap());
        let fifo = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("resolving a FIFO key blocked");
        assert!(matches!(fifo, Err(SecretError::Missing { .. })), "{fifo:?}");
        assert_eq!(
            s.resolve(&r("db", "max")).unwrap().len(),
            MAX_SECRET as usize
        );
        for (n, k) in [("db", "big"), ("db", "abs"), ("linked", "file")] {
            let e = s.resolve(&r(n, k)).unwrap_err();
            assert_eq!(
                e,
                SecretError::Missing {
                    name: n.into(),
                    key: k.into()
                }
            );
        }
    }
}
