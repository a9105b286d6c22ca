//! The stranding cut on hand-built nodes: it must cut a node whose skipped buffer has no room
//! left, and must not cut one where that buffer can still rest on an unplaced conflict.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::{Duration, Instant};

use super::super::super::Buffer;
use super::super::{Memo, Prepared};
use super::{Piece, Search};

/// Whether the root node's candidates from `(0, rank)` on are all cut, under rank = id order.
fn cut_at_root(buffers: &[Buffer], capacity: u64, rank: u32) -> bool {
    let p = Prepared::new(buffers);
    let order: Vec<u32> = (0..buffers.len() as u32).collect();
    let mut memo = Memo::default();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut search = Search::new(
        &p,
        &order,
        capacity,
        (u64::MAX, deadline, &|| false),
        &mut memo,
        None,
    );
    let piece = Piece {
        members: order.clone(),
        first: 0,
        last: *p.last.iter().max().unwrap(),
    };
    search.strands_fatally(&piece, 0, rank)
}

#[test]
fn a_skipped_buffer_with_nothing_to_rest_on_cuts_the_later_candidates() {
    // Buffer 0 fills the capacity alone over [0, 1); buffer 1 lives after it. Placing 1 first at
    // offset 0 leaves 0 below the canonical order with no conflict to rest on: dead.
    let b = [Buffer::new(0, 1, 3), Buffer::new(1, 2, 1)];
    assert!(cut_at_root(&b, 3, 1));
    // Candidate 0 itself strands nothing.
    assert!(!cut_at_root(&b, 3, 0));
}

#[test]
fn a_skipped_buffer_that_can_rest_on_an_unplaced_conflict_is_no_cut() {
    // Buffer 0 skipped at offset 0 can still rest on buffer 1 (top 1) and fit within 2.
    let b = [Buffer::new(0, 2, 1), Buffer::new(1, 3, 1)];
    assert!(!cut_at_root(&b, 2, 1));
    // Within 1 it cannot: the cut is taken.
    assert!(cut_at_root(&b, 1, 1));
}
