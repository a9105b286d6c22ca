//! The product with an int8-dynamic weight ([`WeightFormat::Int8Dynamic`], W8A8): `A`'s rows
//! are quantised to int8 once per call, every output sums integer products per scale group,
//! and one f32 epilogue scales the sums back (the format is defined in `ops::quant`'s doc).
//!
//! **Quantising `A`** ([`quantize`]). Row `i` of op(A) becomes unsigned bytes
//! `u = round(a · inv) + z` in a buffer whose rows are padded to a multiple of [`STEP`], with its
//! scale and zero point `z` (NaN scale when the row holds a non-finite value). Rounding adds
//! 1.5·2²³ and reads the integer from the float's low bits: ties to even, as WGSL's `round` and
//! CUDA's `rintf`, in loops that vectorise. Cost: `rows · k`, against `rows · k · n` for the
//! product; the buffers stay with the calling thread between calls.
//!
//! **Kernels.** Each group sum is `Σ u · w − z · Σ w`: a task first sums its columns of `B` per
//! group. With AVX-512 VNNI ([`vnni`]), blocks of 3 rows of `A` × 4 rows of `B` run on
//! `vpdpbusd` (unsigned × signed bytes), 32 multiply-adds per 256-bit instruction (four times an
//! f32 FMA's 8), 64 on 512-bit vectors where they run at full width. Elsewhere, and for scale
//! groups that are not a multiple of 32, a portable loop ([`portable`]) computes the same sums.
//! A `B` read without `trans_b` (`[k, n]`) is transposed a task's columns at a time into a
//! buffer first, so both kernels read rows of `B` along `k`.
//!
//! **Threads.** Tasks are column ranges (whole blocks of 4) of each `B` matrix, split by rows
//! too when there are fewer than four per thread (`tasks`, as the stored-weight product's), on
//! rayon's pool above [`PARALLEL_MIN_MACS`].
//!
//! **Numerics.** The integer sums are exact, so every kernel, tiling and thread count gives the
//! same `d`, and the epilogue ([`Tile::finish`]) is shared: results are bit-identical on every
//! CPU. The other backends evaluate the same formula, so they differ from the host only where a
//! float operation rounds differently (the division `255 / (hi − lo)` or a fused multiply-add).
//!
//! [`WeightFormat::Int8Dynamic`]: crate::WeightFormat::Int8Dynamic

use std::cell::RefCell;

use rayon::prelude::*;

use super::tasks::{self, Task};
use super::{OutPtr, PARALLEL_MIN_MACS, Shape};
use crate::Result;
use crate::ops::quant::Int8Parts;

mod quantize;
#[cfg(target_arch = "x86_64")]
mod vnni;

use quantize::{Rows, quantize};

/// Bytes of the widest vector step along `k` (512 bits): rows of quantised `A` are padded to a
/// multiple of it.
const STEP: usize = 64;

thread_local! {
    /// The calling thread's quantised rows of `A`, kept across calls.
    static ROWS: RefCell<Rows> = RefCell::new(Rows::default());
    /// A pool thread's transposed columns of a `[k, n]` weight, kept across calls.
    static PANEL: RefCell<Vec<i8>> = const { RefCell::new(Vec::new()) };
    /// A pool thread's sums of its task's columns of `B` per group, kept across calls.
    static SUMS: RefCell<Vec<i32>> = const { RefCell::new(Vec::new()) };
}

