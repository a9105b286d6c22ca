//! The replay pool's planned arena: one backend block of exactly the largest plan's size, reserved
//! against the runtime's budget, released only when no work uses it.
//!
//! It is a block of its own rather than an allocation of the dynamic pool, so what the replay pool
//! reserves in steady state is the plan and nothing else: a dynamic pool would round it up to its
//! block policy and keep the recorded steps' blocks beside it, reserving the live bytes twice.

use std::sync::{Arc, PoisonError, RwLock};

use crate::backend::{Backend, BlockDesc, BlockId, MemoryKind, Ticket};
use crate::pool::budget::Budget;
use crate::pool::device_pool::PoolListener;
use crate::{Error, Result};

/// The arena block now held.
#[derive(Copy, Clone, Debug)]
pub(super) struct Block {
    pub(super) id: BlockId,
    /// Bytes, a multiple of the copy alignment.
    pub(super) size: u64,
    /// Latest ticket of work on any planned allocation: the block is released only after it.
    pub(super) last_use: Ticket,
}

/// Where arena blocks come from and whom to tell about them.
pub(super) struct Source {
    pub(super) backend: Arc<dyn Backend>,
    pub(super) budget: Arc<Budget>,
    pub(super) kind: MemoryKind,
    pub(super) name: String,
    pub(super) listener: RwLock<Option<Arc<dyn PoolListener>>>,
}

impl Source {
    fn notify(&self, f: impl FnOnce(&dyn PoolListener)) {
        let l = self.listener.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(l) = l.as_deref() {
            f(l);
        }
    }

    /// Reserves a block of `size` bytes against the budget. `Ok(None)` when the budget or the
    /// device has no room (the caller then serves its steps dynamically).
    ///
    /// # Errors
    /// Backend errors other than out-of-memory ([`Error::DeviceLost`]).
    pub(super) fn reserve(&self, size: u64) -> Result<Option<Block>> {
        if !self.budget.try_reserve(size) {
            return Ok(None);
        }
        let desc = BlockDesc {
            kind: self.kind,
            size,
            label: "tensormem replay arena",
        };
        match self.backend.alloc_block(&desc) {
            Ok(id) => {
                self.notify(|l| l.block_reserved(&self.name, id, size));
                Ok(Some(Block {
                    id,
                    size,
                    last_use: Ticket::DONE,
                }))
            }
            Err(e) => {
                self.budget.release(size);
                match e {
                    Error::OutOfMemory(_) | Error::TooLarge { .. } => Ok(None),
                    e => Err(e),
                }
            }
        }
    }

    /// Whether no work that used `block` is still running. Never blocks.
    ///
    /// # Errors
    /// Backend errors ([`Error::DeviceLost`]).
    pub(super) fn idle(&self, block: &Block) -> Result<bool> {
        Ok(block.last_use == Ticket::DONE || block.last_use <= self.backend.completed()?)
    }

    /// Returns `block` to the backend and the budget; the caller has checked it is idle.
    ///
    /// # Errors
    /// Backend errors; the block is then still held.
    pub(super) fn release(&self, block: &Block) -> Result<()> {
        self.backend.free_block(block.id)?;
        self.budget.release(block.size);
        self.notify(|l| l.block_released(&self.name, block.id, block.size));
        Ok(())
    }
}
