//! One lane's tickets: a queue, a timeline semaphore, and the command batches that carry them.
//!
//! # Design
//! Device calls of a lane are recorded into its *open batch* (one primary command buffer) and
//! return the batch's ticket, `submitted + 1`. A batch is submitted on `flush`, `wait`,
//! `completed`, when it runs out of descriptor sets or parameter slots, and when a cross-lane
//! order needs its signal submitted (`crate::backend::lanes`). Each submission signals the lane's
//! timeline semaphore to its ticket, so `completed()` is one `vkGetSemaphoreCounterValue` and
//! `wait(t)` one `vkWaitSemaphores` (wgpu-hal made the same choice over a pool of binary fences).
//!
//! # Cross-lane waits
//! A lane may have to start its later work after a value of the *other* lane's semaphore
//! ([`Timeline::order_after`]): the next submission carries that semaphore wait, a full execution
//! and memory dependency on the other lane's work up to the value, and nothing else waits. Work
//! recorded before the order is submitted first, so it does not wait. A *join*
//! ([`Timeline::join`]) is an order whose batch is submitted even when nothing else is recorded
//! into it, because its ticket was handed out: it completes only after the awaited value.
//!
//! # Sparse binds
//! A sparse bind (`crate::sparse`) goes on the compute queue between submissions: it waits for
//! both lanes' submitted work and signals the binder's own timeline semaphore, and each lane's
//! next submission waits for that value ([`Timeline::after_bind`]), so work recorded after a
//! bind sees its memory.
//!
//! # Recycling
//! A batch's command pool, descriptor pool and parameter buffer are reset and reused once the
//! semaphore passes its ticket; nothing is created per call in the steady state.
//!
//! # Stall
//! A compute lane paired with a transfer lane on a queue that writes timestamps measures how
//! long its joins held it ([`stamps`]); the timestamps are read when batches are recycled.

mod batch;
mod completion;
mod resources;
mod stamps;

use std::collections::VecDeque;
use std::time::Duration;

use ash::vk;
use gpu_allocator::vulkan::Allocator;
use tensormem_contract::{Error, Result, Ticket};

use crate::barriers::HazardTracker;
use crate::conv::align_up;
use crate::device::{Gpu, QueueLane, Timestamps};
use crate::error::{BACKEND, map_vk};
use batch::OpenBatch;
use resources::{BatchResources, destroy_resources};
use stamps::StallClock;

/// Descriptor sets (and so dispatches) per batch.
pub(crate) const SETS_PER_BATCH: u32 = 256;
/// Storage-buffer descriptors per set, at most (the largest op binds 4).
pub(crate) const MAX_STORAGE_BINDINGS: u32 = 8;
/// Bytes of uniform parameters per dispatch (16 `u32`s).
pub(crate) const PARAMS_SIZE: u64 = 64;

/// The two lanes of the contract ([`tensormem_contract::backend::lanes`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Lane {
    /// Dispatches, copies and fills of the original contract: [`tensormem_contract::Ticket`]s.
    Compute,
    /// Copies and fills beside them: [`tensormem_contract::TransferTicket`]s.
    Transfer,
}

/// One lane: its queue, its timeline semaphore, the open batch and the batches in flight.
pub(crate) struct Timeline {
    lane: Lane,
    /// The queue this lane submits to (the transfer lane may share the compute lane's).
    queue: QueueLane,
    semaphore: vk::Semaphore,
    /// The other lane's semaphore, which [`Timeline::order_after`] values refer to (null while
    /// there is no other lane).
    peer: vk::Semaphore,
    /// Value of `peer` the next submission waits for; 0 when none. Invariant: the other lane has
    /// already submitted the batch that signals it (the caller's rule, see `order_after`), so a
    /// wait never precedes its signal, even on one queue.
    peer_wait: u64,
    /// The sparse binder's semaphore and the value of it the next submission waits for (0:
    /// none); see [`Timeline::after_bind`].
    bind_wait: (vk::Semaphore, u64),
    /// The last submitted ticket.
    submitted: u64,
    open: Option<OpenBatch>,
    in_flight: VecDeque<(u64, BatchResources)>,
    free: Vec<BatchResources>,
    /// Hazards since the last barrier among this lane's commands; see `barriers`.
    pub tracker: HazardTracker,
    /// Bytes per parameter slot (64 rounded up to minUniformBufferOffsetAlignment).
    pub slot_size: u64,
    /// Whether device-lost was seen; every later call fails.
    pub lost: bool,
    /// The compute lane's waits for the transfer lane, where measured ([`stamps`]).
    stall: Option<StallClock>,
}

impl Timeline {
    /// Creates the lane's timeline semaphore at value 0.
    pub(crate) fn new(gpu: &Gpu, lane: Lane, queue: QueueLane) -> Result<Timeline> {
        let semaphore = gpu.timeline_semaphore()?;
        let slot_size = align_up(
            PARAMS_SIZE,
            gpu.limits.min_uniform_buffer_offset_alignment.max(1),
        )
        .unwrap_or(PARAMS_SIZE);
        Ok(Timeline {
            lane,
            queue,
            semaphore,
            peer: vk::Semaphore::null(),
            peer_wait: 0,
            bind_wait: (vk::Semaphore::null(), 0),
            submitted: 0,
            open: None,
            in_flight: VecDeque::new(),
            free: Vec::new(),
            tracker: HazardTracker::default(),
            slot_size,
            lost: false,
            stall: None,
        })
    }

