//! The standard op set on Vulkan: [`tensormem::Op`] → the WGSL kernel core defines for it
//! (`tensormem::ops::wgsl`), checked against the op's signature, as a [`KernelSpec`].

use tensormem::{BlockRange, Error, Op, Result};

use crate::error::BACKEND;
use crate::kernels::KernelSpec;

/// A standard op's kernel, owned.
pub(crate) struct OpKernel {
    key: String,
    source: String,
    entry: String,
    storage: Vec<crate::kernels::StorageSlot>,
    params_binding: u32,
    params: [u32; 16],
    workgroups: [u32; 3],
}

impl OpKernel {
    /// The borrowed form the dispatcher takes.
    pub(crate) fn spec(&self) -> KernelSpec<'_> {
        KernelSpec {
            key: &self.key,
            source: &self.source,
            entry: &self.entry,
            storage: self.storage.clone(),
            params_binding: self.params_binding,
            params: self.params,
            workgroups: self.workgroups,
        }
    }
}

/// Checks `bindings` against `op`'s signature and returns its kernel.
///
/// # Errors
/// [`Error::InvalidArgument`] for a binding count or size that does not match the op.
pub(crate) fn kernel_for(op: &Op, bindings: &[BlockRange]) -> Result<OpKernel> {
    let sig = op.signature()?;
    let operands: Vec<_> = sig.inputs.iter().chain(&sig.outputs).collect();
    if operands.len() != bindings.len() {
        return Err(Error::invalid(format!(
            "{}: expects {} bindings ({} inputs, {} outputs), got {}",
            op.name(),
            operands.len(),
            sig.inputs.len(),
            sig.outputs.len(),
            bindings.len()
        )));
    }
    for (i, (o, b)) in operands.iter().zip(bindings).enumerate() {
        if b.size < o.size() {
            return Err(Error::invalid(format!(
                "{}: binding {i} has {} bytes, the operand needs {}",
                op.name(),
                b.size,
                o.size()
            )));
        }
    }
    Err(Error::Unsupported {
        backend: BACKEND,
        what: format!(
            "op {}: the WGSL kernels of core are not merged yet",
            op.name()
        ),
    })
}
