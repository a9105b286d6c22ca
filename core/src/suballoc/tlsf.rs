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
//!   good fit gives away. (Scanning up to 4 entries of the class and keeping the smallest was
//!   measured: slower by 10–15 % per pair and no better packing — 548 vs 533 refusals in the
//!   benchmark's 90 % load churn.)
//! * **Holes before the tail.** When the chosen list's head is the free tail of the range and the
//!   list holds another block, that block is taken instead, keeping the high-water mark down.
//! * **No slivers.** A remainder smaller than the minimum split (default [`Tlsf::DEFAULT_MIN_SPLIT`]) is
//!   not made a free block: it stays attached to the allocation as slack (a leading alignment pad
//!   goes to the used block in front) and returns with it on free.
//! * **Alignment by probing.** Candidate heads are tested with their padding; after
//!   [`Tlsf::ALIGN_PROBES`] failed classes the search jumps to the class of `size + align - 1`, where any
//!   block fits, so the cost does not grow with the alignment.

use std::num::NonZeroU64;

use super::{Region, SubAllocReport, align_up, check_capacity, check_request, next_owner_id};
use crate::{Error, Result};

mod class;
mod extend;
mod invariants;
#[cfg(test)]
mod tests;

use class::{CLASS_COUNT, HEADS_LEN, SL_COUNT, class_at_least, class_of};

/// "No node" in index links.
const NONE: u32 = u32::MAX;
/// `Node::next_free` tag of a used block.
const USED: u32 = u32::MAX - 1;
/// `Node::next_free` tag of a vacant node.
const VACANT: u32 = u32::MAX - 2;
/// Largest number of metadata nodes: indices stay below the three tags.
const MAX_NODES: usize = VACANT as usize;
/// Index of the sentinel node: never a block, it absorbs the list-link writes whose target is
/// `NONE`, so that linking and unlinking need no data-dependent branch (those branches were a third
/// of the allocator's mispredictions in the steady-state benchmark).
const SENTINEL: u32 = 0;

/// A slot of `Tlsf::heads` past the last class: the target of head writes that must not land.
const SPARE_HEAD: usize = HEADS_LEN - 1;
const _: () = assert!(
    SPARE_HEAD >= CLASS_COUNT,
    "the spare head slot must not be a class"
);

/// The node a link write to `idx` goes to: `idx` itself, or the sentinel for `NONE`. A conditional
/// move, never a branch.
#[inline(always)]
fn or_sentinel(idx: u32) -> usize {
    (if idx == NONE { SENTINEL } else { idx }) as usize
}

/// What a node currently describes, decoded from `Node::next_free`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// A free block, linked in the free list of its round-down class.
    Free,
    /// A block handed out as a [`Region`].
    Used,
    /// An unused node on the recycling stack; describes no block.
    Vacant,
}

/// Metadata of one block: a slot in `Tlsf::nodes`. 32 bytes, two per cache line, never straddling
/// one: the free-list links double as the state tag and the generation.
#[derive(Clone, Copy, Debug)]
struct Node {
    /// First byte of the block.
    offset: u64,
    /// Length of the block in bytes. For a used block this includes its slack (a tail remainder
    /// below `min_split`, plus leading pads of later neighbours below `min_split`).
    size: u64,
    /// Physically previous block (lower offset), or `NONE` for the block at offset 0.
    prev_phys: u32,
    /// Physically next block, or `NONE` for the last block.
    next_phys: u32,
    /// Free: previous entry in the free list (or `NONE`). Used: the generation stamped into the
    /// block's region, so a handle from an earlier use of the slot is recognised. Vacant: the next
    /// node down the vacant stack (or `NONE`).
    prev_free: u32,
    /// Free: next entry in the free list (or `NONE`). Otherwise the tag `USED` or `VACANT`.
    next_free: u32,
}

impl Node {
    /// Whether a node of the physical chain is a free block. Chain nodes are never vacant, so one
    /// comparison decides it.
    #[inline]
    fn is_free_in_chain(&self) -> bool {
        debug_assert!(self.state() != State::Vacant);
        self.next_free != USED
    }

    #[inline]
    fn state(&self) -> State {
        match self.next_free {
            USED => State::Used,
            VACANT => State::Vacant,
            _ => State::Free,
        }
    }
}

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

