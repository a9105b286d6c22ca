//! Copies between devices, as explicit transfers with tickets.
//!
//! Three kinds of path, picked per copy in this order:
//! 1. **same device** — one device copy on the device's queue ([`Backend::copy`](crate::Backend::copy)):
//!    ordered after earlier work on both ranges, its ticket recorded on both allocations;
//! 2. **direct** — across devices, when the source's backend offers a direct path to the
//!    destination's ([`Peer::copy_to_peer`](crate::Peer::copy_to_peer)): two backends on one
//!    physical device ([`TransferPath::SharedDevice`]) or two devices with peer access
//!    ([`TransferPath::PeerToPeer`], CUDA). The backend orders it after both devices' earlier
//!    work; the source allocation's use is recorded with the source-side ticket, the
//!    destination's with the destination-side one;
//! 3. **staged** — across devices otherwise: the source is read out through its device's transfer path
//!    (mapped where device memory is host-visible, else its staging belt), after every ticket of
//!    work enqueued on it; the bytes are written through the destination's path (mapped after the
//!    destination's last use, queued, or its staging belt), and the destination's ticket is
//!    returned. It moves [`STAGED_CHUNK_BYTES`] at a time through one bounce buffer, so a large
//!    tensor never needs a host copy of the whole.
//!
//! Vulkan device groups are not used: lavapipe exposes none, so such a path could not be tested.
//!
//! The bounce buffer is small on purpose: a chunk read from the source stays in the CPU's cache
//! until the destination's write reads it back, so a staged copy moves each byte through main
//! memory about as often as a single upload does (read once, written once) instead of twice.

use std::sync::Mutex;

use crate::backend::{PeerPath, PeerRanges, Ticket, Waiting};
use crate::pool::Allocation;
use crate::runtime::Runtime;
use crate::{Error, Result};

/// Bytes per chunk of a staged copy: small enough to stay in a core's cache between the read from
/// the source and the write to the destination (see the module doc), large enough that the
/// per-chunk waits of a staged path stay a small fraction of the copy.
pub const STAGED_CHUNK_BYTES: usize = 256 << 10;

/// How a copy travelled.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TransferPath {
    /// Both ends on one device: one device copy.
    SameDevice,
    /// Across two backends on one physical device: one device-to-device copy.
    SharedDevice,
    /// Across devices with peer access (CUDA peer-to-peer over NVLink or PCIe).
    PeerToPeer,
    /// Across devices, through host memory in chunks.
    Staged,
}

impl From<PeerPath> for TransferPath {
    fn from(path: PeerPath) -> Self {
        match path {
            PeerPath::SharedDevice => TransferPath::SharedDevice,
            PeerPath::PeerToPeer => TransferPath::PeerToPeer,
        }
    }
}

impl TransferPath {
    /// Short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            TransferPath::SameDevice => "same-device",
            TransferPath::SharedDevice => "shared-device",
            TransferPath::PeerToPeer => "peer-to-peer",
            TransferPath::Staged => "staged",
        }
    }
}

/// Copies made through a [`DeviceSet`](crate::DeviceSet), per path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TransferStats {
    /// `(path, copies, bytes)` for each path used so far.
    pub paths: Vec<(TransferPath, u64, u64)>,
}

impl TransferStats {
    /// Bytes moved on `path`.
    pub fn bytes(&self, path: TransferPath) -> u64 {
        self.paths.iter().find(|p| p.0 == path).map_or(0, |p| p.2)
    }
}

/// The running counters behind [`TransferStats`].
#[derive(Default)]
pub(crate) struct Counters(Mutex<TransferStats>);

impl Counters {
    pub(crate) fn add(&self, path: TransferPath, bytes: u64) {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match s.paths.iter_mut().find(|p| p.0 == path) {
            Some(p) => {
                p.1 += 1;
                p.2 += bytes;
            }
            None => s.paths.push((path, 1, bytes)),
        }
    }

