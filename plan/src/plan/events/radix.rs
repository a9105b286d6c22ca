//! The most-significant-digit radix sort of the endpoints: the key layout, each thread's
//! bucketing of its share of the buffers, and the runs of buckets sorted by the low bits.

use std::ops::Range;

use super::run::Run;
use super::{ALLOC, Endpoint};
use crate::plan::Buffer;

/// Radix digit width: 2048 buckets (16 KiB of counters) stay in L1.
const DIGIT_BITS: u32 = 11;

/// Buckets this small are sorted by comparison: clearing a digit's counters costs more.
const COUNTING_MIN: usize = 64;

/// Bits of a radix key below the id: an allocation's log2 alignment (at most 62).
const ALIGN_BITS: u32 = 6;

/// The radix key of an endpoint: `((time - min) << 1 | alloc) << low | id << ALIGN_BITS |
/// log2 alignment`, sorted on its `time` bits above `low`, paired with the buffer's size.
#[derive(Debug, Clone, Copy)]
pub(super) struct Keys {
    min: u64,
    /// Bits below the time: the id's and the alignment's.
    low: u32,
    id_bits: u32,
    /// Time bits (with the allocation flag); the top `high` of them pick the bucket.
    time: u32,
    high: u32,
}

impl Keys {
    /// The layout for `n` buffers with times in `[min, max]`, or `None` when it does not fit in
    /// 64 bits (times spanning more than about 2^32 steps at a million buffers).
    pub(super) fn new(n: usize, min: u64, max: u64) -> Option<Keys> {
        if n == 0 {
            return None;
        }
        let id_bits = usize::BITS - n.leading_zeros();
        let low = id_bits + ALIGN_BITS;
        let time = (max.saturating_sub(min) < 1 << 62)
            .then(|| 64 - (((max - min) << 1) | 1).leading_zeros())
            .filter(|t| t + low <= 64)?;
        Some(Keys {
            min,
            low,
            id_bits,
            time,
            high: time.min(DIGIT_BITS),
        })
    }

    /// The two records of buffer `id`: free first.
    fn records(&self, id: usize, b: &Buffer) -> [(u64, u64); 2] {
        let id = (id as u64) << ALIGN_BITS;
        let free = (((b.upper - self.min) << 1) << self.low) | id;
        let alloc = ((((b.lower - self.min) << 1) | 1) << self.low)
            | id
            | u64::from(b.align.trailing_zeros());
        [(free, b.size), (alloc, b.size)]
    }

    fn bucket(&self, key: u64) -> usize {
        (key >> (self.low + self.time - self.high)) as usize
    }

    fn endpoint(&self, (key, size): (u64, u64)) -> Endpoint {
        let alloc = (key >> self.low) & 1 == 1;
        let id = ((key >> ALIGN_BITS) & ((1 << self.id_bits) - 1)) as u32;
        Endpoint {
            time: self.min + (key >> (self.low + 1)),
            size,
            tag: id | if alloc { ALLOC } else { 0 },
            aux: if alloc {
                (key & ((1 << ALIGN_BITS) - 1)) as u32
            } else {
                0
            },
        }
    }

    /// The sorted endpoints and their runs (one per thread, in order).
    pub(super) fn sort(&self, buffers: &[Buffer], threads: usize) -> (Vec<Endpoint>, Vec<Run>) {
        let parts = split(buffers.len(), threads);
        // Each thread buckets its share of the buffers by the high time bits.
        let bucketed: Vec<Bucketed> = in_parallel(parts, |part| self.bucket_all(buffers, &part));
        let buckets = 1usize << self.high;
        let total = 2 * buffers.len();
        // Runs of buckets with about equal numbers of endpoints, at most one per thread, each with
        // the allocation rank and the live count at its start.
        let mut runs: Vec<(Range<usize>, u32, usize, usize)> = Vec::with_capacity(threads);
        let (mut first, mut rank, mut live, mut start) = (0, 0, 0, 0);
        let (mut at, mut opened) = (0usize, 0usize);
        for b in 0..buckets {
            at += bucketed.iter().map(|p| p.len(b)).sum::<usize>();
            opened += bucketed.iter().map(|p| p.allocs[b]).sum::<usize>();
            let full = runs.len() + 1 < threads && at * threads >= total * (runs.len() + 1);
            if full || b + 1 == buckets {
                runs.push((first..b + 1, rank, live, at - start));
                // Ranks stay below 2^31, and no more buffers die than were allocated.
                (first, rank, live, start) = (b + 1, opened as u32, 2 * opened - at, at);
            }
        }
        // Each run writes its endpoints into its own part of one list, which the allocator hands
        // over zeroed (untouched pages), so no pass over it comes before the runs' and none joins
        // their lists after.
        let mut list: Vec<Endpoint> = bytemuck::zeroed_vec(total);
        let mut jobs = Vec::with_capacity(runs.len());
        let mut unclaimed = list.as_mut_slice();
        for (range, rank, live, len) in runs {
            let (part, after) = std::mem::take(&mut unclaimed).split_at_mut(len);
            unclaimed = after;
            jobs.push((range, Run::new(rank, live, buffers.len()), part));
        }
        let runs = in_parallel(jobs, |(range, run, part)| {
            self.finish_buckets(&bucketed, range, run, part)
        });
        (list, runs)
    }

