//! The lifetime endpoints of an instance in time order, sorted once per [`super::solve`] and shared
//! by every sweep over time: validation's group totals, the lower bound, sweep-line good fit, the
//! compressed time of the occupancy trees and the verification.
//!
//! A million buffers have two million endpoints. A comparison sort of them costs a few hundred
//! milliseconds on a loaded machine and `solve` used to run five of them, so one radix sort (O(n))
//! now serves all; only time ranges that need all 64 bits fall back to a comparison sort. Each
//! endpoint carries its buffer's size and alignment (through the sort itself), and each free the
//! rank of its buffer's allocation among the allocations: the sweeps then read memory in order and
//! keep their state per buffer in allocation order, where looking buffers up by id at each endpoint
//! (a cache miss at every one, at a million buffers) made each pass cost as much as the sweep-line
//! plan itself.
//!
//! The sort is most significant digit first, on as many threads as `solve` has: each thread
//! buckets its share of the buffers by the high time bits (no thread waits on another), then each
//! takes a run of buckets, sorts each bucket by the low bits in cache, ranks its allocations and
//! measures its part of the load profile from a start it knows from the bucket counts. Ranks a
//! free cannot see (its allocation in an earlier thread's run) are filled in after, and the
//! threads' profiles are joined in order. Equal keys cannot occur (each holds its
//! buffer's id), so the result is the same on any number of threads.

use std::ops::Range;

use super::Buffer;

/// Radix digit width: 2048 buckets (16 KiB of counters) stay in L1.
const DIGIT_BITS: u32 = 11;

/// Buckets this small are sorted by comparison: clearing a digit's counters costs more.
const COUNTING_MIN: usize = 64;

/// Most threads one sort runs on: each keeps a rank per buffer (4 bytes), and beyond a few the
/// passes are bound by memory, not by cores.
const MAX_SORTERS: usize = 8;

/// Lifetime endpoints sorted by time, frees before allocations at equal times (half-open
/// lifetimes), then allocations by size descending (the order an online best fit serves them
/// best), then by buffer id.
#[derive(Debug, Clone)]
pub(crate) struct Events {
    list: Vec<Endpoint>,
    /// See [`Events::peak_load`] and [`Events::worst_group`].
    load: (u64, u64),
    worst: (u128, usize),
}

/// Tag bit of an allocation event (buffer ids stay below 2^31).
const ALLOC: u32 = 1 << 31;

/// A rank not known yet (ranks stay below 2^31).
const UNRANKED: u32 = u32::MAX;

/// One endpoint as stored (24 bytes).
#[derive(Debug, Clone, Copy, bytemuck::Zeroable)]
struct Endpoint {
    time: u64,
    size: u64,
    /// `tag & ALLOC` set for an allocation, `tag & !ALLOC` the buffer id.
    tag: u32,
    /// An allocation's log2 alignment; a free's [`Event::opened`].
    aux: u32,
}

impl Endpoint {
    fn event(&self) -> Event {
        let alloc = self.tag & ALLOC != 0;
        Event {
            time: self.time,
            alloc,
            id: self.tag & !ALLOC,
            size: self.size,
            align: if alloc { 1 << self.aux } else { 1 },
            opened: if alloc { 0 } else { self.aux },
        }
    }
}

/// One endpoint, with its buffer's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Event {
    pub time: u64,
    pub alloc: bool,
    pub id: u32,
    pub size: u64,
    /// The buffer's alignment at an allocation (1 at a free).
    pub align: u64,
    /// At a free, the rank of the buffer's allocation among all allocations in time order (0 at
    /// an allocation): a sweep keeps what it knows of live buffers in that order, near in memory
    /// to the endpoints around, instead of in input order.
    pub opened: u32,
}

impl Events {
    /// Sorts the endpoints of valid buffers (`lower < upper`, fewer than 2^31 buffers).
    pub fn new(buffers: &[Buffer]) -> Events {
        Events::on(buffers, 1)
    }

