// RMS norm over rows, one workgroup per row: y = weight * (x * (1 / sqrt(mean(x^2) + eps))).
// Params: [rows, cols, eps bits].
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> weight: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = wid.x + wid.y * nwg.x;
    let cols = p.v[0].y;
    if (row >= p.v[0].x) {
        return;
    }
    let base = row * cols;
    var s = 0.0;
    for (var j = lid; j < cols; j = j + WG) {
        let v = x[base + j];
        s = s + v * v;
    }
    let ms = workgroup_sum(s, lid) / f32(cols);
    let r = 1.0 / sqrt(ms + bitcast<f32>(p.v[0].z));
    for (var j = lid; j < cols; j = j + WG) {
        y[base + j] = weight[j] * (x[base + j] * r);
    }
}
