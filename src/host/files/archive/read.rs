//! The archive readers of `fs::extract`: the format told by the first bytes (tar, gzip, xz,
//! zip), one pass of a visitor ([`Visit`]) over the entries, and the staging pass that
//! streams the entries that differ into the call's staging directory ([`Stager`]).

use std::collections::BTreeMap;
use std::io::{Read, Seek};
use std::path::{Path, PathBuf};

use super::*;

/// What a pass over the archive does with each entry.
pub(super) trait Visit {
    /// The archive's path, for errors.
    fn archive(&self) -> &Path;

    /// One entry: its position (counted from 0 over every entry the readers hand on), name
    /// as in the archive, kind, permission bits when the archive has them, and content.
    fn visit(
        &mut self,
        index: u64,
        name: &str,
        kind: Kind,
        mode: Option<u32>,
        body: &mut dyn Read,
    ) -> Result<()>;
}

/// The archive's bytes as the session sees them: the file under the root, or a file the
/// plan wrote; `None` for a download the plan only plans.
pub(super) fn open(h: &Host, archive: &Path) -> Result<Option<Box<dyn ReadSeek>>> {
    match h.view_stat(archive, true)? {
        None => {
            return Err(HostError::NotFound {
                path: archive.to_path_buf(),
            });
        }
        Some(s) if s.kind != "file" => {
            return Err(HostError::WrongKind {
                path: archive.to_path_buf(),
                what: "is not a regular file",
            });
        }
        Some(_) => {}
    }
    Ok(match h.view_for_digest(archive)? {
        ViewedFile::Digest(_) => None,
        ViewedFile::Content(c) => Some(Box::new(Cursor::new(c))),
        ViewedFile::Open(key) => Some(Box::new(h.root().open_regular(&key)?)),
    })
}

pub(super) trait ReadSeek: Read + Seek {}
impl<T: Read + Seek> ReadSeek for T {}

/// One pass of `v` over the archive `r` from its start (its format told by its first
/// bytes).
pub(super) fn read_archive(v: &mut dyn Visit, r: &mut dyn ReadSeek) -> Result<()> {
    let mut r = r;
    let format = (|| {
        r.rewind()?;
        sniff(&mut r)
    })()
    .map_err(|e| bad(v.archive(), None, format!("cannot be read: {e}")))?;
    match format {
        "gzip" => read_tar(v, &mut flate2::read::GzDecoder::new(r)),
        "xz" => read_xz(v, r),
        "zip" => read_zip(v, &mut r),
        _ => read_tar(v, &mut r),
    }
}

/// Most memory the xz decoder may use (80 MiB): every `xz` preset, `-9e` included (64 MiB
/// dictionary, 65 MiB to decode), fits; a stream made with a larger dictionary (up to
/// 4 GiB, all allocated by the decoder) is refused before it is decoded.
pub const XZ_MEMLIMIT: u64 = 80 << 20;

/// The tar inside the xz stream `r`, decoded within [`XZ_MEMLIMIT`]: a stream over the
/// limit fails the call saying so.
pub(super) fn read_xz(v: &mut dyn Visit, r: &mut dyn ReadSeek) -> Result<()> {
    /// The decoder's reads, noting when liblzma stopped at the memory limit.
    struct Limited<R> {
        inner: R,
        hit: bool,
    }
    impl<R: Read> Read for Limited<R> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.inner.read(buf).inspect_err(|e| {
                self.hit |= e
                    .get_ref()
                    .and_then(|i| i.downcast_ref::<liblzma::stream::Error>())
                    .is_some_and(|i| matches!(i, liblzma::stream::Error::MemLimit));
            })
        }
    }
    let stream = liblzma::stream::Stream::new_stream_decoder(XZ_MEMLIMIT, 0)
        .map_err(|e| bad(v.archive(), None, format!("xz decoder: {e}")))?;
    let mut d = Limited {
        inner: liblzma::read::XzDecoder::new_stream(r, stream),
        hit: false,
    };
    let result = read_tar(v, &mut d);
    if d.hit {
        return Err(bad(
            v.archive(),
            None,
            format!(
                "is an xz stream whose decoding needs more than {} MiB of memory (made with a dictionary over that size; the limit of fs::extract)",
                XZ_MEMLIMIT >> 20
            ),
        ));
    }
    result
}

/// The compression or container, from the first bytes.
pub(super) fn sniff(r: &mut dyn ReadSeek) -> std::io::Result<&'static str> {
    let mut head = [0u8; 6];
    let mut n = 0;
    while n < head.len() {
        match r.read(&mut head[n..])? {
            0 => break,
            k => n += k,
        }
    }
    r.rewind()?;
    Ok(match &head[..n] {
        [0x1f, 0x8b, ..] => "gzip",
        [0xfd, b'7', b'z', b'X', b'Z', 0] => "xz",
        [b'P', b'K', 3, 4, ..] | [b'P', b'K', 5, 6, ..] => "zip",
        _ => "tar",
    })
}

