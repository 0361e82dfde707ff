//! Host functions as scripts see them: [`HostApi`], one step's [`Host`](crate::host::Host)
//! session shared by every binding of a run; the `host_fn!` row that declares a function's
//! reference entry (parameters, description, option keys, the [`Effects`] it submits, from
//! which its behaviour per mode is derived) together with its registration; the conversions
//! between Rhai values and the areas' types ([`convert`]); and [`ScriptOutput`].
//!
//! It sits below the areas so that each host function has one home: the file of its area that
//! implements it also holds its `host_fn!` row (as Rhai's `#[export_module]` keeps a function,
//! its registration and its docs together). `crate::script::host_api` gathers the rows, builds
//! each run's modules from them and renders `docs/host-api.md`.
//!
//! A failed host call raises a catchable Rhai runtime error at the call's position (so the
//! step fails with `file:line:col: message`), whose message is `<ns>::<fn>: <what>` with the
//! [`HostError`](crate::host::HostError) and its causes, passed through the session's
//! redactor: a secret's value never appears in it.

/// One host function: its reference row ([`FnDoc`]) and its registration, in one place.
///
/// `host_fn!(ns, name, params, returns, effects, doc, [options = KEYS,] [api = id,]
/// |h, arg: Type, ...| body)`: `params` are the reference's `(name, type)` pairs, `effects`
/// an [`Effects`] (from which the modes column is derived), `KEYS` the accepted keys of the
/// options map. `body` evaluates to `Result<R, CallError>` with the session as
/// `h: &mut Host`; with `api = id` it also sees the run's [`Api`] (deadline, output) as `id`.
/// A failed call becomes a positioned, redacted Rhai error `ns::name: message`.
macro_rules! host_fn {
    ($ns:literal, $name:literal, $params:expr, $ret:literal, $effects:expr, $doc:literal,
     $(options = $opts:expr,)? api = $api:ident, |$h:ident $(, $arg:ident : $ty:ty)*| $body:expr $(,)?) => {
        host_fn!(@row $ns, $name, $params, $ret, $effects, $doc, [$($opts)?], $api,
                 |$h $(, $arg: $ty)*| $body)
    };
    ($ns:literal, $name:literal, $params:expr, $ret:literal, $effects:expr, $doc:literal,
     $(options = $opts:expr,)? |$h:ident $(, $arg:ident : $ty:ty)*| $body:expr $(,)?) => {
        host_fn!(@row $ns, $name, $params, $ret, $effects, $doc, [$($opts)?], api,
                 |$h $(, $arg: $ty)*| $body)
    };
    (@row $ns:literal, $name:literal, $params:expr, $ret:literal, $effects:expr, $doc:literal,
     [$($opts:expr)?], $api:ident, |$h:ident $(, $arg:ident : $ty:ty)*| $body:expr) => {
        $crate::host::api::FnDoc {
            ns: $ns,
            name: $name,
            params: $params,
            returns: $ret,
            doc: $doc,
            effects: $effects,
            script_layer: false,
            options: host_fn!(@options $($opts)?),
            register: |r, session| {
                let $api = session.clone();
                let fname = $crate::host::api::fname($ns, $name);
                r.add(
                    $ns,
                    $name,
                    move |ctx: rhai::NativeCallContext $(, $arg: $ty)*| {
                        $api.call(&ctx, &fname, |$h| $body)
                    },
                );
            },
        }
    };
    (@options) => { &[] };
    (@options $opts:expr) => { $opts };
}
pub(crate) use host_fn;

mod binding;
pub mod convert;
pub mod docs;
mod output;

pub(crate) use binding::{Api, CallError, Registrar, error_chain, fname};
pub use binding::{FinishError, HostApi, host_error};
pub use docs::{EffectKind, Effects, FnDoc, Modes};
pub use output::{Capture, ScriptOutput};