/// A carved allocation: its offset and its region key (`generation << 32 | node`; never 0, as node
/// 0 is the sentinel). Two words, so it comes back in registers and the `Region` is built in the
/// caller: a `Region` returned through memory cost a failed store-to-load forward per allocation.
#[derive(Clone, Copy, Debug)]
struct Carved {
    offset: u64,
    key: NonZeroU64,
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

    /// The handle of a carved allocation of `size` bytes.
    #[inline]
    fn region(&self, carved: Carved, size: u64) -> Region {
        Region {
            offset: carved.offset,
            size,
            owner: self.owner,
            key: carved.key.get(),
        }
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

    /// First class `>= from` with a non-empty free list.
    #[inline]
    fn first_nonempty(&self, from: usize) -> Option<usize> {
        if from >= CLASS_COUNT {
            return None;
        }
        let (fl, sl) = (from / SL_COUNT, from % SL_COUNT);
        let here = self.sl_bitmap[fl & 63] & (u32::MAX << sl);
        if here != 0 {
            return Some(fl * SL_COUNT + here.trailing_zeros() as usize);
        }
        let above = self.fl_bitmap & (u64::MAX << (fl + 1));
        if above == 0 {
            return None;
        }
        let f = above.trailing_zeros() as usize;
        Some(f * SL_COUNT + self.sl_bitmap[f & 63].trailing_zeros() as usize)
    }

    /// Head of the free list of `class` (`class < CLASS_COUNT`; the mask only spares the bounds
    /// check).
    #[inline]
    fn head(&self, class: usize) -> u32 {
        self.heads[class & (HEADS_LEN - 1)]
    }

    /// Hands out `size` bytes of the free node of `hit`, starting `hit.pad` bytes in. The pad and
    /// the remainder become free blocks when they reach `min_split`, else slack.
    fn carve(&mut self, hit: Hit, size: u64) -> Carved {
        if hit.pad != 0 {
            return self.carve_general(hit, size);
        }
        // The one unpredictable decision (an exact fit or a split is a coin flip in churn), made
        // once; which list the remainder goes to is then well predicted.
        let rest = self.nodes[hit.node as usize].size - size;
        if rest < self.min_split {
            self.carve_whole(hit.node, hit.class)
        } else {
            self.carve_front(hit.node, hit.class, size)
        }
    }

    /// Hands out the whole free node `idx` (of class `class`): a fit within `min_split`.
    #[inline]
    fn carve_whole(&mut self, idx: u32, class: usize) -> Carved {
        self.unlink_from(idx, class);
        let generation = self.next_generation();
        let node = &mut self.nodes[idx as usize];
        self.free_bytes -= node.size;
        node.prev_free = generation;
        node.next_free = USED;
        let offset = node.offset;
        Self::carved(idx, offset, generation)
    }

    /// Carves `size` bytes off the front of free node `idx` (of class `class`): a new node
    /// describes the used front, and `idx` stays the free remainder. It keeps its place in its
    /// list when the remainder stays in its class (a tail block eaten from the front as an arena
    /// fills up, where that saves a third of the work) and moves to the remainder's list otherwise.
    #[inline]
    fn carve_front(&mut self, idx: u32, class: usize, size: u64) -> Carved {
        let n = self.nodes[idx as usize];
        let generation = self.next_generation();
        self.free_bytes -= size;
        let used = self.new_node(n.offset, size, n.prev_phys, idx, generation, USED);
        match n.prev_phys {
            NONE => self.first = used,
            prev => self.nodes[prev as usize].next_phys = used,
        }
        let free = &mut self.nodes[idx as usize];
        free.prev_phys = used;
        free.offset += size;
        free.size -= size;
        if class_of(free.size) != class {
            self.unlink_from(idx, class);
            self.link(idx);
        }
        Self::carved(used, n.offset, generation)
    }

    /// Counts a new allocation and returns the generation to stamp into it.
    #[inline]
    fn next_generation(&mut self) -> u32 {
        self.allocations += 1;
        self.generation = self.generation.wrapping_add(1);
        self.generation
    }

    /// The general carve: `idx` leaves its list, becomes the used block, and the pad and remainder
    /// become new free blocks (or slack).
    fn carve_general(&mut self, hit: Hit, size: u64) -> Carved {
        let Hit {
            node: idx,
            pad,
            class,
        } = hit;
        let n = self.nodes[idx as usize];
        debug_assert!(n.state() == State::Free && n.size >= pad + size);
        debug_assert_eq!(class_of(n.size), class);
        let generation = self.next_generation();
        let rest = n.size - pad - size;
        self.unlink_from(idx, class);
        self.free_bytes -= n.size;
        let mut offset = n.offset;
        let mut block = n.size;
        if pad > 0 {
            if pad < self.min_split && n.prev_phys != NONE {
                // Too small to be a block: becomes slack of the block in front, which is used (a
                // free block never follows a free block).
                let prev = &mut self.nodes[n.prev_phys as usize];
                debug_assert!(prev.state() == State::Used);
                prev.size += pad;
            } else {
                let p = self.new_node(offset, pad, n.prev_phys, idx, NONE, NONE);
                match n.prev_phys {
                    NONE => self.first = p,
                    prev => self.nodes[prev as usize].next_phys = p,
                }
                self.nodes[idx as usize].prev_phys = p;
                self.link(p);
                self.free_bytes += pad;
            }
            offset += pad;
            block -= pad;
        }
        if rest >= self.min_split {
            let r = self.new_node(offset + size, rest, idx, n.next_phys, NONE, NONE);
            if n.next_phys != NONE {
                self.nodes[n.next_phys as usize].prev_phys = r;
            } else {
                self.last = r;
            }
            self.nodes[idx as usize].next_phys = r;
            self.link(r);
            self.free_bytes += rest;
            block = size;
        }
        let node = &mut self.nodes[idx as usize];
        node.offset = offset;
        node.size = block;
        node.prev_free = generation;
        node.next_free = USED;
        Self::carved(idx, offset, generation)
    }

    /// What a carve returns for used node `idx`.
    #[inline]
    fn carved(idx: u32, offset: u64, generation: u32) -> Carved {
        let key = (u64::from(generation) << 32) | u64::from(idx);
        Carved {
            offset,
            // The sentinel (index 0) is never carved, so the key is never 0.
            key: NonZeroU64::new(key).unwrap_or(NonZeroU64::MIN),
        }
    }

    /// Returns `region` to the free space, merging it with free neighbours. Constant time.
    ///
    /// # Errors
    /// [`Error::ForeignHandle`] if another allocator issued `region`; [`Error::StaleHandle`],
    /// [`Error::DoubleFree`] or [`Error::InvalidArgument`] if its slot no longer describes it. The
    /// allocator is unchanged on error.
    #[inline]
    pub fn free(&mut self, region: Region) -> Result<()> {
        self.free_merged(region).map(|_| ())
    }

    /// [`Tlsf::free`], returning the free block the region became part of, as (offset, size):
    /// the hole an arena may give the memory of back.
    ///
    /// # Errors
    /// As [`Tlsf::free`].
    pub fn free_merged(&mut self, region: Region) -> Result<(u64, u64)> {
        let idx = self.validate(&region)?;
        let n = self.nodes[idx as usize];
        self.allocations -= 1;
        self.free_bytes += n.size;
        let mut merged = idx;
        if n.prev_phys != NONE && self.nodes[n.prev_phys as usize].is_free_in_chain() {
            let prev = n.prev_phys;
            self.unlink(prev);
            self.absorb_next(prev);
            merged = prev;
        }
        let next = self.nodes[merged as usize].next_phys;
        if next != NONE && self.nodes[next as usize].is_free_in_chain() {
            self.unlink(next);
            self.absorb_next(merged);
        }
        self.link(merged);
        let m = &self.nodes[merged as usize];
        Ok((m.offset, m.size))
    }

    /// Checks that `region` is a live allocation of this allocator; returns its node index.
    fn validate(&self, region: &Region) -> Result<u32> {
        const WHAT: &str = "sub-allocation region";
        let idx = region.key as u32;
        let generation = (region.key >> 32) as u32;
        let Some(n) = self
            .nodes
            .get(idx as usize)
            .filter(|_| region.owner == self.owner && idx != SENTINEL)
        else {
            return Err(Error::ForeignHandle {
                what: WHAT,
                slot: idx,
                owner: "Tlsf sub-allocator",
            });
        };
        if n.state() != State::Used {
            return Err(Error::DoubleFree {
                what: WHAT,
                slot: idx,
                generation,
            });
        }
        if n.prev_free != generation {
            return Err(Error::StaleHandle {
                what: WHAT,
                slot: idx,
                generation,
                current: n.prev_free,
            });
        }
        if n.offset != region.offset || n.size < region.size {
            return Err(Error::invalid(format!(
                "region at offset {} of {} bytes does not match its slot {idx} \
                 (offset {}, {} bytes)",
                region.offset, region.size, n.offset, n.size
            )));
        }
        Ok(idx)
    }

    /// Merges the physical successor of `idx` into it and recycles the successor's node. Both
    /// must be out of the free lists; `idx` is then a free block not yet linked.
    #[inline]
    fn absorb_next(&mut self, idx: u32) {
        let next = self.nodes[idx as usize].next_phys;
        debug_assert!(next != NONE);
        let gone = self.nodes[next as usize];
        let node = &mut self.nodes[idx as usize];
        node.size += gone.size;
        node.next_phys = gone.next_phys;
        if gone.next_phys != NONE {
            self.nodes[gone.next_phys as usize].prev_phys = idx;
        } else {
            self.last = idx;
        }
        self.release_node(next);
    }

    /// Pushes node `idx` at the head of the free list of its class and sets the bitmap bits.
    #[inline]
    fn link(&mut self, idx: u32) {
        let class = class_of(self.nodes[idx as usize].size);
        let slot = &mut self.heads[class & (HEADS_LEN - 1)];
        let head = *slot;
        *slot = idx;
        let node = &mut self.nodes[idx as usize];
        node.prev_free = NONE;
        node.next_free = head;
        self.nodes[or_sentinel(head)].prev_free = idx;
        let (fl, sl) = (class / SL_COUNT, class % SL_COUNT);
        self.sl_bitmap[fl & 63] |= 1 << sl;
        self.fl_bitmap |= 1 << fl;
    }

    /// Removes free node `idx` from its class list, clearing bitmap bits that become empty.
    #[inline(always)]
    fn unlink(&mut self, idx: u32) {
        self.unlink_from(idx, class_of(self.nodes[idx as usize].size));
    }

    /// [`unlink`](Self::unlink) when the caller knows the node's class.
    #[inline]
    fn unlink_from(&mut self, idx: u32, class: usize) {
        let Node {
            prev_free,
            next_free,
            ..
        } = self.nodes[idx as usize];
        debug_assert!(next_free != USED && next_free != VACANT);
        // Branch-free: writes aimed at `NONE` land in the sentinel, the head moves only when `idx`
        // was the head, and the bitmap bits clear only when the list became empty.
        self.nodes[or_sentinel(next_free)].prev_free = prev_free;
        self.nodes[or_sentinel(prev_free)].next_free = next_free;
        debug_assert!(prev_free != NONE || self.heads[class] == idx);
        // The head moves to `next_free` iff `idx` was the head; otherwise the write goes to a
        // spare slot past the classes (an index select, so a conditional move, like the sentinel).
        let target = if prev_free == NONE { class } else { SPARE_HEAD };
        self.heads[target & (HEADS_LEN - 1)] = next_free;
        let emptied = u32::from(self.heads[class & (HEADS_LEN - 1)] == NONE);
        let (fl, sl) = (class / SL_COUNT, class % SL_COUNT);
        let word = &mut self.sl_bitmap[fl & 63];
        *word &= !(emptied << sl);
        self.fl_bitmap &= !(u64::from(*word == 0) << fl);
    }

    /// A node for a new block, recycled from the vacant stack when possible. `prev_free` and
    /// `next_free` are set as given (`NONE, NONE` for a free block about to be linked,
    /// `generation, USED` for a used one).
    #[inline]
    fn new_node(
        &mut self,
        offset: u64,
        size: u64,
        prev_phys: u32,
        next_phys: u32,
        prev_free: u32,
        next_free: u32,
    ) -> u32 {
        let node = Node {
            offset,
            size,
            prev_phys,
            next_phys,
            prev_free,
            next_free,
        };
        let idx = self.vacant;
        if idx == NONE {
            // `allocate` checked that indices stay below the tags.
            self.nodes.push(node);
            return (self.nodes.len() - 1) as u32;
        }
        let slot = &mut self.nodes[idx as usize];
        self.vacant = slot.prev_free;
        self.vacant_count -= 1;
        *slot = node;
        idx
    }

    /// Retires node `idx` to the vacant stack.
    #[inline]
    fn release_node(&mut self, idx: u32) {
        let node = &mut self.nodes[idx as usize];
        node.next_free = VACANT;
        node.prev_free = self.vacant;
        self.vacant = idx;
        self.vacant_count += 1;
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
