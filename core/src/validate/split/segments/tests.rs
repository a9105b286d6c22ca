use std::collections::HashMap;

use super::*;
use crate::backend::BlockId;
use crate::ops::host;
use crate::ops::samples::{self, Rng, segment_instances};

const ALIGN: u64 = 256;
/// Units per cut at `ALIGN` for 4-byte elements: what the runtime's tensors use.
const STEP: u64 = ALIGN / 4;

/// Each operand of `op` as segments in blocks of their own (ids from `next`), at an aligned
/// offset inside each block: operands that grow with the op's units are cut after a random
/// multiple of `STEP` units (different for each operand), the others whole.
fn layout(op: &Op, rng: &mut Rng, next: &mut u64) -> Vec<Vec<BlockRange>> {
    let sig = op.signature().unwrap();
    let shapes = op.split_shapes().unwrap();
    sig.operands()
        .zip(&shapes)
        .map(|(o, shape)| {
            let mut segs = Vec::new();
            let mut left = o.size();
            let unit = shape.map_or(left, |[_, per]| per as u64 * 4);
            while left > 0 {
                let units = if shape.is_some() {
                    STEP * (1 + rng.below(3))
                } else {
                    u64::MAX / unit
                };
                let size = left.min(units * unit);
                *next += 1;
                segs.push(BlockRange {
                    block: BlockId(*next),
                    offset: ALIGN * rng.below(4),
                    size,
                });
                left -= size;
            }
            segs
        })
        .collect()
}

/// Every op the front can cut, over operands segmented at different points: every part binds
/// within one segment of each operand, within the limit and on the alignment, and the parts run
/// on the host reference over "device memory" (one buffer per block) compute the whole op's
/// output bit for bit.
#[test]
fn parts_bind_within_one_segment_and_compute_the_whole_op() {
    let mut rng = Rng::new(5);
    let mut next = 0;
    for op in segment_instances() {
        for round in 0..4 {
            let layout = layout(&op, &mut rng, &mut next);
            assert!(layout.iter().any(|s| s.len() > 1), "{op:?}");
            let widest = layout.iter().flatten().map(|r| r.size).max().unwrap();
            let limit = if round % 2 == 0 { u64::MAX } else { widest / 2 };
            let operands: Vec<&[BlockRange]> = layout.iter().map(Vec::as_slice).collect();
            let parts = match split_segments(&op, &operands, limit, ALIGN) {
                Ok(p) => p,
                // Half a segment can be below a part's one aligned step of units.
                Err(Error::TooLarge { .. }) if limit != u64::MAX => continue,
                Err(e) => panic!("{op:?}: {e}"),
            };
            let data = samples::inputs(&op, &mut rng).unwrap();
            let mut memory: HashMap<BlockId, Vec<u8>> = HashMap::new();
            let n = data.len();
            for (segs, bytes) in layout.iter().zip(data.iter().map(Some).chain([None])) {
                let mut at = 0usize;
                for s in segs {
                    let mut block = vec![0u8; (s.offset + s.size) as usize];
                    if let Some(bytes) = bytes {
                        let len = s.size as usize;
                        let src = &bytes[at..(at + len).min(bytes.len())];
                        block[s.offset as usize..s.offset as usize + src.len()]
                            .copy_from_slice(src);
                        at += len;
                    }
                    memory.insert(s.block, block);
                }
            }
            for (part, bindings) in &parts {
                let sizes: Vec<u64> = bindings.iter().map(|b| b.size).collect();
                part.check_binding_sizes(&sizes)
                    .unwrap_or_else(|e| panic!("{op:?} part {part:?}: {e}"));
                for (b, segs) in bindings.iter().zip(&layout) {
                    assert!(b.size <= limit && b.offset % ALIGN == 0, "{op:?}: {b:?}");
                    let seg = segs.iter().find(|s| s.block == b.block).unwrap();
                    assert!(b.offset >= seg.offset && b.offset + b.size <= seg.offset + seg.size);
                }
                let ins: Vec<Vec<u8>> = bindings[..n]
                    .iter()
                    .map(|b| {
                        memory[&b.block][b.offset as usize..(b.offset + b.size) as usize].to_vec()
                    })
                    .collect();
                let refs: Vec<&[u8]> = ins.iter().map(Vec::as_slice).collect();
                let mut out = vec![0u8; bindings[n].size as usize];
                host::run(part, &refs, &mut [&mut out]).unwrap();
                let o = bindings[n];
                memory.get_mut(&o.block).unwrap()[o.offset as usize..(o.offset + o.size) as usize]
                    .copy_from_slice(&out);
            }
            let got: Vec<u8> = layout[n]
                .iter()
                .flat_map(|s| {
                    memory[&s.block][s.offset as usize..(s.offset + s.size) as usize].to_vec()
                })
                .collect();
            let ins: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
            let mut want = vec![0u8; got.len()];
            host::run(&op, &ins, &mut [&mut want]).unwrap();
            assert!(got == want, "{op:?}: the parts differ from the whole");
        }
    }
}

