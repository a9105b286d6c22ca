// Row gather: y[r, d] = table[ids[r], d] (dequantised by w_at), or 0 when ids[r] >= vocab.
// Params: [vocab, dim, rows, len = rows * dim, group, groups] (int8 scale of row id, element d:
// scales[id * groups + d / group]).

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
        let d = i % dim;
        v = w_at(id * dim + d, id * p.v[1].y + d / p.v[1].x);
    }
    y[i] = v;
}
