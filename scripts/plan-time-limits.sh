#!/usr/bin/env bash
# The time-limit table of `tensormem-plan` (issue 15): wall time against --time-limit, alone and
# beside a CPU hog, for one or more builds run back to back on the same inputs.
#
#   scripts/plan-time-limits.sh [--limits "1 2 5 10"] [--hogs 2] BIN... -- INPUT.csv...
#
# Each BIN plans each INPUT at each limit (--threads 2 --seed 0 --json), first alone, then beside
# HOGS busy loops (`nice -n 0 sh -c 'while :; do :; done'`, started and stopped by this script).
# One row per run: input, limit, load, binary, wall s (/usr/bin/time), solver s (`seconds`),
# parse s (`parse_seconds`, when the build reports it), over-limit s = wall - parse - limit, the
# peak over the lower bound, the heuristic that produced it (`algorithm`; "+g" when greedy by size
# finished), and the load average when the run started.
set -euo pipefail
LIMITS="1 2 5 10"
HOGS=2
BINS=()
INPUTS=()
while [ $# -gt 0 ]; do
    case "$1" in
    --limits) LIMITS="$2"; shift 2 ;;
    --hogs) HOGS="$2"; shift 2 ;;
    --) shift; INPUTS=("$@"); break ;;
    *) BINS+=("$1"); shift ;;
    esac
done
[ ${#BINS[@]} -gt 0 ] && [ ${#INPUTS[@]} -gt 0 ] || {
    sed -n '2,11p' "$0"
    exit 2
}
HOG_PIDS=()
stop_hogs() {
    for p in "${HOG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    HOG_PIDS=()
}
trap stop_hogs EXIT
TMP=$(mktemp -d "${TMPDIR:-/tmp}/plan-limits.XXXXXX")
echo "| input | limit s | load | binary | wall s | solver s | parse s | over-limit s | peak / LB | algorithm | loadavg |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for load in alone hog; do
    if [ "$load" = hog ]; then
        for _ in $(seq "$HOGS"); do
            nice -n 0 sh -c 'while :; do :; done' &
            HOG_PIDS+=($!)
        done
        sleep 1
    fi
    for input in "${INPUTS[@]}"; do
        for limit in $LIMITS; do
            for bin in "${BINS[@]}"; do
                avg=$(cut -d' ' -f1 /proc/loadavg)
                /usr/bin/time -f "%e" -o "$TMP/time" "$bin" "$input" --time-limit "$limit" \
                    --threads 2 --seed 0 --json >"$TMP/out" 2>/dev/null || true
                python3 - "$input" "$limit" "$load" "$bin" "$TMP/time" "$TMP/out" "$avg" <<'PY'
import json, os, sys
inp, limit, load, binary, tfile, ofile, avg = sys.argv[1:]
wall = float(open(tfile).read().split()[-1])
v = json.load(open(ofile))
parse = v.get("parse_seconds")
over = wall - (parse or 0.0) - float(limit)
print(f"| {os.path.basename(inp)} | {limit} | {load} | {binary} | {wall:.2f} | {v['seconds']:.3f} | "
      f"{'-' if parse is None else f'{parse:.3f}'} | {over:+.3f} | {v['peak_over_lower_bound']:.6f} | "
      f"{v['algorithm']}{' +g' if v['greedy_finished'] else ''} | {avg} |")
PY
            done
        done
    done
    stop_hogs
done
rm -rf "$TMP"
