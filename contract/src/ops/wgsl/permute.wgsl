// 4-D axis permutation, one invocation per output element: output axis a has extent od[a] and
// input stride s[a] (the stride of input axis perm[a]).
// Params: [len, od1, od2, od3, s0, s1, s2, s3] (od0 is implied by len).

// The element count is parameter word 0 (see element.wgsl).
const LEN_AT: u32 = 0u;

fn element(i: u32) {
    let od = p.v[0];
    let s = p.v[1];
    let i3 = i % od.w;
    let i2 = (i / od.w) % od.z;
    let i1 = (i / (od.w * od.z)) % od.y;
    let i0 = i / (od.w * od.z * od.y);
    y[i] = x[i0 * s.x + i1 * s.y + i2 * s.z + i3 * s.w];
}
