//! `Tlsf::check_invariants`: the full structural check that tests run after every operation. Kept
//! apart from the allocator because it walks everything (O(blocks + classes)) and is never on the
//! hot path.

use super::Tlsf;
use super::class::{CLASS_COUNT, FL_COUNT, SL_COUNT, class_of};
use super::node::{NONE, State};

impl Tlsf {
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
            match n.state() {
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
            prev_free = n.state() == State::Free;
            at = n.offset.checked_add(n.size).ok_or("block end overflows")?;
            prev = cur;
            cur = n.next_phys;
        }
        if prev != self.last {
            return Err(format!("last block is node {prev}, recorded {}", self.last));
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
                if n.state() != State::Free || class_of(n.size) != class || n.prev_free != prev {
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
        // The vacant stack: vacant nodes only, no cycle, as long as counted; with the sentinel
        // (index 0, neither a block nor vacant) it accounts for every node.
        let (mut stacked, mut cur) = (0usize, self.vacant);
        while cur != NONE {
            stacked += 1;
            if stacked > limit {
                return Err("vacant stack has a cycle".into());
            }
            let n = self
                .nodes
                .get(cur as usize)
                .ok_or("vacant link out of range")?;
            if n.state() != State::Vacant {
                return Err(format!("node {cur} on the vacant stack is not vacant"));
            }
            cur = n.prev_free;
        }
        if stacked != self.vacant_count
            || stacked + free_blocks + used_blocks + 1 != self.nodes.len()
        {
            return Err(format!(
                "vacant stack holds {stacked} nodes (counted {}), {free_blocks} free and \
                 {used_blocks} used blocks, {} nodes",
                self.vacant_count,
                self.nodes.len()
            ));
        }
        Ok(())
    }
}
