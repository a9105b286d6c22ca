//! The front's checks of managed memory and direct copies, on the host backend (managed memory
//! that is host memory, no direct copies), on a host backend that offers neither (the trait's
//! defaults) and on one that offers a direct path that never applies (`Peered`).

use std::sync::Arc;

use super::*;
use crate::backend::{BlockDesc, ManagedMemory, PeerPath, managed};
use crate::host::{HostBackend, HostConfig};
use crate::ops::Op;
use crate::ops::samples::support::f32_bytes;
use crate::test_adaptors::host_adaptor;
use crate::validate::tests::{block, range};

fn host_front() -> Validated {
    Validated::new(Arc::new(HostBackend::new(HostConfig::default()).unwrap()))
}

/// The host backend with the trait's defaults for everything optional: no managed memory, no
/// direct copies.
struct Plain(HostBackend);

impl crate::backend::BackendAdaptor for Plain {
    type Inner = HostBackend;
    fn inner(&self) -> &HostBackend {
        &self.0
    }
    fn extensions(&self) -> crate::backend::Extensions<'_> {
        crate::backend::Extensions::default()
    }
}

/// The host backend with a direct path that has no route to any peer: the front offers the
/// capability and checks every call, and the backend answers `None` (stage).
struct Peered {
    host: HostBackend,
}

host_adaptor!(Peered, peer);

impl Peer for Peered {
    fn copy_to_peer(&self, peer: &dyn Backend, ranges: PeerRanges) -> Result<Option<PeerCopy>> {
        let _ = (peer, ranges);
        Ok(None)
    }
}

fn peered_front() -> Validated {
    Validated::new(Arc::new(Peered {
        host: HostBackend::new(HostConfig::default()).unwrap(),
    }))
}

#[test]
fn managed_blocks_on_the_host_bind_map_and_prefetch_as_no_ops() {
    let f = host_front();
    assert_eq!(managed::memory_of(&f), ManagedMemory::SameMemory);
    let m = block(&f, MemoryKind::Managed, 64);
    let x = [-1.0f32, 2.0, -3.0, 4.0];
    f.write_mapped(m, 0, &f32_bytes(&x)).unwrap();
    assert_eq!(
        f.prefetch(range(m, 0, 16), Residence::Device).unwrap(),
        Ticket::DONE,
        "nothing moves where device memory is host memory"
    );
    let t = f
        .dispatch(&Op::Relu { len: 4 }, &[range(m, 0, 16), range(m, 32, 16)])
        .unwrap();
    f.wait_timeout(t, None).unwrap();
    let mut out = [0u8; 16];
    f.read_mapped(m, 32, &mut out).unwrap();
    assert_eq!(out.to_vec(), f32_bytes(&[0.0, 2.0, 0.0, 4.0]));
}

#[test]
fn prefetches_name_a_live_managed_range() {
    let f = host_front();
    let d = block(&f, MemoryKind::DeviceLocal, 64);
    let m = block(&f, MemoryKind::Managed, 64);
    assert!(matches!(
        f.prefetch(range(d, 0, 64), Residence::Host),
        Err(Error::WrongMemoryKind {
            role: "prefetch",
            allowed: "managed",
            ..
        })
    ));
    assert!(matches!(
        f.prefetch(range(m, 32, 64), Residence::Device),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        f.prefetch(range(m, 0, 0), Residence::Device),
        Err(Error::ZeroSize { .. })
    ));
    f.free_block(m).unwrap();
    assert!(matches!(
        f.prefetch(range(m, 0, 64), Residence::Device),
        Err(Error::UnknownBlock { .. })
    ));
}

#[test]
fn without_managed_memory_the_kind_is_refused_before_the_backend() {
    let plain = Arc::new(Plain(HostBackend::new(HostConfig::default()).unwrap()));
    let f = Validated::new(plain.clone());
    assert!(
        f.extensions().managed.is_none(),
        "the front offers what the backend does"
    );
    assert_eq!(managed::memory_of(&f), ManagedMemory::Unsupported);
    let refused = f.alloc_block(&BlockDesc {
        kind: MemoryKind::Managed,
        size: 64,
        label: "m",
    });
    assert!(
        matches!(refused, Err(Error::Unsupported { .. })),
        "{refused:?}"
    );
    let d = block(&f, MemoryKind::DeviceLocal, 64);
    assert!(matches!(
        managed::prefetch(&f, range(d, 0, 64), Residence::Device),
        Err(Error::Unsupported { .. })
    ));
    // A direct call on the front's own `Managed` refuses as well.
    assert!(matches!(
        f.prefetch(range(d, 0, 64), Residence::Device),
        Err(Error::Unsupported { .. })
    ));
    // Not a broken device: other work goes on.
    f.fill_zero(range(d, 0, 64)).unwrap();
}

#[test]
fn direct_copies_are_checked_on_both_fronts_and_default_to_none() {
    assert!(
        host_front().extensions().peer.is_none(),
        "the host backend has no direct path"
    );
    let (a, b) = (peered_front(), peered_front());
    let src = block(&a, MemoryKind::DeviceLocal, 64);
    let up = block(&a, MemoryKind::Upload, 64);
    let down = block(&a, MemoryKind::Readback, 64);
    let dst = block(&b, MemoryKind::DeviceLocal, 64);
    // No route between these two: the caller stages.
    assert_eq!(
        a.copy_to_peer(&b, PeerRanges::new(range(src, 0, 64), range(dst, 0, 64)))
            .unwrap(),
        None
    );
    assert!(matches!(
        a.copy_to_peer(&b, PeerRanges::new(range(src, 0, 64), range(dst, 0, 32))),
        Err(Error::SizeMismatch { .. })
    ));
    assert!(matches!(
        a.copy_to_peer(&b, PeerRanges::new(range(down, 0, 64), range(dst, 0, 64))),
        Err(Error::WrongMemoryKind {
            role: "copy source",
            ..
        })
    ));
    // The destination is looked up in the peer's front, not the source's.
    assert!(matches!(
        a.copy_to_peer(&b, PeerRanges::new(range(src, 0, 64), range(up, 0, 64))),
        Err(Error::UnknownBlock { .. }) | Err(Error::WrongMemoryKind { .. })
    ));
    assert!(matches!(
        a.copy_to_peer(&b, PeerRanges::new(range(src, 0, 64), range(dst, 32, 64))),
        Err(Error::OutOfBounds { .. })
    ));
    // One front as both ends: the ranges must not overlap.
    assert!(matches!(
        a.copy_to_peer(&a, PeerRanges::new(range(src, 0, 64), range(src, 32, 64))),
        Err(Error::OutOfBounds { .. }) | Err(Error::Overlap { .. })
    ));
    assert!(matches!(
        a.copy_to_peer(&a, PeerRanges::new(range(src, 0, 32), range(src, 16, 32))),
        Err(Error::Overlap { .. })
    ));
    assert_eq!(PeerPath::SharedDevice.name(), "shared-device");
}
