//! Host batched matrix product: the one op whose speed matters on the CPU.
//!
//! A transformer spends nearly all its time here (a 128-token MiniLM pass is ~2.8 GFLOP). Two
//! kernels, chosen by the product's shape alone ([`uses_dot`]): when both operands run along `k`
//! (a linear layer's `[out, in]` weight, `q·kᵀ`), the dot-product kernel in `dot`, which reads
//! the weight in place; otherwise the packed GEMM in `packed`: packed panels and a SIMD
//! micro-kernel chosen at run time (the `gemm` crate's on x86-64 and AArch64, `matrixmultiply`'s
//! elsewhere, wasm included). Both take row and column strides, so transposed operands are
//! read in place, never copied.
//!
//! **Threads.** The output is cut into tiles (whole matrices of the batch first, then row and
//! column ranges of one matrix) and the tiles run on rayon's pool. A tile never splits the inner
//! dimension `k`, so every `C[i][j]` is summed by the same kernel in the same order whatever the
//! tiling or thread count: results are deterministic on a given machine (the micro-kernel, hence
//! FMA use and summation blocking, depends on the CPU's features). Products smaller than
//! [`PARALLEL_MIN_MACS`] run on the calling thread, where rayon's hand-off would cost more than it
//! saves.
//!
//! Numerics: each sum is the packed GEMM's blocked or `dot`'s lane-wise, possibly fused, f32
//! accumulation, then scaled by `alpha` and offset by the bias; it differs from a naive in-order
//! loop by a few ulps of `Σ|a·b|`, far inside the conformance suite's tolerance.

use rayon::prelude::*;

use crate::ops::split::reference_uses_dot;
use crate::{Error, Result};

mod dot;
mod dynamic;
mod packed;
mod stored;
mod tasks;

pub(super) use dynamic::matmul_dynamic;
pub(super) use stored::matmul_stored;

/// Whether a product of `m` rows (of one matrix, or the stacked rows `matmul_stored` computes)
/// runs on the dot-product kernel (`dot`) rather than `sgemm`: when op(A)'s rows and op(B)'s
/// columns are contiguous along `k` (column stride `csa`, row stride `rsb` of 1) and the shape
/// picks it ([`reference_uses_dot`], which graph tiling reads too).
fn uses_dot(m: usize, k: usize, csa: usize, rsb: usize) -> bool {
    csa == 1 && rsb == 1 && reference_uses_dot(m, k)
}

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

impl Shape {
    /// The rows `matmul_stored` computes in one product: the batch's `a` matrices stacked when
    /// they share one `b` (and `a` is row-major), else one matrix's `m`. The kernel choice
    /// ([`uses_dot`]) reads this in both paths, so they agree.
    fn stacked_rows(&self) -> usize {
        if self.broadcast_b && !self.trans_a {
            self.batch * self.m
        } else {
            self.m
        }
    }
}

/// Products of fewer multiply-adds than this run on the calling thread (about 30 µs of work on
/// one core; below it, waking the pool costs a noticeable share).
pub(super) const PARALLEL_MIN_MACS: usize = 1 << 18;

/// Smallest tile side when one matrix is split across threads: a few micro-kernel tiles (8–16
/// wide), so packing stays a small share of each tile's work.
const MIN_TILE: usize = 32;

/// One output tile: matrix `batch`, rows `i0..i1`, columns `j0..j1`.
#[derive(Clone, Copy, Debug)]
struct Tile {
    batch: usize,
    i0: usize,
    i1: usize,
    j0: usize,
    j1: usize,
}

/// The output pointer shared by the tiles.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: the pointer is only dereferenced (by `sgemm` and the bias loop) inside one tile's
// `TileGemm::run`, for the elements of that tile; tiles are disjoint, so no element is written by
// two threads, and the slice it points into outlives the parallel loop (`matmul` and
// `matmul_stored` borrow it mutably throughout).
unsafe impl Send for OutPtr {}
// SAFETY: as above; sharing the pointer value itself is harmless.
unsafe impl Sync for OutPtr {}

