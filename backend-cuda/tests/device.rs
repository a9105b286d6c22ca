//! Backend behaviour on a real device, and clean unavailability without one.
//!
//! Every test first calls [`backend`]: on a machine without CUDA it asserts that construction
//! returned `Error::BackendUnavailable` (never a panic) and the test ends there; with a GPU it
//! runs the checks. `scripts/gpu-check.sh` runs this file on the GPU machine.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests and benchmarks fail loudly on broken setup"
)]

mod device {
    pub mod holes;
    pub mod managed;
    pub mod peer;
    pub mod stall;
}

use tensormem::backend::{BlockDesc, BlockRange};
use tensormem::{Backend, BlockId, Error, Growable, MemoryKind, Op, Ticket, WeightFormat};
use tensormem_cuda::toolchain::CodeTarget;
use tensormem_cuda::{CudaBackend, CudaDesc, DeviceAlloc, ExpandableDesc};

/// The backend, or `None` after checking that its absence is reported cleanly.
fn backend_with(desc: &CudaDesc) -> Option<CudaBackend> {
    match CudaBackend::new(desc) {
        Ok(b) => Some(b),
        Err(Error::BackendUnavailable { backend, reason }) => {
            assert_eq!(backend, "cuda");
            assert!(!reason.is_empty());
            if std::env::var("TENSORMEM_REQUIRE_CUDA").is_ok_and(|v| v == "1") {
                panic!("TENSORMEM_REQUIRE_CUDA=1 but CUDA is unavailable: {reason}");
            }
            None
        }
        Err(other) => panic!("CUDA present but backend creation failed: {other}"),
    }
}

fn backend() -> Option<CudaBackend> {
    backend_with(&CudaDesc::default())
}

#[test]
fn unavailable_is_an_error_not_a_panic() {
    let result = std::panic::catch_unwind(|| CudaBackend::new(&CudaDesc::default()).err());
    let err = result.expect("CudaBackend::new panicked");
    if !tensormem_cuda::libraries_present() {
        assert!(
            matches!(
                err,
                Some(Error::BackendUnavailable { backend: "cuda", ref reason })
                    if reason.contains("libcuda") || reason.contains("libnvrtc")
            ),
            "{err:?}"
        );
        // Adopting cannot even be attempted without a stream, but probing is safe too.
        assert!(tensormem_cuda::probe::check_libraries().is_err());
    }
}

fn alloc(b: &CudaBackend, kind: MemoryKind, size: u64) -> BlockId {
    b.alloc_block(&BlockDesc {
        kind,
        size,
        label: "test",
    })
    .unwrap()
}

fn range(block: BlockId, offset: u64, size: u64) -> BlockRange {
    BlockRange {
        block,
        offset,
        size,
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn bytes_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Uploads tensors, runs `op`, reads the output back.
fn run_op(b: &CudaBackend, op: &Op, inputs: &[Vec<u8>]) -> Vec<f32> {
    let sig = op.signature().unwrap();
    let align = b.capabilities().binding_align;
    let sizes: Vec<u64> = sig
        .inputs
        .iter()
        .chain(&sig.outputs)
        .map(|o| o.size())
        .collect();
    let mut offsets = Vec::new();
    let mut end = 0;
    for s in &sizes {
        offsets.push(end);
        end += s.div_ceil(align) * align;
    }
    let dev = alloc(b, MemoryKind::DeviceLocal, end);
    let up = alloc(b, MemoryKind::Upload, end);
    let down = alloc(b, MemoryKind::Readback, end);
    for (i, data) in inputs.iter().enumerate() {
        assert_eq!(data.len() as u64, sizes[i]);
        b.write_mapped(up, offsets[i], data).unwrap();
        b.copy(
            range(up, offsets[i], sizes[i]),
            range(dev, offsets[i], sizes[i]),
        )
        .unwrap();
    }
    let bindings: Vec<BlockRange> = sizes
        .iter()
        .zip(&offsets)
        .map(|(s, o)| range(dev, *o, *s))
        .collect();
    b.dispatch(op, &bindings).unwrap();
    let out = sig.inputs.len();
    let t = b
        .copy(
            range(dev, offsets[out], sizes[out]),
            range(down, offsets[out], sizes[out]),
        )
        .unwrap();
    b.wait_timeout(t, None).unwrap();
    let mut bytes = vec![0u8; sizes[out] as usize];
    b.read_mapped(down, offsets[out], &mut bytes).unwrap();
    for blk in [dev, up, down] {
        b.free_block(blk).unwrap();
    }
    bytes_f32(&bytes)
}

fn assert_close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "element {i}: got {g}, want {w}"
        );
    }
}

