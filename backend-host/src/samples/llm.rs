//! Samples of the decoder ops: instances (small shapes with odd head sizes whose f16 and int8
//! heads straddle words, and larger ones spanning several workgroups or 64-position chunks),
//! inputs that make sense for them (positions, slots and tables in range with a few past it,
//! KV segments written through [`KvLayout::write_token`], carried states of both kinds), the
//! initial bytes of the segment [`Op::KvWrite`] updates, and its comparison rule.

use super::support::f32_bytes;
use super::{Rng, compare_f32};
use crate::ops::{KvDType, KvLayout, Op};

/// The decoder op instances: every KV op with f32, f16 and int8 KV, paged attention with every
/// carry variant.
pub(super) fn instances() -> Vec<Op> {
    let mut ops = vec![
        Op::RmsNorm {
            rows: 7,
            cols: 33,
            eps: 1e-6,
        },
        Op::RmsNorm {
            rows: 64,
            cols: 4096,
            eps: 1e-5,
        },
        Op::Rope {
            tokens: 5,
            heads: 3,
            head_dim: 8,
            theta: 10_000.0,
        },
        Op::Rope {
            tokens: 64,
            heads: 8,
            head_dim: 128,
            theta: 500_000.0,
        },
        Op::SiluMul { len: 1001 },
        Op::SiluMul { len: 300_000 },
    ];
    for dtype in [KvDType::F32, KvDType::F16, KvDType::Int8] {
        // Odd head_dim: f16 and int8 heads straddle words; padding between blocks.
        let small = KvLayout {
            layers: 2,
            kv_heads: 2,
            head_dim: 5,
            block_tokens: 4,
            dtype,
        };
        let large = KvLayout {
            layers: 2,
            kv_heads: 4,
            head_dim: 64,
            block_tokens: 16,
            dtype,
        };
        let small_stride = (small.block_bytes().next_multiple_of(4) + 8) as u32;
        let large_stride = large.block_bytes().next_multiple_of(256) as u32;
        let write = |kv, blocks, stride, tokens| Op::KvWrite {
            kv,
            blocks,
            stride,
            layer: 1,
            tokens,
        };
        ops.push(write(small, 3, small_stride, 9));
        ops.push(write(large, 8, large_stride, 70));
        let attend = |kv, blocks, stride, first_block, tokens, q_heads, rows, width, carry| {
            let (carry_in, carry_out) = carry;
            Op::PagedAttention {
                kv,
                blocks,
                stride,
                first_block,
                layer: 1,
                tokens,
                q_heads,
                rows,
                width,
                scale: 0.4,
                carry_in,
                carry_out,
            }
        };
        for carry in [(false, false), (true, false), (false, true), (true, true)] {
            ops.push(attend(small, 3, small_stride, 2, 5, 4, 3, 3, carry));
        }
        // 160 positions: three chunks of 64.
        for carry in [(false, false), (true, true)] {
            ops.push(attend(large, 8, large_stride, 0, 6, 8, 4, 10, carry));
        }
    }
    ops
}

fn words(v: impl IntoIterator<Item = u32>) -> Vec<u8> {
    v.into_iter().flat_map(u32::to_le_bytes).collect()
}

fn floats(n: u64, rng: &mut Rng) -> Vec<f32> {
    (0..n).map(|_| rng.f32() * 1.5).collect()
}

/// A segment of `blocks` blocks with every slot of every layer written (random keys and values
/// of magnitude up to 1.5; the bytes between blocks zero).
fn segment(kv: &KvLayout, blocks: u32, stride: u32, rng: &mut Rng) -> Vec<u8> {
    let mut bytes = vec![0u8; blocks as usize * stride as usize];
    let row = u64::from(kv.kv_heads) * u64::from(kv.head_dim);
    for block in bytes.chunks_exact_mut(stride as usize) {
        for layer in 0..kv.layers {
            for offset in 0..kv.block_tokens {
                let (k, v) = (floats(row, rng), floats(row, rng));
                kv.write_token(block, layer, offset, &k, &v);
            }
        }
    }
    bytes
}

