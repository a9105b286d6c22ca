// Layer norm over rows, one workgroup per row: two passes (mean, then population variance of
// x - mean), y = (x - mean) * (1 / sqrt(var + eps)) * gamma + beta. Params: [rows, cols, eps bits].
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> gamma: array<f32>;
@group(0) @binding(2) var<storage, read_write> beta: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

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
        s = s + x[base + j];
    }
    let mean = workgroup_sum(s, lid) / f32(cols);
    var q = 0.0;
    for (var j = lid; j < cols; j = j + WG) {
        let d = x[base + j] - mean;
        q = q + d * d;
    }
    let variance = workgroup_sum(q, lid) / f32(cols);
    let rstd = 1.0 / sqrt(variance + bitcast<f32>(p.v[0].z));
    for (var j = lid; j < cols; j = j + WG) {
        y[base + j] = (x[base + j] - mean) * rstd * gamma[j] + beta[j];
    }
}
