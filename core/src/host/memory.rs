//! The memory behind a host block: a zeroed heap allocation for a regular block, or a reservation
//! of address space whose prefix is committed for a block that grows in place.
//!
//! Reserve-and-commit is the host's counterpart of CUDA's `cuMemAddressReserve` + `cuMemMap`: the
//! whole range is mapped `PROT_NONE` with `MAP_NORESERVE` (address space only: no memory, no
//! commit charge), and growing maps the next pages read-write in place (`mprotect`). Shrinking
//! maps the tail afresh as `PROT_NONE` (`mmap` with `MAP_FIXED`), which returns its pages to the
//! kernel at once. The start address never changes, so every offset inside the block stays valid
//! and in-flight commands, which hold the block's memory by reference, never see it move.
//!
//! Reservations exist on Unix only; elsewhere the backend reports no in-place growth.

use std::ops::{Deref, DerefMut};

/// A host block's bytes. Reads as the committed bytes (`[u8]`), whatever backs them.
pub(super) enum HostMemory {
    /// A regular block: zeroed bytes from the allocator.
    Heap(Vec<u8>),
    /// A block that grows in place.
    #[cfg(unix)]
    Reserved(Reservation),
}

impl HostMemory {
    /// `size` (> 0) zero bytes from the allocator's zeroed path (`calloc`): large blocks come as
    /// fresh zero pages that are touched only when used, so a new block costs no fill of its whole
    /// size. `None` when the allocation fails.
    pub(super) fn zeroed(size: usize) -> Option<Self> {
        let layout = std::alloc::Layout::array::<u8>(size).ok()?;
        if layout.size() == 0 {
            return Some(HostMemory::Heap(Vec::new()));
        }
        // SAFETY: `layout` has a non-zero size (checked above).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return None;
        }
        // SAFETY: `ptr` comes from the global allocator with `layout` (align 1, `size` bytes),
        // every byte is initialised (zeroed), and length = capacity = `size`, as `Vec<u8>` needs.
        Some(HostMemory::Heap(unsafe {
            Vec::from_raw_parts(ptr, size, size)
        }))
    }
}

impl Deref for HostMemory {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            HostMemory::Heap(v) => v,
            #[cfg(unix)]
            HostMemory::Reserved(r) => r.committed(),
        }
    }
}

impl DerefMut for HostMemory {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            HostMemory::Heap(v) => v,
            #[cfg(unix)]
            HostMemory::Reserved(r) => r.committed_mut(),
        }
    }
}

/// The page size: the unit of commit.
#[cfg(unix)]
pub(super) fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(page)
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096)
}

/// A range of address space of which the first `committed` bytes are readable and writable.
///
/// Invariants: `base` is the start of a private anonymous mapping of `reserved` bytes owned by
/// this value alone; `committed <= reserved`, both multiples of the page size; the first
/// `committed` bytes are mapped read-write (zero-filled on first touch), the rest `PROT_NONE`.
#[cfg(unix)]
pub(super) struct Reservation {
    base: std::ptr::NonNull<u8>,
    reserved: usize,
    committed: usize,
}

// SAFETY: the mapping is owned by this value alone (no other pointer to it exists), so moving it
// to another thread moves sole ownership; shared access hands out only `&[u8]` of the committed
// part, and mutation needs `&mut self`, so Rust's aliasing rules make concurrent use sound.
#[cfg(unix)]
unsafe impl Send for Reservation {}
// SAFETY: as for `Send`: `&Reservation` only allows reads of initialised committed bytes.
#[cfg(unix)]
unsafe impl Sync for Reservation {}

#[cfg(unix)]
impl Reservation {
    /// Reserves `reserved` bytes of address space and commits the first `committed`. Both must
    /// be multiples of the page size, `committed <= reserved`, `reserved > 0`. The error is the
    /// OS error (`ENOMEM` when address space or memory is short).
    pub(super) fn new(reserved: usize, committed: usize) -> std::io::Result<Self> {
        debug_assert!(reserved > 0 && committed <= reserved);
        // SAFETY: a fresh private anonymous mapping at an address the kernel chooses touches no
        // existing memory; the result is checked against MAP_FAILED.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserved,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let Some(base) = std::ptr::NonNull::new(ptr.cast::<u8>()) else {
            return Err(std::io::Error::other("mmap returned a null mapping"));
        };
        let mut r = Reservation {
            base,
            reserved,
            committed: 0,
        };
        r.resize(committed)?;
        Ok(r)
    }

    /// Bytes of address space reserved.
    pub(super) fn reserved(&self) -> usize {
        self.reserved
    }

    /// Start address of the reservation (tests read the process's mappings with it).
    #[cfg(test)]
    pub(super) fn base(&self) -> usize {
        self.base.as_ptr() as usize
    }

    fn committed(&self) -> &[u8] {
        // SAFETY: the first `committed` bytes are mapped read-write and initialised (anonymous
        // pages read as zero), and the mapping lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.committed) }
    }

    fn committed_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `committed`; `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr(), self.committed) }
    }

    /// Commits or decommits so that exactly the first `size` bytes (a page multiple, at most the
    /// reservation) are usable. Growing keeps the existing bytes, new bytes read as zero; a
    /// failure leaves the committed size as it was.
    pub(super) fn resize(&mut self, size: usize) -> std::io::Result<()> {
        debug_assert!(size <= self.reserved);
        if size > self.committed {
            // SAFETY: `[committed, size)` lies inside our reservation (size <= reserved) and is
            // currently PROT_NONE; making it read-write affects no other mapping.
            let rc = unsafe {
                libc::mprotect(
                    self.base.as_ptr().add(self.committed).cast(),
                    size - self.committed,
                    libc::PROT_READ | libc::PROT_WRITE,
                )
            };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
        } else if size < self.committed {
            // SAFETY: `[size, committed)` lies inside our reservation and no reference into it
            // outlives this `&mut self` call; MAP_FIXED replaces exactly that range with a fresh
            // PROT_NONE mapping, which discards its pages.
            let ptr = unsafe {
                libc::mmap(
                    self.base.as_ptr().add(size).cast(),
                    self.committed - size,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if ptr == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
        }
        self.committed = size;
        Ok(())
    }
}

#[cfg(unix)]
impl Drop for Reservation {
    fn drop(&mut self) {
        // SAFETY: `base .. base + reserved` is exactly our mapping and nothing refers into it
        // once the owner is dropped. A failure can only leak address space.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.reserved) };
    }
}
