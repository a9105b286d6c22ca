// Row gather: y[r, d] = table[ids[r], d] (dequantised by w_at), or 0 when ids[r] >= vocab.
// Params: [vocab, dim, rows, fmt, group, groups, len = rows * dim] (int8 scale of row id,
// element d: scales[id * groups + d / group]).

// The element count is parameter word 6 (see element.wgsl).
const LEN_AT: u32 = 6u;

fn element(i: u32) {
    let dim = p.v[0].y;
    let id = ids[i / dim];
    var v = 0.0;
    if (id < p.v[0].x) {
        let d = i % dim;
        v = w_at(id * dim + d, id * p.v[1].y + d / p.v[1].x);
    }
    y[i] = v;
}
