//! Remembers a lost device, so every later call fails fast.
//!
//! CUDA reports a sticky error (illegal address, launch failure, …) once per API call that
//! observes it, and cudarc's context clears its stored copy when read: without a latch, a wait on
//! a ticket the ring already retired would return `Ok` after the context died, and callers would
//! read garbage. The first [`Error::DeviceLost`] seen by any call is kept here; from then on every
//! entry point returns it (PyTorch and RMM treat these errors the same way: the process must
//! recreate the context).

#![forbid(unsafe_code)]

use std::sync::OnceLock;

use tensormem_contract::{Error, Result};

use crate::error::BACKEND;

/// The first sticky error seen, if any.
#[derive(Debug, Default)]
pub(crate) struct Health {
    lost: OnceLock<String>,
}

impl Health {
    /// Fails with [`Error::DeviceLost`] once a sticky error was seen.
    ///
    /// # Errors
    /// [`Error::DeviceLost`] naming the first sticky error.
    pub(crate) fn check(&self) -> Result<()> {
        match self.lost.get() {
            None => Ok(()),
            Some(detail) => Err(lost(detail)),
        }
    }

    /// Passes `result` through, remembering it when it is a lost device.
    pub(crate) fn remember_loss<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(Error::DeviceLost { detail, .. }) = &result {
            let _ = self.lost.set(detail.clone());
        }
        result
    }

    /// Whether a sticky error was seen.
    #[cfg(test)]
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.get().is_some()
    }
}

fn lost(detail: &str) -> Error {
    Error::DeviceLost {
        backend: BACKEND,
        detail: format!("an earlier call failed with a sticky error ({detail})"),
    }
}

#[cfg(test)]
mod tests;
