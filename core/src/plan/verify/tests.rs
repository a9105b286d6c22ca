//! Verifier cases, each checking the error names what is wrong.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

use super::super::{Buffer, Plan, verify};
use crate::Error;

fn plan(offsets: &[u64], buffers: &[Buffer]) -> Plan {
    Plan::from_offsets(buffers, offsets.to_vec())
}

#[test]
fn accepts_touching_lifetimes_and_adjacent_ranges() {
    let b = [
        Buffer::new(0, 2, 4),
        Buffer::new(2, 4, 4),
        Buffer::new(1, 3, 4),
    ];
    verify(&b, &plan(&[0, 0, 4], &b), Some(8)).unwrap();
}

#[test]
fn names_both_overlapping_buffers() {
    let b = [
        Buffer::new(0, 5, 4),
        Buffer::new(1, 2, 1),
        Buffer::new(3, 6, 4),
    ];
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
    assert!(
        matches!(verify(&b, &plan(&[2], &b), None), Err(Error::InvalidArgument(m)) if m.contains("alignment 4"))
    );
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
        Err(Error::InvalidArgument(_))
    ));
    let empty = [Buffer::new(3, 3, 1)];
    assert!(matches!(
        verify(&empty, &plan(&[0], &empty), None),
        Err(Error::InvalidArgument(_))
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
