//! Guard margins (debug): a known byte pattern before and after each allocation, written when the
//! allocation is handed out and checked when it is freed, so a kernel or copy that writes past
//! either end is reported with the allocation's label instead of silently corrupting a neighbour.
//!
//! Layout of a guarded region: `[front margin][data][back margin]`; the front margin is the back
//! margin rounded up to the allocation's alignment. Both are written and read through mapping, so
//! the pool only checks memory that is host-visible (see `PoolConfig::guard_bytes`).

use crate::Result;
use crate::backend::{Backend, BlockId};

/// The byte guard margins are filled with (MSVC's "no man's land" value).
pub const GUARD_PATTERN: u8 = 0xFD;

/// Fills the margins of `region` (offset and size in the block, in bytes) around the data at `[front, front + size)`.
///
/// # Errors
/// Backend errors from `write_mapped`.
pub(crate) fn fill(
    backend: &dyn Backend,
    block: BlockId,
    region: (u64, u64),
    front: u64,
    size: u64,
) -> Result<()> {
    let (offset, total) = region;
    let back = total - front - size;
    let pattern = vec![GUARD_PATTERN; front.max(back) as usize];
    if front > 0 {
        backend.write_mapped(block, offset, &pattern[..front as usize])?;
    }
    if back > 0 {
        backend.write_mapped(block, offset + front + size, &pattern[..back as usize])?;
    }
    Ok(())
}

/// Checks the margins of `region` (offset and size in the block, in bytes). `Ok(Some(description))`
/// says how far the damage reaches (the back margin is checked first).
///
/// # Errors
/// Backend errors from `read_mapped`.
pub(crate) fn check(
    backend: &dyn Backend,
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
        backend.read_mapped(block, offset + front + size, b)?;
        if let Some(i) = b.iter().rposition(|&x| x != GUARD_PATTERN) {
            return Ok(Some(format!(
                "guard bytes overwritten up to {} byte(s) past the end",
                i + 1
            )));
        }
    }
    if front > 0 {
        let b = &mut buf[..front as usize];
        backend.read_mapped(block, offset, b)?;
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
