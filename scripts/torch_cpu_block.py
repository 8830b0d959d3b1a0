#!/usr/bin/env python3
"""The `llama-block` workload of einsummable in PyTorch on the CPU (f32, MKL matmuls, SDPA),
for the side-by-side table of docs/RESULTS.md: median of N runs after W warm-ups, on a given
number of intra-op threads.

The block itself is scripts/torch_block.py (shared with scripts/torch_llama_block.py on a
GPU): RMSNorm, Q/K/V projections, RoPE (theta 500000, positions restarting at every packed
sequence), causal grouped-query attention within each packed sequence, output projection and
residual, RMSNorm, SwiGLU FFN, residual.
Prints one JSON object: {"ms": median, "runs": N, "threads": T} or {"error": ...}.

Needs only `torch` (any CPU build, 2.5 or later for `enable_gqa`).
Usage: torch_cpu_block.py threads tokens seqs d_model heads_q heads_kv d_head d_ff [warmup runs]
"""
import json
import statistics
import sys
import time

from torch_block import llama_block


def main():
    try:
        import torch
    except ImportError as e:
        print(json.dumps({"error": f"torch is missing: {e}"}))
        return
    threads, t, seqs, d, hq, hkv, e, ff = (int(a) for a in sys.argv[1:9])
    warmup = int(sys.argv[9]) if len(sys.argv) > 9 else 2
    runs = int(sys.argv[10]) if len(sys.argv) > 10 else 10
    torch.set_num_threads(threads)
    block = llama_block(torch, t, seqs, d, hq, hkv, e, ff, "cpu", torch.float32)

    with torch.no_grad():
        for _ in range(warmup):
            block()
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            block()
            times.append((time.perf_counter() - start) * 1e3)
    print(json.dumps({"ms": statistics.median(times), "runs": runs, "threads": threads}))


if __name__ == "__main__":
    main()
