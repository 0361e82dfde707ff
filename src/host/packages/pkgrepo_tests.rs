//! Package repositories, holds and pinned versions on debian- and rhel-family roots with
//! recording stubs of apt-get/apt-mark/dpkg-query and dnf/rpm.

use crate::host::effects::effect::PkgManager;
use crate::host::packages::pkg::{self, PackageSpec, parse_spec};
use crate::host::packages::pkgrepo::{self, RepoOptions};
use crate::host::root::error::Result;
use crate::host::tests::snapshot;
use crate::host::testutil::TestHost;
use crate::host::{ExecMode, Host};

/// [`crate::host::tests::all_modes`] for calls that may make several changes each (a
/// repository is a key and a file): plan and check leave the root byte-identical and agree,
/// apply returns what the plan did, the second apply and the check after it change nothing.
fn all_modes(
    t: &TestHost,
    f: impl Fn(&mut Host) -> Result<Vec<bool>, crate::host::api::CallError>,
) {
    let before = snapshot(t);
    let mut h = t.host(ExecMode::Plan);
    let planned = f(&mut h).unwrap();
    let plan = h.finish().unwrap();
    assert_eq!(snapshot(t), before, "a plan changed the root");
    assert!(planned.iter().all(|c| *c), "nothing to plan: {planned:?}");
    let mut h = t.host(ExecMode::Check);
    assert_eq!(f(&mut h).unwrap(), planned);
    let check = h.finish().unwrap();
    assert_eq!(snapshot(t), before, "a check changed the root");
    assert_eq!(check.drift().len(), plan.changes.len());
    let mut h = t.host(ExecMode::Apply);
    assert_eq!(f(&mut h).unwrap(), planned, "apply and plan disagree");
    assert_eq!(h.finish().unwrap().changes.len(), plan.changes.len());
    let mut h = t.host(ExecMode::Apply);
    let again = f(&mut h).unwrap();
    assert!(again.iter().all(|c| !c), "second apply changed: {again:?}");
    assert!(h.finish().unwrap().changes.is_empty());
    let mut h = t.host(ExecMode::Check);
    f(&mut h).unwrap();
    assert!(h.finish().unwrap().drift().is_empty(), "drift after apply");
}

const KEY: &str =
    "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmQINBGJ0\n=abcd\n-----END PGP PUBLIC KEY BLOCK-----\n";

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// Package versions in `/state/pkg-<name>`, holds in `/state/hold-<name>` (`yes`/`no`).
fn debian(t: &TestHost) {
    t.install_sh();
    std::fs::create_dir_all(t.p("/state")).unwrap();
    t.file(
        "/etc/os-release",
        "ID=ubuntu\nID_LIKE=debian\nVERSION_ID=\"24.04\"\n",
    );
    t.stub(
        "dpkg-query",
        r#"for last; do :; done
if [ -e "/state/pkg-$last" ]; then read v < "/state/pkg-$last"; printf 'install ok installed\t%s' "$v"; else echo "no packages found matching $last" >&2; exit 1; fi"#,
    );
    t.stub(
        "apt-get",
        r#"inst=0; for a; do
  if [ $inst = 1 ]; then case "$a" in
    -*) ;;
    *=*) echo "${a#*=}" > "/state/pkg-${a%%=*}" ;;
    *) echo 1.0 > "/state/pkg-$a" ;;
  esac; fi
  [ "$a" = install ] && inst=1
done; :"#,
    );
    t.stub(
        "apt-mark",
        r#"case "$1" in
  showhold) for f in /state/hold-*; do [ -e "$f" ] || continue; read v < "$f"; [ "$v" = yes ] && echo "${f#/state/hold-}"; done; : ;;
  hold) shift; for n; do echo yes > "/state/hold-$n"; done ;;
  unhold) shift; for n; do echo no > "/state/hold-$n"; done ;;
esac"#,
    );
}

