//! Tensors bound to kernels: [`Runtime::dispatch`] enqueues a standard op over [`Tensor`]s and
//! records every tensor's use with the op's ticket, so nothing is left for the caller to
//! remember: a kernel on a freed tensor's range never overwrites its successor
//! (`runtime::tests::kernels_on_freed_tensors_never_overwrite_their_successor`).

use crate::backend::{BlockRange, Ticket};
use crate::ops::Op;
use crate::runtime::segments::segment_ranges;
use crate::runtime::{Runtime, Tensor};
use crate::trace::{Access, EventKind};
use crate::{Error, Result};

impl Runtime {
    /// Enqueues `op` with `inputs` (in the op's binding order) and `outputs` bound to it, and
    /// records each tensor's use: a tensor freed while the op is queued is reused only after the
    /// op's ticket completes. The op's parameters, each tensor's dtype, and the binding rules of
    /// the validating front (exact sizes, alignment, no output overlapping another binding) are
    /// checked before anything is enqueued.
    ///
    /// Work dispatched on raw ranges through [`Runtime::backend`] is tracked too (by range, in
    /// the front); this is the typed form.
    ///
    /// # Errors
    /// [`Error::BindingCount`], [`Error::DTypeMismatch`] for a tensor whose dtype is not the
    /// operand's, [`Error::BindingSize`] for a wrong element count, [`Error::Overlap`] when an
    /// output is also bound elsewhere, [`Error::StaleHandle`] for a freed tensor,
    /// [`Error::MixedDevices`] for operands on different devices, [`Error::WrongDevice`] for
    /// operands of another device than this runtime's, [`Error::SegmentedOperand`] for a tensor
    /// held in several segments that the op cannot be cut along, the op's parameter errors,
    /// backend errors.
    ///
    /// An op over a tensor held in [segments](Tensor::segments) runs as several dispatches, each
    /// binding within one segment of every operand (the front's split).
    pub fn dispatch(&self, op: &Op, inputs: &[&Tensor], outputs: &[&Tensor]) -> Result<Ticket> {
        self.front().check_alive()?;
        let sig = op.check_binding_count(inputs.len(), outputs.len())?;
        let tensors: Vec<&Tensor> = inputs.iter().chain(outputs).copied().collect();
        let names = op.operand_names();
        check_same_device(op.name(), &names, &tensors)?;
        if let Some(t) = tensors.first() {
            self.check_device(t, || op.name().to_string())?;
        }
        for (i, (t, operand)) in tensors.iter().zip(sig.operands()).enumerate() {
            if t.dtype() != operand.dtype {
                return Err(Error::DTypeMismatch {
                    what: format!(
                        "{} operand `{}` (binding {i})",
                        op.name(),
                        names.get(i).copied().unwrap_or("?")
                    ),
                    expected: operand.dtype,
                    actual: t.dtype(),
                });
            }
        }
        let pool = self.device_pool();
        // Every operand's ranges stay leased until its use is recorded (dropped at return).
        let mut leases = Vec::new();
        let operands = tensors
            .iter()
            .map(|t| segment_ranges(pool.as_ref(), t.placement(), t.size(), &mut leases))
            .collect::<Result<Vec<_>>>()?;
        let operands: Vec<&[BlockRange]> = operands.iter().map(Vec::as_slice).collect();
        let ticket = self.front().dispatch_segments(op, &operands)?;
        let tracer = self.tracer();
        for (i, t) in tensors.iter().enumerate() {
            for (a, _, size) in t.pieces() {
                pool.mark_used(a.handle, ticket)?;
                if let Some(tracer) = &tracer {
                    tracer.record(EventKind::Use {
                        id: self.trace_id(a.handle),
                        op: op.name().to_string(),
                        access: if i < inputs.len() {
                            Access::Read
                        } else {
                            Access::Write
                        },
                        size,
                    });
                }
            }
        }
        Ok(ticket)
    }
}

/// Refuses operands on different devices with [`Error::MixedDevices`] naming the op and the first
/// two operands that disagree: the runtime never copies between devices behind the caller's back.
pub(crate) fn check_same_device(op: &str, names: &[&str], tensors: &[&Tensor]) -> Result<()> {
    let Some(first) = tensors.first() else {
        return Ok(());
    };
    match tensors.iter().position(|t| t.device() != first.device()) {
        None => Ok(()),
        Some(i) => Err(Error::MixedDevices {
            op: op.to_string(),
            first_operand: names.first().copied().unwrap_or("0").to_string(),
            first: first.device(),
            second_operand: names
                .get(i)
                .map_or_else(|| i.to_string(), |n| (*n).to_string()),
            second: tensors[i].device(),
        }),
    }
}
