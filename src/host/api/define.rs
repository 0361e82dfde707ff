//! [`host_fn!`](crate::host::api::host_fn): one host function as one item. The item is the
//! function itself, as scripts call it: its `///` text is the reference's description, its
//! signature gives the parameters (names and Rhai types) and the return type, and its
//! `#[host(...)]` line the namespace, the [`Effects`] (from which the modes column is derived)
//! and the keys of its options map. The macro turns it into a module named after the
//! function holding the `fn` and its reference row(s) with their registration (`ROWS`);
//! [`host_fns!`](crate::host::api::host_fns) gathers a file's functions into its table
//! (`HOST_FNS`), which `crate::script::host_api` gathers into the reference.
//!
//! ```ignore
//! host_fn! {
//!     /// True when `path` exists (following symlinks).
//!     #[host(ns = "fs", effects = ReadsHost)]
//!     fn exists(h: &mut Host, path: S) -> bool {
//!         Ok(super::exists(h, &path)?)
//!     }
//! }
//! ```
//!
//! - The body returns `Result<R, CallError>` (`R` the declared return type); a failure
//!   becomes a positioned, redacted Rhai error `ns::name: message` ([`super::Api::call`]).
//! - A parameter's Rhai type is its Rust type's ([`RhaiType`]: `S`/`String` → `String`,
//!   `INT` → `int`, `Dynamic` → `?`, ...), or the literal after `as` (`m: Dynamic as
//!   "Map"`); likewise the return type.
//! - `name = "get"` after `ns` gives the script name when the Rust name differs (two
//!   namespaces of one file with a function of the same name: `fn sysctl_get`).
//! - `effects =` is `ReadsHost`, `RunsReadOnly`, `ReadsAgent`, `Computes`, or the kinds it
//!   submits, `[Write, Chmod]`; `options = KEYS` (an expression) lists an options map's keys.
//! - A first parameter `run: &Api` gives the body the run's [`super::Api`] (deadline, output),
//!   the one bound to the evaluating thread ([`super::Api::call_current`]).
//! - Overloads follow in the same item, each with its own `///` text and a Rust name of its
//!   own, marked `#[overload]` (or `#[overload(options = KEYS)]`): they share the first's
//!   script name, namespace and effects (unless it names its own, `#[overload(effects =
//!   [Sysctl, Write], options = KEYS)]`).
//! - Inside the module the file's items are in scope (`use super::*`); the area function the
//!   body calls is reached as `super::name`.

/// The Rhai definition type of a parameter or return type (`docs/skyhook.d.rhai`).
pub trait RhaiType {
    /// `String`, `int`, `bool`, `float`, `Map`, `Array`, `?` (several types), `()`.
    const NAME: &'static str;
}

