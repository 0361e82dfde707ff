//! `fs::fetch` binding over [`crate::host::fetch`].

use std::time::Duration;

use rhai::{Dynamic, ImmutableString, Map};

use super::convert::{self, check_keys, opt_scalar, opt_string};
use super::{Api, Registrar};
use crate::host::fetch::{self, FetchOptions};

/// A positive number of seconds (int or float) of option `key`.
fn secs(d: &Dynamic, key: &str) -> Result<Duration, String> {
    let secs = if let Ok(i) = d.as_int() {
        i as f64
    } else if let Ok(f) = d.as_float() {
        f
    } else {
        return Err(format!(
            "option {key} must be a number of seconds, got {}",
            d.type_name()
        ));
    };
    if !secs.is_finite() || secs <= 0.0 {
        return Err(format!(
            "option {key} must be a positive number of seconds, got {secs}"
        ));
    }
    Ok(Duration::from_secs_f64(secs.min(1e9)))
}

/// `#{sha256, mode, owner, group, timeout, max_bytes}` (`()` values mean "default").
fn fetch_opts(m: &Map) -> Result<FetchOptions, String> {
    check_keys(m, super::docs::FETCH_KEYS)?;
    let get = |k: &str| m.get(k).filter(|d| !d.is_unit());
    let max_bytes = get("max_bytes")
        .map(|d| match d.as_int() {
            Ok(n) if n > 0 => Ok(n as u64),
            _ => Err(format!(
                "option max_bytes must be a positive integer, got {d}"
            )),
        })
        .transpose()?;
    Ok(FetchOptions {
        sha256: opt_string(m, "sha256")?,
        mode: get("mode").map(convert::mode).transpose()?,
        owner: get("owner")
            .map(|d| opt_scalar(d, "owner"))
            .transpose()?
            .flatten(),
        group: get("group")
            .map(|d| opt_scalar(d, "group"))
            .transpose()?
            .flatten(),
        timeout: get("timeout").map(|d| secs(d, "timeout")).transpose()?,
        max_bytes,
    })
}

pub(crate) fn register(r: &mut Registrar, api: &Api) {
    type S = ImmutableString;
    bind!(r, api, "fs", "fetch", |h, url: S, p: S, o: Map| {
        let o = fetch_opts(&o)?;
        Ok(fetch::fetch(h, &url, &p, &o)?)
    });
}
