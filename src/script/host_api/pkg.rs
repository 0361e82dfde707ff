//! `pkg::` and `os::` bindings over [`crate::host::packages::pkg`] and [`crate::host::system::os`].

use rhai::{Dynamic, ImmutableString, Map};

use super::convert::{self, check_keys, opt_bool};
use super::{Api, Registrar};
use crate::host::packages::pkg;

pub(crate) fn register(r: &mut Registrar, api: &Api) {
    type S = ImmutableString;
    bind!(r, api, "pkg", "manager", |h| Ok(convert::opt(
        pkg::manager(h)?.map(|m| m.name().to_string())
    )));
    bind!(r, api, "pkg", "installed", |h, n: S| Ok(pkg::installed(
        h, &n
    )?));
    bind!(r, api, "pkg", "version", |h, n: S| Ok(convert::opt(
        pkg::version(h, &n)?
    )));
    bind!(r, api, "pkg", "install", |h, n: Dynamic| {
        let names = convert::string_or_array(&n, "names")?;
        Ok(pkg::install(h, &names, false)?)
    });
    bind!(r, api, "pkg", "install", |h, n: Dynamic, o: Map| {
        let names = convert::string_or_array(&n, "names")?;
        check_keys(&o, &["update"])?;
        let update = opt_bool(&o, "update", false)?;
        Ok(pkg::install(h, &names, update)?)
    });
    bind!(r, api, "pkg", "remove", |h, n: Dynamic| {
        let names = convert::string_or_array(&n, "names")?;
        Ok(pkg::remove(h, &names)?)
    });
}