macro_rules! rhai_type {
    ($($t:ty => $n:literal),* $(,)?) => {
        $(impl RhaiType for $t { const NAME: &'static str = $n; })*
    };
}
rhai_type! {
    rhai::ImmutableString => "String",
    String => "String",
    rhai::INT => "int",
    bool => "bool",
    rhai::FLOAT => "float",
    rhai::Map => "Map",
    rhai::Array => "Array",
    rhai::Dynamic => "?",
    () => "()",
}

/// The length of [`one_line`]'s result for `src`.
pub const fn one_line_len(src: &str) -> usize {
    let b = src.as_bytes();
    let (mut n, mut i, mut at_start, mut join) = (0, 0, true, false);
    while i < b.len() {
        let c = b[i];
        i += 1;
        if c == b'\n' {
            at_start = true;
            continue;
        }
        if at_start {
            at_start = false;
            join = n > 0;
            if c == b' ' {
                continue;
            }
        }
        if join {
            n += 1;
            join = false;
        }
        n += 1;
    }
    n
}

/// The `///` lines of a doc text (`concat!` of the `#[doc]` strings, each ended by `\n`) as
/// one line: each line's leading space dropped, lines joined by one space.
pub const fn one_line<const N: usize>(src: &str) -> [u8; N] {
    let b = src.as_bytes();
    let mut out = [0u8; N];
    let (mut n, mut i, mut at_start, mut join) = (0, 0, true, false);
    while i < b.len() {
        let c = b[i];
        i += 1;
        if c == b'\n' {
            at_start = true;
            continue;
        }
        if at_start {
            at_start = false;
            join = n > 0;
            if c == b' ' {
                continue;
            }
        }
        if join {
            out[n] = b' ';
            n += 1;
            join = false;
        }
        out[n] = c;
        n += 1;
    }
    out
}

/// `bytes` as text (they are a doc text's, so UTF-8).
pub const fn utf8(bytes: &'static [u8]) -> &'static str {
    match core::str::from_utf8(bytes) {
        Ok(s) => s,
        Err(_) => panic!("a doc text is not UTF-8"),
    }
}

/// The total length of `parts`.
pub const fn total<T>(parts: &[&[T]]) -> usize {
    let (mut n, mut i) = (0, 0);
    while i < parts.len() {
        n += parts[i].len();
        i += 1;
    }
    n
}

/// `parts` one after the other (`N` is their total length, at least 1).
pub const fn concat<T: Copy, const N: usize>(parts: &[&[T]]) -> [T; N] {
    let mut first = 0;
    while parts[first].is_empty() {
        first += 1;
    }
    let mut out = [parts[first][0]; N];
    let (mut k, mut i) = (0, 0);
    while i < parts.len() {
        let mut j = 0;
        while j < parts[i].len() {
            out[k] = parts[i][j];
            k += 1;
            j += 1;
        }
        i += 1;
    }
    out
}

/// One host function (with its overloads) as one item: see the module docs of
/// `crate::host::api::define`.
macro_rules! host_fn {
    (
        $(#[doc = $doc:literal])*
        #[host(ns = $ns:literal $(, name = $sname:literal)?, effects = $eff:tt $(, options = $opts:expr)? $(,)?)]
        fn $name:ident ( $($sig:tt)* ) -> $ret:ty $(as $rn:literal)? $body:block
        $(
            $(#[doc = $odoc:literal])*
            #[overload $(( $(effects = $oeff:tt)? $(,)? $(options = $oopts:expr)? $(,)? ))?]
            fn $oname:ident ( $($osig:tt)* ) -> $oret:ty $(as $orn:literal)? $obody:block
        )*
    ) => {
        #[doc = concat!("`", $ns, "::", stringify!($name), "`: see [`", stringify!($name), "::", stringify!($name), "`].")]
        pub(crate) mod $name {
            #[allow(unused_imports)]
            use super::*;

            $crate::host::api::host_fn!(@fn [$(#[doc = $doc])*] $name ($($sig)*) -> $ret $body);
            $($crate::host::api::host_fn!(@fn [$(#[doc = $odoc])*] $oname ($($osig)*) -> $oret $obody);)*

            /// The name scripts call.
            const NAME: &str = $crate::host::api::host_fn!(@name $name $($sname)?);

            /// The reference rows and registrations of this function and its overloads.
            pub(crate) const ROWS: &[$crate::host::api::FnDoc] = &[
                $crate::host::api::host_fn!(@row $ns, NAME, $eff, [$($opts)?],
                    [$($doc)*], $name ($($sig)*) -> $ret $(as $rn)?),
                $($crate::host::api::host_fn!(@row $ns, NAME,
                    {[$($($oeff)?)?] $eff}, [$($($oopts)?)?],
                    [$($odoc)*], $oname ($($osig)*) -> $oret $(as $orn)?),)*
            ];
        }
    };

    // The function itself (without the `as "type"` annotations).
    (@fn [$($attr:tt)*] $f:ident ($api:ident : &Api, $h:ident : &mut Host
        $(, $arg:ident : $ty:ty $(as $tn:literal)?)* $(,)?) -> $ret:ty $body:block) => {
        $($attr)*
        pub(crate) fn $f($api: &$crate::host::api::Api, $h: &mut $crate::host::Host $(, $arg: $ty)*)
            -> ::core::result::Result<$ret, $crate::host::api::CallError> $body
    };
    (@fn [$($attr:tt)*] $f:ident ($h:ident : &mut Host
        $(, $arg:ident : $ty:ty $(as $tn:literal)?)* $(,)?) -> $ret:ty $body:block) => {
        $($attr)*
        pub(crate) fn $f($h: &mut $crate::host::Host $(, $arg: $ty)*)
            -> ::core::result::Result<$ret, $crate::host::api::CallError> $body
    };

    // One reference row with its registration.
    (@row $ns:literal, $sname:expr, $eff:tt, [$($opts:expr)?], [$($doc:literal)*],
     $f:ident ($api:ident : &Api, $h:ident : &mut Host $(, $arg:ident : $ty:ty $(as $tn:literal)?)* $(,)?)
     -> $ret:ty $(as $rn:literal)?) => {
        $crate::host::api::host_fn!(@doc $ns, $sname, $eff, [$($opts)?], [$($doc)*],
            [$((stringify!($arg), $crate::host::api::host_fn!(@type $ty $(, $tn)?))),*],
            $crate::host::api::host_fn!(@type $ret $(, $rn)?),
            |r| {
                let fname = $crate::host::api::fname($ns, $sname);
                r.add($ns, $sname, move |ctx: rhai::NativeCallContext $(, $arg: $ty)*| {
                    $crate::host::api::Api::call_current(&ctx, &fname, |$api, h| $f($api, h $(, $arg)*))
                });
            })
    };
    (@row $ns:literal, $sname:expr, $eff:tt, [$($opts:expr)?], [$($doc:literal)*],
     $f:ident ($h:ident : &mut Host $(, $arg:ident : $ty:ty $(as $tn:literal)?)* $(,)?)
     -> $ret:ty $(as $rn:literal)?) => {
        $crate::host::api::host_fn!(@doc $ns, $sname, $eff, [$($opts)?], [$($doc)*],
            [$((stringify!($arg), $crate::host::api::host_fn!(@type $ty $(, $tn)?))),*],
            $crate::host::api::host_fn!(@type $ret $(, $rn)?),
            |r| {
                let fname = $crate::host::api::fname($ns, $sname);
                r.add($ns, $sname, move |ctx: rhai::NativeCallContext $(, $arg: $ty)*| {
                    $crate::host::api::Api::call_current(&ctx, &fname, |_, h| $f(h $(, $arg)*))
                });
            })
    };
    (@doc $ns:literal, $sname:expr, $eff:tt, [$($opts:expr)?], [$($doc:literal)*],
     [$($param:expr),*], $ret:expr, $register:expr) => {
        $crate::host::api::FnDoc {
            ns: $ns,
            name: $sname,
            params: &[$($param),*],
            returns: $ret,
            doc: {
                const SRC: &str = concat!($($doc, "\n"),*);
                const BYTES: [u8; $crate::host::api::define::one_line_len(SRC)] =
                    $crate::host::api::define::one_line(SRC);
                $crate::host::api::define::utf8(&BYTES)
            },
            effects: $crate::host::api::host_fn!(@effects $eff),
            script_layer: false,
            options: $crate::host::api::host_fn!(@options $($opts)?),
            register: $register,
        }
    };
    (@name $name:ident) => { stringify!($name) };
    (@name $name:ident $sname:literal) => { $sname };
    (@type $ty:ty) => { <$ty as $crate::host::api::define::RhaiType>::NAME };
    (@type $ty:ty, $name:literal) => { $name };
    (@effects [$($kind:ident),+ $(,)?]) => {
        $crate::host::api::Effects::Submits(&[$($crate::host::api::EffectKind::$kind),+])
    };
    (@effects $e:ident) => { $crate::host::api::Effects::$e };
    // An overload's: its own, or the first's.
    (@effects {[] $e:tt}) => { $crate::host::api::host_fn!(@effects $e) };
    (@effects {[$own:tt] $e:tt}) => { $crate::host::api::host_fn!(@effects $own) };
    (@options) => { &[] };
    (@options $opts:expr) => { $opts };
}
pub(crate) use host_fn;

/// A file's table of host functions, `HOST_FNS`, in reference order: the `ROWS` of each
/// [`host_fn!`] item named (a module of this file, or a path to one). An item left out is
/// dead code, which the build rejects (`-D warnings`). `host_fns!(SCRIPT_FNS: ...)` names
/// the table otherwise (the script layer's, of [`script_fn!`] items).
macro_rules! host_fns {
    ($table:ident : $($($seg:ident)::+),+ $(,)?) => {
        /// This file's functions, in reference order (`host_fns!`).
        pub(crate) const $table: &[$crate::host::api::FnDoc] = {
            use $crate::host::api::define::{concat, total};
            const PARTS: &[&[$crate::host::api::FnDoc]] = &[$($($seg)::+::ROWS),+];
            const ALL: [$crate::host::api::FnDoc; total(PARTS)] = concat(PARTS);
            &ALL
        };
    };
    ($($($seg:ident)::+),+ $(,)?) => {
        $crate::host::api::host_fns!(HOST_FNS: $($($seg)::+),+);
    };
}
pub(crate) use host_fns;

/// A function of the script layer itself (`step()`, `env`, `fail`, `print`, `log::info`,
/// `changed()`, ...) as one item: the `fn` the script runner registers (or calls from its
/// hook), whose `///` text and signature give its reference row, as [`host_fn!`]'s do. The
/// parameters before a `;` are the runner's (captured state, the call context), not the
/// script's; the `fn` is emitted as written (`;` read as `,`), beside a module of the same
/// name holding its row (`ROWS`, for [`host_fns!`]`(SCRIPT_FNS: ...)`).
///
/// ```ignore
/// script_fn! {
///     /// `INFO: msg` to the step's stdout.
///     #[script(ns = "log", name = "info", effects = Computes)]
///     fn log_info(out: &CappedOutput, ctx: NativeCallContext; msg: Dynamic) -> Stopped as "()" {
///         log_line(out, &ctx, "INFO: ", false, &msg)
///     }
/// }
/// ```
macro_rules! script_fn {
    (
        $(#[doc = $doc:literal])*
        #[script(ns = $ns:literal $(, name = $sname:literal)?, effects = $eff:tt $(,)?)]
        fn $f:ident ( $($pre:ident : $pty:ty),* ; $($arg:ident : $ty:ty $(as $tn:literal)?),* $(,)? )
            -> $ret:ty $(as $rn:literal)? $body:block
    ) => {
        $(#[doc = $doc])*
        pub(crate) fn $f($($pre: $pty,)* $($arg: $ty),*) -> $ret $body

        #[doc = concat!("The reference row of [`", stringify!($f), "()`](fn@", stringify!($f), ").")]
        pub(crate) mod $f {
            #[allow(unused_imports)]
            use super::*;

            /// The reference row.
            pub(crate) const ROWS: &[$crate::host::api::FnDoc] = &[$crate::host::api::FnDoc {
                ns: $ns,
                name: $crate::host::api::host_fn!(@name $f $($sname)?),
                params: &[$((stringify!($arg), $crate::host::api::host_fn!(@type $ty $(, $tn)?))),*],
                returns: $crate::host::api::host_fn!(@type $ret $(, $rn)?),
                doc: {
                    const SRC: &str = concat!($($doc, "\n"),*);
                    const BYTES: [u8; $crate::host::api::define::one_line_len(SRC)] =
                        $crate::host::api::define::one_line(SRC);
                    $crate::host::api::define::utf8(&BYTES)
                },
                effects: $crate::host::api::host_fn!(@effects $eff),
                script_layer: true,
                options: &[],
                register: |_| {},
            }];
        }
    };
}
pub(crate) use script_fn;
