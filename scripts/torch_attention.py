#!/usr/bin/env python3
"""The `attention` workload of einsummable in PyTorch: causal grouped-query attention over
packed sequences (each sequence a batch entry), bf16, through PyTorch's FlashAttention
backend of scaled_dot_product_attention, timed on one GPU by CUDA events: median of N runs after W
warm-ups (scripts/torch_timing.py). Where the flash backend refuses
`enable_gqa`, keys and values are expanded to every query head before timing (so the
comparison is with flash attention either way) and the output says so.
Prints one JSON object: {"ms": median, "ms_to_host": median with the output copied to pinned
host memory, "runs": N, "gqa": "native" | "expanded"} or {"error": ...}.

Usage: torch_attention.py tokens seqs heads_q heads_kv d_head [warmup runs]
"""
import json
import sys

from torch_timing import both_times


def main():
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        print(json.dumps({"error": f"torch is missing: {e}"}))
        return
    if not torch.cuda.is_available():
        print(json.dumps({"error": "torch sees no CUDA device"}))
        return
    t, seqs, hq, hkv, e = (int(a) for a in sys.argv[1:6])
    warmup = int(sys.argv[6]) if len(sys.argv) > 6 else 2
    runs = int(sys.argv[7]) if len(sys.argv) > 7 else 10
    dev, dt = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)
    seq = t // seqs

    def rnd(heads):
        return (torch.rand(seqs, heads, seq, e, generator=g, device=dev) * 2 - 1).to(dt)

    q, k, v = rnd(hq), rnd(hkv), rnd(hkv)
    gqa = "native"

    def attend():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            if gqa == "native":
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    with torch.no_grad():
        try:
            attend()
        except (RuntimeError, TypeError):
            gqa = "expanded"
            k, v = k.repeat_interleave(hq // hkv, dim=1), v.repeat_interleave(hq // hkv, dim=1)
            attend()
        times = both_times(torch, attend, warmup, runs)
    print(json.dumps({**times, "runs": runs, "gqa": gqa}))


if __name__ == "__main__":
    main()
