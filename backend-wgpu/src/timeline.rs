//! Tickets over wgpu submissions.
//!
//! Device work is recorded into one open `CommandEncoder` (the *open batch*); its ticket is the
//! number the batch's submission will get, `open`. `submit` finishes the encoder, submits it,
//! remembers `(ticket, SubmissionIndex)` and registers `Queue::on_submitted_work_done`, whose
//! callback raises the shared `completed` counter and wakes the tasks awaiting those tickets.
//! wgpu completes submissions in order and runs the callbacks in order (natively during
//! `Device::poll`; in a browser when WebGPU resolves the `onSubmittedWorkDone` promise), so
//! `completed` is exactly "every ticket up to here has finished". Tickets are our own counter, not wgpu's `SubmissionIndex`, because an
//! adopted device may also carry the application's submissions.
//!
//! `queue.write_buffer` data lands at the start of the *next* submission, before that
//! submission's command buffers; [`Timeline::before_queued_write`] therefore submits a dirty
//! batch first so a queued write never overtakes earlier enqueued commands.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tensormem_contract::{Error, Result, Ticket, TicketWakers};

use crate::error::lock;

/// The open batch and the submissions in flight.
#[derive(Debug)]
pub(crate) struct Timeline {
    /// Encoder of the open batch, created on first use.
    encoder: Option<wgpu::CommandEncoder>,
    /// Whether the open batch holds work (commands or a queued write).
    dirty: bool,
    /// Ticket of the open batch: one more than the last submitted ticket. Starts at 1.
    open: u64,
    /// Submitted tickets not yet known complete, oldest first.
    in_flight: VecDeque<(u64, wgpu::SubmissionIndex)>,
    /// Highest ticket whose submission and all earlier ones finished; raised by callbacks.
    completed: Arc<AtomicU64>,
    /// Tasks awaiting tickets; woken by the callbacks (and by the device-lost callback).
    wakers: Arc<Mutex<TicketWakers>>,
}

impl Timeline {
    /// An empty timeline whose callbacks wake tasks registered in `wakers`.
    pub(crate) fn new(wakers: Arc<Mutex<TicketWakers>>) -> Self {
        Timeline {
            encoder: None,
            dirty: false,
            open: 1,
            in_flight: VecDeque::new(),
            completed: Arc::new(AtomicU64::new(0)),
            wakers,
        }
    }

    /// Registers a task to be woken once `ticket` completes.
    pub(crate) fn register(&self, ticket: Ticket, waker: &std::task::Waker) {
        lock(&self.wakers).register(ticket, waker);
    }

    /// The open batch's encoder, for recording work. Call [`Timeline::enqueued`] after recording.
    pub(crate) fn encoder(&mut self, device: &wgpu::Device) -> &mut wgpu::CommandEncoder {
        self.encoder.get_or_insert_with(|| {
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("tensormem batch"),
            })
        })
    }

    /// Marks the open batch as holding work and returns its ticket.
    pub(crate) fn enqueued(&mut self) -> u64 {
        self.dirty = true;
        self.open
    }

    /// Ticket of the open batch (what work enqueued now will carry).
    pub(crate) fn open(&self) -> u64 {
        self.open
    }

    /// Ticket of the last enqueued work: the open batch when dirty, else the last submission.
    pub(crate) fn last_enqueued(&self) -> u64 {
        if self.dirty { self.open } else { self.open - 1 }
    }

    /// Prepares for a `queue.write_buffer`: submits the open batch if it holds commands, so the
    /// write (which wgpu executes before the next submission's commands) stays in order.
    pub(crate) fn before_queued_write(&mut self, queue: &wgpu::Queue) {
        if self.encoder.is_some() && self.dirty {
            self.submit(queue);
        }
    }

    /// Submits the open batch if it holds work. Returns the last enqueued ticket.
    pub(crate) fn submit(&mut self, queue: &wgpu::Queue) -> u64 {
        if !self.dirty {
            return self.open - 1;
        }
        let ticket = self.open;
        let buffers = self.encoder.take().map(|e| e.finish());
        let index = queue.submit(buffers);
        let completed = Arc::clone(&self.completed);
        let wakers = Arc::clone(&self.wakers);
        queue.on_submitted_work_done(move || {
            completed.fetch_max(ticket, Ordering::AcqRel);
            let woken = lock(&wakers).take_completed(Ticket(ticket));
            woken.into_iter().for_each(std::task::Waker::wake);
        });
        self.in_flight.push_back((ticket, index));
        self.open += 1;
        self.dirty = false;
        ticket
    }

    /// The highest completed ticket as the callbacks last reported it; drops finished entries.
    pub(crate) fn completed(&mut self) -> u64 {
        let done = self.completed.load(Ordering::Acquire);
        while self.in_flight.front().is_some_and(|(t, _)| *t <= done) {
            self.in_flight.pop_front();
        }
        done
    }

    /// Records that `ticket` finished (a blocking poll for it returned).
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn mark_completed(&mut self, ticket: u64) {
        self.completed.fetch_max(ticket, Ordering::AcqRel);
    }

    /// The submission carrying `ticket`, if it is in flight (submitted, not known complete).
    pub(crate) fn submission(&self, ticket: u64) -> Option<wgpu::SubmissionIndex> {
        self.in_flight
            .iter()
            .find(|(t, _)| *t >= ticket)
            .map(|(_, index)| index.clone())
    }

    /// Checks that `ticket` was issued.
    ///
    /// # Errors
    /// [`Error::UnknownTicket`] for a ticket beyond the last enqueued work.
    pub(crate) fn check_issued(&self, ticket: Ticket) -> Result<()> {
        let last = self.last_enqueued();
        if ticket.0 > last {
            return Err(Error::UnknownTicket {
                ticket: ticket.0,
                issued: last,
            });
        }
        Ok(())
    }
}
