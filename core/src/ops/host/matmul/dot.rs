//! The product `C = alpha · A · Bᵀ (+ bias)` when the rows of both `A` and `B` run contiguously
//! along `k` (`trans_b` without `trans_a`): every linear layer (its weight is `[out, in]`) and
//! attention's `q·kᵀ`. Each output is the dot product of two contiguous rows, so the kernel reads
//! both operands where they lie and packs nothing.
//!
//! Why not `sgemm` here: `matrixmultiply` packs `B` into panels on every call. A linear layer's
//! `B` is its weight, streamed from memory once per product; with a few dozen rows of `A` (a
//! sentence or three) re-packing the weight costs more than the arithmetic (it was over half of
//! MiniLM's host time at batch 1). Read in place, the weight is streamed once per row chunk.
//!
//! **Kernel.** A block of 3 rows of `A` × 4 rows of `B` keeps 12 accumulators of `L` lanes in
//! registers; each step along `k` loads 7 vectors and issues 12 multiply-adds. For each group of
//! 4 rows of `B` (which stay in L1) the blocks walk a chunk of `A`'s rows sized to stay in L2.
//! The lane width is chosen at run time: 8 with AVX2 + FMA, otherwise 4 (SSE2, wasm32, NEON).
//! AVX-512 would need Rust 1.89, above the workspace's MSRV; AVX2 reaches the same FMA rate on
//! CPUs that split 512-bit operations in two (AMD Zen 4).
//!
//! **f16 weights** are read the same way, as halves converted to f32 as they are loaded (F16C
//! on x86-64): a decode step reads each weight once, so decoding it into a buffer first would
//! write and re-read twice its bytes ([`super::stored`] decodes panels for the other layouts).
//!
//! **int8 weights** are read the same way, as bytes sign-extended and converted to f32 as they
//! are loaded (exact), with their scales ([`Scales`]) applied per group of `k` rather than per
//! element: each group's lane sums `Σ a·q` are multiplied by the group's scale and added to the
//! block's accumulators, and the scale of the last group multiplies the `k mod L` tail. This
//! needs every group boundary on a lane boundary: one group (per-channel scales) or a group
//! size that is a multiple of 8 ([`Scales::fit`]); other groupings take the decoded panels.
//!
//! **Numerics.** Every `C[i][j]` is computed the same way wherever it falls (a full block or an
//! edge): lane `l` sums `a[p]·b[p]` for `p ≡ l (mod L)` in index order, the lanes are added in a
//! fixed pairwise tree, then the `k mod L` tail is added in order, then `alpha·sum + bias`. So
//! results do not depend on the tiling or the thread count; like `sgemm`'s, they depend on the
//! CPU's features. With int8 scales the sums are `Σ_g scale_g · Σ_{p in g} a·q` instead of
//! `Σ a·(q·scale)`: the f32 product of the dequantised weight within f32 rounding (a few ulps of
//! `Σ|a·b|`), not bit for bit.

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

impl Scales<'_> {
    /// Whether the kernel can apply scales grouped so (module doc): one group per row, or group
    /// boundaries on every lane width's boundaries.
    pub fn fit(group: usize, groups: usize) -> bool {
        groups == 1 || (group > 0 && group.is_multiple_of(8))
    }
}

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

/// An element type `B` may be stored in: f32, or an f16 half (`u16`, its bits).
pub(super) trait Stored: Copy {
    /// The element as f32 (exact).
    fn value(self) -> f32;
    /// The first `M::L` elements of `s` as f32 lanes (panics when `s` is shorter).
    ///
    /// # Safety
    /// The CPU has `M`'s features.
    unsafe fn load<M: Simd>(s: &[Self]) -> M::V;
}

impl Stored for f32 {
    #[inline(always)]
    fn value(self) -> f32 {
        self
    }
    #[inline(always)]
    unsafe fn load<M: Simd>(s: &[f32]) -> M::V {
        // SAFETY: the caller guarantees `M`'s features.
        unsafe { M::load(s) }
    }
}

