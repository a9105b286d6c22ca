//! all-MiniLM-L6-v2 end to end on every available backend, against the sentence-transformers
//! reference values of `shared/notes/models.md` (1e-5 absolute on the normalised embedding).
//!
//! Needs the model cache filled by `scripts/fetch_minilm.sh` (CI runs it first). Without it every
//! test prints why it is skipped and returns.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::excessive_precision,
    reason = "tests fail loudly on any unexpected result; reference values are kept verbatim as published in the note"
)]

#[path = "support/backends.rs"]
mod backends;
#[path = "support/close.rs"]
mod close;
#[path = "support/minilm_cache.rs"]
mod minilm_cache;
use close::assert_within;

use std::path::PathBuf;

use tensormem_examples::models::minilm::{self, BertConfig, MiniLm};
use tensormem_examples::models::report::blocks_allocated;
use tensormem_examples::models::weights::WeightFile;

const S1: &str = "Hello world! This is a test of the memory runtime.";
const S2: &str = "A man is eating food.";
const S1_IDS: [u32; 15] = [
    101, 7592, 2088, 999, 2023, 2003, 1037, 3231, 1997, 1996, 3638, 2448, 7292, 1012, 102,
];
const S2_IDS: [u32; 8] = [101, 1037, 2158, 2003, 5983, 2833, 1012, 102];
const S1_EMB: [f32; 8] = [
    0.043055, 0.011616, -0.073512, 0.077431, -0.007730, -0.127286, -0.030507, -0.029445,
];
const S2_EMB: [f32; 8] = [
    0.033242, 0.004406, -0.006277, 0.048379, -0.138702, -0.033617, 0.101128, -0.054385,
];
const TOL: f32 = 1e-5;

fn model_dir() -> Option<PathBuf> {
    minilm_cache::model_dir("minilm")
}

/// The host backend, as the samples select it, with staging forced.
fn staged_host() -> tensormem::Runtime {
    let host = tensormem_examples::backend_select::select(
        tensormem_examples::backend_select::BackendChoice::Host,
        &tensormem_examples::backend_select::SelectOptions::default(),
    )
    .unwrap()
    .backend;
    let staging = tensormem::RuntimeConfig {
        force_staging: true,
        ..tensormem::RuntimeConfig::default()
    };
    tensormem::Runtime::new(host, staging).unwrap()
}

fn assert_prefix(backend: &str, what: &str, got: &[f32], want: &[f32]) {
    assert_within(backend, what, "embedding", got, want, TOL);
}

#[test]
fn embeddings_match_reference_on_every_backend() {
    let Some(dir) = model_dir() else { return };
    for (name, rt) in backends::available_runtimes() {
        let mut model = MiniLm::open(&rt, &dir).unwrap();
        let one = model.embed(&[S1]).unwrap();
        assert_eq!(one.tokens.ids, S1_IDS, "{name}: token ids");
        assert_eq!(one.vectors[0].len(), 384);
        assert_prefix(name, "sentence 1", &one.vectors[0], &S1_EMB);
        let norm: f32 = one.vectors[0].iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{name}: norm {norm}");

        let two = model.embed(&[S2]).unwrap();
        assert_eq!(two.tokens.ids, S2_IDS, "{name}: token ids");
        assert_prefix(name, "sentence 2", &two.vectors[0], &S2_EMB);

        // The padded batch (S2 padded from 8 to 15 tokens) embeds each sentence as alone.
        let both = model.embed(&[S1, S2]).unwrap();
        assert_eq!((both.tokens.batch, both.tokens.seq), (2, 15));
        assert_eq!(
            &both.tokens.mask[15..30],
            &[[1.0f32; 8].as_slice(), &[0.0; 7]].concat()[..]
        );
        for (got, alone) in both.vectors.iter().zip([&one.vectors[0], &two.vectors[0]]) {
            for (i, (g, a)) in got.iter().zip(alone.iter()).enumerate() {
                assert!(
                    (g - a).abs() <= TOL,
                    "{name}: batched[{i}] {g} vs alone {a}"
                );
            }
        }

        // Steady state: the same shape again allocates no backend block.
        let before = blocks_allocated(model.cached_model(2, 15).unwrap());
        let again = model.embed(&[S1, S2]).unwrap();
        assert_eq!(again.vectors, both.vectors, "{name}: repeated run differs");
        assert_eq!(
            blocks_allocated(model.cached_model(2, 15).unwrap()),
            before,
            "{name}: a repeated run allocated a backend block"
        );
        println!("RAN backend {name}");
    }
}

