#!/usr/bin/env bash
# A Python virtual environment with numpy in the cache (outside the repository), for the Llama
# decoder's reference (scripts/llama_reference.py, run by examples/tests/llama.rs). Idempotent;
# prints the interpreter's path. Needs python3 with venv and pip, and PyPI.
set -euo pipefail
CACHE="${TENSORMEM_CACHE:-$HOME/.cache/tensormem}"
ENV="$CACHE/pyenv"
PY="$ENV/bin/python"
if [ -x "$PY" ] && "$PY" -c 'import numpy' 2>/dev/null; then
    echo "$PY"
    exit 0
fi
mkdir -p "$CACHE"
python3 -m venv "$ENV" >&2
"$PY" -m pip install --quiet --disable-pip-version-check 'numpy>=1.24,<3' >&2
"$PY" -c 'import numpy' >&2
echo "$PY"
