//! The conformance suite's cases in headless Chromium on its WebGPU implementation
//! (`scripts/browser-test.sh` runs this with `wasm-bindgen-test-runner` and chromedriver). One test
//! per case, so the runner's summary names each; `every_browser_case_is_listed` keeps the list in
//! step with the suite. Without WebGPU (the negative control) every case fails at adapter request.
#![cfg(target_arch = "wasm32")]
#![allow(clippy::panic, clippy::unwrap_used, reason = "tests fail by panicking")]

use tensormem_browser::conformance;
use wasm_bindgen_test::{wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

macro_rules! browser_cases {
    ($($name:ident),* $(,)?) => {
        $(
            #[wasm_bindgen_test]
            async fn $name() {
                if let Err(e) = conformance::run(stringify!($name)).await {
                    panic!("{}: {e}", stringify!($name));
                }
            }
        )*

        /// Every case the suite allows in a browser is listed above, and nothing else.
        #[wasm_bindgen_test]
        fn every_browser_case_is_listed() {
            let mut listed = vec![$(stringify!($name)),*];
            let mut suite: Vec<&str> = conformance::browser_cases().iter().map(|c| c.name).collect();
            listed.sort_unstable();
            suite.sort_unstable();
            assert_eq!(listed, suite);
        }
    };
}

browser_cases!(
    round_trip_sizes,
    round_trip_dtypes,
    alignment,
    budget_and_oom,
    deferred_reuse,
    double_free_and_use_after_free,
    zero_and_oversize,
    zero_on_reuse,
    host_visible_pools,
    trim_returns_blocks,
    partial_unaligned_writes_leave_their_neighbours,
    a_failed_allocate_holds_nothing,
    a_failed_free_is_retryable_and_nothing_after_loss,
    one_pressure_path_across_device_pool_and_belt,
    arena_growth_in_place_or_blocks,
    arena_holes_follow_the_live_bytes,
    an_extension_is_a_hole_until_it_is_backed,
    an_expandable_tensor_grows_in_place_where_offered,
    a_small_model_reserves_within_5_percent,
    staging_under_pressure,
    staging_larger_than_belt,
    host_memory_placement_is_reported,
    ops_match_host_reference,
    ops_split_across_bindings,
    int8_dynamic_refusals,
    segmented_round_trip,
    segmented_ops_match_host_reference,
    segmented_operand_an_op_cannot_cut_is_refused,
    segmented_free_reuse_and_budget,
    segmented_model_weight_and_activations,
    planned_reuse_matches_no_reuse,
    binding_sizes_are_exact,
    overlapping_outputs_are_refused,
    tensors_bind_to_kernels,
    overflowing_op_params_are_errors_not_a_lost_device,
    shape_arithmetic_is_checked,
    foreign_outputs_and_intermediate_reads,
    kernel_on_freed_tensor_is_tracked,
    typed_transfers_and_too_large,
    managed_blocks_prefetch_and_compute,
    managed_device_pool_runtime,
    tiled_attention_equals_untiled,
    tiled_feed_forward_equals_untiled,
    staged_tiling_equals_untiled,
    budgeted_equals_unbudgeted,
    budget_below_working_set,
    embedding_rows_below_the_table,
    swap_in_paths,
    recomputed_equals_unbudgeted,
    views_out_of_range_or_off_binding_align,
    transfer_lane_copies_and_fills,
    transfer_after_compute_sees_results,
    compute_after_transfer_sees_copied_data,
    transfer_read_memory_not_reused_after_free,
    transfer_tickets_unknown_refused,
    copies_out_of_and_into_host_visible_memory_where_capable,
    transfer_stall_grows_while_compute_waits_for_a_long_copy,
    swap_in_follows_its_copy_out_with_nothing_else_ordering_them,
    replay_steps_keep_their_data_on_planned_and_stretched_arenas,
    replay_steps_with_square_temporaries_follow_the_growth_they_showed,
);

/// The adapter is the browser's WebGPU, and its limits reach the contract's capabilities.
#[wasm_bindgen_test]
async fn webgpu_limits_reach_the_capabilities() {
    let backend = conformance::webgpu(false).await.unwrap();
    let caps = backend.capabilities();
    assert_eq!(caps.backend, "wgpu");
    assert!(
        caps.device_name.contains("BrowserWebGpu"),
        "{}",
        caps.device_name
    );
    assert!(
        !caps.device_host_visible,
        "WebGPU never maps storage buffers"
    );
    assert!(caps.max_binding_size >= 128 << 20, "{caps:?}");
    assert!(caps.max_block_size >= caps.max_binding_size, "{caps:?}");
    assert!(
        caps.binding_align.is_power_of_two() && caps.binding_align <= 256,
        "{caps:?}"
    );
    web_sys::console::log_1(&format!("webgpu capabilities: {caps:?}").into());
}
