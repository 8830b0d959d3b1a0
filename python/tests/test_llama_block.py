"""A small LLaMA block, built with the Python builder and as the named workload, against a
NumPy reference written from the operators' definitions."""

import numpy as np

import einsummable as es
from conftest import random_inputs, rel_error

DIMS = dict(tokens=32, seqs=2, d_model=32, heads_q=4, heads_kv=2, d_head=8, d_ff=64)
THETA = 500_000.0
EPS = 1e-5


def rmsnorm(x, w):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * w


def rope(x, ends):
    # x: [heads, tokens, d]; "rotate half": feature i pairs with i + d/2.
    _, t, d = x.shape
    starts = np.concatenate([[0], ends[:-1]])
    pos = np.concatenate([np.arange(e - s) for s, e in zip(starts, ends)]).astype(np.float64)
    freq = THETA ** (-2.0 * np.arange(d // 2) / d)
    angle = pos[:, None] * freq[None, :]
    cos, sin = np.cos(angle), np.sin(angle)
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


def attention(q, k, v, ends):
    hq, t, d = q.shape
    group = hq // k.shape[0]
    seq = np.searchsorted(np.asarray(ends), np.arange(t), side="right")
    visible = (seq[:, None] == seq[None, :]) & (np.arange(t)[None, :] <= np.arange(t)[:, None])
    out = np.empty_like(q)
    for h in range(hq):
        s = q[h] @ k[h // group].T / np.sqrt(d)
        s = np.where(visible, s, -np.inf)
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        out[h] = (p / p.sum(axis=-1, keepdims=True)) @ v[h // group]
    return out


def reference(v, ends):
    v = {k: a.astype(np.float64) for k, a in v.items()}
    x = v["x"]
    h = rmsnorm(x, v["attn_norm"])
    q = rope(np.einsum("td,dhe->hte", h, v["wq"]), ends)
    k = rope(np.einsum("td,dhe->hte", h, v["wk"]), ends)
    val = np.einsum("td,dhe->hte", h, v["wv"])
    x = x + np.einsum("hte,hed->td", attention(q, k, val, ends), v["wo"])
    h = rmsnorm(x, v["ffn_norm"])
    gate = h @ v["w_gate"]
    act = gate / (1.0 + np.exp(-gate)) * (h @ v["w_up"])
    return x + act @ v["w_down"]


def build_block():
    d = DIMS
    ends = [d["tokens"] // d["seqs"] * (i + 1) for i in range(d["seqs"])]
    g = es.Graph()
    x = g.input("x", {"tokens": d["tokens"], "d_model": d["d_model"]})
    norm1 = g.input("attn_norm", {"d_model": d["d_model"]})
    wq = g.input("wq", {"d_model": d["d_model"], "heads_q": d["heads_q"], "d_head": d["d_head"]})
    wk = g.input("wk", {"d_model": d["d_model"], "heads_kv": d["heads_kv"], "d_head": d["d_head"]})
    wv = g.input("wv", {"d_model": d["d_model"], "heads_kv": d["heads_kv"], "d_head": d["d_head"]})
    wo = g.input("wo", {"heads_q": d["heads_q"], "d_head": d["d_head"], "d_model": d["d_model"]})
    norm2 = g.input("ffn_norm", {"d_model": d["d_model"]})
    w_gate = g.input("w_gate", {"d_model": d["d_model"], "d_ff": d["d_ff"]})
    w_up = g.input("w_up", {"d_model": d["d_model"], "d_ff": d["d_ff"]})
    w_down = g.input("w_down", {"d_ff": d["d_ff"], "d_model": d["d_model"]})

    h = g.rmsnorm(x, norm1, "d_model", eps=EPS)
    q = g.rope(g.einsum("td,dhe->hte", h, wq), "tokens", "d_head", theta=THETA, seq_ends=ends)
    k = g.rope(g.einsum("td,dhe->hte", h, wk), "tokens", "d_head", theta=THETA, seq_ends=ends)
    v = g.einsum("td,dhe->hte", h, wv)
    a = g.attention(q, k, v, "tokens", "d_head", causal=True, seq_ends=ends)
    x = g.binary(x, g.einsum("hte,hed->td", a, wo), "add")
    h = g.rmsnorm(x, norm2, "d_model", eps=EPS)
    act = g.binary(g.unary(g.matmul(h, w_gate), "silu"), g.matmul(h, w_up), "mul")
    g.save(g.binary(x, g.matmul(act, w_down), "add"), "y")
    return g, ends


def test_python_built_block_equals_numpy_on_4_devices():
    g, ends = build_block()
    values = random_inputs(g, seed=5)
    exe = es.compile(g, devices=4)
    y = exe.run(values)["y"]
    assert rel_error(y, reference(values, ends)) <= 1e-5 * np.sqrt(12)


def test_named_workload_is_the_same_block():
    g, ends = build_block()
    w = es.workloads.llama_block(**DIMS)
    assert set(w.inputs) == set(g.inputs)
    values = random_inputs(g, seed=6)
    exe = es.compile(w, devices=4, optimizer="random", seed=3)
    (y,) = exe.run(values).values()
    assert rel_error(y, reference(values, ends)) <= 1e-5 * np.sqrt(12)
    assert exe.plan()["workload"].startswith("llama-block:")
