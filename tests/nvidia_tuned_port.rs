//! The Rhai port of nvidia-tuned (`examples/nvidia-tuned`) run by the agent on the fake
//! GPU-node hosts of `tests/fakehosts`; the shared fake-node helpers are in `nvidia_ports`.
//! Supported hosts (Ubuntu 24.04 x86_64 and arm64, Ubuntu 22.04, Amazon Linux 2023): every
//! stage the operator runs, the reboot interrupt, a second config that changes nothing,
//! drift caught by the checks, uninstall back to the starting `/etc`. COS and bad
//! configMaps: a clear failure that changes nothing.

use std::fs;

use crate::nvidia_ports::{
    HOSTS, config_again_changes_nothing, etc, etc_but_skyhook, manifest, node, ok, package_run,
    payload,
};
use crate::util::{FakeRoot, T, tree};

const ID: &str = "node-0000-1_nvidia_tuned_0.2.3";

/// The one host the package does not support: COS (no package manager, no tuned).
const UNSUPPORTED: &str = "cos-117";

/// The hosts the package supports: every other host layer.
fn supported() -> impl Iterator<Item = &'static str> {
    HOSTS.iter().copied().filter(|h| *h != UNSUPPORTED)
}

const NODE_RESTART: &str = r#"{"type":"node_restart"}"#;

/// `dpkg-query -W -f=... NAME` and `rpm -q --qf ... NAME` over the layers' fake package
/// database (the layers stub `dpkg -s` and `dnf`, not the queries `pkg::installed` makes):
/// the installed version, or exit 1.
const PKG_QUERIES: &[(&str, &str)] = &[
    (
        "/usr/local/bin/dpkg-query",
        r#"#!/bin/sh
for n; do :; done
[ -f "/var/lib/fakepkg/$n.list" ] || { echo "dpkg-query: no packages found matching $n" >&2; exit 1; }
printf 'install ok installed\t%s' "$(sed -n 's/^version=//p' "/usr/share/fakepkg/$n.meta")"
"#,
    ),
    (
        "/usr/local/bin/rpm",
        r#"#!/bin/sh
for n; do :; done
[ -f "/var/lib/fakepkg/$n.list" ] || { echo "package $n is not installed"; exit 1; }
sed -n 's/^version=//p' "/usr/share/fakepkg/$n.meta"
"#,
    ),
];

/// A fake node with the port and `configmaps`, and the package queries of [`PKG_QUERIES`].
/// The layers' `apt-get` and `yum` are files holding the name of the program they stand
/// for (a symlink lost in a copy): they become that symlink again.
fn tuned_node(host: &str, configmaps: &[(&str, &str)]) -> FakeRoot {
    let fr = node(host, "nvidia-tuned", configmaps, ID);
    for (path, body) in PKG_QUERIES {
        fr.write_mode(path, body, 0o755);
    }
    for (name, target) in [("apt-get", "apt"), ("yum", "dnf")] {
        let p = fr.host(&format!("/usr/local/bin/{name}"));
        if fs::read_to_string(&p).is_ok_and(|s| s == target) {
            fs::remove_file(&p).unwrap();
            std::os::unix::fs::symlink(target, &p).unwrap();
        }
    }
    fr
}

/// A package file (`examples/nvidia-tuned/<rel>`).
fn package_file(rel: &str) -> String {
    fs::read_to_string(manifest().join("examples/nvidia-tuned").join(rel)).unwrap()
}

/// The fake `tuned-adm` calls the stubs recorded that change tuned's profile.
fn tuned_adm_changes(fr: &FakeRoot) -> Vec<String> {
    fr.read_opt("/var/log/stub-calls.log")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("tuned-adm profile") || l.starts_with("tuned-adm off"))
        .map(String::from)
        .collect()
}

/// `/etc` after an uninstall, without what the agent and tuned's package keep: the agent's
/// records under `/etc/skyhook`, and what removing the tuned package leaves in `/etc/tuned`
/// (apt keeps conffiles; tuned-adm's `profile_mode`).
fn etc_without_tuned_leftovers(fr: &FakeRoot) -> Vec<String> {
    etc_but_skyhook(fr)
        .into_iter()
        .filter(|l| {
            !l.starts_with("tuned ")
                && !l.starts_with("tuned/tuned-main.conf ")
                && !l.starts_with("tuned/profile_mode ")
        })
        .collect()
}

