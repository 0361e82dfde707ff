//! Tests of the embedded standard library (`stdlib/*.rhai`): every module compiles, and the
//! pure helpers compute what their docs say.

use std::sync::Arc;

use super::*;
use crate::step::{ScriptOutcome, ScriptRunOptions, run_script, run_script_with};

/// Compile script text `src` as `name`, its modules in an empty temp dir.
fn compile_alone(
    engine: &ScriptEngine,
    name: &str,
    src: &str,
) -> Result<CompiledScript, ScriptError> {
    let dir = tempfile::tempdir().unwrap();
    compile_source(engine, name, src, Arc::new(ModuleStore::new(dir.path())))
}

/// Run script text `main` with no host API; returns (outcome, stdout, stderr).
fn run_pure(main: &str, ctx: &StepContext) -> (ScriptOutcome, String, String) {
    let engine = ScriptEngine::default();
    let script =
        compile_alone(&engine, "main.rhai", main).unwrap_or_else(|e| panic!("compile: {e}"));
    let out = Arc::new(CaptureOutput::new());
    let outcome = run_script(
        &engine,
        &script,
        ctx,
        out.clone(),
        crate::process::Cancel::new(),
    );
    (
        outcome,
        String::from_utf8(out.stdout_bytes()).unwrap(),
        String::from_utf8(out.stderr_bytes()).unwrap(),
    )
}

fn ctx(resource_id: &str) -> StepContext {
    StepContext {
        mode: "config".into(),
        name: "config.rhai".into(),
        package_name: "from-config-json".into(),
        package_version: "1.0.0".into(),
        resource_id: resource_id.into(),
        ..Default::default()
    }
}

#[test]
fn every_module_compiles() {
    let engine = ScriptEngine::default();
    for (name, _) in STDLIB {
        let src = format!("import \"skyhook/{name}\" as m;");
        compile_alone(&engine, "x.rhai", &src).unwrap_or_else(|e| panic!("skyhook/{name}: {e}"));
    }
}

#[test]
fn package_name_is_the_middle_of_the_resource_id() {
    let cases = [
        ("skyhook-node1_tuning_1.1.4", "tuning"),
        ("a_my_pkg_2.0.0", "my_pkg"),
        ("", "from-config-json"),
        ("no-underscore", "from-config-json"),
        ("a__1.0.0", "from-config-json"),
    ];
    for module in ["tuning", "kdump"] {
        for (id, want) in cases {
            let (o, out, err) = run_pure(
                &format!("import \"skyhook/{module}\" as m; print(m::package_name());"),
                &ctx(id),
            );
            assert!(!o.failed(), "{module} {id}: {err}");
            assert_eq!(out, format!("{want}\n"), "{module} {id:?}");
        }
    }
}

#[test]
fn tuning_paths() {
    let (o, out, err) = run_pure(
        r#"import "skyhook/tuning" as t;
print(t::sysctl_path()); print(t::limits_path()); print(t::grub_path());
print(t::pam_block_id()); print(t::base_name());"#,
        &ctx("n_gpu-tuning_1.0.0"),
    );
    assert!(!o.failed(), "{err}");
    assert_eq!(
        out,
        "/etc/sysctl.d/999-gpu-tuning-tuning.conf\n\
         /etc/security/limits.d/999-gpu-tuning-tuning.conf\n\
         /etc/default/grub.d/999-gpu-tuning-tuning.cfg\n\
         gpu-tuning-tuning\n\
         999-gpu-tuning-tuning\n"
    );
}

#[test]
fn tuning_text_helpers() {
    let (o, out, err) = run_pure(
        r##"import "skyhook/tuning" as t;
print(t::words(" a\tb  c\n"));
print(t::squash("32768\t 60999 "));
print(t::with_newline("x\n\n"));
print(t::with_newline(""));
print(t::parse_assignments("f", "# c\n\n a = 1 \nb=x=y\n"));
print(t::limit_value("8M")); print(t::limit_value("1G")); print(t::limit_value("unlimited"));
print(t::limit_value("1048576")); print(t::limit_value("infinity"));
print(t::drop_in_limits("[Service]\nLimitNOFILE=1\nLimitNOFILE = 2\nTasksMax=3\n"));"##,
        &ctx(""),
    );
    assert!(!o.failed(), "{err}");
    assert_eq!(
        out,
        "[\"a\", \"b\", \"c\"]\n32768 60999\nx\n\n\n\
         [[3, \"a\", \"1\"], [4, \"b\", \"x=y\"]]\n\
         8388608\n1073741824\ninfinity\n1048576\ninfinity\n\
         #{\"LimitNOFILE\": \"2\"}\n"
    );
}

#[test]
fn malformed_assignment_names_the_line() {
    let (o, _, err) = run_pure(
        r#"import "skyhook/tuning" as t; t::parse_assignments("ulimit.conf", "nofile=1\n\njunk\n");"#,
        &ctx(""),
    );
    assert!(o.failed());
    assert!(
        err.contains("ulimit.conf line 3: expected name=value, got \"junk\""),
        "{err}"
    );
}

#[test]
fn shellscript_stage_from_mode_or_argument() {
    let mut c = ctx("");
    c.mode = "post-interrupt-check".into();
    let main = r#"import "skyhook/shellscript" as s; print(s::stage());"#;
    let (o, out, err) = run_pure(main, &c);
    assert!(!o.failed(), "{err}");
    assert_eq!(out, "post_interrupt_check\n");
    c.args = vec!["apply_check".into()];
    let (_, out, _) = run_pure(main, &c);
    assert_eq!(out, "apply_check\n");
}

#[test]
fn stage_value_is_the_return_code() {
    // A module function's integer value, as the script's last expression, is the step's
    // return code: what `s::apply()` relies on.
    let (o, _, _) = run_pure(
        "import \"skyhook/tuning\" as t; let x = t::words(\"a b c\"); x.len()",
        &ctx(""),
    );
    assert_eq!(o.code, 3);
}

// ------------------------------------------------------------------------------------------
// The modules over a throwaway host root, in-process through the script layer and HostApi.
//
// Each root gets an os-release from tests/fixtures/os-release/, a real /bin/sh and /bin/bash
// (with their libraries), and recording stubs for systemctl, apt-get, dnf, yum, tuned-adm,
// update-grub, grub2-mkconfig, grubby, dpkg-query, rpm and sysctl: each logs its command
// line to /stub.log. Package and unit state lives in /state (tuned's in
// /etc/tuned/active_profile, as tuned keeps it) so that queries answer what earlier commands
// did.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::host::effects::report::ExecMode;
use crate::host::root::HostRoot;
use crate::host::testutil::{TestHost, tree};
use crate::host::{Host, HostOptions, Report};
use crate::script::host_api::HostApi;

