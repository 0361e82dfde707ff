//! Version ordering for `version::compare`, `version::at_least` and `version::sort`: semver
//! 2.0 (the `semver` crate), Debian policy §5.6.12 as dpkg orders versions (`debversion`) and
//! rpmvercmp with epochs and releases (`rpm-version`). Pure functions of their arguments: a
//! script picks the scheme of the versions it compares (`dpkg` for what `dpkg-query` and
//! `uname -r` print on a Debian-family host, `rpm` on an rpm host, `semver` for upstream
//! tool versions).

use std::cmp::Ordering;

use crate::host::root::error::{HostError, Result};

/// How two version strings are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Semantic Versioning 2.0: `MAJOR.MINOR.PATCH[-pre][+build]`, exactly three numbers;
    /// build metadata is ignored.
    Semver,
    /// dpkg: `[epoch:]upstream[-revision]`, `~` before anything (even the end).
    Dpkg,
    /// rpm: `[epoch:]version[-release]`, compared as rpmvercmp does (`~` before anything,
    /// `^` after the end).
    Rpm,
}

impl Scheme {
    /// The names scripts use.
    pub const NAMES: &'static str = "\"semver\", \"dpkg\" or \"rpm\"";

    /// `semver`, `dpkg` or `rpm`.
    ///
    /// # Errors
    /// [`HostError::Invalid`] for any other name.
    pub fn parse(name: &str) -> Result<Scheme> {
        match name {
            "semver" => Ok(Scheme::Semver),
            "dpkg" => Ok(Scheme::Dpkg),
            "rpm" => Ok(Scheme::Rpm),
            _ => Err(HostError::Invalid {
                what: "version scheme",
                message: format!("{name:?} (expected {})", Self::NAMES),
            }),
        }
    }

    /// The scheme's name.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Semver => "semver",
            Scheme::Dpkg => "dpkg",
            Scheme::Rpm => "rpm",
        }
    }
}

/// One version parsed in its scheme, ready to be compared with others of the same scheme.
#[derive(Debug, Clone)]
enum Parsed {
    Semver(semver::Version),
    Dpkg(debversion::Version),
    Rpm(String),
}

impl Parsed {
    fn cmp(&self, other: &Parsed) -> Ordering {
        match (self, other) {
            (Parsed::Semver(a), Parsed::Semver(b)) => a.cmp_precedence(b),
            (Parsed::Dpkg(a), Parsed::Dpkg(b)) => a.cmp(b),
            (Parsed::Rpm(a), Parsed::Rpm(b)) => rpm_version::rpm_evr_compare(a, b),
            // Both sides are always parsed with one scheme.
            _ => Ordering::Equal,
        }
    }
}

fn invalid(scheme: Scheme, v: &str, why: &str) -> HostError {
    HostError::Invalid {
        what: "version",
        message: format!("{v:?} is not a {} version: {why}", scheme.name()),
    }
}

/// `v` checked and parsed in `scheme`.
fn parse(scheme: Scheme, v: &str) -> Result<Parsed> {
    match scheme {
        Scheme::Semver => semver::Version::parse(v)
            .map(Parsed::Semver)
            .map_err(|e| invalid(scheme, v, &e.to_string())),
        Scheme::Dpkg => {
            // debversion accepts an epoch without a digit-leading upstream part; dpkg
            // requires the upstream version to start with a digit.
            let parsed: debversion::Version = v.parse().map_err(|_| {
                invalid(
                    scheme,
                    v,
                    "expected [epoch:]upstream[-revision] of [A-Za-z0-9.+~:-]",
                )
            })?;
            if !parsed
                .upstream_version
                .starts_with(|c: char| c.is_ascii_digit())
            {
                return Err(invalid(
                    scheme,
                    v,
                    "the upstream version must start with a digit",
                ));
            }
            Ok(Parsed::Dpkg(parsed))
        }
        Scheme::Rpm => {
            let ok = !v.is_empty()
                && v.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._+~^:-".contains(c));
            if !ok {
                return Err(invalid(
                    scheme,
                    v,
                    "expected [epoch:]version[-release] of [A-Za-z0-9._+~^:-]",
                ));
            }
            if let Some((epoch, _)) = v.split_once(':')
                && (epoch.is_empty() || !epoch.bytes().all(|b| b.is_ascii_digit()))
            {
                return Err(invalid(scheme, v, "the epoch must be a number"));
            }
            Ok(Parsed::Rpm(v.to_string()))
        }
    }
}

/// `version::compare(a, b, #{scheme})`: `a` ordered against `b` in `scheme`.
///
/// # Errors
/// [`HostError::Invalid`] naming the version that is not valid in the scheme.
pub fn compare(a: &str, b: &str, scheme: Scheme) -> Result<Ordering> {
    Ok(parse(scheme, a)?.cmp(&parse(scheme, b)?))
}

