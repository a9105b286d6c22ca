//! The time column: many warm replays of a trace per pool, taken in turns, each timed in short
//! segments.
//!
//! On a shared machine a replay is slowed by whatever else runs: thread CPU time leaves out
//! other processes' time slices, but not the caches they empty or a migration to a cold core,
//! and a replay of 15 ms on a loaded machine always meets some. The best of a few whole replays
//! swung the ratio to cubecl between 0.77 and 1.28 on identical builds, and the best of 30
//! still by 1.7× between two processes. So each replay is timed in segments of [`SEGMENT`]
//! events, and a pool's time is the sum over segments of each segment's fastest replay: every
//! stretch of the trace as it runs undisturbed, which a few of 30 replays manage for a stretch
//! of tens of microseconds. The pools take turns replay by replay (all see the same load, who
//! goes first rotates), after one warm-up replay each. The spread, the median whole replay over
//! that time, says how disturbed the run was.

/// Events (allocations and frees) per timed segment of a replay.
pub const SEGMENT: usize = 1024;

/// One pool's timed replays of one trace.
#[derive(Default)]
pub struct Samples {
    /// Per segment, the fastest replay's thread CPU ns.
    fastest: Vec<u64>,
    /// Each replay's thread CPU ns, whole.
    totals: Vec<u64>,
}

impl Samples {
    /// Adds a replay from its clock readings: before the first event, after every
    /// [`SEGMENT`]th and after the last. Every replay of a trace has the same segments.
    pub fn add(&mut self, marks: &[u64]) {
        let times = marks.windows(2).map(|w| w[1] - w[0]);
        if self.fastest.is_empty() {
            self.fastest = times.collect();
        } else {
            for (f, t) in self.fastest.iter_mut().zip(times) {
                *f = (*f).min(t);
            }
        }
        self.totals
            .push(marks.last().unwrap_or(&0) - marks.first().unwrap_or(&0));
    }

    /// Ns per pair undisturbed: the segments' fastest times over `pairs` (infinite with no
    /// replay).
    pub fn best(&self, pairs: usize) -> f64 {
        if self.totals.is_empty() {
            return f64::INFINITY;
        }
        self.fastest.iter().sum::<u64>() as f64 / pairs.max(1) as f64
    }

    /// How far the median whole replay lies above [`Samples::best`], as a fraction of it.
    pub fn spread(&self, pairs: usize) -> f64 {
        let mut v = self.totals.clone();
        v.sort_unstable();
        let median = v.get(v.len() / 2).copied().unwrap_or(0) as f64 / pairs.max(1) as f64;
        median / self.best(pairs) - 1.0
    }
}
