//! Unit tests of `quantize`: the written file reads back in the new format, errors are what
//! `ops::quant` promises, and reports add up.

use std::path::Path;

use safetensors::tensor::TensorView;

use super::*;
use crate::models::checksum;

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
        Err(Error::Argument(tensormem::ArgumentError::Invalid { .. }))
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

/// The byte range of tensor `name` in safetensors `bytes`.
fn body(bytes: &[u8], name: &str) -> std::ops::Range<usize> {
    let st = safetensors::SafeTensors::deserialize(bytes).unwrap();
    let data = st.tensor(name).unwrap().data();
    let start = data.as_ptr() as usize - bytes.as_ptr() as usize;
    start..start + data.len()
}

/// Regression for issue 46 (finding 6): tensormem's int8 files had no checksum, so one with
/// bytes flipped in its int8 body loaded and ran with different output. Each flipped byte of a
/// body, a scale, or a shape is now refused when the file is read.
#[test]
fn damaged_int8_files_fail_their_checksum() {
    let (good, _) = quantize_file(&f32_file(), WeightFormat::Int8 { group: 2 }).unwrap();
    WeightFile::from_bytes(Path::new("int8.safetensors"), good.clone()).unwrap();
    for (tensor, byte) in [
        ("dense.weight", 0),
        ("dense.weight", 14),
        ("dense.weight.scale", 1),
        ("dense.bias", 0),
    ] {
        let mut bad = good.clone();
        bad[body(&good, tensor).start + byte] ^= 0x01;
        match WeightFile::from_bytes(Path::new("int8.safetensors"), bad) {
            Err(Error::Malformed {
                source_name,
                message,
                ..
            }) => {
                assert_eq!(source_name, "int8.safetensors");
                assert!(message.contains("checksum mismatch"), "{message}");
            }
            other => panic!("{tensor} byte {byte}: expected Malformed, got {other:?}"),
        }
    }
}

/// Files of format version 1 (no version, no checksum) and of an unknown version are refused
/// with a message that says to re-quantize.
#[test]
fn old_and_unknown_format_versions_are_refused() {
    let w = [1i8, -2, 3, -4];
    let wb: Vec<u8> = bytemuck::cast_slice(&w).to_vec();
    let s = [0.5f32, 0.25];
    let sb: Vec<u8> = bytemuck::cast_slice(&s).to_vec();
    for version in [None, Some("3"), Some("two")] {
        let tensors = vec![
            ("w", TensorView::new(Dtype::I8, vec![2, 2], &wb).unwrap()),
            (
                "w.scale",
                TensorView::new(Dtype::F32, vec![2, 1], &sb).unwrap(),
            ),
        ];
        let mut meta = HashMap::new();
        meta.insert(META_FORMAT.to_string(), "int8".to_string());
        if let Some(v) = version {
            meta.insert(checksum::META_VERSION.to_string(), v.to_string());
        }
        let bytes = safetensors::tensor::serialize(tensors, Some(meta)).unwrap();
        match WeightFile::from_bytes(Path::new("old.safetensors"), bytes) {
            Err(Error::Malformed { message, .. }) => {
                assert!(message.contains("re-quantize"), "{version:?}: {message}");
            }
            other => panic!("{version:?}: expected Malformed, got {other:?}"),
        }
    }
}

/// Regression for issue 46 (finding 6): an int8 file whose scale is -1e38, converted to another
/// group size at load, failed with "quantize: element 0 is inf", naming neither the file nor the
/// tensor.
#[test]
fn conversion_errors_name_the_file_and_the_tensor() {
    let w = [127i8, 1, 1, 1];
    let wb: Vec<u8> = bytemuck::cast_slice(&w).to_vec();
    let s = [-1e38f32, 1.0];
    let sb: Vec<u8> = bytemuck::cast_slice(&s).to_vec();
    let out: Vec<(&str, Dtype, Vec<usize>, &[u8])> = vec![
        ("enc.w", Dtype::I8, vec![2, 2], &wb),
        ("enc.w.scale", Dtype::F32, vec![2, 1], &sb),
    ];
    let sum = file_checksum(
        out.iter()
            .map(|(n, d, s, b)| (*n, *d, &s[..], crc32fast::hash(b))),
    );
    let mut meta: HashMap<String, String> = checksum::metadata(sum).into_iter().collect();
    meta.insert(META_FORMAT.to_string(), "int8".to_string());
    let views = out
        .iter()
        .map(|(n, d, s, b)| (*n, TensorView::new(*d, s.clone(), b).unwrap()));
    let bytes = safetensors::tensor::serialize(views, Some(meta)).unwrap();
    let f = WeightFile::from_bytes(Path::new("scaled.safetensors"), bytes).unwrap();
    let e = f
        .weight("enc.w", &[2, 2], WeightFormat::Int8 { group: 1 })
        .unwrap_err();
    match &e {
        Error::Malformed {
            source_name,
            message,
            ..
        } => {
            assert_eq!(source_name, "scaled.safetensors");
            assert!(message.contains("'enc.w'"), "{message}");
        }
        other => panic!("expected Malformed, got {other:?}"),
    }
    let e = f.weight("enc.w", &[4, 1], WeightFormat::F16).unwrap_err();
    assert!(e.to_string().contains("scaled.safetensors"), "{e}");
}
