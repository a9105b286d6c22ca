//! The online allocator that sweep-line planning simulates: a two-level segregated fit (TLSF,
//! Masmano et al., ECRTS 2004; the allocator VMA and many real-time systems use) over a growing
//! arena, in O(1) per operation.
//!
//! Every range of `[0, top)` is a block, used or free, linked to its neighbours in address order,
//! so freeing coalesces through the links without looking anything up. Free blocks sit in lists
//! per size class: 32 linear classes per power of two, so a class spans at most 1/32 of its sizes.
//! A bitmap per power of two finds the first non-empty class at or above a size in two bit scans.
//! An allocation takes the best fit among the first [`SCAN`] blocks of the lowest class that can
//! hold it (ties to the lower offset), else of the next non-empty class; when nothing fits it grows
//! `top`. The free block that reaches `top` is given back to it, so the arena never keeps a free
//! tail. This replaced ordered maps (by offset and by length) whose exact best fit cost about ten
//! tree operations per buffer: a million buffers took seconds instead of a fraction of one.

use super::align_up;

/// Blocks of a class examined for the best fit before settling for the best one seen.
const SCAN: usize = 16;

/// Linear classes per power of two, as a shift.
const SUB_BITS: u32 = 5;
const SUB: usize = 1 << SUB_BITS;
/// Powers of two with their own classes: sizes below `SUB` share the first.
const LEVELS: usize = 64 - SUB_BITS as usize + 1;

const NIL: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Block {
    offset: u64,
    len: u64,
    /// Neighbours in address order.
    prev: u32,
    next: u32,
    /// Neighbours in the block's free list (unused while the block is used).
    prev_free: u32,
    next_free: u32,
    free: bool,
}

/// A simulated TLSF arena; see the module docs. Block handles are `u32`.
#[derive(Debug, Clone)]
pub(crate) struct FreeList {
    blocks: Vec<Block>,
    /// Indices of `blocks` that hold no block and can be reused.
    spare: Vec<u32>,
    /// First free block of each class (`level * SUB + sub`).
    heads: Vec<u32>,
    /// Bit `l`: level `l` has a non-empty class; `sub_map[l]` bit `s`: class `(l, s)` is non-empty.
    level_map: u64,
    sub_map: [u32; LEVELS],
    /// The last block in address order (always used), or `NIL`.
    last: u32,
    top: u64,
}

/// The size class of a length: `(level, sub)`, monotone in `len`.
fn class(len: u64) -> (usize, usize) {
    if len < SUB as u64 {
        return (0, len as usize);
    }
    let bit = 63 - len.leading_zeros();
    let sub = (len >> (bit - SUB_BITS)) as usize - SUB;
    ((bit - SUB_BITS + 1) as usize, sub)
}

impl FreeList {
    pub fn new() -> Self {
        FreeList {
            blocks: Vec::new(),
            spare: Vec::new(),
            heads: vec![NIL; LEVELS * SUB],
            level_map: 0,
            sub_map: [0; LEVELS],
            last: NIL,
            top: 0,
        }
    }

    /// The end of the highest used block: the arena's size now.
    pub fn top(&self) -> u64 {
        self.top
    }

    /// Allocates `size > 0` bytes at a multiple of `align` (a power of two). Returns the offset
    /// and the block's handle for [`Self::free`].
    pub fn alloc(&mut self, size: u64, align: u64) -> (u64, u32) {
        match self.find(size, align) {
            Some(b) => self.take(b, size, align),
            None => {
                let offset = align_up(self.top, align);
                if offset > self.top {
                    let pad = self.push(self.top, offset - self.top, self.last);
                    self.insert_free(pad);
                }
                let b = self.push(offset, size, self.last);
                self.top = offset + size;
                (offset, b)
            }
        }
    }

    /// Frees the block `handle` (from [`Self::alloc`], not freed yet), coalescing with its free
    /// neighbours and giving a free tail back to `top`.
    pub fn free(&mut self, handle: u32) {
        let mut b = handle;
        self.blocks[b as usize].free = true;
        let prev = self.blocks[b as usize].prev;
        if prev != NIL && self.blocks[prev as usize].free {
            self.remove_free(prev);
            self.absorb(prev, b);
            b = prev;
        }
        let next = self.blocks[b as usize].next;
        if next != NIL && self.blocks[next as usize].free {
            self.remove_free(next);
            self.absorb(b, next);
        }
        let block = self.blocks[b as usize];
        if block.next == NIL {
            // The tail: back to the top, and the block before it (used, or none) is the last.
            self.top = block.offset;
            self.last = block.prev;
            if block.prev != NIL {
                self.blocks[block.prev as usize].next = NIL;
            }
            self.spare.push(b);
        } else {
            self.insert_free(b);
        }
    }

