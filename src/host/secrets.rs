//! Secrets: `secret(name, key)`, `secret_env(var)` and the [`Redactor`] that hides every
//! value read from step output, log files, plans and error messages.
//!
//! `secret(name, key)` reads `<secrets_dir>/<name>/<key>`, the layout in which the kubelet
//! mounts a Secret volume (a directory on the agent's side, not under the host root), with
//! [`read_key`]: confined to `<secrets_dir>/<name>`. `name` must be in the allowlist
//! (`SKYHOOK_ALLOWED_SECRETS`, comma-separated, empty allows none).

use std::path::Path;

use crate::host::Host;
use crate::host::root::error::HostError;

/// A failure of `secret` or `secret_env`. Messages never contain a secret's value: they name
/// the coordinate only.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// What the session failed with (a key that is not a regular file, or too large).
    #[error(transparent)]
    Host(#[from] HostError),

    /// A secret not in `SKYHOOK_ALLOWED_SECRETS` was asked for.
    #[error("secret {name:?} is not in SKYHOOK_ALLOWED_SECRETS (asked for key {key:?})")]
    Refused {
        /// The secret name.
        name: String,
        /// The key asked for.
        key: String,
    },

    /// A `skyhook-agent serve` execution asked for a coordinate its request's `secrets` did
    /// not declare.
    #[error("secret {name:?} key {key:?} is not in the request's `secrets` field")]
    NotDeclared {
        /// The secret name.
        name: String,
        /// The key asked for.
        key: String,
    },

    /// A secret name or key that is not one file name (empty, `.`, `..`, a `/` or NUL).
    #[error(
        "secret {what} {value:?} is not a valid {what}: it must be one file name (not empty, . or .., without / or NUL) (asked for secret {name:?} key {key:?})"
    )]
    Coordinate {
        /// `name` or `key`: which one is wrong.
        what: &'static str,
        /// The wrong value.
        value: String,
        /// The secret name asked for.
        name: String,
        /// The key asked for.
        key: String,
    },

    /// An allowed secret key does not exist or cannot be read.
    #[error("failed to read secret {name:?} key {key:?}")]
    Read {
        /// The secret name.
        name: String,
        /// The key.
        key: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// `secret_env(var)` on an unset variable.
    #[error("environment variable {var:?} is not set")]
    EnvMissing {
        /// The variable name.
        var: String,
    },
}

impl crate::host::api::AreaError for SecretError {
    /// Agent-side inputs: never the host root's state (a session failure: as it says).
    fn depends_on_host(&self) -> bool {
        match self {
            SecretError::Host(e) => e.depends_on_host(),
            _ => false,
        }
    }
}
crate::host::api::area_error!(SecretError);

/// Result alias of this file.
type Result<T, E = SecretError> = std::result::Result<T, E>;

pub use crate::redact::Redactor;

fn valid_component(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains('/') && !s.contains('\0')
}

