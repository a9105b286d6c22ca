//! A runtime whose device pool records and replays steps.

use std::sync::Arc;

use super::{Runtime, RuntimeConfig};
use crate::backend::Backend;
use crate::pool::{ArenaConfig, ArenaPool, ReplayConfig, ReplayPool};
use crate::{Error, Result};

impl Runtime {
    /// A runtime on `backend` configured by `config` whose device pool is a [`ReplayPool`]
    /// configured by `replay`, over a device arena charged to the runtime's budget
    /// ([`ArenaPool::with_budget`]); and that replay pool, whose steps the caller marks.
    ///
    /// # Errors
    /// As [`Runtime::with_pool`] and [`ArenaPool::with_budget`].
    pub fn with_replay_pool(
        backend: Arc<dyn Backend>,
        config: RuntimeConfig,
        replay: ReplayConfig,
    ) -> Result<(Runtime, Arc<ReplayPool>)> {
        let mut made = None;
        let rt = Runtime::with_pool(backend, config, |front, budget| {
            let arena = Arc::new(ArenaPool::with_budget(
                front,
                ArenaConfig::device(),
                budget,
            )?);
            let pool = Arc::new(ReplayPool::new(arena, replay));
            made = Some(pool.clone());
            Ok(pool)
        })?;
        let pool = made.ok_or_else(|| {
            Error::invariant("with_replay_pool", "the runtime did not build its pool")
        })?;
        Ok((rt, pool))
    }
}
