//! The standard op set on Vulkan: [`tensormem_contract::Op`] → the WGSL kernel core defines for it
//! ([`tensormem_contract::ops::wgsl::kernel`]), checked against the op's signature, as a [`KernelSpec`].
//!
//! Binding ABI (from `ops::wgsl`): operand `i` at `@binding(i)`, the 16-word uniform block at
//! `@binding(n)`. Every operand is declared `read_write` in WGSL (a wgpu constraint), but the
//! hazard tracker is told the truth from the signature: inputs are read, outputs written, so two
//! ops sharing an input need no barrier. Bindings arrive validated by the runtime's
//! `Validated` front: each exactly its operand's size, outputs disjoint from every other
//! binding (debug builds assert it).

use tensormem_contract::ops::wgsl;
use tensormem_contract::{BlockRange, Op, Result};

use crate::kernels::{KernelSpec, StorageSlot};

/// A standard op's kernel and the ranges to bind.
pub(crate) struct OpKernel {
    kernel: wgsl::Kernel,
    storage: Vec<StorageSlot>,
    /// The ranges to bind, one per operand.
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

/// `op`'s kernel over `bindings`.
///
/// # Errors
/// The errors of [`wgsl::kernel`] (invalid parameters).
pub(crate) fn kernel_for(op: &Op, bindings: &[BlockRange]) -> Result<OpKernel> {
    // Invalid parameters are an error even on a direct call; binding sizes are the front's.
    let first_output = op.signature()?.inputs.len();
    let sizes: Vec<u64> = bindings.iter().map(|b| b.size).collect();
    debug_assert!(
        op.check_binding_sizes(&sizes).is_ok(),
        "vulkan: {} bindings {sizes:?} (the front refuses them)",
        op.name()
    );
    let ranges = bindings.to_vec();
    let kernel = wgsl::kernel(op)?;
    if kernel.bindings != ranges.len() {
        // Only a direct caller (no front) gets here; binding fewer buffers than the shader
        // declares would be undefined behaviour in the driver.
        return Err(op.binding_count(kernel.bindings, ranges.len()));
    }
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
