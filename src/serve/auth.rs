//! Bearer-token authentication against a hashed tokens file: one engine per line,
//! `NAME SHA256HEX [SCOPE]` (the hex SHA-256 of the engine's token; SCOPE `run`, the
//! default, or `plan`: such a token starts only `package_plan` executions, see [`Scope`];
//! `#` comments and blank lines ignored). The server never holds a token, only hashes, and compares them in constant time.
//! [`Auth::reload`] re-reads the file (SIGHUP): deleting a line revokes that engine.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// A tokens file that cannot be used (the server refuses to start; a reload keeps the old
/// set).
#[derive(Debug, thiserror::Error)]
pub enum TokensError {
    /// The file cannot be read.
    #[error("cannot read tokens file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A line is not `NAME SHA256HEX [run|plan]`.
    #[error("{path}:{line}: expected `NAME SHA256HEX [run|plan]` (64 hex digits)")]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
    },
}

/// The lowercase hex SHA-256 of `bytes` (64 characters).
pub fn sha256_hex(bytes: &[u8]) -> String {
    let d = Sha256::digest(bytes);
    let mut s = String::with_capacity(64);
    for b in d {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

fn unhex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Parse a tokens file's text.
///
/// # Errors
/// [`TokensError::Line`] for the first malformed line.
pub fn parse(path: &Path, text: &str) -> Result<Engines, TokensError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = line.split_whitespace();
        let bad = || TokensError::Line {
            path: path.to_path_buf(),
            line: i + 1,
        };
        let (Some(name), Some(hex)) = (parts.next(), parts.next()) else {
            return Err(bad());
        };
        let scope = match (parts.next(), parts.next()) {
            (None | Some("run"), None) => Scope::Run,
            (Some("plan"), None) => Scope::Plan,
            _ => return Err(bad()),
        };
        out.push((name.to_string(), unhex(hex).ok_or_else(bad)?, scope));
    }
    Ok(out)
}

/// The warning for a tokens file with no engine (every request is then `401`), or `None`.
pub fn empty_warning(path: &Path, engines: usize) -> Option<String> {
    (engines == 0).then(|| {
        format!(
            "tokens file {} lists no engine: every request is refused with 401",
            path.display()
        )
    })
}

/// What a token may do: the third word of its line in the tokens file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `run` (the default): every route and kind.
    Run,
    /// `plan`: the routes of its own executions, and starts of kind `package_plan` only (any
    /// other start is `403`), so the credential a preview needs cannot change a node.
    Plan,
}

/// Engine names, the SHA-256 of their tokens and their scope.
pub type Engines = Vec<(String, [u8; 32], Scope)>;

/// Who may call: the engines of a tokens file, or anyone (`--insecure-no-auth`).
#[derive(Debug, Clone)]
pub struct Auth {
    file: Option<PathBuf>,
    engines: Arc<RwLock<Arc<Engines>>>,
}

impl Auth {
    /// Engines from `file`.
    ///
    /// # Errors
    /// The file cannot be read or has a malformed line.
    pub fn from_file(file: &Path) -> Result<Auth, TokensError> {
        let a = Auth {
            file: Some(file.to_path_buf()),
            engines: Arc::default(),
        };
        a.reload()?;
        Ok(a)
    }

    /// Anyone is accepted, as engine `"anonymous"`.
    pub fn insecure() -> Auth {
        Auth {
            file: None,
            engines: Arc::default(),
        }
    }