    /// The free block to allocate from, if one fits.
    fn find(&self, size: u64, align: u64) -> Option<u32> {
        let fits = |b: &Block| align_up(b.offset, align) + size <= b.offset + b.len;
        let (level, sub) = class(size);
        let mut c = level * SUB + sub;
        loop {
            let mut best: Option<(u64, u64, u32)> = None;
            let mut k = self.heads[c];
            for _ in 0..SCAN {
                if k == NIL {
                    break;
                }
                let b = &self.blocks[k as usize];
                if fits(b) && best.is_none_or(|(l, o, _)| (b.len, b.offset) < (l, o)) {
                    best = Some((b.len, b.offset, k));
                }
                k = b.next_free;
            }
            if let Some((_, _, k)) = best {
                return Some(k);
            }
            c = self.next_class(c + 1)?;
        }
    }

    /// The first non-empty class at or above `c`.
    fn next_class(&self, c: usize) -> Option<usize> {
        let (level, sub) = (c / SUB, c % SUB);
        if level >= LEVELS {
            return None;
        }
        let here = self.sub_map[level] & (u32::MAX << sub);
        if here != 0 {
            return Some(level * SUB + here.trailing_zeros() as usize);
        }
        let above = self.level_map & u64::MAX.checked_shl(level as u32 + 1).unwrap_or(0);
        if above == 0 {
            return None;
        }
        let level = above.trailing_zeros() as usize;
        Some(level * SUB + self.sub_map[level].trailing_zeros() as usize)
    }

    /// Allocates from free block `b`: the aligned start, the padding before it and the rest
    /// after it stay free.
    fn take(&mut self, b: u32, size: u64, align: u64) -> (u64, u32) {
        self.remove_free(b);
        let Block { offset, len, .. } = self.blocks[b as usize];
        let start = align_up(offset, align);
        let used = if start > offset {
            self.blocks[b as usize].len = start - offset;
            self.insert_free(b);
            self.push(start, size, b)
        } else {
            self.blocks[b as usize].len = size;
            self.blocks[b as usize].free = false;
            b
        };
        let end = start + size;
        if end < offset + len {
            let rest = self.push(end, offset + len - end, used);
            self.insert_free(rest);
        }
        (start, used)
    }

    /// A new used block `[offset, offset + len)` linked in after `after` (`NIL`: first).
    fn push(&mut self, offset: u64, len: u64, after: u32) -> u32 {
        let next = if after == NIL {
            NIL
        } else {
            self.blocks[after as usize].next
        };
        let block = Block {
            offset,
            len,
            prev: after,
            next,
            prev_free: NIL,
            next_free: NIL,
            free: false,
        };
        let k = match self.spare.pop() {
            Some(k) => {
                self.blocks[k as usize] = block;
                k
            }
            None => {
                self.blocks.push(block);
                (self.blocks.len() - 1) as u32
            }
        };
        if after != NIL {
            self.blocks[after as usize].next = k;
        }
        if next != NIL {
            self.blocks[next as usize].prev = k;
        } else {
            self.last = k;
        }
        k
    }

    /// Merges block `b`, right after `a` in address order, into `a`.
    fn absorb(&mut self, a: u32, b: u32) {
        let Block { len, next, .. } = self.blocks[b as usize];
        self.blocks[a as usize].len += len;
        self.blocks[a as usize].next = next;
        if next != NIL {
            self.blocks[next as usize].prev = a;
        } else {
            self.last = a;
        }
        self.spare.push(b);
    }

    fn insert_free(&mut self, b: u32) {
        let (level, sub) = class(self.blocks[b as usize].len);
        let c = level * SUB + sub;
        let head = self.heads[c];
        let block = &mut self.blocks[b as usize];
        block.free = true;
        block.prev_free = NIL;
        block.next_free = head;
        if head != NIL {
            self.blocks[head as usize].prev_free = b;
        }
        self.heads[c] = b;
        self.sub_map[level] |= 1 << sub;
        self.level_map |= 1 << level;
    }

    fn remove_free(&mut self, b: u32) {
        let Block {
            len,
            prev_free,
            next_free,
            ..
        } = self.blocks[b as usize];
        if prev_free != NIL {
            self.blocks[prev_free as usize].next_free = next_free;
        } else {
            let (level, sub) = class(len);
            self.heads[level * SUB + sub] = next_free;
            if next_free == NIL {
                self.sub_map[level] &= !(1 << sub);
                if self.sub_map[level] == 0 {
                    self.level_map &= !(1 << level);
                }
            }
        }
        if next_free != NIL {
            self.blocks[next_free as usize].prev_free = prev_free;
        }
        self.blocks[b as usize].free = false;
    }
}

#[cfg(test)]
mod tests;
