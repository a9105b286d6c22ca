//! Buddy allocator: power-of-two blocks, split in halves on allocate and merged with their buddy
//! on free (Knowlton, "A fast storage allocator", CACM 1965; Knuth, TAOCP vol. 1, §2.5).
//!
//! Every block of order `k` is `2^k` bytes at a multiple of `2^k`, so alignment up to the block's
//! size is free and a block's buddy is known without a search. A request takes the block of the
//! next power of two, split off a larger free block; its free merges it with its buddy while the
//! buddy is free, up the tree. The metadata is out of band: one node per block of the split tree
//! (`u32` links to parent and buddy), one free list per order and a bitmap of non-empty orders, so
//! a free needs no address lookup and every operation is O(orders) = O(log capacity), a few
//! constant-time steps per level, independent of the number of live blocks.
//!
//! A range that is not a power of two is cut into its binary decomposition (96 MiB: a 64 MiB and
//! a 32 MiB top block), each aligned to its size; top blocks never merge.
//!
//! # When buddy is the right choice
//!
//! The price is internal fragmentation: a block holds up to twice its request and nothing else
//! can use the rest. On the pool traces, whose tensor sizes are not powers of two, buddy holds
//! about a third more bytes than requested where TLSF holds none beyond them, and a ramp fills a
//! range only about three quarters before its first refusal. The gain is a short, predictable
//! path: a free merges with one known buddy per level and a split is a few node writes, so an
//! allocate/free pair in churn costs about half of TLSF's. Buddy is the right choice where sizes
//! are powers of two already (pages, KV blocks, size-classed slabs: nothing is rounded, nothing
//! lost) or where that bounded path matters more than memory; for tensors of arbitrary sizes,
//! TLSF is. The measured numbers are in `docs/performance.md` ("Buddy allocator").
#![forbid(unsafe_code)]

use super::{
    Region, Slot, SubAllocReport, check_capacity, check_region, check_request, next_owner_id,
};
use crate::{Error, Result};

mod invariants;
#[cfg(test)]
mod tests;

/// "No node" in index links.
const NONE: u32 = u32::MAX;

/// Largest number of metadata nodes: indices stay below [`NONE`].
const MAX_NODES: usize = NONE as usize;

/// Number of orders: blocks of `2^0` to `2^63` bytes.
const ORDERS: usize = 64;

/// What a node of the split tree describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// A free block, in the free list of its order.
    Free,
    /// A block handed out as a [`Region`].
    Used,
    /// A block split into two halves (its buddies); it is neither free nor handed out.
    Split,
    /// A recycled node on the vacant stack; describes no block.
    Vacant,
}

/// One block of the split tree.
#[derive(Clone, Copy, Debug)]
struct Node {
    /// Start of the block, a multiple of `2^order`.
    offset: u64,
    /// The block this one is a half of, or [`NONE`] for a top block.
    parent: u32,
    /// The other half of `parent`, or [`NONE`] for a top block.
    buddy: u32,
    /// Previous entry in the free list (free blocks only).
    prev: u32,
    /// Next entry in the free list (free blocks only).
    next: u32,
    /// Generation stamped into the block's region (used blocks only).
    generation: u32,
    /// The block is `2^order` bytes.
    order: u8,
    state: State,
}

