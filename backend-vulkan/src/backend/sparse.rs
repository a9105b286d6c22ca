//! The backend's blocks that grow in place: reserving a sparse buffer, resizing its bound prefix,
//! extending it without binding, and the holes inside it ([`crate::sparse`] binds and keeps the memory). Each call binds in one
//! `vkQueueBindSparse`, ordered after every earlier call and before every later one, and keeps
//! the block as it was when the bind fails.

use ash::vk;
use gpu_allocator::vulkan::Allocator;
use tensormem_contract::{BlockDesc, BlockId, Error, Growable, InPlaceGrowth, MemoryKind, Result};

use super::{State, VulkanBackend};
use crate::blocks::{Block, Memory};
use crate::conv::{memory_admits, memory_location};
use crate::device::Gpu;
use crate::error::BACKEND;
use crate::sparse::{Binder, Granules, create_buffer, free_all};
use crate::timeline::Timeline;

/// Label of granule allocations, for gpu-allocator's reports.
const LABEL: &str = "tensormem sparse granule";

fn unsupported(what: &str) -> Error {
    Error::Unsupported {
        backend: BACKEND,
        what: what.into(),
    }
}

/// What one bind of a sparse block needs, borrowed from the state at once.
struct SparseBlock<'a> {
    gpu: &'a Gpu,
    allocator: &'a mut Allocator,
    compute: &'a mut Timeline,
    transfer: Option<&'a mut Timeline>,
    binder: &'a mut Binder,
    buffer: vk::Buffer,
    granules: &'a mut Granules,
}

impl SparseBlock<'_> {
    /// Submits `binds` of the block (see [`Binder::bind`]) and records the bind's value as the
    /// block's last.
    fn bind(&mut self, binds: &[vk::SparseMemoryBind]) -> Result<()> {
        let value = self.binder.bind(
            self.gpu,
            self.compute,
            self.transfer.as_deref_mut(),
            self.buffer,
            binds,
        )?;
        self.granules.last_bind = value;
        Ok(())
    }
}

impl State {
    /// The binder, after freeing what executed unbinds released.
    fn binder(&mut self) -> Result<&mut Binder> {
        self.check_alive()?;
        let binder = self
            .binder
            .as_mut()
            .ok_or_else(|| unsupported("blocks that grow in place (no sparse binding)"))?;
        binder.reclaim(&self.gpu, &mut self.allocator)?;
        Ok(binder)
    }

    /// The sparse `block` with what binding it needs; `what` names the call refused when the
    /// block was not reserved.
    fn sparse_block(&mut self, block: BlockId, what: &str) -> Result<SparseBlock<'_>> {
        let State {
            gpu,
            allocator,
            blocks,
            compute,
            transfer,
            binder,
            ..
        } = self;
        let binder = binder
            .as_mut()
            .ok_or_else(|| unsupported("sparse binding"))?;
        let b = blocks.get_mut(block)?;
        let buffer = b.buffer;
        let Memory::Sparse(granules) = &mut b.memory else {
            return Err(unsupported(what));
        };
        Ok(SparseBlock {
            gpu,
            allocator,
            compute,
            transfer: transfer.as_mut(),
            binder,
            buffer,
            granules,
        })
    }

    /// Binds new memory to the unbound granules `indices` of sparse `block`.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`], [`Error::DeviceLost`]; the granules stay unbound then.
    fn commit_granules(&mut self, block: BlockId, indices: &[u64]) -> Result<()> {
        self.binder()?;
        let mut sb = self.sparse_block(block, "committing a block that was not reserved")?;
        let fresh = sb.granules.allocate(sb.allocator, indices, LABEL)?;
        let binds: Vec<_> = indices
            .iter()
            .zip(&fresh)
            .map(|(&i, a)| sb.granules.bind_of(i, Some(a)))
            .collect();
        match sb.bind(&binds) {
            Ok(()) => {
                sb.granules.insert(indices, fresh);
                Ok(())
            }
            Err(e) => {
                free_all(sb.allocator, fresh);
                Err(e)
            }
        }
    }

    /// Unbinds the bound granules among `indices` of sparse `block` (from its end when `tail`:
    /// every granule at or past `indices.start`), and frees their memory once the unbind ran.
    ///
    /// # Errors
    /// [`Error::DeviceLost`]; the granules stay bound then.
    fn decommit_granules(
        &mut self,
        block: BlockId,
        indices: std::ops::Range<u64>,
        tail: bool,
    ) -> Result<()> {
        self.binder()?;
        let mut sb = self.sparse_block(block, "decommitting a block that was not reserved")?;
        let taken = if tail {
            sb.granules.take_from(indices.start)
        } else {
            sb.granules.take(indices)
        };
        if taken.is_empty() {
            return Ok(());
        }
        let binds: Vec<_> = taken
            .iter()
            .map(|(i, _)| sb.granules.bind_of(*i, None))
            .collect();
        match sb.bind(&binds) {
            Ok(()) => {
                let value = sb.granules.last_bind;
                sb.binder
                    .retire(value, taken.into_iter().map(|(_, a)| a).collect());
                Ok(())
            }
            Err(e) => {
                let (indices, allocations): (Vec<u64>, Vec<_>) = taken.into_iter().unzip();
                sb.granules.insert(&indices, allocations);
                Err(e)
            }
        }
    }
}

