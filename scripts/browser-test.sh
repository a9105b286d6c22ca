#!/usr/bin/env bash
# The browser tests: the runtime built for wasm32 and run in headless Chromium on its WebGPU
# implementation (SwiftShader on a machine without a GPU; `--enable-unsafe-webgpu`).
#   1. the conformance cases (browser/tests/conformance.rs, wasm-bindgen-test + chromedriver);
#   2. the negative control: the same tests with WebGPU disabled must fail, at adapter request;
#   3. the MNIST sample page (examples/web/index.html): three digits, logits within 1e-3 of the
#      native host run, a screenshot that is not blank (scripts/browser_page_test.py);
#   4. the MiniLM sample page (examples/web/minilm.html), when the model cache
#      ($TENSORMEM_CACHE/minilm, filled by scripts/fetch_minilm.sh) is there, served as ./minilm/:
#      the sentences of examples/web/sentences.txt, token ids equal and embeddings within 1e-3 of
#      the native host run, its sizes and times next to native host and wgpu. Without the cache
#      it is skipped with a message.
#   5. the text generation page (examples/web/generate.html) on a synthetic Llama checkpoint:
#      every prompt's tokens equal the native host run's, also with the largest buffer lowered so
#      the KV cache spans several; its decode speed beside native host and wgpu.
# Installs what is missing: the apt packages (Debian's rustc-web toolchain, whose std source
# -Zbuild-std compiles for wasm32; lld-22; chromium and chromedriver) and wasm-bindgen-cli at the
# version pinned in Cargo.toml, cached in $TENSORMEM_CACHE (default ~/.cache/tensormem).
# Outputs (screenshot, native logits, the served page) go to target-wasm/browser-test/.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE="${TENSORMEM_CACHE:-$HOME/.cache/tensormem}"
WBG_VERSION=$(sed -n 's/^wasm-bindgen = "=\(.*\)"$/\1/p' Cargo.toml)
TOOLS="$CACHE/wasm-bindgen-$WBG_VERSION"
OUT="$ROOT/target-wasm/browser-test"
T0=$(date +%s)
step() { echo "== browser-test: $* (+$(($(date +%s) - T0)) s)"; }

need=()
for p in rustc-web cargo-web rust-web-src rust-web-llvm lld-22 chromium chromium-driver; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    step "installing ${need[*]}"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
        "${need[@]}" >/dev/null
fi
if ! "$TOOLS/bin/wasm-bindgen" --version 2>/dev/null | grep -qx "wasm-bindgen $WBG_VERSION"; then
    step "installing wasm-bindgen-cli $WBG_VERSION into $TOOLS (once; several minutes)"
    # Not --locked: its lock names a webpki-roots release the registry here does not have.
    cargo install wasm-bindgen-cli --version "$WBG_VERSION" --root "$TOOLS"
fi