/// Binary buddy allocator over `[0, capacity)`.
///
/// ```text
///  bitmap (u64)   bit k set  <=>  heads[k] != NONE
///  heads[k]       LIFO doubly-linked list of free blocks of 2^k bytes
///  node           offset | parent, buddy (split tree) | order | state
///
///  [0 ............................ 64 KiB) [64 KiB ...... 96 KiB)   top blocks of 96 KiB
///  [0 ...... 32 KiB) [32 KiB ..... 64 KiB)                          halves after one split
/// ```
///
/// # Complexity
///
/// `allocate` finds a free block with at most one bitmap search per order it passes (one when
/// `align` is at most the block size) and splits it down to the request's order; `free` merges
/// up while the buddy is free. Both are O(log capacity) node updates, at most 64 levels,
/// independent of the number of blocks. Node storage grows to the peak number of tree nodes, then
/// recycles.
///
/// # Packing
///
/// A region of `size` bytes holds a block of `max(size.next_power_of_two(), min_block)` bytes
/// (`report().used` counts blocks). `allocate` returns `Ok(None)` only if no free block has at
/// least `max(size.next_power_of_two(), align)` bytes (any such block fits) and no smaller free
/// block at the head of its list happens to fit at the alignment.
#[derive(Debug)]
pub struct Buddy {
    /// Bytes managed.
    capacity: u64,
    /// Splits stop at blocks of `2^min_order` bytes.
    min_order: u32,
    /// Order of the largest top block: the largest request that can ever fit is `2^top_order`.
    top_order: u32,
    /// Id stamped into every region this allocator issues.
    owner: u32,
    /// The split tree's nodes; an index is stable while its block lives.
    nodes: Vec<Node>,
    /// Vacant node indices, reused before `nodes` grows.
    vacant: Vec<u32>,
    /// Head of each order's free list.
    heads: [u32; ORDERS],
    /// Bit k set iff `heads[k] != NONE`.
    bitmap: u64,
    /// Bytes in free blocks.
    free_bytes: u64,
    /// Live regions.
    allocations: usize,
    /// Generation for the next used block (wrapping counter).
    generation: u32,
}

/// Order of the smallest power of two at least `size` (`size >= 1`): 0 to 64.
#[inline]
fn order_at_least(size: u64) -> u32 {
    64 - (size - 1).leading_zeros()
}

impl Buddy {
    /// Default smallest block, in bytes: splits stop at 16 bytes.
    pub const DEFAULT_MIN_BLOCK: u64 = 16;

    /// An allocator over `[0, capacity)` with the default smallest block.
    ///
    /// # Errors
    /// [`Error::ZeroSize`] if `capacity` is 0.
    pub fn new(capacity: u64) -> Result<Self> {
        Self::with_min_block(capacity, Self::DEFAULT_MIN_BLOCK)
    }

    /// An allocator whose splits stop at blocks of `min_block` bytes.
    ///
    /// `min_block` (default [`Buddy::DEFAULT_MIN_BLOCK`], a power of two up to
    /// [`MAX_ALIGN`](super::MAX_ALIGN)) is the smallest block a request holds, and so its
    /// guaranteed alignment. Larger means fewer nodes and splits for many tiny regions, and more
    /// bytes held by each; set it to the arena's granule when every size is a multiple of it. A
    /// top block smaller than `min_block` (the end of a range that is not a multiple of it) is
    /// still handed out whole to a request it holds.
    ///
    /// # Errors
    /// [`Error::ZeroSize`] if `capacity` is 0; [`Error::InvalidAlignment`] if `min_block` is not
    /// a power of two up to `MAX_ALIGN`.
    pub fn with_min_block(capacity: u64, min_block: u64) -> Result<Self> {
        check_capacity(capacity, "sub-allocator range")?;
        if !min_block.is_power_of_two() || min_block > super::MAX_ALIGN {
            return Err(Error::InvalidAlignment {
                align: min_block,
                max: super::MAX_ALIGN,
            });
        }
        let mut buddy = Buddy {
            capacity,
            min_order: min_block.trailing_zeros(),
            top_order: 63 - capacity.leading_zeros(),
            owner: next_owner_id(),
            nodes: Vec::with_capacity(64),
            vacant: Vec::new(),
            heads: [NONE; ORDERS],
            bitmap: 0,
            free_bytes: capacity,
            allocations: 0,
            generation: 0,
        };
        // The binary decomposition, largest first: each top block lands on a multiple of its size.
        let mut offset = 0u64;
        for order in (0..ORDERS as u32).rev() {
            if capacity >> order & 1 == 1 {
                let idx = buddy.new_node(offset, order, NONE);
                buddy.push_free(idx);
                offset += 1 << order;
            }
        }
        Ok(buddy)
    }

