//! `skyhook-run new NAME`: a new package directory that validates and runs as it is, so an
//! author starts from a working package instead of config.json boilerplate.
//!
//! NAME/ holds `config.json` (schema v1: every run mode and its check, each pair wired to one
//! `.rhai` step, since a script run as a check holds its changes back and reports them as
//! drift; `expected_config_files` = the configMap keys), `skyhook_dir/<mode>.rhai` (a small
//! commented body that plans no change), `configmaps/<key>` (empty, so that a local run finds
//! every expected file), `skyhook.yaml` (a Skyhook CR deploying the package) and `README.md`.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::package::Mode;

/// The version a new package starts at.
pub const VERSION: &str = "0.1.0";

/// Why a package could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// NAME is not usable as a package name and directory.
    #[error(
        "package name {0:?}: use letters, digits, '-', '_' and '.', starting with a letter or digit"
    )]
    Name(String),
    /// NAME has usable characters but breaks a rule of the names made from it (the CR's
    /// Kubernetes name, the image name).
    #[error("package name {name:?}: {why}")]
    NameRule {
        /// The name as given.
        name: String,
        /// What is wrong.
        why: &'static str,
    },
    /// A `--configmap` key is not usable as a configMap file name, or is given twice.
    #[error("configMap key {key:?}: {why}")]
    ConfigMapKey {
        /// The key as given.
        key: String,
        /// What is wrong.
        why: &'static str,
    },
    /// The directory exists: nothing is written over it.
    #[error("{}: already exists (nothing written)", .0.display())]
    Exists(PathBuf),
    /// Writing a file failed (what was written is removed again).
    #[error("cannot write {}", path.display())]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Write the package `name` into `base/name` with `configmaps` as its expected configMap
/// files; returns the directory written.
///
/// # Errors
/// [`ScaffoldError::Name`] and [`ScaffoldError::ConfigMapKey`] for bad input and
/// [`ScaffoldError::Exists`] for an existing directory, before anything is written;
/// [`ScaffoldError::Write`] when a write fails (the new directory is removed again).
pub fn write(base: &Path, name: &str, configmaps: &[String]) -> Result<PathBuf, ScaffoldError> {
    check_name(name)?;
    for (i, key) in configmaps.iter().enumerate() {
        check_key(key)?;
        if configmaps[..i].contains(key) {
            return Err(ScaffoldError::ConfigMapKey {
                key: key.clone(),
                why: "given twice",
            });
        }
    }
    let dir = base.join(name);
    // `create_dir` fails on anything already there (a file, a symlink, a directory), so an
    // existing path is never written into, whatever appears between a check and the write.
    if let Err(source) = std::fs::create_dir(&dir) {
        return Err(if source.kind() == std::io::ErrorKind::AlreadyExists {
            ScaffoldError::Exists(dir)
        } else {
            ScaffoldError::Write { path: dir, source }
        });
    }
    match fill(&dir, name, configmaps) {
        Ok(()) => Ok(dir),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            Err(e)
        }
    }
}

/// The step file of `mode` and of its check: `apply.rhai`, `post_interrupt.rhai`, ...
fn step_file(mode: Mode) -> String {
    format!("{}.rhai", mode.as_str().replace('-', "_"))
}

fn check_name(name: &str) -> Result<(), ScaffoldError> {
    let ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !ok {
        return Err(ScaffoldError::Name(name.to_string()));
    }
    let why = if name.len() > 63 {
        "longer than 63 characters (the limit of a Kubernetes name)"
    } else if name.ends_with(['-', '_', '.']) {
        "must end with a letter or digit (the Skyhook CR's name and the image name are made \
         from it, and may not end in '-', '_' or '.')"
    } else {
        return Ok(());
    };
    Err(ScaffoldError::NameRule {
        name: name.to_string(),
        why,
    })
}

/// `s` as a double-quoted YAML scalar: a name such as `123`, `true`, `yes`, `null` or `1.0`
/// stays a string (JSON string syntax is YAML's double-quoted style).
fn yaml_str(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

fn check_key(key: &str) -> Result<(), ScaffoldError> {
    let why = if key.is_empty() {
        "empty"
    } else if key.len() > 253 {
        "longer than 253 characters"
    } else if key == "." || key == ".." {
        "not a file name"
    } else if key.starts_with('.') {
        "starts with '.': config:: does not list or read such names, so no step would see it"
    } else if !key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        "use letters, digits, '-', '_' and '.' (a configMap key)"
    } else {
        return Ok(());
    };
    Err(ScaffoldError::ConfigMapKey {
        key: key.to_string(),
        why,
    })
}

