//! `service::` bindings over [`crate::host::services::service`].

use rhai::ImmutableString;

use super::{Api, Registrar};
use crate::host::services::service;

pub(crate) fn register(r: &mut Registrar, api: &Api) {
    type S = ImmutableString;
    bind!(r, api, "service", "is_active", |h, n: S| Ok(
        service::is_active(h, &n)?
    ));
    bind!(r, api, "service", "is_enabled", |h, n: S| Ok(
        service::is_enabled(h, &n)?
    ));
    bind!(r, api, "service", "start", |h, n: S| Ok(service::start(
        h, &n
    )?));
    bind!(r, api, "service", "stop", |h, n: S| Ok(service::stop(
        h, &n
    )?));
    bind!(r, api, "service", "enable", |h, n: S| Ok(service::enable(
        h, &n
    )?));
    bind!(r, api, "service", "disable", |h, n: S| Ok(
        service::disable(h, &n)?
    ));
    bind!(r, api, "service", "restart", |h, n: S| Ok(
        service::restart(h, &n)?
    ));
    bind!(r, api, "service", "reload", |h, n: S| Ok(service::reload(
        h, &n
    )?));
    bind!(r, api, "service", "daemon_reload", |h| Ok(
        service::daemon_reload(h)?
    ));
    bind!(r, api, "service", "drop_in", |h, n: S, f: S, c: S| Ok(
        service::drop_in(h, &n, &f, &c)?
    ));
    bind!(r, api, "service", "remove_drop_in", |h, n: S, f: S| Ok(
        service::remove_drop_in(h, &n, &f)?
    ));
}
