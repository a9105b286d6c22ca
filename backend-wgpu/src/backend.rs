//! `impl Backend for WgpuBackend`: argument checks, then the native calls.
//!
//! Every method first checks the device's health (lost device, uncaptured errors), then
//! validates everything wgpu would otherwise reject through its panicking error handler:
//! block ids, bounds, 4-byte alignment, usages, binding sizes. Only then does it touch wgpu.
//! The non-blocking completion methods live in `poll`.

use std::task::{Context, Poll};
#[cfg(not(target_arch = "wasm32"))]
use std::time::Duration;

use tensormem_contract::ops::Op;
use tensormem_contract::{
    Backend, BlockDesc, BlockId, BlockRange, Capabilities, Error, Managed, ManagedMemory,
    MappedAccess, MemoryKind, Result, Ticket,
};

use crate::WgpuBackend;
use crate::blocks::mapping;
use crate::blocks::{Block, MapState};
use crate::conv::{align_up, buffer_usages};
#[cfg(not(target_arch = "wasm32"))]
use crate::error::poll_wait;
use crate::error::{lock, map_poll_error};

mod access;

use access::check_aligned;

fn zero_copy(caps: &Capabilities) -> bool {
    caps.device_host_visible
}

impl Backend for WgpuBackend {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    fn alloc_block(&self, desc: &BlockDesc<'_>) -> Result<BlockId> {
        self.health.check()?;
        debug_assert!(
            desc.size > 0 && desc.size <= self.caps.max_block_size,
            "wgpu: block of {} bytes (the front refuses zero and > max_buffer_size)",
            desc.size
        );
        if desc.kind == MemoryKind::Managed && !zero_copy(&self.caps) {
            return Err(Error::Unsupported {
                backend: crate::error::BACKEND,
                what: "managed blocks on a device whose buffers are not mappable storage".into(),
            });
        }
        let size = align_up(desc.size, wgpu::COPY_BUFFER_ALIGNMENT).unwrap_or(desc.size);
        // Natively error scopes turn out-of-memory into a retryable error at this call. In a
        // browser popping a scope is a promise this synchronous call cannot await: the
        // uncaptured-error handler reports it on the next call instead.
        #[cfg(not(target_arch = "wasm32"))]
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        #[cfg(not(target_arch = "wasm32"))]
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(desc.label),
            size,
            usage: buffer_usages(desc.kind, zero_copy(&self.caps)),
            mapped_at_creation: false,
        });
        #[cfg(not(target_arch = "wasm32"))]
        {
            let invalid = pollster::block_on(validation.pop());
            let out_of_memory = pollster::block_on(oom.pop());
            if let Some(error) = out_of_memory.or(invalid) {
                return Err(crate::error::map_scope_error(
                    error,
                    "Device::create_buffer",
                    desc.size,
                ));
            }
        }
        Ok(lock(&self.state).blocks.insert(
            desc.kind,
            desc.size,
            Block::new(buffer, desc.kind, desc.size),
        ))
    }

    fn extensions(&self) -> tensormem_contract::Extensions<'_> {
        tensormem_contract::Extensions {
            managed: zero_copy(&self.caps).then_some(self as &dyn Managed),
            transfer_lanes: None,
            ..tensormem_contract::Extensions::default()
        }
    }

    fn free_block(&self, block: BlockId) -> Result<()> {
        let mut removed = lock(&self.state).blocks.remove(block)?;
        // Dropping the last handle frees the buffer once wgpu knows no submission uses it.
        removed.unmap();
        Ok(())
    }

    fn write_mapped(&self, block: BlockId, offset: u64, data: &[u8]) -> Result<()> {
        let Some(mut guard) = self.lock_mapped(block, offset, data.len(), "write_mapped")? else {
            return Ok(());
        };
        let state = &mut *guard;
        let b = state.blocks.get(block)?;
        if !b.buffer.usage().contains(wgpu::BufferUsages::MAP_WRITE) {
            // A Readback block: WebGPU maps it for reading only, so write through the queue.
            check_aligned(offset, wgpu::COPY_BUFFER_ALIGNMENT, "offset")?;
            check_aligned(data.len() as u64, wgpu::COPY_BUFFER_ALIGNMENT, "size")?;
            let b = state.blocks.get_mut(block)?;
            b.unmap();
            let buffer = b.buffer.clone();
            state.timeline.before_queued_write(&self.queue);
            self.queue.write_buffer(&buffer, offset, data);
            let ticket = state.timeline.enqueued();
            state.blocks.get_mut(block)?.last_use = ticket;
            // Natively the contract's write is synchronous. In a browser the next mapping of
            // the block completes only after this write anyway.
            #[cfg(not(target_arch = "wasm32"))]
            return self.submit_and_wait(state);
            #[cfg(target_arch = "wasm32")]
            return Ok(());
        }
        self.map_for_host(state, block, MapState::Write)?;
        mapping::write(state.blocks.get(block)?, offset, data)
    }

    fn read_mapped(&self, block: BlockId, offset: u64, out: &mut [u8]) -> Result<()> {
        let Some(mut guard) = self.lock_mapped(block, offset, out.len(), "read_mapped")? else {
            return Ok(());
        };
        let state = &mut *guard;
        let b = state.blocks.get(block)?;
        if !b.buffer.usage().contains(wgpu::BufferUsages::MAP_READ) {
            // An Upload block: WebGPU maps it for writing only.
            #[cfg(not(target_arch = "wasm32"))]
            return self.read_emulated(state, block, offset, out);
            #[cfg(target_arch = "wasm32")]
            return Err(mapping::not_host_visible(
                b,
                "read_mapped (of an upload block)",
            ));
        }
        self.map_for_host(state, block, MapState::Read)?;
        mapping::read(state.blocks.get(block)?, offset, out)
    }

    fn write_queued(&self, dst: BlockRange, data: &[u8]) -> Result<Option<Ticket>> {
        self.health.check()?;
        if data.len() as u64 != dst.size {
            return Err(Error::SizeMismatch {
                what: "write_queued data vs destination range (bytes)".into(),
                expected: dst.size,
                actual: data.len() as u64,
            });
        }
        let mut guard = lock(&self.state);
        let state = &mut *guard;
        Self::check_device_range(state, dst, "upload")?;
        let b = state.blocks.get_mut(dst.block)?;
        Self::check_usage(
            b,
            dst.block,
            wgpu::BufferUsages::COPY_DST,
            "destination of a queued write",
        )?;
        b.unmap();
        let buffer = b.buffer.clone();
        state.timeline.before_queued_write(&self.queue);
        self.queue.write_buffer(&buffer, dst.offset, data);
        let ticket = state.timeline.enqueued();
        state.blocks.get_mut(dst.block)?.last_use = ticket;
        Ok(Some(Ticket(ticket)))
    }

    fn copy(&self, src: BlockRange, dst: BlockRange) -> Result<Ticket> {
        self.health.check()?;
        if src.size != dst.size {
            return Err(Error::SizeMismatch {
                what: "copy source vs destination (bytes)".into(),
                expected: src.size,
                actual: dst.size,
            });
        }
        let mut guard = lock(&self.state);
        let state = &mut *guard;
        Self::check_device_range(state, src, "copy source")?;
        Self::check_device_range(state, dst, "copy destination")?;
        Self::check_usage(
            state.blocks.get(src.block)?,
            src.block,
            wgpu::BufferUsages::COPY_SRC,
            "copy source",
        )?;
        Self::check_usage(
            state.blocks.get(dst.block)?,
            dst.block,
            wgpu::BufferUsages::COPY_DST,
            "copy destination",
        )?;
        let s = state.blocks.get_mut(src.block)?;
        s.unmap();
        let src_buffer = s.buffer.clone();
        let d = state.blocks.get_mut(dst.block)?;
        d.unmap();
        let dst_buffer = d.buffer.clone();
        let encoder = state.timeline.encoder(&self.device);
        if src.block == dst.block {
            // WebGPU forbids copying a buffer onto itself; bounce through a temporary buffer
            // (which also makes overlapping ranges behave like memmove).
            let tmp = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("tensormem same-block copy"),
                size: src.size,
                usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            encoder.copy_buffer_to_buffer(&src_buffer, src.offset, &tmp, 0, src.size);
            encoder.copy_buffer_to_buffer(&tmp, 0, &dst_buffer, dst.offset, src.size);
        } else {
            encoder.copy_buffer_to_buffer(
                &src_buffer,
                src.offset,
                &dst_buffer,
                dst.offset,
                src.size,
            );
        }
        let ticket = state.timeline.enqueued();
        state.blocks.get_mut(src.block)?.last_use = ticket;
        state.blocks.get_mut(dst.block)?.last_use = ticket;
        Ok(Ticket(ticket))
    }

    fn fill_zero(&self, range: BlockRange) -> Result<Ticket> {
        self.health.check()?;
        let mut guard = lock(&self.state);
        let state = &mut *guard;
        Self::check_device_range(state, range, "fill")?;
        let b = state.blocks.get_mut(range.block)?;
        Self::check_usage(b, range.block, wgpu::BufferUsages::COPY_DST, "fill target")?;
        b.unmap();
        let buffer = b.buffer.clone();
        state
            .timeline
            .encoder(&self.device)
            .clear_buffer(&buffer, range.offset, Some(range.size));
        let ticket = state.timeline.enqueued();
        state.blocks.get_mut(range.block)?.last_use = ticket;
        Ok(Ticket(ticket))
    }

    fn dispatch(&self, op: &Op, bindings: &[BlockRange]) -> Result<Ticket> {
        self.health.check()?;
        // Invalid parameters are an error even on a direct call; binding sizes are the front's.
        let kernel = tensormem_contract::ops::wgsl::kernel(op)?;
        let sizes: Vec<u64> = bindings.iter().map(|r| r.size).collect();
        debug_assert!(
            op.check_binding_sizes(&sizes).is_ok(),
            "wgpu: {} bindings {sizes:?} (the front refuses them)",
            op.name()
        );
        let mut guard = lock(&self.state);
        let state = &mut *guard;
        let mut operands = Vec::with_capacity(bindings.len());
        for (i, range) in bindings.iter().enumerate() {
            // Bounds stay checked here (wgpu would panic on them); the rest is the front's.
            Self::check_device_range(state, *range, "binding")?;
            debug_assert!(
                range.offset.is_multiple_of(self.caps.binding_align)
                    && range.size <= self.caps.max_binding_size,
                "wgpu: binding {range:?} (the front refuses it)"
            );
            // Inputs may alias each other (`x + x`): kernels only read them (the front refuses
            // outputs that overlap another operand). WebGPU forbids two overlapping writable
            // storage bindings in one dispatch, and every operand is `read_write` in the WGSL
            // ABI, so an input overlapping an earlier one is bound as a copy.
            let aliased = bindings[..i].iter().any(|other| {
                other.block == range.block
                    && range.offset < other.offset + other.size
                    && other.offset < range.offset + range.size
            });
            let b = state.blocks.get_mut(range.block)?;
            Self::check_usage(
                b,
                range.block,
                wgpu::BufferUsages::STORAGE,
                "kernel operand",
            )?;
            b.unmap();
            let buffer = b.buffer.clone();
            if aliased {
                let copy = self.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("tensormem aliased input"),
                    size: range.size,
                    usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                state.timeline.encoder(&self.device).copy_buffer_to_buffer(
                    &buffer,
                    range.offset,
                    &copy,
                    0,
                    range.size,
                );
                operands.push((copy, 0, range.size));
            } else {
                operands.push((buffer, range.offset, range.size));
            }
        }
        let completed = state.timeline.completed();
        let params = state.params.push(
            &self.device,
            &self.queue,
            kernel.params_bytes(),
            state.timeline.open(),
            completed,
        )?;
        let encoder = state.timeline.encoder(&self.device);
        state.kernels.record(
            &self.device,
            encoder,
            &kernel,
            &operands,
            (&params.0, params.1),
        )?;
        let ticket = state.timeline.enqueued();
        for range in bindings {
            state.blocks.get_mut(range.block)?.last_use = ticket;
        }
        Ok(Ticket(ticket))
    }

    fn flush(&self) -> Result<Ticket> {
        self.health.check()?;
        let ticket = lock(&self.state).timeline.submit(&self.queue);
        Ok(Ticket(ticket))
    }

    fn completed(&self) -> Result<Ticket> {
        self.health.check()?;
        let mut guard = lock(&self.state);
        guard.timeline.submit(&self.queue);
        self.device
            .poll(wgpu::PollType::Poll)
            .map_err(map_poll_error)?;
        let done = guard.timeline.completed();
        drop(guard);
        self.health.check()?;
        Ok(Ticket(done))
    }

    fn poll_ticket(&self, ticket: Ticket, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.poll_ticket_impl(ticket, cx)
    }

    fn poll_host_access(&self, request: MappedAccess, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.poll_host_access_impl(request, cx)
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn wait_timeout(&self, ticket: Ticket, timeout: Option<Duration>) -> Result<()> {
        self.health.check()?;
        let index = {
            let mut state = lock(&self.state);
            state.timeline.check_issued(ticket)?;
            if ticket.0 >= state.timeline.open() {
                state.timeline.submit(&self.queue);
            }
            if ticket.0 <= state.timeline.completed() {
                return Ok(());
            }
            state.timeline.submission(ticket.0)
        };
        let Some(index) = index else {
            return Ok(());
        };
        let timeout = match timeout {
            None => self.config.wait_timeout,
            Some(Duration::MAX) => None,
            limit => limit,
        };
        poll_wait(&self.device, Some(index), timeout, || {
            format!("ticket {}", ticket.0)
        })?;
        // A lost device also ends the wait; report it rather than a completed ticket.
        self.health.check()?;
        lock(&self.state).timeline.mark_completed(ticket.0);
        Ok(())
    }
}

impl Managed for WgpuBackend {
    fn managed_memory(&self) -> ManagedMemory {
        ManagedMemory::SameMemory
    }
}