fn fill(dir: &Path, name: &str, configmaps: &[String]) -> Result<(), ScaffoldError> {
    let put = |path: PathBuf, text: &str| {
        std::fs::write(&path, text).map_err(|source| ScaffoldError::Write { path, source })
    };
    let mkdir = |path: PathBuf| {
        std::fs::create_dir(&path).map_err(|source| ScaffoldError::Write { path, source })
    };
    mkdir(dir.join("skyhook_dir"))?;
    mkdir(dir.join("configmaps"))?;
    put(dir.join("config.json"), &config_json(name, configmaps))?;
    for mode in Mode::RUN {
        put(
            dir.join("skyhook_dir").join(step_file(mode)),
            &step_body(name, mode, configmaps),
        )?;
    }
    for key in configmaps {
        put(dir.join("configmaps").join(key), "")?;
    }
    put(dir.join("skyhook.yaml"), &skyhook_cr(name, configmaps))?;
    put(dir.join("README.md"), &readme(name, configmaps))?;
    Ok(())
}

/// config.json: the step of each mode on one line, in the key order of the packaging tools.
fn config_json(name: &str, configmaps: &[String]) -> String {
    let head = json!({
        "schema_version": "v1",
        "root_dir": "/",
        "expected_config_files": configmaps,
        "package_name": name,
        "package_version": VERSION,
    });
    let mut text = String::from("{\n");
    if let Some(fields) = head.as_object() {
        for (k, v) in fields {
            text.push_str(&format!("  {}: {v},\n", json!(k)));
        }
    }
    text.push_str("  \"modes\": {\n");
    let modes = modes();
    for (i, mode) in modes.iter().enumerate() {
        let step = json!({
            "name": mode.as_str().replace('-', "_"),
            "path": step_file(mode.run_mode()),
            "arguments": [],
            "returncodes": [0],
            "on_host": true,
            "idempotence": false,
            "upgrade_step": matches!(mode, Mode::Upgrade | Mode::UpgradeCheck),
        });
        let comma = if i + 1 < modes.len() { "," } else { "" };
        text.push_str(&format!("    \"{}\": [{step}]{comma}\n", mode.as_str()));
    }
    text.push_str("  }\n}\n");
    text
}

/// The modes of a new package in the order a reader expects them: apply, config, upgrade,
/// uninstall, post-interrupt, each followed by its check.
pub fn modes() -> Vec<Mode> {
    [
        Mode::Apply,
        Mode::Config,
        Mode::Upgrade,
        Mode::Uninstall,
        Mode::PostInterrupt,
    ]
    .iter()
    .flat_map(|m| [*m, m.check_mode().unwrap_or(*m)])
    .collect()
}

/// A step that plans no change, with comments saying where its work goes.
fn step_body(name: &str, mode: Mode, configmaps: &[String]) -> String {
    let m = mode.as_str();
    let what = match mode {
        Mode::Apply => "install what the package provides (packages, files, services)",
        Mode::Config => "apply the configMaps (re-run when one of them changes)",
        Mode::Upgrade => "move a node from the previous version (env(\"PREVIOUS_VERSION\"))",
        Mode::Uninstall => "remove what apply installed",
        _ => "finish the work an interrupt (a reboot, a service restart) made possible",
    };
    let mut s = format!(
        "// {m}: {what}.\n\
         //\n\
         // This script is both the `{m}` step and the `{m}-check` step: run as a check, its\n\
         // changes are held back and anything it would still change is drift (the check fails).\n\
         // So write it as the state the node should be in, with ensure-style calls, e.g.\n\
         //     fs::ensure_line(\"/etc/example.conf\", \"key=value\");\n\
         // The host functions: docs/host-api.md. Try it without changing anything, from the\n\
         // directory that holds {name}/ (the root is any directory, e.g. an empty one):\n\
         //     mkdir -p /tmp/node-copy\n\
         //     skyhook-run --package {name} --mode {m} --root /tmp/node-copy\n\
         \n"
    );
    if mode == Mode::Config && !configmaps.is_empty() {
        s.push_str(
            "// The package's configMaps (expected_config_files), by name.\n\
             for name in config::names() {\n    \
             print(`configMap ${name}: ${config::lines(name).len()} line(s)`);\n\
             }\n",
        );
    } else {
        s.push_str(&format!("print(\"{m}: nothing to do yet\");\n"));
    }
    s
}

