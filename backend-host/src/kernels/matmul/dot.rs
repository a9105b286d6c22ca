//! The product `C = alpha · A · Bᵀ (+ bias)` when the rows of both `A` and `B` run contiguously
//! along `k` (`trans_b` without `trans_a`): every linear layer (its weight is `[out, in]`) and
//! attention's `q·kᵀ`. Each output is the dot product of two contiguous rows, so the kernel reads
//! both operands where they lie and packs nothing.
//!
//! Why not the packed GEMM here: it packs `B` into panels on every call. A linear layer's
//! `B` is its weight, streamed from memory once per product; with a few dozen rows of `A` (a
//! sentence or three) re-packing the weight costs more than the arithmetic (it was over half of
//! MiniLM's host time at batch 1). Read in place, the weight is streamed once per row chunk.
//!
//! **Kernel.** A block of 3 rows of `A` × 4 rows of `B` keeps 12 accumulators of `L` lanes in
//! registers; each step along `k` loads 7 vectors and issues 12 multiply-adds. For each group of
//! 4 rows of `B` (which stay in L1) the blocks walk a chunk of `A`'s rows sized to stay in L2.
//! While one group's blocks run, the next group's rows are prefetched into L2, a part per block
//! and a cache line per step: with a few rows of `A` the blocks are few, and the first would
//! otherwise wait on memory alone. (Into L2 and spread out: prefetches into L1, or a part's
//! lines asked for at once, stalled on the core's queue of outstanding misses.)
//! The lane width is chosen at run time: 16 where 512-bit lanes pay (`ops::cpu`), 8 with
//! AVX2 + FMA, otherwise 4 (SSE2, wasm32, NEON); the block is 3 × 4 at every width.
//!
//! **f16 weights** are read the same way, as halves converted to f32 as they are loaded (F16C
//! on x86-64): a decode step reads each weight once, so decoding it into a buffer first would
//! write and re-read twice its bytes ([`super::stored`] decodes panels for the other layouts).
//!
//! **int8 weights** (with [`Scales`]) are dequantised a few rows of `B` at a time: for each chunk
//! of `A`'s rows, the 4 rows of `B` one block reads (8 for a matrix-vector product) become f32
//! `q·scale`, as [`WeightView::at`](crate::ops::quant::WeightView) computes them, in a buffer of
//! `4·k` floats that stays in L1 while the chunk's blocks run over it. The weight is read from
//! memory as int8, once per row chunk, and the f32 blocks run unchanged. (Widening in registers
//! instead, inside the block, needs a register more than AVX2's 16 for the 3 × 4 block and
//! re-widens each value once per block of rows, a few dozen times per weight at a few sentences:
//! it measured slower than this.)
//!
//! **Numerics.** Every `C[i][j]` is computed the same way wherever it falls (a full block or an
//! edge): lane `l` sums `a[p]·b[p]` for `p ≡ l (mod L)` in index order, the lanes are added in a
//! fixed pairwise tree, then the `k mod L` tail is added in order, then `alpha·sum + bias`. So
//! results do not depend on the tiling or the thread count; like `sgemm`'s, they depend on the
//! CPU's features. An int8 `B` gives these very sums over its dequantised values: bit for bit
//! the f32 product of the dequantised weight on this kernel.

/// The operands of one product: `C[i][j] = alpha · Σₚ a[i·lda + p] · b[j·ldb + p] (+ bias[j])`
/// for `i < rows`, `j < cols`, `p < k`. `B` holds f32, or f16 halves (`u16`) decoded as they are
/// loaded: the same sums in the same order as over the decoded f32 values; or int8 values (`i8`)
/// with `scales`, each `b[j·ldb + p]` then standing for `q · scale` of its column and group.
pub(super) struct Nt<'a, E: Stored = f32> {
    pub a: &'a [f32],
    pub lda: usize,
    pub b: &'a [E],
    pub ldb: usize,
    pub rows: usize,
    pub cols: usize,
    pub k: usize,
    pub alpha: f32,
    /// At least `cols` values when given.
    pub bias: Option<&'a [f32]>,
    /// The scales of an int8 `B` (none for f32 and f16).
    pub scales: Option<Scales<'a>>,
}

