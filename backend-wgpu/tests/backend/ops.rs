//! Every standard op on wgpu against the host reference, with the instances, inputs and comparison
//! rule of `tensormem::ops::samples` (1e-5 relative for f32 arithmetic, exact for pure data
//! movement). Operands are placed at
//! binding-aligned offsets inside one arena block, as a planner would place them.

use tensormem::ops::Op;
use tensormem::ops::samples::support::bytes_f32;
use tensormem::ops::samples::{self, Rng};
use tensormem::{Backend, MemoryKind};
use tensormem_wgpu::WgpuBackend;

use super::{alloc, download, each_config, range, upload};

/// The op set with shapes that exercise edge tiles, broadcasting, masks and spills.
/// Deterministic inputs for `op` from `seed` (see `tensormem::ops::samples::inputs`).
fn inputs(op: &Op, seed: u64) -> Vec<Vec<u8>> {
    samples::inputs(op, &mut Rng::new(seed)).unwrap()
}

/// Runs `op` on the backend over one arena block and returns its outputs.
fn run_on(b: &WgpuBackend, op: &Op, ins: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let align = b.capabilities().binding_align;
    let (offsets, sizes, end) = samples::packed(op, align).unwrap();
    let arena = alloc(b, MemoryKind::DeviceLocal, end);
    let ranges: Vec<_> = offsets
        .iter()
        .zip(&sizes)
        .map(|(&o, &s)| range(arena, o, s))
        .collect();
    for (r, data) in ranges.iter().zip(ins) {
        upload(b, *r, data);
    }
    // Poison the outputs so a kernel that skips elements is caught; an op that updates its
    // output starts from the bytes the reference starts from.
    for r in &ranges[ins.len()..] {
        let init = samples::initial_output(op).unwrap_or_else(|| vec![0xAB; r.size as usize]);
        upload(b, *r, &init);
    }
    let t = b.dispatch(op, &ranges).unwrap();
    b.wait_timeout(t, None).unwrap();
    let outs = ranges[ins.len()..]
        .iter()
        .map(|r| download(b, *r))
        .collect();
    b.free_block(arena).unwrap();
    outs
}

fn compare(op: &Op, gpu: &[u8], reference: &[u8]) {
    samples::check(op, gpu, reference).unwrap_or_else(|e| panic!("{op:?}: wgpu vs host: {e}"));
}

#[test]
fn every_op_matches_the_host_reference() {
    each_config(|b| {
        let mut rng = Rng::new(7);
        for op in samples::instances() {
            let ins = samples::inputs(&op, &mut rng).unwrap();
            let reference = samples::reference(&op, &ins).unwrap();
            let gpu = run_on(b, &op, &ins);
            assert_eq!(gpu.len(), 1);
            compare(&op, &gpu[0], &reference);
        }
    });
}

#[test]
fn pipelines_are_cached_per_kernel_key() {
    let b = super::backend(false);
    let op = Op::Add { len: 64, b_len: 64 };
    let ins = inputs(&op, 1);
    run_on(&b, &op, &ins);
    assert_eq!(b.compiled_pipelines(), 1);
    let op2 = Op::Add { len: 128, b_len: 2 };
    let ins2 = inputs(&op2, 2);
    let out = run_on(&b, &op2, &ins2);
    assert_eq!(
        b.compiled_pipelines(),
        1,
        "same key, new parameters: no recompilation"
    );
    compare(&op2, &out[0], &samples::reference(&op2, &ins2).unwrap());
    run_on(&b, &Op::Relu { len: 8 }, &inputs(&Op::Relu { len: 8 }, 3));
    assert_eq!(b.compiled_pipelines(), 2);
}

#[test]
fn chained_ops_in_one_batch_see_each_other() {
    // Several dispatches and a copy in one open batch: each observes the previous one.
    each_config(|b| {
        let len = 1024u32;
        let size = u64::from(len) * 4;
        let align = b.capabilities().binding_align;
        let slot = size.div_ceil(align) * align;
        let arena = alloc(b, MemoryKind::DeviceLocal, 3 * slot);
        let (x, y, z) = (
            range(arena, 0, size),
            range(arena, slot, size),
            range(arena, 2 * slot, size),
        );
        let data = inputs(&Op::Relu { len }, 9).remove(0);
        upload(b, x, &data);
        b.dispatch(&Op::Scale { len, alpha: 2.0 }, &[x, y]).unwrap();
        b.dispatch(&Op::Relu { len }, &[y, z]).unwrap();
        b.copy(z, x).unwrap();
        let t = b
            .dispatch(&Op::Add { len, b_len: len }, &[x, z, y])
            .unwrap();
        b.wait_timeout(t, None).unwrap();
        let expect: Vec<f32> = bytes_f32(&data)
            .iter()
            .map(|v| 2.0 * (2.0 * v).max(0.0))
            .collect();
        assert_eq!(bytes_f32(&download(b, y)), expect);
        b.free_block(arena).unwrap();
    });
}
