//! The decoder ops on the host against formulas written out here in f64.

use crate::kernels::run;
use crate::ops::{KvDType, KvLayout, Op};

fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

fn run_bytes(op: &Op, inputs: &[&[u8]], out: &mut [u8]) {
    run(op, inputs, &mut [out]).expect("run");
}

fn run_f32(op: &Op, inputs: &[&[u8]]) -> Vec<f32> {
    let mut out = vec![0f32; op.signature().unwrap().outputs[0].len as usize];
    run_bytes(op, inputs, bytemuck::cast_slice_mut(&mut out));
    out
}

fn close(got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (f64::from(*g) - w).abs() <= tol * (1.0 + w.abs()),
            "element {i}: got {g}, want {w}"
        );
    }
}

#[test]
fn rms_norm_matches_its_formula() {
    let (rows, cols) = (3usize, 40usize);
    let (x, w) = (values(1, rows * cols), values(2, cols));
    let op = Op::RmsNorm {
        rows: rows as u32,
        cols: cols as u32,
        eps: 1e-5,
    };
    let got = run_f32(&op, &[bytemuck::cast_slice(&x), bytemuck::cast_slice(&w)]);
    let mut want = Vec::new();
    for r in x.chunks(cols) {
        let ms = r.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / cols as f64;
        want.extend(
            r.iter()
                .zip(&w)
                .map(|(&v, &w)| f64::from(v) * f64::from(w) / (ms + 1e-5).sqrt()),
        );
    }
    close(&got, &want, 1e-6);
}

#[test]
fn rope_rotates_halves_by_position() {
    let (tokens, heads, d) = (3usize, 2usize, 8usize);
    let x = values(3, tokens * heads * d);
    let positions = [0u32, 5, 1000];
    let op = Op::Rope {
        tokens: tokens as u32,
        heads: heads as u32,
        head_dim: d as u32,
        theta: 10000.0,
    };
    let got = run_f32(
        &op,
        &[bytemuck::cast_slice(&x), bytemuck::cast_slice(&positions)],
    );
    let mut want = vec![0f64; x.len()];
    for (t, &pos) in positions.iter().enumerate() {
        for h in 0..heads {
            let base = (t * heads + h) * d;
            for i in 0..d / 2 {
                let f = f64::from(pos) * 10000f64.powf(-2.0 * i as f64 / d as f64);
                let (a, b) = (f64::from(x[base + i]), f64::from(x[base + i + d / 2]));
                want[base + i] = a * f.cos() - b * f.sin();
                want[base + i + d / 2] = b * f.cos() + a * f.sin();
            }
        }
    }
    // Position 1000 in f32 angles: a few ulps of 1000 rad.
    close(&got, &want, 2e-4);
    assert!(
        Op::Rope {
            tokens: 1,
            heads: 1,
            head_dim: 3,
            theta: 1e4
        }
        .signature()
        .is_err()
    );
}

#[test]
fn silu_mul_is_the_swiglu_gate() {
    let (g, u) = (values(4, 33), values(5, 33));
    let got = run_f32(
        &Op::SiluMul { len: 33 },
        &[bytemuck::cast_slice(&g), bytemuck::cast_slice(&u)],
    );
    let want: Vec<f64> = g
        .iter()
        .zip(&u)
        .map(|(&g, &u)| f64::from(g) / (1.0 + (-f64::from(g)).exp()) * f64::from(u))
        .collect();
    close(&got, &want, 1e-6);
}

