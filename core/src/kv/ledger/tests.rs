use std::collections::HashMap;

use proptest::prelude::*;

use super::*;

/// Block contents as the storage would hold them: one token id per slot, so every read through
/// a table shows whether copy-on-write, prefix hits and swaps kept the right data.
struct Device {
    bt: usize,
    slots: Vec<Option<u32>>,
}

impl Device {
    fn new(bt: usize, blocks: usize) -> Self {
        Device {
            bt,
            slots: vec![None; bt * blocks],
        }
    }
    fn write(&mut self, s: Slot, token: u32) {
        self.slots[s.block as usize * self.bt + s.offset as usize] = Some(token);
    }
    fn read(&self, s: Slot) -> Option<u32> {
        self.slots[s.block as usize * self.bt + s.offset as usize]
    }
    fn apply(&mut self, copies: Vec<BlockCopy>) {
        for c in copies {
            for t in 0..c.tokens as usize {
                self.slots[c.dst as usize * self.bt + t] = self.slots[c.src as usize * self.bt + t];
            }
        }
    }
}

/// The reference: each live sequence's tokens, where they are, and the host copies of swaps.
#[derive(Default)]
struct Model {
    seqs: HashMap<SeqId, (Vec<u32>, SeqState)>,
    host: HashMap<SeqId, Vec<Option<u32>>>,
}

fn check(l: &KvLedger, d: &Device, m: &Model) {
    let s = l.stats();
    assert_eq!(
        s.free_blocks + s.cached_blocks + s.used_blocks,
        s.capacity_blocks
    );
    assert_eq!(s.sequences, m.seqs.len());
    let mut refs = vec![0u32; l.capacity()];
    for (&id, (tokens, state)) in &m.seqs {
        assert_eq!(l.state(id).unwrap(), *state);
        assert_eq!(l.tokens(id).unwrap(), &tokens[..]);
        if *state != SeqState::Resident {
            assert!(l.table(id).unwrap().is_empty());
            continue;
        }
        let table = l.table(id).unwrap();
        assert_eq!(
            table.len(),
            tokens.len().div_ceil(l.block_tokens() as usize)
        );
        for &b in table {
            refs[b as usize] += 1;
        }
        for (pos, &t) in tokens.iter().enumerate() {
            assert_eq!(
                d.read(l.slot(id, pos).unwrap()),
                Some(t),
                "seq {id:?} pos {pos}"
            );
        }
    }
    for (b, &r) in refs.iter().enumerate() {
        assert_eq!(l.refs(b as u32), r, "block {b}");
    }
    assert_eq!(s.used_blocks, refs.iter().filter(|&&r| r > 0).count());
}

#[derive(Clone, Debug)]
enum Step {
    Admit(Vec<u32>, u64),
    Append(usize, u32),
    Fork(usize),
    Truncate(usize, usize),
    Free(usize),
    Preempt(usize, bool),
    Resume(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (prop::collection::vec(0u32..3, 0..10), 0u64..2).prop_map(|(t, s)| Step::Admit(t, s)),
        (0usize..8, 0u32..3).prop_map(|(i, t)| Step::Append(i, t)),
        (0usize..8, 0u32..3).prop_map(|(i, t)| Step::Append(i, t)),
        (0usize..8).prop_map(Step::Fork),
        (0usize..8, 0usize..12).prop_map(|(i, n)| Step::Truncate(i, n)),
        (0usize..8).prop_map(Step::Free),
        (0usize..8, any::<bool>()).prop_map(|(i, s)| Step::Preempt(i, s)),
        (0usize..8).prop_map(Step::Resume),
    ]
}

