// Layer norm over rows, one workgroup per row: two passes (mean, then population variance of
// x - mean), y = (x - mean) * (1 / sqrt(var + eps)) * gamma + beta. Params: [rows, cols, eps bits].

fn per_row(row: u32, base: u32, cols: u32, lid: u32) {
    var s = 0.0;
    for (var j = lid; j < cols; j = j + WG) {
        s = s + x[base + j];
    }
    let mean = workgroup_sum(s, lid) / f32(cols);
    var q = 0.0;
    for (var j = lid; j < cols; j = j + WG) {
        let d = x[base + j] - mean;
        q = q + d * d;
    }
    let variance = workgroup_sum(q, lid) / f32(cols);
    let rstd = 1.0 / sqrt(variance + bitcast<f32>(p.v[0].z));
    for (var j = lid; j < cols; j = j + WG) {
        y[base + j] = (x[base + j] - mean) * rstd * gamma[j] + beta[j];
    }
}