    pub(crate) fn snapshot(&self) -> TransferStats {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// One end of a copy: a runtime, an allocation of its device pool and a byte offset in it.
#[derive(Clone, Copy)]
pub(crate) struct End<'a> {
    rt: &'a Runtime,
    alloc: Allocation,
    offset: u64,
}

impl<'a> End<'a> {
    pub(crate) fn new(rt: &'a Runtime, alloc: Allocation, offset: u64) -> Self {
        End { rt, alloc, offset }
    }
}

/// Copies `size` bytes from `src` to `dst` on the cheapest path (module doc). Returns the ticket
/// on `dst`'s device after which the bytes are in place, and the path taken.
pub(crate) async fn copy_range(
    waiting: Waiting,
    src: End<'_>,
    dst: End<'_>,
    size: u64,
) -> Result<(Ticket, TransferPath)> {
    if size == 0 {
        return Err(Error::ZeroSize { what: "copy" });
    }
    if same_runtime(src.rt, dst.rt) {
        return Ok((same_device(src, dst, size)?, TransferPath::SameDevice));
    }
    if let Some(direct) = direct(src, dst, size)? {
        return Ok(direct);
    }
    let mut buf = vec![0u8; STAGED_CHUNK_BYTES.min(usize::try_from(size).unwrap_or(usize::MAX))];
    let mut last = Ticket::DONE;
    let mut done = if src.rt.host_visible() && dst.rt.host_visible() {
        mapped(waiting, src, dst, size, &mut buf).await?
    } else {
        0
    };
    while done < size {
        let n = (size - done).min(buf.len() as u64) as usize;
        let chunk = &mut buf[..n];
        src.rt
            .read_bytes_with(waiting, src.alloc, src.offset + done, chunk)
            .await?;
        let t = dst
            .rt
            .write_bytes_with(waiting, dst.alloc, dst.offset + done, chunk)
            .await?;
        last = last.max(t);
        done += n as u64;
    }
    Ok((last, TransferPath::Staged))
}

/// The staged path when both devices map their memory: the waits for each end's last use, the
/// range checks and the use records happen once per copy instead of once per chunk, and each
/// chunk is two mapped copies. Covers the whole copy words of `size`; returns the bytes done
/// (the caller moves a ragged tail through the general path, which keeps the destination's
/// bytes after it).
async fn mapped(
    waiting: Waiting,
    src: End<'_>,
    dst: End<'_>,
    size: u64,
    buf: &mut [u8],
) -> Result<u64> {
    let align = src
        .rt
        .backend()
        .capabilities()
        .copy_align
        .max(1)
        .max(dst.rt.backend().capabilities().copy_align.max(1));
    let whole = size / align * align;
    let chunk = (buf.len() as u64 / align * align).max(align);
    if whole == 0 || chunk > buf.len() as u64 {
        return Ok(0);
    }
    let (sp, dp) = (src.rt.device_pool(), dst.rt.device_pool());
    let (from, _from_lease) =
        src.rt
            .sub_range(sp.as_ref(), src.alloc, src.offset, whole, "copy")?;
    let (to, _to_lease) = dst
        .rt
        .sub_range(dp.as_ref(), dst.alloc, dst.offset, whole, "copy")?;
    let (sb, db) = (src.rt.backend().as_ref(), dst.rt.backend().as_ref());
    waiting
        .ticket(sb, src.rt.last_use(sp.as_ref(), src.alloc, from)?)
        .await?;
    waiting
        .ticket(db, dst.rt.last_use(dp.as_ref(), dst.alloc, to)?)
        .await?;
    let mut done = 0u64;
    while done < whole {
        let n = (whole - done).min(chunk);
        let part = &mut buf[..n as usize];
        waiting
            .read_mapped(sb, from.block, from.offset + done, part)
            .await?;
        waiting
            .write_mapped(db, to.block, to.offset + done, part)
            .await?;
        done += n;
    }
    // Synchronous copies have completed: the leases end here.
    Ok(done)
}

/// Whether two runtime handles share one device's pools (two runtimes of one id, from two sets,
/// do not).
fn same_runtime(a: &Runtime, b: &Runtime) -> bool {
    std::ptr::eq(a.front(), b.front())
}

/// One device copy, recorded as a use of both allocations.
fn same_device(src: End<'_>, dst: End<'_>, size: u64) -> Result<Ticket> {
    let rt = src.rt;
    let pool = rt.device_pool();
    let (from, _from_lease) = rt.sub_range(pool.as_ref(), src.alloc, src.offset, size, "copy")?;
    let (to, _to_lease) = rt.sub_range(pool.as_ref(), dst.alloc, dst.offset, size, "copy")?;
    let ticket = rt.backend().copy(from, to)?;
    pool.mark_used(src.alloc.handle, ticket)?;
    pool.mark_used(dst.alloc.handle, ticket)?;
    Ok(ticket)
}

/// A direct copy where the source's backend offers one to the destination's; `None` otherwise.
fn direct(src: End<'_>, dst: End<'_>, size: u64) -> Result<Option<(Ticket, TransferPath)>> {
    let Some(peer) = src.rt.backend().peer() else {
        return Ok(None);
    };
    let (sp, dp) = (src.rt.device_pool(), dst.rt.device_pool());
    let (from, _from_lease) = src
        .rt
        .sub_range(sp.as_ref(), src.alloc, src.offset, size, "copy")?;
    let (to, _to_lease) = dst
        .rt
        .sub_range(dp.as_ref(), dst.alloc, dst.offset, size, "copy")?;
    let Some(copied) = peer.copy_to_peer(dst.rt.backend().as_ref(), PeerRanges::new(from, to))?
    else {
        return Ok(None);
    };
    sp.mark_used(src.alloc.handle, copied.src_ticket)?;
    dp.mark_used(dst.alloc.handle, copied.dst_ticket)?;
    Ok(Some((copied.dst_ticket, copied.path.into())))
}
