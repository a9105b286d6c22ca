//! Host writes and reads of a budgeted model's tensors between runs: into a tensor's host copy
//! (a lookup's table), its host allocation, or its fixed place in the arena (mapped on unified
//! memory, staged otherwise). Each waits for the model's last run.

use crate::backend::{BlockRange, Ticket};
use crate::pool::DevicePool;
use crate::runtime::Runtime;
use crate::{Error, Result};

use super::Offloaded;

impl Offloaded {
    /// Writes a tensor the host sets (a weight or an input): into its host copy, else into its
    /// arena place (mapped on unified memory, staged otherwise), after the last run.
    ///
    /// # Errors
    /// [`GraphError::NoStorage`](crate::GraphError) for a tensor with no storage; transfer errors.
    pub(in crate::runtime::model) fn write(
        &mut self,
        rt: &Runtime,
        root: usize,
        data: &[u8],
    ) -> Result<Ticket> {
        let backend = rt.backend();
        if let Some(trace) = &self.trace {
            trace.host_io(root, data.len() as u64, true);
        }
        if self.keeps_copy.get(root) == Some(&true) {
            // Read at each run's enqueue, so no wait: in-flight work holds copies of it.
            self.host_copy[root] = data.to_vec();
            if self.host[root].is_none() && self.fixed_at[root].is_none() {
                return Ok(Ticket::DONE);
            }
        }
        let mut padded = data.to_vec();
        padded.resize(self.sizes[root] as usize, 0);
        wait_for(rt, self.last)?;
        if let Some(a) = self.host[root] {
            let range = self.upload.resolve(a.handle)?;
            backend.write_mapped(range.block, range.offset, &padded)?;
            return Ok(Ticket::DONE);
        }
        let dst = self.fixed_range(root)?;
        if self.unified {
            backend.write_mapped(dst.block, dst.offset, &padded)?;
            Ok(Ticket::DONE)
        } else {
            let t = stage_in(rt, dst, &padded)?;
            self.last = self.last.max(t);
            Ok(t)
        }
    }

    /// Reads a tensor the host reads (an output, a weight, an input; or a view of one, `offset`
    /// bytes into its root) into `out`, after the last run.
    ///
    /// # Errors
    /// As [`Offloaded::write`].
    pub(in crate::runtime::model) fn read(
        &self,
        rt: &Runtime,
        root: usize,
        offset: u64,
        out: &mut [u8],
    ) -> Result<()> {
        if let Some(trace) = &self.trace {
            trace.host_io(root, out.len() as u64, false);
        }
        let offset = offset as usize;
        if self.keeps_copy.get(root) == Some(&true) {
            let copy = self.host_copy[root].get(offset..).unwrap_or_default();
            let n = copy.len().min(out.len());
            out[..n].copy_from_slice(&copy[..n]);
            out[n..].fill(0);
            return Ok(());
        }
        let backend = rt.backend();
        let mut buf = vec![0u8; self.sizes[root] as usize];
        wait_for(rt, self.last)?;
        if let Some(a) = self.host[root] {
            let range = self.upload.resolve(a.handle)?;
            backend.read_mapped(range.block, range.offset, &mut buf)?;
        } else {
            let src = self.fixed_range(root)?;
            if self.unified {
                backend.read_mapped(src.block, src.offset, &mut buf)?;
            } else {
                stage_out(rt, src, &mut buf)?;
            }
        }
        let part = buf
            .get(offset..offset + out.len())
            .ok_or(Error::OutOfBounds {
                what: "read of a budgeted model's tensor",
                offset: offset as u64,
                size: out.len() as u64,
                limit: buf.len() as u64,
            })?;
        out.copy_from_slice(part);
        Ok(())
    }

    fn fixed_range(&self, root: usize) -> Result<BlockRange> {
        let offset = self.fixed_at[root].ok_or_else(|| {
            Error::from(crate::GraphError::NoStorage {
                tensor: root,
                scope: "between runs in this budgeted model",
                why: "an intermediate, or never used",
            })
        })?;
        self.arena_range(offset, self.sizes[root])
    }
}

/// The error for a device budget on `wasm32`: a budgeted run waits synchronously (a swap-in reads
/// back its copy-out), and a browser cannot block.
pub(super) fn unsupported() -> Error {
    Error::Unsupported {
        backend: "core",
        what: "budgeted compilation on wasm32 (its swap-ins wait synchronously; a browser cannot \
               block)"
            .into(),
    }
}

/// Blocks until `ticket` completes. On `wasm32` [`Runtime::compile_with`] refuses a budget, so
/// this is never reached there.
pub(super) fn wait_for(rt: &Runtime, ticket: Ticket) -> Result<()> {
    #[cfg(not(target_arch = "wasm32"))]
    return rt.backend().wait(ticket);
    #[cfg(target_arch = "wasm32")]
    {
        let _ = (rt, ticket);
        Err(unsupported())
    }
}

/// Uploads `data` into `dst` through the runtime's staging belt (native only, as [`wait_for`]).
pub(super) fn stage_in(rt: &Runtime, dst: BlockRange, data: &[u8]) -> Result<Ticket> {
    #[cfg(not(target_arch = "wasm32"))]
    return rt.staging().upload(dst, data);
    #[cfg(target_arch = "wasm32")]
    {
        let _ = (rt, dst, data);
        Err(unsupported())
    }
}

/// Downloads `src` into `out` through the runtime's staging belt (native only, as [`wait_for`]).
pub(super) fn stage_out(rt: &Runtime, src: BlockRange, out: &mut [u8]) -> Result<()> {
    #[cfg(not(target_arch = "wasm32"))]
    return rt.staging().download(src, out);
    #[cfg(target_arch = "wasm32")]
    {
        let _ = (rt, src, out);
        Err(unsupported())
    }
}
