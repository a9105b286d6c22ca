//! Thread CPU time, for benchmarks on a shared machine: other processes' time slices do not count,
//! so a loaded machine does not double a measurement at random, as it does wall time.

use criterion::measurement::{Measurement, ValueFormatter, WallTime};

/// The calling thread's CPU time in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable `timespec`; the clock exists on every Linux this runs on,
    // and on failure `ts` stays zero (a visible zero time, not undefined behaviour).
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Criterion measurement in the measuring thread's CPU time, in nanoseconds. Work the code under
/// test hands to other threads (a backend's worker) is not in it.
pub struct ThreadCpu;

impl Measurement for ThreadCpu {
    type Intermediate = u64;
    type Value = u64;

    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns() - start
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        // Nanoseconds, formatted as wall time is.
        static WALL: WallTime = WallTime;
        WALL.formatter()
    }
}
