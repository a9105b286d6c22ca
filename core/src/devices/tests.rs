use std::sync::Arc;
use std::time::Duration;

use super::samples::mlp;
use super::transfer::STAGED_CHUNK_BYTES;
use super::*;
use crate::{HostBackend, HostConfig, PoolConfig};

fn host(config: HostConfig) -> Arc<dyn Backend> {
    Arc::new(HostBackend::new(config).unwrap())
}

/// Device 0 maps its memory; device 1 stages every transfer (a discrete GPU's path).
fn two_hosts() -> DeviceSet {
    DeviceSet::new(
        vec![
            host(HostConfig::default()),
            host(HostConfig {
                force_staging: true,
                ..HostConfig::default()
            }),
        ],
        RuntimeConfig::default(),
    )
    .unwrap()
}

fn f32s(n: usize, k: f32) -> Vec<f32> {
    (0..n).map(|i| i as f32 * k - 3.0).collect()
}

/// A new F32 tensor `label` on device `on` holding `data`: the source of a transfer.
fn uploaded(set: &DeviceSet, on: DeviceId, data: &[f32], label: &str) -> Tensor {
    let t = set.alloc(on, DType::F32, &[data.len()], label).unwrap();
    set.upload(&t, data).unwrap();
    t
}

#[test]
fn tensors_know_their_device_and_each_device_has_its_own_pools() {
    let set = two_hosts();
    assert_eq!(set.len(), 2);
    let a = set.alloc(DeviceId(0), DType::F32, &[1024], "a").unwrap();
    let b = set.alloc(DeviceId(1), DType::F32, &[4096], "b").unwrap();
    assert_eq!((a.device(), b.device()), (DeviceId(0), DeviceId(1)));
    let report = set.report();
    assert!(report[0].reserved > 0 && report[1].reserved > 0);
    assert_ne!(
        Arc::as_ptr(set.device(DeviceId(0)).unwrap().budget()),
        Arc::as_ptr(set.device(DeviceId(1)).unwrap().budget())
    );
    // Freeing on device 1 leaves device 0's account alone.
    let before = set.report()[0].reserved;
    set.free(b).unwrap();
    set.synchronize().unwrap();
    assert_eq!(set.report()[0].reserved, before);
    set.free(a).unwrap();
}

#[test]
fn affinity_follows_the_consuming_ops_operands() {
    let set = two_hosts();
    let x = set.alloc(DeviceId(1), DType::F32, &[8], "x").unwrap();
    let y = set.alloc_for(&[&x], DType::F32, &[8], "y").unwrap();
    assert_eq!(y.device(), DeviceId(1));
    let z = set.alloc(DeviceId(0), DType::F32, &[8], "z").unwrap();
    let err = set.alloc_for(&[&x, &z], DType::F32, &[8], "w").unwrap_err();
    assert!(matches!(err, Error::MixedDevices { .. }), "{err}");
    assert!(matches!(
        set.alloc_for(&[], DType::F32, &[8], "w"),
        Err(Error::Argument(crate::ArgumentError::Invalid { .. }))
    ));
    for t in [x, y, z] {
        set.free(t).unwrap();
    }
}