/// The distributions every module is tested on: (os-release fixture, family).
const DISTROS: &[(&str, &str)] = &[
    ("ubuntu-22.04", "debian"),
    ("ubuntu-24.04", "debian"),
    ("debian-12", "debian"),
    ("rhel-9", "rhel"),
    ("amzn-2023", "rhel"),
    ("fedora-40", "fedora"),
];

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `/state` helpers shared by the stubs: `on FILE` / `off FILE` / `is FILE`.
const STATE_FNS: &str = r#"on() { echo yes > "/state/$1"; }
off() { echo no > "/state/$1"; }
is() { [ -e "/state/$1" ] && read s < "/state/$1" && [ "$s" = yes ]; }
show() { [ -e "/state/$1" ] && while IFS= read -r l; do echo "$l"; done < "/state/$1"; return 0; }"#;

/// A package manager stub: every argument after the verb is a package name.
fn pkg_manager_body() -> String {
    format!(
        r#"{STATE_FNS}
verb=""
for a in "$@"; do
  case "$a" in
    -*) ;;
    install|remove|purge) verb=$a ;;
    *) case "$verb" in
         install) on "pkg.$a" ;;
         remove|purge) off "pkg.$a" ;;
       esac ;;
  esac
done"#
    )
}

struct Node {
    t: TestHost,
    package: String,
}

struct Ran {
    outcome: ScriptOutcome,
    report: Report,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn ok(self) -> Self {
        assert!(
            self.outcome.error.is_none(),
            "step failed: {:?}\nstdout:\n{}\nstderr:\n{}",
            self.outcome.error,
            self.stdout,
            self.stderr
        );
        self
    }
    fn error(&self) -> String {
        self.outcome
            .error
            .as_ref()
            .expect("the step should have failed")
            .to_string()
    }
    /// Assert the step failed with an error containing `want` (`case` names the case).
    fn assert_error_has(&self, want: &str, case: &str) {
        let error = self.error();
        assert!(error.contains(want), "{case}: {error}");
    }
}

impl Node {
    fn new(os: &str, family: &'static str, package: &str) -> Node {
        let t = TestHost::new();
        let rel =
            std::fs::read_to_string(manifest().join("tests/fixtures/os-release").join(os)).unwrap();
        t.file("/etc/os-release", &rel);
        t.install_sh();
        install_binary(&t, Path::new("/bin/bash"));
        std::fs::create_dir_all(t.p("/state")).unwrap();
        t.stub(
            "systemctl",
            &format!(
                r#"{STATE_FNS}
case "$1" in
  is-active) is "$2.active" ;;
  is-enabled) is "$2.enabled" ;;
  start) on "$2.active" ;;
  stop) off "$2.active" ;;
  enable) on "$2.enabled" ;;
  disable) off "$2.enabled" ;;
  show) show "$2.show" ;;
  *) : ;;
esac"#
            ),
        );
        for pm in ["apt-get", "dnf", "yum"] {
            t.stub(pm, &pkg_manager_body());
        }
        t.stub(
            "dpkg-query",
            &format!("{STATE_FNS}\nis \"pkg.$3\" || exit 1\nprintf 'install ok installed\\t1.0-1'"),
        );
        t.stub(
            "rpm",
            &format!("{STATE_FNS}\nis \"pkg.$4\" || exit 1\nprintf '1.0-1.el9'"),
        );
        // tuned-adm keeps the active profile where tuned does; the system profiles the
        // tests name are there as the distributions' tuned packages ship them.
        t.stub(
            "tuned-adm",
            r#"case "$1" in
  profile) shift; echo "$*" > /etc/tuned/active_profile ;;
  off) : > /etc/tuned/active_profile ;;
esac"#,
        );
        for p in ["throughput-performance", "latency-performance"] {
            t.file(&format!("/usr/lib/tuned/{p}/tuned.conf"), "[main]\n");
        }
        std::fs::create_dir_all(t.p("/etc/tuned")).unwrap();
        for s in ["update-grub", "grub2-mkconfig", "grubby", "sysctl"] {
            t.stub(s, "");
        }
        std::fs::create_dir_all(t.p("/skyhook/pkg/configmaps")).unwrap();
        let _ = family;
        Node {
            t,
            package: package.to_string(),
        }
    }

    /// A configMap (agent side: `/skyhook/pkg/configmaps/<name>` inside the root).
    fn configmap(&self, name: &str, content: &str) {
        self.t
            .file(&format!("/skyhook/pkg/configmaps/{name}"), content);
    }

    /// systemd's view of containerd's limits (`systemctl show`), memlock `memlock`, the
    /// others as the tuning example sets them.
    fn show_containerd_limits(&self, memlock: &str) {
        self.t.file(
            "/state/containerd.service.show",
            &format!("LimitMEMLOCK={memlock}\nLimitNOFILE=1048576\nLimitSTACK=67108864\n"),
        );
    }

    /// The running kernel's command line: the stock one, then `args`.
    fn boot_with(&self, args: &str) {
        self.t.file(
            "/proc/cmdline",
            &format!("BOOT_IMAGE=/vmlinuz ro quiet{args}\n"),
        );
    }

    /// A dry run of `module`'s `agent_mode` step: it succeeds and changes nothing in the
    /// root (`case` names the case).
    /// Plan `module`'s `agent_mode` step: it succeeds or its plan ends at a call that is
    /// unknown in the plan (not a failure), and the root is unchanged.
    fn dry_run(&self, module: &str, agent_mode: &str, case: &str) -> Ran {
        let before = self.snapshot();
        let plan = self.step(module, agent_mode, true);
        let plan = match &plan.outcome.error {
            Some(e) if e.kind == crate::script::errors::ScriptErrorKind::PlanUnknown => plan,
            _ => plan.ok(),
        };
        assert_eq!(
            self.snapshot(),
            before,
            "{case}: a dry run changed the root"
        );
        plan
    }

    /// Run `module`'s `agent_mode` step again, the calls log cleared: it succeeds, changes
    /// nothing, and runs no command that `calls` keeps (`case` names the case).
    fn assert_idle(
        &self,
        module: &str,
        agent_mode: &str,
        calls: fn(Vec<String>) -> Vec<String>,
        case: &str,
    ) {
        self.t.clear_calls();
        let again = self.step(module, agent_mode, false).ok();
        assert!(
            again.report.changes.is_empty(),
            "{case}: {:?}",
            again.report.changes
        );
        assert_eq!(calls(self.calls()), Vec::<String>::new(), "{case}");
    }

    /// The `tuning` config step fails with an error containing `want`, before any change.
    fn assert_tuning_config_refused(&self, want: &str) {
        let fresh = self.snapshot();
        let ran = self.step("tuning", "config", false);
        ran.assert_error_has(want, "tuning config");
        assert!(ran.report.changes.is_empty());
        assert_eq!(self.snapshot(), fresh);
    }

    /// The recorded stub command lines (without the stub's trailing space for no arguments).
    fn calls(&self) -> Vec<String> {
        self.t
            .calls()
            .into_iter()
            .map(|c| c.trim_end().to_string())
            .collect()
    }

    /// The tree without the stub log and the stubs' state.
    fn snapshot(&self) -> std::collections::BTreeMap<PathBuf, String> {
        let mut m = tree(&self.t.root);
        m.retain(|p, _| !p.starts_with("stub.log") && !p.starts_with("state"));
        m
    }

    /// Run the example step `examples/<module>/skyhook_dir/<stage>.rhai` in `mode` (the
    /// agent's mode; `dry_run` selects plan mode for run modes).
    fn step(&self, module: &str, agent_mode: &str, dry_run: bool) -> Ran {
        let dir = manifest().join("examples").join(module).join("skyhook_dir");
        self.step_in(&dir, module, agent_mode, dry_run)
    }

    /// Run `<dir>/<stage>.rhai` as [`Node::step`] runs an example's step.
    fn step_in(&self, dir: &Path, module: &str, agent_mode: &str, dry_run: bool) -> Ran {
        let stage = agent_mode.replace('-', "_");
        let exec = if agent_mode.ends_with("-check") {
            ExecMode::Check
        } else if dry_run {
            ExecMode::Plan
        } else {
            ExecMode::Apply
        };
        let env = vec![
            ("SKYHOOK_DIR".to_string(), "/skyhook/pkg".to_string()),
            (
                "STEP_ROOT".to_string(),
                "/skyhook/pkg/skyhook_dir".to_string(),
            ),
        ];
        let opts = HostOptions {
            env: env.clone(),
            configmaps_dir: Some(self.t.p("/skyhook/pkg/configmaps")),
            resource_id: format!("node-1_{}_1.0.0", self.package),
            ..HostOptions::default()
        };
        let host = Host::new(HostRoot::open(&self.t.root).unwrap(), exec, opts);
        let api = HostApi::new(host);
        let engine = ScriptEngine::default();
        let store = ModuleStore::new(dir).with_configmaps(self.t.p("/skyhook/pkg/configmaps"));
        let script = compile_step_in(&engine, &dir.join(format!("{stage}.rhai")), Arc::new(store))
            .unwrap_or_else(|e| panic!("{e}"));
        let out = Arc::new(CaptureOutput::new());
        let mut ro = ScriptRunOptions::new(
            api.redacting_output(out.clone()),
            crate::process::Cancel::new(),
        );
        ro.host = Arc::new(api.clone());
        let ctx = StepContext {
            mode: agent_mode.into(),
            name: stage.clone(),
            package_name: module.into(),
            package_version: "1.0.0".into(),
            skyhook_dir: "/skyhook/pkg".into(),
            step_root: "/skyhook/pkg/skyhook_dir".into(),
            resource_id: format!("node-1_{}_1.0.0", self.package),
            dry_run,
            env: env.into_iter().collect(),
            ..Default::default()
        };
        let outcome = run_script_with(&engine, &script, &ctx, &ro);
        let report = api.finish().unwrap();
        Ran {
            outcome,
            report,
            stdout: String::from_utf8(out.stdout_bytes()).unwrap(),
            stderr: String::from_utf8(out.stderr_bytes()).unwrap(),
        }
    }
}

