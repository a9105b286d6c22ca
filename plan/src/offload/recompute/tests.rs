use proptest::prelude::*;

use super::*;
use crate::offload::tests::check_with;
use crate::offload::{OffloadSchedule, schedule_with_recompute};

const KB: u64 = 1 << 10;

fn t(size: u64, class: TensorClass, uses: &[u64]) -> OffloadTensor {
    OffloadTensor {
        size,
        class,
        uses: uses.to_vec(),
    }
}

fn ops(n: u64, bytes: u64) -> Vec<OffloadOp> {
    (0..n)
        .map(|k| OffloadOp {
            label: format!("op{k}"),
            bytes,
        })
        .collect()
}

/// `x` (input) → op0 → `a`, read again by the last op; `b`, `c`, `d` meet at step 3 (the peak).
/// Over a budget below that peak `a` must leave: its producer's input `x` is always resident.
fn skip_graph() -> (Vec<OffloadTensor>, Vec<OffloadOp>, Recomputable) {
    let tensors = vec![
        t(64 * KB, TensorClass::Input, &[0]),
        t(512 * KB, TensorClass::Intermediate, &[0, 1, 5]),
        t(512 * KB, TensorClass::Intermediate, &[1, 3]),
        t(512 * KB, TensorClass::Intermediate, &[2, 3]),
        t(512 * KB, TensorClass::Intermediate, &[3, 4]),
        t(128 * KB, TensorClass::Output, &[4, 5]),
    ];
    let mut producers = vec![None; tensors.len()];
    producers[1] = Some(Producer {
        op: 0,
        inputs: vec![0],
    });
    (tensors, ops(6, 576 * KB), Recomputable::new(producers))
}

/// The model check every schedule with recompute must pass: device bytes at every step within
/// the budget and the placed peak; every use inside a residency; a swap-in only after a
/// copy-out; a recompute only where its producer's inputs are resident at its step; residencies
/// that overlap in time never overlap in space.
fn check(tensors: &[OffloadTensor], rc: &Recomputable, s: &OffloadSchedule, budget: u64) {
    let n = s.residencies.iter().map(|r| r.upper).max().unwrap_or(0);
    for step in 0..n {
        let live: u64 = s
            .residencies
            .iter()
            .filter(|r| r.lower <= step && step < r.upper)
            .map(|r| tensors[r.tensor].size)
            .sum();
        assert!(live <= budget, "step {step}: {live} bytes over {budget}");
    }
    check_with(tensors, s, budget, |i, k, mine| {
        let (r, tensor) = (mine[k], &tensors[i]);
        if let Arrival::Recompute { op } = r.arrival {
            let p = rc.producer(i).expect("recomputed without a producer");
            assert_eq!(p.op, op);
            if tensor.uses.contains(&r.lower) {
                assert!(
                    k > 0 && !mine[k - 1].copy_out,
                    "a dropped tensor is not copied"
                );
            } else {
                check_transient(tensors, rc, s, i, r);
            }
            for &x in &p.inputs {
                assert!(
                    resident_at(&s.residencies, x, r.lower),
                    "input {x} of {i} not resident at its re-run, step {}",
                    r.lower
                );
            }
        }
    });
}

/// A chain member's residency: one step, an intermediate, read there by a later producer
/// re-run at the same step, and not resident there otherwise.
fn check_transient(
    tensors: &[OffloadTensor],
    rc: &Recomputable,
    s: &OffloadSchedule,
    i: usize,
    r: &Residency,
) {
    assert_eq!(r.upper, r.lower + 1, "a transient lasts one step: {r:?}");
    assert_eq!(tensors[i].class, TensorClass::Intermediate);
    let read = s.residencies.iter().any(|o| {
        o.lower == r.lower
            && o.tensor != i
            && matches!(o.arrival, Arrival::Recompute { .. })
            && rc.producer(o.tensor).is_some_and(|p| p.inputs.contains(&i))
    });
    assert!(read, "transient {r:?} is read by no re-run at its step");
    let held = s.residencies.iter().filter(|o| o.tensor == i);
    assert_eq!(
        held.filter(|o| o.lower <= r.lower && r.lower < o.upper)
            .count(),
        1
    );
}

