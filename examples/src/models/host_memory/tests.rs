//! Parsing `/proc/self/status` and the meter's phases.

use super::*;

#[test]
fn parses_the_status_fields_in_kib() {
    let status = "Name:\tminilm\nVmHWM:\t  125000 kB\nVmRSS:\t  120000 kB\nRssAnon:\t  100000 kB\n\
                  RssFile:\t   19000 kB\nRssShmem:\t    1000 kB\n";
    assert_eq!(
        HostMemory::parse(status),
        Some(HostMemory {
            rss: 120_000 * 1024,
            hwm: 125_000 * 1024,
            anon: 100_000 * 1024,
            file: 19_000 * 1024,
        })
    );
    assert_eq!(HostMemory::parse("VmRSS:\t 1 kB\n"), None, "fields missing");
    assert_eq!(
        HostMemory::parse("VmRSS:\t x kB\nVmHWM: 1 kB\nRssAnon: 1 kB\nRssFile: 1 kB\n"),
        None,
        "not a number"
    );
}

/// On Linux, a phase that touches 64 MiB of fresh heap and frees it shows it in its peak but not
/// at its end; the next, idle phase has a lower peak when resets work.
#[cfg(target_os = "linux")]
#[test]
fn a_phase_that_touches_memory_shows_it_in_its_peak() {
    const SIZE: u64 = 64 << 20;
    let mut meter = PhaseMeter::start();
    let start = meter.start.expect("linux has /proc/self/status");
    {
        let big = std::hint::black_box(vec![1u8; SIZE as usize]);
        assert_eq!(big.iter().map(|&b| u64::from(b)).sum::<u64>(), SIZE);
    }
    meter.phase("touch and free 64 MiB");
    meter.phase("idle");
    let [touch, idle] = meter.phases() else {
        panic!("two phases")
    };
    let (touch_peak, idle_peak) = (touch.peak.expect("peak"), idle.peak.expect("peak"));
    assert!(touch_peak >= start.rss + SIZE / 2, "{touch:?} vs {start:?}");
    // A 64 MiB vector is its own mapping, unmapped when freed.
    assert!(
        touch.end.expect("figures").rss + SIZE / 2 <= touch_peak,
        "{touch:?}"
    );
    if meter.resets() {
        assert!(idle_peak + SIZE / 2 <= touch_peak, "{idle:?} vs {touch:?}");
    }
    assert_eq!(meter.peak(), Some(touch_peak.max(idle_peak)));
    let text = meter.to_text();
    assert!(
        text.contains("touch and free") && text.contains("idle"),
        "{text}"
    );
    assert_eq!(
        meter.to_json()["phases"][0]["phase"],
        "touch and free 64 MiB"
    );
}
