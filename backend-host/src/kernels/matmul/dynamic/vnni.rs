//! The int8-dynamic product on AVX-512 VNNI's `vpdpbusd`: each instruction multiplies unsigned
//! bytes by signed bytes and adds each four products into an `i32` lane, 32 bytes at a time on
//! 256-bit vectors (AVX-512 VL) or 64 on 512-bit ones where the CPU runs those at full width
//! (`ops::cpu`). The integer sums are exact, so both widths give the same bits.
//!
//! **Block.** 3 rows of `A` × 4 rows of `B` keep 12 accumulators; a step loads 3 + 4 vectors and
//! issues 12 `vpdpbusd` (AVX-512's 32 vector registers hold them all). For fewer than 3 rows of
//! `A` (a decode step), blocks are 1 × 8, so 8 independent chains hide the instruction's
//! latency. Each group of 4 (or 8) rows of `B` stays in L1 while the blocks walk a chunk of
//! `A`'s rows sized to stay in L2.
//!
//! **Signs.** `A`'s bytes `u` are the unsigned operand and `B`'s `w` the signed one, as stored;
//! `z · Σw` (the task's group sums of `B`) is taken off each sum afterwards. Intermediate sums
//! may wrap in 32 bits; the true sum fits (the format bounds the group length), and wrapping
//! arithmetic is exact modulo 2³², so it comes out right.
//!
//! **Tails.** A group's last partial step (only the row's last group has one: the caller picks a
//! width whose steps the groups fill) reads `B` through a zeroed copy, so the lanes past `k` add
//! nothing whatever `A`'s padding (to a multiple of the widest step) holds.

use std::arch::x86_64::*;

use super::{STEP, Tile};

/// Bytes of `A`'s rows one chunk keeps in a core's L2 cache while the rows of `B` pass by.
const A_CHUNK_BYTES: usize = 256 << 10;

/// Rows of `A` per block.
const MR: usize = 3;

/// Whether the CPU runs this kernel.
pub(super) fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512vnni")
        && std::arch::is_x86_feature_detected!("avx512vl")
}

/// A vector of bytes `vpdpbusd` works on.
trait Bytes: Copy {
    /// Bytes per vector: one step along `k`.
    const STEP: usize;
    /// # Safety
    /// The CPU has the features [`available`] checks.
    unsafe fn zero() -> Self;
    /// The first [`Bytes::STEP`] bytes of `s` (panics when `s` is shorter).
    ///
    /// # Safety
    /// As [`Bytes::zero`].
    unsafe fn load<E: Copy>(s: &[E]) -> Self;
    /// `acc + Σ₄ u·w` per `i32` lane.
    ///
    /// # Safety
    /// As [`Bytes::zero`].
    unsafe fn dot(acc: Self, u: Self, w: Self) -> Self;
    /// The four vectors' 128-bit quarters (or halves) added lane by lane, wrapping: a vector
    /// whose lanes sum to the same as `v`'s.
    ///
    /// # Safety
    /// As [`Bytes::zero`].
    unsafe fn fold(v: Self) -> __m128i;
}

/// The wrapping sum of `v`'s `i32` lanes.
///
/// # Safety
/// The CPU has the features [`available`] checks.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512vnni,avx512vl")]
unsafe fn hsum<V: Bytes>(v: V) -> i32 {
    // SAFETY: the features are enabled here.
    let x = unsafe { V::fold(v) };
    let x = _mm_add_epi32(x, _mm_shuffle_epi32::<0b01_00_11_10>(x));
    let x = _mm_add_epi32(x, _mm_shuffle_epi32::<0b10_11_00_01>(x));
    _mm_cvtsi128_si32(x)
}

/// The wrapping lane sums of four vectors at once, by interleaving them (fewer shuffles than
/// four single sums; integer sums are exact, so the order is free).
///
/// # Safety
/// The CPU has the features [`available`] checks.
#[inline]
#[target_feature(enable = "avx2,avx512f,avx512vnni,avx512vl")]
unsafe fn hsum4<V: Bytes>(v: &[V; 4]) -> [i32; 4] {
    // A loop, not `map`: a closure would not inherit the CPU features enabled here.
    let mut x = [_mm_setzero_si128(); 4];
    for (x, &v) in x.iter_mut().zip(v) {
        // SAFETY: the features are enabled here.
        *x = unsafe { V::fold(v) };
    }
    let [a, b, c, d] = x;
    let ab = _mm_add_epi32(_mm_unpacklo_epi32(a, b), _mm_unpackhi_epi32(a, b));
    let cd = _mm_add_epi32(_mm_unpacklo_epi32(c, d), _mm_unpackhi_epi32(c, d));
    let sums = _mm_add_epi32(_mm_unpacklo_epi64(ab, cd), _mm_unpackhi_epi64(ab, cd));
    let mut out = [0i32; 4];
    // SAFETY: `out` holds 16 bytes; the store is unaligned.
    unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), sums) };
    out
}

