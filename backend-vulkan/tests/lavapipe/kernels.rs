//! Custom WGSL kernels: dispatch, the kernel cache, batch rollover, binding limits, and the
//! barrier cases of aliased memory reuse.

use tensormem::{Backend, Error, MemoryKind};
use tensormem_vulkan::{CustomKernel, KernelBinding, VulkanBackend, VulkanConfig};

use crate::{alloc, bytes_f32, download, f32_bytes, on_each, range, upload};

/// `y[i] = x[i] * alpha + beta` for `i < n`; params word 0 = n, 1 = alpha bits, 2 = beta bits.
const AXPB: &str = r#"
struct Params { v: array<vec4<u32>, 4> }
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let n = p.v[0].x;
    if (id.x < n) {
        y[id.x] = x[id.x] * bitcast<f32>(p.v[0].y) + bitcast<f32>(p.v[0].z);
    }
}
"#;

/// `y[i] += 1` in place.
const INC: &str = r#"
struct Params { v: array<vec4<u32>, 4> }
@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@group(0) @binding(1) var<uniform> p: Params;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < p.v[0].x) { y[id.x] = y[id.x] + 1.0; }
}
"#;

const AXPB_BINDINGS: [KernelBinding; 2] = [
    KernelBinding {
        binding: 0,
        write: false,
    },
    KernelBinding {
        binding: 1,
        write: true,
    },
];
const INC_BINDINGS: [KernelBinding; 1] = [KernelBinding {
    binding: 0,
    write: true,
}];

fn axpb(n: u32, alpha: f32, beta: f32) -> CustomKernel<'static> {
    let mut params = [0u32; 16];
    params[0] = n;
    params[1] = alpha.to_bits();
    params[2] = beta.to_bits();
    CustomKernel {
        key: "test/axpb",
        source: AXPB,
        entry: "main",
        bindings: &AXPB_BINDINGS,
        params_binding: 2,
        params,
        workgroups: [n.div_ceil(64), 1, 1],
    }
}

fn inc(n: u32) -> CustomKernel<'static> {
    let mut params = [0u32; 16];
    params[0] = n;
    CustomKernel {
        key: "test/inc",
        source: INC,
        entry: "main",
        bindings: &INC_BINDINGS,
        params_binding: 1,
        params,
        workgroups: [n.div_ceil(64), 1, 1],
    }
}

fn input(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32 * 0.25 - 3.0).collect()
}

#[test]
fn custom_kernel_computes_and_is_cached() {
    on_each(|name, b| {
        let n = 1000u32;
        let bytes = u64::from(n) * 4;
        let x = alloc(b, MemoryKind::DeviceLocal, bytes);
        let y = alloc(b, MemoryKind::DeviceLocal, bytes);
        let xs = input(n as usize);
        upload(b, x, 0, &f32_bytes(&xs));
        b.dispatch_custom(
            &axpb(n, 2.0, 1.0),
            &[range(x, 0, bytes), range(y, 0, bytes)],
        )
        .unwrap();
        let ys = bytes_f32(&download(b, y, 0, bytes));
        for (i, (&xv, &yv)) in xs.iter().zip(&ys).enumerate() {
            assert_eq!(yv, xv * 2.0 + 1.0, "{name}: element {i}");
        }
        assert_eq!(
            b.stats().kernel_compiles,
            1,
            "{name}: one compile for one key"
        );
        b.free_block(x).unwrap();
        b.free_block(y).unwrap();
    });
}

