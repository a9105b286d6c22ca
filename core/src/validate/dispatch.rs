//! The front's dispatch of ops over operands held in segments or larger than one binding: the op
//! is cut into parts ([`split`](super::split)), every part is validated, then all are issued in
//! order. Separate from the [`Backend`] impl because it is an API of the front's own, above the
//! one-dispatch call every backend has.

use crate::Result;
use crate::backend::{Backend, BlockRange, Ticket};
use crate::ops::Op;

use super::{Validated, rules, split};

impl Validated {
    /// Enqueues `op` over operands each given as its segments in order (a tensor split across
    /// blocks, see [`Tensor`](crate::Tensor)), as dispatches that each bind within one segment
    /// and within `max_binding_size` (`split::split_segments`). Operands of one segment each
    /// take [`Backend::dispatch`]. Every part is validated before any is issued; the last part's
    /// ticket covers them all.
    ///
    /// # Errors
    /// As [`Backend::dispatch`]; [`Error::SegmentedOperand`] when the op cannot be cut so that
    /// each part binds within one segment of every operand; [`Error::Overlap`] for an output
    /// segment overlapping another operand's.
    ///
    /// [`Error::SegmentedOperand`]: crate::Error::SegmentedOperand
    /// [`Error::Overlap`]: crate::Error::Overlap
    pub fn dispatch_segments(&self, op: &Op, operands: &[&[BlockRange]]) -> Result<Ticket> {
        if operands.iter().all(|s| s.len() == 1) {
            let bindings: Vec<BlockRange> =
                operands.iter().flat_map(|s| s.iter().copied()).collect();
            return self.dispatch(op, &bindings);
        }
        self.check_alive()?;
        let caps = self.capabilities();
        let parts = split::split_segments(op, operands, caps.max_binding_size, caps.binding_align)?;
        let inputs = op.signature()?.inputs.len();
        rules::outputs_disjoint(op, inputs, operands.len(), |i| operands[i])?;
        self.issue_parts(&parts)
    }

    /// Validates every part, then issues them in order; the last ticket covers them all
    /// (tickets complete in order).
    pub(super) fn issue_parts(&self, parts: &[split::Part]) -> Result<Ticket> {
        let caps = self.capabilities();
        {
            let st = self.lock();
            for (part, ranges) in parts {
                rules::bindings(&st.blocks, caps, part, ranges, caps.max_binding_size)?;
            }
        }
        let mut last = Ticket::DONE;
        for (part, ranges) in parts {
            last = self.observe(self.backend.dispatch(part, ranges))?;
            self.issued(last, ranges);
        }
        Ok(last)
    }
}