impl Bytes for __m256i {
    const STEP: usize = 32;
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512vnni,avx512vl")]
    unsafe fn zero() -> Self {
        _mm256_setzero_si256()
    }
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512vnni,avx512vl")]
    unsafe fn load<E: Copy>(s: &[E]) -> Self {
        let s = &s[..32 / size_of::<E>()];
        // SAFETY: `s` holds 32 bytes; the load is unaligned.
        unsafe { _mm256_loadu_si256(s.as_ptr().cast()) }
    }
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512vnni,avx512vl")]
    unsafe fn dot(acc: Self, u: Self, w: Self) -> Self {
        _mm256_dpbusd_epi32(acc, u, w)
    }
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512vnni,avx512vl")]
    unsafe fn fold(v: Self) -> __m128i {
        _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v))
    }
}

impl Bytes for __m512i {
    const STEP: usize = 64;
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512vnni,avx512vl")]
    unsafe fn zero() -> Self {
        _mm512_setzero_si512()
    }
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512vnni,avx512vl")]
    unsafe fn load<E: Copy>(s: &[E]) -> Self {
        let s = &s[..64 / size_of::<E>()];
        // SAFETY: `s` holds 64 bytes; the load is unaligned.
        unsafe { _mm512_loadu_si512(s.as_ptr().cast()) }
    }
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512vnni,avx512vl")]
    unsafe fn dot(acc: Self, u: Self, w: Self) -> Self {
        _mm512_dpbusd_epi32(acc, u, w)
    }
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512vnni,avx512vl")]
    unsafe fn fold(v: Self) -> __m128i {
        let half = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v));
        // SAFETY: the features are enabled here.
        unsafe { __m256i::fold(half) }
    }
}

/// Computes `t` into `c` on 512-bit vectors: `t`'s groups are one, or multiples of 64 bytes.
///
/// # Safety
/// As [`run`].
#[target_feature(enable = "avx2,avx512f,avx512vnni,avx512vl")]
pub(super) unsafe fn run_512(t: &Tile<'_>, c: *mut f32, ldc: usize) {
    // SAFETY: the caller's contract.
    unsafe { run::<__m512i>(t, c, ldc) }
}

/// Computes `t` into `c` on 256-bit vectors: `t`'s groups are one, or multiples of 32 bytes.
///
/// # Safety
/// As [`run`].
#[target_feature(enable = "avx2,avx512f,avx512vnni,avx512vl")]
pub(super) unsafe fn run_256(t: &Tile<'_>, c: *mut f32, ldc: usize) {
    // SAFETY: the caller's contract.
    unsafe { run::<__m256i>(t, c, ldc) }
}

/// Computes `t` into `c` (row `i` at `c + i·ldc`).
///
/// # Safety
/// The CPU has the features [`available`] checks; `t`'s groups are whole `V` steps but the
/// last; `c` is valid for writes of `c[i·ldc + j]`, `i < rows`, `j < cols`, unshared.
#[inline(always)]
unsafe fn run<V: Bytes>(t: &Tile<'_>, c: *mut f32, ldc: usize) {
    let store = |i: usize, j: usize, acc: f32| {
        // SAFETY: `i < rows`, `j < cols`: writable and unshared per the caller's contract.
        unsafe { *c.add(i * ldc + j) = t.finish(i, j, acc) };
    };
    if t.rows < MR {
        let mut j = 0;
        while j + 8 <= t.cols {
            for i in 0..t.rows {
                // SAFETY (every block call): the caller's features and groups are passed on.
                let [row] = unsafe { block::<V, 1, 8>(t, i, j) };
                row.iter()
                    .enumerate()
                    .for_each(|(s, &v)| store(i, j + s, v));
            }
            j += 8;
        }
        for j in j..t.cols {
            for i in 0..t.rows {
                let [[v]] = unsafe { block::<V, 1, 1>(t, i, j) };
                store(i, j, v);
            }
        }
        return;
    }
    let chunk = (A_CHUNK_BYTES / t.ld.max(1) / MR * MR).max(MR);
    for i0 in (0..t.rows).step_by(chunk) {
        let i_end = (i0 + chunk).min(t.rows);
        let mut j = 0;
        while j + 4 <= t.cols {
            let mut i = i0;
            while i + MR <= i_end {
                let v = unsafe { block::<V, MR, 4>(t, i, j) };
                for (r, row) in v.iter().enumerate() {
                    row.iter()
                        .enumerate()
                        .for_each(|(s, &x)| store(i + r, j + s, x));
                }
                i += MR;
            }
            for i in i..i_end {
                let [row] = unsafe { block::<V, 1, 4>(t, i, j) };
                row.iter()
                    .enumerate()
                    .for_each(|(s, &x)| store(i, j + s, x));
            }
            j += 4;
        }
        for j in j..t.cols {
            for i in i0..i_end {
                let [[v]] = unsafe { block::<V, 1, 1>(t, i, j) };
                store(i, j, v);
            }
        }
    }
}

