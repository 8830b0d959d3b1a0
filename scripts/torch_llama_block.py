#!/usr/bin/env python3
"""The `llama-block` workload of einsummable in PyTorch (bf16, cuBLAS matmuls, SDPA), timed
on one GPU: median of N runs after W warm-ups, with torch.cuda.synchronize() around each.

Same computation as einsum-experiments/src/workload.rs: RMSNorm, Q/K/V projections, RoPE (theta 500000,
positions restarting at every packed sequence), causal grouped-query attention within each
packed sequence, output projection and residual, RMSNorm, SwiGLU FFN, residual.
Prints one JSON object: {"ms": median, "runs": N} or {"error": ...}.

Usage: torch_llama_block.py tokens seqs d_model heads_q heads_kv d_head d_ff [warmup runs]
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
    if not torch.cuda.is_available():
        print(json.dumps({"error": "torch sees no CUDA device"}))
        return
    t, seqs, d, hq, hkv, e, ff = (int(a) for a in sys.argv[1:8])
    warmup = int(sys.argv[8]) if len(sys.argv) > 8 else 2
    runs = int(sys.argv[9]) if len(sys.argv) > 9 else 10
    dev, dt = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape):
        return (torch.rand(*shape, generator=g, device=dev) * 2 - 1).to(dt)

    x = rnd(t, d)
    n1, n2 = rnd(d), rnd(d)
    wq, wk, wv = rnd(d, hq * e), rnd(d, hkv * e), rnd(d, hkv * e)
    wo = rnd(hq * e, d)
    wg, wu, wd = rnd(d, ff), rnd(d, ff), rnd(ff, d)
    seq = t // seqs
    pos = torch.arange(t, device=dev) % seq
    inv = 500000.0 ** (-torch.arange(0, e // 2, device=dev, dtype=torch.float64) * 2 / e)
    ang = pos[:, None].double() * inv[None, :]
    cos, sin = ang.cos().float(), ang.sin().float()

    def rmsnorm(v, w):
        vf = v.float()
        return (vf * torch.rsqrt(vf.pow(2).mean(-1, keepdim=True) + 1e-5) * w.float()).to(dt)

    def rope(v):  # v: [heads, t, e]
        a, b = v[..., : e // 2].float(), v[..., e // 2 :].float()
        return torch.cat([a * cos - b * sin, b * cos + a * sin], -1).to(dt)

    def block():
        h = rmsnorm(x, n1)
        q = (h @ wq).view(t, hq, e).transpose(0, 1)
        k = (h @ wk).view(t, hkv, e).transpose(0, 1)
        v = (h @ wv).view(t, hkv, e).transpose(0, 1)
        q, k = rope(q), rope(k)
        # Packed sequences: attention never crosses one, so run each as a batch entry.
        q = q.view(hq, seqs, seq, e).transpose(0, 1)
        k = k.view(hkv, seqs, seq, e).transpose(0, 1)
        v = v.view(hkv, seqs, seq, e).transpose(0, 1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        a = a.transpose(0, 1).reshape(hq, t, e).transpose(0, 1).reshape(t, hq * e)
        y = x + a @ wo
        h = rmsnorm(y, n2)
        return y + (F.silu(h @ wg) * (h @ wu)) @ wd

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