/// `c[b] = alpha · op(a[b]) · op(w[b]) (+ bias)` for every matrix `b` of the batch, with `A`
/// quantised per row (module doc).
///
/// # Errors
/// [`Error::SizeMismatch`](crate::Error::SizeMismatch) when a slice's length disagrees with `s`.
pub(in crate::kernels) fn matmul_dynamic(
    s: &Shape,
    a: &[f32],
    w: &Int8Parts<'_>,
    bias: Option<&[f32]>,
    alpha: f32,
    c: &mut [f32],
) -> Result<()> {
    super::check_lengths(s, a.len(), w.q.len(), bias.map(<[f32]>::len), c.len())?;
    if c.is_empty() {
        return Ok(());
    }
    let parallel = s.batch * s.m * s.n * s.k >= PARALLEL_MIN_MACS;
    let mut rows = ROWS.take();
    quantize(s, a, parallel, &mut rows);
    let product = Product {
        s,
        rows: &rows,
        w,
        bias,
        alpha,
        out: OutPtr(c.as_mut_ptr()),
    };
    // Every quantised row is materialised, so a broadcast `b` multiplies all rows stacked.
    let (b_mats, per_mat) = match s.broadcast_b {
        true => (1, s.batch * s.m),
        false => (s.batch, s.m),
    };
    let want = tasks::wanted(parallel);
    let width = tasks::block_width(s.n, b_mats, want);
    let tasks = tasks::split(b_mats, s.n, per_mat, width, want);
    let run = |t: &Task| {
        PANEL.with_borrow_mut(|panel| SUMS.with_borrow_mut(|sums| product.run(*t, panel, sums)))
    };
    if parallel {
        tasks.par_iter().for_each(run);
    } else {
        tasks.iter().for_each(run);
    }
    ROWS.set(rows);
    Ok(())
}

/// The operands of one product, shared by its tasks.
struct Product<'a> {
    s: &'a Shape,
    rows: &'a Rows,
    w: &'a Int8Parts<'a>,
    bias: Option<&'a [f32]>,
    alpha: f32,
    out: OutPtr,
}

impl Product<'_> {
    /// Computes task `t`'s tile of `C` (its rows are those of `b` matrix `t.mat`'s own `a`
    /// matrix, or of all of them stacked for a broadcast `b`); `panel` holds the transposed
    /// columns of a `[k, n]` `B`, `sums` the columns' sums per group.
    fn run(&self, t: Task, panel: &mut Vec<i8>, sums: &mut Vec<i32>) {
        let (n, k) = (self.s.n, self.s.k);
        let first_row = if self.s.broadcast_b {
            0
        } else {
            t.mat * self.s.m
        };
        let (r0, r1) = (first_row + t.r0, first_row + t.r1);
        let (ld, groups) = (self.rows.ld, self.w.groups);
        let cols = t.j1 - t.j0;
        let first = t.mat * k * n;
        let w: &[i8] = if self.s.trans_b {
            &self.w.q[first + t.j0 * k..first + t.j1 * k]
        } else {
            // `B` is `[k, n]`: column `j` is every `n`-th element from `j`.
            panel.resize(cols * k, 0);
            for (jj, row) in panel.chunks_exact_mut(k).enumerate() {
                let column = self.w.q[first + t.j0 + jj..].iter().step_by(n);
                for (o, &v) in row.iter_mut().zip(column) {
                    *o = v;
                }
            }
            panel
        };
        sums.clear();
        for row in w.chunks_exact(k) {
            sums.extend(row.chunks(self.w.group).map(sum_i8));
        }
        let tile = Tile {
            u: &self.rows.u[r0 * ld..r1 * ld],
            ld,
            scale: &self.rows.scale[r0..r1],
            zero: &self.rows.zero[r0..r1],
            w,
            wsums: sums,
            wscales: &self.w.scales[(t.mat * n + t.j0) * groups..][..cols * groups],
            rows: r1 - r0,
            cols,
            k,
            group: self.w.group,
            groups,
            alpha: self.alpha,
            bias: self.bias.map(|b| &b[t.j0..t.j1]),
        };
        // SAFETY: `check_lengths` verified `c.len() == batch·m·n`; rows `r0..r1 ≤ batch·m` and
        // columns `j0..j1 ≤ n` of it (row stride `n`) are in bounds, and tasks cover disjoint
        // (row range, column range) tiles, so no other thread writes these elements.
        unsafe { run_tile(&tile, self.out.0.add(r0 * n + t.j0), n) };
    }
}

