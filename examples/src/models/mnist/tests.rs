//! Unit tests of `mnist`.

use super::*;

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
    let g = build_graph(4, WeightFormat::F32).unwrap();
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
