//! Pins a compute pool's threads one per CPU when the pool spans every CPU the process may run
//! on (Linux; elsewhere, and for a smaller pool, nothing).
//!
//! Left to the scheduler, a fresh pool's threads were woken onto one CPU for the first tens of
//! milliseconds of work, so the parallel loops of a run of short ops took turns instead of
//! overlapping (a small model's first runs took half again as long as later ones; numbers in
//! `docs/decisions/host-pool-pinning.md`). A pool as large as the CPU set gains nothing from
//! migration: every CPU has one of its threads. A smaller pool keeps the scheduler's choice.
//! Pinning is best effort: a failed call leaves the thread unpinned.

/// Pins the calling thread, thread `index` of a pool of `threads`, to the `index`-th CPU the
/// process may run on, when the pool has exactly one thread per such CPU.
pub(super) fn pin(index: usize, threads: usize) {
    #[cfg(target_os = "linux")]
    {
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: `cpu_set_t` is plain bits (all-zero is the empty set); both calls read or
        // write exactly `size` bytes of the sets passed, and affect only the calling thread (0).
        unsafe {
            let mut allowed: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, size, &mut allowed) != 0 {
                return;
            }
            let setsize = libc::CPU_SETSIZE as usize;
            let cpus: Vec<usize> = (0..setsize)
                .filter(|&c| libc::CPU_ISSET(c, &allowed))
                .collect();
            if cpus.len() != threads || index >= cpus.len() {
                return;
            }
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpus[index], &mut one);
            libc::sched_setaffinity(0, size, &one);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (index, threads);
}
