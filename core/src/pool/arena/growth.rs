//! The block pool ([`Classes`]): blocks beside each other, where the backend cannot grow one in
//! place or the growing arena cannot serve. Where a request is placed among them, and how a new
//! block is reserved when it fits none; the sizes come from [`policy`](super::policy).
//!
//! * **Placement.** The blocks of the request's class, fullest first (the fewest free bytes
//!   that could hold it: best fit across blocks, and the emptier blocks drain), the others
//!   after it in index order.
//! * **Reservation.** On a miss, the class's empty blocks go back to the backend first: none of
//!   them could hold the request, and the new block takes their place, so they do not add to the
//!   peak. When the budget or the driver refuses, the pool trims its own empty blocks once and
//!   retries.

use super::carved::{Block, Carved, Kind, Place, Role, State};
use super::policy::{BlockRequest, Class};
use crate::Error;
use crate::Result;
use crate::backend::BlockDesc;
use crate::suballoc::Region;

/// The block pool's kind: blocks by request class, each a [`Class`].
pub(super) struct Classes;

impl Role for Class {}

/// Default block size of an arena pool: 32 MiB (the small class's largest block).
pub const DEFAULT_BLOCK_SIZE: u64 = 32 << 20;

type BlockPool = Carved<Classes>;

impl Kind for Classes {
    type Role = Class;

    fn existing(
        _: &BlockPool,
        st: &mut State<Self>,
        size: u64,
        align: u64,
    ) -> Result<Option<(usize, Region)>> {
        BlockPool::try_existing(st, size, align)
    }

    fn grow(
        pool: &BlockPool,
        st: &mut State<Self>,
        size: u64,
        align: u64,
        label: &str,
    ) -> Result<Option<Place>> {
        Ok(pool.grow(st, size, align, label)?.map(|found| Place {
            fresh_block: true,
            ..Place::existing(found)
        }))
    }
}

impl BlockPool {
    /// Places a request in an existing block of its class, fullest first.
    fn try_existing(
        st: &mut State<Classes>,
        size: u64,
        align: u64,
    ) -> Result<Option<(usize, Region)>> {
        let class = Class::of(size);
        let fits = |b: &Block<Class>| b.role == class && b.carving.free_bytes() >= size;
        let fullest = st
            .blocks
            .iter()
            .enumerate()
            .filter_map(|(i, b)| b.as_ref().filter(|b| fits(b)).map(|b| (i, b)))
            .min_by_key(|(_, b)| b.carving.free_bytes())
            .map(|(i, _)| i);
        let Some(fullest) = fullest else {
            return Ok(None);
        };
        let order = std::iter::once(fullest).chain((0..st.blocks.len()).filter(|i| *i != fullest));
        for i in order {
            let Some(b) = st.blocks[i].as_mut().filter(|b| fits(b)) else {
                continue;
            };
            if let Some(region) = b.carving.allocate(size, align)? {
                return Ok(Some((i, region)));
            }
        }
        Ok(None)
    }

    /// Returns the empty blocks of `class` to the backend (on a miss of that class, which none of
    /// them could hold). A block the backend refuses to take back stays.
    fn release_empty(&self, st: &mut State<Classes>, class: Class) {
        for i in 0..st.blocks.len() {
            let empty = st.blocks[i]
                .as_ref()
                .is_some_and(|b| b.role == class && b.carving.is_empty());
            if empty {
                let _ = self.release_block(st, i);
            }
        }
    }

    /// Reserves a new block for a request of `size` bytes and carves it, after returning the
    /// class's empty blocks, and trimming this pool when the budget or the driver refuses.
    /// `Ok(None)` means out of memory. On every error path the budget and the block list are as
    /// they were, but for the empty blocks returned.
    fn grow(
        &self,
        st: &mut State<Classes>,
        size: u64,
        align: u64,
        label: &str,
    ) -> Result<Option<(usize, Region)>> {
        let class = Class::of(size);
        self.release_empty(st, class);
        let (class_reserved, pool_reserved) =
            st.blocks.iter().flatten().fold((0, 0), |(c, p), b| {
                let mine = if b.role == class { b.size } else { 0 };
                (c + mine, p + b.size)
            });
        for attempt in 0..2 {
            let bytes = BlockRequest {
                class,
                need: size,
                class_reserved,
                pool_reserved,
                block_size: self.config.block_size,
                room: self.budget.room(),
                max_block: self.backend.capabilities().max_block_size,
                align: self.copy_align,
            }
            .block_bytes()
            .and_then(|b| self.config.carver.block_bytes(b, size))
            .filter(|b| *b <= self.backend.capabilities().max_block_size);
            if let Some(bytes) = bytes.filter(|b| self.budget.try_reserve(*b))
                && let Some(found) = self.reserve(st, bytes, class, size, align, label)?
            {
                return Ok(Some(found));
            }
            // Refused by the budget or the driver: give back our own empty blocks, once.
            if attempt == 1 || self.trim_locked(st)? == 0 {
                return Ok(None);
            }
        }
        Ok(None)
    }

    /// Allocates a block of `bytes` (already charged to the budget) and carves the request in it.
    /// `Ok(None)` when the driver is out of memory; the charge is returned on every failure.
    fn reserve(
        &self,
        st: &mut State<Classes>,
        bytes: u64,
        class: Class,
        size: u64,
        align: u64,
        label: &str,
    ) -> Result<Option<(usize, Region)>> {
        let desc = BlockDesc {
            kind: self.config.kind,
            size: bytes,
            label: &format!("tensormem {} block for {label}", self.config.name),
        };
        let id = match Self::remember_loss(st, self.backend.alloc_block(&desc)) {
            Ok(id) => id,
            Err(e) => {
                self.budget.release(bytes);
                return match e {
                    Error::OutOfMemory(_) => Ok(None),
                    e => Err(e),
                };
            }
        };
        let (carving, region) = self.carve_fresh(id, bytes, size, align)?;
        Ok(Some((self.install(st, id, bytes, carving, class), region)))
    }
}
