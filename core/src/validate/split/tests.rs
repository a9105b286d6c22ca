use super::*;
use crate::backend::BlockId;
use crate::ops::samples::{self, Rng, split_instances};
use crate::ops::{WeightFormat, host};

fn ranges(op: &Op) -> Vec<BlockRange> {
    let sig = op.signature().unwrap();
    sig.operands()
        .enumerate()
        .map(|(i, o)| BlockRange {
            block: BlockId(i as u64 + 1),
            offset: 0,
            size: o.size(),
        })
        .collect()
}

fn run(op: &Op, inputs: &[&[u8]]) -> Vec<u8> {
    let mut out = vec![0u8; op.signature().unwrap().outputs[0].size() as usize];
    host::run(op, inputs, &mut [&mut out]).unwrap();
    out
}

/// Every part keeps the limit and the alignment, binds exactly its op's operands, the parts
/// cover each split operand once in order, and on the host reference the parts compute the
/// whole op's output bit for bit.
#[test]
fn parts_keep_the_limit_and_compute_the_whole_op() {
    const ALIGN: u64 = 256;
    let mut rng = Rng::new(11);
    for (op, limit) in split_instances() {
        let whole = ranges(&op);
        assert!(whole.iter().any(|r| r.size > limit), "{op:?} fits already");
        let parts = split(&op, &whole, limit, ALIGN).unwrap_or_else(|| panic!("{op:?}"));
        assert!(parts.len() > 1, "{op:?}");
        assert!(fits(&op, limit, ALIGN));
        let data = samples::inputs(&op, &mut rng).unwrap();
        let mut out = vec![0u8; whole.last().unwrap().size as usize];
        let mut covered = vec![0u64; whole.len()];
        for (part, bindings) in &parts {
            let sizes: Vec<u64> = bindings.iter().map(|b| b.size).collect();
            part.check_binding_sizes(&sizes)
                .unwrap_or_else(|e| panic!("{op:?} part {part:?}: {e}"));
            for (i, (b, w)) in bindings.iter().zip(&whole).enumerate() {
                assert!(b.size <= limit && b.offset % ALIGN == 0, "{op:?}: {b:?}");
                assert_eq!(b.block, w.block);
                if b.size != w.size {
                    assert_eq!(b.offset, covered[i], "{op:?}: operand {i} out of order");
                    covered[i] += b.size;
                }
            }
            let n = data.len();
            let ins: Vec<&[u8]> = bindings[..n]
                .iter()
                .zip(&data)
                .map(|(b, d)| &d[b.offset as usize..(b.offset + b.size) as usize])
                .collect();
            let o = bindings[n];
            out[o.offset as usize..(o.offset + o.size) as usize].copy_from_slice(&run(part, &ins));
        }
        for (c, w) in covered.iter().zip(&whole) {
            assert!(*c == 0 || *c == w.size, "{op:?}: covered {c} of {}", w.size);
        }
        let ins: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        assert!(
            run(&op, &ins) == out,
            "{op:?}: the parts differ from the whole"
        );
    }
}

/// Ops without an independent outer axis, with a shared operand over the limit, or with one unit
/// over it are not split (the caller refuses them as too large).
#[test]
fn unsplittable_ops_are_left_whole() {
    let cases = [
        (
            Op::Permute {
                dims: [4, 8, 16, 8],
                perm: [1, 0, 2, 3],
            },
            1 << 10,
        ),
        (
            Op::Embedding {
                vocab: 2000,
                dim: 16,
                rows: 400,
                weight_format: WeightFormat::F32,
            },
            1 << 12,
        ),
        (
            Op::LayerNorm {
                rows: 4,
                cols: 2048,
                eps: 1e-5,
            },
            1 << 12,
        ),
        (
            Op::matmul((1, 300, 8, 8), true, false, true, false, 1.0),
            1 << 10,
        ),
    ];
    for (op, limit) in cases {
        assert!(split(&op, &ranges(&op), limit, 256).is_none(), "{op:?}");
        assert!(!fits(&op, limit, 256), "{op:?}");
        assert!(fits(&op, u64::MAX, 256), "{op:?}");
    }
}
