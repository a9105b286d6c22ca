//! Launch planning of the decoder ops: RMSNorm, rotary embeddings, the SwiGLU gate, and the
//! paged KV cache's write and attention (`kernels/llm.cu`).

use tensormem_contract::ops::Op;

use super::{Arg, LaunchDims, blocks_for, elementwise_dims, row_dims};

/// Threads per block of `tm_paged_attention`; must equal `TM_PA_THREADS` in `kernels/llm.cu`.
pub(crate) const PAGED_ATTENTION_BLOCK: u32 = 64;

/// Geometry of `tm_paged_attention`: one block of [`PAGED_ATTENTION_BLOCK`] threads per (token,
/// query head), grid-stride past [`GRID_MAX`](super::GRID_MAX); its shared memory is static.
pub(crate) fn paged_attention_dims(heads: u64) -> LaunchDims {
    LaunchDims {
        grid: (blocks_for(heads, 1), 1, 1),
        block: (PAGED_ATTENTION_BLOCK, 1, 1),
        shared_bytes: 0,
    }
}

/// The kernel, pointer arguments, arguments after the shared parameters
/// ([`Op::kernel_scalars`]) and geometry of a decoder op over `addrs` (checked by the caller);
/// `out_len` is its output's element count; `None` for the other ops.
pub(super) fn plan(
    op: &Op,
    addrs: &[u64],
    out_len: u64,
) -> Option<(&'static str, Vec<Arg>, Vec<Arg>, LaunchDims)> {
    let p = |i: usize| Arg::Ptr(addrs[i]);
    Some(match *op {
        Op::RmsNorm { rows, cols, .. } => (
            "tm_rmsnorm",
            vec![p(0), p(1), p(2)],
            vec![],
            row_dims(rows, cols),
        ),
        Op::Rope { .. } => (
            "tm_rope",
            vec![p(0), p(1), p(2)],
            vec![],
            elementwise_dims(out_len),
        ),
        Op::SiluMul { len } => (
            "tm_silu_mul",
            vec![p(0), p(1), p(2)],
            vec![],
            elementwise_dims(u64::from(len)),
        ),
        Op::KvWrite { kv, tokens, .. } => {
            // One thread per (token, K/V head pair); stores are byte-granular, so pairs never
            // share a read-modify-write.
            let groups = 2 * kv.kv_heads;
            (
                "tm_kv_write",
                vec![p(0), p(1), p(2), p(3)],
                vec![Arg::U32(groups), Arg::U32(kv.kernel_scales_at())],
                elementwise_dims(u64::from(tokens) * u64::from(groups)),
            )
        }
        Op::PagedAttention {
            tokens,
            q_heads,
            carry_in,
            ..
        } => {
            let (carry, out) = if carry_in {
                (p(4), p(5))
            } else {
                (Arg::Ptr(0), p(4))
            };
            (
                "tm_paged_attention",
                vec![p(0), p(1), p(2), p(3), carry, out],
                vec![],
                paged_attention_dims(u64::from(tokens) * u64::from(q_heads)),
            )
        }
        _ => return None,
    })
}
