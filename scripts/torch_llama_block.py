#!/usr/bin/env python3
"""The `llama-block` workload of einsummable in PyTorch (bf16, cuBLAS matmuls, SDPA), timed
on one GPU: median of N runs after W warm-ups, with torch.cuda.synchronize() around each.

The block itself is scripts/torch_block.py (shared with scripts/torch_cpu_block.py on the CPU):
the same computation as einsum-experiments/src/workload.rs.
Prints one JSON object: {"ms": median, "runs": N} or {"error": ...}.

Usage: torch_llama_block.py tokens seqs d_model heads_q heads_kv d_head d_ff [warmup runs]
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
    if not torch.cuda.is_available():
        print(json.dumps({"error": "torch sees no CUDA device"}))
        return
    t, seqs, d, hq, hkv, e, ff = (int(a) for a in sys.argv[1:8])
    warmup = int(sys.argv[8]) if len(sys.argv) > 8 else 2
    runs = int(sys.argv[9]) if len(sys.argv) > 9 else 10
    block = llama_block(torch, t, seqs, d, hq, hkv, e, ff, "cuda", torch.bfloat16)

    with torch.no_grad():
        for _ in range(warmup):
            block()
        torch.cuda.synchronize()
        times = []
        for _ in range(runs):
            torch.cuda.synchronize()
            start = time.perf_counter()
            block()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - start) * 1e3)
    print(json.dumps({"ms": statistics.median(times), "runs": runs}))


if __name__ == "__main__":
    main()
