//! The kernel sources, assembled at compile time: each is `common.wgsl`, a binding header
//! generated from its operand list (the ABI in the parent's doc, written once in `bindings!`),
//! then shared pieces (`element.wgsl`'s entry point, `reduce.wgsl`, a weight format's `w_at`,
//! a bias or none) and the kernel's body.

/// A kernel's binding header, the parent's binding ABI written once: storage operand `i`
/// (`name: element type`, in [`crate::ops::Op::signature`] order) at `@binding(i)`, then the
/// parameters `p` at `@binding(n)`.
macro_rules! bindings {
    ($($name:ident: $elem:ident),+ $(,)?) => {
        bindings!(@at [0 1 2 3 4 5 6] $($name: $elem),+)
    };
    (@at [$i:literal $($next:literal)*] $name:ident: $elem:ident $(, $more:ident: $more_elem:ident)*) => {
        concat!(
            "@group(0) @binding(", $i, ") var<storage, read_write> ",
            stringify!($name), ": array<", stringify!($elem), ">;\n",
            bindings!(@at [$($next)*] $($more: $more_elem),*)
        )
    };
    (@at [$i:literal $($next:literal)*]) => {
        concat!("@group(0) @binding(", $i, ") var<uniform> p: Params;\n")
    };
}

/// One complete WGSL module at compile time: `common.wgsl`, the binding header of the operands
/// in brackets, then the named files of this folder.
macro_rules! wgsl {
    ([$($operand:tt)*] $(, $file:expr)+ $(,)?) => {
        concat!(
            include_str!("common.wgsl"),
            "\n",
            bindings!($($operand)*),
            $("\n", include_str!($file)),+
        )
    };
}

pub(super) type Source = (&'static str, &'static str);

/// The variants of a weight-reading op: `[f32, f16, int8]` for each of its binding layouts.
pub(super) type Variants = [Source; 3];

/// The three weight formats of one kernel, `$key`, `${key}_f16` and `${key}_int8`: the operand
/// `weight` between the ones before and after it (int8 adds `scales` after it), the variant's
/// `w_at` (`weight_*.wgsl`), then the shared files.
macro_rules! weight_variants {
    ($key:literal, [$($before:tt)*], [$($after:tt)*], $($file:literal),+) => {
        [
            (
                $key,
                wgsl!([$($before)* weight: f32, $($after)*], "weight_f32.wgsl", $($file),+),
            ),
            (
                concat!($key, "_f16"),
                wgsl!(
                    [$($before)* weight: u32, $($after)*],
                    "dequant.wgsl",
                    "weight_f16.wgsl",
                    $($file),+
                ),
            ),
            (
                concat!($key, "_int8"),
                wgsl!(
                    [$($before)* weight: u32, scales: f32, $($after)*],
                    "dequant.wgsl",
                    "weight_int8.wgsl",
                    $($file),+
                ),
            ),
        ]
    };
}

pub(super) const MATMUL: Variants =
    weight_variants!("matmul", [a: f32,], [c: f32], "no_bias.wgsl", "matmul.wgsl");
