//! `auto`'s policy on made-up device lists (no driver needed).

use super::*;
use tensormem::Error;

type Fake = (DeviceType, String);

/// Runs the search over fake devices: `devices[i]` is what API `AUTO_ORDER[i]` finds (`None`: it
/// fails to start). Returns the pick and the APIs that were started.
fn pick(devices: [Option<(DeviceType, &str)>; 3]) -> (Pick<Fake>, Vec<BackendChoice>) {
    let mut started = Vec::new();
    let pick = pick_fastest(
        |choice| {
            started.push(choice);
            let i = AUTO_ORDER.iter().position(|&c| c == choice).unwrap();
            devices[i]
                .map(|(t, name)| (t, name.to_string()))
                .ok_or_else(|| Error::BackendUnavailable {
                    backend: choice.name(),
                    reason: "no driver".into(),
                })
        },
        Clone::clone,
    );
    (pick, started)
}

fn chosen(p: &Pick<Fake>) -> Option<(BackendChoice, &str)> {
    p.chosen
        .as_ref()
        .map(|(c, (_, name), _)| (*c, name.as_str()))
}

/// Regression for issue 18: on a machine with only lavapipe, `auto` chose Vulkan on the CPU and
/// ran 40× slower than the host backend.
#[test]
fn software_implementations_are_never_chosen() {
    let (p, _) = pick([
        None,
        Some((DeviceType::SoftwareGpu, "llvmpipe (LLVM 19.1.7, 256 bits)")),
        Some((
            DeviceType::SoftwareGpu,
            "llvmpipe (LLVM 19.1.7, 256 bits) (Vulkan)",
        )),
    ]);
    assert!(p.chosen.is_none());
    let reasons: Vec<_> = p
        .passed_over
        .iter()
        .map(|o| (o.backend, &o.reason))
        .collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(reasons[0].1.starts_with("did not start: "), "{reasons:?}");
    assert!(
        reasons[1].1.contains("software implementation"),
        "{reasons:?}"
    );
    assert!(reasons[1].1.contains("--backend vulkan"), "{reasons:?}");
    assert!(reasons[2].1.contains("--backend wgpu"), "{reasons:?}");
}

#[test]
fn software_names_are_caught_even_when_the_type_claims_a_gpu() {
    for name in [
        "llvmpipe (LLVM 15)",
        "SwiftShader Device (Subzero)",
        "Microsoft Basic Render Driver",
    ] {
        assert_eq!(
            verdict(DeviceType::Unknown, name),
            Verdict::Software,
            "{name}"
        );
        assert_eq!(
            verdict(DeviceType::IntegratedGpu, name),
            Verdict::Software,
            "{name}"
        );
    }
    assert_eq!(
        verdict(DeviceType::DiscreteGpu, "NVIDIA H200"),
        Verdict::Use(0)
    );
    assert_eq!(
        verdict(DeviceType::IntegratedGpu, "Intel(R) UHD 770"),
        Verdict::Use(1)
    );
    assert_eq!(verdict(DeviceType::VirtualGpu, "virgl"), Verdict::Use(2));
    assert_eq!(verdict(DeviceType::HostCpu, "host CPU"), Verdict::Software);
}

#[test]
fn a_discrete_gpu_ends_the_search() {
    let (p, started) = pick([
        Some((DeviceType::DiscreteGpu, "NVIDIA H200")),
        Some((DeviceType::DiscreteGpu, "NVIDIA H200")),
        Some((DeviceType::DiscreteGpu, "NVIDIA H200")),
    ]);
    assert_eq!(chosen(&p), Some((BackendChoice::Cuda, "NVIDIA H200")));
    assert_eq!(started, [BackendChoice::Cuda]);
    assert_eq!(p.passed_over.len(), 2);
    assert!(
        p.passed_over
            .iter()
            .all(|o| o.reason.starts_with("not tried"))
    );
}

#[test]
fn discrete_beats_integrated_whatever_the_api_order() {
    let (p, started) = pick([
        Some((DeviceType::IntegratedGpu, "Intel Iris Xe")),
        Some((DeviceType::DiscreteGpu, "AMD Radeon RX 7600")),
        Some((DeviceType::IntegratedGpu, "Intel Iris Xe")),
    ]);
    assert_eq!(
        chosen(&p),
        Some((BackendChoice::Vulkan, "AMD Radeon RX 7600"))
    );
    assert_eq!(started, [BackendChoice::Cuda, BackendChoice::Vulkan]);
    let cuda = &p.passed_over[0];
    assert_eq!(cuda.backend, "cuda");
    assert_eq!(cuda.device.as_deref(), Some("Intel Iris Xe"));
    assert!(
        cuda.reason.contains("faster device type"),
        "{}",
        cuda.reason
    );
}

#[test]
fn among_equal_types_the_earlier_api_wins() {
    let (p, started) = pick([
        None,
        Some((DeviceType::IntegratedGpu, "Apple M2")),
        Some((DeviceType::IntegratedGpu, "Apple M2")),
    ]);
    assert_eq!(chosen(&p), Some((BackendChoice::Vulkan, "Apple M2")));
    assert_eq!(started.len(), 3);
    let wgpu = p.passed_over.last().unwrap();
    assert_eq!(wgpu.backend, "wgpu");
    assert!(
        wgpu.reason.contains("vulkan already found"),
        "{}",
        wgpu.reason
    );
    assert!(p.chosen.unwrap().2.contains("no discrete GPU"));
}

#[test]
fn named_host_reports_its_reason_and_device_type() {
    let s = select(BackendChoice::Host, &SelectOptions::default()).unwrap();
    let j = s.to_json();
    assert_eq!(j["backend"], "host");
    assert_eq!(j["device_type"], "host CPU");
    assert_eq!(j["requested"], "host");
    assert_eq!(j["passed_over"].as_array().unwrap().len(), 0);
    assert!(
        s.to_text().starts_with("backend host on "),
        "{}",
        s.to_text()
    );
}
