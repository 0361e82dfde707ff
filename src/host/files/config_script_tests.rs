//! The `config` rows' tests through Rhai.

pub(crate) mod tests {
    use crate::host::effects::report::ExecMode;
    use crate::host::testutil::TestHost;
    use crate::script::host_api::tests::*;

    /// One call of each function of this file, for
    /// [`crate::script::host_api::tests::declared_effects_are_the_submitted_ones`]: in the root that test
    /// prepares, each call of a function that submits effects changes something.
    pub(crate) const SAMPLES: &[&str] = &[
        r#"config::has("a")"#,
        r#"config::get("a")"#,
        r#"config::names()"#,
        r#"config::lines("a")"#,
        r#"config::kv("a")"#,
        r#"node::labels()"#,
        r#"node::annotations()"#,
        r#"node::packages()"#,
    ];

    #[test]
    fn config_node_and_secrets() {
        let t = TestHost::new();
        let cm = t.dir.path().join("configmaps");
        std::fs::create_dir_all(&cm).unwrap();
        std::fs::write(cm.join("a"), "one\n# c\n\n two \n").unwrap();
        std::fs::write(cm.join("kv"), "x = 1\ny=2\n").unwrap();
        std::fs::write(cm.join("bad"), "k=v\nnovalue\n").unwrap();
        let md = t.dir.path().join("node-metadata");
        std::fs::create_dir_all(&md).unwrap();
        std::fs::write(md.join("labels.json"), r#"{"gpu": "a100", "n": 2}"#).unwrap();
        let sd = t.dir.path().join("secrets/db");
        std::fs::create_dir_all(&sd).unwrap();
        std::fs::write(sd.join("password"), "s3cr3t-pw").unwrap();
        let src = r#"
            print([config::has("a"), config::has("zz"), config::get("zz"), config::names()]);
            print([config::lines("a"), config::kv("kv")]);
            print([node::labels(), node::annotations(), node::packages()]);
            let pw = secret("db", "password");
            let tok = secret_env("TOKEN");
            print(`pw=${pw} tok=${tok}`);
            print(pw.len());
        "#;
        let mut o = opts_for(&t);
        o.allowed_secrets = vec!["db".into()];
        o.env.push(("TOKEN".into(), "tok-123".into()));
        let r = run_with(&t, ExecMode::Plan, src, o.clone()).ok();
        assert_eq!(
            r.stdout(),
            "[true, false, (), [\"a\", \"bad\", \"kv\"]]\n\
             [[\"one\", \"two\"], #{\"x\": \"1\", \"y\": \"2\"}]\n\
             [#{\"gpu\": \"a100\", \"n\": 2}, #{}, #{}]\n\
             pw=*** tok=***\n9\n"
        );
        let r = run_with(&t, ExecMode::Apply, "\nconfig::kv(\"bad\")", o.clone());
        assert_eq!(
            r.error(),
            "main.rhai:2:9: config::kv: configMap \"bad\" line 2: expected key=value, got \"novalue\""
        );
        // A secret never appears in an error, nor in the error written to stderr.
        let r = run_with(
            &t,
            ExecMode::Apply,
            "let pw = secret(\"db\", \"password\");\nfs::read(`/etc/${pw}`)",
            o.clone(),
        );
        assert_eq!(
            r.error(),
            "main.rhai:2:5: fs::read: /etc/*** does not exist"
        );
        assert!(!r.stderr().contains("s3cr3t"), "{}", r.stderr());
        let r = run_with(&t, ExecMode::Apply, r#"secret("other", "k")"#, o.clone());
        assert_eq!(
            r.error(),
            "main.rhai:1:1: secret: secret \"other\" is not in SKYHOOK_ALLOWED_SECRETS (asked for key \"k\")"
        );
        // A plan that writes a secret into a file shows it redacted.
        let r = run_with(
            &t,
            ExecMode::Plan,
            r#"fs::write("/etc/app.conf", "pw=" + secret_env("TOKEN") + "\n")"#,
            o,
        )
        .ok();
        let red = crate::host::secrets::Redactor::new();
        red.add("tok-123");
        assert!(r.report.render_text(&red).contains("+pw=***\n"));
    }

    /// A binary configMap read as text is an error naming it (not U+FFFD replacements);
    /// `config::has` still sees it.
    #[test]
    fn binary_configmap_read_as_text_is_an_error() {
        let t = TestHost::new();
        let cm = t.dir.path().join("configmaps");
        std::fs::create_dir_all(&cm).unwrap();
        std::fs::write(cm.join("blob"), b"ok\n\xff\xfe\x00").unwrap();
        let r = run(
            &t,
            ExecMode::Plan,
            "print(config::has(\"blob\"));\nconfig::get(\"blob\")",
        );
        assert_eq!(r.stdout(), "true\n");
        assert_eq!(
            r.error(),
            "main.rhai:2:9: config::get: configMap \"blob\" is not UTF-8 text (invalid byte at \
             offset 3); binary configMaps cannot be read as text"
        );
        for f in ["lines", "kv"] {
            let r = run(&t, ExecMode::Plan, &format!("config::{f}(\"blob\")"));
            assert!(
                r.error().contains("configMap \"blob\" is not UTF-8 text"),
                "{}",
                r.error()
            );
        }
    }
}