/// A Skyhook CR deploying the package, shaped like `examples/*/skyhook.yaml`.
fn skyhook_cr(name: &str, configmaps: &[String]) -> String {
    let resource = name.to_ascii_lowercase().replace(['_', '.'], "-");
    let (q_name, q_resource) = (yaml_str(name), yaml_str(&resource));
    let q_label = yaml_str(&format!("skyhook.example.com/{resource}"));
    let q_image = yaml_str(&format!("registry.example.com/skyhook/{resource}"));
    let mut s = format!(
        "# Deploys the {name} package (skyhook-run new). Build an image holding config.json and\n\
         # skyhook_dir/ in /skyhook-package, where the agent copies a package from\n\
         # (SKYHOOK_DATA_DIR, docs/agent.md), push it, and set `image` below.\n\
         apiVersion: skyhook.nvidia.com/v1alpha1\n\
         kind: Skyhook\n\
         metadata:\n  name: {q_resource}\n\
         spec:\n  nodeSelectors:\n    matchLabels:\n      {q_label}: \"true\"\n  \
         packages:\n    {q_name}:\n      version: \"{VERSION}\"\n      \
         image: {q_image}\n"
    );
    if !configmaps.is_empty() {
        s.push_str("      configMap:\n");
        for key in configmaps {
            s.push_str(&format!("        {}: \"\"\n", yaml_str(key)));
        }
    }
    s
}

