//! `mnist`: classifies 28×28 digit images with the ccexam MNIST CNN on a tensormem backend and
//! prints the predictions, the logits and the memory report.
//!
//! ```text
//! mnist [--backend auto|host|vulkan|wgpu|cuda] [--json] [--runs N] [--trace OUT.json] [IMAGE...]
//! ```
//! `--trace` records every allocation, transfer and tensor use of the whole run (see
//! `tensormem::trace`) and writes it as Chrome trace JSON, readable by `tensormem-report`.
//! IMAGE is raw `u8[784]` (28×28, white on black) or a binary 28×28 PGM; without images it
//! classifies the three bundled MNIST test images. All images run as one batch.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;
use tensormem::{Result, Runtime, RuntimeConfig, Tracer};
use tensormem_examples::backend_select;
use tensormem_examples::models::cli::parse_common;
use tensormem_examples::models::mnist::{self, Mnist};
use tensormem_examples::models::report::{InferenceReport, blocks_allocated, time_runs};

const USAGE: &str = "usage: mnist [--backend auto|host|vulkan|wgpu|cuda] [--json] [--runs N] [--trace OUT.json] [IMAGE...]";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mnist: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let mut args = parse_common(std::env::args().skip(1))?;
    let trace_out = match args.rest.iter().position(|a| a == "--trace") {
        Some(i) => {
            let path = args.rest.get(i + 1).cloned();
            args.rest.drain(i..(i + 2).min(args.rest.len()));
            Some(path.ok_or_else(|| tensormem::Error::invalid("--trace needs a file name"))?)
        }
        None => None,
    };
    if let Some(flag) = args.rest.iter().find(|a| a.starts_with("--")) {
        return Err(tensormem::Error::invalid(format!(
            "unknown flag {flag}\n{USAGE}"
        )));
    }
    let paths: Vec<(PathBuf, Option<usize>)> = if args.rest.is_empty() {
        mnist::bundled_images()
            .into_iter()
            .map(|(p, l)| (p, Some(l)))
            .collect()
    } else {
        args.rest.iter().map(|p| (PathBuf::from(p), None)).collect()
    };
    let images = paths
        .iter()
        .map(|(p, _)| mnist::read_image(p))
        .collect::<Result<Vec<_>>>()?;

    let backend = backend_select::select(&args.backend)?;
    let rt = Runtime::new(backend, RuntimeConfig::default())?;
    let tracer = trace_out.as_ref().map(|_| Tracer::new());
    rt.set_tracer(tracer.clone());
    let weights = Mnist::bundled_weights()?;
    let mut net = Mnist::new(&rt, &weights, images.len())?;
    let logits = net.classify(&images)?;

    let timing = time_runs(
        args.runs,
        &mut net,
        |net| net.classify(&images).map(|_| ()),
        |net| blocks_allocated(net.model()),
    )?;
    let report = InferenceReport::new(&rt, net.model(), format!("batch {}", images.len()), timing);

    if args.json {
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
        println!("{out}");
    } else {
        for ((p, label), l) in paths.iter().zip(&logits) {
            let name = p.file_name().map_or_else(
                || p.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            );
            let label = label.map(|l| format!(" (label {l})")).unwrap_or_default();
            let values: Vec<String> = l.iter().map(|v| format!("{v:.5}")).collect();
            println!("{name}: predicted {}{label}", mnist::argmax(l));
            println!("  logits [{}]", values.join(", "));
        }
        println!("{}", report.to_text());
    }
    if let (Some(path), Some(tracer)) = (&trace_out, &tracer) {
        drop(net); // its frees belong in the trace
        let trace = tracer.snapshot();
        std::fs::write(path, trace.to_chrome_json()).map_err(|source| tensormem::Error::Io {
            path: path.clone(),
            source,
        })?;
        eprintln!("trace: {} events written to {path}", trace.events.len());
    }
    Ok(())
}
