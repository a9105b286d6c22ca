//! Verifier cases, each checking the error names what is wrong.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

use super::super::events::Events;
use super::super::rng::Rng;
use super::super::sweep::tests::sweep_all;
use super::super::{Buffer, Plan, random_lifetimes, verify};
use super::{Checker, Fault, Meet, Placed, verify_sorted};
use crate::Error;

fn plan(offsets: &[u64], buffers: &[Buffer]) -> Plan {
    Plan::from_offsets(buffers, offsets.to_vec())
}

#[test]
fn accepts_touching_lifetimes_and_adjacent_ranges() {
    let b = Buffer::list(&[(0, 2, 4), (2, 4, 4), (1, 3, 4)]);
    verify(&b, &plan(&[0, 0, 4], &b), Some(8)).unwrap();
}

#[test]
fn names_both_overlapping_buffers() {
    let b = Buffer::list(&[(0, 5, 4), (1, 2, 1), (3, 6, 4)]);
    let err = verify(&b, &plan(&[0, 4, 3], &b), None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("buffers 0 and 2 overlap"), "{err}");
}

#[test]
fn rejects_equal_offsets_of_live_buffers() {
    let b = [Buffer::new(0, 2, 1), Buffer::new(1, 3, 1)];
    let err = verify(&b, &plan(&[0, 0], &b), None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("buffers 0 and 1 overlap"), "{err}");
}

#[test]
fn rejects_misalignment_capacity_peak_and_length() {
    let b = [Buffer {
        lower: 0,
        upper: 1,
        size: 4,
        align: 4,
    }];
    assert!(matches!(
        verify(&b, &plan(&[2], &b), None),
        Err(Error::Argument(crate::ArgumentError::NotMultiple {
            value: 2,
            divisor: 4,
            ..
        }))
    ));
    assert!(matches!(
        verify(&b, &plan(&[4], &b), Some(7)),
        Err(Error::OutOfBounds { limit: 7, .. })
    ));
    assert!(matches!(
        verify(
            &b,
            &Plan {
                offsets: vec![0],
                peak: 5
            },
            None
        ),
        Err(Error::SizeMismatch {
            expected: 4,
            actual: 5,
            ..
        })
    ));
    assert!(matches!(
        verify(
            &b,
            &Plan {
                offsets: vec![],
                peak: 0
            },
            None
        ),
        Err(Error::SizeMismatch { .. })
    ));
}

#[test]
fn rejects_invalid_buffers() {
    let zero = [Buffer::new(0, 1, 0)];
    assert!(matches!(
        verify(&zero, &plan(&[0], &zero), None),
        Err(Error::Argument(crate::ArgumentError::Zero { .. }))
    ));
    let empty = [Buffer::new(3, 3, 1)];
    assert!(matches!(
        verify(&empty, &plan(&[0], &empty), None),
        Err(Error::Argument(crate::ArgumentError::Invalid { .. }))
    ));
    let odd = [Buffer {
        lower: 0,
        upper: 1,
        size: 1,
        align: 3,
    }];
    assert!(matches!(
        verify(&odd, &plan(&[0], &odd), None),
        Err(Error::InvalidAlignment { align: 3, .. })
    ));
    // Overflowing offsets are refused by the verifier's checked arithmetic, not by a size limit.
    let huge = [Buffer::new(0, 1, u64::MAX), Buffer::new(0, 1, u64::MAX)];
    assert!(matches!(
        verify(&huge, &plan(&[0, 1], &huge), None),
        Err(Error::OutOfBounds { .. })
    ));
}

/// Checks a plan with the front checker over chunks `..split` and the back one over the rest.
fn split_verdict(
    events: &Events,
    plan: &Plan,
    capacity: Option<u64>,
    split: usize,
) -> Result<(), Fault> {
    let meet = Meet::new(events.len());
    let placed = |k: usize| {
        events.range(meet.chunk(k)).map(|event| Placed {
            event,
            offset: plan.offsets[event.id as usize],
        })
    };
    let mut front = Checker::new(capacity, false);
    for k in 0..split {
        front.check(&placed(k).collect::<Vec<_>>())?;
    }
    let mut back = Checker::new(capacity, true);
    for k in (split..meet.chunks).rev() {
        back.check(&placed(k).rev().collect::<Vec<_>>())?;
    }
    front.join(back).finish(plan.peak)
}

/// The two checkers of a `Meet` reach the forward checker's verdict wherever they meet, on
/// valid plans and on plans with one buffer moved onto a conflicting one, off its alignment or
/// past a capacity.
#[test]
fn checkers_meeting_anywhere_agree_with_one_walking_forward() {
    let mut rng = Rng::new(5);
    let buffers: Vec<Buffer> = random_lifetimes(3000, 2)
        .into_iter()
        .map(|b| Buffer {
            align: 1 << rng.below(5),
            ..b
        })
        .collect();
    let events = Events::new(&buffers);
    let valid = sweep_all(&buffers, &events);
    let chunks = Meet::new(events.len()).chunks;
    assert_eq!(chunks, 6);
    let mut faults = 0;
    for trial in 0..60 {
        let mut plan = valid.clone();
        let i = rng.below(buffers.len() as u64) as usize;
        let capacity = (trial % 3 == 2).then_some(valid.peak - 1);
        if trial % 3 == 0 {
            let j = (0..buffers.len())
                .find(|&j| j != i && buffers[j].conflicts(&buffers[i]))
                .unwrap();
            plan.offsets[i] = plan.offsets[j];
        } else if trial % 3 == 1 {
            plan.offsets[i] += 1;
        }
        plan = Plan::from_offsets(&buffers, plan.offsets);
        let want = verify_sorted(&buffers, &events, &plan, capacity, false).is_err();
        faults += usize::from(want);
        for split in 0..=chunks {
            let got = split_verdict(&events, &plan, capacity, split);
            assert_eq!(got.is_err(), want, "trial {trial}, split {split}: {got:?}");
        }
        let parallel = verify_sorted(&buffers, &events, &plan, capacity, true);
        assert_eq!(parallel.is_err(), want, "trial {trial}: {parallel:?}");
    }
    assert!(faults >= 30, "{faults} faulty plans of 60");
}
