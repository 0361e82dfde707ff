//! `pkg::repo`, `pkg::remove_repo`, `pkg::hold`, `pkg::unhold` bindings over
//! [`crate::host::packages::pkgrepo`].

use rhai::{Dynamic, ImmutableString, Map};

use super::convert::{self, check_keys, opt_bool, opt_string};
use super::{Api, Registrar};
use crate::host::packages::pkgrepo::{self, RepoOptions};

/// A string or an array of strings of option `key` (absent or `()`: empty).
fn words(m: &Map, key: &str) -> Result<Vec<String>, String> {
    match m.get(key) {
        None => Ok(Vec::new()),
        Some(d) if d.is_unit() => Ok(Vec::new()),
        Some(d) => convert::string_or_array(d, &format!("option {key}")),
    }
}

/// `#{url, suites, components, arch, key, key_url, key_sha256, enabled}`.
fn repo_opts(m: &Map) -> Result<RepoOptions, String> {
    check_keys(m, super::docs::REPO_KEYS)?;
    Ok(RepoOptions {
        url: opt_string(m, "url")?,
        suites: words(m, "suites")?,
        components: words(m, "components")?,
        arch: words(m, "arch")?,
        key: opt_string(m, "key")?,
        key_url: opt_string(m, "key_url")?,
        key_sha256: opt_string(m, "key_sha256")?,
        enabled: opt_bool(m, "enabled", true)?,
    })
}

pub(crate) fn register(r: &mut Registrar, api: &Api) {
    type S = ImmutableString;
    bind!(r, api, "pkg", "repo", |h, n: S, o: Map| {
        let o = repo_opts(&o)?;
        Ok(pkgrepo::repo(h, &n, &o)?)
    });
    bind!(r, api, "pkg", "remove_repo", |h, n: S| Ok(
        pkgrepo::remove_repo(h, &n)?
    ));
    bind!(r, api, "pkg", "hold", |h, n: Dynamic| {
        let names = convert::string_or_array(&n, "names")?;
        Ok(pkgrepo::hold(h, &names)?)
    });
    bind!(r, api, "pkg", "unhold", |h, n: Dynamic| {
        let names = convert::string_or_array(&n, "names")?;
        Ok(pkgrepo::unhold(h, &names)?)
    });
}
