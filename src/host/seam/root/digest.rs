//! Content hashes of a report's changes (`before`/`after`, [`sha256_tag`]) and of streamed
//! files (a copy's source and destination, [`sha256_stream`], [`copy_hashed`]), with the
//! `sha2` crate.

use std::io::{self, Read, Write};

use sha2::{Digest, Sha256};

/// Bytes read at a time by the streaming digests and copies (64 KiB).
const CHUNK: usize = 64 * 1024;

/// The SHA-256 digest of `data`.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// `sha256:<64 lowercase hex digits>` of `data`, as reports show content hashes.
pub fn sha256_tag(data: &[u8]) -> String {
    let mut s = String::with_capacity(71);
    s.push_str("sha256:");
    for b in sha256(data) {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// 64 lowercase hex digits of `digest`.
fn hex(digest: [u8; 32]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The size in bytes and the SHA-256 (64 lowercase hex digits) of everything `r` yields,
/// read 64 KiB at a time (never held whole).
///
/// # Errors
/// Read failures of `r`.
pub fn sha256_stream(r: &mut dyn Read) -> io::Result<(u64, String)> {
    copy_hashed(r, &mut io::sink())
}

/// Copy everything `r` yields to `w`, 64 KiB at a time; returns the size in bytes and the
/// SHA-256 (64 lowercase hex digits) of what was copied.
///
/// # Errors
/// Read failures of `r`, write failures of `w`.
pub fn copy_hashed(r: &mut dyn Read, w: &mut dyn Write) -> io::Result<(u64, String)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut size = 0u64;
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        w.write_all(&buf[..n])?;
        size += n as u64;
    }
    Ok((size, hex(hasher.finalize().into())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_digest_and_copy_match_the_whole_digest() {
        // Three chunks and a bit, so the chunk boundaries are crossed.
        let data: Vec<u8> = (0..(3 * CHUNK + 17)).map(|i| (i % 251) as u8).collect();
        let want = sha256_tag(&data)["sha256:".len()..].to_string();
        assert_eq!(
            sha256_stream(&mut &data[..]).unwrap(),
            (data.len() as u64, want.clone())
        );
        let mut out = Vec::new();
        assert_eq!(
            copy_hashed(&mut &data[..], &mut out).unwrap(),
            (data.len() as u64, want)
        );
        assert_eq!(out, data);
    }

    #[test]
    fn known_vectors() {
        assert_eq!(
            sha256_tag(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            sha256_tag(b"abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        // Two blocks (56 bytes: the padding spills into a second block).
        assert_eq!(
            sha256_tag(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "sha256:248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
        assert_eq!(
            sha256_tag(&vec![b'a'; 1000]),
            "sha256:41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3"
        );
    }
}
