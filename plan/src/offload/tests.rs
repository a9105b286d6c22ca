use super::*;

const KB: u64 = 1 << 10;

/// A layer stack: per layer a weight of `w` bytes and an activation of `a` bytes; layer k reads the
/// previous activation and its weight. The first activation is also read by the last layer (a skip
/// connection), so it has a long absence.
fn stack(layers: u64, w: u64, a: u64) -> (Vec<OffloadTensor>, Vec<OffloadOp>) {
    let mut tensors = vec![OffloadTensor {
        size: a,
        class: TensorClass::Input,
        uses: vec![0],
    }];
    let mut ops = Vec::new();
    for k in 0..layers {
        tensors.push(OffloadTensor {
            size: w,
            class: TensorClass::Weight,
            uses: vec![k],
        });
        let mut uses = vec![k, k + 1];
        if k == 0 {
            uses.push(layers - 1);
        }
        uses.retain(|&u| u < layers);
        uses.dedup();
        let class = if k + 1 == layers {
            TensorClass::Output
        } else {
            TensorClass::Intermediate
        };
        tensors.push(OffloadTensor {
            size: a,
            class,
            uses,
        });
        ops.push(OffloadOp {
            label: format!("layer{k}"),
            bytes: w + 2 * a,
        });
    }
    (tensors, ops)
}

