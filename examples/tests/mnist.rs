//! MNIST CNN end to end on every available backend: logits within 1e-3 of the PyTorch reference
//! (values from `shared/notes/models.md`, numpy == torch to 5 decimals), the right digit, and no
//! backend block allocated by repeated runs.

#![allow(
    clippy::excessive_precision,
    reason = "reference values are kept verbatim as published in the note"
)]

#[path = "support/backends.rs"]
mod backends;
#[path = "support/close.rs"]
mod close;
use close::assert_within;

use tensormem_examples::models::mnist::{self, Mnist, PIXELS};
use tensormem_examples::models::report::blocks_allocated;

/// PyTorch logits of the three bundled images, in bundle order (labels 7, 2, 1).
const REFERENCE: [[f32; 10]; 3] = [
    [
        -26.27941, -15.27745, -45.29600, -16.82080, -28.35986, -19.72611, -61.08878, 30.49100,
        -41.21608, -29.31160,
    ],
    [
        -33.55577, -40.84609, 35.96846, -86.01051, -37.39802, -117.06451, -58.13607, -56.22423,
        -84.79745, -64.18932,
    ],
    [
        -35.25290, 21.59212, -31.54959, -41.60200, -24.95949, -21.38746, -28.32400, -9.46094,
        -25.91697, -31.70304,
    ],
];

/// PyTorch logits of an all-zero image (prediction 1).
const ZERO_IMAGE: [f32; 10] = [
    -0.27986, 0.19275, -0.02215, -0.08780, -0.28341, -0.08325, -0.29437, 0.00748, -0.05229,
    -0.19258,
];

const TOL: f32 = 1e-3;

fn assert_close(backend: &str, what: &str, got: &[f32], want: &[f32]) {
    assert_within(backend, what, "logit", got, want, TOL);
}

#[test]
fn bundled_images_match_reference_on_every_backend() {
    let weights = Mnist::bundled_weights().unwrap();
    let bundled = mnist::bundled_images();
    let images: Vec<Vec<u8>> = bundled
        .iter()
        .map(|(p, _)| mnist::read_image(p, false).unwrap())
        .collect();
    let sums: Vec<u64> = images
        .iter()
        .map(|i| i.iter().map(|&p| u64::from(p)).sum())
        .collect();
    assert_eq!(sums, [18454, 28850, 9871], "bundled images changed");
    for (name, rt) in backends::available_runtimes() {
        let mut net = Mnist::new(&rt, &weights, images.len()).unwrap();
        let logits = net.classify(&images).unwrap();
        for (k, ((path, label), row)) in bundled.iter().zip(&logits).enumerate() {
            assert_close(name, &path.display().to_string(), row, &REFERENCE[k]);
            assert_eq!(mnist::argmax(row), *label, "{name}: {}", path.display());
        }
        // Steady state: the same shape again allocates no backend block and gives the same logits.
        let before = blocks_allocated(net.model());
        for _ in 0..3 {
            assert_eq!(
                net.classify(&images).unwrap(),
                logits,
                "{name}: runs differ"
            );
        }
        assert_eq!(
            blocks_allocated(net.model()),
            before,
            "{name}: repeated runs allocated"
        );
        let report = net.model().memory_report();
        assert_eq!(report.weight_bytes, 421_642 * 4, "{name}: weight bytes");
        assert!(report.activation_planned_bytes <= report.activation_no_reuse_bytes);
        assert!(report.activation_lower_bound_bytes <= report.activation_planned_bytes);
        println!("RAN backend {name}");
    }
}

#[test]
fn single_image_batches_agree_with_the_batched_run() {
    let weights = Mnist::bundled_weights().unwrap();
    let rt = &backends::available_runtimes()[0].1;
    let mut net = Mnist::new(rt, &weights, 1).unwrap();
    for (k, (path, label)) in mnist::bundled_images().iter().enumerate() {
        let img = mnist::read_image(path, false).unwrap();
        let row = net.classify(&[img]).unwrap()[0];
        assert_close("host", "single image", &row, &REFERENCE[k]);
        assert_eq!(mnist::argmax(&row), *label);
    }
    let zero = net.classify(&[vec![0u8; PIXELS]]).unwrap()[0];
    assert_close("host", "all-zero image", &zero, &ZERO_IMAGE);
    assert_eq!(mnist::argmax(&zero), 1);
}

