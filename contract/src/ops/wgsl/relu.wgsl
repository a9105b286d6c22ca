// y[i] = x[i] < 0 ? 0 : x[i] (keeps NaN, as PyTorch). Params: [len].

// The element count is parameter word 0 (see element.wgsl).
const LEN_AT: u32 = 0u;

fn element(i: u32) {
    let v = x[i];
    y[i] = select(v, 0.0, v < 0.0);
}