/// One tile's operands: `rows` quantised rows of `A` against `cols` rows of `B` (along `k`).
struct Tile<'a> {
    /// Quantised rows, `ld` bytes apart.
    u: &'a [u8],
    ld: usize,
    /// Each row's scale (NaN for a non-finite row).
    scale: &'a [f32],
    /// Each row's zero point.
    zero: &'a [i32],
    /// The int8 rows of `B`, `k` apart.
    w: &'a [i8],
    /// The sums of `B`'s rows per group, `groups` per row.
    wsums: &'a [i32],
    /// `B`'s scales, `groups` per row of `B`.
    wscales: &'a [f32],
    rows: usize,
    cols: usize,
    k: usize,
    group: usize,
    groups: usize,
    alpha: f32,
    bias: Option<&'a [f32]>,
}

impl Tile<'_> {
    /// The output `(i, j)` from its weighted group sums `acc = Σ_g scale[j][g] · d_g`.
    #[inline(always)]
    fn finish(&self, i: usize, j: usize, acc: f32) -> f32 {
        self.alpha * (self.scale[i] * acc) + self.bias.map_or(0.0, |b| b[j])
    }

    /// `acc + scale[j][g] · d`, the epilogue's step for group `g` of column `j`.
    #[inline(always)]
    fn weigh(&self, acc: f32, j: usize, g: usize, d: i32) -> f32 {
        acc + self.wscales[j * self.groups + g] * d as f32
    }
}

/// The sum of `s`'s values: with AVX2, 32 per instruction ([`vnni::sum_i8`]).
fn sum_i8(s: &[i8]) -> i32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { vnni::sum_i8(s) };
    }
    s.iter().map(|&v| i32::from(v)).sum()
}

/// Computes `t` into `c` (row `i` at `c + i·ldc`) on the fastest kernel the CPU and the groups
/// allow.
///
/// # Safety
/// `c` must be valid for writes of `c[i·ldc + j]` for `i < rows`, `j < cols`, unshared.
unsafe fn run_tile(t: &Tile<'_>, c: *mut f32, ldc: usize) {
    #[cfg(target_arch = "x86_64")]
    if vnni::available() {
        let fill = |step: usize| t.groups == 1 || t.group.is_multiple_of(step);
        if crate::ops::cpu::wide_vectors() && fill(64) {
            // SAFETY: the features were detected; the groups are whole 64-byte steps but the
            // last; the caller's contract is passed on.
            return unsafe { vnni::run_512(t, c, ldc) };
        }
        if fill(32) {
            // SAFETY: as above, with 32-byte steps.
            return unsafe { vnni::run_256(t, c, ldc) };
        }
    }
    // SAFETY: the caller's contract is passed on.
    unsafe { portable(t, c, ldc) }
}

/// The integer sums in plain loops (they vectorise on any target).
///
/// # Safety
/// As [`run_tile`].
unsafe fn portable(t: &Tile<'_>, c: *mut f32, ldc: usize) {
    for i in 0..t.rows {
        let (u, z) = (&t.u[i * t.ld..][..t.k], t.zero[i]);
        for j in 0..t.cols {
            let w = &t.w[j * t.k..][..t.k];
            let mut acc = 0f32;
            for (g, (u, w)) in u.chunks(t.group).zip(w.chunks(t.group)).enumerate() {
                // `Σ (u − z) · w` as the VNNI kernel forms it: `Σ u · w − z · Σ w`, wrapping.
                let dot = u.iter().zip(w).fold(0i32, |d, (&a, &b)| {
                    d.wrapping_add(i32::from(a) * i32::from(b))
                });
                let d = dot.wrapping_sub(z.wrapping_mul(t.wsums[j * t.groups + g]));
                acc = t.weigh(acc, j, g, d);
            }
            // SAFETY: `i < rows`, `j < cols`: writable and unshared per the caller's contract.
            unsafe { *c.add(i * ldc + j) = t.finish(i, j, acc) };
        }
    }
}

#[cfg(test)]
mod tests;