#[test]
fn an_op_over_two_devices_is_an_error_naming_the_op_and_both_devices() {
    let set = two_hosts();
    let x = set.alloc(DeviceId(0), DType::F32, &[4], "x").unwrap();
    let y = set.alloc(DeviceId(1), DType::F32, &[4], "y").unwrap();
    let op = Op::Relu { len: 4 };
    let err = set.dispatch(&op, &[&x], &[&y]).unwrap_err();
    match &err {
        Error::MixedDevices {
            op, first, second, ..
        } => {
            assert_eq!(
                (op.as_str(), *first, *second),
                ("relu", DeviceId(0), DeviceId(1))
            );
        }
        e => panic!("expected MixedDevices, got {e}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("relu") && msg.contains("device 0") && msg.contains("device 1"));
    // The same through one device's runtime: refused, never copied.
    let rt0 = set.device(DeviceId(0)).unwrap();
    assert!(matches!(
        rt0.dispatch(&op, &[&x], &[&y]),
        Err(Error::MixedDevices { .. })
    ));
    assert!(matches!(
        rt0.dispatch(&op, &[&y], &[&y]),
        Err(Error::WrongDevice { .. })
    ));
    assert!(matches!(
        rt0.upload(&y, &[0f32; 4]),
        Err(Error::WrongDevice { .. })
    ));
    assert!(matches!(
        rt0.download::<f32>(&y),
        Err(Error::WrongDevice { .. })
    ));
    assert!(matches!(
        set.device(DeviceId(2)),
        Err(Error::UnknownDevice { devices: 2, .. })
    ));
    // Nothing was enqueued on either device by the refused calls.
    for rt in set.runtimes() {
        assert_eq!(rt.backend().flush().unwrap(), Ticket::DONE);
    }
    set.free(x).unwrap();
    set.free(y).unwrap();
}

#[test]
fn a_wrong_device_free_keeps_the_tensor() {
    let set = two_hosts();
    let x = set.alloc(DeviceId(1), DType::F32, &[4], "x").unwrap();
    let handle = x.allocation().handle;
    let rt0 = set.device(DeviceId(0)).unwrap();
    assert!(matches!(rt0.free(x), Err(Error::WrongDevice { .. })));
    // The tensor was consumed by the refused call but its allocation is still live on device 1.
    let rt1 = set.device(DeviceId(1)).unwrap();
    assert!(rt1.device_pool().resolve(handle).is_ok());
    rt1.device_pool().free(handle).unwrap();
}

#[test]
fn cross_device_copies_move_every_byte_in_chunks_both_ways() {
    // Not a multiple of the chunk nor of the copy word: the last chunk is short.
    let n = STAGED_CHUNK_BYTES / 4 * 3 + 5;
    let data = f32s(n, 0.5);
    let both_mapped = DeviceSet::new(
        vec![host(HostConfig::default()), host(HostConfig::default())],
        RuntimeConfig::default(),
    )
    .unwrap();
    for set in [two_hosts(), both_mapped] {
        for (from, to) in [(0, 1), (1, 0)] {
            let src = uploaded(&set, DeviceId(from), &data, "src");
            let dst = set.transfer(&src, DeviceId(to), "dst").unwrap();
            assert_eq!(dst.device(), DeviceId(to));
            assert_eq!(set.download::<f32>(&dst).unwrap(), data);
            set.free(src).unwrap();
            set.free(dst).unwrap();
        }
        let stats = set.transfer_stats();
        assert_eq!(stats.bytes(TransferPath::Staged), 2 * n as u64 * 4);
        assert_eq!(stats.bytes(TransferPath::SameDevice), 0);
    }
    // Device 1 of the first set stages: its readback and upload belts carried the bytes.
    let set = two_hosts();
    let src = uploaded(&set, DeviceId(1), &data, "src");
    let dst = set.transfer(&src, DeviceId(0), "dst").unwrap();
    let st = &set.report()[1].staging;
    assert!(st.uploaded >= n as u64 * 4 && st.downloaded >= n as u64 * 4);
    set.free(src).unwrap();
    set.free(dst).unwrap();
}

/// A copy of an odd byte count between mapped devices moves exactly those bytes (the mapped path
/// covers whole copy words; a ragged tail on a device with wider words takes the general path).
#[test]
fn a_ragged_copy_keeps_the_destination_bytes_after_it() {
    let set = DeviceSet::new(
        vec![host(HostConfig::default()), host(HostConfig::default())],
        RuntimeConfig::default(),
    )
    .unwrap();
    let src = set.alloc(DeviceId(0), DType::U8, &[7], "src").unwrap();
    set.upload(&src, &[1u8, 2, 3, 4, 5, 6, 7]).unwrap();
    let dst = set.alloc(DeviceId(1), DType::U8, &[7], "dst").unwrap();
    set.upload(&dst, &[9u8; 7]).unwrap();
    set.copy(&src, &dst).unwrap();
    assert_eq!(set.download::<u8>(&dst).unwrap(), [1, 2, 3, 4, 5, 6, 7]);
    set.free(src).unwrap();
    set.free(dst).unwrap();
}

#[test]
fn a_copy_waits_for_the_work_queued_on_its_source() {
    // A slow worker leaves the op in flight when the copy starts.
    let set = DeviceSet::new(
        vec![
            host(HostConfig {
                worker_delay: Duration::from_millis(30),
                ..HostConfig::default()
            }),
            host(HostConfig::default()),
        ],
        RuntimeConfig::default(),
    )
    .unwrap();
    let x = set.alloc(DeviceId(0), DType::F32, &[64], "x").unwrap();
    let y = set.alloc(DeviceId(0), DType::F32, &[64], "y").unwrap();
    let data = f32s(64, 1.0);
    set.upload(&x, &data).unwrap();
    set.dispatch(&Op::Relu { len: 64 }, &[&x], &[&y]).unwrap();
    let z = set.transfer(&y, DeviceId(1), "z").unwrap();
    let want: Vec<f32> = data.iter().map(|v| v.max(0.0)).collect();
    assert_eq!(set.download::<f32>(&z).unwrap(), want);
    for t in [x, y, z] {
        set.free(t).unwrap();
    }
}

#[test]
fn copies_on_one_device_are_one_device_copy() {
    let set = two_hosts();
    let data = f32s(100, 2.0);
    let a = uploaded(&set, DeviceId(1), &data, "a");
    let b = set.transfer(&a, DeviceId(1), "b").unwrap();
    assert_eq!(set.download::<f32>(&b).unwrap(), data);
    assert_eq!(set.transfer_stats().bytes(TransferPath::SameDevice), 400);
    let c = set.alloc(DeviceId(0), DType::F32, &[99], "c").unwrap();
    assert!(matches!(set.copy(&a, &c), Err(Error::SizeMismatch { .. })));
    let d = set.alloc(DeviceId(0), DType::I32, &[100], "d").unwrap();
    assert!(matches!(set.copy(&a, &d), Err(Error::DTypeMismatch { .. })));
    for t in [a, b, c, d] {
        set.free(t).unwrap();
    }
}

/// Runs the sample MLP on `set` with `placement` and returns its output bits.
fn run_mlp(set: &DeviceSet, placement: &Placement) -> (Vec<u32>, PlacedReport) {
    let m = mlp(4, 6, 40, 7).unwrap();
    let mut model = set.compile(&m.graph, placement).unwrap();
    for (id, bytes) in &m.weights {
        model.set_weight(*id, bytes).unwrap();
    }
    model.set_input(m.input, &m.input_data).unwrap();
    model.run().unwrap();
    let out: Vec<f32> = model.read_output(m.output).unwrap();
    (out.iter().map(|v| v.to_bits()).collect(), model.report())
}

#[test]
fn a_split_model_equals_one_device_bit_for_bit() {
    let one = DeviceSet::new(vec![host(HostConfig::default())], RuntimeConfig::default()).unwrap();
    let (want, _) = run_mlp(&one, &Placement::BalancedByWeights);
    let set = two_hosts();
    let (got, report) = run_mlp(&set, &Placement::BalancedByWeights);
    assert_eq!(got, want);
    // Balanced: one stage per device, equal weight bytes (two layers each).
    assert_eq!(report.stages.len(), 2);
    assert_eq!(
        report.devices[0].weight_bytes,
        report.devices[1].weight_bytes
    );
    assert!(report.devices.iter().all(|d| d.peak_reserved > 0));
    assert_eq!(report.transfer_bytes_per_run, 6 * 40 * 4);
    // Alternating nodes: many cuts, stages on one device planned separately; same bits.
    let m = mlp(4, 6, 40, 7).unwrap();
    let alternate = Placement::from_fn(&m.graph, |i, _| DeviceId((i % 2) as u32));
    let (got, report) = run_mlp(&set, &alternate);
    assert_eq!(got, want);
    assert_eq!(report.stages.len(), m.graph.nodes().len());
}

#[test]
fn a_bad_placement_is_a_typed_error() {
    let set = two_hosts();
    let m = mlp(1, 2, 8, 1).unwrap();
    assert!(matches!(
        set.compile(&m.graph, &Placement::PerNode(vec![DeviceId(0)])),
        Err(Error::SizeMismatch { .. })
    ));
    let far = Placement::from_fn(&m.graph, |_, _| DeviceId(5));
    assert!(matches!(
        set.compile(&m.graph, &far),
        Err(Error::UnknownDevice { .. })
    ));
}

#[test]
fn per_device_budgets_hold_and_a_split_fits_where_one_device_does_not() {
    let m = mlp(4, 64, 256, 3).unwrap();
    let unbounded =
        DeviceSet::new(vec![host(HostConfig::default())], RuntimeConfig::default()).unwrap();
    let one = unbounded
        .compile(&m.graph, &Placement::BalancedByWeights)
        .unwrap();
    let whole = one.report().devices[0].weight_bytes;
    drop(one);
    // Each device may hold half the weights with its activations, not all of them.
    let budget = whole * 15 / 16;
    let config = RuntimeConfig {
        device: PoolConfig {
            budget: Some(budget),
            block_size: 64 << 10,
            ..PoolConfig::device()
        },
        ..RuntimeConfig::default()
    };
    let single = DeviceSet::new(vec![host(HostConfig::default())], config.clone()).unwrap();
    let mut model = single
        .compile(&m.graph, &Placement::BalancedByWeights)
        .unwrap();
    let refused = m
        .weights
        .iter()
        .try_for_each(|(id, bytes)| model.set_weight(*id, bytes).map(|_| ()));
    assert!(matches!(refused, Err(Error::OutOfMemory(_))), "{refused:?}");
    assert!(single.report()[0].peak_reserved <= budget);

    let set = DeviceSet::new(
        vec![host(HostConfig::default()), host(HostConfig::default())],
        config,
    )
    .unwrap();
    let (_, report) = run_mlp_sized(&set, &m);
    for d in &report.devices {
        assert_eq!(d.budget, Some(budget));
        assert!(d.peak_reserved <= budget, "{d:?}");
        assert!(d.weight_bytes < budget);
    }
}

fn run_mlp_sized(set: &DeviceSet, m: &super::samples::Mlp) -> (Vec<f32>, PlacedReport) {
    let mut model = set
        .compile(&m.graph, &Placement::BalancedByWeights)
        .unwrap();
    for (id, bytes) in &m.weights {
        model.set_weight(*id, bytes).unwrap();
    }
    model.set_input(m.input, &m.input_data).unwrap();
    model.run().unwrap();
    (model.read_output(m.output).unwrap(), model.report())
}

mod direct;

/// A tensor held in segments copies to a device that cuts it differently (other block limits,
/// one staging every transfer), run by run where both sides' segments overlap, and back.
#[test]
fn segmented_tensors_copy_between_devices_cut_differently() {
    let limits = |block| RuntimeConfig {
        limits: crate::DeviceLimits {
            max_block_size: Some(block),
            max_binding_size: None,
        },
        ..RuntimeConfig::default()
    };
    let set = DeviceSet::with_configs(vec![
        (host(HostConfig::default()), limits(4096)),
        (
            host(HostConfig {
                force_staging: true,
                ..HostConfig::default()
            }),
            limits(6144),
        ),
    ])
    .unwrap();
    let data = f32s(5000, 0.25);
    let a = uploaded(&set, DeviceId(0), &data, "a");
    let b = set.transfer(&a, DeviceId(1), "b").unwrap();
    assert_eq!((a.segments().len(), b.segments().len()), (5, 4));
    assert_eq!(set.download::<f32>(&b).unwrap(), data);
    let c = set.alloc(DeviceId(0), DType::F32, &[5000], "c").unwrap();
    set.copy(&b, &c).unwrap();
    assert_eq!(set.download::<f32>(&c).unwrap(), data);
    for t in [a, b, c] {
        set.free(t).unwrap();
    }
}
