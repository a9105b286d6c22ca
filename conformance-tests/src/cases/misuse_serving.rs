//! Misuse of the surfaces the issue-46 campaign did not try: the paged KV cache's sequences
//! (after free, past their end, too long, wrong token sizes, a resume of a resident sequence,
//! budgets and geometries it cannot hold) and a budgeted model (budgets of zero and of
//! everything, wrong input sizes, reads of what has no storage). Each misuse is a typed error on
//! every target and leaves the cache or model as it was: what it held still reads back the same.
//! Native only: the cache's transfers and a budgeted model's swap-ins block.

use tensormem::kv::{KvCache, KvCacheConfig, KvDType, KvError, KvGeometry, Preemption, SeqId};
use tensormem::{CompileDesc, DType, Error, Graph, Op, RuntimeConfig};

use super::runtime;
use crate::{Case, CaseResult as R, Ctx, case, check, fail};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case!(
            "misuse: KV sequences after free, past their end or too long are typed errors that change nothing",
            kv_misuse,
            native_only: "the KV cache's transfers block"
        ),
        case!(
            "misuse: a budgeted model refuses zero budgets, wrong input sizes and reads without storage",
            budgeted_misuse,
            native_only: "a budgeted model's swap-ins block"
        ),
    ]
}

/// Fails unless `got` is the KV refusal `want` accepts.
fn kv_refused<T>(what: &str, got: tensormem::Result<T>, want: impl Fn(&KvError) -> bool) -> R {
    match got {
        Err(Error::Kv(e)) if want(&e) => Ok(()),
        Err(e) => Err(format!("{what}: unexpected error {e:?}")),
        Ok(_) => Err(format!("{what}: accepted")),
    }
}

/// Token `pos`'s keys and values (the same numbers for keys and values, scaled apart).
fn token(g: &KvGeometry, pos: usize) -> (Vec<f32>, Vec<f32>) {
    let n = (g.layers * g.kv_heads * g.head_dim) as usize;
    let k: Vec<f32> = (0..n)
        .map(|i| ((pos * 13 + i) % 23) as f32 * 0.1 - 1.0)
        .collect();
    let v = k.iter().map(|x| x * 0.5).collect();
    (k, v)
}

/// A sequence's block table, tokens and attention output: what a refused call must not change.
type Snapshot = (Vec<u32>, Vec<u32>, Vec<f32>);

fn snapshot(c: &KvCache, seq: SeqId) -> Result<Snapshot, String> {
    let q = vec![0.25; 4 * c.geometry().head_dim as usize];
    Ok((
        c.table(seq).map_err(fail("table"))?.to_vec(),
        c.tokens(seq).map_err(fail("tokens"))?.to_vec(),
        c.attention(seq, 1, 4, &q).map_err(fail("attention"))?,
    ))
}

