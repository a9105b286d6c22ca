// Single-precision erf: FreeBSD's s_erff.c, the same algorithm and coefficients as the host
// reference (`ops/host/erf.rs`, which carries the original's notice: Copyright (C) 1993 by Sun
// Microsystems, Inc.; permission to use, copy, modify, and distribute this software is freely
// granted, provided that this notice is preserved). Literals are the original's f32 values
// printed with 9 significant digits, which round back to the same bits.
// erf(1) rounded to f32, typed so `1.0 - ERX` is evaluated in f32 (exactly) as on the host.
const ERX: f32 = 8.450629115e-01;

fn erf_f32(x: f32) -> f32 {
    let bits = bitcast<u32>(x);
    let ix = bits & 0x7fffffffu;
    if (ix > 0x7f800000u) {
        return x; // NaN
    }
    let a = abs(x);
    var y: f32;
    if (ix < 0x3f580000u) {
        // |x| < 0.84375
        if (ix < 0x31800000u) {
            // |x| < 2^-28
            return 0.125 * (8.0 * x + 1.027033329e+00 * x);
        }
        let z = x * x;
        let r = 1.283791661e-01 + z * (-3.250420988e-01 + z * (-2.848174982e-02 + z * (-5.770270247e-03 + z * (-2.376301745e-05))));
        let s = 1.0 + z * (3.979172111e-01 + z * (6.502225250e-02 + z * (5.081306212e-03 + z * (1.324947370e-04 + z * (-3.960228241e-06)))));
        return x + x * (r / s);
    } else if (ix < 0x3fa00000u) {
        // |x| < 1.25
        let s = a - 1.0;
        let pa = -2.362118568e-03 + s * (4.148561060e-01 + s * (-3.722078800e-01 + s * (3.183466196e-01 + s * (-1.108946949e-01 + s * (3.547830507e-02 + s * (-2.166375518e-03))))));
        let qa = 1.0 + s * (1.064208820e-01 + s * (5.403979421e-01 + s * (7.182865590e-02 + s * (1.261712164e-01 + s * (1.363708358e-02 + s * (1.198450010e-02))))));
        let erfc = 1.0 - ERX - pa / qa;
        y = 1.0 - erfc;
    } else if (ix < 0x40c00000u) {
        // |x| < 6
        let s = 1.0 / (a * a);
        var r: f32;
        var big_s: f32;
        if (ix < 0x4036db6du) {
            // |x| < 1/0.35
            r = -9.864944033e-03 + s * (-6.938585639e-01 + s * (-1.055862617e+01 + s * (-6.237533188e+01 + s * (-1.623966675e+02 + s * (-1.846050873e+02 + s * (-8.128743744e+01 + s * (-9.814329147e+00)))))));
            big_s = 1.0 + s * (1.965127182e+01 + s * (1.376577606e+02 + s * (4.345658875e+02 + s * (6.453872681e+02 + s * (4.290081482e+02 + s * (1.086350021e+02 + s * (6.570249557e+00 + s * (-6.042441353e-02))))))));
        } else {
            r = -9.864943102e-03 + s * (-7.992832661e-01 + s * (-1.775795555e+01 + s * (-1.606363831e+02 + s * (-6.375664673e+02 + s * (-1.025095093e+03 + s * (-4.835191956e+02))))));
            big_s = 1.0 + s * (3.033806038e+01 + s * (3.257925110e+02 + s * (1.536729614e+03 + s * (3.199858154e+03 + s * (2.553050293e+03 + s * (4.745285339e+02 + s * (-2.244095230e+01)))))));
        }
        // z is |x| with its 13 low bits cleared, so exp's argument keeps x²'s low bits.
        let z = bitcast<f32>(bitcast<u32>(a) & 0xffffe000u);
        let erfc = exp(-z * z - 0.5625) * exp((z - a) * (z + a) + r / big_s) / a;
        y = 1.0 - erfc;
    } else {
        y = 1.0;
    }
    return select(y, -y, (bits >> 31u) != 0u);
}
