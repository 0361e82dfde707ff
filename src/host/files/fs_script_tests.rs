//! The `fs` rows' tests through Rhai.

pub(crate) mod tests {
    use std::path::Path;

    use crate::host::effects::report::ExecMode;
    use crate::host::testutil::TestHost;
    use crate::script::host_api::tests::*;

    /// One call of each function of this file, for
    /// [`crate::script::host_api::tests::declared_effects_are_the_submitted_ones`]: in the root that test
    /// prepares, each call of a function that submits effects changes something.
    pub(crate) const SAMPLES: &[&str] = &[
        r#"fs::exists("/etc/a.conf")"#,
        r#"fs::is_file("/etc/a.conf")"#,
        r#"fs::is_dir("/etc")"#,
        r#"fs::read("/etc/a.conf")"#,
        r#"fs::read_or("/etc/none", "d")"#,
        r#"fs::list("/etc")"#,
        r#"fs::glob("/etc/*.conf")"#,
        r#"fs::stat("/etc/a.conf")"#,
        r#"fs::realpath("/etc/../etc/a.conf")"#,
        r#"fs::write("/etc/new/b.conf", "b\n")"#,
        r#"fs::write("/etc/a.conf", "a\n", #{mode: 0o600})"#,
        r#"fs::append("/etc/a.conf", "y\n")"#,
        r#"fs::ensure_line("/etc/a.conf", "y")"#,
        r#"fs::ensure_line("/etc/a.conf", "x=2", #{regex: "^x"})"#,
        r#"fs::remove_line("/etc/a.conf", "^x")"#,
        r#"fs::ensure_block("/etc/a.conf", "b", "z")"#,
        r#"fs::remove_block("/etc/blocks.conf", "old")"#,
        r#"fs::mkdir("/opt/d")"#,
        r#"fs::mkdir("/opt/d", 0o700)"#,
        r#"fs::remove("/etc/a.conf")"#,
        r#"fs::remove_all("/srv/tree")"#,
        r#"fs::copy("/etc/a.conf", "/etc/c.conf")"#,
        r#"fs::copy("/etc/a.conf", "/etc/c.conf", #{mode: 0o600})"#,
        r#"fs::copy_tree("/srv/tree", "/srv/copy")"#,
        r#"fs::copy_tree("/srv/tree", "/srv/copy", #{max_files: 10})"#,
        r#"fs::extract("/srv/a.tar", "/srv/x")"#,
        r#"fs::extract("/srv/a.tar", "/srv/x", #{strip_components: 0})"#,
        r#"fs::chmod("/etc/a.conf", 0o600)"#,
        r#"fs::chown("/etc/a.conf", 1000, ())"#,
        r#"fs::symlink("/etc/a.conf", "/etc/l.conf")"#,
        r#"fs::fetch("{URL}", "/opt/bin/tool", #{sha256: "{SHA}"})"#,
    ];

