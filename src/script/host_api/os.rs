//! `os::` bindings over [`crate::host::system::os`].

use super::convert;
use super::{Api, Registrar};
use crate::host::system::os;

pub(crate) fn register(r: &mut Registrar, api: &Api) {
    bind!(r, api, "os", "release", |h| Ok(convert::map(os::release(
        h
    )?)));
    bind!(r, api, "os", "id", |h| Ok(os::id(h)?));
    bind!(r, api, "os", "version", |h| Ok(os::version(h)?));
    bind!(r, api, "os", "family", |h| Ok(os::family(h)?));
    bind!(r, api, "os", "kernel", |h| Ok(os::kernel(h)?));
    bind!(r, api, "os", "arch", |_h| Ok(os::arch()));
    bind!(r, api, "os", "hostname", |h| Ok(os::hostname(h)?));
    bind!(r, api, "os", "cmdline", |h| Ok(os::cmdline(h)?));
}
