//! Unit tests of `barriers` (no device needed).

use super::*;

fn acc(block: u64, offset: u64, size: u64, stage: Stage, write: bool) -> Access {
    Access {
        block,
        offset,
        size,
        stage,
        write,
    }
}

const T: Stage = Stage::Transfer;
const C: Stage = Stage::Compute;

#[test]
fn conflict_needs_same_block_overlap_and_a_write() {
    let w = acc(1, 0, 16, C, true);
    assert!(w.conflicts_with(&acc(1, 8, 16, C, false)));
    assert!(!w.conflicts_with(&acc(2, 0, 16, C, false)), "other block");
    assert!(
        !w.conflicts_with(&acc(1, 16, 16, C, true)),
        "adjacent ranges"
    );
    assert!(
        !acc(1, 0, 16, C, false).conflicts_with(&acc(1, 0, 16, T, false)),
        "read/read"
    );
    assert!(
        acc(1, 0, 16, T, false).conflicts_with(&acc(1, 15, 1, C, true)),
        "WAR"
    );
}

#[test]
fn transfer_then_compute_read_after_write() {
    let mut t = HazardTracker::default();
    assert_eq!(t.before(&[acc(1, 0, 64, T, true)]), None);
    let b = t.before(&[acc(1, 0, 64, C, false), acc(2, 0, 64, C, true)]);
    let b = b.expect("RAW needs a barrier");
    assert_eq!(b.src_stage, vk::PipelineStageFlags::TRANSFER);
    assert_eq!(b.src_access, vk::AccessFlags::TRANSFER_WRITE);
    assert_eq!(b.dst_stage, DEVICE_STAGES);
    assert_eq!(b.dst_access, DEVICE_ACCESSES);
    assert_eq!(t.pending_len(), 2, "pending restarts with the new command");
}

#[test]
fn compute_then_transfer_read_after_write() {
    let mut t = HazardTracker::default();
    t.before(&[acc(1, 0, 64, C, false), acc(2, 0, 64, C, true)]);
    let b = t.before(&[acc(2, 0, 64, T, false), acc(3, 0, 64, T, true)]);
    let b = b.expect("compute→transfer RAW");
    assert_eq!(b.src_stage, vk::PipelineStageFlags::COMPUTE_SHADER);
    assert_eq!(b.src_access, vk::AccessFlags::SHADER_WRITE);
}

#[test]
fn write_after_read_aliased_reuse() {
    // Kernel 1 reads A; kernel 2 writes over the same range (the planner reused A's memory).
    let mut t = HazardTracker::default();
    t.before(&[acc(1, 0, 256, C, false), acc(1, 256, 256, C, true)]);
    let b = t.before(&[acc(2, 0, 64, C, false), acc(1, 128, 64, C, true)]);
    let b = b.expect("WAR on the reused range needs a barrier");
    assert!(b.src_stage.contains(vk::PipelineStageFlags::COMPUTE_SHADER));
}

#[test]
fn write_after_write_transfer() {
    let mut t = HazardTracker::default();
    t.before(&[acc(1, 0, 64, T, true)]);
    let b = t.before(&[acc(1, 32, 64, T, true)]).expect("WAW");
    assert_eq!(b.src_access, vk::AccessFlags::TRANSFER_WRITE);
}

#[test]
fn independent_commands_need_no_barrier() {
    let mut t = HazardTracker::default();
    assert_eq!(
        t.before(&[acc(1, 0, 64, C, false), acc(2, 0, 64, C, true)]),
        None
    );
    assert_eq!(
        t.before(&[acc(1, 0, 64, C, false), acc(3, 0, 64, C, true)]),
        None
    );
    assert_eq!(
        t.before(&[acc(2, 64, 64, T, true)]),
        None,
        "disjoint range of block 2"
    );
    assert_eq!(t.barrier_count(), 0);
    assert_eq!(t.pending_len(), 5);
}