#[test]
fn capabilities_describe_a_discrete_gpu() {
    let Some(b) = backend() else { return };
    let caps = b.capabilities();
    assert_eq!(caps.backend, "cuda");
    assert!(!caps.device_host_visible);
    assert!(
        caps.budget
            .is_some_and(|v| v > 0 && v <= caps.max_block_size)
    );
    assert_eq!(caps.binding_align, 256);
}

#[test]
fn upload_device_readback_round_trip() {
    let Some(b) = backend() else { return };
    let n = 1 << 20;
    let data: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
    let up = alloc(&b, MemoryKind::Upload, n as u64);
    let dev = alloc(&b, MemoryKind::DeviceLocal, n as u64);
    let down = alloc(&b, MemoryKind::Readback, n as u64);
    b.write_mapped(up, 0, &data).unwrap();
    let t1 = b
        .copy(range(up, 0, n as u64), range(dev, 0, n as u64))
        .unwrap();
    let t2 = b
        .copy(range(dev, 0, n as u64), range(down, 0, n as u64))
        .unwrap();
    assert!(t2 > t1, "tickets increase");
    b.wait_timeout(t2, None).unwrap();
    assert!(b.completed().unwrap() >= t2);
    let mut out = vec![0u8; n];
    b.read_mapped(down, 0, &mut out).unwrap();
    assert_eq!(out, data);
    // Device memory is not host-visible.
    assert!(matches!(
        b.write_mapped(dev, 0, &[1]),
        Err(Error::Unsupported { .. })
    ));
    assert!(matches!(
        b.read_mapped(down, n as u64 - 1, &mut [0, 0]),
        Err(Error::OutOfBounds { .. })
    ));
    for blk in [up, dev, down] {
        b.free_block(blk).unwrap();
    }
    assert!(matches!(
        b.free_block(up),
        Err(Error::UnknownBlock {
            backend: "cuda",
            ..
        })
    ));
}

#[test]
fn queued_write_and_fill_zero() {
    let Some(b) = backend() else { return };
    let dev = alloc(&b, MemoryKind::DeviceLocal, 4096);
    let down = alloc(&b, MemoryKind::Readback, 4096);
    let t = b.write_queued(range(dev, 0, 4096), &[0xAB; 4096]).unwrap();
    assert!(t.is_some());
    b.fill_zero(range(dev, 1024, 1024)).unwrap();
    // Pinned blocks are filled by a kernel through unified addressing.
    b.write_mapped(down, 0, &[0xCD; 4096]).unwrap();
    b.fill_zero(range(down, 0, 512)).unwrap();
    let t = b
        .copy(range(dev, 2048, 2048), range(down, 2048, 2048))
        .unwrap();
    b.wait_timeout(t, None).unwrap();
    let mut out = vec![0u8; 4096];
    b.read_mapped(down, 0, &mut out).unwrap();
    assert!(out[..512].iter().all(|&x| x == 0));
    assert!(out[512..2048].iter().all(|&x| x == 0xCD));
    assert!(out[2048..].iter().all(|&x| x == 0xAB));
    let t = b.copy(range(dev, 0, 2048), range(down, 0, 2048)).unwrap();
    b.wait_timeout(t, None).unwrap();
    b.read_mapped(down, 0, &mut out[..2048]).unwrap();
    assert!(out[..1024].iter().all(|&x| x == 0xAB));
    assert!(out[1024..2048].iter().all(|&x| x == 0));
    assert!(matches!(
        b.write_queued(range(dev, 0, 8), &[1; 4]),
        Err(Error::SizeMismatch { .. })
    ));
    assert_eq!(b.write_queued(range(down, 0, 4), &[1; 4]).unwrap(), None);
    b.free_block(dev).unwrap();
    b.free_block(down).unwrap();
}

