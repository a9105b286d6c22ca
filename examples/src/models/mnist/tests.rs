//! Unit tests of `mnist`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly on any unexpected result"
)]

use super::*;

fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let p = std::env::temp_dir().join(format!("tensormem-mnist-{}-{name}", std::process::id()));
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn reads_raw_and_pgm_images() {
    let pixels: Vec<u8> = (0..PIXELS).map(|i| (i % 256) as u8).collect();
    let raw = temp_file("raw.u8", &pixels);
    assert_eq!(read_image(&raw).unwrap(), pixels);
    let mut pgm = b"P5\n28 28\n255\n".to_vec();
    pgm.extend(&pixels);
    let pgm_path = temp_file("img.pgm", &pgm);
    assert_eq!(read_image(&pgm_path).unwrap(), pixels);
    let _ = std::fs::remove_file(raw);
    let _ = std::fs::remove_file(pgm_path);
}

#[test]
fn rejects_other_sizes_and_formats() {
    let short = temp_file("short.u8", &[0u8; 100]);
    assert!(matches!(read_image(&short), Err(Error::Malformed { .. })));
    let mut pgm = b"P5 32 32 255\n".to_vec();
    pgm.extend(vec![0u8; 32 * 32]);
    let big = temp_file("big.pgm", &pgm);
    assert!(matches!(read_image(&big), Err(Error::Malformed { .. })));
    assert!(matches!(
        read_image(Path::new("/nonexistent.u8")),
        Err(Error::Io { .. })
    ));
    let _ = std::fs::remove_file(short);
    let _ = std::fs::remove_file(big);
}

#[test]
fn normalizes_like_torchvision() {
    let v = normalize(&[0, 255]);
    assert!((v[0] - (-0.1307 / 0.3081)).abs() < 1e-6);
    assert!((v[1] - ((1.0 - 0.1307) / 0.3081)).abs() < 1e-6);
}

#[test]
fn argmax_picks_the_first_largest() {
    assert_eq!(argmax(&[1.0, 3.0, 3.0, -1.0]), 1);
    assert_eq!(argmax(&[-5.0]), 0);
}

#[test]
fn graph_has_the_cnn_layers_and_weights() {
    let g = build_graph(4).unwrap();
    let names: Vec<&str> = g
        .builder
        .graph
        .nodes()
        .iter()
        .map(|n| n.op.name())
        .collect();
    assert_eq!(
        names,
        [
            "conv2d",
            "relu",
            "maxpool2d",
            "conv2d",
            "relu",
            "maxpool2d",
            "matmul",
            "relu",
            "matmul"
        ]
    );
    let params: usize = g
        .builder
        .weights
        .iter()
        .map(|w| w.shape.iter().product::<usize>())
        .sum();
    assert_eq!(params, 421_642);
    assert_eq!(g.builder.graph.decl(g.logits).unwrap().shape, [4, CLASSES]);
}
