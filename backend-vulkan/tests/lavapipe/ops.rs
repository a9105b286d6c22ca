//! Every standard op against the host reference, with the instances, inputs and comparison rule
//! of `tensormem::ops::samples` (1e-5 relative for f32 arithmetic, exact for data movement). All
//! operands of an op live in one block at aligned offsets, as the arena lays tensors out, so input
//! and output share a buffer.

use tensormem::ops::samples::{self, Rng};
use tensormem::{Backend, Error, MemoryKind, Op};

use crate::{alloc, bytes_f32, download, on_each, on_each_front, range, upload};

#[test]
fn every_op_matches_the_host_reference() {
    on_each(|name, b| {
        let align = b.capabilities().binding_align;
        let mut rng = Rng::new(7);
        for op in samples::instances() {
            let data = samples::inputs(&op, &mut rng).unwrap();
            let (offsets, sizes, end) = samples::packed(&op, align).unwrap();
            let block = alloc(b, MemoryKind::DeviceLocal, end);
            for (i, d) in data.iter().enumerate() {
                upload(b, block, offsets[i], d);
            }
            // An op that updates its output starts from the bytes the reference starts from.
            if let Some(init) = samples::initial_output(&op) {
                upload(b, block, offsets[data.len()], &init);
            }
            let bindings: Vec<_> = offsets
                .iter()
                .zip(&sizes)
                .map(|(&o, &s)| range(block, o, s))
                .collect();
            b.dispatch(&op, &bindings)
                .unwrap_or_else(|e| panic!("{name}: {op:?}: {e}"));
            let out_i = sizes.len() - 1;
            let got = download(b, block, offsets[out_i], sizes[out_i]);
            let want = samples::reference(&op, &data).unwrap();
            samples::check(&op, &got, &want).unwrap_or_else(|e| panic!("{name}: {op:?}: {e}"));
            b.free_block(block).unwrap();
        }
    });
}

#[test]
fn op_binding_errors() {
    on_each_front(|name, b| {
        let block = alloc(b, MemoryKind::DeviceLocal, 4096);
        let relu = Op::Relu { len: 16 };
        match b.dispatch(&relu, &[range(block, 0, 64)]) {
            Err(Error::BindingCount {
                expected: 2,
                actual: 1,
                ..
            }) => {}
            other => panic!("{name}: {other:?}"),
        }
        // Undersize and oversize are the same error: bindings are exact.
        for size in [60, 128] {
            assert!(matches!(
                b.dispatch(&relu, &[range(block, 0, size), range(block, 256, 64)]),
                Err(Error::BindingSize {
                    expected: 64,
                    actual,
                    ..
                }) if actual == size
            ));
        }
        assert!(
            matches!(
                b.dispatch(&relu, &[range(block, 0, 64), range(block, 0, 64)]),
                Err(Error::Overlap { .. })
            ),
            "{name}: output overlapping its input"
        );
        assert!(matches!(
            b.dispatch(
                &Op::Relu { len: 0 },
                &[range(block, 0, 4), range(block, 256, 4)]
            ),
            Err(Error::Argument(tensormem::ArgumentError::Zero { .. }))
        ));
        // The exact binding touches only the operand's bytes.
        upload(b, block, 1024, &[0xFF; 128]);
        let x: Vec<u8> = (0..16)
            .flat_map(|i| (i as f32 - 8.0).to_le_bytes())
            .collect();
        upload(b, block, 0, &x);
        b.dispatch(&relu, &[range(block, 0, 64), range(block, 1024, 64)])
            .unwrap();
        let out = download(b, block, 1024, 128);
        let ys = bytes_f32(&out[..64]);
        assert_eq!(
            ys,
            (0..16)
                .map(|i| (i as f32 - 8.0).max(0.0))
                .collect::<Vec<_>>(),
            "{name}"
        );
        assert!(
            out[64..].iter().all(|&v| v == 0xFF),
            "{name}: tail untouched"
        );
        b.free_block(block).unwrap();
    });
}

/// `maxStorageBufferRange` reaches the contract as `max_binding_size`: the backend refuses a
/// binding beyond it, and the validating front runs such an op as parts that fit (their results
/// are checked against the host reference by the conformance case `ops_split_across_bindings`).
#[test]
fn op_binding_over_the_storage_limit_is_split_by_the_front() {
    on_each_front(|name, b| {
        let limit = b.capabilities().max_binding_size;
        let len = (limit / 4 + 1) as u32; // one element more than one binding may cover
        let size = u64::from(len) * 4;
        let align = b.capabilities().binding_align;
        let out_at = size.div_ceil(align) * align;
        let block = alloc(b, MemoryKind::DeviceLocal, out_at + size);
        let bindings = [range(block, 0, size), range(block, out_at, size)];
        match b.inner().dispatch(&Op::Relu { len }, &bindings) {
            Err(Error::TooLarge {
                what: "binding",
                requested,
                limit: l,
                ..
            }) => {
                assert_eq!((requested, l), (size, limit), "{name}");
            }
            other => panic!("{name}: {other:?}"),
        }
        let t = b.dispatch(&Op::Relu { len }, &bindings).unwrap();
        b.wait_timeout(t, None).unwrap();
        b.free_block(block).unwrap();
    });
}
