//! The MNIST graph itself: shapes, preprocessing, the graph builder and the prediction rule. Kept
//! apart from the sample's I/O and its blocking driver (`Mnist`) so that the browser sample
//! (`tensormem-browser`) compiles this same file for wasm32 and runs the same graph.

use tensormem::{DType, Op, Result, TensorId, WeightFormat};

use crate::models::builder::{ModelBuilder, dim};

/// Image side in pixels.
pub const SIDE: usize = 28;
/// Pixels per image.
pub const PIXELS: usize = SIDE * SIDE;
/// Output classes.
pub const CLASSES: usize = 10;
/// Mean of MNIST pixels after `/255` (ccexam `constants.py`).
pub const MEAN: f32 = 0.1307;
/// Standard deviation of MNIST pixels after `/255`.
pub const STD: f32 = 0.3081;

/// ccexam's preprocessing: `(pixel / 255 − 0.1307) / 0.3081`, in f32 as torchvision computes it.
pub fn normalize(pixels: &[u8]) -> Vec<f32> {
    pixels
        .iter()
        .map(|&p| (f32::from(p) / 255.0 - MEAN) / STD)
        .collect()
}

/// The MNIST graph for a batch of `batch` images, before compilation.
pub struct MnistGraph {
    /// The graph and its declared weights.
    pub builder: ModelBuilder,
    /// Input `[batch, 1, 28, 28]`, normalised pixels.
    pub image: TensorId,
    /// Output `[batch, 10]`.
    pub logits: TensorId,
    /// Images per run.
    pub batch: usize,
}

/// Builds the MNIST graph for `batch` images, its convolution and linear weights stored in
/// `format` (biases stay f32).
///
/// # Errors
/// [`tensormem::ArgumentError::Zero`] for a zero batch,
/// [`tensormem::Error::ArithmeticOverflow`] for an oversized one; graph shape checks.
pub fn build_graph(batch: usize, format: WeightFormat) -> Result<MnistGraph> {
    let n = dim(batch)?;
    if n == 0 {
        return Err(tensormem::ArgumentError::zero("mnist: images in the batch").into());
    }
    let mut b = ModelBuilder::with_format(format);
    let image = b.graph.input("image", DType::F32, &[batch, 1, SIDE, SIDE]);
    let conv = |c_in: u32, c_out: u32, side: u32| Op::Conv2d {
        n,
        c_in,
        h: side,
        w: side,
        c_out,
        kh: 3,
        kw: 3,
        stride: 1,
        pad: 1,
        bias: true,
        // Conv2d quantises no activations: int8-dynamic convolutions read their weights as int8.
        weight_format: format.storage(),
    };
    let pool = |c: u32, side: u32| Op::MaxPool2d {
        n,
        c,
        h: side,
        w: side,
        k: 2,
        stride: 2,
    };
    let relu = |len: usize| -> Result<Op> { Ok(Op::Relu { len: dim(len)? }) };

    let mut inputs = vec![image];
    inputs.extend(b.packed_weight("features.0.weight", &[32, 1, 3, 3]));
    inputs.push(b.weight("features.0.bias", &[32]));
    let c1 = b.op(conv(1, 32, 28), &inputs, &[batch, 32, 28, 28], "conv1")?;
    let r1 = b.op(
        relu(batch * 32 * 28 * 28)?,
        &[c1],
        &[batch, 32, 28, 28],
        "relu1",
    )?;
    let p1 = b.op(pool(32, 28), &[r1], &[batch, 32, 14, 14], "pool1")?;

    let mut inputs = vec![p1];
    inputs.extend(b.packed_weight("features.3.weight", &[64, 32, 3, 3]));
    inputs.push(b.weight("features.3.bias", &[64]));
    let c2 = b.op(conv(32, 64, 14), &inputs, &[batch, 64, 14, 14], "conv2")?;
    let r2 = b.op(
        relu(batch * 64 * 14 * 14)?,
        &[c2],
        &[batch, 64, 14, 14],
        "relu2",
    )?;
    let p2 = b.op(pool(64, 14), &[r2], &[batch, 64, 7, 7], "pool2")?;

    // NCHW is already the C,H,W flatten order PyTorch's `flatten(1)` produces.
    let flat = b.graph.reshape(p2, &[batch, 64 * 7 * 7])?;
    let f1 = b.linear(flat, "classifier.0", batch, 64 * 7 * 7, 128)?;
    let r3 = b.op(relu(batch * 128)?, &[f1], &[batch, 128], "relu3")?;
    let logits = b.linear(r3, "classifier.2", batch, 128, CLASSES)?;
    b.graph.output(logits);
    Ok(MnistGraph {
        builder: b,
        image,
        logits,
        batch,
    })
}

/// Index of the largest logit (the predicted digit).
pub fn argmax(logits: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best
}
