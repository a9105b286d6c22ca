#!/usr/bin/env python3
"""Fails on an import cycle between modules of any crate in the workspace.

Each `src/**.rs` file is a module (`a.rs` and `a/mod.rs` are `a`, `a/b.rs` is `a::b`). Every
`use crate::…` and `use super::…` path is resolved to the longest known module it names. An
import from module A of module B is an edge between the two children of their closest common
ancestor that contain A and B; imports of an ancestor's items (a child using its parent's) make
no edge. A cycle among the children of one module (e.g. `devices` -> `runtime` -> `devices`)
fails the check, with one import line for each edge of the cycle.

Usage: scripts/check_imports.py [CRATE_DIR ...]   (default: every workspace member)
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
USE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.S | re.M)


def members():
    text = (ROOT / "Cargo.toml").read_text()
    block = re.search(r"members\s*=\s*\[([^\]]*)\]", text)
    return [ROOT / m for m in re.findall(r'"([^"]+)"', block.group(1))]


def modules(src):
    """Module path (tuple) of each .rs file under src; the crate root is ()."""
    out = {}
    for f in sorted(src.rglob("*.rs")):
        rel = f.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        if parts in (["lib"], ["main"]):
            parts = []
        elif parts[-1] == "mod":
            parts = parts[:-1]
        elif len(parts) >= 2 and parts[0] == "bin":
            continue  # binaries are crates of their own
        out[f] = tuple(parts)
    return out


def expand(tree):
    """The paths of one `use` tree: `a::{b, c::d}` -> a::b, a::c::d."""
    tree = re.sub(r"\s+", "", tree)
    depth, start = 0, None
    for i, ch in enumerate(tree):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                prefix = tree[:start]
                inner, parts, d, last = tree[start + 1 : i], [], 0, 0
                for j, c in enumerate(inner):
                    d += c == "{"
                    d -= c == "}"
                    if c == "," and d == 0:
                        parts.append(inner[last:j])
                        last = j + 1
                parts.append(inner[last:])
                return [p for part in parts if part for p in expand(prefix + part)]
    return [re.sub(r"as\w+$", "", tree.split(" as ")[0])]


def target(path, here, known):
    """The known module an import path names, or None outside the crate."""
    segs = [s for s in path.split("::") if s]
    if not segs:
        return None
    if segs[0] == "crate":
        base, segs = (), segs[1:]
    elif segs[0] in ("super", "self"):
        base = here
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
    else:
        return None
    best = base
    for i in range(1, len(segs) + 1):
        cand = base + tuple(segs[:i])
        if cand in known:
            best = cand
    return best


def test_file(f):
    return f.name == "tests.rs" or "tests" in f.parts[-2:-1] or f.name.endswith("_tests.rs")


def check(crate):
    src = crate / "src"
    if not src.is_dir():
        return []
    mods = modules(src)
    known = set(mods.values())
    edges = {}  # (parent, a, b) -> example import
    for f, here in mods.items():
        if test_file(f):
            continue  # a module's tests may use anything of the crate
        text = re.sub(r"//[^\n]*", "", f.read_text())
        for m in USE.finditer(text):
            for p in expand(m.group(1)):
                t = target(p, here, known)
                if t is None:
                    continue
                k = 0
                while k < min(len(here), len(t)) and here[k] == t[k]:
                    k += 1
                if k == len(t) or k == len(here):
                    continue  # an ancestor's items, or a descendant's
                key = (here[:k], here[k], t[k])
                edges.setdefault(key, f"{f.relative_to(ROOT)}: use {p}")
    graph = {}
    for (parent, a, b), why in edges.items():
        graph.setdefault(parent, {}).setdefault(a, {})[b] = why
    problems = []
    for parent, g in graph.items():
        for cycle in cycles(g):
            name = "::".join(parent) or "crate"
            lines = [f"  {a} -> {b}   ({g[a][b]})" for a, b in zip(cycle, cycle[1:] + cycle[:1])]
            problems.append(f"{crate.name}: cycle among the children of {name}:\n" + "\n".join(lines))
    return problems


def cycles(g):
    """One cycle per strongly connected component with more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(path_in(g, set(comp)))

    sys.setrecursionlimit(10000)
    for v in list(g):
        if v not in index:
            visit(v)
    return out


def path_in(g, comp):
    """A cycle through the component: walk from its smallest node until a node repeats."""
    start = min(comp)
    seen, path, v = {}, [], start
    while v not in seen:
        seen[v] = len(path)
        path.append(v)
        v = min(w for w in g[v] if w in comp)
    return path[seen[v] :]


def main():
    crates = [Path(a).resolve() for a in sys.argv[1:]] or members()
    problems = [p for c in crates for p in check(c)]
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} import cycle(s) between modules")
        return 1
    print(f"no import cycle between modules in {len(crates)} crates")
    return 0


if __name__ == "__main__":
    sys.exit(main())
