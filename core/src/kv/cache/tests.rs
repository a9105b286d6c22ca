use std::sync::Arc;

use super::*;
use crate::kv::KvDType;
use crate::kv::attention::{PagedQuery, paged_attention};
use crate::{Backend, DeviceLimits, HostBackend, HostConfig, RuntimeConfig};

fn runtime(force_staging: bool, max_block: Option<u64>) -> Runtime {
    let backend = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
    let config = RuntimeConfig {
        force_staging,
        limits: DeviceLimits {
            max_block_size: max_block,
            max_binding_size: max_block,
        },
        ..RuntimeConfig::default()
    };
    Runtime::new(backend, config).unwrap()
}

fn geometry(dtype: KvDType) -> KvGeometry {
    KvGeometry::new(2, 2, 8, dtype, 4, 256).unwrap()
}

fn cache(rt: &Runtime, dtype: KvDType, blocks: u64, preemption: Preemption) -> KvCache {
    let g = geometry(dtype);
    let stride = g.block_stride(rt.front().capabilities().binding_align);
    KvCache::new(
        rt,
        KvCacheConfig {
            geometry: g,
            budget: blocks * stride,
            preemption,
        },
    )
    .unwrap()
}

/// Keys and values of token `pos` of a sequence tagged `tag`, every layer.
fn kv(g: &KvGeometry, tag: u32, pos: usize) -> (Vec<f32>, Vec<f32>) {
    let n = (g.layers * g.kv_heads * g.head_dim) as usize;
    let f = |i: usize, s: f32| ((tag as usize * 131 + pos * 17 + i) % 23) as f32 * s - 1.0;
    (
        (0..n).map(|i| f(i, 0.09)).collect(),
        (0..n).map(|i| f(i, 0.07)).collect(),
    )
}

fn fill(c: &mut KvCache, seq: SeqId, tag: u32, from: usize) {
    let g = *c.geometry();
    for pos in from..c.tokens(seq).unwrap().len() {
        let (k, v) = kv(&g, tag, pos);
        c.write_token(seq, pos, &k, &v).unwrap();
    }
}

/// Attention of one query against `seq`, compared with the same tokens laid out on the host.
fn check_attention(c: &KvCache, seq: SeqId, tag: u32) -> Vec<f32> {
    let g = *c.geometry();
    let q: Vec<f32> = (0..4 * g.head_dim as usize)
        .map(|i| (i % 7) as f32 * 0.1 - 0.3)
        .collect();
    let got = c.attention(seq, 1, 4, &q).unwrap();
    let len = c.tokens(seq).unwrap().len();
    let bb = g.block_bytes() as usize;
    let blocks = len.div_ceil(g.block_tokens as usize);
    let mut mem = vec![0u8; blocks * bb];
    for pos in 0..len {
        let (k, v) = kv(&g, tag, pos);
        let per = (g.kv_heads * g.head_dim) as usize;
        let b = pos / g.block_tokens as usize;
        for layer in 0..g.layers as usize {
            g.layout().write_token(
                &mut mem[b * bb..][..bb],
                layer as u32,
                (pos % 4) as u32,
                &k[layer * per..][..per],
                &v[layer * per..][..per],
            );
        }
    }
    let table: Vec<u32> = (0..blocks as u32).collect();
    let query = PagedQuery {
        layer: 1,
        q_heads: 4,
        q: &q,
        table: &table,
        len,
        scale: 1.0 / (g.head_dim as f32).sqrt(),
    };
    let want = paged_attention(&g, &query, &|b| &mem[b as usize * bb..][..bb]).unwrap();
    assert_eq!(got, want);
    got
}

#[test]
fn tokens_written_through_the_cache_are_read_back_by_attention_on_every_dtype() {
    for staging in [false, true] {
        let rt = runtime(staging, None);
        for dtype in [KvDType::F32, KvDType::F16, KvDType::Int8] {
            let mut c = cache(&rt, dtype, 16, Preemption::Swap);
            let a = c.admit(&[1, 2, 3, 4, 5, 6], 0).unwrap().seq;
            fill(&mut c, a, 1, 0);
            for t in 0..5 {
                let slot = c.append(a, 10 + t).unwrap();
                assert_eq!(slot.offset as usize, (6 + t as usize) % 4);
            }
            fill(&mut c, a, 1, 6);
            check_attention(&c, a, 1);
            assert!(rt.budget().reserved() >= c.stats().device_bytes);
            c.release().unwrap();
        }
    }
}

