//! The batched product when `b` is a weight stored as f16 or int8: dequantised one column panel
//! at a time, each panel fed to the same `sgemm` as the f32 path.
//!
//! Dequantising the whole weight into a fresh f32 vector before the product would make a
//! quantized model several times slower than f32 (`docs/decisions/quantized-matmul-dequant.md`):
//! at a few dozen tokens the product reuses each weight only a few dozen times, so a per-element
//! decode and a full-size f32 copy written to and read back from memory cost more than the
//! arithmetic. Here a task decodes a panel of `b` (all of `k`,
//! a few dozen output columns, about [`PANEL_BYTES`]) into a buffer its thread keeps, with loops
//! that vectorise ([`WeightView::row_run`], [`WeightView::channel_run`]), and runs `sgemm` on it
//! while the panel is still in cache; memory traffic is the stored bytes. Panels are spread over
//! rayon like the f32 tiles; when there are too few panels to feed the pool, each panel's rows
//! are split further and every task decodes its own copy (a task keeps at least 64 rows, so
//! its decode is that many times smaller than the product it feeds: the repeat is cheap). The
//! cut is `tasks`'s, shared with the int8-dynamic product.
//!
//! An f16 or int8 weight the dot kernel can read (`[n, k]`, row-major `a`) skips the panel: the
//! kernel converts its halves as it loads them, or dequantises its int8 rows a few at a time into
//! L1, with the same sums ([`Product::fused`]). Its tasks are cut to about four per thread, as no
//! panel buffer bounds their width.
//!
//! **Numerics.** The panel holds exactly the values [`quant::dequantize`](crate::ops::quant::dequantize)
//! gives, laid out with the strides the f32 path reads `b` with, and a task never splits `k`: so
//! every output is the f32 product of the dequantised weight, within f32 rounding of the f32
//! path's (the host is the numerical reference for quantized weights; the tests
//! `stored_matches_dequantized` and `random_shapes_match_dequantized` say so). Most outputs are
//! bit-identical; an output can differ by an ulp or two where the two paths cut the rows into
//! tiles differently (seen: 2 ulps in one output of a 65-row product computed as one tile here
//! and as 33 + 32 rows by the f32 path), as `sgemm`'s rounding of a row depends a little on
//! where it falls in the tile.
//!
//! Each pool thread keeps its largest panel buffer (at most [`PANEL_BYTES`], or `16·k` floats for
//! a very long `k`) for later products: freeing and faulting it in again per product would cost
//! more than the panel's decode.

use std::cell::RefCell;

use rayon::prelude::*;

use super::dot::{Nt, Scales, Stored};
use super::tasks::{self, Task};
use super::{OutPtr, PARALLEL_MIN_MACS, Shape, TileGemm};
use crate::Result;
use crate::ops::quant::{Int8Parts, WeightView};

/// Target size of one decoded panel (`k` × columns f32): well inside a core's L2 cache, so
/// `sgemm`'s packing reads it from cache right after it is written.
const PANEL_BYTES: usize = 128 << 10;

/// Panel widths are multiples of this (two AVX/NEON micro-kernel widths), and at least this.
const PANEL_STEP: usize = 16;

thread_local! {
    /// The calling thread's panel buffer (module doc).
    static PANEL: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `c[b] = alpha · op(a[b]) · op(w[b]) (+ bias)` for every matrix `b` of the batch, `w` read
/// through `b` in its stored format.
///
/// # Errors
/// [`Error::SizeMismatch`] when a slice's length disagrees with `s`.
pub(in crate::kernels) fn matmul_stored(
    s: &Shape,
    a: &[f32],
    b: &WeightView<'_>,
    bias: Option<&[f32]>,
    alpha: f32,
    c: &mut [f32],
) -> Result<()> {
    super::check_lengths(s, a.len(), b.len(), bias.map(<[f32]>::len), c.len())?;
    if c.is_empty() {
        return Ok(());
    }
    let (m, n, k) = (s.m, s.n, s.k);
    // With one broadcast `b` and row-major `a`, the batch's `a` and `c` matrices stack into one
    // product of `batch·m` rows (their rows are consecutive in memory): one decode serves all.
    let stacked = s.broadcast_b && !s.trans_a;
    let rows = if stacked { s.batch * m } else { m };
    let b_mats = if s.broadcast_b { 1 } else { s.batch };
    let product = Product {
        s,
        stacked,
        a,
        b,
        bias,
        alpha,
        out: OutPtr(c.as_mut_ptr()),
    };
    let parallel = s.batch * m * n * k >= PARALLEL_MIN_MACS;
    let want = tasks::wanted(parallel);
    let width = if product.fused().is_some() {
        // No panel: about `want` tasks, in whole blocks of 4 columns (the kernel's block width).
        tasks::block_width(n, b_mats, want)
    } else {
        (PANEL_BYTES / 4 / k.max(1) / PANEL_STEP * PANEL_STEP)
            .max(PANEL_STEP)
            .min(n)
    };
    let tasks = tasks::split(b_mats, n, rows, width, want);
    let run = |t: &Task| PANEL.with_borrow_mut(|panel| product.run_task(*t, panel));
    if parallel {
        tasks.par_iter().for_each(run);
    } else {
        tasks.iter().for_each(run);
    }
    Ok(())
}

/// The operands of one product, shared by its tasks.
struct Product<'a> {
    s: &'a Shape,
    /// Whether the batch's `a` and `c` matrices are read as one of `batch·m` rows.
    stacked: bool,
    a: &'a [f32],
    b: &'a WeightView<'a>,
    bias: Option<&'a [f32]>,
    alpha: f32,
    out: OutPtr,
}

