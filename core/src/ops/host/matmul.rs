//! Host batched matrix product: the one op whose speed matters on the CPU.
//!
//! A transformer spends nearly all its time here (a 128-token MiniLM pass is ~2.8 GFLOP), so
//! the product is computed as a blocked `i-k-j` loop over row-major `A [m, k]` and `B [k, n]`:
//! the innermost loop is an axpy over a contiguous row of `B` into a contiguous row of `C`, which
//! the compiler vectorises without fast-math. Four rows of `C` share each loaded row of `B`
//! (register blocking), and the `k`/`n` blocks keep the touched part of `B` in L2.
//! Transposed operands are copied to row-major once per call (once in total for a broadcast `B`);
//! that costs `O(k·n)` against the product's `O(m·k·n)`.
//!
//! Each `C[i][j]` is accumulated from 0 over `p = 0..k` in order, so the result is bit-identical
//! to the naive triple loop, and then scaled by `alpha` and offset by the bias.

use std::borrow::Cow;

/// Shape and layout flags of a product (see [`Op::MatMul`](crate::ops::Op::MatMul)).
pub(super) struct Shape {
    pub batch: usize,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub trans_a: bool,
    pub trans_b: bool,
    pub broadcast_b: bool,
}

/// Columns of `C` per block (a 1 KiB row segment).
const NB: usize = 256;
/// Inner-dimension rows of `B` per block: an `NB × KB` block of `B` is 128 KiB.
const KB: usize = 128;

/// `c[b] = alpha · op(a[b]) · op(b[b]) (+ bias)`; slice lengths are those of the signature.
pub(super) fn matmul(
    s: &Shape,
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    alpha: f32,
    c: &mut [f32],
) {
    let (m, n, k) = (s.m, s.n, s.k);
    debug_assert_eq!(a.len(), s.batch * m * k);
    debug_assert_eq!(c.len(), s.batch * m * n);
    let row_major_b = |bb: &'_ [f32]| -> Vec<f32> { transpose(bb, n, k) };
    // A broadcast B is made row-major once for every batch.
    let shared_b: Option<Cow<'_, [f32]>> = match (s.broadcast_b, s.trans_b) {
        (true, true) => Some(Cow::Owned(row_major_b(b))),
        (true, false) => Some(Cow::Borrowed(b)),
        _ => None,
    };
    for (bi, cb) in c.chunks_exact_mut(m * n).enumerate() {
        let ab = &a[bi * m * k..(bi + 1) * m * k];
        let ab: Cow<'_, [f32]> = if s.trans_a {
            Cow::Owned(transpose(ab, k, m))
        } else {
            Cow::Borrowed(ab)
        };
        let bb: Cow<'_, [f32]> = match &shared_b {
            Some(shared) => Cow::Borrowed(shared),
            None => {
                let bb = &b[bi * k * n..(bi + 1) * k * n];
                if s.trans_b {
                    Cow::Owned(row_major_b(bb))
                } else {
                    Cow::Borrowed(bb)
                }
            }
        };
        gemm(m, n, k, &ab, &bb, cb);
        for row in cb.chunks_exact_mut(n) {
            match bias {
                Some(bias) => {
                    for (c, &bv) in row.iter_mut().zip(bias) {
                        *c = alpha * *c + bv;
                    }
                }
                None if alpha != 1.0 => row.iter_mut().for_each(|c| *c *= alpha),
                None => {}
            }
        }
    }
}

/// Transposes a row-major `[rows, cols]` matrix into a row-major `[cols, rows]` one.
fn transpose(src: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    debug_assert_eq!(src.len(), rows * cols);
    let mut dst = vec![0f32; src.len()];
    // 32×32 tiles keep both sides' cache lines in use.
    const T: usize = 32;
    for r0 in (0..rows).step_by(T) {
        for c0 in (0..cols).step_by(T) {
            for r in r0..(r0 + T).min(rows) {
                for cc in c0..(c0 + T).min(cols) {
                    dst[cc * rows + r] = src[r * cols + cc];
                }
            }
        }
    }
    dst
}

/// `c = a · b` for row-major `a [m, k]`, `b [k, n]`, `c [m, n]` (`c` is overwritten).
fn gemm(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    c.fill(0.0);
    for j0 in (0..n).step_by(NB) {
        let j1 = (j0 + NB).min(n);
        for p0 in (0..k).step_by(KB) {
            let p1 = (p0 + KB).min(k);
            let mut i = 0;
            while i + 4 <= m {
                let (c0, rest) = c[i * n..(i + 4) * n].split_at_mut(n);
                let (c1, rest) = rest.split_at_mut(n);
                let (c2, c3) = rest.split_at_mut(n);
                let (c0, c1, c2, c3) = (
                    &mut c0[j0..j1],
                    &mut c1[j0..j1],
                    &mut c2[j0..j1],
                    &mut c3[j0..j1],
                );
                for p in p0..p1 {
                    let brow = &b[p * n + j0..p * n + j1];
                    let (a0, a1, a2, a3) = (
                        a[i * k + p],
                        a[(i + 1) * k + p],
                        a[(i + 2) * k + p],
                        a[(i + 3) * k + p],
                    );
                    for ((((x0, x1), x2), x3), &bv) in c0
                        .iter_mut()
                        .zip(c1.iter_mut())
                        .zip(c2.iter_mut())
                        .zip(c3.iter_mut())
                        .zip(brow)
                    {
                        *x0 += a0 * bv;
                        *x1 += a1 * bv;
                        *x2 += a2 * bv;
                        *x3 += a3 * bv;
                    }
                }
                i += 4;
            }
            for i in i..m {
                let crow = &mut c[i * n + j0..i * n + j1];
                for p in p0..p1 {
                    let av = a[i * k + p];
                    let brow = &b[p * n + j0..p * n + j1];
                    for (x, &bv) in crow.iter_mut().zip(brow) {
                        *x += av * bv;
                    }
                }
            }
        }
    }
}