/// h100/inference with the eks service, INTERRUPT=true, on every supported host: the
/// operator's stages for a first install, the reboot, a second config that changes nothing,
/// drift, uninstall back to the starting `/etc`.
#[test]
fn nvidia_tuned_every_stage_on_every_supported_host() {
    require_root!();
    for host in supported() {
        let mut fr = tuned_node(
            host,
            &[
                ("accelerator", "h100\n"),
                ("intent", "inference\n"),
                ("service", "eks\n"),
            ],
        );
        fr.set_env("INTERRUPT", "true");
        let before = etc(&fr);
        let what = |stage: &str| format!("{host}: {stage}");

        let apply = ok(fr.run("apply"), &what("apply"));
        assert!(
            apply.stdout.contains("tuned: package installed, service "),
            "{host}: {}",
            apply.all()
        );
        assert!(fr.exists("/usr/sbin/tuned-adm"), "{host}");
        ok(fr.run("apply-check"), &what("apply-check"));

        let config = ok(fr.run("config"), &what("config"));
        assert!(
            config.stdout.contains(
                "profile eks-h100-inference (accelerator h100, intent inference, service eks)\n"
            ),
            "{host}: {}",
            config.all()
        );
        assert!(
            config.stdout.contains(
                "nvidia-tuned: profiles changed, reapply_sysctl set to 0, active profile set"
            ),
            "{host}: {}",
            config.all()
        );
        assert_eq!(fr.read("/etc/tuned/active_profile"), "eks-h100-inference\n");
        assert_eq!(
            fr.read("/etc/tuned/eks-h100-inference/tuned.conf"),
            "[main]\ninclude=nvidia-h100-inference\n\
             summary=NVIDIA AWS profile with MAC address policy configuration\n\n\
             [script]\nscript=${i:PROFILE_DIR}/script.sh\n"
        );
        for script in ["script.sh", "bootloader.sh"] {
            let p = format!("/etc/tuned/eks-h100-inference/{script}");
            assert_eq!(
                fr.read(&p),
                package_file(&format!("profiles/service/eks/{script}"))
            );
            let mode = fs::metadata(fr.host(&p)).unwrap().permissions();
            assert_eq!(
                std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
                0o755,
                "{p}"
            );
        }
        // The service's own version of the workload profile replaces the OS one.
        assert_eq!(
            fr.read("/etc/tuned/nvidia-h100-inference/tuned.conf"),
            package_file("profiles/service/eks/nvidia-h100-inference.conf")
        );
        assert_eq!(
            fr.read("/usr/lib/tuned/nvidia-base/tuned.conf"),
            package_file("profiles/common/nvidia-base/tuned.conf")
        );
        // Ubuntu 22.04 has its own gb200 inference profile (tuned 2.15 lacks cpu isolation).
        let gb200 = if host == "ubuntu-22.04" {
            "profiles/os/ubuntu/22.04/nvidia-gb200-inference/tuned.conf"
        } else {
            "profiles/os/common/nvidia-gb200-inference/tuned.conf"
        };
        assert_eq!(
            fr.read("/etc/tuned/nvidia-gb200-inference/tuned.conf"),
            package_file(gb200),
            "{host}"
        );
        assert!(
            fr.read("/etc/tuned/tuned-main.conf")
                .contains("\nreapply_sysctl = 0\n"),
            "{host}"
        );
        // The configMaps are not profiles (the bash tuned base made
        // /etc/tuned/accelerator/tuned.conf holding "h100", and so on).
        for cm in ["accelerator", "intent", "service", "tuned_profile"] {
            assert!(!fr.exists(&format!("/etc/tuned/{cm}")), "{host}: {cm}");
        }

        // Every profile has [bootloader] settings: verify fails until the reboot, a warning
        // with INTERRUPT=true.
        let check = ok(fr.run("config-check"), &what("config-check"));
        assert!(
            check
                .stderr
                .contains("tuned-adm verify failed: the live settings differ from the profile"),
            "{host}: {}",
            check.all()
        );
        assert!(
            check
                .stderr
                .contains("INTERRUPT=true: verified after the interrupt"),
            "{host}: {}",
            check.all()
        );
        let early = fr.run("post-interrupt-check");
        assert_eq!(early.code, 1, "{host}: {}", early.all());
        assert!(
            early
                .all()
                .contains("'cmdline' (the new kernel command line is not active until reboot)"),
            "{host}: {}",
            early.all()
        );

        ok(fr.interrupt(&payload(NODE_RESTART)), &what("interrupt"));
        assert!(
            fr.read("/var/log/stub-calls.log").contains("\nreboot\n"),
            "{host}"
        );
        let post = ok(
            fr.run("post-interrupt-check"),
            &what("post-interrupt-check"),
        );
        assert!(
            post.stdout
                .contains("nvidia-tuned post-interrupt-check: ok"),
            "{host}: {}",
            post.all()
        );
        let check = ok(
            fr.run("config-check"),
            &what("config-check after the reboot"),
        );
        assert!(!check.stderr.contains("verify failed"), "{}", check.all());

        // A second config changes nothing and runs no tuned-adm.
        config_again_changes_nothing(
            &fr,
            host,
            "nvidia-tuned: profiles unchanged, reapply_sysctl unchanged, active profile unchanged",
        );
        assert_eq!(
            tuned_adm_changes(&fr),
            ["tuned-adm profile eks-h100-inference"],
            "{host}"
        );

        // Drift: a profile edited and tuning turned off behind the package's back.
        fs::write(
            fr.host("/etc/tuned/nvidia-h100-performance/tuned.conf"),
            "[main]\n",
        )
        .unwrap();
        fs::remove_file(fr.host("/etc/tuned/active_profile")).unwrap();
        let drift = fr.run("config-check");
        assert_eq!(drift.code, 1, "{host}: {}", drift.all());
        for problem in [
            "ERROR: /etc/tuned/nvidia-h100-performance/tuned.conf differs from the package's",
            "ERROR: the active tuned profile is none, expected eks-h100-inference",
        ] {
            assert!(drift.stderr.contains(problem), "{host}: {}", drift.all());
        }
        ok(fr.run("config"), &what("config after drift"));
        ok(fr.run("config-check"), &what("config-check after drift"));

        ok(fr.run("uninstall"), &what("uninstall"));
        ok(fr.run("uninstall-check"), &what("uninstall-check"));
        assert!(!fr.exists("/usr/lib/tuned/nvidia-base"), "{host}");
        assert!(!fr.exists("/usr/sbin/tuned-adm"), "{host}");
        assert_eq!(
            etc_without_tuned_leftovers(&fr),
            before,
            "{host}: uninstall left /etc different"
        );
        // What the tuned package leaves is its own: its main configuration as shipped.
        if let Some(main) = fr.read_opt("/etc/tuned/tuned-main.conf") {
            assert!(main.contains("\nreapply_sysctl = 1\n"), "{host}: {main}");
        }
        let calls = tuned_adm_changes(&fr);
        assert_eq!(
            calls.last().map(String::as_str),
            Some("tuned-adm off"),
            "{host}"
        );
    }
}

