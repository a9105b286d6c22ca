//! The kernels against the host reference: element-wise ops, matmul, softmax and layer norm,
//! permute and embedding, convolution and pooling; bad bindings refused; machine code.

use tensormem::backend::{BlockDesc, BlockRange};
use tensormem::{Backend, Error, MemoryKind, Op, WeightFormat};
use tensormem_cuda::CudaBackend;
use tensormem_cuda::toolchain::CodeTarget;

use crate::{alloc, backend, bytes_f32, f32_bytes, range};
use tensormem::ops::samples::support::assert_close;

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
    let op = Op::matmul(
        (batch as u32, m as u32, n as u32, k as u32),
        false,
        true,
        true,
        true,
        0.5,
    );
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
    let op = Op::conv2d(
        (1, c_in as u32, h as u32, w as u32),
        c_out as u32,
        (3, 3),
        2,
        1,
        true,
    );
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
    let op = Op::max_pool2d((1, c_in as u32, h as u32, w as u32), 2, 2);
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
