//! Host (CPU) implementations of the standard ops: the numerical reference.
//!
//! Every backend is checked against [`run`], and the host backend executes models with it (it is
//! the embedded default on a machine without a GPU), so it must be both plainly right and fast:
//! [`Op::MatMul`] and [`Op::Conv2d`] (almost all of a model's time) go to a dot-product kernel or
//! a packed SIMD GEMM (see `matmul`), and every op with enough work spreads
//! it over all cores with rayon, in chunks of whole rows that never change how an element is
//! computed.
//!
//! Numerics follow PyTorch's CPU kernels in f32: the same formulas in the same order where it
//! matters (GELU is `x·0.5·(1 + erf(x/√2))` with a ~1 ulp `erf`; layer norm uses population
//! variance and `1/√(var + eps)`; softmax subtracts the row maximum). Row reductions sum in index
//! order in f64 (see `rows`); products use `sgemm`'s blocked f32 sums, a few ulps of `Σ|a·b|`
//! from the naive loop. Results do not depend on the thread count. A GPU's tree reductions and
//! `exp` round differently, so the conformance suite compares with a tolerance (1e-5 relative
//! covers every kernel in `ops::wgsl`).
//!
//! Operands are raw byte slices, as backends hold them: they may be unaligned (they are copied to
//! aligned vectors then) and are checked against [`Op::check_binding_sizes`] first, so bad input
//! is an [`Error`], never a panic.
//!
//! Submodules: `matmul` (threaded `sgemm`), `rows` (row-wise softmax, norms, pooling), `spatial`
//! (conv2d as im2col + matmul, maxpool, permute), `erf`.

use std::borrow::Cow;

use rayon::prelude::*;

use crate::ops::quant::WeightView;
use crate::ops::{Op, WeightFormat};
use crate::{Error, Result};

pub(crate) mod erf;
mod llm;
mod matmul;
mod rows;
mod spatial;
#[cfg(test)]
mod tests;

pub use erf::{erf, gelu};

