//! Tests of the embedded standard library (`stdlib/*.rhai`): every module compiles, and the
//! pure helpers compute what their docs say.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::*;

/// Run script text `main` with no host API; returns (outcome, stdout, stderr).
fn run_pure(main: &str, ctx: &StepContext) -> (ScriptOutcome, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let engine = ScriptEngine::default();
    let script = compile_source(
        &engine,
        "main.rhai",
        main,
        Arc::new(ModuleStore::new(dir.path())),
    )
    .unwrap_or_else(|e| panic!("compile: {e}"));
    let out = Arc::new(CaptureOutput::new());
    let outcome = run_script(
        &engine,
        &script,
        ctx,
        out.clone(),
        Arc::new(AtomicBool::new(false)),
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
        let dir = tempfile::tempdir().unwrap();
        compile_source(
            &engine,
            "x.rhai",
            &src,
            Arc::new(ModuleStore::new(dir.path())),
        )
        .unwrap_or_else(|e| panic!("skyhook/{name}: {e}"));
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
