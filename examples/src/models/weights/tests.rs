//! Unit tests of `weights`.

use super::*;
use safetensors::tensor::TensorView;

fn file() -> WeightFile {
    let a: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let ids: Vec<u8> = [7i64, 8].iter().flat_map(|v| v.to_le_bytes()).collect();
    let tensors = vec![
        ("w", TensorView::new(Dtype::F32, vec![2, 3], &a).unwrap()),
        ("ids", TensorView::new(Dtype::I64, vec![2], &ids).unwrap()),
    ];
    let bytes = safetensors::tensor::serialize(tensors, None).unwrap();
    WeightFile::from_bytes(Path::new("mem.safetensors"), bytes).unwrap()
}

#[test]
fn reads_f32_tensors_and_skips_others() {
    let f = file();
    assert_eq!(f.len(), 1, "the I64 tensor is skipped");
    assert_eq!(
        f.f32_values("w", &[2, 3]).unwrap(),
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    );
    assert_eq!(f.f32_bytes("w", &[2, 3]).unwrap().len(), 24);
}

#[test]
fn wrong_shape_and_missing_name_are_specific_errors() {
    let f = file();
    let e = f.f32_bytes("w", &[3, 2]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::SizeMismatch {
                expected: 3,
                actual: 2,
                ..
            }
        ),
        "{e}"
    );
    let e = f.f32_bytes("w", &[6]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::SizeMismatch {
                expected: 1,
                actual: 2,
                ..
            }
        ),
        "{e}"
    );
    let e = f.f32_bytes("ids", &[2]).unwrap_err();
    assert!(matches!(e, Error::Malformed { .. }), "{e}");
}

#[test]
fn garbage_and_missing_files_are_errors() {
    let e = WeightFile::from_bytes(Path::new("x"), vec![1, 2, 3]).unwrap_err();
    assert!(matches!(e, Error::Malformed { .. }), "{e}");
    let e = WeightFile::open(Path::new("/nonexistent/w.safetensors")).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
}

