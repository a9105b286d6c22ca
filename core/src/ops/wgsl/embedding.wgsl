// Row gather: y[r, d] = table[ids[r], d], or 0 when ids[r] >= vocab.
// Params: [vocab, dim, rows, len = rows * dim].
@group(0) @binding(0) var<storage, read_write> table: array<f32>;
@group(0) @binding(1) var<storage, read_write> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = element_index(wid, nwg, lid);
    if (i >= p.v[0].w) {
        return;
    }
    let dim = p.v[0].y;
    let id = ids[i / dim];
    var v = 0.0;
    if (id < p.v[0].x) {
        v = table[id * dim + i % dim];
    }
    y[i] = v;
}