    /// Size of the managed range in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Smallest block a region holds, in bytes.
    pub fn min_block(&self) -> u64 {
        1 << self.min_order
    }

    /// True when no region is live (every top block is free and whole).
    pub fn is_empty(&self) -> bool {
        self.allocations == 0
    }

    /// Bytes in free blocks (all of them, however fragmented). Constant time.
    pub fn free_bytes(&self) -> u64 {
        self.free_bytes
    }

    /// Carves `size` bytes at a multiple of `align` from a block of the next power of two.
    ///
    /// Returns `Ok(None)` when no free block fits now (see the packing note on [`Buddy`]);
    /// freeing can make room. O(log capacity).
    ///
    /// # Errors
    /// [`Error::ZeroSize`] for `size == 0`; [`Error::InvalidAlignment`] if `align` is not a power of
    /// two or exceeds [`MAX_ALIGN`](super::MAX_ALIGN); [`Error::TooLarge`] if `size` is larger
    /// than the largest top block (the largest power of two in `capacity`), which no free can
    /// change.
    pub fn allocate(&mut self, size: u64, align: u64) -> Result<Option<Region>> {
        check_request(size, align, self.capacity)?;
        let need = order_at_least(size);
        if need > self.top_order {
            return Err(Error::TooLarge {
                what: "allocation",
                requested: size,
                limit: 1 << self.top_order,
                limit_name: "largest buddy block (the largest power of two in the capacity)",
            });
        }
        let Some(idx) = self.find(need, align) else {
            return Ok(None);
        };
        let order = u32::from(self.nodes[idx as usize].order);
        let target = need.max(self.min_order).min(order);
        // Each split level takes two nodes.
        let new_nodes = 2 * (order - target) as usize;
        if self.nodes.len() + new_nodes.saturating_sub(self.vacant.len()) > MAX_NODES {
            return Ok(None);
        }
        let used = self.split(idx, target);
        self.allocations += 1;
        self.generation = self.generation.wrapping_add(1);
        let node = &mut self.nodes[used as usize];
        node.state = State::Used;
        node.generation = self.generation;
        Ok(Some(Region {
            offset: node.offset,
            size,
            owner: self.owner,
            key: u64::from(self.generation) << 32 | u64::from(used),
        }))
    }

    /// A free block of order at least `need` at a multiple of `align`: the head of the lowest
    /// non-empty order, or of the next one up where the head is not aligned. Every block of order
    /// `log2(align)` or more is aligned, so the search passes each order at most once.
    #[inline]
    fn find(&self, need: u32, align: u64) -> Option<u32> {
        let mut from = need;
        while from < ORDERS as u32 {
            let above = self.bitmap & (u64::MAX << from);
            if above == 0 {
                return None;
            }
            let order = above.trailing_zeros();
            let head = self.heads[order as usize];
            if self.nodes[head as usize].offset & (align - 1) == 0 {
                return Some(head);
            }
            from = order + 1;
        }
        None
    }

    /// Takes free block `idx` out of its list and splits it down to order `target`, keeping the
    /// lower half each time (so the offset, and its alignment, stay) and listing the upper half.
    /// Returns the node of the block of order `target`.
    fn split(&mut self, idx: u32, target: u32) -> u32 {
        self.unlink(idx);
        let mut idx = idx;
        let mut order = u32::from(self.nodes[idx as usize].order);
        self.free_bytes -= 1 << order;
        while order > target {
            order -= 1;
            let offset = self.nodes[idx as usize].offset;
            let low = self.new_node(offset, order, idx);
            let high = self.new_node(offset + (1 << order), order, idx);
            self.nodes[low as usize].buddy = high;
            self.nodes[high as usize].buddy = low;
            self.nodes[idx as usize].state = State::Split;
            self.push_free(high);
            self.free_bytes += 1 << order;
            idx = low;
        }
        idx
    }

