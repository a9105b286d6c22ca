//! Block metadata nodes: their layout, the tags that encode a node's state in its free-list link,
//! the sentinel, and the recycling of vacant nodes. The rest of the allocator reads and writes
//! nodes by index; this is where an index comes from and goes back to.

use super::Tlsf;

/// "No node" in index links.
pub(super) const NONE: u32 = u32::MAX;

/// `Node::next_free` tag of a used block.
pub(super) const USED: u32 = u32::MAX - 1;

/// `Node::next_free` tag of a vacant node.
pub(super) const VACANT: u32 = u32::MAX - 2;

/// Largest number of metadata nodes: indices stay below the three tags.
pub(super) const MAX_NODES: usize = VACANT as usize;

/// Index of the sentinel node: never a block, it absorbs the list-link writes whose target is
/// `NONE`, so that linking and unlinking need no data-dependent branch (those branches were a third
/// of the allocator's mispredictions in the steady-state benchmark).
pub(super) const SENTINEL: u32 = 0;

/// The node a link write to `idx` goes to: `idx` itself, or the sentinel for `NONE`. A conditional
/// move, never a branch.
#[inline(always)]
pub(super) fn or_sentinel(idx: u32) -> usize {
    (if idx == NONE { SENTINEL } else { idx }) as usize
}

/// What a node currently describes, decoded from `Node::next_free`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    /// A free block, linked in the free list of its round-down class.
    Free,
    /// A block handed out as a [`Region`](crate::suballoc::Region).
    Used,
    /// An unused node on the recycling stack; describes no block.
    Vacant,
}

/// Metadata of one block: a slot in `Tlsf::nodes`. 32 bytes, two per cache line, never straddling
/// one: the free-list links double as the state tag and the generation.
#[derive(Clone, Copy, Debug)]
pub(super) struct Node {
    /// First byte of the block.
    pub(super) offset: u64,
    /// Length of the block in bytes. For a used block this includes its slack (a tail remainder
    /// below `min_split`, plus leading pads of later neighbours below `min_split`).
    pub(super) size: u64,
    /// Physically previous block (lower offset), or `NONE` for the block at offset 0.
    pub(super) prev_phys: u32,
    /// Physically next block, or `NONE` for the last block.
    pub(super) next_phys: u32,
    /// Free: previous entry in the free list (or `NONE`). Used: the generation stamped into the
    /// block's region, so a handle from an earlier use of the slot is recognised. Vacant: the next
    /// node down the vacant stack (or `NONE`).
    pub(super) prev_free: u32,
    /// Free: next entry in the free list (or `NONE`). Otherwise the tag `USED` or `VACANT`.
    pub(super) next_free: u32,
}

impl Node {
    /// Whether a node of the physical chain is a free block. Chain nodes are never vacant, so one
    /// comparison decides it.
    #[inline]
    pub(super) fn is_free_in_chain(&self) -> bool {
        debug_assert!(self.state() != State::Vacant);
        self.next_free != USED
    }

    #[inline]
    pub(super) fn state(&self) -> State {
        match self.next_free {
            USED => State::Used,
            VACANT => State::Vacant,
            _ => State::Free,
        }
    }
}

impl Tlsf {
    /// A node for a new block, recycled from the vacant stack when possible. `prev_free` and
    /// `next_free` are set as given (`NONE, NONE` for a free block about to be linked,
    /// `generation, USED` for a used one).
    #[inline]
    pub(super) fn new_node(
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
    pub(super) fn release_node(&mut self, idx: u32) {
        let node = &mut self.nodes[idx as usize];
        node.next_free = VACANT;
        node.prev_free = self.vacant;
        self.vacant = idx;
        self.vacant_count += 1;
    }
}