/// As [`debian`], with dnf/rpm: versions are `VERSION-RELEASE`, locks in `/state/lock-<name>`.
fn rhel(t: &TestHost) {
    t.install_sh();
    std::fs::create_dir_all(t.p("/state")).unwrap();
    t.file(
        "/etc/os-release",
        "ID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\nVERSION_ID=\"9.4\"\n",
    );
    t.stub(
        "rpm",
        r#"for last; do :; done
if [ -e "/state/pkg-$last" ]; then read v < "/state/pkg-$last"; printf '%s' "$v"; else echo "package $last is not installed"; exit 1; fi"#,
    );
    t.stub(
        "dnf",
        r#"case "$1 $2" in
  "versionlock list") for f in /state/lock-*; do [ -e "$f" ] || continue; read v < "$f"; [ "$v" = yes ] && echo "${f#/state/lock-}-0:1.0-1.el9.*"; done; : ;;
  "versionlock add") shift 2; for n; do echo yes > "/state/lock-$n"; done ;;
  "versionlock delete") shift 2; for n; do echo no > "/state/lock-$n"; done ;;
  "-y install") shift 2; for a; do case "$a" in
      *-[0-9]*.*) n="${a%%-[0-9]*}"; echo "${a#"$n"-}-1.el9" > "/state/pkg-$n" ;;
      *) echo 1.0-1.el9 > "/state/pkg-$a" ;;
    esac; done ;;
  *) : ;;
esac"#,
    );
}

/// The recorded calls that are not queries.
fn mutations(t: &TestHost) -> Vec<String> {
    t.calls()
        .into_iter()
        .filter(|c| {
            !c.starts_with("dpkg-query")
                && !c.starts_with("rpm ")
                && c != "apt-mark showhold"
                && c != "dnf versionlock list"
        })
        .collect()
}

fn cuda_repo() -> RepoOptions {
    RepoOptions {
        url: Some(
            "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/".into(),
        ),
        suites: s(&["/"]),
        key: Some(KEY.into()),
        ..RepoOptions::default()
    }
}

#[test]
fn specs_split_name_and_version() {
    let sp = |m, x: &str| parse_spec(m, x);
    let v = |n: &str, v: Option<&str>| PackageSpec {
        name: n.into(),
        version: v.map(String::from),
    };
    assert_eq!(
        sp(PkgManager::Apt, "cuda-drivers=550.90.07-1"),
        v("cuda-drivers", Some("550.90.07-1"))
    );
    assert_eq!(sp(PkgManager::Apt, "jq"), v("jq", None));
    assert_eq!(
        sp(PkgManager::Dnf, "cuda-drivers-550.90.07"),
        v("cuda-drivers", Some("550.90.07"))
    );
    assert_eq!(
        sp(PkgManager::Dnf, "cuda-drivers-550.90.07-1.el9"),
        v("cuda-drivers", Some("550.90.07-1.el9"))
    );
    assert_eq!(
        sp(PkgManager::Dnf, "java-17-openjdk"),
        v("java-17-openjdk", None)
    );
    assert_eq!(
        sp(PkgManager::Yum, "java-1.8.0-openjdk"),
        v("java-1.8.0-openjdk", None)
    );
    assert_eq!(
        sp(PkgManager::Dnf, "java-1.8.0-openjdk-1.8.0.412.b08-1.el9"),
        v("java-1.8.0-openjdk", Some("1.8.0.412.b08-1.el9"))
    );
}

