#!/usr/bin/env bash
# GPU check for the CUDA backend (issue 7): on a machine with an NVIDIA GPU, builds in release and
# runs, within about 5 minutes on an H200:
#   1. the CUDA backend's own tests, with CUDA required (unit tests + tests/device.rs);
#   2. the conformance suite with TENSORMEM_REQUIRE_BACKENDS=host,cuda (a skipped cuda fails);
#   3. the sample inference on CUDA (examples' mnist binary), when it exists;
#   4. the CUDA memory benchmarks (benches/cuda_memory.rs), which print their summary table;
# then one summary table of the steps. Fails with a clear message when no GPU, no driver new
# enough for the CUDA 12.4 API the build pins, or no libnvrtc is found.
#
# Environment: TENSORMEM_OFFLINE=1 passes --offline to cargo (the GPU machine has no network, so
# the cargo registry must already be there); NVRTC_DIR adds a directory holding libnvrtc.so.12.
set -uo pipefail
cd "$(dirname "$0")/.."

fail() { echo "gpu-check: FAILED: $*" >&2; exit 1; }
OFFLINE=()
[ "${TENSORMEM_OFFLINE:-0}" = 1 ] && OFFLINE=(--offline)
CARGO_FLAGS=(--release "${OFFLINE[@]}")
LOG_DIR="${LOG_DIR:-$(mktemp -d)}"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"

# --- Preflight: GPU, driver, NVRTC -------------------------------------------------------------
command -v nvidia-smi >/dev/null || fail "nvidia-smi not found: no NVIDIA driver on this machine"
GPUS=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1) \
    || fail "nvidia-smi cannot talk to a GPU: $GPUS"
[ -n "$GPUS" ] || fail "nvidia-smi lists no GPU"
echo "gpu-check: GPU(s): $GPUS"
DRIVER_CUDA=$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -1)
echo "gpu-check: driver supports CUDA ${DRIVER_CUDA:-unknown}; the build pins cudarc to 12.4"
if [ -n "$DRIVER_CUDA" ]; then
    major=${DRIVER_CUDA%%.*}; minor=${DRIVER_CUDA#*.}
    if [ "$major" -lt 12 ] || { [ "$major" -eq 12 ] && [ "$minor" -lt 4 ]; }; then
        fail "driver supports CUDA $DRIVER_CUDA < 12.4: update the driver or lower the cudarc pin"
    fi
fi
find_nvrtc() {
    local d
    for d in "${NVRTC_DIR:-}" /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
        /usr/local/cuda-12*/lib64 /usr/lib/x86_64-linux-gnu \
        $(python3 -c 'import nvidia.cuda_nvrtc, os; print(os.path.join(nvidia.cuda_nvrtc.__path__[0], "lib"))' 2>/dev/null); do
        [ -n "$d" ] && ls "$d"/libnvrtc.so* >/dev/null 2>&1 && { echo "$d"; return 0; }
    done
    return 1
}
if ! ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so'; then
    NVRTC=$(find_nvrtc) || fail "libnvrtc.so not found (CUDA toolkit's NVRTC, or pip \
nvidia-cuda-nvrtc-cu12); set NVRTC_DIR to its directory"
    export LD_LIBRARY_PATH="$NVRTC${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "gpu-check: using libnvrtc from $NVRTC"
fi
export TENSORMEM_REQUIRE_CUDA=1

# --- Steps -------------------------------------------------------------------------------------
declare -a NAMES STATUS SECS
run_step() { # name, timeout seconds, command...
    local name=$1 limit=$2; shift 2
    local start=$SECONDS log="$LOG_DIR/${name// /_}.log"
    echo; echo "=== gpu-check: $name ==="
    timeout "$limit" "$@" 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]}
    NAMES+=("$name"); SECS+=($((SECONDS - start)))
    if [ "$rc" = 0 ]; then STATUS+=(ok); elif [ "$rc" = 124 ]; then STATUS+=("TIMEOUT (${limit}s)"); \
        else STATUS+=("FAILED (rc $rc)"); fi
}
skip_step() { NAMES+=("$1"); STATUS+=("skipped: $2"); SECS+=(0); }

run_step "build" 200 cargo build "${CARGO_FLAGS[@]}" -p tensormem-cuda -p tensormem-conformance \
    --tests
run_step "build benches" 90 cargo bench "${OFFLINE[@]}" -p tensormem-cuda --bench cuda_memory \
    --no-run
for i in 0 1; do
    [ "${STATUS[$i]}" = ok ] || fail "${NAMES[$i]} failed (log in $LOG_DIR)"
done

run_step "cuda backend tests" 90 cargo test "${CARGO_FLAGS[@]}" -p tensormem-cuda --lib --tests

run_step "conformance host,cuda" 150 env TENSORMEM_REQUIRE_BACKENDS=host,cuda cargo test "${CARGO_FLAGS[@]}" \
    -p tensormem-conformance --test suite

if [ -f examples/src/bin/mnist.rs ] || [ -f examples/src/bin/mnist/main.rs ]; then
    run_step "mnist on cuda" 90 cargo run "${CARGO_FLAGS[@]}" -p tensormem-examples --bin mnist -- \
        --backend cuda
else
    skip_step "mnist on cuda" "examples have no mnist binary yet"
fi

run_step "cuda benchmarks" 150 cargo bench "${OFFLINE[@]}" -p tensormem-cuda --bench cuda_memory

# --- Summary -----------------------------------------------------------------------------------
echo
echo "=== gpu-check summary ($GPUS; logs in $LOG_DIR) ==="
printf '%-24s %-48s %6s\n' step status seconds
failed=0
for i in "${!NAMES[@]}"; do
    printf '%-24s %-48s %6s\n' "${NAMES[$i]}" "${STATUS[$i]}" "${SECS[$i]}"
    case "${STATUS[$i]}" in ok|skipped*) ;; *) failed=1 ;; esac
done
BENCH_LOG="$LOG_DIR/cuda_benchmarks.log"
if [ -f "$BENCH_LOG" ]; then
    echo
    sed -n '/=== tensormem-cuda summary ===/,$p' "$BENCH_LOG"
fi
echo "total: ${SECONDS}s"
[ "$failed" = 0 ] || fail "some steps failed (see the table above)"
echo "gpu-check: PASSED"
