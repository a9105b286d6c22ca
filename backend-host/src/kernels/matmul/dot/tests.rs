//! The dot kernel's int8 path on every lane width this CPU has (portable, the one wasm32 and
//! other non-x86 targets run; AVX2; AVX-512) and on the one chosen at run time, against an f64
//! reference of the dequantised product.

use super::{Nt, Portable, Scales, gemm_nt, nt};

/// A product kernel over int8 weights (see [`gemm_nt`]'s contract).
type Kernel = unsafe fn(&Nt<'_, i8>, *mut f32, usize);

/// The kernels this CPU runs: the portable lanes, each x86-64 width it has, the dispatched one.
fn kernels() -> Vec<Kernel> {
    let mut out: Vec<Kernel> = vec![nt::<Portable, i8>, gemm_nt::<i8>];
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx2") && has!("fma") && has!("f16c") {
            out.push(super::x86::nt_avx2::<i8>);
            if has!("avx512f") {
                out.push(super::x86::nt_avx512::<i8>);
            }
        }
    }
    out
}

/// Values of an LCG: `len` of them in [-1, 1) and `len` int8 values (−128 included).
fn values(len: usize, seed: u64) -> (Vec<f32>, Vec<i8>) {
    let mut s = seed.wrapping_mul(6_364_136_223_846_793_005) | 1;
    let mut next = move || {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        s >> 33
    };
    (0..len)
        .map(|_| {
            let v = next();
            (
                (v % (1 << 24)) as f32 / (1 << 23) as f32 - 1.0,
                (v >> 24) as u8 as i8,
            )
        })
        .unzip()
}

/// Every lane width gives every output within `2·(k + 2)·ε·(|alpha|·Σ|a·q·scale| + |bias|)` of
/// the f64 product, for one scale per row or groups that are multiples of 8 (the last one
/// short), `k` with and without a tail, and 1 to 13 rows (the matrix-vector loop and the blocks).
#[test]
fn int8_lanes_match_the_dequantized_product() {
    let cases = [
        (1, 9, 130, 130),
        (2, 5, 131, 8),
        (3, 4, 128, 128),
        (5, 7, 301, 16),
        (13, 11, 200, 40),
    ];
    for (seed, (rows, cols, k, group)) in cases.into_iter().enumerate() {
        let groups = k / group + usize::from(k % group != 0);
        let (a, _) = values(rows * k, seed as u64);
        let (bias, q) = values(cols * k, seed as u64 + 7);
        let (scales, _) = values(cols * groups, seed as u64 + 9);
        let scales: Vec<f32> = scales.iter().map(|s| s.abs() / 64.0 + 1e-3).collect();
        let alpha = 0.75;
        let p = Nt {
            a: &a,
            lda: k,
            b: &q,
            ldb: k,
            rows,
            cols,
            k,
            alpha,
            bias: Some(&bias[..cols]),
            scales: Some(Scales {
                values: &scales,
                group,
                groups,
            }),
        };
        let outputs: Vec<Vec<f32>> = kernels()
            .into_iter()
            .map(|kernel| {
                let mut c = vec![0f32; rows * cols];
                // SAFETY: `c` holds `rows · cols` elements (row stride `cols`), `a` and `q` hold
                // every row the product reads, and `kernels` lists only what this CPU runs.
                unsafe { kernel(&p, c.as_mut_ptr(), cols) };
                c
            })
            .collect();
        for i in 0..rows {
            for j in 0..cols {
                let terms = (0..k).map(|x| {
                    let b = f64::from(q[j * k + x]) * f64::from(scales[j * groups + x / group]);
                    f64::from(a[i * k + x]) * b
                });
                let (sum, abs) = terms.fold((0.0, 0.0), |(s, m), t| (s + t, m + t.abs()));
                let want = 0.75 * sum + f64::from(bias[j]);
                let eps = f64::from(f32::EPSILON);
                let bound = 2.0 * (k as f64 + 2.0) * eps * (0.75 * abs + f64::from(bias[j].abs()));
                for got in outputs.iter().map(|c| c[i * cols + j]) {
                    let err = (f64::from(got) - want).abs();
                    assert!(
                        err <= bound,
                        "{rows}x{cols}x{k}/{group} ({i}, {j}): {got} vs {want}"
                    );
                }
            }
        }
    }
}