    #[test]
    fn fs_mutations_all_modes() {
        let t = TestHost::new();
        t.file(
            "/etc/passwd",
            "root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n",
        );
        t.file("/etc/group", "root:x:0:\nnogroup:x:65534:\n");
        t.file(
            "/etc/app/old.conf",
            "x=1\nkeep\nx=2\n# BEGIN skyhook gone\nz\n# END skyhook gone\n",
        );
        t.file("/etc/app/keep.conf", "k\n");
        t.file("/etc/app/r.conf", "a=0\nz\na=1\n");
        t.file("/etc/app/trash", "t");
        t.file("/etc/app/tree/a/b", "b");
        let plan = all_modes(
            &t,
            &[
                r#"fs::mkdir("/etc/app/sub")"#,
                r#"fs::mkdir("/etc/app/d", 0o700)"#,
                r#"fs::write("/etc/app/a.conf", "a=1\n")"#,
                r#"fs::write("/etc/app/b.conf", "b\n", #{mode: "0600", owner: "nobody", group: 65534})"#,
                r#"fs::ensure_line("/etc/app/l.conf", "b=2")"#,
                r#"fs::ensure_line("/etc/app/r.conf", "a=3", #{regex: "^a=", create: false})"#,
                r#"fs::remove_line("/etc/app/old.conf", "^x=")"#,
                r#"fs::ensure_block("/etc/app/l.conf", "net", "c=1\nd=2")"#,
                r#"fs::remove_block("/etc/app/old.conf", "gone")"#,
                r#"fs::copy("/etc/app/a.conf", "/etc/app/c.conf")"#,
                r#"fs::copy("/etc/app/keep.conf", "/etc/app/e.conf", #{mode: 0o640})"#,
                r#"fs::chmod("/etc/app/keep.conf", "0640")"#,
                r#"fs::chown("/etc/app/keep.conf", "nobody", ())"#,
                r#"fs::symlink("a.conf", "/etc/app/link")"#,
                r#"fs::remove("/etc/app/trash")"#,
                r#"fs::remove_all("/etc/app/tree")"#,
            ],
        );
        // The plan lists the diff of a written file.
        let a = plan
            .changes
            .iter()
            .find(|c| c.target == "/etc/app/a.conf" && c.diff.is_some())
            .expect("a diff for a.conf");
        assert!(a.diff.as_ref().unwrap().contains("+a=1\n"), "{a:?}");
        assert_eq!(t.read("/etc/app/a.conf"), "a=1\n");
        assert_eq!(
            t.read("/etc/app/l.conf"),
            "b=2\n# BEGIN skyhook net\nc=1\nd=2\n# END skyhook net\n"
        );
        assert_eq!(t.read("/etc/app/r.conf"), "a=0\nz\na=3\n");
        assert_eq!(t.read("/etc/app/old.conf"), "keep\n");
        assert_eq!(t.read("/etc/app/c.conf"), t.read("/etc/app/a.conf"));
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(t.p("/etc/app/b.conf")).unwrap();
        assert_eq!((m.mode() & 0o7777, m.uid(), m.gid()), (0o600, 65534, 65534));
        let m = std::fs::metadata(t.p("/etc/app/keep.conf")).unwrap();
        assert_eq!((m.mode() & 0o7777, m.uid()), (0o640, 65534));
        assert_eq!(
            std::fs::read_link(t.p("/etc/app/link")).unwrap(),
            Path::new("a.conf")
        );
        assert!(!t.p("/etc/app/tree").exists() && !t.p("/etc/app/trash").exists());
    }

    #[test]
    fn fs_append_is_a_change_every_time_and_plans_nothing() {
        let t = TestHost::new();
        let src =
            r#"print(fs::append("/var/log/x", "line\n")); print(fs::append("/var/log/x", ""));"#;
        let before = snapshot(&t);
        let p = run(&t, ExecMode::Plan, src).ok();
        assert_eq!(snapshot(&t), before);
        assert_eq!(p.stdout(), "true\nfalse\n");
        run(&t, ExecMode::Apply, src).ok();
        let r = run(&t, ExecMode::Apply, src).ok();
        assert_eq!(r.stdout(), "true\nfalse\n");
        assert_eq!(t.read("/var/log/x"), "line\nline\n");
    }

    #[test]
    fn fs_queries_see_planned_writes() {
        let t = TestHost::new();
        t.file("/etc/d/b", "bee");
        t.file("/etc/d/a.conf", "A");
        let src = r#"
            fs::write("/etc/d/c.conf", "planned");
            let st = fs::stat("/etc/d/b");
            print([fs::exists("/etc/d/c.conf"), fs::is_file("/etc/d/b"), fs::is_dir("/etc/d"),
                   fs::exists("/nope")]);
            print([fs::read("/etc/d/c.conf"), fs::read_or("/nope", "dflt")]);
            print(fs::list("/etc/d"));
            print(fs::glob("/etc/*/*.conf"));
            print([st.kind, st.size, st.mode]);
        "#;
        let expect = "[true, true, true, false]\n[\"planned\", \"dflt\"]\n\
                      [\"a.conf\", \"b\", \"c.conf\"]\n[\"/etc/d/a.conf\", \"/etc/d/c.conf\"]\n\
                      [\"file\", 3, 420]\n";
        let before = snapshot(&t);
        let r = run(&t, ExecMode::Plan, src).ok();
        assert_eq!(r.stdout(), expect);
        assert_eq!(snapshot(&t), before);
        std::fs::set_permissions(
            t.p("/etc/d/b"),
            std::os::unix::fs::PermissionsExt::from_mode(0o644),
        )
        .unwrap();
        let r = run(&t, ExecMode::Apply, src).ok();
        assert_eq!(r.stdout(), expect);
    }

