//! [`DeviceLimits`]: limits below the backend's that the front reports and enforces, so tests
//! reach a large device's paths (segments, split bindings) on a small one. Separate from the front
//! because it is configuration, checked once when the front is built.

use crate::backend::Capabilities;
use crate::{Error, Result};

/// Device limits lower than the backend's, which the front reports as its capabilities and
/// enforces ([`Validated::with_limits`], [`RuntimeConfig::limits`](crate::RuntimeConfig)).
///
/// They exist so that tests reach the paths of a large device on a small one: a tensor larger than
/// `max_block_size` is split into segments in several blocks, an operand larger than
/// `max_binding_size` is bound as several dispatches, on every backend and in a browser, with
/// kilobytes instead of WebGPU's 256 MiB buffers and 128 MiB bindings. A limit only lowers: one
/// above the backend's is the backend's.
///
/// [`Validated::with_limits`]: crate::Validated::with_limits
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Largest block in bytes. Default `None` (the backend's). At least the binding alignment
    /// and a multiple of the copy alignment, so one aligned segment always fits in a block.
    pub max_block_size: Option<u64>,
    /// Largest kernel binding in bytes (at most the block limit). Default `None` (the backend's).
    /// At least the binding alignment.
    pub max_binding_size: Option<u64>,
}

impl DeviceLimits {
    /// `caps` with these limits applied.
    ///
    /// # Errors
    /// [`ArgumentError::Invalid`](crate::ArgumentError::Invalid) for a limit below the binding
    /// alignment, [`Error::Misaligned`] for a block limit that is not a multiple of the copy
    /// alignment.
    pub(super) fn apply(&self, caps: &Capabilities) -> Result<Capabilities> {
        let mut caps = caps.clone();
        let floor = caps.binding_align.max(caps.copy_align).max(1);
        for (name, limit) in [
            ("max_block_size", self.max_block_size),
            ("max_binding_size", self.max_binding_size),
        ] {
            if limit.is_some_and(|l| l < floor) {
                return Err(crate::ArgumentError::invalid_value(
                    format!("device limit {name}"),
                    limit.unwrap_or(0).to_string(),
                    format!("at least the binding alignment ({floor} bytes)"),
                )
                .into());
            }
        }
        if let Some(block) = self.max_block_size {
            if !block.is_multiple_of(caps.copy_align.max(1)) {
                return Err(Error::Misaligned {
                    what: "device limit max_block_size",
                    value: block,
                    align: caps.copy_align,
                    align_name: "copy_align",
                });
            }
            caps.max_block_size = caps.max_block_size.min(block);
        }
        if let Some(binding) = self.max_binding_size {
            caps.max_binding_size = caps.max_binding_size.min(binding);
        }
        caps.max_binding_size = caps.max_binding_size.min(caps.max_block_size);
        Ok(caps)
    }
}
