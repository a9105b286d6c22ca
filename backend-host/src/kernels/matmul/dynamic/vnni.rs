//! The int8-dynamic product on AVX-512 VNNI's 256-bit `vpdpbusd` (with AVX-512 VL): each
//! instruction multiplies 32 unsigned bytes by 32 signed bytes and adds each four products into
//! one of 8 `i32` lanes.
//!
//! **Block.** 3 rows of `A` × 4 rows of `B` keep 12 accumulators; a 32-byte step loads 3 + 4
//! vectors and issues 12 `vpdpbusd` (AVX-512 VL's 32 vector registers hold them all). For
//! fewer than 3 rows of `A` (a decode step), blocks are 1 × 8, so 8 independent chains hide
//! the instruction's latency. Each group of 4 (or 8) rows of `B` stays in L1 while the blocks
//! walk a chunk of `A`'s rows sized to stay in L2.
//!
//! **Signs.** `A`'s bytes `u` are the unsigned operand and `B`'s `w` the signed one, as stored;
//! `z · Σw` (the task's group sums of `B`) is taken off each sum afterwards. Intermediate sums
//! may wrap in 32 bits; the true sum fits (the format bounds the group length), and wrapping
//! arithmetic is exact modulo 2³², so it comes out right.
//!
//! **Tails.** A group's last partial step (only the row's last group has one: groups are whole
//! steps otherwise) reads `B` through a zeroed 32-byte copy, so the lanes past `k` add nothing
//! whatever `A`'s padding holds.

use std::arch::x86_64::{
    __m256i, _mm_add_epi32, _mm_add_epi64, _mm_cvtsi128_si32, _mm_cvtsi128_si64, _mm_shuffle_epi32,
    _mm_unpackhi_epi64, _mm256_add_epi64, _mm256_castsi256_si128, _mm256_dpbusd_epi32,
    _mm256_extracti128_si256, _mm256_loadu_si256, _mm256_sad_epu8, _mm256_set1_epi8,
    _mm256_setzero_si256, _mm256_xor_si256,
};

use super::{STEP, Tile};

/// Bytes of `A`'s rows one chunk keeps in a core's L2 cache while the rows of `B` pass by.
const A_CHUNK_BYTES: usize = 256 << 10;

/// Rows of `A` per block.
const MR: usize = 3;

/// Whether the CPU runs this kernel.
pub(super) fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("avx512vnni")
        && std::arch::is_x86_feature_detected!("avx512vl")
}