    #[test]
    fn fs_fetch_all_modes_and_its_options() {
        use crate::host::fetch::fetch_tests::{BODY, Reply, Server, sha};
        let t = TestHost::new();
        let srv = Server::plain(|p| match p {
            "/tool" => Reply::Body(BODY.to_vec()),
            _ => Reply::Status("404 Not Found"),
        });
        let call = format!(
            r#"fs::fetch("{}", "/opt/bin/tool", #{{sha256: "{}", mode: 0o755, timeout: 30, max_bytes: 1024}})"#,
            srv.url("/tool"),
            sha(BODY)
        );
        let plan = all_modes(&t, &[&call]);
        assert_eq!(plan.changes[0].kind, "fetch");
        assert_eq!(srv.requests(), vec!["/tool"]);
        assert_eq!(std::fs::read(t.p("/opt/bin/tool")).unwrap(), BODY);

        let r = run(
            &t,
            ExecMode::Plan,
            r#"fs::fetch("http://x/a", "/a", #{sha: "x"})"#,
        );
        assert_eq!(
            r.error(),
            "main.rhai:1:5: fs::fetch: unknown option \"sha\" (expected one of: sha256, mode, owner, group, timeout, max_bytes)"
        );
        let r = run(
            &t,
            ExecMode::Plan,
            r#"fs::fetch("http://x/a", "/a", #{sha256: "00", timeout: 0})"#,
        );
        assert_eq!(
            r.error(),
            "main.rhai:1:5: fs::fetch: option timeout must be a positive number of seconds, got 0"
        );
        let url = srv.url("/nope");
        let r = run(
            &t,
            ExecMode::Apply,
            &format!(r#"fs::fetch("{url}", "/a", #{{sha256: "{}"}})"#, sha(BODY)),
        );
        assert_eq!(
            r.error(),
            format!(
                "main.rhai:1:5: fs::fetch: failed to download {url}: server answered 404 Not Found"
            )
        );
    }

    #[test]
    fn fs_realpath_resolves_inside_the_root() {
        let t = TestHost::new();
        t.file("/usr/lib/x/real.so", "x");
        t.file("/etc/passwd", "root:x:0:0::/root:/bin/sh\n");
        let link = |target: &str, at: &str| {
            let p = t.p(at);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(target, p).unwrap();
        };
        link("/usr/lib/x/real.so", "/etc/alternatives/x");
        link("/etc/alternatives/x", "/usr/bin/x");
        link("../usr/lib", "/opt/lib");
        link("../../../../etc", "/srv/up");
        link("/srv/b", "/srv/a");
        link("/srv/a", "/srv/b");
        let src = r#"
            print(fs::realpath("/usr/bin/x"));
            print(fs::realpath("/opt/lib/x/../x/./real.so"));
            print(fs::realpath("/opt/lib/x/new.so"));
            print(fs::realpath("/"));
            fs::mkdir("/data/v");
            fs::symlink("/data/v", "/var/lib/containerd");
            print(fs::realpath("/var/lib/containerd/io"));
        "#;
        let want = "/usr/lib/x/real.so\n/usr/lib/x/real.so\n/usr/lib/x/new.so\n/\n/data/v/io\n";
        for mode in [ExecMode::Plan, ExecMode::Check, ExecMode::Apply] {
            assert_eq!(run(&t, mode, src).ok().stdout(), want, "{mode:?}");
        }
        let cases = [
            (
                "/srv/up/passwd",
                "/srv/up/passwd: climbs above / of the host root (through `..` in the path or in a symlink's target)",
            ),
            (
                "/../etc",
                "/../etc: climbs above / of the host root (through `..` in the path or in a symlink's target)",
            ),
            (
                "/srv/a",
                "/srv/a: has too many levels of symbolic links (more than 40)",
            ),
            ("/nope/x", "/nope does not exist"),
            ("/nope/..", "/nope does not exist"),
            (
                "/etc/passwd/x",
                "/etc/passwd: is not a directory, and the path goes on below it",
            ),
            ("etc", "paths must be absolute: \"etc\""),
        ];
        for (p, want) in cases {
            let r = run(&t, ExecMode::Plan, &format!("fs::realpath({p:?})"));
            assert_eq!(
                r.error(),
                format!("main.rhai:1:5: fs::realpath: {want}"),
                "{p}"
            );
        }
    }

    #[test]
    fn fs_fetch_without_a_digest_warns_in_plan_and_apply() {
        use crate::host::fetch::fetch_tests::{BODY, Reply, Server};
        let t = TestHost::new();
        let srv = Server::plain(|_| Reply::Body(BODY.to_vec()));
        let url = srv.url("/efa.tar.gz");
        let src = format!(r#"print(fs::fetch("{url}", "/opt/efa.tar.gz", #{{mode: 0o600}}));"#);
        let warn = |verb: &str| {
            format!(
                "warning: fs::fetch: {url} is not verified (no sha256): {verb} to /opt/efa.tar.gz as served\n"
            )
        };
        let plan = run(&t, ExecMode::Plan, &src).ok();
        assert_eq!(plan.stderr(), warn("would be downloaded"));
        assert_eq!(
            plan.report.changes[0].summary,
            format!(
                "would download {url} (not verified: no sha256) to /opt/efa.tar.gz (mode 0600)"
            )
        );
        let check = run(&t, ExecMode::Check, &src).ok();
        assert_eq!(check.report.drift().len(), 1);
        let apply = run(&t, ExecMode::Apply, &src).ok();
        assert_eq!(
            (apply.stdout(), apply.stderr()),
            ("true\n".into(), warn("downloaded"))
        );
        assert_eq!(std::fs::read(t.p("/opt/efa.tar.gz")).unwrap(), BODY);
        // Present: unchanged, no warning, nothing requested, no drift.
        let again = run(&t, ExecMode::Apply, &src).ok();
        assert_eq!(
            (again.stdout(), again.stderr()),
            ("false\n".into(), String::new())
        );
        assert!(
            run(&t, ExecMode::Check, &src)
                .ok()
                .report
                .drift()
                .is_empty()
        );
        assert_eq!(srv.requests(), vec!["/efa.tar.gz"]);
    }

    /// A tree of directories, files and a relative link with their modes and owners:
    /// the plan lists each entry and changes nothing, apply copies, a second apply and a
    /// check change nothing, an edit at the destination is drift and is repaired.
    #[test]
    fn fs_copy_tree_all_modes_preserving_modes_and_owners() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let t = TestHost::new();
        t.file(
            "/var/lib/kubelet/config.yaml",
            "kind: KubeletConfiguration\n",
        );
        t.file("/var/lib/kubelet/pki/kubelet.key", "KEY\n");
        t.file("/var/lib/kubelet/pods/p1/vol", "data\n");
        t.file("/data/kept", "mine\n");
        let set = |p: &str, mode: u32, uid: u32| {
            std::fs::set_permissions(t.p(p), std::fs::Permissions::from_mode(mode)).unwrap();
            std::os::unix::fs::chown(t.p(p), Some(uid), Some(uid)).unwrap();
        };
        set("/var/lib/kubelet/pki", 0o700, 0);
        set("/var/lib/kubelet/pki/kubelet.key", 0o600, 0);
        set("/var/lib/kubelet/pods/p1/vol", 0o640, 65534);
        std::os::unix::fs::symlink("pki/kubelet.key", t.p("/var/lib/kubelet/current.key")).unwrap();
        let src = r#"print(fs::copy_tree("/var/lib/kubelet", "/data/kubelet"));"#;
        let before = snapshot(&t);
        let plan = run(&t, ExecMode::Plan, src).ok();
        assert_eq!(plan.stdout(), "true\n");
        assert_eq!(snapshot(&t), before, "a plan changed the root");
        let mut listed: Vec<(String, String)> = plan
            .report
            .changes
            .iter()
            .map(|c| (c.kind.clone(), c.target.clone()))
            .collect();
        listed.sort();
        let want: Vec<(String, String)> = [
            ("mkdir", "/data/kubelet"),
            ("mkdir", "/data/kubelet/pki"),
            ("mkdir", "/data/kubelet/pods"),
            ("mkdir", "/data/kubelet/pods/p1"),
            ("symlink", "/data/kubelet/current.key"),
            ("write", "/data/kubelet/config.yaml"),
            ("write", "/data/kubelet/pki/kubelet.key"),
            ("write", "/data/kubelet/pods/p1/vol"),
        ]
        .iter()
        .map(|(k, p)| (k.to_string(), p.to_string()))
        .collect();
        // A new file's write carries its mode and owner: no chmod or chown beside it.
        assert_eq!(listed, want);
        let check = run(&t, ExecMode::Check, src).ok();
        assert_eq!(check.report.drift().len(), plan.report.changes.len());
        assert_eq!(snapshot(&t), before, "a check changed the root");

        assert_eq!(run(&t, ExecMode::Apply, src).ok().stdout(), "true\n");
        let meta = |p: &str| {
            let m = std::fs::symlink_metadata(t.p(p)).unwrap();
            (m.mode() & 0o7777, m.uid(), m.gid())
        };
        assert_eq!(t.read("/data/kubelet/pods/p1/vol"), "data\n");
        assert_eq!(meta("/data/kubelet/pki"), (0o700, 0, 0));
        assert_eq!(meta("/data/kubelet/pki/kubelet.key"), (0o600, 0, 0));
        assert_eq!(meta("/data/kubelet/pods/p1/vol"), (0o640, 65534, 65534));
        assert_eq!(
            std::fs::read_link(t.p("/data/kubelet/current.key")).unwrap(),
            Path::new("pki/kubelet.key")
        );
        assert_eq!(t.read("/data/kept"), "mine\n");

        let again = run(&t, ExecMode::Apply, src).ok();
        assert_eq!(
            (again.stdout(), again.report.changes.len()),
            ("false\n".into(), 0)
        );
        assert!(run(&t, ExecMode::Check, src).ok().report.drift().is_empty());

        // Drift: an edited file and a changed mode, each reported, then repaired.
        t.file("/data/kubelet/config.yaml", "edited\n");
        set("/data/kubelet/pki", 0o755, 0);
        let check = run(&t, ExecMode::Check, src).ok();
        let mut drift: Vec<String> = check
            .report
            .drift()
            .iter()
            .map(|c| format!("{} {}", c.kind, c.target))
            .collect();
        drift.sort();
        // fs::mkdir's change of an existing directory's mode is reported as a `mkdir`.
        assert_eq!(
            drift,
            ["mkdir /data/kubelet/pki", "write /data/kubelet/config.yaml"]
        );
        run(&t, ExecMode::Apply, src).ok();
        assert_eq!(
            t.read("/data/kubelet/config.yaml"),
            "kind: KubeletConfiguration\n"
        );
        assert_eq!(meta("/data/kubelet/pki"), (0o700, 0, 0));
    }

    #[test]
    fn fs_copy_tree_bad_trees_change_nothing() {
        let t = TestHost::new();
        t.file("/src/a/f", "f\n");
        t.file("/src/b", "b\n");
        t.file("/dst/b/x", "a dir where the source has a file\n");
        t.file("/file", "x\n");
        let before = snapshot(&t);
        let cases = [
            (
                r#"fs::copy_tree("/src", "/dst")"#,
                "/dst/b: exists and is not a regular file, where the source has one",
            ),
            (
                r#"fs::copy_tree("/src", "/src/a/in")"#,
                "/src/a/in: is the source directory or inside it",
            ),
            (r#"fs::copy_tree("/nope", "/new")"#, "/nope does not exist"),
            (
                r#"fs::copy_tree("/file", "/new")"#,
                "/file: is not a directory",
            ),
            (
                r#"fs::copy_tree("/src", "/file")"#,
                "/file: exists and is not a directory",
            ),
            (
                r#"fs::copy_tree("/src", "/new", #{max_files: 2})"#,
                "invalid fs::copy_tree source: /src has more than 2 entries (max_files)",
            ),
            (
                r#"fs::copy_tree("/src", "/new", #{max_bytes: 3})"#,
                "invalid fs::copy_tree source: /src holds more than 3 bytes of files (max_bytes)",
            ),
            (
                r#"fs::copy_tree("/src", "/new", #{max_files: 0})"#,
                "option max_files must be a positive integer, got 0",
            ),
        ];
        for (src, want) in cases {
            let r = run(&t, ExecMode::Apply, src);
            assert_eq!(
                r.error(),
                format!("main.rhai:1:5: fs::copy_tree: {want}"),
                "{src}"
            );
            assert_eq!(snapshot(&t), before, "{src} changed the root");
        }
        // A FIFO is refused before anything is created (a separate root: the snapshot
        // would block reading it).
        let t = TestHost::new();
        t.file("/fifo/a", "a\n");
        let mode = nix::sys::stat::Mode::from_bits_truncate(0o600);
        nix::unistd::mkfifo(&t.p("/fifo/p"), mode).unwrap();
        let r = run(&t, ExecMode::Apply, r#"fs::copy_tree("/fifo", "/new")"#);
        assert_eq!(
            r.error(),
            "main.rhai:1:5: fs::copy_tree: /fifo/p: is not a directory, regular file or symlink (fs::copy_tree copies only those)"
        );
        assert!(!t.p("/new").exists());
    }

    /// A tar archive of `(name, kind, mode, body)` entries, names written as given (even
    /// `..` and absolute ones, which `tar::Builder`'s path helpers refuse): kind `f` file,
    /// `d` directory, `l` symlink to body, `h` hard link to body.
    pub(crate) fn tar_of(entries: &[TarEntry]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, kind, mode, body) in entries {
            let mut hd = tar::Header::new_gnu();
            let n = name.as_bytes();
            hd.as_old_mut().name[..n.len()].copy_from_slice(n);
            hd.set_mode(*mode);
            let data: &[u8] = match kind {
                'f' => {
                    hd.set_entry_type(tar::EntryType::Regular);
                    body.as_bytes()
                }
                'd' => {
                    hd.set_entry_type(tar::EntryType::Directory);
                    b""
                }
                'l' | 'h' => {
                    hd.set_entry_type(if *kind == 'l' {
                        tar::EntryType::Symlink
                    } else {
                        tar::EntryType::Link
                    });
                    hd.as_old_mut().linkname[..body.len()].copy_from_slice(body.as_bytes());
                    b""
                }
                _ => unreachable!(),
            };
            hd.set_size(data.len() as u64);
            hd.set_cksum();
            b.append(&hd, data).unwrap();
        }
        b.into_inner().unwrap()
    }

    /// One tar entry for [`tar_of`]: name, kind, mode, body.
    type TarEntry<'a> = (&'a str, char, u32, &'a str);

    const EFA: &[TarEntry] = &[
        ("efa/", 'd', 0o755, ""),
        (
            "efa/efa_installer.sh",
            'f',
            0o755,
            "#!/bin/sh\necho install\n",
        ),
        ("efa/README", 'f', 0o644, "EFA\n"),
        ("efa/lib/", 'd', 0o750, ""),
        ("efa/lib/libfabric.so.1", 'f', 0o644, "ELF\n"),
        ("efa/lib/libfabric.so", 'l', 0o777, "libfabric.so.1"),
    ];

    /// A deflated zip archive of `entries`.
    fn zip_of(entries: &[TarEntry]) -> Vec<u8> {
        crate::host::files::archive_tree_tests::zip_with(entries, zip::CompressionMethod::Deflated)
    }

    #[test]
    fn fs_extract_tar_gz_xz_and_zip_in_every_mode() {
        use std::io::Write;
        use std::os::unix::fs::MetadataExt;
        let tar = tar_of(EFA);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&tar).unwrap();
        let mut xz = liblzma::write::XzEncoder::new(Vec::new(), 6);
        xz.write_all(&tar).unwrap();
        let t = TestHost::new();
        let archives = [
            ("tar", tar.clone()),
            ("tar.gz", gz.finish().unwrap()),
            ("tar.xz", xz.finish().unwrap()),
            ("zip", zip_of(EFA)),
        ];
        for (ext, bytes) in &archives {
            let p = t.p(&format!("/tmp/efa.{ext}"));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, bytes).unwrap();
        }
        for (ext, _) in &archives {
            let dest = format!("/opt/{}", ext.replace('.', "-"));
            let src = format!(
                r#"print(fs::extract("/tmp/efa.{ext}", "{dest}", #{{strip_components: 1}}));"#
            );
            let before = snapshot(&t);
            let plan = run(&t, ExecMode::Plan, &src).ok();
            assert_eq!(plan.stdout(), "true\n", "{ext}");
            assert_eq!(snapshot(&t), before, "a plan of {ext} changed the root");
            let listed: Vec<String> = plan
                .report
                .changes
                .iter()
                .map(|c| format!("{} {}", c.kind, c.target.strip_prefix(&dest).unwrap()))
                .collect();
            assert_eq!(
                listed,
                [
                    "mkdir ",
                    "write /efa_installer.sh",
                    "write /README",
                    "mkdir /lib",
                    "write /lib/libfabric.so.1",
                    "symlink /lib/libfabric.so"
                ],
                "{ext}"
            );
            assert_eq!(
                run(&t, ExecMode::Check, &src).ok().report.drift().len(),
                6,
                "{ext}"
            );
            assert_eq!(run(&t, ExecMode::Apply, &src).ok().stdout(), "true\n");
            let mode = |p: &str| {
                std::fs::symlink_metadata(t.p(&format!("{dest}{p}")))
                    .unwrap()
                    .mode()
                    & 0o7777
            };
            assert_eq!(
                t.read(&format!("{dest}/efa_installer.sh")),
                "#!/bin/sh\necho install\n"
            );
            assert_eq!(
                (mode("/efa_installer.sh"), mode("/README"), mode("/lib")),
                (0o755, 0o644, 0o750),
                "{ext}"
            );
            assert_eq!(
                std::fs::read_link(t.p(&format!("{dest}/lib/libfabric.so"))).unwrap(),
                Path::new("libfabric.so.1")
            );
            let again = run(&t, ExecMode::Apply, &src).ok();
            assert_eq!(
                (again.stdout(), again.report.changes.len()),
                ("false\n".into(), 0)
            );
            t.file(&format!("{dest}/README"), "edited\n");
            let drift = run(&t, ExecMode::Check, &src).ok();
            assert_eq!(drift.report.drift().len(), 1, "{ext}");
            assert_eq!(drift.report.drift()[0].target, format!("{dest}/README"));
        }
    }