/// Regression for issue 18: NaN or infinite weights ran and printed `null` embeddings.
#[test]
fn non_finite_weights_are_refused_naming_the_tensor() {
    for (bad, shown) in [(f32::NAN, "NaN"), (f32::INFINITY, "inf")] {
        let a: Vec<u8> = [1.0f32, 2.0, bad, 4.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let tensors = vec![(
            "layer.w",
            TensorView::new(Dtype::F32, vec![2, 2], &a).unwrap(),
        )];
        let bytes = safetensors::tensor::serialize(tensors, None).unwrap();
        match WeightFile::from_bytes(Path::new("bad.safetensors"), bytes) {
            Err(Error::Malformed { message, .. }) => {
                assert!(
                    message.contains("'layer.w'")
                        && message.contains(&format!("{shown} at element 2")),
                    "{message}"
                );
            }
            other => panic!("expected Malformed, got {other:?}"),
        }
    }
}

/// Converting at load works a piece of rows at a time: a tensor several pieces long (odd row
/// length, so f16 and int8 rows straddle words and pieces end mid-word) converts to exactly the
/// bytes and scales of quantising it whole, from f32 and from a stored int8 file alike.
#[test]
fn conversion_in_pieces_equals_quantising_whole() {
    let (rows, inner) = (2 * STREAM_CHUNK / (4 * 1001) + 3, 1001usize);
    let values: Vec<f32> = (0..rows * inner)
        .map(|i| ((i * 7919) % 2001) as f32 / 1000.0 - 1.0)
        .collect();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let tensors = vec![(
        "w",
        TensorView::new(Dtype::F32, vec![rows, inner], &bytes).unwrap(),
    )];
    let file = safetensors::tensor::serialize(tensors, None).unwrap();
    let f = WeightFile::from_bytes(Path::new("big.safetensors"), file).unwrap();
    let shape = [rows, inner];
    for format in [
        WeightFormat::F16,
        WeightFormat::Int8 { group: 0 },
        WeightFormat::Int8 { group: 64 },
    ] {
        let whole = quant::quantize(&values, rows as u64, inner as u64, format).unwrap();
        let w = f.weight("w", &shape, format).unwrap();
        let unpadded = rows * inner * format.dtype().size() as usize;
        assert_eq!(&w.bytes[..], &whole.bytes[..unpadded], "{format:?} bytes");
        let scales: Vec<f32> = w
            .scales
            .as_deref()
            .map(bytemuck::pod_collect_to_vec)
            .unwrap_or_default();
        assert_eq!(scales, whole.scales, "{format:?} scales");
    }

    // From a stored int8 tensor (per-channel scales) to f16: as dequantising whole, then f16.
    let q = quant::quantize(
        &values,
        rows as u64,
        inner as u64,
        WeightFormat::Int8 { group: 0 },
    )
    .unwrap();
    let scale_bytes: Vec<u8> = bytemuck::cast_slice(&q.scales).to_vec();
    let tensors = vec![
        (
            "w",
            TensorView::new(Dtype::I8, vec![rows, inner], &q.bytes[..rows * inner]).unwrap(),
        ),
        (
            "w.scale",
            TensorView::new(Dtype::F32, vec![rows, 1], &scale_bytes).unwrap(),
        ),
    ];
    let file = safetensors::tensor::serialize(tensors, None).unwrap();
    let f = WeightFile::from_bytes(Path::new("int8.safetensors"), file).unwrap();
    let deq = quant::dequantize(
        &q.bytes,
        &q.scales,
        rows as u64,
        inner as u64,
        WeightFormat::Int8 { group: 0 },
    )
    .unwrap();
    let want = quant::quantize(&deq, rows as u64, inner as u64, WeightFormat::F16).unwrap();
    let got = f.weight("w", &shape, WeightFormat::F16).unwrap();
    assert_eq!(&got.bytes[..], &want.bytes[..rows * inner * 2]);
}

/// Regression for issue 46 (finding 6): a directory given as a weights file failed with "No such
/// device (os error 19)" (mapping) instead of saying it is a directory.
#[test]
fn a_directory_is_named_as_one() {
    let dir = std::env::temp_dir();
    for e in [
        WeightFile::open(&dir).unwrap_err(),
        WeightFile::read(&dir).unwrap_err(),
    ] {
        match &e {
            Error::Io { path, source } => {
                assert_eq!(path, &dir.display().to_string());
                assert_eq!(source.kind(), std::io::ErrorKind::IsADirectory);
                assert!(e.to_string().contains("is a directory"), "{e}");
            }
            other => panic!("expected Io, got {other:?}"),
        }
    }
}

#[test]
fn bfloat16_tensors_are_read_and_converted() {
    // bf16 of 1.5, -2.0, 0.3125, 1024.0: the upper halves of their f32 bits.
    let vals = [1.5f32, -2.0, 0.3125, 1024.0];
    let bf: Vec<u8> = vals
        .iter()
        .flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes())
        .collect();
    let nan: Vec<u8> = [0x7fc0u16, 0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let ok = vec![("w", TensorView::new(Dtype::BF16, vec![2, 2], &bf).unwrap())];
    let bytes = safetensors::tensor::serialize(ok, None).unwrap();
    let f = WeightFile::from_bytes(Path::new("bf16.safetensors"), bytes).unwrap();
    assert_eq!(f.f32_values("w", &[2, 2]).unwrap(), vals);
    let w = f.weight("w", &[2, 2], WeightFormat::F32).unwrap();
    assert_eq!(bytemuck::pod_collect_to_vec::<u8, f32>(&w.bytes), vals);
    assert!(
        w.hash.is_none(),
        "converted, never the file's bf16 bytes as f32"
    );
    let h = f.weight("w", &[2, 2], WeightFormat::F16).unwrap();
    assert_eq!(h.bytes.len(), 8);
    let bad = vec![("w", TensorView::new(Dtype::BF16, vec![2], &nan).unwrap())];
    let bytes = safetensors::tensor::serialize(bad, None).unwrap();
    let e = WeightFile::from_bytes(Path::new("nan.safetensors"), bytes).unwrap_err();
    assert!(e.to_string().contains("NaN"), "{e}");
}
