//! The size checks that the validating front and the backends make alike: each refuses with the
//! same variant and numbers wherever it runs, so a direct call to a backend and a call through
//! the front read the same.

use super::{Error, Result};

impl Error {
    /// `Ok` when `requested` bytes of `what` are at most `limit`, the one check behind every
    /// [`Error::TooLarge`] against a fixed limit.
    ///
    /// # Errors
    /// [`Error::TooLarge`] naming `what` and `limit_name` when `requested` exceeds `limit`.
    pub fn check_limit(
        what: &'static str,
        requested: u64,
        limit: u64,
        limit_name: &'static str,
    ) -> Result<()> {
        Ok(tensormem_plan::Error::check_limit(
            what, requested, limit, limit_name,
        )?)
    }

    /// `Ok` for a block size a device with `max_block_size` accepts.
    ///
    /// # Errors
    /// [`Error::ZeroSize`] for 0, [`Error::TooLarge`] above `max_block_size`.
    pub fn check_block_size(size: u64, max_block_size: u64) -> Result<()> {
        if size == 0 {
            return Err(Error::ZeroSize { what: "block" });
        }
        Error::check_limit("block", size, max_block_size, "max_block_size")
    }
}

#[cfg(test)]
mod tests;