#[test]
fn tickets_reject_the_future_and_never_go_back() {
    let Some(b) = backend() else { return };
    let last = b.flush().unwrap();
    assert!(matches!(
        b.wait_timeout(Ticket(last.0 + 10), None),
        Err(Error::UnknownTicket { .. })
    ));
    b.wait_timeout(Ticket::DONE, None).unwrap();
    let dev = alloc(&b, MemoryKind::DeviceLocal, 1 << 20);
    let mut prev = b.completed().unwrap();
    for _ in 0..100 {
        let t = b.fill_zero(range(dev, 0, 1 << 20)).unwrap();
        let c = b.completed().unwrap();
        assert!(c >= prev && c <= t);
        prev = c;
    }
    let t = b.flush().unwrap();
    b.wait_timeout(t, None).unwrap();
    assert_eq!(b.completed().unwrap(), t);
    b.free_block(dev).unwrap();
}

#[test]
fn driver_oom_is_the_retryable_core_oom() {
    let Some(b) = backend() else { return };
    let too_much = b.capabilities().max_block_size;
    let err = b
        .alloc_block(&BlockDesc {
            kind: MemoryKind::DeviceLocal,
            size: too_much,
            label: "oom",
        })
        .unwrap_err();
    assert!(matches!(err, Error::OutOfMemory(_)), "{err:?}");
    assert!(err.is_retryable());
    // Still usable afterwards.
    let blk = alloc(&b, MemoryKind::DeviceLocal, 1 << 20);
    b.free_block(blk).unwrap();
}

#[test]
fn stream_ordered_blocks_work_like_plain_ones() {
    let Some(b) = backend_with(&CudaDesc {
        device_alloc: DeviceAlloc::StreamOrdered,
        ..CudaDesc::default()
    }) else {
        return;
    };
    for _ in 0..3 {
        let dev = alloc(&b, MemoryKind::DeviceLocal, 8 << 20);
        let down = alloc(&b, MemoryKind::Readback, 4096);
        b.write_queued(range(dev, 0, 4096), &[7; 4096]).unwrap();
        let t = b.copy(range(dev, 0, 4096), range(down, 0, 4096)).unwrap();
        b.wait_timeout(t, None).unwrap();
        let mut out = vec![0u8; 4096];
        b.read_mapped(down, 0, &mut out).unwrap();
        assert!(out.iter().all(|&x| x == 7));
        b.free_block(dev).unwrap();
        b.free_block(down).unwrap();
    }
    b.trim_device_pool(0).unwrap();
}

#[test]
fn expandable_block_grows_in_place_and_keeps_contents() {
    let Some(b) = backend() else { return };
    let g = b.vmm_granularity().unwrap();
    let blk = b
        .alloc_expandable_block(&ExpandableDesc {
            reserve: 64 * g,
            initial: g,
            chunk: g,
            label: "expandable",
            holes: false,
        })
        .unwrap();
    let base = b.device_addr(range(blk, 0, g)).unwrap();
    b.write_queued(range(blk, 0, 4096), &[9; 4096]).unwrap();
    assert_eq!(b.grow_block(blk, 10 * g + 1).unwrap(), 11 * g);
    assert_eq!(
        b.device_addr(range(blk, 0, 11 * g)).unwrap(),
        base,
        "grew in place"
    );
    b.fill_zero(range(blk, 10 * g, g)).unwrap();
    let down = alloc(&b, MemoryKind::Readback, 4096);
    let t = b.copy(range(blk, 0, 4096), range(down, 0, 4096)).unwrap();
    b.wait_timeout(t, None).unwrap();
    let mut out = vec![0u8; 4096];
    b.read_mapped(down, 0, &mut out).unwrap();
    assert!(out.iter().all(|&x| x == 9));
    assert!(matches!(
        b.grow_block(blk, 65 * g),
        Err(Error::TooLarge { .. })
    ));
    assert_eq!(b.shrink_block(blk, g).unwrap(), g);
    assert!(matches!(
        b.copy(range(blk, g, 4096), range(down, 0, 4096)),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        b.grow_block(down, 2 * g),
        Err(Error::InvalidArgument(_))
    ));
    b.free_block(blk).unwrap();
    b.free_block(down).unwrap();
}

