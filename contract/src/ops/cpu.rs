//! Which vector width the host's kernels compute at on this CPU: 512-bit (AVX-512) or 256-bit
//! (AVX2) lanes, decided once per process. A fact of the reference's arithmetic, as
//! [`super::split::reference_uses_dot`] is: the width also decides which products the dot kernel
//! takes, so graph tiling reads it through that function.
//!
//! Having AVX-512 does not make 512-bit lanes faster. Intel cores with it issue two 512-bit
//! multiply-adds a cycle (twice AVX2's work per instruction at the same rate), while AMD's Zen 4
//! executes each 512-bit operation as two 256-bit halves: there the wider lanes gain no
//! arithmetic and lose on the longer reductions (measured slower on a Zen 4:
//! `docs/decisions/host-dot-edge-rows-and-int8-prefetch.md`). So the wide lanes are
//! chosen where the CPU has AVX-512 F, VL and BW, is Intel's, or is AMD's from Zen 5 on
//! (family 0x1A, full-width 512-bit units). Elsewhere, and off x86-64, they are not.
//!
//! `TENSORMEM_HOST_VECTOR_BITS=256` or `512` overrides the choice (512 only where the CPU has
//! the features; a 512 it lacks falls back to the detected choice): for comparing the two on one
//! machine and for CPUs the rule misjudges. Results differ in the last bits between the widths
//! (the lanes' sums split differently), as `sgemm`'s do between CPUs.

use std::sync::OnceLock;

/// Whether the host's kernels use 512-bit lanes (module doc).
#[doc(hidden)]
pub fn wide_vectors() -> bool {
    static WIDE: OnceLock<bool> = OnceLock::new();
    *WIDE.get_or_init(|| {
        let capable = has_avx512();
        match std::env::var("TENSORMEM_HOST_VECTOR_BITS").as_deref() {
            Ok("256") => false,
            Ok("512") if capable => true,
            _ => capable && full_width_512(),
        }
    })
}

/// AVX-512 F, VL and BW with AVX2, FMA and F16C: what the wide kernels are compiled for.
fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether the CPU runs 512-bit multiply-adds at full width: Intel's, or AMD's family 0x1A on.
fn full_width_512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        // SAFETY: CPUID leaves 0 and 1 exist on every x86-64 CPU. (`__cpuid` is a safe function
        // from Rust 1.94 on, an unsafe one before: the block serves the older compilers.)
        #[allow(unused_unsafe)]
        let (vendor, signature) = unsafe { (__cpuid(0), __cpuid(1).eax) };
        let name = [vendor.ebx, vendor.edx, vendor.ecx];
        let is = |s: &[u8; 12]| {
            name.iter()
                .flat_map(|r| r.to_le_bytes())
                .eq(s.iter().copied())
        };
        let base = (signature >> 8) & 0xf;
        let family = if base == 0xf {
            base + ((signature >> 20) & 0xff)
        } else {
            base
        };
        is(b"GenuineIntel") || (is(b"AuthenticAMD") && family >= 0x1a)
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

#[cfg(test)]
mod tests {
    /// The rule reads this CPU without failing, and never picks wide lanes it lacks.
    #[test]
    fn wide_lanes_only_where_the_cpu_has_them() {
        if super::wide_vectors() {
            assert!(super::has_avx512());
        }
    }
}
