//! Expandable blocks on the backend: allocation, in-place growth and shrink through `vmm.rs`.
//!
//! An expandable block is a `DeviceLocal` block like any other for every [`tensormem_contract::Backend`]
//! method (copies, fills, bindings); its size is the mapped part of its reserved range. The
//! contract's blocks that grow in place ([`tensormem_contract::Extensions::growable`],
//! `reserve_block`, `resize_block`) are these blocks with a chunk of one granule, so the pools'
//! arena grows by exactly the granules it asks for, each growth mapped as one allocation; the
//! inherent API below keeps a chunk size of its own for direct users.

use tensormem_contract::{BlockDesc, BlockId, Error, Growable, InPlaceGrowth, MemoryKind, Result};

use crate::CudaBackend;
use crate::blocks::{Block, Memory};
use crate::error::{BACKEND, map_driver_err};
use crate::timeline::lock;
use crate::vmm::{ExpandableSegment, chunk_size, granularity};

/// Creation arguments of an expandable block.
#[derive(Clone, Debug)]
pub struct ExpandableDesc<'a> {
    /// Bytes of virtual address space to reserve: the most the block can ever grow to. Address
    /// space is cheap (nothing is committed), so reserving the device's whole memory is normal.
    /// Rounded up to `chunk`.
    pub reserve: u64,
    /// Bytes to map at creation (rounded up to `chunk`; 0 maps nothing yet).
    pub initial: u64,
    /// Unit of the mapped size, rounded up to the driver's granularity (2 MiB on current GPUs):
    /// every growth maps the target rounded up to it, as one allocation. Small chunks waste less
    /// at the tail; large chunks make fewer, larger growths. PyTorch uses 2 MiB for small and
    /// 20 MiB for large segments.
    pub chunk: u64,
    /// Label for reports.
    pub label: &'a str,
    /// Let ranges of whole physical allocations (each growth or commit maps one) be given back,
    /// backed again and moved inside the block (the contract's holes,
    /// [`tensormem_contract::Growable::decommit_range`]); `false` refuses them.
    pub holes: bool,
}

/// Reached through [`Extensions::growable`](tensormem_contract::Extensions::growable) on a device with VMM; a
/// direct call elsewhere reports [`InPlaceGrowth::NONE`] and is refused. A lost device any call
/// reports is remembered (`health`), as for every other call.
impl Growable for CudaBackend {
    fn in_place_growth(&self) -> InPlaceGrowth {
        self.vmm_growth().unwrap_or(InPlaceGrowth::NONE)
    }

    fn reserve_block(&self, desc: &BlockDesc<'_>, reserve: u64) -> Result<BlockId> {
        let reserved = self.reserve_expandable(desc, reserve);
        self.timeline.health().remember_loss(reserved)
    }

    fn resize_block(&self, block: BlockId, size: u64) -> Result<u64> {
        let resized = self.resize_expandable(block, size);
        self.timeline.health().remember_loss(resized)
    }

    fn extend_block(&self, block: BlockId, size: u64) -> Result<()> {
        let r = self.extend_expandable(block, size);
        self.timeline.health().remember_loss(r)
    }

    fn decommit_range(&self, block: BlockId, offset: u64, size: u64) -> Result<()> {
        let r = self.decommit_expandable(block, offset, size);
        self.timeline.health().remember_loss(r)
    }

    fn commit_range(&self, block: BlockId, offset: u64, size: u64) -> Result<()> {
        let r = self.commit_expandable(block, offset, size);
        self.timeline.health().remember_loss(r)
    }

    fn remap_range(&self, block: BlockId, from: u64, to: u64, size: u64) -> Result<()> {
        let r = self.remap_expandable(block, from, to, size);
        self.timeline.health().remember_loss(r)
    }
}

impl CudaBackend {
    /// The VMM allocation granularity of the device, in bytes (sizes are rounded to it).
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the device has no virtual memory management.
    pub fn vmm_granularity(&self) -> Result<u64> {
        self.bind()?;
        self.check_vmm()?;
        granularity(self.ctx.cu_device())
    }

