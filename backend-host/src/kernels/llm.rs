//! Host kernels of the decoder ops: RMSNorm, rotary embeddings, the SwiGLU gate, and the paged KV
//! cache's write and attention. Numerics follow Hugging Face's Llama in f32: RMSNorm's mean square
//! is summed in f64 and rounded once; rotary angles are `position · inv_freq` in f32 with
//! `inv_freq` rounded from f64; attention walks a sequence's positions in order with an online
//! softmax (running maximum and sum), whose state a [`Op::PagedAttention`] with `carry_out` hands
//! to the next segment's dispatch.

use rayon::prelude::*;

use crate::ops::{KvLayout, Op};

/// The running maximum of an empty online-softmax state: finite, so that `exp(m − m')` is 0
/// without an infinity in any kernel's arithmetic.
pub(super) const EMPTY_MAX: f32 = -f32::MAX;

/// `y = x / √(mean(x²) + eps) · weight` per row of `cols`.
pub(super) fn rms_norm(x: &[f32], weight: &[f32], cols: usize, eps: f32, y: &mut [f32]) {
    for (xr, yr) in x.chunks_exact(cols).zip(y.chunks_exact_mut(cols)) {
        let ms = super::rows::sum_f64(xr, |v| v * v) / cols as f64;
        let r = 1.0 / (ms as f32 + eps).sqrt();
        for ((y, &x), &w) in yr.iter_mut().zip(xr).zip(weight) {
            *y = w * (x * r);
        }
    }
}

/// Rotate-half rotary embedding of `x` `[tokens, heads, head_dim]` at `positions`.
pub(super) fn rope(op: &Op, x: &[f32], positions: &[u32], y: &mut [f32]) {
    let Op::Rope {
        heads,
        head_dim,
        theta,
        ..
    } = *op
    else {
        return;
    };
    let (d, half) = (head_dim as usize, head_dim as usize / 2);
    let inv_freq: Vec<f32> = (0..half)
        .map(|i| (1.0 / f64::from(theta).powf(2.0 * i as f64 / d as f64)) as f32)
        .collect();
    let row = heads as usize * d;
    let (mut cos, mut sin) = (vec![0f32; half], vec![0f32; half]);
    for ((xr, yr), &pos) in x
        .chunks_exact(row)
        .zip(y.chunks_exact_mut(row))
        .zip(positions)
    {
        for i in 0..half {
            let angle = pos as f32 * inv_freq[i];
            (cos[i], sin[i]) = (angle.cos(), angle.sin());
        }
        for (xh, yh) in xr.chunks_exact(d).zip(yr.chunks_exact_mut(d)) {
            for i in 0..half {
                let (a, b) = (xh[i], xh[i + half]);
                yh[i] = a * cos[i] - b * sin[i];
                yh[i + half] = b * cos[i] + a * sin[i];
            }
        }
    }
}

/// `x / (1 + e^−x)`.
pub(super) fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// Writes each token's keys and values to its slot of `segment`, in token order.
pub(super) fn kv_write(op: &Op, k: &[f32], v: &[f32], slots: &[u32], segment: &mut [u8]) {
    let Op::KvWrite {
        kv,
        blocks,
        stride,
        layer,
        ..
    } = *op
    else {
        return;
    };
    let row = (kv.kv_heads * kv.head_dim) as usize;
    let (bt, stride) = (kv.block_tokens, stride as usize);
    let block_bytes = kv.block_bytes() as usize;
    for (t, &slot) in slots.iter().enumerate() {
        let block = slot / bt;
        if block >= blocks {
            continue;
        }
        let bytes = &mut segment[block as usize * stride..][..block_bytes];
        let (kr, vr) = (&k[t * row..][..row], &v[t * row..][..row]);
        kv.write_token(bytes, layer, slot % bt, kr, vr);
    }
}

/// The inputs of one [`Op::PagedAttention`] dispatch, borrowed.
pub(super) struct Paged<'a> {
    pub q: &'a [f32],
    pub segment: &'a [u8],
    pub tables: &'a [u32],
    pub meta: &'a [u32],
    pub carry: Option<&'a [f32]>,
}

/// Paged attention runs its query heads on the pool from this many multiply-adds (positions
/// seen × heads × head dim; about 30 µs on one core), else on the calling thread.
const PARALLEL_ATTENTION_MACS: usize = 1 << 16;