/// Copy `bin` and the libraries `ldd` names into the root.
fn install_binary(t: &TestHost, bin: &Path) {
    let mut files = vec![bin.to_path_buf()];
    let out = std::process::Command::new("ldd").arg(bin).output().unwrap();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        for word in line.split_whitespace() {
            if word.starts_with('/') {
                files.push(PathBuf::from(word));
            }
        }
    }
    for f in files {
        let dst = t.root.join(f.strip_prefix("/").unwrap());
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(&f, &dst).unwrap();
    }
    std::fs::set_permissions(
        t.root.join(bin.strip_prefix("/").unwrap()),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
}

// ---------------------------------------------------------------- tuning

const PAM_SESSION: &str = "# /etc/pam.d/common-session\n\
session [default=1]\tpam_permit.so\n\
session requisite\tpam_deny.so\n\
session required\tpam_unix.so\n";
const PAM_NONINTERACTIVE: &str = "session required\tpam_unix.so\n\
session  required   pam_limits.so\n";

fn tuning_node(os: &str, family: &'static str) -> Node {
    let n = Node::new(os, family, "tuning");
    for (k, v) in [
        ("net/core/rmem_max", "212992"),
        ("net/core/wmem_max", "212992"),
        ("fs/inotify/max_user_instances", "128"),
        ("vm/max_map_count", "65530"),
    ] {
        n.t.file(&format!("/proc/sys/{k}"), &format!("{v}\n"));
    }
    if family == "debian" {
        n.t.file("/etc/pam.d/common-session", PAM_SESSION);
        n.t.file(
            "/etc/pam.d/common-session-noninteractive",
            PAM_NONINTERACTIVE,
        );
    }
    n.boot_with("");
    let cm = manifest().join("examples/tuning/configmaps");
    for name in [
        "sysctl.conf",
        "ulimit.conf",
        "service_containerd.conf",
        "grub.conf",
    ] {
        n.configmap(name, &std::fs::read_to_string(cm.join(name)).unwrap());
    }
    n
}

const TUNING_SYSCTL: &str = "fs.inotify.max_user_instances = 8192\n\
net.core.rmem_max = 16777216\n\
net.core.wmem_max = 16777216\n\
vm.max_map_count = 262144\n";
const TUNING_LIMITS: &str =
    "* hard memlock unlimited\n* hard nofile 1048576\n* hard stack 67108864\n";
const TUNING_DROP_IN: &str =
    "[Service]\nLimitNOFILE=1048576\nLimitMEMLOCK=infinity\nLimitSTACK=67108864\n";
const TUNING_GRUB: &str =
    "GRUB_CMDLINE_LINUX_DEFAULT=\"${GRUB_CMDLINE_LINUX_DEFAULT} hugepagesz=1G hugepages=2\"\n";

