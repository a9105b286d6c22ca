use super::*;

/// One error of every planner variant.
fn every_variant() -> Vec<Plan> {
    vec![
        Plan::ZeroSize { what: "allocation" },
        Plan::InvalidAlignment {
            align: 3,
            max: 1 << 30,
        },
        Plan::TooLarge {
            what: "allocation",
            requested: 9,
            limit: 8,
            limit_name: "capacity",
        },
        Plan::DoubleFree {
            what: "region",
            slot: 1,
            generation: 2,
        },
        Plan::StaleHandle {
            what: "region",
            slot: 1,
            generation: 2,
            current: 3,
        },
        Plan::ForeignHandle {
            what: "region",
            slot: 1,
            owner: "TLSF allocator",
        },
        Plan::OutOfBounds {
            what: "capacity",
            offset: 4,
            size: 8,
            limit: 10,
        },
        Plan::SizeMismatch {
            what: "offsets".into(),
            expected: 2,
            actual: 1,
        },
        Plan::Misaligned {
            what: "offset",
            value: 100,
            align: 64,
            align_name: "align",
        },
        Plan::Argument(tensormem_plan::ArgumentError::zero("offload scores to try")),
        Plan::Argument(tensormem_plan::ArgumentError::BuffersOverlap {
            first: "a".into(),
            first_lifetime: [0, 2],
            first_bytes: [0, 8],
            second: "b".into(),
            second_lifetime: [1, 3],
            second_bytes: [4, 12],
        }),
        Plan::Malformed {
            source_name: "a.csv".into(),
            line: 2,
            message: "no header".into(),
        },
        Plan::PlanTooLarge {
            buffers: 2,
            padded_total: 1 << 70,
            limit: u64::MAX,
        },
        Plan::BudgetBelowWorkingSet {
            step: 1,
            op: "matmul".into(),
            needed: 10,
            budget: 5,
        },
        Plan::invariant("verified plan", "overlap"),
    ]
}

#[test]
fn every_planner_error_reads_the_same_as_its_core_twin() {
    for e in every_variant() {
        let plan = e.to_string();
        let core = Error::from(e);
        assert_eq!(core.to_string(), plan);
    }
    let fatal = Error::from(Plan::invariant("verified plan", "overlap"));
    assert!(fatal.is_fatal());
    let refused = Error::from(Plan::TooLarge {
        what: "allocation",
        requested: 9,
        limit: 8,
        limit_name: "capacity",
    });
    assert!(matches!(refused, Error::TooLarge { requested: 9, .. }));
}