/// Runs `op` on the CPU: reads `inputs`, writes every element of `outputs` (or, for an op that
/// [updates its output](Op::updates_output), the elements it addresses).
///
/// Operands are little-endian element bytes in [`Op::signature`] order; they need no alignment.
/// Inputs and outputs cannot alias (Rust's borrows guarantee it), so no op runs in place.
///
/// # Errors
/// As [`Op::check_binding_sizes`]: [`crate::ArgumentError`] for bad op parameters,
/// [`Error::BindingCount`], [`Error::BindingSize`] naming the operand whose byte length is wrong.
pub fn run(op: &Op, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<()> {
    let sig = op.check_binding_count(inputs.len(), outputs.len())?;
    let sizes: Vec<u64> = inputs
        .iter()
        .map(|b| b.len() as u64)
        .chain(outputs.iter().map(|b| b.len() as u64))
        .collect();
    op.check_binding_sizes(&sizes)?;
    let [out] = outputs else {
        return Err(Error::invariant(
            "every op has one output; the signature check above enforced the count",
            format!("{}: {} outputs", op.name(), outputs.len()),
        ));
    };
    let x = |i: usize| f32s(inputs[i]);
    match *op {
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
            weight_format,
        } => {
            let shape = matmul::Shape {
                batch: batch as usize,
                m: m as usize,
                n: n as usize,
                k: k as usize,
                trans_a,
                trans_b,
                broadcast_b,
            };
            let a = x(0);
            let extra = usize::from(weight_format.has_scales());
            let bias = bias.then(|| x(2 + extra));
            let bias = bias.as_deref();
            if weight_format == WeightFormat::F32 {
                let b = x(1);
                write_f32(out, |c| matmul::matmul(&shape, &a, &b, bias, alpha, c))?;
            } else {
                // `b`'s channel is its output column: `b_batch · n` channels of `k`.
                let b_len = sig.inputs[1].len;
                let scales = scales(inputs, 1, weight_format);
                let k = u64::from(k);
                let b = WeightView::new(inputs[1], &scales, b_len, b_len / k, k, weight_format)?;
                match (weight_format, b.int8()) {
                    (WeightFormat::Int8Dynamic { .. }, Some(w)) => write_f32(out, |c| {
                        matmul::matmul_dynamic(&shape, &a, &w, bias, alpha, c)
                    })?,
                    _ => write_f32(out, |c| {
                        matmul::matmul_stored(&shape, &a, &b, bias, alpha, c)
                    })?,
                }
            }
        }
        Op::Add { b_len, .. } => binary(inputs, out, b_len, LIGHT_GRAIN, |a, b| a + b),
        Op::Mul { b_len, .. } => binary(inputs, out, b_len, LIGHT_GRAIN, |a, b| a * b),
        Op::Scale { alpha, .. } => unary(inputs, out, |v| alpha * v),
        Op::Gelu { .. } => unary_slices(inputs, out, erf::gelu_slice),
        // `v < 0 → 0` keeps NaN, as PyTorch's relu does.
        Op::Relu { .. } => unary(inputs, out, |v| if v < 0.0 { 0.0 } else { v }),
        Op::LayerNorm { cols, eps, .. } => {
            let (xs, gamma, beta) = (x(0), x(1), x(2));
            let cols = cols as usize;
            write_f32(out, |y| {
                par_rows(y, cols, HEAVY_GRAIN, |row0, y| {
                    let x = &xs[row0 * cols..row0 * cols + y.len()];
                    rows::layer_norm(x, &gamma, &beta, cols, eps, y);
                });
            });
        }
        Op::Softmax {
            cols,
            masked,
            rows_per_mask,
            ..
        } => {
            let xs = x(0);
            let mask = masked.then(|| x(1));
            let mask = mask.as_deref().map(|m| (m, rows_per_mask as usize));
            let cols = cols as usize;
            write_f32(out, |y| {
                par_rows(y, cols, HEAVY_GRAIN, |row0, y| {
                    let x = &xs[row0 * cols..row0 * cols + y.len()];
                    rows::softmax(x, row0, mask, cols, y);
                });
            });
        }
        Op::Embedding {
            vocab,
            dim,
            weight_format,
            ..
        } => {
            let ids = u32s(inputs[1 + usize::from(weight_format.has_scales())]);
            let scales = scales(inputs, 0, weight_format);
            let (len, dim64) = (u64::from(vocab) * u64::from(dim), u64::from(dim));
            let table = WeightView::new(
                inputs[0],
                &scales,
                len,
                u64::from(vocab),
                dim64,
                weight_format,
            )?;
            write_f32(out, |y| embedding(&table, &ids, vocab, dim as usize, y));
        }
        Op::MeanPool { seq, dim, .. } => {
            let (xs, mask) = (x(0), x(1));
            write_f32(out, |y| {
                rows::mean_pool(&xs, &mask, seq as usize, dim as usize, y);
            });
        }
        Op::L2Normalize { cols, eps, .. } => {
            let xs = x(0);
            let cols = cols as usize;
            write_f32(out, |y| {
                par_rows(y, cols, HEAVY_GRAIN, |row0, y| {
                    let x = &xs[row0 * cols..row0 * cols + y.len()];
                    rows::l2_normalize(x, cols, eps, y);
                });
            });
        }
        Op::Conv2d {
            bias,
            weight_format,
            c_out,
            ..
        } => {
            let xs = x(0);
            let len = sig.inputs[1].len;
            let inner = len / u64::from(c_out);
            let weight = conv_weight(inputs, weight_format, len, u64::from(c_out), inner)?;
            let bias = bias.then(|| x(2 + usize::from(weight_format.has_scales())));
            let (oh, ow) = op.conv_out()?;
            write_f32(out, |y| {
                spatial::conv2d(op, (oh, ow), &xs, &weight, bias.as_deref(), y)
            })?;
        }
        Op::MaxPool2d { .. } => {
            let xs = x(0);
            let (oh, ow) = op.conv_out()?;
            write_f32(out, |y| spatial::max_pool2d(op, (oh, ow), &xs, y));
        }
        Op::Permute { dims, perm } => {
            let xs = x(0);
            write_f32(out, |y| spatial::permute(dims, perm, &xs, y));
        }
        Op::Copy { .. } => out.copy_from_slice(inputs[0]),
        Op::RmsNorm { cols, eps, .. } => {
            let (xs, weight) = (x(0), x(1));
            let cols = cols as usize;
            write_f32(out, |y| {
                par_rows(y, cols, HEAVY_GRAIN, |row0, y| {
                    let x = &xs[row0 * cols..row0 * cols + y.len()];
                    llm::rms_norm(x, &weight, cols, eps, y);
                });
            });
        }
        Op::Rope { .. } => {
            let (xs, positions) = (x(0), u32s(inputs[1]));
            write_f32(out, |y| llm::rope(op, &xs, &positions, y));
        }
        Op::SiluMul { .. } => {
            let len = sig.inputs[0].len as u32;
            binary(inputs, out, len, HEAVY_GRAIN, |g, u| llm::silu(g) * u)
        }
        Op::KvWrite { .. } => {
            let (k, v, slots) = (x(0), x(1), u32s(inputs[2]));
            llm::kv_write(op, &k, &v, &slots, out);
        }
        Op::PagedAttention { carry_in, .. } => {
            let (q, tables, meta) = (x(0), u32s(inputs[2]), u32s(inputs[3]));
            let carry = carry_in.then(|| x(4));
            let paged = llm::Paged {
                q: &q,
                segment: inputs[1],
                tables: &tables,
                meta: &meta,
                carry: carry.as_deref(),
            };
            write_f32(out, |y| llm::paged_attention(op, &paged, y));
        }
    }
    Ok(())
}