#[test]
fn tuning_on_every_distribution() {
    for (os, family) in DISTROS {
        let n = tuning_node(os, family);

        // Dry run: nothing changes, nothing runs, every change is listed.
        let plan = n.dry_run("tuning", "config", os);
        assert!(n.calls().is_empty(), "{os}: {:?}", n.calls());
        let targets = plan.report.change_targets();
        assert!(
            targets.contains(&"/etc/sysctl.d/999-tuning-tuning.conf")
                && targets.contains(&"/etc/default/grub.d/999-tuning-tuning.cfg"),
            "{os}: {targets:?}"
        );

        // config: exact files and exact commands, one reload, one grub regeneration.
        let ran = n.step("tuning", "config", false).ok();
        assert!(
            ran.stdout.contains("tuning tuning: sysctl changed"),
            "{}",
            ran.stdout
        );
        assert_eq!(
            n.t.read("/etc/sysctl.d/999-tuning-tuning.conf"),
            TUNING_SYSCTL
        );
        assert_eq!(n.t.read("/proc/sys/net/core/rmem_max"), "16777216\n");
        assert_eq!(n.t.read("/proc/sys/vm/max_map_count"), "262144\n");
        assert_eq!(
            n.t.read("/etc/security/limits.d/999-tuning-tuning.conf"),
            TUNING_LIMITS
        );
        assert_eq!(
            n.t.read("/etc/systemd/system/containerd.service.d/999-tuning-tuning.conf"),
            TUNING_DROP_IN
        );
        assert_eq!(
            n.t.read("/etc/default/grub.d/999-tuning-tuning.cfg"),
            TUNING_GRUB
        );
        let grub_cmd = if *family == "debian" {
            "update-grub".to_string()
        } else {
            "grubby --update-kernel=ALL --args=hugepagesz=1G hugepages=2".to_string()
        };
        assert_eq!(
            n.calls(),
            vec!["systemctl daemon-reload".to_string(), grub_cmd],
            "{os}"
        );
        if *family == "debian" {
            // Added once where pam_limits is missing, left alone where it is loaded.
            assert_eq!(
                n.t.read("/etc/pam.d/common-session"),
                format!(
                    "{PAM_SESSION}# BEGIN skyhook tuning-tuning\nsession required pam_limits.so\n# END skyhook tuning-tuning\n"
                )
            );
            assert_eq!(
                n.t.read("/etc/pam.d/common-session-noninteractive"),
                PAM_NONINTERACTIVE
            );
        } else {
            assert!(!n.t.p("/etc/pam.d").exists(), "{os}");
        }

        // Second run: nothing changes, no reload, no regeneration.
        let configured = n.snapshot();
        n.assert_idle("tuning", "config", std::convert::identity, os);
        assert_eq!(n.snapshot(), configured);

        // config-check: live values, files, containerd's limits as systemd reports them.
        n.show_containerd_limits("infinity");
        let check = n.step("tuning", "config-check", false).ok();
        assert!(check.report.drift().is_empty(), "{os}");
        assert_eq!(check.stdout, "tuning config-check: ok\n");
        assert_eq!(
            n.calls(),
            vec![
                "systemctl show containerd.service --property=LimitMEMLOCK \
                 --property=LimitNOFILE --property=LimitSTACK"
            ]
        );

        // A live drift is found: a sysctl value and the running containerd limits.
        n.t.file("/proc/sys/vm/max_map_count", "65530\n");
        n.show_containerd_limits("8388608");
        let bad = n.step("tuning", "config-check", false);
        assert!(bad.outcome.failed());
        assert!(
            bad.stderr
                .contains("ERROR: sysctl vm.max_map_count is \"65530\", expected \"262144\"")
                && bad
                    .stderr
                    .contains("ERROR: containerd: LimitMEMLOCK is 8388608, expected infinity"),
            "{os}: {}",
            bad.stderr
        );
        n.t.file("/proc/sys/vm/max_map_count", "262144\n");
        n.show_containerd_limits("infinity");

        // post-interrupt-check: the running kernel must have the grub arguments.
        n.step("tuning", "post-interrupt-check", false)
            .assert_error_has(
                "kernel command line lacks hugepagesz=1G (reboot pending?)",
                os,
            );
        n.boot_with(" hugepagesz=1G hugepages=2");
        n.step("tuning", "post-interrupt-check", false).ok();

        // uninstall: exactly what config wrote, one reload, grub back.
        n.t.clear_calls();
        n.step("tuning", "uninstall", false).ok();
        for p in [
            "/etc/sysctl.d/999-tuning-tuning.conf",
            "/etc/security/limits.d/999-tuning-tuning.conf",
            "/etc/systemd/system/containerd.service.d/999-tuning-tuning.conf",
            "/etc/default/grub.d/999-tuning-tuning.cfg",
        ] {
            assert!(!n.t.p(p).exists(), "{os}: {p} left");
        }
        if *family == "debian" {
            assert_eq!(n.t.read("/etc/pam.d/common-session"), PAM_SESSION);
            assert_eq!(
                n.t.read("/etc/pam.d/common-session-noninteractive"),
                PAM_NONINTERACTIVE
            );
        }
        let grub_back = if *family == "debian" {
            "update-grub".to_string()
        } else {
            "grubby --update-kernel=ALL --remove-args=hugepagesz=1G hugepages=2".to_string()
        };
        assert_eq!(
            n.calls(),
            vec![
                "sysctl --system".to_string(),
                "systemctl daemon-reload".to_string(),
                grub_back
            ],
            "{os}"
        );
        n.assert_idle("tuning", "uninstall", std::convert::identity, os);
        n.step("tuning", "uninstall-check", false).ok();
    }
}

#[test]
fn tuning_follows_removed_configmaps() {
    let n = tuning_node("ubuntu-24.04", "debian");
    n.step("tuning", "config", false).ok();
    std::fs::remove_file(n.t.p("/skyhook/pkg/configmaps/grub.conf")).unwrap();
    std::fs::remove_file(n.t.p("/skyhook/pkg/configmaps/service_containerd.conf")).unwrap();
    n.configmap("service_crio.conf", "[Service]\nLimitNOFILE=65536\n");
    n.t.clear_calls();
    n.step("tuning", "config", false).ok();
    assert!(!n.t.p("/etc/default/grub.d/999-tuning-tuning.cfg").exists());
    assert!(!n.t.p("/etc/systemd/system/containerd.service.d").exists());
    assert_eq!(
        n.t.read("/etc/systemd/system/crio.service.d/999-tuning-tuning.conf"),
        "[Service]\nLimitNOFILE=65536\n"
    );
    assert_eq!(n.calls(), ["systemctl daemon-reload", "update-grub"]);
}

#[test]
fn tuning_drop_in_dirs_removed_when_empty_and_empty_drop_ins_are_absent() {
    let n = tuning_node("debian-12", "debian");
    n.configmap("service_crio.conf", "\n \n");
    n.t.file(
        "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf",
        "[Service]\n",
    );
    n.configmap("service_kubelet.conf", "[Service]\nLimitNOFILE=65536\n");
    n.step("tuning", "config", false).ok();
    assert!(!n.t.p("/etc/systemd/system/crio.service.d").exists());
    assert!(
        n.t.p("/etc/systemd/system/containerd.service.d/999-tuning-tuning.conf")
            .exists()
    );
    n.step("tuning", "uninstall", false).ok();
    assert!(!n.t.p("/etc/systemd/system/containerd.service.d").exists());
    // a directory holding someone else's drop-in stays
    assert_eq!(
        n.t.read("/etc/systemd/system/kubelet.service.d/10-kubeadm.conf"),
        "[Service]\n"
    );
    assert!(
        !n.t.p("/etc/systemd/system/kubelet.service.d/999-tuning-tuning.conf")
            .exists()
    );
}

