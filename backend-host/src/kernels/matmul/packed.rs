//! The packed GEMM behind every product the dot kernel does not take: `C = alpha · A · B` with
//! arbitrary row and column strides (transposed operands are read in place).
//!
//! On x86-64 and AArch64 it is the `gemm` crate's: packed panels of A and B sized to the caches
//! and a micro-kernel chosen at run time (AVX2+FMA or SSE on x86-64, its AVX-512 kernels being
//! behind a nightly-only feature; NEON on AArch64), larger than `matrixmultiply`'s, which serves
//! every other target (wasm included). Either is
//! called on one tile by one thread (`Parallelism::None`): the caller's tiling spreads the work.
//!
//! **Determinism.** `gemm` blocks `k` by a depth chosen from `k` and the cache sizes only, never
//! from the tile's rows or columns, and sums each depth block in order, so an element's value
//! does not depend on the tile it falls in: a product cut into row or column tiles (by the
//! thread count, or by graph tiling) equals the whole product bit for bit on a given machine.

/// `C[rows × cols] = alpha · A[rows × k] · B[k × cols]`, overwriting C (its old contents are not
/// read); each matrix addressed by a pointer and (row, column) strides in elements, C's columns
/// contiguous.
///
/// # Safety
/// `a` must be valid for reads of every `(i, p)` at `i·rsa + p·csa` for `i < rows`, `p < k`; `b`
/// likewise for `(p, j)`, `j < cols`; `c` valid for writes of every `(i, j)` at `i·rsc + j`, and
/// no other thread may access those elements of C during the call.
#[allow(
    clippy::too_many_arguments,
    reason = "a BLAS-style call: three strided matrices"
)]
pub(super) unsafe fn sgemm(
    (rows, k, cols): (usize, usize, usize),
    alpha: f32,
    (a, rsa, csa): (*const f32, usize, usize),
    (b, rsb, csb): (*const f32, usize, usize),
    (c, rsc): (*mut f32, usize),
) {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    // SAFETY: the caller's contract covers exactly the elements read and written; with
    // `read_dst = false` C's old contents are not read, and `gemm` computes
    // `dst = beta · lhs · rhs` (its `alpha` scales the old C, unused here).
    unsafe {
        gemm::gemm(
            rows,
            cols,
            k,
            c,
            1,
            rsc as isize,
            false,
            a,
            csa as isize,
            rsa as isize,
            b,
            csb as isize,
            rsb as isize,
            0.0f32,
            alpha,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    // SAFETY: as above; `beta = 0` means C's old contents are not read.
    unsafe {
        matrixmultiply::sgemm(
            rows,
            k,
            cols,
            alpha,
            a,
            rsa as isize,
            csa as isize,
            b,
            rsb as isize,
            csb as isize,
            0.0,
            c,
            rsc as isize,
            1,
        );
    }
}