    /// Makes `a` and `b` each other's peer: [`Timeline::order_after`] values of one are values
    /// of the other's semaphore.
    pub(crate) fn pair(a: &mut Timeline, b: &mut Timeline) {
        a.peer = b.semaphore;
        b.peer = a.semaphore;
    }

    /// Measures this (compute) lane's waits for its peer with `timestamps` of its queue. Called
    /// before any batch exists, so every batch carries its queries.
    pub(crate) fn measure_waits(&mut self, timestamps: Timestamps) {
        debug_assert!(
            self.lane == Lane::Compute && self.in_flight.is_empty() && self.free.is_empty()
        );
        self.stall = Some(StallClock::new(timestamps));
    }

    /// The time this lane's joins held it, over the batches completed so far; `None` where it
    /// is not measured.
    pub(crate) fn stalled(&self) -> Option<Duration> {
        self.stall.as_ref().map(StallClock::stalled)
    }

    /// The ticket work recorded now will carry.
    pub(crate) fn open_ticket(&self) -> Ticket {
        Ticket(self.submitted + u64::from(self.open.is_some()))
    }

    /// The last submitted ticket.
    pub(crate) fn submitted(&self) -> Ticket {
        Ticket(self.submitted)
    }

    fn map_lost(&mut self, api: &'static str) -> impl FnMut(vk::Result) -> Error + '_ {
        move |e| {
            if e == vk::Result::ERROR_DEVICE_LOST {
                self.lost = true;
            }
            map_vk(api, e, 0)
        }
    }

    /// Fails with [`Error::DeviceLost`] once the device was lost.
    pub(crate) fn check_alive(&self) -> Result<()> {
        if self.lost {
            return Err(Error::DeviceLost {
                backend: BACKEND,
                detail: "the device was lost earlier; recreate the backend".into(),
            });
        }
        Ok(())
    }

    /// Makes this lane's work recorded from now on start after the other lane's semaphore
    /// reached `value`: work already recorded is submitted first (it must not wait), and the
    /// next submission carries the wait.
    ///
    /// The caller has submitted the other lane's batch that signals `value`, so that the wait
    /// never precedes its signal (on one queue a wait submitted before its signal could never
    /// be satisfied).
    pub(crate) fn order_after(&mut self, gpu: &Gpu, value: u64) -> Result<()> {
        debug_assert!(
            self.peer != vk::Semaphore::null(),
            "vulkan: a lane without a peer"
        );
        if self.open.as_ref().is_some_and(|b| b.commands > 0) {
            self.submit(gpu)?;
        }
        self.peer_wait = self.peer_wait.max(value);
        Ok(())
    }

    /// Makes this lane's next submission wait for the sparse bind that signals `value` on
    /// `semaphore`, already submitted (the binder submitted this lane's recorded work before it).
    pub(crate) fn after_bind(&mut self, semaphore: vk::Semaphore, value: u64) {
        debug_assert!(
            self.open
                .as_ref()
                .is_none_or(|b| b.commands == 0 && !b.join)
        );
        self.bind_wait = (semaphore, value);
    }

    /// The lane's timeline semaphore, which a sparse bind waits on.
    pub(crate) fn semaphore(&self) -> vk::Semaphore {
        self.semaphore
    }

    /// [`Timeline::order_after`], returning the ticket of the batch that carries the wait: it
    /// is submitted even if nothing else is recorded into it, so the ticket completes, and only
    /// after the other lane reached `value`.
    pub(crate) fn join(
        &mut self,
        gpu: &Gpu,
        allocator: &mut Allocator,
        value: u64,
    ) -> Result<Ticket> {
        self.order_after(gpu, value)?;
        let batch = self.batch(gpu, allocator)?;
        batch.join = true;
        if let Some(stamps) = batch.res.stamps.as_mut() {
            // Nothing is recorded in the batch yet (`order_after` submitted what was).
            stamps.start(&gpu.device, batch.res.cmd);
        }
        Ok(self.open_ticket())
    }

    /// Batches in flight and free, for tests and reports.
    pub(crate) fn batch_counts(&self) -> (usize, usize) {
        (self.in_flight.len(), self.free.len())
    }

    /// Destroys every batch and the semaphore.
    ///
    /// # Safety
    /// The device is idle; called once.
    pub(crate) unsafe fn destroy(&mut self, device: &ash::Device, allocator: &mut Allocator) {
        let all = self
            .open
            .take()
            .map(|b| b.res)
            .into_iter()
            .chain(self.in_flight.drain(..).map(|(_, r)| r))
            .chain(self.free.drain(..));
        for res in all.collect::<Vec<_>>() {
            // SAFETY: the device is idle.
            unsafe { destroy_resources(device, allocator, res) };
        }
        // SAFETY: the device is idle, so no submission waits on or signals the semaphore.
        unsafe { device.destroy_semaphore(self.semaphore, None) };
    }
}
