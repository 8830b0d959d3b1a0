#!/usr/bin/env python3
"""The compile-time grid of docs/RESULTS.md (issue 14): CPU time of `plan` against the device count.

    python3 scripts/compile_grid.py SCHEDULE LAYERS RUNS BINARY [BINARY ...]

For p in 8, 16, 32, 64 and 72 it writes a topology of p copies of the `dgx-h100` site behind its
switch fallback (the preset's file with `"sites": p`), then runs, RUNS times, every BINARY as
`BINARY plan llama:layers=LAYERS,tokens=8192,seqs=1 --devices p --topology FILE --schedule
SCHEDULE` (`--schedule`, the older name of `--synthesizer`, so that binaries from before the
rename run too) under `perf stat -e task-clock`, interleaving binaries and points run by run so that
the machine's load falls on all of them alike. It prints, per binary, the least CPU ms per point
and the least-squares slope of log(ms) against log(p): the fitted exponent.
"""
import math
import os
import subprocess
import sys
import tempfile

POINTS = [8, 16, 32, 64, 72]
PRESET = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "einsum-sim", "topologies", "dgx-h100.json")


def cpu_ms(binary, schedule, layers, p, topology):
    args = ["perf", "stat", "-x,", "-e", "task-clock", binary, "plan", f"llama:layers={layers},tokens=8192,seqs=1",
            "--devices", str(p), "--topology", topology, "--schedule", schedule]
    out = subprocess.run(args, capture_output=True, text=True, check=True)
    line = next(l for l in out.stderr.splitlines() if "task-clock" in l)
    return float(line.split(",")[0])


def slope(points, values):
    xs = [math.log(p) for p in points]
    ys = [math.log(v) for v in values]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    schedule, layers, runs, binaries = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    preset = open(PRESET).read()
    with tempfile.TemporaryDirectory() as tmp:
        topologies = {}
        for p in POINTS:
            topologies[p] = os.path.join(tmp, f"h{p}.json")
            with open(topologies[p], "w") as f:
                f.write(preset.replace('"sites": 8', f'"sites": {p}'))
        least = {(b, p): math.inf for b in binaries for p in POINTS}
        for _ in range(runs):
            for p in POINTS:
                for b in binaries:
                    least[(b, p)] = min(least[(b, p)], cpu_ms(b, schedule, layers, p, topologies[p]))
    for b in binaries:
        values = [least[(b, p)] for p in POINTS]
        print(b, " ".join(f"{v:.1f}" for v in values), f"exponent {slope(POINTS, values):.3f}")


if __name__ == "__main__":
    main()
