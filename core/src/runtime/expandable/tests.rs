//! Expandable tensors on the host backend, with and without staging: contents kept across a
//! growth, bad shapes and ordinary tensors refused, and no expandable tensor from a stack that
//! lays margins around allocations.

use std::sync::Arc;

use crate::host::{HostBackend, HostConfig};
use crate::pool::PoolConfig;
use crate::{DType, Error, Runtime, RuntimeConfig};

fn runtime(config: RuntimeConfig) -> Runtime {
    let backend = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    Runtime::new(backend, config).unwrap()
}

#[test]
fn an_expandable_tensor_grows_in_place_and_keeps_its_contents() {
    for force_staging in [false, true] {
        let rt = runtime(RuntimeConfig {
            force_staging,
            ..RuntimeConfig::default()
        });
        let mut t = rt
            .alloc_expandable(DType::F32, &[4, 256], 1 << 20, "rows")
            .unwrap()
            .expect("the host pool grows tensors in place");
        let first: Vec<f32> = (0..1024).map(|i| i as f32).collect();
        rt.upload(&t, &first).unwrap();
        let handle = t.allocation().handle;
        rt.expand(&mut t, &[64, 256]).unwrap();
        assert_eq!((t.shape(), t.size()), (&[64, 256][..], 64 * 256 * 4));
        assert_eq!(t.allocation().handle, handle);
        let mut all = rt.download::<f32>(&t).unwrap();
        assert_eq!(&all[..1024], &first[..], "the old rows stay");
        all[1024..].iter_mut().for_each(|x| *x = -1.0);
        rt.upload(&t, &all).unwrap();
        assert_eq!(rt.download::<f32>(&t).unwrap(), all);

        for bad in [&[64, 128][..], &[32, 256], &[64, 256, 1]] {
            assert!(
                matches!(
                    rt.expand(&mut t, bad),
                    Err(Error::Argument(crate::ArgumentError::Invalid { .. }))
                ),
                "{bad:?}"
            );
        }
        assert!(matches!(
            rt.expand(&mut t, &[1025, 256]),
            Err(Error::TooLarge { .. })
        ));
        assert_eq!(t.shape(), &[64, 256], "refusals change nothing");
        let mut plain = rt.alloc(DType::F32, &[4], "plain").unwrap();
        assert!(matches!(
            rt.expand(&mut plain, &[8]),
            Err(Error::Unsupported { .. })
        ));
        assert!(matches!(
            rt.alloc_expandable(DType::F32, &[1024], 1024, "over"),
            Err(Error::TooLarge { .. })
        ));
        rt.free(plain).unwrap();
        rt.free(t).unwrap();
    }
}

#[test]
fn a_stack_with_guard_margins_offers_no_expandable_tensors() {
    let rt = runtime(RuntimeConfig {
        device: PoolConfig {
            guard_bytes: 64,
            ..PoolConfig::device()
        },
        ..RuntimeConfig::default()
    });
    assert!(
        rt.alloc_expandable(DType::U8, &[64], 1 << 20, "x")
            .unwrap()
            .is_none()
    );
}

#[test]
fn the_statistics_count_an_expansion_as_bytes_handed_out() {
    let rt = runtime(RuntimeConfig {
        device: PoolConfig {
            statistics: true,
            ..PoolConfig::device()
        },
        ..RuntimeConfig::default()
    });
    let mut t = rt
        .alloc_expandable(DType::U8, &[100], 1 << 20, "bytes")
        .unwrap()
        .unwrap();
    let before = rt.allocation_stats().unwrap();
    assert_eq!(before.requested, 100);
    rt.expand(&mut t, &[300_000]).unwrap();
    let after = rt.allocation_stats().unwrap();
    assert_eq!(after.requested, 300_000);
    assert_eq!(
        after.in_use,
        rt.device_pool()
            .resolve(t.allocation().handle)
            .unwrap()
            .size
    );
    assert!(after.in_use >= 300_000 && after.in_use > before.in_use);
    rt.free(t).unwrap();
    assert_eq!(rt.allocation_stats().unwrap().in_use, 0);
}