fn recomputes(s: &OffloadSchedule) -> Vec<(usize, u64)> {
    s.residencies
        .iter()
        .filter(|r| matches!(r.arrival, Arrival::Recompute { .. }))
        .map(|r| (r.tensor, r.lower))
        .collect()
}

#[test]
fn a_cheap_producer_is_recomputed_before_the_next_use_instead_of_swapped() {
    let (tensors, ops, rc) = skip_graph();
    let budget = 1728 * KB;
    let s = schedule_with_recompute(&tensors, &ops, &OffloadDesc::new(budget, 256), &rc).unwrap();
    check(&tensors, &rc, &s, budget);
    assert_eq!(recomputes(&s), vec![(1, 5)]);
    let o = s.outcome().unwrap();
    assert_eq!(o.bytes_recomputed, 512 * KB);
    assert_eq!(o.recompute_work, 576 * KB);
    assert_eq!(
        (o.bytes_to_device, o.bytes_to_host),
        (0, 0),
        "nothing is copied"
    );
}

#[test]
fn the_choice_flips_to_swap_when_the_link_gets_faster_and_back_when_it_slows() {
    let (tensors, ops, rc) = skip_graph();
    let budget = 1728 * KB;
    let run = |link: f64| {
        let mut desc = OffloadDesc::new(budget, 256);
        desc.link_bandwidth = link;
        let s = schedule_with_recompute(&tensors, &ops, &desc, &rc).unwrap();
        check(&tensors, &rc, &s, budget);
        s
    };
    // Swap: 1 MiB over the link; recompute: 576 KiB of work at 400 GB/s (1.5 µs).
    assert!(prefers_recompute(
        512 * KB,
        &ops[0],
        &OffloadDesc::new(budget, 256)
    ));
    let fast = run(1e13);
    assert!(recomputes(&fast).is_empty(), "{:?}", fast.residencies);
    assert!(fast.outcome().unwrap().bytes_to_host > 0, "swapped instead");
    let slow = run(1e9);
    assert_eq!(recomputes(&slow), vec![(1, 5)]);
}

#[test]
fn a_gap_too_short_to_swap_can_still_be_recomputed() {
    // `a` is read at 0 and 2: with a prefetch lead of 1 a swap frees nothing, a recompute frees
    // step 1, where `b` and `c` are written.
    let tensors = vec![
        t(64 * KB, TensorClass::Input, &[0]),
        t(512 * KB, TensorClass::Intermediate, &[0, 2]),
        t(512 * KB, TensorClass::Intermediate, &[1, 2]),
        t(512 * KB, TensorClass::Intermediate, &[1]),
    ];
    let mut producers = vec![None; 4];
    producers[1] = Some(Producer {
        op: 0,
        inputs: vec![0],
    });
    let rc = Recomputable::new(producers);
    let ops = ops(3, 576 * KB);
    let budget = 1200 * KB;
    let none = schedule_with_recompute(
        &tensors,
        &ops,
        &OffloadDesc::new(budget, 256),
        &Recomputable::none(),
    );
    assert!(
        matches!(none, Err(Error::BudgetBelowWorkingSet { step: 1, .. })),
        "{none:?}"
    );
    let s = schedule_with_recompute(&tensors, &ops, &OffloadDesc::new(budget, 256), &rc).unwrap();
    check(&tensors, &rc, &s, budget);
    assert_eq!(recomputes(&s), vec![(1, 2)]);
}

