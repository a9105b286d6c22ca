//! Copies and spills in traces: their JSON round trip, what the analysis makes of them (a
//! spilled allocation is out of its pool's load, a gap it spent spilled is not idleness, a copy
//! is a use of both ends) and the Chrome counters.

use super::*;

fn at(time_ns: u64, kind: EventKind) -> TraceEvent {
    TraceEvent {
        time_ns,
        kind,
        backtrace: None,
    }
}

fn alloc(id: u64, pool: &str, size: u64) -> EventKind {
    EventKind::Alloc {
        id,
        pool: pool.into(),
        size,
        offset: 0,
        label: format!("t{id}"),
        parent: None,
    }
}

fn use_of(id: u64, access: Access) -> EventKind {
    EventKind::Use {
        id,
        op: "op".into(),
        access,
        size: 100,
    }
}

fn transfer(from: u64, to: u64, kind: TransferKind) -> EventKind {
    EventKind::Transfer {
        from,
        to,
        size: 100,
        kind,
    }
}

/// `a` (100 B) is written, spilled for 10 ms while `b` (100 B) lives, restored and read.
fn spilled_trace() -> Trace {
    let ms = 1_000_000;
    Trace {
        events: vec![
            at(0, alloc(1, "device", 100)),
            at(1, use_of(1, Access::Write)),
            at(2, transfer(1, 0, TransferKind::Spill)),
            at(3, alloc(2, "device", 100)),
            at(4, use_of(2, Access::Write)),
            at(5, use_of(2, Access::Read)),
            at(6, EventKind::FreeRequested { id: 2 }),
            at(10 * ms, transfer(0, 1, TransferKind::Restore)),
            at(10 * ms + 1, use_of(1, Access::Read)),
            at(10 * ms + 2, EventKind::FreeRequested { id: 1 }),
        ],
    }
}

#[test]
fn transfers_round_trip_through_json_and_an_unknown_reason_is_an_error() {
    let mut t = spilled_trace();
    for (i, kind) in TransferKind::ALL.into_iter().enumerate() {
        t.events
            .push(at(20_000_000 + i as u64, transfer(1, 2, kind)));
    }
    assert_eq!(Trace::from_json(&t.to_chrome_json(), "t.json").unwrap(), t);
    let bad =
        "[\n{\"t\":0,\"k\":\"transfer\",\"from\":1,\"to\":0,\"size\":4,\"why\":\"teleport\"}\n]";
    let err = Trace::from_json(bad, "bad.json").unwrap_err().to_string();
    assert!(
        err.contains("teleport") && err.contains("bad.json:2"),
        "{err}"
    );
}

#[test]
fn a_spilled_allocation_is_off_its_pools_load_and_not_idle() {
    let t = spilled_trace();
    let l = t.lifetimes();
    assert_eq!(l[0].away, vec![(2, 7)]);
    assert_eq!(l[0].uses.len(), 2, "a spill and a restore are no uses");
    let findings = analyze(&t, &AnalyzeOptions::default());
    assert!(
        !findings
            .iter()
            .any(|f| f.kind == FindingKind::TemporaryIdleness),
        "the gap was spent spilled: {findings:#?}"
    );
    // Without the spill, the 10 ms gap is idleness that would save b's overlap: the peak is 200.
    let mut kept = t.clone();
    kept.events
        .retain(|e| !matches!(e.kind, EventKind::Transfer { .. }));
    let f = analyze(&kept, &AnalyzeOptions::default());
    let idle = f
        .iter()
        .find(|f| f.kind == FindingKind::TemporaryIdleness)
        .unwrap();
    assert_eq!(idle.saved, 100, "{f:#?}");
    // With it, the pool's peak is 100: a late free of b saves nothing more than b itself.
    let json = t.to_chrome_json();
    assert!(
        !json.contains("\"args\":{\"bytes\":200}"),
        "in use never counts the spilled bytes: {json}"
    );
}

#[test]
fn a_copy_is_a_read_of_its_source_and_a_write_of_its_destination() {
    let t = Trace {
        events: vec![
            at(0, alloc(1, "device", 100)),
            at(1, alloc(2, "host", 100)),
            at(2, use_of(1, Access::Write)),
            at(3, transfer(1, 2, TransferKind::SwapOut)),
            at(4, transfer(2, 1, TransferKind::SwapIn)),
            at(5, use_of(1, Access::Read)),
            at(6, EventKind::FreeRequested { id: 1 }),
            at(7, EventKind::FreeRequested { id: 2 }),
        ],
    };
    let l = t.lifetimes();
    let accesses = |i: usize| l[i].uses.iter().map(|u| u.1).collect::<Vec<_>>();
    assert_eq!(
        accesses(0),
        [Access::Write, Access::Read, Access::Write, Access::Read]
    );
    assert_eq!(accesses(1), [Access::Write, Access::Read]);
    let findings = analyze(&t, &AnalyzeOptions::default());
    assert!(
        !findings
            .iter()
            .any(|f| f.kind == FindingKind::UnusedAllocation),
        "{findings:#?}"
    );
}
