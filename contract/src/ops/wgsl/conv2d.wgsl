// NCHW cross-correlation with zero padding, one invocation per output element; sums ci, ky, kx
// in order from 0, then adds bias_at(co) (0 in the variant without a bias).
// Params: [n, c_in, h, w, c_out, kh, kw, stride, pad, has_bias, oh, ow, fmt, group, groups,
// len = n * c_out * oh * ow]; the weight is read through w_at (int8 scale of channel co, row element r:
// scales[co * groups + r / group]).
// The element count is parameter word 15 (see element.wgsl).
const LEN_AT: u32 = 15u;

fn element(i: u32) {
    let c_in = p.v[0].y;
    let h = p.v[0].z;
    let w = p.v[0].w;
    let c_out = p.v[1].x;
    let kh = p.v[1].y;
    let kw = p.v[1].z;
    let stride = p.v[1].w;
    let pad = p.v[2].x;
    let oh = p.v[2].z;
    let ow = p.v[2].w;
    let group = p.v[3].y;
    let groups = p.v[3].z;
    let inner = c_in * kh * kw;
    let ox = i % ow;
    let oy = (i / ow) % oh;
    let co = (i / (ow * oh)) % c_out;
    let b = i / (ow * oh * c_out);
    var acc = 0.0;
    for (var ci = 0u; ci < c_in; ci = ci + 1u) {
        for (var ky = 0u; ky < kh; ky = ky + 1u) {
            // Wraps below zero, which the `< h` test rejects like any row past the edge.
            let iy = oy * stride + ky - pad;
            if (iy >= h) {
                continue;
            }
            for (var kx = 0u; kx < kw; kx = kx + 1u) {
                let ix = ox * stride + kx - pad;
                if (ix >= w) {
                    continue;
                }
                let r = (ci * kh + ky) * kw + kx;
                acc = acc + x[((b * c_in + ci) * h + iy) * w + ix]
                    * w_at(co * inner + r, co * groups + r / group);
            }
        }
    }
    y[i] = acc + bias_at(co);
}
