//! An interrupt pod has no init container to copy the package down, so an interrupt whose
//! copy dir is missing while `SKYHOOK_DATA_DIR` holds the package first copies the package
//! into the copy dir and runs its commands there (upstream NodeWright 0d61d428). Without a
//! data dir either, the commands still run, from `/`, with a warning (upstream's copy would
//! fail the interrupt; its commands need no package file).

use std::fs;

use crate::util::*;

const SERVICE_RESTART: &str =
    "eyJ0eXBlIjoic2VydmljZV9yZXN0YXJ0Iiwic2VydmljZXMiOlsiY29udGFpbmVyZCIsImt1YmVsZXQiXX0=";

/// An interrupt root whose `systemctl` records `<cwd> systemctl <args>` in `$T/calls`, with
/// no copy dir `$T/pkg`.
fn root_without_copy_dir() -> FakeRoot {
    let mut fr = FakeRoot::new();
    fr.interrupt_setup();
    fr.write_mode(
        "/t/bin/systemctl",
        "#!/bin/sh\necho \"$(pwd) systemctl $*\" >> /t/calls\n",
        0o755,
    );
    fs::remove_dir_all(fr.t("pkg")).unwrap();
    fr
}

#[test]
fn interrupt_copies_the_data_dir_into_a_missing_copy_dir_and_runs_there() {
    require_root!();
    let mut fr = root_without_copy_dir();
    let data = fr.t("data");
    fs::create_dir_all(data.join("skyhook_dir")).unwrap();
    fs::write(data.join("config.json"), "{\"package_name\": \"demo\"}").unwrap();
    fs::write(data.join("skyhook_dir/step.sh"), "#!/bin/sh\n").unwrap();
    fr.set_env("SKYHOOK_DATA_DIR", data.to_str().unwrap());
    let run = fr.interrupt(SERVICE_RESTART);
    run.code(0);
    assert_eq!(
        fr.read("/t/pkg/config.json"),
        "{\"package_name\": \"demo\"}"
    );
    assert_eq!(fr.read("/t/pkg/skyhook_dir/step.sh"), "#!/bin/sh\n");
    assert_eq!(
        fr.calls().as_deref(),
        Some(
            "/t/pkg systemctl daemon-reload\n/t/pkg systemctl restart containerd\n/t/pkg systemctl restart kubelet\n"
        )
    );
    assert!(!run.stderr.contains("does not exist"), "{}", run.stderr);
}

#[test]
fn interrupt_without_copy_dir_or_data_dir_runs_from_the_root() {
    require_root!();
    let mut fr = root_without_copy_dir();
    fr.set_env("SKYHOOK_DATA_DIR", "/t/missing");
    let run = fr.interrupt(SERVICE_RESTART);
    run.code(0);
    assert!(!fr.exists("/t/pkg"));
    assert_eq!(
        fr.calls().as_deref(),
        Some(
            "/ systemctl daemon-reload\n/ systemctl restart containerd\n/ systemctl restart kubelet\n"
        )
    );
    let warning =
        "WARNING: copy dir /t/pkg does not exist on the host; running systemctl daemon-reload in /";
    assert!(run.stderr.lines().any(|l| l == warning), "{}", run.stderr);
}
