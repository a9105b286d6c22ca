//! Completion that never blocks: tickets and host access as futures, and the one switch that lets
//! every transfer be written once for both the blocking and the awaiting caller.
//!
//! A browser's main thread may not block, and WebGPU reports completion only through promises, so
//! the contract's waits have awaitable forms ([`TicketWait`], [`HostAccessWait`]) built on the
//! backend's polling methods ([`Backend::poll_ticket`], [`Backend::poll_host_access`]). The blocking
//! [`Backend::wait_timeout`] exists only where the platform allows it (not on `wasm32`): calling it there
//! is a compile error, not a runtime panic.
//!
//! Pool and runtime code that waits (the staging belt's readback, a stalled belt, a model run) is
//! written once as an `async fn` taking a [`Waiting`] mode. [`Waiting::Blocking`] waits inside the
//! backend call, so such a future completes on its first poll and `complete_now` runs it without
//! an executor; [`Waiting::Async`] awaits the backend's futures. Neither path spins on native
//! blocking forms, and both run the same bookkeeping.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

#[cfg(doc)]
use super::TransferLanes;
use super::{Backend, BlockId, Ticket, TransferTicket, TransferWait};
use crate::{Error, Result};

/// What host access a mapped block is prepared for.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum HostAccess {
    /// [`Backend::read_mapped`].
    Read,
    /// [`Backend::write_mapped`].
    Write,
}

/// A block and the host access to prepare it for: what [`Backend::poll_host_access`] polls and
/// [`HostAccessWait`] awaits.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct MappedAccess {
    /// The host-visible block.
    pub block: BlockId,
    /// Reading or writing it through [`Backend::read_mapped`] or [`Backend::write_mapped`].
    pub access: HostAccess,
}

impl MappedAccess {
    /// Mapped `access` to `block`.
    pub fn new(block: BlockId, access: HostAccess) -> Self {
        MappedAccess { block, access }
    }
}

/// Resolves once `ticket` and every earlier ticket have finished (see [`Backend::poll_ticket`]).
#[must_use = "futures do nothing unless awaited"]
pub struct TicketWait<'a> {
    backend: &'a dyn Backend,
    ticket: Ticket,
}

impl<'a> TicketWait<'a> {
    /// A future for `ticket` on `backend`.
    pub fn new(backend: &'a dyn Backend, ticket: Ticket) -> Self {
        TicketWait { backend, ticket }
    }
}

impl Future for TicketWait<'_> {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.backend.poll_ticket(self.ticket, cx)
    }
}

/// Resolves once `block` can be read or written through mapped access without blocking (see
/// [`Backend::poll_host_access`]).
#[must_use = "futures do nothing unless awaited"]
pub struct HostAccessWait<'a> {
    backend: &'a dyn Backend,
    request: MappedAccess,
}

impl<'a> HostAccessWait<'a> {
    /// A future for mapped `access` to `block` on `backend`.
    pub fn new(backend: &'a dyn Backend, block: BlockId, access: HostAccess) -> Self {
        HostAccessWait {
            backend,
            request: MappedAccess::new(block, access),
        }
    }
}

impl Future for HostAccessWait<'_> {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.backend.poll_host_access(self.request, cx)
    }
}

/// How a transfer written once waits for the device: blocking inside the backend (native only) or
/// by awaiting its futures.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// [`Backend::wait_timeout`]; mapped access maps synchronously. Not available on `wasm32`.
    #[cfg(not(target_arch = "wasm32"))]
    Blocking,
    /// [`TicketWait`] and [`HostAccessWait`]: the caller's executor is woken by the backend.
    Async,
}

impl Waiting {
    /// Waits for `ticket` in this mode.
    ///
    /// # Errors
    /// As [`Backend::wait_timeout`] / [`Backend::poll_ticket`].
    pub async fn ticket(self, backend: &dyn Backend, ticket: Ticket) -> Result<()> {
        match self {
            #[cfg(not(target_arch = "wasm32"))]
            Waiting::Blocking => backend.wait(ticket),
            Waiting::Async => TicketWait::new(backend, ticket).await,
        }
    }

    /// Waits for transfer-lane `ticket` in this mode.
    ///
    /// # Errors
    /// As [`TransferLanes::wait_transfer`] / [`TransferLanes::poll_transfer`].
    pub async fn transfer(self, backend: &dyn Backend, ticket: TransferTicket) -> Result<()> {
        match self {
            #[cfg(not(target_arch = "wasm32"))]
            Waiting::Blocking => super::lanes::of(backend).wait_transfer(ticket),
            Waiting::Async => TransferWait::new(backend, ticket).await,
        }
    }

