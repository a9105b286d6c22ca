// NCHW max pooling without padding, one invocation per output element.
// Params: [n * c, h, w, k, stride, oh, ow, len = n * c * oh * ow].
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = element_index(wid, nwg, lid);
    if (i >= p.v[1].w) {
        return;
    }
    let h = p.v[0].y;
    let w = p.v[0].z;
    let k = p.v[0].w;
    let stride = p.v[1].x;
    let oh = p.v[1].y;
    let ow = p.v[1].z;
    let ox = i % ow;
    let oy = (i / ow) % oh;
    let plane = i / (ow * oh);
    let base = plane * h * w + oy * stride * w + ox * stride;
    var best = x[base];
    for (var ky = 0u; ky < k; ky = ky + 1u) {
        for (var kx = 0u; kx < k; kx = kx + 1u) {
            let v = x[base + ky * w + kx];
            if (v > best) {
                best = v;
            }
        }
    }
    y[i] = best;
}
