//! `tensormem-quantize`: converts a safetensors weight file to f16 or int8 and reports each
//! tensor's size and error. `tensormem-quantize --help` lists the flags and exit codes.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use serde_json::json;
use tensormem::{Result, WeightFormat};
use tensormem_examples::cli::{self, EXIT_CODES, emit};
use tensormem_examples::models::quantize::quantize_file;
use tensormem_examples::models::report::bytes;
use tensormem_examples::models::weights::WeightFile;
use tensormem_examples::outln;

/// Convert a safetensors weight file to f16 or int8 (symmetric, one f32 scale per output channel,
/// or per --group inner elements), printing each tensor's size and error (max abs, relative RMS).
///
/// Tensors of rank 2 or more (linear and convolution weights, embedding tables) are converted;
/// vectors (biases, norms) stay f32. An int8 tensor NAME gets its scales in NAME.scale (F32,
/// rows × groups, rows = the first dimension); the file's metadata records tensormem.format and
/// tensormem.group. The mnist and minilm samples read such files with --weights-file.
#[derive(Parser, Debug)]
#[command(version, after_help = EXIT_CODES)]
struct Args {
    /// Input weights (f32, or a file this tool wrote).
    #[arg(value_name = "IN.safetensors")]
    input: PathBuf,
    /// Output file.
    #[arg(value_name = "OUT.safetensors")]
    output: PathBuf,
    /// Target format.
    #[arg(long, value_enum)]
    format: Format,
    /// With int8: inner elements per scale (0: one scale per output channel).
    #[arg(long, value_name = "N", default_value_t = 0)]
    group: u32,
    /// Print one JSON object on stdout instead of the table.
    #[arg(long)]
    json: bool,
}

/// `--format` values.
#[derive(Copy, Clone, Debug, ValueEnum)]
enum Format {
    /// IEEE half floats: half the bytes.
    F16,
    /// Symmetric int8 with f32 scales: about a quarter of the bytes.
    Int8,
}

fn main() -> ExitCode {
    cli::exit("tensormem-quantize", run(&Args::parse()))
}

fn run(args: &Args) -> Result<()> {
    let format = match args.format {
        Format::F16 => WeightFormat::F16,
        Format::Int8 => WeightFormat::Int8 { group: args.group },
    };
    let file = WeightFile::open(&args.input)?;
    let (out, reports) = quantize_file(&file, format)?;
    cli::write_file(&args.output, &out)?;
    let total_in: u64 = reports.iter().map(|r| r.bytes_in).sum();
    let total_out: u64 = reports.iter().map(|r| r.bytes_out).sum();
    let ratio = total_out as f64 / total_in.max(1) as f64;
    let mut text = String::new();
    if args.json {
        let tensors: Vec<_> = reports
            .iter()
            .map(|r| {
                json!({
                    "name": r.name,
                    "shape": r.shape,
                    "format": r.format,
                    "bytes_in": r.bytes_in,
                    "bytes_out": r.bytes_out,
                    "max_abs_error": r.max_abs_error,
                    "relative_rms_error": r.relative_rms_error,
                })
            })
            .collect();
        let v = json!({
            "input": args.input.display().to_string(),
            "output": args.output.display().to_string(),
            "format": format.name(),
            "group": args.group,
            "tensors": tensors,
            "bytes_in": total_in,
            "bytes_out": total_out,
            "file_bytes_out": out.len(),
            "ratio": ratio,
        });
        outln!(text, "{v}");
    } else {
        outln!(
            text,
            "{:<52} {:<16} {:>5} {:>12} {:>12} {:>10} {:>10}",
            "tensor",
            "shape",
            "fmt",
            "bytes in",
            "bytes out",
            "max abs",
            "rel rms"
        );
        for r in &reports {
            outln!(
                text,
                "{:<52} {:<16} {:>5} {:>12} {:>12} {:>10.3e} {:>10.3e}",
                r.name,
                format!("{:?}", r.shape),
                r.format,
                r.bytes_in,
                r.bytes_out,
                r.max_abs_error,
                r.relative_rms_error
            );
        }
        outln!(
            text,
            "{} tensors: {} -> {} ({ratio:.3}x), written to {}",
            reports.len(),
            bytes(total_in),
            bytes(total_out),
            args.output.display()
        );
    }
    emit(&text);
    Ok(())
}
