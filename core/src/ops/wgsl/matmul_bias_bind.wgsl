// MatMul with bias: a, b, bias [n], c.
@group(0) @binding(0) var<storage, read_write> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> bias: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

fn bias_at(j: u32) -> f32 {
    return bias[j];
}

// Element e of the weight, dequantised (s: index of its scale; see dequant.wgsl).
fn w_at(e: u32, s: u32) -> f32 {
    return b[e];
}
