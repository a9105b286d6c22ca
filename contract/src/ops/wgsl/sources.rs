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
    (@at [$i:literal $($next:literal)*]
        $name:ident: $elem:ident $(, $more:ident: $more_elem:ident)*) => {
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

/// A kernel's `(key, source)`.
macro_rules! kernel {
    ($key:literal, [$($operand:tt)*] $(, $file:literal)+ $(,)?) => {
        ($key, wgsl!([$($operand)*] $(, $file)+))
    };
}

/// A kernel of one invocation per element: `element.wgsl`'s entry point, then its files.
macro_rules! per_element {
    ($key:literal, [$($operand:tt)*] $(, $file:literal)+ $(,)?) => {
        kernel!($key, [$($operand)*], "element.wgsl" $(, $file)+)
    };
}

/// A kernel of one workgroup per row: the reductions and `rows.wgsl`'s entry point, then its
/// files.
macro_rules! per_row {
    ($key:literal, [$($operand:tt)*] $(, $file:literal)+ $(,)?) => {
        kernel!($key, [$($operand)*], "reduce.wgsl", "rows.wgsl" $(, $file)+)
    };
}

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

// Each kernel: its key, its operands, then the pieces after the binding header.
pub(super) const MATMUL: Variants =
    weight_variants!("matmul", [a: f32,], [c: f32], "no_bias.wgsl", "matmul.wgsl");
pub(super) const MATMUL_BIAS: Variants =
    weight_variants!("matmul_bias", [a: f32,], [bias: f32, c: f32], "bias.wgsl", "matmul.wgsl");
pub(super) const MATMUL_DYNAMIC: Source = per_element!(
    "matmul_int8_dynamic",
    [a: f32, weight: u32, scales: f32, c: f32],
    "no_bias.wgsl",
    "matmul_dynamic.wgsl"
);
pub(super) const MATMUL_DYNAMIC_BIAS: Source = per_element!(
    "matmul_bias_int8_dynamic",
    [a: f32, weight: u32, scales: f32, bias: f32, c: f32],
    "bias.wgsl",
    "matmul_dynamic.wgsl"
);
pub(super) const ADD: Source = per_element!("add", [a: f32, b: f32, c: f32], "add.wgsl");
pub(super) const MUL: Source = per_element!("mul", [a: f32, b: f32, c: f32], "mul.wgsl");
pub(super) const SCALE: Source = per_element!("scale", [x: f32, y: f32], "scale.wgsl");
pub(super) const GELU: Source = per_element!("gelu", [x: f32, y: f32], "erf.wgsl", "gelu.wgsl");
pub(super) const RELU: Source = per_element!("relu", [x: f32, y: f32], "relu.wgsl");
pub(super) const COPY: Source = per_element!("copy", [x: u32, y: u32], "copy.wgsl");
pub(super) const LAYERNORM: Source =
    per_row!("layernorm", [x: f32, gamma: f32, beta: f32, y: f32], "layernorm.wgsl");
pub(super) const SOFTMAX: Source =
    per_row!("softmax", [x: f32, y: f32], "softmax_all.wgsl", "softmax.wgsl");
pub(super) const SOFTMAX_MASKED: Source = per_row!(
    "softmax_masked",
    [x: f32, mask: f32, y: f32],
    "softmax_masked.wgsl",
    "softmax.wgsl"
);
pub(super) const EMBEDDING: Variants =
    weight_variants!("embedding", [], [ids: u32, y: f32], "element.wgsl", "embedding.wgsl");
pub(super) const MEANPOOL: Source =
    per_element!("meanpool", [x: f32, mask: f32, y: f32], "meanpool.wgsl");
pub(super) const L2NORMALIZE: Source =
    per_row!("l2normalize", [x: f32, y: f32], "l2normalize.wgsl");
pub(super) const CONV2D: Variants =
    weight_variants!("conv2d", [x: f32,], [y: f32], "no_bias.wgsl", "element.wgsl", "conv2d.wgsl");
pub(super) const CONV2D_BIAS: Variants = weight_variants!(
    "conv2d_bias",
    [x: f32,],
    [bias: f32, y: f32],
    "bias.wgsl",
    "element.wgsl",
    "conv2d.wgsl"
);
pub(super) const MAXPOOL2D: Source = per_element!("maxpool2d", [x: f32, y: f32], "maxpool2d.wgsl");
pub(super) const PERMUTE: Source = per_element!("permute", [x: f32, y: f32], "permute.wgsl");
// The decoder ops (their parameters in `llm`).
pub(super) const RMSNORM: Source =
    per_row!("rmsnorm", [x: f32, weight: f32, y: f32], "rmsnorm.wgsl");
pub(super) const ROPE: Source = per_element!("rope", [x: f32, positions: u32, y: f32], "rope.wgsl");
pub(super) const SILU_MUL: Source =
    per_element!("silu_mul", [gate: f32, up: f32, y: f32], "silu_mul.wgsl");
pub(super) const KV_WRITE: Source =
    per_element!("kv_write", [k: f32, v: f32, slots: u32, seg: u32], "kv.wgsl", "kv_write.wgsl");
pub(super) const PAGED_ATTENTION: Source = kernel!(
    "paged_attention",
    [q: f32, seg: u32, tables: u32, token_meta: u32, y: f32],
    "kv.wgsl",
    "paged_attention_fresh.wgsl",
    "paged_attention.wgsl"
);
pub(super) const PAGED_ATTENTION_CARRY: Source = kernel!(
    "paged_attention_carry",
    [q: f32, seg: u32, tables: u32, token_meta: u32, carry: f32, y: f32],
    "kv.wgsl",
    "paged_attention_carry.wgsl",
    "paged_attention.wgsl"
);

pub(super) const SOURCES: &[Source] = &[
    MATMUL[0],
    MATMUL[1],
    MATMUL[2],
    MATMUL_BIAS[0],
    MATMUL_BIAS[1],
    MATMUL_BIAS[2],
    MATMUL_DYNAMIC,
    MATMUL_DYNAMIC_BIAS,
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
