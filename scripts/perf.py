#!/usr/bin/env python3
"""Regenerates the generated sections of docs/performance.md from the benchmarks.

    python3 scripts/perf.py              # every section (timed ones need a quiet machine)
    python3 scripts/perf.py kv-serving   # one section
    python3 scripts/perf.py --list       # what each section runs
    python3 scripts/perf.py gpu-check --gpu-check DIR   # from a GPU check's fetched $OUT

A generated section sits between `<!-- perf:NAME -->` and `<!-- /perf:NAME -->` in the file; this
script replaces what is between the markers with the section's fresh output (its command, the
build's commit, the date and the load average before and after, then the table) and leaves the
rest of the file alone. Timed sections refuse to run while the one-minute load average is 1.5 or
more (nothing else may build or run beside a measurement); `--loaded` runs them anyway and marks
their tables as indicative. Deterministic sections (simulations, no timing) run at any load.
Not run by CI: the timed benchmarks need minutes and a quiet machine. The `gpu-check` section
runs nothing here: it reads the GPU check's results (`scripts/perf_gpu.py`) and is written only
when named.
"""

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from perf_gpu import gpu_check

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "performance.md"
TRACES = ROOT.parent / "shared" / "data" / "traces"
QUIET_LOAD = 1.5


def load() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")


def run(cmd: list[str], **kw) -> str:
    """Runs `cmd` in the repository root; its stdout, or an exit with its stderr."""
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"perf.py: `{' '.join(cmd)}` failed ({p.returncode}):\n{p.stderr[-4000:]}")
    return p.stdout


def release_bin(name: str) -> str:
    run(["cargo", "build", "--release", "-q", "-p", "tensormem-examples", "--bin", name])
    return str(ROOT / "target" / "release" / name)


# --- sections -------------------------------------------------------------------------------

KV_RUNS = [
    ("conv", "4GiB", []),
    ("conv", "2GiB", []),
    ("code", "1GiB", []),
    ("code", "2GiB", ["--rate-scale", "2"]),
    ("conv", "4GiB", ["--shared-prefix", "512"]),
]


def kv_serving() -> tuple[str, str]:
    kv = release_bin("tensormem-kv")
    trace_dir = TRACES / "azure-llm-inference-2023"
    rows = [
        "| trace, `--kv-budget` | util. paged / vLLM / exact / max "
        "| running paged / vLLM / exact / max | preemptions paged / vLLM | steps paged / vLLM |",
        "|---|---|---|---|---|",
    ]
    for trace, budget, extra in KV_RUNS:
        path = trace_dir / f"AzureLLMInferenceTrace_{trace}.csv"
        doc = json.loads(run([kv, "replay", str(path), "--kv-budget", budget, "--json", *extra]))
        by = {p["policy"]: p for p in doc["policies"]}
        order = ["paged", "paged_vllm", "contiguous_exact", "contiguous_max"]
        util = " / ".join(f"{by[p]['utilization_mean']:.3f}" for p in order)
        running = " / ".join(f"{by[p]['running_mean']:.2f}" for p in order)
        pre = " / ".join(f"{by[p]['preemptions']:,}" for p in order[:2])
        steps = " / ".join(f"{by[p]['steps']:,}" for p in order[:2])
        label = f"{trace}, {budget}" + (f", `{' '.join(extra)}`" if extra else "")
        rows.append(f"| {label} | {util} | {running} | {pre} | {steps} |")
    command = (
        "tensormem-kv replay shared/data/traces/azure-llm-inference-2023/"
        "AzureLLMInferenceTrace_<trace>.csv --kv-budget <budget> --json [flags]"
    )
    return command, "\n".join(rows)


def planner() -> tuple[str, str]:
    plan = release_bin("tensormem-plan")
    files = sorted(str(f) for f in (TRACES / "minimalloc-challenging").glob("*.csv"))
    out = run([plan, "decide", *files, "--time-limit", "10", "--threads", "2"])
    table = "\n".join(line for line in out.splitlines() if line.startswith("|"))
    command = (
        "tensormem-plan decide shared/data/traces/minimalloc-challenging/*.csv "
        "--time-limit 10 --threads 2"
    )
    return command, table


def decode() -> tuple[str, str]:
    out = run(["cargo", "bench", "-q", "-p", "tensormem-examples", "--bench", "decode"])
    rows = [
        "| batch | paged ms/token | contiguous ms/token | ratio |",
        "|---:|---:|---:|---:|",
    ]
    for line in out.splitlines():
        cells = line.split()
        if len(cells) == 4 and cells[0].isdigit():
            rows.append("| " + " | ".join(cells) + " |")
    if len(rows) == 2:
        sys.exit(f"perf.py: the decode bench printed no rows:\n{out}")
    return "cargo bench -p tensormem-examples --bench decode", "\n".join(rows)