fn readme(name: &str, configmaps: &[String]) -> String {
    let cms = if configmaps.is_empty() {
        "none (add names to `expected_config_files` and files to `configmaps/`)".to_string()
    } else {
        configmaps
            .iter()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "# {name}\n\
         \n\
         A Skyhook package written by `skyhook-run new`.\n\
         \n\
         - `config.json`: every mode and its check; each pair runs one `.rhai` step of\n  \
         `skyhook_dir/` (as a check, the step's changes are held back and reported as drift).\n\
         - `skyhook_dir/*.rhai`: the steps; each plans nothing yet.\n\
         - `configmaps/`: the configMap files used by local runs: {cms}.\n\
         - `skyhook.yaml`: a Skyhook CR that deploys the package.\n\
         \n\
         Check and try it:\n\
         \n\
         ```sh\n\
         skyhook-agent validate {name}/config.json\n\
         skyhook-run check {name}/skyhook_dir/*.rhai\n\
         mkdir -p /tmp/node-copy   # the host root: an empty directory will do\n\
         skyhook-run --package {name} --mode apply --root /tmp/node-copy\n\
         ```\n"
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::local::PackageRun;
    use crate::mode::Console;
    use crate::script::lint::{Checker, check_step};
    use crate::script::{CaptureOutput, ModuleStore, ScriptEngine};

    fn new_package(configmaps: &[&str]) -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let keys: Vec<String> = configmaps.iter().map(|k| k.to_string()).collect();
        let dir = write(d.path(), "demo", &keys).unwrap();
        assert_eq!(dir, d.path().join("demo"));
        (d, dir)
    }

    /// Every mode and its check, each pair on one step file; the configMap keys expected.
    #[test]
    fn config_json_validates_and_wires_every_mode_and_its_check() {
        let (_d, dir) = new_package(&["settings.conf", "limits.conf"]);
        let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(
            crate::package::schema::validate_v1(&doc)
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            doc["expected_config_files"],
            json!(["settings.conf", "limits.conf"])
        );
        let wired: Vec<(String, String)> = doc["modes"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(m, steps)| (m.clone(), steps[0]["path"].as_str().unwrap().to_string()))
            .collect();
        let expect: Vec<(String, String)> = [
            ("apply", "apply"),
            ("apply-check", "apply"),
            ("config", "config"),
            ("config-check", "config"),
            ("upgrade", "upgrade"),
            ("upgrade-check", "upgrade"),
            ("uninstall", "uninstall"),
            ("uninstall-check", "uninstall"),
            ("post-interrupt", "post_interrupt"),
            ("post-interrupt-check", "post_interrupt"),
        ]
        .iter()
        .map(|(m, f)| (m.to_string(), format!("{f}.rhai")))
        .collect();
        assert_eq!(wired, expect);
        // the agent's `validate` (schema, step rules, step files, `.rhai` compile and lint)
        let console = Console::with_writers(Box::new(std::io::sink()), Box::new(std::io::sink()));
        assert!(crate::agent::validate(&dir.join("config.json"), &console));
        let cms: Vec<_> = ["limits.conf", "settings.conf"]
            .iter()
            .map(|k| std::fs::read(dir.join("configmaps").join(k)).unwrap())
            .collect();
        assert_eq!(cms, vec![Vec::<u8>::new(), Vec::new()]);
        let cr = std::fs::read_to_string(dir.join("skyhook.yaml")).unwrap();
        let cr: serde_json::Value = serde_yaml_ng::from_str(&cr).unwrap();
        assert_eq!(cr["kind"], "Skyhook");
        assert_eq!(cr["spec"]["packages"]["demo"]["version"], VERSION);
        assert_eq!(
            cr["spec"]["packages"]["demo"]["configMap"],
            json!({"settings.conf": "", "limits.conf": ""})
        );
        assert!(
            std::fs::read_to_string(dir.join("README.md"))
                .unwrap()
                .starts_with("# demo\n")
        );
    }

    /// What `skyhook-run check` checks: each step compiles and has no finding at all.
    #[test]
    fn every_step_passes_the_checker() {
        let (_d, dir) = new_package(&["settings.conf"]);
        let engine = ScriptEngine::default();
        let checker = Checker::new();
        let steps = dir.join("skyhook_dir");
        let mut names: Vec<String> = Vec::new();
        for entry in std::fs::read_dir(&steps).unwrap() {
            let path = entry.unwrap().path();
            let store = Arc::new(ModuleStore::new(&steps));
            let (_, found) = check_step(&engine, &checker, &path, store).unwrap();
            assert!(found.is_empty(), "{}: {found:?}", path.display());
            names.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
        names.sort();
        assert_eq!(
            names,
            [
                "apply.rhai",
                "config.rhai",
                "post_interrupt.rhai",
                "uninstall.rhai",
                "upgrade.rhai"
            ]
        );
    }

    /// A dry run of each mode succeeds and plans nothing; the config step lists the
    /// configMaps.
    #[test]
    fn a_dry_run_of_every_mode_succeeds_and_changes_nothing() {
        let (d, dir) = new_package(&["settings.conf"]);
        std::fs::write(dir.join("configmaps/settings.conf"), "a=1\nb=2\n").unwrap();
        let root = d.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let engine = ScriptEngine::default();
        for mode in modes() {
            let out = Arc::new(CaptureOutput::new());
            let plan = PackageRun {
                dir: dir.clone(),
                root: root.clone(),
                mode,
                configmaps: None,
                env: vec![],
                capture: None,
                skyhook_cr: None,
                diffs: false,
            }
            .plan(&engine, out.clone())
            .unwrap();
            assert!(plan.ok(), "{}: {}", mode.as_str(), plan.render_text());
            assert_eq!(plan.total().changes.len(), 0, "{}", mode.as_str());
            let said = String::from_utf8(out.stdout_bytes()).unwrap();
            let expect = match mode {
                Mode::Config | Mode::ConfigCheck => "configMap settings.conf: 2 line(s)\n".into(),
                m => format!("{}: nothing to do yet\n", m.run_mode().as_str()),
            };
            assert_eq!(said, expect, "{}", mode.as_str());
        }
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0);
    }

    /// An existing NAME (directory, file or symlink) is refused and left as it was.
    #[test]
    fn an_existing_name_is_refused_and_left_alone() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("dir")).unwrap();
        std::fs::write(d.path().join("dir/keep"), "x").unwrap();
        std::fs::write(d.path().join("file"), "y").unwrap();
        std::os::unix::fs::symlink("/nonexistent", d.path().join("link")).unwrap();
        for name in ["dir", "file", "link"] {
            let e = write(d.path(), name, &[]).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "{}: already exists (nothing written)",
                    d.path().join(name).display()
                )
            );
        }
        assert_eq!(std::fs::read_dir(d.path().join("dir")).unwrap().count(), 1);
        assert_eq!(std::fs::read_to_string(d.path().join("file")).unwrap(), "y");
    }

    /// The CR keeps every name a string, whatever YAML would make of it unquoted (`new 123`
    /// wrote `name: 123` and the packages key 123, integers; `yes`, `true`, `null`, `1.0`
    /// likewise).
    #[test]
    fn skyhook_yaml_quotes_names_and_keys() {
        let d = tempfile::tempdir().unwrap();
        for name in ["123", "true", "yes", "null", "1.0", "0x1"] {
            let keys: Vec<String> = ["yes", "null", "1.0", "true"].map(String::from).to_vec();
            let dir = write(d.path(), name, &keys).unwrap();
            let text = std::fs::read_to_string(dir.join("skyhook.yaml")).unwrap();
            let resource = name.replace('.', "-");
            assert!(
                text.contains(&format!("  name: \"{resource}\"\n")),
                "{text}"
            );
            assert!(text.contains(&format!("\n    \"{name}\":\n")), "{text}");
            assert!(text.contains("\n        \"yes\": \"\"\n"), "{text}");
            let cr: serde_json::Value = serde_yaml_ng::from_str(&text).unwrap();
            assert_eq!(cr["metadata"]["name"], json!(resource), "{text}");
            assert_eq!(cr["spec"]["packages"][name]["version"], VERSION, "{text}");
            assert_eq!(
                cr["spec"]["packages"][name]["image"],
                json!(format!("registry.example.com/skyhook/{resource}"))
            );
            assert_eq!(
                cr["spec"]["packages"][name]["configMap"],
                json!({"yes": "", "null": "", "1.0": "", "true": ""})
            );
        }
    }

    /// Names whose CR and image names would end in '-' and names over 63 characters are
    /// refused with the rule they break (the 64-character name was told to use letters);
    /// configMap keys starting with '.' are refused (config:: never shows them to a step).
    #[test]
    fn names_and_keys_that_break_a_rule_say_which() {
        let d = tempfile::tempdir().unwrap();
        for name in ["x_", "x.", "x-"] {
            match write(d.path(), name, &[]).unwrap_err() {
                ScaffoldError::NameRule { why, .. } => {
                    assert!(why.starts_with("must end with a letter or digit"), "{why}")
                }
                e => panic!("{name}: {e}"),
            }
        }
        let long = "a".repeat(64);
        let e = write(d.path(), &long, &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "package name {long:?}: longer than 63 characters (the limit of a Kubernetes name)"
            )
        );
        assert!(write(d.path(), &"a".repeat(63), &[]).is_ok());
        let e = write(d.path(), "demo", &[".env".to_string()]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "configMap key \".env\": starts with '.': config:: does not list or read such \
             names, so no step would see it"
        );
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    /// The commands in the step comments and the README work where they say (the step
    /// comment said `--package .`, which fails from skyhook_dir/ where the comment is; the
    /// README's root did not exist).
    #[test]
    fn the_commands_given_work_from_where_they_say() {
        let (_d, dir) = new_package(&[]);
        let step = std::fs::read_to_string(dir.join("skyhook_dir/apply.rhai")).unwrap();
        assert!(
            step.contains(
                "// directory that holds demo/ (the root is any directory, e.g. an empty one):\n\
                 //     mkdir -p /tmp/node-copy\n\
                 //     skyhook-run --package demo --mode apply --root /tmp/node-copy\n"
            ),
            "{step}"
        );
        // docs/deploy.md, which the CR's comment cited, builds only the agent image
        let cr = std::fs::read_to_string(dir.join("skyhook.yaml")).unwrap();
        assert!(
            cr.starts_with(
                "# Deploys the demo package (skyhook-run new). Build an image holding config.json \
                 and\n# skyhook_dir/ in /skyhook-package, where the agent copies a package from\n"
            ),
            "{cr}"
        );
        let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
        assert!(
            readme.contains(
                "mkdir -p /tmp/node-copy   # the host root: an empty directory will do\n\
                 skyhook-run --package demo --mode apply --root /tmp/node-copy\n"
            ),
            "{readme}"
        );
    }

    #[test]
    fn bad_names_and_keys_are_refused_before_anything_is_written() {
        let d = tempfile::tempdir().unwrap();
        for name in ["", "../x", "a/b", ".hidden", "-x", "a b"] {
            let e = write(d.path(), name, &[]).unwrap_err();
            assert!(matches!(e, ScaffoldError::Name(_)), "{name}: {e}");
        }
        for (keys, why) in [
            (
                vec!["a/b"],
                "use letters, digits, '-', '_' and '.' (a configMap key)",
            ),
            (vec![".."], "not a file name"),
            (vec![""], "empty"),
            (vec!["a", "a"], "given twice"),
        ] {
            let keys: Vec<String> = keys.into_iter().map(String::from).collect();
            match write(d.path(), "demo", &keys).unwrap_err() {
                ScaffoldError::ConfigMapKey { why: w, .. } => assert_eq!(w, why),
                e => panic!("{keys:?}: {e}"),
            }
        }
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }
}
