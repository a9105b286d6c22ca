//! TLSF (two-level segregated fit): the general-purpose O(1) sub-allocator with immediate
//! coalescing that carves device arenas.
//!
//! After Masmano, Ripoll, Crespo, Real, "TLSF: a New Dynamic Memory Allocator for Real-Time
//! Systems" (ECRTS 2004), with the metadata moved out of band as in VMA's `VmaBlockMetadata_TLSF`,
//! sebbbi's OffsetAllocator and xalloc (see `shared/notes/suballocation.md`). Deviations from the
//! paper, each for packing at no asymptotic cost (brief §6):
//!
//! * **Own class first.** Before the classic rounded-up search, the head of the request's own
//!   (round-down) class is taken if it fits. This recovers most of the best-fit packing that plain
//!   good fit gives away. (Scanning a few entries of the class for the smallest is slower and
//!   packs no better: `docs/decisions/tlsf-class-scan.md`.)
//! * **Holes before the tail.** When the chosen list's head is the free tail of the range and the
//!   list holds another block, that block is taken instead, keeping the high-water mark down.
//! * **No slivers.** A remainder smaller than the minimum split (default [`Tlsf::DEFAULT_MIN_SPLIT`]) is
//!   not made a free block: it stays attached to the allocation as slack (a leading alignment pad
//!   goes to the used block in front) and returns with it on free.
//! * **Alignment by probing.** Candidate heads are tested with their padding; after
//!   [`Tlsf::ALIGN_PROBES`] failed classes the search jumps to the class of `size + align - 1`, where any
//!   block fits, so the cost does not grow with the alignment.
//!
//! # Hot path
//!
//! Shaped by the suballoc benchmark (`core/benches/suballoc.rs`: churn at 50 % and 85 % load, ramp
//! to failure), where the cost is branch mispredictions and store-forwarding stalls more than
//! instructions:
//!
//! * [`Tlsf::allocate`] is inlined into the caller and its out-of-line part returns two words in
//!   registers (`Carved`); returning the whole `Region` through memory stalled every call.
//! * A carve makes its one unpredictable decision (exact fit or split) once; a split leaves the
//!   free node as the remainder, so its list changes only when its class does.
//! * List links never branch on "no node" (the sentinel), and vacant nodes are recycled through a
//!   stack threaded through themselves.
//! * Branches that the predictor gets right stay branches: testing the own class head with
//!   conditional moves put two dependent loads before every search and was 10 % slower.

use super::{Region, SubAllocReport, align_up, check_capacity, check_request, next_owner_id};
use crate::{Error, Result};

mod at;
mod carve;
mod class;
mod extend;
mod free;
mod invariants;
mod lists;
mod node;
#[cfg(test)]
mod tests;

use carve::Carved;
use class::{HEADS_LEN, SL_COUNT, class_at_least, class_of};
use node::{MAX_NODES, NONE, Node};

/// Two-level segregated fit allocator over `[0, capacity)`.
///
/// ```text
///  fl_bitmap (u64)    bit f set  <=>  sl_bitmap[f] != 0
///  sl_bitmap[f] (u32) bit s set  <=>  heads[f * 32 + s] != NONE
///  heads[c]           LIFO doubly-linked list of free nodes whose size has round-down class c
///
///  class of n:  n < 32: (0, n)          exact classes for tiny sizes
///               else:   (msb(n) - 4, next 5 bits below the msb)
/// ```
///
/// # Complexity
///
/// `allocate` and `free` run in constant time: one list head of the own class,
/// [`Tlsf::ALIGN_PROBES`] + 1 bitmap searches (two find-first-set each), and a constant number of node
/// updates, independent of the number of blocks and of the alignment. Node storage grows by
/// amortised `Vec` pushes until it reaches the peak block count, then recycles.
///
/// # Packing bound
///
/// `allocate` returns `Ok(None)` only if no free block has at least the size of the first class
/// starting at or above `size + align - 1`: that is, every free block is smaller than about
/// `(size + align - 1) * (1 + 1/32)`.
#[derive(Debug)]
pub struct Tlsf {
    /// Bytes managed.
    capacity: u64,
    /// Remainders below this stay attached to the allocation (>= 1).
    min_split: u64,
    /// Id stamped into every region this allocator issues.
    owner: u32,
    /// Block metadata; indices are stable while a block lives. Index [`SENTINEL`] is not a block.
    nodes: Vec<Node>,
    /// Top of the stack of vacant nodes, reused before `nodes` grows (`NONE` when empty). The
    /// stack is threaded through the vacant nodes' `prev_free`, so retiring a node costs no push.
    vacant: u32,
    /// Nodes on the vacant stack.
    vacant_count: usize,
    /// Head of each class's free list.
    heads: Box<[u32; HEADS_LEN]>,
    /// Bit f set iff `sl_bitmap[f] != 0`.
    fl_bitmap: u64,
    /// Bit s of word f set iff `heads[f * SL_COUNT + s] != NONE`.
    sl_bitmap: [u32; 64],
    /// Node of the block at offset 0 (start of the physical chain).
    first: u32,
    /// Node of the block that ends at `capacity` (end of the physical chain): where
    /// [`Tlsf::grow`] appends and [`Tlsf::shrink`] cuts.
    last: u32,
    /// Bytes in free blocks.
    free_bytes: u64,
    /// Live regions.
    allocations: usize,
    /// Generation for the next used block (wrapping counter).
    generation: u32,
}

