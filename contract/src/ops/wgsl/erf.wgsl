// Single-precision erf: the same formulas and coefficients as the host reference
// (`backend-host/src/kernels/erf.rs`, whose doc says how they were fitted). Literals are the
// host's f32 values printed with 9 significant digits, which round back to the same bits.
// |x| < 1: x + x·P(x²)/Q(x²); 1 ≤ |x| < 4: 1 − e^(−x²)·R(u)/S(u), u = |x| − 1; then 1.
fn erf_f32(x: f32) -> f32 {
    let bits = bitcast<u32>(x);
    let ix = bits & 0x7fffffffu;
    if (ix > 0x7f800000u) {
        return x; // NaN
    }
    if (ix < 0x3f800000u) {
        // |x| < 1
        if (ix < 0x31800000u) {
            // |x| < 2^-28
            return 0.125 * (8.0 * x + 1.027033329e+00 * x);
        }
        let z = x * x;
        let p = 1.283791661e-01 + z * (-3.204038441e-01 + z * (-4.085778072e-02 + z * (-5.229074042e-03)));
        let q = 1.0 + z * (4.340467155e-01 + z * (7.447212189e-02 + z * (5.230226554e-03)));
        return x + x * (p / q);
    }
    let a = min(abs(x), 4.0);
    let u = a - 1.0;
    let r = 4.275835752e-01 + u * (3.879409134e-01 + u * (1.369546205e-01 + u * (1.828349754e-02)));
    let s = 1.0 + u * (1.546254277e+00 + u * (9.472733736e-01 + u * (2.750760913e-01 + u * (3.241060674e-02))));
    let y = 1.0 - exp(-(a * a)) * (r / s);
    return select(y, -y, (bits >> 31u) != 0u);
}
