// NCHW max pooling without padding, one invocation per output element.
// Params: [n, c, h, w, k, stride, oh, ow, len = n * c * oh * ow].

// The element count is parameter word 8 (see element.wgsl).
const LEN_AT: u32 = 8u;

fn element(i: u32) {
    let h = p.v[0].z;
    let w = p.v[0].w;
    let k = p.v[1].x;
    let stride = p.v[1].y;
    let oh = p.v[1].z;
    let ow = p.v[1].w;
    let ox = i % ow;
    let oy = (i / ow) % oh;
    let plane = i / (ow * oh);
    let base = plane * h * w + oy * stride * w + ox * stride;
    var best = x[base];
    for (var ky = 0u; ky < k; ky = ky + 1u) {
        for (var kx = 0u; kx < k; kx = kx + 1u) {
            let v = x[base + ky * w + kx];
            if (v > best) {
                best = v;
            }
        }
    }
    y[i] = best;
}