#[test]
fn a_producer_whose_input_is_gone_at_the_next_use_is_swapped_instead() {
    // `a = op0(h)` where `h` dies after op 0: at step 5 nothing can re-run op 0.
    let (mut tensors, ops, _) = skip_graph();
    tensors[0] = t(64 * KB, TensorClass::Intermediate, &[0]);
    let mut producers = vec![None; tensors.len()];
    producers[1] = Some(Producer {
        op: 0,
        inputs: vec![0],
    });
    let rc = Recomputable::new(producers);
    let budget = 1728 * KB;
    let s = schedule_with_recompute(&tensors, &ops, &OffloadDesc::new(budget, 256), &rc).unwrap();
    check(&tensors, &rc, &s, budget);
    assert!(recomputes(&s).is_empty());
    assert!(s.outcome().unwrap().bytes_to_host > 0);
}

/// A chain of `depth` ops from the input: `t1 = op0(x)`, `tj = op(j-1)(t(j-1))`, each link dead
/// after the next op reads it; the last, `b` (512 KiB), is read again at the end. `c`, `d`, `e`
/// meet `b` at step `depth + 2`, the peak. Returns the graph and `b`'s index.
fn chain_graph(depth: usize) -> (Vec<OffloadTensor>, Vec<OffloadOp>, Recomputable, usize) {
    let d = depth as u64;
    let mut tensors = vec![t(64 * KB, TensorClass::Input, &[0])];
    let mut producers = vec![None];
    for j in 1..=depth {
        let (size, uses) = if j == depth {
            (512 * KB, vec![d - 1, d, d + 4])
        } else {
            (64 * KB, vec![j as u64 - 1, j as u64])
        };
        tensors.push(t(size, TensorClass::Intermediate, &uses));
        producers.push(Some(Producer {
            op: j as u64 - 1,
            inputs: vec![j - 1],
        }));
    }
    for uses in [[d, d + 2], [d + 1, d + 2], [d + 2, d + 3]] {
        tensors.push(t(512 * KB, TensorClass::Intermediate, &uses));
        producers.push(None);
    }
    tensors.push(t(128 * KB, TensorClass::Output, &[d + 3, d + 4]));
    producers.push(None);
    (
        tensors,
        ops(d + 5, 576 * KB),
        Recomputable::new(producers),
        depth,
    )
}

#[test]
fn a_producer_whose_inputs_are_gone_is_recomputed_with_its_chain_up_to_the_op_limit() {
    for depth in 1..=MAX_CHAIN_OPS + 1 {
        let (tensors, ops, rc, b) = chain_graph(depth);
        let budget = 1600 * KB;
        let mut desc = OffloadDesc::new(budget, 256);
        desc.link_bandwidth = 1e9;
        let s = schedule_with_recompute(&tensors, &ops, &desc, &rc).unwrap();
        check(&tensors, &rc, &s, budget);
        let late = depth as u64 + 4;
        let o = s.outcome().unwrap();
        if depth <= MAX_CHAIN_OPS {
            // The links from `x` (resident) are re-run first, in op order, then `b`'s producer.
            let mut want: Vec<(usize, u64)> = (1..=b).map(|j| (j, late)).collect();
            want.sort_unstable();
            let mut got = recomputes(&s);
            got.sort_unstable();
            assert_eq!(got, want, "depth {depth}");
            assert_eq!(o.recompute_work, depth as u64 * 576 * KB, "depth {depth}");
            assert_eq!(
                (o.bytes_to_device, o.bytes_to_host),
                (0, 0),
                "depth {depth}"
            );
        } else {
            assert!(
                recomputes(&s).is_empty(),
                "depth {depth}: {:?}",
                s.residencies
            );
            assert!(o.bytes_to_host > 0, "depth {depth}: swapped instead");
        }
    }
}

