// Row-wise L2 normalisation, one workgroup per row: y = x / max(sqrt(sum x^2), eps).
// Params: [rows, cols, eps bits].

fn per_row(row: u32, base: u32, cols: u32, lid: u32) {
    var s = 0.0;
    for (var j = lid; j < cols; j = j + WG) {
        let v = x[base + j];
        s = s + v * v;
    }
    let norm = max(sqrt(workgroup_sum(s, lid)), bitcast<f32>(p.v[0].z));
    for (var j = lid; j < cols; j = j + WG) {
        y[base + j] = x[base + j] / norm;
    }
}
