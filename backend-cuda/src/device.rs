//! The [`Backend`] implementation: block allocation and free, host access to pinned blocks,
//! copies and fills on the stream, and op dispatch. The device facts read at startup (`info`) and
//! the stream-ordered memory pool (`mem_pool`) are its submodules.

use std::ptr;
use std::sync::Mutex;

use cudarc::driver::{result, sys};
use tensormem_contract::backend::{BlockDesc, BlockRange};
use tensormem_contract::{
    Backend, BlockId, Capabilities, Error, Growable, Managed, ManagedMemory, MemoryKind, Op, Peer,
    PeerCopy, PeerRanges, Residence, Result, Ticket,
};

use crate::blocks::{Block, Memory, alloc_pinned, free_memory, pinned_api, release_all};
use crate::conv::{Placement, check_range, map_memory_kind, to_usize};
use crate::error::{BACKEND, map_alloc_err, map_driver_err};
use crate::launch::{plan_call, plan_fill_zero};
use crate::staging::{RingAlloc, reserve_or_poll};
use crate::timeline::lock;
use crate::{CudaBackend, DeviceAlloc, LiveBlock};

mod info;
mod mem_pool;

pub(crate) use info::DeviceInfo;
pub(crate) use mem_pool::MemPool;

/// The pinned ring `write_queued` copies through (`staging.rs`).
#[derive(Debug)]
pub(crate) struct QueuedUploads {
    ring: Mutex<RingAlloc>,
    /// Unified address of the pinned buffer (its host pointer).
    base: u64,
    /// The pinned buffer, freed by the backend's drop.
    memory: Mutex<Memory>,
}

impl QueuedUploads {
    /// A ring of `capacity` bytes of pinned, write-combined host memory (the CPU only writes it),
    /// on NUMA `node` when given (then registered, not write-combined: see `numa.rs`).
    ///
    /// # Errors
    /// A mapped allocation error.
    pub(crate) fn new(capacity: u64, node: Option<u32>) -> Result<Self> {
        let memory = alloc_pinned(
            to_usize(capacity, "queued-write ring")?,
            sys::CU_MEMHOSTALLOC_WRITECOMBINED,
            node,
        )
        .map_err(|e| map_alloc_err(pinned_api(node), e, MemoryKind::Upload, capacity, 0, None))?;
        let base = match &memory {
            Memory::Pinned(p) => p.addr(),
            _ => 0,
        };
        Ok(QueuedUploads {
            ring: Mutex::new(RingAlloc::new(capacity)),
            base,
            memory: Mutex::new(memory),
        })
    }

    /// Frees the buffer. Called once, by the backend's drop, with the stream idle.
    fn release(&self, stream: sys::CUstream) {
        // SAFETY: the stream is idle, so no copy reads the buffer, and it is not used again.
        let _ = unsafe { free_memory(&mut lock(&self.memory), stream) };
    }
}

impl CudaBackend {
    /// The checks of a copy on either stream that keep a direct caller safe: equal non-zero
    /// sizes, no overlap within one block.
    pub(crate) fn check_copy(&self, src: BlockRange, dst: BlockRange) -> Result<()> {
        if src.size != dst.size {
            return Err(Error::SizeMismatch {
                what: "copy source vs destination".into(),
                expected: src.size,
                actual: dst.size,
            });
        }
        if src.size == 0 {
            return Err(Error::ZeroSize { what: "copy" });
        }
        if src.block == dst.block
            && src.offset < dst.offset + dst.size
            && dst.offset < src.offset + src.size
        {
            return Err(Error::Overlap {
                what: "cuda: copy source and destination".into(),
                block: src.block.0,
                first_offset: src.offset,
                first_size: src.size,
                second_offset: dst.offset,
                second_size: dst.size,
            });
        }
        Ok(())
    }

    /// Resolves a range to its unified address after checking it lies inside its block.
    pub(crate) fn resolve(&self, range: BlockRange) -> Result<(u64, Placement)> {
        let blocks = lock(&self.blocks);
        let block = blocks.get(range.block)?;
        check_range(range.offset, range.size, block.size())?;
        let placement = match block.memory {
            Memory::Pinned(_) => map_memory_kind(block.kind),
            Memory::Managed { .. } => Placement::Managed,
            _ => Placement::Device,
        };
        Ok((block.device_addr() + range.offset, placement))
    }

    /// The unified address of `range` (for the application's own kernels or libraries).
    ///
    /// # Errors
    /// [`Error::UnknownBlock`] for a block that is not live, [`Error::OutOfBounds`].
    pub fn device_addr(&self, range: BlockRange) -> Result<u64> {
        self.resolve(range).map(|(addr, _)| addr)
    }