    /// The tokens file (`None` for `--insecure-no-auth`).
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// How many engines the tokens file lists now.
    pub fn engine_count(&self) -> usize {
        self.engines.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// True for `--insecure-no-auth`.
    pub fn is_insecure(&self) -> bool {
        self.file.is_none()
    }

    /// Re-read the tokens file; returns the number of engines. On error the previous set
    /// stays in force.
    ///
    /// # Errors
    /// As [`Auth::from_file`].
    pub fn reload(&self) -> Result<usize, TokensError> {
        let Some(path) = &self.file else {
            return Ok(0);
        };
        let text = std::fs::read_to_string(path).map_err(|source| TokensError::Read {
            path: path.clone(),
            source,
        })?;
        let engines = parse(path, &text)?;
        let n = engines.len();
        *self.engines.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(engines);
        Ok(n)
    }

    /// The engine an `Authorization` header value belongs to (`Bearer <token>`, the scheme
    /// case-insensitive as RFC 7235 has it), or `None`. Every line is compared, in constant
    /// time per line, whatever matched before.
    pub fn engine(&self, authorization: Option<&str>) -> Option<String> {
        self.engine_scope(authorization).map(|(name, _)| name)
    }

    /// As [`Auth::engine`], with the token's [`Scope`] (`--insecure-no-auth`: `Run`).
    pub fn engine_scope(&self, authorization: Option<&str>) -> Option<(String, Scope)> {
        if self.is_insecure() {
            return Some(("anonymous".into(), Scope::Run));
        }
        let (scheme, token) = authorization?.trim_start().split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let token = token.trim();
        if token.is_empty() {
            return None;
        }
        let hash: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let engines = self
            .engines
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut found: Option<(&str, Scope)> = None;
        for (name, h, scope) in engines.iter() {
            let eq: bool = h.ct_eq(&hash).into();
            if eq && found.is_none() {
                found = Some((name, *scope));
            }
        }
        found.map(|(n, s)| (n.to_string(), s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_tokens_reload_revokes() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("engines");
        std::fs::write(
            &f,
            format!(
                "# engines\nci {}\n\nwf {}\n",
                sha256_hex(b"tok-ci"),
                sha256_hex(b"tok-wf")
            ),
        )
        .unwrap();
        let a = Auth::from_file(&f).unwrap();
        assert_eq!(a.engine(Some("Bearer tok-ci")).as_deref(), Some("ci"));
        assert_eq!(a.engine(Some("Bearer tok-wf")).as_deref(), Some("wf"));
        assert_eq!(a.engine(Some("Bearer nope")), None);
        assert_eq!(a.engine(Some("tok-ci")), None);
        assert_eq!(a.engine(Some("Bearer ")), None);
        assert_eq!(a.engine(None), None);
        std::fs::write(&f, format!("wf {}\n", sha256_hex(b"tok-wf"))).unwrap();
        assert_eq!(a.reload().unwrap(), 1);
        assert_eq!(a.engine(Some("Bearer tok-ci")), None);
        // a broken file keeps the old set
        std::fs::write(&f, "wf xyz\n").unwrap();
        assert!(matches!(a.reload(), Err(TokensError::Line { line: 1, .. })));
        assert_eq!(a.engine(Some("Bearer tok-wf")).as_deref(), Some("wf"));
        assert_eq!(Auth::insecure().engine(None).as_deref(), Some("anonymous"));
    }

    #[test]
    fn scheme_is_case_insensitive_and_an_empty_file_warns() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("engines");
        std::fs::write(&f, format!("ci {}\n", sha256_hex(b"tok-ci"))).unwrap();
        let a = Auth::from_file(&f).unwrap();
        for h in [
            "bearer tok-ci",
            "BEARER tok-ci",
            "Bearer  tok-ci",
            "bEaReR tok-ci",
        ] {
            assert_eq!(a.engine(Some(h)).as_deref(), Some("ci"), "{h}");
        }
        for h in ["Basic tok-ci", "Bearertok-ci", "bearer", "tok-ci"] {
            assert_eq!(a.engine(Some(h)), None, "{h}");
        }
        assert_eq!(empty_warning(&f, 1), None);
        std::fs::write(&f, "# nobody yet\n\n").unwrap();
        assert_eq!(a.reload().unwrap(), 0);
        assert_eq!(
            empty_warning(&f, a.engine_count()).unwrap(),
            format!(
                "tokens file {} lists no engine: every request is refused with 401",
                f.display()
            )
        );
    }
}
