//! The archive reader: `host::files::archive::extract` in apply mode on a throwaway host root,
//! the input written as `/in/archive` (tar, gzip, xz or zip, told apart by its first bytes,
//! as `fs::extract` does) and unpacked into `/dest`, with small limits (1000 entries,
//! 4 MiB). Invariants beyond "no panic, no hang": nothing outside `/dest` changes (the root
//! holds only `/in/archive`, `/dest` and the agent's own `/var/lib/skyhook`, whose staging
//! is gone after the call); every symlink the call leaves in `/dest` resolves inside it
//! (followed on disk as the kernel would); a plan of an accepted archive lists only paths
//! inside `/dest`; a refusal is one line.
#![no_main]

use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use skyhook::host::files::archive::{ExtractOptions, Extracted, extract};
use skyhook::host::root::HostRoot;
use skyhook::host::{ExecMode, Host, HostOptions};

/// The throwaway root, on tmpfs when there is one (the apply fsyncs every file).
fn root() -> &'static PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let base = Path::new("/dev/shm");
        let dir = if base.is_dir() {
            tempfile::tempdir_in(base)
        } else {
            tempfile::tempdir()
        };
        let dir = dir.expect("temp dir").keep();
        std::fs::create_dir_all(dir.join("in")).expect("in");
        dir
    })
}

/// Every path below `dir` (relative to `base`), not following symlinks.
fn walk(base: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        out.push(p.strip_prefix(base).expect("below base").to_path_buf());
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            walk(base, &p, out);
        }
    }
}

/// Follow the symlink at `dest/rel` as the kernel would, on disk: `Err` when a `..` or an
/// absolute target leaves `dest` on the way.
fn resolve(dest: &Path, at: Vec<std::ffi::OsString>, target: &Path, hops: &mut u32) -> Result<Vec<std::ffi::OsString>, String> {
    let mut at = at;
    for c in target.components() {
        match c {
            Component::RootDir | Component::Prefix(_) => return Err(format!("absolute {target:?}")),
            Component::CurDir => {}
            Component::ParentDir => {
                if at.pop().is_none() {
                    return Err(format!("{target:?} climbs out"));
                }
            }
            Component::Normal(n) => {
                let mut p: PathBuf = dest.to_path_buf();
                p.extend(&at);
                p.push(n);
                match std::fs::read_link(&p) {
                    Ok(t) => {
                        *hops += 1;
                        if *hops > 40 {
                            return Ok(at); // a loop: the kernel stops it (ELOOP)
                        }
                        at = resolve(dest, at, &t, hops)?;
                    }
                    Err(_) => at.push(n.to_os_string()),
                }
            }
        }
    }
    Ok(at)
}

fuzz_target!(|data: &[u8]| {
    let root = root();
    let dest = root.join("dest");
    let _ = std::fs::remove_dir_all(&dest);
    let _ = std::fs::remove_dir_all(root.join("var"));
    std::fs::write(root.join("in/archive"), data).expect("write the archive");
    let o = ExtractOptions {
        strip_components: 0,
        max_files: 1000,
        max_bytes: 4 << 20,
    };
    // The plan: an accepted archive's listing names only paths inside /dest.
    let mut h = Host::new(
        HostRoot::open(root).expect("open the root"),
        ExecMode::Plan,
        HostOptions::default(),
    );
    let planned = extract(&mut h, "/in/archive", "/dest", &o);
    let report = h.finish().expect("a plan's finish");
    if planned.is_ok() {
        for c in &report.changes {
            assert!(
                c.target == "/dest" || c.target.starts_with("/dest/"),
                "the plan lists {} outside /dest",
                c.target
            );
        }
    }
    let mut h = Host::new(
        HostRoot::open(root).expect("open the root"),
        ExecMode::Apply,
        HostOptions::default(),
    );
    let r = extract(&mut h, "/in/archive", "/dest", &o);
    let _ = h.finish();
    match &r {
        Ok(Extracted::Done(_)) => {}
        Ok(Extracted::Unknown) => panic!("an archive on disk reported as unknown"),
        Err(e) => {
            let line = skyhook::chain::render(e);
            assert!(!line.contains('\n'), "a refusal over two lines: {line}");
        }
    }
    // Nothing outside /dest: /in/archive, and the agent's own directory (locks only).
    let mut all = Vec::new();
    walk(root, root, &mut all);
    for p in &all {
        let ok = p.starts_with("dest")
            || p == Path::new("in")
            || p == Path::new("in/archive")
            || [
                "var",
                "var/lib",
                "var/lib/skyhook",
                "var/lib/skyhook/.locks",
            ]
            .iter()
            .any(|a| p == Path::new(a))
            || p.starts_with("var/lib/skyhook/.locks/");
        assert!(ok, "{} written outside /dest ({r:?})", p.display());
    }
    // Every symlink left in /dest resolves inside it.
    for p in all.iter().filter(|p| p.starts_with("dest")) {
        let full = root.join(p);
        if let Ok(target) = std::fs::read_link(&full) {
            let rel = p.strip_prefix("dest").expect("below dest");
            let parent: Vec<_> = rel
                .parent()
                .map(|q| q.iter().map(|c| c.to_os_string()).collect())
                .unwrap_or_default();
            if let Err(why) = resolve(&dest, parent, &target, &mut 0) {
                panic!("the link {} leaves /dest: {why}", p.display());
            }
        }
    }
});