    /// The records of `buffers[part]`, bucketed by the high time bits (in id order within a
    /// bucket), and each bucket's allocation count.
    fn bucket_all(&self, buffers: &[Buffer], part: &Range<usize>) -> Bucketed {
        let buckets = 1usize << self.high;
        let mut starts = vec![0usize; buckets + 1];
        let mut allocs = vec![0usize; buckets];
        for (i, b) in buffers[part.clone()].iter().enumerate() {
            let [free, alloc] = self.records(part.start + i, b);
            starts[self.bucket(free.0) + 1] += 1;
            let a = self.bucket(alloc.0);
            starts[a + 1] += 1;
            allocs[a] += 1;
        }
        let mut sum = 0;
        for start in &mut starts {
            sum += *start;
            *start = sum;
        }
        let mut next = starts.clone();
        let mut records = vec![(0u64, 0u64); 2 * part.len()];
        for (i, b) in buffers[part.clone()].iter().enumerate() {
            for record in self.records(part.start + i, b) {
                let k = self.bucket(record.0);
                records[next[k]] = record;
                next[k] += 1;
            }
        }
        Bucketed {
            records,
            starts,
            allocs,
        }
    }

    /// Sorts and finishes buckets `range` of every thread's records into `out`, the run's
    /// endpoints (exactly as many as those buckets hold).
    fn finish_buckets(
        &self,
        bucketed: &[Bucketed],
        range: Range<usize>,
        mut run: Run,
        out: &mut [Endpoint],
    ) -> Run {
        let mut bucket: Vec<(u64, u64)> = Vec::new();
        let mut scratch: Vec<(u64, u64)> = Vec::new();
        let low_bits = self.time - self.high;
        let mut at = 0;
        for b in range {
            bucket.clear();
            for p in bucketed {
                bucket.extend_from_slice(p.bucket(b));
            }
            self.sort_low(&mut bucket, &mut scratch, low_bits);
            let part = &mut out[at..at + bucket.len()];
            for (e, &r) in part.iter_mut().zip(&bucket) {
                *e = self.endpoint(r);
            }
            run.finish(part);
            at += bucket.len();
        }
        debug_assert_eq!(at, out.len());
        run
    }

    /// Sorts one bucket (records in id order) by the `bits` time bits below the bucket's.
    fn sort_low(&self, bucket: &mut Vec<(u64, u64)>, scratch: &mut Vec<(u64, u64)>, bits: u32) {
        if bits == 0 {
            return;
        }
        let passes = bits.div_ceil(DIGIT_BITS);
        if bucket.len() < COUNTING_MIN || passes > 2 {
            // Keys are distinct (each holds an id): any sort gives the one order.
            bucket.sort_unstable_by_key(|r| r.0);
            return;
        }
        let width = bits.div_ceil(passes);
        let mut counts = vec![0usize; 1 << width];
        scratch.clear();
        scratch.resize(bucket.len(), (0, 0));
        for pass in 0..passes {
            let shift = self.low + pass * width;
            let digit = |key: u64| ((key >> shift) & ((1 << width) - 1)) as usize;
            counts.iter_mut().for_each(|c| *c = 0);
            for r in bucket.iter() {
                counts[digit(r.0)] += 1;
            }
            let mut sum = 0;
            for c in counts.iter_mut() {
                (*c, sum) = (sum, sum + *c);
            }
            for &r in bucket.iter() {
                let k = digit(r.0);
                scratch[counts[k]] = r;
                counts[k] += 1;
            }
            std::mem::swap(bucket, scratch);
        }
    }
}

/// One thread's records bucketed by the high time bits.
#[derive(Debug)]
struct Bucketed {
    records: Vec<(u64, u64)>,
    /// `starts[b]..starts[b + 1]`: bucket `b`'s records.
    starts: Vec<usize>,
    /// Allocations in each bucket.
    allocs: Vec<usize>,
}

impl Bucketed {
    fn bucket(&self, b: usize) -> &[(u64, u64)] {
        &self.records[self.starts[b]..self.starts[b + 1]]
    }

    fn len(&self, b: usize) -> usize {
        self.starts[b + 1] - self.starts[b]
    }
}

/// `0..n` in `parts` ranges of about equal length, in order.
fn split(n: usize, parts: usize) -> Vec<Range<usize>> {
    (0..parts)
        .map(|p| n * p / parts..n * (p + 1) / parts)
        .collect()
}

/// `work` on each item, the first on this thread and the others on threads of their own; the
/// results in the items' order.
fn in_parallel<T: Send, R: Send>(items: Vec<T>, work: impl Fn(T) -> R + Sync) -> Vec<R> {
    let mut items = items.into_iter();
    let Some(first) = items.next() else {
        return Vec::new();
    };
    std::thread::scope(|s| {
        let work = &work;
        let handles: Vec<_> = items.map(|item| s.spawn(move || work(item))).collect();
        let mut results = vec![work(first)];
        results.extend(
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))),
        );
        results
    })
}
