//! [`AppendBuf`]: an append-only byte buffer whose prefixes are handed out as
//! [`bytes::Bytes`] without copying.
//!
//! The line view ([`crate::host::effects::lines::Lines`]) keeps the rendering of a file it last
//! wrote, and `fs::ensure_line` extends it by one line per changing call. Each call's
//! [`crate::host::effects::effect::Effect::WriteFile`] carries the whole new content, which the
//! plan's overlay keeps as the file's planned content and the report's hashes keep as the
//! file's last write ([`crate::host::effects::hashes`]). With a `Vec<u8>` each of those was a copy
//! of the whole file per call, O(N × file size) for N appends. Here the rendering is one
//! allocation that only grows at its end: [`AppendBuf::freeze`] hands out the bytes
//! written so far as a `Bytes` that shares the allocation (a reference count, no copy), and
//! later appends write only past every length handed out, so a frozen `Bytes` never sees
//! its bytes change. When the allocation is full it is replaced by one twice as large (the
//! written bytes copied once, amortised O(1) per byte); the old one lives on for as long as
//! a `Bytes` handed out from it does.
//!
//! Memory: at most the current allocation (up to twice the written length) plus the older
//! allocations still referenced by a handed-out `Bytes`.

use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::Arc;

use bytes::Bytes;

/// One allocation of `cap` bytes, of which a prefix is initialised (tracked by the owner).
struct Chunk {
    ptr: NonNull<u8>,
    cap: usize,
}

// SAFETY: a `Chunk` is a plain heap allocation; the bytes any `Frozen` reads are never
// written again (module docs), and only the one `AppendBuf` writes, through `&mut self`.
unsafe impl Send for Chunk {}
// SAFETY: as for `Send`: shared readers only read initialised bytes no one writes.
unsafe impl Sync for Chunk {}

impl Chunk {
    fn with_capacity(cap: usize) -> Chunk {
        let mut v = ManuallyDrop::new(Vec::<u8>::with_capacity(cap));
        Chunk {
            // A `Vec`'s pointer is never null (dangling but aligned when `cap` is 0).
            ptr: NonNull::new(v.as_mut_ptr()).expect("Vec pointer is non-null"),
            cap: v.capacity(),
        }
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `cap` are those of the `Vec` made in `with_capacity`; a length
        // of 0 drops no elements (u8 needs none) and frees the allocation.
        unsafe { drop(Vec::from_raw_parts(self.ptr.as_ptr(), 0, self.cap)) }
    }
}

/// The owner behind a frozen `Bytes`: the first `len` bytes of a chunk.
struct Frozen {
    chunk: Arc<Chunk>,
    len: usize,
}

impl AsRef<[u8]> for Frozen {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `len <= cap`, and the first `len` bytes were written before this `Frozen`
        // was made and are never written again (only bytes past every frozen length are).
        unsafe { std::slice::from_raw_parts(self.chunk.ptr.as_ptr(), self.len) }
    }
}

/// An append-only byte buffer whose content can be frozen into shared [`Bytes`] without a
/// copy (module docs). Not `Clone`: there is one writer.
pub(crate) struct AppendBuf {
    chunk: Arc<Chunk>,
    /// Bytes written (initialised) at the start of `chunk`.
    len: usize,
}

impl std::fmt::Debug for AppendBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppendBuf")
            .field("len", &self.len)
            .field("cap", &self.chunk.cap)
            .finish()
    }
}

impl AppendBuf {
    /// An empty buffer with room for `cap` bytes before its first reallocation.
    pub(crate) fn with_capacity(cap: usize) -> AppendBuf {
        AppendBuf {
            chunk: Arc::new(Chunk::with_capacity(cap)),
            len: 0,
        }
    }

