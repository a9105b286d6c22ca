//! Direct copies between two CUDA backends ([`tensormem_contract::Peer::copy_to_peer`]).
//!
//! The route depends on where the two backends' contexts live ([`choose_route`]):
//!
//! * **one context** (two backends on one GPU's primary context, as the `cuda-2dev` conformance
//!   target builds them): one `cuMemcpyAsync`, device to device;
//! * **one device, two contexts** (an adopted stream of another context): `cuMemcpyPeerAsync`,
//!   which names both contexts; no peer access is needed on one device;
//! * **two devices with peer access** (`cuDeviceCanAccessPeer`): peer access is enabled once per
//!   pair (`cuCtxEnablePeerAccess`, from the destination's context), then `cuMemcpyPeerAsync`
//!   over NVLink or PCIe;
//! * otherwise **no route**: the caller stages through host memory. Also when either backend was
//!   created with [`crate::CudaDesc::direct_copies`] off.
//!
//! Ordering: an event recorded on the source's stream after its earlier work is waited for by
//! the destination's stream, which runs the copy (so the copy also follows the destination's
//! earlier work) and records a second event; the source's stream waits for that one, and the
//! ticket of that wait is the source's ticket. Both tickets are ordinary submissions on their
//! timelines: the pools defer frees to them as to any other.

use std::any::Any;
use std::sync::Mutex;

use cudarc::driver::sys;
use tensormem_contract::{Backend, PeerCopy, PeerPath, PeerRanges, Result};

use crate::CudaBackend;
use crate::conv::to_usize;
use crate::error::map_driver_err;
use crate::timeline::lock;

/// How one copy between two contexts travels.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// One context: `cuMemcpyAsync`.
    SameContext,
    /// One device, two contexts: `cuMemcpyPeerAsync` without peer access.
    SameDevice,
    /// Two devices with peer access: `cuMemcpyPeerAsync` after `cuCtxEnablePeerAccess`.
    Peer,
}

impl Route {
    /// The path reported for the copy.
    pub(crate) fn path(self) -> PeerPath {
        match self {
            Route::SameContext | Route::SameDevice => PeerPath::SharedDevice,
            Route::Peer => PeerPath::PeerToPeer,
        }
    }
}

/// The route between two contexts, from whether they are one context, on one device, and
/// whether the destination's device can access the source's (`cuDeviceCanAccessPeer`, only asked
/// for two devices). `None`: stage through host memory.
pub(crate) fn choose_route(
    same_context: bool,
    same_device: bool,
    can_access_peer: impl FnOnce() -> Result<bool>,
) -> Result<Option<Route>> {
    Ok(if same_context {
        Some(Route::SameContext)
    } else if same_device {
        Some(Route::SameDevice)
    } else if can_access_peer()? {
        Some(Route::Peer)
    } else {
        None
    })
}

/// The routes a backend (as destination) found to source contexts, and peer access enabled,
/// so each pair asks the driver once.
#[derive(Debug, Default)]
pub(crate) struct PeerLinks(Mutex<Vec<(usize, Option<Route>)>>);

impl CudaBackend {
    /// [`tensormem_contract::Peer::copy_to_peer`]: `self` is the source, `peer` the destination.
    pub(crate) fn copy_to_peer_cuda(
        &self,
        peer: &dyn Backend,
        PeerRanges { src, dst }: PeerRanges,
    ) -> Result<Option<PeerCopy>> {
        let any: &dyn Any = peer;
        let Some(to) = any
            .downcast_ref::<CudaBackend>()
            .filter(|to| self.direct_copies && to.direct_copies)
        else {
            return Ok(None);
        };
        let Some(route) = to.route_from(self)? else {
            return Ok(None);
        };
        let bytes = to_usize(src.size, "peer copy")?;
        self.bind()?;
        let from_addr = self.device_addr(src)?;
        let ready = self.timeline.mark()?;
        to.bind()?;
        let to_addr = to.device_addr(dst)?;
        let (src_ctx, dst_ctx) = (self.ctx.cu_ctx(), to.ctx.cu_ctx());
        let stream = to.stream().cu_stream();
        let (dst_ticket, done) = to.timeline.submit_after(&ready, || {
            let copied = match route {
                // SAFETY: both ranges were checked inside live blocks of one context.
                Route::SameContext => unsafe {
                    sys::cuMemcpyAsync(to_addr, from_addr, bytes, stream)
                },
                // SAFETY: as above, each address in the context named with it.
                Route::SameDevice | Route::Peer => unsafe {
                    sys::cuMemcpyPeerAsync(to_addr, dst_ctx, from_addr, src_ctx, bytes, stream)
                },
            };
            copied.result().map_err(|e| {
                map_driver_err(
                    match route {
                        Route::SameContext => "cuMemcpyAsync",
                        _ => "cuMemcpyPeerAsync",
                    },
                    e,
                )
            })
        })?;
        self.bind()?;
        let src_ticket = self.timeline.wait_for(&done)?;
        Ok(Some(PeerCopy {
            src_ticket,
            dst_ticket,
            path: route.path(),
        }))
    }

    /// The route from `src`'s context to this backend's, enabling peer access the first time a
    /// peer route is found.
    fn route_from(&self, src: &CudaBackend) -> Result<Option<Route>> {
        let key = src.ctx.cu_ctx() as usize;
        let mut links = lock(&self.peers.0);
        if let Some((_, route)) = links.iter().find(|(k, _)| *k == key) {
            return Ok(*route);
        }
        let (here, there) = (self.ctx.cu_device(), src.ctx.cu_device());
        let route = choose_route(self.ctx.cu_ctx() == src.ctx.cu_ctx(), here == there, || {
            let mut can = 0;
            // SAFETY: `can` is valid for writes; both are device handles of live contexts.
            unsafe { sys::cuDeviceCanAccessPeer(&mut can, here, there) }
                .result()
                .map_err(|e| map_driver_err("cuDeviceCanAccessPeer", e))?;
            Ok(can != 0)
        })?;
        if route == Some(Route::Peer) {
            self.bind()?;
            // SAFETY: the source's context is live (`src` holds it); access is granted to this
            // backend's context, current on this thread.
            match unsafe { sys::cuCtxEnablePeerAccess(src.ctx.cu_ctx(), 0) } {
                sys::CUresult::CUDA_SUCCESS
                | sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {}
                code => {
                    return Err(map_driver_err(
                        "cuCtxEnablePeerAccess",
                        cudarc::driver::DriverError(code),
                    ));
                }
            }
        }
        links.push((key, route));
        Ok(route)
    }
}

#[cfg(test)]
mod tests;