    /// Returns `region` to the free space, merging its block with its buddy while the buddy is
    /// free. O(log capacity).
    ///
    /// # Errors
    /// [`Error::ForeignHandle`] if another allocator issued `region`; [`Error::StaleHandle`],
    /// [`Error::DoubleFree`] or
    /// [`ArgumentError::RegionMismatch`](crate::ArgumentError::RegionMismatch) if its node no
    /// longer describes it. The allocator is unchanged on error.
    pub fn free(&mut self, region: Region) -> Result<()> {
        self.free_merged(region).map(|_| ())
    }

    /// [`Buddy::free`], returning the free block the region became part of, as (offset, size).
    ///
    /// # Errors
    /// As [`Buddy::free`].
    pub fn free_merged(&mut self, region: Region) -> Result<(u64, u64)> {
        let mut idx = self.validate(&region)?;
        self.allocations -= 1;
        let mut order = u32::from(self.nodes[idx as usize].order);
        self.free_bytes += 1 << order;
        loop {
            let n = self.nodes[idx as usize];
            if n.buddy == NONE || self.nodes[n.buddy as usize].state != State::Free {
                break;
            }
            // Buddies always have the same order, and a free one is a whole block: merge.
            self.unlink(n.buddy);
            self.release(n.buddy);
            self.release(idx);
            idx = n.parent;
            order += 1;
        }
        self.push_free(idx);
        Ok((self.nodes[idx as usize].offset, 1 << order))
    }

    /// Checks that `region` is a live allocation of this allocator; returns its node index.
    fn validate(&self, region: &Region) -> Result<u32> {
        check_region(region, self.owner, "buddy sub-allocator", "block", |idx| {
            self.nodes.get(idx as usize).map(|n| Slot {
                used: n.state == State::Used,
                generation: n.generation,
                offset: n.offset,
                size: 1u64 << n.order,
            })
        })
    }

    /// Used (bytes held by live blocks, rounding included), free, largest free block and
    /// fragmentation. Constant time.
    pub fn report(&self) -> SubAllocReport {
        SubAllocReport::new(
            self.capacity,
            self.capacity - self.free_bytes,
            self.largest_free(),
            self.allocations,
        )
    }

    /// Size of the largest free block in bytes (0 when full). Constant time.
    pub fn largest_free(&self) -> u64 {
        match self.bitmap {
            0 => 0,
            bits => 1 << (63 - bits.leading_zeros()),
        }
    }

    /// A node for a free block of `2^order` bytes at `offset` under `parent`, not yet listed;
    /// a vacant one when there is one.
    fn new_node(&mut self, offset: u64, order: u32, parent: u32) -> u32 {
        let node = Node {
            offset,
            parent,
            buddy: NONE,
            prev: NONE,
            next: NONE,
            generation: 0,
            order: order as u8,
            state: State::Free,
        };
        match self.vacant.pop() {
            Some(idx) => {
                self.nodes[idx as usize] = node;
                idx
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        }
    }

    /// Puts node `idx` on the vacant stack.
    fn release(&mut self, idx: u32) {
        self.nodes[idx as usize].state = State::Vacant;
        self.vacant.push(idx);
    }

    /// Marks `idx` free and pushes it on the list of its order.
    fn push_free(&mut self, idx: u32) {
        let order = self.nodes[idx as usize].order as usize;
        let head = self.heads[order];
        let n = &mut self.nodes[idx as usize];
        n.state = State::Free;
        n.prev = NONE;
        n.next = head;
        if head != NONE {
            self.nodes[head as usize].prev = idx;
        }
        self.heads[order] = idx;
        self.bitmap |= 1 << order;
    }

    /// Takes free node `idx` off the list of its order.
    fn unlink(&mut self, idx: u32) {
        let n = self.nodes[idx as usize];
        let order = n.order as usize;
        match n.prev {
            NONE => self.heads[order] = n.next,
            prev => self.nodes[prev as usize].next = n.next,
        }
        if n.next != NONE {
            self.nodes[n.next as usize].prev = n.prev;
        }
        if self.heads[order] == NONE {
            self.bitmap &= !(1 << order);
        }
    }
}