    /// [`Events::new`] on `threads` threads (at least one, at most [`MAX_SORTERS`] used); the same
    /// result for any count.
    pub fn on(buffers: &[Buffer], threads: usize) -> Events {
        debug_assert!(buffers.len() < ALLOC as usize);
        let (min, max) = buffers.iter().fold((u64::MAX, 0), |(lo, hi), b| {
            (lo.min(b.lower), hi.max(b.upper))
        });
        let (mut list, runs) = match Keys::new(buffers.len(), min, max) {
            Some(keys) => keys.sort(buffers, threads.clamp(1, MAX_SORTERS)),
            None => {
                let mut list = compared(buffers);
                let mut run = Run::new(0, 0, buffers.len());
                run.finish(&mut list);
                (list, vec![run])
            }
        };
        // Frees whose allocation an earlier thread ranked.
        let mut base = 0;
        for (r, run) in runs.iter().enumerate() {
            for &k in &run.unranked {
                let e = &mut list[base + k];
                let id = (e.tag & !ALLOC) as usize;
                e.aux = runs[..r]
                    .iter()
                    .map(|earlier| earlier.ranks[id])
                    .find(|&rank| rank != UNRANKED)
                    .unwrap_or(UNRANKED);
                debug_assert_ne!(e.aux, UNRANKED, "a free before its allocation");
            }
            base += run.len;
        }
        let (load, worst) = join(&runs);
        Events { list, load, worst }
    }

    /// The endpoints in order.
    pub fn iter(&self) -> impl Iterator<Item = Event> + '_ {
        self.list.iter().map(Endpoint::event)
    }

    /// Number of endpoints (twice the buffers).
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// The endpoints at positions `range`, either way round.
    pub fn range(&self, range: Range<usize>) -> impl DoubleEndedIterator<Item = Event> + '_ {
        self.list[range].iter().map(Endpoint::event)
    }

    /// The max-load lower bound and a time at which it is reached (0 for no buffers).
    pub fn peak_load(&self) -> (u64, u64) {
        self.load
    }

    /// The largest padded total `sum(size + align - 1)` of one time-connected group of buffers
    /// (a maximal run of the sweep during which something is live), exact, and its buffer count.
    pub fn worst_group(&self) -> (u128, usize) {
        self.worst
    }

    /// Compressed time: each buffer's lifetime as `[first, last)` over the elementary segments
    /// between distinct endpoint times, and the number of segments.
    pub fn spans(&self, n: usize) -> (Vec<(u32, u32)>, usize) {
        let mut span = vec![(0u32, 0u32); n];
        let mut rank = 0u32;
        let mut prev = None;
        for e in self.iter() {
            if prev.is_some_and(|p| p != e.time) {
                rank += 1;
            }
            prev = Some(e.time);
            let s = &mut span[e.id as usize];
            if e.alloc {
                s.0 = rank;
            } else {
                s.1 = rank;
            }
        }
        (span, rank as usize)
    }
}

/// One thread's run of endpoints, being finished: allocations ranked, frees given their
/// allocation's rank, and the load profile measured from the run's start.
#[derive(Debug)]
struct Run {
    /// Endpoints in the run.
    len: usize,
    /// Rank of the run's next allocation.
    allocs: u32,
    /// Buffers live, counted from before the run.
    live: usize,
    /// Live bytes relative to the run's start, and the highest after an allocation with its time.
    bytes: i128,
    high: Option<(i128, u64)>,
    /// Whether the group live at the run's start (if any) is still going, and its total in the
    /// run; the total of the group now going (if it started in the run); the largest of those.
    in_head: bool,
    head: (u128, usize),
    group: Option<(u128, usize)>,
    worst: (u128, usize),
    /// The rank of each buffer allocated in the run, by id (else [`UNRANKED`]): one array per
    /// thread, as threads writing one array at random places would share its cache lines.
    ranks: Vec<u32>,
    /// Positions (in the run) of frees whose allocation is in an earlier run.
    unranked: Vec<usize>,
}

impl Run {
    /// A run of `n` buffers' endpoints starting at allocation rank `allocs` with `live` buffers
    /// live before it.
    fn new(allocs: u32, live: usize, n: usize) -> Self {
        Run {
            len: 0,
            allocs,
            live,
            bytes: 0,
            high: None,
            in_head: live > 0,
            head: (0, 0),
            group: None,
            worst: (0, 0),
            ranks: vec![UNRANKED; n],
            unranked: Vec::new(),
        }
    }

