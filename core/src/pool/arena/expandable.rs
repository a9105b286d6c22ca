//! The arena pool's expandable allocations ([`Dedicated`], [`Expandable`]): an allocation alone
//! in a block reserved for it, which grows in place by committing more of its reservation.
//!
//! The block is reserved with [`Growable::reserve_block`](crate::backend::Growable) and carved
//! whole by its one allocation (the allocation's size is the committed size, in granules), so
//! no other request is ever placed in it: the pool places nothing at any
//! [`Stage`](super::carved::Stage). A growth commits the granules past the end
//! ([`Growable::resize_block`](crate::backend::Growable), charged to the budget first) and
//! widens the allocation over them, under the pool's lock. When the allocation is freed (after
//! its last use), the block goes back to the backend with its reservation at once.
//!
//! Offered wherever the pool grows in place (a backend with growable blocks, in-place growth
//! on, TLSF carving); nowhere else.

use super::carved::{Block, Carved, Kind, Live, Place, Role, State};
use crate::align::align_up;
use crate::backend::{BlockRange, InPlaceGrowth, Ticket};
use crate::pool::device_pool::Allocation;
use crate::pool::{Expandable, ExpandableDesc, Handle};
use crate::suballoc::Region;
use crate::{Error, Result};

/// The kind of the pool of expandable allocations: how the backend grows blocks.
pub(super) struct Dedicated {
    pub(super) growth: InPlaceGrowth,
}

/// A block reserved for one expandable allocation: its reservation of address space.
#[derive(Debug)]
pub(super) struct Reservation {
    reserved: u64,
}

impl Role for Reservation {
    fn reserved(&self) -> Option<u64> {
        Some(self.reserved)
    }
}

type ExpandablePool = Carved<Dedicated>;

impl Kind for Dedicated {
    type Role = Reservation;

    /// Nothing is placed in another allocation's block.
    fn existing(
        _: &ExpandablePool,
        _: &mut State<Self>,
        _: u64,
        _: u64,
    ) -> Result<Option<(usize, Region)>> {
        Ok(None)
    }

    /// Expandable allocations come from [`Expandable::allocate_expandable`] alone.
    fn grow(
        _: &ExpandablePool,
        _: &mut State<Self>,
        _: u64,
        _: u64,
        _: &str,
    ) -> Result<Option<Place>> {
        Ok(None)
    }

    /// The reservation serves nothing else: it goes back with its allocation.
    fn released(
        pool: &ExpandablePool,
        st: &mut State<Self>,
        index: usize,
        _: (u64, u64),
        _: (u64, u64),
    ) -> Result<()> {
        let empty = st.blocks[index]
            .as_ref()
            .is_some_and(|b| b.carving.is_empty());
        if empty {
            pool.release_block(st, index)?;
        }
        Ok(())
    }

    fn expandable(pool: &ExpandablePool) -> Option<&dyn Expandable> {
        Some(pool)
    }

    /// The block holds its one allocation whole.
    fn check_block(
        st: &State<Self>,
        i: usize,
        b: &Block<Reservation>,
    ) -> std::result::Result<(), String> {
        let mut held = st.slots.iter().filter(|l| l.block == i);
        let whole = held.next().is_some_and(|l| l.region.size == b.size);
        let waiting = st.deferred.iter().any(|d| d.1.0 == i);
        if whole && held.next().is_none() || waiting {
            Ok(())
        } else {
            Err(format!("block {i}: an expandable block not held whole"))
        }
    }
}

impl Expandable for ExpandablePool {
    fn allocate_expandable(&self, desc: &ExpandableDesc<'_>) -> Result<Option<Allocation>> {
        let ExpandableDesc {
            size,
            reserve,
            label,
        } = *desc;
        let (rounded, _) = self.check_request(size, 1)?;
        let growth = self.kind.growth;
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
        let (carving, region) = self.carve_fresh(id, bytes, bytes, 1)?;
        let block = self.install(
            &mut st,
            id,
            bytes,
            carving,
            Reservation { reserved: reserve },
        );
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
        self.count_in_use(&mut st.stats, range.size, 0);
        let s = &mut st.stats;
        s.allocations += 1;
        s.total_allocations += 1;
        Ok(Some(Allocation { handle, range }))
    }

    fn expand(&self, handle: Handle, size: u64) -> Result<Allocation> {
        if !self.owns(handle) {
            return Err(Error::Unsupported {
                backend: self.backend.capabilities().backend,
                what: "expanding an allocation that was not allocated expandable".into(),
            });
        }
        let st = self.lock();
        Self::check_alive(&st)?;
        let live = st.slots.get(handle)?;
        let (index, offset, held, label) = (
            live.block,
            live.region.offset,
            live.region.size,
            live.label.clone(),
        );
        let b = st.blocks[index]
            .as_ref()
            .ok_or_else(|| Error::invariant("an allocation's block is live", "none"))?;
        // The allocation holds its block whole: its size is the block's.
        let (id, reserved) = (b.id, b.role.reserved);
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
        let granularity = self.kind.growth.granularity;
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
        self.count_in_use(&mut st.stats, add, 0);
        Ok(at(new))
    }
}

#[cfg(test)]
mod tests;