pub(super) const MATMUL_BIAS: Variants = weight_variants!(
    "matmul_bias",
    [a: f32,],
    [bias: f32, c: f32],
    "bias.wgsl",
    "matmul.wgsl"
);
pub(super) const ADD: Source = (
    "add",
    wgsl!([a: f32, b: f32, c: f32], "element.wgsl", "add.wgsl"),
);
pub(super) const MUL: Source = (
    "mul",
    wgsl!([a: f32, b: f32, c: f32], "element.wgsl", "mul.wgsl"),
);
pub(super) const SCALE: Source = (
    "scale",
    wgsl!([x: f32, y: f32], "element.wgsl", "scale.wgsl"),
);
pub(super) const GELU: Source = (
    "gelu",
    wgsl!([x: f32, y: f32], "element.wgsl", "erf.wgsl", "gelu.wgsl"),
);
pub(super) const RELU: Source = ("relu", wgsl!([x: f32, y: f32], "element.wgsl", "relu.wgsl"));
pub(super) const COPY: Source = ("copy", wgsl!([x: u32, y: u32], "element.wgsl", "copy.wgsl"));
pub(super) const LAYERNORM: Source = (
    "layernorm",
    wgsl!(
        [x: f32, gamma: f32, beta: f32, y: f32],
        "reduce.wgsl", "rows.wgsl",
        "layernorm.wgsl"
    ),
);
pub(super) const SOFTMAX: Source = (
    "softmax",
    wgsl!([x: f32, y: f32], "reduce.wgsl", "rows.wgsl", "softmax_all.wgsl", "softmax.wgsl"),
);
pub(super) const SOFTMAX_MASKED: Source = (
    "softmax_masked",
    wgsl!(
        [x: f32, mask: f32, y: f32],
        "reduce.wgsl", "rows.wgsl",
        "softmax_masked.wgsl",
        "softmax.wgsl"
    ),
);
pub(super) const EMBEDDING: Variants = weight_variants!(
    "embedding",
    [],
    [ids: u32, y: f32],
    "element.wgsl",
    "embedding.wgsl"
);
pub(super) const MEANPOOL: Source = (
    "meanpool",
    wgsl!([x: f32, mask: f32, y: f32], "element.wgsl", "meanpool.wgsl"),
);
pub(super) const L2NORMALIZE: Source = (
    "l2normalize",
    wgsl!([x: f32, y: f32], "reduce.wgsl", "rows.wgsl", "l2normalize.wgsl"),
);
pub(super) const CONV2D: Variants = weight_variants!(
    "conv2d",
    [x: f32,],
    [y: f32],
    "no_bias.wgsl",
    "element.wgsl",
    "conv2d.wgsl"
);
pub(super) const CONV2D_BIAS: Variants = weight_variants!(
    "conv2d_bias",
    [x: f32,],
    [bias: f32, y: f32],
    "bias.wgsl",
    "element.wgsl",
    "conv2d.wgsl"
);
pub(super) const MAXPOOL2D: Source = (
    "maxpool2d",
    wgsl!([x: f32, y: f32], "element.wgsl", "maxpool2d.wgsl"),
);
pub(super) const PERMUTE: Source = (
    "permute",
    wgsl!([x: f32, y: f32], "element.wgsl", "permute.wgsl"),
);
// The decoder ops (their parameters in `llm`).
pub(super) const RMSNORM: Source = (
    "rmsnorm",
    wgsl!([x: f32, weight: f32, y: f32], "reduce.wgsl", "rows.wgsl", "rmsnorm.wgsl"),
);
pub(super) const ROPE: Source = (
    "rope",
    wgsl!([x: f32, positions: u32, y: f32], "element.wgsl", "rope.wgsl"),
);
pub(super) const SILU_MUL: Source = (
    "silu_mul",
    wgsl!([gate: f32, up: f32, y: f32], "element.wgsl", "silu_mul.wgsl"),
);
pub(super) const KV_WRITE: Source = (
    "kv_write",
    wgsl!(
        [k: f32, v: f32, slots: u32, seg: u32],
        "kv.wgsl",
        "element.wgsl",
        "kv_write.wgsl"
    ),
);
pub(super) const PAGED_ATTENTION: Source = (
    "paged_attention",
    wgsl!(
        [q: f32, seg: u32, tables: u32, token_meta: u32, y: f32],
        "kv.wgsl",
        "paged_attention_fresh.wgsl",
        "paged_attention.wgsl"
    ),
);
pub(super) const PAGED_ATTENTION_CARRY: Source = (
    "paged_attention_carry",
    wgsl!(
        [q: f32, seg: u32, tables: u32, token_meta: u32, carry: f32, y: f32],
        "kv.wgsl",
        "paged_attention_carry.wgsl",
        "paged_attention.wgsl"
    ),
);

pub(super) const SOURCES: &[Source] = &[
    MATMUL[0],
    MATMUL[1],
    MATMUL[2],
    MATMUL_BIAS[0],
    MATMUL_BIAS[1],
    MATMUL_BIAS[2],
    ADD,
    MUL,
    SCALE,
    GELU,
    RELU,
    COPY,
    LAYERNORM,
    SOFTMAX,
    SOFTMAX_MASKED,
    EMBEDDING[0],
    EMBEDDING[1],
    EMBEDDING[2],
    MEANPOOL,
    L2NORMALIZE,
    CONV2D[0],
    CONV2D[1],
    CONV2D[2],
    CONV2D_BIAS[0],
    CONV2D_BIAS[1],
    CONV2D_BIAS[2],
    MAXPOOL2D,
    PERMUTE,
    RMSNORM,
    ROPE,
    SILU_MUL,
    KV_WRITE,
    PAGED_ATTENTION,
    PAGED_ATTENTION_CARRY,
];
