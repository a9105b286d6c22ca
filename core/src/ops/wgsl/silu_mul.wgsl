// The SwiGLU gate y = silu(gate) * up, silu(g) = g / (1 + exp(-g)). Params: [len].
@group(0) @binding(0) var<storage, read_write> gate: array<f32>;
@group(0) @binding(1) var<storage, read_write> up: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = element_index(wid, nwg, lid);
    if (i >= p.v[0].x) {
        return;
    }
    let g = gate[i];
    y[i] = g / (1.0 + exp(-g)) * up[i];
}
