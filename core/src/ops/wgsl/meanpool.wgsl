// Masked mean over the sequence axis, one invocation per output element (the reduction runs
// over a strided axis, so a per-row workgroup would gain nothing):
// y[b, d] = sum_s mask[b, s] * x[b, s, d] / max(sum_s mask[b, s], 1e-9), s in order.
// Params: [batch, seq, dim, len = batch * dim].
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> mask: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = element_index(wid, nwg, lid);
    if (i >= p.v[0].w) {
        return;
    }
    let seq = p.v[0].y;
    let dim = p.v[0].z;
    let b = i / dim;
    let d = i % dim;
    var acc = 0.0;
    var count = 0.0;
    for (var s = 0u; s < seq; s = s + 1u) {
        let m = mask[b * seq + s];
        count = count + m;
        acc = acc + m * x[(b * seq + s) * dim + d];
    }
    y[i] = acc / max(count, 1e-9);
}
