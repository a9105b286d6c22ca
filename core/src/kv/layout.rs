//! Reading and writing one token's keys and values in a block's bytes, in the layout
//! [`KvGeometry`] fixes: f32 and f16 elements as they are, int8 as `round(x / scale)` with one f32
//! scale per block, layer, K/V and head.
//!
//! An int8 head's scale is its absolute maximum over the tokens written so far ÷ 127. A token
//! larger than the scale rescales the head first: the earlier tokens are requantized to the new
//! scale (each loses at most half a step again), so no value is ever clipped. Tokens are written
//! in order, so the slots below the one written are the valid ones.

use super::geometry::{KvDType, KvGeometry};
use crate::ops::quant::{f16_to_f32, f32_to_f16};

/// Writes the keys `k` and values `v` (`[kv_heads][head_dim]` each) of one token of `layer` to
/// slot `offset` of `block` (one block's bytes).
pub fn write_token(
    g: &KvGeometry,
    block: &mut [u8],
    layer: u32,
    offset: u32,
    k: &[f32],
    v: &[f32],
) {
    let d = g.head_dim as usize;
    for (kv, src) in [k, v].into_iter().enumerate() {
        for head in 0..g.kv_heads {
            let x = &src[head as usize * d..(head as usize + 1) * d];
            write_head(g, block, layer, kv as u32, head, offset, x);
        }
    }
}

fn write_head(
    g: &KvGeometry,
    block: &mut [u8],
    layer: u32,
    kv: u32,
    head: u32,
    offset: u32,
    x: &[f32],
) {
    let at = g.elem_offset(layer, kv, head, offset) as usize;
    match g.dtype {
        KvDType::F32 => {
            for (i, &e) in x.iter().enumerate() {
                block[(at + i) * 4..(at + i + 1) * 4].copy_from_slice(&e.to_le_bytes());
            }
        }
        KvDType::F16 => {
            for (i, &e) in x.iter().enumerate() {
                block[(at + i) * 2..(at + i + 1) * 2].copy_from_slice(&f32_to_f16(e).to_le_bytes());
            }
        }
        KvDType::Int8 => {
            let s_at = g.scale_offset(layer, kv, head) as usize;
            let old = if offset == 0 {
                0.0
            } else {
                read_f32(block, s_at)
            };
            let amax = x.iter().fold(0f32, |m, &e| m.max(e.abs()));
            let scale = old.max(amax / 127.0);
            if scale > old && offset > 0 && old > 0.0 {
                // Requantize the head's earlier tokens to the larger scale.
                let first = g.elem_offset(layer, kv, head, 0) as usize;
                for q in &mut block[first..at] {
                    let v = f32::from(*q as i8) * old / scale;
                    *q = (v.round().clamp(-127.0, 127.0) as i8) as u8;
                }
            }
            block[s_at..s_at + 4].copy_from_slice(&scale.to_le_bytes());
            for (i, &e) in x.iter().enumerate() {
                let q = if scale > 0.0 {
                    (e / scale).round().clamp(-127.0, 127.0)
                } else {
                    0.0
                };
                block[at + i] = (q as i8) as u8;
            }
        }
    }
}

/// Reads one head's `head_dim` elements of slot `offset` into `out`.
#[inline]
pub fn read_head(
    g: &KvGeometry,
    block: &[u8],
    layer: u32,
    kv: u32,
    head: u32,
    offset: u32,
    out: &mut [f32],
) {
    let at = g.elem_offset(layer, kv, head, offset) as usize;
    match g.dtype {
        KvDType::F32 => {
            for (i, o) in out.iter_mut().enumerate() {
                *o = read_f32(block, (at + i) * 4);
            }
        }
        KvDType::F16 => {
            for (i, o) in out.iter_mut().enumerate() {
                let b = (at + i) * 2;
                *o = f16_to_f32(u16::from_le_bytes([block[b], block[b + 1]]));
            }
        }
        KvDType::Int8 => {
            let scale = read_f32(block, g.scale_offset(layer, kv, head) as usize);
            for (i, o) in out.iter_mut().enumerate() {
                *o = f32::from(block[at + i] as i8) * scale;
            }
        }
    }
}

#[inline]
fn read_f32(b: &[u8], at: usize) -> f32 {
    f32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
