use super::*;
use crate::plan::rng::Rng;

#[test]
fn classes_are_monotone_and_tight() {
    let mut prev = (0, 0);
    for len in (1..5000u64).chain([u64::MAX / 3, u64::MAX - 1, u64::MAX]) {
        let c = class(len);
        assert!(c >= prev, "class({len}) = {c:?} below {prev:?}");
        assert!(c.0 < LEVELS && c.1 < SUB);
        prev = c;
    }
    // One class spans at most 1/32 of its lengths.
    assert_eq!(class(64), class(65));
    assert_ne!(class(64), class(66));
    assert_ne!(class(31), class(32));
}

#[test]
fn freeing_coalesces_and_gives_the_tail_back() {
    let mut f = FreeList::new();
    let (a, ha) = f.alloc(100, 1);
    let (b, hb) = f.alloc(50, 1);
    let (c, hc) = f.alloc(10, 1);
    assert_eq!((a, b, c, f.top()), (0, 100, 150, 160));
    f.free(ha);
    f.free(hb);
    // [0, 150) is one free block: 120 bytes fit at 0.
    assert_eq!(f.alloc(120, 1).0, 0);
    f.free(hc);
    assert_eq!(f.top(), 120, "the freed tail returns to the top");
}

#[test]
fn best_fit_among_free_blocks_and_alignment() {
    let mut f = FreeList::new();
    let h: Vec<u32> = [300, 8, 100, 8, 200, 8]
        .iter()
        .map(|&s| f.alloc(s, 1).1)
        .collect();
    for &k in &[h[0], h[2], h[4]] {
        f.free(k);
    }
    // Free: [0,300), [308,408), [416,616). 90 bytes go in the 100-byte hole, 190 in the 200 one.
    assert_eq!(f.alloc(90, 1).0, 308);
    assert_eq!(f.alloc(190, 1).0, 416);
    // Aligned: 64-aligned within [0, 300).
    let (o, _) = f.alloc(64, 64);
    assert_eq!(o % 64, 0);
    assert!(o + 64 <= 300);
}

/// Random alloc/free sequences: allocated ranges never overlap, every offset is aligned, and the
/// free blocks plus the used ones tile `[0, top)` (checked through the address-order links).
#[test]
fn random_sequences_never_overlap() {
    let mut rng = Rng::new(7);
    let mut f = FreeList::new();
    let mut live: Vec<(u64, u64, u32)> = Vec::new();
    for step in 0..20_000 {
        if live.is_empty() || rng.below(100) < 55 {
            let size = 1 + rng.below(if step % 7 == 0 { 1 << 20 } else { 4096 });
            let align = 1 << rng.below(7);
            let (o, h) = f.alloc(size, align);
            assert_eq!(o % align, 0);
            live.push((o, o + size, h));
        } else {
            let k = rng.below(live.len() as u64) as usize;
            f.free(live.swap_remove(k).2);
        }
        if step % 997 == 0 {
            let mut sorted: Vec<_> = live.iter().map(|&(a, b, _)| (a, b)).collect();
            sorted.sort_unstable();
            assert!(
                sorted.windows(2).all(|w| w[0].1 <= w[1].0),
                "overlap at {step}"
            );
            assert_eq!(sorted.last().map_or(0, |r| r.1), f.top());
            let (mut end, mut k) = (0, first_block(&f));
            while let Some(b) = k {
                let block = f.blocks[b as usize];
                assert_eq!(block.offset, end, "blocks tile the arena");
                end += block.len;
                k = (block.next != NIL).then_some(block.next);
            }
            assert_eq!(end, f.top());
        }
    }
}

/// The first block in address order (the one at offset 0), if any.
fn first_block(f: &FreeList) -> Option<u32> {
    let mut k = f.last;
    if k == NIL {
        return None;
    }
    while f.blocks[k as usize].prev != NIL {
        k = f.blocks[k as usize].prev;
    }
    Some(k)
}
