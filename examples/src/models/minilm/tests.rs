//! Unit tests of `minilm`.

use super::*;
use tensormem::Op;

#[test]
fn graph_has_one_block_of_ops_per_layer() {
    let cfg = BertConfig::all_minilm_l6_v2();
    let g = build_graph(&cfg, 2, 9, WeightFormat::F32).unwrap();
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
        build_graph(&cfg, 0, 8, WeightFormat::F32),
        Err(Error::Argument(tensormem::ArgumentError::Zero { .. }))
    ));
    assert!(matches!(
        build_graph(&cfg, 1, 0, WeightFormat::F32),
        Err(Error::Argument(tensormem::ArgumentError::Zero { .. }))
    ));
    assert!(matches!(
        build_graph(&cfg, 1, 513, WeightFormat::F32),
        Err(Error::Argument(tensormem::ArgumentError::TooMany {
            count: 513,
            limit: 512,
            ..
        }))
    ));
    assert!(build_graph(&cfg, 1, 512, WeightFormat::F32).is_ok());
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

#[test]
fn cosine_matrix_compares_every_pair_in_order() {
    let m = cosine_matrix(&[vec![1.0, 0.0], vec![0.0, 3.0], vec![2.0, 2.0]]);
    let half = std::f32::consts::FRAC_1_SQRT_2;
    let want = [[1.0, 0.0, half], [0.0, 1.0, half], [half, half, 1.0]];
    assert_eq!(m.len(), 3);
    for (row, want) in m.iter().zip(want) {
        assert_eq!(row.len(), 3);
        for (got, want) in row.iter().zip(want) {
            assert!((got - want).abs() < 1e-6, "{m:?}");
        }
    }
}

/// A 1-layer BERT small enough to write by hand.
fn tiny_cfg() -> BertConfig {
    BertConfig {
        hidden_size: 4,
        num_attention_heads: 2,
        num_hidden_layers: 1,
        intermediate_size: 8,
        layer_norm_eps: 1e-12,
        vocab_size: 10,
        max_position_embeddings: 8,
        type_vocab_size: 2,
        hidden_act: "gelu".into(),
    }
}