def ort() -> tuple[str, str]:
    minilm = release_bin("minilm")
    parts = []
    for weights in ("f32", "int8", "int8-dynamic"):
        out = run([sys.executable, "scripts/bench_vs_ort.py", "--minilm", minilm, "--runs", "20",
                   "--weights", weights])
        keep = [line for line in out.splitlines() if not line.startswith("load average")]
        parts.append("```\n" + "\n".join(keep).strip() + "\n```")
    command = "python3 scripts/bench_vs_ort.py --minilm target/release/minilm --runs 20 --weights f32|int8|int8-dynamic"
    return command, "\n\n".join(parts)


def offload() -> tuple[str, str]:
    minilm = release_bin("minilm")
    model = Path(os.environ.get("TENSORMEM_CACHE", Path.home() / ".cache" / "tensormem")) / "minilm"
    args = ["--offload-table", "--backend", "host", "--force-staging", "--offload-seq", "128",
            "--offload-seq", "512", "--offload-percent", "15", "--offload-percent", "10",
            "--runs", "3", "--offload-compare-recompute"]
    out = run([minilm, "--model-dir", str(model), *args])
    table = "\n".join(line for line in out.splitlines() if line.startswith("|") or "rates" in line)
    return "minilm " + " ".join(args), table


def suballoc() -> tuple[str, str]:
    # The filter matches no criterion benchmark: only the summary (timed interleaved rounds of
    # every allocator, then the internal fragmentation on the pool traces) runs.
    cmd = ["cargo", "bench", "-q", "-p", "tensormem", "--bench", "suballoc", "--", "summary-only"]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    start = p.stderr.find("suballoc summary")
    if p.returncode != 0 or start < 0:
        sys.exit(f"perf.py: `{' '.join(cmd)}` printed no summary ({p.returncode}):\n{p.stderr[-4000:]}")
    body = "```\n" + p.stderr[start:].strip() + "\n```"
    return "cargo bench -p tensormem --bench suballoc -- summary-only", body


# name: (generator, timed, what it measures)
SECTIONS = {
    "kv-serving": (kv_serving, False, "the KV serving simulator on the Azure traces"),
    "planner": (planner, True, "the exact planner on MiniMalloc's challenging instances"),
    "decode": (decode, True, "paged against contiguous KV decode steps (host)"),
    "offload": (offload, True, "MiniLM under device budgets on the host, staging forced"),
    "ort": (ort, True, "MiniLM on the host backend against ONNX Runtime's CPU provider"),
    "suballoc": (suballoc, True, "TLSF, buddy and two crates: churn, ramp, fragmentation"),
}


def splice(text: str, name: str, body: str) -> str:
    pattern = re.compile(
        rf"(<!-- perf:{re.escape(name)} -->\n).*?(<!-- /perf:{re.escape(name)} -->)", re.S
    )
    if not pattern.search(text):
        sys.exit(f"perf.py: docs/performance.md has no `<!-- perf:{name} -->` section")
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text, count=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sections", nargs="*", help="section names (default: all)")
    ap.add_argument("--list", action="store_true", help="list the sections and exit")
    ap.add_argument("--loaded", action="store_true", help="run timed sections at any load")
    ap.add_argument("--gpu-check", action="append", default=[], metavar="DIR",
                    help="a GPU check's results folder (repeat: later runs complete earlier ones)")
    a = ap.parse_args()
    if a.list:
        for name, (_, timed, what) in SECTIONS.items():
            print(f"{name:12} {'timed' if timed else 'deterministic':13} {what}")
        return
    names = a.sections or list(SECTIONS)
    if names == ["gpu-check"]:
        command, body = gpu_check(a.gpu_check)
        DOC.write_text(splice(DOC.read_text(), "gpu-check", f"`{command}`:\n\n{body}"))
        print("perf.py: gpu-check: written")
        return
    for n in names:
        if n not in SECTIONS:
            sys.exit(f"perf.py: unknown section {n!r} (--list shows them)")
    rev = run(["git", "rev-parse", "--short", "HEAD"]).strip()
    dirty = " (uncommitted changes)" if run(["git", "status", "--porcelain", "-uno", "--", ".", ":!docs/performance.md"]) else ""
    for name in names:
        gen, timed, _ = SECTIONS[name]
        before = load()
        if timed and not before < QUIET_LOAD and not a.loaded:
            print(f"perf.py: {name}: load {before:.2f} ≥ {QUIET_LOAD}; skipped (--loaded runs it)")
            continue
        print(f"perf.py: {name} ...", flush=True)
        command, table = gen()
        after = load()
        when = datetime.date.today().isoformat()
        note = f"release, {when}, commit {rev}{dirty}"
        if timed:
            # The benchmark's own threads raise the load it ends at: the start decides.
            note += f", load {before:.2f} at the start, {after:.2f} at the end"
            if not before < QUIET_LOAD:
                note += " (**loaded: indicative only**)"
        else:
            note += ", deterministic (no timing)"
        body = f"`{command}` ({note}):\n\n{table}"
        text = DOC.read_text()
        DOC.write_text(splice(text, name, body))
        print(f"perf.py: {name}: written")


if __name__ == "__main__":
    os.environ.setdefault("CARGO_TERM_COLOR", "never")
    main()
