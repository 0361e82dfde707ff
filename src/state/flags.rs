//! Step flags and the flag directory's housekeeping files (contract 6.1, 6.2).
//!
//! Layout under `<state root>/flags`: `START`, `check_results`, `<check-mode>_ALL_CHECKED`,
//! and per step `<pkg>/<ver>/<step.path>_<marker>`, the Python agent's naming, where the
//! marker may contain `/` and so add directory levels.

use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use base64::Engine as _;
use chrono::NaiveDateTime;

use super::StateError;
use crate::host::root::{AgentFiles, HostRoot};
use crate::package::{Mode, Package, Step};
use crate::pyfmt;

/// Longest file name component Linux filesystems accept, in bytes.
const NAME_MAX: usize = 255;

/// `<state root>/flags`.
pub fn flags_dir(state_root: &Path) -> PathBuf {
    state_root.join("flags")
}

/// The flag marker of a step: standard base64 (with `=` padding) of
/// `<repr(arguments)>_<repr(returncodes)>`, computed from the step as configured (before
/// `env:` substitution and upgrade versions). The Python agent's flag naming, contract 6.2.
pub fn marker(step: &Step) -> String {
    let text = format!(
        "{}_{}",
        pyfmt::repr_str_list(&step.arguments),
        pyfmt::repr_codes(&step.returncodes)
    );
    base64::engine::general_purpose::STANDARD.encode(text.as_bytes())
}

/// The host path of a step's flag: `<state root>/flags/<pkg>/<ver>/<step.path>_<marker>`.
///
/// The last part is appended as a string (as Python concatenates), so directories in
/// `step.path` and `/` in the marker become directory levels; a leading `/` in `step.path`
/// does not replace the prefix.
pub fn flag_path(state_root: &Path, pkg: &str, ver: &str, step: &Step) -> PathBuf {
    let mut p = flags_dir(state_root).join(pkg).join(ver).into_os_string();
    p.push("/");
    p.push(format!("{}_{}", step.path, marker(step)));
    PathBuf::from(p)
}

/// The content of a step flag, no trailing newline:
/// `last_run: <isoformat of now_local>\nstep_always_runs: <True|False>` (`True` when the step's
/// `idempotence` is true).
pub fn flag_content(step: &Step, now_local: NaiveDateTime) -> String {
    format!(
        "last_run: {}\nstep_always_runs: {}",
        pyfmt::isoformat(now_local),
        if step.idempotence { "True" } else { "False" }
    )
}

/// Write a step's flag atomically, creating directories (including those a marker with `/`
/// implies).
///
/// # Errors
/// [`StateError::NameTooLong`] when a component of `flag` exceeds 255 bytes (nothing is
/// written); [`StateError::Root`] on a write failure.
pub fn write_flag(
    root: &HostRoot,
    flag: &Path,
    step: &Step,
    now_local: NaiveDateTime,
) -> Result<(), StateError> {
    check_name_len(flag)?;
    AgentFiles::new(root).write_atomic(flag, flag_content(step, now_local).as_bytes(), None)?;
    Ok(())
}

/// [`write_flag`] for a run of many steps: the same file, written relative to the flag
/// directory's descriptor that `dirs` keeps for the run (see [`crate::host::root::run_dirs`]), so the
/// directory is resolved once per run instead of about six times per flag. The write is as
/// durable: `fsync` of the flag before its rename, `fsync` of the directory after it. The
/// flag is the agent's own file: it is 0644, an old flag's owner, mode and extended
/// attributes are not carried over.
///
/// # Errors
/// As [`write_flag`].
pub fn write_flag_in(
    dirs: &crate::host::root::run_dirs::RunDirs,
    root: &HostRoot,
    flag: &Path,
    step: &Step,
    now_local: NaiveDateTime,
) -> Result<(), StateError> {
    check_name_len(flag)?;
    dirs.write(
        &AgentFiles::new(root),
        flag,
        flag_content(step, now_local).as_bytes(),
    )?;
    Ok(())
}

