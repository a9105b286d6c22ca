// Softmax with a mask: x, mask [rows / rows_per_mask, cols], y. A column is kept when its mask
// value is non-zero.
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> mask: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

fn keep(row: u32, j: u32) -> bool {
    return mask[(row / p.v[0].z) * p.v[0].y + j] != 0.0;
}