/// A weight file with every tensor `cfg`'s graph declares (built for `file_layers` layers) plus
/// the pooler, all zeros.
fn weights_for(cfg: &BertConfig, file_layers: usize) -> WeightFile {
    use safetensors::tensor::TensorView;
    let file_cfg = BertConfig {
        num_hidden_layers: file_layers,
        ..cfg.clone()
    };
    let mut slots: Vec<(String, Vec<usize>)> = build_graph(&file_cfg, 1, 1, WeightFormat::F32)
        .unwrap()
        .builder
        .weights
        .iter()
        .map(|w| (w.name.clone(), w.shape.clone()))
        .collect();
    slots.push(("pooler.dense.bias".into(), vec![cfg.hidden_size]));
    let data: Vec<Vec<u8>> = slots
        .iter()
        .map(|(_, shape)| vec![0u8; 4 * shape.iter().product::<usize>()])
        .collect();
    let views: Vec<(&str, TensorView<'_>)> = slots
        .iter()
        .zip(&data)
        .map(|((n, shape), d)| {
            (
                n.as_str(),
                TensorView::new(safetensors::Dtype::F32, shape.clone(), d).unwrap(),
            )
        })
        .collect();
    let bytes = safetensors::tensor::serialize(views, None).unwrap();
    WeightFile::from_bytes(Path::new("tiny.safetensors"), bytes).unwrap()
}

#[test]
fn weights_matching_the_config_pass() {
    let cfg = tiny_cfg();
    check_weights_match(&cfg, &weights_for(&cfg, 1)).unwrap();
}

/// Regression for issue 18: a config with fewer layers than the weights ran and ignored the rest.
#[test]
fn layer_counts_that_disagree_with_the_weights_are_refused() {
    let cfg = tiny_cfg();
    match check_weights_match(&cfg, &weights_for(&cfg, 3)) {
        Err(Error::Malformed { message, .. }) => assert!(
            message.contains("hold 3 encoder layers but config.json says num_hidden_layers = 1"),
            "{message}"
        ),
        other => panic!("expected Malformed, got {other:?}"),
    }
    let more = BertConfig {
        num_hidden_layers: 2,
        ..tiny_cfg()
    };
    match check_weights_match(&more, &weights_for(&cfg, 1)) {
        Err(Error::Malformed { message, .. }) => {
            assert!(message.contains("encoder.layer.1."), "{message}");
        }
        other => panic!("expected Malformed for a missing layer, got {other:?}"),
    }
    let wider = BertConfig {
        hidden_size: 6,
        num_attention_heads: 3,
        ..tiny_cfg()
    };
    assert!(matches!(
        check_weights_match(&wider, &weights_for(&cfg, 1)),
        Err(Error::SizeMismatch { .. })
    ));
}

/// Regression for issue 18: a negative `layer_norm_eps` ran and produced NaN.
#[test]
fn config_checks_name_the_field() {
    let bad = |f: fn(&mut BertConfig)| {
        let mut c = tiny_cfg();
        f(&mut c);
        c.check().unwrap_err()
    };
    assert!(bad(|c| c.layer_norm_eps = -1e-12).contains("layer_norm_eps"));
    assert!(bad(|c| c.layer_norm_eps = 0.0).contains("layer_norm_eps"));
    assert!(bad(|c| c.layer_norm_eps = f32::NAN).contains("layer_norm_eps"));
    assert!(bad(|c| c.num_hidden_layers = 0).contains("num_hidden_layers is 0"));
    assert!(bad(|c| c.num_attention_heads = 3).contains("not a multiple"));
    assert!(bad(|c| c.hidden_act = "relu".into()).contains("hidden_act"));
    tiny_cfg().check().unwrap();
    BertConfig::all_minilm_l6_v2().check().unwrap();
}

/// Regression for issue 18: a token id beyond the vocabulary became a silent zero row.
#[test]
fn ids_outside_their_tables_are_refused() {
    let cfg = tiny_cfg();
    let ok = super::super::tokenize::pad_batch(&[vec![1, 2, 3], vec![4, 5]]);
    check_ids(&cfg, &ok).unwrap();
    let bad = super::super::tokenize::pad_batch(&[vec![1, 2, 3], vec![4, 10]]);
    let e = check_ids(&cfg, &bad).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(
            e,
            Error::Argument(tensormem::ArgumentError::OutOfRange {
                index: 10,
                len: 10,
                ..
            })
        ),
        "{msg}"
    );
    assert!(
        msg.contains("(sentence 1, token 1;") && msg.contains("vocab_size"),
        "{msg}"
    );
}

