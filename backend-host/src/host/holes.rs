//! Holes in the host's blocks that grow in place ([`Growable::decommit_range`],
//! [`Growable::commit_range`], [`Growable::remap_range`]).
//!
//! A decommitted range is given back with `madvise(MADV_DONTNEED)`: the pages return to the
//! kernel at once, and the range stays mapped read-write, so a direct caller that touches it
//! anyway reads zeros and faults fresh pages in, never unmapped memory. Committing needs no
//! system call (pages come back on first touch); a remap is a decommit of `from`, since host
//! memory has no physical pages to move. What the backend tracks is the accounting:
//! [`HostConfig::device_memory`](super::HostConfig::device_memory) and
//! [`HostBackend::block_bytes`] count committed bytes, holes excluded.

#[cfg(unix)]
use std::collections::BTreeMap;
#[cfg(unix)]
use std::sync::atomic::Ordering;

use super::HostBackend;
#[cfg(unix)]
use super::lock;
use crate::backend::BlockId;
#[cfg(unix)]
use crate::backend::MemoryKind;
use crate::{Error, Result};

#[cfg(doc)]
use crate::backend::Growable;

/// Disjoint decommitted byte ranges of one reservation, by start.
#[cfg(unix)]
#[derive(Debug, Default)]
pub(super) struct Decommitted(BTreeMap<u64, u64>);

#[cfg(unix)]
impl Decommitted {
    /// Removes `[a, b)` from the set; returns the bytes that were in it.
    pub(super) fn remove(&mut self, a: u64, b: u64) -> u64 {
        let mut removed = 0;
        let overlapping: Vec<(u64, u64)> = self
            .0
            .range(..b)
            .rev()
            .take_while(|(_, end)| **end > a)
            .map(|(s, e)| (*s, *e))
            .collect();
        for (s, e) in overlapping {
            self.0.remove(&s);
            removed += e.min(b) - s.max(a);
            if s < a {
                self.0.insert(s, a);
            }
            if e > b {
                self.0.insert(b, e);
            }
        }
        removed
    }

    /// Adds `[a, b)` to the set, merging neighbours; returns the bytes that were not in it.
    pub(super) fn add(&mut self, a: u64, b: u64) -> u64 {
        let had = self.remove(a, b);
        let mut start = a;
        let mut end = b;
        if let Some((&s, &e)) = self.0.range(..a).next_back()
            && e == a
        {
            self.0.remove(&s);
            start = s;
        }
        if let Some(e) = self.0.remove(&b) {
            end = e;
        }
        self.0.insert(start, end);
        (b - a) - had
    }

    /// Bytes in the set.
    pub(super) fn bytes(&self) -> u64 {
        self.0.iter().map(|(s, e)| e - s).sum()
    }
}

#[cfg(unix)]
fn madvise_err(e: std::io::Error) -> Error {
    Error::Backend {
        backend: super::NAME,
        api: "madvise",
        code: e.raw_os_error().unwrap_or(0).into(),
        message: e.to_string(),
    }
}

#[cfg(not(unix))]
fn unsupported(call: &str) -> Error {
    Error::Unsupported {
        backend: super::NAME,
        what: format!("holes in blocks that grow in place ({call}; not Unix)"),
    }
}

/// Applies `f` to the reservation of `block` after checking `[offset, offset + size)` lies in
/// its committed size (a direct caller's bounds check; the front checks the rest).
#[cfg(unix)]
fn with_reservation<T>(
    host: &HostBackend,
    block: BlockId,
    ranges: &[(u64, u64)],
    f: impl FnOnce(&mut super::memory::Reservation, MemoryKind) -> Result<T>,
) -> Result<T> {
    let blocks = lock(&host.blocks);
    let entry = blocks.get(block)?;
    for &(offset, size) in ranges {
        if offset.checked_add(size).is_none_or(|end| end > entry.size) {
            return Err(Error::OutOfBounds {
                what: "committed size of the reserved block",
                offset,
                size,
                limit: entry.size,
            });
        }
    }
    let mem = entry.native.clone();
    let mut mem = lock(&mem);
    f(mem.reservation(block, "holes in")?, entry.kind)
}

/// Gives the pages of `[offset, offset + size)` back.
#[cfg(unix)]
pub(super) fn decommit(host: &HostBackend, block: BlockId, offset: u64, size: u64) -> Result<()> {
    with_reservation(host, block, &[(offset, size)], |r, kind| {
        r.discard(offset as usize, size as usize)
            .map_err(madvise_err)?;
        let added = r.holes.add(offset, offset + size);
        host.decommitted_of(kind)
            .fetch_add(added, Ordering::Relaxed);
        Ok(())
    })
}

/// Counts `[offset, offset + size)` as committed again, within the device memory limit.
#[cfg(unix)]
pub(super) fn commit(host: &HostBackend, block: BlockId, offset: u64, size: u64) -> Result<()> {
    let held = host.device_bytes(&lock(&host.blocks));
    with_reservation(host, block, &[(offset, size)], |r, kind| {
        if host.on_device(kind) {
            host.check_device_memory(held, size, "committing a hole")?;
        }
        let back = r.holes.remove(offset, offset + size);
        host.decommitted_of(kind).fetch_sub(back, Ordering::Relaxed);
        Ok(())
    })
}

/// Gives the pages of `from` back and counts `to` as committed: host memory has no pages to
/// move, so the committed bytes stay the same.
#[cfg(unix)]
pub(super) fn remap(
    host: &HostBackend,
    block: BlockId,
    from: u64,
    to: u64,
    size: u64,
) -> Result<()> {
    with_reservation(host, block, &[(from, size), (to, size)], |r, kind| {
        r.discard(from as usize, size as usize)
            .map_err(madvise_err)?;
        let added = r.holes.add(from, from + size);
        let back = r.holes.remove(to, to + size);
        let decommitted = host.decommitted_of(kind);
        decommitted.fetch_add(added, Ordering::Relaxed);
        decommitted.fetch_sub(back, Ordering::Relaxed);
        Ok(())
    })
}

#[cfg(not(unix))]
pub(super) fn decommit(_: &HostBackend, _: BlockId, _: u64, _: u64) -> Result<()> {
    Err(unsupported("decommit_range"))
}

#[cfg(not(unix))]
pub(super) fn commit(_: &HostBackend, _: BlockId, _: u64, _: u64) -> Result<()> {
    Err(unsupported("commit_range"))
}

#[cfg(not(unix))]
pub(super) fn remap(_: &HostBackend, _: BlockId, _: u64, _: u64, _: u64) -> Result<()> {
    Err(unsupported("remap_range"))
}

#[cfg(test)]
mod tests;
