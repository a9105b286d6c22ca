//! A small residual MLP graph with deterministic weights, for checking that a model split across
//! devices computes what one device computes. Test support, not API: compiled for core's tests and
//! with the `test-support` feature (the conformance suite).

use crate::Result;
use crate::graph::{Graph, TensorId};
use crate::ops::{DType, Op};

/// The graph, its one input with data, its weights with data, and its output.
pub struct Mlp {
    /// `layers` blocks of `x + layernorm(gelu(x · Wᵀ + b))`, then a reshape to one row.
    pub graph: Graph,
    /// The input `[rows, width]`.
    pub input: TensorId,
    /// Input bytes (f32).
    pub input_data: Vec<u8>,
    /// Every weight and its bytes (f32).
    pub weights: Vec<(TensorId, Vec<u8>)>,
    /// The output `[rows · width]`.
    pub output: TensorId,
}

/// Deterministic values in `[-1, 1)` (xorshift), as f32 bytes.
fn values(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.max(1);
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        })
        .collect();
    bytemuck::cast_slice(&v).to_vec()
}

/// Builds the MLP. Each layer reads four weights (`W` `[width, width]`, `b`, `gamma`, `beta`),
/// and the residual edge makes a tensor cross any cut between layers twice over (read by the
/// matmul and by the add).
///
/// # Errors
/// Graph construction errors (sizes beyond `u32`).
pub fn mlp(layers: usize, rows: usize, width: usize, seed: u64) -> Result<Mlp> {
    let mut g = Graph::new();
    let (r, w) = (rows as u32, width as u32);
    let input = g.input("x", DType::F32, &[rows, width]);
    let mut weights = Vec::new();
    let mut x = input;
    for l in 0..layers {
        let mut weight = |g: &mut Graph, name: &str, shape: &[usize], k: u64| {
            let id = g.weight(&format!("layer{l}.{name}"), DType::F32, shape);
            let n = shape.iter().product();
            weights.push((id, values(n, seed ^ (l as u64 * 8 + k + 1))));
            id
        };
        let wt = weight(&mut g, "w", &[width, width], 0);
        let b = weight(&mut g, "b", &[width], 1);
        let gamma = weight(&mut g, "gamma", &[width], 2);
        let beta = weight(&mut g, "beta", &[width], 3);
        let h = g.op(
            Op::linear(r, w, w),
            &[x, wt, b],
            &[rows, width],
            &format!("layer{l}.linear"),
        )?;
        let h = g.op(
            Op::Gelu { len: r * w },
            &[h],
            &[rows, width],
            &format!("layer{l}.gelu"),
        )?;
        let h = g.op(
            Op::LayerNorm {
                rows: r,
                cols: w,
                eps: 1e-5,
            },
            &[h, gamma, beta],
            &[rows, width],
            &format!("layer{l}.norm"),
        )?;
        x = g.op(
            Op::Add {
                len: r * w,
                b_len: r * w,
            },
            &[x, h],
            &[rows, width],
            &format!("layer{l}.residual"),
        )?;
    }
    let output = g.reshape(x, &[rows * width])?;
    g.output(output);
    Ok(Mlp {
        graph: g,
        input,
        input_data: values(rows * width, seed),
        weights,
        output,
    })
}
