// y[i] = alpha * x[i]. Params: [len, alpha bits].

// The element count is parameter word 0 (see element.wgsl).
const LEN_AT: u32 = 0u;

fn element(i: u32) {
    y[i] = bitcast<f32>(p.v[0].y) * x[i];
}
