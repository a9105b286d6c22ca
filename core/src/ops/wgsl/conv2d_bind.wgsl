// Conv2d without bias: x, weight, y.
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> weight: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

fn bias_at(co: u32) -> f32 {
    return 0.0;
}

// Element e of the weight, dequantised (s: index of its scale; see dequant.wgsl).
fn w_at(e: u32, s: u32) -> f32 {
    return weight[e];
}
