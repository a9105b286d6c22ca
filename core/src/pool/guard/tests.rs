//! Guard margins on the host backend: clean frees pass, writes past either end are caught on free
//! with the allocation's label, including an op whose binding overruns its tensor.

use std::sync::Arc;

use crate::host::{HostBackend, HostConfig};
use crate::ops::Op;
use crate::pool::{DevicePool, GUARD_PATTERN, PoolConfig};
use crate::{Backend, BlockRange, Error};

fn guarded() -> (Arc<HostBackend>, Arc<dyn DevicePool>) {
    guarded_on(HostConfig::default())
}

fn guarded_on(config: HostConfig) -> (Arc<HostBackend>, Arc<dyn DevicePool>) {
    let backend = Arc::new(HostBackend::new(config).unwrap());
    let p = PoolConfig {
        guard_bytes: 64,
        block_size: 1 << 16,
        ..PoolConfig::device()
    }
    .build(backend.clone())
    .unwrap()
    .top;
    (backend, p)
}

fn corruption(r: crate::Result<()>) -> String {
    match r {
        Err(Error::Corruption(msg)) => msg,
        other => panic!("expected corruption, got {other:?}"),
    }
}

#[test]
fn clean_allocations_free_without_error() {
    let (backend, p) = guarded();
    let a = p.allocate(100, 1, "a").unwrap();
    let b = p.allocate(300, 1, "b").unwrap();
    assert_eq!(a.range.size, 100);
    assert_eq!(a.range.offset % 16, 0);
    // Margins hold the pattern; the data can be written in full.
    let mut before = [0u8; 64];
    backend
        .read_mapped(a.range.block, a.range.offset - 64, &mut before)
        .unwrap();
    assert!(before.iter().all(|&x| x == GUARD_PATTERN));
    backend
        .write_mapped(a.range.block, a.range.offset, &[1u8; 100])
        .unwrap();
    assert!(p.stats().in_use >= 100 + 300 + 4 * 64);
    p.check_invariants().unwrap();
    p.free(a.handle).unwrap();
    p.free(b.handle).unwrap();
    p.check_invariants().unwrap();
}

#[test]
fn a_write_past_the_end_is_caught_on_free() {
    let (backend, p) = guarded();
    let a = p.allocate(100, 1, "victim").unwrap();
    backend
        .write_mapped(a.range.block, a.range.offset + 100, &[0, 0, 0, 0])
        .unwrap();
    let msg = corruption(p.free(a.handle));
    assert!(
        msg.contains("'victim'") && msg.contains("up to 4 byte(s) past the end"),
        "{msg}"
    );
    // The memory went back to the pool all the same.
    assert_eq!(p.stats().allocations, 0);
    p.check_invariants().unwrap();
}

#[test]
fn a_write_before_the_start_is_caught_on_free() {
    let (backend, p) = guarded();
    let a = p.allocate(100, 1, "under").unwrap();
    backend
        .write_mapped(a.range.block, a.range.offset - 8, &[9, 9, 9, 9])
        .unwrap();
    let msg = corruption(p.free(a.handle));
    assert!(
        msg.contains("'under'") && msg.contains("8 byte(s) before the start"),
        "{msg}"
    );
}

/// Copies 104 elements into the 100-element tensor `dst` (16 bytes land in its back margin) and
/// returns the free's result.
fn overrun_then_free(backend: &HostBackend, p: &dyn DevicePool, dst_label: &str) -> String {
    let src = p.allocate(4 * 104, 1, "src").unwrap();
    let dst = p.allocate(4 * 100, 1, dst_label).unwrap();
    let overrun = BlockRange {
        size: 4 * 104,
        ..dst.range
    };
    let t = backend
        .dispatch(&Op::Copy { len: 104 }, &[src.range, overrun])
        .unwrap();
    p.mark_used(dst.handle, t).unwrap();
    let msg = corruption(p.free(dst.handle));
    p.free(src.handle).unwrap();
    msg
}

#[test]
fn an_op_whose_binding_overruns_its_tensor_is_caught() {
    let (backend, p) = guarded();
    let msg = overrun_then_free(&backend, &p, "dst tensor");
    assert!(
        msg.contains("'dst tensor'") && msg.contains("up to 16 byte(s) past"),
        "{msg}"
    );
}

/// Regression: device memory the host cannot map (a discrete GPU, simulated by `force_staging`)
/// used to keep its margins unchecked; they now go through staged copies.
#[test]
fn margins_of_unmappable_device_memory_are_checked_through_copies() {
    let (backend, p) = guarded_on(HostConfig {
        force_staging: true,
        ..HostConfig::default()
    });
    let clean = p.allocate(4 * 100, 1, "clean").unwrap();
    let msg = overrun_then_free(&backend, &p, "dst on device");
    assert!(
        msg.contains("'dst on device'") && msg.contains("past"),
        "{msg}"
    );
    p.free(clean.handle).unwrap();
    p.check_invariants().unwrap();
}

/// Regression (fault injection, seed 17): checking the margins of unmappable memory stages them
/// through a readback block, which a full device refused, so a free failed while the device was
/// full. Staging memory is host memory on a discrete GPU: every free succeeds.
#[test]
fn a_full_device_still_frees_guarded_allocations() {
    let (backend, p) = guarded_on(HostConfig {
        force_staging: true,
        device_memory: Some(1 << 16),
        ..HostConfig::default()
    });
    let mut live = Vec::new();
    while let Ok(a) = p.allocate(1000, 1, "filler") {
        live.push(a);
    }
    assert!(live.len() > 10, "{} allocations", live.len());
    for a in live {
        p.free(a.handle).unwrap();
    }
    p.check_invariants().unwrap();
    assert_eq!(p.stats().in_use, 0);
    drop(p);
    assert_eq!(backend.block_count(), 0);
}
