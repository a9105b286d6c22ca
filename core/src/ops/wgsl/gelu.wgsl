// Exact GELU, y = x * 0.5 * (1 + erf(x / sqrt(2))), as PyTorch computes it. Params: [len].
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = element_index(wid, nwg, lid);
    if (i >= p.v[0].x) {
        return;
    }
    let v = x[i];
    y[i] = v * 0.5 * (1.0 + erf_f32(v * 0.7071067811865476));
}