/// Reached through [`Extensions::growable`](tensormem_contract::Extensions::growable) where the device binds
/// sparse memory; a direct call elsewhere reports [`InPlaceGrowth::NONE`] and is refused.
impl Growable for VulkanBackend {
    fn in_place_growth(&self) -> InPlaceGrowth {
        self.growth.unwrap_or(InPlaceGrowth::NONE)
    }

    fn reserve_block(&self, desc: &BlockDesc<'_>, reserve: u64) -> Result<BlockId> {
        self.reserve_sparse(desc, reserve)
    }

    fn resize_block(&self, block: BlockId, size: u64) -> Result<u64> {
        self.resize_sparse(block, size)
    }

    fn decommit_range(&self, block: BlockId, offset: u64, size: u64) -> Result<()> {
        self.decommit_sparse(block, offset, size)
    }

    fn commit_range(&self, block: BlockId, offset: u64, size: u64) -> Result<()> {
        self.commit_sparse(block, offset, size)
    }

    fn remap_range(&self, block: BlockId, from: u64, to: u64, size: u64) -> Result<()> {
        self.remap_sparse(block, from, to, size)
    }

    fn extend_block(&self, block: BlockId, size: u64) -> Result<()> {
        self.extend_sparse(block, size)
    }
}

impl VulkanBackend {
    /// [`tensormem_contract::Growable::reserve_block`]: a sparse buffer of `reserve` bytes with its first
    /// `desc.size` bytes bound.
    pub(crate) fn reserve_sparse(&self, desc: &BlockDesc<'_>, reserve: u64) -> Result<BlockId> {
        if desc.kind == MemoryKind::Managed {
            return Err(unsupported("managed blocks that grow in place"));
        }
        let mut guard = self.lock();
        let s = &mut *guard;
        let binder = s.binder()?;
        let granule = binder.growth.granularity;
        debug_assert!(
            reserve > 0
                && reserve.is_multiple_of(granule)
                && desc.size.is_multiple_of(granule)
                && desc.size <= reserve,
            "vulkan: reservation of {reserve} bytes committing {} (the front checks granules)",
            desc.size
        );
        binder.claim(reserve, desc.label)?;
        let buffer = match create_buffer(&s.gpu, reserve, true) {
            Ok(b) => b,
            Err(e) => {
                if let Some(b) = s.binder.as_mut() {
                    b.release(reserve);
                }
                return Err(e);
            }
        };
        // SAFETY: `buffer` was just created on the device.
        let mut requirements = unsafe { s.gpu.device.get_buffer_memory_requirements(buffer) };
        // SAFETY: `physical` belongs to `instance`.
        let memory = unsafe {
            s.gpu
                .instance
                .get_physical_device_memory_properties(s.gpu.physical)
        };
        let types = &memory.memory_types[..memory.memory_type_count as usize];
        if !memory_admits(types, requirements.memory_type_bits, desc.kind) {
            // SAFETY: the buffer is unused and bound to nothing.
            unsafe { s.gpu.device.destroy_buffer(buffer, None) };
            if let Some(b) = s.binder.as_mut() {
                b.release(reserve);
            }
            return Err(unsupported(
                "blocks of this kind that grow in place (the device's sparse buffers take no \
                 memory of it)",
            ));
        }
        requirements.alignment = requirements.alignment.max(s.policy.atom);
        let granules = Granules::new(reserve, granule, requirements, memory_location(desc.kind));
        // Force staging already hides device-local memory from `caps`, and `Block::sparse` too.
        let host_visible = desc.kind != MemoryKind::DeviceLocal || self.caps.device_host_visible;
        let block = Block::sparse(buffer, granules, desc.kind, 0, host_visible, s.policy);
        let id = s.blocks.insert(desc.kind, 0, block);
        if let Some(log) = &self.validation {
            log.note_sparse_buffer(buffer, true);
        }
        let first: Vec<u64> = (0..desc.size / granule).collect();
        if first.is_empty() {
            return Ok(id);
        }
        match s.commit_granules(id, &first) {
            Ok(()) => {
                s.blocks.resize(id, desc.size)?;
                s.blocks.get_mut(id)?.native.size = desc.size;
                Ok(id)
            }
            Err(e) => {
                if let Some(log) = &self.validation {
                    log.note_sparse_buffer(buffer, false);
                }
                if let Ok(mut b) = s.blocks.remove(id) {
                    // SAFETY: nothing was bound to the buffer and no work recorded on it.
                    unsafe { b.destroy(&s.gpu.device, &mut s.allocator) };
                }
                if let Some(b) = s.binder.as_mut() {
                    b.release(reserve);
                }
                Err(e)
            }
        }
    }