/// `secret(name, key)`: the content of `<secrets_dir>/<name>/<key>`, added to the redactor.
///
/// # Errors
/// [`SecretError::Coordinate`] when `name` or `key` is not a single path component;
/// [`SecretError::Refused`] when `name` is not allowed; [`SecretError::Read`] when the
/// file cannot be read by [`read_key`] (missing, a link out of `<secrets_dir>/<name>`, a FIFO,
/// device or socket, or above [`MAX_SECRET_BYTES`]); [`SecretError::NotDeclared`] when
/// the session has [`crate::host::HostOptions::declared_secrets`] and the coordinate is not
/// among them. None names the value.
pub fn secret(h: &mut Host, name: &str, key: &str) -> Result<String> {
    if let Some(declared) = &h.options().declared_secrets {
        let value = declared
            .iter()
            .find(|(n, k, _)| n == name && k == key)
            .map(|(_, _, v)| v.clone())
            .ok_or_else(|| SecretError::NotDeclared {
                name: name.to_string(),
                key: key.to_string(),
            })?;
        h.redactor().add(&value);
        return Ok(value);
    }
    let refused = || SecretError::Refused {
        name: name.to_string(),
        key: key.to_string(),
    };
    for (what, value) in [("name", name), ("key", key)] {
        if !valid_component(value) {
            return Err(SecretError::Coordinate {
                what,
                value: value.to_string(),
                name: name.to_string(),
                key: key.to_string(),
            });
        }
    }
    if !h.options().allowed_secrets.iter().any(|a| a == name) {
        return Err(refused());
    }
    let read_err = |source: std::io::Error| SecretError::Read {
        name: name.to_string(),
        key: key.to_string(),
        source,
    };
    let dir = &h.options().secrets_dir;
    let f = open_key(dir, name, key).map_err(read_err)?;
    let m = f.metadata().map_err(read_err)?;
    let path = dir.join(name).join(key);
    if m.is_dir() {
        return Err(read_err(std::io::ErrorKind::IsADirectory.into()));
    } else if !m.is_file() {
        return Err(HostError::NotRegular {
            path,
            what: crate::host::root::kind_name(m.file_type()),
        }
        .into());
    } else if m.len() > MAX_SECRET_BYTES {
        return Err(HostError::FileTooLarge {
            path,
            size: m.len(),
            limit: MAX_SECRET_BYTES,
        }
        .into());
    }
    let bytes = crate::host::root::read_bounded(f, MAX_SECRET_BYTES).map_err(read_err)?;
    let value = String::from_utf8_lossy(&bytes).into_owned();
    h.redactor().add(&value);
    Ok(value)
}

host_fn! {
    /// `<SKYHOOK_SECRETS_DIR>/<name>/<key>`; `name` must be in `SKYHOOK_ALLOWED_SECRETS`. The key
    /// is opened confined to `<SKYHOOK_SECRETS_DIR>/<name>`: symlinks inside it (the kubelet's
    /// `..data`) are followed, one pointing out of it is not found. A regular file of at most 1
    /// MiB. The value is redacted (`***`) from output, logs, plans and errors.
    #[host(ns = "", effects = ReadsAgent)]
    fn secret(h: &mut Host, name: S, key: S) -> rhai::Dynamic as "String" {
        Ok(Dynamic::from(S::from(super::secret(h, &name, &key)?)))
    }
}

/// `secret_env(var)`: the value of `var` in the step's environment, added to the redactor.
///
/// # Errors
/// [`SecretError::EnvMissing`] when unset.
pub fn secret_env(h: &mut Host, var: &str) -> Result<String> {
    let value = h.env(var).ok_or_else(|| SecretError::EnvMissing {
        var: var.to_string(),
    })?;
    h.redactor().add(&value);
    Ok(value)
}

host_fn! {
    /// The step environment's variable `var` (error when unset), redacted like `secret`.
    #[host(ns = "", effects = ReadsAgent)]
    fn secret_env(h: &mut Host, var: S) -> rhai::Dynamic as "String" {
        Ok(Dynamic::from(S::from(super::secret_env(h, &var)?)))
    }
}

/// Largest secret value read, in bytes (1 MiB, the size limit of a Kubernetes Secret).
pub const MAX_SECRET_BYTES: u64 = 1024 * 1024;