/// The weighted group sums `Σ_g scale[j][g] · d_g` of rows `i..i + R` of `A` with rows
/// `j..j + S` of `B`.
///
/// # Safety
/// As [`run`]'s features and groups.
#[inline(always)]
unsafe fn block<V: Bytes, const R: usize, const S: usize>(
    t: &Tile<'_>,
    i: usize,
    j: usize,
) -> [[f32; S]; R] {
    let mut out = [[0f32; S]; R];
    for g in 0..t.groups {
        let g0 = g * t.group;
        let len = t.group.min(t.k - g0);
        // Plain loops over slices of known length (as the f32 dot kernel's): inlined, they let
        // the compiler drop the bounds checks and keep the accumulators in registers.
        let mut ar: [&[u8]; R] = [&[]; R];
        for (r, row) in ar.iter_mut().enumerate() {
            // `ld` is `k` rounded up to whole steps of the widest vector, so the padded span
            // stays in the row.
            *row = &t.u[(i + r) * t.ld + g0..][..len.next_multiple_of(V::STEP)];
        }
        let mut br: [&[i8]; S] = [&[]; S];
        for (s, row) in br.iter_mut().enumerate() {
            *row = &t.w[(j + s) * t.k + g0..][..len];
        }
        // SAFETY (every `V::` call below): the caller guarantees the CPU's features; every load
        // reads `V::STEP` bytes from a slice that holds them.
        let mut acc = [[unsafe { V::zero() }; S]; R];
        let whole = len / V::STEP * V::STEP;
        let mut p = 0;
        while p < whole {
            let mut av = [unsafe { V::zero() }; R];
            for r in 0..R {
                av[r] = unsafe { V::load(&ar[r][p..]) };
            }
            for s in 0..S {
                let bv = unsafe { V::load(&br[s][p..]) };
                for r in 0..R {
                    acc[r][s] = unsafe { V::dot(acc[r][s], av[r], bv) };
                }
            }
            p += V::STEP;
        }
        if whole < len {
            let mut av = [unsafe { V::zero() }; R];
            for r in 0..R {
                av[r] = unsafe { V::load(&ar[r][whole..]) };
            }
            for s in 0..S {
                let mut tail = [0i8; STEP];
                tail[..len - whole].copy_from_slice(&br[s][whole..]);
                let bv = unsafe { V::load(&tail) };
                for r in 0..R {
                    acc[r][s] = unsafe { V::dot(acc[r][s], av[r], bv) };
                }
            }
        }
        for r in 0..R {
            let mut sums = [0i32; S];
            for (s4, quad) in sums.chunks_exact_mut(4).enumerate() {
                let mut v = [unsafe { V::zero() }; 4];
                v.copy_from_slice(&acc[r][4 * s4..4 * s4 + 4]);
                quad.copy_from_slice(&unsafe { hsum4(&v) });
            }
            for s in S / 4 * 4..S {
                sums[s] = unsafe { hsum(acc[r][s]) };
            }
            for s in 0..S {
                let offset = t.zero[i + r].wrapping_mul(t.wsums[(j + s) * t.groups + g]);
                let d = sums[s].wrapping_sub(offset);
                out[r][s] = t.weigh(out[r][s], j + s, g, d);
            }
        }
    }
    out
}

/// The sum of `s`'s values, 32 at a time: `vpsadbw` against zero sums bytes read as unsigned
/// (`w + 128`, the top bit flipped), and `128 · len` is taken off.
///
/// # Safety
/// The CPU has AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn sum_i8(s: &[i8]) -> i32 {
    let whole = s.len() / 32 * 32;
    let mut acc = _mm256_setzero_si256();
    let (flip, zero) = (_mm256_set1_epi8(i8::MIN), _mm256_setzero_si256());
    for p in (0..whole).step_by(32) {
        // SAFETY: `p + 32 ≤ whole ≤ len`: the load reads inside `s`.
        let v = unsafe { _mm256_loadu_si256(s[p..p + 32].as_ptr().cast()) };
        acc = _mm256_add_epi64(acc, _mm256_sad_epu8(_mm256_xor_si256(v, flip), zero));
    }
    let x = _mm_add_epi64(
        _mm256_castsi256_si128(acc),
        _mm256_extracti128_si256::<1>(acc),
    );
    let x = _mm_add_epi64(x, _mm_unpackhi_epi64(x, x));
    // A group holds at most `MAX_DYNAMIC_GROUP` values of magnitude at most 128: the true sum
    // fits in i32.
    let unsigned = _mm_cvtsi128_si64(x) - 128 * whole as i64;
    let tail: i64 = s[whole..].iter().map(|&v| i64::from(v)).sum();
    (unsigned + tail) as i32
}
