#!/usr/bin/env bash
# The main job (README): a sample inference on the fastest available backend (a hardware GPU
# through CUDA, Vulkan or wgpu, else the host CPU), with how the backend was chosen and the
# memory report. MiniLM sentence embeddings when its model cache exists (scripts/fetch_minilm.sh
# makes it), the MNIST CNN on the bundled digits otherwise.
# Extra arguments go to the sample (e.g. --backend host, --json, --runs 50; see --help).
# `scripts/infer.sh generate "prompt" ...` runs text generation instead (the SmolLM2 cache of
# scripts/fetch_smollm2.sh, or --model-dir DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"

cache="${TENSORMEM_CACHE:-$HOME/.cache/tensormem}/minilm"
if [ "${1:-}" = generate ]; then
    shift
    sample=generate
    inputs=()
elif [ -f "$cache/model.safetensors" ] && [ -f "$cache/tokenizer.json" ]; then
    sample=minilm
    inputs=("A man is eating food." "A man is eating a piece of bread." "The new movie is awesome.")
else
    sample=mnist
    inputs=()
    echo "infer: no MiniLM model at $cache, so running MNIST on the bundled digits" \
         "(scripts/fetch_minilm.sh fetches MiniLM, 83 MB)" >&2
fi

# The first build compiles the workspace in release mode (a few minutes on 2 cores; later runs
# take seconds). Say so, and how long it took, so a silent cargo is not mistaken for a hang.
if [ -x "target/release/$sample" ]; then
    echo "infer: updating the release build of '$sample' (seconds when nothing changed," \
         "minutes after a source or toolchain change)" >&2
else
    echo "infer: building '$sample' in release mode for the first time: this compiles the" \
         "whole workspace and takes a few minutes (about 4 on 2 cores)" >&2
fi
start=$SECONDS
cargo build --release -q -p tensormem-examples --bin "$sample"
echo "infer: build done in $((SECONDS - start)) s; running $sample" >&2

exec "target/release/$sample" "$@" "${inputs[@]}"