    /// Prepares `block` for mapped `access` in this mode (blocking backends map inside
    /// `read_mapped` / `write_mapped`, so the blocking mode has nothing to do here).
    ///
    /// # Errors
    /// As [`Backend::poll_host_access`].
    pub async fn host_access(
        self,
        backend: &dyn Backend,
        block: BlockId,
        access: HostAccess,
    ) -> Result<()> {
        match self {
            #[cfg(not(target_arch = "wasm32"))]
            Waiting::Blocking => Ok(()),
            Waiting::Async => HostAccessWait::new(backend, block, access).await,
        }
    }

    /// [`Backend::read_mapped`] of `out.len()` bytes at `offset` of `block`, once its host access
    /// is ready in this mode.
    ///
    /// # Errors
    /// As [`Waiting::host_access`] and [`Backend::read_mapped`].
    pub async fn read_mapped(
        self,
        backend: &dyn Backend,
        block: BlockId,
        offset: u64,
        out: &mut [u8],
    ) -> Result<()> {
        self.host_access(backend, block, HostAccess::Read).await?;
        backend.read_mapped(block, offset, out)
    }

    /// [`Backend::write_mapped`] of `data` at `offset` of `block`, once its host access is ready
    /// in this mode.
    ///
    /// # Errors
    /// As [`Waiting::host_access`] and [`Backend::write_mapped`].
    pub async fn write_mapped(
        self,
        backend: &dyn Backend,
        block: BlockId,
        offset: u64,
        data: &[u8],
    ) -> Result<()> {
        self.host_access(backend, block, HostAccess::Write).await?;
        backend.write_mapped(block, offset, data)
    }
}

/// Runs a future that never awaits a pending future (one that waits only in
/// [`Waiting::Blocking`] mode, or has nothing to wait for): it finishes on its first poll, so no
/// executor is needed.
///
/// # Errors
/// The future's own error, or [`Error::Backend`] naming the broken contract if it did not finish
/// (a bug: something awaited a real future in blocking mode).
#[doc(hidden)]
pub fn complete_now<T>(future: impl Future<Output = Result<T>>) -> Result<T> {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(out) => out,
        Poll::Pending => Err(Error::Backend {
            backend: "core",
            api: "complete_now",
            code: 0,
            message: "internal bug: a blocking-mode transfer awaited a pending future".into(),
        }),
    }
}

/// The default [`Backend::poll_ticket`]: submit, compare with [`Backend::completed`], and ask to be
/// polled again while the ticket is pending (a backend that can wake exactly overrides it).
#[doc(hidden)]
pub fn poll_ticket_by_polling(
    backend: &(impl Backend + ?Sized),
    ticket: Ticket,
    cx: &mut Context<'_>,
) -> Poll<Result<()>> {
    let issued = match backend.flush() {
        Ok(t) => t,
        Err(e) => return Poll::Ready(Err(e)),
    };
    if ticket > issued {
        return Poll::Ready(Err(Error::UnknownTicket {
            ticket: ticket.0,
            issued: issued.0,
        }));
    }
    match backend.completed() {
        Err(e) => Poll::Ready(Err(e)),
        Ok(done) if done >= ticket => Poll::Ready(Ok(())),
        Ok(_) => {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// Wakers waiting for tickets, woken by whatever raises the completed ticket (the host backend's
/// worker, WebGPU's `onSubmittedWorkDone` callbacks).
#[derive(Debug, Default)]
pub struct TicketWakers {
    waiting: Vec<(Ticket, Waker)>,
}

impl TicketWakers {
    /// Registers `waker` to be woken once `ticket` completes (replacing an earlier registration of
    /// the same task for that ticket).
    pub fn register(&mut self, ticket: Ticket, waker: &Waker) {
        if let Some(slot) = self
            .waiting
            .iter_mut()
            .find(|(t, w)| *t == ticket && w.will_wake(waker))
        {
            slot.1.clone_from(waker);
        } else {
            self.waiting.push((ticket, waker.clone()));
        }
    }

    /// Takes the wakers whose ticket is at or below `completed`; the caller wakes them after
    /// releasing its locks.
    pub fn take_completed(&mut self, completed: Ticket) -> Vec<Waker> {
        let mut done = Vec::new();
        self.waiting.retain(|(t, w)| {
            if *t <= completed {
                done.push(w.clone());
                false
            } else {
                true
            }
        });
        done
    }

    /// Takes every waker (device lost: each waiter must see the error).
    pub fn take_all(&mut self) -> Vec<Waker> {
        self.waiting.drain(..).map(|(_, w)| w).collect()
    }
}
