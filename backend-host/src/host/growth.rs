//! The host backend's blocks that grow in place: reserve-and-commit of address space
//! ([`memory::Reservation`](super::memory)), behind its [`Growable`] implementation
//! ([`Growable::reserve_block`], [`Growable::resize_block`], [`Growable::extend_block`]; the hole
//! calls are in `holes`).
//!
//! The block table's size of a reserved block is its committed size, so ranges, copies and
//! [`HostBackend::block_bytes`] see exactly the memory that is usable, and
//! [`HostConfig::device_memory`] caps committed bytes, not address space.

#[cfg(unix)]
use std::sync::{Arc, Mutex};

#[cfg(unix)]
use super::lock;
use super::{HostBackend, HostConfig};
use crate::backend::{BlockDesc, BlockId, Growable, InPlaceGrowth};
use crate::{Error, Result};

/// What the host offers: page-granular growth of a block up to the largest block, on Unix when
/// [`HostConfig::in_place_growth`] is set.
pub(super) fn offered(config: &HostConfig) -> Option<InPlaceGrowth> {
    #[cfg(unix)]
    if config.in_place_growth {
        let granularity = super::memory::page_size();
        let max_reserve = config.max_block_size & !(granularity - 1);
        return (max_reserve > 0).then_some(InPlaceGrowth {
            granularity,
            max_reserve,
            holes: true,
            // `madvise` takes any page range.
            whole_units: false,
        });
    }
    let _ = config;
    None
}

/// Checks a committed size against the granularity and a limit, for a direct caller (the
/// validating front refuses the same with the same errors): committing past the reservation would
/// change other mappings of the process.
#[cfg(unix)]
fn check_size(
    growth: InPlaceGrowth,
    size: u64,
    limit: u64,
    limit_name: &'static str,
) -> Result<usize> {
    growth.check_committed(size, limit, limit_name)?;
    usize::try_from(size).map_err(|_| Error::TooLarge {
        what: "block",
        requested: size,
        limit: usize::MAX as u64,
        limit_name: "address space",
    })
}

fn unsupported() -> Error {
    Error::Unsupported {
        backend: super::NAME,
        what: "blocks that grow in place (disabled by HostConfig::in_place_growth, or not Unix)"
            .into(),
    }
}

#[cfg(unix)]
pub(super) fn reserve(host: &HostBackend, desc: &BlockDesc<'_>, reserve: u64) -> Result<BlockId> {
    let growth = offered(&host.config).ok_or_else(unsupported)?;
    let reserve_len = check_size(growth, reserve, growth.max_reserve, "max_reserve")?;
    let committed = check_size(growth, desc.size, reserve, "reservation")?;
    if reserve == 0 {
        return Err(Error::ZeroSize {
            what: "reservation",
        });
    }
    let mut blocks = lock(&host.blocks);
    if host.on_device(desc.kind) {
        host.check_device_memory(host.device_bytes(&blocks), desc.size, desc.label)?;
    }
    let mem = super::memory::Reservation::new(reserve_len, committed, host.bound_node())
        .map_err(|e| super::map_alloc_err(e, desc.label, desc.size, blocks.bytes()))?;
    let mem = super::memory::HostMemory::Reserved(mem);
    Ok(blocks.insert(desc.kind, desc.size, Arc::new(Mutex::new(mem))))
}

#[cfg(unix)]
pub(super) fn resize(host: &HostBackend, block: BlockId, size: u64) -> Result<u64> {
    set_size(host, block, size, true)
}

/// Extends a reserved block to `size` bytes without memory ([`Growable::extend_block`]): the
/// pages become usable (`mprotect`) but stay untouched, so none is resident, and the range is
/// counted as a hole until it is committed or remapped.
#[cfg(unix)]
pub(super) fn extend(host: &HostBackend, block: BlockId, size: u64) -> Result<()> {
    set_size(host, block, size, false).map(|_| ())
}

/// Makes `size` bytes of a reserved block usable: the pages added count as committed memory
/// when `commit` (a growth, within the device's memory), else as a hole (an extension, which
/// must grow); holes past a new end leave with it. Returns `size`.
#[cfg(unix)]
fn set_size(host: &HostBackend, block: BlockId, size: u64, commit: bool) -> Result<u64> {
    let growth = offered(&host.config).ok_or_else(unsupported)?;
    let mut blocks = lock(&host.blocks);
    let held = host.device_bytes(&blocks);
    let entry = blocks.get(block)?;
    let (old, kind) = (entry.size, entry.kind);
    let mem = entry.native.clone();
    let mut mem = lock(&mem);
    let r = mem.reservation(block, "resizing")?;
    let len = check_size(growth, size, r.reserved() as u64, "reservation")?;
    if !commit && size <= old {
        return Err(tensormem_contract::GrowthError::NotAnExtension {
            block: block.0,
            committed: old,
            size,
        }
        .into());
    }
    let added = size.saturating_sub(old);
    if commit && added > 0 && host.on_device(kind) {
        host.check_device_memory(held, added, "in-place growth")?;
    }
    r.resize(len)
        .map_err(|e| super::map_alloc_err(e, "in-place growth", added, held))?;
    let decommitted = host.decommitted_of(kind);
    let gone = r.holes.remove(size, old.max(size));
    decommitted.fetch_sub(gone, std::sync::atomic::Ordering::Relaxed);
    if !commit {
        let holes = r.holes.add(old, size);
        decommitted.fetch_add(holes, std::sync::atomic::Ordering::Relaxed);
    }
    drop(mem);
    blocks.resize(block, size)?;
    // Page-granular: always exactly the size asked.
    Ok(size)
}

#[cfg(not(unix))]
pub(super) fn extend(_: &HostBackend, _: BlockId, _: u64) -> Result<()> {
    Err(unsupported())
}

#[cfg(not(unix))]
pub(super) fn reserve(_: &HostBackend, _: &BlockDesc<'_>, _: u64) -> Result<BlockId> {
    Err(unsupported())
}

#[cfg(not(unix))]
pub(super) fn resize(_: &HostBackend, _: BlockId, _: u64) -> Result<u64> {
    Err(unsupported())
}

/// Reached through [`Extensions::growable`](tensormem_contract::Extensions::growable) on Unix where
/// [`HostConfig::in_place_growth`] is set; a direct call elsewhere reports
/// [`InPlaceGrowth::NONE`] and is refused.
impl Growable for HostBackend {
    fn in_place_growth(&self) -> InPlaceGrowth {
        offered(&self.config).unwrap_or(InPlaceGrowth::NONE)
    }

    fn reserve_block(&self, desc: &BlockDesc<'_>, bytes: u64) -> Result<BlockId> {
        self.check_alive()?;
        reserve(self, desc, bytes)
    }

    fn resize_block(&self, block: BlockId, size: u64) -> Result<u64> {
        self.check_alive()?;
        resize(self, block, size)
    }

    fn decommit_range(&self, block: BlockId, offset: u64, size: u64) -> Result<()> {
        self.check_alive()?;
        super::holes::decommit(self, block, offset, size)
    }

    fn commit_range(&self, block: BlockId, offset: u64, size: u64) -> Result<()> {
        self.check_alive()?;
        super::holes::commit(self, block, offset, size)
    }

    fn remap_range(&self, block: BlockId, from: u64, to: u64, size: u64) -> Result<()> {
        self.check_alive()?;
        super::holes::remap(self, block, from, to, size)
    }

    fn extend_block(&self, block: BlockId, size: u64) -> Result<()> {
        self.check_alive()?;
        extend(self, block, size)
    }
}

#[cfg(test)]
mod tests;