impl Stored for u16 {
    #[inline(always)]
    fn value(self) -> f32 {
        crate::ops::quant::f16_to_f32(self)
    }
    #[inline(always)]
    unsafe fn load<M: Simd>(s: &[u16]) -> M::V {
        // SAFETY: the caller guarantees `M`'s features.
        unsafe { M::load_halves(s) }
    }
}

impl Stored for i8 {
    #[inline(always)]
    fn value(self) -> f32 {
        f32::from(self)
    }
    #[inline(always)]
    unsafe fn load<M: Simd>(s: &[i8]) -> M::V {
        // SAFETY: the caller guarantees `M`'s features.
        unsafe { M::load_i8(s) }
    }
}

/// One vector of `L` f32 lanes and the few operations the kernel needs.
pub(super) trait Simd {
    type V: Copy;
    const L: usize;
    /// # Safety
    /// The CPU has the implementation's features.
    unsafe fn zero() -> Self::V;
    /// The first `L` values of `s` (panics when `s` is shorter).
    ///
    /// # Safety
    /// As [`Simd::zero`].
    unsafe fn load(s: &[f32]) -> Self::V;
    /// The first `L` halves of `s` as f32 lanes, exactly (panics when `s` is shorter).
    ///
    /// # Safety
    /// As [`Simd::zero`].
    unsafe fn load_halves(s: &[u16]) -> Self::V;
    /// The first `L` int8 values of `s` as f32 lanes, exactly (panics when `s` is shorter).
    ///
    /// # Safety
    /// As [`Simd::zero`].
    unsafe fn load_i8(s: &[i8]) -> Self::V;
    /// `x` in every lane.
    ///
    /// # Safety
    /// As [`Simd::zero`].
    unsafe fn splat(x: f32) -> Self::V;
    /// `a·b + acc` per lane.
    ///
    /// # Safety
    /// As [`Simd::zero`].
    unsafe fn madd(a: Self::V, b: Self::V, acc: Self::V) -> Self::V;
    /// The lanes' sum in the order of [`reduce`].
    ///
    /// # Safety
    /// As [`Simd::zero`].
    unsafe fn sum(v: Self::V) -> f32;
    /// `x·y + acc` for the tail, fused exactly when [`Simd::madd`] is.
    fn madd1(x: f32, y: f32, acc: f32) -> f32;
}

/// 4 lanes of plain arrays: any CPU (wasm32 included); fused on AArch64, where FMA is baseline.
struct Portable;

