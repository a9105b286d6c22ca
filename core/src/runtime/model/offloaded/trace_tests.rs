//! A budgeted model's trace: before, a model compiled with a device budget recorded nothing
//! (issue 46, finding 5), and a percentage budget's measuring compile left allocations that were
//! never used.

use std::collections::HashSet;

use super::tests::{graph, run, runtime, unbudgeted, within};
use super::*;
use crate::trace::{AnalyzeOptions, EventKind, FindingKind, Tracer, TransferKind, analyze};

#[test]
fn a_budgeted_model_traces_its_allocations_uses_and_copies() {
    let (expected, need) = unbudgeted();
    for force_staging in [true, false] {
        let budget = need * 2 / 5;
        let (g, x, w, y) = graph();
        let rt = runtime(force_staging, Some(budget));
        let tracer = Tracer::new();
        rt.set_tracer(Some(tracer.clone()));
        let desc = within(budget);
        let mut m = rt.compile_with(&g, &desc).unwrap();
        assert_eq!(run(&mut m, x, &w, y), expected);
        let o = m.memory_report().offload.unwrap();
        drop(m);
        let trace = tracer.take();
        let lifetimes = trace.lifetimes();
        let ids: HashSet<u64> = lifetimes.iter().map(|l| l.id).collect();

        // Every binding of every op, in both runs, is a use of a traced allocation.
        let bindings: usize = g.nodes().iter().map(|n| n.inputs.len() + 1).sum();
        let uses: Vec<u64> = trace
            .events
            .iter()
            .filter_map(|e| match e.kind {
                EventKind::Use { id, .. } => Some(id),
                _ => None,
            })
            .collect();
        assert_eq!(uses.len(), 2 * bindings, "staging {force_staging}");
        assert!(uses.iter().all(|id| ids.contains(id)), "{uses:?}");

        // The copies the report counts are in the trace, between traced allocations.
        let moved = |kind: TransferKind| -> u64 {
            trace
                .events
                .iter()
                .filter_map(|e| match e.kind {
                    EventKind::Transfer {
                        from,
                        to,
                        size,
                        kind: k,
                    } if k == kind => {
                        assert!(ids.contains(&from) && ids.contains(&to), "{e:?}");
                        Some(size)
                    }
                    _ => None,
                })
                .sum()
        };
        assert_eq!(moved(TransferKind::SwapOut), o.bytes_to_host);
        assert_eq!(
            moved(TransferKind::Prefetch) + moved(TransferKind::SwapIn),
            o.bytes_to_device
        );
        assert_eq!(
            moved(TransferKind::SwapIn) > 0,
            force_staging,
            "the skip connection goes out and comes back on a discrete device only"
        );

        // Residencies lie inside the arena, and the analysis finds nothing unused or leaked.
        let arena = lifetimes
            .iter()
            .find(|l| l.label == "budgeted model (arena)")
            .unwrap();
        let children: Vec<_> = lifetimes
            .iter()
            .filter(|l| l.parent == Some(arena.id))
            .collect();
        assert!(!children.is_empty());
        assert!(children.iter().all(|l| l.offset + l.size <= arena.size));
        let findings = analyze(&trace, &AnalyzeOptions::default());
        assert!(
            !findings
                .iter()
                .any(|f| matches!(f.kind, FindingKind::Leak | FindingKind::UnusedAllocation)),
            "{findings:#?}"
        );
        rt.check_leaks().unwrap();
    }
}

#[test]
fn the_need_a_percentage_budget_is_of_is_measured_without_allocating() {
    let (g, ..) = graph();
    let rt = runtime(true, None);
    let need = rt.memory_need(&g).unwrap();
    assert_eq!(rt.device_pool().stats().peak_in_use, 0, "nothing allocated");
    let compiled = rt.compile(&g).unwrap();
    let r = compiled.memory_report();
    assert_eq!(
        (
            need.weight_bytes,
            need.io_bytes,
            need.padding_bytes,
            need.activation_planned_bytes
        ),
        (
            r.weight_bytes,
            r.io_bytes,
            r.padding_bytes,
            r.activation_planned_bytes
        )
    );
    assert_eq!(need.unbudgeted_device_bytes(), r.unbudgeted_device_bytes());
}
