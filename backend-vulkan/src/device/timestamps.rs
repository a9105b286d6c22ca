//! How the compute queue's timestamps read (a device property): the tick period and the valid
//! bits, from which the timeline turns two timestamps into a duration.

/// How the compute queue's timestamps read: nanoseconds per tick and the valid bits.
#[derive(Copy, Clone, Debug, PartialEq)]
pub(crate) struct Timestamps {
    period_ns: f64,
    mask: u64,
}

impl Timestamps {
    /// From the compute family's `timestampValidBits` and the device's `timestampPeriod`;
    /// `None` where the family writes no timestamps.
    pub(crate) fn new(valid_bits: u32, period_ns: f32) -> Option<Timestamps> {
        if valid_bits == 0 || period_ns.is_nan() || period_ns <= 0.0 {
            return None;
        }
        let mask = if valid_bits >= 64 {
            u64::MAX
        } else {
            (1u64 << valid_bits) - 1
        };
        Some(Timestamps {
            period_ns: f64::from(period_ns),
            mask,
        })
    }

    /// Nanoseconds from tick `from` to tick `to` (modulo the valid bits); zero when `to` is
    /// earlier, which in-order execution on one queue rules out and a wrap would fake.
    pub(crate) fn between(&self, from: u64, to: u64) -> u64 {
        let ticks = to.wrapping_sub(from) & self.mask;
        if ticks > self.mask / 2 {
            return 0;
        }
        (ticks as f64 * self.period_ns) as u64
    }
}
