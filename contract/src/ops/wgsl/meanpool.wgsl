// Masked mean over the sequence axis, one invocation per output element (the reduction runs
// over a strided axis, so a per-row workgroup would gain nothing):
// y[b, d] = sum_s mask[b, s] * x[b, s, d] / max(sum_s mask[b, s], 1e-9), s in order.
// Params: [batch, seq, dim, len = batch * dim].

// The element count is parameter word 3 (see element.wgsl).
const LEN_AT: u32 = 3u;

fn element(i: u32) {
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