/// `c[b] = alpha · op(a[b]) · op(b[b]) (+ bias)` for every matrix `b` of the batch.
///
/// # Errors
/// [`Error::SizeMismatch`] when a slice's length disagrees with `s` (callers check bindings
/// first; this keeps the raw-pointer product below sound on its own).
pub(super) fn matmul(
    s: &Shape,
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    alpha: f32,
    c: &mut [f32],
) -> Result<()> {
    check_lengths(s, a.len(), b.len(), bias.map(<[f32]>::len), c.len())?;
    if c.is_empty() {
        return Ok(());
    }
    let out = OutPtr(c.as_mut_ptr());
    let parallel = s.batch * s.m * s.n * s.k >= PARALLEL_MIN_MACS;
    let run = |t: &Tile| run_tile(s, a, b, bias, alpha, out, *t);
    if parallel {
        tiles(s, true).par_iter().for_each(run);
    } else {
        tiles(s, false).iter().for_each(run);
    }
    Ok(())
}

/// Checks the operands' element counts against `s` (callers check bindings first; this keeps
/// the raw-pointer products sound on their own).
///
/// # Errors
/// [`Error::SizeMismatch`] naming the operand whose length disagrees.
fn check_lengths(s: &Shape, a: usize, b: usize, bias: Option<usize>, c: usize) -> Result<()> {
    let (m, n, k) = (s.m, s.n, s.k);
    let b_mats = if s.broadcast_b { 1 } else { s.batch };
    let check = |what: &str, expected: usize, actual: usize| {
        if expected == actual {
            Ok(())
        } else {
            Err(Error::SizeMismatch {
                what: format!("host matmul {what} elements"),
                expected: expected as u64,
                actual: actual as u64,
            })
        }
    };
    check("a", s.batch * m * k, a)?;
    check("b", b_mats * k * n, b)?;
    check("c", s.batch * m * n, c)?;
    if let Some(bias) = bias {
        check("bias", n, bias)?;
    }
    Ok(())
}

/// Cuts the batch into tiles. Serially, one tile per matrix. In parallel, one per matrix when the
/// batch alone feeds the pool; otherwise each matrix is halved along its longer side (along its
/// columns first for the dot kernel), never below [`MIN_TILE`], until there are about four tiles
/// per thread, for load balance.
fn tiles(s: &Shape, parallel: bool) -> Vec<Tile> {
    let want = if parallel {
        4 * rayon::current_num_threads()
    } else {
        1
    };
    let per_matrix = want.div_ceil(s.batch);
    // The dot kernel packs nothing, so splitting columns costs nothing; splitting rows re-reads
    // `b` (a weight) once more.
    let dot = !s.trans_a && s.trans_b && uses_dot(s.stacked_rows(), s.k, 1, 1);
    let (mut row_parts, mut col_parts) = (1usize, 1usize);
    while row_parts * col_parts < per_matrix {
        let rows = s.m.div_ceil(row_parts);
        let cols = s.n.div_ceil(col_parts);
        if dot && cols >= 2 * MIN_TILE {
            col_parts *= 2;
        } else if rows >= cols && rows >= 2 * MIN_TILE {
            row_parts *= 2;
        } else if cols >= 2 * MIN_TILE {
            col_parts *= 2;
        } else if rows >= 2 * MIN_TILE {
            row_parts *= 2;
        } else {
            break;
        }
    }
    let (row_step, col_step) = (s.m.div_ceil(row_parts), s.n.div_ceil(col_parts));
    let mut out = Vec::with_capacity(s.batch * row_parts * col_parts);
    for batch in 0..s.batch {
        for i0 in (0..s.m).step_by(row_step) {
            for j0 in (0..s.n).step_by(col_step) {
                out.push(Tile {
                    batch,
                    i0,
                    i1: (i0 + row_step).min(s.m),
                    j0,
                    j1: (j0 + col_step).min(s.n),
                });
            }
        }
    }
    out
}

