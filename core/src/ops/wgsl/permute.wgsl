// 4-D axis permutation, one invocation per output element: output axis a has extent od[a] and
// input stride s[a] (the stride of input axis perm[a]).
// Params: [od0, od1, od2, od3, s0, s1, s2, s3, len].
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = element_index(wid, nwg, lid);
    if (i >= p.v[2].x) {
        return;
    }
    let od = p.v[0];
    let s = p.v[1];
    let i3 = i % od.w;
    let i2 = (i / od.w) % od.z;
    let i1 = (i / (od.w * od.z)) % od.y;
    let i0 = i / (od.w * od.z * od.y);
    y[i] = x[i0 * s.x + i1 * s.y + i2 * s.z + i3 * s.w];
}