/// Leading padding a block at `offset` of `block_size` bytes needs for an aligned `size`, or
/// `None` if the request does not fit in it.
#[inline]
fn fit(offset: u64, block_size: u64, size: u64, align: u64) -> Option<u64> {
    let pad = align_up(offset, align)? - offset;
    (block_size >= size && block_size - size >= pad).then_some(pad)
}

/// A free block chosen for a request: its node, the alignment padding in front of the request, and
/// the class list it is in.
#[derive(Clone, Copy, Debug)]
struct Hit {
    node: u32,
    pad: u64,
    class: usize,
}

impl Tlsf {
    /// How many non-empty classes above the own class `allocate` probes (head only) for an aligned
    /// fit before it jumps to the class where every block fits.
    pub const ALIGN_PROBES: usize = 4;
    /// Default minimum split, in bytes: remainders below it stay attached to the allocation.
    pub const DEFAULT_MIN_SPLIT: u64 = 16;

    /// An allocator over `[0, capacity)` with the default minimum split.
    ///
    /// # Errors
    /// [`Error::ZeroSize`] if `capacity` is 0.
    pub fn new(capacity: u64) -> Result<Self> {
        Self::with_min_split(capacity, Self::DEFAULT_MIN_SPLIT)
    }

    /// An allocator whose splits never leave a free block smaller than `min_split` bytes.
    ///
    /// `min_split` (default [`Tlsf::DEFAULT_MIN_SPLIT`], any value >= 1) trades a little slack per
    /// allocation for fewer tiny free blocks; 1 splits exactly. Set it to the arena's granule (for
    /// example 256) when every size is a multiple of it anyway.
    ///
    /// # Errors
    /// [`Error::ZeroSize`] if `capacity` or `min_split` is 0.
    pub fn with_min_split(capacity: u64, min_split: u64) -> Result<Self> {
        check_capacity(capacity, "sub-allocator range")?;
        if min_split == 0 {
            return Err(Error::ZeroSize {
                what: "minimum split",
            });
        }
        let mut tlsf = Tlsf {
            capacity,
            min_split,
            owner: next_owner_id(),
            nodes: Vec::with_capacity(64),
            vacant: NONE,
            vacant_count: 0,
            heads: Box::new([NONE; HEADS_LEN]),
            fl_bitmap: 0,
            sl_bitmap: [0; 64],
            first: 1,
            last: 1,
            free_bytes: capacity,
            allocations: 0,
            generation: 0,
        };
        let sentinel = Node {
            offset: 0,
            size: 0,
            prev_phys: NONE,
            next_phys: NONE,
            prev_free: NONE,
            next_free: NONE,
        };
        tlsf.nodes.push(sentinel);
        tlsf.nodes.push(Node {
            size: capacity,
            ..sentinel
        });
        tlsf.link(1);
        Ok(tlsf)
    }

    /// Size of the managed range in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// True when no region is live (the whole range is one free block).
    pub fn is_empty(&self) -> bool {
        self.allocations == 0
    }

