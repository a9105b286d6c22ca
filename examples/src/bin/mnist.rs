//! `mnist`: classifies digit images with the ccexam MNIST CNN on a tensormem backend and prints
//! the predictions, the logits, how the backend was chosen and the memory report.
//! `mnist --help` lists the flags and exit codes.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use serde_json::json;
use tensormem::{Result, Runtime, Tracer};
use tensormem_examples::backend_select;
use tensormem_examples::cli::{self, EXIT_CODES, SampleArgs};
use tensormem_examples::models::mnist::{self, Mnist};
use tensormem_examples::models::report::{InferenceReport, blocks_allocated, time_runs};
use tensormem_examples::models::weights::WeightFile;
use tensormem_examples::outln;

/// Classify handwritten digits with a small CNN (the ccexam MNIST model) on a tensormem backend,
/// then print the logits and the memory report.
///
/// Images are PNG, JPEG or PGM of any size (converted to 28x28 grayscale as the model's reference
/// preprocessing does) or exactly 784 raw bytes. MNIST digits are white on black: use --invert
/// for dark digits on a light background. Without images, the three bundled MNIST test images
/// are classified. All images run as one batch.
#[derive(Parser, Debug)]
#[command(version, after_help = EXIT_CODES)]
struct Args {
    #[command(flatten)]
    sample: SampleArgs,
    /// Record every allocation, transfer and tensor use of the run and write it as Chrome trace
    /// JSON (read it with tensormem-report, or chrome://tracing).
    #[arg(long, value_name = "OUT.json")]
    trace: Option<PathBuf>,
    /// Invert the pixels of every image (for dark digits on a light background).
    #[arg(long)]
    invert: bool,
    /// Images to classify (PNG, JPEG, PGM, or 784 raw bytes).
    #[arg(value_name = "IMAGE")]
    images: Vec<PathBuf>,
}

fn main() -> ExitCode {
    cli::exit("mnist", run(&Args::parse()))
}

fn run(args: &Args) -> Result<()> {
    let s = &args.sample;
    let paths: Vec<(PathBuf, Option<usize>)> = if args.images.is_empty() {
        mnist::bundled_images()
            .into_iter()
            .map(|(p, l)| (p, Some(l)))
            .collect()
    } else {
        args.images.iter().map(|p| (p.clone(), None)).collect()
    };
    let images = paths
        .iter()
        .map(|(p, _)| mnist::read_image(p, args.invert))
        .collect::<Result<Vec<_>>>()?;
    for ((p, _), img) in paths.iter().zip(&images) {
        if mnist::looks_inverted(img) {
            eprintln!(
                "mnist: warning: {} is mostly light; MNIST digits are white on black{}",
                p.display(),
                if args.invert {
                    " (it was inverted as asked)"
                } else {
                    ": try --invert"
                }
            );
        }
    }

    let selection = backend_select::select(s.device.backend, &s.device.select_options())?;
    let rt = Runtime::new(selection.backend.clone(), s.device.runtime_config())?;
    let tracer = args.trace.as_ref().map(|_| Tracer::new());
    rt.set_tracer(tracer.clone());
    let weights = match &s.weights.weights_file {
        Some(path) => WeightFile::open(path)?,
        None => Mnist::bundled_weights()?,
    };
    let mut net = Mnist::with_budget(
        &rt,
        &weights,
        images.len(),
        s.weights.format(),
        s.device_budget,
    )?;
    let logits = net.classify(&images)?;

    let bar = cli::progress(u64::from(s.runs), "timed runs", s.json);
    let timing = time_runs(
        s.runs,
        &mut net,
        |net| net.classify(&images).map(|_| ()),
        |net| blocks_allocated(net.model()),
        &bar,
    )?;
    let shape = format!("batch {}", images.len());
    let report = InferenceReport::new(&rt, &selection, net.model(), shape, timing);

    let mut text = String::new();
    if s.json {
        let results: Vec<_> = paths
            .iter()
            .zip(&logits)
            .map(|((p, label), l)| {
                json!({
                    "image": p.display().to_string(),
                    "label": label,
                    "prediction": mnist::argmax(l),
                    "logits": l.to_vec(),
                })
            })
            .collect();
        let out = json!({ "model": "mnist", "images": results, "report": report.to_json() });
        outln!(text, "{out}");
    } else {
        for ((p, label), l) in paths.iter().zip(&logits) {
            let name = p.file_name().map_or_else(
                || p.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            );
            let label = label.map(|l| format!(" (label {l})")).unwrap_or_default();
            let values: Vec<String> = l.iter().map(|v| format!("{v:.5}")).collect();
            outln!(text, "{name}: predicted {}{label}", mnist::argmax(l));
            outln!(text, "  logits [{}]", values.join(", "));
        }
        outln!(text, "{}", report.to_text());
    }
    cli::emit(&text);
    if let (Some(path), Some(tracer)) = (&args.trace, &tracer) {
        drop(net); // its frees belong in the trace
        let trace = tracer.snapshot();
        cli::write_file(path, trace.to_chrome_json())?;
        eprintln!(
            "trace: {} events written to {}",
            trace.events.len(),
            path.display()
        );
    }
    Ok(())
}