#[test]
fn a_cache_larger_than_one_block_spans_segments_that_grow_with_use() {
    let rt = runtime(false, Some(4096));
    let g = geometry(KvDType::F32);
    let stride = g.block_stride(rt.front().capabilities().binding_align);
    let mut c = cache(&rt, KvDType::F32, 24, Preemption::Swap);
    let (per_segment, s) = c.segment_shape();
    assert_eq!(s, stride);
    assert!(per_segment as u64 * stride <= 4096);
    let a = c.admit(&(0..40).collect::<Vec<_>>(), 0).unwrap().seq;
    fill(&mut c, a, 3, 0);
    assert!(c.segments().len() >= 2, "{} segments", c.segments().len());
    check_attention(&c, a, 3);
    let b = c.admit(&(100..140).collect::<Vec<_>>(), 0).unwrap().seq;
    fill(&mut c, b, 4, 0);
    check_attention(&c, a, 3);
    check_attention(&c, b, 4);
    assert_eq!(c.stats().segments, c.segments().len());
    c.release().unwrap();
}

#[test]
fn where_the_pool_grows_tensors_in_place_the_cache_is_one_segment_that_grows() {
    for staging in [false, true] {
        let rt = runtime(staging, None);
        let g = KvGeometry::new(2, 2, 64, KvDType::F32, 4, 1024).unwrap();
        let stride = g.block_stride(rt.front().capabilities().binding_align);
        let config = KvCacheConfig {
            geometry: g,
            budget: 2048 * stride,
            preemption: Preemption::Swap,
        };
        let mut c = KvCache::new(&rt, config).unwrap();
        assert_eq!(
            c.segment_shape().0,
            2048,
            "one reservation for the whole budget"
        );
        let a = c.admit(&[1, 2, 3, 4, 5, 6], 0).unwrap().seq;
        fill(&mut c, a, 1, 0);
        let first = check_attention(&c, a, 1);
        let (handle, small) = (c.segments()[0].allocation().handle, c.stats().device_bytes);
        assert!(
            small < 2048 * stride / 4,
            "{small} bytes committed for two blocks"
        );
        for s in 0..7 {
            c.admit(&vec![s; 1024], 0).unwrap();
        }
        let grown = c.stats();
        assert_eq!((c.segments().len(), grown.segments), (1, 1));
        assert_eq!(
            c.segments()[0].allocation().handle,
            handle,
            "grown in place"
        );
        assert!(grown.device_bytes >= 1794 * stride && grown.device_bytes <= 2048 * stride);
        assert_eq!(grown.device_bytes, c.segments()[0].size());
        assert_eq!(
            check_attention(&c, a, 1),
            first,
            "the blocks kept their bytes"
        );
        c.release().unwrap();
        assert_eq!(rt.device_pool().stats().in_use, 0);
    }
}

#[test]
fn a_fork_copies_its_shared_tail_on_the_device_before_writing() {
    let rt = runtime(true, None);
    let mut c = cache(&rt, KvDType::F16, 16, Preemption::Swap);
    let a = c.admit(&[1, 2, 3, 4, 5, 6], 0).unwrap().seq;
    fill(&mut c, a, 5, 0);
    let before = check_attention(&c, a, 5);
    let b = c.fork(a).unwrap();
    c.append(b, 7).unwrap();
    // The child's copy holds the parent's first two tail tokens; its new token is its own.
    let g = *c.geometry();
    let (k, v) = kv(&g, 5, 6);
    c.write_token(b, 6, &k, &v).unwrap();
    check_attention(&c, b, 5);
    assert_eq!(
        check_attention(&c, a, 5),
        before,
        "the parent's block changed"
    );
    assert_eq!(c.stats().ledger.cow_copies, 1);
    c.release().unwrap();
}