/// Paged attention over one segment (the op's doc): fills `y` with the state or the attention.
pub(super) fn paged_attention(op: &Op, input: &Paged<'_>, y: &mut [f32]) {
    let Op::PagedAttention {
        kv,
        blocks,
        stride,
        first_block,
        layer,
        q_heads,
        width,
        scale,
        carry_out,
        ..
    } = *op
    else {
        return;
    };
    let d = kv.head_dim as usize;
    let group = (q_heads / kv.kv_heads) as usize;
    let out_row = if carry_out { d + 2 } else { d };
    let head = |i: usize, y: &mut [f32]| {
        let (t, h) = (i / q_heads as usize, i % q_heads as usize);
        let (row, seen) = (input.meta[2 * t] as usize, input.meta[2 * t + 1] as usize);
        let mut state = vec![0f32; d + 2];
        match input.carry {
            Some(c) => state.copy_from_slice(&c[i * (d + 2)..][..d + 2]),
            None => state[0] = EMPTY_MAX,
        }
        let walk = Walk {
            kv,
            segment: input.segment,
            blocks: (first_block, blocks),
            stride: stride as usize,
            layer,
            kv_head: (h / group) as u32,
        };
        let w = width as usize;
        // A row past the table sees nothing (kernels cannot fail).
        let table = input.tables.get(row * w..(row + 1) * w).unwrap_or(&[]);
        walk.attend(&input.q[i * d..][..d], table, seen, scale, &mut state);
        if carry_out {
            y.copy_from_slice(&state);
        } else {
            let l = state[1];
            for (y, &a) in y.iter_mut().zip(&state[2..]) {
                *y = if l > 0.0 { a / l } else { 0.0 };
            }
        }
    };
    // Heads go to the pool when their positions add up to enough work: a decode step of one
    // sequence has few heads but a long context. Each head is computed alike either way.
    let heads = y.len() / out_row;
    let seen: usize = (0..heads.div_ceil(q_heads as usize))
        .map(|t| input.meta.get(2 * t + 1).map_or(0, |&n| n as usize))
        .sum();
    if seen * q_heads as usize * d >= PARALLEL_ATTENTION_MACS {
        y.par_chunks_mut(out_row)
            .enumerate()
            .for_each(|(i, y)| head(i, y));
    } else {
        y.chunks_mut(out_row)
            .enumerate()
            .for_each(|(i, y)| head(i, y));
    }
}

/// One query head's walk over the positions of its sequence held in one segment.
struct Walk<'a> {
    kv: KvLayout,
    segment: &'a [u8],
    /// First global block id and block count of the segment.
    blocks: (u32, u32),
    stride: usize,
    layer: u32,
    kv_head: u32,
}

impl Walk<'_> {
    /// Folds positions `0..seen` found in this segment into `state` (`[max, sum, acc..]`).
    fn attend(&self, q: &[f32], table: &[u32], seen: usize, scale: f32, state: &mut [f32]) {
        let (bt, d) = (self.kv.block_tokens as usize, q.len());
        let (mut k, mut v) = (vec![0f32; d], vec![0f32; d]);
        let (first, count) = self.blocks;
        let (mut max, mut sum) = (state[0], state[1]);
        for pos in 0..seen.min(table.len() * bt) {
            let Some(local) = table[pos / bt].checked_sub(first).filter(|&b| b < count) else {
                continue;
            };
            let bytes = &self.segment[local as usize * self.stride..];
            let off = (pos % bt) as u32;
            self.kv
                .read_head(bytes, self.layer, 0, self.kv_head, off, &mut k);
            let s = q.iter().zip(&k).map(|(a, b)| a * b).sum::<f32>() * scale;
            let new_max = max.max(s);
            let correction = (max - new_max).exp();
            let p = (s - new_max).exp();
            self.kv
                .read_head(bytes, self.layer, 1, self.kv_head, off, &mut v);
            for (a, &x) in state[2..].iter_mut().zip(&v) {
                *a = *a * correction + p * x;
            }
            sum = sum * correction + p;
            max = new_max;
        }
        (state[0], state[1]) = (max, sum);
    }
}

#[cfg(test)]
mod tests;
