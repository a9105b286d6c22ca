//! A graph under construction plus the file names of its weights.
//!
//! Both samples declare weights under the names the safetensors file uses, build their ops on top,
//! and later upload every declared weight from the file into the compiled model. Keeping the
//! (tensor, name, shape) list next to the graph makes "every weight the graph reads was uploaded,
//! with the shape the graph expects" a property of one function ([`ModelBuilder::upload_weights`])
//! instead of a list to keep in sync by hand.

use tensormem::{DType, Graph, Model, Op, Result, TensorId, WeightFormat};

use super::weights::{SCALE_SUFFIX, WeightFile, channels_inner};

/// One weight the graph declared.
#[derive(Clone, Debug)]
pub struct WeightSlot {
    /// The graph's tensor.
    pub id: TensorId,
    /// Name in the weight file.
    pub name: String,
    /// Shape, as in the weight file.
    pub shape: Vec<usize>,
    /// How the graph stores it.
    pub format: WeightFormat,
    /// The tensor of its int8 scales (`{name}.scale`).
    pub scales: Option<TensorId>,
}

/// A [`Graph`] and the weights it declared.
pub struct ModelBuilder {
    /// The graph being built.
    pub graph: Graph,
    /// Declared weights, in declaration order.
    pub weights: Vec<WeightSlot>,
    /// Format of the weights of matmuls, convolutions and embeddings ([`ModelBuilder::packed_weight`]);
    /// biases and norms stay f32 (they are small, and LayerNorm's eps of 1e-12 is below f16's range).
    pub format: WeightFormat,
}

impl Default for ModelBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl ModelBuilder {
    /// An empty graph.
    pub fn new() -> Self {
        Self::with_format(WeightFormat::F32)
    }

    /// An empty graph whose packed weights are stored in `format`.
    pub fn with_format(format: WeightFormat) -> Self {
        ModelBuilder {
            graph: Graph::new(),
            weights: Vec::new(),
            format,
        }
    }

    /// Declares the f32 weight `name` of `shape` (uploaded later by [`ModelBuilder::upload_weights`]).
    pub fn weight(&mut self, name: &str, shape: &[usize]) -> TensorId {
        let id = self.graph.weight(name, DType::F32, shape);
        self.weights.push(WeightSlot {
            id,
            name: name.to_string(),
            shape: shape.to_vec(),
            format: WeightFormat::F32,
            scales: None,
        });
        id
    }

    /// Declares the weight `name` of `shape` that an op reads in [`ModelBuilder::format`]: its
    /// tensor, then (int8) its scales `{name}.scale` `[shape[0], groups]`. Returns the tensors
    /// in binding order, to pass right after the op's preceding inputs.
    pub fn packed_weight(&mut self, name: &str, shape: &[usize]) -> Vec<TensorId> {
        let format = self.format;
        let id = self.graph.weight(name, format.dtype(), shape);
        let scales = format.has_scales().then(|| {
            let (channels, inner) = channels_inner(shape);
            let (_, groups) = format.groups(inner.max(1));
            self.graph.weight(
                &format!("{name}{SCALE_SUFFIX}"),
                DType::F32,
                &[channels as usize, groups as usize],
            )
        });
        self.weights.push(WeightSlot {
            id,
            name: name.to_string(),
            shape: shape.to_vec(),
            format,
            scales,
        });
        std::iter::once(id).chain(scales).collect()
    }

    /// Adds `op` over `inputs`, producing a tensor of `shape` labelled `label`.
    ///
    /// # Errors
    /// The graph's checks of the operands against [`Op::signature`].
    pub fn op(
        &mut self,
        op: Op,
        inputs: &[TensorId],
        shape: &[usize],
        label: &str,
    ) -> Result<TensorId> {
        self.graph.op(op, inputs, shape, label)
    }

    /// A PyTorch `Linear` over `rows` rows: `y = x·Wᵀ + b` with the weights `{prefix}.weight`
    /// `[out, in]` and `{prefix}.bias` `[out]`. Returns `[rows, out]`.
    ///
    /// # Errors
    /// As [`ModelBuilder::op`]; [`tensormem::Error::ArithmeticOverflow`] when a dimension exceeds
    /// `u32`.
    pub fn linear(
        &mut self,
        x: TensorId,
        prefix: &str,
        rows: usize,
        inp: usize,
        out: usize,
    ) -> Result<TensorId> {
        let mut inputs = vec![x];
        inputs.extend(self.packed_weight(&format!("{prefix}.weight"), &[out, inp]));
        inputs.push(self.weight(&format!("{prefix}.bias"), &[out]));
        let op = Op::linear(dim(rows)?, dim(out)?, dim(inp)?).with_weight_format(self.format);
        self.op(op, &inputs, &[rows, out], prefix)
    }

    /// Uploads every declared weight from `file` into `model` (compiled from this builder's
    /// graph), checking each one's shape against the declaration. A weight stored in the file in
    /// another format than the graph reads is converted on the way (quantised at load).
    ///
    /// # Errors
    /// [`tensormem::Error::Malformed`] for a weight missing from the file,
    /// [`tensormem::Error::SizeMismatch`] for one whose shape differs, and upload errors.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn upload_weights(&self, model: &mut Model, file: &WeightFile) -> Result<()> {
        for slot in &self.weights {
            file.upload(
                model,
                &slot.name,
                &slot.shape,
                slot.format,
                (slot.id, slot.scales),
            )?;
        }
        Ok(())
    }
}

/// `v` as an op dimension.
///
/// # Errors
/// [`tensormem::Error::ArithmeticOverflow`] when `v` exceeds `u32::MAX` (kernels index in 32
/// bits).
pub fn dim(v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| tensormem::Error::ArithmeticOverflow {
        what: format!("dimension {v}"),
        limit_name: "u32 kernel index",
    })
}
