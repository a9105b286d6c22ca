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
//!
//! **Huge pages.** Every whole 2 MiB page inside a block (regular or reserved) is advised for
//! transparent huge pages ([`advise_huge_pages`]): weights are streamed a few rows at a time, and
//! with 4 KiB pages a TLB miss every few rows costs a page walk, a long one in a virtual machine.
//! A block smaller than 2 MiB, and the ragged ends of a larger one, keep 4 KiB pages, so a huge
//! page never holds more than one block's bytes.
//!
//! **NUMA.** With a node to bind to ([`HostConfig::host_placement`](super::HostConfig)), every
//! block is mapped by the backend itself (a fully committed [`Reservation`]) and bound with
//! `mbind` before its first touch; a reservation binds each range as it commits it, so pages of a
//! block that shrank and grew again still come from the node. Without one, regular blocks come from
//! the allocator (`calloc`), whose pages the kernel places on first touch.

use std::ops::{Deref, DerefMut};

#[cfg(unix)]
use crate::backend::BlockId;
use crate::numa::HostPlacement;
use crate::{Error, Result};

/// The driver-style out-of-memory error of a failed host allocation.
pub(super) fn heap_oom(label: &str, requested: u64, reserved: u64) -> Error {
    Error::OutOfMemory(Box::new(crate::OomReport {
        pool: "host heap".into(),
        label: Some(label.to_string()),
        requested,
        reserved,
        ..Default::default()
    }))
}

/// The error of a failed `mmap` or `mbind`: out of memory for `ENOMEM` (retryable, as a
/// driver's), otherwise the OS error.
#[cfg(unix)]
pub(super) fn map_alloc_err(
    e: std::io::Error,
    label: &str,
    requested: u64,
    reserved: u64,
) -> Error {
    match e.raw_os_error() {
        Some(libc::ENOMEM) | None => heap_oom(label, requested, reserved),
        Some(code) => Error::Backend {
            backend: super::NAME,
            api: "mmap/mbind",
            code: code.into(),
            message: e.to_string(),
        },
    }
}

/// The placement a [`HostPlacement`] from the configuration gives this platform: a bound node
/// that the kernel allows (Linux), unbound elsewhere.
///
/// # Errors
/// [`Error::NumaNode`] for a node the kernel refuses; [`crate::ArgumentError::Invalid`]
/// for [`HostPlacement::DriverPlaced`] (the host backend maps every block itself).
pub(super) fn effective_placement(placement: &HostPlacement) -> Result<HostPlacement> {
    match placement {
        HostPlacement::Bound { node, .. } => {
            #[cfg(target_os = "linux")]
            {
                crate::numa::check_kernel_allows(*node)?;
                Ok(placement.clone())
            }
            #[cfg(not(target_os = "linux"))]
            {
                let _ = node;
                Ok(HostPlacement::unbound("NUMA binding (mbind) is Linux-only"))
            }
        }
        HostPlacement::DriverPlaced { .. } => Err(crate::ArgumentError::invalid_value(
            "HostConfig::host_placement",
            "DriverPlaced",
            "Bound or Unbound (the host backend maps its blocks itself)",
        )
        .into()),
        HostPlacement::Unbound { .. } => Ok(placement.clone()),
    }
}

/// A host block's bytes. Reads as the committed bytes (`[u8]`), whatever backs them.
pub(super) enum HostMemory {
    /// A regular block: zeroed bytes from the allocator.
    Heap(Vec<u8>),
    /// A block that grows in place.
    #[cfg(unix)]
    Reserved(Reservation),
    /// A regular block bound to a NUMA node: a committed mapping of whole pages, of which the
    /// first `len` bytes are the block.
    #[cfg(target_os = "linux")]
    Bound {
        /// The mapping (committed = reserved = `len` rounded up to pages).
        map: Reservation,
        /// The block's size in bytes.
        len: usize,
    },
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
        advise_huge_pages(ptr, size);
        // SAFETY: `ptr` comes from the global allocator with `layout` (align 1, `size` bytes),
        // every byte is initialised (zeroed), and length = capacity = `size`, as `Vec<u8>` needs.
        Some(HostMemory::Heap(unsafe {
            Vec::from_raw_parts(ptr, size, size)
        }))
    }

    /// `size` (> 0) zero bytes mapped by the backend and bound to NUMA `node` before any page is
    /// touched.
    ///
    /// # Errors
    /// The OS error of `mmap` (`ENOMEM`) or `mbind` (`EINVAL` for a node the kernel lacks).
    #[cfg(target_os = "linux")]
    pub(super) fn bound(size: usize, node: u32) -> std::io::Result<Self> {
        let page = page_size() as usize;
        let pages = size
            .checked_next_multiple_of(page)
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOMEM))?;
        let map = Reservation::new(pages, pages, Some(node))?;
        Ok(HostMemory::Bound { map, len: size })
    }

    /// The reservation of a block that grows in place.
    ///
    /// # Errors
    /// [`Error::Unsupported`] naming what was `doing` to `block` when it was not reserved.
    #[cfg(unix)]
    pub(super) fn reservation(&mut self, block: BlockId, doing: &str) -> Result<&mut Reservation> {
        match self {
            HostMemory::Reserved(r) => Ok(r),
            _ => Err(Error::Unsupported {
                backend: super::NAME,
                what: format!("{doing} block {}, which was not reserved", block.0),
            }),
        }
    }
}