    /// Finishes the run's next endpoints, `list`, sorted by key: allocations at one time largest
    /// first (the sort left them in id order), ranked (into `ranks` by buffer id), frees given
    /// their rank, and the profile.
    fn finish(&mut self, list: &mut [Endpoint]) {
        let mut k = 0;
        while k < list.len() {
            let (time, kind) = (list[k].time, list[k].tag & ALLOC);
            let mut j = k + 1;
            while j < list.len() && list[j].time == time && list[j].tag & ALLOC == kind {
                j += 1;
            }
            let group = &mut list[k..j];
            if kind != 0 {
                group.sort_by_key(|e| std::cmp::Reverse(e.size));
                for e in group {
                    self.ranks[(e.tag & !ALLOC) as usize] = self.allocs;
                    self.allocs += 1;
                    self.open(time, e.size, 1 << e.aux);
                }
            } else {
                for (i, e) in group.iter_mut().enumerate() {
                    e.aux = self.ranks[(e.tag & !ALLOC) as usize];
                    if e.aux == UNRANKED {
                        self.unranked.push(self.len + k + i);
                    }
                    self.live -= 1;
                    self.bytes -= i128::from(e.size);
                }
            }
            k = j;
        }
        self.len += list.len();
    }

    fn open(&mut self, time: u64, size: u64, align: u64) {
        if self.live == 0 {
            self.in_head = false;
            self.group = Some((0, 0));
        }
        self.live += 1;
        let padded = size as u128 + (align - 1) as u128;
        let total = if self.in_head {
            &mut self.head
        } else {
            self.group.get_or_insert((0, 0))
        };
        *total = (total.0 + padded, total.1 + 1);
        if !self.in_head {
            self.worst = self.worst.max(*total);
        }
        self.bytes += i128::from(size);
        if self.high.is_none_or(|(h, _)| self.bytes > h) {
            self.high = Some((self.bytes, time));
        }
    }
}

/// The profile of the whole list from its runs' in order: the max-load bound with the earliest
/// time it is reached, and the largest group total.
fn join(runs: &[Run]) -> ((u64, u64), (u128, usize)) {
    let (mut base, mut load) = (0i128, (0i128, 0u64));
    let (mut open, mut worst) = ((0u128, 0usize), (0u128, 0usize));
    for run in runs {
        if let Some((high, time)) = run.high
            && base + high > load.0
        {
            load = (base + high, time);
        }
        base += run.bytes;
        // The run's first allocations (until nothing is live) add to the group going before it.
        open = (open.0 + run.head.0, open.1 + run.head.1);
        worst = worst.max(open).max(run.worst);
        if let Some(group) = run.group {
            open = group;
        }
    }
    let load = (u64::try_from(load.0).unwrap_or(u64::MAX), load.1);
    (load, worst)
}

/// Bits of a radix key below the id: an allocation's log2 alignment (at most 62).
const ALIGN_BITS: u32 = 6;

/// The radix key of an endpoint: `((time - min) << 1 | alloc) << low | id << ALIGN_BITS |
/// log2 alignment`, sorted on its `time` bits above `low`, paired with the buffer's size.
#[derive(Debug, Clone, Copy)]
struct Keys {
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
    fn new(n: usize, min: u64, max: u64) -> Option<Keys> {
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
    fn sort(&self, buffers: &[Buffer], threads: usize) -> (Vec<Endpoint>, Vec<Run>) {
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

/// The endpoints sorted by comparison, for time ranges the radix keys cannot hold.
fn compared(buffers: &[Buffer]) -> Vec<Endpoint> {
    let endpoint = |id: usize, alloc: bool| {
        let b = &buffers[id];
        Endpoint {
            time: if alloc { b.lower } else { b.upper },
            size: b.size,
            tag: id as u32 | if alloc { ALLOC } else { 0 },
            aux: if alloc { b.align.trailing_zeros() } else { 0 },
        }
    };
    let mut list: Vec<Endpoint> = (0..buffers.len())
        .flat_map(|i| [endpoint(i, false), endpoint(i, true)])
        .collect();
    list.sort_unstable_by_key(|e| (e.time, e.tag & ALLOC, e.tag & !ALLOC));
    list
}

#[cfg(test)]
mod tests;
