//! Launch planning of the decoder ops: RMSNorm, rotary embeddings, the SwiGLU gate, and the
//! paged KV cache's write and attention (`kernels/llm.cu`).

use tensormem_contract::ops::{KvLayout, Op};

use super::{Arg, KernelCall, LaunchDims, b, blocks_for, elementwise_dims, row_dims};

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

/// The cache arguments both KV kernels take after their pointers
/// ([`KvLayout::kernel_params`]) and the byte offset of a block's int8 scales
/// ([`KvLayout::kernel_scales_at`]).
fn kv_args(kv: &KvLayout, blocks: u32, stride: u32) -> ([Arg; 6], Arg) {
    let layout = kv.kernel_params(blocks, stride).map(Arg::U32);
    (layout, Arg::U32(kv.kernel_scales_at()))
}

/// The launch of a decoder op over `addrs` (checked by the caller); `out_len` is its output's
/// element count; `None` for the other ops.
pub(super) fn plan_call(op: &Op, addrs: &[u64], out_len: u64) -> Option<KernelCall> {
    let p = |i: usize| Arg::Ptr(addrs[i]);
    let call = |kernel, args, dims| KernelCall { kernel, args, dims };
    Some(match *op {
        Op::RmsNorm { rows, cols, eps } => call(
            "tm_rmsnorm",
            vec![
                p(0),
                p(1),
                p(2),
                Arg::U32(rows),
                Arg::U32(cols),
                Arg::F32(eps),
            ],
            row_dims(rows, cols),
        ),
        Op::Rope {
            tokens,
            heads,
            head_dim,
            theta,
        } => call(
            "tm_rope",
            vec![
                p(0),
                p(1),
                p(2),
                Arg::U32(tokens),
                Arg::U32(heads),
                Arg::U32(head_dim),
                Arg::F32(theta),
            ],
            elementwise_dims(out_len),
        ),
        Op::SiluMul { len } => call(
            "tm_silu_mul",
            vec![p(0), p(1), p(2), Arg::U32(len)],
            elementwise_dims(u64::from(len)),
        ),
        Op::KvWrite {
            kv,
            blocks,
            stride,
            layer,
            tokens,
        } => {
            let (layout, scales_at) = kv_args(&kv, blocks, stride);
            // One thread per (token, K/V head pair); stores are byte-granular, so pairs never
            // share a read-modify-write.
            let groups = 2 * kv.kv_heads;
            let mut args = vec![p(0), p(1), p(2), p(3)];
            args.extend(layout);
            args.extend([
                Arg::U32(layer),
                Arg::U32(tokens),
                Arg::U32(groups),
                scales_at,
            ]);
            call(
                "tm_kv_write",
                args,
                elementwise_dims(u64::from(tokens) * u64::from(groups)),
            )
        }
        Op::PagedAttention {
            kv,
            blocks,
            stride,
            first_block,
            layer,
            tokens,
            q_heads,
            rows,
            width,
            scale,
            carry_in,
            carry_out,
        } => {
            let (layout, scales_at) = kv_args(&kv, blocks, stride);
            let (carry, out) = if carry_in {
                (p(4), p(5))
            } else {
                (Arg::Ptr(0), p(4))
            };
            let mut args = vec![p(0), p(1), p(2), p(3), carry, out];
            args.extend(layout);
            args.extend([
                Arg::U32(first_block),
                Arg::U32(layer),
                Arg::U32(tokens),
                Arg::U32(q_heads),
                Arg::U32(rows),
                Arg::U32(width),
                Arg::F32(scale),
                b(carry_in),
                b(carry_out),
                scales_at,
            ]);
            call(
                "tm_paged_attention",
                args,
                paged_attention_dims(u64::from(tokens) * u64::from(q_heads)),
            )
        }
        _ => return None,
    })
}