#[test]
fn debian_repo_pinned_install_and_hold_all_modes() {
    let t = TestHost::new();
    debian(&t);
    t.file("/state/pkg-cuda-drivers", "545.23.08-1\n");
    // A plan: the index refresh is planned because the repository changes first.
    let mut h = t.host(ExecMode::Plan);
    assert!(pkgrepo::repo(&mut h, "cuda", &cuda_repo()).unwrap());
    assert!(pkg::install(&mut h, &s(&["cuda-drivers=550.90.07-1"]), false).unwrap());
    assert!(pkg::installed(&h, "cuda-drivers").unwrap());
    let rep = h.finish().unwrap();
    let summaries: Vec<&str> = rep.change_summaries();
    assert_eq!(
        summaries,
        vec![
            "create /etc/apt/keyrings/cuda.asc (mode 0644)",
            "create /etc/apt/sources.list.d/cuda.sources (mode 0644)",
            "install packages cuda-drivers=550.90.07-1 (apt, after index update)",
        ]
    );
    assert!(mutations(&t).is_empty(), "a plan ran {:?}", mutations(&t));

    all_modes(&t, |h| {
        Ok(vec![
            pkgrepo::repo(h, "cuda", &cuda_repo())?,
            pkg::install(h, &s(&["cuda-drivers=550.90.07-1", "jq"]), false)?,
            pkgrepo::hold(h, &s(&["cuda-drivers"]))?,
        ])
    });
    assert_eq!(
        t.read("/etc/apt/sources.list.d/cuda.sources"),
        "# Managed by skyhook (pkg::repo \"cuda\").\nTypes: deb\nURIs: https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/\nSuites: /\nSigned-By: /etc/apt/keyrings/cuda.asc\n"
    );
    assert_eq!(t.read("/etc/apt/keyrings/cuda.asc"), KEY);
    assert_eq!(
        mutations(&t),
        vec![
            "apt-get -o DPkg::Lock::Timeout=300 update",
            "apt-get -y -o DPkg::Lock::Timeout=300 install --allow-downgrades cuda-drivers=550.90.07-1 jq",
            "apt-mark hold cuda-drivers",
        ]
    );
    let h = t.host(ExecMode::Apply);
    assert_eq!(
        pkg::version(&h, "cuda-drivers").unwrap().as_deref(),
        Some("550.90.07-1")
    );
    assert!(pkg::installed(&h, "cuda-drivers=550.90.07-1").unwrap());
    assert!(!pkg::installed(&h, "cuda-drivers=545.23.08-1").unwrap());
    drop(h);

    // Another pinned version is a change; the installed one is not; no stale index now.
    t.clear_calls();
    let mut h = t.host(ExecMode::Check);
    assert!(pkg::install(&mut h, &s(&["cuda-drivers=550.54.15-1"]), false).unwrap());
    assert!(!pkg::install(&mut h, &s(&["cuda-drivers=550.90.07-1"]), false).unwrap());
    assert_eq!(
        h.finish().unwrap().drift()[0].summary,
        "install packages cuda-drivers=550.54.15-1 (apt)"
    );

    // Release and remove: both changes, then unchanged.
    t.clear_calls();
    all_modes(&t, |h| {
        Ok(vec![
            pkgrepo::unhold(h, &s(&["cuda-drivers"]))?,
            pkgrepo::remove_repo(h, "cuda")?,
        ])
    });
    assert!(!t.p("/etc/apt/sources.list.d/cuda.sources").exists());
    assert!(!t.p("/etc/apt/keyrings/cuda.asc").exists());
    assert_eq!(mutations(&t), vec!["apt-mark unhold cuda-drivers"]);
}

#[test]
fn debian_repo_with_components_arch_and_disabled() {
    let t = TestHost::new();
    debian(&t);
    let o = RepoOptions {
        url: Some("https://repo.example.com/apt".into()),
        suites: s(&["noble", "noble-updates"]),
        components: s(&["main", "contrib"]),
        arch: s(&["amd64"]),
        enabled: false,
        ..cuda_repo()
    };
    let mut h = t.host(ExecMode::Apply);
    assert!(pkgrepo::repo(&mut h, "example", &o).unwrap());
    assert!(!pkgrepo::repo(&mut h, "example", &o).unwrap());
    h.finish().unwrap();
    assert_eq!(
        t.read("/etc/apt/sources.list.d/example.sources"),
        "# Managed by skyhook (pkg::repo \"example\").\nTypes: deb\nURIs: https://repo.example.com/apt\nSuites: noble noble-updates\nComponents: main contrib\nArchitectures: amd64\nEnabled: no\nSigned-By: /etc/apt/keyrings/example.asc\n"
    );
}

#[test]
fn rhel_repo_pinned_install_and_versionlock_all_modes() {
    let t = TestHost::new();
    rhel(&t);
    t.file("/state/pkg-cuda-drivers", "545.23.08-1.el9\n");
    let o = RepoOptions {
        url: Some("https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64".into()),
        key: Some(KEY.into()),
        ..RepoOptions::default()
    };
    all_modes(&t, |h| {
        Ok(vec![
            pkgrepo::repo(h, "cuda-rhel9", &o)?,
            pkg::install(h, &s(&["cuda-drivers-550.90.07"]), false)?,
            pkgrepo::hold(h, &s(&["cuda-drivers"]))?,
        ])
    });
    assert_eq!(
        t.read("/etc/yum.repos.d/cuda-rhel9.repo"),
        "# Managed by skyhook (pkg::repo \"cuda-rhel9\").\n[cuda-rhel9]\nname=cuda-rhel9\nbaseurl=https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64\nenabled=1\ngpgcheck=1\ngpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-cuda-rhel9\n"
    );
    assert_eq!(t.read("/etc/pki/rpm-gpg/RPM-GPG-KEY-cuda-rhel9"), KEY);
    assert_eq!(
        mutations(&t),
        vec![
            "dnf -y makecache",
            "dnf -y install cuda-drivers-550.90.07",
            "dnf versionlock add cuda-drivers",
        ]
    );
    // A release given too: compared with VERSION-RELEASE.
    let mut h = t.host(ExecMode::Check);
    assert!(!pkg::install(&mut h, &s(&["cuda-drivers-550.90.07-1.el9"]), false).unwrap());
    assert!(pkg::install(&mut h, &s(&["cuda-drivers-550.90.07-2.el9"]), false).unwrap());
    h.finish().unwrap();

    t.clear_calls();
    all_modes(&t, |h| {
        Ok(vec![
            pkgrepo::unhold(h, &s(&["cuda-drivers"]))?,
            pkgrepo::remove_repo(h, "cuda-rhel9")?,
        ])
    });
    assert!(!t.p("/etc/yum.repos.d/cuda-rhel9.repo").exists());
    assert!(!t.p("/etc/pki/rpm-gpg/RPM-GPG-KEY-cuda-rhel9").exists());
    assert_eq!(mutations(&t), vec!["dnf versionlock delete cuda-drivers"]);
}

