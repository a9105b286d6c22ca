//! Tests of the out-of-memory explainer on the host backend: fragmentation that a static plan would
//! avoid, a live set that no plan fits, blocks held only by pending frees, and the planner path.

use std::sync::Arc;
use std::time::Duration;

use super::static_plan_fits;
use crate::host::{HostBackend, HostConfig};
use crate::pool::{ArenaConfig, ArenaPool, DevicePool};
use crate::{Backend, Error, OomReport};

fn pool(host: HostConfig) -> (Arc<HostBackend>, ArenaPool) {
    let backend = Arc::new(HostBackend::new(host).unwrap());
    let p = ArenaPool::new(
        backend.clone(),
        ArenaConfig {
            block_size: 1024,
            budget: Some(2048),
            ..ArenaConfig::device()
        },
    )
    .unwrap();
    (backend, p)
}

fn oom(r: crate::Result<crate::Allocation>) -> OomReport {
    match r {
        Err(Error::OutOfMemory(rep)) => *rep,
        other => panic!("expected OOM, got {other:?}"),
    }
}

/// The pool at its budget: four live 512-byte tensors `t0`..`t3` in its two blocks.
fn full_of_halves() -> (Arc<HostBackend>, ArenaPool, Vec<crate::Allocation>) {
    let (backend, p) = pool(HostConfig::default());
    let h = (0..4)
        .map(|i| p.allocate(512, 1, &format!("t{i}")).unwrap())
        .collect();
    (backend, p, h)
}

#[test]
fn fragmentation_that_a_static_plan_avoids() {
    let (_b, p, h) = full_of_halves();
    p.free(h[0].handle).unwrap();
    p.free(h[2].handle).unwrap();
    let r = oom(p.allocate(1024, 1, "big"));
    assert_eq!(
        (r.requested, r.reserved, r.in_use, r.largest_free),
        (1024, 2048, 1024, 512)
    );
    assert!((r.fragmentation - 0.5).abs() < 1e-9);
    assert_eq!(r.static_plan_would_fit, Some(true));
    assert!(!r.trim_would_help);
    assert_eq!(r.largest_live.len(), 2);
    let msg = r.to_string();
    assert!(
        msg.contains("a static plan of the live set would fit") && msg.contains("'big'"),
        "{msg}"
    );
    p.free(h[1].handle).unwrap();
    p.free(h[3].handle).unwrap();
}

#[test]
fn a_live_set_no_plan_fits() {
    let (_b, p, h) = full_of_halves();
    let r = oom(p.allocate(512, 1, "more"));
    assert_eq!(r.static_plan_would_fit, Some(false));
    assert!(!r.trim_would_help);
    assert_eq!(r.largest_live[0], ("t0".to_string(), 512));
    for a in h {
        p.free(a.handle).unwrap();
    }
}

#[test]
fn blocks_held_only_by_pending_frees_make_trim_helpful() {
    let (backend, p) = pool(HostConfig {
        worker_delay: Duration::from_millis(400),
        ..HostConfig::default()
    });
    let a = p.allocate(1024, 1, "a").unwrap();
    let t = backend.fill_zero(a.range).unwrap();
    p.mark_used(a.handle, t).unwrap();
    p.free(a.handle).unwrap();
    let b = p.allocate(1024, 1, "b").unwrap();
    let r = oom(p.allocate(1024, 1, "c"));
    assert_eq!(r.pending_free, 1024);
    assert!(r.trim_would_help, "{r}");
    assert_eq!(r.static_plan_would_fit, Some(true));
    assert!(r.to_string().contains("trim the pool"));
    backend.wait_timeout(t, None).unwrap();
    // Once the work completes, the retry succeeds.
    let c = p.allocate(1024, 1, "c").unwrap();
    p.free(b.handle).unwrap();
    p.free(c.handle).unwrap();
}

#[test]
fn the_planner_decides_when_padding_matters() {
    // Contiguous in the given order needs 32 + 12 = 44 bytes; the plan 12 then 20 needs 36.
    assert_eq!(static_plan_fits(&[20, 12], 16, 36), Some(true));
    assert_eq!(static_plan_fits(&[20, 12], 16, 35), Some(false));
    assert_eq!(static_plan_fits(&[20, 12], 16, 31), Some(false));
    assert_eq!(static_plan_fits(&[20, 12], 16, 44), Some(true));
}
