//! The paged KV cache (issue 42) on every native target: tokens written through the cache read
//! back by paged attention exactly as the host layout gives them, across segments; forks copy a
//! shared tail on the device; prefixes are found again; under pressure cached prefixes are
//! evicted first and then the newest sequence is swapped out and restored bit-identical.
//! Native only: the cache's transfers block.

use tensormem::kv::attention::{PagedQuery, paged_attention};
use tensormem::kv::{KvCache, KvCacheConfig, KvDType, KvGeometry, Preemption, SeqId, SeqState};
use tensormem::{DeviceLimits, Runtime, RuntimeConfig};

use super::runtime;
use crate::{Case, CaseResult as R, Ctx, case, check, fail};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "kv: append, fork, copy-on-write and prefix hits; paged attention equals the host's",
            kv_sequences,
            native_only: "the KV cache's transfers block"
        ),
        case!(
            "kv: pressure evicts cached prefixes, then swaps the newest out and back bit-identical",
            kv_pressure,
            native_only: "the KV cache's transfers block"
        ),
        case!(
            "kv: the cache grows in place where the pool offers expandable tensors, else by segments",
            kv_growth,
            native_only: "the KV cache's transfers block"
        ),
    ]
}

/// Keys and values of token `pos` of the sequence tagged `tag`, every layer.
fn token(g: &KvGeometry, tag: u32, pos: usize) -> (Vec<f32>, Vec<f32>) {
    let n = (g.layers * g.kv_heads * g.head_dim) as usize;
    let f = |i: usize, s: f32| ((tag as usize * 37 + pos * 11 + i) % 29) as f32 * s - 1.2;
    (
        (0..n).map(|i| f(i, 0.08)).collect(),
        (0..n).map(|i| f(i, 0.05)).collect(),
    )
}

fn write(c: &mut KvCache, seq: SeqId, tag: u32, positions: std::ops::Range<usize>) -> R {
    let g = *c.geometry();
    for pos in positions {
        let (k, v) = token(&g, tag, pos);
        c.write_token(seq, pos, &k, &v)
            .map_err(fail("write_token"))?;
    }
    Ok(())
}

/// Paged attention through the cache against the same tokens laid out on the host.
fn attend(c: &KvCache, seq: SeqId, tag: u32) -> std::result::Result<Vec<f32>, String> {
    let g = *c.geometry();
    let q: Vec<f32> = (0..4 * g.head_dim as usize)
        .map(|i| (i % 5) as f32 * 0.2 - 0.4)
        .collect();
    let got = c.attention(seq, 1, 4, &q).map_err(fail("attention"))?;
    let len = c.tokens(seq).map_err(fail("tokens"))?.len();
    let (bb, bt, per) = (
        g.block_bytes() as usize,
        g.block_tokens as usize,
        (g.kv_heads * g.head_dim) as usize,
    );
    let mut mem = vec![0u8; len.div_ceil(bt) * bb];
    for pos in 0..len {
        let (k, v) = token(&g, tag, pos);
        for l in 0..g.layers as usize {
            let block = &mut mem[pos / bt * bb..][..bb];
            g.layout().write_token(
                block,
                l as u32,
                (pos % bt) as u32,
                &k[l * per..][..per],
                &v[l * per..][..per],
            );
        }
    }
    let table: Vec<u32> = (0..len.div_ceil(bt) as u32).collect();
    let scale = 1.0 / (g.head_dim as f32).sqrt();
    let query = PagedQuery {
        layer: 1,
        q_heads: 4,
        q: &q,
        table: &table,
        len,
        scale,
    };
    let want = paged_attention(&g, &query, &|b| &mem[b as usize * bb..][..bb])
        .map_err(|e| e.to_string())?;
    check(got == want, || {
        format!("paged attention differs from the host layout's: {got:?} vs {want:?}")
    })?;
    Ok(got)
}

fn cache(
    ctx: &Ctx,
    dtype: KvDType,
    blocks: u64,
    max_block: Option<u64>,
) -> std::result::Result<(Runtime, KvCache), String> {
    let limits = DeviceLimits {
        max_block_size: max_block,
        max_binding_size: max_block,
    };
    let rt = ctx
        .runtime(RuntimeConfig {
            limits,
            ..RuntimeConfig::default()
        })
        .map_err(fail("runtime"))?;
    let g = KvGeometry::new(2, 2, 8, dtype, 4, 512).map_err(|e| e.to_string())?;
    let stride = g.block_stride(rt.backend().capabilities().binding_align);
    let config = KvCacheConfig {
        geometry: g,
        budget: blocks * stride,
        preemption: Preemption::Swap,
    };
    let c = KvCache::new(&rt, config).map_err(fail("KvCache::new"))?;
    Ok((rt, c))
}