#[test]
fn repo_key_from_a_url_is_fetched_and_verified() {
    use crate::host::fetch::fetch_tests::{Reply, Server, sha};
    let t = TestHost::new();
    debian(&t);
    let srv = Server::plain(|p| match p {
        "/key.gpg" => Reply::Body(b"\x99\x01binary-key".to_vec()),
        _ => Reply::Status("404 Not Found"),
    });
    let o = RepoOptions {
        key: None,
        key_url: Some(srv.url("/key.gpg")),
        key_sha256: Some(sha(b"\x99\x01binary-key")),
        ..cuda_repo()
    };
    // An earlier armored key of the same repository is replaced by the binary one.
    t.file("/etc/apt/keyrings/cuda.asc", KEY);
    all_modes(&t, |h| Ok(vec![pkgrepo::repo(h, "cuda", &o)?]));
    assert_eq!(
        std::fs::read(t.p("/etc/apt/keyrings/cuda.gpg")).unwrap(),
        b"\x99\x01binary-key"
    );
    assert!(!t.p("/etc/apt/keyrings/cuda.asc").exists());
    assert!(
        t.read("/etc/apt/sources.list.d/cuda.sources")
            .ends_with("Signed-By: /etc/apt/keyrings/cuda.gpg\n")
    );
    assert_eq!(srv.requests(), vec!["/key.gpg"]);
}

fn err(h: &mut Host, name: &str, o: &RepoOptions) -> String {
    pkgrepo::repo(h, name, o).unwrap_err().to_string()
}

#[test]
fn bad_repositories_are_refused_in_every_mode() {
    let t = TestHost::new();
    debian(&t);
    let before = snapshot(&t);
    let mut h = t.host(ExecMode::Plan);
    assert_eq!(
        err(&mut h, "../x", &cuda_repo()),
        "invalid pkg::repo argument: repository name \"../x\" must be letters, digits, '.', '_' or '-'"
    );
    let o = RepoOptions {
        url: None,
        ..cuda_repo()
    };
    assert_eq!(
        err(&mut h, "x", &o),
        "invalid pkg::repo argument: url is required"
    );
    let o = RepoOptions {
        url: Some("https://deploy:s3cret@repo.example/cuda/".into()),
        ..cuda_repo()
    };
    assert_eq!(
        err(&mut h, "x", &o),
        "invalid pkg::repo argument: url \"https://***@repo.example/cuda/\" carries credentials: they would be written into a world-readable repository file and printed in plans; put them in /etc/apt/auth.conf.d/ (apt) or the .repo file's username=/password= (dnf/yum) instead"
    );
    let o = RepoOptions {
        key: None,
        ..cuda_repo()
    };
    assert_eq!(
        err(&mut h, "x", &o),
        "invalid pkg::repo argument: a signing key is required: key (ASCII-armored text) or key_url with key_sha256"
    );
    let o = RepoOptions {
        key: Some("binary".into()),
        ..cuda_repo()
    };
    assert!(
        err(&mut h, "x", &o)
            .starts_with("invalid pkg::repo argument: key must be an ASCII-armored public key")
    );
    let o = RepoOptions {
        key: None,
        key_url: Some("https://x/k.asc".into()),
        ..cuda_repo()
    };
    assert_eq!(
        err(&mut h, "x", &o),
        "invalid pkg::repo argument: key_url needs key_sha256 (the key's SHA-256 digest, 64 hex digits)"
    );
    let o = RepoOptions {
        url: Some("https://x/\nTypes: deb-src".into()),
        ..cuda_repo()
    };
    assert_eq!(
        err(&mut h, "x", &o),
        "invalid pkg::repo argument: url \"https://x/\\nTypes: deb-src\" must be one word on one line"
    );
    let o = RepoOptions {
        suites: Vec::new(),
        ..cuda_repo()
    };
    assert!(
        err(&mut h, "x", &o)
            .starts_with("invalid pkg::repo argument: suites is required for apt repositories")
    );
    assert_eq!(
        pkgrepo::hold(&mut h, &[])
            .map_err(|e| e.to_string())
            .unwrap_err(),
        "invalid pkg::hold argument: no package names given"
    );
    h.finish().unwrap();

    t.file("/etc/os-release", "ID=rocky\nVERSION_ID=9\n");
    let mut h = t.host(ExecMode::Plan);
    assert_eq!(
        err(&mut h, "x", &cuda_repo()),
        "invalid pkg::repo argument: suites, components and arch apply to apt repositories only (dnf host)"
    );
    t.file("/etc/os-release", "ID=sles\n");
    let mut h = t.host(ExecMode::Plan);
    assert_eq!(
        err(&mut h, "x", &cuda_repo()),
        "invalid package manager: pkg::repo, pkg::remove_repo, pkg::hold and pkg::unhold support apt, dnf and yum hosts, not zypper"
    );
    t.file(
        "/etc/os-release",
        "ID=ubuntu\nID_LIKE=debian\nVERSION_ID=\"24.04\"\n",
    );
    assert_eq!(snapshot(&t), before);
}

