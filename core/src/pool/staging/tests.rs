//! Unit tests of the staging belt on the host backend with device memory hidden from the host.

use std::time::Duration;

use super::*;
use crate::backend::{BlockDesc, BlockRange};
use crate::host::{HostBackend, HostConfig};

fn belt(block_size: u64, max_blocks: usize, delay_ms: u64) -> (Arc<HostBackend>, StagingBelt) {
    let backend = Arc::new(
        HostBackend::new(HostConfig {
            force_staging: true,
            worker_delay: Duration::from_millis(delay_ms),
            ..HostConfig::default()
        })
        .unwrap(),
    );
    let b = StagingBelt::new(
        backend.clone(),
        StagingConfig {
            block_size,
            max_blocks,
            keep_blocks: 1,
            idle_trim_after: Duration::from_secs(60),
        },
    )
    .unwrap();
    (backend, b)
}

fn device_block(backend: &HostBackend, size: u64) -> BlockRange {
    let block = backend
        .alloc_block(&BlockDesc {
            kind: MemoryKind::DeviceLocal,
            size,
            label: "dst",
        })
        .unwrap();
    BlockRange {
        block,
        offset: 0,
        size,
    }
}

#[test]
fn a_transfer_larger_than_the_belt_is_chunked() {
    let (backend, belt) = belt(4096, 2, 0);
    let dst = device_block(&backend, 40_000);
    let data: Vec<u8> = (0..39_999u32).map(|i| (i % 251) as u8).collect();
    belt.upload(dst, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    belt.download(dst, &mut back).unwrap();
    assert_eq!(back, data);
    assert!(belt.stats().chunks >= 20);
}

#[test]
fn a_busy_belt_grows_then_waits() {
    // A slow worker keeps regions in flight: the belt must grow to its cap, then stall, never fail.
    let (backend, belt) = belt(4096, 2, 5);
    let dst = device_block(&backend, 64 << 10);
    for i in 0..16u64 {
        let data = vec![i as u8; 4096];
        belt.upload(
            BlockRange {
                offset: i * 4096,
                size: 4096,
                ..dst
            },
            &data,
        )
        .unwrap();
    }
    let s = belt.stats();
    assert_eq!(s.blocks, 2, "{s:?}");
    assert!(s.stalls > 0, "{s:?}");
    let mut back = vec![0u8; 64 << 10];
    belt.download(dst, &mut back).unwrap();
    for i in 0..16usize {
        assert!(back[i * 4096..(i + 1) * 4096].iter().all(|&b| b == i as u8));
    }
}

#[test]
fn bad_transfers_are_errors() {
    let (backend, belt) = belt(4096, 2, 0);
    let dst = device_block(&backend, 16);
    assert!(matches!(belt.upload(dst, &[]), Err(Error::ZeroSize { .. })));
    assert!(matches!(
        belt.upload(dst, &[0; 17]),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        belt.download(dst, &mut [0; 20]),
        Err(Error::OutOfBounds { .. })
    ));
}

#[test]
fn belt_blocks_are_traced() {
    let (backend, belt) = belt(4096, 2, 0);
    let tracer = crate::trace::Tracer::new();
    belt.set_tracer(Some(tracer.clone()));
    let dst = device_block(&backend, 4096);
    belt.upload(dst, &[3u8; 4096]).unwrap();
    let mut back = vec![0u8; 4096];
    belt.download(dst, &mut back).unwrap();
    backend
        .wait_timeout(backend.flush().unwrap(), None)
        .unwrap();
    let released = belt.trim().unwrap();
    let events = tracer.snapshot().events;
    let count =
        |f: &dyn Fn(&crate::trace::EventKind) -> bool| events.iter().filter(|e| f(&e.kind)).count();
    use crate::trace::EventKind::{BlockRelease, BlockReserve};
    assert_eq!(
        count(
            &|k| matches!(k, BlockReserve { pool, size: 4096, .. } if pool == "staging (upload)")
        ),
        1
    );
    assert_eq!(
        count(&|k| matches!(k, BlockReserve { pool, .. } if pool == "staging (readback)")),
        1
    );
    assert_eq!(count(&|k| matches!(k, BlockRelease { .. })), released);
}