#[test]
fn barrier_clears_everything_before_it() {
    // A writes 1; B reads 1 (barrier); C reads 1 again: no second barrier, because the first
    // barrier made A's write visible to every later device access.
    let mut t = HazardTracker::default();
    t.before(&[acc(1, 0, 64, C, true)]);
    assert!(t.before(&[acc(1, 0, 64, T, false)]).is_some());
    assert!(t.before(&[acc(1, 0, 64, C, false)]).is_none());
    // But a writer after those reads needs one (WAR against B and C).
    assert!(t.before(&[acc(1, 0, 4, C, true)]).is_some());
    assert_eq!(t.barrier_count(), 2);
}

#[test]
fn source_scope_covers_all_pending_stages() {
    let mut t = HazardTracker::default();
    t.before(&[acc(1, 0, 64, T, true)]);
    t.before(&[acc(2, 0, 64, C, true)]);
    let b = t
        .before(&[acc(2, 0, 64, T, false)])
        .expect("RAW on block 2");
    assert_eq!(b.src_stage, DEVICE_STAGES);
    assert_eq!(
        b.src_access,
        vk::AccessFlags::TRANSFER_WRITE | vk::AccessFlags::SHADER_WRITE
    );
}

#[test]
fn forget_block() {
    let mut t = HazardTracker::default();
    t.before(&[acc(1, 0, 64, C, true), acc(2, 0, 64, C, true)]);
    t.forget_block(1);
    assert_eq!(t.pending_len(), 1);
    assert!(
        t.before(&[acc(1, 0, 64, C, true)]).is_none(),
        "block 1 forgotten"
    );
    assert!(
        t.before(&[acc(2, 0, 64, C, false)]).is_some(),
        "block 2's write is still pending"
    );
}

#[test]
fn host_barrier_targets_host() {
    let b = host_barrier();
    assert_eq!(b.dst_stage, vk::PipelineStageFlags::HOST);
    assert!(b.dst_access.contains(vk::AccessFlags::HOST_READ));
}

/// Model check: for random command sequences, every conflicting pair of accesses has a barrier
/// recorded between them (the property the GPU needs), checked against a brute-force model that
/// remembers every access and every barrier position.
#[test]
fn every_conflicting_pair_is_separated_by_a_barrier() {
    let mut seed = 0x9e3779b97f4a7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..200 {
        let mut t = HazardTracker::default();
        let mut history: Vec<(usize, Access)> = Vec::new();
        let mut barrier_before: Vec<bool> = Vec::new();
        for cmd in 0..30 {
            let n = 1 + (next() % 3) as usize;
            let accesses: Vec<Access> = (0..n)
                .map(|_| {
                    let offset = (next() % 8) * 16;
                    acc(
                        next() % 3,
                        offset,
                        16 * (1 + next() % 4),
                        if next() % 2 == 0 { T } else { C },
                        next() % 3 == 0,
                    )
                })
                .collect();
            barrier_before.push(t.before(&accesses).is_some());
            for (earlier_cmd, a) in &history {
                if accesses.iter().any(|n| n.conflicts_with(a)) {
                    assert!(
                        barrier_before[earlier_cmd + 1..=cmd].iter().any(|b| *b),
                        "conflict between command {earlier_cmd} and {cmd} without a barrier"
                    );
                }
            }
            history.extend(accesses.into_iter().map(|a| (cmd, a)));
        }
    }
}

#[test]
fn transfer_queue_barriers_name_only_transfer_and_host() {
    let b = for_transfer_queue(host_barrier());
    assert_eq!(b.src_stage, vk::PipelineStageFlags::TRANSFER);
    assert_eq!(b.src_access, vk::AccessFlags::TRANSFER_WRITE);
    assert_eq!(b.dst_stage, vk::PipelineStageFlags::HOST);
    let mut t = HazardTracker::default();
    t.before(&[acc(1, 0, 64, T, true)]);
    let b = for_transfer_queue(t.before(&[acc(1, 0, 64, T, false)]).unwrap());
    assert_eq!(b.src_stage, vk::PipelineStageFlags::TRANSFER);
    assert_eq!(b.dst_stage, vk::PipelineStageFlags::TRANSFER);
    assert_eq!(
        b.dst_access,
        vk::AccessFlags::TRANSFER_READ | vk::AccessFlags::TRANSFER_WRITE
    );
}