#[test]
fn tuning_refuses_an_unsupported_limit() {
    let n = tuning_node("debian-12", "debian");
    n.configmap("ulimit.conf", "nofile=1024\n# comment\ncore=0\n");
    n.assert_tuning_config_refused(
        "ulimit.conf line 3: unsupported limit \"core\" (supported: memlock, nofile, fsize, stack, nproc)",
    );
}

#[test]
fn tuning_grub_lines_may_hold_several_arguments() {
    let n = tuning_node("ubuntu-24.04", "debian");
    n.configmap("grub.conf", "# huge pages\nhugepagesz=1G hugepages=2\n");
    n.step("tuning", "config", false).ok();
    assert_eq!(
        n.t.read("/etc/default/grub.d/999-tuning-tuning.cfg"),
        TUNING_GRUB
    );
    n.step("tuning", "config", false).ok();
    n.boot_with(" hugepagesz=1G hugepages=2");
    n.show_containerd_limits("infinity");
    n.step("tuning", "post-interrupt-check", false).ok();
}

#[test]
fn tuning_validates_grub_conf_before_changing_anything() {
    let n = tuning_node("rhel-9", "rhel");
    n.configmap("grub.conf", "hugepages=2\n\nquiet init=$x\n");
    n.assert_tuning_config_refused(
        "grub.conf line 3: invalid kernel argument \"init=$x\" (quotes, \\, $ and backquotes are not allowed)",
    );
    assert!(n.calls().is_empty(), "{:?}", n.calls());
}

#[test]
fn tuning_checks_every_sysctl_key_before_setting_any() {
    let n = tuning_node("ubuntu-22.04", "debian");
    n.configmap(
        "sysctl.conf",
        "fs.inotify.max_user_instances = 8192\n# comment\nnet.core.nosuch = 1\n",
    );
    n.assert_tuning_config_refused(
        "sysctl.conf line 3: no such key \"net.core.nosuch\" in /proc/sys",
    );
    assert_eq!(n.t.read("/proc/sys/fs/inotify/max_user_instances"), "128\n");
}

#[test]
fn tuning_sysctl_conf_syntax_semicolons_and_optional_keys() {
    let n = tuning_node("fedora-40", "fedora");
    n.configmap(
        "sysctl.conf",
        "; a comment\n-net.core.nosuch = 1\n- vm.max_map_count = 262144\nnet.core.rmem_max=4096\n",
    );
    let ran = n.step("tuning", "config", false).ok();
    assert_eq!(
        ran.stderr,
        "WARN: sysctl.conf line 2: no such key \"net.core.nosuch\" in /proc/sys, skipped (optional: \"-\" prefix)\n"
    );
    assert_eq!(
        n.t.read("/etc/sysctl.d/999-tuning-tuning.conf"),
        "net.core.rmem_max = 4096\nvm.max_map_count = 262144\n"
    );
    assert_eq!(n.t.read("/proc/sys/vm/max_map_count"), "262144\n");
    assert_eq!(n.t.read("/proc/sys/net/core/rmem_max"), "4096\n");
    n.show_containerd_limits("infinity");
    let check = n.step("tuning", "config-check", false).ok();
    assert_eq!(check.stdout, "tuning config-check: ok\n");
}

#[test]
fn two_tuning_packages_keep_their_own_pam_limits_blocks() {
    let mut n = tuning_node("ubuntu-24.04", "debian");
    n.show_containerd_limits("infinity");
    n.package = "first".into();
    n.step("tuning", "config", false).ok();
    n.package = "second".into();
    n.step("tuning", "config", false).ok();
    let first = "# BEGIN skyhook first-tuning\nsession required pam_limits.so\n# END skyhook first-tuning\n";
    let second = "# BEGIN skyhook second-tuning\nsession required pam_limits.so\n# END skyhook second-tuning\n";
    assert_eq!(
        n.t.read("/etc/pam.d/common-session"),
        format!("{PAM_SESSION}{first}{second}")
    );
    // a line outside the skyhook blocks still counts
    assert_eq!(
        n.t.read("/etc/pam.d/common-session-noninteractive"),
        PAM_NONINTERACTIVE
    );
    n.package = "first".into();
    n.step("tuning", "uninstall", false).ok();
    n.step("tuning", "uninstall-check", false).ok();
    assert_eq!(
        n.t.read("/etc/pam.d/common-session"),
        format!("{PAM_SESSION}{second}")
    );
    n.package = "second".into();
    n.step("tuning", "config-check", false).ok();
}

/// The calls that change something: without the queries (`dpkg-query`, `rpm -q`,
/// `systemctl is-*`, `systemctl show`).
fn mutating(calls: Vec<String>) -> Vec<String> {
    calls
        .into_iter()
        .filter(|c| {
            !(c.starts_with("dpkg-query ")
                || c.starts_with("rpm -q ")
                || c.starts_with("systemctl is-")
                || c.starts_with("systemctl show "))
        })
        .collect()
}

/// The install and remove command lines of the family's package manager.
fn pkg_cmds(family: &str, verb: &str, names: &str) -> Vec<String> {
    match (family, verb) {
        ("debian", "install") => vec![
            "apt-get -o DPkg::Lock::Timeout=300 update".into(),
            format!("apt-get -y -o DPkg::Lock::Timeout=300 install {names}"),
        ],
        ("debian", _) => vec![format!(
            "apt-get -y -o DPkg::Lock::Timeout=300 {verb} {names}"
        )],
        (_, "install") => vec!["dnf -y makecache".into(), format!("dnf -y install {names}")],
        (_, _) => vec![format!("dnf -y {verb} {names}")],
    }
}

// ---------------------------------------------------------------- kdump