impl Simd for Portable {
    type V = [f32; 4];
    const L: usize = 4;
    #[inline(always)]
    unsafe fn zero() -> [f32; 4] {
        [0.0; 4]
    }
    #[inline(always)]
    unsafe fn load(s: &[f32]) -> [f32; 4] {
        [s[0], s[1], s[2], s[3]]
    }
    #[inline(always)]
    unsafe fn load_halves(s: &[u16]) -> [f32; 4] {
        std::array::from_fn(|l| s[l].value())
    }
    #[inline(always)]
    unsafe fn load_i8(s: &[i8]) -> [f32; 4] {
        std::array::from_fn(|l| f32::from(s[l]))
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> [f32; 4] {
        [x; 4]
    }
    #[inline(always)]
    unsafe fn madd(a: [f32; 4], b: [f32; 4], acc: [f32; 4]) -> [f32; 4] {
        std::array::from_fn(|l| Self::madd1(a[l], b[l], acc[l]))
    }
    #[inline(always)]
    unsafe fn sum(v: [f32; 4]) -> f32 {
        reduce(v)
    }
    #[inline(always)]
    fn madd1(x: f32, y: f32, acc: f32) -> f32 {
        if cfg!(target_arch = "aarch64") {
            x.mul_add(y, acc)
        } else {
            x * y + acc
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{Nt, Simd, Stored, nt};

    /// # Safety
    /// The CPU has AVX2, FMA and F16C; as [`super::gemm_nt`].
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn nt_avx2<E: Stored>(p: &Nt<'_, E>, c: *mut f32, ldc: usize) {
        // SAFETY: the features `Avx2` needs are enabled here; the contract is passed on.
        unsafe { nt::<Avx2, E>(p, c, ldc) }
    }

    /// 8 lanes (AVX2 + FMA).
    struct Avx2;

    impl Simd for Avx2 {
        type V = __m256;
        const L: usize = 8;
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn zero() -> __m256 {
            _mm256_setzero_ps()
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn load(s: &[f32]) -> __m256 {
            let s = &s[..8];
            // SAFETY: `s` holds 8 floats; unaligned loads are allowed.
            unsafe { _mm256_loadu_ps(s.as_ptr()) }
        }
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn load_halves(s: &[u16]) -> __m256 {
            let s = &s[..8];
            // SAFETY: `s` holds 8 halves (16 bytes); unaligned loads are allowed. The conversion
            // is exact, as `f16_to_f32` is.
            unsafe { _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().cast::<__m128i>())) }
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn load_i8(s: &[i8]) -> __m256 {
            let s = &s[..8];
            // SAFETY: `s` holds 8 bytes, which `_mm_loadl_epi64` reads (unaligned allowed); the
            // sign extension and the conversion of small integers to f32 are exact.
            unsafe {
                let bytes = _mm_loadl_epi64(s.as_ptr().cast::<__m128i>());
                _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes))
            }
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn splat(x: f32) -> __m256 {
            _mm256_set1_ps(x)
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn madd(a: __m256, b: __m256, acc: __m256) -> __m256 {
            _mm256_fmadd_ps(a, b, acc)
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn sum(v: __m256) -> f32 {
            // Halves added as `reduce` adds them: lane l + l+4, then l + l+2, then 0 + 1.
            let v4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
            let v2 = _mm_add_ps(v4, _mm_movehl_ps(v4, v4));
            let v1 = _mm_add_ss(v2, _mm_shuffle_ps(v2, v2, 1));
            _mm_cvtss_f32(v1)
        }
        #[inline(always)]
        fn madd1(x: f32, y: f32, acc: f32) -> f32 {
            x.mul_add(y, acc)
        }
    }
}

/// The blocked loops (module doc) on `M`'s vectors.
///
/// # Safety
/// The CPU has `M`'s features; as [`gemm_nt`].
#[inline(always)]
unsafe fn nt<M: Simd, E: Stored>(p: &Nt<'_, E>, c: *mut f32, ldc: usize) {
    // Rows per block: 3 × 4 accumulators plus 3 + 1 loaded vectors fill AVX2's 16 registers.
    const MR: usize = 3;
    let chunk = (A_CHUNK_BYTES / 4 / p.k.max(1) / MR * MR).max(MR);
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
                let [row] = unsafe { block::<M, E, 1, 8>(p, i, j) };
                for (s, &x) in row.iter().enumerate() {
                    store(i, j + s, x);
                }
            }
            j += 8;
        }
        for j in j..p.cols {
            for i in 0..p.rows {
                // SAFETY: as below.
                let [[x]] = unsafe { block::<M, E, 1, 1>(p, i, j) };
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
            while i + MR <= i_end {
                // SAFETY: the caller's CPU features are passed on.
                let v = unsafe { block::<M, E, MR, 4>(p, i, j) };
                for (r, row) in v.iter().enumerate() {
                    for (s, &x) in row.iter().enumerate() {
                        store(i + r, j + s, x);
                    }
                }
                i += MR;
            }
            for i in i..i_end {
                // SAFETY: as above.
                let [row] = unsafe { block::<M, E, 1, 4>(p, i, j) };
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
                let v = unsafe { block::<M, E, MR, 1>(p, i, j) };
                for (r, &[x]) in v.iter().enumerate() {
                    store(i + r, j, x);
                }
                i += MR;
            }
            for i in i..i_end {
                // SAFETY: as above.
                let [[x]] = unsafe { block::<M, E, 1, 1>(p, i, j) };
                store(i, j, x);
            }
        }
    }
}

/// The `R × S` dot products of rows `i..i + R` of `A` with rows `j..j + S` of `B`, scaled by
/// `B`'s scales when it has them.
///
/// # Safety
/// The CPU has `M`'s features.
#[inline(always)]
unsafe fn block<M: Simd, E: Stored, const R: usize, const S: usize>(
    p: &Nt<'_, E>,
    i: usize,
    j: usize,
) -> [[f32; S]; R] {
    let k = p.k;
    let ar: [&[f32]; R] = std::array::from_fn(|r| &p.a[(i + r) * p.lda..][..k]);
    let br: [&[E]; S] = std::array::from_fn(|s| &p.b[(j + s) * p.ldb..][..k]);
    let full = k / M::L * M::L;
    let tail = |r: usize, s: usize, init: f32| {
        (full..k).fold(init, |sum, q| M::madd1(ar[r][q], br[s][q].value(), sum))
    };
    let mut out = [[0f32; S]; R];
    let Some(sc) = p.scales else {
        // SAFETY (every `M::` call and `sums` below): the caller guarantees `M`'s features.
        let acc = unsafe { sums::<M, E, R, S>(&ar, &br, 0, full) };
        for r in 0..R {
            for s in 0..S {
                out[r][s] = tail(r, s, unsafe { M::sum(acc[r][s]) });
            }
        }
        return out;
    };
    // Scaled per group (module doc): group boundaries fall on lane boundaries, so the tail lies
    // in the last group.
    let scale = |s: usize, g: usize| sc.values[(j + s) * sc.groups + g];
    let mut acc = [[unsafe { M::zero() }; S]; R];
    let (mut q0, mut g) = (0, 0);
    while q0 < full {
        let q1 = (q0 + sc.group.max(1)).min(full);
        let part = unsafe { sums::<M, E, R, S>(&ar, &br, q0, q1) };
        for s in 0..S {
            let sv = unsafe { M::splat(scale(s, g)) };
            for r in 0..R {
                acc[r][s] = unsafe { M::madd(part[r][s], sv, acc[r][s]) };
            }
        }
        (q0, g) = (q1, g + 1);
    }
    let last = k.saturating_sub(1) / sc.group.max(1);
    for r in 0..R {
        for s in 0..S {
            let sum = unsafe { M::sum(acc[r][s]) };
            out[r][s] = M::madd1(tail(r, s, 0.0), scale(s, last), sum);
        }
    }
    out
}

/// The lane sums `Σ a·b` over `q0..q1` (whole vectors) of the rows `ar` of `A` and `br` of `B`.
///
/// # Safety
/// The CPU has `M`'s features.
#[inline(always)]
unsafe fn sums<M: Simd, E: Stored, const R: usize, const S: usize>(
    ar: &[&[f32]; R],
    br: &[&[E]; S],
    q0: usize,
    q1: usize,
) -> [[M::V; S]; R] {
    // SAFETY (every `M::` call below): the caller guarantees `M`'s features.
    let mut acc = [[unsafe { M::zero() }; S]; R];
    let mut q = q0;
    while q < q1 {
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
    acc
}

/// The lanes' sum in a fixed pairwise order: halves added until one lane is left.
#[inline(always)]
fn reduce<const L: usize>(mut v: [f32; L]) -> f32 {
    let mut width = L;
    while width > 1 {
        width /= 2;
        for l in 0..width {
            v[l] += v[l + width];
        }
    }
    v[0]
}

#[cfg(test)]
mod tests;
