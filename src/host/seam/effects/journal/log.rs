//! The journal's log format: length-prefixed, checksummed entries (`SKJ2`), how they are
//! written, read back and checked (a torn tail is [`Damage`]), and the legacy line format.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;

use sha2::{Digest, Sha256};

use super::records::{ANY, HEAD, MAGIC, MAX_META, Record, TAIL, jerr};
use crate::host::root::HostRoot;
use crate::host::root::error::Result;

/// Write one record (module docs) to `w`: returns its length and its content's SHA-256.
///
/// # Errors
/// Write failures of `w`; `content` yielding fewer bytes than its length (changed while
/// journaled).
pub(super) fn write_record(
    w: &mut dyn Write,
    rec: &Record,
    content: Option<(&mut dyn Read, u64)>,
) -> std::io::Result<(u64, [u8; 32])> {
    let meta = serde_json::to_vec(rec).map_err(std::io::Error::other)?;
    let len = content.as_ref().map_or(0, |(_, n)| *n);
    let mut head = Vec::with_capacity(HEAD + meta.len() + TAIL);
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    head.extend_from_slice(&len.to_le_bytes());
    head.extend_from_slice(&meta);
    let data_digest: [u8; 32] = match content {
        None => Sha256::digest([]).into(),
        Some((src, n)) => {
            w.write_all(&head)?;
            head.clear();
            let mut h = HashingWriter {
                inner: &mut *w,
                hash: Sha256::new(),
            };
            let copied = std::io::copy(&mut src.take(n), &mut h)?;
            if copied != n {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("changed while journaled: {copied} of {n} bytes read"),
                ));
            }
            h.hash.finalize().into()
        }
    };
    let mut all = Sha256::new();
    all.update(MAGIC);
    all.update((meta.len() as u32).to_le_bytes());
    all.update(len.to_le_bytes());
    all.update(&meta);
    all.update(data_digest);
    head.extend_from_slice(&data_digest);
    head.extend_from_slice(&all.finalize());
    w.write_all(&head)?;
    Ok(((HEAD + meta.len() + TAIL) as u64 + len, data_digest))
}

/// A writer that hashes what it passes on.
pub(super) struct HashingWriter<'a> {
    pub(super) inner: &'a mut dyn Write,
    pub(super) hash: Sha256,
}

impl Write for HashingWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// One whole record read back: where its content is and its digest.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) rec: Record,
    /// Where the record starts and ends in the log.
    pub(super) start: u64,
    pub(super) end: u64,
    /// The content's offset in the log and its length.
    pub(super) offset: u64,
    pub(super) len: u64,
    /// The content's SHA-256.
    pub(super) digest: [u8; 32],
}

/// Where and why a log stops being readable.
#[derive(Debug, PartialEq, Eq)]
pub struct Damage {
    /// The byte offset of the first record not whole.
    pub offset: u64,
    /// What is wrong with it.
    pub why: &'static str,
}

/// Read the whole records of a log of `total` bytes from `r`, in order, each checked
/// (length, checksum) before it is used; stops at the first one that is not whole and
/// says where. Never reads past a record's declared end into the next one.
pub(super) fn read_entries<R: Read>(r: &mut R, total: u64) -> (Vec<Entry>, Option<Damage>) {
    let mut out = Vec::new();
    let mut pos = 0u64;
    // Bounded by `total`: every record advances `pos` by at least HEAD + TAIL bytes.
    while pos < total {
        match read_entry(r, pos, total) {
            Ok((entry, next)) => {
                out.push(entry);
                pos = next;
            }
            Err(why) => {
                return (out, Some(Damage { offset: pos, why }));
            }
        }
    }
    (out, None)
}

/// One record at `pos` (its end no further than `total`); the record and the offset after
/// it.
pub(super) fn read_entry<R: Read>(
    r: &mut R,
    pos: u64,
    total: u64,
) -> std::result::Result<(Entry, u64), &'static str> {
    let left = total - pos;
    if left < (HEAD + TAIL) as u64 {
        return Err("cut short");
    }
    let mut head = [0u8; HEAD];
    r.read_exact(&mut head).map_err(|_| "cut short")?;
    if &head[..4] != MAGIC {
        return Err("not a record");
    }
    let meta_len = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
    let data_len = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
    if meta_len > MAX_META {
        return Err("header too long");
    }
    let size = (HEAD as u64 + TAIL as u64 + u64::from(meta_len))
        .checked_add(data_len)
        .ok_or("cut short")?;
    if size > left {
        return Err("cut short");
    }
    let mut meta = vec![0u8; meta_len as usize];
    r.read_exact(&mut meta).map_err(|_| "cut short")?;
    let mut h = Sha256::new();
    let copied = std::io::copy(&mut (&mut *r).take(data_len), &mut HashSink(&mut h))
        .map_err(|_| "cut short")?;
    if copied != data_len {
        return Err("cut short");
    }
    let digest: [u8; 32] = h.finalize().into();
    let mut tail = [0u8; TAIL];
    r.read_exact(&mut tail).map_err(|_| "cut short")?;
    let mut all = Sha256::new();
    all.update(head);
    all.update(&meta);
    all.update(digest);
    let all: [u8; 32] = all.finalize().into();
    if tail[..32] != digest || tail[32..] != all {
        return Err("checksum mismatch");
    }
    let rec: Record = serde_json::from_slice(&meta).map_err(|_| "unknown record")?;
    let offset = pos + HEAD as u64 + u64::from(meta_len);
    Ok((
        Entry {
            rec,
            start: pos,
            end: pos + size,
            offset,
            len: data_len,
            digest,
        },
        pos + size,
    ))
}