/// Inputs of the decoder ops that need more than random values (`None` for the others).
pub(super) fn inputs(op: &Op, rng: &mut Rng) -> Option<Vec<Vec<u8>>> {
    Some(match *op {
        Op::Rope {
            tokens,
            heads,
            head_dim,
            ..
        } => {
            let x = floats(
                u64::from(tokens) * u64::from(heads) * u64::from(head_dim),
                rng,
            );
            // Positions up to 5000, where an angle off by one ulp of inv_freq would show.
            let positions = (0..tokens).map(|t| if t == 0 { 4999 } else { rng.below(5000) as u32 });
            vec![f32_bytes(&x), words(positions)]
        }
        Op::KvWrite {
            kv, blocks, tokens, ..
        } => {
            let row = u64::from(kv.kv_heads) * u64::from(kv.head_dim) * u64::from(tokens);
            let (k, v) = (floats(row, rng), floats(row, rng));
            // Consecutive slots from a random one (wrapping within the segment), every 7th past
            // the segment, every 11th repeating the previous one (the later token wins).
            let slots_in = u64::from(blocks) * u64::from(kv.block_tokens);
            let start = rng.below(slots_in);
            let mut slots = Vec::with_capacity(tokens as usize);
            for j in 0..u64::from(tokens) {
                let slot = if j % 7 == 6 {
                    slots_in + rng.below(2 * u64::from(kv.block_tokens))
                } else if j % 11 == 10 {
                    *slots.last().unwrap_or(&0)
                } else {
                    (start + j) % slots_in
                };
                slots.push(slot);
            }
            vec![
                f32_bytes(&k),
                f32_bytes(&v),
                words(slots.into_iter().map(|s| s as u32)),
            ]
        }
        Op::PagedAttention {
            kv,
            blocks,
            stride,
            first_block,
            tokens,
            q_heads,
            rows,
            width,
            carry_in,
            ..
        } => {
            let d = u64::from(kv.head_dim);
            let heads = u64::from(tokens) * u64::from(q_heads);
            let q = floats(heads * d, rng);
            let seg = segment(&kv, blocks, stride, rng);
            // Ids below, in and above the segment's blocks.
            let ids = u64::from(first_block + blocks + 3);
            let tables: Vec<u32> = (0..rows * width).map(|_| rng.below(ids) as u32).collect();
            // Token 0's row is past the table (it sees nothing); positions past the table's
            // width are ignored.
            let max_seen = u64::from(width * kv.block_tokens + 5);
            let meta = (0..tokens).flat_map(|t| {
                let row = if t == 0 {
                    rows
                } else {
                    rng.below(u64::from(rows)) as u32
                };
                [row, rng.below(max_seen) as u32]
            });
            let meta: Vec<u32> = meta.collect();
            let mut ins = vec![f32_bytes(&q), seg, words(tables), words(meta)];
            if carry_in {
                // Every fourth head's state empty, the others as if a segment had been seen.
                let mut carry = Vec::new();
                for h in 0..heads {
                    if h % 4 == 0 {
                        carry.extend([-f32::MAX, 0.0]);
                        carry.extend(std::iter::repeat_n(0.0, d as usize));
                    } else {
                        let sum = 1.0 + 3.0 * rng.f32().abs();
                        carry.extend([rng.f32() * 2.0, sum]);
                        carry.extend(floats(d, rng).iter().map(|a| a * sum));
                    }
                }
                ins.push(f32_bytes(&carry));
            }
            ins
        }
        _ => return None,
    })
}

/// The bytes an op that [updates its output](Op::updates_output) finds there: a deterministic
/// pattern, with int8 scales positive (some below, some above what a new token needs).
pub fn initial_output(op: &Op) -> Option<Vec<u8>> {
    let Op::KvWrite {
        kv, blocks, stride, ..
    } = *op
    else {
        return None;
    };
    let size = u64::from(blocks) * u64::from(stride);
    let mut bytes: Vec<u8> = (0..size).map(|i| ((i * 131 + 7) % 251) as u8).collect();
    if kv.dtype == KvDType::Int8 {
        for (b, block) in bytes.chunks_exact_mut(stride as usize).enumerate() {
            for layer in 0..kv.layers {
                for (pair, head) in (0..2).flat_map(|k| (0..kv.kv_heads).map(move |h| (k, h))) {
                    let at = kv.scale_offset(layer, pair, head) as usize;
                    let scale = 0.004 + 0.002 * ((b as u32 + layer + pair + head) % 8) as f32;
                    block[at..at + 4].copy_from_slice(&scale.to_le_bytes());
                }
            }
        }
    }
    Some(bytes)
}

/// Checks a device's [`Op::KvWrite`] segment against the reference (`None` for other ops):
/// f32 and f16 bytes exactly; int8 elements within one step (a division may round the other
/// way), scales within 1e-5 relative, every other byte exactly.
pub(super) fn check(op: &Op, got: &[u8], want: &[u8]) -> Option<Result<(), String>> {
    let Op::KvWrite { kv, stride, .. } = *op else {
        return None;
    };
    if got.len() != want.len() {
        return Some(Err(format!(
            "length {} vs reference {}",
            got.len(),
            want.len()
        )));
    }
    if kv.dtype != KvDType::Int8 {
        let first = got.iter().zip(want).position(|(g, w)| g != w);
        return Some(match first {
            None => Ok(()),
            Some(i) => Err(format!(
                "byte {i}: got {:#04x}, reference {:#04x}",
                got[i], want[i]
            )),
        });
    }
    let elems = kv.token_bytes() * u64::from(kv.block_tokens);
    let end = kv.block_bytes();
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let at = i as u64 % u64::from(stride);
        let bad = if at < elems {
            (i32::from(g as i8) - i32::from(w as i8)).abs() > 1
        } else if at < end {
            if (at - elems).is_multiple_of(4)
                && let Err(e) = compare_f32(&got[i..i + 4], &want[i..i + 4], 1e-5)
            {
                return Some(Err(format!("scale at byte {i}: {e}")));
            }
            false
        } else {
            g != w
        };
        if bad {
            return Some(Err(format!("byte {i}: got {g:#04x}, reference {w:#04x}")));
        }
    }
    Some(Ok(()))
}
