//! Unit tests of `quantize`: the written file reads back in the new format, errors are what
//! `ops::quant` promises, and reports add up.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly on any unexpected result"
)]

use std::path::Path;

use safetensors::tensor::TensorView;

use super::*;

fn f32_file() -> WeightFile {
    // A [3, 5] weight (odd rows: int8 rows straddle words) and a [3] bias.
    let w: Vec<f32> = (0..15).map(|i| (i as f32 - 7.0) * 0.37).collect();
    let b = [0.5f32, -1.0, 2.0];
    let wb: Vec<u8> = bytemuck::cast_slice(&w).to_vec();
    let bb: Vec<u8> = bytemuck::cast_slice(&b).to_vec();
    let tensors = vec![
        (
            "dense.weight",
            TensorView::new(Dtype::F32, vec![3, 5], &wb).unwrap(),
        ),
        (
            "dense.bias",
            TensorView::new(Dtype::F32, vec![3], &bb).unwrap(),
        ),
    ];
    let bytes = safetensors::tensor::serialize(tensors, None).unwrap();
    WeightFile::from_bytes(Path::new("f32.safetensors"), bytes).unwrap()
}

#[test]
fn int8_file_reads_back_with_its_scales_and_group() {
    let src = f32_file();
    let (bytes, reports) = quantize_file(&src, WeightFormat::Int8 { group: 2 }).unwrap();
    let q = WeightFile::from_bytes(Path::new("int8.safetensors"), bytes).unwrap();
    assert_eq!(q.len(), 2, "scales are part of their tensor");
    assert_eq!(
        q.stored_format("dense.weight", &[3, 5]).unwrap(),
        WeightFormat::Int8 { group: 2 }
    );
    assert_eq!(
        q.stored_format("dense.bias", &[3]).unwrap(),
        WeightFormat::F32
    );
    // Read as stored: 15 int8 bytes and 3 x 3 scales, no conversion.
    let w = q
        .weight("dense.weight", &[3, 5], WeightFormat::Int8 { group: 2 })
        .unwrap();
    assert!(matches!(w.bytes, std::borrow::Cow::Borrowed(_)));
    assert_eq!(w.bytes.len(), 15);
    assert_eq!(w.scales.unwrap().len(), 9 * 4);
    let original = src.f32_values("dense.weight", &[3, 5]).unwrap();
    let back = q.f32_values("dense.weight", &[3, 5]).unwrap();
    let weight = reports.iter().find(|r| r.name == "dense.weight").unwrap();
    let max = original
        .iter()
        .zip(&back)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert_eq!(max, weight.max_abs_error);
    assert!(weight.relative_rms_error > 0.0 && weight.relative_rms_error < 0.01);
    assert_eq!((weight.bytes_in, weight.bytes_out), (60, 15 + 36));
    let bias = reports.iter().find(|r| r.name == "dense.bias").unwrap();
    assert_eq!((bias.format, bias.max_abs_error), ("f32", 0.0));
}

#[test]
fn f16_file_halves_the_matrices() {
    let (bytes, reports) = quantize_file(&f32_file(), WeightFormat::F16).unwrap();
    let q = WeightFile::from_bytes(Path::new("f16.safetensors"), bytes).unwrap();
    assert_eq!(
        q.stored_format("dense.weight", &[3, 5]).unwrap(),
        WeightFormat::F16
    );
    let w = reports.iter().find(|r| r.name == "dense.weight").unwrap();
    assert_eq!((w.bytes_in, w.bytes_out), (60, 30));
    assert!(w.max_abs_error <= 2.6 * 2f32.powi(-11));
    // An f16 file converts to int8 at load (through f32).
    let int8 = q
        .weight("dense.weight", &[3, 5], WeightFormat::Int8 { group: 0 })
        .unwrap();
    assert_eq!((int8.bytes.len(), int8.scales.unwrap().len()), (15, 12));
}

#[test]
fn f32_target_and_broken_int8_files_are_errors() {
    assert!(matches!(
        quantize_file(&f32_file(), WeightFormat::F32),
        Err(Error::InvalidArgument(_))
    ));
    // An int8 tensor without its scales.
    let q = [1u8, 2, 3, 4];
    let tensors = vec![("w", TensorView::new(Dtype::I8, vec![2, 2], &q).unwrap())];
    let bytes = safetensors::tensor::serialize(tensors, None).unwrap();
    match WeightFile::from_bytes(Path::new("bad.safetensors"), bytes) {
        Err(Error::Malformed { message, .. }) => assert!(message.contains("w.scale"), "{message}"),
        other => panic!("expected Malformed, got {other:?}"),
    }
    // Scales of the wrong shape.
    let s = [1f32; 3];
    let sb: Vec<u8> = bytemuck::cast_slice(&s).to_vec();
    let tensors = vec![
        ("w", TensorView::new(Dtype::I8, vec![2, 2], &q).unwrap()),
        (
            "w.scale",
            TensorView::new(Dtype::F32, vec![3, 1], &sb).unwrap(),
        ),
    ];
    let bytes = safetensors::tensor::serialize(tensors, None).unwrap();
    assert!(matches!(
        WeightFile::from_bytes(Path::new("bad.safetensors"), bytes),
        Err(Error::Malformed { .. })
    ));
    // A group that is not a number.
    let mut meta = HashMap::new();
    meta.insert(META_GROUP.to_string(), "many".to_string());
    let tensors = vec![("v", TensorView::new(Dtype::F32, vec![1], &sb[..4]).unwrap())];
    let bytes = safetensors::tensor::serialize(tensors, Some(meta)).unwrap();
    assert!(matches!(
        WeightFile::from_bytes(Path::new("bad.safetensors"), bytes),
        Err(Error::Malformed { .. })
    ));
}
