//! `pkg::`: every package function's reference row and binding, over [`crate::host::packages::pkg`]
//! and [`crate::host::packages::pkgrepo`] (repositories and holds), and their tests through Rhai.

use crate::host::api::host_fn;
use rhai::{Dynamic, ImmutableString as S, Map};

use crate::host::api::convert::{self, check_keys, opt_bool, opt_string};
use crate::host::api::docs::EffectKind::*;
use crate::host::api::docs::Effects::*;
use crate::host::api::docs::FnDoc;
use crate::host::api::docs::{NAME, OPTS};
use crate::host::packages::pkg;
use crate::host::packages::pkgrepo::{self, RepoOptions};

/// The option keys of `pkg::repo`.
const REPO_KEYS: &[&str] = &[
    "url",
    "suites",
    "components",
    "arch",
    "key",
    "key_url",
    "key_sha256",
    "enabled",
];

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
    check_keys(m, REPO_KEYS)?;
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

/// The reference sections of this file's namespaces: `(namespace, heading, introduction)`.
pub(super) const NAMESPACES: &[(&str, &str, &str)] = &[(
    "pkg",
    "Packages — `pkg::`",
    "The package manager is chosen from the host's os-release. A plan or check never runs the package manager's mutating commands (not even `apt-get update`).",
)];

