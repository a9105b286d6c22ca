//! The byte layout of a paged KV cache block, as the KV ops ([`Op::KvWrite`](super::Op::KvWrite),
//! [`Op::PagedAttention`](super::Op::PagedAttention)) and the cache (`crate::kv`) read it.
//!
//! A block holds `block_tokens` tokens of every layer, keys and values:
//! `[layers][2 (K, V)][kv_heads][block_tokens][head_dim]` elements, then, for int8, one f32 scale
//! per `[layers][2][kv_heads]`. f32 and f16 elements are stored as they are; int8 as
//! `round(x / scale)`, the scale being the head's absolute maximum over the tokens written so far
//! ÷ 127. A token larger than the scale rescales the head first: the earlier tokens are
//! requantized to the new scale (each loses at most half a step again), so no value is clipped.
//! Tokens of a block are written in order, so the slots below the one written are the valid ones.

use crate::Result;
use crate::ops::quant::f32_to_f16;

/// Element type of the cached keys and values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvDType {
    /// 4 bytes per element.
    F32,
    /// IEEE half precision, 2 bytes per element.
    F16,
    /// Symmetric int8 with one f32 scale per block, layer, K/V and head.
    Int8,
}

impl KvDType {
    /// Bytes per element (scales excluded).
    pub fn elem_bytes(self) -> u64 {
        match self {
            KvDType::F32 => 4,
            KvDType::F16 => 2,
            KvDType::Int8 => 1,
        }
    }

    /// Parses `f32`, `f16` or `int8`.
    ///
    /// # Errors
    /// [`ArgumentError::Invalid`](crate::ArgumentError::Invalid) naming the accepted values.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "f32" => Ok(KvDType::F32),
            "f16" => Ok(KvDType::F16),
            "int8" | "i8" => Ok(KvDType::Int8),
            other => {
                Err(
                    crate::ArgumentError::invalid_value("KV dtype", other, "f32, f16 or int8")
                        .into(),
                )
            }
        }
    }

    /// The name [`KvDType::parse`] reads.
    pub fn name(self) -> &'static str {
        match self {
            KvDType::F32 => "f32",
            KvDType::F16 => "f16",
            KvDType::Int8 => "int8",
        }
    }
}

/// The shape of one block (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KvLayout {
    /// Transformer layers.
    pub layers: u32,
    /// Key/value heads per layer.
    pub kv_heads: u32,
    /// Elements per head.
    pub head_dim: u32,
    /// Tokens per block.
    pub block_tokens: u32,
    /// Element type.
    pub dtype: KvDType,
}

impl KvLayout {
    /// Key and value bytes of one token over every layer, scales excluded.
    pub fn token_bytes(&self) -> u64 {
        2 * u64::from(self.layers)
            * u64::from(self.kv_heads)
            * u64::from(self.head_dim)
            * self.dtype.elem_bytes()
    }

    /// Scale bytes of one block (int8 only).
    pub fn scale_bytes(&self) -> u64 {
        match self.dtype {
            KvDType::Int8 => 2 * u64::from(self.layers) * u64::from(self.kv_heads) * 4,
            _ => 0,
        }
    }

    /// The cache parameters both KV kernels (WGSL and CUDA) take, in their order: `kv_heads,
    /// head_dim, block_tokens`, the element code (0 f32, 1 f16, 2 int8), then an op's `blocks`
    /// and `stride`.
    pub fn kernel_params(&self, blocks: u32, stride: u32) -> [u32; 6] {
        let code = match self.dtype {
            KvDType::F32 => 0,
            KvDType::F16 => 1,
            KvDType::Int8 => 2,
        };
        let (heads, dim, tokens) = (self.kv_heads, self.head_dim, self.block_tokens);
        [heads, dim, tokens, code, blocks, stride]
    }

    /// Byte offset of the scales in a block (the end of its elements), as the kernels take it: it
    /// fits in u32 where a block fits in an op's u32 stride, which `Op::signature` checks.
    pub fn kernel_scales_at(&self) -> u32 {
        (self.token_bytes() * u64::from(self.block_tokens)) as u32
    }