/// Open `<dir>/<name>/<key>` for reading, confined to `<dir>/<name>`: the name is resolved
/// beneath `dir` and the key beneath the name's directory, each by one
/// `openat2(RESOLVE_IN_ROOT)` through [`pathrs`] (or its emulation), so symlinks are followed
/// only inside (the kubelet's `<key>` -> `..data/<key>`, `..data` -> `..<timestamp>` and
/// Docker's flat files work; a link to `/elsewhere` or `../other` resolves inside the
/// directory, normally to nothing). The check is the open itself: there is no window between
/// resolving and opening. Opened `O_NONBLOCK | O_NOCTTY`, so a FIFO cannot hang the caller;
/// the caller checks the type with `fstat` on the returned file. `name` and `key` are
/// expected to be validated by the caller.
///
/// # Errors
/// Not found (also for a link out of the directory), not a directory, permission.
pub fn open_key(dir: &Path, name: &str, key: &str) -> std::io::Result<std::fs::File> {
    use crate::host::root::pathrs_io;
    use pathrs::flags::OpenFlags;
    let secrets = pathrs::Root::open(dir).map_err(pathrs_io)?;
    let name_dir = secrets
        .open_subpath(
            name,
            OpenFlags::O_PATH | OpenFlags::O_DIRECTORY | OpenFlags::O_CLOEXEC,
        )
        .map_err(pathrs_io)?;
    pathrs::Root::from_fd(name_dir)
        .open_subpath(
            key,
            OpenFlags::O_RDONLY
                | OpenFlags::O_NONBLOCK
                | OpenFlags::O_NOCTTY
                | OpenFlags::O_CLOEXEC,
        )
        .map_err(pathrs_io)
}

/// The bytes of `<dir>/<name>/<key>` opened by [`open_key`]: a regular file of at most
/// [`MAX_SECRET_BYTES`] (`fstat` on the opened file, and again while reading).
///
/// # Errors
/// As [`open_key`]; `InvalidInput` "not a regular file (a fifo)", `FileTooLarge` "N bytes,
/// more than the limit of M bytes". No error carries content.
pub fn read_key(dir: &Path, name: &str, key: &str) -> std::io::Result<Vec<u8>> {
    crate::host::root::read_bounded(open_key(dir, name, key)?, MAX_SECRET_BYTES)
}

/// Parse `SKYHOOK_ALLOWED_SECRETS` (comma-separated, blanks ignored; empty allows none).
pub fn parse_allowlist(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(String::from)
        .collect()
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use rhai::{Dynamic, ImmutableString as S};
}
use prelude::*;

