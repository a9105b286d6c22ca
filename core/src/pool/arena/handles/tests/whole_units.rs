//! A backend that takes memory back only in whole units (the host behind a model of CUDA's
//! physical allocations), and the pool helpers the tests over it share.

use super::*;

/// A model of CUDA's physical allocations over the host: one unit per call that backs memory,
/// and a range that cuts a unit refused (as `cuMemUnmap` refuses part of a mapping).
pub(super) struct WholeUnits {
    pub(super) host: HostBackend,
    /// The one reserved block's extent and its units (size by offset).
    state: Mutex<(u64, BTreeMap<u64, u64>)>,
    /// Units created (`cuMemCreate`).
    created: AtomicU64,
    /// Units moved by `remap_range`.
    moved: AtomicU64,
    /// Whether it offers `extend_block` (CUDA does; without it the pool commits each growth).
    extends: bool,
}

impl WholeUnits {
    pub(super) fn new() -> Arc<Self> {
        Self::with(false)
    }

    /// One that extends its block without memory, as CUDA does.
    pub(super) fn extending() -> Arc<Self> {
        Self::with(true)
    }

    fn with(extends: bool) -> Arc<Self> {
        Arc::new(WholeUnits {
            host: HostBackend::new(HostConfig::default()).unwrap(),
            state: Mutex::new((0, BTreeMap::new())),
            created: AtomicU64::new(0),
            moved: AtomicU64::new(0),
            extends,
        })
    }

    /// The units inside `[offset, offset + size)`; an error when one is cut.
    fn inside(units: &BTreeMap<u64, u64>, offset: u64, size: u64) -> Result<Vec<(u64, u64)>> {
        let cut = |at: u64| {
            units
                .range(..at)
                .next_back()
                .is_some_and(|(o, n)| o + n > at)
        };
        if cut(offset) || cut(offset + size) {
            return Err(Error::invalid(format!(
                "[{offset}, {}) cuts a unit",
                offset + size
            )));
        }
        Ok(units
            .range(offset..offset + size)
            .map(|(o, n)| (*o, *n))
            .collect())
    }

    pub(super) fn created(&self) -> u64 {
        self.created.load(Ordering::Relaxed)
    }

    pub(super) fn moved(&self) -> u64 {
        self.moved.load(Ordering::Relaxed)
    }

    pub(super) fn units(&self) -> usize {
        self.state.lock().unwrap().1.len()
    }
}

host_adaptor!(WholeUnits, growable);

impl Growable for WholeUnits {
    fn in_place_growth(&self) -> InPlaceGrowth {
        let g = self.host.in_place_growth();
        InPlaceGrowth {
            granularity: G,
            max_reserve: g.max_reserve / G * G,
            whole_units: true,
            ..g
        }
    }
    fn reserve_block(&self, desc: &BlockDesc<'_>, reserve: u64) -> Result<BlockId> {
        let id = self.host.reserve_block(desc, reserve)?;
        let mut st = self.state.lock().unwrap();
        *st = (desc.size, BTreeMap::new());
        if desc.size > 0 {
            st.1.insert(0, desc.size);
            self.created.fetch_add(1, Ordering::Relaxed);
        }
        Ok(id)
    }
    fn resize_block(&self, block: BlockId, size: u64) -> Result<u64> {
        let mut st = self.state.lock().unwrap();
        let (extent, units) = &mut *st;
        if size > *extent {
            self.host.resize_block(block, size)?;
            units.insert(*extent, size - *extent);
            self.created.fetch_add(1, Ordering::Relaxed);
            *extent = size;
            return Ok(size);
        }
        // The unit that holds the new end stays whole.
        let now = match units.range(..size).next_back() {
            Some((o, n)) if o + n > size => o + n,
            _ => size,
        };
        units.split_off(&now);
        *extent = now;
        self.host.resize_block(block, now)
    }
    fn extend_block(&self, block: BlockId, size: u64) -> Result<()> {
        if !self.extends {
            return Err(Error::Unsupported {
                backend: "whole units",
                what: "extend_block".into(),
            });
        }
        let mut st = self.state.lock().unwrap();
        self.host.extend_block(block, size)?;
        st.0 = size;
        Ok(())
    }
    fn decommit_range(&self, block: BlockId, offset: u64, size: u64) -> Result<()> {
        let mut st = self.state.lock().unwrap();
        for (o, _) in Self::inside(&st.1, offset, size)? {
            st.1.remove(&o);
        }
        self.host.decommit_range(block, offset, size)
    }
    fn commit_range(&self, block: BlockId, offset: u64, size: u64) -> Result<()> {
        let mut st = self.state.lock().unwrap();
        if !Self::inside(&st.1, offset, size)?.is_empty() {
            return Err(Error::invalid("commit_range over memory"));
        }
        self.host.commit_range(block, offset, size)?;
        st.1.insert(offset, size);
        self.created.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn remap_range(&self, block: BlockId, from: u64, to: u64, size: u64) -> Result<()> {
        let mut st = self.state.lock().unwrap();
        let src = Self::inside(&st.1, from, size)?;
        if src.iter().map(|u| u.1).sum::<u64>() != size
            || !Self::inside(&st.1, to, size)?.is_empty()
        {
            return Err(Error::invalid("remap_range: not memory to a hole"));
        }
        self.host.remap_range(block, from, to, size)?;
        for (o, n) in &src {
            st.1.remove(o);
            st.1.insert(to + (o - from), *n);
        }
        self.moved.fetch_add(src.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// A pool over `backend` through the validating front, learned placement on or off.
pub(super) fn pool(backend: &Arc<WholeUnits>, learned: bool) -> ArenaPool {
    let front = Arc::new(crate::Validated::new(backend.clone()));
    let config = ArenaConfig {
        learned_placement: learned,
        ..ArenaConfig::device()
    };
    ArenaPool::new(front, config).unwrap()
}

/// The pool's invariants (its units among them) hold, its committed bytes are the backend's,
/// and it counts as many units as the backend holds.
pub(super) fn check(backend: &WholeUnits, p: &ArenaPool) {
    p.check_invariants().unwrap();
    assert_eq!(p.stats().reserved, backend.host.block_bytes());
    let st = p.growing().unwrap().lock();
    if let Some(h) = st.blocks[0].as_ref().and_then(|b| b.role.holes.as_ref()) {
        assert_eq!(h.unit_count(), Some(backend.units()));
    }
}

/// Frees `live`, trims, and checks that nothing is left in the pool or the backend.
pub(super) fn release(
    backend: &WholeUnits,
    p: &ArenaPool,
    live: impl IntoIterator<Item = Allocation>,
) {
    for a in live {
        p.free(a.handle).unwrap();
    }
    p.trim().unwrap();
    assert_eq!((backend.host.block_count(), p.stats().reserved), (0, 0));
}