/// A `Write` that only hashes.
pub(super) struct HashSink<'a>(&'a mut Sha256);

impl Write for HashSink<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The whole records of a log held in memory, as byte ranges, and where it stops being
/// readable: the journal parser the fuzz target drives (`tests/fuzz`). Each range starts
/// where the previous one ended and lies within `bytes`; each record's checksums matched.
#[doc(hidden)]
pub fn parse_log(bytes: &[u8]) -> (Vec<std::ops::Range<u64>>, Option<Damage>) {
    let mut cur = std::io::Cursor::new(bytes);
    let (entries, damage) = read_entries(&mut cur, bytes.len() as u64);
    (
        entries.into_iter().map(|e| e.start..e.end).collect(),
        damage,
    )
}

/// The whole records of the log `f` (module docs), and where it stops being readable.
pub(super) fn entries_of(
    root: &HostRoot,
    f: &File,
    log_path: &Path,
) -> Result<(Vec<Entry>, Option<Damage>)> {
    let total = f.metadata().map_err(|e| jerr(log_path, root, e))?.len();
    let mut r = BufReader::new(f);
    let legacy = r.fill_buf().map_err(|e| jerr(log_path, root, e))?.first() == Some(&b'{');
    Ok(match legacy {
        true => read_legacy(&mut r, total),
        false => read_entries(&mut r, total),
    })
}

/// The records of a journal an agent before issue 28 left (a JSON line per record, a file's
/// content after its line; no checksums): read up to the first line that does not parse
/// or a content cut short, each file and absent record followed by a wrote record of
/// unknown content (`*`: put back whole, as that agent's undo did).
pub(super) fn read_legacy<R: std::io::BufRead>(
    r: &mut R,
    total: u64,
) -> (Vec<Entry>, Option<Damage>) {
    let mut out = Vec::new();
    let mut pos = 0u64;
    let mut line = Vec::new();
    // Bounded by `total`: every record advances `pos` by at least one byte.
    while pos < total {
        line.clear();
        let Ok(n) = r.read_until(b'\n', &mut line) else {
            break;
        };
        if n == 0 || line.last() != Some(&b'\n') {
            return (
                out,
                Some(Damage {
                    offset: pos,
                    why: "cut short",
                }),
            );
        }
        let start = pos;
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&line) else {
            return (
                out,
                Some(Damage {
                    offset: pos,
                    why: "not a record",
                }),
            );
        };
        let len = v
            .get("len")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        let Ok(rec) = serde_json::from_value::<Record>(v) else {
            return (
                out,
                Some(Damage {
                    offset: pos,
                    why: "unknown record",
                }),
            );
        };
        let offset = pos + n as u64;
        if len > total - offset {
            return (
                out,
                Some(Damage {
                    offset: pos,
                    why: "cut short",
                }),
            );
        }
        let mut h = Sha256::new();
        if std::io::copy(&mut (&mut *r).take(len), &mut HashSink(&mut h)).ok() != Some(len) {
            return (
                out,
                Some(Damage {
                    offset: pos,
                    why: "cut short",
                }),
            );
        }
        pos = offset + len;
        let wrote = match &rec {
            Record::File { path, .. } | Record::Absent { path } => Some(path.clone()),
            _ => None,
        };
        out.push(Entry {
            rec,
            start,
            end: pos,
            offset,
            len,
            digest: h.finalize().into(),
        });
        if let Some(path) = wrote {
            out.push(Entry {
                rec: Record::Wrote {
                    path,
                    base: ANY.into(),
                    after: ANY.into(),
                    lines: None,
                    meta: None,
                },
                start: pos,
                end: pos,
                offset: pos,
                len: 0,
                digest: [0; 32],
            });
        }
    }
    (out, None)
}