/// The scales operand of a weight stored with scales (the input after the weight, `weight + 1`);
/// empty otherwise.
fn scales<'a>(inputs: &[&'a [u8]], weight: usize, format: WeightFormat) -> Cow<'a, [f32]> {
    if format.has_scales() {
        f32s(inputs[weight + 1])
    } else {
        Cow::Borrowed(&[][..])
    }
}

/// Input 1, a conv weight of `len` elements (`channels` rows of `inner`) stored in `format`, as
/// f32: borrowed when it is aligned f32, else dequantised whole, row by row. Unlike a matmul
/// weight, a conv weight is reused at every output position (`oh·ow` times per image), so decoding
/// it once per op costs a negligible share of the convolution.
///
/// # Errors
/// [`Error::SizeMismatch`] from [`WeightView::new`] (bindings were checked already).
fn conv_weight<'a>(
    inputs: &[&'a [u8]],
    format: WeightFormat,
    len: u64,
    channels: u64,
    inner: u64,
) -> Result<Cow<'a, [f32]>> {
    if format == WeightFormat::F32 {
        return Ok(f32s(inputs[1]));
    }
    let scales = scales(inputs, 1, format);
    let view = WeightView::new(inputs[1], &scales, len, channels, inner, format)?;
    let inner = inner as usize;
    let mut out = vec![0f32; len as usize];
    par_rows(&mut out, inner, LIGHT_GRAIN, |row0, rows| {
        for (r, row) in rows.chunks_exact_mut(inner).enumerate() {
            view.row_run((row0 + r) * inner, row0 + r, 0, row);
        }
    });
    Ok(Cow::Owned(out))
}

/// Borrows `bytes` as 4-byte elements when aligned, else copies them into an aligned vector.
fn words<T: bytemuck::Pod>(bytes: &[u8]) -> Cow<'_, [T]> {
    match bytemuck::try_cast_slice(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => Cow::Owned(
            bytes
                .chunks_exact(4)
                .map(bytemuck::pod_read_unaligned)
                .collect(),
        ),
    }
}

/// `bytes` as f32 ([`words`]).
fn f32s(bytes: &[u8]) -> Cow<'_, [f32]> {
    words(bytes)
}

/// `bytes` as u32 operands, token ids ([`words`]).
fn u32s(bytes: &[u8]) -> Cow<'_, [u32]> {
    words(bytes)
}

/// Lets `f` fill `out` as f32: in place when aligned, else through an aligned vector.
fn write_f32<R>(out: &mut [u8], f: impl FnOnce(&mut [f32]) -> R) -> R {
    match bytemuck::try_cast_slice_mut::<u8, f32>(out) {
        Ok(y) => f(y),
        Err(_) => {
            let mut y = vec![0f32; out.len() / 4];
            let r = f(&mut y);
            out.copy_from_slice(bytemuck::cast_slice(&y));
            r
        }
    }
}

