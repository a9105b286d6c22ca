// Embedding, int8 table: table, scales, ids, y.
@group(0) @binding(0) var<storage, read_write> table: array<u32>;
@group(0) @binding(1) var<storage, read_write> scales: array<f32>;
@group(0) @binding(2) var<storage, read_write> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

// Element e of the weight, dequantised (s: index of its scale; see dequant.wgsl).
fn w_at(e: u32, s: u32) -> f32 {
    return i8_at(table[e >> 2u], e) * scales[s];
}