async fn kv_sequences(ctx: &Ctx) -> R {
    for dtype in [KvDType::F32, KvDType::F16, KvDType::Int8] {
        // Small device blocks: the cache spans several segments.
        let (rt, mut c) = cache(ctx, dtype, 32, Some(1024))?;
        let prompt: Vec<u32> = (0..18).collect();
        let a = c.admit(&prompt, 0).map_err(fail("admit"))?.seq;
        write(&mut c, a, 1, 0..18)?;
        for t in 0..3 {
            c.append(a, 100 + t).map_err(fail("append"))?;
        }
        write(&mut c, a, 1, 18..21)?;
        let a_before = attend(&c, a, 1)?;
        check(c.stats().segments >= 2, || {
            format!("{} segments", c.stats().segments)
        })?;
        // A fork shares every block; its first write copies the shared tail on the device.
        let b = c.fork(a).map_err(fail("fork"))?;
        c.append(b, 7).map_err(fail("append to fork"))?;
        write(&mut c, b, 1, 21..22)?;
        attend(&c, b, 1)?;
        check(attend(&c, a, 1)? == a_before, || {
            "the parent changed under its fork".into()
        })?;
        check(c.stats().ledger.cow_copies == 1, || {
            format!("{} copies", c.stats().ledger.cow_copies)
        })?;
        // The same prompt again: its four full blocks are found, the last token's block is not.
        let d = c.admit(&prompt, 0).map_err(fail("admit again"))?;
        check(d.cached_tokens == 16, || {
            format!("{} cached tokens", d.cached_tokens)
        })?;
        write(&mut c, d.seq, 1, 16..18)?;
        attend(&c, d.seq, 1)?;
        c.release().map_err(fail("release"))?;
        rt.check_leaks().map_err(fail("leaks"))?;
    }
    Ok(())
}

async fn kv_pressure(ctx: &Ctx) -> R {
    let (rt, mut c) = cache(ctx, KvDType::F16, 8, None)?;
    // A finished prompt leaves two cached blocks behind.
    let old = c
        .admit(&(500..509).collect::<Vec<_>>(), 0)
        .map_err(fail("admit"))?
        .seq;
    c.free(old).map_err(fail("free"))?;
    let a = c
        .admit(&(0..8).collect::<Vec<_>>(), 0)
        .map_err(fail("admit a"))?
        .seq;
    write(&mut c, a, 1, 0..8)?;
    let b = c
        .admit(&(50..58).collect::<Vec<_>>(), 0)
        .map_err(fail("admit b"))?
        .seq;
    write(&mut c, b, 2, 0..8)?;
    let b_before = attend(&c, b, 2)?;
    // The cache grew to six blocks (growing comes before evicting): four held, two cached idle.
    // Seventeen more tokens of `a` need five blocks: the budget's last two, then both cached
    // ones evicted, then `b`, the newest other sequence, swapped out; its two full blocks stay
    // cached until the last of them is evicted for `a`'s fifth block.
    for t in 0..17 {
        c.append(a, 900 + t).map_err(fail("append"))?;
    }
    let s = c.stats();
    check(s.ledger.evictions == 3, || {
        format!("{} evictions", s.ledger.evictions)
    })?;
    check(c.take_preempted() == vec![b], || {
        "b was not the one preempted".into()
    })?;
    check(
        c.state(b).map_err(fail("state"))? == SeqState::Swapped,
        || "b is not swapped".into(),
    )?;
    // `a` writes its new tokens, over the blocks `b` gave up: what comes back must be the copy.
    write(&mut c, a, 1, 8..25)?;
    c.free(a).map_err(fail("free a"))?;
    let r = c.resume(b).map_err(fail("resume"))?;
    check(r.cached_tokens == 8, || {
        format!("{} tokens restored", r.cached_tokens)
    })?;
    check(attend(&c, b, 2)? == b_before, || {
        "the swapped sequence came back different".into()
    })?;
    c.release().map_err(fail("release"))?;
    rt.check_leaks().map_err(fail("leaks"))?;
    Ok(())
}

/// A cache of 2,048 blocks (16 MiB) used a little, then almost whole: where the device pool
/// grows tensors in place it is one segment whose committed bytes follow the blocks and whose
/// handle never changes; elsewhere its segments are whole. The first sequence's attention is the
/// same before and after either growth.
async fn kv_growth(ctx: &Ctx) -> R {
    let rt = runtime(ctx)?;
    let g = KvGeometry::new(2, 2, 64, KvDType::F32, 4, 1024).map_err(|e| e.to_string())?;
    let stride = g.block_stride(rt.backend().capabilities().binding_align);
    let budget = 2048 * stride;
    let config = KvCacheConfig {
        geometry: g,
        budget,
        preemption: Preemption::Swap,
    };
    let mut c = KvCache::new(&rt, config).map_err(fail("KvCache::new"))?;
    let in_place = rt.device_pool().expandable().is_some();
    let a = c.admit(&[1, 2, 3, 4, 5, 6], 0).map_err(fail("admit"))?.seq;
    write(&mut c, a, 1, 0..6)?;
    let before = attend(&c, a, 1)?;
    let small = c.stats().device_bytes;
    let handle = c.segments()[0].allocation().handle;
    for s in 0..7 {
        c.admit(&vec![s; 1024], 0).map_err(fail("admit 1024"))?;
    }
    let grown = c.stats();
    if in_place {
        check(small <= budget / 4, || {
            format!("{small} of {budget} bytes committed for two blocks")
        })?;
        check(grown.segments == 1, || {
            format!("{} segments", grown.segments)
        })?;
        check(c.segments()[0].allocation().handle == handle, || {
            "the segment was not grown in place".into()
        })?;
        check(grown.device_bytes >= 1794 * stride, || {
            format!("{} bytes for 1,794 blocks", grown.device_bytes)
        })?;
    } else {
        let (per, _) = c.segment_shape();
        let whole = c.segments()[..grown.segments - 1]
            .iter()
            .all(|t| t.size() == per as u64 * stride);
        check(whole, || "a segment before the last is not whole".into())?;
    }
    check(grown.device_bytes <= budget, || {
        format!("{} bytes over the budget", grown.device_bytes)
    })?;
    check(attend(&c, a, 1)? == before, || {
        "the first sequence changed as the cache grew".into()
    })?;
    c.release().map_err(fail("release"))?;
    rt.check_leaks().map_err(fail("leaks"))?;
    Ok(())
}
