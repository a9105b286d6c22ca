//! [`BackendAdaptor`]: a backend that wraps another and changes only some of its behaviour (a
//! test backend that counts or cuts calls, a wrapper that injects faults or lowers limits).
//!
//! Every method defaults to the same call on [`BackendAdaptor::inner`], and a blanket impl makes
//! every adaptor a [`Backend`], so an adaptor writes only the methods it changes, as a
//! [`PoolAdaptor`](crate::pool::PoolAdaptor) does for pools. The capability traits come from the
//! inner backend's [`Backend::extensions`] unless the adaptor overrides it (to offer its own
//! `Growable` that wraps the inner one, for instance). Costs one indirect call per method.

use std::any::Any;
use std::task::{Context, Poll};
#[cfg(not(target_arch = "wasm32"))]
use std::time::Duration;

use super::{
    Backend, BlockDesc, BlockId, BlockRange, Capabilities, Extensions, MappedAccess, Ticket,
};
use crate::Result;
use crate::ops::Op;

/// A [`Backend`] over another that forwards every call it does not override. See the module doc.
pub trait BackendAdaptor: Any + Send + Sync {
    /// The wrapped backend.
    type Inner: Backend + ?Sized;

    /// The backend calls go to by default.
    fn inner(&self) -> &Self::Inner;

    /// As [`Backend::capabilities`].
    fn capabilities(&self) -> &Capabilities {
        self.inner().capabilities()
    }

    /// As [`Backend::alloc_block`].
    ///
    /// # Errors
    /// The inner backend's.
    fn alloc_block(&self, desc: &BlockDesc<'_>) -> Result<BlockId> {
        self.inner().alloc_block(desc)
    }

    /// As [`Backend::free_block`].
    ///
    /// # Errors
    /// The inner backend's.
    fn free_block(&self, block: BlockId) -> Result<()> {
        self.inner().free_block(block)
    }

    /// As [`Backend::write_mapped`].
    ///
    /// # Errors
    /// The inner backend's.
    fn write_mapped(&self, block: BlockId, offset: u64, data: &[u8]) -> Result<()> {
        self.inner().write_mapped(block, offset, data)
    }

    /// As [`Backend::read_mapped`].
    ///
    /// # Errors
    /// The inner backend's.
    fn read_mapped(&self, block: BlockId, offset: u64, out: &mut [u8]) -> Result<()> {
        self.inner().read_mapped(block, offset, out)
    }

    /// As [`Backend::write_queued`].
    ///
    /// # Errors
    /// The inner backend's.
    fn write_queued(&self, dst: BlockRange, data: &[u8]) -> Result<Option<Ticket>> {
        self.inner().write_queued(dst, data)
    }

    /// As [`Backend::copy`].
    ///
    /// # Errors
    /// The inner backend's.
    fn copy(&self, src: BlockRange, dst: BlockRange) -> Result<Ticket> {
        self.inner().copy(src, dst)
    }

    /// As [`Backend::fill_zero`].
    ///
    /// # Errors
    /// The inner backend's.
    fn fill_zero(&self, range: BlockRange) -> Result<Ticket> {
        self.inner().fill_zero(range)
    }

    /// As [`Backend::dispatch`].
    ///
    /// # Errors
    /// The inner backend's.
    fn dispatch(&self, op: &Op, bindings: &[BlockRange]) -> Result<Ticket> {
        self.inner().dispatch(op, bindings)
    }

    /// As [`Backend::flush`].
    ///
    /// # Errors
    /// The inner backend's.
    fn flush(&self) -> Result<Ticket> {
        self.inner().flush()
    }

    /// As [`Backend::completed`].
    ///
    /// # Errors
    /// The inner backend's.
    fn completed(&self) -> Result<Ticket> {
        self.inner().completed()
    }

    /// As [`Backend::wait_timeout`].
    ///
    /// # Errors
    /// The inner backend's.
    #[cfg(not(target_arch = "wasm32"))]
    fn wait_timeout(&self, ticket: Ticket, timeout: Option<Duration>) -> Result<()> {
        self.inner().wait_timeout(ticket, timeout)
    }

    /// As [`Backend::poll_ticket`].
    fn poll_ticket(&self, ticket: Ticket, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.inner().poll_ticket(ticket, cx)
    }

    /// As [`Backend::poll_host_access`].
    fn poll_host_access(&self, request: MappedAccess, cx: &mut Context<'_>) -> Poll<Result<()>> {
        self.inner().poll_host_access(request, cx)
    }

    /// As [`Backend::extensions`]: the inner backend's capabilities.
    fn extensions(&self) -> Extensions<'_> {
        self.inner().extensions()
    }
}

impl<T: BackendAdaptor> Backend for T {
    fn capabilities(&self) -> &Capabilities {
        BackendAdaptor::capabilities(self)
    }
    fn alloc_block(&self, desc: &BlockDesc<'_>) -> Result<BlockId> {
        BackendAdaptor::alloc_block(self, desc)
    }
    fn free_block(&self, block: BlockId) -> Result<()> {
        BackendAdaptor::free_block(self, block)
    }
    fn write_mapped(&self, block: BlockId, offset: u64, data: &[u8]) -> Result<()> {
        BackendAdaptor::write_mapped(self, block, offset, data)
    }
    fn read_mapped(&self, block: BlockId, offset: u64, out: &mut [u8]) -> Result<()> {
        BackendAdaptor::read_mapped(self, block, offset, out)
    }
    fn write_queued(&self, dst: BlockRange, data: &[u8]) -> Result<Option<Ticket>> {
        BackendAdaptor::write_queued(self, dst, data)
    }
    fn copy(&self, src: BlockRange, dst: BlockRange) -> Result<Ticket> {
        BackendAdaptor::copy(self, src, dst)
    }
    fn fill_zero(&self, range: BlockRange) -> Result<Ticket> {
        BackendAdaptor::fill_zero(self, range)
    }
    fn dispatch(&self, op: &Op, bindings: &[BlockRange]) -> Result<Ticket> {
        BackendAdaptor::dispatch(self, op, bindings)
    }
    fn flush(&self) -> Result<Ticket> {
        BackendAdaptor::flush(self)
    }
    fn completed(&self) -> Result<Ticket> {
        BackendAdaptor::completed(self)
    }
    #[cfg(not(target_arch = "wasm32"))]
    fn wait_timeout(&self, ticket: Ticket, timeout: Option<Duration>) -> Result<()> {
        BackendAdaptor::wait_timeout(self, ticket, timeout)
    }
    fn poll_ticket(&self, ticket: Ticket, cx: &mut Context<'_>) -> Poll<Result<()>> {
        BackendAdaptor::poll_ticket(self, ticket, cx)
    }
    fn poll_host_access(&self, request: MappedAccess, cx: &mut Context<'_>) -> Poll<Result<()>> {
        BackendAdaptor::poll_host_access(self, request, cx)
    }
    fn extensions(&self) -> Extensions<'_> {
        BackendAdaptor::extensions(self)
    }
}
