//! `Buddy::check_invariants`: the full structural check that tests run after every operation.
//! Kept apart from the allocator because it walks every node (O(nodes log nodes)) and is never on
//! the hot path.

use super::{Buddy, NONE, ORDERS, State};

impl Buddy {
    /// Verifies every structural invariant; O(nodes log nodes). For tests and debugging.
    ///
    /// Checks: the top blocks are the binary decomposition of the capacity; every other node is a
    /// half of a split parent, with a buddy of the same order on the other half; the leaves (free
    /// and used blocks) tile `[0, capacity)` and each lies on a multiple of its size; no two
    /// buddies are both free; every free block is in exactly the list of its order with
    /// consistent links; bitmap bits equal "list non-empty"; the free-byte and allocation
    /// counters match; vacant nodes are exactly the recycling stack.
    ///
    /// # Errors
    /// A description of the first violated invariant.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        let mut tops = Vec::new();
        let mut leaves = Vec::new();
        let (mut free_bytes, mut free_blocks, mut used, mut vacant) = (0u64, 0usize, 0usize, 0);
        for (i, n) in self.nodes.iter().enumerate() {
            let size = 1u64 << n.order;
            if n.state == State::Vacant {
                vacant += 1;
                continue;
            }
            if n.offset % size != 0 {
                return Err(format!(
                    "node {i}: offset {} not a multiple of {size}",
                    n.offset
                ));
            }
            if n.parent == NONE {
                if n.buddy != NONE {
                    return Err(format!("top node {i} has a buddy"));
                }
                tops.push((n.offset, n.order));
            } else {
                let p = self
                    .nodes
                    .get(n.parent as usize)
                    .ok_or("parent out of range")?;
                let b = self
                    .nodes
                    .get(n.buddy as usize)
                    .ok_or("buddy out of range")?;
                let half = 1u64 << p.order.saturating_sub(1);
                let low = n.offset == p.offset;
                if p.state != State::Split
                    || p.order != n.order + 1
                    || b.parent != n.parent
                    || b.buddy != i as u32
                    || b.order != n.order
                    || b.state == State::Vacant
                    || (!low && n.offset != p.offset + half)
                    || b.offset != if low { p.offset + half } else { p.offset }
                {
                    return Err(format!(
                        "node {i} (offset {}, order {}) is not a half of its parent {}",
                        n.offset, n.order, n.parent
                    ));
                }
                if n.state == State::Free && b.state == State::Free {
                    return Err(format!("node {i}: free buddies not merged"));
                }
            }
            match n.state {
                State::Free => {
                    free_bytes += size;
                    free_blocks += 1;
                    leaves.push((n.offset, size));
                }
                State::Used => {
                    used += 1;
                    leaves.push((n.offset, size));
                }
                State::Split | State::Vacant => {}
            }
        }
        let mut at = 0u64;
        for order in (0..ORDERS as u8).rev() {
            if self.capacity >> order & 1 == 1 {
                if !tops.contains(&(at, order)) {
                    return Err(format!("top block of order {order} at {at} missing"));
                }
                at += 1 << order;
            }
        }
        if tops.len() != self.capacity.count_ones() as usize {
            return Err(format!(
                "{} top blocks for capacity {}",
                tops.len(),
                self.capacity
            ));
        }
        leaves.sort_unstable();
        let mut end = 0u64;
        for (offset, size) in leaves {
            if offset != end {
                return Err(format!(
                    "leaves do not tile: block at {offset}, expected {end}"
                ));
            }
            end = offset.wrapping_add(size);
        }
        if end != self.capacity {
            return Err(format!("leaves end at {end}, capacity {}", self.capacity));
        }
        if free_bytes != self.free_bytes || used != self.allocations {
            return Err(format!(
                "counters: free {} / {free_bytes} counted, allocations {} / {used} counted",
                self.free_bytes, self.allocations
            ));
        }
        let mut listed = 0;
        for order in 0..ORDERS {
            if (self.bitmap >> order & 1 == 1) != (self.heads[order] != NONE) {
                return Err(format!("order {order}: bitmap bit disagrees with its list"));
            }
            let (mut prev, mut cur) = (NONE, self.heads[order]);
            while cur != NONE {
                listed += 1;
                if listed > self.nodes.len() {
                    return Err("free list has a cycle".into());
                }
                let n = self.nodes.get(cur as usize).ok_or("link out of range")?;
                if n.state != State::Free || n.order as usize != order || n.prev != prev {
                    return Err(format!("node {cur} misfiled in order {order}"));
                }
                prev = cur;
                cur = n.next;
            }
        }
        if listed != free_blocks {
            return Err(format!(
                "{listed} listed free blocks, {free_blocks} in the tree"
            ));
        }
        let mut stacked = self.vacant.clone();
        stacked.sort_unstable();
        stacked.dedup();
        let all_vacant = stacked.iter().all(|&i| {
            self.nodes
                .get(i as usize)
                .is_some_and(|n| n.state == State::Vacant)
        });
        if stacked.len() != self.vacant.len() || stacked.len() != vacant || !all_vacant {
            return Err(format!(
                "vacant stack of {} entries ({} distinct), {vacant} vacant nodes",
                self.vacant.len(),
                stacked.len()
            ));
        }
        Ok(())
    }
}
