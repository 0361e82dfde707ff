//! `fs::extract` streams its entries: a big entry is copied byte-exact from a staging file
//! (never held in memory), the plan names the entry it copies from, the staging directory is
//! gone after the call, and a failed step's undo puts the previous files back.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use crate::host::effects::effect::Effect;
use crate::host::files::archive::{ExtractOptions, Extracted, STAGING, extract};
use crate::host::root::HostRoot;
use crate::host::root::digest::sha256_tag;
use crate::host::testutil::{TestHost, tree};
use crate::host::{ExecMode, Host, HostOptions};

/// `len` bytes of a pattern that differs from one 64 KiB chunk to the next.
fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i / 65_536) as u8).wrapping_mul(31) ^ (i as u8))
        .collect()
}

/// A tar.gz of `big` (0750) and `small` ("small\n", 0644) at `/tmp/a.tar.gz`.
fn archive(t: &TestHost, big: &[u8]) {
    let mut b = tar::Builder::new(Vec::new());
    for (name, mode, data) in [("big", 0o750, big), ("small", 0o644, &b"small\n"[..])] {
        let mut hd = tar::Header::new_gnu();
        hd.set_path(name).unwrap();
        hd.set_mode(mode);
        hd.set_size(data.len() as u64);
        hd.set_entry_type(tar::EntryType::Regular);
        hd.set_cksum();
        b.append(&hd, data).unwrap();
    }
    let tar = b.into_inner().unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar).unwrap();
    std::fs::create_dir_all(t.p("/tmp")).unwrap();
    std::fs::write(t.p("/tmp/a.tar.gz"), gz.finish().unwrap()).unwrap();
}

fn unpack(h: &mut Host) -> bool {
    match extract(h, "/tmp/a.tar.gz", "/opt/x", &ExtractOptions::default()).unwrap() {
        Extracted::Done(changed) => changed,
        Extracted::Unknown => panic!("the archive is on disk"),
    }
}

