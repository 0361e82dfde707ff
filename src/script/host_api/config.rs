//! `config::`, `node::`, `secret`, `secret_env` bindings over [`crate::host::files::config`] and
//! [`crate::host::secrets`].

use rhai::{Dynamic, ImmutableString};

use super::convert;
use super::{Api, Registrar};
use crate::host::files::config;
use crate::host::secrets;

pub(crate) fn register(r: &mut Registrar, api: &Api) {
    type S = ImmutableString;
    bind!(r, api, "config", "has", |h, n: S| Ok(config::has(h, &n)?));
    bind!(r, api, "config", "get", |h, n: S| Ok(convert::opt(
        config::get(h, &n)?
    )));
    bind!(r, api, "config", "names", |h| Ok(convert::array(
        config::names(h)?
    )));
    bind!(r, api, "config", "lines", |h, n: S| Ok(convert::array(
        config::lines(h, &n)?
    )));
    bind!(r, api, "config", "kv", |h, n: S| Ok(convert::map(
        config::kv(h, &n)?
    )));
    bind!(r, api, "node", "labels", |h| Ok(convert::json_map(
        config::labels(h)?
    )));
    bind!(r, api, "node", "annotations", |h| Ok(convert::json_map(
        config::annotations(h)?
    )));
    bind!(r, api, "node", "packages", |h| Ok(convert::json_map(
        config::packages(h)?
    )));
    bind!(r, api, "", "secret", |h, n: S, k: S| Ok(Dynamic::from(
        ImmutableString::from(secrets::secret(h, &n, &k)?)
    )));
    bind!(r, api, "", "secret_env", |h, v: S| Ok(Dynamic::from(
        ImmutableString::from(secrets::secret_env(h, &v)?)
    )));
}
