//! The front's rules, each written once as a pure function over the block table and the
//! capabilities: one rule, one typed error.

use crate::backend::{BlockEntry, BlockRange, BlockTable, Capabilities, InPlaceGrowth, MemoryKind};
use crate::ops::Op;
use crate::{Error, Result};

/// `value` is a multiple of `align` (`align` 0 or 1: no rule).
///
/// # Errors
/// [`Error::Misaligned`].
pub(crate) fn aligned(
    what: &'static str,
    value: u64,
    align: u64,
    align_name: &'static str,
) -> Result<()> {
    if align <= 1 || value.is_multiple_of(align) {
        Ok(())
    } else {
        Err(Error::Misaligned {
            what,
            value,
            align,
            align_name,
        })
    }
}

/// A range for copies, fills and mapped access: non-empty, inside a live block, offset and size
/// multiples of `copy_align`.
///
/// # Errors
/// [`Error::ZeroSize`], [`Error::UnknownBlock`], [`Error::OutOfBounds`], [`Error::Misaligned`].
pub(crate) fn transfer_range<'t>(
    blocks: &'t BlockTable<()>,
    caps: &Capabilities,
    r: BlockRange,
    what: &'static str,
) -> Result<&'t BlockEntry<()>> {
    if r.size == 0 {
        return Err(Error::ZeroSize { what });
    }
    let entry = blocks.range(r, what)?;
    aligned(what, r.offset, caps.copy_align, "copy_align")?;
    aligned(what, r.size, caps.copy_align, "copy_align")?;
    Ok(entry)
}

/// Host access (`write_mapped`, `read_mapped`) needs a host-visible block: `Upload` and
/// `Readback` always, `DeviceLocal` only where the device says so.
///
/// # Errors
/// [`Error::NotHostVisible`].
pub(crate) fn host_visible(
    entry: &BlockEntry<()>,
    caps: &Capabilities,
    r: BlockRange,
) -> Result<()> {
    if entry.kind == MemoryKind::DeviceLocal && !caps.device_host_visible {
        return Err(Error::NotHostVisible {
            backend: caps.backend,
            block: r.block.0,
            kind: entry.kind.name(),
        });
    }
    Ok(())
}

/// The roles a block takes by kind: kernels bind device or managed memory (and upload memory where
/// the device memory is host-visible, see [`bindings`]); prefetches take managed memory; copies
/// read device, managed or upload memory and write device, managed or readback memory (the
/// directions staging uses). wgpu enforces this
/// through buffer usages; the front enforces it everywhere so every backend agrees.
///
/// # Errors
/// [`Error::WrongMemoryKind`].
pub(crate) fn kind_for(entry: &BlockEntry<()>, r: &BlockRange, role: &'static str) -> Result<()> {
    let (ok, allowed) = match role {
        "copy source" => (
            entry.kind != MemoryKind::Readback,
            "device-local, managed or upload",
        ),
        "copy destination" | "fill target" | "queued write target" => (
            entry.kind != MemoryKind::Upload,
            "device-local, managed or readback",
        ),
        "prefetch" => (entry.kind == MemoryKind::Managed, "managed"),
        _ => (
            matches!(entry.kind, MemoryKind::DeviceLocal | MemoryKind::Managed),
            "device-local or managed",
        ),
    };
    if ok {
        Ok(())
    } else {
        Err(Error::WrongMemoryKind {
            role,
            block: r.block.0,
            kind: entry.kind.name(),
            allowed,
        })
    }
}

/// The kind rule of one end of a copy ([`kind_for`] with the role "copy source" or "copy
/// destination"), widened to every host-visible kind where the backend copies in both directions
/// ([`Capabilities::host_visible_copies`](crate::Capabilities::host_visible_copies)).
///
/// # Errors
/// [`Error::WrongMemoryKind`].
pub(crate) fn copy_end(
    entry: &BlockEntry<()>,
    r: &BlockRange,
    role: &'static str,
    host_visible_copies: bool,
) -> Result<()> {
    if host_visible_copies {
        return Ok(());
    }
    kind_for(entry, r, role)
}

