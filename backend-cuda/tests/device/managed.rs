//! Managed memory on the device: allocation, advice, prefetch both ways, kernels and copies
//! through it, host access, and the refusal of oversubscription.

use std::sync::Arc;

use tensormem::{
    Backend, Error, Managed, ManagedMemory, MemoryKind, Op, Residence, Ticket, Validated,
};

use crate::{alloc, backend, bytes_f32, f32_bytes, range};

#[test]
fn managed_blocks_prefetch_both_ways_and_keep_their_values() {
    let Some(b) = backend() else { return };
    if b.managed_memory() != ManagedMemory::Migrating {
        // A device without concurrent managed access refuses the kind, cleanly.
        let refused = b.alloc_block(&tensormem::BlockDesc {
            kind: MemoryKind::Managed,
            size: 4096,
            label: "managed",
        });
        assert!(
            matches!(refused, Err(Error::Unsupported { .. })),
            "{refused:?}"
        );
        return;
    }
    let n = 1 << 20; // floats per region
    let bytes = n as u64 * 4;
    let m = alloc(&b, MemoryKind::Managed, 2 * bytes);
    let (input, output) = (range(m, 0, bytes), range(m, bytes, bytes));
    let x: Vec<f32> = (0..n)
        .map(|i| (i as f32 - n as f32 / 2.0) / 1000.0)
        .collect();
    // The host writes managed memory in place: no staging block.
    b.write_mapped(m, 0, &f32_bytes(&x)).unwrap();
    let t0 = b.prefetch(input, Residence::Device).unwrap();
    assert!(
        t0 > Ticket::DONE,
        "a prefetch is a submission with a ticket"
    );
    b.dispatch(&Op::Relu { len: n as u32 }, &[input, output])
        .unwrap();
    let t = b.prefetch(output, Residence::Host).unwrap();
    b.wait_timeout(t, None).unwrap();
    let mut out = vec![0u8; bytes as usize];
    b.read_mapped(m, bytes, &mut out).unwrap();
    let want: Vec<f32> = x.iter().map(|v| v.max(0.0)).collect();
    assert_eq!(bytes_f32(&out), want);
    // Copies read and write managed memory like device memory.
    let dev = alloc(&b, MemoryKind::DeviceLocal, bytes);
    let down = alloc(&b, MemoryKind::Readback, bytes);
    b.copy(output, range(dev, 0, bytes)).unwrap();
    b.fill_zero(range(m, bytes, 4096)).unwrap();
    b.copy(range(dev, 0, bytes), range(down, 0, bytes)).unwrap();
    let t = b.prefetch(range(m, bytes, 4096), Residence::Host).unwrap();
    b.wait_timeout(t, None).unwrap();
    b.read_mapped(down, 0, &mut out).unwrap();
    assert_eq!(bytes_f32(&out), want, "the copy through device memory");
    let mut head = vec![0xFFu8; 4096];
    b.read_mapped(m, bytes, &mut head).unwrap();
    assert!(head.iter().all(|&v| v == 0), "fill_zero on managed memory");
    // A prefetch names a managed block.
    assert!(matches!(
        b.prefetch(range(dev, 0, 4096), Residence::Device),
        Err(Error::WrongMemoryKind { .. })
    ));
    for blk in [m, dev, down] {
        b.free_block(blk).unwrap();
    }
}

#[test]
fn managed_oversubscription_is_refused_before_the_driver() {
    let Some(b) = backend() else { return };
    if b.managed_memory() != ManagedMemory::Migrating {
        return;
    }
    // The device's whole memory is more than is free (the context, the kernels): refused from
    // cuMemGetInfo's answer, never asked of the driver.
    let total = b.capabilities().max_block_size;
    let err = b
        .alloc_block(&tensormem::BlockDesc {
            kind: MemoryKind::Managed,
            size: total,
            label: "oversubscribed",
        })
        .unwrap_err();
    match &err {
        Error::OutOfMemory(r) => {
            assert!(r.pool.contains("cuMemGetInfo"), "{}", r.pool);
            assert_eq!(r.requested, total);
            assert!(r.budget.is_some_and(|fits| fits < total));
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    assert!(err.is_retryable());
    // Still usable: a small managed block works.
    let m = alloc(&b, MemoryKind::Managed, 1 << 20);
    b.write_mapped(m, 0, &[3; 64]).unwrap();
    let mut out = [0u8; 64];
    b.read_mapped(m, 0, &mut out).unwrap();
    assert_eq!(out, [3; 64]);
    b.free_block(m).unwrap();
}

#[test]
fn the_front_checks_prefetches_and_pools_take_managed_memory() {
    let Some(b) = backend() else { return };
    if b.managed_memory() != ManagedMemory::Migrating {
        return;
    }
    let front: Arc<dyn Backend> = Arc::new(Validated::new(Arc::new(b)));
    let managed = front
        .managed()
        .expect("the front offers the backend's managed memory");
    let dev = alloc_on(&front, MemoryKind::DeviceLocal, 4096);
    assert!(matches!(
        managed.prefetch(range(dev, 0, 4096), Residence::Device),
        Err(Error::WrongMemoryKind {
            role: "prefetch",
            ..
        })
    ));
    // An arena pool over managed memory: allocations are host-visible and bind as kernel inputs.
    let pool = tensormem::ArenaPool::new(
        front.clone(),
        tensormem::ArenaConfig {
            kind: MemoryKind::Managed,
            block_size: 8 << 20,
            ..tensormem::ArenaConfig::default()
        },
    )
    .unwrap();
    use tensormem::DevicePool;
    let a = pool.allocate(1 << 20, 256, "a").unwrap();
    let r = a.range;
    front.write_mapped(r.block, r.offset, &[5; 4096]).unwrap();
    let t = managed.prefetch(r, Residence::Device).unwrap();
    front.wait(t).unwrap();
    let mut out = [0u8; 4096];
    front.read_mapped(r.block, r.offset, &mut out).unwrap();
    assert_eq!(out, [5; 4096]);
    pool.free_after(a.handle, t).unwrap();
    front.free_block(dev).unwrap();
}

fn alloc_on(b: &Arc<dyn Backend>, kind: MemoryKind, size: u64) -> tensormem::BlockId {
    b.alloc_block(&tensormem::BlockDesc {
        kind,
        size,
        label: "test",
    })
    .unwrap()
}
