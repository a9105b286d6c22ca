//! What the arena's tests share: the in-place growth granule, tensors filled with a byte and checked to still hold it, a run
//! of temporaries that leads to a learned site, and a seeded churn of random sizes.

use std::sync::Arc;

use super::ArenaPool;
use crate::backend::{Backend, BlockRange};
use crate::pool::{Allocation, DevicePool};

/// Panics unless `backend` offers growth with holes (the host's reserve-and-commit does).
pub(super) fn assert_offers_holes(backend: &dyn Backend) {
    let growable = backend.extensions().growable;
    assert!(growable.unwrap().in_place_growth().holes);
}

/// The granule `backend` grows blocks in place by (the host's page); panics where it cannot.
pub(super) fn granularity(backend: &dyn Backend) -> u64 {
    let growable = backend.extensions().growable;
    growable.unwrap().in_place_growth().granularity
}

/// Allocates `size` bytes and fills them with `byte`, writing through `backend`.
pub(super) fn filled<B: Backend + ?Sized>(
    backend: &Arc<B>,
    p: &ArenaPool,
    size: u64,
    byte: u8,
) -> Allocation {
    let a = p.allocate(size, 256, "t").unwrap();
    let data = vec![byte; size as usize];
    backend
        .write_mapped(a.range.block, a.range.offset, &data)
        .unwrap();
    a
}

/// Panics unless every byte of `a` is still `byte`.
pub(super) fn assert_holds<B: Backend + ?Sized>(backend: &Arc<B>, a: &Allocation, byte: u8) {
    let BlockRange {
        block,
        offset,
        size,
    } = a.range;
    let mut out = vec![0u8; size as usize];
    backend.read_mapped(block, offset, &mut out).unwrap();
    assert!(
        out.iter().all(|b| *b == byte),
        "contents of a live tensor changed"
    );
}

/// `n` short-lived 64 KiB tensors: the events that lead to one site (half its history in the
/// tests).
pub(super) fn temporaries(p: &ArenaPool, n: usize) {
    for _ in 0..n {
        let t = p.allocate(64 * 1024, 256, "t").unwrap();
        p.free(t.handle).unwrap();
    }
}

/// 400 seeded steps of random frees and allocations (4 KiB to 2 MiB and a few pages more, at
/// most 13 live), a trim every 50 steps and `check` after each; live contents never change. Ends
/// with everything freed and trimmed.
pub(super) fn churn<B: Backend + ?Sized>(backend: &Arc<B>, p: &ArenaPool, check: impl Fn()) {
    let mut live: Vec<(Allocation, u8)> = Vec::new();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for step in 0..400u32 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if live.len() > 12 || (x.is_multiple_of(3) && !live.is_empty()) {
            let (a, byte) = live.swap_remove((x as usize / 3) % live.len());
            assert_holds(backend, &a, byte);
            p.free(a.handle).unwrap();
        } else {
            let size = (4 * 1024) << (x % 10);
            let byte = (step % 250) as u8 + 1;
            live.push((filled(backend, p, size + (x >> 40) % 4096 * 4, byte), byte));
        }
        if step % 50 == 0 {
            p.trim().unwrap();
        }
        check();
    }
    for (a, byte) in live {
        assert_holds(backend, &a, byte);
        p.free(a.handle).unwrap();
    }
    p.trim().unwrap();
}