#[test]
fn aliased_reuse_write_after_read_is_ordered() {
    // The planner gave tensors A and (later) A' the same bytes: K1 writes A, K2 reads A into B,
    // then K3 writes A' over A's range. Without a barrier K3 could overwrite A before K2 read it.
    on_each(|name, b| {
        let n = 4096u32;
        let bytes = u64::from(n) * 4;
        let x = alloc(b, MemoryKind::DeviceLocal, bytes);
        let arena = alloc(b, MemoryKind::DeviceLocal, 2 * bytes);
        let xs = input(n as usize);
        upload(b, x, 0, &f32_bytes(&xs));
        let a = range(arena, 0, bytes);
        let bb = range(arena, bytes, bytes);
        b.dispatch_custom(&axpb(n, 2.0, 0.0), &[range(x, 0, bytes), a])
            .unwrap(); // A = 2x
        // (K1 itself may get a barrier after the staging copy that wrote x.)
        let before = b.stats().barriers;
        b.dispatch_custom(&axpb(n, 1.0, 1.0), &[a, bb]).unwrap(); // B = A + 1 (RAW)
        b.dispatch_custom(&axpb(n, -1.0, 0.0), &[range(x, 0, bytes), a])
            .unwrap(); // A' = -x (WAR)
        assert_eq!(
            b.stats().barriers - before,
            2,
            "{name}: RAW and WAR barriers only"
        );
        let out = bytes_f32(&download(b, arena, 0, 2 * bytes));
        for i in 0..n as usize {
            assert_eq!(out[n as usize + i], xs[i] * 2.0 + 1.0, "{name}: B[{i}]");
            assert_eq!(out[i], -xs[i], "{name}: A'[{i}]");
        }
        b.free_block(x).unwrap();
        b.free_block(arena).unwrap();
    });
}

#[test]
fn independent_dispatches_get_no_barrier() {
    on_each(|name, b| {
        let n = 256u32;
        let bytes = u64::from(n) * 4;
        let x = alloc(b, MemoryKind::DeviceLocal, bytes);
        let out = alloc(b, MemoryKind::DeviceLocal, 4 * bytes);
        upload(b, x, 0, &f32_bytes(&input(n as usize)));
        let mut before = b.stats().barriers;
        for k in 0..4 {
            b.dispatch_custom(
                &axpb(n, k as f32, 0.0),
                &[range(x, 0, bytes), range(out, k * bytes, bytes)],
            )
            .unwrap();
            if k == 0 {
                // The first dispatch may wait for the staging copy that wrote x.
                before = b.stats().barriers;
            }
        }
        assert_eq!(
            b.stats().barriers,
            before,
            "{name}: disjoint outputs, shared read-only input"
        );
        let got = bytes_f32(&download(b, out, 0, 4 * bytes));
        let xs = input(n as usize);
        for k in 0..4usize {
            for i in 0..n as usize {
                assert_eq!(got[k * n as usize + i], xs[i] * k as f32, "{name}");
            }
        }
        b.free_block(x).unwrap();
        b.free_block(out).unwrap();
    });
}

#[test]
fn in_place_updates_across_batch_rollover() {
    // 600 dependent dispatches: more than one batch holds (256), so the chain crosses
    // submissions; every step needs the previous one's write.
    on_each(|name, b| {
        let n = 128u32;
        let bytes = u64::from(n) * 4;
        let y = alloc(b, MemoryKind::DeviceLocal, bytes);
        b.fill_zero(range(y, 0, bytes)).unwrap();
        for _ in 0..600 {
            b.dispatch_custom(&inc(n), &[range(y, 0, bytes)]).unwrap();
        }
        let got = bytes_f32(&download(b, y, 0, bytes));
        assert!(got.iter().all(|&v| v == 600.0), "{name}: {:?}", &got[..4]);
        b.free_block(y).unwrap();
    });
}

#[test]
fn kernel_then_staging_copies_interleave() {
    // transfer → compute → transfer → compute on the same bytes (with the emulated transfer lane
    // these alternate lanes and synchronise through the semaphore).
    on_each(|name, b| {
        let n = 512u32;
        let bytes = u64::from(n) * 4;
        let up = alloc(b, MemoryKind::Upload, bytes);
        let rb = alloc(b, MemoryKind::Readback, bytes);
        let d = alloc(b, MemoryKind::DeviceLocal, bytes);
        let xs = input(n as usize);
        b.write_mapped(up, 0, &f32_bytes(&xs)).unwrap();
        b.copy(range(up, 0, bytes), range(d, 0, bytes)).unwrap();
        b.dispatch_custom(&inc(n), &[range(d, 0, bytes)]).unwrap();
        b.copy(range(d, 0, bytes), range(rb, 0, bytes)).unwrap();
        b.dispatch_custom(&inc(n), &[range(d, 0, bytes)]).unwrap();
        let t = b.copy(range(up, 0, bytes), range(d, 0, bytes)).unwrap();
        b.wait_timeout(t, None).unwrap();
        let mut out = vec![0u8; bytes as usize];
        b.read_mapped(rb, 0, &mut out).unwrap();
        let got = bytes_f32(&out);
        for i in 0..n as usize {
            assert_eq!(
                got[i],
                xs[i] + 1.0,
                "{name}: readback copy saw exactly one increment"
            );
        }
        assert_eq!(
            bytes_f32(&download(b, d, 0, bytes)),
            xs,
            "{name}: the last upload wins"
        );
        for id in [up, rb, d] {
            b.free_block(id).unwrap();
        }
    });
}