impl Deref for HostMemory {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            HostMemory::Heap(v) => v,
            #[cfg(unix)]
            HostMemory::Reserved(r) => r.committed(),
            #[cfg(target_os = "linux")]
            HostMemory::Bound { map, len } => &map.committed()[..*len],
        }
    }
}

impl DerefMut for HostMemory {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            HostMemory::Heap(v) => v,
            #[cfg(unix)]
            HostMemory::Reserved(r) => r.committed_mut(),
            #[cfg(target_os = "linux")]
            HostMemory::Bound { map, len } => &mut map.committed_mut()[..*len],
        }
    }
}

/// The size of a transparent huge page on x86-64 and most AArch64 kernels.
const HUGE_PAGE: usize = 2 << 20;

/// Asks the kernel to back the whole 2 MiB pages inside `[ptr, ptr + len)` with transparent huge
/// pages when they are first touched (`MADV_HUGEPAGE`; Linux only, nothing elsewhere). Blocks
/// of weights are streamed by the matmul kernels a few rows at a time: with 4 KiB pages every
/// few rows cost a TLB miss, whose page walk is long in a virtual machine. Advice only: a kernel
/// without transparent huge pages (or with them off) refuses it and the block keeps 4 KiB pages.
/// A block smaller than a huge page, or the ragged ends of a larger one, are left as they are.
fn advise_huge_pages(ptr: *mut u8, len: usize) {
    #[cfg(target_os = "linux")]
    {
        let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
        let end = (ptr as usize).saturating_add(len) / HUGE_PAGE * HUGE_PAGE;
        if end > start {
            // SAFETY: `[start, end)` lies inside memory this process owns (the caller's block,
            // just allocated or mapped); MADV_HUGEPAGE changes only how its pages are backed,
            // never its contents or protection. Its result is ignored: it is advice.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, len, HUGE_PAGE);
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
    /// The NUMA node every committed range is bound to (`mbind`, preferred) before its first
    /// touch; `None`: first touch decides. Always `None` off Linux.
    node: Option<u32>,
    /// Ranges of the committed part given back ([`Reservation::discard`]), for the backend's
    /// accounting (`host/holes.rs`).
    pub(super) holes: super::holes::Decommitted,
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
    /// Reserves `reserved` bytes of address space and commits the first `committed`, binding
    /// committed ranges to NUMA `node` (Linux; `None` elsewhere). Both sizes must be multiples of
    /// the page size, `committed <= reserved`, `reserved > 0`. The error is the OS error
    /// (`ENOMEM` when address space or memory is short, `EINVAL` from `mbind` for a node the
    /// kernel lacks).
    pub(super) fn new(
        reserved: usize,
        committed: usize,
        node: Option<u32>,
    ) -> std::io::Result<Self> {
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
        advise_huge_pages(base.as_ptr(), reserved);
        let mut r = Reservation {
            base,
            reserved,
            committed: 0,
            node,
            holes: Default::default(),
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
            self.bind(self.committed, size - self.committed)?;
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

    /// Gives the pages of `[offset, offset + len)` (page-aligned, inside the committed part)
    /// back to the kernel: the range stays mapped read-write and reads as zeros, and a later
    /// touch faults fresh pages in (bound to the node, whose policy the range keeps).
    pub(super) fn discard(&mut self, offset: usize, len: usize) -> std::io::Result<()> {
        debug_assert!(offset + len <= self.committed);
        // SAFETY: the range lies inside our committed mapping (the caller checked it against
        // the block's size) and no reference into it outlives this `&mut self` call; private
        // anonymous pages are dropped and read back as zeros, which is still initialised memory.
        let rc = unsafe {
            libc::madvise(
                self.base.as_ptr().add(offset).cast(),
                len,
                libc::MADV_DONTNEED,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Binds `[offset, offset + len)` (page-aligned, untouched: about to be committed) to the
    /// reservation's node, if it has one. Binding at each commit, not once at creation, keeps
    /// the policy on ranges that a shrink remapped.
    fn bind(&self, offset: usize, len: usize) -> std::io::Result<()> {
        #[cfg(target_os = "linux")]
        if let Some(node) = self.node {
            // SAFETY: the range lies inside our own reservation (offset + len <= reserved, as
            // `resize` checks), and `base + offset` is page-aligned (both are page multiples).
            return unsafe {
                crate::numa::kernel::bind_preferred(self.base.as_ptr().add(offset), len, node)
            };
        }
        let _ = (offset, len);
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

#[cfg(test)]
mod tests;