fn segmented(sizes: &[u64], first: u64) -> Vec<BlockRange> {
    sizes
        .iter()
        .enumerate()
        .map(|(i, &size)| BlockRange {
            block: BlockId(first + i as u64),
            offset: 0,
            size,
        })
        .collect()
}

fn refused(op: &Op, operands: &[Vec<BlockRange>], operand: &str) {
    let refs: Vec<&[BlockRange]> = operands.iter().map(Vec::as_slice).collect();
    match split_segments(op, &refs, u64::MAX, ALIGN) {
        Err(Error::SegmentedOperand {
            op: name,
            operand: o,
            ..
        }) if name == op.name() && o == operand => {}
        other => panic!("{op:?}: {other:?}"),
    }
}

/// An operand read whole, an op with no axis, a boundary inside a unit, and a part that would
/// start off the alignment are each refused naming the op and the operand.
#[test]
fn ops_that_cannot_be_cut_are_refused_by_operand() {
    let matmul = Op::matmul((1, 128, 24, 16), false, false, true, false, 1.0);
    // The weight `b` (16 x 24 floats) in two segments: every part reads it whole.
    let a = segmented(&[128 * 64], 1);
    let b = segmented(&[8 * 96, 8 * 96], 10);
    let c = segmented(&[128 * 96], 20);
    refused(&matmul, &[a.clone(), b, c.clone()], "b");
    // `a` cut after one row: `c`'s part would start at byte 96, off the 256-byte alignment.
    let a_cut = segmented(&[64, 127 * 64], 30);
    let b_whole = segmented(&[16 * 96], 40);
    refused(&matmul, &[a_cut, b_whole, c], "c");
    // A permute that moves the outermost axis.
    let permute = Op::Permute {
        dims: [8, 16, 4, 4],
        perm: [1, 0, 2, 3],
    };
    refused(
        &permute,
        &[segmented(&[4096, 4096], 50), segmented(&[8192], 60)],
        "x",
    );
    // Rows of 40 floats cut after 1000 bytes: inside the 7th row.
    let norm = Op::LayerNorm {
        rows: 64,
        cols: 40,
        eps: 1e-5,
    };
    refused(
        &norm,
        &[
            segmented(&[1000, 64 * 160 - 1000], 70),
            segmented(&[160], 80),
            segmented(&[160], 81),
            segmented(&[64 * 160], 82),
        ],
        "x",
    );
}

/// Operands whose segments do not add up to the op's sizes get the binding-size error, as a
/// dispatch over one range would.
#[test]
fn sizes_are_checked_against_the_op() {
    let op = Op::Relu { len: 1000 };
    let x = segmented(&[2048, 1024], 1);
    let y = segmented(&[4000], 3);
    let refs: [&[BlockRange]; 2] = [&x, &y];
    assert!(matches!(
        split_segments(&op, &refs, u64::MAX, ALIGN),
        Err(Error::BindingSize { .. })
    ));
}
