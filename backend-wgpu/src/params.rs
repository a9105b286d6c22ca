//! Kernel parameters from a pooled ring of uniform buffers, not a buffer per dispatch.
//!
//! Every dispatch binds a small uniform block (the op's 16 parameter words). Creating a buffer per
//! dispatch costs a driver allocation each time and escapes the pools; here a few 64 KiB uniform
//! buffers are carved into slots by core's [`RingAllocator`] (the staging belt's FIFO ring), each
//! slot retired with its dispatch's ticket and reused once that ticket completes. When every slot
//! is in flight the ring grows by one buffer: nothing ever waits, which matters in a browser.
//!
//! A slot is written with `queue.write_buffer` *without* submitting the open batch first (unlike
//! other queued writes, see `timeline`): the write lands before the batch's earlier commands, but
//! no earlier command reads the slot (its previous user has completed), so order does not matter.

use tensormem_contract::{Error, Result};
use tensormem_plan::suballoc::RingAllocator;

/// Bytes per ring buffer: 256 slots at the usual 256-byte uniform offset alignment.
const RING_BUFFER_SIZE: u64 = 64 << 10;

/// The ring buffers and their sub-allocators.
#[derive(Debug)]
pub(crate) struct ParamRing {
    /// Slot alignment: `min_uniform_buffer_offset_alignment`.
    align: u64,
    /// Uniform buffers, each with the ring of its slots.
    buffers: Vec<(wgpu::Buffer, RingAllocator)>,
    /// The buffer that takes the next slot.
    current: usize,
}

impl ParamRing {
    /// An empty ring for `device` (buffers are created on first use).
    pub(crate) fn new(device: &wgpu::Device) -> Self {
        ParamRing {
            align: u64::from(device.limits().min_uniform_buffer_offset_alignment).max(16),
            buffers: Vec::new(),
            current: 0,
        }
    }

    /// Number of uniform buffers the ring holds (for tests and reports).
    pub(crate) fn buffers(&self) -> usize {
        self.buffers.len()
    }

    /// Writes `bytes` into a free slot, retired with `ticket` (the dispatch's), after reclaiming
    /// the slots whose tickets are at or below `completed`. Returns the slot's buffer and offset.
    ///
    /// # Errors
    /// [`Error::TooLarge`] for parameters larger than a ring buffer (a bug in the kernel table).
    pub(crate) fn push(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        bytes: &[u8],
        ticket: u64,
        completed: u64,
    ) -> Result<(wgpu::Buffer, u64)> {
        let size = bytes.len() as u64;
        if size == 0 || size > RING_BUFFER_SIZE {
            return Err(Error::TooLarge {
                what: "kernel parameter block",
                requested: size,
                limit: RING_BUFFER_SIZE,
                limit_name: "parameter ring buffer size",
            });
        }
        let n = self.buffers.len();
        for k in 0..n {
            let i = (self.current + k) % n;
            let (buffer, ring) = &mut self.buffers[i];
            ring.reclaim(completed);
            if let Some(region) = ring.allocate(size, self.align)? {
                let offset = region.offset;
                ring.retire(region, ticket)?;
                self.current = i;
                queue.write_buffer(buffer, offset, bytes);
                return Ok((buffer.clone(), offset));
            }
        }
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("tensormem kernel parameter ring"),
            size: RING_BUFFER_SIZE,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.buffers
            .push((buffer, RingAllocator::new(RING_BUFFER_SIZE)?));
        self.current = n;
        self.push(device, queue, bytes, ticket, completed)
    }
}
