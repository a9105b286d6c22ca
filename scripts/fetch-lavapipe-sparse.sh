#!/usr/bin/env bash
# Fetches Mesa 25's lavapipe from Debian bookworm-backports beside the system driver, for the
# Vulkan tests of arenas that grow in place: bookworm's lavapipe (Mesa 22.3) offers no sparse
# binding, the backported one does, and it runs with bookworm's own libraries. Nothing is
# installed and nothing under /etc is touched (apt reads a sources list and keeps its lists in
# the target folder), so the system lavapipe keeps the fallback's coverage.
#
# Prints the path of the ICD manifest to pass as VK_DRIVER_FILES / VK_ICD_FILENAMES. Reuses an
# earlier fetch. Output folder: $TENSORMEM_LVP_SPARSE_DIR, default target/lavapipe-sparse.
set -euo pipefail
cd "$(dirname "$0")/.."

dir="$(realpath -m "${TENSORMEM_LVP_SPARSE_DIR:-target/lavapipe-sparse}")"
manifest="$dir/lvp.json"
if [ -f "$manifest" ]; then
    echo "$manifest"
    exit 0
fi
mkdir -p "$dir/apt/lists/partial" "$dir/apt/cache/archives/partial" "$dir/deb" "$dir/root"
cat >"$dir/apt/sources.list" <<'EOF'
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-backports main
EOF
apt_opts=(
    -o "Dir::Etc::SourceList=$dir/apt/sources.list"
    -o "Dir::Etc::SourceParts=/nonexistent"
    -o "Dir::State::Lists=$dir/apt/lists"
    -o "Dir::Cache=$dir/apt/cache"
    -o "APT::Get::List-Cleanup=0"
    -o "Debug::NoLocking=1"
    -o "APT::Sandbox::User=$(id -un)"
)
apt-get "${apt_opts[@]}" update -qq >&2
(cd "$dir/deb" && apt-get "${apt_opts[@]}" download -qq mesa-vulkan-drivers/bookworm-backports >&2)
deb="$(ls "$dir"/deb/mesa-vulkan-drivers_*.deb)"
dpkg -x "$deb" "$dir/root"
lib="$(find "$dir/root" -name libvulkan_lvp.so -print -quit)"
[ -n "$lib" ] || { echo "no libvulkan_lvp.so in $deb" >&2; exit 1; }
cat >"$manifest.tmp" <<EOF
{
    "file_format_version": "1.0.0",
    "ICD": { "library_path": "$lib", "api_version": "1.4.305" }
}
EOF
mv "$manifest.tmp" "$manifest"
echo "$manifest"
