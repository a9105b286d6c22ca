//! The segregated free lists and their two-level bitmap: finding the first non-empty class at or
//! above a class, and linking and unlinking free nodes. Branch-free where the branch was a coin
//! flip: writes aimed at "no node" land in the sentinel, head writes that must not land go to a
//! spare slot.

use super::Tlsf;
use super::class::{CLASS_COUNT, HEADS_LEN, SL_COUNT, class_of};
use super::node::{NONE, Node, USED, VACANT, or_sentinel};

/// A slot of `Tlsf::heads` past the last class: the target of head writes that must not land.
pub(super) const SPARE_HEAD: usize = HEADS_LEN - 1;

const _: () = assert!(
    SPARE_HEAD >= CLASS_COUNT,
    "the spare head slot must not be a class"
);

impl Tlsf {
    /// First class `>= from` with a non-empty free list.
    #[inline]
    pub(super) fn first_nonempty(&self, from: usize) -> Option<usize> {
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
    pub(super) fn head(&self, class: usize) -> u32 {
        self.heads[class & (HEADS_LEN - 1)]
    }

    /// Pushes node `idx` at the head of the free list of its class and sets the bitmap bits.
    #[inline]
    pub(super) fn link(&mut self, idx: u32) {
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
    pub(super) fn unlink(&mut self, idx: u32) {
        self.unlink_from(idx, class_of(self.nodes[idx as usize].size));
    }

    /// [`unlink`](Self::unlink) when the caller knows the node's class.
    #[inline]
    pub(super) fn unlink_from(&mut self, idx: u32, class: usize) {
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
}