/// Without INTERRUPT=true, config-check fails while the profile's [bootloader] settings
/// wait for the reboot, and says how to fix it; after the reboot it passes.
#[test]
fn nvidia_tuned_config_check_without_interrupt_fails_until_the_reboot() {
    require_root!();
    let fr = tuned_node("ubuntu-24.04-eks-arm64", &[("accelerator", "gb200")]);
    ok(fr.run("apply"), "apply");
    let config = ok(fr.run("config"), "config");
    assert!(
        config
            .stdout
            .contains("profile nvidia-gb200-performance (accelerator gb200, intent performance)\n"),
        "{}",
        config.all()
    );
    assert_eq!(
        fr.read("/etc/tuned/active_profile"),
        "nvidia-gb200-performance\n"
    );
    let check = fr.run("config-check");
    assert_eq!(check.code, 1, "{}", check.all());
    assert!(
        check.stderr.contains(
            "set INTERRUPT=true when the profile needs an interrupt (a reboot for [bootloader] settings) to verify"
        ),
        "{}",
        check.all()
    );
    ok(fr.interrupt(&payload(NODE_RESTART)), "interrupt");
    ok(fr.run("config-check"), "config-check after the reboot");
    ok(fr.run("post-interrupt-check"), "post-interrupt-check");
}

