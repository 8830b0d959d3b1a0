#!/usr/bin/env python3
"""The `llama-block` workload of einsummable in PyTorch on the CPU (f32, MKL matmuls, SDPA),
for the side-by-side table of docs/RESULTS.md: median of N runs after W warm-ups, on a given
number of intra-op threads.

Same computation as einsum-experiments/src/workload.rs (and scripts/torch_llama_block.py on a
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


def main():
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(json.dumps({"error": f"torch is missing: {e}"}))
        return
    threads, t, seqs, d, hq, hkv, e, ff = (int(a) for a in sys.argv[1:9])
    warmup = int(sys.argv[9]) if len(sys.argv) > 9 else 2
    runs = int(sys.argv[10]) if len(sys.argv) > 10 else 10
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)

    def rnd(*shape):
        return torch.rand(*shape, generator=g) * 2 - 1

    x = rnd(t, d)
    n1, n2 = rnd(d), rnd(d)
    wq, wk, wv = rnd(d, hq * e), rnd(d, hkv * e), rnd(d, hkv * e)
    wo = rnd(hq * e, d)
    wg, wu, wd = rnd(d, ff), rnd(d, ff), rnd(ff, d)
    seq = t // seqs
    pos = torch.arange(t) % seq
    inv = 500000.0 ** (-torch.arange(0, e // 2, dtype=torch.float64) * 2 / e)
    ang = pos[:, None].double() * inv[None, :]
    cos, sin = ang.cos().float(), ang.sin().float()

    def rmsnorm(v, w):
        return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    def rope(v):  # v: [heads, t, e]
        a, b = v[..., : e // 2], v[..., e // 2 :]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)

    def block():
        h = rmsnorm(x, n1)
        q = (h @ wq).view(t, hq, e).transpose(0, 1)
        k = (h @ wk).view(t, hkv, e).transpose(0, 1)
        v = (h @ wv).view(t, hkv, e).transpose(0, 1)
        q, k = rope(q), rope(k)
        # Packed sequences: attention never crosses one, so run each as a batch entry.
        q = q.reshape(hq, seqs, seq, e).transpose(0, 1)
        k = k.reshape(hkv, seqs, seq, e).transpose(0, 1)
        v = v.reshape(hkv, seqs, seq, e).transpose(0, 1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        a = a.transpose(0, 1).reshape(hq, t, e).transpose(0, 1).reshape(t, hq * e)
        y = x + a @ wo
        h = rmsnorm(y, n2)
        return y + (F.silu(h @ wg) * (h @ wu)) @ wd

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
