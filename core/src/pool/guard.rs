//! Guard margins (debug), as an adaptor ([`Guarded`]) around any pool: a known byte pattern before
//! and after each allocation, written when the allocation is handed out and checked when it is
//! freed, so a kernel or copy that writes past either end is reported with the allocation's label
//! instead of silently corrupting a neighbour (VMA's corruption detection).
//!
//! Layout of a guarded region: `[front margin][data][back margin]`; the front margin is the back
//! margin rounded up to the allocation's alignment. Host-visible memory is written and read through
//! mapping; device memory the host cannot map goes through a temporary `Upload` block and a device
//! copy (fill) and a device copy into a temporary `Readback` block (check). The staged path costs a
//! block allocation and a wait per margin: guard margins are a debug tool.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::align::align_up;
use crate::backend::{Backend, BlockDesc, BlockId, BlockRange, MemoryKind, Ticket};
use crate::pool::device_pool::{self, Allocation, DevicePool};
use crate::pool::slots::Handle;
use crate::{Error, Result};

/// How margins are written and read: the backend, whether the blocks can be mapped, and where
/// temporary staging blocks wait to be returned when they cannot be returned at once.
struct Io<'a> {
    backend: &'a dyn Backend,
    mapped: bool,
    orphans: &'a Mutex<Vec<(BlockId, Ticket)>>,
}

impl Io<'_> {
    /// Returns a temporary block once `after` (the copy that used it; `DONE` when it finished or
    /// none was queued) completes. A block still in use (its wait failed) or one the backend
    /// refuses is kept for a later try: never freed under in-flight work, never leaked, and never
    /// failing a margin operation that already succeeded.
    fn free_staging(&self, block: BlockId, after: Ticket) {
        if after != Ticket::DONE || self.backend.free_block(block).is_err() {
            self.orphans
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((block, after));
        }
    }

    /// Runs `f` on a temporary block of `kind` (`Upload` or `Readback`) and `size`, then returns
    /// the block after the ticket `f` leaves in its second argument (`DONE` unless a queued copy
    /// was not waited for).
    fn with_staging(
        &self,
        kind: MemoryKind,
        size: u64,
        f: impl FnOnce(BlockId, &mut Ticket) -> Result<()>,
    ) -> Result<()> {
        let label = if kind == MemoryKind::Upload {
            "tensormem guard margin (upload)"
        } else {
            "tensormem guard margin (readback)"
        };
        let staging = self.backend.alloc_block(&BlockDesc { kind, size, label })?;
        let mut queued = Ticket::DONE;
        let result = f(staging, &mut queued);
        self.free_staging(staging, queued);
        result
    }

    /// Copies `size` bytes from `src` to `dst` and waits for the copy; `queued` holds its ticket
    /// until the wait succeeds, then `DONE`.
    fn copy_waited(
        &self,
        (src, src_offset): (BlockId, u64),
        (dst, dst_offset): (BlockId, u64),
        size: u64,
        queued: &mut Ticket,
    ) -> Result<()> {
        let range = |block, offset| BlockRange {
            block,
            offset,
            size,
        };
        *queued = self
            .backend
            .copy(range(src, src_offset), range(dst, dst_offset))?;
        wait_for(self.backend, *queued)?;
        *queued = Ticket::DONE;
        Ok(())
    }

    /// Returns the kept blocks whose work has completed. Polls, never waits.
    fn retry_orphans(&self) {
        let mut o = self.orphans.lock().unwrap_or_else(PoisonError::into_inner);
        if o.is_empty() {
            return;
        }
        let Ok(done) = self.backend.completed() else {
            return;
        };
        o.retain(|(b, t)| *t > done || self.backend.free_block(*b).is_err());
    }
}

