#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::collections::BTreeMap;

use super::*;
use crate::plan::rng::Rng;

#[test]
fn matches_an_ordered_map_through_splits_and_empty_blocks() {
    let mut rng = Rng::new(9);
    let mut set = LiveSet::default();
    let mut map: BTreeMap<u64, Entry> = BTreeMap::new();
    for step in 0..200_000u32 {
        // Grow to a few thousand entries, shrink to none, grow again: blocks split and empty.
        let grow = (step / 20_000) % 2 == 0;
        let offset = rng.below(1 << 16) * 4;
        if (grow && rng.below(4) != 0) || map.is_empty() {
            if let std::collections::btree_map::Entry::Vacant(v) = map.entry(offset) {
                let entry = Entry {
                    offset,
                    end: offset + 1 + rng.below(3),
                    id: step,
                };
                v.insert(entry);
                set.insert(entry);
            }
        } else {
            let key = *map
                .range(offset..)
                .next()
                .or_else(|| map.iter().next())
                .unwrap()
                .0;
            assert_eq!(set.remove(key), map.remove(&key));
            assert_eq!(set.remove(key), None);
        }
        let probe = rng.below(1 << 18) + 1;
        let want = map.range(..probe).next_back().map(|(_, e)| *e);
        assert_eq!(set.last_below(probe), want, "step {step}");
    }
    assert_eq!(set.last_below(0), None);
}