/// A cache of `blocks` blocks cut into two segments, two sequences of different lengths with
/// scattered block tables; every token written by `KvWrite`, attention checked against dense f64
/// attention, through one segment per dispatch with the state carried.
fn paged_case(dtype: KvDType, tol: f64) {
    let kv = KvLayout {
        layers: 2,
        kv_heads: 2,
        head_dim: 8,
        block_tokens: 4,
        dtype,
    };
    let (hq, d, layer) = (4usize, 8usize, 1u32);
    let stride = (kv.block_bytes().div_ceil(16) * 16) as u32;
    let seg_blocks = [3u32, 3];
    let mut segments: Vec<Vec<u8>> = seg_blocks
        .iter()
        .map(|&b| vec![0u8; (b * stride) as usize])
        .collect();
    // Sequence 0: 9 tokens in blocks 4, 1, 5; sequence 1: 6 tokens in blocks 0, 3.
    let tables: [u32; 6] = [4, 1, 5, 0, 3, 0];
    let lens = [9usize, 6];
    let row = kv.kv_heads as usize * d;
    let mut dense_k: Vec<Vec<f32>> = vec![Vec::new(); 2];
    let mut dense_v: Vec<Vec<f32>> = vec![Vec::new(); 2];
    for (s, &len) in lens.iter().enumerate() {
        let (k, v) = (
            values(10 + s as u64, len * row),
            values(20 + s as u64, len * row),
        );
        for (first, seg) in [(0u32, 0usize), (3, 1)] {
            let slots: Vec<u32> = (0..len)
                .map(|p| {
                    let b = tables[s * 3 + p / 4];
                    if b >= first && b < first + seg_blocks[seg] {
                        (b - first) * 4 + (p % 4) as u32
                    } else {
                        u32::MAX
                    }
                })
                .collect();
            let op = Op::KvWrite {
                kv,
                blocks: seg_blocks[seg],
                stride,
                layer,
                tokens: len as u32,
            };
            let ins: [&[u8]; 3] = [
                bytemuck::cast_slice(&k),
                bytemuck::cast_slice(&v),
                bytemuck::cast_slice(&slots),
            ];
            run_bytes(&op, &ins, &mut segments[seg]);
        }
        dense_k[s] = k;
        dense_v[s] = v;
    }
    // Queries: the last 3 tokens of sequence 0 (chunked prefill) and the last of sequence 1.
    let meta: [u32; 8] = [0, 7, 0, 8, 0, 9, 1, 6];
    let tokens = 4usize;
    let q = values(30, tokens * hq * d);
    let scale = 1.0 / (d as f32).sqrt();
    let mut carry: Option<Vec<f32>> = None;
    let mut got = Vec::new();
    for (i, (first, seg)) in [(0u32, 0usize), (3, 1)].into_iter().enumerate() {
        let last = i == 1;
        let op = Op::PagedAttention {
            kv,
            blocks: seg_blocks[seg],
            stride,
            first_block: first,
            layer,
            tokens: tokens as u32,
            q_heads: hq as u32,
            rows: 2,
            width: 3,
            scale,
            carry_in: carry.is_some(),
            carry_out: !last,
        };
        let mut ins: Vec<&[u8]> = vec![
            bytemuck::cast_slice(&q),
            &segments[seg],
            bytemuck::cast_slice(&tables),
            bytemuck::cast_slice(&meta),
        ];
        if let Some(c) = &carry {
            ins.push(bytemuck::cast_slice(c));
        }
        let out = run_f32(&op, &ins);
        if last { got = out } else { carry = Some(out) }
    }
    let mut want = vec![0f64; got.len()];
    for t in 0..tokens {
        let (s, seen) = (meta[2 * t] as usize, meta[2 * t + 1] as usize);
        for h in 0..hq {
            let kvh = h / (hq / kv.kv_heads as usize);
            let qv = &q[(t * hq + h) * d..][..d];
            let scores: Vec<f64> = (0..seen)
                .map(|p| {
                    let kk = &dense_k[s][p * row + kvh * d..][..d];
                    qv.iter()
                        .zip(kk)
                        .map(|(a, b)| f64::from(*a) * f64::from(*b))
                        .sum::<f64>()
                        * f64::from(scale)
                })
                .collect();
            let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|x| (x - m).exp()).collect();
            let z: f64 = e.iter().sum();
            for (p, w) in e.iter().enumerate() {
                for j in 0..d {
                    want[(t * hq + h) * d + j] +=
                        w / z * f64::from(dense_v[s][p * row + kvh * d + j]);
                }
            }
        }
    }
    close(&got, &want, tol);
}

#[test]
fn paged_attention_over_two_segments_matches_dense_f32() {
    paged_case(KvDType::F32, 1e-5);
}

#[test]
fn paged_attention_over_two_segments_matches_dense_f16() {
    paged_case(KvDType::F16, 2e-3);
}

#[test]
fn paged_attention_over_two_segments_matches_dense_int8() {
    paged_case(KvDType::Int8, 3e-2);
}

/// Attention of one token with `q_heads` query heads over one block of layer 0 (a table of one
/// row of width 1), no carry.
fn one_token_attention(kv: KvLayout, q_heads: u32) -> Op {
    Op::PagedAttention {
        kv,
        blocks: 1,
        stride: kv.block_bytes() as u32,
        first_block: 0,
        layer: 0,
        tokens: 1,
        q_heads,
        rows: 1,
        width: 1,
        scale: 1.0,
        carry_in: false,
        carry_out: false,
    }
}

#[test]
fn kv_ops_refuse_bad_parameters() {
    let kv = KvLayout {
        layers: 2,
        kv_heads: 2,
        head_dim: 8,
        block_tokens: 4,
        dtype: KvDType::F32,
    };
    let stride = kv.block_bytes() as u32;
    let write = |layer, stride| Op::KvWrite {
        kv,
        blocks: 1,
        stride,
        layer,
        tokens: 1,
    };
    assert!(write(0, stride).signature().is_ok());
    assert!(
        write(2, stride).signature().is_err(),
        "layer past the layout"
    );
    assert!(
        write(0, stride - 4).signature().is_err(),
        "stride below a block"
    );
    assert!(
        write(0, stride + 2).signature().is_err(),
        "stride not a multiple of 4"
    );
    let attn = one_token_attention(kv, 3);
    assert!(attn.signature().is_err(), "3 query heads over 2 KV heads");
}

#[test]
fn paged_attention_with_a_bad_table_row_gives_zeros_not_a_panic() {
    let kv = KvLayout {
        layers: 1,
        kv_heads: 1,
        head_dim: 4,
        block_tokens: 2,
        dtype: KvDType::F32,
    };
    let op = one_token_attention(kv, 1);
    let seg = vec![0u8; kv.block_bytes() as usize];
    let (q, tables, meta) = ([1f32; 4], [0u32], [7u32, 100]);
    let got = run_f32(
        &op,
        &[
            bytemuck::cast_slice(&q),
            &seg,
            bytemuck::cast_slice(&tables),
            bytemuck::cast_slice(&meta),
        ],
    );
    assert_eq!(got, vec![0.0; 4]);
}