/// Blocks until `ticket` completes: margins are written and judged synchronously, so guard margins
/// are a native debug tool. On `wasm32` (no blocking waits) [`Guarded::new`] refuses them
/// with [`unsupported`], so this is never reached there.
pub(crate) fn wait_for(backend: &dyn Backend, ticket: Ticket) -> Result<()> {
    #[cfg(not(target_arch = "wasm32"))]
    return backend.wait(ticket);
    #[cfg(target_arch = "wasm32")]
    {
        let _ = (backend, ticket);
        Err(unsupported())
    }
}

/// The error for guard margins where waits cannot block (`wasm32`).
pub(crate) fn unsupported() -> crate::Error {
    crate::Error::Unsupported {
        backend: "core",
        what: "guard margins on wasm32 (their checks wait synchronously; a browser cannot block)"
            .into(),
    }
}

/// Writes `bytes` at `offset` of `block`: mapped when `mapped`, else through a temporary upload
/// block and a device copy (waited for, so the temporary block can go).
fn write(io: &Io<'_>, block: BlockId, offset: u64, bytes: &[u8]) -> Result<()> {
    if io.mapped {
        return io.backend.write_mapped(block, offset, bytes);
    }
    let size = bytes.len() as u64;
    io.with_staging(MemoryKind::Upload, size, |staging, queued| {
        io.backend.write_mapped(staging, 0, bytes)?;
        io.copy_waited((staging, 0), (block, offset), size, queued)
    })
}

/// Reads `out.len()` bytes at `offset` of `block`: mapped when `mapped`, else through a device
/// copy into a temporary readback block. Device work enqueued earlier is ordered before the copy.
fn read(io: &Io<'_>, block: BlockId, offset: u64, out: &mut [u8]) -> Result<()> {
    if io.mapped {
        return io.backend.read_mapped(block, offset, out);
    }
    let size = out.len() as u64;
    io.with_staging(MemoryKind::Readback, size, |staging, queued| {
        io.copy_waited((block, offset), (staging, 0), size, queued)?;
        io.backend.read_mapped(staging, 0, out)
    })
}

/// The byte guard margins are filled with (MSVC's "no man's land" value).
pub const GUARD_PATTERN: u8 = 0xFD;

/// Fills the margins of `region` (offset and size in the block, in bytes) around the data at
/// `[front, front + size)`.
///
/// # Errors
/// Backend errors from the mapped or staged writes.
fn fill(io: &Io<'_>, block: BlockId, region: (u64, u64), front: u64, size: u64) -> Result<()> {
    let (offset, total) = region;
    let back = total - front - size;
    let pattern = vec![GUARD_PATTERN; front.max(back) as usize];
    if front > 0 {
        write(io, block, offset, &pattern[..front as usize])?;
    }
    if back > 0 {
        write(io, block, offset + front + size, &pattern[..back as usize])?;
    }
    Ok(())
}

/// Checks the margins of `region` (offset and size in the block, in bytes). `Ok(Some(description))`
/// says how far the damage reaches (the back margin is checked first).
///
/// # Errors
/// Backend errors from the mapped or staged reads.
fn check(
    io: &Io<'_>,
    block: BlockId,
    region: (u64, u64),
    front: u64,
    size: u64,
) -> Result<Option<String>> {
    let (offset, total) = region;
    let back = total - front - size;
    let mut buf = vec![0u8; front.max(back) as usize];
    if back > 0 {
        let b = &mut buf[..back as usize];
        read(io, block, offset + front + size, b)?;
        if let Some(i) = b.iter().rposition(|&x| x != GUARD_PATTERN) {
            return Ok(Some(format!(
                "guard bytes overwritten up to {} byte(s) past the end",
                i + 1
            )));
        }
    }
    if front > 0 {
        let b = &mut buf[..front as usize];
        read(io, block, offset, b)?;
        if let Some(i) = b.iter().position(|&x| x != GUARD_PATTERN) {
            return Ok(Some(format!(
                "guard bytes overwritten from {} byte(s) before the start",
                front as usize - i
            )));
        }
    }
    Ok(None)
}