    /// Bytes in free blocks (all of them, however fragmented). Constant time.
    pub fn free_bytes(&self) -> u64 {
        self.free_bytes
    }

    /// Carves `size` bytes at a multiple of `align`.
    ///
    /// Returns `Ok(None)` when no free block fits now (see the packing bound on [`Tlsf`]); freeing
    /// can make room. Constant time.
    ///
    /// # Errors
    /// [`Error::ZeroSize`] for `size == 0`; [`Error::InvalidAlignment`] if `align` is not a power of
    /// two or exceeds [`MAX_ALIGN`](super::MAX_ALIGN); [`Error::TooLarge`] if `size > capacity`.
    #[inline]
    pub fn allocate(&mut self, size: u64, align: u64) -> Result<Option<Region>> {
        check_request(size, align, self.capacity)?;
        Ok(self.place(size, align).map(|c| self.region(c, size)))
    }

    /// The allocation path behind [`Tlsf::allocate`], for a validated request.
    fn place(&mut self, size: u64, align: u64) -> Option<Carved> {
        // Each allocation creates at most two nodes (leading pad, tail remainder).
        if self.nodes.len() > MAX_NODES - 2 && self.vacant_count < 2 {
            return None;
        }
        let own = class_of(size);
        let found = match self.own_class_head(own, size, align) {
            Some(hit) => Some(hit),
            None => self.search_from(own + 1, size, align),
        };
        found.map(|hit| self.carve(hit, size))
    }

    /// The head of class `own` if it fits, or `None`.
    #[inline]
    fn own_class_head(&self, own: usize, size: u64, align: u64) -> Option<Hit> {
        let head = self.head(own);
        if head == NONE {
            return None;
        }
        let n = &self.nodes[head as usize];
        let pad = fit(n.offset, n.size, size, align)?;
        Some(Hit {
            node: head,
            pad,
            class: own,
        })
    }

    /// Good-fit search from class `from` up: heads of the first non-empty classes (which fit
    /// unless alignment padding intervenes), then the class of `size + align - 1`, where every
    /// block fits.
    #[inline]
    fn search_from(&self, from: usize, size: u64, align: u64) -> Option<Hit> {
        let mut from = from;
        for _ in 0..Self::ALIGN_PROBES {
            let class = self.first_nonempty(from)?;
            if let Some(hit) = self.take_from(class, size, align) {
                return Some(hit);
            }
            from = class + 1;
        }
        let sure = class_at_least(size.checked_add(align - 1)?);
        let class = self.first_nonempty(sure.max(from))?;
        self.take_from(class, size, align)
    }

    /// The head of class `class` if it fits, preferring the second entry when the head is the
    /// free tail of the range (fill holes before the tail).
    #[inline]
    fn take_from(&self, class: usize, size: u64, align: u64) -> Option<Hit> {
        let head = self.head(class);
        let h = &self.nodes[head as usize];
        let node = if h.next_phys == NONE && h.next_free != NONE {
            h.next_free
        } else {
            head
        };
        let n = &self.nodes[node as usize];
        if let Some(pad) = fit(n.offset, n.size, size, align) {
            return Some(Hit { node, pad, class });
        }
        let pad = fit(h.offset, h.size, size, align)?;
        Some(Hit {
            node: head,
            pad,
            class,
        })
    }

    /// Used, free, largest free block and fragmentation. Constant time except for the scan of the
    /// highest non-empty class list (its length).
    pub fn report(&self) -> SubAllocReport {
        SubAllocReport::new(
            self.capacity,
            self.capacity - self.free_bytes,
            self.largest_free(),
            self.allocations,
        )
    }

    /// Size of the largest free block in bytes (0 when full).
    pub fn largest_free(&self) -> u64 {
        if self.fl_bitmap == 0 {
            return 0;
        }
        let fl = 63 - self.fl_bitmap.leading_zeros() as usize;
        let sl = 31 - self.sl_bitmap[fl].leading_zeros() as usize;
        let mut cur = self.head(fl * SL_COUNT + sl);
        let mut largest = 0;
        while cur != NONE {
            let n = &self.nodes[cur as usize];
            largest = largest.max(n.size);
            cur = n.next_free;
        }
        largest
    }
}