/// The functions of this file's namespaces, in reference order: each one's reference row
/// and its registration.
pub(super) const FUNCTIONS: &[FnDoc] = &[
    host_fn!(
        "pkg",
        "manager",
        &[],
        "?",
        ReadsHost,
        "`\"apt\"`, `\"dnf\"`, `\"yum\"`, `\"zypper\"` or `()`, from the host's os-release.",
        |h| Ok(convert::opt(pkg::manager(h)?.map(|m| m.name().to_string())))
    ),
    host_fn!(
        "pkg",
        "installed",
        &[NAME],
        "bool",
        ReadsHost,
        "True when the package is installed; for a pinned name (`\"cuda-drivers=550.90.07-1\"`, `\"cuda-drivers-550.90.07\"`, as `install` takes them) installed in that version.",
        |h, n: S| Ok(pkg::installed(h, &n)?)
    ),
    host_fn!(
        "pkg",
        "version",
        &[NAME],
        "?",
        ReadsHost,
        "The installed version, or `()`.",
        |h, n: S| Ok(convert::opt(pkg::version(h, &n)?))
    ),
    host_fn!(
        "pkg",
        "install",
        &[("names", "?")],
        "bool",
        Submits(&[PackageInstall]),
        "Install what is missing of a name or an array of names, non-interactively, waiting (bounded) for the package manager's lock. A name may pin a version: `\"cuda-drivers=550.90.07-1\"` (apt, compared with dpkg's `${Version}`; installed with `--allow-downgrades`) or `\"cuda-drivers-550.90.07\"` / `\"cuda-drivers-550.90.07-1.el9\"` (dnf/yum: a version starting with a digit and containing a `.`, compared with `%{VERSION}-%{RELEASE}`): another installed version is a change. After a changed `pkg::repo` the index is refreshed first.",
        |h, n: Dynamic| {
            let names = convert::string_or_array(&n, "names")?;
            Ok(pkg::install(h, &names, false)?)
        }
    ),
    host_fn!(
        "pkg",
        "install",
        &[("names", "?"), OPTS],
        "bool",
        Submits(&[PackageInstall]),
        "As `install`; `#{update: true}` refreshes the package index first (only when something is missing).",
        options = &["update"],
        |h, n: Dynamic, o: Map| {
            let names = convert::string_or_array(&n, "names")?;
            check_keys(&o, &["update"])?;
            let update = opt_bool(&o, "update", false)?;
            Ok(pkg::install(h, &names, update)?)
        }
    ),
    host_fn!(
        "pkg",
        "remove",
        &[("names", "?")],
        "bool",
        Submits(&[PackageRemove]),
        "Remove what is installed of a name or an array of names.",
        |h, n: Dynamic| {
            let names = convert::string_or_array(&n, "names")?;
            Ok(pkg::remove(h, &names)?)
        }
    ),
    host_fn!(
        "pkg",
        "update",
        &[],
        "()",
        Submits(&[PackageUpdate]),
        "Refresh the package index: `apt-get update`, `dnf makecache` (`yum`), `zypper refresh`. An action: run every time in apply, listed in a plan, never drift.",
        |h| Ok(pkg::update(h)?)
    ),
    host_fn!(
        "pkg",
        "upgrade",
        &[],
        "bool",
        Submits(&[PackageUpgrade]),
        "Upgrade every installed package non-interactively: `apt-get upgrade -y` (`DEBIAN_FRONTEND=noninteractive`, waiting for the dpkg lock as `install` does), `dnf upgrade -y` (`yum`), `zypper update`. An action (true: it ran, or a plan would run it); never drift; a failed step lists it as not undone.",
        |h| Ok(pkg::upgrade(h)?)
    ),
    host_fn!(
        "pkg",
        "repo",
        &[NAME, OPTS],
        "bool",
        Submits(&[Write, Remove]),
        "Define repository `name` with its signing key, `key` (ASCII-armored text) or `key_url` with `key_sha256` (downloaded as `fs::fetch`). apt: `/etc/apt/sources.list.d/<name>.sources` (deb822: `Types: deb`, `URIs: <url>`, `Suites:` (required; `\"/\"` for a flat repository), `Components:`, `Architectures: <arch>`, `Enabled: no` when `enabled: false`, `Signed-By: /etc/apt/keyrings/<name>.asc`, `.gpg` for a `key_url` ending in `.gpg`); dnf/yum: `/etc/yum.repos.d/<name>.repo` (`[name]`, `name=`, `baseurl=`, `enabled=`, `gpgcheck=1`, `gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-<name>`) and the key there. Files 0644, key first. A change makes the step's next `pkg::install` refresh the package index. A `url` with `user:password@` is refused (credentials belong in `/etc/apt/auth.conf.d/` or the `.repo` file's `username=`/`password=`). zypper hosts: an error.",
        options = REPO_KEYS,
        |h, n: S, o: Map| {
            let o = repo_opts(&o)?;
            Ok(pkgrepo::repo(h, &n, &o)?)
        }
    ),
    host_fn!(
        "pkg",
        "remove_repo",
        &[NAME],
        "bool",
        Submits(&[Remove]),
        "Remove repository `name`'s file and key (as `pkg::repo` wrote them); a change makes the next `pkg::install` refresh the index.",
        |h, n: S| Ok(pkgrepo::remove_repo(h, &n)?)
    ),
    host_fn!(
        "pkg",
        "hold",
        &[("names", "?")],
        "bool",
        Submits(&[PackageHold]),
        "Hold a name or an array of names at the installed version: `apt-mark hold` (queried with `apt-mark showhold`), `dnf versionlock add` (queried with `dnf versionlock list`; needs the versionlock plugin). Unchanged for held ones.",
        |h, n: Dynamic| {
            let names = convert::string_or_array(&n, "names")?;
            Ok(pkgrepo::hold(h, &names)?)
        }
    ),
    host_fn!(
        "pkg",
        "unhold",
        &[("names", "?")],
        "bool",
        Submits(&[PackageUnhold]),
        "Release held packages: `apt-mark unhold`, `dnf versionlock delete`. Unchanged for ones not held.",
        |h, n: Dynamic| {
            let names = convert::string_or_array(&n, "names")?;
            Ok(pkgrepo::unhold(h, &names)?)
        }
    ),
];

#[cfg(test)]
pub(super) mod tests {
    use super::super::tests::*;
    use crate::host::effects::report::ExecMode;
    use crate::host::testutil::TestHost;