#[test]
fn a_big_entry_is_planned_from_the_archive_and_copied_byte_exact_through_staging() {
    let t = TestHost::new();
    let big = pattern(3 * 1024 * 1024 + 11);
    archive(&t, &big);
    let before = tree(&t.root);
    let mut h = t.host(ExecMode::Plan);
    assert!(unpack(&mut h));
    let r = h.finish().unwrap();
    assert_eq!(tree(&t.root), before, "a plan changed the root");
    let lines: Vec<&str> = r.change_summaries();
    assert_eq!(
        lines,
        [
            "create directory /opt/x (mode 0755)",
            "create /opt/x/big (mode 0750)",
            "create /opt/x/small (mode 0644)"
        ]
    );
    assert_eq!(
        r.changes[1].diff.as_deref(),
        Some(
            "Files /dev/null and b/opt/x/big differ (copied from /tmp/a.tar.gz:big: not diffed)\n"
        )
    );
    assert_eq!(r.changes[1].after, Some(sha256_tag(&big)));

    // Each file is one copy, never a write of its content. The recording double performs
    // nothing, so it stages nothing (staging is the apply executor's service): as in a plan,
    // each copy names its entry.
    std::fs::create_dir_all(t.p("/opt/x")).unwrap();
    let mut rec = Host::recording(HostRoot::open(&t.root).unwrap(), HostOptions::default());
    assert!(unpack(&mut rec));
    let sources: Vec<String> = rec
        .recorded_effects()
        .iter()
        .filter_map(|e| match e {
            Effect::CopyFile { src, .. } => Some(src.display().to_string()),
            Effect::WriteFile { path, .. } => panic!("{} written from memory", path.display()),
            _ => None,
        })
        .collect();
    assert_eq!(sources, ["/tmp/a.tar.gz:big", "/tmp/a.tar.gz:small"]);
    assert!(!t.p(STAGING).exists(), "the recording double staged");
    std::fs::remove_dir(t.p("/opt/x")).unwrap();

    let mut h = t.host(ExecMode::Apply);
    assert!(unpack(&mut h));
    h.finish().unwrap();
    assert_eq!(std::fs::read(t.p("/opt/x/big")).unwrap(), big);
    assert_eq!(t.read("/opt/x/small"), "small\n");
    let m = std::fs::metadata(t.p("/opt/x/big")).unwrap();
    assert_eq!((m.mode() & 0o7777, m.uid()), (0o750, 0));
    assert!(!t.p(STAGING).exists(), "the staging directory is left");

    let mut h = t.host(ExecMode::Apply);
    assert!(!unpack(&mut h));
    assert!(h.finish().unwrap().changes.is_empty());

    // The same content under another mode: a chmod, nothing copied or staged.
    std::fs::set_permissions(t.p("/opt/x/big"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut h = t.host(ExecMode::Apply);
    assert!(unpack(&mut h));
    let r = h.finish().unwrap();
    assert_eq!(r.change_kinds_and_targets(), [("chmod", "/opt/x/big")]);
    assert_eq!(std::fs::read(t.p("/opt/x/big")).unwrap(), big);
}

#[test]
fn a_failed_step_puts_the_previous_files_back() {
    let t = TestHost::new();
    let big = pattern(2 * 1024 * 1024);
    archive(&t, &big);
    t.file("/opt/x/big", "the old big\n");
    std::fs::set_permissions(t.p("/opt/x/big"), std::fs::Permissions::from_mode(0o640)).unwrap();
    std::fs::create_dir_all(t.p("/var/lib/skyhook")).unwrap();
    let without_locks = |mut m: std::collections::BTreeMap<std::path::PathBuf, String>| {
        m.retain(|p, _| !p.starts_with("var/lib/skyhook/.locks"));
        m
    };
    let before = without_locks(tree(&t.root));
    let mut h = t.host_with(ExecMode::Apply, |o| o.undo = Some("pkg-apply".into()));
    assert!(unpack(&mut h));
    assert_eq!(std::fs::read(t.p("/opt/x/big")).unwrap(), big);
    let (_, undone, result) = h.fail_with_report();
    result.unwrap();
    assert!(undone.not_undone.is_empty(), "{:?}", undone.not_undone);
    let after = without_locks(tree(&t.root));
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>()
    );
    assert!(after == before, "a file differs after the undo");
    assert_eq!(t.read("/opt/x/big"), "the old big\n");
}

#[test]
fn a_fifo_entry_or_a_fifo_as_the_archive_is_refused_without_blocking() {
    let t = TestHost::new();
    let mut b = tar::Builder::new(Vec::new());
    let mut hd = tar::Header::new_gnu();
    hd.set_path("p").unwrap();
    hd.set_mode(0o644);
    hd.set_size(0);
    hd.set_entry_type(tar::EntryType::Fifo);
    hd.set_cksum();
    b.append(&hd, &b""[..]).unwrap();
    std::fs::create_dir_all(t.p("/tmp")).unwrap();
    std::fs::write(t.p("/tmp/fifo.tar"), b.into_inner().unwrap()).unwrap();
    nix::unistd::mkfifo(
        &t.p("/tmp/pipe"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let root = t.root.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    // On a thread, so a read that blocked on the FIFO fails the test instead of hanging it.
    std::thread::spawn(move || {
        let mut h = Host::new(
            HostRoot::open(&root).unwrap(),
            ExecMode::Apply,
            HostOptions::default(),
        );
        let o = ExtractOptions::default();
        let errs: Vec<String> = ["/tmp/fifo.tar", "/tmp/pipe"]
            .iter()
            .map(|a| match extract(&mut h, a, "/opt/x", &o) {
                Ok(r) => format!("extracted: {r:?}"),
                Err(e) => e.to_string(),
            })
            .collect();
        let _ = tx.send(errs);
    });
    let errs = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("fs::extract blocked on a FIFO");
    assert_eq!(
        errs,
        [
            "invalid archive: /tmp/fifo.tar: entry \"p\": is a FIFO, which is not extracted",
            "/tmp/pipe: is not a regular file"
        ]
    );
    assert!(!t.p("/opt/x").exists());
}

/// Hold an exclusive `flock` on the directory `dir` (agent-side) through a descriptor of its
/// own, as another agent staging there does; released when the file is dropped.
fn hold_lock(dir: &std::path::Path) -> std::fs::File {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(dir).unwrap();
    // SAFETY: `f` is an open descriptor.
    assert_eq!(
        unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
        0
    );
    f
}

/// Fault: staging was named by pid and swept by pid, so two agents that are pid 1 in their
/// pods collided, and an agent's start deleted the live staging of an agent in another pod
/// (whose pid it cannot see). The sweep now removes exactly the staging directories nobody
/// holds locked, whatever their names say: another pod's live one (held, pid unknown
/// here) is kept; a stale one whose pid happens to be alive here (`1.…`) is removed.
#[test]
fn the_sweep_keeps_a_staging_directory_another_agent_holds_and_removes_unlocked_ones() {
    let t = TestHost::new();
    let other_pod = format!("{STAGING}/999999999.0");
    let stale = format!("{STAGING}/1.0");
    t.file(&format!("{other_pod}/0"), "an entry being staged");
    t.file(&format!("{stale}/0"), "half an entry");
    let held = hold_lock(&t.p(&other_pod));
    let root = HostRoot::open(&t.root).unwrap();
    let lines = crate::host::files::archive::sweep_staging(&root).unwrap();
    assert_eq!(
        lines,
        vec![format!(
            "removed {stale}, left by an fs::extract that did not end"
        )]
    );
    assert!(!t.p(&stale).exists());
    assert_eq!(
        t.read(&format!("{other_pod}/0")),
        "an entry being staged",
        "another agent's live staging was removed"
    );
    drop(held);
    assert_eq!(
        crate::host::files::archive::sweep_staging(&root).unwrap(),
        vec![format!(
            "removed {other_pod}, left by an fs::extract that did not end"
        )]
    );
    assert!(
        !t.p(STAGING).exists(),
        "the emptied staging directory is removed"
    );

    // A staging directory of this agent: named by boot id and 64 random bits (two never
    // alike), held while it lives, so a sweep (another agent's start) keeps it; its
    // files and itself are gone when it is dropped.
    use crate::host::root::test_doors::StagingDir;
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let mut a = StagingDir::create(&root, std::path::Path::new(STAGING)).unwrap();
    let b = StagingDir::create(&root, std::path::Path::new(STAGING)).unwrap();
    let name = a.path().file_name().unwrap().to_str().unwrap().to_string();
    assert_ne!(a.path(), b.path());
    assert!(
        name.starts_with(&format!("{}-", boot.trim().replace('-', "")))
            && name.len() == 32 + 1 + 16,
        "{name}"
    );
    let (mut f, staged) = a.create_file("0").unwrap();
    f.write_all(b"staged").unwrap();
    assert_eq!(staged, a.path().join("0"));
    assert_eq!(
        crate::host::files::archive::sweep_staging(&root).unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(t.read(&staged.display().to_string()), "staged");
    drop((a, b));
    assert!(
        !t.p(STAGING).exists(),
        "a dropped staging directory is left"
    );
}

/// A GNU sparse tar entry (type `S`) of `real` bytes whose data blocks are `blocks`
/// (offset, bytes), as `tar --sparse` writes one.
fn sparse_tar(name: &str, real: u64, blocks: &[(u64, &[u8])]) -> Vec<u8> {
    let mut hd = tar::Header::new_gnu();
    hd.set_path(name).unwrap();
    hd.set_mode(0o640);
    hd.set_entry_type(tar::EntryType::GNUSparse);
    let data: Vec<u8> = blocks.iter().flat_map(|(_, b)| b.iter().copied()).collect();
    hd.set_size(data.len() as u64);
    let gnu = hd.as_gnu_mut().unwrap();
    gnu.set_real_size(real);
    for (slot, (offset, bytes)) in gnu.sparse.iter_mut().zip(blocks) {
        slot.offset
            .copy_from_slice(format!("{offset:011o}\0").as_bytes());
        slot.numbytes
            .copy_from_slice(format!("{:011o}\0", bytes.len()).as_bytes());
    }
    hd.set_cksum();
    let mut b = tar::Builder::new(Vec::new());
    b.append(&hd, &data[..]).unwrap();
    b.into_inner().unwrap()
}

/// Fault: a sparse tar entry was refused as "a device, FIFO or other special file". The
/// tar crate reads GNU sparse entries (holes as zeros), so it is extracted: the file holds
/// its data blocks at their offsets and zeros between (written out, not as holes), and its
/// unpacked size counts against `max_bytes`.
#[test]
fn a_gnu_sparse_entry_is_extracted_with_its_holes_as_zeros() {
    let t = TestHost::new();
    std::fs::create_dir_all(t.p("/tmp")).unwrap();
    // Every block but the last is whole 512-byte records (as GNU tar writes them).
    let head = [b'a'; 512];
    let tar = sparse_tar("disk.img", 65_540, &[(0, &head), (65_536, b"wxyz")]);
    std::fs::write(t.p("/tmp/sparse.tar"), &tar).unwrap();
    let mut h = t.host(ExecMode::Apply);
    let r = extract(
        &mut h,
        "/tmp/sparse.tar",
        "/opt/x",
        &ExtractOptions::default(),
    );
    h.finish().unwrap();
    assert_eq!(r.map_err(|e| e.to_string()), Ok(Extracted::Done(true)));
    let mut want = head.to_vec();
    want.resize(65_536, 0);
    want.extend_from_slice(b"wxyz");
    assert_eq!(std::fs::read(t.p("/opt/x/disk.img")).unwrap(), want);
    let m = std::fs::metadata(t.p("/opt/x/disk.img")).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o640);
    let mut h = t.host(ExecMode::Apply);
    let o = ExtractOptions {
        max_bytes: 65_539,
        ..ExtractOptions::default()
    };
    let e = extract(&mut h, "/tmp/sparse.tar", "/opt/y", &o).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid archive: /tmp/sparse.tar: unpacks to more than 65539 bytes (max_bytes)"
    );

    // A PAX-format sparse file (`GNU.sparse.*` keys; its data begins with the sparse map)
    // would be extracted wrong as a plain file: it is refused, named as what it is.
    let mut b = tar::Builder::new(Vec::new());
    b.append_pax_extensions([
        ("GNU.sparse.major", &b"1"[..]),
        ("GNU.sparse.minor", b"0"),
        ("GNU.sparse.name", b"disk.img"),
        ("GNU.sparse.realsize", b"65540"),
    ])
    .unwrap();
    let mut hd = tar::Header::new_ustar();
    hd.set_path("GNUSparseFile.0/disk.img").unwrap();
    hd.set_size(4);
    hd.set_cksum();
    b.append(&hd, &b"1\n0\n"[..4]).unwrap();
    std::fs::write(t.p("/tmp/pax.tar"), b.into_inner().unwrap()).unwrap();
    let mut h = t.host(ExecMode::Apply);
    let e = extract(&mut h, "/tmp/pax.tar", "/opt/z", &ExtractOptions::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid archive: /tmp/pax.tar: entry \"GNUSparseFile.0/disk.img\": is a sparse file in the PAX format (GNU.sparse.* keys; old GNU sparse entries are extracted: `tar --format=gnu --sparse`), which is not extracted"
    );
    assert!(!t.p("/opt/z").exists());
}

/// `tar` compressed by xz, then its LZMA2 dictionary size in the block header set to 1 GiB
/// (the header's CRC32 computed again): a stream whose decoder would allocate 1 GiB, made
/// without allocating it here.
fn xz_with_a_1_gib_dictionary(tar: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut xz = liblzma::write::XzEncoder::new(Vec::new(), 1);
    xz.write_all(tar).unwrap();
    let mut x = xz.finish().unwrap();
    // Stream header: 12 bytes. Block header: size byte ((n + 1) * 4 bytes), flags (bit 6:
    // compressed size, bit 7: uncompressed size, each a varint), then the filter flags:
    // id 0x21 (LZMA2), properties size 1, the dictionary byte.
    let start = 12;
    let size = (usize::from(x[start]) + 1) * 4;
    let flags = x[start + 1];
    let mut at = start + 2;
    let skip_varint = |at: &mut usize| {
        while x[*at] & 0x80 != 0 {
            *at += 1;
        }
        *at += 1;
    };
    if flags & 0x40 != 0 {
        skip_varint(&mut at);
    }
    if flags & 0x80 != 0 {
        skip_varint(&mut at);
    }
    assert_eq!(&x[at..at + 2], [0x21, 0x01], "an LZMA2 filter");
    x[at + 2] = 36; // (2 | 0) << (36 / 2 + 11) = 1 GiB
    let mut crc = flate2::Crc::new();
    crc.update(&x[start..start + size - 4]);
    x[start + size - 4..start + size].copy_from_slice(&crc.sum().to_le_bytes());
    x
}

/// Fault: `.tar.xz` was decoded with no memory limit, so a stream made with a huge
/// dictionary made the agent allocate it. The decoder now has a limit (80 MiB, every xz
/// preset fits) and such a stream is refused saying so, nothing written; a normal `.tar.xz`
/// still extracts.
#[test]
fn an_xz_stream_with_a_huge_dictionary_is_refused_by_the_memory_limit() {
    use crate::host::files::fs_script_tests::tests::tar_of;
    let t = TestHost::new();
    std::fs::create_dir_all(t.p("/tmp")).unwrap();
    let tar = tar_of(&[("d/f", 'f', 0o644, "f\n")]);
    std::fs::write(t.p("/tmp/big.tar.xz"), xz_with_a_1_gib_dictionary(&tar)).unwrap();
    let mut h = t.host(ExecMode::Apply);
    let r = extract(
        &mut h,
        "/tmp/big.tar.xz",
        "/opt/x",
        &ExtractOptions::default(),
    );
    h.finish().unwrap();
    assert_eq!(
        r.map_err(|e| e.to_string()),
        Err("invalid archive: /tmp/big.tar.xz: is an xz stream whose decoding needs more than 80 MiB of memory (made with a dictionary over that size; the limit of fs::extract)".to_string())
    );
    assert!(!t.p("/opt/x").exists());
    // xz -9: a 64 MiB dictionary, 65 MiB to decode, within the limit.
    let mut xz = liblzma::write::XzEncoder::new(Vec::new(), 9);
    std::io::Write::write_all(&mut xz, &tar).unwrap();
    std::fs::write(t.p("/tmp/nine.tar.xz"), xz.finish().unwrap()).unwrap();
    let mut h = t.host(ExecMode::Apply);
    let r = extract(
        &mut h,
        "/tmp/nine.tar.xz",
        "/opt/x",
        &ExtractOptions::default(),
    );
    h.finish().unwrap();
    assert_eq!(r.map_err(|e| e.to_string()), Ok(Extracted::Done(true)));
    assert_eq!(t.read("/opt/x/d/f"), "f\n");
}

/// Fuzz finding (target `archive`): a tar entry whose name holds a newline and whose
/// checksum field is not a number failed with the tar crate's message quoting the name, so
/// the refusal spread over three lines. The reader's messages are now kept on one line.
#[test]
fn a_refusal_quoting_an_entry_name_with_a_newline_is_one_line() {
    let mut hd = tar::Header::new_gnu();
    let name = b"efa/lt2\necho hi\n";
    hd.as_old_mut().name[..name.len()].copy_from_slice(name);
    hd.set_size(0);
    hd.set_entry_type(tar::EntryType::Regular);
    hd.as_old_mut().cksum.copy_from_slice(b"zzzzzzz\0");
    let mut tar = hd.as_bytes().to_vec();
    tar.resize(512 * 3, 0);
    let t = TestHost::new();
    std::fs::create_dir_all(t.p("/tmp")).unwrap();
    std::fs::write(t.p("/tmp/nl.tar"), &tar).unwrap();
    let mut h = t.host(ExecMode::Apply);
    let e = extract(&mut h, "/tmp/nl.tar", "/opt/x", &ExtractOptions::default()).unwrap_err();
    assert_eq!(
        crate::chain::render(&e),
        "invalid archive: /tmp/nl.tar: unreadable tar entry: numeric field was not a number: zzzzzzz when getting cksum for efa/lt2\\necho hi\\n"
    );
}

/// The recording double performs nothing: an extract under it leaves the host root exactly
/// as it was (no staging directory, no staging files, no lock file), as a plan does.
#[test]
fn the_recording_double_stages_nothing_in_the_root() {
    let t = TestHost::new();
    archive(&t, &pattern(70_000));
    std::fs::create_dir_all(t.p("/opt/x")).unwrap();
    let before = tree(&t.root);
    let mut rec = Host::recording(HostRoot::open(&t.root).unwrap(), HostOptions::default());
    assert!(unpack(&mut rec));
    drop(rec);
    assert_eq!(
        tree(&t.root),
        before,
        "the recording double changed the root"
    );
}
