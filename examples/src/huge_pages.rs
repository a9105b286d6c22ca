//! A global allocator that asks Linux for transparent huge pages on large allocations, for the
//! tools that sweep arrays of millions of entries in a few hundred milliseconds.
//!
//! `tensormem-plan` at `--time-limit 0` on a million buffers spends its time in passes over arrays
//! of 4–48 MB whose entries it reads and writes in a random order (ranks and offsets by buffer id).
//! With 4 KiB pages every such access misses the TLB, and faulting in the fresh arrays is a
//! fifth of the planning time. This machine's default (`transparent_hugepage=madvise`) gives huge
//! pages only where asked, so this asks for them, as glibc's `glibc.malloc.hugetlb=1` tunable
//! would: 0.21 → 0.17 s of planning at a million buffers there (`GLIBC_TUNABLES`, idle machine).
//! Elsewhere it is the system allocator unchanged.

use std::alloc::{GlobalAlloc, Layout, System};

/// The system allocator, with huge pages advised on allocations of at least [`HUGE_MIN`] bytes.
pub struct HugePages;

/// Smallest allocation advised: a few huge pages, so rounding its ends inward still leaves most.
pub const HUGE_MIN: usize = 8 << 20;

// SAFETY: every call is forwarded to `System` unchanged; `advise` only changes how the kernel
// backs pages of the block just returned, never its contents or its bounds.
unsafe impl GlobalAlloc for HugePages {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc`, passed on.
        let ptr = unsafe { System.alloc(layout) };
        advise(ptr, layout.size());
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        advise(ptr, layout.size());
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with `layout` (every allocation here does).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as `dealloc`, and the caller's contract for `realloc`.
        let ptr = unsafe { System.realloc(ptr, layout, new_size) };
        advise(ptr, new_size);
        ptr
    }
}

/// Advises huge pages for the whole 2 MiB pages inside `[ptr, ptr + len)`, if it is large.
#[cfg(target_os = "linux")]
fn advise(ptr: *mut u8, len: usize) {
    const HUGE_PAGE: usize = 2 << 20;
    if ptr.is_null() || len < HUGE_MIN {
        return;
    }
    let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
    let end = (ptr as usize + len) & !(HUGE_PAGE - 1);
    if end > start {
        // SAFETY: the range lies within a block the allocator just returned to us; the advice
        // changes neither its contents nor its mapping's permissions. A refusal (huge pages off)
        // leaves ordinary pages, so the result is ignored.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise(_ptr: *mut u8, _len: usize) {}