/// The scales of an int8 `B`: row `j` of `B` (a channel), inner position `p`, is scaled by
/// `values[j·groups + p / group]`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Scales<'a> {
    /// At least `cols · groups` values.
    pub values: &'a [f32],
    /// Inner elements per scale (`k` itself for one scale per channel).
    pub group: usize,
    /// Scales per row of `B`: `k.div_ceil(group)`.
    pub groups: usize,
}

mod lanes;

pub(super) use lanes::Stored;
use lanes::{Portable, Simd};

/// Bytes of `A` rows one chunk keeps in a core's L2 cache while every row of `B` passes by.
const A_CHUNK_BYTES: usize = 256 << 10;

/// Computes the product into `c` (row `i` at `c + i·ldc`, `cols` contiguous elements).
///
/// # Safety
/// `c` must be valid for writes of `c[i·ldc + j]` for every `i < rows`, `j < cols`, and no other
/// thread may access those elements during the call. `a` must hold every row `i < rows` (`k`
/// values from `i·lda`) and `b` every row `j < cols` (`k` values from `j·ldb`), else this panics
/// on an out-of-bounds index before writing.
pub(super) unsafe fn gemm_nt<E: Stored>(p: &Nt<'_, E>, c: *mut f32, ldc: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::ops::cpu::wide_vectors() {
            // SAFETY: `wide_vectors` holds only where the CPU has the features the function
            // enables; the caller's contract is passed on.
            return unsafe { x86::nt_avx512(p, c, ldc) };
        }
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
        {
            // SAFETY: the features the function enables were detected; the caller's contract
            // is passed on.
            return unsafe { x86::nt_avx2(p, c, ldc) };
        }
    }
    // SAFETY: the caller's contract is passed on; `Portable` needs no CPU feature.
    unsafe { nt::<Portable, E>(p, c, ldc) }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::lanes::{Avx2, Avx512};
    use super::{Nt, Stored, nt};

    /// # Safety
    /// The CPU has AVX-512 F, AVX2, FMA and F16C; as [`super::gemm_nt`].
    #[target_feature(enable = "avx512f,avx2,fma,f16c")]
    pub(super) unsafe fn nt_avx512<E: Stored>(p: &Nt<'_, E>, c: *mut f32, ldc: usize) {
        // SAFETY: the features `Avx512` needs are enabled here; the contract is passed on.
        unsafe { nt::<Avx512, E>(p, c, ldc) }
    }

    /// # Safety
    /// The CPU has AVX2, FMA and F16C; as [`super::gemm_nt`].
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn nt_avx2<E: Stored>(p: &Nt<'_, E>, c: *mut f32, ldc: usize) {
        // SAFETY: the features `Avx2` needs are enabled here; the contract is passed on.
        unsafe { nt::<Avx2, E>(p, c, ldc) }
    }
}

/// Rows of `A` per block: 3 × 4 accumulators plus 3 + 1 loaded vectors fill AVX2's 16 registers.
const MR: usize = 3;

/// Rows of `A` per chunk (module doc) for rows of `k` values.
fn chunk_rows(k: usize) -> usize {
    (A_CHUNK_BYTES / 4 / k.max(1) / MR * MR).max(MR)
}

/// The product on `M`'s vectors: [`blocked`] on `B` as stored, or on its dequantised rows when
/// it has scales ([`dequantised`]).
///
/// # Safety
/// The CPU has `M`'s features; as [`gemm_nt`].
#[inline(always)]
unsafe fn nt<M: Simd, E: Stored>(p: &Nt<'_, E>, c: *mut f32, ldc: usize) {
    // SAFETY (both): the caller's contract is passed on.
    match p.scales {
        Some(scales) if p.k > 0 => unsafe { dequantised::<M, E>(p, scales, c, ldc) },
        _ => unsafe { blocked::<M, E>(p, c, ldc) },
    }
}

