//! TLSF (two-level segregated fit): the general-purpose O(1) sub-allocator with immediate
//! coalescing that carves device arenas.
//!
//! After Masmano, Ripoll, Crespo, Real, "TLSF: a New Dynamic Memory Allocator for Real-Time
//! Systems" (ECRTS 2004), with the metadata moved out of band as in VMA's `VmaBlockMetadata_TLSF`,
//! sebbbi's OffsetAllocator and xalloc (see `shared/notes/suballocation.md`). Deviations from the
//! paper, each for packing at no asymptotic cost (brief §6):
//!
//! * **Own class first.** Before the classic rounded-up search, up to [`OWN_CLASS_SCAN`] entries of
//!   the request's own (round-down) class are examined and the smallest that fits wins, ending early
//!   on an exact fit. This recovers most of the best-fit packing that plain good fit gives away.
//! * **Holes before the tail.** When the chosen list's head is the free tail of the range and the
//!   list holds another block, that block is taken instead, keeping the high-water mark down.
//! * **No slivers.** A remainder smaller than the minimum split (default [`DEFAULT_MIN_SPLIT`]) is
//!   not made a free block: it stays attached to the allocation as slack (a leading alignment pad
//!   goes to the used block in front) and returns with it on free.
//! * **Alignment by probing.** Candidate heads are tested with their padding; after
//!   [`ALIGN_PROBES`] failed classes the search jumps to the class of `size + align - 1`, where any
//!   block fits, so the cost does not grow with the alignment.

use super::{Region, SubAllocReport, align_up, check_capacity, check_request, next_owner_id};
use crate::{Error, Result};

#[cfg(test)]
mod tests;

/// log2 of the number of second-level lists per power of two. 32 lists per power of two bound
/// the good-fit acceptance threshold at 1/32 (about 3.1 %) above the request.
const SL_BITS: u32 = 5;
/// Second-level lists per first level.
const SL_COUNT: usize = 1 << SL_BITS;
/// First levels: level 0 holds the sizes below `SL_COUNT` exactly (one byte per class); level
/// `f - SL_BITS + 1` holds the sizes whose highest set bit is `f`.
const FL_COUNT: usize = 64 - SL_BITS as usize + 1;
/// Total number of size classes (free lists).
const CLASS_COUNT: usize = FL_COUNT * SL_COUNT;
/// "No node" in index links.
const NONE: u32 = u32::MAX;
/// Largest number of metadata nodes (indices are `u32`, `NONE` excluded).
const MAX_NODES: usize = NONE as usize;

/// How many entries of the request's own class are examined before the rounded-up search.
pub const OWN_CLASS_SCAN: usize = 8;
/// How many non-empty classes above the own class are probed (head only) for an aligned fit before
/// the search jumps to the class where every block fits.
pub const ALIGN_PROBES: usize = 4;
/// Default minimum split, in bytes: remainders below it stay attached to the allocation.
pub const DEFAULT_MIN_SPLIT: u64 = 16;

/// What a node currently describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// A free block, linked in the free list of its round-down class.
    Free,
    /// A block handed out as a [`Region`].
    Used,
    /// An unused node on the recycling stack; describes no block.
    Vacant,
}

/// Metadata of one block: a slot in `Tlsf::nodes`.
#[derive(Clone, Copy, Debug)]
struct Node {
    /// First byte of the block.
    offset: u64,
    /// Length of the block in bytes. For a used block this includes its slack (at most
    /// `min_split - 1` bytes of tail remainder plus leading pads of later neighbours).
    size: u64,
    /// Physically previous block (lower offset), or `NONE` for the block at offset 0.
    prev_phys: u32,
    /// Physically next block, or `NONE` for the last block.
    next_phys: u32,
    /// Previous entry in the free list (free blocks only).
    prev_free: u32,
    /// Next entry in the free list (free blocks only).
    next_free: u32,
    /// Bumped whenever the node is recycled, so an old handle to the slot is recognised.
    generation: u32,
    /// Free, used or vacant.
    state: State,
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
/// `allocate` and `free` run in constant time: at most [`OWN_CLASS_SCAN`] list entries,
/// [`ALIGN_PROBES`] + 1 bitmap searches (two find-first-set each), and a constant number of node
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
    /// Block metadata; indices are stable while a block lives.
    nodes: Vec<Node>,
    /// Vacant node indices, reused before `nodes` grows.
    vacant: Vec<u32>,
    /// Head of each class's free list.
    heads: Vec<u32>,
    /// Bit f set iff `sl_bitmap[f] != 0`.
    fl_bitmap: u64,
    /// Bit s of word f set iff `heads[f * SL_COUNT + s] != NONE`.
    sl_bitmap: [u32; FL_COUNT],
    /// Node of the block at offset 0 (start of the physical chain).
    first: u32,
    /// Bytes in free blocks.
    free_bytes: u64,
    /// Live regions.
    allocations: usize,
}

