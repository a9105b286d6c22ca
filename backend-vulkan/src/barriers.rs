//! Hazard tracking: which pipeline barrier, if any, must precede the next device command.
//!
//! # Why a tracker
//! The contract says a later command observes every earlier one. Vulkan gives no such guarantee
//! inside a queue: commands may overlap unless a barrier orders them. When the planner lets two
//! tensors share memory, a later writer must not race an earlier reader (write-after-read), a
//! reader must see the last writer (read-after-write) and two writers must land in order
//! (write-after-write). lavapipe executes in order and hides every missing barrier; a real GPU
//! corrupts data. The Khronos synchronization validation layer stands in for the real GPU in tests.
//!
//! # Rule
//! The tracker keeps the accesses recorded since the last barrier (`pending`), per block byte
//! range. Before a command it checks the command's accesses against `pending`: two accesses
//! conflict when they touch the same block, their byte ranges overlap, and at least one writes.
//! Reads after reads never conflict. On a conflict it emits **one global memory barrier** whose
//! source scope is every stage and write access in `pending` and whose destination scope is every
//! device stage and access this backend uses (transfer and compute, read and write). Because that
//! barrier makes everything before it visible to everything after it, `pending` is cleared — no
//! access recorded before a barrier can conflict with anything after it. This is "precise when,
//! full scope": barriers appear only between truly dependent commands (independent dispatches run
//! back to back), and the scope can never be too narrow. Global `VkMemoryBarrier`s are what
//! vendors recommend over per-buffer barriers anyway; the range tracking decides *whether*.
//!
//! Each lane (`timeline`) has its own tracker over its own commands. `pending` survives the
//! lane's submission boundaries, because a pipeline barrier orders against everything earlier in
//! submission order on the queue. Commands of the other lane are ordered with this lane's only
//! by the timeline-semaphore waits the caller asks for (`backend::lanes`), which are full
//! dependencies, so they never enter the tracker.
//!
//! Host access is separate: every submission ends with [`host_barrier`], which makes device
//! writes visible to host reads of mapped memory (`vkWaitSemaphores` alone makes them available,
//! not visible). Host writes before `vkQueueSubmit` are visible to the device by the submission's
//! implicit host-write ordering guarantee (after a flush for non-coherent memory).

use ash::vk;

use crate::conv::{Stage, access_flags, stage_flags};

/// One access of a device command to a byte range of a block.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Access {
    /// The backend's block id.
    pub block: u64,
    /// Start of the range, in bytes.
    pub offset: u64,
    /// Length of the range, in bytes (non-zero).
    pub size: u64,
    /// The stage that accesses it.
    pub stage: Stage,
    /// Whether the access writes.
    pub write: bool,
}

impl Access {
    /// Whether `self` and `other` must be ordered by a barrier: same block, overlapping byte
    /// ranges, and at least one of them writes.
    pub(crate) fn conflicts_with(&self, other: &Access) -> bool {
        self.block == other.block
            && (self.write || other.write)
            && self.offset < other.offset.saturating_add(other.size)
            && other.offset < self.offset.saturating_add(self.size)
    }
}

/// A global memory barrier to record with `vkCmdPipelineBarrier`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct GlobalBarrier {
    /// Stages that must finish first.
    pub src_stage: vk::PipelineStageFlags,
    /// Writes made available.
    pub src_access: vk::AccessFlags,
    /// Stages that wait.
    pub dst_stage: vk::PipelineStageFlags,
    /// Accesses the writes are made visible to.
    pub dst_access: vk::AccessFlags,
}

/// Every device stage this backend records commands in.
pub(crate) const DEVICE_STAGES: vk::PipelineStageFlags = vk::PipelineStageFlags::from_raw(
    vk::PipelineStageFlags::TRANSFER.as_raw() | vk::PipelineStageFlags::COMPUTE_SHADER.as_raw(),
);