    /// One call of each function of this file, for
    /// [`super::super::tests::declared_effects_are_the_submitted_ones`]: in the root that test
    /// prepares, each call of a function that submits effects changes something.
    pub(in super::super) const SAMPLES: &[&str] = &[
        r#"pkg::manager()"#,
        r#"pkg::installed("old")"#,
        r#"pkg::version("old")"#,
        r#"pkg::install("curl")"#,
        r#"pkg::install(["jq"], #{update: true})"#,
        r#"pkg::remove("old")"#,
        r#"pkg::update()"#,
        r#"pkg::upgrade()"#,
        r#"pkg::repo("r", #{url: "https://r.example/apt", suites: ["noble"], components: "main", key: "-----BEGIN PGP PUBLIC KEY BLOCK-----\nk\n-----END PGP PUBLIC KEY BLOCK-----"})"#,
        r#"pkg::remove_repo("gone")"#,
        r#"pkg::hold("old")"#,
        r#"pkg::unhold("held")"#,
    ];

    #[test]
    fn packages_all_modes() {
        let t = TestHost::new();
        apt_stubs(&t);
        std::fs::write(t.p("/state/pkg-old"), "i\n").unwrap();
        all_modes(
            &t,
            &[
                r#"pkg::install("curl")"#,
                r#"pkg::install(["jq", "vim"], #{update: true})"#,
                r#"pkg::remove(["old", "never-installed"])"#,
            ],
        );
        let r = run(
            &t,
            ExecMode::Apply,
            r#"print([pkg::manager(), pkg::installed("jq"), pkg::installed("old"), pkg::version("curl"), pkg::version("old")]);"#,
        )
        .ok();
        assert_eq!(r.stdout(), "[\"apt\", true, false, \"1.2-3\", ()]\n");
        let r = run(&t, ExecMode::Apply, r#"pkg::install(#{})"#);
        assert_eq!(
            r.error(),
            "main.rhai:1:6: pkg::install: names must be a string or an array of strings, got map"
        );
        let r = run(
            &t,
            ExecMode::Apply,
            r#"pkg::install("x", #{upgrade: true})"#,
        );
        assert!(
            r.error().contains("unknown option \"upgrade\""),
            "{}",
            r.error()
        );
        t.file("/etc/os-release", "ID=arch\n");
        let r = run(&t, ExecMode::Apply, r#"print(type_of(pkg::manager()))"#).ok();
        assert_eq!(r.stdout(), "()\n");
    }

    #[test]
    fn pkg_repo_and_hold_from_scripts() {
        let t = TestHost::new();
        apt_stubs(&t);
        t.stub(
            "apt-mark",
            r#"case "$1" in
      showhold) if [ -e /state/held ]; then read v < /state/held; echo "$v"; fi ;;
      hold) echo "$2" > /state/held ;;
    esac"#,
        );
        let src = r#"print([
            pkg::repo("r", #{url: "https://r.example/apt", suites: ["noble"], components: "main",
                             key: "-----BEGIN PGP PUBLIC KEY BLOCK-----\nk\n-----END PGP PUBLIC KEY BLOCK-----"}),
            pkg::hold("jq"),
        ]);"#;
        let plan = run(&t, ExecMode::Plan, src).ok();
        assert_eq!(plan.stdout(), "[true, true]\n");
        let kinds: Vec<&str> = plan
            .report
            .changes
            .iter()
            .map(|c| c.kind.as_str())
            .collect();
        assert_eq!(kinds, vec!["write", "write", "package_hold"]);
        assert_eq!(plan.report.changes[2].summary, "hold packages jq (apt)");
        assert_eq!(
            run(&t, ExecMode::Apply, src).ok().stdout(),
            "[true, true]\n"
        );
        assert_eq!(
            run(&t, ExecMode::Apply, src).ok().stdout(),
            "[false, false]\n"
        );
        assert_eq!(
            t.read("/etc/apt/sources.list.d/r.sources"),
            "# Managed by skyhook (pkg::repo \"r\").\nTypes: deb\nURIs: https://r.example/apt\nSuites: noble\nComponents: main\nSigned-By: /etc/apt/keyrings/r.asc\n"
        );
        assert_eq!(
            t.read("/etc/apt/keyrings/r.asc"),
            "-----BEGIN PGP PUBLIC KEY BLOCK-----\nk\n-----END PGP PUBLIC KEY BLOCK-----\n"
        );
        let r = run(
            &t,
            ExecMode::Plan,
            r#"pkg::repo("r", #{url: "u", suite: "noble"})"#,
        );
        assert_eq!(
            r.error(),
            "main.rhai:1:6: pkg::repo: unknown option \"suite\" (expected one of: url, suites, components, arch, key, key_url, key_sha256, enabled)"
        );
        let r = run(
            &t,
            ExecMode::Plan,
            r#"pkg::repo("r", #{url: "u", suites: 1})"#,
        );
        assert_eq!(
            r.error(),
            "main.rhai:1:6: pkg::repo: option suites must be a string or an array of strings, got i64"
        );
    }
}

