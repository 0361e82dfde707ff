//! Memory accounting of script runs: the bytes a run holds, whatever holds them.
//!
//! Rhai's own limits bound one value at a time (a string, an array, a map, and the strings
//! inside one array or map), not what a script holds in all: many variables, call frames,
//! map keys (never measured by Rhai), closures' captured values, an overlay of planned
//! writes. Walking every value would cost time proportional to the data on every check and
//! would count a string shared by reference (`m[k] = v` stores another reference to `v`,
//! not a copy) as many times as it is referenced.
//!
//! So the allocator counts instead. [`CountingAlloc`] wraps the system allocator and keeps,
//! for each thread, the bytes allocated on it minus the bytes freed on it ([`thread_net`]).
//! A script runs on its own thread ([`run_script_with`](crate::step::run_script_with)), and
//! everything a run does happens on that thread: Rhai values, host calls (command output is
//! captured by polling on the calling thread), modules compiled at run time, output. The
//! growth of that thread's count since the run started is therefore the memory the run holds
//! (counted once per allocation, shared strings included once, capacity included), checked
//! against [`Limits::max_memory`](super::Limits::max_memory) before every Rhai operation.
//!
//! Each binary installs [`CountingAlloc`] as its global allocator (`src/bin/*`, and the test
//! harnesses: `src/lib.rs` under `cfg(test)`, `tests/main.rs`); its cost is one thread-local
//! add per allocation. A program that links the library without installing it sees
//! [`thread_net`] stay at 0, so the memory limit never fires there.
//!
//! Memory freed on a thread other than the one that allocated it is counted on neither
//! correctly (the allocating thread keeps it, the freeing thread goes below zero). Nothing
//! in a run moves memory across threads at volume; the residual effect is bounded by what a
//! run receives from outside (its context map, at most a few KiB).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    /// Bytes allocated minus bytes freed on this thread (const-initialised and without a
    /// destructor, so it can be used from inside the allocator).
    static NET: Cell<isize> = const { Cell::new(0) };
}

#[inline]
fn add(delta: isize) {
    // `try_with` cannot fail for a const thread-local without a destructor; ignore it anyway
    // rather than panic inside the allocator.
    let _ = NET.try_with(|n| n.set(n.get().wrapping_add(delta)));
}

/// Bytes allocated minus bytes freed on the calling thread since it started (negative when
/// it freed more than it allocated, e.g. memory another thread allocated). Compare two
/// readings on one thread to get what was allocated and kept in between.
pub fn thread_net() -> isize {
    NET.try_with(Cell::get).unwrap_or(0)
}

/// The system allocator, counting per-thread net bytes for [`thread_net`]. See the module
/// docs.
#[derive(Debug, Default, Clone, Copy)]
pub struct CountingAlloc;

// SAFETY: every method forwards to `System` with the same arguments and only adds
// bookkeeping that neither allocates nor touches the returned memory.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is; the caller upholds `GlobalAlloc::alloc`'s contract.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            add(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            add(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` (through this allocator) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        add(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` was allocated by `System` (through this allocator) with `layout`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            add(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_this_thread_keeps() {
        // On a fresh thread, so that other tests' allocations do not interfere.
        std::thread::spawn(|| {
            let before = thread_net();
            let v = vec![0u8; 10 << 20];
            let held = thread_net() - before;
            assert!((10 << 20..(10 << 20) + 4096).contains(&held), "{held}");
            drop(v);
            assert!((thread_net() - before).abs() < 4096);
        })
        .join()
        .unwrap();
    }
}