#[test]
fn a_chain_dearer_than_the_copy_is_swapped_instead() {
    // Three ops of 576 KiB against one 512 KiB tensor out and back: with the device 1.5x the
    // link, the chain costs more than the swap.
    let (tensors, ops, rc, _) = chain_graph(3);
    let budget = 1600 * KB;
    let mut desc = OffloadDesc::new(budget, 256);
    desc.link_bandwidth = 1e9;
    desc.device_bandwidth = 1.5e9;
    let s = schedule_with_recompute(&tensors, &ops, &desc, &rc).unwrap();
    check(&tensors, &rc, &s, budget);
    assert!(recomputes(&s).is_empty(), "{:?}", s.residencies);
    assert!(s.outcome().unwrap().bytes_to_host > 0);
}

#[test]
fn a_producer_table_that_does_not_fit_is_a_typed_error() {
    let (tensors, ops, _) = skip_graph();
    let desc = OffloadDesc::new(1 << 30, 256);
    let with = |t: usize, p: Producer| {
        let mut producers = vec![None; tensors.len()];
        producers[t] = Some(p);
        Recomputable::new(producers)
    };
    let bad = [
        Recomputable::new(vec![None; 2]),
        with(
            1,
            Producer {
                op: 9,
                inputs: vec![0],
            },
        ),
        with(
            1,
            Producer {
                op: 1,
                inputs: vec![0],
            },
        ),
        with(
            1,
            Producer {
                op: 0,
                inputs: vec![99],
            },
        ),
        with(
            1,
            Producer {
                op: 0,
                inputs: vec![1],
            },
        ),
        with(
            0,
            Producer {
                op: 0,
                inputs: vec![],
            },
        ),
    ];
    for rc in bad {
        let r = schedule_with_recompute(&tensors, &ops, &desc, &rc);
        let refused = matches!(
            r,
            Err(Error::SizeMismatch { .. } | Error::Argument(crate::ArgumentError::Invalid { .. }))
        );
        assert!(refused, "{r:?}");
    }
}

/// A random layer stack: layer `k` reads the previous activation (every third layer: the input),
/// a weight and, sometimes, an earlier activation (a skip: an odd skip reads an input-branched
/// layer, recomputable from the input; an even one the layer itself, whose recompute needs a
/// chain back to the input); each activation's producer is its layer, whose inputs are listed.
fn random_graph(
    layers: usize,
    sizes: &[u64],
    skips: &[usize],
) -> (Vec<OffloadTensor>, Vec<OffloadOp>, Recomputable) {
    let n = layers as u64;
    let mut tensors = vec![t(64 * KB, TensorClass::Input, &[0])];
    let mut producers: Vec<Option<Producer>> = vec![None];
    let mut ops = Vec::new();
    let mut prev = 0usize;
    for k in 0..layers {
        let w = tensors.len();
        // Weights under the minimum offload size: the activations must give way.
        tensors.push(t(16 * KB, TensorClass::Weight, &[k as u64]));
        producers.push(None);
        let a = tensors.len();
        let class = if k + 1 == layers {
            TensorClass::Output
        } else {
            TensorClass::Intermediate
        };
        tensors.push(t(sizes[k % sizes.len()], class, &[k as u64]));
        // Every third layer branches from the input instead of the previous layer.
        let from = if k % 3 == 0 { 0 } else { prev };
        let mut inputs = vec![from, w];
        let skip = skips[k % skips.len()];
        if skip > 0 && k > skip + 1 {
            let from = if skip.is_multiple_of(2) {
                k - 1 - skip
            } else {
                (k - 1 - skip) / 3 * 3
            };
            inputs.push(a - 2 * (k - from));
        }
        for &i in &inputs {
            if !tensors[i].uses.contains(&(k as u64)) {
                tensors[i].uses.push(k as u64);
                tensors[i].uses.sort_unstable();
            }
        }
        let bytes = inputs.iter().map(|&i| tensors[i].size).sum::<u64>() + tensors[a].size;
        producers.push(Some(Producer {
            op: k as u64,
            inputs,
        }));
        ops.push(OffloadOp {
            label: format!("layer{k}"),
            bytes,
        });
        prev = a;
    }
    debug_assert!(tensors.iter().all(|t| t.uses.iter().all(|&u| u < n)));
    (tensors, ops, Recomputable::new(producers))
}

