// Op::MatMul with int8-dynamic weights (ops::quant): row i of op(A[b]) spans [lo, hi] (widened
// to hold 0) and is quantised to u = clamp(round(a * inv) + z, 0, 255), inv = 255 / (hi - lo),
// z = round(-lo * inv); each scale group g of output column j sums d_g = (u - z) * w in i32, and
// C[b][i][j] = alpha * (((hi - lo) / 255) * sum_g scale[j][g] * d_g) + bias[j], the groups added
// in order. One invocation per element of C finds its row's range itself (k extra reads of A
// per output): simple rather than fast, as this format serves CPUs (their integer dot
// products); GPUs read int8 weights as `matmul_int8` does.
// Params: matmul's (tiles unused), then the element count batch * m * n at word 14.
const LEN_AT: u32 = 14u;

// Element (row i, inner p) of op(A) in matrix `base`: A is [m, k], or [k, m] transposed.
fn a_of(base: u32, i: u32, q: u32) -> f32 {
    if (p.v[1].x != 0u) {
        return a[base + q * p.v[0].y + i];
    }
    return a[base + i * p.v[0].w + q];
}

fn element(e: u32) {
    let m = p.v[0].y;
    let n = p.v[0].z;
    let k = p.v[0].w;
    let trans_b = p.v[1].y != 0u;
    let alpha = bitcast<f32>(p.v[2].x);
    let group = p.v[2].z;
    let groups = p.v[2].w;
    let mat = e / (m * n);
    let i = e / n % m;
    let j = e % n;
    var b_mat = mat;
    if (p.v[1].z != 0u) {
        b_mat = 0u;
    }
    let a_base = mat * m * k;
    let b_base = b_mat * k * n;
    var lo = 0.0;
    var hi = 0.0;
    for (var q = 0u; q < k; q = q + 1u) {
        let v = a_of(a_base, i, q);
        lo = min(lo, v);
        hi = max(hi, v);
    }
    let span = hi - lo;
    if (!(span <= bitcast<f32>(0x7f7fffffu))) {
        // NaN, computed at run time (a NaN constant is not a valid WGSL f32): `span` is
        // infinite or NaN here. Best effort: WGSL implementations need not keep NaN.
        c[e] = span - span;
        return;
    }
    // 255 / span, then one correction with an exact residual: WGSL's division may be 2.5 ulps
    // off, and u must round the same value the host's correctly rounded division gives.
    var inv = 0.0;
    if (span > 0.0) {
        inv = 255.0 / span;
        inv = fma(fma(-span, inv, 255.0), 1.0 / span, inv);
    }
    let z = i32(round(-lo * inv));
    var acc = 0.0;
    var d = 0i;
    for (var q = 0u; q < k; q = q + 1u) {
        let u = clamp(i32(round(a_of(a_base, i, q) * inv)) + z, 0i, 255i);
        var we = b_base + q * n + j;
        if (trans_b) {
            we = b_base + j * k + q;
        }
        d = d + (u - z) * extractBits(bitcast<i32>(weight[we >> 2u]), (we & 3u) * 8u, 8u);
        if ((q + 1u) % group == 0u || q + 1u == k) {
            acc = acc + scales[(b_mat * n + j) * groups + q / group] * f32(d);
            d = 0i;
        }
    }
    c[e] = alpha * ((span / 255.0) * acc) + bias_at(j);
}
