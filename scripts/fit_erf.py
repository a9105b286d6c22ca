#!/usr/bin/env python3
"""Fits the host erf's coefficients (backend-host/src/kernels/erf.rs) and checks them in f32.

|x| < 1: erf = x + x*P(x^2)/Q(x^2); 1 <= |x| < 4: erf = 1 - exp(-x^2)*R(u)/S(u), u = |x| - 1.
Weighted least squares on the linearised rational (Sanathanan-Koerner), reweighted towards
minimax; the coefficients are rounded to f32 and erf evaluated in f32 without fused multiply-adds
(as the Rust code), then compared with Python's math.erf on every 997th float in (0, 6).
Prints the coefficients as the Rust source writes them. Needs numpy. Not part of any test.
"""
import math

import numpy as np

F = np.float32


def fit(x, target, basis_p, basis_q, relative):
    """Rational P/Q (Q's constant 1) through `target` at `x`; returns (p, q, max error)."""
    weight, q_prev = np.ones_like(x), np.ones_like(x)
    for step in range(40):
        a = np.hstack([np.vstack(basis_p).T, -np.vstack([target * b for b in basis_q[1:]]).T])
        w = (weight / q_prev)[:, None]
        coef, *_ = np.linalg.lstsq(a * w, target * w[:, 0], rcond=None)
        p, q = coef[: len(basis_p)], np.concatenate([[1.0], coef[len(basis_p):]])
        q_prev = sum(c * b for c, b in zip(q, basis_q))
        err = (sum(c * b for c, b in zip(p, basis_p)) / q_prev - target)
        err = err / target if relative else err
        if step > 15:
            weight = weight * (1 + 20 * np.abs(err) / np.abs(err).max()) ** 0.5
    return p.astype(F), q.astype(F), np.abs(err).max()


def cheb(lo, hi, n=5000):
    return lo + (hi - lo) * (1 - np.cos(np.linspace(0, math.pi, n))) / 2


def horner(c, s):
    acc = np.zeros_like(s)
    for v in c[::-1]:
        acc = (acc * s + v).astype(F)
    return acc


def main():
    x = cheb(0.0, 1.0)
    x = x[x > 1e-4]
    t = x * x
    p, q, e1 = fit(t, np.array([math.erf(v) / v - 1 for v in x]),
                   [t**i for i in range(4)], [t**i for i in range(4)], relative=False)
    x = cheb(1.0, 4.0)
    u = x - 1
    r, s, e2 = fit(u, np.array([math.erfc(v) * math.exp(v * v) for v in x]),
                   [u**i for i in range(4)], [u**i for i in range(5)], relative=True)
    print(f"fit error in f64: {e1:.3g} (|x| < 1), {e2:.3g} relative (1 <= |x| < 4)")
    xs = np.arange(F(1e-30).view(np.uint32), F(6.0).view(np.uint32), 997,
                   dtype=np.uint32).view(F)
    a = np.abs(xs)
    small = (a + (a * (horner(p, a * a) / horner(q, a * a)).astype(F))).astype(F)
    at = np.minimum(a, F(4.0))
    erfc = (np.exp(-(at * at).astype(F)).astype(F)
            * (horner(r, (at - 1).astype(F)) / horner(s, (at - 1).astype(F))).astype(F))
    got = np.where(a < 1, small, (F(1) - erfc).astype(F)).astype(np.float64)
    want = np.array([math.erf(float(v)) for v in xs])
    ulps = np.abs(got - want) / np.spacing(want.astype(F)).astype(np.float64)
    print(f"f32 error: max {ulps.max():.3f} ulp at {xs[ulps.argmax()]}, mean {ulps.mean():.3f}")
    for name, c in (("P", p), ("Q", q[1:]), ("R", r), ("S", s[1:])):
        print(name, ", ".join(f"0x{v.view(np.uint32):08x}" for v in c))


if __name__ == "__main__":
    main()