    /// [`tensormem_contract::Growable::resize_block`]: binds granules at the end, or unbinds those past
    /// `size`; returns `size`.
    pub(crate) fn resize_sparse(&self, block: BlockId, size: u64) -> Result<u64> {
        self.set_size(block, size, true)
    }

    /// [`tensormem_contract::Growable::extend_block`]: the block grows to `size` bytes with no bind (the
    /// granules added stay unbound: holes).
    pub(crate) fn extend_sparse(&self, block: BlockId, size: u64) -> Result<()> {
        self.set_size(block, size, false).map(|_| ())
    }

    /// Makes `size` bytes of sparse `block` its committed size: granules added are bound to new
    /// memory when `bind`, else left unbound (an extension, which must grow); granules past
    /// `size` are unbound. Returns `size`.
    fn set_size(&self, block: BlockId, size: u64, bind: bool) -> Result<u64> {
        let mut guard = self.lock();
        let s = &mut *guard;
        let granule = s.binder()?.growth.granularity;
        let b = s.blocks.get(block)?;
        let old = b.size;
        let Memory::Sparse(g) = &b.memory else {
            return Err(unsupported("resizing a block that was not reserved"));
        };
        let call = if bind { "resize_block" } else { "extend_block" };
        Error::check_limit(call, size, g.reserve, "the block's reservation")?;
        if !size.is_multiple_of(granule) {
            return Err(Error::Misaligned {
                what: call,
                value: size,
                align: granule,
                align_name: "sparse binding granule",
            });
        }
        if !bind && size <= old {
            return Err(tensormem_contract::GrowthError::NotAnExtension {
                block: block.0,
                committed: old,
                size,
            }
            .into());
        }
        if size > old && bind {
            let indices: Vec<u64> = g.indices(old, size - old).collect();
            s.commit_granules(block, &indices)?;
        } else if size < old {
            s.decommit_granules(block, size / granule..old / granule, true)?;
        }
        s.blocks.resize(block, size)?;
        s.blocks.get_mut(block)?.native.size = size;
        Ok(size)
    }

    /// The granule indices of `[offset, offset + size)` of sparse `block`, checked: whole
    /// granules inside its committed size.
    fn hole_indices(
        s: &mut State,
        block: BlockId,
        offset: u64,
        size: u64,
    ) -> Result<std::ops::Range<u64>> {
        let granule = s.binder()?.growth.granularity;
        let b = s.blocks.get(block)?;
        let Memory::Sparse(g) = &b.memory else {
            return Err(unsupported("holes in a block that was not reserved"));
        };
        b.check_range(offset, size, "committed size of the reserved block")?;
        for (what, value) in [("hole range offset", offset), ("hole range size", size)] {
            if !value.is_multiple_of(granule) {
                return Err(Error::Misaligned {
                    what,
                    value,
                    align: granule,
                    align_name: "sparse binding granule",
                });
            }
        }
        Ok(g.indices(offset, size))
    }