host_fns!(secret, secret_env);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::testutil::*;

    #[test]
    fn redactor_longest_first_and_env() {
        let r = Redactor::from_env(&[
            ("TOKEN".into(), "abc".into()),
            ("LONG".into(), "abcdef".into()),
            ("EMPTY".into(), "".into()),
            (
                "SKYHOOK_REDACT_ENV".into(),
                "TOKEN, LONG,EMPTY,UNSET".into(),
            ),
        ]);
        assert_eq!(r.len(), 2);
        assert_eq!(r.redact("x abcdef abc y"), "x *** *** y");
        assert!(matches!(r.redact("nothing"), std::borrow::Cow::Borrowed(_)));
    }

    #[test]
    fn allowlist_refusal_and_redaction() {
        let t = TestHost::new();
        let sdir = t.dir.path().join("secrets");
        std::fs::create_dir_all(sdir.join("db")).unwrap();
        std::fs::create_dir_all(sdir.join("other")).unwrap();
        std::fs::write(sdir.join("db/password"), "s3cr3t\n").unwrap();
        std::fs::write(sdir.join("other/password"), "nope").unwrap();
        let mut h = t.host_with(crate::host::ExecMode::Apply, |o| {
            o.secrets_dir = sdir.clone();
            o.allowed_secrets = parse_allowlist("db, ,x");
            o.env.push(("API_KEY".into(), "k-123".into()));
        });
        assert_eq!(secret(&mut h, "db", "password").unwrap(), "s3cr3t\n");
        let e = secret(&mut h, "other", "password").unwrap_err();
        let msg = e.to_string();
        assert_eq!(
            msg,
            "secret \"other\" is not in SKYHOOK_ALLOWED_SECRETS (asked for key \"password\")"
        );
        assert!(!msg.contains("nope"));
        // A wrong key is named as such, not blamed on the (allowed) secret name.
        let e = secret(&mut h, "db", "../other/password").unwrap_err();
        assert_eq!(
            e.to_string(),
            "secret key \"../other/password\" is not a valid key: it must be one file name (not empty, . or .., without / or NUL) (asked for secret \"db\" key \"../other/password\")"
        );
        let e = secret(&mut h, "..", "password").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("secret name \"..\" is not a valid name"),
            "{e}"
        );
        assert!(matches!(
            secret(&mut h, "db", "missing"),
            Err(SecretError::Read { .. })
        ));
        assert_eq!(secret_env(&mut h, "API_KEY").unwrap(), "k-123");
        assert!(matches!(
            secret_env(&mut h, "NOPE"),
            Err(SecretError::EnvMissing { .. })
        ));
        assert_eq!(h.redactor().redact("pw=s3cr3t key=k-123"), "pw=*** key=***");
    }

    /// A Secret volume's layouts are read; a key or name that links out of
    /// `<secrets_dir>/<name>` is refused at the open, naming the coordinate, never the
    /// content; a FIFO and an oversized key are refused without blocking.
    #[test]
    fn secret_is_confined_to_its_name_dir() {
        use std::os::unix::fs::symlink;
        let t = TestHost::new();
        let sdir = t.dir.path().join("secrets");
        let outside = t.dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("file"), "outside-content").unwrap();
        // kubelet: db/password -> ..data/password, ..data -> ..2026_12_01_00_00_00.1
        let db = sdir.join("db");
        std::fs::create_dir_all(db.join("..2026_12_01_00_00_00.1")).unwrap();
        std::fs::write(db.join("..2026_12_01_00_00_00.1/password"), "kube-pw").unwrap();
        symlink("..2026_12_01_00_00_00.1", db.join("..data")).unwrap();
        symlink("..data/password", db.join("password")).unwrap();
        std::fs::write(db.join("flat"), "docker-pw").unwrap();
        symlink(outside.join("file"), db.join("link")).unwrap();
        symlink("../../outside/file", db.join("rel")).unwrap();
        // a name that is itself a link out of the secrets dir
        symlink(&outside, sdir.join("escaped")).unwrap();
        nix::unistd::mkfifo(
            &db.join("fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let big = std::fs::File::create(db.join("big")).unwrap();
        big.set_len(MAX_SECRET_BYTES + 1).unwrap();
        let mut h = t.host_with(crate::host::ExecMode::Apply, |o| {
            o.secrets_dir = sdir.clone();
            o.allowed_secrets = parse_allowlist("db,escaped");
        });
        assert_eq!(secret(&mut h, "db", "password").unwrap(), "kube-pw");
        assert_eq!(secret(&mut h, "db", "flat").unwrap(), "docker-pw");
        for (name, key) in [("db", "link"), ("db", "rel"), ("escaped", "file")] {
            let e = secret(&mut h, name, key).unwrap_err();
            let msg = format!("{e} {:?}", std::error::Error::source(&e));
            assert!(
                matches!(&e, SecretError::Read { source, .. }
                    if source.kind() == std::io::ErrorKind::NotFound),
                "{name}/{key}: {msg}"
            );
            assert!(
                msg.starts_with(&format!("failed to read secret {name:?} key {key:?}")),
                "{msg}"
            );
            assert!(!msg.contains("outside-content"), "{msg}");
        }
        let started = std::time::Instant::now();
        assert_eq!(
            secret(&mut h, "db", "fifo").unwrap_err().to_string(),
            format!(
                "{} is a fifo, not a regular file (only regular files are read)",
                db.join("fifo").display()
            )
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        assert_eq!(
            secret(&mut h, "db", "big").unwrap_err().to_string(),
            format!(
                "{} is too large to read: 1048577 bytes, more than the limit of 1048576 bytes \
                 (1 MiB)",
                db.join("big").display()
            )
        );
        assert!(!h.redactor().redact("outside-content").contains("***"));
    }

    /// The open itself is confined: a key swapped for a link out of its directory between
    /// one read and the next is refused by the next open ([`open_key`] has no separate
    /// check to race).
    #[test]
    fn a_key_swapped_for_a_link_out_is_refused_by_the_open() {
        use std::os::unix::fs::symlink;
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("s/db")).unwrap();
        std::fs::write(d.path().join("outside"), "outside-content").unwrap();
        let key = d.path().join("s/db/k");
        std::fs::write(&key, "inside").unwrap();
        let dir = d.path().join("s");
        let f = open_key(&dir, "db", "k").unwrap();
        std::fs::remove_file(&key).unwrap();
        symlink(d.path().join("outside"), &key).unwrap();
        // the descriptor opened before the swap still reads what it resolved to
        assert_eq!(
            crate::host::root::read_bounded(f, MAX_SECRET_BYTES).unwrap(),
            b"inside"
        );
        let e = read_key(&dir, "db", "k").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}");
        // the same swap through `..` components of the link
        std::fs::remove_file(&key).unwrap();
        symlink("../../outside", &key).unwrap();
        assert_eq!(
            read_key(&dir, "db", "k").unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
    }

    #[test]
    fn reports_never_hash_content_holding_a_secret() {
        use crate::host::root::digest::sha256_tag;
        let t = TestHost::new();
        t.file("/etc/held.conf", "pw=topsecret\n");
        for mode in [
            crate::host::ExecMode::Plan,
            crate::host::ExecMode::Check,
            crate::host::ExecMode::Apply,
        ] {
            let mut h = t.host_with(mode, |o| {
                o.env.push(("PW".into(), "topsecret".into()));
            });
            let pw = secret_env(&mut h, "PW").unwrap();
            let w = |h: &mut Host, p: &str, c: &str| {
                crate::host::files::fs::write(h, p, c, &Default::default()).unwrap();
            };
            w(&mut h, "/etc/app.conf", &format!("pw={pw}\n"));
            w(&mut h, "/etc/held.conf", "pw=rotated\n");
            w(&mut h, "/etc/plain.conf", "x=1\n");
            let red = h.redactor().clone();
            let rep = h.finish().unwrap();
            let by = |p: &str| rep.changes.iter().find(|c| c.target == p).unwrap();
            assert_eq!(
                by("/etc/app.conf").after.as_deref(),
                Some("***"),
                "{mode:?}"
            );
            assert_eq!(
                by("/etc/held.conf").before.as_deref(),
                Some("***"),
                "{mode:?}"
            );
            assert_eq!(
                by("/etc/held.conf").after,
                Some(sha256_tag(b"pw=rotated\n")),
                "{mode:?}"
            );
            assert_eq!(by("/etc/plain.conf").after, Some(sha256_tag(b"x=1\n")));
            let json = rep.to_json(&red).to_string();
            for leak in [
                sha256_tag(b"pw=topsecret\n"),
                sha256_tag(b"pw=topsecret"),
                "topsecret".to_string(),
            ] {
                assert!(!json.contains(&leak), "{mode:?}: {json}");
                assert!(!rep.render_text(&red).contains(&leak), "{mode:?}");
            }
            if mode == crate::host::ExecMode::Apply {
                t.file("/etc/held.conf", "pw=topsecret\n");
                std::fs::remove_file(t.p("/etc/app.conf")).unwrap();
                std::fs::remove_file(t.p("/etc/plain.conf")).unwrap();
            }
        }
    }

    #[test]
    fn plan_output_redacts_secret_written_to_file() {
        let t = TestHost::new();
        let mut h = t.host_with(crate::host::ExecMode::Plan, |o| {
            o.env.push(("PW".into(), "topsecret".into()));
        });
        let pw = secret_env(&mut h, "PW").unwrap();
        crate::host::files::fs::write(
            &mut h,
            "/etc/app.conf",
            &format!("pw={pw}\n"),
            &Default::default(),
        )
        .unwrap();
        let red = h.redactor().clone();
        let rep = h.finish().unwrap();
        let text = rep.render_text(&red);
        assert!(text.contains("+pw=***\n"), "{text}");
        assert!(!text.contains("topsecret"));
    }
}