#[test]
fn graph_reads_every_encoder_weight_of_the_file() {
    let Some(dir) = model_dir() else { return };
    let cfg = BertConfig::open(&dir.join("config.json")).unwrap();
    assert_eq!(cfg, BertConfig::all_minilm_l6_v2());
    let file = WeightFile::open(&dir.join("model.safetensors")).unwrap();
    let graph = minilm::build_graph(&cfg, 1, 8, tensormem::WeightFormat::F32).unwrap();
    let mut declared: Vec<&str> = graph
        .builder
        .weights
        .iter()
        .map(|w| w.name.as_str())
        .collect();
    declared.sort_unstable();
    declared.dedup();
    assert_eq!(
        declared.len(),
        graph.builder.weights.len(),
        "a weight is declared twice"
    );
    // 103 f32 tensors in the file (the I64 position_ids buffer is skipped); the two pooler
    // tensors are not part of sentence embeddings.
    assert_eq!(file.len(), 103);
    assert_eq!(declared.len(), 101);
    assert!(declared.iter().all(|n| !n.starts_with("pooler.")));
    for w in &graph.builder.weights {
        file.f32_bytes(&w.name, &w.shape).unwrap();
    }
}

/// Issue 17: MiniLM compiled at three shapes holds its weights once. Measured in device bytes:
/// the three shapes on one runtime take what each takes alone, minus two copies of the weights.
#[test]
fn three_shapes_hold_the_weights_once() {
    let Some(dir) = model_dir() else { return };
    let host = || {
        backends::available_runtimes()
            .into_iter()
            .find(|(n, _)| *n == "host")
            .unwrap()
            .1
    };
    let shapes = [(1, 8), (2, 15), (3, 32)];
    let in_use = |rt: &tensormem::Runtime| rt.device_pool().stats().in_use;
    let alone: Vec<u64> = shapes
        .iter()
        .map(|&(b, s)| {
            let rt = host();
            let mut model = MiniLm::open(&rt, &dir).unwrap();
            model.model_for(b, s).unwrap();
            in_use(&rt)
        })
        .collect();
    let rt = host();
    let mut model = MiniLm::open(&rt, &dir).unwrap();
    for &(b, s) in &shapes {
        model.model_for(b, s).unwrap();
    }
    let report = model.cached_model(1, 8).unwrap().memory_report();
    let store = &report.weight_store;
    // 22,713,728 elements minus the unused I64 position ids and the pooler: 22,565,376 f32.
    assert_eq!(report.weight_bytes, 22_565_376 * 4);
    assert_eq!(store.bytes, report.weight_bytes, "each weight held once");
    assert_eq!(store.tensors, 101);
    assert_eq!(store.references, 3 * 101);
    assert_eq!(
        in_use(&rt),
        alone.iter().sum::<u64>() - 2 * store.bytes,
        "device bytes of three shapes"
    );
    println!(
        "three shapes: {} device bytes, alone {:?}, weights {} once",
        in_use(&rt),
        alone,
        store.bytes
    );
}

/// Issue 17: MiniLM with f16, int8 and int8-dynamic weights on every backend: each embedding has
/// a cosine of at least 0.995 to the f32 one, the sentence-similarity ordering is unchanged, and
/// the weights take at most 0.51x (f16) and 0.27x (int8, either kind) the f32 bytes on the
/// device.
#[test]
fn quantized_weights_keep_the_embeddings_on_every_backend() {
    use tensormem::WeightFormat;
    let Some(dir) = model_dir() else { return };
    let sentences = [
        S1,
        S2,
        "A man is eating a piece of bread.",
        "The new movie is awesome.",
        "A man is playing a guitar.",
    ];
    let order = |v: &[Vec<f32>]| {
        let mut pairs = Vec::new();
        for i in 0..v.len() {
            for j in i + 1..v.len() {
                pairs.push(((i, j), minilm::cosine(&v[i], &v[j])));
            }
        }
        pairs.sort_by(|a, b| b.1.total_cmp(&a.1));
        pairs.into_iter().map(|(p, _)| p).collect::<Vec<_>>()
    };
    for (name, rt) in backends::available_runtimes() {
        let mut f32_model = MiniLm::open(&rt, &dir).unwrap();
        let f32_emb = f32_model.embed(&sentences).unwrap();
        let reference = f32_emb.vectors;
        let f32_bytes = f32_model
            .cached_model(f32_emb.tokens.batch, f32_emb.tokens.seq)
            .unwrap()
            .memory_report()
            .weight_bytes;
        drop(f32_model);
        for (format, limit) in [
            (WeightFormat::F16, 0.51),
            (WeightFormat::Int8 { group: 0 }, 0.27),
            (WeightFormat::Int8Dynamic { group: 0 }, 0.27),
        ] {
            let mut model = MiniLm::open_as(&rt, &dir, format).unwrap();
            let emb = model.embed(&sentences).unwrap();
            let mut lowest = 1f32;
            for (k, (got, want)) in emb.vectors.iter().zip(&reference).enumerate() {
                let cos = minilm::cosine(got, want);
                assert!(cos >= 0.995, "{name} {format:?}: sentence {k} cosine {cos}");
                lowest = lowest.min(cos);
            }
            assert_eq!(
                order(&emb.vectors),
                order(&reference),
                "{name} {format:?}: similarity ordering changed"
            );
            let report = model
                .cached_model(emb.tokens.batch, emb.tokens.seq)
                .unwrap()
                .memory_report();
            let ratio = report.weight_bytes as f64 / f32_bytes as f64;
            assert!(
                ratio <= limit,
                "{name} {format:?}: {ratio:.4}x the f32 bytes"
            );
            println!("{name} {format:?}: weight bytes {ratio:.4}x f32, lowest cosine {lowest:.5}");
        }
    }
}