#[test]
fn pressure_swaps_the_newest_sequence_out_and_back_bit_identical() {
    for staging in [false, true] {
        let rt = runtime(staging, None);
        let mut c = cache(&rt, KvDType::Int8, 6, Preemption::Swap);
        let a = c.admit(&(0..8).collect::<Vec<_>>(), 0).unwrap().seq;
        fill(&mut c, a, 1, 0);
        let b = c.admit(&(50..58).collect::<Vec<_>>(), 0).unwrap().seq;
        fill(&mut c, b, 2, 0);
        let b_before = check_attention(&c, b, 2);
        // `a` needs a third block and two of the six are left: it grows; then a new sequence of
        // three blocks needs more than is free, and `b`, the newest other, is swapped out.
        c.append(a, 8).unwrap();
        let d = c.admit(&(200..212).collect::<Vec<_>>(), 0).unwrap().seq;
        assert_eq!(c.take_preempted(), vec![b]);
        assert_eq!(c.state(b).unwrap(), SeqState::Swapped);
        assert!(c.stats().host_bytes > 0);
        assert!(matches!(
            c.attention(b, 0, 4, &[0.0; 32]),
            Err(crate::Error::Kv(KvError::NotResident { .. }))
        ));
        c.free(d).unwrap();
        let r = c.resume(b).unwrap();
        assert_eq!(r.cached_tokens, 8);
        assert_eq!(check_attention(&c, b, 2), b_before);
        assert_eq!(c.stats().ledger.swap_ins, 1);
        c.release().unwrap();
    }
}

#[test]
fn a_swap_goes_over_the_transfer_lane_and_restores_blocks_others_overwrote() {
    for (host_visible_copies, staging) in [(true, false), (true, true), (false, false)] {
        let backend = Arc::new(
            HostBackend::new(HostConfig {
                host_visible_copies,
                ..HostConfig::default()
            })
            .unwrap(),
        );
        let config = RuntimeConfig {
            force_staging: staging,
            ..RuntimeConfig::default()
        };
        let rt = Runtime::new(backend, config).unwrap();
        let lane = crate::backend::lanes::of(rt.backend().as_ref());
        let mut c = cache(&rt, KvDType::F16, 4, Preemption::Swap);
        // Three tokens: the sequence's one block is not full, so it is never cached and
        // every byte comes back from the host copy.
        let b = c.admit(&[7, 8, 9], 0).unwrap().seq;
        fill(&mut c, b, 2, 0);
        let before = check_attention(&c, b, 2);
        let issued = lane.transfer_completed().unwrap();
        c.preempt(b).unwrap();
        rt.synchronize().unwrap();
        assert!(
            lane.transfer_completed().unwrap() > issued,
            "the swap-out copied on the transfer lane"
        );
        assert_eq!(c.stats().host_bytes, c.segment_shape().1);
        // Another sequence takes and overwrites every block.
        let d = c.admit(&(100..116).collect::<Vec<_>>(), 0).unwrap().seq;
        fill(&mut c, d, 3, 0);
        c.free(d).unwrap();
        let e = c.admit(&(200..216).collect::<Vec<_>>(), 0).unwrap().seq;
        fill(&mut c, e, 4, 0);
        c.free(e).unwrap();
        c.resume(b).unwrap();
        assert_eq!(c.stats().host_bytes, 0);
        // A sequence with no tokens swaps nothing and comes back empty.
        let empty = c.admit(&[], 0).unwrap().seq;
        c.preempt(empty).unwrap();
        assert_eq!(c.stats().host_bytes, 0);
        c.resume(empty).unwrap();
        assert!(c.table(empty).unwrap().is_empty());
        c.free(empty).unwrap();
        assert_eq!(
            check_attention(&c, b, 2),
            before,
            "host_visible_copies {host_visible_copies}, staging {staging}"
        );
        c.release().unwrap();
    }
}

#[test]
fn recomputation_drops_blocks_and_readmits_the_tokens_with_prefix_hits() {
    let rt = runtime(false, None);
    let mut c = cache(&rt, KvDType::F32, 5, Preemption::Recompute);
    let a = c.admit(&(0..9).collect::<Vec<_>>(), 0).unwrap().seq;
    fill(&mut c, a, 1, 0);
    c.preempt(a).unwrap();
    assert_eq!(c.state(a).unwrap(), SeqState::Dropped);
    let r = c.resume(a).unwrap();
    // Its two full blocks were still cached.
    assert_eq!(r.cached_tokens, 8);
    fill(&mut c, a, 1, r.cached_tokens);
    check_attention(&c, a, 1);
    c.release().unwrap();
}