/// The contract's blocks that grow in place are expandable blocks with a chunk of one granule:
/// growth commits exactly what the pool asks for, each growth is one mapping that a shrink
/// returns whole, and the front checks the sizes reported.
#[test]
fn reserved_blocks_resize_by_granules_through_the_trait() {
    let Some(b) = backend() else { return };
    let Some(growth) = b.extensions().growable.map(|g| g.in_place_growth()) else {
        assert!(b.vmm_granularity().is_err(), "VMM without in-place growth");
        return;
    };
    let g = growth.granularity;
    assert_eq!(g, b.vmm_granularity().unwrap());
    let front = tensormem::Validated::new(std::sync::Arc::new(b));
    let desc = BlockDesc {
        kind: MemoryKind::DeviceLocal,
        size: g,
        label: "reserved",
    };
    let blk = front.reserve_block(&desc, 16 * g).unwrap();
    front.write_queued(range(blk, 0, 4096), &[5; 4096]).unwrap();
    front.resize_block(blk, 5 * g).unwrap();
    let t = front.fill_zero(range(blk, 4 * g, g)).unwrap();
    front.wait_timeout(t, None).unwrap();
    assert!(matches!(
        front.resize_block(blk, 5 * g + 1),
        Err(Error::Misaligned { .. })
    ));
    assert!(matches!(
        front.resize_block(blk, 17 * g),
        Err(Error::TooLarge { .. })
    ));
    assert_eq!(
        front.resize_block(blk, 3 * g).unwrap(),
        5 * g,
        "a shrink inside one growth keeps that growth whole"
    );
    assert_eq!(front.resize_block(blk, g).unwrap(), g);
    assert!(matches!(
        front.fill_zero(range(blk, g, g)),
        Err(Error::OutOfBounds { .. })
    ));
    front.free_block(blk).unwrap();
}

#[test]
fn other_streams_join_the_timeline() {
    let Some(b) = backend() else { return };
    let other = b.context().new_stream().unwrap();
    let t = b.join_from(&other).unwrap();
    b.wait_timeout(t, None).unwrap();
    b.join_into(&other).unwrap();
    other.synchronize().unwrap();
}

#[test]
fn elementwise_ops_match_the_reference() {
    let Some(b) = backend() else { return };
    let a: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) / 97.0).collect();
    let bias: Vec<f32> = (0..10).map(|i| i as f32 * 0.5).collect();
    let got = run_op(
        &b,
        &Op::Add {
            len: 1000,
            b_len: 10,
        },
        &[f32_bytes(&a), f32_bytes(&bias)],
    );
    let want: Vec<f32> = a
        .iter()
        .enumerate()
        .map(|(i, x)| x + bias[i % 10])
        .collect();
    assert_close(&got, &want, 1e-6);
    let got = run_op(&b, &Op::Relu { len: 1000 }, &[f32_bytes(&a)]);
    let want: Vec<f32> = a.iter().map(|x| x.max(0.0)).collect();
    assert_close(&got, &want, 0.0);
    let got = run_op(&b, &Op::Gelu { len: 1000 }, &[f32_bytes(&a)]);
    // tanh approximation of GELU is within 1e-3 of the exact one.
    let want: Vec<f32> = a
        .iter()
        .map(|&x| 0.5 * x * (1.0 + (0.797_884_6 * (x + 0.044_715 * x * x * x)).tanh()))
        .collect();
    assert_close(&got, &want, 2e-3);
}