#[test]
fn chunked_attention_repeats_the_chain_per_chunk_and_keeps_the_rest() {
    let cfg = BertConfig::all_minilm_l6_v2();
    let one = build_graph(&cfg, 4, 9, WeightFormat::F32).unwrap();
    let same = build_graph_chunked(&cfg, 4, 9, WeightFormat::F32, 1).unwrap();
    let labels = |g: &MiniLmGraph| -> Vec<String> {
        g.builder
            .graph
            .nodes()
            .iter()
            .map(|n| n.label.clone())
            .collect()
    };
    assert_eq!(
        labels(&one),
        labels(&same),
        "one chunk is the untiled graph"
    );
    for chunks in [2u32, 4] {
        let g = build_graph_chunked(&cfg, 4, 9, WeightFormat::F32, chunks).unwrap();
        let nodes = g.builder.graph.nodes();
        let c = chunks as usize;
        // The attention block from the q/k/v projections to the head merge: 10 ops per chunk.
        assert_eq!(nodes.len(), 6 + 6 * (18 + 10 * (c - 1)) + 2);
        let count = |name: &str| nodes.iter().filter(|n| n.op.name() == name).count();
        assert_eq!(count("softmax"), 6 * c);
        assert_eq!(count("matmul"), 6 * (3 + 5 * c));
        let probs = nodes
            .iter()
            .find(|n| n.label == "encoder.layer.0.probs.part1")
            .unwrap();
        match probs.op {
            Op::Softmax {
                rows,
                rows_per_mask,
                ..
            } => assert_eq!((rows, rows_per_mask), (4 / chunks * 12 * 9, 12 * 9)),
            ref other => panic!("probs is {other:?}"),
        }
        // The chunk's mask is its sentences' rows of the input.
        let mask = g.builder.graph.decl(probs.inputs[1]).unwrap();
        assert_eq!(g.builder.graph.root(probs.inputs[1]), g.mask);
        assert_eq!(mask.offset, u64::from(4 / chunks) * 9 * 4);
        assert_eq!(g.builder.weights.len(), one.builder.weights.len());
    }
    for bad in [0u32, 3, 8] {
        assert!(matches!(
            build_graph_chunked(&cfg, 4, 9, WeightFormat::F32, bad),
            Err(Error::Argument(tensormem::ArgumentError::Invalid { .. }))
        ));
    }
    assert_eq!(attention_chunk_counts(8), [1, 2, 4, 8]);
    assert_eq!(attention_chunk_counts(6), [1, 2, 3, 6]);
}

#[test]
fn attention_chunks_parse_auto_or_a_count() {
    assert_eq!(AttentionChunks::parse("auto"), Ok(AttentionChunks::Auto));
    assert_eq!(AttentionChunks::parse("4"), Ok(AttentionChunks::Fixed(4)));
    assert!(AttentionChunks::parse("0").is_err());
    assert!(AttentionChunks::parse("-1").is_err());
    assert!(AttentionChunks::parse("many").is_err());
}

#[test]
fn tiled_feed_forward_repeats_the_block_per_chunk_and_refuses_inexact_counts() {
    let cfg = BertConfig::all_minilm_l6_v2();
    // 4 sentences of 128 tokens: 512 rows. output.dense's k (1536) runs the whole product on the
    // host's sgemm; chunks of 32 rows run on its dot kernel (on any CPU) and round differently.
    let (batch, seq) = (4, 128);
    let one = build_graph(&cfg, batch, seq, WeightFormat::F32).unwrap();
    let base = one.builder.graph.nodes().len();
    let tiled = |ffn: u32| {
        let tiling = Tiling {
            attention: 1,
            ffn,
            staged: false,
        };
        build_graph_tiled(&cfg, batch, seq, WeightFormat::F32, tiling)
    };
    let g = tiled(2).unwrap();
    let nodes = g.builder.graph.nodes();
    assert_eq!(nodes.len(), base + 6 * 5);
    let count = |name: &str| nodes.iter().filter(|n| n.op.name() == name).count();
    assert_eq!(count("gelu"), 6 * 2);
    let gelu = nodes
        .iter()
        .find(|n| n.label == "encoder.layer.3.gelu.part1")
        .unwrap();
    assert_eq!(gelu.op, Op::Gelu { len: 256 * 1536 });
    // The block's output is written into views of the layer's output, read by the next layer.
    let norm = nodes
        .iter()
        .find(|n| n.label == "encoder.layer.3.output.LayerNorm.part1")
        .unwrap();
    let out = g.builder.graph.decl(norm.output).unwrap();
    assert_eq!(out.offset, 256 * 384 * 4);
    assert_eq!(g.builder.weights.len(), one.builder.weights.len());
    for bad in [0u32, 3, 16] {
        assert!(
            matches!(tiled(bad), Err(Error::Argument(_) | Error::Graph(_))),
            "{bad} chunks"
        );
    }
    assert_eq!(ffn_chunk_counts(2, 3), [1, 2, 3, 6]);
}