    /// Bytes of one block: its tokens' keys and values, and its scales.
    pub fn block_bytes(&self) -> u64 {
        self.token_bytes() * u64::from(self.block_tokens) + self.scale_bytes()
    }

    /// Element offset of `(layer, kv (0 = K, 1 = V), head, token)` in a block, in elements.
    pub fn elem_offset(&self, layer: u32, kv: u32, head: u32, token: u32) -> u64 {
        let slab = u64::from(self.block_tokens) * u64::from(self.head_dim);
        ((u64::from(layer) * 2 + u64::from(kv)) * u64::from(self.kv_heads) + u64::from(head)) * slab
            + u64::from(token) * u64::from(self.head_dim)
    }

    /// Byte offset of the scale of `(layer, kv, head)` in an int8 block.
    pub fn scale_offset(&self, layer: u32, kv: u32, head: u32) -> u64 {
        self.token_bytes() * u64::from(self.block_tokens)
            + ((u64::from(layer) * 2 + u64::from(kv)) * u64::from(self.kv_heads) + u64::from(head))
                * 4
    }

    /// Writes the keys `k` and values `v` (`[kv_heads][head_dim]` each) of one token of `layer`
    /// to slot `offset` of `block` (one block's bytes).
    pub fn write_token(&self, block: &mut [u8], layer: u32, offset: u32, k: &[f32], v: &[f32]) {
        let d = self.head_dim as usize;
        for (kv, src) in [k, v].into_iter().enumerate() {
            for head in 0..self.kv_heads {
                let x = &src[head as usize * d..(head as usize + 1) * d];
                self.write_head(block, layer, kv as u32, head, offset, x);
            }
        }
    }

    fn write_head(&self, block: &mut [u8], layer: u32, kv: u32, head: u32, offset: u32, x: &[f32]) {
        let at = self.elem_offset(layer, kv, head, offset) as usize;
        match self.dtype {
            KvDType::F32 => {
                for (i, &e) in x.iter().enumerate() {
                    block[(at + i) * 4..(at + i + 1) * 4].copy_from_slice(&e.to_le_bytes());
                }
            }
            KvDType::F16 => {
                for (i, &e) in x.iter().enumerate() {
                    block[(at + i) * 2..(at + i + 1) * 2]
                        .copy_from_slice(&f32_to_f16(e).to_le_bytes());
                }
            }
            KvDType::Int8 => {
                let s_at = self.scale_offset(layer, kv, head) as usize;
                let old = if offset == 0 {
                    0.0
                } else {
                    read_f32(block, s_at)
                };
                let amax = x.iter().fold(0f32, |m, &e| m.max(e.abs()));
                let scale = old.max(amax / 127.0);
                if scale > old && offset > 0 && old > 0.0 {
                    // Requantize the head's earlier tokens to the larger scale.
                    let first = self.elem_offset(layer, kv, head, 0) as usize;
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
        &self,
        block: &[u8],
        layer: u32,
        kv: u32,
        head: u32,
        offset: u32,
        out: &mut [f32],
    ) {
        let at = self.elem_offset(layer, kv, head, offset) as usize;
        let n = out.len();
        // One bounds check per head, then loops that vectorise (F16C for halves where the CPU
        // has it); every conversion is exact, so the values are those of an element-wise read.
        match self.dtype {
            KvDType::F32 => {
                for (o, c) in out
                    .iter_mut()
                    .zip(block[at * 4..(at + n) * 4].chunks_exact(4))
                {
                    *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
            }
            KvDType::F16 => crate::ops::quant::decode_halves(&block[at * 2..(at + n) * 2], out),
            KvDType::Int8 => {
                let scale = read_f32(block, self.scale_offset(layer, kv, head) as usize);
                for (i, o) in out.iter_mut().enumerate() {
                    *o = f32::from(block[at + i] as i8) * scale;
                }
            }
        }
    }
}

#[inline]
fn read_f32(b: &[u8], at: usize) -> f32 {
    f32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