# The native references first, with the native toolchain: the host backend's logits and the
# native wgpu timing (lavapipe) for the page test's comparison. The samples are the binaries the
# test command builds (its feature set: no build at all after it); `cargo run -p` would compile
# the workspace and much of its dependency graph again with the examples' own feature set.
mkdir -p "$OUT"
step "native samples: building (nothing to do after the test command)"
# "NAME PATH" per line: the debug executables of the examples' bins as the test command built them.
bins=$(cargo test --workspace --lib --bins --tests --no-run \
    --message-format=json-render-diagnostics | python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    t = m.get("target", {})
    if (m.get("reason") == "compiler-artifact" and t.get("kind") == ["bin"]
            and not m["profile"]["test"]):
        print(t["name"], m["executable"])')
MNIST_BIN=$(awk '$1 == "mnist" { print $2 }' <<<"$bins")
MINILM_BIN=$(awk '$1 == "minilm" { print $2 }' <<<"$bins")
GENERATE_BIN=$(awk '$1 == "generate" { print $2 }' <<<"$bins")
[ -x "$MNIST_BIN" ] && [ -x "$MINILM_BIN" ] && [ -x "$GENERATE_BIN" ] ||
    { echo "no native sample binaries: $bins"; exit 1; }
step "native mnist (host, wgpu)"
"$MNIST_BIN" --backend host --json >"$OUT/native-host.json"
"$MNIST_BIN" --backend wgpu --json >"$OUT/native-wgpu.json" ||
    echo "native wgpu run failed (no Vulkan driver?); its timing is left out"
MINILM_DIR="$CACHE/minilm"
MINILM=0
if [ -f "$MINILM_DIR/model.safetensors" ] && [ -f "$MINILM_DIR/config.json" ] &&
    [ -f "$MINILM_DIR/tokenizer.json" ]; then
    MINILM=1
    M0=$(date +%s)
    step "native minilm (host, wgpu) on examples/web/sentences.txt"
    for backend in host wgpu; do
        TENSORMEM_CACHE="$CACHE" "$MINILM_BIN" --backend "$backend" --runs 3 --json \
            <examples/web/sentences.txt \
            >"$OUT/native-minilm-$backend.json" ||
            { rm -f "$OUT/native-minilm-$backend.json"; echo "native minilm on $backend failed"; }
    done
    [ -s "$OUT/native-minilm-host.json" ] || exit 1
    MINILM_NATIVE_S=$(($(date +%s) - M0))
else
    echo "MiniLM page skipped: no model in $MINILM_DIR (scripts/fetch_minilm.sh fetches it)"
fi

# Text generation: a small Llama checkpoint of seeded random weights (gpu_check.py, standard
# library only), the prompts the page reads from generate.json, generated natively on the host
# (the tokens the page must equal) and on wgpu (its decode speed beside the page's).
step "native generate (host, wgpu) on a synthetic Llama checkpoint"
LLAMA_DIR="$OUT/llama"
python3 scripts/gpu_check.py llama-synthetic "$LLAMA_DIR" >/dev/null
GEN_PROMPTS=("$(seq -f 'w%g' 10 70 | tr '\n' ' ')" "w5 w6 w7" "$(seq -f 'w%g' 200 330 | tr '\n' ' ')"
    "w999")
GEN_MAX_NEW=32 GEN_STEP=64
for backend in host wgpu; do
    "$GENERATE_BIN" --backend "$backend" --json --model-dir "$LLAMA_DIR" --kv-dtype f32 \
        --preempt recompute --ignore-eos --max-new-tokens $GEN_MAX_NEW --step-tokens $GEN_STEP \
        "${GEN_PROMPTS[@]}" >"$OUT/native-generate-$backend.json" ||
        { rm -f "$OUT/native-generate-$backend.json"; echo "native generate on $backend failed"; }
done
[ -s "$OUT/native-generate-host.json" ] || exit 1

# Debian's rustc-web for wasm32, kept apart from rustup's toolchain by environment.
export PATH="$TOOLS/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
export RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR="$ROOT/target-wasm"
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER="$TOOLS/bin/wasm-bindgen-test-runner"
export CHROMEDRIVER=/usr/bin/chromedriver
export WASM_BINDGEN_TEST_TIMEOUT=900
# `test` among the std crates: cargo adds it to a test build's sysroot, and with it named here
# the page build (`--lib`) reuses every crate the test build compiled.
WASM=(--release --target wasm32-unknown-unknown -Zbuild-std=std,panic_abort,test -p tensormem-browser)

step "building and running the conformance cases in headless Chromium (WebGPU)"
WASM_BINDGEN_TEST_WEBDRIVER_JSON="$ROOT/browser/webdriver.json" \
    /usr/bin/cargo test "${WASM[@]}" --test conformance

step "negative control: the same tests without WebGPU must fail"
# Every test that touches the device must fail, for want of an adapter; only the listing check
# (no device) passes.
if WASM_BINDGEN_TEST_WEBDRIVER_JSON="$ROOT/browser/webdriver-no-webgpu.json" \
    /usr/bin/cargo test "${WASM[@]}" --test conformance >"$OUT/negative.log" 2>&1; then
    cat "$OUT/negative.log"
    echo "negative control FAILED: the browser tests passed without WebGPU"
    exit 1
fi
if ! grep -Eq "test result: FAILED. 1 passed; [1-9][0-9]* failed" "$OUT/negative.log" ||
    ! grep -q "no adapter" "$OUT/negative.log"; then
    cat "$OUT/negative.log"
    echo "negative control FAILED: not every device test failed for want of a WebGPU adapter"
    exit 1
fi
echo "negative control ok: without WebGPU every device test fails at adapter request:"
grep "test result" "$OUT/negative.log"

step "building the sample page"
/usr/bin/cargo build "${WASM[@]}" --lib
WWW="$OUT/www"
rm -rf "$WWW" && mkdir -p "$WWW/mnist"
wasm-bindgen --target web --out-dir "$WWW/pkg" \
    "$CARGO_TARGET_DIR/wasm32-unknown-unknown/release/tensormem_browser.wasm"
cp examples/web/index.html examples/web/minilm.html examples/web/generate.html \
    examples/web/page.js examples/web/page.css examples/web/sentences.txt "$WWW/"
cp examples/assets/mnist/mnist.safetensors examples/assets/mnist/*.u8 "$WWW/mnist/"
WASM_FILE="$WWW/pkg/tensormem_browser_bg.wasm"
echo "wasm: $(stat -c %s "$WASM_FILE") bytes raw, $(gzip -9c "$WASM_FILE" | wc -c) bytes gzip"

step "page test in headless Chromium"
python3 scripts/browser_page_test.py mnist "$WWW" "$OUT/native-host.json" "$OUT/mnist-page.png"
if [ "$MINILM" = 1 ]; then
    step "MiniLM page test in headless Chromium (the model served from $MINILM_DIR)"
    M0=$(date +%s)
    ln -s "$MINILM_DIR" "$WWW/minilm"
    wgpu_json=()
    [ -s "$OUT/native-minilm-wgpu.json" ] && wgpu_json=("$OUT/native-minilm-wgpu.json")
    python3 scripts/browser_page_test.py minilm "$WWW" "$OUT/native-minilm-host.json" \
        "$OUT/minilm-page.png" "${wgpu_json[@]}"
    echo "MiniLM added $((MINILM_NATIVE_S + $(date +%s) - M0)) s (native runs ${MINILM_NATIVE_S} s, page test $(($(date +%s) - M0)) s)"
fi
step "generation page test in headless Chromium (tokens equal the native host run's)"
ln -s "$LLAMA_DIR" "$WWW/llama"
python3 - "$WWW/generate.json" $GEN_MAX_NEW $GEN_STEP "${GEN_PROMPTS[@]}" <<'PY'
import json, sys
out, max_new, step, prompts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
json.dump({"prompts": prompts, "max_new_tokens": max_new, "ignore_eos": True,
           "step_tokens": step}, open(out, "w"))
PY
gen_wgpu=()
[ -s "$OUT/native-generate-wgpu.json" ] && gen_wgpu=("$OUT/native-generate-wgpu.json")
python3 scripts/browser_page_test.py generate "$WWW" "$OUT/native-generate-host.json" \
    "$OUT/generate-page.png" "${gen_wgpu[@]}"
for backend in host wgpu; do
    [ -s "$OUT/native-$backend.json" ] || continue
    python3 - "$OUT/native-$backend.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["report"]
print(f"native {r['backend']} ({r['device']}): {r['time_per_inference_ms']:.2f} ms per inference "
      f"(mean of {r['runs']}, {r['shape']})")
PY
done
step "done"