/// Where the data sits in a guarded region: after `front` margin bytes, `size` bytes long.
#[derive(Copy, Clone, Debug)]
struct Layout {
    front: u64,
    size: u64,
}

/// Guard margins of `margin` bytes around every allocation of the pool below. See the module doc.
///
/// Margins count in the inner pool's `in_use`. A free waits for the allocation's last use (the
/// margins can only be judged once the work that used it is done): a debug tool.
pub struct Guarded<P> {
    inner: P,
    backend: Arc<dyn Backend>,
    /// Back margin in bytes (the requested margin rounded to the copy alignment).
    back: u64,
    copy_align: u64,
    /// Alignment the inner pool gives at least: the front margin keeps the data on it.
    base_align: u64,
    /// Whether the blocks can be mapped (else margins are staged through copies).
    mapped: bool,
    layouts: Mutex<HashMap<Handle, Layout>>,
    /// Temporary staging blocks not yet returned, with the ticket they wait for (retried, by
    /// polling, on every call).
    orphans: Mutex<Vec<(BlockId, Ticket)>>,
}

impl<P: DevicePool> Guarded<P> {
    /// Guards `inner`, whose blocks are of `kind` on `backend`, with `margin` bytes each side.
    ///
    /// # Errors
    /// [`Error::ZeroSize`] for a zero margin (leave the adaptor out instead);
    /// [`Error::Unsupported`] on `wasm32`, where the margin checks cannot wait.
    pub fn new(inner: P, backend: Arc<dyn Backend>, kind: MemoryKind, margin: u64) -> Result<Self> {
        if cfg!(target_arch = "wasm32") {
            return Err(unsupported());
        }
        let caps = backend.capabilities();
        let copy_align = caps.copy_align.max(1).next_power_of_two();
        let back = align_up(margin, copy_align)
            .filter(|b| *b > 0)
            .ok_or(Error::ZeroSize {
                what: "guard margin",
            })?;
        let base_align = match kind {
            MemoryKind::DeviceLocal | MemoryKind::Managed => {
                caps.binding_align.max(1).next_power_of_two()
            }
            _ => 1,
        }
        .max(copy_align);
        let mapped = kind != MemoryKind::DeviceLocal || caps.device_host_visible;
        Ok(Guarded {
            inner,
            backend,
            back,
            copy_align,
            base_align,
            mapped,
            layouts: Mutex::new(HashMap::new()),
            orphans: Mutex::new(Vec::new()),
        })
    }

    fn io(&self) -> Io<'_> {
        let io = Io {
            backend: self.backend.as_ref(),
            mapped: self.mapped,
            orphans: &self.orphans,
        };
        if !self.mapped {
            io.retry_orphans();
        }
        io
    }

    /// Runs `margin_io` (a fill or a check). Staged margins need a temporary block from the
    /// backend: when the device is out of memory, the inner pool's empty blocks go back and it
    /// runs once more, so a margin never fails for memory the pool holds idle (a device pool
    /// whose blocks fill a device cap exactly, then empty, made the last frees fail).
    fn staged<T>(&self, margin_io: impl Fn(&Io<'_>) -> Result<T>) -> Result<T> {
        let r = margin_io(&self.io());
        if matches!(r, Err(Error::OutOfMemory(_)))
            && !self.mapped
            && self.inner.trim().is_ok_and(|n| n > 0)
        {
            return margin_io(&self.io());
        }
        r
    }

    fn layouts(&self) -> MutexGuard<'_, HashMap<Handle, Layout>> {
        self.layouts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn layout(&self, handle: Handle) -> Option<Layout> {
        self.layouts().get(&handle).copied()
    }
}

/// Allocating, freeing, cancelling and resolving change (the data sits between margins); the rest
/// passes through.
impl<P: DevicePool> device_pool::PoolAdaptor for Guarded<P> {
    type Inner = P;

    fn inner(&self) -> &P {
        &self.inner
    }

