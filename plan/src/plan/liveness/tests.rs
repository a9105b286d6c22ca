//! Liveness: lifetimes, exclusion of unplanned tensors, in-place sharing, and input errors.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

use super::super::Buffer;
use super::{OpUses, TensorRole, liveness};
use crate::Error;

use TensorRole::{Input, Intermediate, Output, Persistent};

fn op(reads: &[usize], writes: &[usize]) -> OpUses {
    OpUses {
        reads: reads.to_vec(),
        writes: writes.to_vec(),
        in_place: None,
    }
}

#[test]
fn chain_lifetimes_are_half_open_and_inputs_outputs_excluded() {
    // x(input) -> op0 -> a -> op1 -> b -> op2 -> y(output), weights w persistent.
    let roles = [Input, Persistent, Intermediate, Intermediate, Output];
    let sizes = [10, 20, 30, 40, 50];
    let ops = [op(&[0, 1], &[2]), op(&[2], &[3]), op(&[3, 1], &[4])];
    let l = liveness(&roles, &sizes, &ops, 16).unwrap();
    assert_eq!(
        l.lifetimes,
        vec![None, None, Some((0, 2)), Some((1, 3)), None]
    );
    assert_eq!(l.buffer_of, vec![None, None, Some(0), Some(1), None]);
    assert_eq!(
        l.buffers,
        vec![
            Buffer {
                lower: 0,
                upper: 2,
                size: 30,
                align: 16
            },
            Buffer {
                lower: 1,
                upper: 3,
                size: 40,
                align: 16
            }
        ]
    );
}

#[test]
fn unread_intermediate_lives_through_its_producer() {
    let l = liveness(&[Input, Intermediate], &[1, 8], &[op(&[0], &[1])], 1).unwrap();
    assert_eq!(l.buffers, vec![Buffer::new(0, 1, 8)]);
}

#[test]
fn in_place_output_shares_the_dying_input_buffer() {
    // a = op0(x); b = relu(a) in place over a; c = op2(b).
    let roles = [Input, Intermediate, Intermediate, Output];
    let mut relu = op(&[1], &[2]);
    relu.in_place = Some((2, 1));
    let ops = [op(&[0], &[1]), relu, op(&[2], &[3])];
    let l = liveness(&roles, &[4, 8, 8, 4], &ops, 1).unwrap();
    assert_eq!(l.buffer_of, vec![None, Some(0), Some(0), None]);
    assert_eq!(l.buffers, vec![Buffer::new(0, 3, 8)]);
}

#[test]
fn in_place_is_ignored_when_the_input_lives_on_or_is_too_small() {
    let roles = [Input, Intermediate, Intermediate, Output];
    // a is read again by op2, so it does not die at op1.
    let mut relu = op(&[1], &[2]);
    relu.in_place = Some((2, 1));
    let ops = [op(&[0], &[1]), relu.clone(), op(&[1, 2], &[3])];
    let l = liveness(&roles, &[4, 8, 8, 4], &ops, 1).unwrap();
    assert_eq!(l.buffers.len(), 2);
    // b is larger than a's buffer.
    let ops = [op(&[0], &[1]), relu, op(&[2], &[3])];
    let l = liveness(&roles, &[4, 8, 9, 4], &ops, 1).unwrap();
    assert_eq!(l.buffers.len(), 2);
}

#[test]
fn rejects_bad_graphs() {
    let e = liveness(&[Intermediate, Intermediate], &[1, 1], &[op(&[0], &[1])], 1).unwrap_err();
    assert!(
        e.to_string()
            .contains("op 0 reads tensor 0 before anything writes it"),
        "{e}"
    );
    let e = liveness(&[Input], &[1], &[op(&[3], &[])], 1).unwrap_err();
    assert!(
        e.to_string().contains("op 0: tensor 3 is out of range"),
        "{e}"
    );
    let e = liveness(&[Input], &[1], &[op(&[], &[0])], 1).unwrap_err();
    assert!(e.to_string().contains("graph input"), "{e}");
    assert!(matches!(
        liveness(&[Input], &[], &[], 1),
        Err(Error::SizeMismatch { .. })
    ));
    assert!(matches!(
        liveness(&[], &[], &[], 3),
        Err(Error::InvalidAlignment { align: 3, .. })
    ));
    let mut bad = op(&[0], &[1]);
    bad.in_place = Some((1, 2));
    let e = liveness(&[Input, Intermediate, Intermediate], &[1, 1, 1], &[bad], 1).unwrap_err();
    assert!(e.to_string().contains("in-place hint"), "{e}");
    let e = liveness(&[Input, Intermediate], &[1, 0], &[op(&[0], &[1])], 1).unwrap_err();
    assert!(e.to_string().contains("intermediate tensor 1 is 0"), "{e}");
}
