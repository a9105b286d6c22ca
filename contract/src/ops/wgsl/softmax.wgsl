// Softmax over rows, one workgroup per row (any number of columns, strided by WG):
// y = exp(x - max) / sum(exp(x - max)) over kept columns; dropped columns and rows with no kept
// column are 0. `keep(row, j)` comes from `softmax_all.wgsl` (always true) or
// `softmax_masked.wgsl`.
// Params: [rows, cols, rows_per_mask].
fn per_row(row: u32, base: u32, cols: u32, lid: u32) {
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