/// Issue 16: MiniLM at 30% of its unbudgeted device bytes, below the size of its 46.9 MB word
/// table, runs on every backend (and on the host's discrete path, where only the rows the ids
/// select cross to the device) with embeddings bit-identical to the unbudgeted run.
#[test]
fn budgeted_minilm_below_its_word_table_is_bit_identical() {
    use tensormem_examples::cli::DeviceBudget;
    let Some(dir) = model_dir() else {
        return;
    };
    let mut targets = backends::available_runtimes();
    targets.push(("host (staging)", staged_host()));
    for (name, rt) in targets {
        let mut plain = MiniLm::open(&rt, &dir).unwrap();
        let want = plain.embed(&[S1, S2]).unwrap();
        let bits =
            |v: &[Vec<f32>]| -> Vec<u32> { v.iter().flatten().map(|x| x.to_bits()).collect() };
        drop(plain);
        let mut model = MiniLm::open(&rt, &dir).unwrap();
        model.set_device_budget(Some(DeviceBudget::Percent(30.0)));
        for _ in 0..2 {
            let got = model.embed(&[S1, S2]).unwrap();
            assert_eq!(bits(&got.vectors), bits(&want.vectors), "{name}");
        }
        let (batch, seq) = (want.tokens.batch, want.tokens.seq);
        let r = model.cached_model(batch, seq).unwrap().memory_report();
        let o = r.offload.clone().unwrap();
        let table = 30522 * 384 * 4;
        assert!(
            o.budget < table,
            "{name}: {} is not below the table",
            o.budget
        );
        assert!(r.peak_device_bytes <= o.budget, "{name}: {r:?}");
        if !o.unified {
            assert!(
                o.bytes_to_device / r.runs < table,
                "{name}: the word table is not streamed whole: {o:?}"
            );
        }
    }
}

/// Issue 16: MiniLM with its attention in 2 and 8 chunks gives the unchunked embeddings bit
/// for bit on every backend, or, where a chunk's view of the mask (one 64-byte row per sentence
/// at sequence 16) is off the device's binding alignment, a clear `Misaligned` error.
#[test]
fn chunked_attention_is_bit_identical_on_every_backend() {
    use tensormem_examples::models::minilm::AttentionChunks;
    use tensormem_examples::models::offload_table::token_batch;
    let Some(dir) = model_dir() else { return };
    let (batch, seq) = (8, 16);
    for (name, rt) in backends::available_runtimes() {
        let align = rt.backend().capabilities().binding_align;
        let mut model = MiniLm::open(&rt, &dir).unwrap();
        let tokens = token_batch(&model, batch, seq).unwrap();
        let embed = |model: &mut MiniLm| -> tensormem::Result<Vec<u32>> {
            model.set_tokens(&tokens)?;
            model.run(batch, seq)?;
            let v = model.read_embeddings(batch, seq)?;
            Ok(v.iter().flatten().map(|x| x.to_bits()).collect())
        };
        model.set_attention_chunks(AttentionChunks::Fixed(1));
        let want = embed(&mut model).unwrap();
        for chunks in [2u32, 8] {
            model.set_attention_chunks(AttentionChunks::Fixed(chunks));
            let mask_offset = (batch as u64 / u64::from(chunks)) * seq as u64 * 4;
            match embed(&mut model) {
                Ok(got) => {
                    assert_eq!(got, want, "{name}: {chunks} chunks");
                    assert_eq!(model.attention_chunks(batch, seq), Some(chunks));
                }
                Err(tensormem::Error::Misaligned {
                    value,
                    align: a,
                    align_name: "binding_align",
                    ..
                }) => {
                    assert_eq!(a, align, "{name}");
                    assert!(
                        !mask_offset.is_multiple_of(align) && value % align != 0,
                        "{name}: {chunks} chunks refused at {value}"
                    );
                }
                Err(e) => panic!("{name}: {chunks} chunks: {e}"),
            }
        }
        println!("RAN {name}: chunked attention bit-identical (binding_align {align})");
    }
}

