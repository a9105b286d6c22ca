//! The direct path of a device set, with a test backend that offers one: two `Linked` host
//! backends copy between each other without staging (the CUDA backend's same-GPU path has the
//! same shape, and runs only on a GPU).

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};

use super::*;
use crate::backend::{Peer, PeerCopy, PeerPath, PeerRanges};
use crate::test_adaptors::host_adaptor;

/// A host backend that copies directly into another `Linked` one (both are host memory).
struct Linked {
    host: HostBackend,
    direct: AtomicU64,
}

fn linked() -> Arc<Linked> {
    Arc::new(Linked {
        host: HostBackend::new(HostConfig::default()).unwrap(),
        direct: AtomicU64::new(0),
    })
}

host_adaptor!(Linked, peer);

impl Peer for Linked {
    /// After both sides' queued work, through the host (synchronous, so both tickets are done).
    fn copy_to_peer(&self, peer: &dyn Backend, ranges: PeerRanges) -> Result<Option<PeerCopy>> {
        let PeerRanges { src, dst } = ranges;
        let any: &dyn Any = peer;
        let Some(to) = any.downcast_ref::<Linked>() else {
            return Ok(None);
        };
        self.host.wait_timeout(self.host.flush()?, None)?;
        to.host.wait_timeout(to.host.flush()?, None)?;
        let mut buf = vec![0u8; usize::try_from(src.size).unwrap()];
        self.host.read_mapped(src.block, src.offset, &mut buf)?;
        to.host.write_mapped(dst.block, dst.offset, &buf)?;
        self.direct.fetch_add(1, Ordering::Relaxed);
        Ok(Some(PeerCopy {
            src_ticket: Ticket::DONE,
            dst_ticket: Ticket::DONE,
            path: PeerPath::SharedDevice,
        }))
    }
}

#[test]
fn a_backend_with_a_direct_path_is_used_and_counted_on_it() {
    let (a, b) = (linked(), linked());
    let set = DeviceSet::new(vec![a.clone(), b.clone()], RuntimeConfig::default()).unwrap();
    let data = f32s(1000, 0.5);
    let x = set.alloc(DeviceId(0), DType::F32, &[1000], "x").unwrap();
    let y = set.alloc(DeviceId(0), DType::F32, &[1000], "y").unwrap();
    set.upload(&x, &data).unwrap();
    // Queued, not waited for: the direct copy must follow it.
    set.dispatch(&Op::Relu { len: 1000 }, &[&x], &[&y]).unwrap();
    let z = set.transfer(&y, DeviceId(1), "z").unwrap();
    let want: Vec<f32> = data.iter().map(|v| v.max(0.0)).collect();
    assert_eq!(set.download::<f32>(&z).unwrap(), want);
    let stats = set.transfer_stats();
    assert_eq!(stats.bytes(TransferPath::SharedDevice), 4000, "{stats:?}");
    assert_eq!(stats.bytes(TransferPath::Staged), 0, "{stats:?}");
    assert_eq!(a.direct.load(Ordering::Relaxed), 1);
    assert_eq!(
        TransferPath::from(PeerPath::PeerToPeer).name(),
        "peer-to-peer"
    );
    for t in [x, y, z] {
        set.free(t).unwrap();
    }
}

#[test]
fn a_peer_of_another_kind_is_staged() {
    let a = linked();
    let set = DeviceSet::new(
        vec![a.clone(), host(HostConfig::default())],
        RuntimeConfig::default(),
    )
    .unwrap();
    let data = f32s(300, 1.5);
    let x = uploaded(&set, DeviceId(0), &data, "x");
    let z = set.transfer(&x, DeviceId(1), "z").unwrap();
    assert_eq!(set.download::<f32>(&z).unwrap(), data);
    assert_eq!(set.transfer_stats().bytes(TransferPath::Staged), 1200);
    assert_eq!(a.direct.load(Ordering::Relaxed), 0);
    for t in [x, z] {
        set.free(t).unwrap();
    }
}
