//! `version::` (version ordering) over [`crate::host::packages::version`]: each function's
//! reference row and binding, and their tests through Rhai.

use crate::host::api::host_fn;
use rhai::{Array, ImmutableString as S, Map};

use crate::host::api::convert::{self, check_keys, opt_string};
use crate::host::api::docs::Effects::*;
use crate::host::api::docs::FnDoc;
use crate::host::packages::version::{self, Scheme};

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
pub(super) const NAMESPACES: &[(&str, &str, &str)] = &[(
    "version",
    "Versions — `version::`",
    "Order version strings by a scheme named in `#{scheme}` (required): `\"semver\"` (Semantic Versioning 2.0: exactly `MAJOR.MINOR.PATCH[-pre][+build]`, build metadata ignored), `\"dpkg\"` (Debian policy: `[epoch:]upstream[-revision]`, `~` before anything, as `dpkg --compare-versions`) or `\"rpm\"` (rpmvercmp with epoch and release, `~` before and `^` after the end, as `rpmdev-vercmp`). Use `dpkg` for what `dpkg-query` or `os::kernel()` gives on a Debian-family host and `rpm` on an rpm host: both order `6.8.0-1015-aws` after `6.8`. A version that is not valid in its scheme (an empty string, whitespace, `1.2` for semver) fails the call, naming it.",
)];

/// The functions of this file's namespaces, in reference order: each one's reference row
/// and its registration.
pub(super) const FUNCTIONS: &[FnDoc] = &[
    host_fn!(
        "version",
        "compare",
        &[("a", "String"), ("b", "String"), ("opts", "Map")],
        "int",
        Computes,
        "`-1` when `a` is older than `b`, `0` when they are equal in the scheme (`1.0` and `0:1.0-0` in dpkg), `1` when newer.",
        options = KEYS,
        |_h, a: S, b: S, o: Map| {
            let s = scheme(&o)?;
            Ok(version::compare(&a, &b, s)? as i64)
        }
    ),
    host_fn!(
        "version",
        "at_least",
        &[("v", "String"), ("min", "String"), ("opts", "Map")],
        "bool",
        Computes,
        "True when `v` is `min` or newer (`version::at_least(os::kernel(), \"6.8\", #{scheme: \"dpkg\"})`).",
        options = KEYS,
        |_h, v: S, min: S, o: Map| {
            let s = scheme(&o)?;
            Ok(version::at_least(&v, &min, s)?)
        }
    ),
    host_fn!(
        "version",
        "sort",
        &[("versions", "Array"), ("opts", "Map")],
        "Array",
        Computes,
        "The versions (strings), oldest first (the newest is `.pop()`); equal versions keep their order.",
        options = KEYS,
        |_h, list: Array, o: Map| {
            let s = scheme(&o)?;
            let list = convert::strings(&list, "versions")?;
            Ok(convert::array(version::sort(list, s)?))
        }
    ),
];

#[cfg(test)]
pub(super) mod tests {
    use super::super::tests::*;
    use crate::host::effects::report::ExecMode;
    use crate::host::testutil::TestHost;

    /// One call of each function of this file, for
    /// [`super::super::tests::declared_effects_are_the_submitted_ones`].
    pub(in super::super) const SAMPLES: &[&str] = &[
        r#"version::compare("1.0", "1.1", #{scheme: "dpkg"})"#,
        r#"version::at_least("6.8.0-1015-aws", "6.8", #{scheme: "dpkg"})"#,
        r#"version::sort(["2.0", "1.0"], #{scheme: "rpm"})"#,
    ];

    #[test]
    fn version_calls_in_every_mode() {
        let t = TestHost::new();
        t.file("/proc/sys/kernel/osrelease", "6.8.0-1015-aws\n");
        let src = r#"
            let d = #{scheme: "dpkg"};
            print([version::compare("1.0~rc1", "1.0", d), version::compare("1:0.1", "2.0", d),
                   version::compare("1.0", "0:1.0-0", d)]);
            print([version::compare("1.0.0-rc.1", "1.0.0", #{scheme: "semver"}),
                   version::compare("5.5p10", "5.5p2", #{scheme: "rpm"})]);
            print([version::at_least(os::kernel(), "6.8", d), version::at_least(os::kernel(), "6.9", d)]);
            print(version::sort(["6.8.0-1015-aws", "6.5.0-1024-aws", "6.8.0-1009-aws"], d));
        "#;
        let want = "[-1, 1, 0]\n[-1, 1]\n[true, false]\n\
                    [\"6.5.0-1024-aws\", \"6.8.0-1009-aws\", \"6.8.0-1015-aws\"]\n";
        for mode in [ExecMode::Plan, ExecMode::Check, ExecMode::Apply] {
            let r = run(&t, mode, src).ok();
            assert_eq!(r.stdout(), want, "{mode:?}");
            assert!(r.report.changes.is_empty());
        }
    }

    #[test]
    fn version_errors_name_the_value_and_the_option() {
        let t = TestHost::new();
        let cases = [
            (
                r#"version::compare("1.0", "1.1", #{})"#,
                "main.rhai:1:10: version::compare: option scheme is required: \"semver\", \"dpkg\" or \"rpm\"",
            ),
            (
                r#"version::compare("1.0", "1.1", #{scheme: "deb"})"#,
                "main.rhai:1:10: version::compare: invalid version scheme: \"deb\" (expected \"semver\", \"dpkg\" or \"rpm\")",
            ),
            (
                r#"version::at_least("1.2", "1.0.0", #{scheme: "semver"})"#,
                "main.rhai:1:10: version::at_least: invalid version: \"1.2\" is not a semver version: unexpected end of input while parsing minor version number",
            ),
            (
                r#"version::sort(["1.0", 2], #{scheme: "rpm"})"#,
                "main.rhai:1:10: version::sort: versions[1] must be a string, got i64",
            ),
            (
                r#"version::compare("1", "2", #{schema: "rpm"})"#,
                "main.rhai:1:10: version::compare: unknown option \"schema\" (expected one of: scheme)",
            ),
        ];
        for (src, want) in cases {
            assert_eq!(run(&t, ExecMode::Apply, src).error(), want, "{src}");
        }
    }
}
