//! Sources and parameters of the decoder ops' WGSL kernels: RMSNorm, rotary embeddings, the
//! SwiGLU gate, and the paged KV cache's write and attention (layouts in the parent's table).

use super::WORKGROUP_SIZE;
use super::sources::{
    KV_WRITE, PAGED_ATTENTION, PAGED_ATTENTION_CARRY, RMSNORM, ROPE, SILU_MUL, Source,
};
use crate::ops::{KvDType, KvLayout, Op};

/// The kernel's dtype code for KV elements: 0 f32, 1 f16, 2 int8.
pub(super) fn dtype_code(kv: &KvLayout) -> u32 {
    match kv.dtype {
        KvDType::F32 => 0,
        KvDType::F16 => 1,
        KvDType::Int8 => 2,
    }
}

/// Byte offset of the scales in a block (the end of its elements); it fits in u32 because a
/// block fits in its u32 stride (`Op::signature` checked it).
fn scales_at(kv: &KvLayout) -> u32 {
    (kv.token_bytes() * u64::from(kv.block_tokens)) as u32
}

/// Invocations per written block of [`Op::KvWrite`]: one per (K/V, head) pair when a head's
/// elements fill whole words (no two pairs then share a word) and the count fits in u32, else 1.
pub(super) fn kv_write_groups(kv: &KvLayout, tokens: u32) -> u32 {
    let pairs = 2 * u64::from(kv.kv_heads);
    let aligned = (u64::from(kv.head_dim) * kv.dtype.elem_bytes()).is_multiple_of(4);
    if aligned && pairs * u64::from(tokens) <= u64::from(u32::MAX) {
        pairs as u32
    } else {
        1
    }
}

/// Fills `p` for a decoder op and returns its source and workgroup count, or `None` for other
/// ops. `out_len` is the output's element count.
pub(super) fn kernel(op: &Op, out_len: u32, p: &mut [u32; 16]) -> Option<(Source, u64)> {
    let per = |n: u64| n.div_ceil(u64::from(WORKGROUP_SIZE));
    Some(match *op {
        Op::RmsNorm { rows, cols, eps } => {
            p[..3].copy_from_slice(&[rows, cols, eps.to_bits()]);
            (RMSNORM, u64::from(rows))
        }
        Op::Rope {
            tokens,
            heads,
            head_dim,
            theta,
        } => {
            // r = theta^(-2 / head_dim) as an f32 pair; the kernel raises it to i.
            let r = 1.0 / f64::from(theta).powf(2.0 / f64::from(head_dim));
            let hi = r as f32;
            let lo = (r - f64::from(hi)) as f32;
            p[..6].copy_from_slice(&[tokens, heads, head_dim, out_len, hi.to_bits(), lo.to_bits()]);
            (ROPE, per(u64::from(out_len)))
        }
        Op::SiluMul { len } => {
            p[0] = len;
            (SILU_MUL, per(u64::from(len)))
        }
        Op::KvWrite {
            kv,
            blocks,
            stride,
            layer,
            tokens,
        } => {
            let groups = kv_write_groups(&kv, tokens);
            let invocations = tokens * groups;
            p[..11].copy_from_slice(&[
                kv.kv_heads,
                kv.head_dim,
                kv.block_tokens,
                dtype_code(&kv),
                blocks,
                stride,
                layer,
                tokens,
                groups,
                scales_at(&kv),
                invocations,
            ]);
            (KV_WRITE, per(u64::from(invocations)))
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
            p[..15].copy_from_slice(&[
                kv.kv_heads,
                kv.head_dim,
                kv.block_tokens,
                dtype_code(&kv),
                blocks,
                stride,
                first_block,
                layer,
                tokens,
                q_heads,
                rows,
                width,
                scale.to_bits(),
                u32::from(carry_out),
                scales_at(&kv),
            ]);
            let source = if carry_in {
                PAGED_ATTENTION_CARRY
            } else {
                PAGED_ATTENTION
            };
            (source, u64::from(tokens) * u64::from(q_heads))
        }
        _ => return None,
    })
}