/// The second pass of an apply: the file entries at the wanted positions streamed into
/// new files of the staging directory (through its handle).
pub(super) struct Stager<'a> {
    pub(super) archive: &'a Path,
    pub(super) staging: &'a mut StagingDir,
    /// Position -> size the first pass read.
    pub(super) wanted: &'a BTreeMap<u64, u64>,
    /// Position -> host path of its staging file, as staged.
    pub(super) staged: &'a mut BTreeMap<u64, PathBuf>,
}

impl Visit for Stager<'_> {
    fn archive(&self) -> &Path {
        self.archive
    }

    fn visit(
        &mut self,
        index: u64,
        name: &str,
        _kind: Kind,
        _mode: Option<u32>,
        body: &mut dyn Read,
    ) -> Result<()> {
        let Some(size) = self.wanted.get(&index) else {
            return Ok(());
        };
        let fail =
            |e: std::io::Error| bad(self.archive, Some(name), format!("cannot be staged: {e}"));
        let (mut f, host) = self.staging.create_file(&index.to_string()).map_err(fail)?;
        // At most one byte more than the first pass read: a grown entry is caught by the
        // copy's digest without filling the disk.
        copy_hashed(&mut body.take(size + 1), &mut f)
            .map_err(|e| bad(self.archive, Some(name), format!("cannot be read: {e}")))?;
        self.staged.insert(index, host);
        Ok(())
    }
}

pub(super) fn read_tar(g: &mut dyn Visit, r: &mut dyn Read) -> Result<()> {
    let archive = g.archive().to_path_buf();
    let archive = archive.as_path();
    let mut index = 0u64;
    let mut tar = tar::Archive::new(r);
    let entries = tar
        .entries()
        .map_err(|e| bad(archive, None, format!("not a tar archive: {e}")))?;
    for entry in entries {
        let mut entry =
            entry.map_err(|e| bad(archive, None, format!("unreadable tar entry: {e}")))?;
        let name = entry
            .path()
            .map_err(|e| bad(archive, None, format!("bad entry name: {e}")))?
            .to_string_lossy()
            .into_owned();
        let t = entry.header().entry_type();
        // GNU tar's PAX sparse formats (0.1, 1.0) are regular entries whose data starts
        // with the sparse map: extracted as they are, the file would be wrong.
        let pax_sparse = entry
            .pax_extensions()
            .map_err(|e| bad(archive, Some(&name), format!("bad PAX header: {e}")))?
            .is_some_and(|mut x| {
                x.any(|kv| kv.is_ok_and(|kv| kv.key_bytes().starts_with(b"GNU.sparse.")))
            });
        let kind = if pax_sparse {
            Kind::Unsupported("a sparse file in the PAX format (GNU.sparse.* keys; old GNU sparse entries are extracted: `tar --format=gnu --sparse`)".into())
        } else if t.is_dir() {
            Kind::Dir
        } else if t.is_file() || t.is_contiguous() || t.is_gnu_sparse() {
            // A GNU sparse entry reads as its whole content, holes as zeros.
            Kind::File
        } else if t.is_symlink() {
            let target = entry
                .link_name()
                .map_err(|e| bad(archive, Some(&name), e))?
                .map(|t| t.into_owned())
                .unwrap_or_default();
            Kind::Link(target)
        } else if t.is_hard_link() {
            Kind::Unsupported("a hard link".into())
        } else if t.is_pax_global_extensions()
            || t.is_pax_local_extensions()
            || t.is_gnu_longname()
            || t.is_gnu_longlink()
        {
            continue;
        } else if t.is_character_special() {
            Kind::Unsupported("a character device".into())
        } else if t.is_block_special() {
            Kind::Unsupported("a block device".into())
        } else if t.is_fifo() {
            Kind::Unsupported("a FIFO".into())
        } else {
            Kind::Unsupported(format!("of unknown type {:?}", char::from(t.as_byte())).into())
        };
        let mode = entry.header().mode().ok();
        g.visit(index, &name, kind, mode, &mut entry)?;
        index += 1;
    }
    Ok(())
}

pub(super) fn read_zip(g: &mut dyn Visit, r: &mut dyn ReadSeek) -> Result<()> {
    let archive = g.archive().to_path_buf();
    let archive = archive.as_path();
    let mut zip = zip::ZipArchive::new(r)
        .map_err(|e| bad(archive, None, format!("not a zip archive: {e}")))?;
    for i in 0..zip.len() {
        let mut f = zip
            .by_index(i)
            .map_err(|e| bad(archive, None, format!("unreadable zip entry: {e}")))?;
        let name = f
            .name()
            .map_err(|e| bad(archive, None, format!("bad entry name: {e}")))?
            .into_owned();
        let unix = f.unix_mode();
        let is_link = unix.is_some_and(|m| m & 0o170000 == 0o120000);
        let kind = if f.is_dir() {
            Kind::Dir
        } else if is_link {
            let mut t = Vec::new();
            (&mut f)
                .take(4096)
                .read_to_end(&mut t)
                .map_err(|e| bad(archive, Some(&name), e))?;
            Kind::Link(PathBuf::from(String::from_utf8_lossy(&t).into_owned()))
        } else {
            Kind::File
        };
        g.visit(i as u64, &name, kind, unix.map(|m| m & 0o7777), &mut f)?;
    }
    Ok(())
}
