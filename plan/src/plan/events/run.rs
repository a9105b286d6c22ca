//! One thread's run of sorted endpoints being finished (allocations ranked, frees given their
//! allocation's rank, the load profile measured), and the join of the runs' profiles.

use super::{ALLOC, Endpoint, UNRANKED};

/// One thread's run of endpoints, being finished: allocations ranked, frees given their
/// allocation's rank, and the load profile measured from the run's start.
#[derive(Debug)]
pub(super) struct Run {
    /// Endpoints in the run.
    pub(super) len: usize,
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
    pub(super) ranks: Vec<u32>,
    /// Positions (in the run) of frees whose allocation is in an earlier run.
    pub(super) unranked: Vec<usize>,
}

impl Run {
    /// A run of `n` buffers' endpoints starting at allocation rank `allocs` with `live` buffers
    /// live before it.
    pub(super) fn new(allocs: u32, live: usize, n: usize) -> Self {
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
    pub(super) fn finish(&mut self, list: &mut [Endpoint]) {
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
pub(super) fn join(runs: &[Run]) -> ((u64, u64), (u128, usize)) {
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
