//! The shape of a paged KV cache: layers, KV heads, head dimension, element type and tokens per
//! block, and the byte layout of one block that every kernel path reads.
//!
//! A block holds `block_tokens` tokens of every layer, keys and values:
//! `[layers][2 (K, V)][kv_heads][block_tokens][head_dim]` elements, then, for int8, one f32 scale
//! per `[layers][2][kv_heads]` (the block's and head's absolute maximum ÷ 127). Keeping a block's
//! layers together makes a copy-on-write, a swap or an eviction one contiguous copy per block. The
//! block's stride is its bytes rounded up to the device's binding alignment, so any block can be
//! bound on its own.

use super::KvError;
pub use crate::ops::KvDType;
use crate::ops::KvLayout;

/// Largest block the layout accepts, in tokens.
pub const MAX_BLOCK_TOKENS: u32 = 4096;

/// The geometry of one paged KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvGeometry {
    /// Transformer layers.
    pub layers: u32,
    /// Key/value heads per layer (grouped-query attention shares them among query heads).
    pub kv_heads: u32,
    /// Elements per head.
    pub head_dim: u32,
    /// Element type.
    pub dtype: KvDType,
    /// Tokens per block.
    pub block_tokens: u32,
    /// Longest sequence the cache accepts, in tokens (the model's context length).
    pub max_seq: u32,
}

/// The named geometries of `--geometry`: (name, layers, kv heads, head dim, context length).
pub const PRESETS: &[(&str, u32, u32, u32, u32)] = &[
    ("llama3-8b", 32, 8, 128, 8192),
    ("llama2-7b", 32, 32, 128, 4096),
    ("qwen2-0.5b", 24, 2, 64, 32768),
    ("smollm2-135m", 30, 3, 64, 8192),
];

impl KvGeometry {
    /// A checked geometry.
    ///
    /// # Errors
    /// [`KvError::Geometry`] for a zero dimension, a block outside 1..=[`MAX_BLOCK_TOKENS`], or
    /// sizes whose block bytes overflow.
    pub fn new(
        layers: u32,
        kv_heads: u32,
        head_dim: u32,
        dtype: KvDType,
        block_tokens: u32,
        max_seq: u32,
    ) -> Result<Self, KvError> {
        let g = KvGeometry {
            layers,
            kv_heads,
            head_dim,
            dtype,
            block_tokens,
            max_seq,
        };
        if layers == 0 || kv_heads == 0 || head_dim == 0 || max_seq == 0 {
            return Err(KvError::Geometry(format!(
                "layers {layers}, kv heads {kv_heads}, head dim {head_dim} and max sequence \
                 {max_seq} must all be at least 1"
            )));
        }
        if block_tokens == 0 || block_tokens > MAX_BLOCK_TOKENS {
            return Err(KvError::Geometry(format!(
                "block of {block_tokens} tokens: a block holds 1 to {MAX_BLOCK_TOKENS} tokens"
            )));
        }
        let data = u64::from(block_tokens)
            .checked_mul(g.token_elems()?)
            .and_then(|e| e.checked_mul(dtype.elem_bytes()))
            .ok_or_else(|| KvError::Geometry("block bytes overflow u64".into()))?;
        if data > u64::from(u32::MAX) * 16 {
            return Err(KvError::Geometry(format!(
                "a block of {data} bytes is larger than any device binding"
            )));
        }
        Ok(g)
    }

    /// A named geometry (see [`PRESETS`]) or `layers,kv_heads,head_dim[,max_seq]`.
    pub fn parse(spec: &str, dtype: KvDType, block_tokens: u32) -> Result<Self, KvError> {
        if let Some(&(_, l, h, d, ctx)) = PRESETS.iter().find(|p| p.0 == spec) {
            return Self::new(l, h, d, dtype, block_tokens, ctx);
        }
        let nums: Result<Vec<u32>, _> = spec.split(',').map(|s| s.trim().parse::<u32>()).collect();
        match nums.as_deref() {
            Ok([l, h, d]) => Self::new(*l, *h, *d, dtype, block_tokens, 4096),
            Ok([l, h, d, ctx]) => Self::new(*l, *h, *d, dtype, block_tokens, *ctx),
            _ => Err(KvError::Geometry(format!(
                "`{spec}` is neither a preset ({}) nor layers,kv_heads,head_dim[,max_seq]",
                PRESETS.iter().map(|p| p.0).collect::<Vec<_>>().join(", ")
            ))),
        }
    }

    /// Elements of one token's keys and values over every layer and head.
    fn token_elems(&self) -> Result<u64, KvError> {
        2u64.checked_mul(u64::from(self.layers))
            .and_then(|v| v.checked_mul(u64::from(self.kv_heads)))
            .and_then(|v| v.checked_mul(u64::from(self.head_dim)))
            .ok_or_else(|| KvError::Geometry("token elements overflow".into()))
    }

    /// The layout of one block, as the KV ops read it.
    pub fn layout(&self) -> KvLayout {
        KvLayout {
            layers: self.layers,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            block_tokens: self.block_tokens,
            dtype: self.dtype,
        }
    }

    /// Key and value bytes of one token over every layer, scales excluded.
    pub fn token_bytes(&self) -> u64 {
        self.layout().token_bytes()
    }

    /// Bytes of one block: its tokens' keys and values, and its scales.
    pub fn block_bytes(&self) -> u64 {
        self.layout().block_bytes()
    }

    /// The distance between two blocks in device memory: [`KvGeometry::block_bytes`] rounded up
    /// to `align` (the device's binding alignment).
    pub fn block_stride(&self, align: u64) -> u64 {
        let align = align.max(4);
        self.block_bytes().div_ceil(align) * align
    }

    /// The default block size for a device: 8 tokens (half the tail waste of vLLM's 16; the serving
    /// simulator measures the difference), doubled while rounding a block up to
    /// the binding alignment wastes more than 1/64 of it, and halved while a block is larger than
    /// one binding (`max_binding`).
    pub fn default_block_tokens(
        layers: u32,
        kv_heads: u32,
        head_dim: u32,
        dtype: KvDType,
        binding_align: u64,
        max_binding: u64,
    ) -> u32 {
        let token = 2 * u64::from(layers) * u64::from(kv_heads) * u64::from(head_dim);
        let bytes = |t: u32| {
            let scales = if dtype == KvDType::Int8 {
                token / u64::from(head_dim) * 4
            } else {
                0
            };
            token * dtype.elem_bytes() * u64::from(t) + scales
        };
        let align = binding_align.max(4);
        let mut t = 8u32;
        while t < 256 && (bytes(t).div_ceil(align) * align - bytes(t)) * 64 > bytes(t) {
            t *= 2;
        }
        while t > 1 && bytes(t) > max_binding {
            t /= 2;
        }
        t
    }
}
