//! Guard margins (debug): a known byte pattern before and after each allocation, written when the
//! allocation is handed out and checked when it is freed, so a kernel or copy that writes past
//! either end is reported with the allocation's label instead of silently corrupting a neighbour.
//!
//! Layout of a guarded region: `[front margin][data][back margin]`; the front margin is the back
//! margin rounded up to the allocation's alignment. Host-visible memory is written and read through
//! mapping; device memory the host cannot map goes through a temporary `Upload` block and a device
//! copy (fill) and a device copy into a temporary `Readback` block (check). The staged path costs a
//! block allocation and a wait per margin: guard margins are a debug tool.

use crate::Result;
use crate::backend::{Backend, BlockDesc, BlockId, BlockRange, MemoryKind, Ticket};

/// Blocks until `ticket` completes: margins are written and judged synchronously, so guard margins
/// are a native debug tool. On `wasm32` (no blocking waits) [`crate::ArenaPool::new`] refuses them
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
fn write(
    backend: &dyn Backend,
    block: BlockId,
    offset: u64,
    bytes: &[u8],
    mapped: bool,
) -> Result<()> {
    if mapped {
        return backend.write_mapped(block, offset, bytes);
    }
    let size = bytes.len() as u64;
    let staging = backend.alloc_block(&BlockDesc {
        kind: MemoryKind::Upload,
        size,
        label: "tensormem guard margin (upload)",
    })?;
    let result = backend.write_mapped(staging, 0, bytes).and_then(|()| {
        let t = backend.copy(
            BlockRange {
                block: staging,
                offset: 0,
                size,
            },
            BlockRange {
                block,
                offset,
                size,
            },
        )?;
        wait_for(backend, t)
    });
    backend.free_block(staging)?;
    result
}

/// Reads `out.len()` bytes at `offset` of `block`: mapped when `mapped`, else through a device
/// copy into a temporary readback block. Device work enqueued earlier is ordered before the copy.
fn read(
    backend: &dyn Backend,
    block: BlockId,
    offset: u64,
    out: &mut [u8],
    mapped: bool,
) -> Result<()> {
    if mapped {
        return backend.read_mapped(block, offset, out);
    }
    let size = out.len() as u64;
    let staging = backend.alloc_block(&BlockDesc {
        kind: MemoryKind::Readback,
        size,
        label: "tensormem guard margin (readback)",
    })?;
    let result = backend
        .copy(
            BlockRange {
                block,
                offset,
                size,
            },
            BlockRange {
                block: staging,
                offset: 0,
                size,
            },
        )
        .and_then(|t| wait_for(backend, t))
        .and_then(|()| backend.read_mapped(staging, 0, out));
    backend.free_block(staging)?;
    result
}

/// The byte guard margins are filled with (MSVC's "no man's land" value).
pub const GUARD_PATTERN: u8 = 0xFD;

/// Fills the margins of `region` (offset and size in the block, in bytes) around the data at
/// `[front, front + size)`; `mapped` says whether the block is host-visible.
///
/// # Errors
/// Backend errors from the mapped or staged writes.
pub(crate) fn fill(
    backend: &dyn Backend,
    block: BlockId,
    region: (u64, u64),
    front: u64,
    size: u64,
    mapped: bool,
) -> Result<()> {
    let (offset, total) = region;
    let back = total - front - size;
    let pattern = vec![GUARD_PATTERN; front.max(back) as usize];
    if front > 0 {
        write(backend, block, offset, &pattern[..front as usize], mapped)?;
    }
    if back > 0 {
        write(
            backend,
            block,
            offset + front + size,
            &pattern[..back as usize],
            mapped,
        )?;
    }
    Ok(())
}

/// Checks the margins of `region` (offset and size in the block, in bytes). `Ok(Some(description))`
/// says how far the damage reaches (the back margin is checked first); `mapped` says whether the
/// block is host-visible.
///
/// # Errors
/// Backend errors from the mapped or staged reads.
pub(crate) fn check(
    backend: &dyn Backend,
    block: BlockId,
    region: (u64, u64),
    front: u64,
    size: u64,
    mapped: bool,
) -> Result<Option<String>> {
    let (offset, total) = region;
    let back = total - front - size;
    let mut buf = vec![0u8; front.max(back) as usize];
    if back > 0 {
        let b = &mut buf[..back as usize];
        read(backend, block, offset + front + size, b, mapped)?;
        if let Some(i) = b.iter().rposition(|&x| x != GUARD_PATTERN) {
            return Ok(Some(format!(
                "guard bytes overwritten up to {} byte(s) past the end",
                i + 1
            )));
        }
    }
    if front > 0 {
        let b = &mut buf[..front as usize];
        read(backend, block, offset, b, mapped)?;
        if let Some(i) = b.iter().position(|&x| x != GUARD_PATTERN) {
            return Ok(Some(format!(
                "guard bytes overwritten from {} byte(s) before the start",
                front as usize - i
            )));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests;