/// Issue 45: MiniLM at batch 8 x sequence 128 within 10% of its unbudgeted device bytes, on the
/// host with every copy staged as on a discrete device: the automatic tiling splits the
/// feed-forward blocks by rows (their gelu alone needs more than the budget), and the embeddings
/// equal the unbudgeted run's bit for bit, twice.
#[test]
fn minilm_at_ten_percent_tiles_its_feed_forward_blocks_bit_identically() {
    use tensormem_examples::cli::DeviceBudget;
    use tensormem_examples::models::offload_table::token_batch;
    let Some(dir) = model_dir() else { return };
    let rt = staged_host();
    let (batch, seq) = (8, 128);
    let embed = |model: &mut MiniLm| -> Vec<u32> {
        let tokens = token_batch(model, batch, seq).unwrap();
        model.set_tokens(&tokens).unwrap();
        model.run(batch, seq).unwrap();
        let v = model.read_embeddings(batch, seq).unwrap();
        v.iter().flatten().map(|x| x.to_bits()).collect()
    };
    let want = embed(&mut MiniLm::open(&rt, &dir).unwrap());
    let mut model = MiniLm::open(&rt, &dir).unwrap();
    model.set_device_budget(Some(DeviceBudget::Percent(10.0)));
    for run in 0..2 {
        assert_eq!(embed(&mut model), want, "run {run}");
    }
    let tiling = model.tiling(batch, seq).unwrap();
    assert!(tiling.ffn > 1, "{tiling:?}");
    let r = model.cached_model(batch, seq).unwrap().memory_report();
    let o = r.offload.clone().unwrap();
    assert!(r.peak_device_bytes <= o.budget, "{r:?}");
    println!(
        "10%: {tiling:?}, peak {} of {}",
        r.peak_device_bytes, o.budget
    );
}

/// Issue 20: the model split across two devices (balanced by weight bytes, and cut at the middle
/// node) gives the single device's embeddings bit for bit, on two host devices and on two
/// lavapipe devices (two Vulkan instances on the one adapter), and each device reports its peak.
#[test]
fn two_devices_equal_one_device_bit_for_bit() {
    use tensormem::{DeviceId, DeviceSet, Placement, Runtime, RuntimeConfig};
    use tensormem_examples::backend_select::{self, BackendChoice, SelectOptions};

    let Some(dir) = model_dir() else { return };
    for (name, choice) in [
        ("host", BackendChoice::Host),
        ("vulkan", BackendChoice::Vulkan),
    ] {
        let make = || backend_select::select(choice, &SelectOptions::default()).map(|s| s.backend);
        let first = match make() {
            Ok(b) if b.capabilities().backend == name => b,
            Ok(b) => {
                println!(
                    "SKIP {name}: selection fell back to {}",
                    b.capabilities().backend
                );
                continue;
            }
            Err(e) => {
                println!("SKIP {name}: {e}");
                continue;
            }
        };
        let rt = Runtime::new(first, RuntimeConfig::default()).unwrap();
        let mut one = MiniLm::open(&rt, &dir).unwrap();
        let want = one.embed(&[S1, S2]).unwrap();
        drop(one);
        drop(rt);

        let set = DeviceSet::new(
            vec![make().unwrap(), make().unwrap()],
            RuntimeConfig::default(),
        )
        .unwrap();
        let model = MiniLm::open(set.device(DeviceId(0)).unwrap(), &dir).unwrap();
        let graph =
            minilm::build_graph(model.config(), 2, 15, tensormem::WeightFormat::F32).unwrap();
        let half = graph.builder.graph.nodes().len() / 2;
        let middle =
            Placement::from_fn(&graph.builder.graph, |i, _| DeviceId(u32::from(i >= half)));
        for (how, placement) in [
            ("balanced", Placement::BalancedByWeights),
            ("middle", middle),
        ] {
            let (got, placed) = model.embed_placed(&set, &placement, &[S1, S2]).unwrap();
            assert_eq!(got.tokens.ids, want.tokens.ids);
            for (g, w) in got.vectors.iter().zip(&want.vectors) {
                let differ = g
                    .iter()
                    .zip(w)
                    .filter(|(a, b)| a.to_bits() != b.to_bits())
                    .count();
                assert_eq!(
                    differ, 0,
                    "{name} {how}: {differ} values differ from one device"
                );
            }
            let report = placed.model.report();
            assert_eq!(report.stages.len(), 2, "{name} {how}");
            assert!(report.transfer_bytes_per_run > 0);
            for d in &report.devices {
                assert!(d.nodes > 0 && d.peak_reserved > 0, "{name} {how}: {d:?}");
            }
        }
        println!("RAN {name}: two devices equal one bit for bit");
    }
}