    fn allocate(&self, size: u64, align: u64, label: &str) -> Result<Allocation> {
        if size == 0 || align == 0 {
            // The inner pool reports the bad request.
            return self.inner.allocate(size, align, label);
        }
        let too_large = || Error::TooLarge {
            what: "allocation",
            requested: size,
            limit: u64::MAX,
            limit_name: "u64 byte count with guard margins",
        };
        let data = align_up(size, self.copy_align).ok_or_else(too_large)?;
        let front = align_up(self.back, align.max(self.base_align)).ok_or_else(too_large)?;
        let total = data
            .checked_add(front)
            .and_then(|t| t.checked_add(self.back))
            .ok_or_else(too_large)?;
        let a = self.inner.allocate(total, align, label)?;
        // Work the pools below queued on the region (a zero fill) must land before the margins
        // are written through mapping; staged writes are queue-ordered after it anyway.
        let pending = match self.inner.last_use(a.handle) {
            Ok(t) if self.mapped && t != Ticket::DONE => wait_for(self.backend.as_ref(), t),
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        };
        let filled = pending.and_then(|()| {
            self.staged(|io| fill(io, a.range.block, (a.range.offset, total), front, data))
        });
        if let Err(e) = filled {
            // Nothing was handed out: undo the carve (the conformance case
            // `a_failed_allocate_holds_nothing`).
            self.inner.cancel(a.handle)?;
            return Err(e);
        }
        self.layouts()
            .insert(a.handle, Layout { front, size: data });
        Ok(Allocation {
            handle: a.handle,
            range: BlockRange {
                block: a.range.block,
                offset: a.range.offset + front,
                size: data,
            },
        })
    }

    fn free_after(&self, handle: Handle, ticket: Ticket) -> Result<()> {
        let Some(layout) = self.layout(handle) else {
            // Not ours (stale, foreign, double free): the inner pool says which.
            return self.inner.free_after(handle, ticket);
        };
        // Everything that can fail comes before the free: on error the allocation stays live.
        let region = self.inner.resolve(handle)?;
        let label = self.inner.label(handle)?;
        wait_for(
            self.backend.as_ref(),
            ticket.max(self.inner.last_use(handle)?),
        )?;
        let damage = self.staged(|io| {
            check(
                io,
                region.block,
                (region.offset, region.size),
                layout.front,
                layout.size,
            )
        })?;
        self.inner.free_after(handle, ticket)?;
        self.layouts().remove(&handle);
        match damage {
            Some(what) => Err(Error::Corruption(format!(
                "{what} of allocation '{label}' ({} bytes) in the {} pool",
                layout.size,
                self.inner.name()
            ))),
            None => Ok(()),
        }
    }

    fn cancel(&self, handle: Handle) -> Result<()> {
        self.inner.cancel(handle)?;
        self.layouts().remove(&handle);
        Ok(())
    }

    fn resolve(&self, handle: Handle) -> Result<BlockRange> {
        let r = self.inner.resolve(handle)?;
        Ok(match self.layout(handle) {
            Some(l) => BlockRange {
                block: r.block,
                offset: r.offset + l.front,
                size: l.size,
            },
            None => r,
        })
    }

    fn check_invariants(&self) -> std::result::Result<(), String> {
        self.inner.check_invariants()?;
        let live = self.inner.live_allocations().len();
        let guarded = self.layouts().len();
        if guarded > live {
            return Err(format!(
                "{guarded} guard layouts for {live} live allocations"
            ));
        }
        Ok(())
    }
}

impl<P> Drop for Guarded<P> {
    fn drop(&mut self) {
        let orphans = self
            .orphans
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        // Blocks still waiting for a copy: let everything finish before returning them.
        if orphans.iter().any(|(_, t)| *t != Ticket::DONE)
            && let Ok(t) = self.backend.flush()
        {
            let _ = wait_for(self.backend.as_ref(), t);
        }
        for (b, _) in orphans.drain(..) {
            let _ = self.backend.free_block(b);
        }
    }
}

#[cfg(test)]
mod tests;
