//! The counting device's blocks that grow in place: what each call of [`Growable`] creates,
//! maps and unmaps on the device it models (CUDA's units or the host's pages; see
//! [`CountingBackend`]).

use std::collections::BTreeMap;

use tensormem::Result;
use tensormem::backend::{BlockDesc, BlockId, Growable, InPlaceGrowth};

use super::{Blk, CountingBackend};
use crate::peers::granularity;

impl Growable for CountingBackend {
    fn in_place_growth(&self) -> InPlaceGrowth {
        self.growth.unwrap_or(InPlaceGrowth::NONE)
    }

    fn reserve_block(&self, desc: &BlockDesc<'_>, _reserve: u64) -> Result<BlockId> {
        if self.growth.is_none() {
            return Err(Self::unsupported("in-place growth"));
        }
        let mut units = BTreeMap::new();
        if desc.size > 0 && !self.host() {
            units.insert(0, desc.size);
        }
        let id = self.add_block(Blk {
            size: desc.size,
            holes: Vec::new(),
            in_place: true,
            units,
        });
        // The host's one creation is the reservation; CUDA creates what it commits, one unit.
        let n = u64::from(desc.size > 0);
        self.counters
            .reserve_n(desc.size, if self.host() { 1 } else { n });
        self.counters.mapped(n, 0);
        Ok(id)
    }

    fn resize_block(&self, block: BlockId, size: u64) -> Result<u64> {
        let host = self.host();
        let counters = &self.counters;
        self.with(block, |b| {
            let g = granularity();
            if host {
                // One `mprotect`; a shrink gives back what the cut range still holds.
                if size > b.size {
                    counters.reserve_n(size - b.size, 0);
                    counters.mapped(1, 0);
                } else {
                    let gone = b.committed(size, b.size, g);
                    counters.release_n(gone, 0);
                    counters.mapped(0, u64::from(gone > 0));
                    b.truncate(size / g);
                }
                b.size = size;
                return Ok(size);
            }
            if size > b.size {
                // One growth: one unit.
                let add = size - b.size;
                b.units.insert(b.size, add);
                counters.reserve_n(add, 1);
                counters.mapped(1, 0);
                b.size = size;
                return Ok(size);
            }
            // The unit that holds the new end stays whole; those past it go.
            let now = match b.units.range(..size).next_back() {
                Some((o, n)) if o + n > size => o + n,
                _ => size,
            };
            let gone = b.units.split_off(&now);
            counters.release_n(gone.values().sum(), gone.len() as u64);
            counters.mapped(0, gone.len() as u64);
            b.size = now;
            Ok(now)
        })
    }

    fn extend_block(&self, block: BlockId, size: u64) -> Result<()> {
        let (host, books) = (self.host(), self.books);
        let counters = &self.counters;
        self.with(block, |b| {
            let old = b.size;
            if size <= old {
                return Err(tensormem::GrowthError::NotAnExtension {
                    block: block.0,
                    committed: old,
                    size,
                }
                .into());
            }
            b.size = size;
            // The host makes the range usable with one `mprotect` and counts it a hole; CUDA
            // makes no call (the range is reserved), and the hole is where no unit lies.
            if host && books {
                b.mark(old, size - old, granularity(), true);
                counters.mapped(1, 0);
            }
            Ok(())
        })
    }

    fn decommit_range(&self, block: BlockId, offset: u64, size: u64) -> Result<()> {
        if !self.books {
            return Ok(());
        }
        if self.host() {
            return self.host_holes(block, Some(offset), None, size);
        }
        let counters = &self.counters;
        self.with(block, |b| {
            let units = b.units_in(offset, size)?;
            for (o, _) in &units {
                b.units.remove(o);
            }
            let n = units.len() as u64;
            counters.release_n(units.iter().map(|u| u.1).sum(), n);
            counters.mapped(0, n);
            Ok(())
        })
    }

    fn commit_range(&self, block: BlockId, offset: u64, size: u64) -> Result<()> {
        if !self.books {
            return Ok(());
        }
        if self.host() {
            return self.host_holes(block, None, Some(offset), size);
        }
        let counters = &self.counters;
        self.with(block, |b| {
            if !b.units_in(offset, size)?.is_empty() || offset + size > b.size {
                return Err(tensormem::GrowthError::NotAHole {
                    call: "commit_range",
                    offset,
                    size,
                }
                .into());
            }
            b.units.insert(offset, size);
            counters.reserve_n(size, 1);
            counters.mapped(1, 0);
            Ok(())
        })
    }

    fn remap_range(&self, block: BlockId, from: u64, to: u64, size: u64) -> Result<()> {
        if !self.books {
            return Ok(());
        }
        if self.host() {
            return self.host_holes(block, Some(from), Some(to), size);
        }
        let counters = &self.counters;
        self.with(block, |b| {
            let units = b.units_in(from, size)?;
            let whole = units.iter().map(|u| u.1).sum::<u64>() == size;
            if !whole {
                return Err(tensormem::GrowthError::NotBacked {
                    call: "the source of remap_range",
                    offset: from,
                    size,
                }
                .into());
            }
            if !b.units_in(to, size)?.is_empty() || to + size > b.size {
                return Err(tensormem::GrowthError::NotAHole {
                    call: "the target of remap_range",
                    offset: to,
                    size,
                }
                .into());
            }
            for (o, n) in &units {
                b.units.remove(o);
                b.units.insert(to + (o - from), *n);
            }
            // Each unit is unmapped and mapped at its new place, creating nothing.
            let n = units.len() as u64;
            counters.mapped(n, n);
            Ok(())
        })
    }
}