    /// Every live block with its kind, size and label: what a leak report lists.
    pub fn live_blocks(&self) -> Vec<LiveBlock> {
        let mut out: Vec<LiveBlock> = lock(&self.blocks)
            .iter()
            .map(|(id, b)| LiveBlock {
                id,
                kind: b.kind,
                size: b.size(),
                label: b.label.clone(),
            })
            .collect();
        out.sort_by_key(|b| b.id);
        out
    }

    /// Returns memory cached by the stream-ordered pool above `keep` bytes to the device.
    /// A no-op with [`DeviceAlloc::MemAlloc`].
    ///
    /// # Errors
    /// A mapped driver error.
    pub fn trim_device_pool(&self, keep: u64) -> Result<()> {
        self.bind()?;
        match &self.pool {
            Some(pool) => pool.trim_to(to_usize(keep, "pool trim")?),
            None => Ok(()),
        }
    }

    fn alloc_device(&self, size: usize) -> std::result::Result<Memory, result::DriverError> {
        match (&self.pool, self.device_alloc) {
            (Some(pool), DeviceAlloc::StreamOrdered) => {
                // SAFETY: the pool is live; the memory is valid for work enqueued on the stream
                // after this call, which is the only way the backend uses it.
                let ptr = unsafe {
                    result::mem_pool::alloc_async(pool.pool, size, self.stream().cu_stream())
                }?;
                // The copy stream must be ordered after this before it touches the memory.
                self.stream_allocs
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(Memory::Device { ptr, pool: true })
            }
            _ => {
                // SAFETY: plain device allocation; the context is current.
                let ptr = unsafe { result::malloc_sync(size) }?;
                Ok(Memory::Device { ptr, pool: false })
            }
        }
    }

    fn enqueue_copy(&self, src: u64, dst: u64, size: u64) -> Result<Ticket> {
        let bytes = to_usize(size, "copy")?;
        let stream = self.stream().cu_stream();
        self.timeline.submit(|| {
            // SAFETY: both ranges were checked inside live blocks; unified addressing makes
            // pinned host pointers valid here; the ranges do not overlap (checked by the caller).
            unsafe { sys::cuMemcpyAsync(dst, src, bytes, stream) }
                .result()
                .map_err(|e| map_driver_err("cuMemcpyAsync", e))
        })
    }
}

impl Backend for CudaBackend {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    fn alloc_block(&self, desc: &BlockDesc<'_>) -> Result<BlockId> {
        debug_assert!(
            Error::check_block_size(desc.size, self.caps.max_block_size).is_ok(),
            "cuda: block of {} bytes (the front refuses zero and > max_block_size)",
            desc.size
        );
        let size = to_usize(desc.size, "block")?;
        self.bind()?;
        let (api, memory) = match map_memory_kind(desc.kind) {
            Placement::Device => (
                match self.device_alloc {
                    DeviceAlloc::MemAlloc => "cuMemAlloc",
                    DeviceAlloc::StreamOrdered => "cuMemAllocFromPoolAsync",
                },
                self.alloc_device(size),
            ),
            Placement::PinnedHost { flags } => {
                let node = self.caps.host_placement.bound_node();
                (pinned_api(node), alloc_pinned(size, flags, node))
            }
            Placement::Managed => {
                crate::managed::check_supported(self.managed)?;
                let reserved = lock(&self.blocks).bytes_of(MemoryKind::Managed);
                let memory = crate::managed::alloc(desc.size, self.ctx.cu_device(), reserved);
                let memory = self.timeline.health().remember_loss(memory)?;
                return Ok(lock(&self.blocks).insert(
                    desc.kind,
                    desc.size,
                    Block::new(desc.kind, desc.size, memory, desc.label),
                ));
            }
        };
        let mut blocks = lock(&self.blocks);
        let memory = self.timeline.health().remember_loss(memory.map_err(|e| {
            map_alloc_err(
                api,
                e,
                desc.kind,
                desc.size,
                blocks.bytes_of(desc.kind),
                self.caps.budget,
            )
        }))?;
        Ok(blocks.insert(
            desc.kind,
            desc.size,
            Block::new(desc.kind, desc.size, memory, desc.label),
        ))
    }

    fn free_block(&self, block: BlockId) -> Result<()> {
        let mut removed = lock(&self.blocks).remove(block)?;
        self.bind()?;
        // SAFETY: the contract guarantees no in-flight work uses the block; it left the table, so
        // nothing can name it again.
        let freed = unsafe { free_memory(&mut removed.memory, self.stream().cu_stream()) };
        self.timeline.health().remember_loss(freed)
    }