    /// [`tensormem_contract::Growable::decommit_range`].
    pub(crate) fn decommit_sparse(&self, block: BlockId, offset: u64, size: u64) -> Result<()> {
        let mut guard = self.lock();
        let s = &mut *guard;
        let indices = Self::hole_indices(s, block, offset, size)?;
        s.decommit_granules(block, indices, false)
    }

    /// [`tensormem_contract::Growable::commit_range`]: binds new memory to the unbound granules of the
    /// range.
    pub(crate) fn commit_sparse(&self, block: BlockId, offset: u64, size: u64) -> Result<()> {
        let mut guard = self.lock();
        let s = &mut *guard;
        let indices = Self::hole_indices(s, block, offset, size)?;
        let Memory::Sparse(g) = &s.blocks.get(block)?.memory else {
            return Err(unsupported("holes in a block that was not reserved"));
        };
        let unbound: Vec<u64> = indices.filter(|&i| !g.is_bound(i)).collect();
        if unbound.is_empty() {
            return Ok(());
        }
        s.commit_granules(block, &unbound)
    }

    /// [`tensormem_contract::Growable::remap_range`]: one bind unbinds `from` and binds `to` to the memory
    /// that backed it.
    pub(crate) fn remap_sparse(&self, block: BlockId, from: u64, to: u64, size: u64) -> Result<()> {
        let mut guard = self.lock();
        let s = &mut *guard;
        let sources = Self::hole_indices(s, block, from, size)?;
        let targets = Self::hole_indices(s, block, to, size)?;
        let granule = s.binder()?.growth.granularity;
        let mut sb = s.sparse_block(block, "holes in a block that was not reserved")?;
        let g = &mut *sb.granules;
        if sources.start < targets.end && targets.start < sources.end {
            return Err(Error::Overlap {
                what: "remap_range: the source and the target".into(),
                block: block.0,
                first_offset: from,
                first_size: size,
                second_offset: to,
                second_size: size,
            });
        }
        if let Some(i) = sources.clone().find(|&i| !g.is_bound(i)) {
            return Err(tensormem_contract::GrowthError::NotBacked {
                call: "the source of remap_range",
                offset: i * granule,
                size: granule,
            }
            .into());
        }
        if let Some(i) = targets.clone().find(|&i| g.is_bound(i)) {
            return Err(tensormem_contract::GrowthError::NotAHole {
                call: "the target of remap_range",
                offset: i * granule,
                size: granule,
            }
            .into());
        }
        let moved = g.take(sources);
        let binds: Vec<_> = moved
            .iter()
            .map(|(i, _)| g.bind_of(*i, None))
            .chain(
                moved
                    .iter()
                    .zip(targets.clone())
                    .map(|((_, a), t)| g.bind_of(t, Some(a))),
            )
            .collect();
        let result = sb.bind(&binds);
        let (indices, allocations): (Vec<u64>, Vec<_>) = moved.into_iter().unzip();
        let at = if result.is_ok() {
            targets.collect()
        } else {
            indices
        };
        sb.granules.insert(&at, allocations);
        result
    }

    /// Before a sparse block is destroyed: waits until its last bind has executed (Vulkan
    /// forbids destroying a buffer a pending bind names) and returns its address space.
    pub(super) fn before_free_sparse(&self, s: &mut State, block: BlockId) -> Result<()> {
        let b = s.blocks.get(block)?;
        let Memory::Sparse(g) = &b.memory else {
            return Ok(());
        };
        let (last, reserve, buffer) = (g.last_bind, g.reserve, b.buffer);
        if let Some(binder) = s.binder.as_mut() {
            binder.wait(&s.gpu, last, self.config.wait_timeout)?;
            binder.release(reserve);
            binder.reclaim(&s.gpu, &mut s.allocator)?;
        }
        if let Some(log) = &self.validation {
            log.note_sparse_buffer(buffer, false);
        }
        Ok(())
    }
}
