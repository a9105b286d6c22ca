//! [`Expandable`] for [`ArenaPool`]: an allocation alone in a block reserved for it, which
//! grows in place by committing more of its reservation.
//!
//! The block is reserved with [`Growable::reserve_block`](crate::backend::Growable) and carved
//! whole by its one allocation (the allocation's size is the committed size, in granules), so
//! no other request is ever placed in it: it has no class and it is not the arena, which the
//! carving paths alone serve. A growth commits the granules past the end
//! ([`Growable::resize_block`](crate::backend::Growable), charged to the budget first) and
//! widens the allocation over them, under the pool's lock. When the allocation is freed (after
//! its last use), the block goes back to the backend with its reservation at once.
//!
//! Offered wherever the pool grows in place (a backend with growable blocks, in-place growth
//! on, TLSF carving); nowhere else.

use super::growth::Role;
use super::{ArenaPool, Live, State};
use crate::align::align_up;
use crate::backend::{BlockRange, Ticket};
use crate::pool::device_pool::Allocation;
use crate::pool::{Expandable, Handle};
use crate::{Error, Result};

impl ArenaPool {
    /// Whether block `index` holds one expandable allocation.
    pub(super) fn is_expandable(st: &State, index: usize) -> bool {
        st.blocks
            .get(index)
            .and_then(Option::as_ref)
            .is_some_and(|b| matches!(b.role, Role::Expandable { .. }))
    }

    /// Charges `bytes` to the budget, asking the runtime's pools to release idle blocks once
    /// when it refuses (the pool's lock is released meanwhile). Whether it was charged.
    fn charge<'a>(
        &'a self,
        st: std::sync::MutexGuard<'a, State>,
        bytes: u64,
    ) -> Result<(std::sync::MutexGuard<'a, State>, bool)> {
        if self.budget.try_reserve(bytes) {
            return Ok((st, true));
        }
        drop(st);
        let released = self.budget.relieve(None)?;
        let st = self.lock();
        Ok((st, released > 0 && self.budget.try_reserve(bytes)))
    }
}

impl Expandable for ArenaPool {
    fn allocate_expandable(
        &self,
        size: u64,
        reserve: u64,
        label: &str,
    ) -> Result<Option<Allocation>> {
        let (rounded, _) = self.check_request(size, 1)?;
        let Some(growth) = self.growth else {
            return Ok(None);
        };
        let g = growth.granularity;
        let most = growth
            .max_reserve
            .min(self.backend.capabilities().max_block_size)
            & !(g - 1);
        let reserve = align_up(reserve.max(rounded), g).map_or(most, |r| r.min(most));
        let Some(bytes) = align_up(rounded, g).filter(|b| *b <= reserve) else {
            return Ok(None);
        };
        let st = self.lock();
        Self::check_alive(&st)?;
        let (mut st, charged) = self.charge(st, bytes)?;
        if !charged {
            return Ok(None);
        }
        let block_label = format!("tensormem {} expandable {label}", self.config.name);
        let Some(id) = self.reserve_charged(&mut st, bytes, reserve, &block_label)? else {
            return Ok(None);
        };
        let role = Role::Expandable { reserved: reserve };
        let (block, region) = self.install_block(&mut st, id, bytes, role, bytes, 1)?;
        let range = BlockRange {
            block: id,
            offset: region.offset,
            size: region.size,
        };
        let handle = st.slots.insert(Live {
            block,
            region,
            label: label.to_string(),
            last_use: Ticket::DONE,
            fresh_block: true,
            grown: 0,
        });
        let s = &mut st.stats;
        s.in_use += range.size;
        s.peak_in_use = s.peak_in_use.max(s.in_use);
        s.allocations += 1;
        s.total_allocations += 1;
        Ok(Some(Allocation { handle, range }))
    }

    fn expand(&self, handle: Handle, size: u64) -> Result<Allocation> {
        let st = self.lock();
        Self::check_alive(&st)?;
        let live = st.slots.get(handle)?;
        let (index, offset, held, label) = (
            live.block,
            live.region.offset,
            live.region.size,
            live.label.clone(),
        );
        if !Self::is_expandable(&st, index) {
            return Err(Error::Unsupported {
                backend: self.backend.capabilities().backend,
                what: format!("expanding `{label}`, which was not allocated expandable"),
            });
        }
        let b = st.blocks[index]
            .as_ref()
            .ok_or_else(|| Error::invariant("an allocation's block is live", "none"))?;
        // The allocation holds its block whole: its size is the block's.
        let (id, reserved) = (b.id, b.reserved().unwrap_or(b.size));
        let at = |size| Allocation {
            handle,
            range: BlockRange {
                block: id,
                offset,
                size,
            },
        };
        if size <= held {
            return Ok(at(held));
        }
        let granularity = self.growth.map_or(1, |g| g.granularity);
        let Some(new) = align_up(size, granularity).filter(|n| *n <= reserved) else {
            return Err(Error::TooLarge {
                what: "expansion",
                requested: size,
                limit: reserved,
                limit_name: "the allocation's reservation",
            });
        };
        let add = new - held;
        let (mut st, charged) = self.charge(st, add)?;
        // The lock was released while the runtime's pools were asked: the allocation may have
        // been freed or grown meanwhile.
        let same = st.slots.get(handle)?.region.size == held;
        let grown = match (charged, same) {
            (true, true) => Self::remember_loss(
                &mut st,
                self.growable().and_then(|g| g.resize_block(id, new)),
            )
            .and_then(|now| match now == new {
                true => Ok(true),
                false => Err(Error::invariant(
                    "a growth commits exactly what was asked",
                    format!("{now} of {new} bytes"),
                )),
            }),
            (true, false) => {
                // Another caller expanded it meanwhile: start again from its new size.
                self.budget.release(add);
                drop(st);
                return self.expand(handle, size);
            }
            (false, _) => Ok(false),
        };
        match grown {
            Ok(true) => {}
            Ok(false) | Err(Error::OutOfMemory(_)) => {
                if charged {
                    self.budget.release(add);
                }
                st.stats.oom_count += 1;
                let snapshot = self.oom_snapshot(&st, size, add, 1, &label);
                drop(st);
                return Err(Error::OutOfMemory(Box::new(snapshot.explain())));
            }
            Err(e) => {
                self.budget.release(add);
                return Err(e);
            }
        }
        self.resized(&mut st, index, held, new)?;
        let State { blocks, slots, .. } = &mut *st;
        let b = blocks[index]
            .as_mut()
            .ok_or_else(|| Error::invariant("an allocation's block is live", "none"))?;
        let region = &mut slots.get_mut(handle)?.region;
        if !b.carving.extend_region(region, add)? {
            return Err(Error::invariant(
                "a grown expandable block is free past its allocation",
                format!("{new} bytes"),
            ));
        }
        let s = &mut st.stats;
        s.in_use += add;
        s.peak_in_use = s.peak_in_use.max(s.in_use);
        Ok(at(new))
    }
}

#[cfg(test)]
mod tests;