/// [`StateError::NameTooLong`] when a component of `flag` exceeds [`NAME_MAX`] bytes.
fn check_name_len(flag: &Path) -> Result<(), StateError> {
    let longest = flag
        .components()
        .map(|c| c.as_os_str().as_bytes().len())
        .max()
        .unwrap_or(0);
    if longest > NAME_MAX {
        return Err(StateError::NameTooLong {
            path: flag.to_path_buf(),
            len: longest,
        });
    }
    Ok(())
}

/// Write the empty `<state root>/flags/START`.
///
/// # Errors
/// A write failure.
pub fn write_start(root: &HostRoot, state_root: &Path) -> Result<(), StateError> {
    AgentFiles::new(root).write_atomic(&flags_dir(state_root).join("START"), b"", None)?;
    Ok(())
}

/// The content of `check_results`: one `<step.path> <True|False>` line per step (`True` =
/// failed), joined with `\n`, no trailing newline.
pub fn check_results_content(results: &[(String, bool)]) -> String {
    results
        .iter()
        .map(|(path, failed)| format!("{path} {}", if *failed { "True" } else { "False" }))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Write `<state root>/flags/check_results` from `(step.path, failed)` pairs in configuration
/// order (see [`check_results_content`]).
///
/// # Errors
/// A write failure.
pub fn write_check_results(
    root: &HostRoot,
    state_root: &Path,
    results: &[(String, bool)],
) -> Result<(), StateError> {
    AgentFiles::new(root).write_atomic(
        &flags_dir(state_root).join("check_results"),
        check_results_content(results).as_bytes(),
        None,
    )?;
    Ok(())
}

/// `<state root>/flags/<mode>_ALL_CHECKED`.
pub fn all_checked_path(state_root: &Path, mode: Mode) -> PathBuf {
    flags_dir(state_root).join(format!("{}_ALL_CHECKED", mode.as_str()))
}

/// Write the empty `<state root>/flags/<mode>_ALL_CHECKED` (e.g. `apply-check_ALL_CHECKED`).
///
/// # Errors
/// A write failure.
pub fn set_all_checked(root: &HostRoot, state_root: &Path, mode: Mode) -> Result<(), StateError> {
    AgentFiles::new(root).write_atomic(&all_checked_path(state_root, mode), b"", None)?;
    Ok(())
}

/// Remove `<state root>/flags/<mode>_ALL_CHECKED` if present (before a check mode with steps
/// runs, contract 6.1 \[fix\]).
///
/// # Errors
/// A removal failure other than "not found".
pub fn clear_all_checked(root: &HostRoot, state_root: &Path, mode: Mode) -> Result<(), StateError> {
    AgentFiles::new(root).remove_file(&all_checked_path(state_root, mode))?;
    Ok(())
}

/// Remove a step flag (a path made by [`flag_path`]); `Ok(false)` when it did not exist.
///
/// When the marker contained `/`, the directories it introduced are removed as well once
/// empty. They are recognised by name: base64 never contains `_`, so walking up from the
/// file, every component up to and including the first one containing `_` (the
/// `<basename>_<marker head>` directory) belongs to the marker. Nothing at or above the
/// directory holding that component (`flags/<pkg>/<ver>` or a step path directory inside it)
/// is touched; a non-empty marker directory stops the walk.
///
/// # Errors
/// Removal failures other than "not found" or "directory not empty".
pub fn remove_flag(root: &HostRoot, flag: &Path) -> Result<bool, StateError> {
    let removed = AgentFiles::new(root).remove_file(flag)?;
    let mut current = flag.to_path_buf();
    while let Some(Component::Normal(name)) = current.components().next_back() {
        if name.as_bytes().contains(&b'_') {
            break;
        }
        let Some(parent) = current.parent().map(Path::to_path_buf) else {
            break;
        };
        match AgentFiles::new(root).remove_dir(&parent) {
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::DirectoryNotEmpty
                    || e.source.raw_os_error() == Some(libc::ENOTEMPTY)
                    || e.source.raw_os_error() == Some(libc::EEXIST) =>
            {
                break;
            }
            Err(e) => return Err(e.into()),
        }
        current = parent;
    }
    Ok(removed)
}

/// Remove the flag of every step of every mode of `pkg` (end of `uninstall-check`, contract
/// 7.4), with names computed from the steps as configured; flags of steps no longer in the
/// config are left alone. Returns how many flags existed and were removed.
///
/// # Errors
/// As [`remove_flag`]; stops at the first failure.
pub fn remove_package_flags(
    root: &HostRoot,
    state_root: &Path,
    pkg: &Package,
) -> Result<usize, StateError> {
    let mut removed = 0;
    for (_, step) in pkg.all_steps() {
        let flag = flag_path(state_root, &pkg.package_name, &pkg.package_version, step);
        if remove_flag(root, &flag)? {
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::package::ReturnCode;
    use chrono::NaiveDate;

    fn step(args: &[&str], codes: &[i64]) -> Step {
        Step {
            name: "foo".into(),
            path: "foo.sh".into(),
            arguments: args.iter().map(|s| s.to_string()).collect(),
            returncodes: codes.iter().map(|c| ReturnCode::int(*c)).collect(),
            on_host: true,
            idempotence: false,
            upgrade_step: false,
            env: vec![],
        }
    }

    #[test]
    fn worked_markers_of_6_2() {
        let cases: &[(&[&str], &[i64], &str)] = &[
            (&[], &[0], "W11fWzBd"),
            (&["a"], &[0], "WydhJ11fWzBd"),
            (&["a", "b"], &[0], "WydhJywgJ2InXV9bMF0="),
            (&["1", "2"], &[0, 1, 2], "WycxJywgJzInXV9bMCwgMSwgMl0="),
            (&["env:MYVAR"], &[0], "WydlbnY6TVlWQVInXV9bMF0="),
            (&["it's"], &[0, 1], "WyJpdCdzIl1fWzAsIDFd"),
            (&["?"], &[0], "Wyc/J11fWzBd"),
            (&["a\\b"], &[0], "WydhXFxiJ11fWzBd"),
            (&["tab\there"], &[0], "Wyd0YWJcdGhlcmUnXV9bMF0="),
            (&["é"], &[0], "WyfDqSddX1swXQ=="),
            (&[], &[0, 3], "W11fWzAsIDNd"),
            (&["a", "b"], &[0, 3], "WydhJywgJ2InXV9bMCwgM10="), // case 28
        ];
        for (args, codes, want) in cases {
            assert_eq!(marker(&step(args, codes)), *want, "{args:?} {codes:?}");
        }
    }

    #[test]
    fn float_code_marker() {
        let mut s = step(&[], &[]);
        s.returncodes = vec![ReturnCode {
            value: 1,
            float: true,
        }];
        // base64 of "[]_[1.0]"
        assert_eq!(marker(&s), "W11fWzEuMF0=");
    }

    #[test]
    fn flag_names_cases_20_to_23() {
        let st = Path::new("/t/state");
        let f = |args: &[&str], codes: &[i64]| flag_path(st, "demo", "1.0.0", &step(args, codes));
        // 20
        assert_eq!(
            f(&[], &[0]),
            Path::new("/t/state/flags/demo/1.0.0/foo.sh_W11fWzBd")
        );
        assert_eq!(
            f(&["a"], &[0]),
            Path::new("/t/state/flags/demo/1.0.0/foo.sh_WydhJ11fWzBd")
        );
        // 21
        let q = f(&["?"], &[0]);
        assert_eq!(
            q,
            Path::new("/t/state/flags/demo/1.0.0/foo.sh_Wyc/J11fWzBd")
        );
        assert_eq!(
            q.parent().unwrap(),
            Path::new("/t/state/flags/demo/1.0.0/foo.sh_Wyc")
        );
        // 22
        assert_eq!(
            f(&["it's"], &[0, 1]),
            Path::new("/t/state/flags/demo/1.0.0/foo.sh_WyJpdCdzIl1fWzAsIDFd")
        );
        assert_eq!(
            f(&["1", "2"], &[0, 1, 2]),
            Path::new("/t/state/flags/demo/1.0.0/foo.sh_WycxJywgJzInXV9bMCwgMSwgMl0=")
        );
        // 23
        assert_eq!(
            f(&["env:MYVAR"], &[0]),
            Path::new("/t/state/flags/demo/1.0.0/foo.sh_WydlbnY6TVlWQVInXV9bMF0=")
        );
        // a step path with directories nests
        let mut sub = step(&[], &[0]);
        sub.path = "sub/x.sh".into();
        assert_eq!(
            flag_path(st, "demo", "1.0.0", &sub),
            Path::new("/t/state/flags/demo/1.0.0/sub/x.sh_W11fWzBd")
        );
        sub.path = "/abs.sh".into();
        assert_eq!(
            flag_path(st, "demo", "1.0.0", &sub),
            Path::new("/t/state/flags/demo/1.0.0//abs.sh_W11fWzBd")
        );
    }

    #[test]
    fn content_with_and_without_micros() {
        let d = NaiveDate::from_ymd_opt(2024, 8, 28).unwrap();
        let mut s = step(&[], &[0]);
        assert_eq!(
            flag_content(&s, d.and_hms_micro_opt(12, 0, 0, 123456).unwrap()),
            "last_run: 2024-08-28T12:00:00.123456\nstep_always_runs: False"
        );
        s.idempotence = true;
        assert_eq!(
            flag_content(&s, d.and_hms_opt(12, 0, 0).unwrap()),
            "last_run: 2024-08-28T12:00:00\nstep_always_runs: True"
        );
    }

    fn root() -> (tempfile::TempDir, HostRoot) {
        let d = tempfile::tempdir().unwrap();
        let r = HostRoot::open(d.path()).unwrap();
        (d, r)
    }

    fn now() -> NaiveDateTime {
        NaiveDate::from_ymd_opt(2024, 8, 28)
            .unwrap()
            .and_hms_micro_opt(1, 2, 3, 4)
            .unwrap()
    }

    #[test]
    fn write_and_remove_nested_marker_flag() {
        let (d, r) = root();
        let st = Path::new("/var/lib/skyhook/x");
        let s = step(&["?"], &[0]);
        let flag = flag_path(st, "demo", "1.0.0", &s);
        write_flag(&r, &flag, &s, now()).unwrap();
        let on_disk = d
            .path()
            .join("var/lib/skyhook/x/flags/demo/1.0.0/foo.sh_Wyc/J11fWzBd");
        assert_eq!(
            std::fs::read_to_string(&on_disk).unwrap(),
            "last_run: 2024-08-28T01:02:03.000004\nstep_always_runs: False"
        );
        assert!(on_disk.parent().unwrap().is_dir());
        // a sibling flag keeps the version directory alive
        let plain = step(&[], &[0]);
        write_flag(&r, &flag_path(st, "demo", "1.0.0", &plain), &plain, now()).unwrap();

        assert!(remove_flag(&r, &flag).unwrap());
        let ver = d.path().join("var/lib/skyhook/x/flags/demo/1.0.0");
        assert!(
            !ver.join("foo.sh_Wyc").exists(),
            "marker directory left behind"
        );
        assert!(ver.join("foo.sh_W11fWzBd").is_file());
        assert!(!remove_flag(&r, &flag).unwrap());

        // removing the last flag leaves flags/<pkg>/<ver> in place
        assert!(remove_flag(&r, &flag_path(st, "demo", "1.0.0", &plain)).unwrap());
        assert!(ver.is_dir());
    }

    #[test]
    fn remove_flag_keeps_non_empty_marker_dir_and_step_dirs() {
        let (d, r) = root();
        let st = Path::new("/s");
        let mut a = step(&["?"], &[0]);
        a.path = "sub/x.sh".into();
        let flag = flag_path(st, "demo", "1.0.0", &a);
        write_flag(&r, &flag, &a, now()).unwrap();
        // another file inside the marker directory
        std::fs::write(d.path().join("s/flags/demo/1.0.0/sub/x.sh_Wyc/other"), "").unwrap();
        assert!(remove_flag(&r, &flag).unwrap());
        assert!(
            d.path()
                .join("s/flags/demo/1.0.0/sub/x.sh_Wyc/other")
                .exists()
        );
        std::fs::remove_file(d.path().join("s/flags/demo/1.0.0/sub/x.sh_Wyc/other")).unwrap();
        // rewrite and remove: the marker directory goes, the step path directory stays
        write_flag(&r, &flag, &a, now()).unwrap();
        assert!(remove_flag(&r, &flag).unwrap());
        assert!(!d.path().join("s/flags/demo/1.0.0/sub/x.sh_Wyc").exists());
        assert!(d.path().join("s/flags/demo/1.0.0/sub").is_dir());
    }

    #[test]
    fn over_long_name_is_a_clear_error() {
        let (d, r) = root();
        let args: Vec<&str> = std::iter::repeat_n("argument", 30).collect();
        let s = step(&args, &[0]);
        let flag = flag_path(Path::new("/s"), "demo", "1.0.0", &s);
        let e = write_flag(&r, &flag, &s, now()).unwrap_err();
        assert!(matches!(e, StateError::NameTooLong { .. }));
        assert!(
            e.to_string()
                .starts_with("step flag name too long: component of ")
        );
        assert!(!d.path().join("s").exists());
    }

    #[test]
    fn housekeeping_files() {
        let (d, r) = root();
        let st = Path::new("/s");
        write_start(&r, st).unwrap();
        assert_eq!(std::fs::read(d.path().join("s/flags/START")).unwrap(), b"");
        write_check_results(
            &r,
            st,
            &[("a_check.sh".into(), true), ("b_check.sh".into(), false)],
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(d.path().join("s/flags/check_results")).unwrap(),
            "a_check.sh True\nb_check.sh False"
        );
        set_all_checked(&r, st, Mode::PostInterruptCheck).unwrap();
        let all = d.path().join("s/flags/post-interrupt-check_ALL_CHECKED");
        assert_eq!(std::fs::read(&all).unwrap(), b"");
        clear_all_checked(&r, st, Mode::PostInterruptCheck).unwrap();
        assert!(!all.exists());
        clear_all_checked(&r, st, Mode::PostInterruptCheck).unwrap();
    }

    #[test]
    fn uninstall_removes_configured_flags_only() {
        let (d, r) = root();
        let st = Path::new("/s");
        let a = step(&["a"], &[0]);
        let q = step(&["?"], &[0]);
        let mut gone = step(&["old"], &[0]);
        gone.path = "old.sh".into();
        for s in [&a, &q, &gone] {
            write_flag(&r, &flag_path(st, "demo", "1.0.0", s), s, now()).unwrap();
        }
        let pkg = Package {
            schema_version: "v1".into(),
            package_name: "demo".into(),
            package_version: "1.0.0".into(),
            expected_config_files: vec![],
            modes: vec![
                (Mode::Apply, vec![a.clone(), q]),
                (Mode::ApplyCheck, vec![a]),
            ],
        };
        assert_eq!(remove_package_flags(&r, st, &pkg).unwrap(), 2);
        let names: Vec<_> = std::fs::read_dir(d.path().join("s/flags/demo/1.0.0"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, vec!["old.sh_WydvbGQnXV9bMF0="]);
    }
}