#[test]
fn kdump_on_every_distribution() {
    for (os, family) in DISTROS {
        let n = Node::new(os, family, "kdump");
        n.configmap("crashkernel", "512M\n");
        // both families' configuration: each node writes only its own
        n.configmap("kdump-tools", "USE_KDUMP=1\nKDUMP_COREDIR=\"/var/crash\"");
        n.configmap(
            "kdump.conf",
            "path /var/crash\ncore_collector makedumpfile -l\n",
        );
        n.boot_with("");
        let (pkgs, svc, conf, conf_text, other) = if *family == "debian" {
            (
                "kdump-tools crash makedumpfile",
                "kdump-tools",
                "/etc/default/kdump-tools",
                "USE_KDUMP=1\nKDUMP_COREDIR=\"/var/crash\"\n",
                "/etc/kdump.conf",
            )
        } else {
            (
                "kexec-tools crash",
                "kdump",
                "/etc/kdump.conf",
                "path /var/crash\ncore_collector makedumpfile -l\n",
                "/etc/default/kdump-tools",
            )
        };

        // apply: dry run, then for real, then again.
        // The install is planned; whether its maintainer scripts enabled the unit is
        // unknown in the plan, which ends there.
        let plan = n.dry_run("kdump", "apply", os);
        assert!(mutating(n.calls()).is_empty(), "{os}: {:?}", n.calls());
        assert_eq!(
            plan.report.changes.len(),
            1,
            "{os}: {:?}",
            plan.report.changes
        );
        assert_eq!(
            plan.outcome.error.as_ref().map(|e| e.message.as_str()),
            Some(format!("service::enable: the answer of systemctl is-enabled {svc} is unknown in the plan: install packages {pkgs} ({}, after index update) (planned at stdlib/kdump.rhai:152) is only run by the apply and may change it", if *family == "debian" { "apt" } else { "dnf" }).as_str()),
            "{os}"
        );
        n.t.clear_calls();
        n.step("kdump", "apply", false).ok();
        let mut want = pkg_cmds(family, "install", pkgs);
        want.push(format!("systemctl enable {svc}"));
        assert_eq!(mutating(n.calls()), want, "{os}");
        n.assert_idle("kdump", "apply", mutating, os);
        n.step("kdump", "apply-check", false).ok();

        // config: crashkernel through the grub drop-in, kdump.conf in the family's file.
        n.dry_run("kdump", "config", os);
        n.t.clear_calls();
        n.step("kdump", "config", false).ok();
        assert_eq!(
            n.t.read("/etc/default/grub.d/999-kdump-kdump.cfg"),
            "GRUB_CMDLINE_LINUX_DEFAULT=\"${GRUB_CMDLINE_LINUX_DEFAULT} crashkernel=512M\"\n"
        );
        assert_eq!(n.t.read(conf), conf_text, "{os}");
        assert!(!n.t.p(other).exists(), "{os}");
        let grub = if *family == "debian" {
            "update-grub"
        } else {
            "grubby --update-kernel=ALL --args=crashkernel=512M"
        };
        assert_eq!(n.calls(), [grub], "{os}");
        n.assert_idle("kdump", "config", std::convert::identity, os);
        n.step("kdump", "config-check", false).ok();

        // post-interrupt-check: before the reboot it fails, after it passes.
        let early = n.step("kdump", "post-interrupt-check", false);
        assert!(early.outcome.failed());
        assert!(
            early.stderr.contains(
                "ERROR: the running kernel's command line lacks crashkernel=512M (reboot pending?)"
            ) && early
                .stderr
                .contains(&format!("ERROR: service {svc} is not active")),
            "{os}: {}",
            early.stderr
        );
        n.t.file(&format!("/state/{svc}.active"), "yes\n");
        // the kernel uses the last crashkernel= (e.g. Ubuntu's kdump-tools.cfg drop-in)
        n.boot_with(" crashkernel=512M crashkernel=384M-:192M");
        n.step("kdump", "post-interrupt-check", false).assert_error_has(
            "the running kernel uses crashkernel=384M-:192M, not crashkernel=512M: a later crashkernel= wins",
            os,
        );
        n.boot_with(" crashkernel=512M");
        let ok = n.step("kdump", "post-interrupt-check", false).ok();
        assert_eq!(ok.stdout, "kdump post-interrupt-check: ok\n");

        // uninstall: crashkernel back, service off, packages removed; then nothing to do.
        n.t.clear_calls();
        n.step("kdump", "uninstall", false).ok();
        assert!(!n.t.p("/etc/default/grub.d/999-kdump-kdump.cfg").exists());
        let mut want = vec![
            format!("systemctl stop {svc}"),
            format!("systemctl disable {svc}"),
        ];
        want.extend(pkg_cmds(family, "remove", pkgs));
        want.push(if *family == "debian" {
            "update-grub".into()
        } else {
            "grubby --update-kernel=ALL --remove-args=crashkernel=512M".into()
        });
        assert_eq!(mutating(n.calls()), want, "{os}");
        n.assert_idle("kdump", "uninstall", mutating, os);
        n.step("kdump", "uninstall-check", false).ok();
    }
}

#[test]
fn kdump_warns_about_the_other_familys_configuration() {
    for (os, family, given, want) in [
        (
            "ubuntu-24.04",
            "debian",
            "kdump.conf",
            "WARN: configMap kdump.conf is not used on the debian family (its kdump configuration is configMap kdump-tools, written to /etc/default/kdump-tools); /etc/default/kdump-tools left as it is\n",
        ),
        (
            "rhel-9",
            "rhel",
            "kdump-tools",
            "WARN: configMap kdump-tools is not used on the rhel family (its kdump configuration is configMap kdump.conf, written to /etc/kdump.conf); /etc/kdump.conf left as it is\n",
        ),
    ] {
        let n = Node::new(os, family, "kdump");
        n.configmap("crashkernel", "512M\n");
        n.configmap(given, "x\n");
        let ran = n.step("kdump", "config", false).ok();
        assert_eq!(ran.stderr, want, "{os}");
        assert!(!n.t.p("/etc/default/kdump-tools").exists(), "{os}");
        assert!(!n.t.p("/etc/kdump.conf").exists(), "{os}");
    }
}

#[test]
fn kdump_config_needs_the_crashkernel_configmap() {
    let n = Node::new("rhel-9", "rhel", "kdump");
    n.step("kdump", "config", false).assert_error_has(
        "configMap crashkernel is missing: it sets the memory reserved for the crash kernel",
        "rhel-9",
    );
}

// ---------------------------------------------------------------- tuned

const PROFILE: &str =
    "[main]\nsummary=test\ninclude=throughput-performance\n\n[sysctl]\nvm.swappiness=10\n";

/// A node for `tuned` whose profile is `gpu-throughput` ([`PROFILE`]), from its configMap.
fn gpu_profile_node(os: &str, family: &'static str) -> Node {
    let n = Node::new(os, family, "tuned");
    n.configmap("tuned_profile", "gpu-throughput\n");
    n.configmap("gpu-throughput", PROFILE);
    n
}

