// Conv2d with bias, f16 weight: x, weight, bias, y.
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> weight: array<u32>;
@group(0) @binding(2) var<storage, read_write> bias: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

fn bias_at(co: u32) -> f32 {
    return bias[co];
}

// Element e of the weight, dequantised (s: index of its scale; see dequant.wgsl).
fn w_at(e: u32, s: u32) -> f32 {
    return f16_at(weight[e >> 1u], e);
}