/// Whether two ranges share at least one byte.
pub(crate) fn overlaps(a: &BlockRange, b: &BlockRange) -> bool {
    a.block == b.block
        && a.offset < b.offset.saturating_add(b.size)
        && b.offset < a.offset.saturating_add(a.size)
}

/// Two ranges that must not share bytes.
///
/// # Errors
/// [`Error::Overlap`] naming `what()`.
pub(crate) fn disjoint(
    a: &BlockRange,
    b: &BlockRange,
    what: impl FnOnce() -> String,
) -> Result<()> {
    if overlaps(a, b) {
        return Err(Error::Overlap {
            what: what(),
            block: a.block.0,
            first_offset: a.offset,
            first_size: a.size,
            second_offset: b.offset,
            second_size: b.size,
        });
    }
    Ok(())
}

/// The binding rules of a dispatch, in this order: the op's parameters (checked shape
/// arithmetic), the binding count, and per binding a live block, bounds, the offset on
/// `binding_align`, the exact operand size and `limit` (the device's `max_binding_size`, or no
/// limit for an op the front splits into parts that each keep it); then no output shares a byte
/// with any other binding (inputs may alias each other: they are only read). Returns the number
/// of inputs.
///
/// # Errors
/// As [`Op::check_binding_sizes`], plus [`Error::UnknownBlock`], [`Error::OutOfBounds`],
/// [`Error::WrongMemoryKind`], [`Error::Misaligned`], [`Error::TooLarge`] and
/// [`Error::Overlap`].
pub(crate) fn bindings(
    blocks: &BlockTable<()>,
    caps: &Capabilities,
    op: &Op,
    bindings: &[BlockRange],
    limit: u64,
) -> Result<usize> {
    let sizes: Vec<u64> = bindings.iter().map(|b| b.size).collect();
    let sig = op.check_binding_sizes(&sizes)?;
    for b in bindings {
        let entry = blocks.range(*b, "binding")?;
        // Unified memory: an upload block is the same memory as a device-local one, and kernels
        // bind it in place (offloaded tensors that need not move; see `crate::offload`).
        if !(caps.device_host_visible && entry.kind == MemoryKind::Upload) {
            kind_for(entry, b, "kernel binding")?;
        }
        aligned(
            "binding offset",
            b.offset,
            caps.binding_align,
            "binding_align",
        )?;
        if b.size > limit {
            return Err(Error::TooLarge {
                what: "binding",
                requested: b.size,
                limit: caps.max_binding_size,
                limit_name: "max_binding_size",
            });
        }
    }
    let inputs = sig.inputs.len();
    outputs_disjoint(op, inputs, bindings.len(), |i| {
        std::slice::from_ref(&bindings[i])
    })?;
    Ok(inputs)
}

/// No output operand shares a byte with any other operand (inputs may alias each other: they are
/// only read). Operand `i` is `operand(i)`: one binding, or a tensor's segments; the first
/// `inputs` operands are the inputs.
///
/// # Errors
/// [`Error::Overlap`] naming the op, the output and the other operand.
pub(crate) fn outputs_disjoint<'a>(
    op: &Op,
    inputs: usize,
    count: usize,
    operand: impl Fn(usize) -> &'a [BlockRange],
) -> Result<()> {
    let names = op.operand_names();
    for o in inputs..count {
        for i in (0..count).filter(|&i| i != o) {
            for (a, b) in operand(o)
                .iter()
                .flat_map(|a| operand(i).iter().map(move |b| (a, b)))
            {
                disjoint(a, b, || {
                    format!(
                        "{} output `{}` and operand `{}`",
                        op.name(),
                        names.get(o).copied().unwrap_or("?"),
                        names.get(i).copied().unwrap_or("?"),
                    )
                })?;
            }
        }
    }
    Ok(())
}

/// The backend grows blocks in place: `offered` is what the front offers.
///
/// # Errors
/// [`Error::Unsupported`].
pub(crate) fn growth(offered: Option<InPlaceGrowth>, caps: &Capabilities) -> Result<InPlaceGrowth> {
    offered.ok_or_else(|| Error::Unsupported {
        backend: caps.backend,
        what: "blocks that grow in place".into(),
    })
}
