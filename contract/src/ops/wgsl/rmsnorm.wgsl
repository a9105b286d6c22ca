// RMS norm over rows, one workgroup per row: y = weight * (x * (1 / sqrt(mean(x^2) + eps))).
// Params: [rows, cols, eps bits].

fn per_row(row: u32, base: u32, cols: u32, lid: u32) {
    var s = 0.0;
    for (var j = lid; j < cols; j = j + WG) {
        let v = x[base + j];
        s = s + v * v;
    }
    let ms = workgroup_sum(s, lid) / f32(cols);
    let r = 1.0 / sqrt(ms + bitcast<f32>(p.v[0].z));
    for (var j = lid; j < cols; j = j + WG) {
        y[base + j] = weight[j] * (x[base + j] * r);
    }
}