/// The smallest chunk, in elements, one pool task of an element-wise or row op gets: about 5–20
/// µs of work, enough to pay for the hand-off to a pool thread (a spinning one takes it within a
/// microsecond or two; `host::queue::warm`). An op with fewer than two chunks' worth of elements
/// runs on the calling thread. A few instructions per element (add, scale, relu):
const LIGHT_GRAIN: usize = 1 << 15;

/// As [`LIGHT_GRAIN`] for ops of tens of instructions per element: GELU's rationals and `exp`,
/// a normalisation's or softmax's passes over each row.
const HEAVY_GRAIN: usize = 1 << 12;

/// Runs `f(first_row, chunk)` over `y` cut into chunks of whole rows of `cols`: in parallel, in
/// chunks of at least `grain` elements, when `y` holds two chunks or more. Each row is computed
/// by the same code whatever the chunking, so results do not depend on the thread count.
fn par_rows(y: &mut [f32], cols: usize, grain: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    if cols == 0 || y.is_empty() {
        return;
    }
    if y.len() < 2 * grain {
        f(0, y);
        return;
    }
    let rows_per_chunk = grain.div_ceil(cols);
    y.par_chunks_mut(rows_per_chunk * cols)
        .enumerate()
        .for_each(|(i, chunk)| f(i * rows_per_chunk, chunk));
}

/// `y[i] = f(x[i])` over input 0.
fn unary(inputs: &[&[u8]], out: &mut [u8], f: impl Fn(f32) -> f32 + Sync) {
    let x = f32s(inputs[0]);
    write_f32(out, |y| {
        par_rows(y, 1, LIGHT_GRAIN, |i0, y| {
            for (y, &x) in y.iter_mut().zip(&x[i0..]) {
                *y = f(x);
            }
        });
    });
}

/// `y = f(x)` over input 0, `f` taking a slice at a time (a vectorised kernel of
/// [`HEAVY_GRAIN`]'s cost).
fn unary_slices(inputs: &[&[u8]], out: &mut [u8], f: impl Fn(&[f32], &mut [f32]) + Sync) {
    let x = f32s(inputs[0]);
    write_f32(out, |y| par_rows(y, 1, HEAVY_GRAIN, |i0, y| f(&x[i0..], y)));
}

/// `c[i] = f(a[i], b[i % b_len])` over inputs 0 and 1, in parallel chunks of at least `grain`
/// elements (whole repeats of `b` when it is shorter than `a`).
fn binary(
    inputs: &[&[u8]],
    out: &mut [u8],
    b_len: u32,
    grain: usize,
    f: impl Fn(f32, f32) -> f32 + Sync,
) {
    let (a, b) = (f32s(inputs[0]), f32s(inputs[1]));
    let b_len = b_len as usize;
    write_f32(out, |c| {
        if b_len >= c.len() {
            // `b` as long as `a` (a residual add, a gate): any cut of `c` lines up with `b`, so
            // the op splits by elements rather than running as one row.
            par_rows(c, 1, grain, |i0, c| {
                for ((c, &a), &b) in c.iter_mut().zip(&a[i0..]).zip(&b[i0..]) {
                    *c = f(a, b);
                }
            });
            return;
        }
        par_rows(c, b_len, grain, |row0, c| {
            let a = &a[row0 * b_len..];
            for (c, a) in c.chunks_exact_mut(b_len).zip(a.chunks_exact(b_len)) {
                for ((c, &a), &b) in c.iter_mut().zip(a).zip(b.iter()) {
                    *c = f(a, b);
                }
            }
        });
    });
}

/// Row gather, dequantising only the rows read; an id `>= vocab` gives a row of zeros.
fn embedding(table: &WeightView<'_>, ids: &[u32], vocab: u32, dim: usize, y: &mut [f32]) {
    for (row, &id) in y.chunks_exact_mut(dim).zip(ids) {
        if id < vocab {
            table.row_run(id as usize * dim, id as usize, 0, row);
        } else {
            row.fill(0.0);
        }
    }
}