/// Computes `t` into `c` (row `i` at `c + i·ldc`).
///
/// # Safety
/// The CPU has the features [`available`] checks; `t`'s groups are whole [`STEP`]s but the
/// last; `c` is valid for writes of `c[i·ldc + j]`, `i < rows`, `j < cols`, unshared.
#[target_feature(enable = "avx2,avx512vnni,avx512vl")]
pub(super) unsafe fn run(t: &Tile<'_>, c: *mut f32, ldc: usize) {
    let store = |i: usize, j: usize, acc: f32| {
        // SAFETY: `i < rows`, `j < cols`: writable and unshared per the caller's contract.
        unsafe { *c.add(i * ldc + j) = t.finish(i, j, acc) };
    };
    if t.rows < MR {
        let mut j = 0;
        while j + 8 <= t.cols {
            for i in 0..t.rows {
                // SAFETY (every block call): the caller's features and groups are passed on.
                let [row] = unsafe { block::<1, 8>(t, i, j) };
                row.iter()
                    .enumerate()
                    .for_each(|(s, &v)| store(i, j + s, v));
            }
            j += 8;
        }
        for j in j..t.cols {
            for i in 0..t.rows {
                let [[v]] = unsafe { block::<1, 1>(t, i, j) };
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
                let v = unsafe { block::<MR, 4>(t, i, j) };
                for (r, row) in v.iter().enumerate() {
                    row.iter()
                        .enumerate()
                        .for_each(|(s, &x)| store(i + r, j + s, x));
                }
                i += MR;
            }
            for i in i..i_end {
                let [row] = unsafe { block::<1, 4>(t, i, j) };
                row.iter()
                    .enumerate()
                    .for_each(|(s, &x)| store(i, j + s, x));
            }
            j += 4;
        }
        for j in j..t.cols {
            for i in i0..i_end {
                let [[v]] = unsafe { block::<1, 1>(t, i, j) };
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
unsafe fn block<const R: usize, const S: usize>(t: &Tile<'_>, i: usize, j: usize) -> [[f32; S]; R] {
    let mut out = [[0f32; S]; R];
    for g in 0..t.groups {
        let g0 = g * t.group;
        let len = t.group.min(t.k - g0);
        // Plain loops over slices of known length (as the f32 dot kernel's): inlined, they let
        // the compiler drop the bounds checks and keep the accumulators in registers.
        let mut ar: [&[u8]; R] = [&[]; R];
        for (r, row) in ar.iter_mut().enumerate() {
            // `ld` is `k` rounded up to whole steps, so the padded span stays in the row.
            *row = &t.u[(i + r) * t.ld + g0..][..len.next_multiple_of(STEP)];
        }
        let mut br: [&[i8]; S] = [&[]; S];
        for (s, row) in br.iter_mut().enumerate() {
            *row = &t.w[(j + s) * t.k + g0..][..len];
        }
        // SAFETY (every intrinsic call below): the caller guarantees the CPU's features; every
        // load reads 32 bytes from a slice that holds them.
        let mut acc = [[unsafe { _mm256_setzero_si256() }; S]; R];
        let whole = len / STEP * STEP;
        let mut p = 0;
        while p < whole {
            let mut av = [unsafe { _mm256_setzero_si256() }; R];
            for r in 0..R {
                av[r] = unsafe { load(&ar[r][p..]) };
            }
            for s in 0..S {
                let bv = unsafe { load(&br[s][p..]) };
                for r in 0..R {
                    acc[r][s] = unsafe { _mm256_dpbusd_epi32(acc[r][s], av[r], bv) };
                }
            }
            p += STEP;
        }
        if whole < len {
            let mut av = [unsafe { _mm256_setzero_si256() }; R];
            for r in 0..R {
                av[r] = unsafe { load(&ar[r][whole..]) };
            }
            for s in 0..S {
                let mut tail = [0i8; STEP];
                tail[..len - whole].copy_from_slice(&br[s][whole..]);
                let bv = unsafe { load(&tail) };
                for r in 0..R {
                    acc[r][s] = unsafe { _mm256_dpbusd_epi32(acc[r][s], av[r], bv) };
                }
            }
        }
        for r in 0..R {
            for s in 0..S {
                let offset = t.zero[i + r].wrapping_mul(t.wsums[(j + s) * t.groups + g]);
                let d = unsafe { hsum(acc[r][s]) }.wrapping_sub(offset);
                out[r][s] = t.weigh(out[r][s], j + s, g, d);
            }
        }
    }
    out
}

/// The first 32 bytes of `s` as a vector (panics when `s` is shorter).
///
/// # Safety
/// The CPU has AVX.
#[inline(always)]
unsafe fn load<E: Copy>(s: &[E]) -> __m256i {
    let s = &s[..STEP / size_of::<E>()];
    // SAFETY: `s` holds 32 bytes; the load is unaligned.
    unsafe { _mm256_loadu_si256(s.as_ptr().cast()) }
}

/// The wrapping sum of the 8 lanes.
///
/// # Safety
/// The CPU has AVX2.
#[inline(always)]
unsafe fn hsum(v: __m256i) -> i32 {
    // SAFETY: register-only AVX2 operations, guaranteed by the caller.
    unsafe {
        let x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let x = _mm_add_epi32(x, _mm_shuffle_epi32::<0b01_00_11_10>(x));
        let x = _mm_add_epi32(x, _mm_shuffle_epi32::<0b10_11_00_01>(x));
        _mm_cvtsi128_si32(x)
    }
}

/// The sum of `s`'s values, 32 at a time: `vpsadbw` against zero sums bytes read as unsigned
/// (`w + 128`, the top bit flipped), and `128 · len` is taken off.
///
/// # Safety
/// The CPU has AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn sum_i8(s: &[i8]) -> i32 {
    let whole = s.len() / STEP * STEP;
    let mut acc = _mm256_setzero_si256();
    let (flip, zero) = (_mm256_set1_epi8(i8::MIN), _mm256_setzero_si256());
    for p in (0..whole).step_by(STEP) {
        // SAFETY: `p + 32 ≤ whole ≤ len`: the load reads inside `s`.
        let v = unsafe { load(&s[p..]) };
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
