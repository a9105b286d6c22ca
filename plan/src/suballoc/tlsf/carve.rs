//! Carving a chosen free block: the exact fit, the split off the front (the free node stays the
//! remainder) and the general carve with alignment padding. Each returns a [`Carved`]: two words,
//! so the hot path hands its result back in registers.

use std::num::NonZeroU64;

use super::class::class_of;
use super::node::{NONE, SENTINEL, State, USED};
use super::{Hit, Tlsf};
use crate::suballoc::Region;

/// A carved allocation: its offset and its region key (`generation << 32 | node`; never 0, as node
/// 0 is the sentinel). Two words, so it comes back in registers and the `Region` is built in the
/// caller: a `Region` returned through memory cost a failed store-to-load forward per allocation.
#[derive(Clone, Copy, Debug)]
pub(super) struct Carved {
    /// Start of the allocation.
    offset: u64,
    /// The region key.
    key: NonZeroU64,
}

impl Tlsf {
    /// Hands out `size` bytes of the free node of `hit`, starting `hit.pad` bytes in. The pad and
    /// the remainder become free blocks when they reach `min_split`, else slack.
    pub(super) fn carve(&mut self, hit: Hit, size: u64) -> Carved {
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
    pub(super) fn carve_general(&mut self, hit: Hit, size: u64) -> Carved {
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
        debug_assert!(idx != SENTINEL);
        let key = (u64::from(generation) << 32) | u64::from(idx);
        Carved {
            offset,
            // The sentinel (index 0) is never carved, so the key is never 0.
            key: NonZeroU64::new(key).unwrap_or(NonZeroU64::MIN),
        }
    }

    /// The handle of a carved allocation of `size` bytes.
    #[inline]
    pub(super) fn region(&self, carved: Carved, size: u64) -> Region {
        Region {
            offset: carved.offset,
            size,
            owner: self.owner,
            key: carved.key.get(),
        }
    }
}