#[test]
fn bad_configurations_and_sequences_are_typed_errors() {
    let rt = runtime(false, Some(1024));
    let g = geometry(KvDType::F32);
    let too_small = KvCache::new(
        &rt,
        KvCacheConfig {
            geometry: g,
            budget: 16,
            preemption: Preemption::Swap,
        },
    );
    assert!(matches!(
        too_small,
        Err(crate::Error::Kv(KvError::BudgetBelowBlock { .. }))
    ));
    let big = KvGeometry::new(8, 8, 64, KvDType::F32, 16, 64).unwrap();
    let too_big = KvCache::new(
        &rt,
        KvCacheConfig {
            geometry: big,
            budget: 1 << 30,
            preemption: Preemption::Swap,
        },
    );
    assert!(matches!(
        too_big,
        Err(crate::Error::Kv(KvError::Geometry(_)))
    ));
    let mut c = cache(&rt, KvDType::F32, 4, Preemption::Swap);
    // One sequence alone cannot preempt itself: out of blocks, nothing changed.
    let a = c.admit(&(0..16).collect::<Vec<_>>(), 0).unwrap().seq;
    assert!(matches!(
        c.append(a, 1),
        Err(crate::Error::Kv(KvError::OutOfBlocks { .. }))
    ));
    assert_eq!(c.tokens(a).unwrap().len(), 16);
    assert!(c.write_token(a, 16, &[0.0; 32], &[0.0; 32]).is_err());
    assert!(c.write_token(a, 0, &[0.0; 3], &[0.0; 3]).is_err());
    c.free(a).unwrap();
    assert!(matches!(
        c.free(a),
        Err(crate::Error::Kv(KvError::FreedSequence { .. }))
    ));
    let t = c.block_tables(&[]).unwrap();
    rt.free(t).unwrap();
    c.release().unwrap();
}

#[test]
fn block_tables_are_one_u32_tensor_padded_per_batch() {
    let rt = runtime(false, None);
    let mut c = cache(&rt, KvDType::F32, 16, Preemption::Swap);
    let a = c.admit(&(0..9).collect::<Vec<_>>(), 0).unwrap().seq;
    let b = c.admit(&(0..2).collect::<Vec<_>>(), 1).unwrap().seq;
    let t = c.block_tables(&[a, b]).unwrap();
    // The longest table (3 blocks) rounded up to a power of two.
    assert_eq!(t.shape(), &[2, 4]);
    let v: Vec<u32> = rt.download(&t).unwrap();
    assert_eq!(&v[..3], c.table(a).unwrap());
    assert_eq!(v[3], u32::MAX);
    assert_eq!(
        &v[4..],
        &[c.table(b).unwrap()[0], u32::MAX, u32::MAX, u32::MAX]
    );
    // Blocks are handed out in address order, older segments first.
    assert_eq!(c.table(a).unwrap(), &[0, 1, 2]);
    rt.free(t).unwrap();
    // A fourth block keeps the width; a fifth doubles it.
    for (tok, width) in [(12u32, 4usize), (16, 8)] {
        while c.tokens(a).unwrap().len() < tok as usize + 1 {
            c.append(a, tok).unwrap();
        }
        let (_, shape) = c.block_table_rows(&[a, b]).unwrap();
        assert_eq!(shape, [2, width]);
    }
    c.release().unwrap();
}

#[test]
fn a_traced_cache_records_its_blocks_as_a_lane() {
    let rt = runtime(false, None);
    let tracer = crate::Tracer::new();
    rt.set_tracer(Some(tracer.clone()));
    let mut c = cache(&rt, KvDType::F32, 6, Preemption::Swap);
    let a = c.admit(&(0..8).collect::<Vec<_>>(), 0).unwrap().seq;
    // Appends inside the last block change only the tokens: no new event.
    let before = tracer.snapshot().events.len();
    c.append(a, 8).unwrap(); // a third block
    c.append(a, 9).unwrap(); // same block
    let lanes = |t: &crate::Tracer| {
        t.snapshot()
            .events
            .into_iter()
            .filter_map(|e| match e.kind {
                crate::trace::EventKind::Kv { used, tokens, .. } => Some((used, tokens)),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(lanes(&tracer), vec![(2, 8), (3, 9)]);
    assert!(tracer.snapshot().events.len() > before);
    let b = c.admit(&(0..8).collect::<Vec<_>>(), 0).unwrap().seq;
    c.free(b).unwrap();
    let trace = tracer.snapshot();
    let kv = trace.kv_summary().unwrap();
    assert_eq!(
        (kv.peak_used, kv.hits),
        (4, 1),
        "the second prompt hit its first block"
    );
    let json = trace.to_chrome_json();
    assert!(json.contains("\"kv cache\"") && json.contains("\"blocks\""));
    let back = crate::trace::Trace::from_json(&json, "mem").unwrap();
    assert_eq!(back.kv_summary(), Some(kv));
    assert!(trace.to_html("t").contains("kv cache (peak 4 blocks used"));
    c.release().unwrap();
}