    /// Bytes written.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The bytes written, borrowed.
    #[cfg(test)]
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: the first `len` bytes are initialised; `&self` excludes a concurrent append.
        unsafe { std::slice::from_raw_parts(self.chunk.ptr.as_ptr(), self.len) }
    }

    /// Append `bytes`: written past every length frozen so far, so no `Bytes` handed out
    /// sees a change. Grows the allocation (a new one, the written bytes copied) when full.
    pub(crate) fn extend_from_slice(&mut self, bytes: &[u8]) {
        let need = self
            .len
            .checked_add(bytes.len())
            .expect("buffer length overflow");
        if need > self.chunk.cap {
            let cap = need.max(self.chunk.cap.saturating_mul(2)).max(64);
            let new = Chunk::with_capacity(cap);
            // SAFETY: both regions are valid for `len` bytes, the new one freshly allocated
            // (so they do not overlap), and the old one's first `len` bytes are initialised.
            unsafe {
                std::ptr::copy_nonoverlapping(self.chunk.ptr.as_ptr(), new.ptr.as_ptr(), self.len);
            }
            self.chunk = Arc::new(new);
        }
        // SAFETY: `len + bytes.len() <= cap`; the destination `[len, need)` lies past every
        // frozen length (each is at most `len`), so no reader's slice covers it; `bytes`
        // cannot overlap it (a `Bytes` frozen from this buffer covers at most `[0, len)`,
        // and `&mut self` excludes a borrow of `as_slice`).
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.chunk.ptr.as_ptr().add(self.len),
                bytes.len(),
            );
        }
        self.len = need;
    }

    /// The bytes written so far as a shared [`Bytes`]: no copy (one small allocation for
    /// the owner record); later appends do not change it.
    pub(crate) fn freeze(&self) -> Bytes {
        if self.len == 0 {
            return Bytes::new();
        }
        Bytes::from_owner(Frozen {
            chunk: Arc::clone(&self.chunk),
            len: self.len,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frozen_prefixes_keep_their_bytes_while_the_buffer_grows() {
        let mut b = AppendBuf::with_capacity(4);
        assert_eq!(b.freeze(), Bytes::new());
        b.extend_from_slice(b"ab");
        let f1 = b.freeze();
        b.extend_from_slice(b"cd");
        let f2 = b.freeze();
        // Same allocation: the second freeze shares the first one's bytes.
        assert_eq!(f1.as_ptr(), f2.as_ptr());
        // Past the capacity: a new allocation, the old frozen ones unchanged.
        b.extend_from_slice(b"efgh");
        let f3 = b.freeze();
        assert_ne!(f3.as_ptr(), f2.as_ptr());
        let mut frozen = vec![f1, f2, f3];
        for i in 0..1000u32 {
            b.extend_from_slice(format!("{i}\n").as_bytes());
            if i % 97 == 0 {
                frozen.push(b.freeze());
            }
        }
        assert_eq!(&frozen[0][..], b"ab");
        assert_eq!(&frozen[1][..], b"abcd");
        assert_eq!(&frozen[2][..], b"abcdefgh");
        let all: String = (0..1000u32).map(|i| format!("{i}\n")).collect();
        assert_eq!(b.as_slice(), format!("abcdefgh{all}").as_bytes());
        assert_eq!(b.len(), 8 + all.len());
        for f in &frozen[3..] {
            assert_eq!(&f[..], &b.as_slice()[..f.len()]);
        }
        // A frozen `Bytes` outlives the buffer and its slices share it.
        let last = b.freeze();
        drop(b);
        assert_eq!(&last.slice(0..8)[..], b"abcdefgh");
        assert_eq!(last.len(), 8 + all.len());
    }

    #[test]
    fn frozen_bytes_cross_threads() {
        let mut b = AppendBuf::with_capacity(0);
        b.extend_from_slice(b"shared");
        let f = b.freeze();
        let t = std::thread::spawn(move || f.to_vec());
        b.extend_from_slice(b" more");
        assert_eq!(t.join().unwrap(), b"shared");
        assert_eq!(b.as_slice(), b"shared more");
    }
}
