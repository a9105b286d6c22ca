//! Host writes and reads of a budgeted model's tensors between runs: into a tensor's host copy
//! (a lookup's table), its host allocation, or its fixed place in the arena (mapped on unified
//! memory, staged otherwise). Each waits for the model's last run, blocking or awaiting as its
//! [`Waiting`] mode says, so both work in a browser.

use crate::backend::{BlockRange, Ticket, Waiting};
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
    pub(in crate::runtime::model) async fn write(
        &mut self,
        waiting: Waiting,
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
        waiting.ticket(backend.as_ref(), self.last).await?;
        if let Some(a) = self.host[root] {
            let range = self.upload.resolve(a.handle)?;
            waiting
                .write_mapped(backend.as_ref(), range.block, range.offset, &padded)
                .await?;
            return Ok(Ticket::DONE);
        }
        let dst = self.fixed_range(root)?;
        if self.unified {
            waiting
                .write_mapped(backend.as_ref(), dst.block, dst.offset, &padded)
                .await?;
            Ok(Ticket::DONE)
        } else {
            let t = rt.staging().upload_with(waiting, dst, &padded).await?;
            self.last = self.last.max(t);
            Ok(t)
        }
    }

    /// Reads a tensor the host reads (an output, a weight, an input; or a view of one, `offset`
    /// bytes into its root) into `out`, after the last run.
    ///
    /// # Errors
    /// As [`Offloaded::write`].
    pub(in crate::runtime::model) async fn read(
        &self,
        waiting: Waiting,
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
        waiting.ticket(backend.as_ref(), self.last).await?;
        if let Some(a) = self.host[root] {
            let range = self.upload.resolve(a.handle)?;
            waiting
                .read_mapped(backend.as_ref(), range.block, range.offset, &mut buf)
                .await?;
        } else {
            let src = self.fixed_range(root)?;
            if self.unified {
                waiting
                    .read_mapped(backend.as_ref(), src.block, src.offset, &mut buf)
                    .await?;
            } else {
                rt.staging().download_with(waiting, src, &mut buf).await?;
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
