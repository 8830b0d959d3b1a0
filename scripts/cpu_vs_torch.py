#!/usr/bin/env python3
"""Side by side on the same cores: einsummable's CPU backend (`einsummable run`, f32, --devices
1/2/8) against the same LLaMA block in PyTorch on 2 intra-op threads (scripts/torch_cpu_block.py),
in interleaved rounds (every configuration once per round, so load from other processes
falls on all of them alike). Each measurement is the median of `--repeat` runs after one
warm-up in its own process; the table gives, per configuration, the median over the rounds.

With --pin CPU both sides run on that one core only (`taskset`, from util-linux): the
backend then sees one core and PyTorch gets 1 thread. On a machine that other processes load,
this comparison is the steadier one: PyTorch's OpenMP threads spin-wait and lose their time
slices when the cores are oversubscribed, which a 2-thread run on a loaded machine measures.

Needs: a release build of the binary (default target/release/einsummable) and a Python with
torch for the PyTorch side (--python). Uses only the standard library itself.
Usage: cpu_vs_torch.py --python /path/to/python [--rounds 5] [--repeat 3] [--bin PATH] [--big] [--pin CPU]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

DEFAULT = (1024, 2, 512, 8, 4, 64, 1536)
BIG = (4096, 2, 1024, 8, 4, 64, 1536)


def workload(shape):
    t, s, d, hq, hkv, e, ff = shape
    return f"llama-block:tokens={t},seqs={s},d_model={d},heads_q={hq},heads_kv={hkv},d_head={e},d_ff={ff}"


def ours(pin, binary, shape, devices, repeat):
    out = subprocess.run(
        pin + [binary, "run", workload(shape), "--devices", str(devices), "--warmup", "1", "--repeat", str(repeat), "--json"],
        check=True, capture_output=True, text=True,
    )
    return json.loads(out.stdout)["wall_ms"]


def torch(pin, python, shape, repeat):
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_cpu_block.py")
    threads = "1" if pin else "2"
    out = subprocess.run(
        pin + [python, script, threads, *map(str, shape), "1", str(repeat)], check=True, capture_output=True, text=True
    )
    result = json.loads(out.stdout)
    if "error" in result:
        sys.exit(f"torch: {result['error']}")
    return result["ms"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--python", required=True, help="a Python interpreter that imports torch")
    p.add_argument("--bin", default="target/release/einsummable")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--big", action="store_true", help="also the 4096-token block with d_model 1024")
    p.add_argument("--pin", metavar="CPU", help="run both sides on this one core (PyTorch on 1 thread)")
    a = p.parse_args()
    pin = ["taskset", "-c", a.pin] if a.pin else []
    shapes = [("default", DEFAULT)] + ([("big", BIG)] if a.big else [])
    configs = [(name, shape, d) for name, shape in shapes for d in (1, 2, 8)] + [
        (name, shape, "torch") for name, shape in shapes
    ]
    samples = {c[0] + str(c[2]): [] for c in configs}
    for r in range(a.rounds):
        for name, shape, d in configs:
            ms = torch(pin, a.python, shape, a.repeat) if d == "torch" else ours(pin, a.bin, shape, d, a.repeat)
            samples[name + str(d)].append(ms)
            print(f"round {r + 1}: {name} {d}: {ms:.1f} ms", file=sys.stderr)
    side = f"PyTorch, 1 thread, core {a.pin}" if a.pin else "PyTorch, 2 threads"
    print(f"| block | einsummable --devices 1 | 2 | 8 | {side} | best / PyTorch |")
    print("|---|---|---|---|---|---|")
    for name, _ in shapes:
        med = {d: statistics.median(samples[name + str(d)]) for d in (1, 2, 8, "torch")}
        best = min(med[1], med[2], med[8])
        cells = " | ".join(f"{med[d]:.1f} ms" for d in (1, 2, 8, "torch"))
        print(f"| {name} | {cells} | {best / med['torch']:.2f} |")


if __name__ == "__main__":
    main()