#[test]
fn binding_rules_are_enforced() {
    on_each(|name, b| {
        let limit = b.capabilities().max_binding_size;
        let align = b.capabilities().binding_align;
        let big = alloc(b, MemoryKind::DeviceLocal, limit + 256);
        let small = alloc(b, MemoryKind::DeviceLocal, 1024);
        match b.dispatch_custom(
            &axpb(4, 1.0, 0.0),
            &[range(small, 0, 16), range(big, 0, limit + 4)],
        ) {
            Err(Error::TooLarge {
                what: "binding",
                requested,
                limit: l,
                ..
            }) => {
                assert_eq!((requested, l), (limit + 4, limit));
            }
            other => panic!("{name}: {other:?}"),
        }
        b.dispatch_custom(
            &axpb(4, 1.0, 0.0),
            &[range(small, 0, 16), range(big, 256, limit)],
        )
        .unwrap();
        assert!(
            matches!(
                b.dispatch_custom(
                    &axpb(4, 1.0, 0.0),
                    &[range(small, align / 2, 16), range(small, 512, 16)]
                ),
                Err(Error::Misaligned { .. })
            ),
            "{name}: misaligned binding offset"
        );
        assert!(
            matches!(
                b.dispatch_custom(&axpb(4, 1.0, 0.0), &[range(small, 0, 16)]),
                Err(Error::SizeMismatch { .. })
            ),
            "{name}: wrong binding count"
        );
        assert!(matches!(
            b.dispatch_custom(
                &axpb(4, 1.0, 0.0),
                &[range(small, 0, 16), range(small, 1020, 16)]
            ),
            Err(Error::OutOfBounds { .. })
        ));
        let broken = CustomKernel {
            key: "test/broken",
            source: "fn main( {",
            ..axpb(4, 1.0, 0.0)
        };
        assert!(matches!(
            b.dispatch_custom(&broken, &[range(small, 0, 16), range(small, 512, 16)]),
            Err(Error::Backend { .. })
        ));
        let t = b.flush().unwrap();
        b.wait_timeout(t, None).unwrap();
        b.free_block(big).unwrap();
        b.free_block(small).unwrap();
    });
}

/// Proves the validation harness has teeth: with barriers switched off, synchronization
/// validation reports the aliased-reuse hazards the tracker otherwise prevents.
#[test]
fn sync_validation_reports_missing_barriers() {
    if !VulkanBackend::validation_available() {
        eprintln!("SKIPPED: VK_LAYER_KHRONOS_validation is not installed");
        return;
    }
    let b = match VulkanBackend::new(VulkanConfig {
        validation: true,
        skip_barriers_for_testing: true,
        ..VulkanConfig::default()
    }) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("SKIPPED: {e}");
            return;
        }
    };
    let n = 256u32;
    let bytes = u64::from(n) * 4;
    let x = alloc(&b, MemoryKind::DeviceLocal, bytes);
    let arena = alloc(&b, MemoryKind::DeviceLocal, 2 * bytes);
    let a = range(arena, 0, bytes);
    b.fill_zero(range(x, 0, bytes)).unwrap();
    b.dispatch_custom(&axpb(n, 2.0, 0.0), &[range(x, 0, bytes), a])
        .unwrap();
    b.dispatch_custom(&axpb(n, 1.0, 1.0), &[a, range(arena, bytes, bytes)])
        .unwrap();
    b.dispatch_custom(&axpb(n, -1.0, 0.0), &[range(x, 0, bytes), a])
        .unwrap();
    let t = b.flush().unwrap();
    b.wait_timeout(t, None).unwrap();
    let messages = b.validation_messages();
    assert!(
        messages.iter().any(|m| m.contains("SYNC-HAZARD")),
        "expected sync hazards, got: {messages:?}"
    );
}