#[test]
fn matmul_matches_the_reference() {
    let Some(b) = backend() else { return };
    let (batch, m, n, k) = (3usize, 17usize, 33usize, 20usize);
    let a: Vec<f32> = (0..batch * m * k)
        .map(|i| ((i % 13) as f32 - 6.0) / 7.0)
        .collect();
    let w: Vec<f32> = (0..n * k).map(|i| ((i % 11) as f32 - 5.0) / 5.0).collect();
    let bias: Vec<f32> = (0..n).map(|i| i as f32 / 10.0).collect();
    // A PyTorch Linear: B is [n, k], shared by every batch.
    let op = Op::MatMul {
        batch: batch as u32,
        m: m as u32,
        n: n as u32,
        k: k as u32,
        trans_a: false,
        trans_b: true,
        broadcast_b: true,
        bias: true,
        alpha: 0.5,
        weight_format: WeightFormat::F32,
    };
    let got = run_op(&b, &op, &[f32_bytes(&a), f32_bytes(&w), f32_bytes(&bias)]);
    let mut want = vec![0f32; batch * m * n];
    for bt in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let s: f32 = (0..k).map(|q| a[(bt * m + i) * k + q] * w[j * k + q]).sum();
                want[(bt * m + i) * n + j] = 0.5 * s + bias[j];
            }
        }
    }
    assert_close(&got, &want, 1e-5);
}

#[test]
fn masked_softmax_and_layernorm_match_the_reference() {
    let Some(b) = backend() else { return };
    let (rows, cols) = (6usize, 300usize);
    let x: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 37 % 101) as f32) / 25.0)
        .collect();
    let mut mask = vec![1f32; 3 * cols];
    mask[cols..2 * cols].iter_mut().for_each(|m| *m = 0.0); // mask row 1 drops everything
    mask[2 * cols..2 * cols + 7]
        .iter_mut()
        .for_each(|m| *m = 0.0);
    let op = Op::Softmax {
        rows: rows as u32,
        cols: cols as u32,
        masked: true,
        rows_per_mask: 2,
    };
    let got = run_op(&b, &op, &[f32_bytes(&x), f32_bytes(&mask)]);
    for r in 0..rows {
        let mr = &mask[(r / 2) * cols..(r / 2 + 1) * cols];
        let xr = &x[r * cols..(r + 1) * cols];
        let mx = xr
            .iter()
            .zip(mr)
            .filter(|(_, m)| **m != 0.0)
            .map(|(v, _)| *v)
            .fold(f32::NEG_INFINITY, f32::max);
        let e: Vec<f32> = xr
            .iter()
            .zip(mr)
            .map(|(v, m)| if *m != 0.0 { (v - mx).exp() } else { 0.0 })
            .collect();
        let s: f32 = e.iter().sum();
        let want: Vec<f32> = e
            .iter()
            .map(|v| if s > 0.0 { v / s } else { 0.0 })
            .collect();
        assert_close(&got[r * cols..(r + 1) * cols], &want, 1e-5);
    }
    let gamma: Vec<f32> = (0..cols).map(|i| 1.0 + i as f32 / 100.0).collect();
    let beta: Vec<f32> = (0..cols).map(|i| i as f32 / 50.0).collect();
    let op = Op::LayerNorm {
        rows: rows as u32,
        cols: cols as u32,
        eps: 1e-5,
    };
    let got = run_op(
        &b,
        &op,
        &[f32_bytes(&x), f32_bytes(&gamma), f32_bytes(&beta)],
    );
    for r in 0..rows {
        let xr = &x[r * cols..(r + 1) * cols];
        let mean = xr.iter().sum::<f32>() / cols as f32;
        let var = xr.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / cols as f32;
        let want: Vec<f32> = (0..cols)
            .map(|j| (xr[j] - mean) / (var + 1e-5).sqrt() * gamma[j] + beta[j])
            .collect();
        assert_close(&got[r * cols..(r + 1) * cols], &want, 1e-4);
    }
}

