//! Shorthand for the shaped ops: constructors of the f32 [`Op::MatMul`], [`Op::Conv2d`] and
//! [`Op::MaxPool2d`] that take the shape as tuples, and a convolution's integer fields as one
//! array. Kernels, op lists and tests build and read these ops through them, so a shape is
//! spelled on one line and its fields are listed once, in declaration order.

use crate::ops::{Op, WeightFormat};

impl Op {
    /// An [`Op::MatMul`] of shape `(batch, m, n, k)` with an f32 weight, the other fields in the
    /// variant's order.
    pub fn matmul(
        (batch, m, n, k): (u32, u32, u32, u32),
        trans_a: bool,
        trans_b: bool,
        broadcast_b: bool,
        bias: bool,
        alpha: f32,
    ) -> Op {
        Op::MatMul {
            batch,
            m,
            n,
            k,
            trans_a,
            trans_b,
            broadcast_b,
            bias,
            alpha,
            weight_format: WeightFormat::F32,
        }
    }

    /// An [`Op::Conv2d`] over an `(n, c_in, h, w)` input with `c_out` filters of `(kh, kw)` and
    /// an f32 weight, the other fields in the variant's order.
    pub fn conv2d(
        (n, c_in, h, w): (u32, u32, u32, u32),
        c_out: u32,
        (kh, kw): (u32, u32),
        stride: u32,
        pad: u32,
        bias: bool,
    ) -> Op {
        Op::Conv2d {
            n,
            c_in,
            h,
            w,
            c_out,
            kh,
            kw,
            stride,
            pad,
            bias,
            weight_format: WeightFormat::F32,
        }
    }

    /// An [`Op::MaxPool2d`] over an `(n, c, h, w)` input with a `k × k` window.
    pub fn max_pool2d((n, c, h, w): (u32, u32, u32, u32), k: u32, stride: u32) -> Op {
        Op::MaxPool2d {
            n,
            c,
            h,
            w,
            k,
            stride,
        }
    }

    /// The integer fields of an [`Op::Conv2d`] in declaration order,
    /// `[n, c_in, h, w, c_out, kh, kw, stride, pad]`; `None` for every other op.
    pub fn conv2d_dims(&self) -> Option<[u32; 9]> {
        match *self {
            Op::Conv2d {
                n,
                c_in,
                h,
                w,
                c_out,
                kh,
                kw,
                stride,
                pad,
                ..
            } => Some([n, c_in, h, w, c_out, kh, kw, stride, pad]),
            _ => None,
        }
    }
}
