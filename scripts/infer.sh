#!/usr/bin/env bash
# The main job (README): a sample inference on the best available backend (CUDA, Vulkan, wgpu, else
# the host), with its memory report. MiniLM sentence embeddings when its model cache exists
# (scripts/fetch_minilm.sh makes it), the MNIST CNN on the bundled digits otherwise.
# Extra arguments go to the sample (e.g. --backend host, --json).
set -euo pipefail
cd "$(dirname "$0")/.."
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"

cache="${TENSORMEM_CACHE:-$HOME/.cache/tensormem}/minilm"
if [ -f "$cache/model.safetensors" ] && [ -f "$cache/tokenizer.json" ]; then
    exec cargo run --release -q -p tensormem-examples --bin minilm -- "$@" \
        "A man is eating food." "A man is eating a piece of bread." "The new movie is awesome."
else
    echo "(MiniLM cache not found at $cache: running MNIST; scripts/fetch_minilm.sh fetches MiniLM)" >&2
    exec cargo run --release -q -p tensormem-examples --bin mnist -- "$@"
fi
