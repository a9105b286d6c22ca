//! The MNIST CNN of ccexam 1.0.0 as a tensormem graph.
//!
//! ```text
//! image [n,1,28,28] ─ conv 3×3 (1→32, pad 1) ─ relu ─ maxpool 2 ─ conv 3×3 (32→64, pad 1) ─ relu
//!   ─ maxpool 2 ─ [n,64,7,7] ─ reshape [n,3136] (C,H,W order, free) ─ linear 3136→128 ─ relu
//!   ─ linear 128→10 ─ logits [n,10]
//! ```
//! The graph is built for a batch of `n` images; the runtime plans its activations once and every
//! later run of the same batch reuses that plan. Weights come from `assets/mnist/mnist.safetensors`
//! (see `ATTRIBUTION.md` there), converted from ccexam's `mnist.pth` by `scripts/convert_mnist.py`.

use std::path::{Path, PathBuf};

use tensormem::{Error, Model, Result, Runtime, WeightFormat};

use super::weights::WeightFile;
use crate::cli::DeviceBudget;

mod graph;
mod input;
pub use graph::{CLASSES, MEAN, MnistGraph, PIXELS, SIDE, STD, argmax, build_graph, normalize};
pub use input::{MAX_FILE_BYTES, MAX_SIDE, looks_inverted, read_image};

/// The directory of the MNIST assets: `$TENSORMEM_MNIST_ASSETS` when set (a relocated binary, as
/// in the GPU check's bundle), else the committed `examples/assets/mnist` of this source tree.
pub fn assets_dir() -> PathBuf {
    match std::env::var_os("TENSORMEM_MNIST_ASSETS") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("assets")
            .join("mnist"),
    }
}

/// The three bundled sample images (first three MNIST test images) with their labels.
pub fn bundled_images() -> Vec<(PathBuf, usize)> {
    [
        ("mnist_test_0_label_7.u8", 7),
        ("mnist_test_1_label_2.u8", 2),
        ("mnist_test_2_label_1.u8", 1),
    ]
    .into_iter()
    .map(|(f, label)| (assets_dir().join(f), label))
    .collect()
}

/// The MNIST CNN compiled for one batch size, with its weights uploaded.
pub struct Mnist {
    model: Model,
    graph: MnistGraph,
}

impl Mnist {
    /// Compiles the graph for `batch` images on `rt` and uploads the weights from `weights`
    /// (normally `assets/mnist/mnist.safetensors`).
    ///
    /// # Errors
    /// Graph, compile and upload errors; weight file errors (missing tensor, wrong shape).
    pub fn new(rt: &Runtime, weights: &WeightFile, batch: usize) -> Result<Self> {
        Self::with_budget(rt, weights, batch, WeightFormat::F32, None)
    }

    /// [`Mnist::new`] with the convolution and linear weights held on the device in `format`
    /// (converted at load when the file stores them otherwise), within a device budget when one
    /// is given (see [`crate::cli::compile`]).
    ///
    /// # Errors
    /// As [`Mnist::new`]; [`Error::BudgetBelowWorkingSet`].
    pub fn with_budget(
        rt: &Runtime,
        weights: &WeightFile,
        batch: usize,
        format: WeightFormat,
        budget: Option<DeviceBudget>,
    ) -> Result<Self> {
        let graph = build_graph(batch, format)?;
        let mut model = crate::cli::compile(rt, &graph.builder.graph, budget)?;
        graph.builder.upload_weights(&mut model, weights)?;
        Ok(Mnist { model, graph })
    }

    /// Opens the bundled weight file.
    ///
    /// # Errors
    /// As [`WeightFile::open`].
    pub fn bundled_weights() -> Result<WeightFile> {
        WeightFile::open(&assets_dir().join("mnist.safetensors"))
    }

    /// Images per run.
    pub fn batch(&self) -> usize {
        self.graph.batch
    }

    /// The compiled model (for its memory report).
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Uploads the images (raw pixels, `batch` of them) for the next [`Mnist::run`].
    ///
    /// # Errors
    /// [`Error::SizeMismatch`] when `images` does not hold `batch` images.
    pub fn set_images(&mut self, images: &[Vec<u8>]) -> Result<()> {
        if images.len() != self.graph.batch {
            return Err(Error::SizeMismatch {
                what: "mnist images per batch".into(),
                expected: self.graph.batch as u64,
                actual: images.len() as u64,
            });
        }
        let mut x = Vec::with_capacity(images.len() * PIXELS);
        for img in images {
            if img.len() != PIXELS {
                return Err(Error::SizeMismatch {
                    what: "mnist image pixels".into(),
                    expected: PIXELS as u64,
                    actual: img.len() as u64,
                });
            }
            x.extend(normalize(img));
        }
        self.model
            .set_input(self.graph.image, bytemuck::cast_slice(&x))
            .map(|_| ())
    }

    /// Runs the network on the images last set.
    ///
    /// # Errors
    /// Runtime and backend errors.
    pub fn run(&mut self) -> Result<()> {
        self.model.run().map(|_| ())
    }

    /// Logits of the last run, one row of 10 per image.
    ///
    /// # Errors
    /// Runtime and backend errors; [`Error::Malformed`] when a logit is NaN or infinite (broken
    /// weights or a faulty device), never a silent non-number.
    pub fn logits(&self) -> Result<Vec<[f32; CLASSES]>> {
        let flat: Vec<f32> = self.model.read_output(self.graph.logits)?;
        super::checks::finite("mnist logits", &flat, CLASSES)?;
        Ok(flat
            .chunks_exact(CLASSES)
            .map(|c| {
                let mut row = [0.0; CLASSES];
                row.copy_from_slice(c);
                row
            })
            .collect())
    }

    /// Classifies `images`: sets them, runs once and returns the logits.
    ///
    /// # Errors
    /// As [`Mnist::set_images`], [`Mnist::run`] and [`Mnist::logits`].
    pub fn classify(&mut self, images: &[Vec<u8>]) -> Result<Vec<[f32; CLASSES]>> {
        self.set_images(images)?;
        self.run()?;
        self.logits()
    }
}

#[cfg(test)]
mod tests;