impl Product<'_> {
    /// Decodes the task's panel into `panel`, then computes its `C` tile for every `a` matrix
    /// that multiplies this `b` matrix.
    fn run_task(&self, t: Task, panel: &mut Vec<f32>) {
        let Product {
            s,
            stacked: _,
            a,
            b,
            bias,
            alpha,
            out,
        } = *self;
        let (m, n, k) = (s.m, s.n, s.k);
        let cols = t.j1 - t.j0;
        match self.fused() {
            Some(Fused::Halves(halves)) => return self.run_fused(t, halves, None),
            Some(Fused::Int8(w)) => {
                let (first, groups) = ((t.mat * n + t.j0) * w.groups, w.groups);
                let scales = Scales {
                    values: &w.scales[first..first + cols * groups],
                    group: w.group,
                    groups,
                };
                return self.run_fused(t, w.q, Some(scales));
            }
            None => {}
        }
        panel.resize(cols * k, 0.0);
        let first = t.mat * k * n;
        // The panel takes the layout the f32 path reads `b` in (module doc: identical sums).
        let b_strides = if s.trans_b {
            // `b` is `[n, k]`: column j of op(b) is row j, contiguous along k.
            for (jj, row) in panel.chunks_exact_mut(k).enumerate() {
                let j = t.j0 + jj;
                b.row_run(first + j * k, t.mat * n + j, 0, row);
            }
            (1, k)
        } else {
            // `b` is `[k, n]`: row p holds inner position p of every column.
            for (p, row) in panel.chunks_exact_mut(cols).enumerate() {
                b.channel_run(first + p * n + t.j0, t.mat * n + t.j0, p, row);
            }
            (cols, 1)
        };
        let (rsa, csa) = if s.trans_a { (1, m) } else { (k, 1) };
        let tile = TileGemm {
            rows: t.r1 - t.r0,
            cols,
            k,
            alpha,
            a_strides: (rsa, csa),
            b_strides,
            c_row_stride: n,
            bias: bias.map(|b| &b[t.j0..t.j1]),
            dot: super::uses_dot(s.stacked_rows(), k, csa, b_strides.0),
        };
        for a_mat in self.a_mats(t) {
            // SAFETY: `check_lengths` verified `a.len() == batch·m·k` and `c.len() == batch·m·n`.
            // Stacked, rows `r0..r1 ≤ batch·m` of `a` (stride k) and `c` (stride n) are in bounds;
            // otherwise rows `r0..r1 ≤ m` of matrix `a_mat < batch`, read with op(a)'s strides, lie
            // below `(a_mat + 1)·m·k`, and `c`'s below `(a_mat + 1)·m·n`. The panel holds `cols·k`
            // values, read with the strides chosen with its layout. Tasks cover disjoint (matrix,
            // row range, column range) tiles of `c`, so no other thread writes these elements.
            unsafe {
                tile.run(
                    a.as_ptr().add(a_mat * m * k + t.r0 * rsa),
                    panel.as_ptr(),
                    out.0.add((a_mat * m + t.r0) * n + t.j0),
                );
            }
        }
    }
}

impl<'a> Product<'a> {
    /// The `a` (and `c`) matrices task `t`'s `b` matrix multiplies: all stacked as one, each of
    /// a broadcast batch, or the one of its own batch index.
    fn a_mats(&self, t: Task) -> std::ops::Range<usize> {
        match (self.stacked, self.s.broadcast_b) {
            (true, _) => 0..1,
            (false, true) => 0..self.s.batch,
            (false, false) => t.mat..t.mat + 1,
        }
    }

    /// The weight as the dot kernel reads it in place when it can (an `[n, k]` weight, row-major
    /// `a`, [`super::uses_dot`]'s shapes, f16 or int8): no panel is decoded.
    fn fused(&self) -> Option<Fused<'a>> {
        let s = self.s;
        if !(s.trans_b && !s.trans_a && super::uses_dot(s.stacked_rows(), s.k, 1, 1)) {
            return None;
        }
        if let Some(halves) = self.b.halves() {
            return Some(Fused::Halves(halves));
        }
        self.b.int8().map(Fused::Int8)
    }

    /// [`Product::run_task`] on the weight read in place (`scales` for int8).
    fn run_fused<E: Stored>(&self, t: Task, stored: &[E], scales: Option<Scales<'_>>) {
        let s = self.s;
        let (m, n, k) = (s.m, s.n, s.k);
        let first = t.mat * k * n;
        let rows = t.r1 - t.r0;
        let b = &stored[first + t.j0 * k..first + t.j1 * k];
        for a_mat in self.a_mats(t) {
            let a0 = a_mat * m * k + t.r0 * k;
            let nt = Nt {
                a: &self.a[a0..a0 + rows * k],
                lda: k,
                b,
                ldb: k,
                rows,
                cols: t.j1 - t.j0,
                k,
                alpha: self.alpha,
                bias: self.bias.map(|b| &b[t.j0..t.j1]),
                scales,
            };
            // SAFETY: as in `run_task`: rows `r0..r1` of this `c` matrix (stride n), columns
            // `j0..j1`, lie inside `c` (`check_lengths`), and tasks cover disjoint tiles of it.
            unsafe {
                super::dot::gemm_nt(&nt, self.out.0.add((a_mat * m + t.r0) * n + t.j0), n);
            }
        }
    }
}

/// A weight the dot kernel reads in place ([`Product::fused`]).
enum Fused<'a> {
    /// f16 halves, decoded exactly as loaded.
    Halves(&'a [u16]),
    /// int8 values and their scales.
    Int8(Int8Parts<'a>),
}

#[cfg(test)]
mod tests;