#[test]
fn wrong_batch_and_image_size_are_errors() {
    let weights = Mnist::bundled_weights().unwrap();
    let rt = &backends::available_runtimes()[0].1;
    let mut net = Mnist::new(rt, &weights, 2).unwrap();
    let e = net.set_images(&[vec![0u8; PIXELS]]).unwrap_err();
    assert!(
        matches!(
            e,
            tensormem::Error::SizeMismatch {
                expected: 2,
                actual: 1,
                ..
            }
        ),
        "{e}"
    );
    let e = net
        .set_images(&[vec![0u8; PIXELS], vec![0u8; 10]])
        .unwrap_err();
    assert!(
        matches!(
            e,
            tensormem::Error::SizeMismatch {
                expected: 784,
                actual: 10,
                ..
            }
        ),
        "{e}"
    );
    assert!(mnist::build_graph(0, tensormem::WeightFormat::F32).is_err());
}

/// Issue 17: f16 and int8 weights (quantised at load, and read from a file tensormem-quantize
/// wrote) keep the argmax of every bundled image on every backend, and hold at most 0.51x / 0.27x
/// the f32 weight bytes on the device.
#[test]
fn quantized_weights_keep_the_argmax_on_every_backend() {
    use tensormem::WeightFormat;
    use tensormem_examples::models::quantize::quantize_file;
    use tensormem_examples::models::weights::WeightFile;

    let weights = Mnist::bundled_weights().unwrap();
    let (int8_bytes, _) = quantize_file(&weights, WeightFormat::Int8 { group: 0 }).unwrap();
    let int8_file =
        WeightFile::from_bytes(std::path::Path::new("mnist-int8.safetensors"), int8_bytes).unwrap();
    let bundled = mnist::bundled_images();
    let images: Vec<Vec<u8>> = bundled
        .iter()
        .map(|(p, _)| mnist::read_image(p, false).unwrap())
        .collect();
    let f32_bytes = 421_642 * 4;
    for (name, rt) in backends::available_runtimes() {
        for (format, file, limit) in [
            (WeightFormat::F16, &weights, 0.51),
            (WeightFormat::Int8 { group: 0 }, &weights, 0.27),
            // Per-group scales cost one f32 per 32 weights: 1/32 of the f32 bytes more.
            (
                WeightFormat::Int8 { group: 32 },
                &weights,
                0.27 + 1.0 / 32.0,
            ),
            (WeightFormat::Int8 { group: 0 }, &int8_file, 0.27),
        ] {
            let mut net = Mnist::with_budget(&rt, file, images.len(), format, None).unwrap();
            let logits = net.classify(&images).unwrap();
            for (k, ((path, label), row)) in bundled.iter().zip(&logits).enumerate() {
                assert_eq!(
                    mnist::argmax(row),
                    *label,
                    "{name} {format:?}: {}",
                    path.display()
                );
                let drift = row
                    .iter()
                    .zip(&REFERENCE[k])
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                assert!(drift < 1.0, "{name} {format:?}: logits drift {drift}");
            }
            let report = net.model().memory_report();
            let ratio = report.weight_bytes as f64 / f64::from(f32_bytes);
            assert!(
                ratio <= limit,
                "{name} {format:?}: {ratio:.3}x the f32 bytes"
            );
            println!("{name} {format:?}: weight bytes {ratio:.3}x f32");
        }
    }
}

/// Issue 16: `--device-budget` runs give bit-identical logits on every backend, and the model's
/// pool never reserves more than the budget.
#[test]
fn budgeted_runs_are_bit_identical_on_every_backend() {
    use tensormem_examples::cli::DeviceBudget;
    let weights = Mnist::bundled_weights().unwrap();
    let images: Vec<Vec<u8>> = mnist::bundled_images()
        .iter()
        .map(|(p, _)| mnist::read_image(p, false).unwrap())
        .collect();
    for (name, rt) in backends::available_runtimes() {
        let mut plain = Mnist::new(&rt, &weights, images.len()).unwrap();
        let want = plain.classify(&images).unwrap();
        let need = plain.model().memory_report().unbudgeted_device_bytes();
        drop(plain);
        for percent in [50.0, 40.0] {
            let budget = Some(DeviceBudget::Percent(percent));
            let mut net = Mnist::with_budget(
                &rt,
                &weights,
                images.len(),
                tensormem::WeightFormat::F32,
                budget,
            )
            .unwrap();
            for _ in 0..2 {
                let got = net.classify(&images).unwrap();
                let bits = |l: &[[f32; 10]]| -> Vec<u32> {
                    l.iter().flatten().map(|v| v.to_bits()).collect()
                };
                assert_eq!(bits(&got), bits(&want), "{name} at {percent}%");
            }
            let r = net.model().memory_report();
            let o = r.offload.clone().unwrap();
            assert_eq!(o.budget, (need as f64 * percent / 100.0) as u64);
            assert!(r.peak_device_bytes <= o.budget, "{name}: {r:?}");
        }
    }
}