/// Every device access this backend's commands make.
pub(crate) const DEVICE_ACCESSES: vk::AccessFlags = vk::AccessFlags::from_raw(
    vk::AccessFlags::TRANSFER_READ.as_raw()
        | vk::AccessFlags::TRANSFER_WRITE.as_raw()
        | vk::AccessFlags::SHADER_READ.as_raw()
        | vk::AccessFlags::SHADER_WRITE.as_raw(),
);

/// The barrier that ends every submission: device writes become visible to host reads and
/// writes of mapped memory.
pub(crate) fn host_barrier() -> GlobalBarrier {
    GlobalBarrier {
        src_stage: DEVICE_STAGES,
        src_access: vk::AccessFlags::TRANSFER_WRITE | vk::AccessFlags::SHADER_WRITE,
        dst_stage: vk::PipelineStageFlags::HOST,
        dst_access: vk::AccessFlags::HOST_READ | vk::AccessFlags::HOST_WRITE,
    }
}

/// Restricts `b` to what a transfer-only queue family supports: the `TRANSFER` stage and transfer
/// accesses (plus the host, for the end-of-batch barrier). Naming `COMPUTE_SHADER` in a barrier
/// recorded for a transfer-only family is invalid. Exact, because the transfer lane's tracker
/// sees only that lane's copies and fills.
pub(crate) fn for_transfer_queue(b: GlobalBarrier) -> GlobalBarrier {
    let stages = vk::PipelineStageFlags::TRANSFER | vk::PipelineStageFlags::HOST;
    let accesses = vk::AccessFlags::TRANSFER_READ
        | vk::AccessFlags::TRANSFER_WRITE
        | vk::AccessFlags::HOST_READ
        | vk::AccessFlags::HOST_WRITE;
    GlobalBarrier {
        src_stage: b.src_stage & stages,
        src_access: b.src_access & accesses,
        dst_stage: b.dst_stage & stages,
        dst_access: b.dst_access & accesses,
    }
}

/// Accesses since the last barrier, and the rule above.
#[derive(Debug, Default)]
pub(crate) struct HazardTracker {
    /// Invariant: no two entries of `pending` conflict with each other unless a barrier was
    /// recorded between them — i.e. every entry was recorded after the last barrier.
    pending: Vec<Access>,
    /// Barriers emitted so far (for tests and reports).
    barriers: u64,
}

impl HazardTracker {
    /// Registers the accesses of the next command and returns the barrier to record before it,
    /// if any of them conflicts with an access since the last barrier.
    ///
    /// Accesses of one command never conflict with each other here (a dispatch reading and
    /// writing overlapping bindings is the kernel's business, as in every API).
    pub(crate) fn before(&mut self, next: &[Access]) -> Option<GlobalBarrier> {
        let conflict = next
            .iter()
            .any(|n| self.pending.iter().any(|p| p.conflicts_with(n)));
        let barrier = conflict.then(|| {
            let mut src_stage = vk::PipelineStageFlags::empty();
            let mut src_access = vk::AccessFlags::empty();
            for p in &self.pending {
                src_stage |= stage_flags(p.stage);
                if p.write {
                    src_access |= access_flags(p.stage, true);
                }
            }
            self.pending.clear();
            self.barriers += 1;
            GlobalBarrier {
                src_stage,
                src_access,
                dst_stage: DEVICE_STAGES,
                dst_access: DEVICE_ACCESSES,
            }
        });
        self.pending.extend_from_slice(next);
        barrier
    }

    /// Forgets the accesses of a freed block (block ids are never reused, so this only keeps
    /// `pending` small).
    pub(crate) fn forget_block(&mut self, block: u64) {
        self.pending.retain(|a| a.block != block);
    }

    /// Number of barriers emitted since creation.
    pub(crate) fn barrier_count(&self) -> u64 {
        self.barriers
    }

    /// Number of accesses since the last barrier.
    #[cfg(test)]
    pub(crate) fn pending_len(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests;
