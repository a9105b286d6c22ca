//! Direct copies between two backends: the paths a driver offers that avoid staging through host
//! memory, the optional capability a backend offers through [`Extensions::peer`](crate::backend::Extensions::peer).
//!
//! Two backends on one physical device (two streams or queues of one context), or on two
//! devices with peer access, copy device to device, ordered after both timelines' earlier work,
//! with a ticket on each ([`PeerCopy`]). A backend recognises a peer of its own type through
//! `Any` (every [`Backend`] is one) and answers `Ok(None)` for any other, and so does a caller
//! whose backend has no [`Peer`]: the caller then stages through host memory. The
//! `Validated` (in `tensormem`) front offers it exactly where the backend behind it does,
//! checks the source in its own shadow table and the destination in the peer's front, and hands
//! the backend the peer's inner backend, so a backend sees a peer of its own type.

use super::{Backend, BlockRange, Ticket};
use crate::Result;

/// Direct copies to another backend, reached through [`Extensions::peer`](crate::backend::Extensions::peer). See the module doc.
pub trait Peer: Send + Sync {
    /// Copies `ranges.src` (of this backend) to `ranges.dst` (of `peer`) directly when both sit
    /// on one physical device or on two devices with peer access, ordered after the work enqueued
    /// so far on both backends. `Ok(None)` when there is no direct path to this `peer`: the
    /// caller stages through host memory. `peer` may be this backend only when the caller wants a
    /// device copy.
    ///
    /// # Errors
    /// As [`Backend::copy`] on either side.
    fn copy_to_peer(&self, peer: &dyn Backend, ranges: PeerRanges) -> Result<Option<PeerCopy>>;
}

/// The two ranges of a direct copy: the source on the backend that copies, the destination on
/// its peer. Both have the same size.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PeerRanges {
    /// The range read, of the backend whose [`Peer::copy_to_peer`] is called.
    pub src: BlockRange,
    /// The range written, of the peer.
    pub dst: BlockRange,
}

impl PeerRanges {
    /// A copy of `src` (here) to `dst` (on the peer).
    pub fn new(src: BlockRange, dst: BlockRange) -> Self {
        PeerRanges { src, dst }
    }
}

/// How a direct copy between two backends travelled.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum PeerPath {
    /// Both backends run on one physical device (two streams or queues of one context): one
    /// device-to-device copy.
    SharedDevice,
    /// Two devices with peer access between them (CUDA `cuMemcpyPeerAsync` over NVLink or PCIe).
    PeerToPeer,
}

impl PeerPath {
    /// Short lowercase name, for reports.
    pub fn name(self) -> &'static str {
        match self {
            PeerPath::SharedDevice => "shared-device",
            PeerPath::PeerToPeer => "peer-to-peer",
        }
    }
}

/// A direct copy that was enqueued: a ticket on each timeline and the path it took.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PeerCopy {
    /// On the source backend: after it, the copy no longer reads the source range, so the
    /// source may be reused or freed.
    pub src_ticket: Ticket,
    /// On the destination backend: after it, the bytes are in place.
    pub dst_ticket: Ticket,
    /// The path.
    pub path: PeerPath,
}
