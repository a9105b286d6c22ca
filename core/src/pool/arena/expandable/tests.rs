//! Expandable allocations on the host's reserve-and-commit: growth in place that keeps the
//! handle, the offset and the bytes; the budget charged for what is committed; refusals that
//! change nothing; the reservation returned with the free.

use std::sync::Arc;

use crate::Error;
use crate::backend::{Backend, MemoryKind, Ticket};
use crate::host::{HostBackend, HostConfig};
use crate::pool::arena::testing::granularity;
use crate::pool::{ArenaConfig, ArenaPool, Budget, DevicePool, ExpandableDesc, Guarded, PoolStats};

fn pool(budget: Option<u64>) -> (Arc<HostBackend>, ArenaPool, u64) {
    let backend = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    let page = granularity(backend.as_ref());
    let p = ArenaPool::with_budget(backend.clone(), ArenaConfig::device(), Budget::new(budget))
        .unwrap();
    (backend, p, page)
}

#[test]
fn an_expandable_allocation_grows_in_place_and_keeps_its_bytes() {
    let (backend, p, page) = pool(None);
    let e = p.expandable().expect("the host arena grows in place");
    let a = e
        .allocate_expandable(&ExpandableDesc::new(1000, 64 * page, "kv"))
        .unwrap()
        .unwrap();
    assert_eq!(a.range.size, page, "the committed size, in whole granules");
    backend
        .write_mapped(a.range.block, a.range.offset, &[7u8; 1000])
        .unwrap();
    // An ordinary allocation is never placed in the expandable block.
    let other = p.allocate(16, 1, "other").unwrap();
    assert_ne!(other.range.block, a.range.block);

    let b = e.expand(a.handle, 5 * page + 1).unwrap();
    assert_eq!((b.handle, b.range.block), (a.handle, a.range.block));
    assert_eq!((b.range.offset, b.range.size), (a.range.offset, 6 * page));
    assert_eq!(p.resolve(a.handle).unwrap(), b.range);
    let mut out = vec![0u8; 1000];
    backend
        .read_mapped(b.range.block, b.range.offset, &mut out)
        .unwrap();
    assert!(out.iter().all(|&x| x == 7), "the old bytes stay");
    backend
        .write_mapped(b.range.block, 5 * page, &[1u8; 1])
        .unwrap();
    assert_eq!(p.stats().in_use, 6 * page + other.range.size);
    // A smaller size changes nothing.
    assert_eq!(e.expand(a.handle, 10).unwrap().range, b.range);
    p.check_invariants().unwrap();

    let before = backend.block_bytes();
    p.free_after(a.handle, Ticket::DONE).unwrap();
    assert_eq!(
        backend.block_bytes(),
        before - 6 * page,
        "the reservation goes back with the free"
    );
    p.check_invariants().unwrap();
    p.free(other.handle).unwrap();
}

#[test]
fn expansion_is_charged_to_the_budget_and_refusals_change_nothing() {
    let (_backend, p, page) = pool(Some(4 * page_size()));
    let e = p.expandable().unwrap();
    let a = e
        .allocate_expandable(&ExpandableDesc::new(page, 16 * page, "kv"))
        .unwrap()
        .unwrap();
    assert_eq!(p.budget().reserved(), page);
    e.expand(a.handle, 3 * page).unwrap();
    assert_eq!(p.budget().reserved(), 3 * page);

    // Past the budget: out of memory, nothing changed.
    match e.expand(a.handle, 5 * page) {
        Err(Error::OutOfMemory(_)) => {}
        other => panic!("expected out of memory, got {other:?}"),
    }
    assert_eq!(p.resolve(a.handle).unwrap().size, 3 * page);
    assert_eq!(p.budget().reserved(), 3 * page);
    // Past the reservation: too large.
    assert!(matches!(
        e.expand(a.handle, 17 * page),
        Err(Error::TooLarge { .. })
    ));
    // An ordinary allocation is not expandable; a freed one is stale.
    let plain = p.allocate(64, 1, "plain").unwrap();
    assert!(matches!(
        e.expand(plain.handle, 2 * page),
        Err(Error::Unsupported { .. })
    ));
    p.free(a.handle).unwrap();
    assert!(matches!(
        e.expand(a.handle, 4 * page),
        Err(Error::StaleHandle { .. })
    ));
    assert!(matches!(
        e.allocate_expandable(&ExpandableDesc::new(0, page, "zero")),
        Err(Error::ZeroSize { .. })
    ));
    p.check_invariants().unwrap();
    p.free(plain.handle).unwrap();
}

#[test]
fn a_cancelled_expandable_allocation_leaves_the_counters_as_they_were() {
    let (backend, p, page) = pool(None);
    let before = (p.stats(), backend.block_bytes());
    let a = p
        .expandable()
        .unwrap()
        .allocate_expandable(&ExpandableDesc::new(page, 8 * page, "kv"))
        .unwrap()
        .unwrap();
    p.cancel(a.handle).unwrap();
    // The peaks aside, as the contract of `cancel` says.
    let after = PoolStats {
        peak_in_use: 0,
        peak_reserved: 0,
        ..p.stats()
    };
    assert_eq!((after, backend.block_bytes()), before);
}

#[test]
fn a_guarded_stack_offers_no_expandable_allocations() {
    let (backend, p, _page) = pool(None);
    let guarded = Guarded::new(p, backend, MemoryKind::DeviceLocal, 64).unwrap();
    assert!(DevicePool::expandable(&guarded).is_none());
}

fn page_size() -> u64 {
    let backend = HostBackend::new(HostConfig::default()).unwrap();
    backend
        .extensions()
        .growable
        .unwrap()
        .in_place_growth()
        .granularity
}