/// Computes one tile of `C` with `sgemm`, then adds the bias to its rows.
fn run_tile(
    s: &Shape,
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    alpha: f32,
    out: OutPtr,
    t: Tile,
) {
    let (m, n, k) = (s.m, s.n, s.k);
    // Element (i, p) of op(A) and (p, j) of op(B), as (row stride, column stride).
    let (rsa, csa) = if s.trans_a { (1, m) } else { (k, 1) };
    let (rsb, csb) = if s.trans_b { (1, k) } else { (n, 1) };
    let a_mat = t.batch * m * k;
    let b_mat = if s.broadcast_b { 0 } else { t.batch * k * n };
    let c_first = (t.batch * m + t.i0) * n + t.j0;
    let tile = TileGemm {
        rows: t.i1 - t.i0,
        cols: t.j1 - t.j0,
        k,
        alpha,
        a_strides: (rsa, csa),
        b_strides: (rsb, csb),
        c_row_stride: n,
        bias: bias.map(|b| &b[t.j0..t.j1]),
        dot: uses_dot(s.stacked_rows(), k, csa, rsb),
    };
    // SAFETY: `matmul` checked `a.len() == batch·m·k`, `b.len() == (1 or batch)·k·n` and
    // `c.len() == batch·m·n`. For this tile, sgemm reads op(A) rows `i0..i1` × `0..k` of matrix
    // `batch` (offsets below `a_mat + m·k`), op(B) `0..k` × columns `j0..j1` of its matrix (below
    // `b_mat + k·n`), and writes C rows `i0..i1` × columns `j0..j1` of matrix `batch` (below
    // `(batch + 1)·m·n`), all in bounds. Tiles are disjoint, so no other thread touches these C
    // elements; A and B are only read.
    unsafe {
        tile.run(
            a.as_ptr().add(a_mat + t.i0 * rsa),
            b.as_ptr().add(b_mat + t.j0 * csb),
            out.0.add(c_first),
        );
    }
}

/// One `sgemm` call: `C[rows × cols] = alpha · A[rows × k] · B[k × cols] (+ bias)`, every matrix
/// addressed by a pointer and (row, column) strides in elements.
struct TileGemm<'a> {
    rows: usize,
    cols: usize,
    k: usize,
    alpha: f32,
    a_strides: (usize, usize),
    b_strides: (usize, usize),
    /// Elements between consecutive rows of `C` (its columns are contiguous).
    c_row_stride: usize,
    /// The bias of the tile's `cols` columns.
    bias: Option<&'a [f32]>,
    /// Run on the dot-product kernel (the strides allow it: see [`uses_dot`]), not `sgemm`.
    dot: bool,
}

impl TileGemm<'_> {
    /// Runs the product, then adds the bias to each row of the tile.
    ///
    /// # Safety
    /// `a` must be valid for reads of every element `(i, p)` at `i·rsa + p·csa` for `i < rows`,
    /// `p < k`; `b` likewise for `(p, j)`, `j < cols`; `c` valid for writes of every `(i, j)` at
    /// `i·c_row_stride + j`, and no other thread may access those `C` elements during the call.
    /// `bias`, when given, holds at least `cols` values.
    unsafe fn run(&self, a: *const f32, b: *const f32, c: *mut f32) {
        let (rsa, csa) = self.a_strides;
        let (rsb, csb) = self.b_strides;
        if self.dot && csa == 1 && rsb == 1 {
            // The rows of op(A) and the columns of op(B) are contiguous along `k`.
            let span = |count: usize, stride: usize| match count {
                0 => 0,
                n => (n - 1) * stride + self.k,
            };
            // SAFETY: the caller's contract makes every element `(i, p)` of A, at `i·rsa + p`,
            // readable for `i < rows`, `p < k`: the slice spans exactly up to the last one. Only
            // C is written, through `c`, so the shared reads alias no write. Likewise for B.
            let (a, b) = unsafe {
                (
                    std::slice::from_raw_parts(a, span(self.rows, rsa)),
                    std::slice::from_raw_parts(b, span(self.cols, csb)),
                )
            };
            let nt = dot::Nt {
                a,
                lda: rsa,
                b,
                ldb: csb,
                rows: self.rows,
                cols: self.cols,
                k: self.k,
                alpha: self.alpha,
                bias: self.bias,
                scales: None,
            };
            // SAFETY: the caller's contract: C's tile is writable and unshared; `bias` holds
            // `cols` values.
            unsafe { dot::gemm_nt(&nt, c, self.c_row_stride) };
            return;
        }
        // SAFETY: the caller's contract is `packed::sgemm`'s.
        unsafe {
            packed::sgemm(
                (self.rows, self.k, self.cols),
                self.alpha,
                (a, rsa, csa),
                (b, rsb, csb),
                (c, self.c_row_stride),
            );
        }
        if let Some(bias) = self.bias {
            for i in 0..self.rows {
                // SAFETY: the tile's row `i`: `cols` contiguous elements of C, writable and
                // unshared per the caller's contract.
                let row = unsafe {
                    std::slice::from_raw_parts_mut(c.add(i * self.c_row_stride), self.cols)
                };
                for (c, &bv) in row.iter_mut().zip(bias) {
                    *c += bv;
                }
            }
        }
    }
}
