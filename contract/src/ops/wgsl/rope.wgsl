// Rotate-half rotary embedding, one invocation per element of y [tokens, heads * head_dim].
// Params: [tokens, heads, head_dim, theta bits, len, r_hi bits, r_lo bits, 0], where
// r = theta^(-2 / head_dim)
// as an f32 pair (hi + lo, from f64).
//
// The angle must be the host's f32 `position * inv_freq` bit for bit: at position 4096 one ulp of
// inv_freq moves the angle by ~5e-4. So inv_freq(i) = r^i is computed in double-f32 arithmetic
// (~1e-12 relative, then rounded to f32, as the host rounds its f64 value), and sin/cos reduce the
// angle by pi/2 in five exact parts (Cody-Waite, exact for |angle| < 2^17) before cephes'
// polynomials (~1 ulp on [-pi/4, pi/4]). Both depend on the order of their f32 operations, which
// a driver may reassociate (they are not marked exact); `fixed` pins the intermediate results.

// x itself, through a zero the compiler cannot see (params word 7), so that no algebraic rewrite
// crosses it.
fn fixed(x: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(x) ^ p.v[1].w);
}

// a = hi + lo with hi the top 12 significant bits (a mask, immune to contraction), so every
// partial product below is exact in f32.
fn split12(a: f32) -> vec2<f32> {
    let h = bitcast<f32>(bitcast<u32>(a) & 0xfffff000u);
    return vec2<f32>(h, fixed(a - h));
}

// (p, e) with p = fl(a * b) and p + e = a * b exactly (Dekker).
fn two_prod(a: f32, b: f32) -> vec2<f32> {
    let prod = fixed(a * b);
    let sa = split12(a);
    let sb = split12(b);
    let e1 = fixed(sa.x * sb.x - prod);
    let e2 = fixed(e1 + sa.x * sb.y);
    let e3 = fixed(e2 + sa.y * sb.x);
    return vec2<f32>(prod, fixed(e3 + sa.y * sb.y));
}

// Product of two double-f32 numbers (hi, lo), renormalised.
fn dd_mul(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
    let pr = two_prod(a.x, b.x);
    let e = fixed(pr.y + fixed(a.x * b.y + a.y * b.x));
    let s = fixed(pr.x + e);
    return vec2<f32>(s, fixed(e - fixed(s - pr.x)));
}

// r^n by binary exponentiation in double-f32, rounded to f32.
fn dd_pow(r: vec2<f32>, n: u32) -> f32 {
    var acc = vec2<f32>(1.0, 0.0);
    var b = r;
    var k = n;
    loop {
        if (k == 0u) {
            break;
        }
        if ((k & 1u) == 1u) {
            acc = dd_mul(acc, b);
        }
        b = dd_mul(b, b);
        k = k >> 1u;
    }
    return acc.x;
}

// (sin a, cos a).
fn sin_cos(a: f32) -> vec2<f32> {
    let kf = floor(a * 0.63661977236758134 + 0.5);
    var r = fixed(a - kf * 1.578125);
    r = fixed(r - kf * -0.00732421875);
    r = fixed(r - kf * -4.470348358154297e-06);
    r = fixed(r - kf * 1.5832483768463135e-08);
    r = fixed(r - kf * 6.07710062827671e-11);
    let z = r * r;
    let s = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
    let c = ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z
        - 0.5 * z + 1.0;
    let q = bitcast<u32>(i32(kf)) & 3u;
    if (q == 0u) {
        return vec2<f32>(s, c);
    }
    if (q == 1u) {
        return vec2<f32>(c, -s);
    }
    if (q == 2u) {
        return vec2<f32>(-s, -c);
    }
    return vec2<f32>(-c, s);
}

// The element count is parameter word 4 (see element.wgsl).
const LEN_AT: u32 = 4u;

fn element(i: u32) {
    let d = p.v[0].z;
    let half = d / 2u;
    let t = i / (p.v[0].y * d);
    let j = i % d;
    let f = j % half;
    let inv_freq = dd_pow(vec2<f32>(bitcast<f32>(p.v[1].y), bitcast<f32>(p.v[1].z)), f);
    let sc = sin_cos(f32(positions[t]) * inv_freq);
    if (j < half) {
        y[i] = x[i] * sc.y - x[i + half] * sc.x;
    } else {
        y[i] = x[i] * sc.y + x[i - half] * sc.x;
    }
}