host_fn! {
    /// `-1` when `a` is older than `b`, `0` when they are equal in the scheme (`1.0` and `0:1.0-0`
    /// in dpkg), `1` when newer.
    #[host(ns = "version", effects = Computes, options = KEYS)]
    fn compare(_h: &mut Host, a: S, b: S, opts: Map) -> i64 {
        let s = scheme(&opts)?;
        Ok(super::compare(&a, &b, s)? as i64)
    }
}

/// `version::at_least(v, min, #{scheme})`: `v` is `min` or newer.
///
/// # Errors
/// As [`compare`].
pub fn at_least(v: &str, min: &str, scheme: Scheme) -> Result<bool> {
    Ok(compare(v, min, scheme)? != Ordering::Less)
}

host_fn! {
    /// True when `v` is `min` or newer (`version::at_least(os::kernel(), "6.8", #{scheme:
    /// "dpkg"})`).
    #[host(ns = "version", effects = Computes, options = KEYS)]
    fn at_least(_h: &mut Host, v: S, min: S, opts: Map) -> bool {
        let s = scheme(&opts)?;
        Ok(super::at_least(&v, &min, s)?)
    }
}

/// `version::sort(versions, #{scheme})`: oldest first; equal versions keep their order.
///
/// # Errors
/// As [`compare`], for the first invalid version.
pub fn sort(versions: Vec<String>, scheme: Scheme) -> Result<Vec<String>> {
    let mut parsed = versions
        .into_iter()
        .map(|v| parse(scheme, &v).map(|p| (p, v)))
        .collect::<Result<Vec<_>>>()?;
    parsed.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(parsed.into_iter().map(|(_, v)| v).collect())
}

host_fn! {
    /// The versions (strings), oldest first (the newest is `.pop()`); equal versions keep their
    /// order.
    #[host(ns = "version", effects = Computes, options = KEYS)]
    fn sort(_h: &mut Host, versions: Array, opts: Map) -> rhai::Array {
        let s = scheme(&opts)?;
        let versions = convert::strings(&versions, "versions")?;
        Ok(convert::array(super::sort(versions, s)?))
    }
}

/// What the host functions of this file use besides its own items.
mod prelude {
    pub(super) use crate::host::api::convert::{self, check_keys, opt_string};
    pub(super) use crate::host::api::{host_fn, host_fns};
    pub(super) use rhai::{Array, ImmutableString as S, Map};
}
use prelude::*;

/// The option keys of every `version::` function.
const KEYS: &[&str] = &["scheme"];

/// `#{scheme}`, required.
fn scheme(m: &Map) -> Result<Scheme, String> {
    check_keys(m, KEYS)?;
    match opt_string(m, "scheme")? {
        Some(s) => Scheme::parse(&s).map_err(|e| e.to_string()),
        None => Err(format!("option scheme is required: {}", Scheme::NAMES)),
    }
}

/// The reference sections of this file's namespaces: `(namespace, heading, introduction)`.
pub(crate) const NAMESPACES: &[(&str, &str, &str)] = &[(
    "version",
    "Versions — `version::`",
    "Order version strings by a scheme named in `#{scheme}` (required): `\"semver\"` (Semantic Versioning 2.0: exactly `MAJOR.MINOR.PATCH[-pre][+build]`, build metadata ignored), `\"dpkg\"` (Debian policy: `[epoch:]upstream[-revision]`, `~` before anything, as `dpkg --compare-versions`) or `\"rpm\"` (rpmvercmp with epoch and release, `~` before and `^` after the end, as `rpmdev-vercmp`). Use `dpkg` for what `dpkg-query` or `os::kernel()` gives on a Debian-family host and `rpm` on an rpm host: both order `6.8.0-1015-aws` after `6.8`. A version that is not valid in its scheme (an empty string, whitespace, `1.2` for semver) fails the call, naming it.",
)];

host_fns!(compare, at_least, sort);

#[cfg(test)]
mod tests {
    use super::*;
    use Ordering::*;

    fn cmp(scheme: Scheme, a: &str, b: &str) -> Ordering {
        let r = compare(a, b, scheme).unwrap();
        // Antisymmetric: the reverse comparison is the reverse.
        assert_eq!(compare(b, a, scheme).unwrap(), r.reverse(), "{a} vs {b}");
        r
    }

    /// Debian policy §5.6.12 (epoch first, then upstream and revision compared by the
    /// non-digit/digit algorithm, `~` sorting before everything, letters before other
    /// characters) and dpkg's own test vectors.
    #[test]
    fn dpkg_ordering_table() {
        let table: &[(&str, &str, Ordering)] = &[
            ("1.0", "1.0", Equal),
            ("1.0", "1.1", Less),
            ("1.10", "1.9", Greater),
            ("1:0.1", "2.0", Greater),
            ("1.0~rc1", "1.0", Less),
            ("1.0~~", "1.0~", Less),
            ("1.0~", "1.0", Less),
            ("1.0", "1.0+b1", Less),
            ("1.0-1", "1.0-2", Less),
            ("1.0-1ubuntu1", "1.0-1", Greater),
            ("1.0a", "1.0+", Less),
            ("1.0", "1.0.0", Less),
            ("0:1.0", "1.0", Equal),
            ("1.0-0", "1.0", Equal),
            ("2.30-0ubuntu2", "2.30-0ubuntu10", Less),
            ("6.8.0-1015-aws", "6.8", Greater),
            ("6.5.0-1024-aws", "6.8", Less),
            ("550.90.07-0ubuntu1", "550.127.05-0ubuntu1", Less),
            ("7.0", "7.0~a", Greater),
        ];
        for (a, b, want) in table {
            assert_eq!(cmp(Scheme::Dpkg, a, b), *want, "{a} vs {b}");
        }
    }

