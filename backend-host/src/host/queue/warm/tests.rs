//! Spinners start on a touch, take the pool's work, and end when the worker goes idle or drops
//! its handle (liveness only: how fast they take work is a benchmark's business).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{SPIN_FOR, State, Warmth};

/// A pool of `threads` threads running `f` on one of them.
fn on_pool<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(f)
}

/// Waits up to `limit` for `running` spinners; returns whether they were reached.
fn settles(s: &State, running: usize, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if s.running.load(Ordering::Relaxed) == running {
            return true;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    false
}

#[test]
fn spinners_fill_the_pool_and_end_once_idle() {
    on_pool(3, || {
        let w = Warmth::new(2);
        w.touch();
        w.touch();
        assert_eq!(
            w.state.running.load(Ordering::Relaxed),
            2,
            "one spinner per helper"
        );
        // While they spin, parallel work still runs and gives the right answer.
        let sum: u64 = rayon::iter::ParallelIterator::sum(
            rayon::iter::IntoParallelIterator::into_par_iter(0..10_000u64),
        );
        assert_eq!(sum, 49_995_000);
        assert!(
            settles(&w.state, 0, SPIN_FOR * 500),
            "spinners must stop once no command started for SPIN_FOR"
        );
        // A later command starts them again.
        w.touch();
        assert_eq!(w.state.running.load(Ordering::Relaxed), 2);
        drop(w);
    });
}

#[test]
fn dropping_the_handle_stops_the_spinners() {
    on_pool(2, || {
        let w = Warmth::new(1);
        w.touch();
        let state = w.state.clone();
        drop(w);
        assert!(
            settles(&state, 0, Duration::from_secs(5)),
            "a spinner outlived its handle"
        );
    });
}

#[test]
fn a_plain_thread_spawns_nothing() {
    let w = Warmth::new(0);
    w.touch();
    assert_eq!(w.state.running.load(Ordering::Relaxed), 0);
}
