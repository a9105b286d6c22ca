//! The spill stress on every target the suite knows (one-device targets), for longer than the
//! suite's case: `spill_stress [SECONDS per mode, default 30] [THREADS, default 16]`. Each target
//! runs the workload of `tensormem_conformance::spill_stress` without and with pins and prints
//! its reads, bad reads, spills and restores; the exit status is 1 if any target had a bad read
//! or an error. Not part of CI: run it by hand, in release mode.

use std::time::Duration;

use tensormem_conformance::{backends, spill_stress};

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(30);
    let threads: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(16);
    let mut failed = false;
    for target in backends::targets() {
        if target.second.is_some() || target.set_cases_only {
            continue;
        }
        for pins in [false, true] {
            let backend = match (target.create)() {
                Ok(b) => b,
                Err(e) => {
                    println!("{}: skipped ({e})", target.name);
                    break;
                }
            };
            let time = Duration::from_secs(seconds);
            match spill_stress::run(backend, false, threads, pins, time) {
                Ok(r) => {
                    println!(
                        "{} pins={pins}: {threads} threads x {seconds} s: {} reads, {} bad reads, \
                         {} spills, {} restores, {} errors",
                        target.name,
                        r.reads,
                        r.bad_reads,
                        r.spills,
                        r.restores,
                        r.errors.len()
                    );
                    for e in r.errors.iter().take(5) {
                        println!("  error: {e}");
                    }
                    failed |= r.bad_reads > 0 || !r.errors.is_empty();
                }
                Err(e) => {
                    println!("{} pins={pins}: {e}", target.name);
                    failed = true;
                }
            }
        }
    }
    std::process::exit(i32::from(failed));
}