    fn extensions(&self) -> tensormem_contract::Extensions<'_> {
        tensormem_contract::Extensions {
            growable: self.vmm_growth().map(|_| self as &dyn Growable),
            transfer_lanes: Some(self),
            managed: self.managed.supported().then_some(self as &dyn Managed),
            peer: Some(self),
        }
    }

    fn write_mapped(&self, block: BlockId, offset: u64, data: &[u8]) -> Result<()> {
        let blocks = lock(&self.blocks);
        let b = blocks.get(block)?;
        let ptr = host_ptr(b, "write_mapped")?;
        check_range(offset, data.len() as u64, b.size())?;
        let offset = to_usize(offset, "write_mapped")?;
        // SAFETY: `offset + data.len()` is inside the pinned allocation (checked above); the
        // caller guarantees no in-flight work touches the range; `data` cannot overlap pinned
        // memory the backend owns exclusively.
        unsafe { ptr::copy_nonoverlapping(data.as_ptr(), ptr.as_ptr().add(offset), data.len()) };
        Ok(())
    }

    fn read_mapped(&self, block: BlockId, offset: u64, out: &mut [u8]) -> Result<()> {
        let blocks = lock(&self.blocks);
        let b = blocks.get(block)?;
        let ptr = host_ptr(b, "read_mapped")?;
        check_range(offset, out.len() as u64, b.size())?;
        let offset = to_usize(offset, "read_mapped")?;
        // SAFETY: as in write_mapped, reading instead of writing.
        unsafe { ptr::copy_nonoverlapping(ptr.as_ptr().add(offset), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    fn write_queued(&self, dst: BlockRange, data: &[u8]) -> Result<Option<Ticket>> {
        if data.is_empty() {
            return Err(Error::ZeroSize { what: "upload" });
        }
        if data.len() as u64 != dst.size {
            return Err(Error::SizeMismatch {
                what: "write_queued data vs destination range".into(),
                expected: dst.size,
                actual: data.len() as u64,
            });
        }
        self.bind()?;
        let (addr, placement) = self.resolve(dst)?;
        let Some(up) = self.uploads.as_ref().filter(|_| !placement.host_visible()) else {
            // Pinned destinations are written with write_mapped; without a ring, no queued path.
            return Ok(None);
        };
        let len = data.len() as u64;
        let reserved = reserve_or_poll(&up.ring, len, self.timeline.known_completed(), || {
            self.timeline.completed()
        })?;
        let Some(res) = reserved else {
            // Full (or too large): the pools stage through an Upload block instead.
            return Ok(None);
        };
        let src = up.base + res.offset;
        // SAFETY: `res` reserves `len` bytes of the pinned ring for this call alone, and no
        // earlier copy still reads them (their tickets completed).
        unsafe { ptr::copy_nonoverlapping(data.as_ptr(), src as *mut u8, data.len()) };
        let stream = self.stream().cu_stream();
        let submitted = self.timeline.submit(|| {
            // SAFETY: the range is inside a live device block; the source is pinned memory the
            // ring keeps reserved until this copy's ticket completes, so the DMA is truly async.
            unsafe { sys::cuMemcpyHtoDAsync_v2(addr, src as *const _, data.len(), stream) }
                .result()
                .map_err(|e| map_driver_err("cuMemcpyHtoDAsync", e))
        });
        lock(&up.ring).finish(res.id, submitted.as_ref().ok().copied());
        submitted.map(Some)
    }

    fn copy(&self, src: BlockRange, dst: BlockRange) -> Result<Ticket> {
        self.check_copy(src, dst)?;
        self.bind()?;
        let (s, _) = self.resolve(src)?;
        let (d, _) = self.resolve(dst)?;
        self.enqueue_copy(s, d, src.size)
    }

    fn fill_zero(&self, range: BlockRange) -> Result<Ticket> {
        if range.size == 0 {
            return Err(Error::ZeroSize { what: "fill" });
        }
        self.bind()?;
        let (addr, placement) = self.resolve(range)?;
        match placement {
            Placement::Device => {
                let bytes = to_usize(range.size, "fill")?;
                let stream = self.stream().cu_stream();
                self.timeline.submit(|| {
                    // SAFETY: the range is inside a live device block.
                    unsafe { result::memset_d8_async(addr, 0, bytes, stream) }
                        .map_err(|e| map_driver_err("cuMemsetD8Async", e))
                })
            }
            Placement::PinnedHost { .. } | Placement::Managed => {
                let call = plan_fill_zero(addr, range.size);
                self.timeline
                    .submit(|| self.kernels.launch(self.stream(), &call))
            }
        }
    }

    fn dispatch(&self, op: &Op, bindings: &[BlockRange]) -> Result<Ticket> {
        // Invalid parameters are an error even on a direct call; binding sizes are the front's.
        op.signature()?;
        let sizes: Vec<u64> = bindings.iter().map(|b| b.size).collect();
        debug_assert!(
            op.check_binding_sizes(&sizes).is_ok()
                && bindings
                    .iter()
                    .all(|b| b.offset.is_multiple_of(self.caps.binding_align)),
            "cuda: {} bindings {bindings:?} (the front refuses them)",
            op.name()
        );
        self.bind()?;
        let addrs = bindings
            .iter()
            .map(|r| self.resolve(*r).map(|(a, _)| a))
            .collect::<Result<Vec<_>>>()?;
        let call = plan_call(op, &addrs)?;
        self.timeline
            .submit(|| self.kernels.launch(self.stream(), &call))
    }

    fn flush(&self) -> Result<Ticket> {
        self.bind()?;
        self.timeline.flush()
    }

    fn completed(&self) -> Result<Ticket> {
        self.bind()?;
        self.timeline.completed()
    }

    /// CUDA has no default limit (`None` waits forever): set one per call or through
    /// `RuntimeConfig::wait_timeout`.
    fn wait_timeout(&self, ticket: Ticket, timeout: Option<std::time::Duration>) -> Result<()> {
        self.bind()?;
        self.timeline.wait(ticket, timeout)
    }
}

impl Managed for CudaBackend {
    fn managed_memory(&self) -> ManagedMemory {
        self.managed
    }

    fn prefetch(&self, range: BlockRange, to: Residence) -> Result<Ticket> {
        crate::managed::check_supported(self.managed)?;
        self.bind()?;
        let (addr, placement) = self.resolve(range)?;
        if placement != Placement::Managed {
            return Err(Error::WrongMemoryKind {
                role: "range of a prefetch",
                block: range.block.0,
                kind: "unmanaged",
                allowed: "managed memory",
            });
        }
        let bytes = to_usize(range.size, "prefetch")?;
        let (device, stream) = (self.ctx.cu_device(), self.stream().cu_stream());
        self.timeline.submit(|| {
            // SAFETY: the range was checked inside a live managed block.
            unsafe { crate::managed::prefetch(addr, bytes, to, device, stream) }
        })
    }
}

impl Peer for CudaBackend {
    fn copy_to_peer(&self, peer: &dyn Backend, ranges: PeerRanges) -> Result<Option<PeerCopy>> {
        self.copy_to_peer_cuda(peer, ranges)
    }
}

fn host_ptr(block: &Block, what: &str) -> Result<std::ptr::NonNull<u8>> {
    block.host_ptr().ok_or_else(|| Error::Unsupported {
        backend: BACKEND,
        what: format!(
            "{what} on a {} block: CUDA device memory is not host-visible; stage through an \
             Upload or Readback block",
            block.kind.name()
        ),
    })
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        // Finish in-flight work, then free what the caller left allocated (the core pools report
        // leaks; the backend only returns the memory to the driver). The context is made current
        // with the raw call and every step runs whatever the previous one returned: cudarc's
        // `bind_to_thread` fails (once) on an error stored earlier, and returning then would
        // leak every block and the upload ring.
        // SAFETY: the context is alive (`self.ctx` holds it) until the fields drop after this.
        let _ = unsafe { sys::cuCtxSetCurrent(self.ctx.cu_ctx()) };
        // SAFETY: synchronising the live copy stream: no copy reads a block freed below.
        let _ = unsafe { sys::cuStreamSynchronize(self.transfer.stream().cu_stream()) };
        let stream = self.stream().cu_stream();
        // SAFETY: synchronising a live stream.
        let _ = unsafe { sys::cuStreamSynchronize(stream) };
        // SAFETY: the stream is idle and the table is drained, so nothing uses the blocks.
        let _ = release_all(&mut lock(&self.blocks), |m| unsafe {
            free_memory(m, stream)
        });
        if let Some(up) = &self.uploads {
            up.release(stream);
        }
        // Stream-ordered frees complete before the pool is destroyed.
        // SAFETY: as above.
        let _ = unsafe { sys::cuStreamSynchronize(stream) };
    }
}
