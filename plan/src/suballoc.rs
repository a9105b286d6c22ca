//! Pure offset sub-allocators over `u64` ranges: TLSF, buddy, linear (bump) and ring. No memory is
//! touched.
//!
//! Every allocator here manages an abstract range `[0, capacity)` of bytes and hands out
//! [`Region`]s (an offset and a size inside that range). They never read or write the memory they
//! manage, so the same code carves device arenas, staging rings and the planner's verifier
//! (`shared/notes/style.md` 1.5). The runtime's pools (`tensormem::pool`) put them on top of backend
//! blocks.
//!
//! | allocator | use | allocate | free |
//! |---|---|---|---|
//! | [`Tlsf`] | general purpose arenas | O(1), good fit | O(1), immediate coalescing |
//! | [`Buddy`] | power-of-two blocks | O(log n), next power of two | O(log n), buddy merge |
//! | [`LinearAllocator`] | per-step scratch | O(1), bump | all at once with `reset` |
//! | [`RingAllocator`] | staging, fence-tagged | O(1), FIFO | `retire` + `reclaim` by ticket |
//!
//! # Design choices
//!
//! * **Metadata is out of band** (host memory, one node per block, `u32` indices), because device
//!   memory is often not host-mapped and in-band headers would disturb payload alignment.
//! * **Handles are move-only.** [`Region`] is neither `Clone` nor `Copy` and `free`/`retire` consume
//!   it, so a double free does not compile. Each region also carries the id of the allocator that
//!   issued it and a generation, so a region handed to the wrong allocator is rejected with an
//!   error (never a panic, never corruption).
//! * **One validation rule for every allocator** ([`MAX_ALIGN`], zero size, larger than the range):
//!   bad input returns [`Error::ZeroSize`], [`Error::InvalidAlignment`] or [`Error::TooLarge`];
//!   `Ok(None)` means "no room right now" (freeing or reclaiming can help).
//!
//! # Limits
//!
//! * Single-threaded: every mutating call takes `&mut self`. Pools add the locking.
//! * TLSF is a *good fit* allocator: an allocation can fail while a fitting block exists in the
//!   request's own size class beyond the bounded scan. The bound is documented on [`Tlsf`].
#![forbid(unsafe_code)]

mod buddy;
mod linear;
#[cfg(test)]
mod model;
mod ring;
mod tlsf;

use std::sync::atomic::{AtomicU32, Ordering};

use crate::align::align_up;

use crate::{ArgumentError, Error, Result};

pub use buddy::Buddy;
pub use linear::LinearAllocator;
pub use ring::RingAllocator;
pub use tlsf::Tlsf;

/// What the sub-allocators that free regions one at a time ([`Tlsf`], [`Buddy`]) share: enough for
/// a pool, a test or a benchmark to carve a range without knowing which one it holds. Each type's
/// own methods say more (placement, growth, reports); this is the common part only.
pub trait SubAllocator {
    /// Carves `size` bytes at a multiple of `align`; `Ok(None)` when nothing fits now.
    ///
    /// # Errors
    /// [`Error::ZeroSize`], [`Error::InvalidAlignment`] or [`Error::TooLarge`] for a request
    /// that can never succeed.
    fn allocate(&mut self, size: u64, align: u64) -> Result<Option<Region>>;

    /// Returns a region this allocator issued.
    ///
    /// # Errors
    /// [`Error::ForeignHandle`], [`Error::StaleHandle`], [`Error::DoubleFree`] or
    /// [`crate::ArgumentError::RegionMismatch`] for a region that is not live here; nothing changes
    /// then.
    fn free(&mut self, region: Region) -> Result<()>;

    /// Size of the managed range in bytes.
    fn capacity(&self) -> u64;

    /// Bytes that cannot be handed out now: live regions with the slack or rounding each holds.
    fn used(&self) -> u64;
}

/// Implements [`SubAllocator`] for allocators whose own methods of the same names do the work
/// (`allocate`, `free`, `capacity`, `free_bytes`).
macro_rules! sub_allocator_by_own_methods {
    ($($t:ident),+) => {$(
        impl SubAllocator for $t {
            #[inline]
            fn allocate(&mut self, size: u64, align: u64) -> Result<Option<Region>> {
                $t::allocate(self, size, align)
            }
            #[inline]
            fn free(&mut self, region: Region) -> Result<()> {
                $t::free(self, region)
            }
            fn capacity(&self) -> u64 {
                $t::capacity(self)
            }
            fn used(&self) -> u64 {
                $t::capacity(self) - self.free_bytes()
            }
        }
    )+};
}

sub_allocator_by_own_methods!(Tlsf, Buddy);

/// Largest alignment any sub-allocator accepts, in bytes: 1 GiB.
///
/// Every power of two from 1 to `MAX_ALIGN` is valid. The bound keeps the padding arithmetic far
/// from overflow and covers every device alignment in use (binding offsets, 64 KiB sparse pages,
/// 2 MiB huge pages).
pub const MAX_ALIGN: u64 = 1 << 30;