#[test]
fn tuned_on_every_distribution() {
    for (os, family) in DISTROS {
        let n = gpu_profile_node(os, family);

        n.dry_run("tuned", "apply", os);
        assert!(mutating(n.calls()).is_empty(), "{os}: {:?}", n.calls());

        n.t.clear_calls();
        n.step("tuned", "apply", false).ok();
        assert_eq!(n.t.read("/etc/tuned/gpu-throughput/tuned.conf"), PROFILE);
        let mut want = pkg_cmds(family, "install", "tuned");
        want.extend([
            "systemctl enable tuned".to_string(),
            "systemctl start tuned".to_string(),
            "tuned-adm profile gpu-throughput".to_string(),
        ]);
        assert_eq!(mutating(n.calls()), want, "{os}");

        n.assert_idle("tuned", "apply", mutating, os);
        for m in ["apply-check", "config-check", "post-interrupt-check"] {
            n.step("tuned", m, false).ok();
        }

        // Another profile: only tuned-adm runs.
        n.configmap("tuned_profile", "throughput-performance\n");
        let stale = n.step("tuned", "config-check", false);
        assert!(
            stale.stderr.contains(
                "ERROR: the active tuned profile is gpu-throughput, expected throughput-performance"
            ),
            "{os}: {}",
            stale.stderr
        );
        n.t.clear_calls();
        n.step("tuned", "config", false).ok();
        assert_eq!(
            mutating(n.calls()),
            ["tuned-adm profile throughput-performance"]
        );

        n.t.clear_calls();
        n.step("tuned", "uninstall", false).ok();
        assert!(!n.t.p("/etc/tuned/gpu-throughput").exists(), "{os}");
        let mut want = vec![
            "tuned-adm off".to_string(),
            "systemctl stop tuned".to_string(),
            "systemctl disable tuned".to_string(),
        ];
        want.extend(pkg_cmds(family, "remove", "tuned"));
        assert_eq!(mutating(n.calls()), want, "{os}");
        n.assert_idle("tuned", "uninstall", mutating, os);
        n.step("tuned", "uninstall-check", false).ok();
    }
}

#[test]
fn tuned_removes_profiles_whose_configmap_is_gone() {
    let n = gpu_profile_node("ubuntu-24.04", "debian");
    n.configmap("old-hpc", "[main]\ninclude=latency-performance\n");
    n.step("tuned", "apply", false).ok();
    assert_eq!(
        n.t.read("/etc/tuned/.skyhook-tuned-profiles"),
        "gpu-throughput\nold-hpc\n"
    );
    assert!(n.t.p("/etc/tuned/old-hpc/tuned.conf").exists());

    // the configMap goes: config-check sees the leftover, config removes it
    std::fs::remove_file(n.t.p("/skyhook/pkg/configmaps/old-hpc")).unwrap();
    let stale = n.step("tuned", "config-check", false);
    assert!(
        stale
            .stderr
            .contains("ERROR: /etc/tuned/old-hpc exists but there is no configMap old-hpc"),
        "{}",
        stale.stderr
    );
    n.step("tuned", "config", false).ok();
    assert!(!n.t.p("/etc/tuned/old-hpc").exists());
    assert_eq!(
        n.t.read("/etc/tuned/.skyhook-tuned-profiles"),
        "gpu-throughput\n"
    );
    n.step("tuned", "config-check", false).ok();
    let again = n.step("tuned", "config", false).ok();
    assert!(
        again.report.changes.is_empty(),
        "{:?}",
        again.report.changes
    );

    // uninstall removes the recorded profiles even when their configMap is gone too
    std::fs::remove_file(n.t.p("/skyhook/pkg/configmaps/gpu-throughput")).unwrap();
    let left = n.step("tuned", "uninstall-check", false);
    assert!(
        left.stderr
            .contains("ERROR: /etc/tuned/gpu-throughput still exists"),
        "{}",
        left.stderr
    );
    n.step("tuned", "uninstall", false).ok();
    assert!(!n.t.p("/etc/tuned/gpu-throughput").exists());
    assert!(!n.t.p("/etc/tuned/.skyhook-tuned-profiles").exists());
    n.step("tuned", "uninstall-check", false).ok();
}

/// The stdlib module imported under the name `tuned` and the host namespace `tuned_adm::`
/// work side by side, in the script and inside the module (a namespace named `tuned` would
/// be hidden by the import in both: Rhai looks a qualified name up in the imports first).
#[test]
fn tuned_imported_as_tuned_beside_the_tuned_adm_namespace() {
    let n = Node::new("ubuntu-24.04", "debian", "tuned");
    n.configmap("tuned_profile", "throughput-performance\n");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("config.rhai"),
        "import \"skyhook/tuned\" as tuned;\n\
         print(`before: ${tuned_adm::active()}`);\n\
         tuned::config();\n\
         print(`after: ${tuned_adm::active()}`);\n",
    )
    .unwrap();
    let ran = n.step_in(dir.path(), "tuned", "config", false).ok();
    assert_eq!(
        ran.stdout,
        "before: \ntuned: profiles unchanged, active profile set\nafter: throughput-performance\n"
    );
    assert_eq!(
        mutating(n.calls()),
        ["tuned-adm profile throughput-performance"]
    );
}

#[test]
fn tuned_uses_yum_where_there_is_no_dnf() {
    let n = Node::new("rhel-9", "rhel", "tuned");
    std::fs::remove_file(n.t.p("/usr/bin/dnf")).unwrap();
    n.configmap("tuned_profile", "throughput-performance\n");
    n.step("tuned", "apply", false).ok();
    assert_eq!(
        mutating(n.calls()),
        [
            "yum -y makecache",
            "yum -y install tuned",
            "systemctl enable tuned",
            "systemctl start tuned",
            "tuned-adm profile throughput-performance"
        ]
    );
}

// ---------------------------------------------------------------- shellscript

#[test]
fn shellscript_on_every_distribution() {
    for (os, family) in DISTROS {
        let n = Node::new(os, family, "shellscript");
        n.configmap(
            "apply.sh",
            "echo \"apply in $SKYHOOK_DIR\"\necho careful >&2\nprintf '\\n\\nno newline at the end'\n\
             echo ok > /etc/shellscript-ran\n",
        );
        n.configmap(
            "apply_check.sh",
            "read l < /etc/shellscript-ran && [ \"$l\" = ok ] && echo checked\n",
        );

        let plan = n.dry_run("shellscript", "apply", os);
        // Only planned: nothing streamed.
        assert_eq!(
            (plan.stdout.as_str(), plan.stderr.as_str()),
            ("", ""),
            "{os}"
        );
        assert_eq!(
            plan.report.action_summaries(),
            [
                "/bin/bash -c 'file=$2; . \"$1\" \"$2\"' /skyhook/pkg/skyhook_dir/shellscript_run.sh /skyhook/pkg/configmaps/apply.sh apply"
            ],
            "{os}"
        );

        let ran = n.step("shellscript", "apply", false).ok();
        assert_eq!(ran.outcome.code, 0);
        // Streamed byte for byte: blank lines and the missing last newline kept.
        assert_eq!(
            ran.stdout, "apply in /skyhook/pkg\n\n\nno newline at the end",
            "{os}"
        );
        assert_eq!(ran.stderr, "careful\n", "{os}");
        assert_eq!(n.t.read("/etc/shellscript-ran"), "ok\n");

        // The check script runs in check mode (it is the check).
        let check = n.step("shellscript", "apply-check", false).ok();
        assert_eq!(check.stdout, "checked\n", "{os}");
        n.t.file("/etc/shellscript-ran", "no\n");
        let bad = n.step("shellscript", "apply-check", false);
        assert_eq!(bad.outcome.code, 1, "{os}");

        // A stage without a script: the public dispatcher's message on stdout, success.
        let none = n.step("shellscript", "config", false).ok();
        assert_eq!(none.outcome.code, 0);
        assert_eq!(
            (none.stdout.as_str(), none.stderr.as_str()),
            (
                "Could not find file /skyhook/pkg/configmaps/config.sh was this in the configmap?\n",
                ""
            )
        );

        // The script's exit code is the step's return code.
        n.configmap("uninstall.sh", "echo bye\nexit 4\n");
        let four = n.step("shellscript", "uninstall", false);
        assert!(!four.outcome.failed());
        assert_eq!(four.outcome.code, 4, "{os}");
    }
}

