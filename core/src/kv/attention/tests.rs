use super::*;
use crate::kv::KvDType;

/// Deterministic values in [-1, 1) with occasional outliers, so int8 scales must grow.
fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let x = (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
            if i % 97 == 0 { x * 4.0 } else { x }
        })
        .collect()
}

/// Dense attention over contiguous keys and values `[len][kv_heads][d]`, scores materialised.
fn dense(q: &[f32], k: &[f32], v: &[f32], len: usize, hq: usize, hkv: usize, d: usize) -> Vec<f32> {
    let n = q.len() / (hq * d);
    let mut out = vec![0f32; q.len()];
    for t in 0..n {
        let visible = len - n + t + 1;
        for h in 0..hq {
            let kvh = h * hkv / hq;
            let qv = &q[(t * hq + h) * d..][..d];
            let scores: Vec<f64> = (0..visible)
                .map(|p| {
                    let kk = &k[(p * hkv + kvh) * d..][..d];
                    qv.iter()
                        .zip(kk)
                        .map(|(a, b)| f64::from(*a) * f64::from(*b))
                        .sum::<f64>()
                        / (d as f64).sqrt()
                })
                .collect();
            let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let z: f64 = e.iter().sum();
            for (p, w) in e.iter().enumerate() {
                let vv = &v[(p * hkv + kvh) * d..][..d];
                for i in 0..d {
                    out[(t * hq + h) * d + i] += (w / z * f64::from(vv[i])) as f32;
                }
            }
        }
    }
    out
}

/// Stores `len` tokens in blocks named by a scattered table and runs paged attention for the
/// last `n` of them; returns (paged, dense).
fn compare(dtype: KvDType, block_tokens: u32, len: usize, n: usize) -> (Vec<f32>, Vec<f32>) {
    let (layers, hkv, hq, d) = (2u32, 2usize, 6usize, 16usize);
    let g = KvGeometry::new(layers, hkv as u32, d as u32, dtype, block_tokens, 4096).unwrap();
    let blocks = len.div_ceil(block_tokens as usize);
    // Blocks in reverse, with gaps: the table, not the address order, decides.
    let table: Vec<u32> = (0..blocks as u32)
        .map(|i| 2 * (blocks as u32 - i))
        .collect();
    let stride = g.block_bytes() as usize;
    let mut memory = vec![0u8; stride * (2 * blocks + 1)];
    let k = values(1, len * hkv * d);
    let v = values(2, len * hkv * d);
    let layer = 1;
    for pos in 0..len {
        let b = table[pos / block_tokens as usize] as usize;
        let bytes = &mut memory[b * stride..(b + 1) * stride];
        let (kt, vt) = (
            &k[pos * hkv * d..][..hkv * d],
            &v[pos * hkv * d..][..hkv * d],
        );
        g.layout()
            .write_token(bytes, layer, (pos % block_tokens as usize) as u32, kt, vt);
        // The other layer gets other values: attention must read the right one.
        g.layout()
            .write_token(bytes, 0, (pos % block_tokens as usize) as u32, vt, kt);
    }
    let q = values(3, n * hq * d);
    let query = PagedQuery {
        layer,
        q_heads: hq as u32,
        q: &q,
        table: &table,
        len,
        scale: 1.0 / (d as f32).sqrt(),
    };
    let paged = paged_attention(&g, &query, &|b| {
        &memory[b as usize * stride..(b as usize + 1) * stride]
    })
    .unwrap();
    (paged, dense(&q, &k, &v, len, hq, hkv, d))
}

fn max_rel(a: &[f32], b: &[f32]) -> f32 {
    let scale = b.iter().fold(0f32, |m, x| m.max(x.abs()));
    a.iter()
        .zip(b)
        .fold(0f32, |m, (x, y)| m.max((x - y).abs() / scale))
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

/// Paged attention over `dtype` keys and values within relative error `tol` of dense attention,
/// for each `(block tokens, context length, queries)`.
fn within(dtype: KvDType, tol: f32, cases: &[(u32, usize, usize)]) {
    for &(bt, len, n) in cases {
        let (p, d) = compare(dtype, bt, len, n);
        assert!(
            max_rel(&p, &d) < tol,
            "bt {bt} len {len} n {n}: {}",
            max_rel(&p, &d)
        );
    }
}

#[test]
fn decode_and_chunked_prefill_match_dense_attention_in_f32() {
    within(
        KvDType::F32,
        1e-5,
        &[
            (16, 1, 1),
            (16, 37, 1),
            (8, 100, 1),
            (4, 50, 13),
            (16, 64, 64),
        ],
    );
}

#[test]
fn f16_keys_and_values_stay_within_1e_3() {
    within(KvDType::F16, 1e-3, &[(16, 37, 1), (8, 200, 7)]);
}

#[test]
fn int8_keys_and_values_keep_cosine_above_0_999() {
    for (bt, len, n) in [(16, 37, 1), (8, 200, 7), (32, 300, 1)] {
        let (p, d) = compare(KvDType::Int8, bt, len, n);
        assert!(
            cosine(&p, &d) >= 0.999,
            "bt {bt} len {len}: {}",
            cosine(&p, &d)
        );
    }
}

#[test]
fn an_int8_head_rescales_its_earlier_tokens_instead_of_clipping() {
    let g = KvGeometry::new(1, 1, 4, KvDType::Int8, 4, 64).unwrap();
    let mut block = vec![0u8; g.block_bytes() as usize];
    let zeros = [0f32; 4];
    g.layout()
        .write_token(&mut block, 0, 0, &[0.5, -0.25, 0.0, 0.1], &zeros);
    g.layout()
        .write_token(&mut block, 0, 1, &[8.0, 0.0, -8.0, 1.0], &zeros);
    let mut out = [0f32; 4];
    g.layout().read_head(&block, 0, 0, 0, 0, &mut out);
    let step = 8.0 / 127.0;
    for (a, b) in out.iter().zip([0.5, -0.25, 0.0, 0.1]) {
        assert!((a - b).abs() <= step, "{a} vs {b}");
    }
    g.layout().read_head(&block, 0, 0, 0, 1, &mut out);
    assert!((out[0] - 8.0).abs() < 1e-6 && (out[2] + 8.0).abs() < 1e-6);
}

#[test]
fn shapes_that_disagree_with_the_geometry_are_refused() {
    let g = KvGeometry::new(1, 2, 4, KvDType::F32, 4, 64).unwrap();
    let mem = vec![0u8; g.block_bytes() as usize];
    let q = vec![0f32; 3 * 4];
    let bad_heads = PagedQuery {
        layer: 0,
        q_heads: 3,
        q: &q,
        table: &[0],
        len: 1,
        scale: 1.0,
    };
    assert!(paged_attention(&g, &bad_heads, &|_| &mem).is_err());
    let q = vec![0f32; 2 * 4];
    let short_table = PagedQuery {
        layer: 0,
        q_heads: 2,
        q: &q,
        table: &[0],
        len: 5,
        scale: 1.0,
    };
    assert!(paged_attention(&g, &short_table, &|_| &mem).is_err());
    let bad_layer = PagedQuery {
        layer: 1,
        q_heads: 2,
        q: &q,
        table: &[0],
        len: 1,
        scale: 1.0,
    };
    assert!(paged_attention(&g, &bad_layer, &|_| &mem).is_err());
}
