//! Direct copies between two backends ([`Backend::copy_to_peer`](super::Backend::copy_to_peer)):
//! the paths a driver offers that avoid staging through host memory.

use super::Ticket;

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
