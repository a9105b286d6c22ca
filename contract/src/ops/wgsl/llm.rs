//! Sources and parameters of the decoder ops' WGSL kernels: RMSNorm, rotary embeddings, the
//! SwiGLU gate, and the paged KV cache's write and attention (layouts in the parent's table).

use super::WORKGROUP_SIZE;
use super::sources::{
    KV_WRITE, PAGED_ATTENTION, PAGED_ATTENTION_CARRY, RMSNORM, ROPE, SILU_MUL, Source,
};
use crate::ops::{KvLayout, Op};

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

/// Appends a decoder op's own parameters after its shared ones (`push`) and returns its source
/// and workgroup count, or `None` for other ops. `out_len` is the output's element count.
pub(super) fn kernel(
    op: &Op,
    out_len: u32,
    push: &mut impl FnMut(&[u32]),
) -> Option<(Source, u64)> {
    let per = |n: u64| n.div_ceil(u64::from(WORKGROUP_SIZE));
    Some(match *op {
        Op::RmsNorm { rows, .. } => (RMSNORM, u64::from(rows)),
        Op::Rope {
            head_dim, theta, ..
        } => {
            // r = theta^(-2 / head_dim) as an f32 pair; the kernel raises it to i. The last word
            // stays 0: the kernel's opaque zero.
            let r = 1.0 / f64::from(theta).powf(2.0 / f64::from(head_dim));
            let hi = r as f32;
            let lo = (r - f64::from(hi)) as f32;
            push(&[out_len, hi.to_bits(), lo.to_bits(), 0]);
            (ROPE, per(u64::from(out_len)))
        }
        Op::SiluMul { len } => (SILU_MUL, per(u64::from(len))),
        Op::KvWrite { kv, tokens, .. } => {
            let groups = kv_write_groups(&kv, tokens);
            let invocations = tokens * groups;
            push(&[groups, kv.kernel_scales_at(), invocations]);
            (KV_WRITE, per(u64::from(invocations)))
        }
        Op::PagedAttention {
            tokens,
            q_heads,
            carry_in,
            ..
        } => {
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