#[test]
fn permute_and_embedding_match_the_reference() {
    let Some(b) = backend() else { return };
    let dims = [2u32, 3, 4, 5];
    let perm = [0u8, 2, 1, 3];
    let x: Vec<f32> = (0..120).map(|i| i as f32).collect();
    let got = run_op(&b, &Op::Permute { dims, perm }, &[f32_bytes(&x)]);
    let mut want = Vec::new();
    for a in 0..2 {
        for c in 0..4 {
            for bb in 0..3 {
                for d in 0..5 {
                    want.push(x[((a * 3 + bb) * 4 + c) * 5 + d]);
                }
            }
        }
    }
    assert_close(&got, &want, 0.0);
    let table: Vec<f32> = (0..40).map(|i| i as f32).collect();
    let ids: Vec<u8> = [3u32, 0, 99, 9]
        .iter()
        .flat_map(|i| i.to_le_bytes())
        .collect();
    let op = Op::Embedding {
        vocab: 10,
        dim: 4,
        rows: 4,
        weight_format: WeightFormat::F32,
    };
    let got = run_op(&b, &op, &[f32_bytes(&table), ids]);
    let want = [
        12.0, 13.0, 14.0, 15.0, 0.0, 1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 0.0, 36.0, 37.0, 38.0, 39.0,
    ];
    assert_close(&got, &want, 0.0);
}

#[test]
fn conv_and_pool_match_the_reference() {
    let Some(b) = backend() else { return };
    let (c_in, h, w, c_out) = (2usize, 6usize, 5usize, 3usize);
    let x: Vec<f32> = (0..c_in * h * w).map(|i| ((i % 7) as f32) - 3.0).collect();
    let wt: Vec<f32> = (0..c_out * c_in * 9)
        .map(|i| ((i % 5) as f32) / 4.0)
        .collect();
    let bias = vec![0.5f32, -1.0, 2.0];
    let op = Op::Conv2d {
        n: 1,
        c_in: c_in as u32,
        h: h as u32,
        w: w as u32,
        c_out: c_out as u32,
        kh: 3,
        kw: 3,
        stride: 2,
        pad: 1,
        bias: true,
        weight_format: WeightFormat::F32,
    };
    let (oh, ow) = op.conv_out().unwrap();
    let got = run_op(&b, &op, &[f32_bytes(&x), f32_bytes(&wt), f32_bytes(&bias)]);
    let mut want = Vec::new();
    for co in 0..c_out {
        for oy in 0..oh as i64 {
            for ox in 0..ow as i64 {
                let mut acc = 0.0;
                for ci in 0..c_in {
                    for ky in 0..3i64 {
                        for kx in 0..3i64 {
                            let (iy, ix) = (oy * 2 + ky - 1, ox * 2 + kx - 1);
                            if iy >= 0 && iy < h as i64 && ix >= 0 && ix < w as i64 {
                                acc += x[(ci * h + iy as usize) * w + ix as usize]
                                    * wt[((co * c_in + ci) * 3 + ky as usize) * 3 + kx as usize];
                            }
                        }
                    }
                }
                want.push(acc + bias[co]);
            }
        }
    }
    assert_close(&got, &want, 1e-5);
    let op = Op::MaxPool2d {
        n: 1,
        c: c_in as u32,
        h: h as u32,
        w: w as u32,
        k: 2,
        stride: 2,
    };
    let (oh, ow) = op.conv_out().unwrap();
    let got = run_op(&b, &op, &[f32_bytes(&x)]);
    let mut want = Vec::new();
    for c in 0..c_in {
        for oy in 0..oh as usize {
            for ox in 0..ow as usize {
                let mut m = f32::NEG_INFINITY;
                for ky in 0..2 {
                    for kx in 0..2 {
                        m = m.max(x[(c * h + oy * 2 + ky) * w + ox * 2 + kx]);
                    }
                }
                want.push(m);
            }
        }
    }
    assert_close(&got, &want, 0.0);
}

#[test]
fn dispatch_rejects_bad_bindings() {
    // Binding rules are the validating front's: the backend assumes validated input.
    let Some(b) = backend() else { return };
    let f = tensormem::Validated::new(std::sync::Arc::new(b));
    let dev = f
        .alloc_block(&BlockDesc {
            kind: MemoryKind::DeviceLocal,
            size: 1024,
            label: "test",
        })
        .unwrap();
    let op = Op::Relu { len: 100 };
    assert!(matches!(
        f.dispatch(&op, &[range(dev, 0, 400)]),
        Err(Error::BindingCount {
            expected: 2,
            actual: 1,
            ..
        })
    ));
    assert!(matches!(
        f.dispatch(&op, &[range(dev, 0, 400), range(dev, 768, 400)]),
        Err(Error::OutOfBounds { .. })
    ));
    f.free_block(dev).unwrap();
}

