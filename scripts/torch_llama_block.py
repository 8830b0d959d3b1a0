#!/usr/bin/env python3
"""The `llama-block` workload of einsummable in PyTorch (bf16, cuBLAS matmuls, SDPA), timed
on one GPU by CUDA events: median of N runs after W warm-ups (scripts/torch_timing.py).

The block itself is scripts/torch_block.py (shared with scripts/torch_cpu_block.py on the CPU):
the same computation as einsum-experiments/src/workload.rs.
Prints one JSON object: {"ms": median, "ms_to_host": median with the output copied to pinned
host memory, "runs": N} or {"error": ...}.

Usage: torch_llama_block.py tokens seqs d_model heads_q heads_kv d_head d_ff [warmup runs]
"""
import json
import sys

from torch_block import llama_block
from torch_timing import both_times


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
        times = both_times(torch, block, warmup, runs)
    print(json.dumps({**times, "runs": runs}))


if __name__ == "__main__":
    main()
