//! Directories the agent writes into: refused before `START` when a dangling symlink is on
//! their way.

use std::path::Path;

use crate::host::root::HostRoot;

use super::StateError;

/// Fail with [`StateError::DanglingSymlink`] when the directory `dir` (a host path) or one of
/// its parents is a symlink whose target does not exist, so a run stops before `START`
/// naming the link instead of failing later with "File exists".
///
/// # Errors
/// The dangling symlink; resolution failures.
pub fn check_not_dangling(
    root: &HostRoot,
    dir: &Path,
    what: &'static str,
) -> Result<(), StateError> {
    // One openat2 that meets no symlink settles it (the usual case); a symlink on the way,
    // dangling or not, is found and worded by the walk.
    if root.no_symlink_on_the_way(dir) {
        return Ok(());
    }
    for p in dir.ancestors() {
        let is_link = root
            .symlink_metadata(p)?
            .is_some_and(|m| m.file_type().is_symlink());
        if is_link && root.metadata(p)?.is_none() {
            return Err(StateError::DanglingSymlink {
                what,
                path: dir.to_path_buf(),
                link: p.to_path_buf(),
                target: root.read_link(p)?,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;
    use std::path::Path;

    use super::check_not_dangling;
    use crate::host::root::HostRoot;

    /// The one-openat2 answer and the walk agree: absent or plain directories pass at once,
    /// a symlink on the way is walked (a live one passes, a dangling one at any depth is
    /// named with its target).
    #[test]
    fn dangling_symlinks_are_named_at_any_depth_and_live_ones_pass() {
        let d = tempfile::tempdir().unwrap();
        let r = HostRoot::open(d.path()).unwrap();
        let check = |dir: &str| {
            check_not_dangling(&r, Path::new(dir), "flags directory").map_err(|e| e.to_string())
        };
        std::fs::create_dir_all(d.path().join("real/flags/pkg")).unwrap();
        std::fs::create_dir_all(d.path().join("plain/a")).unwrap();
        symlink("/real", d.path().join("live")).unwrap();
        symlink("/gone/x", d.path().join("dead")).unwrap();
        symlink("flags", d.path().join("real/rel")).unwrap();
        symlink("../nowhere", d.path().join("real/flags/deadrel")).unwrap();
        assert!(r.no_symlink_on_the_way(Path::new("/plain/a")));
        assert!(r.no_symlink_on_the_way(Path::new("/plain/missing/deeper")));
        assert!(!r.no_symlink_on_the_way(Path::new("/live/flags")));
        assert!(!r.no_symlink_on_the_way(Path::new("/dead/x")));
        for ok in [
            "/plain/a",
            "/plain/missing/deeper",
            "/absent",
            "/live/flags/pkg",
            "/live/rel/pkg/missing",
            "/",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        for (dir, link, target) in [
            ("/dead", "/dead", "/gone/x"),
            ("/dead/flags/pkg", "/dead", "/gone/x"),
            (
                "/live/flags/deadrel/pkg",
                "/live/flags/deadrel",
                "../nowhere",
            ),
        ] {
            assert_eq!(
                check(dir),
                Err(format!(
                    "the flags directory {dir} cannot be used: {link} is a dangling symlink (to {target}); create its target or remove the link"
                )),
                "{dir}"
            );
        }
    }
}
