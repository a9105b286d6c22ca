//! Waiting for pending frees instead of growing past the allowance, on a host backend whose work
//! completes only when waited for (so frees stay pending until the pool waits).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::backend::{Backend, Ticket};
use crate::host::{HostBackend, HostConfig};
use crate::pool::{ArenaConfig, ArenaPool, DevicePool};

/// The host backend, but a ticket completes only once someone waited for it.
struct Lazy {
    host: HostBackend,
    waited: AtomicU64,
    waits: AtomicU64,
}

impl crate::backend::BackendAdaptor for Lazy {
    type Inner = HostBackend;
    fn inner(&self) -> &HostBackend {
        &self.host
    }
    fn completed(&self) -> crate::Result<Ticket> {
        Ok(Ticket(self.waited.load(Ordering::SeqCst)))
    }
    fn wait_timeout(
        &self,
        ticket: Ticket,
        timeout: Option<std::time::Duration>,
    ) -> crate::Result<()> {
        self.host
            .wait_timeout(ticket.min(self.host.flush()?), timeout)?;
        self.waits.fetch_add(1, Ordering::SeqCst);
        self.waited.fetch_max(ticket.0, Ordering::SeqCst);
        Ok(())
    }
    fn extensions(&self) -> crate::backend::Extensions<'_> {
        crate::backend::Extensions {
            growable: self.host.extensions().growable,
            ..crate::backend::Extensions::default()
        }
    }
}

fn pool() -> (Arc<Lazy>, ArenaPool) {
    let lazy = Arc::new(Lazy {
        host: HostBackend::new(HostConfig::default()).unwrap(),
        waited: AtomicU64::new(0),
        waits: AtomicU64::new(0),
    });
    let p = ArenaPool::new(lazy.clone(), ArenaConfig::device()).unwrap();
    (lazy, p)
}

#[test]
fn a_request_past_the_allowance_waits_for_pending_frees_instead_of_growing() {
    let (lazy, p) = pool();
    let mib = 1 << 20;
    let base = p.allocate(64 * mib, 256, "weights").unwrap();
    let step = p.allocate(3 * mib, 256, "step 1").unwrap();
    // The arena's committed slack is taken: the next request must grow or reuse.
    let s = p.stats();
    let slack = (s.reserved - s.in_use) & !255;
    let filler = (slack > 0).then(|| p.allocate(slack, 256, "filler").unwrap());
    let peak = p.stats().peak_reserved;
    // The step's tensor is freed behind work still in flight (ticket 5, not completed). Growing
    // by 3 MiB would take the pool past its live peak plus 1/32 (about 2.1 MiB).
    p.free_after(step.handle, Ticket(5)).unwrap();
    let again = p.allocate(3 * mib, 256, "step 2").unwrap();
    assert_eq!(
        lazy.waits.load(Ordering::SeqCst),
        1,
        "growing by its step would pass the allowance: the pool waits"
    );
    assert_eq!(p.stats().peak_reserved, peak, "and does not grow");
    assert_eq!(
        again.range.offset, step.range.offset,
        "the freed bytes are reused"
    );
    for a in [Some(again), Some(base), filler].into_iter().flatten() {
        p.free(a.handle).unwrap();
    }
    p.check_invariants().unwrap();
}

#[test]
fn without_enough_pending_bytes_the_pool_grows_without_waiting() {
    let (lazy, p) = pool();
    let mib = 1 << 20;
    let base = p.allocate(64 * mib, 256, "weights").unwrap();
    let small = p.allocate(4096, 256, "small").unwrap();
    p.free_after(small.handle, Ticket(5)).unwrap();
    // Pending bytes below the request: nothing to wait for.
    let big = p.allocate(8 * mib, 256, "big").unwrap();
    assert_eq!(lazy.waits.load(Ordering::SeqCst), 0);
    assert!(p.stats().reserved >= 72 * mib);
    for h in [big.handle, base.handle] {
        p.free(h).unwrap();
    }
}