/// Switching the selection takes back what the old one deployed: the service profile goes
/// when the service does, the workload profile the service replaced is the OS one again,
/// and only tuned-adm runs for a new intent.
#[test]
fn nvidia_tuned_switching_selection_cleans_up() {
    require_root!();
    let fr = tuned_node(
        "ubuntu-22.04",
        &[
            ("accelerator", "h100"),
            ("intent", "inference"),
            ("service", "eks"),
        ],
    );
    ok(fr.run("apply"), "apply");
    ok(fr.run("config"), "eks h100/inference");
    assert!(fr.exists("/etc/tuned/eks-h100-inference/script.sh"));

    fs::remove_file(fr.t("pkg/configmaps/service")).unwrap();
    let config = ok(fr.run("config"), "h100/inference without a service");
    assert!(
        config.stdout.contains("active profile set"),
        "{}",
        config.all()
    );
    assert!(!fr.exists("/etc/tuned/eks-h100-inference"));
    assert_eq!(
        fr.read("/etc/tuned/nvidia-h100-inference/tuned.conf"),
        package_file("profiles/os/ubuntu/22.04/nvidia-h100-inference/tuned.conf")
    );
    assert_eq!(
        fr.read("/etc/tuned/active_profile"),
        "nvidia-h100-inference\n"
    );
    assert!(
        !fr.read("/etc/tuned/.skyhook-nvidia_tuned-deployed")
            .contains("eks-"),
        "the record still lists the service profile"
    );

    fr.write(&format!("{T}/pkg/configmaps/intent"), "multiNodeTraining\n");
    let before = etc(&fr);
    let config = ok(fr.run("config"), "h100/multiNodeTraining");
    assert!(
        config.stdout.contains(
            "nvidia-tuned: profiles unchanged, reapply_sysctl unchanged, active profile set"
        ),
        "{}",
        config.all()
    );
    let changed: Vec<String> = etc(&fr)
        .into_iter()
        .filter(|l| !before.contains(l))
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect();
    assert_eq!(changed, ["tuned/active_profile"]);
}

/// A host the package does not support (COS: no package manager, no tuned) fails every
/// stage that would change it, naming the distribution; a missing accelerator, an unknown
/// accelerator, intent or service, or a value that is not one word fails config naming it
/// and the choices. Nothing changes under /etc, /usr/lib/tuned or /proc.
#[test]
fn nvidia_tuned_bad_hosts_and_configmaps_fail_clearly_and_change_nothing() {
    require_root!();
    let cos = tuned_node(UNSUPPORTED, &[("accelerator", "h100")]);
    let etc_before = etc(&cos);
    for mode in ["apply", "config", "uninstall"] {
        let run = cos.run(mode);
        assert_ne!(run.code, 0, "{mode}: {}", run.all());
        assert!(
            run.all().contains(
                "unsupported distribution \"cos\" (/etc/os-release ID): nvidia-tuned installs tuned with apt, dnf or yum on ubuntu, debian, rhel, centos, rocky, almalinux, amzn, fedora"
            ),
            "{mode}: {}",
            run.all()
        );
    }
    assert_eq!(etc_but_skyhook(&cos), etc_before);

    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[("intent", "inference")],
            "Expected config file accelerator not found in configmaps directory.",
        ),
        (
            &[("accelerator", " \n")],
            "configMap \"accelerator\" is empty",
        ),
        (
            &[("accelerator", "a100")],
            "unknown accelerator \"a100\" (available: gb200, h100)",
        ),
        (
            &[("accelerator", "h100"), ("intent", "training")],
            "unknown intent \"training\" for accelerator \"h100\" (available: inference, multiNodeTraining, performance)",
        ),
        (
            &[("accelerator", "h100"), ("service", "gke")],
            "unknown service \"gke\" (available: eks)",
        ),
        (
            &[("accelerator", "h100"), ("intent", "../../x")],
            "configMap \"intent\" is \"../../x\": expected one word",
        ),
    ];
    for (configmaps, message) in cases {
        let fr = tuned_node("ubuntu-24.04-eks-x86_64", configmaps);
        // The agent requires the accelerator configMap (expected_config_files) in every
        // mode, as the bash package's config.json does.
        if configmaps.iter().any(|(k, _)| *k == "accelerator") {
            ok(fr.run("apply"), "apply");
        }
        let etc_before = etc(&fr);
        let lib = || {
            let dir = fr.host("/usr/lib/tuned");
            if dir.exists() { tree(&dir) } else { Vec::new() }
        };
        let lib_before = lib();
        let proc_before = tree(&fr.host("/proc"));
        let run = fr.run("config");
        assert_ne!(run.code, 0, "{message}: {}", run.all());
        assert!(run.all().contains(message), "{message}: {}", run.all());
        assert_eq!(etc_but_skyhook(&fr), etc_before, "{message}");
        assert_eq!(lib(), lib_before, "{message}");
        assert_eq!(tree(&fr.host("/proc")), proc_before, "{message}");
    }
}

