"""The `llama-block` workload of einsummable written in PyTorch, shared by the GPU timing script
(torch_llama_block.py, bf16) and the CPU one (torch_cpu_block.py, f32).

Same computation as einsum-experiments/src/workload.rs: RMSNorm, Q/K/V projections, RoPE (theta
500000, positions restarting at every packed sequence), causal grouped-query attention within
each packed sequence, output projection and residual, RMSNorm, SwiGLU FFN, residual. Norms and
RoPE compute in f32 and round to the block's dtype, as einsummable's kernels do.
"""


def llama_block(torch, t, seqs, d, hq, hkv, e, ff, device, dtype):
    """Random weights and input on `device` in `dtype` (seeded); returns the block as a closure."""
    import torch.nn.functional as F

    g = torch.Generator(device=device).manual_seed(0)

    def rnd(*shape):
        return (torch.rand(*shape, generator=g, device=device) * 2 - 1).to(dtype)

    x = rnd(t, d)
    n1, n2 = rnd(d), rnd(d)
    wq, wk, wv = rnd(d, hq * e), rnd(d, hkv * e), rnd(d, hkv * e)
    wo = rnd(hq * e, d)
    wg, wu, wd = rnd(d, ff), rnd(d, ff), rnd(ff, d)
    seq = t // seqs
    pos = torch.arange(t, device=device) % seq
    inv = 500000.0 ** (-torch.arange(0, e // 2, device=device, dtype=torch.float64) * 2 / e)
    ang = pos[:, None].double() * inv[None, :]
    cos, sin = ang.cos().float(), ang.sin().float()

    def rmsnorm(v, w):
        vf = v.float()
        return (vf * torch.rsqrt(vf.pow(2).mean(-1, keepdim=True) + 1e-5) * w.float()).to(dtype)

    def rope(v):  # v: [heads, t, e]
        a, b = v[..., : e // 2].float(), v[..., e // 2 :].float()
        return torch.cat([a * cos - b * sin, b * cos + a * sin], -1).to(dtype)

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

    return block
