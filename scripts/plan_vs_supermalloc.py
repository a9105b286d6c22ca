#!/usr/bin/env python3
"""The exact search against a MiniMalloc-style solver in the same run (issue 15).

Google's MiniMalloc is not in a registry this project reaches; omnimalloc (PyPI, Apache-2.0) ships
SuperMalloc, a C++ branch and bound with MiniMalloc's prunings (canonical solutions, dominance,
section floor inference, the monotonic floor, dynamic decomposition) and its three preorders
(WAT, TAW, TWA), run as a parallel portfolio. This script decides generated perfect packings at
their capacity with both, one instance after the other, the same time limit and thread count:

    python3 -m venv /tmp/om && /tmp/om/bin/pip install omnimalloc==1.0.0
    cargo build --release -p tensormem-examples --bin tensormem-plan
    /tmp/om/bin/python scripts/plan_vs_supermalloc.py [--families pinwheel,guillotine]
        [--counts 150,300,450] [--seeds 3] [--time-limit 10] [--threads 2] [--horizon 1048576]

Instances come from `tensormem-plan generate` (capacity 1 MiB on a 1 KiB grid; the default
horizon is MiniMalloc's challenging sets' 2^20 steps). Ours: `tensormem-plan FILE --capacity C
--json`, its `seconds` (parsing excluded). SuperMalloc: `try_solve_many` at bound C + 1 (its
bounds are exclusive) from the partition's construction on, every plan it returns checked for
overlaps and its peak. Who goes first alternates per seed, so neither sees the other's load more.
One line per instance, then a table per (family, n): solved and the median and largest time of
the solved ones.

With `--files NAME.CAPACITY.csv ...` (MiniMalloc's naming, e.g. the challenging instances in
`shared/data/traces/minimalloc-challenging/`) it decides those files at the capacity in their
names instead, one row per file: decided and seconds for both, our exact-search nodes, the load.
"""

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

try:
    from omnimalloc._cpp import Allocation, Partition, find_collision, try_solve_many
    from omnimalloc.allocators.supermalloc import DEFAULT_HEURISTICS
except ImportError:
    sys.exit("needs omnimalloc 1.0.0: python3 -m venv V && V/bin/pip install omnimalloc==1.0.0, "
             "then run this script with V/bin/python")


def ours(binary, path, capacity, limit, threads):
    out = subprocess.run(
        [binary, path, "--capacity", str(capacity), "--time-limit", str(limit),
         "--threads", str(threads), "--json"],
        capture_output=True, text=True, check=False)
    if out.returncode not in (0, 3, 4):
        sys.exit(f"{binary} failed on {path} ({out.returncode}): {out.stderr.strip()}")
    d = json.loads(out.stdout)
    ours.nodes = d.get("exact_nodes")
    return d["feasible"] is True, d["seconds"]


def supermalloc(path, capacity, limit, threads):
    with open(path, newline="") as f:
        allocs = [Allocation(id=int(r["id"]), size=int(r["size"]), start=int(r["lower"]),
                             end=int(r["upper"])) for r in csv.DictReader(f)]
    start = time.monotonic()
    base = Partition.from_allocations(allocs)
    parts = [base.reorder("".join(h)).with_bound(capacity + 1) for h in DEFAULT_HEURISTICS]
    sol = try_solve_many(parts, capacity + 1, None, canonical=True, dominance=True,
                         floor_inference=True, monotonic_floor=True, decompose=True,
                         timeout=limit, num_threads=threads)
    seconds = time.monotonic() - start
    if sol is None:
        return False, seconds
    placed = sol.allocations
    if sol.peak > capacity or find_collision(placed) is not None or len(placed) != len(allocs):
        sys.exit(f"SuperMalloc returned an invalid plan for {path}")
    return True, seconds


def outcome(result):
    ok, seconds = result
    return f"{'solved' if ok else 'undecided'} in {seconds:.3f} s"


def row(results):
    solved = [s for ok, s in results if ok]
    if not solved:
        return f"{len(solved)}/{len(results)} | - | -"
    return (f"{len(solved)}/{len(results)} | {statistics.median(solved):.3f} | "
            f"{max(solved):.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="target/release/tensormem-plan")
    ap.add_argument("--families", default="guillotine,pinwheel,long-and-short")
    ap.add_argument("--counts", default="150,300,450")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--horizon", type=int, default=1 << 20)
    ap.add_argument("--files", nargs="+", help="NAME.CAPACITY.csv files to decide instead")
    args = ap.parse_args()
    if args.files:
        return files_table(args)
    capacity = 1 << 20
    table = []
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.families.split(","):
            for n in map(int, args.counts.split(",")):
                res = {"ours": [], "supermalloc": []}
                for seed in range(args.seeds):
                    path = os.path.join(tmp, f"{family}_{n}_{seed}.csv")
                    subprocess.run(
                        [args.bin, "generate", "--count", str(n), "--family", family,
                         "--seed", str(seed), "--horizon", str(args.horizon),
                         "--capacity", str(capacity), "-o", path],
                        capture_output=True, check=True)
                    runs = [("ours", lambda: ours(args.bin, path, capacity, args.time_limit,
                                                  args.threads)),
                            ("supermalloc", lambda: supermalloc(path, capacity, args.time_limit,
                                                                args.threads))]
                    for name, run in runs if seed % 2 == 0 else reversed(runs):
                        res[name].append(run())
                    load = os.getloadavg()[0]
                    print(f"{family} n={n} seed={seed}: ours {outcome(res['ours'][-1])}, "
                          f"SuperMalloc {outcome(res['supermalloc'][-1])}, load {load:.1f}",
                          flush=True)
                table.append((family, n, res))
    print(f"\ntime limit {args.time_limit} s, {args.threads} threads, horizon {args.horizon}")
    print("| family | n | ours solved | median s | max s | SuperMalloc solved | median s | max s |")
    print("|---|---|---|---|---|---|---|---|")
    for family, n, res in table:
        print(f"| {family} | {n} | {row(res['ours'])} | {row(res['supermalloc'])} |")


def files_table(args):
    rows = []
    for k, path in enumerate(args.files):
        capacity = int(os.path.basename(path).rsplit(".", 2)[-2])
        runs = [("ours", lambda: ours(args.bin, path, capacity, args.time_limit, args.threads)),
                ("supermalloc", lambda: supermalloc(path, capacity, args.time_limit,
                                                    args.threads))]
        res = {}
        for name, run in runs if k % 2 == 0 else reversed(runs):
            res[name] = run()
            if name == "ours":
                nodes = ours.nodes
        rows.append((os.path.basename(path), res, nodes, os.getloadavg()[0]))
    print(f"time limit {args.time_limit} s, {args.threads} threads")
    print("| instance | ours decided | s | nodes | SuperMalloc decided | s | load |")
    print("|---|---|---|---|---|---|---|")
    for name, res, nodes, load in rows:
        (o_ok, o_s), (s_ok, s_s) = res["ours"], res["supermalloc"]
        print(f"| {name} | {'yes' if o_ok else 'no'} | {o_s:.3f} | {nodes} | "
              f"{'yes' if s_ok else 'no'} | {s_s:.3f} | {load:.2f} |")


if __name__ == "__main__":
    main()
