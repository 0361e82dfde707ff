//! The startup banner (agent-contract.md 9.1): 21 lines on stdout, Python's exact text.

use std::fmt::Write as _;
use std::path::Path;

use super::args::RunArgs;
use crate::mode::settings::{ResourceId, Settings};

fn py_bool(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

fn join(base: &Path, parts: &[&str]) -> String {
    let mut p = base.to_path_buf();
    for part in parts {
        p.push(part);
    }
    p.display().to_string()
}

/// Render the banner. Directories are the environment values (not prefixed with the root);
/// `<pkg>`/`<ver>` come from `SKYHOOK_RESOURCE_ID`.
pub fn render(args: &RunArgs, settings: &Settings, id: &ResourceId) -> String {
    let mut s = String::new();
    let dashes = "--------------------";
    let _ = writeln!(s, "{dashes}");
    let _ = writeln!(s, "-CLI CONFIGURATION--");
    let _ = writeln!(s, "mode: {}", args.mode);
    let _ = writeln!(s, "root_mount: {}", args.root.display());
    let _ = writeln!(s, "copy_dir: {}", args.copy_dir.display());
    let _ = writeln!(
        s,
        "interrupt_data: {}",
        args.payload.as_deref().unwrap_or("None")
    );
    let _ = writeln!(s, "always_run_step: {}", py_bool(settings.always_run_step));
    let _ = writeln!(s, "-ENV CONFIGURATION--");
    let _ = writeln!(s, "COPY_RESOLV: {}", py_bool(settings.copy_resolv));
    let _ = writeln!(
        s,
        "OVERLAY_ALWAYS_RUN_STEP: {}",
        py_bool(settings.always_run_step)
    );
    let _ = writeln!(s, "SKYHOOK_RESOURCE_ID: {}", id.raw);
    let _ = writeln!(s, "SKYHOOK_DATA_DIR: {}", settings.data_dir.display());
    let _ = writeln!(s, "SKYHOOK_ROOT_DIR: {}", settings.state_root.display());
    let _ = writeln!(s, "SKYHOOK_LOG_DIR: {}", settings.log_root.display());
    let _ = writeln!(s, "SKYHOOK_AGENT_BUFFER_LIMIT: {}", settings.buffer_limit);
    let _ = writeln!(
        s,
        "SKYHOOK_AGENT_WRITE_LOGS: {}",
        py_bool(settings.write_logs)
    );
    let _ = writeln!(s, "Directory CONFIGURATION");
    let _ = writeln!(
        s,
        "flag_dir: {}",
        join(&settings.state_root, &["flags", &id.package, &id.version])
    );
    let _ = writeln!(
        s,
        "log_dir: {}",
        join(&settings.log_root, &[&id.package, &id.version])
    );
    let _ = writeln!(
        s,
        "history_file: {}",
        join(
            &settings.state_root,
            &["history", &format!("{}.json", id.package)]
        )
    );
    let _ = writeln!(s, "{dashes}");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    #[test]
    fn banner_exact() {
        let settings = Settings::from_env(
            [
                ("SKYHOOK_ROOT_DIR", "/t/state"),
                ("SKYHOOK_LOG_DIR", "/t/log"),
                ("COPY_RESOLV", "false"),
            ]
            .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        )
        .unwrap();
        let id = ResourceId::parse("sky-0000-1_demo_1.0.0").unwrap();
        let args = RunArgs {
            mode: "apply".into(),
            root: "/".into(),
            copy_dir: "/t/pkg".into(),
            payload: None,
        };
        let expected = "--------------------\n-CLI CONFIGURATION--\nmode: apply\nroot_mount: /\ncopy_dir: /t/pkg\ninterrupt_data: None\nalways_run_step: False\n-ENV CONFIGURATION--\nCOPY_RESOLV: False\nOVERLAY_ALWAYS_RUN_STEP: False\nSKYHOOK_RESOURCE_ID: sky-0000-1_demo_1.0.0\nSKYHOOK_DATA_DIR: /skyhook-package\nSKYHOOK_ROOT_DIR: /t/state\nSKYHOOK_LOG_DIR: /t/log\nSKYHOOK_AGENT_BUFFER_LIMIT: 8192\nSKYHOOK_AGENT_WRITE_LOGS: True\nDirectory CONFIGURATION\nflag_dir: /t/state/flags/demo/1.0.0\nlog_dir: /t/log/demo/1.0.0\nhistory_file: /t/state/history/demo.json\n--------------------\n";
        assert_eq!(render(&args, &settings, &id), expected);
        assert_eq!(expected.lines().count(), 21);
    }
}