#[cfg(test)]
mod upgrade_tests {
    use super::super::tests::*;
    use crate::host::effects::report::ExecMode;
    use crate::host::testutil::TestHost;

    /// `pkg::update()` and `pkg::upgrade()` are actions: listed in a plan, no drift in a
    /// check, run (non-interactively) in every apply.
    #[test]
    fn pkg_update_and_upgrade_are_actions() {
        let t = TestHost::new();
        apt_stubs(&t);
        t.stub(
            "apt-get",
            r#"echo "frontend=$DEBIAN_FRONTEND" >> /stub.log"#,
        );
        let src = r#"pkg::update(); print(pkg::upgrade());"#;
        let plan = run(&t, ExecMode::Plan, src).ok();
        assert_eq!(plan.stdout(), "true\n");
        let actions: Vec<&str> = plan
            .report
            .actions
            .iter()
            .map(|a| a.summary.as_str())
            .collect();
        assert_eq!(actions, ["apt-get update", "apt-get upgrade -y"]);
        assert!(plan.report.changes.is_empty());
        let check = run(&t, ExecMode::Check, src).ok();
        assert!(check.report.drift().is_empty());
        assert!(t.calls().is_empty(), "a plan or check ran {:?}", t.calls());
        for _ in 0..2 {
            t.clear_calls();
            assert_eq!(run(&t, ExecMode::Apply, src).ok().stdout(), "true\n");
            assert_eq!(
                t.calls(),
                [
                    "apt-get -o DPkg::Lock::Timeout=300 update",
                    "frontend=noninteractive",
                    "apt-get -o DPkg::Lock::Timeout=300 upgrade -y",
                    "frontend=noninteractive",
                ]
            );
        }
        t.file(
            "/etc/os-release",
            "ID=\"amzn\"\nID_LIKE=\"fedora\"\nVERSION_ID=\"2023\"\n",
        );
        t.stub("dnf", ":");
        t.clear_calls();
        run(&t, ExecMode::Apply, src).ok();
        assert_eq!(t.calls(), ["dnf -y makecache", "dnf -y upgrade"]);
        t.file("/etc/os-release", "ID=arch\n");
        assert_eq!(
            run(&t, ExecMode::Plan, "pkg::upgrade()").error(),
            "main.rhai:1:6: pkg::upgrade: no supported package manager for this host (os-release ID \"arch\")"
        );
    }

    /// A failed upgrade fails the step at the call; the step's earlier commands are "not
    /// undone" lines.
    #[test]
    fn pkg_upgrade_failure_is_the_steps_and_not_undone() {
        use crate::host::ExecMode as M;
        let t = TestHost::new();
        apt_stubs(&t);
        t.stub(
            "apt-get",
            r#"[ "$1 $2 $3" = "-o DPkg::Lock::Timeout=300 upgrade" ] && exit 100; :"#,
        );
        let r = run(&t, ExecMode::Apply, "pkg::update();\npkg::upgrade()");
        assert_eq!(
            r.error(),
            "main.rhai:2:6: pkg::upgrade: command apt-get -o DPkg::Lock::Timeout=300 upgrade -y failed with exit code 100"
        );
        let mut h = t.host_with(M::Apply, |o| o.undo = Some("step".into()));
        crate::host::packages::pkg::update(&mut h).unwrap();
        let (_, undone, _) = h.fail_with_report();
        assert_eq!(undone.not_undone, ["apt-get update"]);
    }
}
