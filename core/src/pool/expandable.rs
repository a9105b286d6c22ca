//! Allocations that grow in place: the optional capability a pool offers through
//! [`DevicePool::expandable`].
//!
//! An expandable allocation owns a reservation of address space of its own (the backend's
//! [`Growable`](crate::backend::Growable) blocks: the host's reserve-and-commit, CUDA's virtual
//! memory), of which only its current size is backed by memory. [`Expandable::expand`] commits
//! more at its end: the handle, the block and the offsets of everything already in it stay the
//! same, so kernels that bind it and tables that point into it need no rewrite and nothing is
//! copied. It is what a buffer that grows by appending wants (a paged KV cache): one binding
//! that follows its contents instead of segments added a step at a time, or a reallocation
//! that holds the old and the new copy at once.
//!
//! * **Cost.** Allocating reserves one block; expanding is one `resize_block` and a budget
//!   charge, both outside the hot path. Address space costs nothing until committed.
//! * **Accounting.** Committed bytes count in the pool's budget and reserved bytes like any
//!   block; the allocation's size is its committed size (whole granules), which the statistics
//!   and the leak report see.
//! * **Adaptors.** An adaptor that only observes (statistics, leak report, tracing) forwards
//!   the capability and sees the growth; one that lays something out around or inside each
//!   allocation (guard margins, zero-on-reuse) offers none, so a stack with it falls back to
//!   ordinary allocations. A pool without in-place growth offers none.
//! * **Freeing** is the ordinary free: the reservation goes back to the backend with the
//!   memory once the allocation's last use completes.

use crate::Result;
use crate::pool::{Allocation, Handle};

#[cfg(doc)]
use crate::pool::DevicePool;

/// What an expandable allocation asks for: its first size, the address space it may grow
/// into, and a label.
#[derive(Copy, Clone, Debug)]
pub struct ExpandableDesc<'a> {
    /// Bytes backed by memory from the start.
    pub size: u64,
    /// Bytes of address space reserved for this allocation alone; it grows up to this.
    pub reserve: u64,
    /// A label for traces, leak reports and native debug tools.
    pub label: &'a str,
}

impl<'a> ExpandableDesc<'a> {
    /// `size` bytes now, room for `reserve`, labelled `label`.
    pub fn new(size: u64, reserve: u64, label: &'a str) -> Self {
        ExpandableDesc {
            size,
            reserve,
            label,
        }
    }
}

/// Allocations that grow in place, reached through [`DevicePool::expandable`]. See the module
/// doc.
pub trait Expandable: Send + Sync {
    /// Allocates at least `desc.size` bytes at the start of a reservation of at least
    /// `desc.reserve` bytes of address space held by this allocation alone (both rounded up to
    /// the backend's growth granularity; the reservation is capped by what one reservation may
    /// span). `Ok(None)` when no reservation can be made now (address space, or the budget,
    /// refuse it): the caller allocates as usual.
    ///
    /// # Errors
    /// [`Error::ZeroSize`](crate::Error::ZeroSize),
    /// [`Error::TooLarge`](crate::Error::TooLarge) for a size above the reservation or the
    /// device, [`Error::DeviceLost`](crate::Error::DeviceLost).
    fn allocate_expandable(&self, desc: &ExpandableDesc<'_>) -> Result<Option<Allocation>>;

    /// Grows an expandable allocation to at least `size` bytes in place and returns it: the
    /// same handle, block and offset, its old bytes unchanged. A size at or below the current
    /// one changes nothing.
    ///
    /// # Errors
    /// [`Error::TooLarge`](crate::Error::TooLarge) past its reservation,
    /// [`Error::OutOfMemory`](crate::Error::OutOfMemory) when the budget or the device refuses
    /// the memory, [`Error::Unsupported`](crate::Error::Unsupported) for an allocation that is
    /// not expandable, [`Error::StaleHandle`](crate::Error::StaleHandle),
    /// [`Error::DeviceLost`](crate::Error::DeviceLost). The allocation is unchanged on error.
    fn expand(&self, handle: Handle, size: u64) -> Result<Allocation>;
}