/// Round-down class of a size `>= 1`: the class whose range contains `size`.
#[inline]
fn class_of(size: u64) -> usize {
    debug_assert!(size >= 1);
    if size < SL_COUNT as u64 {
        return size as usize;
    }
    let msb = 63 - size.leading_zeros();
    let fl = (msb - SL_BITS + 1) as usize;
    let sl = (size >> (msb - SL_BITS)) as usize - SL_COUNT;
    fl * SL_COUNT + sl
}

/// Smallest size in class `c`.
#[inline]
fn class_start(c: usize) -> u64 {
    let (fl, sl) = (c / SL_COUNT, (c % SL_COUNT) as u64);
    if fl == 0 {
        sl
    } else {
        (SL_COUNT as u64 + sl) << (fl - 1)
    }
}

/// Smallest class whose every member is `>= size`; `CLASS_COUNT` when there is none.
#[inline]
fn class_at_least(size: u64) -> usize {
    let c = class_of(size);
    if class_start(c) == size { c } else { c + 1 }
}

/// Leading padding a block at `offset` of `block_size` bytes needs for an aligned `size`, or
/// `None` if the request does not fit in it.
#[inline]
fn fit(offset: u64, block_size: u64, size: u64, align: u64) -> Option<u64> {
    let pad = align_up(offset, align)? - offset;
    (block_size >= size && block_size - size >= pad).then_some(pad)
}

impl Tlsf {
    /// An allocator over `[0, capacity)` with the default minimum split.
    ///
    /// # Errors
    /// [`Error::ZeroSize`] if `capacity` is 0.
    pub fn new(capacity: u64) -> Result<Self> {
        Self::with_min_split(capacity, DEFAULT_MIN_SPLIT)
    }