    fn check_vmm(&self) -> Result<()> {
        let vmm = self
            .ctx
            .attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
            )
            .map_err(|e| map_driver_err("cuDeviceGetAttribute", e))?;
        if vmm == 0 {
            return Err(Error::Unsupported {
                backend: BACKEND,
                what: "expandable blocks on a device without virtual memory management".into(),
            });
        }
        Ok(())
    }

    /// Allocates an expandable `DeviceLocal` block: reserves `desc.reserve` bytes of address
    /// space and maps `desc.initial` bytes.
    ///
    /// # Errors
    /// [`Error::ZeroSize`] for a zero reservation, [`Error::TooLarge`] for an initial size above
    /// the reservation, [`Error::OutOfMemory`] when the initial chunks cannot be backed,
    /// [`Error::Unsupported`] without VMM.
    pub fn alloc_expandable_block(&self, desc: &ExpandableDesc<'_>) -> Result<BlockId> {
        if desc.reserve == 0 {
            return Err(Error::ZeroSize {
                what: "expandable block reservation",
            });
        }
        Error::check_limit(
            "expandable block initial size",
            desc.initial,
            desc.reserve,
            "ExpandableDesc::reserve",
        )?;
        let chunk = chunk_size(desc.chunk, self.vmm_granularity()?)?;
        let mut seg =
            ExpandableSegment::reserve(self.ctx.cu_device(), desc.reserve, chunk, desc.holes)?;
        seg.grow_to(desc.initial, self.caps.budget)?;
        let size = seg.mapped();
        Ok(lock(&self.blocks).insert(
            MemoryKind::DeviceLocal,
            size,
            Block::new(
                MemoryKind::DeviceLocal,
                size,
                Memory::Expandable(seg),
                desc.label,
            ),
        ))
    }

    /// Grows an expandable block in place so that at least `size` bytes are usable; returns the
    /// new usable size (a multiple of the chunk). Existing contents and addresses stay valid.
    ///
    /// # Errors
    /// [`Error::UnknownBlock`] for a block that is not live, [`Error::Unsupported`] for one that is
    /// not expandable,
    /// [`Error::TooLarge`] beyond the reservation or `max_block_size`, [`Error::OutOfMemory`]
    /// when the driver has no memory for the new chunks (the block keeps the chunks that mapped).
    pub fn grow_block(&self, block: BlockId, size: u64) -> Result<u64> {
        Error::check_block_size(size, self.caps.max_block_size)?;
        self.bind()?;
        let mut blocks = lock(&self.blocks);
        let seg = expandable(blocks.get_mut(block)?, block)?;
        let grown = seg.grow_to(size, self.caps.budget);
        let mapped = seg.mapped();
        // The table's size follows the mapped size (even after a partial growth).
        blocks.resize(block, mapped)?;
        grown?;
        Ok(mapped)
    }

    /// Shrinks an expandable block to the fewest of its growths (each mapped as one allocation)
    /// that hold `size` bytes, returning the memory past them to the device; returns the new
    /// usable size, which can exceed `size` by up to the growth that holds it.
    ///
    /// The caller guarantees that no in-flight work touches bytes past `size` (wait for their
    /// tickets first, as before `free_block`).
    ///
    /// # Errors
    /// [`Error::UnknownBlock`] for a block that is not live, [`Error::Unsupported`] for one that is
    /// not expandable; mapped driver errors.
    pub fn shrink_block(&self, block: BlockId, size: u64) -> Result<u64> {
        self.bind()?;
        let mut blocks = lock(&self.blocks);
        let seg = expandable(blocks.get_mut(block)?, block)?;
        let shrunk = seg.shrink_to(size);
        let mapped = seg.mapped();
        blocks.resize(block, mapped)?;
        shrunk?;
        Ok(mapped)
    }

    /// What the backend offers the pools: VMM on the device, granule-sized units, and at most
    /// the device's memory per reservation. `None` without VMM or when the driver cannot say.
    pub(crate) fn vmm_growth(&self) -> Option<InPlaceGrowth> {
        let granularity = self.vmm_granularity().ok()?;
        let max_reserve = self.caps.max_block_size / granularity * granularity;
        (granularity.is_power_of_two() && max_reserve > 0).then_some(InPlaceGrowth {
            granularity,
            max_reserve,
            holes: self.vmm_holes,
            // One physical allocation per unit (`vmm.rs`).
            whole_units: true,
        })
    }

    /// [`tensormem_contract::Growable::reserve_block`]: an expandable `DeviceLocal` block with a chunk of
    /// one granule, `desc.size` mapped.
    pub(crate) fn reserve_expandable(&self, desc: &BlockDesc<'_>, reserve: u64) -> Result<BlockId> {
        if desc.kind != MemoryKind::DeviceLocal {
            return Err(Error::Unsupported {
                backend: BACKEND,
                what: format!("{} blocks that grow in place", desc.kind.name()),
            });
        }
        let chunk = self.vmm_granularity()?;
        self.alloc_expandable_block(&ExpandableDesc {
            reserve,
            initial: desc.size,
            chunk,
            label: desc.label,
            holes: self.vmm_holes,
        })
    }

    /// [`tensormem_contract::Growable::extend_block`] on an expandable block reserved with holes: the
    /// extent grows, nothing is mapped (no driver call).
    pub(crate) fn extend_expandable(&self, block: BlockId, size: u64) -> Result<()> {
        Error::check_block_size(size, self.caps.max_block_size)?;
        let mut blocks = lock(&self.blocks);
        expandable(blocks.get_mut(block)?, block)?.extend_to(block.0, size)?;
        blocks.resize(block, size)
    }

    /// [`tensormem_contract::Growable::decommit_range`] on an expandable block reserved with holes.
    pub(crate) fn decommit_expandable(&self, block: BlockId, offset: u64, size: u64) -> Result<()> {
        self.bind()?;
        let mut blocks = lock(&self.blocks);
        expandable(blocks.get_mut(block)?, block)?.decommit(offset, size)
    }

    /// [`tensormem_contract::Growable::commit_range`] on an expandable block reserved with holes.
    pub(crate) fn commit_expandable(&self, block: BlockId, offset: u64, size: u64) -> Result<()> {
        self.bind()?;
        let mut blocks = lock(&self.blocks);
        expandable(blocks.get_mut(block)?, block)?.commit(offset, size, self.caps.budget)
    }

    /// [`tensormem_contract::Growable::remap_range`] on an expandable block reserved with holes.
    pub(crate) fn remap_expandable(
        &self,
        block: BlockId,
        from: u64,
        to: u64,
        size: u64,
    ) -> Result<()> {
        self.bind()?;
        let mut blocks = lock(&self.blocks);
        expandable(blocks.get_mut(block)?, block)?.remap(block.0, from, to, size)
    }

    /// [`tensormem_contract::Growable::resize_block`]: maps `size` bytes (a multiple of the granularity)
    /// with one growth, or unmaps the growths past the one that holds `size`; returns the
    /// committed size (exactly `size` when growing).
    pub(crate) fn resize_expandable(&self, block: BlockId, size: u64) -> Result<u64> {
        let mapped = lock(&self.blocks).get(block)?.size();
        if size < mapped {
            return self.shrink_block(block, size);
        }
        let now = self.grow_block(block, size)?;
        if now != size {
            return Err(Error::SizeMismatch {
                what: format!(
                    "cuda: resize_block of block {} (an expandable block grows in whole chunks: \
                     reserve it through reserve_block)",
                    block.0
                ),
                expected: size,
                actual: now,
            });
        }
        Ok(now)
    }

    /// The reserved size of an expandable block: the most it can grow to.
    ///
    /// # Errors
    /// [`Error::UnknownBlock`] for a block that is not live, [`Error::Unsupported`] for one that is
    /// not expandable.
    pub fn reserved_size(&self, block: BlockId) -> Result<u64> {
        let mut blocks = lock(&self.blocks);
        Ok(expandable(blocks.get_mut(block)?, block)?.reserved())
    }
}

fn expandable(b: &mut Block, id: BlockId) -> Result<&mut ExpandableSegment> {
    match &mut b.memory {
        Memory::Expandable(seg) => Ok(seg),
        _ => Err(Error::Unsupported {
            backend: "cuda",
            what: format!(
                "growing block {} in place: it is not expandable (allocate it with \
                 alloc_expandable_block)",
                id.0
            ),
        }),
    }
}