/// The largest working set (an op's tensors plus the inputs) and the unbudgeted peak load.
fn bounds(tensors: &[OffloadTensor], n: u64) -> (u64, u64) {
    let inputs: u64 = tensors
        .iter()
        .filter(|t| t.class == TensorClass::Input)
        .map(|t| t.size)
        .sum();
    let at = |s: u64, all: bool| -> u64 {
        tensors
            .iter()
            .filter(|t| match (t.uses.first(), t.uses.last()) {
                (Some(&f), Some(&l)) if all => match t.class {
                    TensorClass::Weight | TensorClass::Input => true,
                    TensorClass::Output => s >= f,
                    _ => s >= f && s <= l,
                },
                _ => t.class != TensorClass::Input && t.uses.contains(&s),
            })
            .map(|t| t.size)
            .sum()
    };
    let floor = (0..n).map(|s| at(s, false) + inputs).max().unwrap_or(0);
    let peak = (0..n).map(|s| at(s, true)).max().unwrap_or(0);
    (floor, peak.max(floor))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the graph, budget and link, a schedule with recompute keeps the budget at every
    /// step, re-runs a tensor only while its producer's inputs are resident, and places nothing
    /// on top of anything live; a refusal is the typed working-set error.
    #[test]
    fn schedules_with_recompute_keep_the_budget_and_their_inputs(
        layers in 3usize..12,
        sizes in prop::collection::vec(64u64..1024, 1..6),
        skips in prop::collection::vec(0usize..4, 1..6),
        percent in 0u64..100,
        link in prop::sample::select(vec![1e8, 16e9, 1e13]),
    ) {
        let sizes: Vec<u64> = sizes.iter().map(|s| s * KB).collect();
        let (tensors, ops, rc) = random_graph(layers, &sizes, &skips);
        let (floor, peak) = bounds(&tensors, ops.len() as u64);
        let budget = floor * 9 / 10 + (peak - floor * 9 / 10) * percent / 100;
        let mut desc = OffloadDesc::new(budget, 256);
        desc.link_bandwidth = link;
        match schedule_with_recompute(&tensors, &ops, &desc, &rc) {
            Ok(s) => check(&tensors, &rc, &s, budget),
            Err(e) => prop_assert!(matches!(e, Error::BudgetBelowWorkingSet { .. }), "{e:?}"),
        }
    }
}

#[test]
fn the_random_graphs_exercise_both_ways() {
    // Guards the property test above: its graphs must make recompute (with chains too) and swap
    // happen.
    let (mut recomputed, mut chained, mut swapped) = (0, 0, 0);
    for layers in 4..12 {
        for skips in [[1, 3], [2, 3], [3, 1], [2, 2]] {
            let (tensors, ops, rc) = random_graph(layers, &[512 * KB, 256 * KB, 768 * KB], &skips);
            let (floor, peak) = bounds(&tensors, ops.len() as u64);
            for (quarter, link) in (0..4).flat_map(|q| [(q, 1e8), (q, 16e9), (q, 1e13)]) {
                let budget = floor + (peak - floor) * quarter / 4;
                let mut desc = OffloadDesc::new(budget, 256);
                desc.link_bandwidth = link;
                let Ok(s) = schedule_with_recompute(&tensors, &ops, &desc, &rc) else {
                    continue;
                };
                check(&tensors, &rc, &s, budget);
                let o = s.outcome().unwrap();
                recomputed += usize::from(o.bytes_recomputed > 0);
                chained += usize::from(s.residencies.iter().any(|r| {
                    matches!(r.arrival, Arrival::Recompute { .. })
                        && !tensors[r.tensor].uses.contains(&r.lower)
                }));
                swapped += usize::from(o.bytes_to_host > 0);
            }
        }
    }
    assert!(
        recomputed > 0 && chained > 0 && swapped > 0,
        "recomputed {recomputed}, chained {chained}, swapped {swapped}"
    );
}
