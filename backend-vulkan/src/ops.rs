//! The standard op set on Vulkan: [`tensormem::Op`] → the WGSL kernel core defines for it
//! ([`tensormem::ops::wgsl::kernel`]), checked against the op's signature, as a [`KernelSpec`].
//!
//! Binding ABI (from `ops::wgsl`): operand `i` at `@binding(i)`, the 16-word uniform block at
//! `@binding(n)`. Every operand is declared `read_write` in WGSL (a wgpu constraint), but the
//! hazard tracker is told the truth from the signature: inputs are read, outputs written, so two
//! ops sharing an input need no barrier. Each operand is bound with exactly its size (as the host
//! backend does), so a binding larger than the operand is accepted and its tail untouched.

use tensormem::ops::wgsl;
use tensormem::{BlockRange, Error, Op, Result};

use crate::kernels::{KernelSpec, StorageSlot};

/// A standard op's kernel and the ranges to bind (each trimmed to its operand's size).
pub(crate) struct OpKernel {
    kernel: wgsl::Kernel,
    storage: Vec<StorageSlot>,
    /// The ranges to bind, trimmed to the operands' sizes.
    pub ranges: Vec<BlockRange>,
}

impl OpKernel {
    /// The borrowed form the dispatcher takes.
    pub(crate) fn spec(&self) -> KernelSpec<'_> {
        KernelSpec {
            key: self.kernel.key,
            source: self.kernel.source,
            entry: self.kernel.entry_point,
            storage: self.storage.clone(),
            params_binding: self.kernel.bindings as u32,
            params: self.kernel.params,
            workgroups: self.kernel.workgroups,
        }
    }
}

/// Whether two ranges share bytes.
fn overlap(a: &BlockRange, b: &BlockRange) -> bool {
    a.block == b.block
        && a.offset < b.offset.saturating_add(b.size)
        && b.offset < a.offset.saturating_add(a.size)
}

/// Checks `bindings` against `op`'s signature and returns its kernel.
///
/// # Errors
/// [`Error::SizeMismatch`] for a wrong binding count or a binding smaller than its operand (as
/// the host backend), [`Error::InvalidArgument`] for an output that overlaps another operand,
/// and the errors of [`wgsl::kernel`].
pub(crate) fn kernel_for(op: &Op, bindings: &[BlockRange]) -> Result<OpKernel> {
    let sig = op.signature()?;
    let operands: Vec<_> = sig.inputs.iter().chain(&sig.outputs).collect();
    if operands.len() != bindings.len() {
        return Err(Error::SizeMismatch {
            what: format!("{} bindings ({})", op.name(), op.operand_names().join(", ")),
            expected: operands.len() as u64,
            actual: bindings.len() as u64,
        });
    }
    let names = op.operand_names();
    let mut ranges = Vec::with_capacity(bindings.len());
    for (i, (o, b)) in operands.iter().zip(bindings).enumerate() {
        if b.size < o.size() {
            return Err(Error::SizeMismatch {
                what: format!(
                    "{} operand `{}` (binding {i}, block {})",
                    op.name(),
                    names.get(i).copied().unwrap_or("?"),
                    b.block.0
                ),
                expected: o.size(),
                actual: b.size,
            });
        }
        ranges.push(BlockRange {
            size: o.size(),
            ..*b
        });
    }
    let first_output = sig.inputs.len();
    for (i, out) in ranges.iter().enumerate().skip(first_output) {
        if let Some(j) = (0..ranges.len()).find(|&j| j != i && overlap(out, &ranges[j])) {
            return Err(Error::invalid(format!(
                "{}: output binding {i} overlaps binding {j} in block {}",
                op.name(),
                out.block.0
            )));
        }
    }
    let kernel = wgsl::kernel(op)?;
    debug_assert_eq!(kernel.bindings, ranges.len());
    let storage = (0..ranges.len())
        .map(|i| StorageSlot {
            binding: i as u32,
            write: i >= first_output,
        })
        .collect();
    Ok(OpKernel {
        kernel,
        storage,
        ranges,
    })
}