#[test]
fn shellscript_runs_rhai_configmaps_in_the_same_session() {
    let n = Node::new("ubuntu-24.04", "debian", "shellscript");
    // the .rhai configMap wins over a .sh of the same stage
    n.configmap(
        "apply.rhai",
        "print(`stage ${step().mode}`);\nfs::write(\"/etc/from-configmap-rhai\", \"yes\\n\");\n",
    );
    n.configmap("apply.sh", "echo bash must not run\n");
    let plan = n.dry_run("shellscript", "apply", "a .rhai configMap");
    assert_eq!(plan.report.changes.len(), 1);
    assert!(plan.report.actions.is_empty(), "bash was not planned");

    let ran = n.step("shellscript", "apply", false).ok();
    assert_eq!(ran.stdout, "stage apply\n");
    assert_eq!(n.t.read("/etc/from-configmap-rhai"), "yes\n");
    assert!(
        mutating(n.calls()).is_empty(),
        "no command ran: {:?}",
        n.calls()
    );

    // the check stage's script is a .rhai too: it holds changes back, drift fails
    n.configmap(
        "apply_check.rhai",
        "fs::write(\"/etc/from-configmap-rhai\", \"no\\n\");\n",
    );
    let check = n.step("shellscript", "apply-check", false);
    assert_eq!(check.report.drift().len(), 1);
    assert_eq!(n.t.read("/etc/from-configmap-rhai"), "yes\n");

    // fail() in the configMap fails the step, with the configMap's own position
    n.configmap("config.rhai", "\nfail(\"not today\");\n");
    let failed = n.step("shellscript", "config", false);
    failed.assert_error_has("not today", "config.rhai");
    failed.assert_error_has("config.rhai:2:", "config.rhai");
}

// ---------------------------------------------------------------- examples and docs

/// The example packages (`examples/<name>`) the stdlib modules ship with.
const EXAMPLES: &[&str] = &[
    "tuning",
    "tuned",
    "kdump",
    "shellscript",
    "containerd-nvidia",
    "gpu-service-user",
];

#[test]
fn example_packages_load_and_compile() {
    let engine = ScriptEngine::default();
    for module in EXAMPLES {
        let dir = manifest().join("examples").join(module);
        let json = std::fs::read(dir.join("config.json")).unwrap();
        let loaded = crate::package::load::parse(&dir.join("config.json"), &json)
            .unwrap_or_else(|e| panic!("{module}: {e}"));
        assert!(
            loaded.warnings.is_empty(),
            "{module}: {:?}",
            loaded.warnings
        );
        let steps = dir.join("skyhook_dir");
        crate::package::load::check_step_files(&dir, &loaded.package, |p| steps.join(p).is_file())
            .unwrap();
        for (_, step) in loaded.package.all_steps() {
            compile_step(&engine, &steps.join(&step.path), &steps)
                .unwrap_or_else(|e| panic!("{module}: {e}"));
        }
    }
}

/// The `configMap:` entries of the first package of a Skyhook CR (`skyhook.yaml`): plain
/// scalars and `|` / `|-` block scalars, as the examples write them (no YAML library).
fn cr_configmaps(yaml: &str) -> std::collections::BTreeMap<String, String> {
    let indent = |l: &str| l.len() - l.trim_start().len();
    let lines: Vec<&str> = yaml.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.trim() == "configMap:")
        .expect("a configMap: section");
    let base = indent(lines[start]);
    let mut out = std::collections::BTreeMap::new();
    let mut i = start + 1;
    while i < lines.len() {
        let l = lines[i];
        if l.trim().is_empty() {
            i += 1;
            continue;
        }
        if indent(l) <= base {
            break;
        }
        let (key, value) = l.trim().split_once(':').expect("key: value");
        let value = value.trim();
        i += 1;
        if value == "|-" || value == "|" {
            let mut body: Vec<&str> = Vec::new();
            let mut block_indent = None;
            while i < lines.len() && (lines[i].trim().is_empty() || indent(lines[i]) > indent(l)) {
                let bi = *block_indent.get_or_insert(indent(lines[i]).max(indent(l) + 1));
                body.push(lines[i].get(bi..).unwrap_or(""));
                i += 1;
            }
            while body.last() == Some(&"") {
                body.pop();
            }
            let mut text = body.join("\n");
            if value == "|" {
                text.push('\n');
            }
            out.insert(key.to_string(), text);
        } else {
            out.insert(key.to_string(), value.trim_matches('"').to_string());
        }
    }
    out
}

/// Each example's `configmaps/` holds exactly the configMaps of its Skyhook CR, so a dry run
/// of the example (`skyhook-run --package examples/<m>`) tests what the CR deploys.
#[test]
fn example_configmaps_match_the_crs() {
    for module in EXAMPLES {
        let dir = manifest().join("examples").join(module);
        let cr = cr_configmaps(&std::fs::read_to_string(dir.join("skyhook.yaml")).unwrap());
        let mut files = std::collections::BTreeMap::new();
        for e in std::fs::read_dir(dir.join("configmaps")).unwrap() {
            let e = e.unwrap();
            let text = std::fs::read_to_string(e.path()).unwrap();
            files.insert(e.file_name().to_string_lossy().into_owned(), text);
        }
        assert_eq!(
            cr.keys().collect::<Vec<_>>(),
            files.keys().collect::<Vec<_>>(),
            "{module}"
        );
        for (name, want) in &cr {
            assert_eq!(
                files[name].trim_end_matches('\n'),
                want.trim_end_matches('\n'),
                "{module}: configmaps/{name}"
            );
        }
    }
}

/// Every function of every module is named in docs/stdlib.md.
#[test]
fn docs_name_every_function() {
    let docs = std::fs::read_to_string(manifest().join("docs/stdlib.md")).unwrap();
    for (name, src) in STDLIB {
        if *name == "hello" {
            continue;
        }
        assert!(docs.contains(&format!("## skyhook/{name}")), "{name}");
        for line in src.lines() {
            if let Some(rest) = line.strip_prefix("fn ") {
                let f = &rest[..rest.find('(').unwrap()];
                assert!(
                    docs.contains(&format!("`{f}(")) || docs.contains(&format!(" {f}(")),
                    "docs/stdlib.md does not name skyhook/{name}::{f}"
                );
            }
        }
    }
}

#[path = "stdlib_tests/containerd.rs"]
mod containerd;