/// A range `[offset, offset + size)` handed out by a sub-allocator.
///
/// Move-only: [`Tlsf::free`], [`Buddy::free`] and [`RingAllocator::retire`] consume it, so a region cannot be freed
/// twice. It remembers which allocator issued it (and the generation of its metadata slot), so
/// giving it to another allocator returns an error instead of corrupting either one.
#[derive(Debug, PartialEq, Eq)]
pub struct Region {
    /// Start of the region, in bytes from the start of the managed range. A multiple of the
    /// alignment asked for.
    pub offset: u64,
    /// Length of the region in bytes: exactly the size asked for.
    pub size: u64,
    /// Id of the allocator that issued the region.
    owner: u32,
    /// Allocator-specific key: TLSF packs `generation << 32 | node index`, the ring stores its
    /// sequence number, the linear allocator its reset epoch.
    key: u64,
}

/// What a slot-keyed allocator (TLSF, buddy) knows of the slot a region's key names.
pub(crate) struct Slot {
    /// Whether the slot holds a live region.
    pub used: bool,
    /// The slot's current generation.
    pub generation: u32,
    /// Start of the slot's block, in bytes.
    pub offset: u64,
    /// Length of the slot's block, in bytes.
    pub size: u64,
}

/// The checks TLSF and buddy share on a region handed back, whose key packs
/// `generation << 32 | slot`: the slot is one of this allocator's (`owner`; `slot_of` finds it,
/// else a foreign handle), holds a live region (else a double free) of the region's generation
/// (else a stale handle), and its block starts at the region and holds it (else a region
/// mismatch naming `slot_kind`). Returns the slot index.
pub(crate) fn check_region(
    region: &Region,
    owner: u32,
    owner_name: &'static str,
    slot_kind: &'static str,
    slot_of: impl FnOnce(u32) -> Option<Slot>,
) -> Result<u32> {
    const WHAT: &str = "sub-allocation region";
    let idx = region.key as u32;
    let generation = (region.key >> 32) as u32;
    let Some(slot) = slot_of(idx).filter(|_| region.owner == owner) else {
        return Err(Error::ForeignHandle {
            what: WHAT,
            slot: idx,
            owner: owner_name,
        });
    };
    if !slot.used {
        return Err(Error::DoubleFree {
            what: WHAT,
            slot: idx,
            generation,
        });
    }
    if slot.generation != generation {
        return Err(Error::StaleHandle {
            what: WHAT,
            slot: idx,
            generation,
            current: slot.generation,
        });
    }
    if slot.offset != region.offset || region.size > slot.size {
        return Err(ArgumentError::RegionMismatch {
            offset: region.offset,
            size: region.size,
            slot_kind,
            slot: idx,
            slot_offset: slot.offset,
            slot_size: slot.size,
        }
        .into());
    }
    Ok(idx)
}

impl Region {
    /// One past the last byte of the region.
    pub fn end(&self) -> u64 {
        self.offset + self.size
    }

    /// Where its allocator carved the region, kept past the region's free: a starting point
    /// for placing a request at a chosen offset later ([`Tlsf::allocate_at`]).
    pub fn landmark(&self) -> Landmark {
        Landmark(self.key)
    }
}

/// Where a region was carved, as its allocator knows it (TLSF: its block), opaque; it may go
/// stale as the allocator carves and frees, which costs a search, never a wrong placement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Landmark(u64);

/// What a sub-allocator holds, for statistics and out-of-memory reports. All sizes in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SubAllocReport {
    /// Size of the managed range.
    pub capacity: u64,
    /// Bytes that cannot be handed out now (live regions plus the slack and padding attached to
    /// them; each allocator's `report` says exactly what it counts).
    pub used: u64,
    /// `capacity - used`.
    pub free: u64,
    /// The largest region of `align = 1` that could be carved right now, in bytes.
    pub largest_free: u64,
    /// `1 - largest_free / free`; 0 when nothing is free. 0 means all free bytes are in one piece.
    pub fragmentation: f64,
    /// Number of live regions.
    pub allocations: usize,
}

impl SubAllocReport {
    /// Builds a report and derives `free` and `fragmentation` from the other numbers.
    fn new(capacity: u64, used: u64, largest_free: u64, allocations: usize) -> Self {
        let free = capacity - used;
        let fragmentation = if free == 0 {
            0.0
        } else {
            1.0 - largest_free as f64 / free as f64
        };
        SubAllocReport {
            capacity,
            used,
            free,
            largest_free,
            fragmentation,
            allocations,
        }
    }
}

/// Source of allocator ids, so a region can tell which allocator issued it.
static NEXT_OWNER: AtomicU32 = AtomicU32::new(1);

/// A fresh allocator id. Wraps after 2^32 allocators, which only weakens foreign-region detection.
fn next_owner_id() -> u32 {
    NEXT_OWNER.fetch_add(1, Ordering::Relaxed)
}

/// Rejects a zero capacity.
fn check_capacity(capacity: u64, what: &'static str) -> Result<()> {
    if capacity == 0 {
        return Err(Error::ZeroSize { what });
    }
    Ok(())
}

/// The checks every `allocate` shares: non-zero size, a power-of-two alignment up to
/// [`MAX_ALIGN`], and a size that fits the range at all.
fn check_request(size: u64, align: u64, capacity: u64) -> Result<()> {
    if size == 0 {
        return Err(Error::ZeroSize { what: "allocation" });
    }
    if !align.is_power_of_two() || align > MAX_ALIGN {
        return Err(Error::InvalidAlignment {
            align,
            max: MAX_ALIGN,
        });
    }
    Error::check_limit("allocation", size, capacity, "sub-allocator capacity")
}