#[test]
fn queued_writes_own_their_bytes_and_recycle_the_ring() {
    let Some(b) = backend() else { return };
    // 64 writes of 64 KiB: four times the 1 MiB pinned ring, issued without waiting.
    const N: u64 = 64;
    const W: u64 = 64 * 1024;
    let dev = alloc(&b, MemoryKind::DeviceLocal, N * W);
    let down = alloc(&b, MemoryKind::Readback, N * W);
    let mut buf = vec![0u8; W as usize];
    let mut full = 0;
    for i in 0..N {
        buf.fill(i as u8 + 1);
        let r = range(dev, i * W, W);
        if b.write_queued(r, &buf).unwrap().is_none() {
            // The ring is full: the pools would stage; here, drain and retry.
            full += 1;
            b.wait_timeout(b.flush().unwrap(), None).unwrap();
            assert!(b.write_queued(r, &buf).unwrap().is_some());
        }
        // The caller reuses its buffer at once: the device must still get `i + 1`.
        buf.fill(0xEE);
    }
    println!("write_queued: the ring was full {full} times in {N} writes");
    let t = b.copy(range(dev, 0, N * W), range(down, 0, N * W)).unwrap();
    b.wait_timeout(t, None).unwrap();
    let mut out = vec![0u8; (N * W) as usize];
    b.read_mapped(down, 0, &mut out).unwrap();
    for (i, chunk) in out.chunks(W as usize).enumerate() {
        assert!(
            chunk.iter().all(|&x| x == i as u8 + 1),
            "chunk {i} was not written intact"
        );
    }
    b.free_block(dev).unwrap();
    b.free_block(down).unwrap();
}

#[test]
fn the_per_thread_default_stream_cannot_be_adopted() {
    let Some(b) = backend() else { return };
    let err = CudaBackend::adopt(b.context().per_thread_stream(), &CudaDesc::default())
        .expect_err("the per-thread default stream must be refused");
    assert!(
        matches!(err, Error::InvalidArgument(ref m) if m.contains("PER_THREAD")),
        "{err:?}"
    );
    let own = b.context().new_stream().unwrap();
    let adopted = CudaBackend::adopt(own, &CudaDesc::default()).unwrap();
    let dev = alloc(&adopted, MemoryKind::DeviceLocal, 4096);
    adopted
        .wait_timeout(adopted.fill_zero(range(dev, 0, 4096)).unwrap(), None)
        .unwrap();
    adopted.free_block(dev).unwrap();
}

#[test]
fn kernels_are_machine_code_for_the_device_when_nvrtc_knows_it() {
    let Some(b) = backend() else { return };
    let tools = b.toolchain();
    println!("kernels: {} ({tools})", b.kernel_target());
    if tools.nvrtc.major == tools.driver.major {
        assert!(
            matches!(b.kernel_target(), CodeTarget::Cubin { .. }),
            "an NVRTC of the driver's major knows an H100/H200-class device: {}",
            b.kernel_target()
        );
    }
}