thread_local! {
    /// The calling thread's buffer of dequantised `B` rows ([`dequantised`]), kept across calls.
    static ROWS: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// [`blocked`] over `B`'s rows dequantised (module doc): for each chunk of `A`'s rows, each
/// group of 4 rows of `B` (8 for fewer than [`MR`] rows of `A`) is written as f32 `q·scale` to
/// a buffer, and the chunk's blocks run over the buffer.
///
/// # Safety
/// The CPU has `M`'s features; as [`gemm_nt`]; `k > 0`.
#[inline(always)]
unsafe fn dequantised<M: Simd, E: Stored>(
    p: &Nt<'_, E>,
    scales: Scales<'_>,
    c: *mut f32,
    ldc: usize,
) {
    let k = p.k;
    let width = if p.rows < MR { 8 } else { 4 };
    let (group, groups) = (scales.group.max(1), scales.groups);
    // Every element a block reads is written first, so a buffer kept from an earlier call
    // needs no zeroing, only growing. Taken out and put back rather than borrowed in a closure:
    // a closure would not inherit the caller's CPU features, and the blocks must inline.
    let mut panel = ROWS.take();
    if panel.len() < width * k {
        panel.resize(width * k, 0.0);
    }
    for i0 in (0..p.rows).step_by(chunk_rows(k)) {
        let rows = chunk_rows(k).min(p.rows - i0);
        for j0 in (0..p.cols).step_by(width) {
            let cols = width.min(p.cols - j0);
            for (s, out) in panel.chunks_exact_mut(k).take(cols).enumerate() {
                let j = j0 + s;
                let q = &p.b[j * p.ldb..][..k];
                let scale = &scales.values[j * groups..][..groups];
                for ((out, q), &scale) in out.chunks_mut(group).zip(q.chunks(group)).zip(scale) {
                    for (o, q) in out.iter_mut().zip(q) {
                        *o = q.value() * scale;
                    }
                }
            }
            let part = Nt {
                a: &p.a[i0 * p.lda..],
                lda: p.lda,
                b: &panel[..cols * k],
                ldb: k,
                rows,
                cols,
                k,
                alpha: p.alpha,
                bias: p.bias.map(|b| &b[j0..j0 + cols]),
                scales: None,
            };
            // SAFETY: rows `i0..i0 + rows` and columns `j0..j0 + cols` of the caller's `C`, at
            // `c + (i0 + i)·ldc + j0 + j`: writable and unshared per the caller's contract.
            unsafe { blocked::<M, f32>(&part, c.add(i0 * ldc + j0), ldc) };
        }
    }
    ROWS.set(panel);
}

/// The blocked loops (module doc) on `M`'s vectors.
///
/// # Safety
/// The CPU has `M`'s features; as [`gemm_nt`].
#[inline(always)]
unsafe fn blocked<M: Simd, E: Stored>(p: &Nt<'_, E>, c: *mut f32, ldc: usize) {
    let chunk = chunk_rows(p.k);
    let store = |i: usize, j: usize, v: f32| {
        let bias = p.bias.map_or(0.0, |b| b[j]);
        // SAFETY: `i < rows`, `j < cols`: writable and unshared per the caller's contract.
        unsafe { *c.add(i * ldc + j) = p.alpha * v + bias };
    };
    if p.rows < MR {
        // A matrix-vector product (a decode step): 8 rows of `B` per row of `A`, so 8 independent
        // accumulator chains hide the multiply-add latency while `B` streams from memory.
        let mut j = 0;
        while j + 8 <= p.cols {
            for i in 0..p.rows {
                // SAFETY: as below.
                let [row] = unsafe { block::<M, E, 1, 8>(p, i, j, &[]) };
                for (s, &x) in row.iter().enumerate() {
                    store(i, j + s, x);
                }
            }
            j += 8;
        }
        for j in j..p.cols {
            for i in 0..p.rows {
                // SAFETY: as below.
                let [[x]] = unsafe { block::<M, E, 1, 1>(p, i, j, &[]) };
                store(i, j, x);
            }
        }
        return;
    }
    for i0 in (0..p.rows).step_by(chunk) {
        let i_end = (i0 + chunk).min(p.rows);
        let mut j = 0;
        while j + 4 <= p.cols {
            let mut i = i0;
            // The next group's rows of `B` are fetched while this group's blocks run on rows in
            // L1: a quarter of them per block (module doc).
            let next = p.b.get((j + 4) * p.ldb..).unwrap_or(&[]);
            let next = &next[..next.len().min(4 * p.ldb)];
            let mut part = 0;
            while i + MR <= i_end {
                let ahead = part_of(next, part, PREFETCH_PARTS);
                part += 1;
                // SAFETY: the caller's CPU features are passed on.
                let v = unsafe { block::<M, E, MR, 4>(p, i, j, ahead) };
                for (r, row) in v.iter().enumerate() {
                    for (s, &x) in row.iter().enumerate() {
                        store(i + r, j + s, x);
                    }
                }
                i += MR;
            }
            for i in i..i_end {
                // SAFETY: as above.
                let [row] = unsafe { block::<M, E, 1, 4>(p, i, j, &[]) };
                for (s, &x) in row.iter().enumerate() {
                    store(i, j + s, x);
                }
            }
            j += 4;
        }
        for j in j..p.cols {
            let mut i = i0;
            while i + MR <= i_end {
                // SAFETY: as above.
                let v = unsafe { block::<M, E, MR, 1>(p, i, j, &[]) };
                for (r, &[x]) in v.iter().enumerate() {
                    store(i + r, j, x);
                }
                i += MR;
            }
            for i in i..i_end {
                // SAFETY: as above.
                let [[x]] = unsafe { block::<M, E, 1, 1>(p, i, j, &[]) };
                store(i, j, x);
            }
        }
    }
}

/// Parts the next group's rows of `B` are fetched in, one per block of `A`'s rows.
const PREFETCH_PARTS: usize = 4;

/// Part `part` of `parts` of `rows` (empty past the last part).
#[inline(always)]
fn part_of<E>(rows: &[E], part: usize, parts: usize) -> &[E] {
    if part >= parts {
        return &[];
    }
    &rows[rows.len() * part / parts..rows.len() * (part + 1) / parts]
}

/// Asks the CPU to fetch the cache line at byte `at` of `rows` into its L2 cache (nothing off
/// x86-64).
#[inline(always)]
fn prefetch_line<E>(rows: &[E], at: usize) {
    #[cfg(target_arch = "x86_64")]
    if at < std::mem::size_of_val(rows) {
        // SAFETY: `at` is inside `rows`; a prefetch reads nothing and faults never.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(
                rows.as_ptr().cast::<i8>().add(at),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (rows, at);
}

/// The `R × S` dot products of rows `i..i + R` of `A` with rows `j..j + S` of `B`.
///
/// # Safety
/// The CPU has `M`'s features.
#[inline(always)]
unsafe fn block<M: Simd, E: Stored, const R: usize, const S: usize>(
    p: &Nt<'_, E>,
    i: usize,
    j: usize,
    ahead: &[E],
) -> [[f32; S]; R] {
    let k = p.k;
    // Plain loops, not `array::from_fn`: inlined, they let the compiler see every row's length
    // `k` and drop the bounds checks in the loop below (a closure left out of line kept them).
    let mut ar: [&[f32]; R] = [&[]; R];
    for (r, row) in ar.iter_mut().enumerate() {
        *row = &p.a[(i + r) * p.lda..][..k];
    }
    let mut br: [&[E]; S] = [&[]; S];
    for (s, row) in br.iter_mut().enumerate() {
        *row = &p.b[(j + s) * p.ldb..][..k];
    }
    // SAFETY (every `M::` call below): the caller guarantees `M`'s features.
    let mut acc = [[unsafe { M::zero() }; S]; R];
    let full = k / M::L * M::L;
    let mut q = 0;
    // `ahead` is fetched a cache line per step, spread over the block rather than asked for at
    // once (a burst stalls on the core's queue of outstanding misses).
    let mut line = 0;
    while q < full {
        prefetch_line(ahead, line);
        line += 64;
        let mut av = [unsafe { M::zero() }; R];
        for r in 0..R {
            av[r] = unsafe { M::load(&ar[r][q..]) };
        }
        for s in 0..S {
            let bv = unsafe { E::load::<M>(&br[s][q..]) };
            for r in 0..R {
                acc[r][s] = unsafe { M::madd(av[r], bv, acc[r][s]) };
            }
        }
        q += M::L;
    }
    let mut out = [[0f32; S]; R];
    for r in 0..R {
        for s in 0..S {
            let mut sum = unsafe { M::sum(acc[r][s]) };
            for q in full..k {
                sum = M::madd1(ar[r][q], br[s][q].value(), sum);
            }
            out[r][s] = sum;
        }
    }
    out
}

#[cfg(test)]
mod tests;
