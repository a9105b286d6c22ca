//! What a [`SpillPool`](super::SpillPool)'s listener hears. The pool issues its own handles, so
//! the inner pool's reports about its handles mean nothing above: the inner pool gets a listener
//! that passes its block events on and drops its reclaims, and the spill pool reports, in its
//! own handles, each spill and restore and the reclaim of each free (at the free: the inner
//! pool's reclaim of the bytes comes later, in handles the listener does not know).

use std::sync::{Arc, PoisonError, RwLock};

use crate::backend::BlockId;
use crate::pool::device_pool::PoolListener;
use crate::pool::slots::Handle;

/// The spill pool's listener, if any.
#[derive(Default)]
pub(super) struct Listen {
    listener: RwLock<Option<Arc<dyn PoolListener>>>,
}

impl Listen {
    /// Sets the listener; returns the one the inner pool gets.
    pub(super) fn set(
        &self,
        listener: Option<Arc<dyn PoolListener>>,
    ) -> Option<Arc<dyn PoolListener>> {
        *self
            .listener
            .write()
            .unwrap_or_else(PoisonError::into_inner) = listener.clone();
        listener.map(|l| Arc::new(BlocksOnly(l)) as Arc<dyn PoolListener>)
    }

    /// Tells the listener, if there is one.
    pub(super) fn notify(&self, f: impl FnOnce(&dyn PoolListener)) {
        let l = self.listener.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(l) = l.as_deref() {
            f(l);
        }
    }
}

/// The inner pool's listener: its blocks are the spill pool's, its handles are not.
struct BlocksOnly(Arc<dyn PoolListener>);

impl PoolListener for BlocksOnly {
    fn block_reserved(&self, pool: &str, block: BlockId, size: u64) {
        self.0.block_reserved(pool, block, size);
    }

    fn block_released(&self, pool: &str, block: BlockId, size: u64) {
        self.0.block_released(pool, block, size);
    }

    fn reclaimed(&self, _: Handle) {}
}
