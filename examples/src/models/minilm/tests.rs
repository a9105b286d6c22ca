//! Unit tests of `minilm`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly on any unexpected result"
)]

use super::*;

#[test]
fn graph_has_one_block_of_ops_per_layer() {
    let cfg = BertConfig::all_minilm_l6_v2();
    let g = build_graph(&cfg, 2, 9).unwrap();
    let nodes = g.builder.graph.nodes();
    // Embeddings: 3 gathers, 2 adds, LayerNorm; per layer 18 ops; mean pool and normalise.
    assert_eq!(nodes.len(), 6 + 6 * 18 + 2);
    let count = |name: &str| nodes.iter().filter(|n| n.op.name() == name).count();
    assert_eq!(count("embedding"), 3);
    assert_eq!(count("softmax"), 6);
    assert_eq!(count("permute"), 6 * 4);
    assert_eq!(count("gelu"), 6);
    assert_eq!(count("layernorm"), 1 + 6 * 2);
    assert_eq!(count("matmul"), 6 * 8);
    let scores = nodes.iter().find(|n| n.label.ends_with(".scores")).unwrap();
    match scores.op {
        Op::MatMul {
            batch,
            m,
            n,
            k,
            trans_b,
            alpha,
            ..
        } => {
            assert_eq!((batch, m, n, k, trans_b), (24, 9, 9, 32, true));
            assert!((alpha - 1.0 / 32f32.sqrt()).abs() < 1e-6);
        }
        ref other => panic!("scores is {other:?}"),
    }
    assert_eq!(g.builder.graph.decl(g.embeddings).unwrap().shape, [2, 384]);
    // Every weight once per graph except the pooler: 3 + 2 + 6·16.
    assert_eq!(g.builder.weights.len(), 101);
}

#[test]
fn bad_shapes_are_errors() {
    let cfg = BertConfig::all_minilm_l6_v2();
    assert!(matches!(
        build_graph(&cfg, 0, 8),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        build_graph(&cfg, 1, 0),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        build_graph(&cfg, 1, 513),
        Err(Error::InvalidArgument(_))
    ));
    assert!(build_graph(&cfg, 1, 512).is_ok());
}

#[test]
fn config_rejects_other_activations_and_head_splits() {
    let dir = std::env::temp_dir().join(format!("tensormem-minilm-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.json");
    let write = |act: &str, heads: usize| {
        std::fs::write(
            &path,
            format!(
                r#"{{"hidden_size":384,"num_attention_heads":{heads},"num_hidden_layers":6,
                "intermediate_size":1536,"layer_norm_eps":1e-12,"vocab_size":30522,
                "max_position_embeddings":512,"type_vocab_size":2,"hidden_act":"{act}"}}"#
            ),
        )
        .unwrap();
    };
    write("gelu", 12);
    assert_eq!(
        BertConfig::open(&path).unwrap(),
        BertConfig::all_minilm_l6_v2()
    );
    write("relu", 12);
    assert!(matches!(
        BertConfig::open(&path),
        Err(Error::Malformed { .. })
    ));
    write("gelu", 7);
    assert!(matches!(
        BertConfig::open(&path),
        Err(Error::Malformed { .. })
    ));
    std::fs::write(&path, "{").unwrap();
    assert!(matches!(
        BertConfig::open(&path),
        Err(Error::Malformed { .. })
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cosine_of_known_vectors() {
    assert!((cosine(&[1.0, 0.0], &[1.0, 0.0]) - 1.0).abs() < 1e-6);
    assert!(cosine(&[1.0, 0.0], &[0.0, 2.0]).abs() < 1e-6);
    assert!((cosine(&[1.0, 1.0], &[-1.0, -1.0]) + 1.0).abs() < 1e-6);
    assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), 0.0);
}
