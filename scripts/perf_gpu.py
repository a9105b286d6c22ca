"""The `gpu-check` section of docs/performance.md, read from GPU-check results folders.

The GPU check (`scripts/gpu-check.sh run`) runs on a machine without cargo or this repository's
history; what it leaves under `$OUT` (summary.md, machine.log, logs.tar.gz) comes back to the
build machine, and `scripts/perf.py gpu-check --gpu-check DIR [--gpu-check DIR2 ...]` turns it
into the section. Several folders merge: a later run's step replaces an earlier one's unless the
later run skipped it (`GPU_CHECK_SKIP`), so a rerun of some steps completes a first run.
"""

import re
import sys
import tarfile
from pathlib import Path

# Lines worth keeping from the step logs: the conformance totals per target, the measured stall
# of a 1 GiB upload, the generate speed, and the comparisons with the host's outputs.
LOG_LINES = re.compile(
    r"^\s*(\S+\s+ran \d+ cases: .*|stall of a 1 GiB upload: .*|generate: prefill .*|generate rate .*"
    r"|compare \w+: .*)$"
)


def _read(folder: Path) -> dict:
    summary = (folder / "summary.md").read_text()
    machine = (folder / "machine.log").read_text() if (folder / "machine.log").exists() else ""
    steps = {}
    for line in summary.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and re.match(r"^\d\d", cells[0]):
            steps[cells[0]] = cells
    blocks = re.findall(r"```\n(.*?)```", summary, re.S)
    logs = {}
    archive = folder / "logs.tar.gz"
    if archive.exists():
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                name = Path(member.name).name
                if member.isfile() and name.endswith(".log") and name[:2].isdigit():
                    text = tar.extractfile(member).read().decode(errors="replace")
                    lines = text.splitlines()
                    kept = [m.group(1) for m in map(LOG_LINES.match, lines) if m]
                    ok = sum(1 for x in lines if x.startswith("  ok "))
                    failed = sum(1 for x in lines if x.startswith("  FAIL "))
                    if ok + failed and not any(" ran " in k for k in kept):
                        # A suite cut off by its step limit prints no totals.
                        kept.append(f"{name[:-4]}: {ok} cases passed, {failed} failed before the step ended")
                    logs[name[:-4]] = kept
    date = re.search(r"^date: (\S+)", machine, re.M)
    head = re.search(r"^machine: (.*)$", summary, re.M)
    return {
        "steps": steps,
        "blocks": blocks,
        "logs": logs,
        "date": date.group(1) if date else "unknown date",
        "machine": head.group(1) if head else "unknown machine",
    }


def gpu_check(folders: list[str]) -> tuple[str, str]:
    if not folders:
        sys.exit("perf.py: gpu-check needs --gpu-check DIR (a GPU check's $OUT, fetched here)")
    runs = [_read(Path(f)) for f in folders]
    steps, logs, blocks = {}, {}, {}
    for number, r in enumerate(runs, 1):
        for name, cells in r["steps"].items():
            # A skipped step keeps an earlier run's result; a skipped diagnostic (NNb-...) that
            # no run needed is left out.
            if cells[1] == "skipped" and (name in steps or name[2:3].isalpha()):
                continue
            # A rerun of step NN drops the earlier run's diagnostics of it (NNb-...).
            for old in [s for s in steps if s[:2] == name[:2] and s[2:3].isalpha()]:
                del steps[old]
                logs.pop(old, None)
            # Checks before 2026-12-04 wrote a bare "on" where a step's log named no device.
            cells[3] = cells[3].removesuffix("; on").removesuffix(" on")
            steps[name] = [*cells, str(number)]
            logs[name] = r["logs"].get(name, [])
        for b in r["blocks"]:
            key = b.splitlines()[0] if b.strip() else ""
            blocks[key] = b
    out = [f"Runs: {', '.join(r['date'] for r in runs)}; machine: {runs[-1]['machine']}.", ""]
    out += ["| step | status | seconds | note | run |", "|---|---|---:|---|---:|"]
    out += [f"| {' | '.join(c)} |" for c in sorted(steps.values())]
    measured = [line for name in sorted(logs) for line in logs[name]]
    if measured:
        out += ["", "```", *measured, "```"]
    for b in blocks.values():
        out += ["", "```", b.rstrip("\n"), "```"]
    command = "scripts/gpu-check.sh run (on the GPU machine); scripts/perf.py gpu-check --gpu-check DIR"
    return command, "\n".join(out)