/// `skyhook-run --package` on the port after the agent's apply: the dry run of `config`
/// plans the profiles and `tuned-adm profile` (the active one named), changes nothing, and
/// after `--apply` plans nothing to change.
#[test]
fn nvidia_tuned_through_skyhook_run_plans_applies_and_then_plans_nothing() {
    require_root!();
    let fr = tuned_node(
        "ubuntu-24.04-eks-x86_64",
        &[("accelerator", "h100"), ("intent", "multiNodeTraining")],
    );
    ok(fr.run("apply"), "apply");
    let skyhook_run = |extra: &[&str]| package_run(&fr, ID, "config", extra, &[]);
    let before = tree(fr.root());
    let (code, plan) = skyhook_run(&[]);
    assert_eq!(code, 0, "{plan}");
    assert!(
        plan.contains("~ tuned-adm profile nvidia-h100-multiNodeTraining (active: none)"),
        "{plan}"
    );
    assert!(
        plan.contains("~ create /usr/lib/tuned/nvidia-base/tuned.conf"),
        "{plan}"
    );
    assert_eq!(tree(fr.root()), before, "a dry run changed the root");

    let (code, applied) = skyhook_run(&["--apply"]);
    assert_eq!(code, 0, "{applied}");
    assert_eq!(
        fr.read("/etc/tuned/active_profile"),
        "nvidia-h100-multiNodeTraining\n"
    );
    let (code, again) = skyhook_run(&[]);
    assert_eq!(code, 0, "{again}");
    assert!(again.contains("Plan: 0 to change,"), "{again}");
}

/// RHEL (os-release `ID="rhel"`, which the bash install's `redhat*` pattern misses) is
/// supported: tuned installed with dnf, the profiles of `os/rhel/9` (the major version of
/// `VERSION_ID`) deployed and the selected one active.
#[test]
fn nvidia_tuned_supports_rhel() {
    require_root!();
    let fr = tuned_node("amazon-linux-2023", &[("accelerator", "h100")]);
    fr.write(
        "/etc/os-release",
        "NAME=\"Red Hat Enterprise Linux\"\nID=\"rhel\"\nID_LIKE=\"fedora\"\nVERSION_ID=\"9.4\"\n",
    );
    ok(fr.run("apply"), "apply");
    ok(fr.run("config"), "config");
    assert_eq!(
        fr.read("/etc/tuned/active_profile"),
        "nvidia-h100-performance\n"
    );
    assert_eq!(
        fr.read("/etc/tuned/nvidia-h100-performance/tuned.conf"),
        package_file("profiles/os/rhel/9/nvidia-h100-performance/tuned.conf")
    );
    assert!(
        fr.read("/var/log/stub-calls.log")
            .contains("dnf -y install tuned"),
        "{}",
        fr.read("/var/log/stub-calls.log")
    );
}
