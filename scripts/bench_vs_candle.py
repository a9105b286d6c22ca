#!/usr/bin/env python3
"""`generate` on the host backend against candle's Llama, side by side (not in CI).

Runs SmolLM2-135M (the cache of scripts/fetch_smollm2.sh, or --model-dir) at batch 1 with
`generate --backend host --weights W --kv-dtype W` and with `candle-generate` (candle-transformers'
Llama on the CPU, weights in the same dtype, memory-mapped) on the same prompt token ids, greedy,
--tokens new tokens, alternating the two --rounds times in one run. Prints for each side the
decode and prefill tokens per second (best and median of the rounds), the process's peak RSS
(`wait4`, each child's own), and how many generated tokens the two agree on, then the ratios the
issue sets targets for: decode tokens/s ours ÷ candle's (≥ 1.0) and peak RSS ours ÷ candle's
(≤ 0.8).

    python3 scripts/bench_vs_candle.py [--rounds 5] [--tokens 64] [--weights f32]

Builds both executables (release; candle's only with the examples' `candle` feature) unless
--generate and --candle name them. Timings are only comparable on a quiet machine: the script
prints the load average before and after.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_ort import spawn_measured  # noqa: E402  (one measured spawn for both peers)

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("TENSORMEM_CACHE", Path.home() / ".cache" / "tensormem"))
PROMPT = "The memory of a language model server is decided by its key and value cache, so"


def build():
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release"
    subprocess.run(
        ["cargo", "build", "--release", "-q", "-p", "tensormem-examples", "--bin", "generate"],
        cwd=ROOT,
        check=True,
    )
    subprocess.run(
        ["cargo", "build", "--release", "-q", "-p", "tensormem-examples", "--features", "candle",
         "--bin", "candle-generate"],
        cwd=ROOT,
        check=True,
    )
    return str(target / "generate"), str(target / "candle-generate")


def run_ours(exe, args):
    cmd = [exe, "--model-dir", str(args.model_dir), "--backend", "host", "--json",
           "--weights", args.weights, "--kv-dtype", args.weights,
           "--max-new-tokens", str(args.tokens), args.prompt]
    out, code, rss = spawn_measured(cmd)
    if code != 0:
        sys.exit(f"generate failed ({code})")
    v = json.loads(out)
    o = v["outputs"][0]
    return o["prompt_ids"], o["tokens"], v["timings"], rss


def run_candle(exe, ids, args):
    cmd = [exe, "--model-dir", str(args.model_dir), "--dtype", args.weights,
           "--max-new-tokens", str(args.tokens), "--prompt-ids", ",".join(map(str, ids))]
    out, code, rss = spawn_measured(cmd)
    if code != 0:
        sys.exit(f"candle-generate failed ({code})")
    v = json.loads(out)
    return v["tokens"], v["timings"], rss


def agree(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model-dir", type=Path, default=CACHE / "smollm2")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--weights", choices=["f32", "f16"], default="f32")
    p.add_argument("--prompt", default=PROMPT)
    p.add_argument("--generate", help="the generate executable (built when omitted)")
    p.add_argument("--candle", help="the candle-generate executable (built when omitted)")
    args = p.parse_args()
    if not (args.model_dir / "config.json").exists():
        sys.exit(f"{args.model_dir}: no checkpoint (run scripts/fetch_smollm2.sh)")
    if args.generate and args.candle:
        ours_exe, candle_exe = args.generate, args.candle
    else:
        ours_exe, candle_exe = build()

    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rows = {"tensormem": [], "candle": []}
    agreed = []
    for _ in range(args.rounds):
        ids, ours_tokens, t, rss = run_ours(ours_exe, args)
        rows["tensormem"].append((t["decode_tokens_per_s"], t["prefill_tokens_per_s"], rss))
        candle_tokens, t, rss = run_candle(candle_exe, ids, args)
        rows["candle"].append((t["decode_tokens_per_s"], t["prefill_tokens_per_s"], rss))
        agreed.append(agree(ours_tokens, candle_tokens))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    print(f"\nSmolLM2-135M, batch 1, {len(ids)}-token prompt, {args.tokens} new tokens, "
          f"{args.weights} weights and KV, {args.rounds} alternated rounds")
    print(f"{'':10} {'decode tok/s best':>18} {'median':>8} {'prefill tok/s':>14} {'peak RSS MiB':>13}")
    summary = {}
    for name, r in rows.items():
        dec = [x[0] for x in r]
        pre = [x[1] for x in r]
        rss = max(x[2] for x in r)
        summary[name] = (max(dec), statistics.median(dec), rss)
        print(f"{name:10} {max(dec):18.1f} {statistics.median(dec):8.1f} "
              f"{statistics.median(pre):14.1f} {rss:13.1f}")
    o, c = summary["tensormem"], summary["candle"]
    print(f"\ndecode tokens/s, tensormem ÷ candle: {o[1] / c[1]:.2f} (median), "
          f"{o[0] / c[0]:.2f} (best); target ≥ 1.0")
    print(f"peak RSS, tensormem ÷ candle: {o[2] / c[2]:.2f}; target ≤ 0.8")
    print(f"greedy tokens the two agree on before the first difference: {min(agreed)}–"
          f"{max(agreed)} of {args.tokens}")


if __name__ == "__main__":
    main()
