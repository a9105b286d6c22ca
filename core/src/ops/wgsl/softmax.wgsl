// Softmax over rows, one workgroup per row (any number of columns, strided by WG):
// y = exp(x - max) / sum(exp(x - max)) over kept columns; dropped columns and rows with no kept
// column are 0. `keep(row, j)` comes from the binding header (always true without a mask).
// Params: [rows, cols, rows_per_mask].
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    // Inline (not a helper call) so the uniformity analysis sees a workgroup-uniform row.
    let row = wid.x + wid.y * nwg.x;
    let cols = p.v[0].y;
    if (row >= p.v[0].x) {
        return;
    }
    let base = row * cols;
    // -FLT_MAX, not -inf: a row with no kept column then sums to exactly 0.
    var m = -3.402823466e+38;
    for (var j = lid; j < cols; j = j + WG) {
        if (keep(row, j)) {
            m = max(m, x[base + j]);
        }
    }
    m = workgroup_max(m, lid);
    var s = 0.0;
    for (var j = lid; j < cols; j = j + WG) {
        if (keep(row, j)) {
            s = s + exp(x[base + j] - m);
        }
    }
    s = workgroup_sum(s, lid);
    for (var j = lid; j < cols; j = j + WG) {
        var v = 0.0;
        if (s > 0.0 && keep(row, j)) {
            v = exp(x[base + j] - m) / s;
        }
        y[base + j] = v;
    }
}
