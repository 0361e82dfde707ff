//! Secrets: `secret(name, key)`, `secret_env(var)` and the [`Redactor`] that hides every
//! value read from step output, log files, plans and error messages.
//!
//! `secret(name, key)` reads `<secrets_dir>/<name>/<key>`, the layout in which the kubelet
//! mounts a Secret volume (a directory on the agent's side, not under the host root). `name`
//! must be in the allowlist (`SKYHOOK_ALLOWED_SECRETS`, comma-separated, empty allows none).

use std::path::Path;

use crate::host::Host;
use crate::host::error::{HostError, Result};

pub use crate::logs::redact::Redactor;

fn valid_component(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains('/') && !s.contains('\0')
}

/// `secret(name, key)`: the content of `<secrets_dir>/<name>/<key>`, added to the redactor.
///
/// # Errors
/// [`HostError::SecretCoordinate`] when `name` or `key` is not a single path component;
/// [`HostError::SecretRefused`] when `name` is not allowed; [`HostError::SecretRead`] when the file cannot be read;
/// [`HostError::NotRegular`] / [`HostError::FileTooLarge`] for a FIFO, device or socket or a
/// file above [`crate::host::fs::MAX_READ_BYTES`]; [`HostError::SecretNotDeclared`] when
/// the session has [`crate::host::HostOptions::declared_secrets`] and the coordinate is not
/// among them. None names the value.
pub fn secret(h: &mut Host, name: &str, key: &str) -> Result<String> {
    if let Some(declared) = &h.options().declared_secrets {
        let value = declared
            .iter()
            .find(|(n, k, _)| n == name && k == key)
            .map(|(_, _, v)| v.clone())
            .ok_or_else(|| HostError::SecretNotDeclared {
                name: name.to_string(),
                key: key.to_string(),
            })?;
        h.redactor().add(&value);
        return Ok(value);
    }
    let refused = || HostError::SecretRefused {
        name: name.to_string(),
        key: key.to_string(),
    };
    for (what, value) in [("name", name), ("key", key)] {
        if !valid_component(value) {
            return Err(HostError::SecretCoordinate {
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
    let path = Path::new(&h.options().secrets_dir).join(name).join(key);
    let bytes = crate::host::fs::read_local(&path)?.map_err(|source| HostError::SecretRead {
        name: name.to_string(),
        key: key.to_string(),
        source,
    })?;
    let value = String::from_utf8_lossy(&bytes).into_owned();
    h.redactor().add(&value);
    Ok(value)
}

/// `secret_env(var)`: the value of `var` in the step's environment, added to the redactor.
///
/// # Errors
/// [`HostError::EnvMissing`] when unset.
pub fn secret_env(h: &mut Host, var: &str) -> Result<String> {
    let value = h.env(var).ok_or_else(|| HostError::EnvMissing {
        var: var.to_string(),
    })?;
    h.redactor().add(&value);
    Ok(value)
}

/// Parse `SKYHOOK_ALLOWED_SECRETS` (comma-separated, blanks ignored; empty allows none).
pub fn parse_allowlist(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(String::from)
        .collect()
}

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
            Err(HostError::SecretRead { .. })
        ));
        assert_eq!(secret_env(&mut h, "API_KEY").unwrap(), "k-123");
        assert!(matches!(
            secret_env(&mut h, "NOPE"),
            Err(HostError::EnvMissing { .. })
        ));
        assert_eq!(h.redactor().redact("pw=s3cr3t key=k-123"), "pw=*** key=***");
    }

    #[test]
    fn reports_never_hash_content_holding_a_secret() {
        use crate::host::digest::sha256_tag;
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
                crate::host::fs::write(h, p, c, &Default::default()).unwrap();
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
        crate::host::fs::write(
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