    #[test]
    fn fs_extract_refuses_escapes_and_limits_and_writes_nothing() {
        let t = TestHost::new();
        t.file("/etc/passwd", "root:x:0:0::/root:/bin/sh\n");
        t.file("/dest/keep", "k\n");
        t.file("/dest/file", "f\n");
        std::os::unix::fs::symlink("/etc", t.p("/dest/etc")).unwrap();
        let ok = ("a/ok", 'f', 0o644, "ok\n");
        let cases: Vec<(Vec<TarEntry>, &str, &str)> = vec![
            (
                vec![ok, ("../evil", 'f', 0o644, "x")],
                "",
                "entry \"../evil\": climbs out of the destination with `..`",
            ),
            (
                vec![ok, ("a/../../evil", 'f', 0o644, "x")],
                "",
                "entry \"a/../../evil\": climbs out of the destination with `..`",
            ),
            (
                vec![ok, ("/etc/cron.d/x", 'f', 0o644, "x")],
                "",
                "entry \"/etc/cron.d/x\": is an absolute path",
            ),
            (
                vec![ok, ("lnk", 'l', 0o777, "/etc")],
                "",
                "entry \"lnk\": is a symlink to \"/etc\": only relative targets inside the destination are extracted",
            ),
            (
                vec![ok, ("a/up", 'l', 0o777, "../../etc")],
                "",
                "entry \"a/up\": is a symlink to \"../../etc\", which leaves the destination",
            ),
            (
                vec![
                    ok,
                    ("a/in", 'l', 0o777, "../a"),
                    ("a/in/passwd", 'f', 0o644, "x"),
                ],
                "",
                "entry \"a/in/passwd\": lies below entry \"a/in\", a symlink of the archive",
            ),
            (
                vec![ok, ("etc/passwd", 'f', 0o644, "x")],
                "",
                "entry \"etc/passwd\": lies below /dest/etc, a symlink at the destination",
            ),
            (
                vec![ok, ("a/ok/x", 'f', 0o644, "x")],
                "",
                "entry \"a/ok/x\": lies below entry \"a/ok\", a file of the archive",
            ),
            (
                vec![ok, ("hl", 'h', 0o644, "a/ok")],
                "",
                "entry \"hl\": is a hard link, which is not extracted",
            ),
            (
                vec![ok, ("file/x", 'f', 0o644, "x")],
                "",
                "entry \"file/x\": /dest/file exists and is a file, where the archive has a dir",
            ),
            (
                vec![ok, ("keep", 'd', 0o755, "")],
                "",
                "entry \"keep\": /dest/keep exists and is a file, where the archive has a dir",
            ),
            (
                vec![ok, ("b", 'f', 0o644, "x")],
                ", #{max_files: 1}",
                "more than 1 entries (max_files)",
            ),
            (
                vec![ok, ("b", 'f', 0o644, "x")],
                ", #{max_bytes: 3}",
                "unpacks to more than 3 bytes (max_bytes)",
            ),
        ];
        let before = snapshot(&t);
        for (entries, opts, want) in cases {
            std::fs::write(t.p("/tmp.tar"), tar_of(&entries)).unwrap();
            let before = {
                let mut b = before.clone();
                b.insert("tmp.tar".into(), snapshot(&t)[Path::new("tmp.tar")].clone());
                b
            };
            for mode in [ExecMode::Plan, ExecMode::Apply] {
                let r = run(
                    &t,
                    mode,
                    &format!(r#"fs::extract("/tmp.tar", "/dest"{opts})"#),
                );
                assert_eq!(
                    r.error(),
                    format!("main.rhai:1:5: fs::extract: invalid archive: /tmp.tar: {want}"),
                    "{mode:?}"
                );
                assert_eq!(snapshot(&t), before, "{want}: the root changed");
            }
        }
        // A leading `./` is one component for strip_components, as in GNU tar.
        std::fs::write(
            t.p("/dot.tar"),
            tar_of(&[
                ("./", 'd', 0o755, ""),
                ("./efa/README", 'f', 0o644, "EFA\n"),
            ]),
        )
        .unwrap();
        run(
            &t,
            ExecMode::Apply,
            r#"fs::extract("/dot.tar", "/dot", #{strip_components: 1})"#,
        )
        .ok();
        assert_eq!(t.read("/dot/efa/README"), "EFA\n");
        std::fs::write(t.p("/tmp.tar"), b"not an archive at all").unwrap();
        let r = run(&t, ExecMode::Apply, r#"fs::extract("/tmp.tar", "/dest")"#);
        assert!(
            r.error()
                .starts_with("main.rhai:1:5: fs::extract: invalid archive: /tmp.tar: "),
            "{}",
            r.error()
        );
        assert_eq!(
            run(&t, ExecMode::Apply, r#"fs::extract("/none.tar", "/dest")"#).error(),
            "main.rhai:1:5: fs::extract: /none.tar does not exist"
        );
        assert_eq!(
            run(
                &t,
                ExecMode::Apply,
                r#"fs::extract("/tmp.tar", "/dest", #{strip_components: -1})"#
            )
            .error(),
            "main.rhai:1:5: fs::extract: option strip_components must be an integer from 0 to 64, got -1"
        );
    }

    /// In a plan, an archive that fs::fetch only plans cannot be listed: a warning, a change.
    #[test]
    fn fs_extract_of_a_planned_download_warns_in_a_plan() {
        use crate::host::fetch::fetch_tests::{Reply, Server};
        let t = TestHost::new();
        let tar = tar_of(EFA);
        let srv = Server::plain(move |_| Reply::Body(tar.clone()));
        let url = srv.url("/efa.tar");
        let src = format!(
            r#"fs::fetch("{url}", "/tmp/efa.tar", #{{}}); print(fs::extract("/tmp/efa.tar", "/opt/efa"));"#
        );
        let plan = run(&t, ExecMode::Plan, &src).ok();
        assert_eq!(plan.stdout(), "true\n");
        assert!(plan.stderr().ends_with(
            "warning: fs::extract: /tmp/efa.tar is downloaded by fs::fetch only when applied: the files it unpacks into /opt/efa are listed then\n"
        ), "{}", plan.stderr());
        run(&t, ExecMode::Apply, &src).ok();
        assert_eq!(t.read("/opt/efa/efa/README"), "EFA\n");
    }
}