fn unbudgeted_load(tensors: &[OffloadTensor], n: u64) -> u64 {
    (0..n)
        .map(|s| {
            tensors
                .iter()
                .filter(|t| match (t.uses.first(), t.uses.last()) {
                    (Some(&f), Some(&l)) => match t.class {
                        TensorClass::Weight | TensorClass::Input => true,
                        TensorClass::Output => s >= f,
                        TensorClass::Intermediate | TensorClass::Staged => s >= f && s <= l,
                    },
                    _ => false,
                })
                .map(|t| t.size)
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0)
}

/// The model check every schedule must pass: peak within the budget; every use of a tensor inside
/// one of its residencies (or the tensor in host memory); a swap-in only after a copy-out of the
/// same tensor; residencies that overlap in time never overlap in space.
fn check(tensors: &[OffloadTensor], s: &OffloadSchedule, budget: u64) {
    check_with(tensors, s, budget, |_, _, _| {});
}

/// [`check`], with `arrival(i, k, mine)` also checking the `k`th of tensor `i`'s residencies
/// `mine` (for the arrivals a schedule with recompute adds).
pub(super) fn check_with(
    tensors: &[OffloadTensor],
    s: &OffloadSchedule,
    budget: u64,
    mut arrival: impl FnMut(usize, usize, &[&Residency]),
) {
    assert!(s.peak <= budget, "peak {} over budget {budget}", s.peak);
    for (i, t) in tensors.iter().enumerate() {
        let mine: Vec<&Residency> = s.residencies.iter().filter(|r| r.tensor == i).collect();
        for &u in &t.uses {
            assert!(
                s.host_resident[i] || mine.iter().any(|r| r.lower <= u && u < r.upper),
                "tensor {i} not on the device at its use {u}"
            );
        }
        for (k, r) in mine.iter().enumerate() {
            if r.arrival == Arrival::SwapIn {
                assert!(k > 0 && mine[k - 1].copy_out, "swap-in without copy-out");
            }
            arrival(i, k, &mine);
            assert!(r.offset + t.size <= s.peak);
        }
    }
    for (x, a) in s.residencies.iter().enumerate() {
        for b in &s.residencies[x + 1..] {
            let time = a.lower < b.upper && b.lower < a.upper;
            let (sa, sb) = (tensors[a.tensor].size, tensors[b.tensor].size);
            let space = a.offset < b.offset + sb && b.offset < a.offset + sa;
            assert!(!(time && space), "{a:?} and {b:?} overlap");
        }
    }
}

#[test]
fn a_half_budget_streams_weights_and_stays_within_it() {
    let (tensors, ops) = stack(8, 256 * KB, 128 * KB);
    let full = unbudgeted_load(&tensors, ops.len() as u64);
    let budget = full / 2;
    let s = schedule(&tensors, &ops, &OffloadDesc::new(budget, 256)).unwrap();
    check(&tensors, &s, budget);
    let won = s.outcome().unwrap();
    assert!(won.bytes_to_device > 0, "something must move");
    assert_eq!(s.outcomes.len(), 4);
    for o in &s.outcomes {
        if o.peak.is_some() {
            assert!(
                won.predicted_stall <= o.predicted_stall,
                "{o:?} beats the winner"
            );
        }
    }
}

#[test]
fn an_activation_with_a_long_absence_is_swapped_out_and_back() {
    // A (step 0 to 4) spans the peak at step 2, where B and C meet.
    let t = |size, class, uses: &[u64]| OffloadTensor {
        size,
        class,
        uses: uses.to_vec(),
    };
    let tensors = vec![
        t(512 * KB, TensorClass::Intermediate, &[0, 4]),
        t(512 * KB, TensorClass::Intermediate, &[1, 2]),
        t(512 * KB, TensorClass::Intermediate, &[2, 3]),
        t(128 * KB, TensorClass::Output, &[3, 4]),
    ];
    let ops: Vec<OffloadOp> = (0..5)
        .map(|k| OffloadOp {
            label: format!("op{k}"),
            bytes: 1 << 20,
        })
        .collect();
    let budget = 1200 * KB;
    let s = schedule(&tensors, &ops, &OffloadDesc::new(budget, 256)).unwrap();
    check(&tensors, &s, budget);
    let a: Vec<&Residency> = s.residencies.iter().filter(|r| r.tensor == 0).collect();
    assert_eq!(a.len(), 2, "{a:?}");
    assert_eq!((a[0].lower, a[0].upper, a[0].copy_out), (0, 1, true));
    assert_eq!(
        (a[1].lower, a[1].upper, a[1].arrival),
        (3, 5, Arrival::SwapIn)
    );
    let won = s.outcome().unwrap();
    assert_eq!(
        (won.bytes_to_host, won.bytes_to_device),
        (512 * KB, 512 * KB)
    );
}

#[test]
fn a_budget_below_one_ops_operands_names_that_op() {
    let (tensors, ops) = stack(4, 256 * KB, 128 * KB);
    let err = schedule(&tensors, &ops, &OffloadDesc::new(300 * KB, 256)).unwrap_err();
    match err {
        Error::BudgetBelowWorkingSet {
            step,
            op,
            needed,
            budget,
        } => {
            assert_eq!(step, 0);
            assert_eq!(op, "layer0");
            assert_eq!(needed, 512 * KB, "input + weight + output of layer 0");
            assert_eq!(budget, 300 * KB);
        }
        e => panic!("{e}"),
    }
}

#[test]
fn tiny_tensors_are_never_moved() {
    let (tensors, ops) = stack(8, 16 * KB, 8 * KB);
    let full = unbudgeted_load(&tensors, ops.len() as u64);
    let err = schedule(&tensors, &ops, &OffloadDesc::new(full / 2, 256)).unwrap_err();
    assert!(matches!(err, Error::BudgetBelowWorkingSet { .. }), "{err}");
    let mut desc = OffloadDesc::new(full / 2, 256);
    desc.min_size = 0;
    check(
        &tensors,
        &schedule(&tensors, &ops, &desc).unwrap(),
        full / 2,
    );
}

#[test]
fn unified_memory_moves_nothing() {
    let (tensors, ops) = stack(8, 256 * KB, 128 * KB);
    let full = unbudgeted_load(&tensors, ops.len() as u64);
    let mut desc = OffloadDesc::new(full / 2, 256);
    desc.unified = true;
    let s = schedule(&tensors, &ops, &desc).unwrap();
    check(&tensors, &s, full / 2);
    assert!(s.host_resident.iter().any(|h| *h));
    assert!(
        s.residencies
            .iter()
            .all(|r| r.arrival == Arrival::InPlace && !r.copy_out)
    );
    let won = s.outcome().unwrap();
    assert_eq!((won.bytes_to_device, won.bytes_to_host), (0, 0));
}

#[test]
fn a_budget_above_the_load_moves_nothing() {
    let (tensors, ops) = stack(4, 256 * KB, 128 * KB);
    let full = unbudgeted_load(&tensors, ops.len() as u64);
    let s = schedule(&tensors, &ops, &OffloadDesc::new(full, 256)).unwrap();
    check(&tensors, &s, full);
    assert!(
        s.outcomes
            .iter()
            .all(|o| o.bytes_to_device == 0 && o.absences == 0)
    );
}

#[test]
fn scores_rank_as_documented() {
    let load = [10, 40, 40, 10];
    let span = [(1u64, 3u64)];
    assert_eq!(score_value(Score::Area, &span, 5, &load, 30), 10.0);
    assert_eq!(score_value(Score::Duration, &span, 5, &load, 30), 2.0);
    assert_eq!(score_value(Score::SizeWeighted, &span, 5, &load, 30), 10.0);
    // 10 bytes over the target at each step: a 5-byte tensor earns 5 per step, a 50-byte one 10.
    assert_eq!(score_value(Score::Submodular, &span, 5, &load, 30), 10.0);
    assert_eq!(score_value(Score::Submodular, &span, 50, &load, 30), 20.0);
    assert_eq!(
        score_value(Score::SizeWeighted, &[(0, 1)], 5, &load, 30),
        1.25
    );
}

#[test]
fn bad_input_is_a_typed_error() {
    let (mut tensors, ops) = stack(2, 256 * KB, 128 * KB);
    assert!(matches!(
        schedule(&tensors, &ops, &OffloadDesc::new(1 << 30, 3)),
        Err(Error::InvalidAlignment { .. })
    ));
    let mut none = OffloadDesc::new(1 << 30, 256);
    none.scores.clear();
    assert!(matches!(
        schedule(&tensors, &ops, &none),
        Err(Error::Argument(crate::ArgumentError::Zero { .. }))
    ));
    tensors[1].uses = vec![9];
    assert!(matches!(
        schedule(&tensors, &ops, &OffloadDesc::new(1 << 30, 256)),
        Err(Error::Argument(crate::ArgumentError::OutOfRange {
            index: 9,
            ..
        }))
    ));
}

/// A staged tensor (rows gathered on the host) is on the device only around its one use, arrives
/// as a host write counted in the traffic and the stall model, and is never chosen to leave.
#[test]
fn a_staged_tensor_arrives_by_host_write_just_before_its_use() {
    let mb = 1u64 << 20;
    let tensors = vec![
        OffloadTensor {
            size: mb,
            class: TensorClass::Input,
            uses: vec![0],
        },
        OffloadTensor {
            size: 4 * mb,
            class: TensorClass::Staged,
            uses: vec![2],
        },
        OffloadTensor {
            size: mb,
            class: TensorClass::Intermediate,
            uses: vec![0, 1, 2],
        },
        OffloadTensor {
            size: mb,
            class: TensorClass::Output,
            uses: vec![2, 3],
        },
    ];
    let ops: Vec<OffloadOp> = (0..4)
        .map(|k| OffloadOp {
            label: format!("op{k}"),
            bytes: mb,
        })
        .collect();
    let s = schedule(&tensors, &ops, &OffloadDesc::new(7 * mb, 256)).unwrap();
    check(&tensors, &s, 7 * mb);
    let staged: Vec<&Residency> = s.residencies.iter().filter(|r| r.tensor == 1).collect();
    assert_eq!(staged.len(), 1);
    assert_eq!(
        (staged[0].lower, staged[0].upper),
        (1, 3),
        "lead 1 before op 2"
    );
    assert_eq!(staged[0].arrival, Arrival::HostWrite);
    assert!(!staged[0].copy_out);
    let o = s.outcome().unwrap();
    assert_eq!(o.bytes_to_device, 4 * mb);
    assert!(
        o.predicted_stall > Duration::ZERO,
        "4 MiB at 16 GB/s outlasts one op"
    );
    // Its working set is its op's: a budget below it names op 2.
    match schedule(&tensors, &ops, &OffloadDesc::new(6 * mb, 256)) {
        Err(Error::BudgetBelowWorkingSet { step, needed, .. }) => {
            assert_eq!(step, 2);
            assert_eq!(needed, 7 * mb, "input, staged rows, activation, output");
        }
        other => panic!("{other:?}"),
    }
}