    /// An allocator whose splits never leave a free block smaller than `min_split` bytes.
    ///
    /// `min_split` (default [`DEFAULT_MIN_SPLIT`], range 1..=capacity) trades a little slack per
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
            vacant: Vec::new(),
            heads: vec![NONE; CLASS_COUNT],
            fl_bitmap: 0,
            sl_bitmap: [0; FL_COUNT],
            first: 0,
            free_bytes: capacity,
            allocations: 0,
        };
        tlsf.nodes.push(Node {
            offset: 0,
            size: capacity,
            prev_phys: NONE,
            next_phys: NONE,
            prev_free: NONE,
            next_free: NONE,
            generation: 0,
            state: State::Free,
        });
        tlsf.link(0);
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

    /// Carves `size` bytes at a multiple of `align`.
    ///
    /// Returns `Ok(None)` when no free block fits now (see the packing bound on [`Tlsf`]); freeing
    /// can make room. Constant time.
    ///
    /// # Errors
    /// [`Error::ZeroSize`] for `size == 0`; [`Error::InvalidAlignment`] if `align` is not a power of
    /// two or exceeds [`MAX_ALIGN`](super::MAX_ALIGN); [`Error::TooLarge`] if `size > capacity`.
    pub fn allocate(&mut self, size: u64, align: u64) -> Result<Option<Region>> {
        check_request(size, align, self.capacity)?;
        // Each allocation creates at most two nodes (leading pad, tail remainder).
        if self.vacant.len() < 2 && self.nodes.len() > MAX_NODES - 2 {
            return Ok(None);
        }
        let own = class_of(size);
        let mut found = self.scan_own_class(own, size, align);
        if found.is_none() {
            found = self.search_above(own, size, align);
        }
        Ok(found.map(|(node, pad)| self.carve(node, pad, size)))
    }

    /// Best of the first [`OWN_CLASS_SCAN`] entries of class `own` that fit, or `None`.
    #[inline]
    fn scan_own_class(&self, own: usize, size: u64, align: u64) -> Option<(u32, u64)> {
        let mut cur = self.heads[own];
        let mut best: Option<(u32, u64)> = None;
        let mut best_size = u64::MAX;
        let mut seen = 0;
        while cur != NONE && seen < OWN_CLASS_SCAN {
            let n = &self.nodes[cur as usize];
            if let Some(pad) = fit(n.offset, n.size, size, align) {
                let waste = n.size - size - pad;
                // Prefer holes to the tail when sizes tie.
                if best.is_none()
                    || n.size < best_size
                    || (n.size == best_size && n.next_phys != NONE)
                {
                    best = Some((cur, pad));
                    best_size = n.size;
                }
                if waste == 0 {
                    break;
                }
            }
            cur = n.next_free;
            seen += 1;
        }
        best
    }

    /// Good-fit search above class `own`: heads of the next non-empty classes (which fit unless
    /// alignment padding intervenes), then the class of `size + align - 1`, where every block fits.
    #[inline]
    fn search_above(&self, own: usize, size: u64, align: u64) -> Option<(u32, u64)> {
        let mut from = own + 1;
        for _ in 0..ALIGN_PROBES {
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
    fn take_from(&self, class: usize, size: u64, align: u64) -> Option<(u32, u64)> {
        let head = self.heads[class];
        let h = &self.nodes[head as usize];
        if h.next_phys == NONE && h.next_free != NONE {
            let second = &self.nodes[h.next_free as usize];
            if let Some(pad) = fit(second.offset, second.size, size, align) {
                return Some((h.next_free, pad));
            }
        }
        fit(h.offset, h.size, size, align).map(|pad| (head, pad))
    }

    /// First class `>= from` with a non-empty free list.
    #[inline]
    fn first_nonempty(&self, from: usize) -> Option<usize> {
        if from >= CLASS_COUNT {
            return None;
        }
        let (fl, sl) = (from / SL_COUNT, from % SL_COUNT);
        let here = self.sl_bitmap[fl] & (u32::MAX << sl);
        if here != 0 {
            return Some(fl * SL_COUNT + here.trailing_zeros() as usize);
        }
        let above = self.fl_bitmap & (u64::MAX << (fl + 1));
        if above == 0 {
            return None;
        }
        let f = above.trailing_zeros() as usize;
        Some(f * SL_COUNT + self.sl_bitmap[f].trailing_zeros() as usize)
    }

    /// Turns free node `idx` into a used block of `size` bytes starting `pad` bytes in, splitting
    /// off the pad and the remainder as free blocks when they reach `min_split`.
    fn carve(&mut self, idx: u32, pad: u64, size: u64) -> Region {
        self.unlink(idx);
        let n = self.nodes[idx as usize];
        debug_assert!(n.state == State::Free && n.size >= pad + size);
        self.free_bytes -= n.size;
        let mut offset = n.offset;
        let mut block = n.size;
        if pad > 0 {
            if pad < self.min_split && n.prev_phys != NONE {
                // Too small to be a block: becomes slack of the used block in front (a free block
                // is never preceded by a free block, so the neighbour is used).
                let prev = &mut self.nodes[n.prev_phys as usize];
                debug_assert!(prev.state == State::Used);
                prev.size += pad;
            } else {
                let p = self.new_node(offset, pad, n.prev_phys, idx, State::Free);
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
        let rest = block - size;
        if rest >= self.min_split {
            let r = self.new_node(offset + size, rest, idx, n.next_phys, State::Free);
            if n.next_phys != NONE {
                self.nodes[n.next_phys as usize].prev_phys = r;
            }
            self.nodes[idx as usize].next_phys = r;
            self.link(r);
            self.free_bytes += rest;
            block = size;
        }
        let node = &mut self.nodes[idx as usize];
        node.offset = offset;
        node.size = block;
        node.state = State::Used;
        self.allocations += 1;
        Region {
            offset,
            size,
            owner: self.owner,
            key: (u64::from(node.generation) << 32) | u64::from(idx),
        }
    }

    /// Returns `region` to the free space, merging it with free neighbours. Constant time.
    ///
    /// # Errors
    /// [`Error::ForeignHandle`] if another allocator issued `region`; [`Error::StaleHandle`],
    /// [`Error::DoubleFree`] or [`Error::InvalidArgument`] if its slot no longer describes it. The
    /// allocator is unchanged on error.
    pub fn free(&mut self, region: Region) -> Result<()> {
        let idx = self.validate(&region)?;
        // The slot no longer describes this region, whatever happens to the node next.
        let generation = &mut self.nodes[idx as usize].generation;
        *generation = generation.wrapping_add(1);
        let n = self.nodes[idx as usize];
        self.allocations -= 1;
        self.free_bytes += n.size;
        let mut merged = idx;
        if n.prev_phys != NONE && self.nodes[n.prev_phys as usize].state == State::Free {
            let prev = n.prev_phys;
            self.unlink(prev);
            self.absorb_next(prev);
            merged = prev;
        } else {
            self.nodes[idx as usize].state = State::Free;
        }
        let next = self.nodes[merged as usize].next_phys;
        if next != NONE && self.nodes[next as usize].state == State::Free {
            self.unlink(next);
            self.absorb_next(merged);
        }
        self.link(merged);
        Ok(())
    }

    /// Checks that `region` is a live allocation of this allocator; returns its node index.
    fn validate(&self, region: &Region) -> Result<u32> {
        const WHAT: &str = "sub-allocation region";
        let idx = region.key as u32;
        let generation = (region.key >> 32) as u32;
        if region.owner != self.owner || idx as usize >= self.nodes.len() {
            return Err(Error::ForeignHandle {
                what: WHAT,
                slot: idx,
                owner: "Tlsf sub-allocator",
            });
        }
        let n = &self.nodes[idx as usize];
        if n.generation != generation {
            return Err(Error::StaleHandle {
                what: WHAT,
                slot: idx,
                generation,
                current: n.generation,
            });
        }
        if n.state != State::Used {
            return Err(Error::DoubleFree {
                what: WHAT,
                slot: idx,
                generation,
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

    /// Merges the physical successor of `idx` into it and recycles the successor's node. The
    /// successor must already be unlinked from its free list; `idx` becomes free.
    fn absorb_next(&mut self, idx: u32) {
        let next = self.nodes[idx as usize].next_phys;
        debug_assert!(next != NONE);
        let gone = self.nodes[next as usize];
        {
            let node = &mut self.nodes[idx as usize];
            node.size += gone.size;
            node.next_phys = gone.next_phys;
            node.state = State::Free;
        }
        if gone.next_phys != NONE {
            self.nodes[gone.next_phys as usize].prev_phys = idx;
        }
        self.release_node(next);
    }

    /// Pushes free node `idx` at the head of its class list and sets the bitmap bits.
    #[inline]
    fn link(&mut self, idx: u32) {
        let class = class_of(self.nodes[idx as usize].size);
        let head = self.heads[class];
        {
            let node = &mut self.nodes[idx as usize];
            node.prev_free = NONE;
            node.next_free = head;
        }
        if head != NONE {
            self.nodes[head as usize].prev_free = idx;
        }
        self.heads[class] = idx;
        let (fl, sl) = (class / SL_COUNT, class % SL_COUNT);
        self.sl_bitmap[fl] |= 1 << sl;
        self.fl_bitmap |= 1 << fl;
    }

    /// Removes free node `idx` from its class list, clearing bitmap bits that become empty.
    #[inline]
    fn unlink(&mut self, idx: u32) {
        let Node {
            size,
            prev_free,
            next_free,
            ..
        } = self.nodes[idx as usize];
        if next_free != NONE {
            self.nodes[next_free as usize].prev_free = prev_free;
        }
        if prev_free != NONE {
            self.nodes[prev_free as usize].next_free = next_free;
        } else {
            let class = class_of(size);
            debug_assert_eq!(self.heads[class], idx);
            self.heads[class] = next_free;
            if next_free == NONE {
                let (fl, sl) = (class / SL_COUNT, class % SL_COUNT);
                self.sl_bitmap[fl] &= !(1 << sl);
                if self.sl_bitmap[fl] == 0 {
                    self.fl_bitmap &= !(1 << fl);
                }
            }
        }
    }

    /// A node for a new block, recycled from the vacant stack when possible.
    fn new_node(&mut self, offset: u64, size: u64, prev: u32, next: u32, state: State) -> u32 {
        let fresh = |generation| Node {
            offset,
            size,
            prev_phys: prev,
            next_phys: next,
            prev_free: NONE,
            next_free: NONE,
            generation,
            state,
        };
        match self.vacant.pop() {
            Some(idx) => {
                let node = &mut self.nodes[idx as usize];
                *node = fresh(node.generation);
                idx
            }
            None => {
                // `allocate` checked that indices remain below `NONE`.
                self.nodes.push(fresh(0));
                (self.nodes.len() - 1) as u32
            }
        }
    }

    /// Retires node `idx` to the vacant stack and bumps its generation.
    fn release_node(&mut self, idx: u32) {
        let node = &mut self.nodes[idx as usize];
        node.state = State::Vacant;
        node.generation = node.generation.wrapping_add(1);
        self.vacant.push(idx);
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
        let mut cur = self.heads[fl * SL_COUNT + sl];
        let mut largest = 0;
        while cur != NONE {
            let n = &self.nodes[cur as usize];
            largest = largest.max(n.size);
            cur = n.next_free;
        }
        largest
    }

    /// Verifies every structural invariant; O(blocks). For tests and debugging.
    ///
    /// Checks: the blocks tile `[0, capacity)` in address order with consistent neighbour links;
    /// no two adjacent blocks are free; every free block is in exactly the list of its round-down
    /// class with consistent links; bitmap bits equal "list non-empty"; the free-byte, allocation
    /// and node counters match; vacant nodes are exactly the recycling stack.
    ///
    /// # Errors
    /// A description of the first violated invariant.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        let limit = self.nodes.len();
        let (mut at, mut prev, mut cur) = (0u64, NONE, self.first);
        let (mut free_bytes, mut free_blocks, mut used_blocks, mut steps) = (0u64, 0usize, 0, 0);
        let mut prev_free = false;
        while cur != NONE {
            steps += 1;
            if steps > limit {
                return Err("physical chain has a cycle".into());
            }
            let n = self.nodes.get(cur as usize).ok_or("link out of range")?;
            if n.offset != at || n.size == 0 || n.prev_phys != prev {
                return Err(format!(
                    "node {cur}: offset {} size {} prev {} (expected offset {at}, prev {prev})",
                    n.offset, n.size, n.prev_phys
                ));
            }
            match n.state {
                State::Free => {
                    if prev_free {
                        return Err(format!("node {cur}: two adjacent free blocks"));
                    }
                    free_bytes += n.size;
                    free_blocks += 1;
                }
                State::Used => used_blocks += 1,
                State::Vacant => return Err(format!("node {cur}: vacant node in the chain")),
            }
            prev_free = n.state == State::Free;
            at = n.offset.checked_add(n.size).ok_or("block end overflows")?;
            prev = cur;
            cur = n.next_phys;
        }
        if at != self.capacity {
            return Err(format!("blocks end at {at}, capacity {}", self.capacity));
        }
        if free_bytes != self.free_bytes || used_blocks != self.allocations {
            return Err(format!(
                "counters: free {} / {free_bytes} counted, allocations {} / {used_blocks} counted",
                self.free_bytes, self.allocations
            ));
        }
        let mut listed = 0;
        for class in 0..CLASS_COUNT {
            let (fl, sl) = (class / SL_COUNT, class % SL_COUNT);
            let bit = self.sl_bitmap[fl] >> sl & 1 == 1;
            if bit != (self.heads[class] != NONE) {
                return Err(format!(
                    "class {class}: bitmap bit {bit} disagrees with list"
                ));
            }
            let (mut prev, mut cur) = (NONE, self.heads[class]);
            while cur != NONE {
                listed += 1;
                if listed > limit {
                    return Err("free list has a cycle".into());
                }
                let n = self.nodes.get(cur as usize).ok_or("link out of range")?;
                if n.state != State::Free || class_of(n.size) != class || n.prev_free != prev {
                    return Err(format!("node {cur} misfiled in class {class}"));
                }
                prev = cur;
                cur = n.next_free;
            }
        }
        for fl in 0..FL_COUNT {
            if (self.fl_bitmap >> fl & 1 == 1) != (self.sl_bitmap[fl] != 0) {
                return Err(format!(
                    "first-level bit {fl} disagrees with its second level"
                ));
            }
        }
        if listed != free_blocks {
            return Err(format!(
                "{listed} listed free blocks, {free_blocks} in the chain"
            ));
        }
        if self.vacant.len() + free_blocks + used_blocks != self.nodes.len()
            || self
                .vacant
                .iter()
                .any(|&v| self.nodes.get(v as usize).map(|n| n.state) != Some(State::Vacant))
        {
            return Err("vacant stack does not match the vacant nodes".into());
        }
        Ok(())
    }
}
