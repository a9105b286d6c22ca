//! `tensormem-quantize` end to end: converts the bundled MNIST weights, reports every tensor,
//! writes a file the samples read, and follows the shared CLI conventions (help, version, JSON,
//! exit codes 0/1/2).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Output;

use tensormem::WeightFormat;
use tensormem_examples::models::mnist::{self, Mnist};
use tensormem_examples::models::weights::WeightFile;

#[path = "support/run.rs"]
mod run;
#[path = "support/scratch.rs"]
mod scratch;
use run::{assert_help_lists, json_ok, run, stderr};
use scratch::Scratch;

const QUANTIZE: &str = env!("CARGO_BIN_EXE_tensormem-quantize");

fn mnist_weights() -> PathBuf {
    mnist::assets_dir().join("mnist.safetensors")
}

/// `tensormem-quantize INPUT OUTPUT ARGS`.
fn quantize(input: &Path, output: &Path, args: &[&str]) -> Output {
    let mut all = vec![input.as_os_str(), output.as_os_str()];
    all.extend(args.iter().map(OsStr::new));
    run(QUANTIZE, &all)
}

#[test]
fn int8_of_mnist_reports_every_tensor_and_loads_in_the_sample() {
    let dir = Scratch::new("quantize");
    let out = dir.join("mnist-int8.safetensors");
    let v = json_ok(&quantize(
        &mnist_weights(),
        &out,
        &["--format", "int8", "--json"],
    ));
    let tensors = v["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), 8);
    for t in tensors {
        let rank = t["shape"].as_array().unwrap().len();
        let rms = t["relative_rms_error"].as_f64().unwrap();
        if rank >= 2 {
            assert_eq!(t["format"], "int8", "{t}");
            assert!(rms > 0.0 && rms < 0.02, "{t}");
        } else {
            assert_eq!(t["format"], "f32", "{t}");
            assert_eq!(rms, 0.0);
        }
    }
    let ratio = v["ratio"].as_f64().unwrap();
    assert!(ratio <= 0.27, "int8 file is {ratio}x the f32 one");
    // The file loads as int8 without conversion and classifies like the f32 weights.
    let file = WeightFile::open(&out).unwrap();
    assert_eq!(
        file.stored_format("classifier.0.weight", &[128, 3136])
            .unwrap(),
        WeightFormat::Int8 { group: 0 }
    );
    let backend =
        std::sync::Arc::new(tensormem::HostBackend::new(tensormem::HostConfig::default()).unwrap());
    let rt = tensormem::Runtime::new(backend, tensormem::RuntimeConfig::default()).unwrap();
    let mut net = Mnist::with_budget(&rt, &file, 1, WeightFormat::Int8 { group: 0 }, None).unwrap();
    for (path, label) in mnist::bundled_images() {
        let img = mnist::read_image(&path, false).unwrap();
        assert_eq!(mnist::argmax(&net.classify(&[img]).unwrap()[0]), label);
    }
    // The text table names every tensor and the totals.
    let text = quantize(
        &mnist_weights(),
        &dir.join("mnist-f16.safetensors"),
        &["--format", "f16"],
    );
    assert!(text.status.success());
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("classifier.0.weight"), "{text}");
    assert!(text.contains("8 tensors:"), "{text}");
}

#[test]
fn bad_files_exit_1_and_bad_flags_exit_2() {
    let dir = Scratch::new("quantize");
    let garbage = dir.write("garbage.safetensors", b"not a safetensors file");
    for input in [garbage, dir.join("missing.safetensors")] {
        let run = quantize(&input, &dir.join("out.safetensors"), &["--format", "f16"]);
        assert_eq!(run.status.code(), Some(1), "{}", input.display());
        let err = stderr(&run);
        assert!(err.starts_with("tensormem-quantize: "), "{err}");
    }
    for args in [
        vec!["--format", "int4"],
        vec!["--format"],
        vec!["--group", "x"],
        vec![],
    ] {
        let run = quantize(&mnist_weights(), &dir.join("out.safetensors"), &args);
        assert_eq!(run.status.code(), Some(2), "{args:?}");
    }
    let version = run(QUANTIZE, &["--version"]);
    assert_eq!(version.status.code(), Some(0));
    assert!(!version.stdout.is_empty());
    assert_help_lists(QUANTIZE, &["Exit status", "NAME.scale"]);
}

/// Regression for issue 46 (finding 6): a directory as the input said "No such device (os error
/// 19)"; a damaged int8 file loaded and ran. Now the first names the directory and the second
/// fails its checksum, both with exit 1.
#[test]
fn directory_input_and_damaged_output_say_what_is_wrong() {
    let dir = Scratch::new("quantize");
    let run = quantize(
        &dir.join("."),
        &dir.join("out.safetensors"),
        &["--format", "int8"],
    );
    assert_eq!(run.status.code(), Some(1));
    let err = stderr(&run);
    assert!(err.contains("is a directory"), "{err}");
    assert!(!err.contains("No such device"), "{err}");

    let out = dir.join("int8.safetensors");
    let run = quantize(&mnist_weights(), &out, &["--format", "int8"]);
    assert!(run.status.success());
    let mut bytes = std::fs::read(&out).unwrap();
    let n = bytes.len();
    // The classifier's int8 body is most of the file: flip 1,000 bytes of its middle.
    for b in &mut bytes[n / 2..n / 2 + 1000] {
        *b ^= 0x5a;
    }
    std::fs::write(&out, &bytes).unwrap();
    let run = quantize(&out, &dir.join("again.safetensors"), &["--format", "f16"]);
    assert_eq!(run.status.code(), Some(1));
    let err = stderr(&run);
    assert!(err.contains("checksum mismatch"), "{err}");
}
