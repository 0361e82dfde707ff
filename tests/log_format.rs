//! `SKYHOOK_AGENT_LOG_FORMAT` (v6/v7 compatibility): `prefixed` (the default) keeps the
//! Python agent's `[out]`/`[err]` label and time on every line of the step logs; `plain`
//! writes the lines as the step wrote them, as the Go agent (v7) does, and accepts and
//! ignores `SKYHOOK_AGENT_BUFFER_LIMIT`, which v7 dropped. Bash and `.rhai` steps alike.

use serde_json::json;

use crate::util::*;

/// A package whose `apply` runs `say.sh` (stdout `one\ntwo\ntail` without a final newline,
/// stderr `e1\n`) and `say.rhai` (`print("r1")`, `debug("r2")`).
fn say_root() -> FakeRoot {
    let fr = FakeRoot::new();
    fr.write_config(&config(json!({
        "apply": [step("say", "say.sh", &[]), step("rhai", "say.rhai", &[])],
        "apply-check": [step("c", "say.sh", &[])],
    })));
    fr.write_step(
        "say.sh",
        "#!/bin/sh\nprintf 'one\\ntwo\\n'\nprintf 'e1\\n' >&2\nprintf 'tail'\n",
    );
    fr.write_step("say.rhai", "print(\"r1\");\ndebug(\"r2\");\n");
    fr
}

/// The `.log` and `.log.err` of `step` (a regex of its path) in `L`, exactly one each.
fn step_logs(fr: &FakeRoot, step: &str) -> (String, String) {
    let read = |suffix: &str| {
        let logs = fr.logs_matching(&format!(r"{step}-{{FTS}}\.{suffix}"));
        assert_eq!(logs.len(), 1, "{step} {suffix}: {logs:?}");
        fr.read(&format!("{T}/log/demo/1.0.0/{}", logs[0]))
    };
    (read("log"), read(r"log\.err"))
}

#[test]
fn prefixed_is_the_default_log_format() {
    require_root!();
    let fr = say_root();
    let run = fr.run("apply");
    run.code(0);
    let (out, err) = step_logs(&fr, r"say\.sh");
    assert_full_match(&out, r"\[out\]{TS} one\n\[out\]{TS} two\n\[out\]{TS} tail");
    assert_full_match(&err, r"\[err\]{TS} e1\n\[err\]{TS} ");
    let (out, err) = step_logs(&fr, r"say\.rhai");
    assert_full_match(&out, r"\[out\]{TS} r1\n\[out\]{TS} ");
    assert_full_match(&err, r"\[err\]{TS} r2\n\[err\]{TS} ");
    assert!(run.stdout.contains("[out]"), "{}", run.stdout);
}

#[test]
fn plain_log_format_writes_the_lines_as_the_step_wrote_them() {
    require_root!();
    // Any SKYHOOK_AGENT_BUFFER_LIMIT, even one the prefixed format warns about, is
    // accepted without a word and changes nothing.
    for limit in [None, Some("1"), Some("abc")] {
        let mut fr = say_root();
        fr.set_env("SKYHOOK_AGENT_LOG_FORMAT", "plain");
        if let Some(l) = limit {
            fr.set_env("SKYHOOK_AGENT_BUFFER_LIMIT", l);
        }
        let run = fr.run("apply");
        run.code(0);
        assert_eq!(
            step_logs(&fr, r"say\.sh"),
            ("one\ntwo\ntail".to_string(), "e1\n".to_string()),
            "limit {limit:?}"
        );
        assert_eq!(
            step_logs(&fr, r"say\.rhai"),
            ("r1\n".to_string(), "r2\n".to_string()),
            "limit {limit:?}"
        );
        assert!(run.stdout.contains("one\ntwo\ntail"), "{}", run.stdout);
        assert!(!run.stdout.contains("[out]"), "{}", run.stdout);
        assert!(!run.stderr.contains("[err]"), "{}", run.stderr);
        assert!(
            !run.stderr.contains("SKYHOOK_AGENT_BUFFER_LIMIT"),
            "limit {limit:?}: {}",
            run.stderr
        );
        run.has_line("SKYHOOK_AGENT_BUFFER_LIMIT: 8192");
    }
}

/// A log format other than the two names exits 1 with one line naming the variable and the
/// accepted values, and writes nothing.
#[test]
fn unknown_log_format_is_refused_before_anything_is_written() {
    require_root!();
    let mut fr = say_root();
    fr.set_env("SKYHOOK_AGENT_LOG_FORMAT", "v7");
    let before = fr.snapshot();
    let run = fr.run("apply");
    run.code(1);
    assert_eq!(
        run.stderr,
        "skyhook-agent: error: invalid SKYHOOK_AGENT_LOG_FORMAT value \"v7\": expected prefixed (the default: [out]/[err] and time on every line) or plain (lines as the step wrote them)\n"
    );
    assert_eq!(fr.snapshot(), before);
}
