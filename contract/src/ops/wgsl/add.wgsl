// c[i] = a[i] + b[i % b_len]. Params: [len, b_len].

// The element count is parameter word 0 (see element.wgsl).
const LEN_AT: u32 = 0u;

fn element(i: u32) {
    c[i] = a[i] + b[i % p.v[0].y];
}
