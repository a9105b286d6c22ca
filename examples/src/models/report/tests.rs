//! Unit tests of `report`.

use super::*;
use std::cell::Cell;

#[test]
fn byte_units() {
    assert_eq!(bytes(0), "0 B");
    assert_eq!(bytes(1023), "1023 B");
    assert_eq!(bytes(1536), "1.50 KiB (1536 B)");
    assert_eq!(bytes(3 << 20), "3.00 MiB (3145728 B)");
}

#[test]
fn time_runs_warms_up_then_counts_runs_and_new_blocks() {
    // The state counts calls; "blocks" grow on the 3rd call, inside the timed runs.
    let mut calls = 0u32;
    let blocks = Cell::new(5u64);
    let bar = ProgressBar::hidden();
    let t = time_runs(
        4,
        &mut calls,
        |c| {
            *c += 1;
            if *c == 3 {
                blocks.set(blocks.get() + 2);
            }
            Ok(())
        },
        |_| blocks.get(),
        &bar,
    )
    .unwrap();
    assert_eq!(calls, 5, "one warm-up and four timed runs");
    assert_eq!(bar.position(), 4, "the bar counts timed runs only");
    assert_eq!(t.runs, 4);
    assert_eq!(t.steady_state_new_blocks, 2);
    assert!(t.min <= t.mean);
}

/// The median is the middle run, not the mean: one slow run (a warm-up outlier) moves the mean
/// and leaves the median at the typical run.
#[test]
fn time_runs_median_ignores_one_slow_run() {
    let mut calls = 0u32;
    let t = time_runs(
        5,
        &mut calls,
        |c| {
            *c += 1;
            // The first timed run (call 2) sleeps long; the others briefly.
            let ms = if *c == 2 { 150 } else { 2 };
            std::thread::sleep(Duration::from_millis(ms));
            Ok(())
        },
        |_| 0,
        &ProgressBar::hidden(),
    )
    .unwrap();
    assert!(t.min <= t.median && t.median <= t.mean);
    assert!(
        t.median < Duration::from_millis(75),
        "median {:?}",
        t.median
    );
    assert!(t.mean >= Duration::from_millis(30), "mean {:?}", t.mean);
}

#[test]
fn time_runs_stops_at_the_first_error() {
    let mut calls = 0u32;
    let r = time_runs(
        3,
        &mut calls,
        |c| {
            *c += 1;
            if *c == 2 {
                Err(tensormem::Error::invalid("boom"))
            } else {
                Ok(())
            }
        },
        |_| 0,
        &ProgressBar::hidden(),
    );
    assert!(matches!(r, Err(tensormem::Error::InvalidArgument(_))));
    assert_eq!(calls, 2);
}