async fn kv_misuse(ctx: &Ctx) -> R {
    let rt = runtime(ctx)?;
    let g = KvGeometry::new(2, 2, 8, KvDType::F16, 4, 64).map_err(|e| e.to_string())?;
    let stride = g.block_stride(rt.backend().capabilities().binding_align);
    let config = |budget| KvCacheConfig {
        geometry: g,
        budget,
        preemption: Preemption::Swap,
    };
    kv_refused(
        "a budget below one block",
        KvCache::new(&rt, config(stride - 1)),
        |e| matches!(e, KvError::BudgetBelowBlock { .. }),
    )?;
    kv_refused(
        "a geometry with no heads",
        KvGeometry::new(2, 0, 8, KvDType::F16, 4, 64).map_err(Error::from),
        |e| matches!(e, KvError::Geometry(_)),
    )?;
    let mut c = KvCache::new(&rt, config(16 * stride)).map_err(fail("KvCache::new"))?;
    let prompt: Vec<u32> = (0..10).collect();
    let kept = c.admit(&prompt, 0).map_err(fail("admit"))?.seq;
    for pos in 0..10 {
        let (k, v) = token(&g, pos);
        c.write_token(kept, pos, &k, &v)
            .map_err(fail("write_token"))?;
    }
    let before = snapshot(&c, kept)?;
    let used = c.stats().ledger.used_blocks;

    let gone = c.admit(&[7, 8, 9], 1).map_err(fail("admit"))?.seq;
    c.free(gone).map_err(fail("free"))?;
    let freed = |e: &KvError| matches!(e, KvError::FreedSequence { .. });
    kv_refused("a double free", c.free(gone), freed)?;
    kv_refused("an append after free", c.append(gone, 1), freed)?;
    kv_refused("a fork after free", c.fork(gone), freed)?;
    kv_refused("a truncate after free", c.truncate(gone, 0), freed)?;
    kv_refused("a table after free", c.table(gone), freed)?;

    kv_refused("a truncate past the end", c.truncate(kept, 11), |e| {
        matches!(e, KvError::TruncateBeyondEnd { len: 10, to: 11 })
    })?;
    kv_refused("a resume of a resident sequence", c.resume(kept), |e| {
        matches!(e, KvError::AlreadyResident { .. })
    })?;
    let long: Vec<u32> = (0..65).collect();
    kv_refused("a prompt past the maximum length", c.admit(&long, 0), |e| {
        matches!(e, KvError::TooLong { max: 64, .. })
    })?;
    let (k, v) = token(&g, 10);
    check(c.write_token(kept, 10, &k, &v).is_err(), || {
        "a write past the sequence's end was accepted".into()
    })?;
    kv_refused(
        "a token of the wrong size",
        c.write_token(kept, 0, &k[1..], &v),
        |e| matches!(e, KvError::Geometry(_)),
    )?;

    check(snapshot(&c, kept)? == before, || {
        "a refused call changed the surviving sequence".into()
    })?;
    check(c.stats().ledger.used_blocks == used, || {
        format!(
            "{} blocks used, {used} before",
            c.stats().ledger.used_blocks
        )
    })?;
    c.free(kept).map_err(fail("free"))?;
    c.release().map_err(fail("release"))?;
    rt.check_leaks().map_err(fail("leaks"))
}

async fn budgeted_misuse(ctx: &Ctx) -> R {
    let rt = ctx
        .runtime(RuntimeConfig {
            force_staging: true,
            ..RuntimeConfig::default()
        })
        .map_err(fail("runtime"))?;
    let len = 4096;
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[len]);
    let w = g.weight("w", DType::F32, &[len]);
    let add = Op::Add {
        len: len as u32,
        b_len: len as u32,
    };
    let h = g.op(add, &[x, w], &[len], "add").map_err(fail("graph"))?;
    let y = g
        .op(Op::Relu { len: len as u32 }, &[h], &[len], "relu")
        .map_err(fail("graph"))?;
    g.output(y);
    let budget = |b| CompileDesc {
        device_budget: Some(b),
        ..CompileDesc::default()
    };
    match rt.compile_with(&g, &budget(0)) {
        Err(Error::BudgetBelowWorkingSet { .. } | Error::Argument(_)) => {}
        Err(e) => return Err(format!("a zero budget: unexpected error {e:?}")),
        Ok(_) => return Err("a zero budget compiled".into()),
    }
    check(rt.device_pool().stats().allocations == 0, || {
        "the refused compile holds device memory".into()
    })?;
    // A budget of everything is no limit: the model runs as the unbudgeted one.
    let mut m = rt
        .compile_with(&g, &budget(u64::MAX))
        .map_err(fail("compile at u64::MAX"))?;
    let xs: Vec<f32> = (0..len).map(|i| (i % 9) as f32 - 4.0).collect();
    let ws: Vec<f32> = (0..len).map(|i| (i % 5) as f32 * 0.5).collect();
    m.set_weight(w, bytemuck::cast_slice(&ws))
        .map_err(fail("set_weight"))?;
    m.set_input(x, bytemuck::cast_slice(&xs))
        .map_err(fail("set_input"))?;
    check(m.set_input(x, &[0u8; 12]).is_err(), || {
        "an input of the wrong size was accepted".into()
    })?;
    check(m.set_weight(w, &[0u8; 4 * 4096 + 4]).is_err(), || {
        "a weight of the wrong size was accepted".into()
    })?;
    check(m.read_output::<f32>(h).is_err(), || {
        "an intermediate without storage was read".into()
    })?;
    m.run().map_err(fail("run"))?;
    let got: Vec<f32> = m.read_output(y).map_err(fail("read_output"))?;
    let want: Vec<f32> = xs.iter().zip(&ws).map(|(a, b)| (a + b).max(0.0)).collect();
    check(got == want, || {
        "the refused calls changed the model's inputs".into()
    })?;
    drop(m);
    rt.check_leaks().map_err(fail("leaks"))
}
