//! The host backend behind the runtime's layers: its holes through the validating front, and
//! its transfer lane under the runtime's deferred frees.
#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use std::sync::Arc;
use std::time::Duration;

use tensormem::{
    Backend, BlockDesc, BlockRange, DType, Error, Growable, HostBackend, HostConfig, MemoryKind,
    Runtime, RuntimeConfig, Validated,
};

fn slow(delay_ms: u64) -> HostBackend {
    HostBackend::new(HostConfig {
        worker_delay: Duration::from_millis(delay_ms),
        ..HostConfig::default()
    })
    .unwrap()
}

/// Misaligned, overlapping and unknown ranges of a reserved block are typed errors at the front.
#[test]
fn holes_through_the_front_refuse_bad_ranges() {
    let host = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    let page = host
        .extensions()
        .growable
        .unwrap()
        .in_place_growth()
        .granularity;
    let front = Validated::new(host.clone());
    let (fb, _) = {
        let desc = BlockDesc {
            kind: MemoryKind::DeviceLocal,
            size: 4 * page,
            label: "front",
        };
        (front.reserve_block(&desc, 16 * page).unwrap(), ())
    };
    assert!(matches!(
        front.decommit_range(fb, 1, page),
        Err(Error::Misaligned { .. })
    ));
    assert!(matches!(
        front.remap_range(fb, 0, page, 2 * page),
        Err(Error::Overlap { .. })
    ));
    assert!(matches!(
        front.commit_range(fb, 4 * page, page),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        front.decommit_range(fb, 0, 0),
        Err(Error::ZeroSize { .. })
    ));
    front.decommit_range(fb, page, page).unwrap();
    front.remap_range(fb, 0, page, page).unwrap();
    front.free_block(fb).unwrap();
}

/// Regression guard for the free path: a tensor freed while the (slow) transfer lane still
/// reads it is not handed out again before the transfer ran (the front joins the transfer).
#[test]
fn freed_while_the_transfer_lane_reads_is_not_reused_early() {
    let b: Arc<dyn Backend> = Arc::new(slow(20));
    let rt = Runtime::new(b, RuntimeConfig::default()).unwrap();
    let x = vec![1.5f32; 256];
    let a = rt
        .tensor_from(DType::F32, &[256], &x, "read by the transfer lane")
        .unwrap();
    let src = rt.device_pool().resolve(a.allocation().handle).unwrap();
    let front = rt.backend().clone();
    let rb = front
        .alloc_block(&BlockDesc::new(MemoryKind::Readback, 1024, "test"))
        .unwrap();
    let t = tensormem::backend::lanes::of(front.as_ref())
        .transfer_copy(src, BlockRange::whole(rb, 1024))
        .unwrap();
    rt.free(a).unwrap();
    let y = vec![-2.0f32; 256];
    let c = rt
        .tensor_from(DType::F32, &[256], &y, "written after the free")
        .unwrap();
    tensormem::backend::lanes::of(front.as_ref())
        .wait_transfer(t)
        .unwrap();
    let mut out = vec![0u8; 1024];
    front.read_mapped(rb, 0, &mut out).unwrap();
    let got: Vec<f32> = out
        .chunks_exact(4)
        .map(|q| f32::from_le_bytes([q[0], q[1], q[2], q[3]]))
        .collect();
    assert_eq!(
        got, x,
        "the freed tensor's bytes were reused before the copy read them"
    );
    assert_eq!(rt.download::<f32>(&c).unwrap(), y);
    rt.synchronize().unwrap();
}
