#![allow(clippy::unwrap_used, reason = "tests fail loudly")]

use super::*;
use crate::Backend;
use crate::host::{HostBackend, HostConfig};

fn caps(binding_align: u64, max_block_size: u64) -> Capabilities {
    let host = HostBackend::new(HostConfig::default()).unwrap();
    Capabilities {
        binding_align,
        max_block_size,
        ..host.capabilities().clone()
    }
}

/// Cuts fall between outermost slices, every `binding_align / element size` of them; slices too
/// large for that are cut between elements; a block below one aligned run is refused.
#[test]
fn segments_are_cut_between_aligned_runs_of_slices() {
    let c = caps(32, 4096);
    // Rows of 5 floats (20 bytes), 8 rows per cut: 160 bytes; 25 cuts fit in 4096.
    assert_eq!(segment_size(&c, DType::F32, &[300, 5], 6000).unwrap(), 4000);
    assert_eq!(
        segment_sizes(&c, DType::F32, &[300, 5], 6000).unwrap(),
        vec![4000, 2000]
    );
    // Rows of 2000 floats: 8 rows exceed a block, so cut between elements (8 floats per cut).
    assert_eq!(
        segment_size(&c, DType::F32, &[3, 2000], 24_000).unwrap(),
        4096
    );
    // Bytes: 32 per cut.
    assert_eq!(
        segment_size(&c, DType::U8, &[10_001], 10_001).unwrap(),
        4096
    );
    // One block: one segment.
    assert_eq!(
        segment_sizes(&c, DType::F32, &[1024], 4096).unwrap(),
        vec![4096]
    );
    // CUDA's 256-byte alignment: 64 rows per cut.
    let cuda = caps(256, 16_384);
    assert_eq!(
        segment_size(&cuda, DType::F32, &[256, 16], 16_384 * 2).unwrap(),
        16_384
    );
    assert_eq!(
        segment_size(&cuda, DType::F32, &[256, 24], 24_576).unwrap(),
        12_288
    );
    assert!(matches!(
        segment_size(&caps(256, 128), DType::F32, &[100], 400),
        Err(Error::TooLarge {
            limit_name: "max_block_size",
            ..
        })
    ));
}

/// A runtime on the host whose blocks are at most 4 KiB.
fn runtime_with_4_kib_blocks() -> crate::Runtime {
    use crate::{DeviceLimits, Runtime, RuntimeConfig};
    let host = std::sync::Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    let config = RuntimeConfig {
        limits: DeviceLimits {
            max_block_size: Some(4096),
            max_binding_size: None,
        },
        ..RuntimeConfig::default()
    };
    Runtime::new(host, config).unwrap()
}

/// A runtime tensor beyond the block limit is held in segments of at most a block, and the
/// segments' pieces cover its bytes in order.
#[test]
fn runtime_tensors_beyond_a_block_are_segmented() {
    let rt = runtime_with_4_kib_blocks();
    let t = rt.alloc(DType::U16, &[5001], "half").unwrap();
    assert_eq!(t.segments().len(), 3);
    let pieces: Vec<(u64, u64)> = t.pieces().map(|(_, o, s)| (o, s)).collect();
    assert_eq!(pieces, vec![(0, 4096), (4096, 4096), (8192, 1810)]);
    assert!(t.segments().iter().all(|a| a.range.size <= 4096));
    let data: Vec<u16> = (0..5001).map(|i| i as u16).collect();
    rt.upload(&t, &data).unwrap();
    assert_eq!(rt.download::<u16>(&t).unwrap(), data);
    rt.free(t).unwrap();
    rt.check_leaks().unwrap();
}

/// A graph input far larger than any device, on a backend whose block limit forces segments, is
/// refused with a typed error before any list proportional to its size is built (issue 46,
/// finding 2: a 2^63-byte input aborted the process allocating a 2^51-entry segment list).
#[test]
fn a_huge_segmented_input_is_too_large_not_an_abort() {
    use crate::Graph;
    let rt = runtime_with_4_kib_blocks();
    let huge = 1usize << 61; // f32: 2^63 bytes
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[huge]);
    g.output(x);
    let compiled = rt.compile(&g).err();
    assert!(
        matches!(compiled, Some(Error::TooLarge { .. })),
        "{compiled:?}"
    );
    let caps = rt.backend().capabilities().clone();
    let sizes = segment_sizes(&caps, DType::F32, &[huge], 1 << 63).err();
    assert!(matches!(sizes, Some(Error::TooLarge { .. })), "{sizes:?}");
    let alloc = rt.alloc(DType::F32, &[huge], "x").err();
    assert!(matches!(alloc, Some(Error::TooLarge { .. })), "{alloc:?}");
}
