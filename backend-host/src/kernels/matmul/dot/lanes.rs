//! The element types the dot kernel reads `B` in ([`Stored`]) and the vectors it computes on
//! ([`Simd`]): 4 portable lanes on any target, 8 with AVX2 + FMA (+ F16C) or 16 with AVX-512 on
//! x86-64, chosen at run time by [`super::gemm_nt`]. Every load converts exactly (f16 halves,
//! int8 values), so a product's sums do not depend on how `B` is stored, only on the lane width
//! and FMA use.

/// An element type `B` may be stored in: f32, or an f16 half (`u16`, its bits).
pub(in crate::kernels::matmul) trait Stored: Copy {
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
pub(in crate::kernels::matmul) trait Simd {
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
pub(super) struct Portable;

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
    unsafe fn madd(a: [f32; 4], b: [f32; 4], acc: [f32; 4]) -> [f32; 4] {
        std::array::from_fn(|l| Self::madd1(a[l], b[l], acc[l]))
    }
    #[inline(always)]
    unsafe fn sum(v: [f32; 4]) -> f32 {
        crate::kernels::rows::pairwise_sum(v)
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
pub(super) use x86::{Avx2, Avx512};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::Simd;

    /// 8 lanes (AVX2 + FMA).
    pub(in super::super) struct Avx2;

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

    /// 16 lanes (AVX-512 F; F16C for halves).
    pub(in super::super) struct Avx512;

    impl Simd for Avx512 {
        type V = __m512;
        const L: usize = 16;
        #[inline]
        #[target_feature(enable = "avx512f,avx2,fma")]
        unsafe fn zero() -> __m512 {
            _mm512_setzero_ps()
        }
        #[inline]
        #[target_feature(enable = "avx512f,avx2,fma")]
        unsafe fn load(s: &[f32]) -> __m512 {
            let s = &s[..16];
            // SAFETY: `s` holds 16 floats; unaligned loads are allowed.
            unsafe { _mm512_loadu_ps(s.as_ptr()) }
        }
        #[inline]
        #[target_feature(enable = "avx512f,avx2,fma,f16c")]
        unsafe fn load_halves(s: &[u16]) -> __m512 {
            let s = &s[..16];
            // SAFETY: `s` holds 16 halves (32 bytes); unaligned loads are allowed. The conversion
            // is exact, as `f16_to_f32` is.
            unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(s.as_ptr().cast::<__m256i>())) }
        }
        #[inline]
        #[target_feature(enable = "avx512f,avx2,fma")]
        unsafe fn load_i8(s: &[i8]) -> __m512 {
            let s = &s[..16];
            // SAFETY: `s` holds 16 bytes (unaligned loads are allowed); the sign extension and
            // the conversion of small integers to f32 are exact.
            unsafe {
                let bytes = _mm_loadu_si128(s.as_ptr().cast::<__m128i>());
                _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes))
            }
        }
        #[inline]
        #[target_feature(enable = "avx512f,avx2,fma")]
        unsafe fn madd(a: __m512, b: __m512, acc: __m512) -> __m512 {
            _mm512_fmadd_ps(a, b, acc)
        }
        #[inline]
        #[target_feature(enable = "avx512f,avx2,fma")]
        unsafe fn sum(v: __m512) -> f32 {
            // Lane l + l+8 first, as `reduce` adds them; then `Avx2::sum`'s halving.
            let lo = _mm512_castps512_ps256(v);
            let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
            // SAFETY: AVX2 and FMA are enabled here.
            unsafe { Avx2::sum(_mm256_add_ps(lo, hi)) }
        }
        #[inline(always)]
        fn madd1(x: f32, y: f32, acc: f32) -> f32 {
            x.mul_add(y, acc)
        }
    }
}
