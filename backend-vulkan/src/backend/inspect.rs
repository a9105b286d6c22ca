//! What a caller can read of a [`VulkanBackend`] beyond the [`Backend`](tensormem_contract::Backend)
//! contract: its configuration, counters, the validation layer's messages and the queue of the
//! transfer lane. Reading takes the backend's lock for a moment; nothing here changes state.

use std::sync::Arc;

use super::VulkanBackend;
use crate::config::{VulkanConfig, VulkanStats};
use crate::device::LaneQueue;
use crate::instance::ValidationLog;
use crate::timeline::Timeline;

impl VulkanBackend {
    /// Every validation warning and error recorded so far (empty without validation). Tests
    /// assert this is empty.
    pub fn validation_messages(&self) -> Vec<String> {
        self.validation
            .as_ref()
            .map(|v| v.messages())
            .unwrap_or_default()
    }

    /// A handle on the validation log that outlives the backend (`None` without validation), so
    /// tests can also check the messages emitted while it is destroyed.
    pub fn validation_log(&self) -> Option<Arc<ValidationLog>> {
        self.validation.clone()
    }

    /// Whether this backend runs under the validation layer.
    pub fn validation_enabled(&self) -> bool {
        self.validation.is_some()
    }

    /// The configuration the backend was created with.
    pub fn config(&self) -> &VulkanConfig {
        &self.config
    }

    /// Counters: live blocks, barriers, kernel compilations, batches, memory objects.
    pub fn stats(&self) -> VulkanStats {
        let s = self.lock();
        let lanes = || std::iter::once(&s.compute).chain(s.transfer.as_ref());
        let (in_flight, free) = lanes()
            .map(Timeline::batch_counts)
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        VulkanStats {
            blocks: s.blocks.len(),
            barriers: lanes().map(|t| t.tracker.barrier_count()).sum(),
            kernel_compiles: s.kernels.compiles,
            batches_in_flight: in_flight,
            batches_free: free,
            memory_objects: s.allocator.generate_report().blocks.len(),
        }
    }

    /// The queue the concurrent transfer lane submits to, or `None` when the lane is collapsed
    /// onto the compute queue ([`TransferQueue::Off`](crate::TransferQueue::Off)).
    pub fn transfer_queue(&self) -> Option<LaneQueue> {
        self.lock().gpu.transfer.map(|(_, kind)| kind)
    }
}