fn run(bt: u32, capacity: usize, steps: Vec<Step>) {
    let mut l = KvLedger::new(bt, 12, capacity).unwrap();
    let mut d = Device::new(bt as usize, capacity);
    let mut m = Model::default();
    let mut ids: Vec<SeqId> = Vec::new();
    let pick = |ids: &[SeqId], i: usize| ids.get(i % ids.len().max(1)).copied();
    for st in steps {
        match st {
            Step::Admit(tokens, salt) => {
                let (predicted, available) = (l.blocks_to_admit(&tokens, salt), l.available());
                let admitted = l.admit(&tokens, salt);
                match &admitted {
                    Ok(_) => assert_eq!(available - l.available(), predicted, "blocks_to_admit"),
                    Err(KvError::OutOfBlocks { .. }) => assert!(predicted > available),
                    Err(_) => {}
                }
                if let Ok(a) = admitted {
                    for (pos, &t) in tokens.iter().enumerate() {
                        let slot = l.slot(a.seq, pos).unwrap();
                        if pos < a.cached_tokens {
                            assert_eq!(d.read(slot), Some(t), "prefix hit holds other tokens");
                        } else {
                            d.write(slot, t);
                        }
                    }
                    assert!(a.cached_tokens < tokens.len().max(1));
                    m.seqs.insert(a.seq, (tokens, SeqState::Resident));
                    ids.push(a.seq);
                }
            }
            Step::Append(i, t) => {
                let Some(id) = pick(&ids, i) else { continue };
                if let Ok(slot) = l.append(id, t) {
                    d.apply(l.take_copies());
                    d.write(slot, t);
                    m.seqs.get_mut(&id).unwrap().0.push(t);
                } else {
                    assert!(l.take_copies().is_empty());
                }
            }
            Step::Fork(i) => {
                let Some(id) = pick(&ids, i) else { continue };
                if let Ok(child) = l.fork(id) {
                    let parent = m.seqs[&id].clone();
                    m.seqs.insert(child, parent);
                    ids.push(child);
                }
            }
            Step::Truncate(i, n) => {
                let Some(id) = pick(&ids, i) else { continue };
                if l.truncate(id, n).is_ok() {
                    m.seqs.get_mut(&id).unwrap().0.truncate(n);
                }
            }
            Step::Free(i) => {
                let Some(id) = pick(&ids, i) else { continue };
                l.free(id).unwrap();
                m.seqs.remove(&id);
                m.host.remove(&id);
                ids.retain(|&x| x != id);
                assert!(matches!(l.free(id), Err(KvError::FreedSequence { .. })));
            }
            Step::Preempt(i, swap) => {
                let Some(id) = pick(&ids, i) else { continue };
                let how = if swap {
                    Preemption::Swap
                } else {
                    Preemption::Recompute
                };
                if let Ok(blocks) = l.preempt(id, how) {
                    if swap {
                        let bt = bt as usize;
                        let copy = blocks
                            .iter()
                            .flat_map(|&b| d.slots[b as usize * bt..(b as usize + 1) * bt].to_vec())
                            .collect();
                        m.host.insert(id, copy);
                    }
                    let state = if swap {
                        SeqState::Swapped
                    } else {
                        SeqState::Dropped
                    };
                    m.seqs.get_mut(&id).unwrap().1 = state;
                }
            }
            Step::Resume(i) => {
                let Some(id) = pick(&ids, i) else { continue };
                if let Ok(r) = l.resume(id) {
                    let (a, blocks) = (r.admission, r.table);
                    let bt = bt as usize;
                    if let Some(copy) = m.host.remove(&id) {
                        for &c in &r.restore {
                            let b = blocks[c] as usize;
                            d.slots[b * bt..(b + 1) * bt]
                                .copy_from_slice(&copy[c * bt..(c + 1) * bt]);
                        }
                    } else {
                        let tokens = m.seqs[&id].0.clone();
                        for (pos, &t) in tokens.iter().enumerate().skip(a.cached_tokens) {
                            d.write(l.slot(id, pos).unwrap(), t);
                        }
                    }
                    m.seqs.get_mut(&id).unwrap().1 = SeqState::Resident;
                }
            }
        }
        check(&l, &d, &m);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn ledger_matches_reference_after_every_operation(
        bt in 1u32..5,
        capacity in 1usize..14,
        steps in prop::collection::vec(step(), 1..60),
    ) {
        run(bt, capacity, steps);
    }
}

#[test]
fn a_shared_prompt_prefix_is_found_and_its_last_token_is_computed() {
    let mut l = KvLedger::new(4, 64, 16).unwrap();
    let prompt: Vec<u32> = (0..12).collect();
    let a = l.admit(&prompt, 7).unwrap();
    assert_eq!(a.cached_tokens, 0);
    let b = l.admit(&prompt, 7).unwrap();
    // Blocks 0 and 1 are shared; block 2 holds the last token, computed again.
    assert_eq!(b.cached_tokens, 8);
    assert_eq!(l.table(a.seq).unwrap()[..2], l.table(b.seq).unwrap()[..2]);
    assert_ne!(l.table(a.seq).unwrap()[2], l.table(b.seq).unwrap()[2]);
    let other_salt = l.admit(&prompt, 8).unwrap();
    assert_eq!(other_salt.cached_tokens, 0);
    let s = l.stats();
    assert_eq!((s.prefix_hits, s.prefix_misses), (2, 4));
}

#[test]
fn freed_prefixes_stay_cached_until_a_block_is_needed() {
    let mut l = KvLedger::new(2, 64, 3).unwrap();
    let a = l.admit(&[1, 2, 3, 4, 5], 0).unwrap();
    l.free(a.seq).unwrap();
    assert_eq!(l.stats().cached_blocks, 2);
    let b = l.admit(&[1, 2, 3, 4, 9], 0).unwrap();
    assert_eq!(b.cached_tokens, 4);
    l.free(b.seq).unwrap();
    // Three fresh blocks: the free one, then both cached blocks, oldest first.
    let c = l.admit(&[7, 7, 7, 7, 7], 0).unwrap();
    assert_eq!(c.cached_tokens, 0);
    assert_eq!(l.stats().evictions, 2);
    assert!(matches!(
        l.admit(&[1], 0),
        Err(KvError::OutOfBlocks {
            needed: 1,
            available: 0,
            capacity: 3
        })
    ));
}

#[test]
fn a_write_into_a_shared_block_copies_it_first() {
    let mut l = KvLedger::new(4, 64, 8).unwrap();
    let a = l.admit(&[1, 2, 3], 0).unwrap().seq;
    let b = l.fork(a).unwrap();
    let tail = l.table(a).unwrap()[0];
    assert_eq!(l.refs(tail), 2);
    let slot = l.append(b, 9).unwrap();
    assert_ne!(slot.block, tail);
    assert_eq!(
        l.take_copies(),
        vec![BlockCopy {
            src: tail,
            dst: slot.block,
            tokens: 3
        }]
    );
    // The other holder now owns the block alone: no copy.
    assert_eq!(
        l.append(a, 4).unwrap(),
        Slot {
            block: tail,
            offset: 3
        }
    );
    assert!(l.take_copies().is_empty());
}

#[test]
fn a_truncation_into_a_cached_block_forgets_it() {
    let mut l = KvLedger::new(2, 64, 8).unwrap();
    let a = l.admit(&[1, 2, 3], 0).unwrap().seq;
    let first = l.table(a).unwrap()[0];
    assert!(l.is_cached(first));
    l.truncate(a, 1).unwrap();
    assert!(!l.is_cached(first));
    l.append(a, 5).unwrap();
    let b = l.admit(&[1, 2, 3], 0).unwrap();
    assert_eq!(
        b.cached_tokens, 0,
        "the overwritten block must not be found as [1, 2]"
    );
}

#[test]
fn every_bad_call_is_a_typed_error_that_changes_nothing() {
    let mut l = KvLedger::new(4, 8, 2).unwrap();
    let a = l.admit(&[1, 2, 3, 4, 5], 0).unwrap().seq;
    let before = l.stats();
    assert!(matches!(
        l.admit(&[0; 9], 0),
        Err(KvError::TooLong { max: 8, .. })
    ));
    assert!(matches!(
        l.admit(&[0; 8], 1),
        Err(KvError::OutOfBlocks { needed: 2, .. })
    ));
    assert!(matches!(
        l.truncate(a, 6),
        Err(KvError::TruncateBeyondEnd { len: 5, to: 6 })
    ));
    for t in 0..3 {
        l.append(a, t).unwrap();
    }
    assert!(matches!(
        l.append(a, 0),
        Err(KvError::TooLong { len: 8, .. })
    ));
    l.free(a).unwrap();
    assert!(matches!(l.free(a), Err(KvError::FreedSequence { .. })));
    assert!(matches!(l.fork(a), Err(KvError::FreedSequence { .. })));
    assert!(matches!(l.append(a, 1), Err(KvError::FreedSequence { .. })));
    let b = l.admit(&[1], 0).unwrap().seq;
    l.preempt(b, Preemption::Swap).unwrap();
    assert!(matches!(l.append(b, 1), Err(KvError::NotResident { .. })));
    assert!(matches!(
        l.preempt(b, Preemption::Swap),
        Err(KvError::NotResident { .. })
    ));
    l.resume(b).unwrap();
    assert!(matches!(l.resume(b), Err(KvError::AlreadyResident { .. })));
    let bogus = SeqId {
        index: 99,
        generation: 0,
    };
    assert!(matches!(
        l.free(bogus),
        Err(KvError::UnknownSequence { index: 99 })
    ));
    assert_eq!(before.capacity_blocks, l.stats().capacity_blocks);
    assert!(KvLedger::new(0, 8, 1).is_err());
}

/// A swapped sequence's blocks that are still cached are taken back before any new block is
/// taken, so the new block cannot evict one of them.
#[test]
fn a_swap_in_holds_its_cached_blocks_before_taking_new_ones() {
    use Step::*;
    run(
        1,
        11,
        vec![
            Admit(vec![0, 1], 0),
            Append(0, 0),
            Preempt(0, true),
            Admit(vec![1, 0, 0, 0], 0),
            Fork(1),
            Admit(vec![2, 0, 0, 0, 0], 0),
            Truncate(3, 0),
            Admit(vec![], 0),
            Resume(5),
        ],
    );
}
