//! The adaptors compose in any order over any bottom pool: every order of guard margins,
//! zero-on-reuse, statistics, tracing and the leak report gives zeroed data, intact margins, traced events and
//! a leak report, and a stack left out costs nothing but is not there.

use std::sync::Arc;

use crate::host::{HostBackend, HostConfig};
use crate::pool::{
    ArenaConfig, ArenaPool, DevicePool, GUARD_PATTERN, Guarded, LeakReport, StatsPool, Traced,
    ZeroOnReuse,
};
use crate::trace::Tracer;
use crate::trace::tests::kind_names;
use crate::{Backend, Error, MemoryKind, PoolConfig};

type Wrap = fn(Arc<dyn DevicePool>, Arc<dyn Backend>) -> Arc<dyn DevicePool>;

fn guard(p: Arc<dyn DevicePool>, b: Arc<dyn Backend>) -> Arc<dyn DevicePool> {
    Arc::new(Guarded::new(p, b, MemoryKind::DeviceLocal, 16).unwrap())
}
fn zero(p: Arc<dyn DevicePool>, b: Arc<dyn Backend>) -> Arc<dyn DevicePool> {
    Arc::new(ZeroOnReuse::new(p, b, MemoryKind::DeviceLocal))
}
fn stats(p: Arc<dyn DevicePool>, _: Arc<dyn Backend>) -> Arc<dyn DevicePool> {
    Arc::new(StatsPool::new(p))
}
fn leaks(p: Arc<dyn DevicePool>, _: Arc<dyn Backend>) -> Arc<dyn DevicePool> {
    Arc::new(LeakReport::new(p))
}

#[test]
fn adaptors_compose_in_any_order() {
    let orders: [[Wrap; 4]; 5] = [
        [guard, zero, stats, leaks],
        [zero, guard, leaks, stats],
        [stats, leaks, guard, zero],
        [leaks, zero, stats, guard],
        [zero, stats, guard, leaks],
    ];
    for (n, order) in orders.into_iter().enumerate() {
        let host = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
        let backend: Arc<dyn Backend> = host.clone();
        let arena: Arc<dyn DevicePool> =
            Arc::new(ArenaPool::new(backend.clone(), ArenaConfig::device()).unwrap());
        let mut top = arena;
        for wrap in order {
            top = wrap(top, backend.clone());
        }
        let tracer = Tracer::new();
        let top = Traced::new(top, tracer.clone());
        // Dirty memory, freed and handed out again: zeroed, and its margins hold the pattern.
        let a = top.allocate(100, 1, "dirty").unwrap();
        backend
            .write_mapped(a.range.block, a.range.offset, &[0xAB; 100])
            .unwrap();
        top.free(a.handle).unwrap();
        let b = top.allocate(100, 1, "fresh").unwrap();
        backend.wait(top.last_use(b.handle).unwrap()).unwrap();
        let mut data = [1u8; 100];
        backend
            .read_mapped(b.range.block, b.range.offset, &mut data)
            .unwrap();
        assert!(data.iter().all(|&x| x == 0), "order {n}: not zeroed");
        let mut margin = [0u8; 16];
        backend
            .read_mapped(b.range.block, b.range.offset + 100, &mut margin)
            .unwrap();
        assert!(
            margin.iter().all(|&x| x == GUARD_PATTERN),
            "order {n}: margin"
        );
        // The leak report sees the live allocation; the trace saw both.
        match crate::pool::check_leaks(&top, Some(top.ids())) {
            Err(Error::Leak {
                count: 1, report, ..
            }) => assert!(report.contains("fresh")),
            other => panic!("order {n}: {other:?}"),
        }
        top.free(b.handle).unwrap();
        top.trim().unwrap();
        assert_eq!(
            kind_names(&tracer.snapshot()),
            [
                "reserve", "alloc", "free", "reclaim", "alloc", "free", "reclaim", "release"
            ],
            "order {n}"
        );
        top.check_invariants().unwrap();
        assert_eq!(host.block_count(), 0);
    }
}

/// A stack with nothing configured is the arena itself behind one pointer: no adaptor layer.
#[test]
fn an_unconfigured_stack_is_the_bare_pool() {
    let backend: Arc<dyn Backend> = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    let stack = PoolConfig {
        leak_report: false,
        statistics: false,
        ..PoolConfig::device()
    }
    .build(backend)
    .unwrap();
    assert!(stack.leaks.is_none() && stack.stats.is_none());
    let a = stack.top.allocate(64, 1, "x").unwrap();
    // The handle is the arena's own: no layer re-maps it.
    assert_eq!(stack.top.resolve(a.handle).unwrap(), a.range);
    stack.top.free(a.handle).unwrap();
    assert_eq!(stack.top.name(), "device");
}