/// Runs in a child process (the sticky error poisons the process's primary context).
fn sticky_error_child() {
    use cudarc::driver::{LaunchConfig, PushKernelArg};
    let b = backend().expect("the parent saw CUDA");
    let dev = alloc(&b, MemoryKind::DeviceLocal, 4096);
    let retired = b.fill_zero(range(dev, 0, 4096)).unwrap();
    b.wait_timeout(retired, None).unwrap();
    // The application's own kernel on the backend's stream writes through a bad pointer.
    let ptx = cudarc::nvrtc::compile_ptx(
        "extern \"C\" __global__ void bad(float* p) { p[threadIdx.x] = 1.0f; }",
    )
    .unwrap();
    let module = b.context().load_module(ptx).unwrap();
    let f = module.load_function("bad").unwrap();
    let bad_ptr: u64 = 0x10;
    let mut launch = b.stream().launch_builder(&f);
    launch.arg(&bad_ptr);
    // SAFETY: deliberately faulting kernel; the fault is the point of the test.
    unsafe { launch.launch(LaunchConfig::for_num_elems(32)) }.unwrap();
    // The backend tracks only its own work: the next ticket it issues covers the kernel. The fault
    // surfaces at that submission or at its wait, as a lost device either way.
    let lost = b
        .fill_zero(range(dev, 0, 4096))
        .and_then(|t| b.wait_timeout(t, None));
    assert!(matches!(lost, Err(Error::DeviceLost { .. })), "{lost:?}");
    // Remembered: a ticket that had completed, a poll, an allocation all fail fast now.
    assert!(matches!(
        b.wait_timeout(retired, None),
        Err(Error::DeviceLost { .. })
    ));
    assert!(matches!(b.completed(), Err(Error::DeviceLost { .. })));
    assert!(matches!(
        b.alloc_block(&BlockDesc {
            kind: MemoryKind::DeviceLocal,
            size: 4096,
            label: "after loss",
        }),
        Err(Error::DeviceLost { .. })
    ));
    drop(b); // teardown still runs (and must not hang or panic)
    println!("sticky child: ok");
}

#[test]
fn a_sticky_error_is_remembered_by_every_later_call() {
    if std::env::var_os("TENSORMEM_STICKY_CHILD").is_some() {
        return sticky_error_child();
    }
    let Some(b) = backend() else { return };
    drop(b);
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_sticky_error_is_remembered_by_every_later_call",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TENSORMEM_STICKY_CHILD", "1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("sticky child: ok"),
        "{text}"
    );
}

/// Issue 20: pinned blocks live on the node the backend reports. On a NUMA machine the policy and
/// every page's node are read back from the kernel; on one node the backend must say so.
#[cfg(target_os = "linux")]
#[test]
fn pinned_blocks_follow_the_reported_numa_placement() {
    use tensormem::HostPlacement;
    use tensormem::numa::{NumaTopology, kernel};
    let Some(b) = backend() else { return };
    let placement = b.capabilities().host_placement.clone();
    // No node directory (a kernel without NUMA) counts as none: the backend is unbound then too.
    let nodes = NumaTopology::system().map_or(0, |t| t.nodes().len());
    let Some(node) = placement.bound_node() else {
        assert!(
            matches!(&placement, HostPlacement::Unbound { reason } if !reason.is_empty()),
            "{placement:?}"
        );
        if nodes == 1 {
            assert_eq!(placement, HostPlacement::unbound("one NUMA node"));
        }
        return;
    };
    assert!(nodes >= 2, "bound on a one-node machine: {placement:?}");
    for kind in [MemoryKind::Upload, MemoryKind::Readback] {
        let size = 3 << 20;
        let block = alloc(&b, kind, size);
        let ptr = b.device_addr(range(block, 0, size)).unwrap() as usize as *const u8;
        let policy = kernel::range_policy(ptr as usize).unwrap();
        assert_eq!(policy.nodes, vec![node], "{kind:?}");
        let pages: Vec<*const u8> = (0..size as usize)
            .step_by(4096)
            .map(|o| ptr.wrapping_add(o))
            .collect();
        // Registration pinned (faulted in) every page, under the policy.
        let on = kernel::page_nodes(&pages).unwrap();
        assert!(on.iter().all(|n| *n == Ok(node)), "{kind:?}: {on:?}");
        // And the block still works as pinned memory for the device.
        let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        b.write_mapped(block, 0, &data).unwrap();
        let dev = alloc(&b, MemoryKind::DeviceLocal, size);
        let t = b.copy(range(block, 0, size), range(dev, 0, size)).unwrap();
        b.wait_timeout(t, None).unwrap();
        let back = alloc(&b, MemoryKind::Readback, size);
        let t = b.copy(range(dev, 0, size), range(back, 0, size)).unwrap();
        b.wait_timeout(t, None).unwrap();
        let mut out = vec![0u8; size as usize];
        b.read_mapped(back, 0, &mut out).unwrap();
        assert_eq!(out, data);
        for id in [block, dev, back] {
            b.free_block(id).unwrap();
        }
    }
}