    /// rpmvercmp: alphanumeric segments, numbers newer than letters, leading zeros ignored,
    /// `~` before anything, `^` after the end but before a further segment, epoch first,
    /// the release only when the versions are equal.
    #[test]
    fn rpm_ordering_table() {
        let table: &[(&str, &str, Ordering)] = &[
            ("1.0", "1.0", Equal),
            ("1.0", "2.0", Less),
            ("2.0.1", "2.0", Greater),
            ("2.0.1a", "2.0.1", Greater),
            ("5.5p1", "5.5p2", Less),
            ("5.5p10", "5.5p1", Greater),
            ("10xyz", "10.1xyz", Less),
            ("xyz10", "xyz10.1", Less),
            ("1.010", "1.10", Equal),
            ("1.0~rc1", "1.0", Less),
            ("1.0~rc1", "1.0~rc2", Less),
            ("1.0^", "1.0", Greater),
            ("1.0^git1", "1.0.1", Less),
            ("a", "1", Less),
            ("2:1.0", "1:9.0", Greater),
            ("1.0-2.el9", "1.0-10.el9", Less),
            ("6.1.109-118.189.amzn2023.x86_64", "6.8", Less),
            ("6.12.0-1.el9", "6.8", Greater),
        ];
        for (a, b, want) in table {
            assert_eq!(cmp(Scheme::Rpm, a, b), *want, "{a} vs {b}");
        }
    }

    /// Semantic Versioning 2.0 §11: numbers numerically, a pre-release before its release,
    /// pre-release identifiers compared field by field, build metadata ignored.
    #[test]
    fn semver_ordering_table() {
        let chain = [
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0-rc.1",
            "1.0.0",
            "1.9.0",
            "1.10.0",
            "2.0.0",
        ];
        for w in chain.windows(2) {
            assert_eq!(
                cmp(Scheme::Semver, w[0], w[1]),
                Less,
                "{} vs {}",
                w[0],
                w[1]
            );
        }
        assert_eq!(cmp(Scheme::Semver, "1.0.0+build.1", "1.0.0+build.2"), Equal);
    }

    #[test]
    fn invalid_versions_name_the_version_and_scheme() {
        let err = |s, v: &str| compare(v, "1.0.0", s).unwrap_err().to_string();
        assert_eq!(
            err(Scheme::Semver, "1.2"),
            "invalid version: \"1.2\" is not a semver version: unexpected end of input while parsing minor version number"
        );
        assert_eq!(
            err(Scheme::Dpkg, "1.0 beta"),
            "invalid version: \"1.0 beta\" is not a dpkg version: expected [epoch:]upstream[-revision] of [A-Za-z0-9.+~:-]"
        );
        assert_eq!(
            err(Scheme::Dpkg, "beta"),
            "invalid version: \"beta\" is not a dpkg version: the upstream version must start with a digit"
        );
        assert_eq!(
            err(Scheme::Rpm, ""),
            "invalid version: \"\" is not a rpm version: expected [epoch:]version[-release] of [A-Za-z0-9._+~^:-]"
        );
        assert_eq!(
            err(Scheme::Rpm, "x:1.0"),
            "invalid version: \"x:1.0\" is not a rpm version: the epoch must be a number"
        );
        assert_eq!(
            Scheme::parse("deb").unwrap_err().to_string(),
            "invalid version scheme: \"deb\" (expected \"semver\", \"dpkg\" or \"rpm\")"
        );
    }

    #[test]
    fn sort_and_at_least() {
        let v = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            sort(
                v(&[
                    "6.8.0-1015-aws",
                    "6.5.0-1024-aws",
                    "6.8.0-1009-aws",
                    "6.8.0-1015-aws"
                ]),
                Scheme::Dpkg
            )
            .unwrap(),
            v(&[
                "6.5.0-1024-aws",
                "6.8.0-1009-aws",
                "6.8.0-1015-aws",
                "6.8.0-1015-aws"
            ])
        );
        assert!(at_least("6.8.0-1015-aws", "6.8", Scheme::Dpkg).unwrap());
        assert!(at_least("6.8", "6.8", Scheme::Dpkg).unwrap());
        assert!(!at_least("6.5.0-1024-aws", "6.8", Scheme::Dpkg).unwrap());
        assert!(sort(v(&["1.0", "x y"]), Scheme::Rpm).is_err());
    }
}
