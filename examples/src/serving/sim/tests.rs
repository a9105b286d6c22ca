use tensormem::kv::{KvDType, KvGeometry};

use super::*;
use crate::serving::contiguous::Contiguous;
use crate::serving::paged::{Paged, PagedConfig};

fn requests(n: usize) -> Vec<Request> {
    // Deterministic lengths with a long tail, arriving faster than they finish.
    (0..n)
        .map(|i| Request {
            arrival_s: i as f64 * 0.01,
            prompt: 10 + (i * 37) % 190,
            generate: 1 + (i * 53) % 60,
        })
        .collect()
}

fn config(shared_prefix: usize) -> SimConfig {
    SimConfig {
        step_ms: 10.0,
        step_tokens: 256,
        token_us: 10.0,
        rate_scale: 1.0,
        link_gbps: 10.0,
        shared_prefix,
        max_seq: 512,
    }
}

fn run_all(budget: u64, shared_prefix: usize) -> Vec<SimResult> {
    let reqs = requests(300);
    let g = KvGeometry::new(2, 1, 4, KvDType::F16, 4, 512).unwrap();
    let (ours, vllm) = (PagedConfig::default(), PagedConfig::VLLM);
    let mut policies: Vec<Box<dyn KvPolicy>> = vec![
        Box::new(Paged::new("paged", &g, budget, reqs.len(), ours).unwrap()),
        Box::new(Paged::new("paged_vllm", &g, budget, reqs.len(), vllm).unwrap()),
        Box::new(Contiguous::max(budget, g.token_bytes(), 512, reqs.len())),
        Box::new(Contiguous::exact(budget, g.token_bytes(), reqs.len()).unwrap()),
    ];
    policies
        .iter_mut()
        .map(|p| simulate(p.as_mut(), &reqs, &config(shared_prefix)))
        .collect()
}

#[test]
fn every_policy_completes_the_trace_and_paged_runs_the_most_requests() {
    // 32 bytes a token: 96 KiB holds 3072 tokens, six maximum-length regions.
    let r = run_all(96 << 10, 0);
    for p in &r {
        assert_eq!(p.completed, 300, "{}", p.policy);
        assert!(p.peak_held_bytes <= 96 << 10, "{}", p.policy);
    }
    let (paged, exact, max) = (&r[0], &r[3], &r[2]);
    assert!(paged.utilization_mean > 0.95, "{}", paged.utilization_mean);
    assert!(max.utilization_mean < 0.5);
    assert!(
        paged.running_mean >= 2.5 * max.running_mean,
        "{} vs {}",
        paged.running_mean,
        max.running_mean
    );
    assert!(paged.running_mean >= exact.running_mean);
    assert!(paged.steps <= max.steps);
    assert!(max.running_max <= 6);
}

#[test]
fn pressure_preempts_by_swap_or_recomputation_and_nothing_is_lost() {
    let r = run_all(12 << 10, 0);
    let (paged, vllm) = (&r[0], &r[1]);
    assert_eq!(paged.completed, 300);
    assert_eq!(vllm.completed, 300);
    assert!(paged.preemptions > 0 && paged.swap_bytes > 0 && paged.recomputed_tokens == 0);
    assert!(vllm.preemptions > 0 && vllm.recomputed_tokens > 0 && vllm.swap_bytes == 0);
}

#[test]
fn a_shared_system_prompt_is_served_from_the_prefix_cache() {
    let shared = run_all(96 << 10, 64);
    let unique = run_all(96 << 10, 0);
    assert!(
        shared[0].prefix_hit_rate.unwrap() > 0.2,
        "{:?}",
        shared[0].prefix_hit_rate
    );
    assert!(unique[0].prefix_hit_rate.unwrap() < 0.01);
    assert!(shared[0].running_mean >= unique[0].running_mean);
}

#[test]
fn requests_longer_than_the_context_are_rejected_by_every_policy() {
    let mut reqs = requests(20);
    reqs[3].prompt = 600;
    let g = KvGeometry::new(2, 1, 4, KvDType::F32, 4, 512).unwrap();
    let mut p = Paged::new("paged", &g, 64 << 10, reqs.len(), PagedConfig::default()).unwrap();
    let r = simulate(&mut p, &reqs, &config(0));
    assert_eq!((r.completed, r.rejected), (19, 1));
    assert!(Paged::new("paged", &g, 16, 1, PagedConfig::default()).is_err());
}

#[test]
fn later_requests_pass_one_that_does_not_fit_a_bounded_number_of_times() {
    // Every fifth request is long: behind it, first come first served leaves memory idle.
    let reqs: Vec<Request> = (0..200)
        .map(|i| Request {
            arrival_s: i as f64 * 0.005,
            prompt: if i % 5 == 0 { 400 } else { 20 },
            generate: 8,
        })
        .collect();
    let g = KvGeometry::new(2, 1, 4, KvDType::F32, 4, 512).unwrap();
    let run = |lookahead| {
        let cfg = PagedConfig {
            lookahead,
            ..PagedConfig::default()
        };
        let mut p = Paged::new("paged", &g, 32 << 10, reqs.len(), cfg).unwrap();
        simulate(&mut p, &reqs, &config(0))
    };
    let (fcfs, no_passes, ahead) = (run((0, 0)), run((16, 0)), run((16, 16)));
    for r in [&fcfs, &no_passes, &ahead] {
        assert_eq!(r.completed, 200);
    }
    // A window without passes is first come first served.
    assert_eq!(
        (no_passes.steps, no_passes.running_mean),
        (fcfs.steps, fcfs.running_mean)
    );
    assert!(
        ahead.running_mean > fcfs.running_mean,
        "{} vs {}",
        ahead.running_mean,
        fcfs.running_mean
    );
    assert!(
        ahead.steps < fcfs.steps,
        "{} vs {}",
        ahead.steps,
        fcfs.steps
    );
}