/// The JSON form of a report with the new change kinds (`fetch`, `package_hold`,
/// `package_unhold`) holds to `docs/plan.schema.json`'s report definition.
#[test]
fn new_change_kinds_hold_to_the_plan_schema() {
    use crate::host::fetch::{FetchOptions, fetch};
    let t = TestHost::new();
    debian(&t);
    t.file("/state/hold-old", "yes\n");
    let mut h = t.host(ExecMode::Plan);
    let o = FetchOptions {
        sha256: Some("ab".repeat(32)),
        ..FetchOptions::default()
    };
    assert!(fetch(&mut h, "https://example.com/x", "/opt/x", &o).unwrap());
    assert!(pkgrepo::hold(&mut h, &s(&["jq"])).unwrap());
    assert!(pkgrepo::unhold(&mut h, &s(&["old"])).unwrap());
    let rep = h.finish().unwrap();
    let json = rep.to_json(&crate::host::secrets::Redactor::default());
    let kinds: Vec<&str> = json["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, vec!["fetch", "package_hold", "package_unhold"]);
    assert_eq!(json["changes"][0]["target"], "/opt/x");
    // Items name a fetch's path as they do a write's.
    assert_eq!(json["items"][0]["path"], "/opt/x");
    assert_eq!(json["items"][1]["path"], serde_json::Value::Null);
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/plan.schema.json"),
    )
    .unwrap();
    let mut schema: serde_json::Value = serde_json::from_str(&text).unwrap();
    schema["oneOf"] = serde_json::json!([{ "$ref": "#/$defs/report" }]);
    let v = jsonschema::draft202012::options().build(&schema).unwrap();
    let errors: Vec<String> = v.iter_errors(&json).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:#?}\n{json:#}");
}

/// The exact effects `pkg::install` and `pkg::hold` submit, recorded in a plan: only the
/// packages not installed in the version asked for, one hold effect; the planned install
/// and hold answer the later calls through the read view (nothing more is submitted).
#[test]
fn install_and_hold_submit_exact_effects_and_read_the_planned_state() {
    let t = TestHost::new();
    debian(&t);
    t.file("/state/pkg-curl", "8.5\n");
    let mut h = t.host(ExecMode::Plan);
    h.record_effects();
    assert!(
        pkg::install(
            &mut h,
            &s(&["curl", "jq", "cuda-drivers=550.90.07-1"]),
            false
        )
        .unwrap()
    );
    assert!(pkg::installed(&h, "jq").unwrap());
    assert!(!pkg::install(&mut h, &s(&["jq"]), false).unwrap());
    assert!(pkgrepo::hold(&mut h, &s(&["jq", "jq"])).unwrap());
    assert!(!pkgrepo::hold(&mut h, &s(&["jq"])).unwrap());
    assert_eq!(
        format!("{:?}", h.recorded_effects()),
        "[PackageInstall { manager: Apt, names: [\"jq\", \"cuda-drivers=550.90.07-1\"], update: false }, \
         PackageHold { manager: Apt, names: [\"jq\"], hold: true }]"
    );
    assert!(mutations(&t).is_empty(), "a plan ran {:?}", mutations(&t));
}
